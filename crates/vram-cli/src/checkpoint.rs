//! `vram checkpoint`: where to put activation checkpoints so that a step fits, at the least
//! recomputation. The answer comes from `vram_report::checkpoint`; this module prints it.

use anyhow::Result;
use clap::Args;
use vram_model::gpu;
use vram_report::Report;

use crate::estimate::StepArgs;
use crate::input::{parse_bytes, resolve_model};

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

pub fn run(a: &CheckpointArgs) -> Result<()> {
    let model = a.step.apply_to(resolve_model(&a.model, &a.hub)?.model)?;
    let gpu = gpu::lookup(&a.gpu)?;
    let setup = a.step.setup_on(&model, Some(gpu))?;
    let r = vram_report::checkpoint::checkpoint(&model, &setup, gpu, a.budget, a.slots)?;
    crate::print(&Report::Checkpoint(Box::new(r)), a.json)
}
