//! `vram estimate`, `vram models`, `vram gpus`: the answer comes from `vram_report::estimate`;
//! this module prints it.

use std::io::Write;

use anyhow::Result;
use vram_model::arch::Model;
use vram_model::{catalog, gpu};
use vram_report::estimate::ModelInput;

pub use crate::flags::{EstimateArgs, ListArgs, StepArgs};
use crate::fmt;
use crate::input::resolve_model;

pub fn run(a: &EstimateArgs) -> Result<()> {
    let req = a.request()?;
    let resolved = resolve_model(&a.model, &a.hub)?;
    let checkpoint_params = resolved.checkpoint_params();
    let checkpoint_place = checkpoint_params.map(|_| resolved.checkpoint_place());
    let model = req.step.attach(resolved.model)?;
    let input = ModelInput {
        model,
        config: resolved.config.as_deref(),
        checkpoint_params,
        checkpoint_place,
    };
    let report = vram_report::estimate::estimate(&input, &req)?;
    let mut out = crate::output::stdout();
    if a.json {
        out.write_all(report.to_json().as_bytes())?;
    } else {
        out.write_all(report.text().as_bytes())?;
    }
    Ok(())
}

/// One row of `vram models`.
#[derive(serde::Serialize)]
struct ModelRow {
    id: &'static str,
    params: u64,
    kind: String,
}

pub fn models(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    let mut rows = Vec::new();
    for id in catalog::ids() {
        let m = catalog::lookup(id)?;
        rows.push(ModelRow {
            id,
            params: m.param_count(),
            kind: match &m {
                Model::Transformer(t) => t.model_type.clone(),
                _ => "resnet".into(),
            },
        });
    }
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        let wi = rows.iter().map(|r| r.id.len()).max().unwrap_or(0).max(20);
        let wk = rows.iter().map(|r| r.kind.len()).max().unwrap_or(0).max(10);
        for r in &rows {
            writeln!(
                out,
                "{:<wi$} {:<wk$} {:>20}",
                r.id,
                r.kind,
                fmt::thousands(r.params)
            )?;
        }
    }
    Ok(())
}

pub fn gpus(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(gpu::GPUS)?)?;
    } else {
        writeln!(
            out,
            "{:<11} {:<36} {:>10} {:>10} {:>9} {:>9}",
            "id", "name", "memory", "bf16 TF/s", "fp32 TF/s", "HBM GB/s"
        )?;
        for g in gpu::GPUS {
            writeln!(
                out,
                "{:<11} {:<36} {:>10} {:>10} {:>9} {:>9}",
                g.id,
                g.name,
                fmt::bytes(g.memory_bytes),
                g.half_tflops,
                g.fp32_tflops,
                g.hbm_gb_s
            )?;
        }
    }
    Ok(())
}
