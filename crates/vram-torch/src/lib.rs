//! `vram-torch`: vramkit inside PyTorch.
//!
//! A `cdylib` (`libvram_torch.so`) exporting the two functions
//! `torch.cuda.memory.CUDAPluggableAllocator` loads —
//! `void* vram_malloc(ssize_t size, int device, cudaStream_t stream)` and
//! `void vram_free(void* ptr, ssize_t size, int device, cudaStream_t stream)` —
//! and C functions for what PyTorch's pluggable path lacks: statistics under
//! PyTorch's `memory_stats()` keys as JSON ([`ffi::vram_memory_stats_json`]),
//! the `memory_summary()` text, a snapshot pickle for
//! pytorch.org/memory_viz, `empty_cache`, `reset_peak_stats`, and
//! [`ffi::vram_step`] (end of a training step, for the host tier).
//!
//! Each device ordinal gets a [`vram_tier::TieredAllocator`] on first use,
//! configured from environment variables, or from [`ffi::vram_init`]'s
//! settings string, which takes precedence:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `VRAM_BACKEND` | `cuda`, or `sim` (a simulated device, for tests) | `cuda` |
//! | `VRAM_DEVICE_LIMIT` | behave like a device of this size, e.g. `8GiB` | whole device |
//! | `VRAM_HOST_LIMIT` | host tier used when the device is full: cold blocks moved there at the same addresses, then new requests spilled | `0` (off) |
//! | `VRAM_MIGRATE` | `1`: under pressure move long-lived blocks (optimizer states, then weights) to host memory at the same addresses before spilling new ones; back at [`ffi::vram_step`] marks when room returns | `1` |
//! | `VRAM_SPILL_MIN` | smallest request that may spill to the host | `0` |
//! | `VRAM_MANAGED_LIMIT` | opt-in managed-memory tier | `0` (off) |
//! | `VRAM_EXPANDABLE` | `1`: expandable segments (vramkit policy); `0`: fixed segments | `1` |
//! | `VRAM_POLICY` | `vramkit`, `pytorch`, `pytorch-expandable` | |
//! | `VRAM_MODE` | `caching`, or `raw` whole segments for `torch.cuda.MemPool` | `caching` |
//! | `VRAM_HISTORY` | history entries kept for snapshots | `0` |
//! | `VRAM_TRIM_SLACK` | vramkit policy's tolerated cached fraction before unmapping (`inf`: only under pressure) | `inf` |
//! | `VRAM_SIM_CAPACITY` | simulated device size (`sim` only) | `16GiB` |
//!
//! No panic crosses the C boundary (each export runs under
//! `catch_unwind`); out of memory in every tier returns a null pointer, so
//! PyTorch raises its usual `OutOfMemoryError`; the last error's text is
//! kept for [`ffi::vram_last_error`].
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod ffi;
mod plugin;

pub use plugin::{settings_from, Backend, PluginError};
