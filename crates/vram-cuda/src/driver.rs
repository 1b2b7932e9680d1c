//! The only module that touches the CUDA driver: thin wrappers over
//! `cudarc::driver::sys`, each returning `Result`.
//!
//! Contract of the module: [`load`] must have succeeded before any other
//! function here is called. It checks that the driver library loads and that
//! it exports every symbol listed in [`SYMBOLS`], so that cudarc's lazy symbol
//! loader (which panics on a missing library or symbol) never panics.
//! Handles (contexts, streams, events) are kept as integers outside this
//! module so that the types using them stay `Send` without `unsafe impl`.
//! No Rust reference ever points into device or pinned memory.

#![allow(unsafe_code)] // The one module that calls the driver.

use crate::error::CudaError;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Every driver symbol this crate calls.
pub(crate) const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemGetAllocationGranularity",
    "cuMemcpyDtoD_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuMemAllocManaged",
    "cuMemAdvise",
    "cuMemPrefetchAsync",
];

/// Result of loading: `Ok` once the library and all symbols were found and
/// `cuInit` succeeded.
static LOADED: OnceLock<Result<(), CudaError>> = OnceLock::new();

/// Whether an NVIDIA driver library can be loaded, without initializing it.
pub(crate) fn library_present() -> bool {
    find_library().is_ok()
}

fn find_library() -> Result<libloading::Library, CudaError> {
    let names = cudarc::get_lib_name_candidates("cuda");
    for name in &names {
        // SAFETY: loading the NVIDIA driver library runs its initialisers,
        // which have no preconditions on this process; it is the library
        // cudarc itself would load, found by the same candidate names in the
        // same order.
        if let Ok(lib) = unsafe { libloading::Library::new(name) } {
            return Ok(lib);
        }
    }
    Err(CudaError::NoDriver { tried: names })
}

/// Loads the driver (once per process), checks every symbol in [`SYMBOLS`]
/// and calls `cuInit(0)`.
pub(crate) fn load() -> Result<(), CudaError> {
    LOADED
        .get_or_init(|| {
            let lib = find_library()?;
            for &name in SYMBOLS {
                // SAFETY: the symbol is only looked up, never called, through
                // this pointer type.
                let sym = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
                if sym.is_err() {
                    return Err(CudaError::MissingSymbol { name });
                }
            }
            // Keep the library loaded for the life of the process (cudarc
            // holds its own handle to the same library).
            std::mem::forget(lib);
            // SAFETY: the library and `cuInit` are present (checked above).
            check("cuInit", unsafe { sys::cuInit(0) })
        })
        .clone()
}

/// Turns a driver status into a `Result`.
pub(crate) fn check(call: &'static str, r: sys::CUresult) -> Result<(), CudaError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Driver {
            call,
            code: format!("{r:?}"),
            out_of_memory: r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        })
    }
}

/// A device ordinal's primary context, retained for the life of the value.
#[derive(Debug)]
pub(crate) struct Context {
    ctx: usize,
    dev: sys::CUdevice,
}

/// Restores the thread's previous current context when dropped.
pub(crate) struct Bound {
    previous: Option<usize>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(p) = self.previous {
            // SAFETY: `p` was the thread's current context (or null) when the
            // guard was made; setting it back cannot fail in a way we could
            // act on, so the status is ignored (Drop must not panic).
            let _ = unsafe { sys::cuCtxSetCurrent(p as sys::CUcontext) };
        }
    }
}

impl Context {
    /// Retains the primary context of device `ordinal` (the one the CUDA
    /// runtime, and so PyTorch, uses).
    pub(crate) fn primary(ordinal: i32) -> Result<Context, CudaError> {
        load()?;
        let mut count = 0;
        // SAFETY: `load` succeeded; the out-pointer is a live local.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        if ordinal < 0 || ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let mut dev = 0;
        // SAFETY: as above.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: as above; `dev` is a valid device from `cuDeviceGet`.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        Ok(Context {
            ctx: ctx as usize,
            dev,
        })
    }

    /// The device handle.
    pub(crate) fn device(&self) -> sys::CUdevice {
        self.dev
    }

    /// Makes this context current on the calling thread until the guard drops.
    pub(crate) fn bind(&self) -> Result<Bound, CudaError> {
        let mut cur = std::ptr::null_mut();
        // SAFETY: `load` succeeded (a Context exists); out-pointer is a local.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
        if cur as usize == self.ctx {
            return Ok(Bound { previous: None });
        }
        // SAFETY: `self.ctx` is a retained primary context.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.ctx as sys::CUcontext)
        })?;
        Ok(Bound {
            previous: Some(cur as usize),
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was retained in `primary`; the status is
        // ignored because Drop must not panic and nothing can be done.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
    }
}

fn location(dev: sys::CUdevice) -> sys::CUmemLocation {
    // SAFETY: CUmemLocation is a plain C struct for which all-zero bytes
    // are a valid value.
    let mut l: sys::CUmemLocation = unsafe { std::mem::zeroed() };
    l.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    l.id = dev;
    l
}

fn pinned_prop(dev: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct; all-zero is its documented default (no
    // handle types, no flags, null Windows metadata).
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = location(dev);
    p
}

fn host_prop() -> sys::CUmemAllocationProp {
    // SAFETY: as in `pinned_prop`.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    // Host memory of the calling process (id 0, as probed on an H100 with
    // driver 580: `CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT` was refused there).
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
    p
}

/// `cuMemCreate` of `size` bytes on the device (`host` false) or in host
/// memory (`host` true, `CU_MEM_LOCATION_TYPE_HOST`); returns the handle.
pub(crate) fn create(dev: sys::CUdevice, size: u64, host: bool) -> Result<u64, CudaError> {
    let prop = if host { host_prop() } else { pinned_prop(dev) };
    let mut h = 0;
    // SAFETY: pointers are live locals.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut h, size as usize, &prop, 0)
    })?;
    Ok(h)
}

/// Maps the whole of handle `h` (`size` bytes) at `addr` (`cuMemMap`).
pub(crate) fn map(addr: u64, size: u64, h: u64) -> Result<(), CudaError> {
    // SAFETY: the driver validates the handle and that `addr` lies in a
    // reservation with nothing mapped there.
    check("cuMemMap", unsafe {
        sys::cuMemMap(addr, size as usize, 0, h, 0)
    })
}

/// `cuMemUnmap` of one whole mapping.
///
/// # Safety
/// No queued or future device work uses the range.
pub(crate) unsafe fn unmap(addr: u64, size: u64) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuMemUnmap", unsafe {
        sys::cuMemUnmap(addr, size as usize)
    })
}

/// `cuMemRelease` of a handle that is mapped nowhere.
///
/// # Safety
/// The handle is not mapped.
pub(crate) unsafe fn release(h: u64) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuMemRelease", unsafe { sys::cuMemRelease(h) })
}

/// `cuMemcpyDtoD` of `size` bytes (synchronous with respect to the host for
/// device-to-device copies only once the context is synchronized; callers
/// synchronize).
///
/// # Safety
/// Both ranges are mapped and accessible, and nothing else writes them.
pub(crate) unsafe fn memcpy_dtod(dst: u64, src: u64, size: u64) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoD", unsafe {
        sys::cuMemcpyDtoD_v2(dst, src, size as usize)
    })
}

/// `cuMemcpyHtoD`: copies `data` to device memory at `dst` (synchronous).
///
/// # Safety
/// `[dst, dst + data.len())` is mapped and accessible, and nothing else uses it meanwhile.
pub(crate) unsafe fn memcpy_htod(dst: u64, data: &[u8]) -> Result<(), CudaError> {
    // SAFETY: `data` is a live slice of `data.len()` bytes; the device range is the caller's.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst, data.as_ptr().cast(), data.len())
    })
}

/// `cuMemcpyDtoH`: copies `len` bytes at `src` to the host (synchronous).
///
/// # Safety
/// `[src, src + len)` is mapped and accessible, and nothing writes it meanwhile.
pub(crate) unsafe fn memcpy_dtoh(src: u64, len: usize) -> Result<Vec<u8>, CudaError> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` is a live buffer of `len` bytes; the device range is the caller's.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, len)
    })?;
    Ok(out)
}

/// `cuMemGetAllocationGranularity` (minimum) for pinned device memory.
pub(crate) fn granularity(dev: sys::CUdevice) -> Result<u64, CudaError> {
    let prop = pinned_prop(dev);
    let mut g = 0usize;
    // SAFETY: both pointers are live locals.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    Ok(g as u64)
}

/// `cuMemGetInfo`: `(free, total)` of the current context's device.
pub(crate) fn mem_info() -> Result<(u64, u64), CudaError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both pointers are live locals.
    check("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free as u64, total as u64))
}

/// `cuMemAlloc`.
pub(crate) fn mem_alloc(size: u64) -> Result<u64, CudaError> {
    let mut p = 0;
    // SAFETY: the out-pointer is a live local.
    check("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(&mut p, size as usize)
    })?;
    Ok(p)
}

/// `cuMemFree`.
///
/// # Safety
/// `addr` came from [`mem_alloc`] and no queued or future device work uses it.
pub(crate) unsafe fn mem_free(addr: u64) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees the allocation is no longer used; the
    // driver validates the address itself.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(addr) })
}

/// `cuCtxSynchronize`: waits for all work in the current context.
pub(crate) fn synchronize() -> Result<(), CudaError> {
    // SAFETY: no arguments; `load` succeeded.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}

/// `cuMemAddressReserve` of `size` bytes aligned to `align`.
pub(crate) fn address_reserve(size: u64, align: u64) -> Result<u64, CudaError> {
    let mut p = 0;
    // SAFETY: the out-pointer is a live local; no fixed address is asked for.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut p, size as usize, align as usize, 0, 0)
    })?;
    Ok(p)
}

/// `cuMemAddressFree`.
///
/// # Safety
/// `[addr, addr+size)` is a whole reservation with nothing mapped in it.
pub(crate) unsafe fn address_free(addr: u64, size: u64) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller; the driver validates the range.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(addr, size as usize)
    })
}

/// Creates `size` bytes of physical memory on `dev` (`cuMemCreate`) and
/// maps it at `addr` (`cuMemMap`); returns the allocation handle. Access
/// must then be granted with [`set_access`]. On failure nothing stays
/// mapped or allocated.
pub(crate) fn create_and_map(dev: sys::CUdevice, addr: u64, size: u64) -> Result<u64, CudaError> {
    let prop = pinned_prop(dev);
    let mut h = 0;
    // SAFETY: pointers are live locals.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut h, size as usize, &prop, 0)
    })?;
    // SAFETY: `addr` lies in a reservation (checked by the caller against its
    // own records; the driver validates too) and `h` is a fresh handle.
    if let Err(e) = check("cuMemMap", unsafe {
        sys::cuMemMap(addr, size as usize, 0, h, 0)
    }) {
        // SAFETY: `h` is unmapped and owned here.
        let _ = unsafe { sys::cuMemRelease(h) };
        return Err(e);
    }
    Ok(h)
}

/// Makes `[addr, addr+size)`, mapped by one or more [`create_and_map`]
/// calls, readable and writable from `dev` (`cuMemSetAccess`, one call for
/// the whole range, as PyTorch's expandable segments do).
pub(crate) fn set_access(dev: sys::CUdevice, addr: u64, size: u64) -> Result<(), CudaError> {
    let desc = sys::CUmemAccessDesc {
        location: location(dev),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: `desc` is a live local, count 1; the driver validates the range.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(addr, size as usize, &desc, 1)
    })
}

/// Unmaps `[addr, addr+size)` (`cuMemUnmap`) and releases its handle (`cuMemRelease`).
///
/// # Safety
/// The range was mapped whole by [`create_and_map`] with `handle`, and no
/// queued or future device work uses it.
pub(crate) unsafe fn unmap_and_release(addr: u64, size: u64, handle: u64) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuMemUnmap", unsafe {
        sys::cuMemUnmap(addr, size as usize)
    })?;
    // SAFETY: the handle is no longer mapped anywhere.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuEventCreate` without timing.
pub(crate) fn event_create() -> Result<usize, CudaError> {
    let mut e = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
    })?;
    Ok(e as usize)
}

/// `cuEventRecord` on a stream (0: the legacy default stream).
///
/// # Safety
/// `event` came from [`event_create`] and is not destroyed; `stream` is 0 or
/// a live stream of the current context.
pub(crate) unsafe fn event_record(event: usize, stream: usize) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuEventRecord", unsafe {
        sys::cuEventRecord(event as sys::CUevent, stream as sys::CUstream)
    })
}

/// `cuEventQuery`: `Ok(true)` when complete, `Ok(false)` when not ready.
///
/// # Safety
/// `event` came from [`event_create`] and is not destroyed.
pub(crate) unsafe fn event_query(event: usize) -> Result<bool, CudaError> {
    // SAFETY: guaranteed by the caller.
    let r = unsafe { sys::cuEventQuery(event as sys::CUevent) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuEventQuery", r).map(|()| true)
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `event` came from [`event_create`] and is not destroyed.
pub(crate) unsafe fn event_synchronize(event: usize) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(event as sys::CUevent)
    })
}

/// `cuEventDestroy`.
///
/// # Safety
/// `event` came from [`event_create`] and is not used again.
pub(crate) unsafe fn event_destroy(event: usize) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuEventDestroy", unsafe {
        sys::cuEventDestroy_v2(event as sys::CUevent)
    })
}

/// `cuMemHostAlloc(PORTABLE | DEVICEMAP)` then `cuMemHostGetDevicePointer`:
/// returns `(device pointer, host pointer)`.
pub(crate) fn host_alloc_mapped(size: u64) -> Result<(u64, usize), CudaError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // SAFETY: the out-pointer is a live local.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, size as usize, flags)
    })?;
    let mut d = 0;
    // SAFETY: `p` was just allocated with DEVICEMAP.
    if let Err(e) = check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0)
    }) {
        // SAFETY: `p` is ours and unused.
        let _ = unsafe { sys::cuMemFreeHost(p) };
        return Err(e);
    }
    Ok((d, p as usize))
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `host` came from [`host_alloc_mapped`] and no device work uses it.
pub(crate) unsafe fn host_free(host: usize) -> Result<(), CudaError> {
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeHost", unsafe {
        sys::cuMemFreeHost(host as *mut c_void)
    })
}

/// `cuMemAllocManaged(ATTACH_GLOBAL)`, advised to prefer and be accessed by
/// `dev`, and prefetched there. Advice and prefetch failures (platforms
/// without concurrent managed access) are ignored: they are hints.
pub(crate) fn managed_alloc(dev: sys::CUdevice, size: u64) -> Result<u64, CudaError> {
    let mut d = 0;
    // SAFETY: the out-pointer is a live local.
    check("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(
            &mut d,
            size as usize,
            sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        )
    })?;
    // SAFETY: `[d, d+size)` is the managed allocation just made; advice and
    // prefetch do not change its contents.
    unsafe {
        let _ = sys::cuMemAdvise(
            d,
            size as usize,
            sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            dev,
        );
        let _ = sys::cuMemAdvise(
            d,
            size as usize,
            sys::CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY,
            dev,
        );
        let _ = sys::cuMemPrefetchAsync(d, size as usize, dev, std::ptr::null_mut());
    }
    Ok(d)
}
