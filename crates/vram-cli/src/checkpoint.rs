//! `vram checkpoint`: where to put activation checkpoints so that a step fits, at the least
//! recomputation (`vram_plan::checkpoint`).

use std::io::Write;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use vram_model::estimate::estimate;
use vram_model::gpu;
use vram_model::setup::{Mode, Recompute};
use vram_plan::checkpoint::{
    compare, device_budget, forward_runs, full_recompute, segments_of, simulate, transformer_chain,
    DeviceBudget,
};

use crate::estimate::StepArgs;
use crate::input::{parse_bytes, resolve_model};
use crate::{bad_input, fmt};

/// Arguments of `vram checkpoint`.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// GPU whose memory sets the budget (see `vram gpus`).
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    /// Bytes the layer chain's activations may hold (e.g. 12GiB), instead of what the GPU
    /// leaves after everything else of the step.
    #[arg(long, value_parser = parse_bytes)]
    budget: Option<u64>,
    /// Memory units of the dynamic programme, 8 to 8192: more is closer to the exact optimum and
    /// slower (time grows with stages³ × slots) [default: 2048 up to 52 stages, fewer beyond,
    /// at least 128].
    #[arg(long)]
    slots: Option<usize>,
    /// The step (precision, micro-batch, sequence, tensor/sequence parallelism, ...);
    /// recomputation is what this command chooses.
    #[command(flatten)]
    step: StepArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// How the budget was set.
struct Budget {
    bytes: u64,
    /// Set when derived from the GPU.
    device: Option<DeviceBudget>,
}

pub fn run(a: &CheckpointArgs) -> Result<()> {
    if let Some(slots) = a.slots.filter(|s| !(8..=8192).contains(s)) {
        return Err(bad_input!("--slots {slots} must be between 8 and 8192"));
    }
    let model = a.step.apply_to(resolve_model(&a.model, &a.hub)?.model)?;
    let gpu = gpu::lookup(&a.gpu)?;
    let setup = a.step.setup_on(&model, Some(gpu))?;
    let Mode::Train(tr) = setup.mode else {
        return Err(bad_input!(
            "vram checkpoint plans training recomputation; drop --inference"
        ));
    };
    if tr.recompute != Recompute::None || tr.recompute_layers.is_some() {
        return Err(bad_input!(
            "vram checkpoint chooses the recomputation itself; drop --recompute and --recompute-layers"
        ));
    }
    let chain = transformer_chain(&model, &setup)?;
    // About 3·10⁸ table steps (about a second here) and at most ~50 MB of table: 2048 slots up
    // to 53 stages, 512 at 84, 128 beyond 133.
    let n = chain.len() as f64;
    let slots = a
        .slots
        .unwrap_or_else(|| (3e8 / (n * n * n)).clamp(128.0, 2048.0) as usize);
    let budget = match a.budget {
        Some(bytes) => Budget {
            bytes,
            device: None,
        },
        None => {
            let d = device_budget(&model, &setup, &chain, gpu.memory_bytes)?;
            Budget {
                bytes: d.chain_bytes,
                device: Some(d),
            }
        }
    };
    // On a GPU, the block method's row is the one the step estimate approves.
    let block = budget
        .device
        .and_then(|d| d.block_layers)
        .map(|k| k as usize);
    let candidates = compare(&chain, budget.bytes, slots, block)?;
    let baseline = candidates[0].replay.cost;
    // The cheapest schedule that fits; on a tie the simpler one listed first (block-k before
    // the programme's, whose slot rounding can also leave it a little behind).
    let best = candidates.iter().filter(|c| c.fits).fold(
        None::<&vram_plan::checkpoint::Candidate>,
        |acc, c| match acc {
            Some(a) if a.replay.cost <= c.replay.cost * (1.0 + 1e-9) => Some(a),
            _ => Some(c),
        },
    );
    let layers = chain.len() - 1;
    let stage_name = |i: usize| {
        if i == layers {
            "head".to_string()
        } else {
            format!("layer {i}")
        }
    };
    let mut out = crate::output::stdout();
    if a.json {
        let v = json!({
            "model": model.name(),
            "gpu": gpu.id,
            "budget_bytes": budget.bytes,
            "slots": slots,
            "device": budget.device,
            "chain": chain,
            "candidates": candidates.iter().map(|c| json!({
                "name": c.name,
                "fits": c.fits,
                "peak_bytes": c.replay.peak_bytes,
                "cost": c.replay.cost,
                "overhead": c.replay.cost / baseline - 1.0,
                "forwards": c.replay.forwards,
                "forward_runs": forward_runs(chain.len(), &c.schedule.ops),
            })).collect::<Vec<_>>(),
            "recommended": best.map(|c| &c.name),
            "recommended_ops": best.map(|c| &c.schedule.ops),
            "recommended_segments": best.map(|c| segments_of(chain.len(), &c.schedule.ops)),
            "device_peak_bytes": best.zip(budget.device)
                .map(|(c, d)| d.others_bytes + c.replay.peak_bytes),
        });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} layers + head as a chain, micro-batch {} x seq {}, tp {}{}",
        model.name(),
        layers,
        tr.micro_batch,
        tr.seq,
        setup.parallel.tp,
        if setup.parallel.sequence_parallel {
            " + sequence parallel"
        } else {
            ""
        }
    )?;
    match budget.device {
        Some(d) => {
            match d.block_layers {
                Some(0) => writeln!(
                    out,
                    "the step fits on {} without recomputation (estimate: {} of {} for tensors)",
                    gpu.id,
                    fmt::bytes(d.block_peak_bytes),
                    fmt::bytes(d.allocatable_bytes)
                )?,
                Some(k) => writeln!(
                    out,
                    "the estimate fits on {} with the first {k} layers recomputed (--recompute full --recompute-layers {k}: {} of {} for tensors)",
                    gpu.id,
                    fmt::bytes(d.block_peak_bytes),
                    fmt::bytes(d.allocatable_bytes)
                )?,
                None => writeln!(
                    out,
                    "the step does not fit on {} even with full recomputation (estimate: {} of {} for tensors)",
                    gpu.id,
                    fmt::bytes(d.block_peak_bytes),
                    fmt::bytes(d.allocatable_bytes)
                )?,
            }
            if d.block_layers.is_some() {
                writeln!(
                    out,
                    "activation budget {}: what that schedule's chain holds plus the headroom left",
                    fmt::bytes(budget.bytes)
                )?;
            }
        }
        None => writeln!(
            out,
            "activation budget {} (--budget)",
            fmt::bytes(budget.bytes)
        )?,
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<12} {:>12} {:>10} {:>10}  fits",
        "strategy", "activations", "forwards", "extra time"
    )?;
    for c in &candidates {
        writeln!(
            out,
            "{:<12} {:>12} {:>10} {:>9.1}%  {}",
            c.name,
            fmt::bytes(c.replay.peak_bytes),
            c.replay.forwards,
            (c.replay.cost / baseline - 1.0) * 100.0,
            if c.fits { "yes" } else { "no" }
        )?;
    }
    if best.is_some() && !candidates.iter().any(|c| c.name == "optimal") {
        writeln!(
            out,
            "(the programme found no schedule at {slots} slots; --slots {} may)",
            (slots * 4).min(8192)
        )?;
    }
    writeln!(out)?;
    if budget.device.is_some_and(|d| d.block_layers.is_none()) {
        writeln!(
            out,
            "nothing fits: the rest of the step leaves no room for activations; `vram estimate` and `vram plan` show what would (ZeRO, TP, PP, more GPUs)"
        )?;
        return Ok(());
    }
    let Some(best) = best else {
        let least = simulate(&chain, &full_recompute(&chain).ops)?.peak_bytes;
        writeln!(
            out,
            "nothing fits: one stage's saved activations alone exceed the budget (full recomputation holds {}); lower --micro-batch or --seq, or add --tp with --sequence-parallel",
            fmt::bytes(least)
        )?;
        return Ok(());
    };
    let runs = forward_runs(chain.len(), &best.schedule.ops);
    writeln!(
        out,
        "recommended: {} ({:.1}% extra time), forward runs per stage:",
        best.name,
        (best.replay.cost / baseline - 1.0) * 100.0
    )?;
    let mut i = 0;
    while i < runs.len() {
        let mut j = i;
        while j + 1 < runs.len() && runs[j + 1] == runs[i] {
            j += 1;
        }
        let what = match runs[i] {
            1 => "stored (run once)".to_string(),
            2 => "recomputed once".to_string(),
            r => format!("recomputed {} times (nested)", r - 1),
        };
        let span = if i == j {
            stage_name(i)
        } else {
            format!("{} .. {}", stage_name(i), stage_name(j))
        };
        writeln!(out, "  {span:<22} {what}")?;
        i = j + 1;
    }
    let segs = segments_of(chain.len(), &best.schedule.ops);
    if !segs.is_empty() {
        writeln!(
            out,
            "checkpointed segments (one torch.utils.checkpoint call each): {}",
            describe_segments(&segs, &stage_name)
        )?;
    }
    if let Some(d) = budget.device {
        let peak = d.others_bytes + best.replay.peak_bytes;
        let total = estimate(&model, &setup)?;
        let o = setup.overheads;
        // The allocator's reserved-to-allocated ratio as replayed for the step.
        let ratio = total.needed_bytes as f64 / total.peak_bytes.max(1) as f64;
        let device = (peak as f64 * ratio) as u64 + o.cuda_context_bytes;
        writeln!(
            out,
            "with it the step needs about {} on the device ({} without recomputation)",
            fmt::bytes(device),
            fmt::bytes(total.total_bytes)
        )?;
    }
    Ok(())
}

/// Segments grouped where consecutive ones have the same length: `layer 1 .. layer 26 (26
/// segments of 1)`, `layer 30 .. layer 33`.
fn describe_segments(segs: &[(usize, usize)], name: &dyn Fn(usize) -> String) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let len = segs[i].1 - segs[i].0 + 1;
        let mut j = i;
        while j + 1 < segs.len()
            && segs[j + 1].0 == segs[j].1 + 1
            && segs[j + 1].1 - segs[j + 1].0 + 1 == len
        {
            j += 1;
        }
        let count = j - i + 1;
        let span = if segs[i].0 == segs[j].1 {
            name(segs[i].0)
        } else {
            format!("{} .. {}", name(segs[i].0), name(segs[j].1))
        };
        if count > 1 {
            parts.push(format!("{span} ({count} segments of {len})"));
        } else {
            parts.push(span);
        }
        i = j + 1;
    }
    parts.join(", ")
}
