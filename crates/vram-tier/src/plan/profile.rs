//! A training step as the planner sees it: phases with their compute time, the tensors that
//! may leave the device between two uses (items), and every other byte (the base).

use serde::{Deserialize, Serialize};

/// What a phase of the step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// A layer's forward.
    Forward,
    /// Head, logits and loss.
    Loss,
    /// A layer's backward.
    Backward,
    /// The optimizer step (or one chunk of it).
    Optimizer,
    /// Anything else (before the forward).
    Other,
}

/// One phase of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseInfo {
    /// A name for reports, e.g. `forward 0.3`.
    pub name: String,
    /// What it does.
    pub kind: PhaseKind,
    /// Compute time on the device, seconds.
    pub seconds: f64,
}

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// Saved for backward (or a half copy of a weight kept until the layer's backward):
    /// written in a forward phase, read in a backward phase.
    Activation,
    /// A weight (fp32 under autocast): read by every forward, written by the optimizer.
    Parameter,
    /// A weight's gradient: written in a backward phase, read by the optimizer.
    Gradient,
    /// An optimizer state: read and written by the optimizer only.
    OptimizerState,
}

/// A tensor that may live in host memory between two uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Bytes.
    pub bytes: u64,
    /// What it is.
    pub kind: ItemKind,
    /// Alive across steps (weights, optimizer states): it exists in every phase, and the gap
    /// after its last use of a step runs into the next step.
    pub persistent: bool,
    /// The phases it exists in, `alloc..=free`, when not persistent.
    pub alloc: usize,
    /// See `alloc`.
    pub free: usize,
    /// The phases in which the device reads or writes it, ascending (never empty).
    pub uses: Vec<usize>,
    /// The optimizer chunk it belongs to (weights, gradients, states), if any.
    pub chunk: Option<usize>,
    /// Whether it is already there at the high point of its `alloc` phase (false when made
    /// after it).
    #[serde(default = "yes")]
    pub at_alloc_peak: bool,
    /// Whether it is still there at the high point of its `free` phase (false when freed
    /// before it).
    #[serde(default = "yes")]
    pub at_free_peak: bool,
    /// Whether the runtime can move it (the plug-in moves saved activations and optimizer
    /// states; weights and gradients only through a host update). The floor takes only these
    /// too: a weight is read by the backward, whatever its `uses` say.
    #[serde(default = "yes")]
    pub movable: bool,
}

fn yes() -> bool {
    true
}

impl Item {
    /// Whether it holds memory at phase `q`'s high point.
    pub fn live_in(&self, q: usize) -> bool {
        if self.persistent {
            return true;
        }
        let after_alloc = self.alloc < q || (self.alloc == q && self.at_alloc_peak);
        let before_free = q < self.free || (q == self.free && self.at_free_peak);
        after_alloc && before_free
    }

    /// Whether the device uses it in phase `q`.
    pub fn used_in(&self, q: usize) -> bool {
        self.uses.binary_search(&q).is_ok()
    }

    /// The uses around `q`, which it does not use: `(previous use, next use, wraps)`; `wraps`
    /// when the gap runs from a step's last use into the next step's first (persistent
    /// items only). `None` when `q` is not in a gap of this item.
    pub fn gap_around(&self, q: usize) -> Option<(usize, usize, bool)> {
        if !self.live_in(q) || self.used_in(q) {
            return None;
        }
        let next = self.uses.iter().copied().find(|&u| u > q);
        let prev = self.uses.iter().copied().rev().find(|&u| u < q);
        match (prev, next) {
            (Some(p), Some(n)) => Some((p, n, false)),
            _ if self.persistent => Some((
                prev.unwrap_or(*self.uses.last()?),
                next.unwrap_or(*self.uses.first()?),
                true,
            )),
            _ => None,
        }
    }
}

/// One step: phases, items and the bytes that stay (the base).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The step's phases, in order.
    pub phases: Vec<PhaseInfo>,
    /// The tensors that may leave the device.
    pub items: Vec<Item>,
    /// Per phase, the bytes at its high point that are not items (temporaries, logits, the
    /// loss, workspaces, small tensors).
    pub base: Vec<u64>,
    /// Number of optimizer chunks (the optimizer phase split into this many, each updating
    /// its share of the weights with its own temporaries; 1 = PyTorch's one foreach step).
    pub chunks: usize,
}

impl Profile {
    /// Bytes live at phase `q`'s high point, everything on the device.
    pub fn live(&self, q: usize) -> u64 {
        self.base[q]
            + self
                .items
                .iter()
                .filter(|i| i.live_in(q))
                .map(|i| i.bytes)
                .sum::<u64>()
    }

    /// The step's compute time (seconds), nothing moved.
    pub fn native_seconds(&self) -> f64 {
        self.phases.iter().map(|p| p.seconds).sum()
    }

    /// Phase start times in a step that runs at native speed.
    pub fn starts(&self) -> Vec<f64> {
        let mut t = 0.0;
        self.phases
            .iter()
            .map(|p| {
                let s = t;
                t += p.seconds;
                s
            })
            .collect()
    }

    /// The same step with every phase's time scaled so that the step takes `seconds`
    /// (calibration to a measured step).
    pub fn scaled_to(mut self, seconds: f64) -> Profile {
        let f = seconds / self.native_seconds().max(f64::MIN_POSITIVE);
        for p in &mut self.phases {
            p.seconds *= f;
        }
        self
    }

    /// Indices of the optimizer phases (one per chunk, in order).
    pub fn optimizer_phases(&self) -> Vec<usize> {
        (0..self.phases.len())
            .filter(|&q| self.phases[q].kind == PhaseKind::Optimizer)
            .collect()
    }

    /// Highest live bytes over the step and the phase.
    pub fn peak(&self) -> (u64, usize) {
        (0..self.phases.len())
            .map(|q| (self.live(q), q))
            .max_by_key(|&(b, q)| (b, std::cmp::Reverse(q)))
            .unwrap_or((0, 0))
    }
}

/// One event of a trace (`vram trace --events`): a phase begins, a tensor is allocated, a
/// tensor is freed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TraceEvent {
    /// The phase with this index (into the trace's `phases`, one step's) begins.
    Phase {
        /// Index into [`Trace::phases`].
        phase: usize,
    },
    /// A tensor is allocated.
    Alloc {
        /// Its id.
        alloc: u64,
        /// Bytes.
        bytes: u64,
        /// vram-model's category (`activations`, `optimizer_states`, ...).
        category: String,
    },
    /// A tensor is freed.
    Free {
        /// Its id.
        free: u64,
    },
}

/// A trace of several identical steps with phase marks (what `vram trace --events` writes,
/// and what a recorded GPU step is turned into).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Where it comes from (carried into every report).
    #[serde(default)]
    pub source: String,
    /// The phases of one step, each with its time.
    pub phases: Vec<PhaseInfo>,
    /// The events of every step, each step starting with `{"phase": 0}`.
    pub events: Vec<TraceEvent>,
}

/// What a category of vram-model's walk becomes: an item kind, or part of the base.
fn kind_of(category: &str) -> Option<ItemKind> {
    match category {
        "activations" | "weight_copies" => Some(ItemKind::Activation),
        "parameters" | "master_weights" => Some(ItemKind::Parameter),
        "gradients" => Some(ItemKind::Gradient),
        "optimizer_states" => Some(ItemKind::OptimizerState),
        _ => None,
    }
}

impl Profile {
    /// A profile from a step recorded by the runtime: its phases, items, and the allocated
    /// bytes at each phase's high point (`live`, everything included); the base is what the
    /// items do not account for.
    pub fn from_recorded(
        phases: Vec<PhaseInfo>,
        items: Vec<Item>,
        live: &[u64],
        chunks: usize,
    ) -> Result<Profile, String> {
        let n = phases.len();
        if n == 0 || live.len() != n {
            return Err(format!("{n} phases but {} live figures", live.len()));
        }
        for (k, it) in items.iter().enumerate() {
            let bad = it.uses.is_empty()
                || it.uses.iter().any(|&u| u >= n)
                || it.uses.windows(2).any(|w| w[0] >= w[1])
                || (!it.persistent && (it.alloc > it.free || it.free >= n));
            if bad {
                return Err(format!("item {k}: uses or lifetime outside the {n} phases"));
            }
        }
        let mut p = Profile {
            phases,
            items,
            base: vec![0; n],
            chunks: chunks.max(1),
        };
        for (q, &l) in live.iter().enumerate() {
            let items_here: u64 = p
                .items
                .iter()
                .filter(|it| it.live_in(q))
                .map(|it| it.bytes)
                .sum();
            p.base[q] = l.saturating_sub(items_here);
        }
        Ok(p)
    }

    /// The last step of `trace` as a profile, its optimizer phase split into `chunks`.
    ///
    /// Uses follow what PyTorch does with each kind (the trace has allocations, not reads):
    /// an activation is used where it is allocated and where it is freed (the backward that
    /// consumes it); a weight by every forward phase (its autocast cast; the profile does not
    /// know which layer owns it) and by its optimizer chunk; a gradient where the backward
    /// allocates it and by its optimizer chunk; an optimizer state by its chunk only. Weights,
    /// gradients and states are dealt to chunks in model order by bytes (states and weights
    /// in allocation order, gradients in reverse: the backward makes the last layer's first).
    /// Tensors under 1 MiB stay in the base. With chunks, the optimizer's temporaries
    /// (category `temporaries` allocated in the optimizer phase) shrink to a chunk's share.
    pub fn from_trace(trace: &Trace, chunks: usize) -> Result<Profile, String> {
        let chunks = chunks.max(1);
        let n = trace.phases.len();
        if n == 0 {
            return Err("the trace has no phases".into());
        }
        // Split the events into steps at `{"phase": 0}`.
        let mut step_starts = Vec::new();
        for (i, e) in trace.events.iter().enumerate() {
            if matches!(e, TraceEvent::Phase { phase: 0 }) {
                step_starts.push(i);
            }
        }
        let Some(&last) = step_starts.last() else {
            return Err("the trace has no step (no {\"phase\": 0})".into());
        };
        if step_starts.len() < 2 {
            return Err(
                "the trace needs at least two steps (the first creates the optimizer states)"
                    .into(),
            );
        }
        // Replay everything before the last step: what is alive then is persistent.
        let mut sizes: std::collections::HashMap<u64, (u64, String)> = Default::default();
        for e in &trace.events[..last] {
            match e {
                TraceEvent::Alloc {
                    alloc,
                    bytes,
                    category,
                } => {
                    sizes.insert(*alloc, (*bytes, category.clone()));
                }
                TraceEvent::Free { free } => {
                    sizes.remove(free);
                }
                TraceEvent::Phase { .. } => {}
            }
        }
        // Persistent tensors in allocation (id) order.
        let mut persistent: Vec<(u64, u64, String)> = sizes
            .iter()
            .map(|(&id, (b, c))| (id, *b, c.clone()))
            .collect();
        persistent.sort_by_key(|p| p.0);
        let mut live_now: u64 = sizes.values().map(|v| v.0).sum();
        let mut peak = vec![0u64; n];
        // The event count at each phase's high point (the first time it is reached).
        let mut peak_at = vec![0usize; n];
        let mut clock = 0usize;
        let mut q = 0usize;
        // id -> (bytes, category, alloc phase, free phase)
        // id -> (bytes, category, alloc phase, alloc clock)
        let mut within: std::collections::HashMap<u64, (u64, String, usize, usize)> =
            Default::default();
        // (bytes, category, alloc phase, free phase, id, alloc clock, free clock)
        let mut done: Vec<(u64, String, usize, usize, u64, usize, usize)> = Vec::new();
        // Optimizer temporaries' high point.
        let mut opt_tmp_live = 0u64;
        let mut opt_tmp_peak = 0u64;
        let mut seen = vec![false; n];
        for e in &trace.events[last..] {
            clock += 1;
            match e {
                TraceEvent::Phase { phase } => {
                    if *phase >= n {
                        return Err(format!("phase {phase} is not in the trace's {n} phases"));
                    }
                    q = *phase;
                    if !seen[q] || live_now > peak[q] {
                        peak[q] = live_now;
                        peak_at[q] = clock;
                    }
                    seen[q] = true;
                }
                TraceEvent::Alloc {
                    alloc,
                    bytes,
                    category,
                } => {
                    live_now += bytes;
                    if live_now > peak[q] {
                        peak[q] = live_now;
                        peak_at[q] = clock;
                    }
                    if trace.phases[q].kind == PhaseKind::Optimizer && category == "temporaries" {
                        opt_tmp_live += bytes;
                        opt_tmp_peak = opt_tmp_peak.max(opt_tmp_live);
                    }
                    within.insert(*alloc, (*bytes, category.clone(), q, clock));
                }
                TraceEvent::Free { free } => {
                    if let Some((b, c, a, at)) = within.remove(free) {
                        live_now -= b;
                        if trace.phases[q].kind == PhaseKind::Optimizer && c == "temporaries" {
                            opt_tmp_live = opt_tmp_live.saturating_sub(b);
                        }
                        done.push((b, c, a, q, *free, at, clock));
                    } else if let Some((b, _)) = sizes.remove(free) {
                        // A persistent tensor freed at the very end of the trace.
                        live_now -= b;
                    } else {
                        return Err(format!("free of unknown tensor {free}"));
                    }
                }
            }
        }
        // What is still allocated at the end of the last step was made in it and lives on.
        for (id, (b, c, a, at)) in within.drain() {
            done.push((b, c, a, n - 1, id, at, usize::MAX));
        }
        done.sort_by_key(|d| d.4);
        const MIN_ITEM: u64 = 1 << 20;
        let forwards: Vec<usize> = (0..n)
            .filter(|&q| trace.phases[q].kind == PhaseKind::Forward)
            .collect();
        let opt_phase = (0..n)
            .find(|&q| trace.phases[q].kind == PhaseKind::Optimizer)
            .ok_or("the trace's step has no optimizer phase")?;
        // The chunked step: phases before the optimizer, `chunks` optimizer phases, the rest.
        let remap = |q: usize| if q > opt_phase { q + chunks - 1 } else { q };
        let mut phases: Vec<PhaseInfo> = Vec::with_capacity(n + chunks - 1);
        for (i, p) in trace.phases.iter().enumerate() {
            if i == opt_phase {
                for c in 0..chunks {
                    phases.push(PhaseInfo {
                        name: if chunks == 1 {
                            p.name.clone()
                        } else {
                            format!("{} chunk {c}", p.name)
                        },
                        kind: PhaseKind::Optimizer,
                        seconds: p.seconds / chunks as f64,
                    });
                }
            } else {
                phases.push(p.clone());
            }
        }
        let opt = |c: usize| opt_phase + c;
        // Deal weights, gradients and states to chunks in model order by bytes.
        let deal = |list: &[u64]| -> Vec<usize> {
            let total: u64 = list.iter().sum();
            let mut acc = 0u64;
            list.iter()
                .map(|&b| {
                    let c = ((acc as u128 * chunks as u128) / total.max(1) as u128) as usize;
                    acc += b;
                    c.min(chunks - 1)
                })
                .collect()
        };
        let mut items: Vec<Item> = Vec::new();
        let all_phases = phases.len();
        let big = |b: u64, c: &str| b >= MIN_ITEM && kind_of(c).is_some();
        for kind in [ItemKind::Parameter, ItemKind::OptimizerState] {
            let chosen: Vec<&(u64, u64, String)> = persistent
                .iter()
                .filter(|p| big(p.1, &p.2) && kind_of(&p.2) == Some(kind))
                .collect();
            let dealt = deal(&chosen.iter().map(|p| p.1).collect::<Vec<_>>());
            for (p, c) in chosen.iter().zip(dealt) {
                let mut uses: Vec<usize> = if kind == ItemKind::Parameter {
                    forwards.iter().map(|&f| remap(f)).collect()
                } else {
                    Vec::new()
                };
                uses.push(opt(c));
                uses.sort_unstable();
                uses.dedup();
                items.push(Item {
                    bytes: p.1,
                    kind,
                    persistent: true,
                    alloc: 0,
                    free: all_phases - 1,
                    uses,
                    chunk: Some(c),
                    at_alloc_peak: true,
                    at_free_peak: true,
                    movable: kind == ItemKind::OptimizerState,
                });
            }
        }
        let at_peaks = |d: &(u64, String, usize, usize, u64, usize, usize)| {
            (d.5 <= peak_at[d.2], peak_at[d.3] < d.6)
        };
        let grads: Vec<&(u64, String, usize, usize, u64, usize, usize)> = done
            .iter()
            .filter(|d| big(d.0, &d.1) && kind_of(&d.1) == Some(ItemKind::Gradient))
            .collect();
        let mut grad_chunks = deal(&grads.iter().rev().map(|d| d.0).collect::<Vec<_>>());
        grad_chunks.reverse();
        for (d, c) in grads.iter().zip(grad_chunks) {
            let a = remap(d.2);
            // zero_grad frees them after the whole step (its last chunk).
            let f = if d.3 == opt_phase {
                opt(chunks - 1)
            } else {
                remap(d.3)
            };
            let mut uses = vec![a, opt(c).max(a)];
            uses.sort_unstable();
            uses.dedup();
            let (at_alloc_peak, freed_late) = at_peaks(d);
            items.push(Item {
                bytes: d.0,
                kind: ItemKind::Gradient,
                persistent: false,
                alloc: a,
                free: f.max(opt(c)),
                uses,
                chunk: Some(c),
                at_alloc_peak,
                // Freed by zero_grad after the last chunk: there at every chunk's high point.
                at_free_peak: d.3 == opt_phase || freed_late,
                movable: false,
            });
        }
        for d in &done {
            if !big(d.0, &d.1) || kind_of(&d.1) != Some(ItemKind::Activation) {
                continue;
            }
            let (a, f) = (remap(d.2), remap(d.3));
            let mut uses = vec![a, f];
            uses.dedup();
            let (at_alloc_peak, at_free_peak) = at_peaks(d);
            items.push(Item {
                bytes: d.0,
                kind: ItemKind::Activation,
                persistent: false,
                alloc: a,
                free: f,
                uses,
                chunk: None,
                at_alloc_peak,
                at_free_peak,
                movable: true,
            });
        }
        // Everything that is not an item is base: each phase's high point less its items.
        let mut base = Vec::with_capacity(all_phases);
        for (i, &phase_peak) in peak.iter().enumerate() {
            let copies = if i == opt_phase { chunks } else { 1 };
            for c in 0..copies {
                let qq = remap(i) + if i == opt_phase { c } else { 0 };
                let mut hi = phase_peak;
                if i == opt_phase && chunks > 1 {
                    hi = hi.saturating_sub(opt_tmp_peak - opt_tmp_peak / chunks as u64);
                }
                let items_here: u64 = items
                    .iter()
                    .filter(|it| it.live_in(qq))
                    .map(|it| it.bytes)
                    .sum();
                base.push(hi.saturating_sub(items_here));
            }
        }
        Ok(Profile {
            phases,
            items,
            base,
            chunks,
        })
    }
}
