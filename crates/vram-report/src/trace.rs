//! `vram trace`: the estimator's step as individual tensors: a synthetic PyTorch memory
//! snapshot laid out by an allocator policy, and (`--events`) the events with each phase priced
//! by the planner's step-time model, for the host tier's simulator (`vram-tier-sim`).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_alloc::snapshot::TraceAction;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};
use vram_model::arch::Model;
use vram_model::estimate::Phase;
use vram_model::fmt::{bytes, thousands};
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Precision, Setup};
use vram_model::trace::TraceEvent;
use vram_tier::plan::{PhaseInfo, PhaseKind, Trace};

use crate::error::{input, RunError};
use crate::{Kind, SCHEMA_VERSION};

/// Where `vram trace`'s figures come from (`source` of the events file).
pub const SOURCE: &str = "vram trace: vramkit's own model of the step (vram-model's walk, the planner's step-time model), not a GPU recording";

/// `vram trace --events`: the walk's events with the phase each begins, and each phase of one
/// step priced on a GPU. The simulator reads the `source`, `phases` and `events` fields
/// ([`vram_tier::plan::Trace`], inline); the rest says what was traced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvents {
    /// The version of this format.
    pub schema_version: u32,
    /// `trace_events`.
    pub kind: Kind,
    /// The model, as given on the command line.
    pub model: String,
    /// Micro-batch of the step.
    pub micro_batch: u64,
    /// Sequence length of the step.
    pub seq: u64,
    /// The GPU whose step-time model prices the phases (its name).
    pub gpu: String,
    /// Parameters of the model.
    pub params: u64,
    /// Steps traced.
    pub steps: u32,
    /// The model's notes ([`crate::notes::of_step`]).
    #[serde(default)]
    pub notes: Vec<String>,
    /// `source`, `phases` (one step's, each with its seconds) and `events` (every step's,
    /// each step starting with `{"phase": 0}`).
    #[serde(flatten)]
    pub trace: Trace,
}

/// What a phase is, for the simulator: its kind and a name.
fn phase_kind(p: &Phase) -> (PhaseKind, String) {
    match p {
        Phase::Setup => (PhaseKind::Other, "before forward".into()),
        Phase::Forward { micro, layer } => (PhaseKind::Forward, format!("forward {micro}.{layer}")),
        Phase::Loss { micro } => (PhaseKind::Loss, format!("loss {micro}")),
        Phase::Backward { micro, layer } => {
            (PhaseKind::Backward, format!("backward {micro}.{layer}"))
        }
        Phase::Optimizer => (PhaseKind::Optimizer, "optimizer".into()),
        other => (PhaseKind::Other, format!("{other}")),
    }
}

/// `--events` for `steps` steps of `model`'s training `setup` (named `name` as given), walked
/// into `events` with their phase `marks`, each phase of one step priced on `gpu` by the
/// planner's step-time model ([`vram_plan::eager`]: a layer's forward and backward, head and
/// loss, the optimizer step).
pub fn events(
    name: &str,
    model: &Model,
    setup: &Setup,
    gpu: &Gpu,
    steps: u32,
    events: &[TraceEvent],
    marks: &[(usize, Phase)],
) -> std::result::Result<TraceEvents, RunError> {
    let (Model::Transformer(t), Mode::Train(tr)) = (model, setup.mode) else {
        return Err(input(
            "--events needs a transformer's training step (the simulator prices its phases)",
        )
        .into());
    };
    let p = setup.parallel;
    if p.tp * p.pp * p.dp != 1 || tr.grad_accum != 1 {
        return Err(input(
            "--events prices one GPU's step without gradient accumulation: drop --tp/--pp/--dp/--grad-accum",
        )
        .into());
    }
    let cal = vram_plan::eager::EagerCalibration::default();
    let tokens = (tr.micro_batch * tr.seq) as f64;
    let mb = vram_plan::eager::micro_batch(
        t,
        gpu,
        &cal,
        setup.attention,
        setup.precision,
        setup.amp_style(),
        tokens,
        tr.seq as f64,
        1.0,
        false,
    );
    let params = model.param_count() as f64;
    let state_bytes = if setup.precision == Precision::Bf16 {
        2.0
    } else {
        4.0
    };
    let opt_s = vram_plan::eager::optimizer_s(
        gpu,
        &cal,
        tr.optimizer,
        params,
        params * mb.tensors_per_param,
        state_bytes,
        setup.precision == Precision::Fp16Amp,
    );
    // The phases of one step: the first step's marks, up to the second `Setup`.
    let starts: Vec<usize> = marks
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| *p == Phase::Setup)
        .map(|(i, _)| i)
        .collect();
    let per_step = starts.get(1).copied().unwrap_or(marks.len());
    if starts.len() != steps as usize || marks.len() != per_step * steps as usize {
        return Err(RunError::Internal(format!(
            "the walk's steps do not repeat the same phases ({} marks, {steps} steps)",
            marks.len()
        )));
    }
    // A phase the walk marks twice in a row (the embedding before layer 0's forward; the
    // loss's forward and backward) shares its price between the marks.
    let step_marks = &marks[..per_step];
    let phases = step_marks
        .iter()
        .map(|(_, p)| {
            let (kind, name) = phase_kind(p);
            let seconds = match p {
                Phase::Forward { .. } => mb.layer_fwd_s,
                Phase::Backward { .. } => mb.layer_bwd_s,
                Phase::Loss { .. } => mb.head_s,
                Phase::Optimizer => opt_s,
                _ => 0.0,
            };
            let same = step_marks.iter().filter(|(_, q)| q == p).count();
            PhaseInfo {
                name,
                kind,
                seconds: seconds / same as f64,
            }
        })
        .collect();
    use vram_tier::plan::TraceEvent as Ev;
    let mut list = Vec::with_capacity(events.len() + marks.len());
    let mut m = marks.iter().enumerate().peekable();
    for (i, e) in events.iter().enumerate() {
        while let Some((k, _)) = m.next_if(|(_, (at, _))| *at <= i) {
            list.push(Ev::Phase {
                phase: k % per_step,
            });
        }
        list.push(match *e {
            TraceEvent::Alloc {
                id,
                bytes,
                category,
            } => Ev::Alloc {
                alloc: id,
                bytes,
                category: category.name().to_string(),
            },
            TraceEvent::Free { id } => Ev::Free { free: id },
        });
    }
    for (k, _) in m {
        list.push(Ev::Phase {
            phase: k % per_step,
        });
    }
    Ok(TraceEvents {
        schema_version: SCHEMA_VERSION,
        kind: Kind::TraceEvents,
        model: name.to_string(),
        micro_batch: tr.micro_batch,
        seq: tr.seq,
        gpu: gpu.name.to_string(),
        params: model.param_count(),
        steps,
        notes: crate::notes::of_step(model, true, None)
            .into_iter()
            .chain(crate::notes::of_setup(model, setup))
            .chain(crate::notes::of_precision(setup.precision, gpu))
            .collect(),
        trace: Trace {
            source: SOURCE.into(),
            phases,
            events: list,
        },
    })
}

impl TraceEvents {
    /// The events file's text: compact JSON (it holds every tensor of every step).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The text's lines after writing it to `path` as `file_bytes` bytes.
    pub fn written(&self, path: &str, file_bytes: u64) -> String {
        let mut o = format!(
            "wrote {path} ({}): {} events over {} steps with their phases (vramkit's model of the step, not a GPU recording)\n",
            bytes(file_bytes),
            thousands(self.events()),
            self.steps
        );
        let _ = crate::notes::write(&mut o, &self.notes);
        o
    }

    /// Alloc and free events (phase marks not counted).
    pub fn events(&self) -> u64 {
        self.trace
            .events
            .iter()
            .filter(|e| !matches!(e, vram_tier::plan::TraceEvent::Phase { .. }))
            .count() as u64
    }
}

/// A synthetic memory snapshot of the walk: every tensor through a caching allocator of
/// `policy` on a simulated device large enough for any single-GPU step.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSnapshot {
    /// The pickle `torch.cuda.memory._dump_snapshot()` would write (memory_viz and
    /// `vram replay` read it), each allocation labelled with the walk's category.
    pub pickle: Vec<u8>,
    /// Alloc and free events recorded.
    pub events: u64,
    /// Steps walked.
    pub steps: u32,
    /// The policy.
    pub policy: Policy,
    /// Peak allocated under it.
    pub peak_allocated_bytes: u64,
    /// Peak reserved under it.
    pub peak_reserved_bytes: u64,
    /// The model's notes ([`crate::notes::of_step`]).
    pub notes: Vec<String>,
}

/// Records `events` (`steps` steps of `model`'s `setup`) through `policy` into a snapshot.
pub fn snapshot(
    model: &Model,
    setup: &Setup,
    events: &[TraceEvent],
    steps: u32,
    policy: Policy,
) -> std::result::Result<TraceSnapshot, RunError> {
    // One tensor past the allocator's largest block cannot be placed on any simulated device
    // (the replay would call it out of memory on a device with room to spare): refused in one
    // line with its size. The readers refuse the tensors they know to explode (a patch
    // merger's, `read::decoders::merger_width`); this holds for any other.
    let largest = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc {
                bytes, category, ..
            } => Some((*bytes, *category)),
            TraceEvent::Free { .. } => None,
        })
        .max_by_key(|(b, _)| *b);
    if let Some((b, category)) = largest.filter(|(b, _)| *b > vram_alloc::MAX_REQUEST) {
        return Err(input(format!(
            "one tensor of the step takes {} ({}), past the {} the allocator replay places in one block (no GPU holds it); `vram estimate` gives the step's figures",
            bytes(b),
            category.name(),
            bytes(vram_alloc::MAX_REQUEST)
        ))
        .into());
    }
    // A device that holds the step, whatever a config asks (the walk has no device to refuse
    // it; 64 TiB ran out on a config of 2^20 heads): every allocation at once, each in a segment
    // at most 20 MiB beyond its bytes (PyTorch's 2 MiB and 20 MiB segments, 2 MiB rounding
    // above), is more than the allocator can reserve.
    let room = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc { bytes, .. } => Some(bytes.saturating_add(20 << 20)),
            TraceEvent::Free { .. } => None,
        })
        .fold(1u64 << 46, u64::saturating_add);
    let alloc = CachingAllocator::new(
        SimDevice::new(room),
        AllocatorConfig::new(policy).with_history(usize::MAX),
    )?;
    let mut live = std::collections::HashMap::new();
    for e in events {
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
    // Each malloc recorded exactly one `alloc` entry, in order: label them with the
    // estimator's categories so memory_viz colours the tensors by kind.
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
    Ok(TraceSnapshot {
        pickle: snap.to_pickle(),
        events: events.len() as u64,
        steps,
        policy,
        peak_allocated_bytes: stats.allocated_bytes[0].peak.max(0) as u64,
        peak_reserved_bytes: stats.reserved_bytes[0].peak.max(0) as u64,
        notes: crate::notes::of_step(model, true, None)
            .into_iter()
            .chain(crate::notes::of_setup(model, setup))
            .collect(),
    })
}

impl TraceSnapshot {
    /// The text after writing the pickle to `path`.
    pub fn written(&self, path: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wrote {path} ({}): {} events over {} steps; {} policy peak allocated {}, peak reserved {}",
            bytes(self.pickle.len() as u64),
            thousands(self.events),
            self.steps,
            self.policy.name(),
            bytes(self.peak_allocated_bytes),
            bytes(self.peak_reserved_bytes),
        );
        let _ = crate::notes::write(&mut o, &self.notes);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vram_model::estimate::Category;

    /// A step larger than the 64 TiB the snapshot's device once had (a config of 2^20 heads,
    /// found by mutating the zoo's configs) is recorded, not an out-of-memory error: the
    /// device holds every allocation at once.
    #[test]
    fn a_step_beyond_64_tib_is_recorded() {
        let model = vram_model::catalog::lookup("gpt2").unwrap();
        let setup = Setup::default();
        let events: Vec<TraceEvent> = (0..3)
            .map(|id| TraceEvent::Alloc {
                id,
                bytes: 40 << 40,
                category: Category::Activations,
            })
            .collect();
        let s = snapshot(&model, &setup, &events, 1, Policy::PyTorch).unwrap();
        assert_eq!(s.peak_allocated_bytes, 120 << 40);
    }
}
