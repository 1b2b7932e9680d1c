//! `vram checkpoint`: where to put activation checkpoints so that a step fits, at the least
//! recomputation ([`vram_plan::checkpoint`]).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::estimate::estimate;
use vram_model::fmt::bytes;
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Recompute, Setup};
use vram_plan::checkpoint::{
    compare, device_budget, forward_runs, segments_of, transformer_chain, Candidate, DeviceBudget,
    Op, Stage,
};

use crate::check::{Checker, Range, Ranges};
use crate::error::{input, Result};
use crate::{Kind, SCHEMA_VERSION};

/// The checkpointing strategies replayed under the chain's budget, and the cheapest that fits.
/// `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]). `device` is present when the budget comes from
/// the GPU (no `--budget`); `recommended*` and `device_*` are null when nothing fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `checkpoint`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// The GPU's catalog id, or the name of one given by its size ([`vram_model::gpu::Gpu::label`]).
    pub gpu: String,
    /// Micro-batch of the step.
    pub micro_batch: u64,
    /// Sequence length of the step.
    pub seq: u64,
    /// Tensor parallelism of the step.
    pub tp: u64,
    /// Whether the step runs sequence parallelism.
    pub sequence_parallel: bool,
    /// Bytes the layer chain's activations may hold.
    pub budget_bytes: u64,
    /// Memory units of the dynamic programme.
    pub slots: usize,
    /// How the GPU sets the budget (absent with `--budget`).
    pub device: Option<DeviceBudget>,
    /// The chain: the layers, then the head.
    pub chain: Vec<Stage>,
    /// Each strategy replayed: no recomputation, Megatron's block method, √n, full, optimal.
    pub candidates: Vec<CheckpointCandidate>,
    /// The cheapest strategy that fits (on a tie, the one listed first).
    pub recommended: Option<String>,
    /// Its schedule.
    pub recommended_ops: Option<Vec<Op>>,
    /// Its recomputed segments, `[first, last]` stage pairs: one `torch.utils.checkpoint`
    /// call each.
    pub recommended_segments: Option<Vec<(usize, usize)>>,
    /// Peak allocated of the step with it: what the rest of the step holds plus the chain's
    /// replayed peak (with a GPU budget).
    pub device_peak_bytes: Option<u64>,
    /// What the step needs on the device with it: `device_peak_bytes` scaled by the allocator
    /// replay's reserved-to-allocated ratio of the step, plus the CUDA context.
    #[serde(default)]
    pub device_needed_bytes: Option<u64>,
    /// The step estimate's device total without recomputation (`vram estimate`'s figure).
    #[serde(default)]
    pub no_recompute_total_bytes: Option<u64>,
    /// The model's notes ([`crate::notes::of_step`]).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One strategy replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointCandidate {
    /// `store-all`, `block-K`, `sqrt-n`, `full` or `optimal`.
    pub name: String,
    /// Whether its replayed peak is within the budget.
    pub fits: bool,
    /// Most bytes the chain holds at once.
    pub peak_bytes: u64,
    /// Forward plus backward time, recomputation included (the chain's units).
    pub cost: f64,
    /// Extra time against no recomputation (`cost / store-all's cost - 1`).
    pub overhead: f64,
    /// Forward runs in all.
    pub forwards: usize,
    /// Forward runs of each stage (1: stored; 2: recomputed once; more: nested).
    pub forward_runs: Vec<u32>,
}

impl Ranges for CheckpointCandidate {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.num("cost", self.cost, Range::COST)?;
        // Recomputation only adds forwards: never below store-all's cost.
        c.num("overhead", self.overhead, Range::RATIO)?;
        // Every stage runs its forward at least once.
        c.each("forward_runs", &self.forward_runs, |c, &r| {
            c.at_least_1("", u64::from(r))
        })
    }
}

impl Ranges for CheckpointReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.each("chain", &self.chain, |c, s| s.ranges(c))?;
        c.each("candidates", &self.candidates, |c, x| x.ranges(c))?;
        // A segment is `[first, last]` stages of the chain: the text names them by index.
        let stages = self.chain.len();
        c.each(
            "recommended_segments",
            self.recommended_segments.as_deref().unwrap_or_default(),
            |c, &(first, last)| c.segment(first, last, stages),
        )
    }
}

/// The checkpoint placement of `model`'s training `setup` (no recomputation asked) on `gpu`:
/// the chain's budget is `budget` bytes, or what the GPU leaves after everything else of the
/// step; `slots` memory units for the programme (`None`: 2048 up to 52 stages, fewer beyond,
/// at least 128).
pub fn checkpoint(
    model: &Model,
    setup: &Setup,
    gpu: &Gpu,
    budget: Option<u64>,
    slots: Option<usize>,
) -> Result<CheckpointReport> {
    // No step holds nothing: a budget of 0 bytes printed every strategy as "no" and exited 0.
    if budget == Some(0) {
        return Err(input("--budget must be more than 0 bytes"));
    }
    if let Some(s) = slots.filter(|s| !(8..=8192).contains(s)) {
        return Err(input(format!("--slots {s} must be between 8 and 8192")));
    }
    let Mode::Train(tr) = setup.mode else {
        return Err(input(
            "vram checkpoint plans training recomputation; drop --inference",
        ));
    };
    if tr.recompute != Recompute::None || tr.recompute_layers.is_some() {
        return Err(input(
            "vram checkpoint chooses the recomputation itself; drop --recompute and --recompute-layers",
        ));
    }
    let chain = transformer_chain(model, setup)?;
    // About 3·10⁸ table steps (about a second here) and at most ~50 MB of table: 2048 slots up
    // to 53 stages, 512 at 84, 128 beyond 133.
    let n = chain.len() as f64;
    let slots = slots.unwrap_or_else(|| (3e8 / (n * n * n)).clamp(128.0, 2048.0) as usize);
    let (budget_bytes, device) = match budget {
        Some(b) => (b, None),
        None => {
            let d = device_budget(model, setup, &chain, gpu.memory_bytes)?;
            (d.chain_bytes, Some(d))
        }
    };
    // On a GPU, the block method's row is the one the step estimate approves.
    let block = device.and_then(|d| d.block_layers).map(|k| k as usize);
    let candidates = compare(&chain, budget_bytes, slots, block)?;
    let baseline = candidates[0].replay.cost;
    // The cheapest schedule that fits; on a tie the simpler one listed first (block-k before
    // the programme's, whose slot rounding can also leave it a little behind).
    let best = candidates
        .iter()
        .filter(|c| c.fits)
        .fold(None::<&Candidate>, |acc, c| match acc {
            Some(a) if a.replay.cost <= c.replay.cost * (1.0 + 1e-9) => Some(a),
            _ => Some(c),
        });
    let device_peak_bytes = best
        .zip(device)
        .map(|(c, d)| d.others_bytes + c.replay.peak_bytes);
    let (device_needed_bytes, no_recompute_total_bytes) = match device_peak_bytes {
        Some(peak) if device.is_some_and(|d| d.block_layers.is_some()) => {
            let total = estimate(model, setup)?;
            // The allocator's reserved-to-allocated ratio as replayed for the step.
            let ratio = total.needed_bytes as f64 / total.peak_bytes.max(1) as f64;
            (
                Some((peak as f64 * ratio) as u64 + setup.overheads.cuda_context_bytes),
                Some(total.total_bytes),
            )
        }
        _ => (None, None),
    };
    Ok(CheckpointReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Checkpoint,
        model: model.name().to_string(),
        gpu: gpu.label().to_string(),
        micro_batch: tr.micro_batch,
        seq: tr.seq,
        tp: setup.parallel.tp,
        sequence_parallel: setup.parallel.sequence_parallel,
        budget_bytes,
        slots,
        device,
        candidates: candidates
            .iter()
            .map(|c| CheckpointCandidate {
                name: c.name.clone(),
                fits: c.fits,
                peak_bytes: c.replay.peak_bytes,
                cost: c.replay.cost,
                overhead: c.replay.cost / baseline - 1.0,
                forwards: c.replay.forwards,
                forward_runs: forward_runs(chain.len(), &c.schedule.ops),
            })
            .collect(),
        recommended: best.map(|c| c.name.clone()),
        recommended_ops: best.map(|c| c.schedule.ops.clone()),
        recommended_segments: best.map(|c| segments_of(chain.len(), &c.schedule.ops)),
        device_peak_bytes,
        device_needed_bytes,
        no_recompute_total_bytes,
        chain,
        notes: crate::notes::of_step(model, true, Some(gpu))
            .into_iter()
            .chain(crate::notes::of_setup(model, setup))
            .chain(crate::notes::of_precision(setup.precision, gpu))
            .collect(),
    })
}

impl CheckpointReport {
    /// Layers in the chain (the head is its last stage).
    pub fn layers(&self) -> usize {
        self.chain.len().saturating_sub(1)
    }

    fn stage_name(&self, i: usize) -> String {
        if i == self.layers() {
            "head".to_string()
        } else {
            format!("layer {i}")
        }
    }

    fn best(&self) -> Option<&CheckpointCandidate> {
        let name = self.recommended.as_ref()?;
        self.candidates.iter().find(|c| &c.name == name)
    }

    /// The lines before the table: the chain, and how its budget was set.
    pub fn head_lines(&self) -> Vec<String> {
        let mut v = vec![format!(
            "{}: {} layers + head as a chain, micro-batch {} x seq {}, tp {}{}",
            self.model,
            self.layers(),
            self.micro_batch,
            self.seq,
            self.tp,
            if self.sequence_parallel {
                " + sequence parallel"
            } else {
                ""
            }
        )];
        match self.device {
            Some(d) => {
                let (peak, room) = (bytes(d.block_peak_bytes), bytes(d.allocatable_bytes));
                v.push(match d.block_layers {
                    Some(0) => format!(
                        "the step fits on {} without recomputation (estimate: {peak} of {room} for tensors)",
                        self.gpu
                    ),
                    Some(k) => format!(
                        "the estimate fits on {} with the first {k} layers recomputed (--recompute full --recompute-layers {k}: {peak} of {room} for tensors)",
                        self.gpu
                    ),
                    None => format!(
                        "the step does not fit on {} even with full recomputation (estimate: {peak} of {room} for tensors)",
                        self.gpu
                    ),
                });
                if d.block_layers.is_some() {
                    v.push(format!(
                        "activation budget {}: what that schedule's chain holds plus the headroom left",
                        bytes(self.budget_bytes)
                    ));
                }
            }
            None => v.push(format!(
                "activation budget {} (--budget)",
                bytes(self.budget_bytes)
            )),
        }
        v
    }

    /// The table's header.
    pub const HEAD: [&'static str; 5] =
        ["strategy", "activations", "forwards", "extra time", "fits"];

    /// The table's rows.
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.candidates
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    bytes(c.peak_bytes),
                    c.forwards.to_string(),
                    format!("{:.1}%", c.overhead * 100.0),
                    if c.fits { "yes" } else { "no" }.to_string(),
                ]
            })
            .collect()
    }

    /// The line under the table when the programme found nothing at this many slots.
    pub fn slots_line(&self) -> Option<String> {
        (self.recommended.is_some() && !self.candidates.iter().any(|c| c.name == "optimal")).then(
            || {
                format!(
                    "(the programme found no schedule at {} slots; --slots {} may)",
                    self.slots,
                    (self.slots * 4).min(8192)
                )
            },
        )
    }

    /// The verdict: what to do, stage by stage, and what the step then needs.
    pub fn verdict_lines(&self) -> Vec<String> {
        if self.device.is_some_and(|d| d.block_layers.is_none()) {
            return vec!["nothing fits: the rest of the step leaves no room for activations; `vram estimate` and `vram plan` show what would (ZeRO, TP, PP, more GPUs)".into()];
        }
        let Some(best) = self.best() else {
            let least = self
                .candidates
                .iter()
                .find(|c| c.name == "full")
                .map_or(0, |c| c.peak_bytes);
            return vec![format!(
                "nothing fits: one stage's saved activations alone exceed the budget (full recomputation holds {}); lower --micro-batch or --seq, or add --tp with --sequence-parallel",
                bytes(least)
            )];
        };
        let mut v = vec![format!(
            "recommended: {} ({:.1}% extra time), forward runs per stage:",
            best.name,
            best.overhead * 100.0
        )];
        let runs = &best.forward_runs;
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
                self.stage_name(i)
            } else {
                format!("{} .. {}", self.stage_name(i), self.stage_name(j))
            };
            v.push(format!("  {span:<22} {what}"));
            i = j + 1;
        }
        if let Some(segs) = self
            .recommended_segments
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            v.push(format!(
                "checkpointed segments (one torch.utils.checkpoint call each): {}",
                self.describe_segments(segs)
            ));
        }
        if let (Some(d), Some(t)) = (self.device_needed_bytes, self.no_recompute_total_bytes) {
            v.push(format!(
                "with it the step needs about {} on the device ({} without recomputation)",
                bytes(d),
                bytes(t)
            ));
        }
        v
    }

    /// Segments grouped where consecutive ones have the same length: `layer 1 .. layer 26 (26
    /// segments of 1)`, `layer 30 .. layer 33`.
    fn describe_segments(&self, segs: &[(usize, usize)]) -> String {
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
                self.stage_name(segs[i].0)
            } else {
                format!(
                    "{} .. {}",
                    self.stage_name(segs[i].0),
                    self.stage_name(segs[j].1)
                )
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

    /// The text output.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = self.write_text(&mut o);
        o
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        for l in self.head_lines() {
            writeln!(out, "{l}")?;
        }
        writeln!(out)?;
        let h = Self::HEAD;
        writeln!(
            out,
            "{:<12} {:>12} {:>10} {:>10}  {}",
            h[0], h[1], h[2], h[3], h[4]
        )?;
        for r in self.rows() {
            writeln!(
                out,
                "{:<12} {:>12} {:>10} {:>10}  {}",
                r[0], r[1], r[2], r[3], r[4]
            )?;
        }
        if let Some(l) = self.slots_line() {
            writeln!(out, "{l}")?;
        }
        writeln!(out)?;
        for l in self.verdict_lines() {
            writeln!(out, "{l}")?;
        }
        crate::notes::write(out, &self.notes)
    }
}
