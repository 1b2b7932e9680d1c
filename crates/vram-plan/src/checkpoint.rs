//! Optimal activation checkpointing for a chain of heterogeneous layers under a memory budget.
//!
//! A dynamic programme in the spirit of Griewank & Walther's Revolve (2000) and Beaumont et
//! al.'s rotor ("Optimal checkpointing for heterogeneous chains", 2019): for every sub-chain
//! `s..=t` whose input `x_s` is held, and every memory budget `m`, the cheapest way to run its
//! forward and backward is either
//!
//! - **store**: run stage `s` keeping everything its backward needs (`a_s`) and its output
//!   `x_{s+1}`, solve `s+1..=t` in `m − a_s − x_{s+1}`, then run `s`'s backward; or
//! - **checkpoint at `s'`**: run `s..s'` forward keeping nothing but the running activation,
//!   hold `x_{s'}`, solve `s'..=t` in `m − x_{s'}`, drop `x_{s'}`, and solve `s..s'` again
//!   from `x_s` in `m`.
//!
//! Weight gradients created by a backward (`g`, PyTorch allocates them lazily on the first
//! micro-batch) stay to the end, so each backward runs with the gradients of every later stage:
//! the store branch needs `a_s + g_s..=t ≤ m` at `s`'s backward, and the left part of a
//! checkpoint split gets `m − g_s'..=t`. A forward's high point adds what the stage makes (its
//! saved bytes, even when it drops them) and its temporaries; a backward's adds its
//! temporaries. A single stage costs `f + b`.
//! Memory is counted in `slots` equal units of the budget, every size rounded up, so a
//! schedule the programme accepts fits the real budget.
//! The answer is a list of [`Op`]s that [`simulate`] replays independently of the programme;
//! [`store_all`], [`full_recompute`] and [`sqrt_checkpoints`] build the usual baselines in the
//! same language. `x_0` (the chain's input) is held by the caller and not counted.

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::setup::{Mode, Setup};

use crate::error::{Error, Result};

/// One layer of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// Forward time (any unit).
    pub forward: f64,
    /// Backward time.
    pub backward: f64,
    /// Bytes of the stage's input activation (what a checkpoint before it holds).
    pub input_bytes: u64,
    /// Bytes the stage's forward saves for its backward when run with saving.
    pub saved_bytes: u64,
    /// Bytes the stage's backward allocates and keeps to the end of the chain (weight
    /// gradients created lazily, as PyTorch does on the first micro-batch); 0 for none.
    pub grad_bytes: u64,
    /// Extra bytes live at the high point of the stage's forward, beyond its saved bytes (which
    /// a forward without saving also makes before dropping them).
    pub forward_tmp: u64,
    /// Extra bytes live at the high point of the stage's backward, beyond saved and gradients.
    pub backward_tmp: u64,
}

/// One step of a checkpointing schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Run stage `stage` forward from its held input; `save` keeps what backward needs;
    /// `keep_output` holds the output (the next stage's input).
    Forward {
        /// Stage index.
        stage: usize,
        /// Keep the saved activations.
        save: bool,
        /// Hold the output.
        keep_output: bool,
    },
    /// Drop the held input of a stage (never stage 0).
    Drop(usize),
    /// Run stage `stage` backward (its saved activations must be held); frees them.
    Backward(usize),
}

/// A schedule with its cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// Total forward + backward time, recomputation included.
    pub cost: f64,
    /// The operations in order.
    pub ops: Vec<Op>,
}

/// What replaying a schedule gives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Replay {
    /// Total time of the operations.
    pub cost: f64,
    /// Most bytes held at once (`x_0` excluded).
    pub peak_bytes: u64,
    /// Forward runs (n without recomputation).
    pub forwards: usize,
}

/// Replays `ops` on `chain`: checks that every forward has its input, every backward its saved
/// activations, that backwards run once each in reverse order; returns cost and peak.
pub fn simulate(chain: &[Stage], ops: &[Op]) -> Result<Replay> {
    let n = chain.len();
    let bad = |why: String| Error::Request(format!("invalid checkpointing schedule: {why}"));
    let mut input_held = vec![false; n + 1];
    input_held[0] = true;
    let mut saved_held = vec![false; n];
    let (mut live, mut peak, mut cost, mut forwards) = (0u64, 0u64, 0.0, 0usize);
    let mut next_backward = n;
    let size_in = |i: usize| if i < n { chain[i].input_bytes } else { 0 };
    for op in ops {
        match *op {
            Op::Forward {
                stage,
                save,
                keep_output,
            } => {
                if stage >= n || !input_held[stage] {
                    return Err(bad(format!("forward {stage} without its input")));
                }
                if stage >= next_backward {
                    return Err(bad(format!("forward {stage} after its backward")));
                }
                cost += chain[stage].forward;
                forwards += 1;
                // High point: everything the forward makes, saved or not, and its output.
                let out = if keep_output && stage + 1 < n && !input_held[stage + 1] {
                    size_in(stage + 1)
                } else {
                    0
                };
                let made = if saved_held[stage] {
                    0
                } else {
                    chain[stage].saved_bytes
                };
                peak = peak.max(live + made + chain[stage].forward_tmp + out);
                if save && !saved_held[stage] {
                    saved_held[stage] = true;
                    live += chain[stage].saved_bytes;
                }
                if keep_output && stage + 1 < n && !input_held[stage + 1] {
                    input_held[stage + 1] = true;
                    live += size_in(stage + 1);
                }
            }
            Op::Drop(i) => {
                if i == 0 || i > n || !input_held[i] {
                    return Err(bad(format!("drop of input {i} not held")));
                }
                input_held[i] = false;
                live -= size_in(i);
            }
            Op::Backward(i) => {
                if next_backward == 0 || i != next_backward - 1 {
                    return Err(bad(format!("backward {i} out of order")));
                }
                if !saved_held[i] {
                    return Err(bad(format!("backward {i} without saved activations")));
                }
                cost += chain[i].backward;
                live += chain[i].grad_bytes;
                peak = peak.max(live + chain[i].backward_tmp);
                saved_held[i] = false;
                live -= chain[i].saved_bytes;
                next_backward = i;
            }
        }
        peak = peak.max(live);
    }
    if next_backward != 0 {
        return Err(bad(format!("backward stops at stage {next_backward}")));
    }
    Ok(Replay {
        cost,
        peak_bytes: peak,
        forwards,
    })
}

/// No recomputation: every stage saves everything.
pub fn store_all(chain: &[Stage]) -> Schedule {
    let n = chain.len();
    let mut ops = Vec::new();
    for i in 0..n {
        ops.push(Op::Forward {
            stage: i,
            save: true,
            keep_output: true,
        });
    }
    for i in (0..n).rev() {
        ops.push(Op::Backward(i));
        if i > 0 {
            ops.push(Op::Drop(i));
        }
    }
    let cost = chain.iter().map(|s| s.forward + s.backward).sum();
    Schedule { cost, ops }
}

/// Full recomputation (Megatron-LM's `--recompute-granularity full`): hold every stage's
/// input, recompute each stage just before its backward.
pub fn full_recompute(chain: &[Stage]) -> Schedule {
    segments(chain, 1)
}

/// Chen et al. 2016 (√n checkpointing): hold the input of every `⌈√n⌉`-th stage, recompute
/// each segment with saving before its backward.
pub fn sqrt_checkpoints(chain: &[Stage]) -> Schedule {
    let k = (chain.len() as f64).sqrt().ceil().max(1.0) as usize;
    segments(chain, k)
}

/// Megatron-LM's "block" method (`--recompute-method block --recompute-num-layers k`), what
/// the planner's "optimal" recomputation picks for a uniform stack: the first `k` stages hold
/// only their input and are recomputed before their backward, the rest save everything.
pub fn first_k_recomputed(chain: &[Stage], k: usize) -> Schedule {
    let n = chain.len();
    let k = k.min(n);
    let mut ops = Vec::new();
    for i in 0..n {
        ops.push(Op::Forward {
            stage: i,
            save: i >= k,
            keep_output: true,
        });
    }
    for i in (0..n).rev() {
        if i < k {
            ops.push(Op::Forward {
                stage: i,
                save: true,
                keep_output: false,
            });
        }
        ops.push(Op::Backward(i));
        if i > 0 {
            ops.push(Op::Drop(i));
        }
    }
    let cost = simulate(chain, &ops).map_or(f64::INFINITY, |r| r.cost);
    Schedule { cost, ops }
}

/// Checkpoints every `k` stages; each segment re-run with saving before its backward.
fn segments(chain: &[Stage], k: usize) -> Schedule {
    let n = chain.len();
    let mut ops = Vec::new();
    let is_boundary = |i: usize| i % k == 0;
    for i in 0..n {
        ops.push(Op::Forward {
            stage: i,
            save: false,
            keep_output: true,
        });
        if i > 0 && !is_boundary(i) {
            ops.push(Op::Drop(i));
        }
    }
    // The last stage's output is not held (keep_output ignores stage n-1's output).
    let mut start = ((n - 1) / k) * k;
    loop {
        let end = (start + k).min(n);
        for i in start..end {
            ops.push(Op::Forward {
                stage: i,
                save: true,
                keep_output: i + 1 < end,
            });
        }
        for i in (start..end).rev() {
            ops.push(Op::Backward(i));
            if i > 0 {
                ops.push(Op::Drop(i));
            }
        }
        if start == 0 {
            break;
        }
        start -= k;
    }
    let cost = simulate(chain, &ops).map_or(f64::INFINITY, |r| r.cost);
    Schedule { cost, ops }
}

#[derive(Debug, Clone, Copy)]
enum Choice {
    Infeasible,
    Leaf,
    Store,
    Checkpoint(usize),
}

/// The cheapest schedule of `chain` whose held bytes never exceed `budget`, with memory counted
/// in `slots` units (more slots: closer to the real optimum, slower; 200–1000 is plenty).
///
/// Returns `Ok(None)` when no schedule fits (some stage alone needs more than the budget).
/// Time `O(n³·slots)`, memory `O(n²·slots)`.
pub fn optimal(chain: &[Stage], budget: u64, slots: usize) -> Result<Option<Schedule>> {
    programme(chain, budget, slots, true)
}

/// [`optimal`] with sizes rounded to the nearest slot instead of up, checked by [`simulate`]:
/// rounding up overcounts by up to a slot per tensor, which near a tight budget can rule out
/// schedules that fit (a 33-stage chain over 512 slots loses several per cent of the budget).
/// When the answer's replay exceeds `budget`, the programme runs again on a budget lowered by
/// the excess (three times at most), then falls back to [`optimal`].
pub fn optimal_nearest(chain: &[Stage], budget: u64, slots: usize) -> Result<Option<Schedule>> {
    let mut b = budget;
    for _ in 0..3 {
        let Some(s) = programme(chain, b, slots, false)? else {
            break;
        };
        let peak = simulate(chain, &s.ops)?.peak_bytes;
        if peak <= budget {
            return Ok(Some(s));
        }
        b = b.saturating_sub(peak - budget);
    }
    optimal(chain, budget, slots)
}

fn programme(
    chain: &[Stage],
    budget: u64,
    slots: usize,
    round_up: bool,
) -> Result<Option<Schedule>> {
    let n = chain.len();
    if n == 0 {
        return Ok(Some(Schedule {
            cost: 0.0,
            ops: Vec::new(),
        }));
    }
    if slots == 0 || slots > 1 << 16 || n > 1024 {
        return Err(Error::Request(format!(
            "checkpointing: {n} stages and {slots} slots are out of range (1..=1024, 1..=65536)"
        )));
    }
    let unit = budget.div_ceil(slots as u64).max(1);
    let s_units = (budget / unit) as usize;
    let units = |b: u64| {
        if round_up {
            b.div_ceil(unit) as usize
        } else {
            ((b + unit / 2) / unit) as usize
        }
    };
    let x: Vec<usize> = (0..=n)
        .map(|i| {
            if i < n {
                units(chain[i].input_bytes)
            } else {
                0
            }
        })
        .collect();
    let a: Vec<usize> = chain.iter().map(|s| units(s.saved_bytes)).collect();
    let g: Vec<usize> = chain.iter().map(|s| units(s.grad_bytes)).collect();
    let ft: Vec<usize> = chain.iter().map(|s| units(s.forward_tmp)).collect();
    let bt: Vec<usize> = chain.iter().map(|s| units(s.backward_tmp)).collect();
    // gsum[i]: gradient units of stages 0..i; those of s..=t are gsum[t+1] - gsum[s].
    let mut gsum = vec![0usize; n + 1];
    for i in 0..n {
        gsum[i + 1] = gsum[i] + g[i];
    }
    let f: Vec<f64> = chain.iter().map(|s| s.forward).collect();
    let m1 = s_units + 1;
    let idx = |s: usize, t: usize, m: usize| (s * n + t) * m1 + m;
    let mut cost = vec![f64::INFINITY; n * n * m1];
    let mut choice = vec![Choice::Infeasible; n * n * m1];
    let mut fsum = vec![0.0; n + 1];
    for i in 0..n {
        fsum[i + 1] = fsum[i] + f[i];
    }
    for len in 1..=n {
        for s in 0..=n - len {
            let t = s + len - 1;
            for m in 0..=s_units {
                let (mut best, mut how) = (f64::INFINITY, Choice::Infeasible);
                if s == t {
                    if a[s] + ft[s] <= m && a[s] + g[s] + bt[s] <= m {
                        best = chain[s].forward + chain[s].backward;
                        how = Choice::Leaf;
                    }
                } else {
                    let need = a[s] + x[s + 1];
                    // Stage s's backward runs with the gradients of s..=t allocated.
                    if need + ft[s] <= m && a[s] + gsum[t + 1] - gsum[s] + bt[s] <= m {
                        let c = f[s] + cost[idx(s + 1, t, m - need)] + chain[s].backward;
                        if c < best {
                            best = c;
                            how = Choice::Store;
                        }
                    }
                    // Transient while running s..s' forward without saving: the running
                    // activation, the next one, and what the stage makes before dropping it.
                    let mut transient = 0;
                    for sp in s + 1..=t {
                        let held = if sp - 1 > s { x[sp - 1] } else { 0 };
                        transient = transient.max(held + x[sp] + a[sp - 1] + ft[sp - 1]);
                        if transient > m || x[sp] > m {
                            break;
                        }
                        // The left part runs after the right part's gradients exist.
                        let right_grads = gsum[t + 1] - gsum[sp];
                        if right_grads > m {
                            continue;
                        }
                        let right = cost[idx(sp, t, m - x[sp])];
                        let left = cost[idx(s, sp - 1, m - right_grads)];
                        let c = fsum[sp] - fsum[s] + right + left;
                        if c < best {
                            best = c;
                            how = Choice::Checkpoint(sp);
                        }
                    }
                }
                cost[idx(s, t, m)] = best;
                choice[idx(s, t, m)] = how;
            }
        }
    }
    let total = cost[idx(0, n - 1, s_units)];
    if !total.is_finite() {
        return Ok(None);
    }
    let mut ops = Vec::new();
    // Explicit stack instead of recursion: (s, t, m) or a pending op.
    enum Task {
        Solve(usize, usize, usize),
        Emit(Op),
    }
    let mut stack = vec![Task::Solve(0, n - 1, s_units)];
    while let Some(task) = stack.pop() {
        let (s, t, m) = match task {
            Task::Emit(op) => {
                ops.push(op);
                continue;
            }
            Task::Solve(s, t, m) => (s, t, m),
        };
        match choice[idx(s, t, m)] {
            Choice::Infeasible => {
                return Err(Error::Request(
                    "checkpointing: inconsistent table (a bug)".into(),
                ))
            }
            Choice::Leaf => {
                ops.push(Op::Forward {
                    stage: s,
                    save: true,
                    keep_output: false,
                });
                ops.push(Op::Backward(s));
            }
            Choice::Store => {
                ops.push(Op::Forward {
                    stage: s,
                    save: true,
                    keep_output: true,
                });
                // Pushed in reverse: solve s+1..=t, drop x_{s+1}, backward s.
                stack.push(Task::Emit(Op::Backward(s)));
                stack.push(Task::Emit(Op::Drop(s + 1)));
                stack.push(Task::Solve(s + 1, t, m - a[s] - x[s + 1]));
            }
            Choice::Checkpoint(sp) => {
                for k in s..sp {
                    ops.push(Op::Forward {
                        stage: k,
                        save: false,
                        keep_output: true,
                    });
                    if k > s {
                        ops.push(Op::Drop(k));
                    }
                }
                stack.push(Task::Solve(s, sp - 1, m - (gsum[t + 1] - gsum[sp])));
                stack.push(Task::Emit(Op::Drop(sp)));
                stack.push(Task::Solve(sp, t, m - x[sp]));
            }
        }
    }
    Ok(Some(Schedule { cost: total, ops }))
}

/// A transformer's training micro-batch as a chain for [`optimal`]: its layers, then the head
/// (final norm, output projection and loss) as the last stage.
///
/// Sizes come from [`vram_model::estimate::chain_bytes`] (the tensors the step walk saves, TP
/// and sequence parallelism applied; a stored layer also keeps autocast's half copies of its
/// weights, which a recomputation makes again); times are GFLOP per GPU from [`crate::cost::token_flops`],
/// backward twice the forward.
pub fn transformer_chain(model: &Model, setup: &Setup) -> Result<Vec<Stage>> {
    let bytes = vram_model::estimate::chain_bytes(model, setup)?;
    let Model::Transformer(t) = model else {
        unreachable!("chain_bytes accepts transformers only")
    };
    let Mode::Train(tr) = setup.mode else {
        unreachable!("chain_bytes accepts training only")
    };
    let f = crate::cost::token_flops(t, tr.seq);
    let gflop = (tr.micro_batch * tr.seq) as f64 / setup.parallel.tp as f64 / 1e9;
    let layer = gflop * (f.layer_matmul + f.layer_attention);
    let mut chain = vec![
        Stage {
            forward: layer,
            backward: 2.0 * layer,
            input_bytes: bytes.layer_input,
            // A layer's saved tensors include its input, which the chain counts as held
            // (`x_i`) whenever the stage's saved tensors are.
            saved_bytes: bytes.layer_saved.saturating_sub(bytes.layer_input) + bytes.layer_copies,
            grad_bytes: bytes.layer_grad,
            forward_tmp: bytes.layer_forward_tmp,
            backward_tmp: bytes.layer_backward_tmp,
        };
        bytes.layers as usize
    ];
    chain.push(Stage {
        forward: gflop * f.head,
        backward: 2.0 * gflop * f.head,
        input_bytes: bytes.layer_input,
        saved_bytes: bytes.head_saved.saturating_sub(bytes.layer_input),
        grad_bytes: bytes.head_grad,
        forward_tmp: bytes.head_forward_tmp,
        backward_tmp: bytes.head_backward_tmp,
    });
    Ok(chain)
}

/// How many times each stage's forward runs in `ops`: 1 stored on the first pass, 2 recomputed
/// once, 3 or more recomputed within a recomputation (nested checkpoints).
pub fn forward_runs(n: usize, ops: &[Op]) -> Vec<u32> {
    let mut runs = vec![0; n];
    for op in ops {
        if let Op::Forward { stage, .. } = *op {
            if stage < n {
                runs[stage] += 1;
            }
        }
    }
    runs
}

/// One checkpointing strategy replayed under a budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// `store-all`, `block-K`, `sqrt-n`, `full` or `optimal`.
    pub name: String,
    /// The schedule.
    pub schedule: Schedule,
    /// Its independent replay (cost, peak held bytes, forward runs).
    pub replay: Replay,
    /// Whether the replayed peak is within the budget.
    pub fits: bool,
}

/// The usual strategies and the optimal one on the same chain and budget, in this order: no
/// recomputation, Megatron's block method with `block` recomputed stages (when `None`, the
/// fewest that fit; omitted when none does), √n checkpointing, full recomputation, and
/// [`optimal`] (omitted when nothing fits). Every schedule is replayed by [`simulate`].
pub fn compare(
    chain: &[Stage],
    budget: u64,
    slots: usize,
    block: Option<usize>,
) -> Result<Vec<Candidate>> {
    let replayed = |name: String, schedule: Schedule| -> Result<Candidate> {
        let replay = simulate(chain, &schedule.ops)?;
        Ok(Candidate {
            name,
            fits: replay.peak_bytes <= budget,
            schedule,
            replay,
        })
    };
    let mut out = vec![replayed("store-all".into(), store_all(chain))?];
    match block {
        Some(k) if k > 0 => {
            out.push(replayed(
                format!("block-{k}"),
                first_k_recomputed(chain, k),
            )?);
        }
        Some(_) => {}
        None => {
            for k in 1..=chain.len() {
                let c = replayed(format!("block-{k}"), first_k_recomputed(chain, k))?;
                if c.fits {
                    out.push(c);
                    break;
                }
            }
        }
    }
    out.push(replayed("sqrt-n".into(), sqrt_checkpoints(chain))?);
    out.push(replayed("full".into(), full_recompute(chain))?);
    if let Some(s) = optimal_nearest(chain, budget, slots)? {
        out.push(replayed("optimal".into(), s)?);
    }
    Ok(out)
}

/// The recomputed segments of a schedule's first forward pass, as `(first, last)` stage pairs:
/// each begins at a stage whose input stays held (a checkpoint) and runs without saving up to
/// the next checkpoint or saved stage. These are the modules to wrap in one
/// `torch.utils.checkpoint` call each; nested recomputation (stages run three times or more)
/// happens inside them.
pub fn segments_of(n: usize, ops: &[Op]) -> Vec<(usize, usize)> {
    let mut held = vec![false; n + 1];
    held[0] = true;
    let mut unsaved = vec![false; n];
    let mut seen = vec![false; n];
    for op in ops {
        match *op {
            Op::Forward {
                stage,
                save,
                keep_output,
            } if stage < n => {
                if !seen[stage] {
                    seen[stage] = true;
                    unsaved[stage] = !save;
                }
                if keep_output {
                    held[stage + 1] = true;
                }
            }
            Op::Drop(i) if i <= n => held[i] = false,
            Op::Backward(_) => break,
            _ => {}
        }
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for i in 0..n {
        if !unsaved[i] {
            continue;
        }
        match out.last_mut() {
            Some((_, last)) if *last + 1 == i && !held[i] => *last = i,
            _ => out.push((i, i)),
        }
    }
    out
}

/// The chain's memory budget on a GPU, tied to the step estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceBudget {
    /// The fewest layers Megatron's block method must recompute for the step estimate to fit
    /// (`Some(0)`: nothing to recompute; `None`: not even full recomputation fits).
    pub block_layers: Option<u64>,
    /// Bytes live tensors may take on the device: its memory less the CUDA context, divided by
    /// one plus the allocator overhead.
    pub allocatable_bytes: u64,
    /// Peak allocated bytes of the step estimate with `block_layers` recomputed.
    pub block_peak_bytes: u64,
    /// What the step holds besides the chain at that peak.
    pub others_bytes: u64,
    /// The chain's budget: its replayed peak under the block method, plus what the device still
    /// has free at that peak.
    pub chain_bytes: u64,
}

/// The budget of `chain` (built by [`transformer_chain`] from `model` and `setup`) on a device
/// of `capacity` bytes, anchored to the step estimate: find the fewest recomputed layers with
/// which [`vram_model::estimate()`] fits, and give the chain what that schedule holds plus the
/// headroom left. A schedule within this budget holds no more at any moment than the block
/// method the estimate approved, except for what the chain does not see: autocast's cast cache
/// keeps the half weight copies of every layer run without saving until the forward pass ends,
/// which is at most what the block method's recomputed layers keep when the optimal schedule
/// recomputes no more layers than it does (true on a uniform stack, where equal cost means equal
/// count).
pub fn device_budget(
    model: &Model,
    setup: &Setup,
    chain: &[Stage],
    capacity: u64,
) -> Result<DeviceBudget> {
    let Mode::Train(tr) = setup.mode else {
        return Err(Error::Request(
            "checkpoint placement is for training".into(),
        ));
    };
    let layers = chain.len().saturating_sub(1) as u64;
    let with_k = |k: u64| -> Result<vram_model::estimate::Estimate> {
        let mut s = *setup;
        s.mode = Mode::Train(vram_model::setup::Train {
            recompute: if k == 0 {
                vram_model::setup::Recompute::None
            } else {
                vram_model::setup::Recompute::Full
            },
            recompute_layers: (k > 0).then_some(k),
            ..tr
        });
        Ok(vram_model::estimate(model, &s)?)
    };
    let o = setup.overheads;
    let mut k = None;
    if with_k(0)?.fits(capacity) {
        k = Some(0);
    } else if with_k(layers)?.fits(capacity) {
        // Memory falls as k grows: bisect for the smallest k that fits.
        let (mut lo, mut hi) = (0, layers);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if with_k(mid)?.fits(capacity) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        k = Some(hi);
    }
    let k_used = k.unwrap_or(layers);
    let e = with_k(k_used)?;
    // What the allocator can hand out: the device less the context, less the share the
    // allocator's replay of this step keeps reserved but unallocated.
    let ratio = e.peak_bytes as f64 / e.needed_bytes.max(1) as f64;
    let allocatable = (capacity.saturating_sub(o.cuda_context_bytes) as f64 * ratio) as u64;
    let block = simulate(chain, &first_k_recomputed(chain, k_used as usize).ops)?.peak_bytes;
    let others = e.peak_bytes.saturating_sub(block);
    Ok(DeviceBudget {
        block_layers: k,
        allocatable_bytes: allocatable,
        block_peak_bytes: e.peak_bytes,
        others_bytes: others,
        chain_bytes: if k.is_some() {
            block + allocatable.saturating_sub(e.peak_bytes)
        } else {
            0
        },
    })
}
