//! `vram-doctor`: why a PyTorch job ran out of GPU memory, and what to change.
//!
//! The input is the error the user has in hand: PyTorch's `CUDA out of memory.
//! Tried to allocate ...` message ([`message::parse`], every layout from 1.0
//! to 2.9, ROCm's, Ascend's, XPU's and Apple's MPS, read through log noise), or a serving engine's start-up memory
//! error ([`serving::parse`]: vLLM, SGLang). [`read`] tells them apart. A
//! PyTorch message may come with the model and setup ([`Job`]: the same
//! knobs as `vram estimate`), `torch.cuda.memory_stats()` dumps
//! ([`stats::parse`]), the alloc/free events of a memory snapshot, a `vram
//! record` recording, and the processes NVML lists on the device now.
//! [`diagnose`] weighs them and returns causes and ranked remedies, each with
//! its numbers; its documentation lists the mechanisms (the `allowed` cap as
//! `alloc_block` checks it, a request no larger than the free memory that the
//! figures cannot explain, what the process could hold at most, other
//! processes, memory outside PyTorch, CUDA-graph pools, fragmentation, the
//! step, growth). [`serving::explain`] explains the knob an engine's error
//! names, with the capacity model's figures when they are given
//! ([`serving::CapacityFigures`]).
//!
//! Each rule is one mechanism, in one place (issue 24's, then issues 31 and 35's):
//!
//! 1. the 1.0–1.3 `C cached)` layout is cached-but-unallocated, reserved =
//!    A + C: [`message`] (`Layout::Cached`); the cudaMallocAsync backend keeps no cache,
//!    reserved = allocated (`Layout::Async`);
//! 2. a request the free memory exceeds by more than a 2 MiB page and the figures'
//!    rounding is [`CauseKind::Unexplained`] and nothing is "enough"; when others (listed
//!    processes, memory outside PyTorch NVML does not put in this process) hold more than
//!    this process could, they are named first: free is read after the failure, and one of
//!    them allocating at that moment is the likeliest reading; otherwise the unexplained
//!    verdict leads and what this process asks of the device (the step) is named second as
//!    what to change, not as a proven cause (not sufficient) (a free figure above the device,
//!    unified memory, stays unexplained alone); a gap no larger than the largest measured
//!    driver shortfall (a driver's largest single allocation below its reported free: 1 MiB
//!    and 33 MiB in cuda_memtest's logs, no documented rule) is said in the verdict's detail
//!    and ranks nothing: [`diagnose`];
//! 3. "could hold at most" is reserved + free, capped by `allowed`:
//!    [`Figures::could_hold_bytes`];
//! 4. the cap decides when reserved + request > allowed (`alloc_block`), or is within the
//!    printed rounding of it with the request free on the device; the headroom is allowed −
//!    reserved: [`CauseKind::ProcessCap`]. Slack still reserved under the cap is trapped
//!    (PyTorch released every unsplit block and retried first): when live tensors plus the
//!    request fit under the cap with room without it, [`CauseKind::Fragmentation`] leads;
//! 5. without a `this process` line, the smallest listed process holding about
//!    what PyTorch reserved, or none, and a note says which; when the listed processes and
//!    the reservation add up to more than the device had in use, one of them is this
//!    process (the smallest holding at least the reservation): [`message::SelfProcess`];
//! 6. impossible figures get a note and are set aside: [`Figures`]; on ROCm, free above the
//!    total is system memory and the total (the carve-out) is the device; live tensors above
//!    the card (Windows' shared GPU memory) make the step the cause, whatever the slack;
//! 7. log noise around the message, a message pasted from `Tried to allocate`, a device
//!    printed without its index, the words in any case (bindings reprint it: R's torch writes
//!    `Pytorch`) and with any spacing (retyped: `50MiB(GPU 0; 1.96GiB totalcapacity;`):
//!    [`message::parse`];
//! 8. memory outside PyTorch far beyond a CUDA context
//!    ([`CONTEXT_MAX_BYTES`]): [`CauseKind::OutsidePytorch`]; when the message cannot say
//!    whose it is, it leads the step only when it is more than this process could hold;
//! 9. slack is fragmentation only when it would serve the request and leave
//!    room: [`CauseKind::Fragmentation`];
//! 10. CUDA-graph pools: [`CauseKind::PrivatePools`];
//! 11. causes ranked by tier, remedies in their cause's order, a recording's
//!     leak on another GPU is a note; other processes and memory outside PyTorch lead the
//!     step when their bytes, returned, would serve the request and leave the step the same
//!     room as rule 9: [`diagnose`];
//! 12. vLLM's and SGLang's start-up errors, each with what took the cache's memory
//!     ([`serving::ServingCause`]): [`serving`];
//! 13. Apple's MPS message (`MPS backend out of memory`, no device total or free figure) is
//!     read against its high watermark: a request above it alone is a tensor larger than the
//!     device, one the heaps and other Metal allocations leave room for under it is
//!     unexplained, other Metal memory larger than PyTorch's heaps leads, else the step with
//!     the watermark second ([`message::Layout::Mps`]): [`diagnose`];
//! 14. memory errors without those figures, named from their engine's own words and refused
//!     with what to paste or do instead: llama.cpp's (ggml's) allocation errors, Text
//!     Generation Inference's warmup and router refusals, PyTorch's cudaMallocAsync message cut
//!     at its device index: [`foreign`].
//!
//! `tests/data/messages/CAUSES.md` maps what fixed a real failure to the cause it shows;
//! `public.txt` beside it holds real messages labelled that way, split by a hash of their
//! source into a half the rules were fitted on and a holdout (BENCHMARKS.md).
//!
//! Pure: no files, no clocks, no GPU; the CLI reads the inputs and asks NVML.
//!
//! ```
//! use vram_doctor::{diagnose, message, CauseKind, Inputs};
//! let m = message::parse(
//!     "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB \
//!      of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB \
//!      memory in use. Of the allocated memory 35.00 GiB is allocated by PyTorch, and 42.00 GiB \
//!      is reserved by PyTorch but unallocated.",
//! ).unwrap();
//! let d = diagnose(&Inputs::new(m)).unwrap();
//! assert_eq!(d.causes[0].kind, CauseKind::Fragmentation);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod diagnose;
pub mod foreign;
mod mamba;
pub mod message;
pub mod profile;
pub mod serving;
pub mod stats;

pub use diagnose::{
    against_default, diagnose, human_bytes, Cause, CauseKind, Diagnosis, EstimateSummary, Figures,
    Inputs, Job, PolicySaving, Remedy, Undecided, CONTEXT_MAX_BYTES,
};

/// What the doctor found in its input.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// PyTorch's out-of-memory message.
    Oom(message::OomMessage),
    /// A serving engine's start-up memory error.
    Serving(serving::ServingError),
}

/// Reads the input: PyTorch's message when there is one (a serving engine's
/// log may hold both; the PyTorch error is the one with figures), else a
/// serving engine's start-up memory error.
///
/// # Errors
/// [`DoctorError::Undiagnosable`] for a memory error [`foreign::recognise`] names (llama.cpp's,
/// Text Generation Inference's, PyTorch's cudaMallocAsync message cut before its figures) when
/// neither is found; [`DoctorError::Unparseable`] when nothing is found, or PyTorch's message
/// cannot be read.
pub fn read(text: &str) -> Result<Reading> {
    match message::parse(text) {
        Ok(m) => Ok(Reading::Oom(m)),
        Err(e) => match serving::parse(text) {
            Some(s) => match s.impossible() {
                Some(reason) => Err(DoctorError::Unparseable { reason }),
                None => Ok(Reading::Serving(s)),
            },
            // No PyTorch message (or only the CUDA runtime's bare error, which ggml's CUDA
            // backend also prints) and no vLLM or SGLang error: another engine's, by its words.
            None if matches!(&e, DoctorError::Unparseable { reason }
                if reason == message::NO_MESSAGE || reason == message::CUDA_RUNTIME)
                && !serving::is_vram_own(text)
                && !serving::is_vram_estimate(text)
                && serving::named_engine(text).is_none() =>
            {
                match foreign::recognise(text) {
                    Some(f) => Err(DoctorError::Undiagnosable(f)),
                    None => Err(unfound(text, e)),
                }
            }
            None => Err(unfound(text, e)),
        },
    }
}

/// The refusal when nothing [`read`] knows is in `text`: PyTorch's parse error `e`, or, when it
/// found no message at all, what was looked for and what was there.
fn unfound(text: &str, e: DoctorError) -> DoctorError {
    match &e {
        DoctorError::Unparseable { reason } if reason == message::NO_MESSAGE => {
            DoctorError::Unparseable {
                reason: match serving::named_engine(text) {
                    _ if serving::unread_memory_error(text).is_some() => {
                        serving::unread_memory_error(text).unwrap_or_default()
                    }
                    _ if serving::named_refusal(text).is_some() => {
                        serving::named_refusal(text).unwrap_or_default()
                    }
                    _ if serving::is_vram_estimate(text) => "this is vram's own estimate of \
                         an out-of-memory failure (`vram capacity`), not an engine's message: \
                         the engine prints PyTorch's `CUDA out of memory. Tried to allocate ...` \
                         with its own figures there; paste that"
                        .to_string(),
                    _ if serving::is_vram_own(text) => "this is vram's own line (`vram \
                         capacity` refusing a configuration whose memory it does not model), \
                         not an engine's error: start the engine to see whether it fits"
                        .to_string(),
                    Some(engine) => format!(
                        "{engine}'s start-up memory error is there but its figures could not be \
                         read; paste its whole line"
                    ),
                    None => "no out-of-memory message found: neither PyTorch's (`CUDA out of \
                             memory. Tried to allocate ...`) nor a vLLM or SGLang start-up \
                             memory error"
                        .to_string(),
                },
            }
        }
        _ => e,
    }
}

/// Errors of the doctor; all of them are the user's input.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The out-of-memory message could not be read.
    #[error("cannot read the out-of-memory message: {reason}")]
    Unparseable {
        /// What was missing or malformed.
        reason: String,
    },
    /// A memory error recognised from its engine's own words that carries none of the figures
    /// the doctor reads ([`foreign::recognise`]): what it is, why, and what to paste or do.
    #[error("cannot diagnose {0}")]
    Undiagnosable(foreign::Foreign),
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
    /// An input beside the message holds nothing to read: a snapshot with no allocation
    /// history, a recording with no complete sample.
    #[error("{0}")]
    Input(String),
}

/// Result type of this crate.
pub type Result<T, E = DoctorError> = std::result::Result<T, E>;
