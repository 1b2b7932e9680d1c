use std::time::Instant;
use vram_alloc::*;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only = args.get(1).cloned();
    for policy in Policy::ALL {
        for size in [4096u64, 8 << 20] {
            let tag = format!("{}-{}", policy.name(), size);
            if only.as_ref().is_some_and(|o| *o != tag) {
                continue;
            }
            let a = CachingAllocator::new(SimDevice::new(1 << 36), AllocatorConfig::new(policy))
                .unwrap();
            let keep: Vec<u64> = (0..256)
                .map(|i| a.malloc(4096 + i * 512, 0).unwrap())
                .collect();
            for (i, p) in keep.into_iter().enumerate() {
                if i % 2 == 0 {
                    a.free(p).unwrap();
                }
            }
            let mut best = f64::MAX;
            for _ in 0..5 {
                let n: u64 = std::env::var("N")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(2_000_000);
                let t = Instant::now();
                for _ in 0..n {
                    let p = a.malloc(std::hint::black_box(size), 0).unwrap();
                    a.free(p).unwrap();
                }
                best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
            }
            println!("{tag:30} {best:.1} ns");
        }
    }
}
