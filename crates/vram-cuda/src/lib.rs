//! `vram-cuda`: real GPU memory for `vram-alloc` and `vram-tier`.
//!
//! [`CudaDevice`] implements [`vram_alloc::Device`] with the CUDA driver API:
//! segments with `cuMemAlloc`/`cuMemFree`; expandable ranges with
//! `cuMemAddressReserve`, physical pages of `cuMemGetAllocationGranularity`
//! bytes from `cuMemCreate`, `cuMemMap` and `cuMemSetAccess` (one handle per
//! granule, so any granule-aligned sub-range can be unmapped, as
//! `cuMemUnmap` requires whole mappings); events with
//! `cuEventCreate`/`cuEventRecord`/`cuEventQuery`/`cuEventSynchronize`;
//! free/total from `cuMemGetInfo`. [`CudaHost`] implements
//! [`vram_tier::HostMemory`] with `cuMemHostAlloc(DEVICEMAP)` and
//! `cuMemAllocManaged`.
//!
//! The driver is loaded at run time (cudarc's dynamic loading): nothing
//! links against CUDA at build time. [`driver_present`] and every
//! constructor check that the library and all the symbols used are there
//! before the first call, because cudarc panics when they are missing; on a
//! machine without a driver, [`CudaDevice::open`] returns
//! [`CudaError::NoDriver`] ("no NVIDIA driver: libcuda.so.1 not found").
//!
//! `unsafe` is confined to the private `driver` module (every driver call)
//! and the calls in `device` to `driver`'s `unsafe fn`s, whose one
//! precondition is that the device no longer uses the memory or handle
//! (`#![deny(unsafe_code)]` elsewhere). Dropping a
//! [`CudaDevice`] or [`CudaHost`] returns everything it holds and never
//! panics; failures are counted ([`drop_errors`]).
//!
//! ```
//! match vram_cuda::CudaDevice::open(0) {
//!     Ok(dev) => println!("granularity {}", vram_alloc::Device::granularity(&dev)),
//!     Err(e) => println!("skipping: {e}"), // e.g. no NVIDIA driver
//! }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod conformance;
mod device;
mod driver;
mod error;

pub use device::{drop_errors, CudaDevice, CudaHost};
pub use error::CudaError;

/// Whether an NVIDIA driver library (`libcuda.so.1`) can be loaded. Does not
/// initialize the driver.
pub fn driver_present() -> bool {
    driver::library_present()
}

/// Loads and initializes the driver (`cuInit`), once per process; the error
/// says why it cannot be used.
pub fn init() -> Result<(), CudaError> {
    driver::load()
}
