//! The step's timeline as individual tensor allocations and frees, for allocator replay.
//!
//! [`training_events`] walks the same step as [`crate::estimate()`] (so the live bytes at every
//! moment agree with the estimate) but splits each layer's stored activations into the tensors
//! the reference implementation keeps, and repeats the step `steps` times.

use std::collections::HashMap;

use serde::Serialize;

use crate::describe::Model;
use crate::error::Result;
use crate::setup::Setup;
use crate::walk::{Category, Handle, Phase, Run, Sink, Step};

/// One event of a synthetic trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A tensor is allocated.
    Alloc {
        /// Unique id of the tensor within the trace.
        id: u64,
        /// Requested bytes.
        bytes: u64,
        /// What it is.
        category: Category,
    },
    /// A tensor allocated earlier is freed.
    Free {
        /// The tensor's id.
        id: u64,
    },
}

#[derive(Default)]
struct TraceSink {
    events: Vec<TraceEvent>,
    next: u64,
    live: HashMap<u64, Vec<(u64, u64)>>,
    /// Where each phase begins: the index of its first event, and the phase.
    marks: Vec<(usize, Phase)>,
}

impl Sink for TraceSink {
    const WANTS_PARTS: bool = true;

    fn alloc(&mut self, h: Handle, parts: &[u64]) {
        if h.bytes == 0 {
            return;
        }
        let sizes: Vec<u64> = if parts.is_empty() {
            vec![h.bytes]
        } else {
            parts.to_vec()
        };
        let mut ids = Vec::with_capacity(sizes.len());
        for bytes in sizes {
            self.next += 1;
            self.events.push(TraceEvent::Alloc {
                id: self.next,
                bytes,
                category: h.cat,
            });
            ids.push((self.next, bytes));
        }
        // A key reused while live is a generator bug; keep both by chaining.
        self.live.entry(h.key).or_default().extend(ids);
    }
    fn free(&mut self, h: Handle) {
        if let Some(ids) = self.live.remove(&h.key) {
            for (id, _) in ids {
                self.events.push(TraceEvent::Free { id });
            }
        }
    }
    fn phase(&mut self, p: Phase) {
        self.marks.push((self.events.len(), p));
    }
}

/// The alloc/free events of `steps` consecutive training (or inference) steps on one GPU
/// (pipeline rank 0), in program order. Every allocated tensor is freed by the end.
pub fn training_events(model: &Model, setup: &Setup, steps: u32) -> Result<Vec<TraceEvent>> {
    Ok(training_events_with_phases(model, setup, steps)?.0)
}

/// Where each phase of a walk begins: `(index of the phase's first event, phase)`, in order
/// (a phase with no event of its own starts where the next one does).
pub type PhaseMarks = Vec<(usize, Phase)>;

/// [`training_events`] and their [`PhaseMarks`]. Every step begins with [`Phase::Setup`].
pub fn training_events_with_phases(
    model: &Model,
    setup: &Setup,
    steps: u32,
) -> Result<(Vec<TraceEvent>, PhaseMarks)> {
    let step = Step::new(model, setup)?;
    let mut sink = TraceSink::default();
    if matches!(setup.mode, crate::setup::Mode::Infer(_)) {
        step.walk(0, &mut sink, true, Run::Whole);
    } else {
        // As a training script runs: weights first, optimizer states in the first step.
        step.walk(0, &mut sink, true, Run::First);
        for _ in 1..steps.max(1) {
            step.walk(0, &mut sink, true, Run::Later);
        }
        // The persistent state is still live after the last step (freed below).
    }
    // What is still live at the end (the weights, and a training run's optimizer states) is
    // freed in the order it was made: a fixed order, so one command writes the same
    // events and the same snapshot bytes every time (the map's own order changes per process).
    let mut rest: Vec<u64> = sink
        .live
        .drain()
        .flat_map(|(_, v)| v.into_iter().map(|(id, _)| id))
        .collect();
    rest.sort_unstable();
    sink.events
        .extend(rest.into_iter().map(|id| TraceEvent::Free { id }));
    Ok((sink.events, sink.marks))
}
