//! The exported C functions. Every one runs its body under
//! [`std::panic::catch_unwind`]; a panic becomes the function's error value
//! (null, -1) and its message is kept for [`vram_last_error`].
//!
//! ```c
//! void*   vram_malloc(ssize_t size, int device, cudaStream_t stream);
//! void    vram_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
//! int     vram_init(int device, const char* settings);     // before first use
//! ssize_t vram_memory_stats_json(int device, char* buf, size_t len);
//! ssize_t vram_memory_summary(int device, char* buf, size_t len);
//! int     vram_dump_snapshot(int device, const char* path);
//! int     vram_empty_cache(int device);
//! int     vram_tier_of(int device, void* ptr);             // 0 device, 1 host, 2 managed, 3 migrated
//! int     vram_reset_peak_stats(int device);
//! int64_t vram_phase_peak(int device);                     // planned tier: a phase ends
//! int64_t vram_driver_ns(int device);                      // driver time so far (timers)
//! ssize_t vram_plan(int device, const char* request, char* buf, size_t len);
//! ssize_t vram_last_error(char* buf, size_t len);
//! ```
//!
//! Text functions return the text's length in bytes (without the NUL);
//! they write it, NUL-terminated, only when `len` exceeds that length, so a
//! caller may ask with `len = 0` first. They return -1 on error.

#![allow(unsafe_code)] // The C boundary: exported symbols, C strings and buffers.

use crate::plugin::plugin;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `on_panic` and recording its message.
pub fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            // `set_error` cannot panic except on allocation failure, which aborts.
            plugin().set_error(format!("internal error (panic): {msg}"));
            on_panic
        }
    }
}

/// Allocates `size` bytes on `device` for use on `stream`. Returns null when
/// no tier can hold it (PyTorch then raises `OutOfMemoryError`) or on error;
/// see [`vram_last_error`].
#[no_mangle]
pub extern "C" fn vram_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    let raw_stream = stream as usize;
    guard(std::ptr::null_mut(), || {
        let p = plugin();
        let Ok(size) = u64::try_from(size) else {
            p.set_error(format!("negative size {size}"));
            return std::ptr::null_mut();
        };
        let b = match p.backend(device) {
            Ok(b) => b,
            Err(e) => {
                p.set_error(e);
                return std::ptr::null_mut();
            }
        };
        let start = b.timers().start_sampled();
        let sid = p.stream_id(device, b, raw_stream);
        let r = match b.malloc(size, sid) {
            Ok(a) => a as usize as *mut c_void,
            Err(e) => {
                p.set_error(e);
                std::ptr::null_mut()
            }
        };
        b.timers().stop(vram_tier::Timer::FfiMalloc, start);
        r
    })
}

/// Frees `ptr` from [`vram_malloc`]. Errors (an unknown pointer) are kept for
/// [`vram_last_error`]; nothing is returned because PyTorch expects nothing.
#[no_mangle]
pub extern "C" fn vram_free(ptr: *mut c_void, size: isize, device: c_int, stream: *mut c_void) {
    let (addr, _size, _stream) = (ptr as usize as u64, size, stream);
    guard((), || {
        if addr == 0 {
            return;
        }
        let p = plugin();
        match p.backend(device).map_err(|e| e.to_string()) {
            Ok(b) => {
                let start = b.timers().start_sampled();
                if let Err(e) = b.free(addr) {
                    p.set_error(e);
                }
                b.timers().stop(vram_tier::Timer::FfiFree, start);
            }
            Err(e) => p.set_error(e),
        }
    })
}

/// Reads a NUL-terminated string.
///
/// # Safety
/// `s` is null or points to a NUL-terminated string valid for reads.
unsafe fn read_str<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// Copies `text` and a NUL into `buf` when it fits; returns the text length.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
unsafe fn write_text(text: &str, buf: *mut c_char, len: usize) -> isize {
    let n = text.len();
    if !buf.is_null() && len > n {
        // SAFETY: `buf` is valid for `len > n` bytes (caller's contract);
        // `text` is a separate Rust allocation, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    isize::try_from(n).unwrap_or(isize::MAX)
}

/// Configures `device` before its first allocation with `KEY=VALUE` pairs
/// separated by `;` (the `VRAM_*` variables; they override the
/// environment). Returns 0, or -1 (invalid setting, already in use).
///
/// # Safety
/// `settings` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vram_init(device: c_int, settings: *const c_char) -> c_int {
    // SAFETY: forwarded caller contract.
    let s = unsafe { read_str(settings) }.unwrap_or("").to_string();
    guard(-1, || match plugin().init(device, &s) {
        Ok(()) => 0,
        Err(e) => {
            plugin().set_error(e);
            -1
        }
    })
}

/// Runs `f` on `device`'s allocator; `None` (error recorded) when it is unusable.
fn with_backend<R>(device: c_int, f: impl FnOnce(&crate::Backend) -> R) -> Option<R> {
    let p = plugin();
    match p.backend(device) {
        Ok(b) => Some(f(b)),
        Err(e) => {
            p.set_error(e);
            None
        }
    }
}

/// `torch.cuda.memory_stats()` of `device` as a JSON object: PyTorch's keys
/// (`allocated_bytes.all.current`, `num_ooms`, ...) for the device tier,
/// plus `host.*`, `managed.*`, `raw.*`, `num_spills`, ... (see
/// `vram_tier::TierStats::to_map`).
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vram_memory_stats_json(
    device: c_int,
    buf: *mut c_char,
    len: usize,
) -> isize {
    let text = guard(None, || {
        with_backend(device, |b| {
            serde_json::to_string(&b.stats().to_map()).unwrap_or_default()
        })
    });
    // SAFETY: forwarded caller contract.
    text.map_or(-1, |t| unsafe { write_text(&t, buf, len) })
}

/// `torch.cuda.memory_summary()` of `device`, with a line per tier.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vram_memory_summary(device: c_int, buf: *mut c_char, len: usize) -> isize {
    let text = guard(None, || with_backend(device, |b| b.summary()));
    // SAFETY: forwarded caller contract.
    text.map_or(-1, |t| unsafe { write_text(&t, buf, len) })
}

/// Writes `device`'s snapshot pickle (open it at pytorch.org/memory_viz) to
/// `path`. Returns 0 or -1.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn vram_dump_snapshot(device: c_int, path: *const c_char) -> c_int {
    // SAFETY: forwarded caller contract.
    let Some(path) = (unsafe { read_str(path) }).map(str::to_string) else {
        plugin().set_error("vram_dump_snapshot: path is null or not UTF-8");
        return -1;
    };
    guard(-1, || {
        let Some(bytes) = with_backend(device, |b| b.snapshot_pickle()) else {
            return -1;
        };
        match std::fs::write(&path, bytes) {
            Ok(()) => 0,
            Err(source) => {
                plugin().set_error(crate::PluginError::Io { path, source });
                -1
            }
        }
    })
}

/// Returns cached device blocks and freed host blocks (`torch.cuda.empty_cache()`).
#[no_mangle]
pub extern "C" fn vram_empty_cache(device: c_int) -> c_int {
    guard(-1, || {
        with_backend(device, |b| b.empty_cache()).map_or(-1, |()| 0)
    })
}

/// Marks the end of a training step on `device` (`vramkit.torch.step()`):
/// allocations alive across marks become candidates for host memory under
/// pressure, and moved ones come back when the last step's transient need
/// fits. Returns the bytes brought back, or -1 on error.
#[no_mangle]
pub extern "C" fn vram_step(device: c_int) -> i64 {
    guard(-1, || {
        with_backend(device, |b| b.mark_step() as i64).unwrap_or(-1)
    })
}

/// The highest allocated bytes on `device` since the last call (the planned tier calls it at
/// each phase boundary of the step it records), or -1 on error.
#[no_mangle]
pub extern "C" fn vram_phase_peak(device: c_int) -> i64 {
    guard(-1, || {
        with_backend(device, |b| {
            i64::try_from(b.take_phase_peak()).unwrap_or(i64::MAX)
        })
        .unwrap_or(-1)
    })
}

/// The nanoseconds the allocator of `device` has spent in driver calls so far (device maps,
/// unmaps, migrations, host allocations, synchronisations; `timer.device.*` and `timer.host.*`
/// together), or -1 on error; 0 with `VRAM_TIMERS=0`. The planned tier reads it at each phase
/// boundary of the step it records, so that a phase's compute excludes the time the allocator
/// held the caller (the GPU idles then: host issue time equalled GPU time in the 2026-11-28
/// H200 run's capped loops).
#[no_mangle]
pub extern "C" fn vram_driver_ns(device: c_int) -> i64 {
    guard(-1, || {
        with_backend(device, |b| {
            i64::try_from(b.timers().driver_ns()).unwrap_or(i64::MAX)
        })
        .unwrap_or(-1)
    })
}

/// Plans a recorded step for `device` (`request`: JSON, `vram_tier::plan::Request`) and
/// writes the answer (JSON: the decision and the floor) into `buf` when `len` exceeds its
/// length; returns the length, or -1 on error. With `request` null it returns the last
/// answer again (for a caller whose buffer was too small). The decision is kept for
/// `memory_stats()` (`tier.plan.*`).
///
/// # Safety
/// `request` is null or a NUL-terminated string; `buf` is null or valid for writes of `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn vram_plan(
    device: c_int,
    request: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> isize {
    // SAFETY: forwarded caller contract.
    let req = unsafe { read_str(request) }.map(str::to_string);
    let text = guard(None, || {
        let p = plugin();
        let slot = match p.slot(device) {
            Ok(s) => s,
            Err(e) => {
                p.set_error(e);
                return None;
            }
        };
        let Some(req) = req else {
            return Some(crate::plugin::lock(&slot.answer).clone());
        };
        match with_backend(device, |b| b.plan(&req)) {
            Some(Ok(a)) => {
                *crate::plugin::lock(&slot.answer) = a.clone();
                Some(a)
            }
            Some(Err(e)) => {
                p.set_error(e);
                None
            }
            None => None,
        }
    });
    // SAFETY: forwarded caller contract.
    text.map_or(-1, |t| unsafe { write_text(&t, buf, len) })
}

/// Resets every peak statistic of `device`.
#[no_mangle]
pub extern "C" fn vram_reset_peak_stats(device: c_int) -> c_int {
    guard(-1, || {
        with_backend(device, |b| b.reset_peak_stats()).map_or(-1, |()| 0)
    })
}

/// Where `ptr` (from [`vram_malloc`]) lives: 0 device, 1 pinned host
/// memory, 2 managed memory, 3 a device allocation whose pages the host tier
/// moved to host memory at the same addresses; -1 when unknown or on error.
/// In caching mode any other address reports 0.
#[no_mangle]
pub extern "C" fn vram_tier_of(device: c_int, ptr: *mut c_void) -> c_int {
    let addr = ptr as usize as u64;
    guard(-1, || {
        with_backend(device, |b| b.tier_code(addr)).unwrap_or(-1)
    })
}

/// The last error's text (empty when none).
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vram_last_error(buf: *mut c_char, len: usize) -> isize {
    let text = guard(String::new(), || {
        plugin()
            .last_error
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    });
    // SAFETY: forwarded caller contract.
    unsafe { write_text(&text, buf, len) }
}

/// For tests of the C boundary: panics inside the guard and returns -1.
#[no_mangle]
pub extern "C" fn vram_selftest_panic() -> c_int {
    guard(-1, || -> c_int { panic!("vram_selftest_panic") })
}
