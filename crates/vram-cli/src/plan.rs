//! `vram plan`: the fastest configuration that fits, and the launch config that runs it.
//!
//! When nothing fits, that is an answer, not an error: the command prints the configuration
//! that came closest and what would make it fit, and exits 0 (`--json`: `"plans": []` with
//! `closest` and `suggestions`). Only `--emit`, which needs a plan to write, fails then
//! (exit 2). The answers come from `vram_report::plan`; this module prints them.

use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use vram_plan::Progress;
use vram_report::Report;

use crate::flags::hi::PlanJob;
pub use crate::flags::PlanArgs;
use crate::input::resolve_model;

pub fn run(a: &PlanArgs) -> Result<()> {
    let resolved = resolve_model(&a.model, &a.hub)?;
    let (model, config) = (resolved.model, resolved.config);
    if !matches!(model, vram_model::arch::Model::Transformer(_)) {
        return Err(crate::bad_input!(
            "vram plan needs a transformer; `{}` is not one",
            model.name()
        ));
    }
    let job = a.job(model.clone())?;
    // A progress bar, drawn only once the search has run for a second.
    let start = Instant::now();
    let bar = indicatif::ProgressBar::hidden();
    let mut shown = false;
    let mut on_progress = |p: Progress| {
        if !shown && start.elapsed().as_secs_f64() > 1.0 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.set_length(p.total);
            shown = true;
        }
        bar.set_position(p.done);
    };
    let mut out = crate::output::stdout();
    let report = match job {
        PlanJob::Emit(req, engine) => {
            let e = vram_report::plan::emit(&req, engine, config.as_deref(), &mut on_progress);
            bar.finish_and_clear();
            let e = e?;
            out.write_all(e.text.as_bytes())?;
            for n in e.notes {
                let _ = writeln!(crate::output::stderr(), "vram: {n}");
            }
            return Ok(());
        }
        PlanJob::Finetune(r, Some(kind)) => {
            let e = vram_report::plan::finetune_emit(&model, &r, kind)?;
            out.write_all(e.text.as_bytes())?;
            for n in e.notes {
                let _ = writeln!(crate::output::stderr(), "vram: {n}");
            }
            return Ok(());
        }
        PlanJob::Finetune(r, None) => {
            Report::FinetunePlan(Box::new(vram_report::plan::finetune_plan(&model, &r)?))
        }
        PlanJob::Search(req) => {
            let r = vram_report::plan::plan(&req, &mut on_progress);
            bar.finish_and_clear();
            Report::Plan(Box::new(r?))
        }
    };
    if a.json {
        out.write_all(report.to_json().as_bytes())?;
    } else {
        out.write_all(report.text().as_bytes())?;
    }
    Ok(())
}
