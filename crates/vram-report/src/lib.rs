//! The answers of `vram`, typed: what `vram estimate`, `capacity`, `plan`, `batch`, `checkpoint`,
//! `replay` and `trace --events` compute (the estimate, its fit searches, the suggestions, the
//! speed, the model's notes and the assumptions), as one serde-serialised report per answer, and
//! every rendering of it.
//!
//! The CLI resolves its flags into a request ([`request`]), asks this crate for the report, and
//! prints it: [`Report::text`] for the terminal, [`Report::to_json`] for `--json`,
//! [`html::render`] for `vram report`. The Python package reads the JSON. No output re-derives
//! a figure: each one renders the fields of the same report, and the text and the page print
//! the same sentences ([`text`]).
//!
//! # The JSON format
//!
//! Every report is one JSON object with `schema_version` (this crate's [`SCHEMA_VERSION`]) and
//! `kind`, one of `estimate` ([`EstimateReport`]), `finetune` ([`FinetuneReport`]), `weights`
//! ([`WeightsReport`]), `capacity` ([`CapacityReport`]), `plan` ([`PlanReport`]),
//! `finetune_plan` ([`FinetunePlanReport`]), `batch` ([`BatchReport`]), `checkpoint`
//! ([`CheckpointReport`]), `replay` ([`ReplayReport`]) and `trace_events` ([`TraceEvents`], the
//! host tier simulator's input, which [`Report`] does not read); each type's documentation lists
//! its fields. Every report that describes a model has `notes` ([`notes`]). Sizes
//! are bytes (`*_bytes`, integers), times seconds (`*_s`), shares fractions (`mfu`). A field
//! is added without changing the version; one removed, renamed or changed in meaning changes it.
//! A report read back ([`Report::from_json`]) has every figure checked against its range (the
//! [`check`] module: no size, time, count or rate below 0, shares from 0 to 1, integers up to
//! 2^53), each one out of range refused in one line naming its JSON path.
//!
//! Version 2 (since 2026-11-28): an estimate's `weights_load` has `held_bytes` (what the step
//! holds) beside `stored_bytes` (the checkpoint as stored), which version 1 (`vram` up to
//! c72f1e1) had as one figure. [`Report::from_json`] reads both versions: a version 1 estimate
//! is read as version 2 says it meant (the `v1` module), except one of an AWQ or GPTQ MoE
//! checkpoint, whose version 1 figure is not the checkpoint's stored bytes and which is refused
//! in one line; every other kind reads as it is. A version it does not know is refused in one
//! line naming it.
//!
//! ```
//! use vram_report::{estimate, request, Report};
//!
//! let model = vram_model::catalog::lookup("gpt2").unwrap();
//! let req = estimate::EstimateRequest {
//!     step: request::StepRequest::default(),
//!     finetune: request::FinetuneRequest::default(),
//!     gpu: vram_model::gpu::lookup("h100-80g").unwrap(),
//!     timeline: false,
//!     dequantized: false,
//!     kernels: Default::default(),
//! };
//! let input = estimate::ModelInput { model, config: None, checkpoint_params: None, checkpoint_place: None };
//! let Report::Estimate(r) = estimate::estimate(&input, &req).unwrap() else { unreachable!() };
//! assert!(r.fits && r.max_micro_batch.flatten().unwrap() > 1);
//! let json = Report::Estimate(r.clone()).to_json();
//! assert_eq!(Report::from_json(&json).unwrap(), Report::Estimate(r));
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod batch;
pub mod capacity;
pub mod check;
pub mod checkpoint;
pub mod doctor;
mod error;
pub mod estimate;
pub mod finetune;
pub mod html;
pub mod notes;
pub mod parts;
pub mod plan;
pub mod replay;
pub mod request;
pub mod text;
pub mod trace;
mod v1;

use serde::{Deserialize, Serialize};

pub use batch::BatchReport;
pub use capacity::CapacityReport;
pub use checkpoint::CheckpointReport;
pub use error::{Error, Result, RunError};
pub use estimate::{EstimateReport, SearchChecked, WeightsReport};
pub use finetune::FinetuneReport;
pub use plan::{FinetunePlanReport, PlanReport};
pub use replay::ReplayReport;
pub use trace::TraceEvents;

/// The version of the JSON format every report carries as `schema_version`.
pub const SCHEMA_VERSION: u32 = 2;

/// Which answer a report is (`kind` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `vram estimate`: a training step or a `generate` call.
    Estimate,
    /// `vram estimate --finetune lora|qlora`.
    Finetune,
    /// `vram estimate` on a checkpoint without a config: its parameters.
    Weights,
    /// `vram capacity`.
    Capacity,
    /// `vram plan`.
    Plan,
    /// `vram plan --finetune lora|qlora`.
    FinetunePlan,
    /// `vram batch`.
    Batch,
    /// `vram checkpoint`.
    Checkpoint,
    /// `vram replay`.
    Replay,
    /// `vram trace --events`: the simulator's input, not a page ([`TraceEvents`]).
    TraceEvents,
}

impl Kind {
    /// The name in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Estimate => "estimate",
            Kind::Finetune => "finetune",
            Kind::Weights => "weights",
            Kind::Capacity => "capacity",
            Kind::Plan => "plan",
            Kind::FinetunePlan => "finetune_plan",
            Kind::Batch => "batch",
            Kind::Checkpoint => "checkpoint",
            Kind::Replay => "replay",
            Kind::TraceEvents => "trace_events",
        }
    }
}

/// Any answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A full training or inference step.
    Estimate(Box<EstimateReport>),
    /// A LoRA/QLoRA step.
    Finetune(Box<FinetuneReport>),
    /// A checkpoint's parameters.
    Weights(WeightsReport),
    /// A serving engine's start-up.
    Capacity(Box<CapacityReport>),
    /// Parallel plans.
    Plan(Box<PlanReport>),
    /// LoRA/QLoRA plans.
    FinetunePlan(Box<FinetunePlanReport>),
    /// Memory-aware batches.
    Batch(Box<BatchReport>),
    /// Checkpoint placement.
    Checkpoint(Box<CheckpointReport>),
    /// A snapshot through allocator policies.
    Replay(Box<ReplayReport>),
}

impl Report {
    /// Which answer it is.
    pub fn kind(&self) -> Kind {
        match self {
            Report::Estimate(_) => Kind::Estimate,
            Report::Finetune(_) => Kind::Finetune,
            Report::Weights(_) => Kind::Weights,
            Report::Capacity(_) => Kind::Capacity,
            Report::Plan(_) => Kind::Plan,
            Report::FinetunePlan(_) => Kind::FinetunePlan,
            Report::Batch(_) => Kind::Batch,
            Report::Checkpoint(_) => Kind::Checkpoint,
            Report::Replay(_) => Kind::Replay,
        }
    }

    /// `--json`: the report as pretty-printed JSON, with a final newline.
    pub fn to_json(&self) -> String {
        let s = match self {
            Report::Estimate(r) => serde_json::to_string_pretty(r),
            Report::Finetune(r) => serde_json::to_string_pretty(r),
            Report::Weights(r) => serde_json::to_string_pretty(r),
            Report::Capacity(r) => serde_json::to_string_pretty(r),
            Report::Plan(r) => serde_json::to_string_pretty(r),
            Report::FinetunePlan(r) => serde_json::to_string_pretty(r),
            Report::Batch(r) => serde_json::to_string_pretty(r),
            Report::Checkpoint(r) => serde_json::to_string_pretty(r),
            Report::Replay(r) => serde_json::to_string_pretty(r),
        };
        s.unwrap_or_default() + "\n"
    }

    /// The text output.
    pub fn text(&self) -> String {
        match self {
            Report::Estimate(r) => r.text(),
            Report::Finetune(r) => r.text(),
            Report::Weights(r) => r.text(),
            Report::Capacity(r) => r.text(),
            Report::Plan(r) => r.text(),
            Report::FinetunePlan(r) => r.text(),
            Report::Batch(r) => r.text(),
            Report::Checkpoint(r) => r.text(),
            Report::Replay(r) => r.text(),
        }
    }

    /// Reads a report back from its JSON (`vram report`), in this version or version 1 (read as
    /// this version says it meant; see the crate's documentation). A JSON object without
    /// `schema_version` was written by a `vram` older than the typed report, or by something
    /// else: one line says which.
    pub fn from_json(text: &str) -> Result<Report> {
        #[derive(Deserialize)]
        struct Head {
            schema_version: Option<u64>,
            kind: Option<serde_json::Value>,
        }
        let unrec = |reason: String| Error::Unrecognised { reason };
        let head: Head =
            serde_json::from_str(text).map_err(|e| unrec(format!("not a JSON object: {e}")))?;
        let Some(version) = head.schema_version else {
            return Err(unrec(
                "a JSON object without schema_version: not the --json of vram estimate, capacity or plan (an older vram's? run the command again)".into(),
            ));
        };
        if version != u64::from(SCHEMA_VERSION) && version != 1 {
            return Err(unrec(format!(
                "schema_version {version}: this vram reads versions 1 and {SCHEMA_VERSION}"
            )));
        }
        let kind: Kind = head
            .kind
            .and_then(|k| serde_json::from_value(k).ok())
            .ok_or_else(|| unrec("no known `kind` in the report".into()))?;
        if kind != Kind::TraceEvents {
            // Before the typed read: a negative size is named by its path (`check`).
            let tree: serde_json::Value =
                serde_json::from_str(text).map_err(|e| unrec(format!("not a JSON object: {e}")))?;
            check::integers(&tree)?;
        }
        // Straight from the text: the byte maps keep their order.
        let bad =
            |e: serde_json::Error| unrec(format!("a {} report with bad fields: {e}", kind.name()));
        let mut r = match kind {
            Kind::Estimate if version == 1 => {
                Report::Estimate(Box::new(v1::estimate(text).map_err(unrec)?))
            }
            Kind::Estimate => Report::Estimate(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::Finetune => Report::Finetune(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::Weights => Report::Weights(serde_json::from_str(text).map_err(bad)?),
            Kind::Capacity => Report::Capacity(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::Plan => Report::Plan(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::FinetunePlan => {
                Report::FinetunePlan(Box::new(serde_json::from_str(text).map_err(bad)?))
            }
            Kind::Batch => Report::Batch(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::Checkpoint => {
                Report::Checkpoint(Box::new(serde_json::from_str(text).map_err(bad)?))
            }
            Kind::Replay => Report::Replay(Box::new(serde_json::from_str(text).map_err(bad)?)),
            Kind::TraceEvents => {
                return Err(unrec(
                    "a vram trace --events file: the host tier simulator's input (vram-tier-sim), not a report".into(),
                ))
            }
        };
        // Read, an older version's report is this version's.
        *r.schema_version_mut() = SCHEMA_VERSION;
        r.check()?;
        Ok(r)
    }

    /// Checks every figure of the report against its range (the `check` module): what
    /// [`Report::from_json`] does to a report it reads, which may have been edited by hand.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the first figure out of its range by its JSON path.
    pub fn check(&self) -> Result<()> {
        use check::Ranges;
        let c = &mut check::Checker::default();
        match self {
            Report::Estimate(r) => r.ranges(c),
            Report::Finetune(r) => r.ranges(c),
            Report::Weights(_) => Ok(()),
            Report::Capacity(r) => r.ranges(c),
            Report::Plan(r) => r.ranges(c),
            Report::FinetunePlan(r) => r.ranges(c),
            Report::Batch(r) => r.ranges(c),
            Report::Checkpoint(r) => r.ranges(c),
            Report::Replay(r) => r.ranges(c),
        }
    }

    fn schema_version_mut(&mut self) -> &mut u32 {
        match self {
            Report::Estimate(r) => &mut r.schema_version,
            Report::Finetune(r) => &mut r.schema_version,
            Report::Weights(r) => &mut r.schema_version,
            Report::Capacity(r) => &mut r.schema_version,
            Report::Plan(r) => &mut r.schema_version,
            Report::FinetunePlan(r) => &mut r.schema_version,
            Report::Batch(r) => &mut r.schema_version,
            Report::Checkpoint(r) => &mut r.schema_version,
            Report::Replay(r) => &mut r.schema_version,
        }
    }
}
