//! The crate's one error type.

use crate::device::DeviceError;
use std::fmt;

/// Everything that can go wrong in `vram-alloc`.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// The allocator could not satisfy a request even after releasing every
    /// cached block (or the per-process cap forbids growing).
    #[error("{0}")]
    OutOfMemory(Box<OomInfo>),
    /// The device failed for a reason other than running out of memory
    /// (including injected faults).
    #[error("device error: {0}")]
    Device(#[from] DeviceError),
    /// `free` or `record_stream` was given an address the allocator did not hand out.
    #[error("address {addr:#x} is not an active allocation")]
    InvalidAddress {
        /// The address passed in.
        addr: u64,
    },
    /// Streams are numbered 0..=65535.
    #[error("stream {stream} is out of range (streams are 0..=65535)")]
    InvalidStream {
        /// The stream passed in.
        stream: u32,
    },
    /// A configuration value is out of range.
    #[error("invalid allocator configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A pickle could not be decoded (truncated, malformed, or not allowed).
    #[error("pickle error at byte {offset}: {reason}")]
    Pickle {
        /// Byte offset of the opcode that failed.
        offset: usize,
        /// What went wrong.
        reason: String,
    },
    /// A decoded pickle is not a memory snapshot of the expected shape.
    #[error("not a memory snapshot: {reason}")]
    Snapshot {
        /// What is missing or has the wrong type.
        reason: String,
    },
    /// A replay event sequence is inconsistent (e.g. an id allocated twice).
    #[error("invalid trace: {reason}")]
    Trace {
        /// What is inconsistent.
        reason: String,
    },
}

impl AllocError {
    /// True for errors caused by bad input data (pickles, snapshots, traces,
    /// configuration) rather than by the allocator or device.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            AllocError::Pickle { .. }
                | AllocError::Snapshot { .. }
                | AllocError::Trace { .. }
                | AllocError::InvalidConfig { .. }
                | AllocError::InvalidStream { .. }
        )
    }
}

/// What an out-of-memory error knows: what was asked, what was free, what the
/// allocator held, and what would help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomInfo {
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Bytes after the policy's rounding.
    pub rounded: u64,
    /// Stream the request was made on.
    pub stream: u32,
    /// Device capacity in bytes.
    pub device_total: u64,
    /// Device bytes not in use by anyone, as the device reported them.
    pub device_free: u64,
    /// Bytes this allocator has handed out.
    pub allocated: u64,
    /// Bytes this allocator holds from the device.
    pub reserved: u64,
    /// The per-process cap in bytes, when one is set.
    pub cap: Option<u64>,
}

impl OomInfo {
    /// Reserved bytes not handed out (cached, fragmented).
    pub fn reserved_unallocated(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }

    /// A one-sentence suggestion of what would help.
    pub fn hint(&self) -> &'static str {
        let unalloc = self.reserved_unallocated();
        if self.cap.is_some_and(|c| self.reserved + self.rounded > c)
            && self.device_free >= self.rounded
        {
            "the per-process memory cap is the limit; raise it"
        } else if unalloc >= self.rounded {
            "reserved but unallocated memory exceeds the request: fragmentation; try expandable segments or max_split_size"
        } else {
            "the working set does not fit; reduce batch size, use activation checkpointing, or free tensors earlier"
        }
    }
}

fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

impl fmt::Display for OomInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory: tried to allocate {} (rounded to {}) on stream {}; device has {} total, {} free; \
             this allocator has {} reserved, {} allocated, {} reserved but unallocated",
            human(self.requested),
            human(self.rounded),
            self.stream,
            human(self.device_total),
            human(self.device_free),
            human(self.reserved),
            human(self.allocated),
            human(self.reserved_unallocated()),
        )?;
        if let Some(c) = self.cap {
            write!(f, "; per-process cap {}", human(c))?;
        }
        write!(f, "; hint: {}", self.hint())
    }
}
