//! `vram trace`: a synthetic PyTorch memory snapshot from the estimator's step timeline.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use vram_alloc::snapshot::TraceAction;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};
use vram_model::arch::Model;
use vram_model::trace::{training_events, TraceEvent};

use crate::estimate::StepArgs;
use crate::input::resolve_model;
use crate::{bad_input, fmt};

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
    #[arg(long)]
    out: PathBuf,
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
    let events = training_events(model, &setup, a.steps)?;
    // Record through a simulated device large enough for any single-GPU step.
    let alloc = CachingAllocator::new(
        SimDevice::new(1 << 46),
        AllocatorConfig::new(a.policy).with_history(usize::MAX),
    )?;
    let mut live = std::collections::HashMap::new();
    for e in &events {
        match *e {
            TraceEvent::Alloc { id, bytes, .. } => {
                live.insert(id, alloc.malloc(bytes, 0)?);
            }
            TraceEvent::Free { id } => {
                if let Some(addr) = live.remove(&id) {
                    alloc.free(addr)?;
                }
            }
        }
    }
    let stats = alloc.memory_stats();
    // Each malloc recorded exactly one `alloc` entry, in order: label them with
    // the estimator's categories so memory_viz colours the tensors by kind.
    let mut snap = alloc.snapshot();
    let mut cats = events.iter().filter_map(|e| match e {
        TraceEvent::Alloc { category, .. } => Some(category.name()),
        TraceEvent::Free { .. } => None,
    });
    for t in snap
        .traces
        .iter_mut()
        .filter(|t| t.action == TraceAction::Alloc)
    {
        t.category = cats.next().map(str::to_string);
    }
    let bytes = snap.to_pickle();
    std::fs::write(&a.out, &bytes).with_context(|| format!("cannot write {}", a.out.display()))?;
    let mut out = crate::output::stdout();
    writeln!(
        out,
        "wrote {} ({}): {} events over {} steps; {} policy peak allocated {}, peak reserved {}",
        a.out.display(),
        fmt::bytes(bytes.len() as u64),
        fmt::thousands(events.len() as u64),
        a.steps,
        a.policy.name(),
        fmt::bytes(stats.allocated_bytes[0].peak.max(0) as u64),
        fmt::bytes(stats.reserved_bytes[0].peak.max(0) as u64),
    )?;
    Ok(())
}
