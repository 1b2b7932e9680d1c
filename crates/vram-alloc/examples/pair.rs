//! A plain loop over the cached alloc+free pair, for instruction counts and
//! quick timings outside criterion:
//!
//! ```sh
//! cargo run --release -p vram-alloc --example pair                # all cases
//! N=100000 valgrind --tool=cachegrind --cache-sim=no \
//!     target/release/examples/pair pytorch-4096                   # instructions per pair = Ir / (5 N)
//! ```

use std::time::Instant;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

fn main() {
    let only = std::env::args().nth(1);
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for policy in Policy::ALL {
        for size in [4096u64, 8 << 20] {
            let tag = format!("{}-{}", policy.name(), size);
            if only.as_ref().is_some_and(|o| *o != tag) {
                continue;
            }
            let a = CachingAllocator::new(SimDevice::new(1 << 36), AllocatorConfig::new(policy))
                .expect("valid config");
            // Same warm state as the criterion bench: 256 small blocks, half cached.
            let keep: Vec<u64> = (0..256)
                .map(|i| a.malloc(4096 + i * 512, 0).expect("fits"))
                .collect();
            for (i, p) in keep.into_iter().enumerate() {
                if i % 2 == 0 {
                    a.free(p).expect("live");
                }
            }
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..n {
                    let p = a.malloc(std::hint::black_box(size), 0).expect("fits");
                    a.free(p).expect("live");
                }
                best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
            }
            println!("{tag:30} {best:.1} ns (best of 5 x {n})");
        }
    }
}
