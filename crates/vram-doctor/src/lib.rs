//! `vram-doctor`: why a PyTorch job ran out of GPU memory, and what to change.
//!
//! The input is the error the user has in hand: PyTorch's `CUDA out of memory.
//! Tried to allocate ...` message ([`message::parse`], every 2.x layout). It
//! may come with the model and setup ([`Job`]: the same knobs as `vram
//! estimate`), `torch.cuda.memory_stats()` dumps ([`stats::parse`]), the
//! alloc/free events of a memory snapshot, a `vram record` recording, and the
//! processes NVML lists on the device now. [`diagnose`] weighs them and
//! returns causes and ranked remedies, each with its numbers:
//!
//! - **fragmentation** (memory reserved by PyTorch but unallocated could have
//!   served the request): `expandable_segments:True` or vramkit's allocator,
//!   with what each saves on this job when a snapshot is given (its events
//!   replayed through each policy by `vram_alloc::replay`);
//! - **the step is too large**: the estimate's breakdown and the fastest
//!   configuration that fits the memory actually left on the device
//!   (`vram_plan::search` over recomputation, micro-batch with accumulation,
//!   ZeRO and offload, with the user's optimizer and with 8-bit Adam);
//! - **other processes** holding memory (from the message, and from NVML);
//! - **a per-process cap** (`set_per_process_memory_fraction`);
//! - **growth that suggests a leak** (two `memory_stats()` dumps, or a
//!   recording's leak check).
//!
//! Pure: no files, no clocks, no GPU; the CLI reads the inputs and asks NVML.
//!
//! ```
//! use vram_doctor::{diagnose, message, CauseKind, Inputs};
//! let m = message::parse(
//!     "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB \
//!      of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB \
//!      memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB \
//!      is reserved by PyTorch but unallocated.",
//! ).unwrap();
//! let d = diagnose(&Inputs::new(m)).unwrap();
//! assert_eq!(d.causes[0].kind, CauseKind::Fragmentation);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod diagnose;
pub mod message;
pub mod stats;

pub use diagnose::{
    diagnose, human_bytes, Cause, CauseKind, Diagnosis, EstimateSummary, Inputs, Job, PolicySaving,
    Remedy,
};

/// Errors of the doctor; all of them are the user's input.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The out-of-memory message could not be read.
    #[error("cannot read the out-of-memory message: {reason}")]
    Unparseable {
        /// What was missing or malformed.
        reason: String,
    },
    /// A JSON input (memory_stats() dump) is malformed.
    #[error("{what}: {reason}")]
    Json {
        /// Which input.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The model or setup is invalid.
    #[error(transparent)]
    Model(#[from] vram_model::Error),
    /// The planner refused the request.
    #[error(transparent)]
    Plan(#[from] vram_plan::Error),
    /// A snapshot's events could not be replayed.
    #[error(transparent)]
    Alloc(#[from] vram_alloc::AllocError),
}

/// Result type of this crate.
pub type Result<T, E = DoctorError> = std::result::Result<T, E>;
