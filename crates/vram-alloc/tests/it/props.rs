//! Property tests: after every operation of a random program, blocks never
//! overlap, every byte of every segment is accounted for, free neighbours are
//! coalesced, and the statistics equal a recount (`check_invariants`), and
//! live allocations are disjoint.

use crate::MIB;
use proptest::prelude::*;
use vram_alloc::{AllocError, AllocatorConfig, CachingAllocator, Policy, SimDevice};

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64, u32),
    Free(usize),
    RecordStream(usize, u32),
    CompleteStream(u32),
    EmptyCache,
    Fault(u64),
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        1u64..4096,
        4096u64..(2 * MIB),
        (2 * MIB)..(12 * MIB),
        (12 * MIB)..(40 * MIB)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0u32..2).prop_map(|(s, st)| Op::Alloc(s, st)),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 2u32..4).prop_map(|(i, s)| Op::RecordStream(i, s)),
        1 => (2u32..4).prop_map(Op::CompleteStream),
        1 => Just(Op::EmptyCache),
        1 => (1u64..4).prop_map(Op::Fault),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::PyTorch),
        Just(Policy::PyTorchExpandable),
        Just(Policy::Vramkit)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_random_programs(
        policy in policy(),
        max_split in prop_oneof![Just(None), Just(Some(32 * MIB))],
        cap_gc in prop_oneof![Just(None), Just(Some((0.75, None))), Just(Some((1.0, Some(0.5))))],
        // vramkit's default (free pages stay mapped) and its memory-first setting.
        trim_slack in prop_oneof![Just(f64::INFINITY), Just(0.005)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut cfg = AllocatorConfig::new(policy);
        cfg.max_split_size = max_split;
        cfg.trim_slack = trim_slack;
        if let Some((fraction, gc)) = cap_gc {
            cfg.memory_fraction = Some(fraction);
            cfg.garbage_collection_threshold = gc;
        }
        // 256 MiB keeps the device under pressure so release-and-retry and OOM paths run.
        let a = CachingAllocator::new(SimDevice::new(256 * MIB), cfg).unwrap();
        a.with_device(|d| d.hold_stream(2));
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let dbg_op = format!("{op:?}");
            match op {
                Op::Alloc(s, st) => match a.malloc(s, st) {
                    Ok(p) => live.push((p, s)),
                    Err(AllocError::OutOfMemory(_)) | Err(AllocError::Device(_)) => {}
                    Err(e) => prop_assert!(false, "unexpected error {e}"),
                },
                Op::Free(i) if !live.is_empty() => {
                    let (p, _) = live.swap_remove(i % live.len());
                    // An injected fault on event recording leaves the block allocated.
                    if a.free(p).is_err() {
                        live.push((p, 0));
                    }
                }
                Op::Free(_) => {}
                Op::RecordStream(i, s) if !live.is_empty() => {
                    let (p, _) = live[i % live.len()];
                    a.record_stream(p, s).unwrap();
                }
                Op::RecordStream(..) => {}
                Op::CompleteStream(s) => a.with_device(|d| d.complete_stream(s)),
                Op::EmptyCache => a.empty_cache(),
                Op::Fault(n) => a.with_device(|d| d.fail_call(n)),
            }
            if let Err(e) = a.check_invariants() {
                prop_assert!(false, "step {step} {dbg_op}: {e}");
            }
            // Live allocations never overlap.
            let mut v = live.clone();
            v.sort();
            for w in v.windows(2) {
                prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap {:?}", w);
            }
            let st = a.memory_stats();
            prop_assert!(st.allocated_bytes[0].current as u64 >= live.iter().map(|x| x.1).sum::<u64>());
            prop_assert_eq!(st.allocation[0].current as usize, live.len());
            prop_assert!(st.reserved_bytes[0].current as u64 == a.with_device(|d| d.used()),
                "reserved equals the device's physical use");
            if let Some((fraction, _)) = cap_gc {
                prop_assert!(st.reserved_bytes[0].current as f64 <= fraction * (256 * MIB) as f64,
                    "the per-process cap holds");
            }
        }
        a.with_device(|d| d.clear_fault());
        for (p, _) in live.drain(..) {
            a.free(p).unwrap();
        }
        a.with_device(|d| { d.complete_stream(2); d.complete_stream(3); });
        a.empty_cache();
        prop_assert!(a.check_invariants().is_ok());
        let st = a.memory_stats();
        prop_assert_eq!(st.allocated_bytes[0].current, 0);
        prop_assert_eq!(st.active_bytes[0].current, 0);
        prop_assert_eq!(st.reserved_bytes[0].current, 0, "everything releasable after empty_cache");
    }
}
