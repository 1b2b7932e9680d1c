//! `vram trace`: a synthetic PyTorch memory snapshot from the estimator's step timeline.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use vram_alloc::Policy;
use vram_model::arch::Model;
use vram_model::trace::training_events_with_phases;

use crate::bad_input;
use crate::estimate::StepArgs;
use crate::input::resolve_model;

/// Arguments of `vram trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    #[command(flatten)]
    step: StepArgs,
    /// Steps to record.
    #[arg(long, default_value_t = 3)]
    steps: u32,
    /// Allocator policy that lays the tensors out in the snapshot.
    #[arg(long, default_value = "pytorch", value_parser = parse_policy)]
    policy: Policy,
    /// Where to write the snapshot pickle (open it at pytorch.org/memory_viz or with `vram replay`).
    #[arg(long, required_unless_present = "events")]
    out: Option<PathBuf>,
    /// Also (or instead) write the events with the phase each begins, as JSON, with each
    /// phase's time from the planner's step-time model on `--gpu` (for the host tier's
    /// simulator, `vram-tier-sim`; training steps of transformers only).
    #[arg(long)]
    events: Option<PathBuf>,
    /// The GPU whose step-time model prices each phase in `--events` [default: h100].
    #[arg(long, requires = "events")]
    gpu: Option<String>,
}

fn parse_policy(s: &str) -> std::result::Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| format!("unknown policy `{s}`"))
}

/// Runs `vram trace`.
pub fn run(a: &TraceArgs) -> Result<()> {
    if a.steps == 0 || a.steps > 100 {
        return Err(bad_input!("--steps must be between 1 and 100"));
    }
    let mut resolved = resolve_model(&a.model, &a.hub)?;
    resolved.model = a.step.apply_to(resolved.model)?;
    let model = &resolved.model;
    if matches!(model, Model::Weights(_)) {
        return Err(bad_input!(
            "{} gives only weights; trace needs an architecture (a config.json or catalog id)",
            a.model
        ));
    }
    let setup = a.step.setup(model)?;
    let (events, marks) = training_events_with_phases(model, &setup, a.steps)?;
    // Both outputs are computed before either is written, and written together: a failure
    // leaves neither.
    let events_doc = match &a.events {
        Some(_) => {
            let gpu = vram_model::gpu::lookup(a.gpu.as_deref().unwrap_or("h100"))?;
            let doc =
                vram_report::trace::events(&a.model, model, &setup, gpu, a.steps, &events, &marks)
                    .map_err(crate::run_error)?;
            let json = doc.to_json();
            Some((doc, json))
        }
        None => None,
    };
    let mut out = crate::output::stdout();
    let Some(out_path) = a.out.as_ref() else {
        let (Some(path), Some((doc, json))) = (&a.events, &events_doc) else {
            unreachable!("clap requires --out or --events")
        };
        crate::output::write_file(path, json.as_bytes())?;
        let text = doc.written(&path.display().to_string(), json.len() as u64);
        out.write_all(text.as_bytes())?;
        return Ok(());
    };
    let snap = vram_report::trace::snapshot(model, &setup, &events, a.steps, a.policy)
        .map_err(crate::run_error)?;
    let mut files = vec![(out_path.as_path(), snap.pickle.as_slice())];
    if let (Some(path), Some((_, json))) = (&a.events, &events_doc) {
        files.push((path.as_path(), json.as_bytes()));
    }
    crate::output::write_files(&files)?;
    out.write_all(snap.written(&out_path.display().to_string()).as_bytes())?;
    Ok(())
}
