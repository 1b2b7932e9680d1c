//! The host tier at the allocator level: allocations whose pages move to host
//! memory at the same addresses ([`CachingAllocator::migrate_to_host`],
//! `evict_cold`, `rebalance`). A property test runs random programs with
//! migrations and injected faults on a [`SimDevice`] that carries bytes, and
//! checks after every operation that no allocation is lost or in two tiers,
//! that addresses and contents survive migration, and that the statistics
//! equal a recount.

use crate::MIB;
use proptest::prelude::*;
use std::collections::BTreeMap;
use vram_alloc::{AllocError, AllocatorConfig, CachingAllocator, Location, Policy, SimDevice};

type Alloc = CachingAllocator<SimDevice>;

fn tiered(policy: Policy, capacity: u64, host: u64) -> Alloc {
    let dev = SimDevice::new(capacity)
        .with_host_capacity(host)
        .with_contents();
    CachingAllocator::new(dev, AllocatorConfig::new(policy)).unwrap()
}

/// Offsets of an allocation that carry a pattern: its ends, its middle, and
/// the first and last byte of every 20 MiB unit inside it.
fn probes(size: u64) -> Vec<u64> {
    let mut v = vec![0, size / 2, size - 1];
    let mut o = 0;
    while o < size {
        v.push(o);
        v.push((o + 20 * MIB - 1).min(size - 1));
        o += 20 * MIB;
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn pattern(addr: u64, off: u64) -> u8 {
    ((addr >> 9) ^ off.wrapping_mul(31) ^ (off >> 13)) as u8
}

fn fill(a: &Alloc, addr: u64, size: u64) {
    a.with_device(|d| {
        for off in probes(size) {
            d.write(addr + off, &[pattern(addr, off)]).unwrap();
        }
    });
}

/// Every live allocation still holds its pattern, each of its bytes is in
/// exactly one tier (host exactly where the allocator says), and the tiers'
/// byte counts equal the allocator's statistics.
fn verify(a: &Alloc, live: &BTreeMap<u64, u64>) -> Result<(), String> {
    a.check_invariants()?;
    let ranges = a.host_ranges();
    let mut on_host = 0;
    for w in ranges.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(format!("allocation {:#x} moved twice", w[0].0));
        }
    }
    for &(addr, lo, hi) in &ranges {
        let size = *live
            .get(&addr)
            .ok_or(format!("host range of a dead allocation {addr:#x}"))?;
        if lo < addr || hi > addr + size {
            return Err(format!("host range outside allocation {addr:#x}"));
        }
        on_host += hi - lo;
    }
    let stats = a.memory_stats();
    if stats.allocation[0].current as usize != live.len() {
        return Err("allocation count differs from the program's".into());
    }
    if stats.migrated_bytes.current as u64 != on_host {
        return Err("migrated_bytes differs from the host ranges".into());
    }
    a.with_device(|d| {
        if d.host_used() != on_host {
            return Err(format!(
                "device holds {} host bytes, ranges {on_host}",
                d.host_used()
            ));
        }
        for (&addr, &size) in live {
            let host = ranges.iter().find(|r| r.0 == addr);
            for off in probes(size) {
                let at = addr + off;
                let want = match host {
                    Some(&(_, lo, hi)) if at >= lo && at < hi => Location::Host,
                    _ => Location::Device,
                };
                if d.location(at) != Some(want) {
                    return Err(format!(
                        "{at:#x} is {:?}, expected {want:?}",
                        d.location(at)
                    ));
                }
                let got = d.read(at, 1).map_err(|e| e.to_string())?[0];
                if got != pattern(addr, off) {
                    return Err(format!("contents of {addr:#x}+{off} lost"));
                }
            }
        }
        Ok(())
    })
}

#[test]
fn a_migrated_allocation_keeps_its_address_and_contents() {
    let a = tiered(Policy::Vramkit, 1 << 30, 1 << 30);
    let x = a.malloc(100 * MIB, 0).unwrap();
    fill(&a, x, 100 * MIB);
    let mut live = BTreeMap::from([(x, 100 * MIB)]);
    // x starts a 20 MiB unit: all five units are its own and move.
    assert_eq!(a.migrate_to_host(x).unwrap(), 100 * MIB);
    verify(&a, &live).unwrap();
    let s = a.memory_stats();
    assert_eq!(s.reserved_bytes[0].current, 0);
    assert_eq!(s.migrated_bytes.current, (100 * MIB) as i64);
    assert_eq!(s.num_migrations_to_host, 1);
    assert_eq!(a.with_device(|d| d.used()), 0);
    assert_eq!(a.migrate_to_device(x).unwrap(), 100 * MIB);
    verify(&a, &live).unwrap();
    assert_eq!(a.memory_stats().num_migrations_to_device, 1);
    // Freeing a moved allocation returns its host memory.
    a.migrate_to_host(x).unwrap();
    a.free(x).unwrap();
    live.clear();
    verify(&a, &live).unwrap();
    assert_eq!(a.with_device(|d| d.host_used()), 0);
    let summary = a.memory_summary(false);
    assert!(summary.contains("Moved to host memory"), "{summary}");
    assert!(
        summary.lines().all(|l| l.chars().count() == 77),
        "{summary}"
    );
}

#[test]
fn cold_means_long_lived_and_new_allocations_are_not_moved() {
    // 200 MiB device, 1 GiB host: "weights" (60 MiB), then a step's
    // "optimizer states" (2 x 60 MiB), a step mark, then activations.
    let a = tiered(Policy::Vramkit, 200 * MIB, 1 << 30);
    let w = a.malloc(60 * MIB, 0).unwrap();
    let s1 = a.malloc(60 * MIB, 0).unwrap();
    let s2 = a.malloc(60 * MIB, 0).unwrap();
    a.mark_step();
    let act = a.malloc(10 * MIB, 0).unwrap();
    // A 100 MiB activation does not fit: the tier moves the newest
    // long-lived allocations (the states), never `act`, and not the weights.
    let moved = a.evict_cold(100 * MIB, 1 << 30);
    assert_eq!(moved, 120 * MIB);
    let hosts: Vec<u64> = a.host_ranges().iter().map(|r| r.0).collect();
    assert_eq!(hosts, {
        let mut v = vec![s1, s2];
        v.sort_unstable();
        v
    });
    let big = a.malloc(100 * MIB, 0).unwrap();
    // The host limit is never exceeded.
    assert_eq!(a.evict_cold(60 * MIB, 30 * MIB), 0);
    for p in [big, act] {
        a.free(p).unwrap();
    }
    // That step rose 110 MiB above its start: with the states back (120 MiB)
    // the next one would not fit in 200 MiB, so they stay on the host.
    a.mark_step();
    assert_eq!(a.rebalance(), 0);
    // A step that needs only 10 MiB: room returns (60 + 120 + 10 <= 200) and
    // the states come back at its mark.
    let act = a.malloc(10 * MIB, 0).unwrap();
    a.free(act).unwrap();
    a.mark_step();
    assert_eq!(a.rebalance(), 120 * MIB);
    assert!(a.host_ranges().is_empty());
    a.check_invariants().unwrap();
    for p in [w, s1, s2] {
        a.free(p).unwrap();
    }
}

#[test]
fn before_any_step_mark_the_oldest_blocks_go_first() {
    // No mark yet: the weights (allocated first) move, not the activations
    // that follow them, even those old enough to qualify.
    let a = tiered(Policy::Vramkit, 1 << 30, 1 << 30);
    let w = a.malloc(60 * MIB, 0).unwrap();
    let acts: Vec<u64> = (0..5).map(|_| a.malloc(10 * MIB, 0).unwrap()).collect();
    assert_eq!(a.evict_cold(50 * MIB, 1 << 30), 60 * MIB);
    assert_eq!(
        a.host_ranges().iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![w]
    );
    for p in acts.into_iter().chain([w]) {
        a.free(p).unwrap();
    }
    a.check_invariants().unwrap();
}

#[test]
fn a_device_without_host_mappings_says_so() {
    struct NoHost(SimDevice);
    impl vram_alloc::Device for NoHost {
        fn allocate(&mut self, s: u64) -> Result<u64, vram_alloc::DeviceError> {
            self.0.allocate(s)
        }
        fn release(&mut self, a: u64) -> Result<(), vram_alloc::DeviceError> {
            self.0.release(a)
        }
        fn reserve(&mut self, s: u64) -> Result<u64, vram_alloc::DeviceError> {
            self.0.reserve(s)
        }
        fn unreserve(&mut self, a: u64) -> Result<(), vram_alloc::DeviceError> {
            self.0.unreserve(a)
        }
        fn map(&mut self, a: u64, s: u64) -> Result<(), vram_alloc::DeviceError> {
            self.0.map(a, s)
        }
        fn unmap(&mut self, a: u64, s: u64) -> Result<(), vram_alloc::DeviceError> {
            self.0.unmap(a, s)
        }
        fn granularity(&self) -> u64 {
            self.0.granularity()
        }
        fn mem_info(&self) -> (u64, u64) {
            self.0.mem_info()
        }
        fn record_event(&mut self, s: u32) -> Result<u64, vram_alloc::DeviceError> {
            self.0.record_event(s)
        }
        fn query_event(&mut self, e: u64) -> Result<bool, vram_alloc::DeviceError> {
            self.0.query_event(e)
        }
        fn synchronize_event(&mut self, e: u64) -> Result<(), vram_alloc::DeviceError> {
            self.0.synchronize_event(e)
        }
    }
    let a = CachingAllocator::new(
        NoHost(SimDevice::new(1 << 30)),
        AllocatorConfig::new(Policy::Vramkit),
    )
    .unwrap();
    let x = a.malloc(100 * MIB, 0).unwrap();
    let e = a.migrate_to_host(x).unwrap_err();
    assert!(e.to_string().contains("host-located mappings"), "{e}");
    a.check_invariants().unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    Free(usize),
    ToHost(usize),
    ToDevice(usize),
    Evict(u64),
    Step,
    Rebalance,
    RecordStream(usize),
    Complete,
    EmptyCache,
    Fault(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop_oneof![1u64..(2 * MIB), (2 * MIB)..(30 * MIB), (30 * MIB)..(90 * MIB)].prop_map(Op::Alloc),
        3 => any::<usize>().prop_map(Op::Free),
        3 => any::<usize>().prop_map(Op::ToHost),
        1 => any::<usize>().prop_map(Op::ToDevice),
        1 => (1u64..200).prop_map(|m| Op::Evict(m * MIB)),
        1 => Just(Op::Step),
        1 => Just(Op::Rebalance),
        1 => any::<usize>().prop_map(Op::RecordStream),
        1 => Just(Op::Complete),
        1 => Just(Op::EmptyCache),
        1 => (1u64..4).prop_map(Op::Fault),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn migrations_lose_nothing_under_random_programs(
        policy in prop_oneof![Just(Policy::PyTorchExpandable), Just(Policy::Vramkit)],
        host in prop_oneof![Just(0u64), Just(64 * MIB), Just(1u64 << 30)],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let a = tiered(policy, 400 * MIB, host);
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        let pick = |live: &BTreeMap<u64, u64>, i: usize| live.keys().nth(i % live.len().max(1)).copied();
        for op in ops {
            match op {
                Op::Alloc(size) => match a.malloc(size, 0) {
                    Ok(p) => {
                        let r = vram_alloc::policy::round_size(size);
                        prop_assert!(live.range(..p + r).next_back().is_none_or(|(&q, &s)| q + s <= p));
                        fill(&a, p, r);
                        live.insert(p, r);
                    }
                    Err(AllocError::OutOfMemory(_) | AllocError::Device(_)) => {}
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                },
                Op::Free(i) => {
                    if let Some(p) = pick(&live, i) {
                        if a.free(p).is_ok() {
                            live.remove(&p);
                        }
                    }
                }
                Op::ToHost(i) => {
                    if let Some(p) = pick(&live, i) {
                        let _ = a.migrate_to_host(p);
                    }
                }
                Op::ToDevice(i) => {
                    if let Some(p) = pick(&live, i) {
                        let _ = a.migrate_to_device(p);
                    }
                }
                Op::Evict(n) => {
                    let moved = a.evict_cold(n, host);
                    prop_assert!(moved <= host);
                }
                Op::Step => a.mark_step(),
                Op::Rebalance => {
                    a.rebalance();
                }
                Op::RecordStream(i) => {
                    if let Some(p) = pick(&live, i) {
                        a.with_device(|d| d.hold_stream(1));
                        a.record_stream(p, 1).unwrap();
                    }
                }
                Op::Complete => a.with_device(|d| d.complete_stream(1)),
                Op::EmptyCache => a.empty_cache(),
                Op::Fault(n) => a.with_device(|d| d.fail_call(n)),
            }
            prop_assert!(a.with_device(|d| d.host_used()) <= host);
            if let Err(e) = verify(&a, &live) {
                return Err(TestCaseError::fail(e));
            }
        }
        a.with_device(|d| d.clear_fault());
        for (&p, _) in live.iter() {
            a.free(p).unwrap();
        }
        a.with_device(|d| d.complete_stream(1));
        a.empty_cache();
        prop_assert_eq!(a.with_device(|d| d.host_used()), 0);
        prop_assert_eq!(a.memory_stats().migrated_bytes.current, 0);
    }
}
