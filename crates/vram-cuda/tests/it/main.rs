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
                    let make = || {
                        vram_alloc::SimDevice::with_granularity(4 << 30, 2 << 20)
                            .with_host_capacity(1 << 30)
                            .with_contents()
                    };
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
                        vram_alloc::SimDevice::with_granularity(4 << 30, 2 << 20)
                            .with_host_capacity(1 << 30)
                            .with_contents(),
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
    caching_allocator,
    host_migration,
    migration_keeps_bytes
);

/// Says on the test run's stderr that `test` skips, and why. libtest captures `eprintln!` (and
/// shows it only for a failing test); a write to the stderr handle itself is not captured, so
/// the line shows in `cargo test`'s output, and CI's, although the test reports `ok`.
fn skip(test: &str, reason: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {reason}");
}

fn cuda_or_skip(test: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            skip(&format!("cuda::{test}"), format!("no CUDA device 0 ({e})"));
            None
        }
    }
}

#[test]
fn tiered_spill_on_the_simulated_device_and_host() {
    let make = || (SimDevice::new(1 << 30), vram_tier::SimHost::new(1 << 30));
    conformance::tiered_spill(&make).unwrap();
}

#[test]
fn tiered_migration_on_the_simulated_device_and_host() {
    // Without host-located mappings the request spills; with them a cold
    // block moves instead (the check accepts either; both are run).
    let spill = || (SimDevice::new(1 << 30), vram_tier::SimHost::new(1 << 30));
    conformance::tiered_migration(&spill).unwrap();
    let migrate = || {
        (
            SimDevice::new(1 << 30).with_host_capacity(1 << 30),
            vram_tier::SimHost::new(1 << 30),
        )
    };
    conformance::tiered_migration(&migrate).unwrap();
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
            "caching_allocator_all_policies",
            "host_migration",
            "migration_keeps_bytes"
        ]
    );
    let make = || {
        SimDevice::new(1 << 30)
            .with_host_capacity(1 << 30)
            .with_contents()
    };
    for (name, check) in conformance::checks::<SimDevice>() {
        check(&make).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn a_missing_driver_is_an_error_not_a_panic() {
    if vram_cuda::driver_present() {
        skip(
            "a_missing_driver_is_an_error_not_a_panic",
            "an NVIDIA driver is present here",
        );
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

/// Compiles `tests/data/fake_libcuda.rs` into `<dir>/libcuda.so`; `None`
/// (with a message) when rustc is not available.
fn build_fake_driver(dir: &std::path::Path) -> Option<()> {
    std::fs::create_dir_all(dir).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_libcuda.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .args(["--edition", "2021", "--crate-type", "cdylib", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&src)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) => panic!(
            "fake driver did not compile: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            skip(
                "vram_cuda_check_passes_against_a_strict_fake_driver",
                format!("rustc not runnable ({e})"),
            );
            None
        }
    }
}

/// The whole CUDA path — library and symbol checks, cuInit, primary context
/// binding, segments, per-granule cuMemCreate/cuMemMap with one
/// cuMemSetAccess, whole-mapping cuMemUnmap, events, teardown — through the
/// `vram-cuda-check` binary against a fake driver that enforces CUDA's rules
/// (`tests/data/fake_libcuda.rs`). It proves the bookkeeping and the
/// argument structs, not real GPU behaviour.
#[test]
fn vram_cuda_check_passes_against_a_strict_fake_driver() {
    if vram_cuda::driver_present() {
        skip(
            "vram_cuda_check_passes_against_a_strict_fake_driver",
            "a real NVIDIA driver is present (the fake would not be loaded first)",
        );
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-cuda-check");
    let Some(()) = build_fake_driver(&dir) else {
        return;
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vram-cuda-check"))
        .args(["--json", "--bench", "20"])
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{log}");
    assert_eq!(
        stdout.matches("\"ok\":true").count(),
        conformance::checks::<SimDevice>().len() + 2, // and the two tiered checks
        "{log}"
    );
    for name in [
        "tiered_spill",
        "tiered_migration",
        "host_migration",
        "migration_keeps_bytes",
    ] {
        assert!(
            stdout.contains(&format!("\"name\":\"{name}\",\"ok\":true")),
            "{log}"
        );
    }
    assert!(!stdout.contains("\"ok\":false"), "{log}");
    assert!(stdout.contains("cuMemAlloc+cuMemFree"), "{log}");
}
