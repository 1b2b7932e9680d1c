//! `vram-cuda-check [--json] [--ordinal N] [--bench ITERS]`: runs the device
//! conformance checks on a real GPU (the GPU session's replacement for
//! `cargo test`, which the device machine cannot run), and optionally times
//! alloc/free pairs. Exit code 0 when every check passes, 1 when one fails,
//! 2 when no GPU can be opened.

use std::time::Instant;
use vram_alloc::{AllocatorConfig, CachingAllocator, Device, Policy};
use vram_cuda::{conformance, CudaDevice};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let ordinal: i32 = value("--ordinal").and_then(|v| v.parse().ok()).unwrap_or(0);
    let bench: usize = value("--bench").and_then(|v| v.parse().ok()).unwrap_or(0);
    if let Err(e) = CudaDevice::open(ordinal) {
        eprintln!("vram-cuda-check: {e}");
        std::process::exit(2);
    }
    let make = || CudaDevice::open(ordinal).unwrap_or_else(|e| panic!("reopening device: {e}"));
    let mut results = Vec::new();
    let mut failed = false;
    for (name, check) in conformance::checks::<CudaDevice>() {
        let t = Instant::now();
        let r =
            std::panic::catch_unwind(|| check(&make)).unwrap_or_else(|_| Err("panicked".into()));
        failed |= r.is_err();
        if !json {
            match &r {
                Ok(()) => println!("ok    {name} ({:.1} ms)", t.elapsed().as_secs_f64() * 1e3),
                Err(e) => println!("FAIL  {name}: {e}"),
            }
        }
        results.push(format!(
            "{{\"name\":\"{name}\",\"ok\":{},\"error\":{}}}",
            r.is_ok(),
            r.err().map_or("null".to_string(), |e| format!("{e:?}"))
        ));
    }
    for (name, check) in [
        (
            "tiered_spill",
            conformance::tiered_spill::<CudaDevice, _>
                as fn(&dyn Fn() -> (CudaDevice, _)) -> Result<(), String>,
        ),
        (
            "tiered_migration",
            conformance::tiered_migration::<CudaDevice, _>,
        ),
    ] {
        let make_tier = || {
            let d = make();
            let h = d.host();
            (d, h)
        };
        let r = std::panic::catch_unwind(|| check(&make_tier))
            .unwrap_or_else(|_| Err("panicked".into()));
        failed |= r.is_err();
        if !json {
            match &r {
                Ok(()) => println!("ok    {name}"),
                Err(e) => println!("FAIL  {name}: {e}"),
            }
        }
        results.push(format!(
            "{{\"name\":\"{name}\",\"ok\":{},\"error\":{}}}",
            r.is_ok(),
            r.err().map_or("null".to_string(), |e| format!("{e:?}"))
        ));
    }
    let mut timings = Vec::new();
    if bench > 0 {
        for &size in &[4096u64, 1 << 20, 64 << 20] {
            for policy in Policy::ALL {
                let alloc =
                    CachingAllocator::new(make(), AllocatorConfig::new(policy)).expect("allocator");
                let p = alloc.malloc(size, 0).expect("warm-up");
                alloc.free(p).expect("free");
                let t = Instant::now();
                for _ in 0..bench {
                    let p = alloc.malloc(size, 0).expect("malloc");
                    alloc.free(p).expect("free");
                }
                let ns = t.elapsed().as_nanos() as f64 / bench as f64;
                timings.push(format!(
                    "{{\"what\":\"vramkit-{}\",\"size\":{size},\"ns_per_pair\":{ns:.1}}}",
                    policy.name()
                ));
            }
            let mut d = make();
            let n = bench.min(2000);
            let t = Instant::now();
            for _ in 0..n {
                let a = d.allocate(size).expect("cuMemAlloc");
                d.release(a).expect("cuMemFree");
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            timings.push(format!(
                "{{\"what\":\"cuMemAlloc+cuMemFree\",\"size\":{size},\"ns_per_pair\":{ns:.1}}}"
            ));
        }
        if !json {
            for t in &timings {
                println!("{t}");
            }
        }
    }
    if json {
        println!(
            "{{\"ordinal\":{ordinal},\"checks\":[{}],\"timings\":[{}]}}",
            results.join(","),
            timings.join(",")
        );
    }
    std::process::exit(i32::from(failed));
}
