//! Replaying event sequences through the policies.

use crate::{new_alloc, MIB};
use vram_alloc::replay::{events_from_snapshot, replay, replay_all, Event};
use vram_alloc::{synthetic, AllocatorConfig, Policy, Snapshot};

#[test]
fn replaying_a_recorded_history_reproduces_its_peaks() {
    let events = synthetic::training_events(&synthetic::presets()[0], 2);
    let a = new_alloc(Policy::PyTorch, 1 << 40);
    let mut addr = std::collections::HashMap::new();
    for e in &events {
        match *e {
            Event::Alloc { id, size, stream } => {
                addr.insert(id, a.malloc(size, stream).unwrap());
            }
            Event::Free { id } => a.free(addr[&id]).unwrap(),
        }
    }
    let recorded = a.memory_stats();
    let snap = Snapshot::from_pickle(&a.snapshot().to_pickle()).unwrap();
    let (replayed, rec) = events_from_snapshot(&snap);
    assert_eq!(replayed.len(), events.len());
    assert_eq!(
        rec.peak_reserved_bytes,
        recorded.reserved_bytes[0].peak as u64
    );
    assert_eq!(
        rec.peak_allocated_bytes,
        recorded.allocated_bytes[0].peak as u64
    );
    let r = replay(&replayed, &AllocatorConfig::new(Policy::PyTorch), None).unwrap();
    assert_eq!(
        r.peak_reserved_bytes, rec.peak_reserved_bytes,
        "the baseline is faithful to itself"
    );
}

/// The target (issue 4, "Speed and efficiency"): on traces for at
/// least three models, expandable-mode peak reserved <= 1.05 x peak allocated
/// and below the PyTorch-policy baseline.
#[test]
fn vramkit_beats_the_pytorch_baseline_on_three_models() {
    for m in synthetic::presets().iter().take(3) {
        let events = synthetic::training_events(m, 2);
        let rs = replay_all(&events, None).unwrap();
        let base = &rs[0];
        let ours = rs.iter().find(|r| r.name == "vramkit").unwrap();
        assert_eq!(base.name, "pytorch");
        let ratio = ours.peak_reserved_bytes as f64 / ours.peak_allocated_bytes as f64;
        assert!(ratio <= 1.05, "{}: ratio {ratio}", m.name);
        assert!(
            ours.peak_reserved_bytes < base.peak_reserved_bytes,
            "{}",
            m.name
        );
    }
}

#[test]
fn capacity_reports_would_oom() {
    let events = vec![
        Event::Alloc {
            id: 1,
            size: 30 * MIB,
            stream: 0,
        },
        Event::Alloc {
            id: 2,
            size: 30 * MIB,
            stream: 0,
        },
        Event::Free { id: 1 },
        Event::Free { id: 2 },
    ];
    let r = replay(
        &events,
        &AllocatorConfig::new(Policy::PyTorch),
        Some(50 * MIB),
    )
    .unwrap();
    assert_eq!(r.would_oom, Some(true));
    assert_eq!(r.first_oom_event, Some(1));
    assert_eq!(r.peak_allocated_bytes, 60 * MIB);
    let r = replay(
        &events,
        &AllocatorConfig::new(Policy::PyTorch),
        Some(64 * MIB),
    )
    .unwrap();
    assert_eq!(r.would_oom, Some(false));
}

#[test]
fn inconsistent_traces_are_errors() {
    let bad = [Event::Free { id: 3 }];
    let e = replay(&bad, &AllocatorConfig::new(Policy::PyTorch), None).unwrap_err();
    assert!(e.is_bad_input(), "{e}");
}

#[test]
fn expandable_policies_fit_just_above_their_own_peak() {
    // Regression: the virtual range must not run out before physical memory
    // does (placement leaves holes in the address space).
    let events = synthetic::training_events(&synthetic::presets()[1], 2);
    for policy in [Policy::PyTorchExpandable, Policy::Vramkit] {
        let cfg = AllocatorConfig::new(policy);
        let free_run = replay(&events, &cfg, None).unwrap();
        let cap = free_run.peak_reserved_bytes + 64 * MIB;
        let r = replay(&events, &cfg, Some(cap)).unwrap();
        assert_eq!(r.would_oom, Some(false), "{policy:?} at {cap}");
    }
}
