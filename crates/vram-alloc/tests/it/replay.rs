//! Replaying event sequences through the policies.

use crate::{new_alloc, MIB};
use vram_alloc::replay::{
    device_calls_per_step, events_from_snapshot, replay, replay_all, step_ends, Event,
};
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
/// and below the PyTorch-policy baseline. Since issue 13 the ratio needs the
/// memory-saving setting (`trim_slack` 0.005, which unmaps in steady state);
/// the default vramkit policy, which keeps free pages mapped, stays no higher
/// than PyTorch's expandable segments (on gpt2-medium both are above the
/// default policy's peak).
#[test]
fn vramkit_beats_the_pytorch_baseline_on_three_models() {
    for m in synthetic::presets().iter().take(3) {
        let events = synthetic::training_events(m, 2);
        let rs = replay_all(&events, None).unwrap();
        let base = &rs[0];
        let expandable = &rs[1];
        let ours = rs.iter().find(|r| r.name == "vramkit").unwrap();
        assert_eq!(base.name, "pytorch");
        assert_eq!(expandable.name, "pytorch-expandable");
        assert!(ours.peak_reserved_bytes <= expandable.peak_reserved_bytes);
        let mut tight = AllocatorConfig::new(Policy::Vramkit);
        tight.trim_slack = 0.005;
        let t = replay(&events, &tight, None).unwrap();
        let ratio = t.peak_reserved_bytes as f64 / t.peak_allocated_bytes as f64;
        assert!(ratio <= 1.05, "{}: ratio {ratio}", m.name);
        assert!(
            t.peak_reserved_bytes < base.peak_reserved_bytes,
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

fn real_trace(name: &str) -> Vec<Event> {
    // Recorded on an H100 80GB HBM3, driver 580.159.04, PyTorch 2.11.0+cu130,
    // CUDA 13.0, transformers 5.17.0, 2026-11-22 (tests/data/snapshots/README.md).
    let path = format!(
        "{}/tests/data/snapshots/{name}.pickle",
        env!("CARGO_MANIFEST_DIR")
    );
    let snap = Snapshot::from_pickle(&std::fs::read(path).unwrap()).unwrap();
    events_from_snapshot(&snap).0
}

/// Issue 13: the vramkit policy must make no device call that costs step
/// time once a training loop repeats its steps (zero maps, zero unmaps, zero
/// synchronising calls in the last recorded step of four real loops), while
/// its peak reserved stays no higher than PyTorch's expandable segments on
/// the same trace. The previous default (`trim_slack` 0.005, trim before
/// every growth) is kept as the "before" figure: it unmapped, and so
/// synchronised the GPU, on every step.
#[test]
fn vramkit_makes_no_device_calls_in_steady_state_on_real_traces() {
    let mut old_unmaps = 0;
    for name in [
        "gpt2-bf16amp-adamw-mb8",
        "bert-bf16amp-adamw-mb32-s512",
        "resnet50-fp32-momentum-mb64",
        "llama3-8b-L4-bf16amp-adamw-mb2-s4096",
    ] {
        let events = real_trace(name);
        let ends = step_ends(&events);
        // Three steps recorded (one warm-up, two measured): the warm-up's
        // forward and backward, its optimizer step with the next step, and
        // the last step, which ends where the trace ends.
        assert_eq!(ends.len(), 3, "{name}: {ends:?}");
        let last = ends.len() - 1;
        let ours = AllocatorConfig::new(Policy::Vramkit);
        let calls = device_calls_per_step(&events, &ours, &ends).unwrap();
        let steady = calls[last];
        assert_eq!(
            (steady.maps, steady.unmaps, steady.synchronising),
            (0, 0, 0),
            "{name}: {steady:?}"
        );
        let mut before = AllocatorConfig::new(Policy::Vramkit);
        before.trim_slack = 0.005;
        let old = device_calls_per_step(&events, &before, &ends).unwrap();
        old_unmaps += old[1].unmaps + old[2].unmaps;
        let exp = replay(
            &events,
            &AllocatorConfig::new(Policy::PyTorchExpandable),
            None,
        )
        .unwrap();
        let r = replay(&events, &ours, None).unwrap();
        assert!(
            r.peak_reserved_bytes <= exp.peak_reserved_bytes,
            "{name}: {} > {}",
            r.peak_reserved_bytes,
            exp.peak_reserved_bytes
        );
    }
    // The old setting unmapped during the measured steps.
    assert!(old_unmaps > 0);
}

/// Issue 25, item 12: the PyTorch policy against an independent reference. Each real
/// snapshot records what PyTorch 2.11's own `CUDACachingAllocator` reserved (its segment
/// alloc/free history); replaying the same requests through the PyTorch policy must reserve
/// what it reserved, within 1 % (recorded peaks: gpt2 15.25 GB, BERT 8.63 GB, ResNet-50
/// 7.02 GB, Llama-3-8B cut to 4 layers 55.9 GB; the replay is 0.2–0.9 % below: the requests
/// recorded are the callers' sizes, so the replay cannot see blocks made before the
/// recording began). The allocated peak differs only by the replay's block rounding (512 B,
/// unsplit remainders): within 0.5 %.
#[test]
fn pytorch_policy_reserves_what_pytorch_reserved_on_real_traces() {
    for name in [
        "gpt2-bf16amp-adamw-mb8",
        "bert-bf16amp-adamw-mb32-s512",
        "resnet50-fp32-momentum-mb64",
        "llama3-8b-L4-bf16amp-adamw-mb2-s4096",
    ] {
        let path = format!(
            "{}/tests/data/snapshots/{name}.pickle",
            env!("CARGO_MANIFEST_DIR")
        );
        let snap = Snapshot::from_pickle(&std::fs::read(path).unwrap()).unwrap();
        let (events, rec) = events_from_snapshot(&snap);
        let r = replay(&events, &AllocatorConfig::new(Policy::PyTorch), None).unwrap();
        let err = r.peak_reserved_bytes as f64 / rec.peak_reserved_bytes as f64 - 1.0;
        eprintln!(
            "{name}: recorded reserved {} replayed {} ({:+.2} %), allocated {} / {}",
            rec.peak_reserved_bytes,
            r.peak_reserved_bytes,
            err * 100.0,
            rec.peak_allocated_bytes,
            r.peak_allocated_bytes
        );
        assert!(err.abs() <= 0.01, "{name}: {:+.2} %", err * 100.0);
        let a_err = r.peak_allocated_bytes as f64 / rec.peak_allocated_bytes as f64 - 1.0;
        assert!(
            a_err.abs() <= 0.005,
            "{name}: allocated {:+.3} %",
            a_err * 100.0
        );
    }
}
