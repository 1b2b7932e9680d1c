//! What the tier layer costs: a cached alloc+free pair through
//! `CachingAllocator` alone, through `TieredAllocator` when nothing has
//! spilled, and through it while spilled blocks are live (a second lock and
//! a hash lookup per free), with the timers on (the default) and off, all on
//! the simulated device. A pair that spills is timed too: after the first,
//! each spill reuses the pinned block the last one freed (its events done),
//! so it measures the host tier's bookkeeping, not pinning (the simulated host
//! pins for free; a real 1.65 GB `cuMemHostAlloc` took 577 ms on the
//! 2026-11-28 H200).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};
use vram_tier::{SimHost, TierConfig, TieredAllocator};

const MIB: u64 = 1 << 20;

fn tiered(limit: u64) -> TieredAllocator<SimDevice, SimHost> {
    let cfg = TierConfig {
        device_limit: Some(limit),
        host_limit: 1 << 34,
        ..TierConfig::default()
    };
    TieredAllocator::new(SimDevice::new(1 << 36), SimHost::new(1 << 36), cfg).unwrap()
}

fn pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("tier_pair_4KiB");
    let base = CachingAllocator::new(
        SimDevice::new(1 << 36),
        AllocatorConfig::new(Policy::Vramkit),
    )
    .unwrap();
    let p = base.malloc(4096, 0).unwrap();
    base.free(p).unwrap();
    g.bench_function("caching_allocator", |b| {
        b.iter(|| {
            let p = base.malloc(black_box(4096), 0).unwrap();
            base.free(black_box(p)).unwrap();
        })
    });

    let t = tiered(1 << 30);
    let p = t.malloc(4096, 0).unwrap();
    t.free(p).unwrap();
    g.bench_function("tiered_nothing_spilled", |b| {
        b.iter(|| {
            let p = t.malloc(black_box(4096), 0).unwrap();
            t.free(black_box(p)).unwrap();
        })
    });

    // The same with the timers off (VRAM_TIMERS=0): what the timers cost per pair.
    let cfg = TierConfig {
        device_limit: Some(1 << 30),
        host_limit: 1 << 34,
        timers: false,
        ..TierConfig::default()
    };
    let t = TieredAllocator::new(SimDevice::new(1 << 36), SimHost::new(1 << 36), cfg).unwrap();
    let p = t.malloc(4096, 0).unwrap();
    t.free(p).unwrap();
    g.bench_function("tiered_nothing_spilled_timers_off", |b| {
        b.iter(|| {
            let p = t.malloc(black_box(4096), 0).unwrap();
            t.free(black_box(p)).unwrap();
        })
    });

    // Fill a 64 MiB cap, spill one block and keep it live.
    let t = tiered(64 * MIB);
    let small = t.malloc(4096, 0).unwrap();
    let _fill = t.malloc(60 * MIB, 0).unwrap();
    let _spilled = t.malloc(16 * MIB, 0).unwrap();
    t.free(small).unwrap();
    g.bench_function("tiered_with_spilled_blocks_live", |b| {
        b.iter(|| {
            let p = t.malloc(black_box(4096), 0).unwrap();
            t.free(black_box(p)).unwrap();
        })
    });
    g.bench_function("spilling_pair_16MiB", |b| {
        b.iter(|| {
            let p = t.malloc(black_box(16 * MIB), 0).unwrap();
            t.free(black_box(p)).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, pairs);
criterion_main!(benches);
