//! The device conformance checks on the simulated device (always) and on a
//! real GPU (only where an NVIDIA driver and a device are present).

use vram_alloc::{Device, SimDevice};
use vram_cuda::{conformance, CudaDevice, CudaError};

/// Runs every conformance check on the simulated device, and on CUDA device
/// 0 when one can be opened; prints why the CUDA instance is skipped.
macro_rules! device_tests {
    ($($name:ident),* $(,)?) => {
        mod sim {
            $(
                #[test]
                fn $name() {
                    let make = || vram_alloc::SimDevice::with_granularity(4 << 30, 2 << 20);
                    vram_cuda::conformance::$name(&make).unwrap();
                }
            )*
        }
        mod capped {
            // vram-tier's cap wrapper must behave like a device too.
            $(
                #[test]
                fn $name() {
                    let make = || vram_tier::CappedDevice::new(
                        vram_alloc::SimDevice::with_granularity(4 << 30, 2 << 20),
                        Some(1 << 30),
                    );
                    vram_cuda::conformance::$name(&make).unwrap();
                }
            )*
        }
        mod cuda {
            $(
                #[test]
                fn $name() {
                    let Some(_) = super::cuda_or_skip(stringify!($name)) else { return };
                    let make = || vram_cuda::CudaDevice::open(0).expect("opened once already");
                    vram_cuda::conformance::$name(&make).unwrap();
                }
            )*
        }
    };
}

device_tests!(
    segments,
    virtual_ranges,
    events,
    out_of_memory,
    caching_allocator
);

fn cuda_or_skip(test: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipping cuda::{test}: {e}");
            None
        }
    }
}

#[test]
fn the_check_list_names_every_check() {
    let names: Vec<&str> = conformance::checks::<SimDevice>()
        .iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(
        names,
        [
            "segments",
            "virtual_ranges",
            "events",
            "out_of_memory_is_an_error",
            "caching_allocator_all_policies"
        ]
    );
    let make = || SimDevice::new(1 << 30);
    for (name, check) in conformance::checks::<SimDevice>() {
        check(&make).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn a_missing_driver_is_an_error_not_a_panic() {
    if vram_cuda::driver_present() {
        eprintln!("skipping: an NVIDIA driver is present here");
        return;
    }
    let e = CudaDevice::open(0).unwrap_err();
    assert!(matches!(e, CudaError::NoDriver { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("no NVIDIA driver: libcuda.so.1 not found"),
        "{e}"
    );
    // Repeated calls keep failing cleanly (the load result is cached).
    assert_eq!(vram_cuda::init().unwrap_err(), e);
}

#[test]
fn driver_errors_map_onto_device_errors() {
    let oom = CudaError::Driver {
        call: "cuMemCreate",
        code: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        out_of_memory: true,
    };
    assert_eq!(
        oom.into_device_error(10, 3),
        vram_alloc::DeviceError::OutOfMemory {
            requested: 10,
            free: 3
        }
    );
    let bad = CudaError::Driver {
        call: "cuMemMap",
        code: "CUDA_ERROR_INVALID_VALUE".into(),
        out_of_memory: false,
    };
    let d = bad.into_device_error(0, 0);
    assert_eq!(d.to_string(), "cuMemMap failed: CUDA_ERROR_INVALID_VALUE");
    let _ = SimDevice::new(1).granularity();
}
