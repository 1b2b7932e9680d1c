//! Behaviour of the policies, one fact per test. PyTorch figures are those of
//! c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size,
//! should_split, get_free_block, alloc_block, release_cached_blocks).

use crate::{check, new_alloc, MIB};
use vram_alloc::snapshot::TraceAction;
use vram_alloc::{AllocError, AllocatorConfig, CachingAllocator, Device, Policy, SimDevice};

#[test]
fn small_requests_round_to_512_and_share_a_2mib_segment() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    let p = a.malloc(1000, 0).unwrap();
    let q = a.malloc(1, 0).unwrap();
    let s = a.memory_stats();
    // round_size: 1000 -> 1024, 1 -> 512; kSmallBuffer = 2 MiB.
    assert_eq!(s.allocated_bytes[0].current, 1024 + 512);
    assert_eq!(s.requested_bytes[0].current, 1001);
    assert_eq!(s.reserved_bytes[0].current, (2 * MIB) as i64);
    assert_eq!(s.segment[1].current, 1, "one small-pool segment");
    assert_eq!(q, p + 1024, "second block is carved from the same segment");
    check(&a);
}

#[test]
fn large_segment_sizes_follow_get_allocation_size() {
    let a = new_alloc(Policy::PyTorch, 1 << 34);
    a.malloc(12 * MIB + 1, 0).unwrap(); // >= 10 MiB: rounded up to 2 MiB -> 14 MiB
    assert_eq!(
        a.memory_stats().reserved_bytes[0].current,
        (14 * MIB) as i64
    );
    a.malloc(5 * MIB, 0).unwrap(); // < kMinLargeAlloc: a 20 MiB kLargeBuffer
    assert_eq!(
        a.memory_stats().reserved_bytes[0].current,
        (34 * MIB) as i64
    );
    // The 20 MiB segment has 15 MiB left: a second 5 MiB request reuses it.
    a.malloc(5 * MIB, 0).unwrap();
    assert_eq!(a.memory_stats().segment[0].current, 2);
    check(&a);
}

#[test]
fn large_blocks_are_not_split_when_at_most_1mib_would_remain() {
    let a = new_alloc(Policy::PyTorch, 1 << 34);
    // 19.5 MiB -> a 20 MiB segment; remaining 0.5 MiB <= kSmallSize: no split,
    // and the whole block counts as allocated.
    a.malloc(19 * MIB + MIB / 2, 0).unwrap();
    let s = a.memory_stats();
    assert_eq!(s.allocated_bytes[0].current, (20 * MIB) as i64);
    assert_eq!(s.inactive_split[0].current, 0);
    check(&a);
}

#[test]
fn freed_neighbours_coalesce_and_inactive_split_returns_to_zero() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    let x = a.malloc(3 * MIB, 0).unwrap();
    let y = a.malloc(3 * MIB, 0).unwrap();
    let z = a.malloc(3 * MIB, 0).unwrap();
    assert_eq!(
        a.memory_stats().inactive_split[0].current,
        1,
        "the 11 MiB tail"
    );
    a.free(x).unwrap();
    a.free(z).unwrap();
    check(&a);
    assert_eq!(
        a.memory_stats().inactive_split[0].current,
        2,
        "x alone; z merged with the tail"
    );
    a.free(y).unwrap();
    check(&a);
    let s = a.memory_stats();
    assert_eq!(s.inactive_split[0].current, 0);
    assert_eq!(s.inactive_split_bytes[0].current, 0);
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(
        snap.segments[0].blocks.len(),
        1,
        "one free block spans the segment"
    );
}

#[test]
fn cached_blocks_are_per_stream() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(4 * MIB, 1).unwrap();
    assert_ne!(p, q, "stream 1 must not take stream 0's cached block");
    assert_eq!(a.memory_stats().segment[0].current, 2);
    let r = a.malloc(4 * MIB, 0).unwrap();
    assert_eq!(r, p, "stream 0 reuses its own cached block");
    check(&a);
}

#[test]
fn cross_stream_use_waits_for_events() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 7).unwrap();
    a.with_device(|d| d.hold_stream(7));
    a.free(p).unwrap();
    let s = a.memory_stats();
    assert_eq!(s.allocated_bytes[0].current, 0);
    assert_eq!(
        s.active_bytes[0].current,
        (4 * MIB) as i64,
        "still active until stream 7 finishes"
    );
    check(&a);
    let q = a.malloc(4 * MIB, 0).unwrap();
    assert_ne!(q, p, "the pending block must not be reused");
    a.free(q).unwrap();
    a.with_device(|d| d.complete_stream(7));
    let r = a.malloc(4 * MIB, 0).unwrap();
    assert!(
        r == p || r == q,
        "after the event completes the block is reusable"
    );
    assert_eq!(a.memory_stats().active_bytes[0].current, (4 * MIB) as i64);
    check(&a);
}

#[test]
fn oom_is_a_value_with_an_informative_message() {
    let a = new_alloc(Policy::PyTorch, 60 * MIB);
    let mut held = vec![];
    for _ in 0..3 {
        // >= kMinLargeAlloc: each gets a 16 MiB segment (rounded to kRoundLarge).
        held.push(a.malloc(15 * MIB, 0).unwrap());
    }
    let err = a.malloc(15 * MIB, 0).unwrap_err();
    let AllocError::OutOfMemory(info) = &err else {
        panic!("expected OOM, got {err}")
    };
    assert_eq!(info.requested, 15 * MIB);
    assert_eq!(info.reserved, 48 * MIB);
    assert_eq!(
        info.allocated,
        48 * MIB,
        "the 1 MiB remainders are not split off"
    );
    assert_eq!(info.device_free, 12 * MIB);
    let msg = err.to_string();
    assert!(msg.contains("tried to allocate 15.00 MiB"), "{msg}");
    assert!(msg.contains("hint:"), "{msg}");
    let s = a.memory_stats();
    assert_eq!(s.num_ooms, 1);
    assert_eq!(s.num_alloc_retries, 1);
    let oom = a
        .snapshot()
        .traces
        .into_iter()
        .find(|t| t.action == TraceAction::Oom)
        .unwrap();
    assert_eq!(
        (oom.size, oom.device_free),
        (15 * MIB, 12 * MIB),
        "memory_viz shows both"
    );
    check(&a);
}

#[test]
fn cached_segments_are_released_and_the_allocation_retried() {
    let a = new_alloc(Policy::PyTorch, 64 * MIB);
    let xs: Vec<u64> = (0..3).map(|_| a.malloc(15 * MIB, 0).unwrap()).collect();
    for x in xs {
        a.free(x).unwrap();
    }
    // 48 MiB cached in 16 MiB segments; a 40 MiB request fits only after release.
    let big = a.malloc(40 * MIB, 0).unwrap();
    let s = a.memory_stats();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(s.reserved_bytes[0].current, (40 * MIB) as i64);
    a.free(big).unwrap();
    check(&a);
}

#[test]
fn per_process_cap_limits_reserved_memory() {
    let mut cfg = AllocatorConfig::new(Policy::PyTorch);
    cfg.memory_fraction = Some(0.5);
    let a = CachingAllocator::new(SimDevice::new(100 * MIB), cfg).unwrap();
    a.malloc(30 * MIB, 0).unwrap();
    let err = a.malloc(30 * MIB, 0).unwrap_err();
    let AllocError::OutOfMemory(info) = err else {
        panic!("expected OOM")
    };
    assert_eq!(info.cap, Some(50 * MIB));
    assert!(info.hint().contains("cap"));
}

#[test]
fn max_split_size_keeps_oversize_blocks_whole() {
    let mut cfg = AllocatorConfig::new(Policy::PyTorch);
    cfg.max_split_size = Some(40 * MIB);
    let a = CachingAllocator::new(SimDevice::new(1 << 32), cfg).unwrap();
    let big = a.malloc(100 * MIB, 0).unwrap();
    a.free(big).unwrap();
    // A 30 MiB (< max_split_size) request must not take the 100 MiB oversize block.
    let small = a.malloc(30 * MIB, 0).unwrap();
    assert_ne!(small, big);
    // A 90 MiB request may take it (within kLargeBuffer = 20 MiB of rounding).
    let again = a.malloc(90 * MIB, 0).unwrap();
    assert_eq!(again, big);
    let s = a.memory_stats();
    assert_eq!(s.oversize_allocations.current, 1);
    assert_eq!(s.oversize_segments.current, 1);
    assert_eq!(
        s.allocated_bytes[0].current,
        (130 * MIB) as i64,
        "oversize block not split"
    );
    check(&a);
    let mut bad = AllocatorConfig::new(Policy::PyTorch);
    bad.max_split_size = Some(MIB);
    assert!(matches!(
        CachingAllocator::new(SimDevice::new(1 << 30), bad),
        Err(AllocError::InvalidConfig { .. })
    ));
}

#[test]
fn garbage_collection_releases_cached_segments_above_threshold() {
    let mut cfg = AllocatorConfig::new(Policy::PyTorch);
    cfg.memory_fraction = Some(1.0);
    cfg.garbage_collection_threshold = Some(0.5);
    let a = CachingAllocator::new(SimDevice::new(100 * MIB), cfg).unwrap();
    let x = a.malloc(60 * MIB, 0).unwrap();
    a.free(x).unwrap();
    // reserved 60 MiB > 50 MiB threshold: the cached segment is collected
    // before a new 12 MiB segment is allocated (on another stream, so the
    // cached block is not a candidate), with no OOM retry needed.
    a.malloc(12 * MIB, 1).unwrap();
    let s = a.memory_stats();
    assert_eq!(s.reserved_bytes[0].current, (12 * MIB) as i64);
    assert_eq!(s.num_alloc_retries, 0);
    check(&a);
}

#[test]
fn expandable_segments_grow_one_range_and_unmap_on_empty_cache() {
    for policy in [Policy::PyTorchExpandable, Policy::Vramkit] {
        let a = new_alloc(policy, 1 << 32);
        let xs: Vec<u64> = (0..5).map(|_| a.malloc(30 * MIB, 0).unwrap()).collect();
        for w in xs.windows(2) {
            assert_eq!(
                w[1],
                w[0] + 30 * MIB,
                "{policy:?}: contiguous in one virtual range"
            );
        }
        let s = a.memory_stats();
        assert_eq!(s.segment[2].current, 1, "{policy:?}");
        assert!(s.reserved_bytes[0].current >= (150 * MIB) as i64);
        assert!(
            s.reserved_bytes[0].current <= (170 * MIB) as i64,
            "{policy:?}"
        );
        check(&a);
        for x in xs {
            a.free(x).unwrap();
        }
        a.empty_cache();
        check(&a);
        let s = a.memory_stats();
        assert_eq!(s.reserved_bytes[0].current, 0, "{policy:?}");
        assert_eq!(a.with_device(|d| d.used()), 0);
    }
}

#[test]
fn vramkit_with_a_finite_slack_trims_cached_pages_before_growing() {
    let mut cfg = AllocatorConfig::new(Policy::Vramkit).with_history(1000);
    cfg.trim_slack = 0.005;
    let a = CachingAllocator::new(SimDevice::new(1 << 32), cfg).unwrap();
    let x = a.malloc(100 * MIB, 0).unwrap();
    let y = a.malloc(MIB + 512, 0).unwrap();
    a.free(x).unwrap();
    // x's pages are cached (100 MiB > 0.5% slack); a 150 MiB request cannot use
    // the hole, so vramkit unmaps it before mapping more (y's 2 MiB page and
    // the request's 150 MiB, never x's pages at the same time).
    a.malloc(150 * MIB, 0).unwrap();
    let s = a.memory_stats();
    assert!(
        s.reserved_bytes[0].peak <= (154 * MIB) as i64,
        "peak {}",
        s.reserved_bytes[0].peak
    );
    assert!(a.with_device(|d| d.call_counts().unmaps) >= 1);
    a.free(y).unwrap();
    check(&a);
}

#[test]
fn vramkit_keeps_free_pages_mapped_until_there_is_pressure() {
    // Plenty of room: freed pages stay mapped, no unmap (no synchronisation).
    let a = new_alloc(Policy::Vramkit, 1 << 32);
    let x = a.malloc(100 * MIB, 0).unwrap();
    let y = a.malloc(MIB + 512, 0).unwrap();
    a.free(x).unwrap();
    let z = a.malloc(150 * MIB, 0).unwrap();
    let calls = a.with_device(|d| d.call_counts());
    assert_eq!((calls.unmaps, calls.synchronising), (0, 0));
    // 100 MiB (x, cached) + 20 MiB (y grows the pool by a whole chunk, 19 MiB
    // of it free after y) + 132 MiB for z placed after y (150 - 19 = 131 MiB,
    // rounded to the 2 MiB granularity).
    assert_eq!(
        a.memory_stats().reserved_bytes[0].current,
        (252 * MIB) as i64
    );
    for p in [y, z] {
        a.free(p).unwrap();
    }
    check(&a);

    // A 200 MiB device: the same program cannot keep x's pages (120 + 132 >
    // 200), so they are unmapped before the request grows the segment,
    // without the release-everything path (no stream synchronisation).
    let a = new_alloc(Policy::Vramkit, 200 * MIB);
    let x = a.malloc(100 * MIB, 0).unwrap();
    let y = a.malloc(MIB + 512, 0).unwrap();
    a.free(x).unwrap();
    let z = a.malloc(150 * MIB, 0).unwrap();
    let s = a.memory_stats();
    assert!(s.reserved_bytes[0].peak <= (200 * MIB) as i64);
    assert_eq!(s.num_sync_all_streams, 0);
    assert_eq!(s.num_alloc_retries, 0);
    assert!(a.with_device(|d| d.call_counts().unmaps) >= 1);
    for p in [y, z] {
        a.free(p).unwrap();
    }
    check(&a);
}

#[test]
fn injected_device_faults_leave_state_intact() {
    for policy in Policy::ALL {
        let a = new_alloc(policy, 1 << 32);
        let keep = a.malloc(3 * MIB, 0).unwrap();
        let before = a.memory_stats();
        a.with_device(|d| d.fail_call(1));
        let err = a.malloc(300 * MIB, 0).unwrap_err();
        assert!(matches!(err, AllocError::Device(_)), "{policy:?}: {err}");
        check(&a);
        assert_eq!(a.memory_stats().allocated_bytes, before.allocated_bytes);
        let p = a.malloc(300 * MIB, 0).unwrap();
        a.free(p).unwrap();
        a.free(keep).unwrap();
        check(&a);
    }
}

#[test]
fn freeing_an_unknown_address_is_an_error() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    let p = a.malloc(10, 0).unwrap();
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(AllocError::InvalidAddress { .. })));
    assert!(matches!(
        a.record_stream(12345, 1),
        Err(AllocError::InvalidAddress { .. })
    ));
    check(&a);
}

#[test]
fn memory_stats_have_pytorch_keys() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    a.malloc(10, 0).unwrap();
    let m = a.memory_stats().to_map();
    for name in [
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    ] {
        for pool in ["all", "small_pool", "large_pool"] {
            for f in ["current", "peak", "allocated", "freed"] {
                let k = format!("{name}.{pool}.{f}");
                assert!(m.contains_key(&k), "missing {k}");
            }
        }
    }
    for k in [
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
    ] {
        assert!(m.contains_key(k), "missing {k}");
    }
    assert_eq!(m["allocated_bytes.all.current"], 512);
    assert_eq!(m["reserved_bytes.small_pool.current"], 2 << 20);
}

#[test]
fn memory_summary_matches_pytorch_layout() {
    let a = new_alloc(Policy::PyTorch, 1 << 32);
    let p = a.malloc(5 * MIB, 0).unwrap();
    a.malloc(100, 0).unwrap();
    a.free(p).unwrap();
    let s = a.memory_summary(false);
    // torch.cuda.memory_summary: every line is 75 columns between '|' borders.
    for line in s.lines() {
        assert_eq!(line.chars().count(), 77, "{line:?}");
    }
    assert!(
        s.contains("|                  PyTorch CUDA memory summary, device ID 0                 |")
    );
    assert!(
        s.contains("|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |")
    );
    assert!(
        s.contains("|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |")
    );
    // 5 MiB + 512 B peak: the unit comes from the all-pool row.
    assert!(
        s.contains("| Allocated memory      |    512 B   |   5120 KiB |   5120 KiB |   5120 KiB |"),
        "{s}"
    );
    assert!(
        s.contains("| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |"),
        "{s}"
    );
    assert!(s.contains("| Oversize allocations  |"));
}

#[test]
fn fragmentation_is_the_unallocated_share_of_reserved() {
    let a = new_alloc(Policy::PyTorch, 1 << 30);
    assert_eq!(a.fragmentation(), 0.0);
    a.malloc(5 * MIB, 0).unwrap(); // 5 of 20 MiB allocated
    assert!((a.fragmentation() - 0.75).abs() < 1e-9);
}

#[test]
fn sim_device_enforces_capacity_granularity_and_faults() {
    let mut d = SimDevice::new(10 * MIB);
    assert_eq!(d.granularity(), 2 * MIB);
    let base = d.reserve(8 * MIB).unwrap();
    assert!(d.map(base + 512, 2 * MIB).is_err(), "misaligned map");
    d.map(base, 4 * MIB).unwrap();
    assert_eq!(d.mem_info(), (6 * MIB, 10 * MIB));
    assert!(d.allocate(7 * MIB).is_err());
    d.unmap(base + 2 * MIB, 2 * MIB).unwrap();
    assert!(d.unreserve(base).is_err(), "still mapped");
    d.unmap(base, 2 * MIB).unwrap();
    d.unreserve(base).unwrap();
    d.fail_call(2);
    d.allocate(MIB).unwrap();
    assert!(matches!(
        d.allocate(MIB),
        Err(vram_alloc::DeviceError::Injected { .. })
    ));
    d.allocate(MIB).unwrap();
}

/// `fork` copies the allocator and its device: the copy goes its own way, the original is
/// untouched; a copy moved to a smaller device (`SimDevice::set_capacity`) runs the rest as a
/// fresh allocator of that size that made the same calls would, while what is in use fits.
#[test]
fn a_fork_goes_its_own_way_and_can_shrink_its_device() {
    let a = new_alloc(Policy::PyTorch, 1 << 34);
    let p = a.malloc(64 * MIB, 0).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(30 * MIB, 0).unwrap();
    let b = a.fork();
    // The copy frees and allocates; the original still has `q` and its cached remainder.
    b.free(q).unwrap();
    b.malloc(200 * MIB, 0).unwrap();
    assert_eq!(
        a.memory_stats().reserved_bytes[0].current,
        (64 * MIB) as i64
    );
    assert_eq!(
        a.memory_stats().allocated_bytes[0].current,
        (30 * MIB) as i64
    );
    assert_eq!(
        b.memory_stats().reserved_bytes[0].current,
        (264 * MIB) as i64
    );
    assert!(a.free(q).is_ok(), "the original's block is its own");
    check(&a);
    check(&b);
    // On a device that could not hold what is in use, no change; on one that can, the run
    // goes on as on a device of that size from the start.
    let c = new_alloc(Policy::PyTorch, 1 << 34);
    let fresh = new_alloc(Policy::PyTorch, 100 * MIB);
    for x in [&c, &fresh] {
        x.malloc(64 * MIB, 0).unwrap();
    }
    let d = c.fork();
    assert!(d.with_device(|dev| dev.set_capacity(32 * MIB)).is_err());
    d.with_device(|dev| dev.set_capacity(100 * MIB)).unwrap();
    for x in [&d, &fresh] {
        // 50 MiB more does not fit beside 64 MiB in 100 MiB: released nothing (in use), OOM.
        assert!(matches!(
            x.malloc(50 * MIB, 0),
            Err(AllocError::OutOfMemory(_))
        ));
    }
    assert_eq!(
        d.memory_stats().reserved_bytes,
        fresh.memory_stats().reserved_bytes
    );
    check(&d);
}
