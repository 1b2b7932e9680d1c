//! Many threads sharing one allocator.

use crate::MIB;
use std::sync::Arc;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

#[test]
fn threads_hammering_one_allocator_keep_it_consistent() {
    for policy in Policy::ALL {
        let a = Arc::new(
            CachingAllocator::new(SimDevice::new(1 << 34), AllocatorConfig::new(policy)).unwrap(),
        );
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                let a = Arc::clone(&a);
                std::thread::spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(t);
                    let mut live: Vec<(u64, u64)> = Vec::new();
                    for _ in 0..3000 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if live.len() < 32 && rng % 3 != 0 {
                            let size = 1 + rng % (if rng % 5 == 0 { 16 * MIB } else { 64 << 10 });
                            let p = a.malloc(size, t % 2).unwrap();
                            live.push((p, size));
                        } else if !live.is_empty() {
                            let i = (rng as usize / 3) % live.len();
                            let (p, _) = live.swap_remove(i);
                            a.free(p).unwrap();
                        }
                    }
                    live
                })
            })
            .collect();
        let mut all: Vec<(u64, u64)> = Vec::new();
        for h in handles {
            all.extend(h.join().unwrap());
        }
        a.check_invariants().unwrap();
        all.sort();
        for w in all.windows(2) {
            assert!(
                w[0].0 + w[0].1 <= w[1].0,
                "{policy:?}: live allocations overlap"
            );
        }
        let s = a.memory_stats();
        assert_eq!(s.allocation[0].current as usize, all.len());
        for (p, _) in all {
            a.free(p).unwrap();
        }
        a.empty_cache();
        a.check_invariants().unwrap();
        assert_eq!(a.memory_stats().reserved_bytes[0].current, 0, "{policy:?}");
    }
}
