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
//! A single stage costs `f + b` and needs `a ≤ m`. Memory is counted in `slots` equal units of
//! the budget, every size rounded up, so a schedule the programme accepts fits the real budget.
//! The answer is a list of [`Op`]s that [`simulate`] replays independently of the programme;
//! [`store_all`], [`full_recompute`] and [`sqrt_checkpoints`] build the usual baselines in the
//! same language. `x_0` (the chain's input) is held by the caller and not counted.

use serde::Serialize;

use crate::error::{Error, Result};

/// One layer of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stage {
    /// Forward time (any unit).
    pub forward: f64,
    /// Backward time.
    pub backward: f64,
    /// Bytes of the stage's input activation (what a checkpoint before it holds).
    pub input_bytes: u64,
    /// Bytes the stage's forward saves for its backward when run with saving.
    pub saved_bytes: u64,
}

/// One step of a checkpointing schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    let units = |b: u64| b.div_ceil(unit) as usize;
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
                    if a[s] <= m {
                        best = chain[s].forward + chain[s].backward;
                        how = Choice::Leaf;
                    }
                } else {
                    let need = a[s] + x[s + 1];
                    if need <= m {
                        let c = f[s] + cost[idx(s + 1, t, m - need)] + chain[s].backward;
                        if c < best {
                            best = c;
                            how = Choice::Store;
                        }
                    }
                    // Transient while running s..s' forward without saving: the running
                    // activation and the next one.
                    let mut transient = 0;
                    for sp in s + 1..=t {
                        let held = if sp - 1 > s { x[sp - 1] } else { 0 };
                        transient = transient.max(held + x[sp]);
                        if transient > m || x[sp] > m {
                            break;
                        }
                        let right = cost[idx(sp, t, m - x[sp])];
                        let left = cost[idx(s, sp - 1, m)];
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
                stack.push(Task::Solve(s, sp - 1, m));
                stack.push(Task::Emit(Op::Drop(sp)));
                stack.push(Task::Solve(sp, t, m - x[sp]));
            }
        }
    }
    Ok(Some(Schedule { cost: total, ops }))
}
