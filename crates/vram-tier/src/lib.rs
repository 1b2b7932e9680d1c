//! `vram-tier`: GPU memory first, host memory instead of out-of-memory.
//!
//! [`TieredAllocator`] puts every request on the device through a
//! [`vram_alloc::CachingAllocator`] (or, in [`Mode::Raw`], straight from the
//! device, for `torch.cuda.MemPool`). When the device — or a configured cap,
//! [`CappedDevice`] — cannot hold it, the request goes, by the [`TierConfig`]
//! policy, to
//!
//! 1. **managed memory** (opt-in, [`TierConfig::managed_limit`]), only when the
//!    device reports at least the request free (asking for more can hang a
//!    shared GPU), then
//! 2. **pinned, device-mapped host memory** ([`HostMemory::alloc_pinned`],
//!    `cuMemHostAlloc(DEVICEMAP)`), for requests of at least
//!    [`TierConfig::spill_min`] bytes while the host tier stays under
//!    [`TierConfig::host_limit`],
//!
//! and only then fails with [`vram_alloc::AllocError::OutOfMemory`].
//!
//! **Bringing memory back.** A live allocation is never moved: its address is
//! held by the caller (a PyTorch tensor), so moving it would be unsafe.
//! Memory comes back to the device in the way that is safe: host blocks are
//! returned to the driver as soon as they are freed and the work queued on
//! their stream has finished (an event guards each), they are never cached,
//! and every new request tries the device first — so once room returns, new
//! tensors land on the device again. Managed blocks are advised to prefer the
//! device, so the driver migrates their pages back by itself. A caller that
//! owns the pointers can move a block back itself: copy it into a new
//! allocation (which tries the device first) and free the old one —
//! `vramkit.torch.rebalance()` does this for PyTorch tensors.
//!
//! [`SimHost`] is the always-compiled simulated host tier; `vram-cuda`
//! provides the CUDA one.
//!
//! ```
//! use vram_alloc::SimDevice;
//! use vram_tier::{SimHost, Tier, TierConfig, TieredAllocator};
//! let cfg = TierConfig { device_limit: Some(64 << 20), host_limit: 1 << 30, ..TierConfig::default() };
//! let t = TieredAllocator::new(SimDevice::new(1 << 30), SimHost::new(4 << 30), cfg)?;
//! let a = t.malloc(48 << 20, 0)?;              // fits under the 64 MiB cap: device
//! let b = t.malloc(48 << 20, 0)?;              // does not: pinned host memory
//! assert_eq!(t.tier_of(a), Some(Tier::Device));
//! assert_eq!(t.tier_of(b), Some(Tier::Host));
//! assert_eq!(t.stats().host.current_bytes, 48 << 20);
//! t.free(b)?;
//! t.free(a)?;
//! # Ok::<(), vram_tier::TierError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod capped;
mod config;
mod error;
mod host;
pub mod plan;
mod tiered;
pub mod timers;

pub use capped::CappedDevice;
pub use config::{parse_size, Mode, TierConfig};
pub use error::TierError;
pub use host::{HostMemory, SimHost};
pub use tiered::{PlanStats, Tier, TierCounters, TierStats, TieredAllocator};
pub use timers::{Timer, TimerStat, Timers};
