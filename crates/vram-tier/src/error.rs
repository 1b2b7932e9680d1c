//! The crate's one error type.

use vram_alloc::{AllocError, DeviceError};

/// Everything that can go wrong in `vram-tier`.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// The device tier failed (out of memory with no tier to spill to, a
    /// device error, an address it did not hand out).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The host or managed tier's memory call failed.
    #[error("host tier: {0}")]
    Host(DeviceError),
    /// A configuration value (usually from an environment variable) is invalid.
    #[error("invalid configuration: {name}={value:?}: {reason}")]
    Config {
        /// The setting, e.g. `VRAM_DEVICE_LIMIT`.
        name: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl TierError {
    /// True when the request failed for lack of memory in every tier.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, TierError::Alloc(AllocError::OutOfMemory(_)))
    }
}
