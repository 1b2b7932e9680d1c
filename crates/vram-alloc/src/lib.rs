//! `vram-alloc`: a caching GPU allocator core, proven on a simulated device.
//!
//! - [`Device`] is device memory as an allocator sees it (segments, virtual
//!   ranges mapped at a granularity, events); [`SimDevice`] is an
//!   always-compiled deterministic implementation with fault injection.
//! - [`CachingAllocator`] is a thread-safe caching allocator: 512-byte
//!   rounding, small (≤ 1 MiB) and large pools, best fit with splitting and
//!   coalescing, per-stream pools with event-guarded cross-stream reuse,
//!   oversize handling (`max_split_size`), release-and-retry before
//!   out-of-memory, a garbage-collection threshold, a per-process cap, and
//!   expandable segments. [`Policy::PyTorch`] reimplements PyTorch's default
//!   `CUDACachingAllocator`; [`Policy::Vramkit`] is this crate's better policy.
//! - [`MemoryStats`] carries PyTorch's `memory_stats()` keys and renders
//!   `memory_summary()`; out-of-memory is an [`AllocError::OutOfMemory`] value.
//! - [`Snapshot`] writes and (safely) reads `torch.cuda.memory._snapshot()`
//!   pickles; [`replay`] drives alloc/free [`Event`]s through any policy.
//!
//! ```
//! use vram_alloc::{replay, synthetic, AllocatorConfig, Policy};
//! let m = &synthetic::presets()[0];
//! let events = synthetic::training_events(m, 2);
//! let base = replay::replay(&events, &AllocatorConfig::new(Policy::PyTorch), None)?;
//! let ours = replay::replay(&events, &AllocatorConfig::new(Policy::Vramkit), None)?;
//! assert!(ours.peak_reserved_bytes <= base.peak_reserved_bytes);
//! # Ok::<(), vram_alloc::AllocError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod allocator;
pub mod device;
mod error;
mod freeindex;
pub mod pickle;
pub mod policy;
pub mod replay;
pub mod snapshot;
pub mod stats;
pub mod synthetic;

pub use allocator::{CachingAllocator, MAX_REQUEST};
pub use device::{Device, DeviceCalls, DeviceError, Location, SimDevice};
pub use error::{AllocError, OomInfo};
pub use policy::{AllocatorConfig, Policy};
pub use replay::{Event, PolicyResult};
pub use snapshot::Snapshot;
pub use stats::MemoryStats;
