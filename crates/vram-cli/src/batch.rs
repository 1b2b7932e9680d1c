//! `vram batch`: memory-aware batches for variable-length sequences.

use std::io::Read;

use anyhow::Result;
use clap::Args;
use vram_model::gpu;
use vram_report::Report;

use crate::bad_input;
use crate::estimate::StepArgs;
use crate::input::resolve_model;

/// Arguments of `vram batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// File of sequence lengths (integers separated by spaces, commas or newlines); `-` reads
    /// standard input.
    #[arg(long)]
    lengths: String,
    /// GPU whose memory is the budget (see `vram gpus`).
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    /// At most this many sequences per batch.
    #[arg(long)]
    max_batch: Option<u64>,
    /// The step (precision, optimizer, parallelism, recomputation); `--micro-batch` and
    /// `--seq` are replaced by each batch's size and padded length.
    #[command(flatten)]
    step: StepArgs,
    /// Print JSON with every batch.
    #[arg(long)]
    json: bool,
}

/// Largest lengths file read.
const MAX_INPUT: u64 = 256 << 20;

fn read_lengths(arg: &str) -> Result<Vec<u64>> {
    // Read whole or refused: cut at the limit, the last number would be read short.
    let bytes = if arg == "-" {
        crate::stdin::prompt_if_terminal(
            "the sequence lengths (numbers separated by spaces, commas or lines)",
        );
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| bad_input!("cannot read lengths from standard input: {e}"))?;
        if bytes.len() as u64 > MAX_INPUT {
            return Err(bad_input!(
                "lengths on standard input are larger than {}",
                vram_model::fmt::bytes(MAX_INPUT)
            ));
        }
        bytes
    } else {
        crate::input::read_bounded(std::path::Path::new(arg), "lengths file", MAX_INPUT)?
    };
    let where_ = if arg == "-" { "standard input" } else { arg };
    let text = crate::input::decode_text(&bytes, false)
        .ok_or_else(|| bad_input!("lengths: {where_} is not UTF-8 or UTF-16 text"))?;
    let mut out = Vec::new();
    for (i, tok) in text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .enumerate()
    {
        let n: u64 = tok.parse().map_err(|_| {
            // The item as written, cut short: a binary file is one long "item".
            let shown: String = tok.chars().take(24).flat_map(char::escape_debug).collect();
            let more = if tok.chars().count() > 24 { "..." } else { "" };
            bad_input!(
                "lengths: item {} `{shown}{more}` is not a whole number",
                i + 1
            )
        })?;
        if n == 0 || n > vram_model::setup::MAX_SIZE {
            return Err(bad_input!(
                "lengths: item {} = {n} must be between 1 and {}",
                i + 1,
                vram_model::setup::MAX_SIZE
            ));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(bad_input!("lengths: no sequence lengths in {arg}"));
    }
    Ok(out)
}

pub fn run(a: &BatchArgs) -> Result<()> {
    let model = resolve_model(&a.model, &a.hub)?.model;
    let gpu = gpu::lookup(&a.gpu)?;
    // Each batch sets its own micro-batch and padded length; images are not packed.
    let replaced: Vec<&str> = a
        .step
        .request()
        .given()
        .into_iter()
        .filter(|f| ["--micro-batch", "--seq", "--image-size"].contains(f))
        .collect();
    if !replaced.is_empty() {
        return Err(bad_input!(
            "{}: vram batch sets each batch's micro-batch and padded length from --lengths (and packs text sequences only)",
            replaced.join(", ")
        ));
    }
    // The step on the budget's GPU: its CUDA context and workspace, as `vram estimate` prices it.
    let setup = a.step.setup_on(&model, Some(gpu))?;
    let lengths = read_lengths(&a.lengths)?;
    let r = Report::Batch(Box::new(vram_report::batch::batch(
        &model,
        &setup,
        gpu,
        &lengths,
        a.max_batch,
    )?));
    crate::print(&r, a.json)
}
