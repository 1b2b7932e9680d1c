//! The planned tier (issue 34): profiles from traces, the link's timing model, the planner's
//! choices and the floor, on hand-made steps whose answers can be worked out by hand.

use vram_tier::plan::{
    self, decide, simulate, HostCpu, Item, ItemKind, Link, Move, PhaseInfo, PhaseKind, Plan,
    Profile, Strategy, Trace, TraceEvent,
};

const GB: u64 = 1_000_000_000;
const MB: u64 = 1_000_000;

fn link(gb_s: f64) -> Link {
    Link {
        d2h_bytes_per_s: gb_s * 1e9,
        h2d_bytes_per_s: gb_s * 1e9,
        latency_s: 0.0,
    }
}

const SLOW_CPU: HostCpu = HostCpu {
    adamw_params_per_s: 1e6,
};

fn phase(name: &str, kind: PhaseKind, seconds: f64) -> PhaseInfo {
    PhaseInfo {
        name: name.into(),
        kind,
        seconds,
    }
}

/// Two layers: weights (2 × 1 GB), Adam states (4 × 1 GB), activations (2 × 1 GB per step),
/// gradients, a 1 GB loss temporary. Phases: before, f0, f1, loss, b1, b0, optimizer (0, 1,
/// 1, 1, 2, 2, 1 s). Each backward frees its layer's activation, then makes its gradient.
fn toy_trace(steps: usize) -> Trace {
    toy_trace_with(steps, GB, GB)
}

/// [`toy_trace`] with other sizes of weights (and so gradients) and of each state.
fn toy_trace_with(steps: usize, weight: u64, state: u64) -> Trace {
    let phases = vec![
        phase("before", PhaseKind::Other, 0.0),
        phase("f0", PhaseKind::Forward, 1.0),
        phase("f1", PhaseKind::Forward, 1.0),
        phase("loss", PhaseKind::Loss, 1.0),
        phase("b1", PhaseKind::Backward, 2.0),
        phase("b0", PhaseKind::Backward, 2.0),
        phase("opt", PhaseKind::Optimizer, 1.0),
    ];
    let mut ev = Vec::new();
    let mut id = 0u64;
    let mut alloc = |ev: &mut Vec<TraceEvent>, bytes: u64, cat: &str| {
        id += 1;
        ev.push(TraceEvent::Alloc {
            alloc: id,
            bytes,
            category: cat.into(),
        });
        id
    };
    let ph = |ev: &mut Vec<TraceEvent>, q: usize| ev.push(TraceEvent::Phase { phase: q });
    let free = |ev: &mut Vec<TraceEvent>, i: u64| ev.push(TraceEvent::Free { free: i });
    for s in 0..steps {
        ph(&mut ev, 0);
        if s == 0 {
            alloc(&mut ev, weight, "parameters");
            alloc(&mut ev, weight, "parameters");
        }
        ph(&mut ev, 1);
        let a0 = alloc(&mut ev, GB, "activations");
        ph(&mut ev, 2);
        let a1 = alloc(&mut ev, GB, "activations");
        ph(&mut ev, 3);
        let l = alloc(&mut ev, GB, "loss");
        free(&mut ev, l);
        ph(&mut ev, 4);
        free(&mut ev, a1);
        let g1 = alloc(&mut ev, weight, "gradients");
        ph(&mut ev, 5);
        free(&mut ev, a0);
        let g0 = alloc(&mut ev, weight, "gradients");
        ph(&mut ev, 6);
        if s == 0 {
            for _ in 0..4 {
                alloc(&mut ev, state, "optimizer_states");
            }
        }
        free(&mut ev, g1);
        free(&mut ev, g0);
    }
    Trace {
        source: "hand-made".into(),
        phases,
        events: ev,
    }
}

#[test]
fn a_trace_becomes_phases_items_and_base() {
    let p = Profile::from_trace(&toy_trace(3), 1).unwrap();
    assert_eq!(p.phases.len(), 7);
    let count = |k| p.items.iter().filter(|i| i.kind == k).count();
    assert_eq!(count(ItemKind::Parameter), 2);
    assert_eq!(count(ItemKind::OptimizerState), 4);
    assert_eq!(count(ItemKind::Activation), 2);
    assert_eq!(count(ItemKind::Gradient), 2);
    // Weights: every forward and the optimizer; states: the optimizer; the first layer's
    // activation: made in f0, read in b0.
    let w = p
        .items
        .iter()
        .find(|i| i.kind == ItemKind::Parameter)
        .unwrap();
    assert_eq!(w.uses, vec![1, 2, 6]);
    let st = p
        .items
        .iter()
        .find(|i| i.kind == ItemKind::OptimizerState)
        .unwrap();
    assert_eq!((st.uses.clone(), st.persistent), (vec![6], true));
    let a0 = p
        .items
        .iter()
        .find(|i| i.kind == ItemKind::Activation)
        .unwrap();
    assert_eq!((a0.alloc, a0.free, a0.uses.clone()), (1, 5, vec![1, 5]));
    // Live bytes: 6 GB persistent, + activations, + the loss at its phase.
    let live: Vec<u64> = (0..7).map(|q| p.live(q) / GB).collect();
    assert_eq!(live, vec![6, 7, 8, 9, 8, 8, 8]);
    assert_eq!(p.peak(), (9 * GB, 3));
    assert_eq!(p.native_seconds(), 8.0);
    // Chunked: the optimizer phase becomes two, the states dealt two by two.
    let c = Profile::from_trace(&toy_trace(3), 2).unwrap();
    assert_eq!(c.phases.len(), 8);
    let chunks: Vec<Option<usize>> = c
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::OptimizerState)
        .map(|i| i.chunk)
        .collect();
    assert_eq!(chunks, vec![Some(0), Some(0), Some(1), Some(1)]);
    assert!(
        Profile::from_trace(&toy_trace(1), 1).is_err(),
        "one step is not enough"
    );
}

#[test]
fn nothing_moves_under_a_cap_that_fits() {
    let p = Profile::from_trace(&toy_trace(3), 1).unwrap();
    let d = decide(&p, 9 * GB, &link(1.0), &SLOW_CPU).unwrap();
    assert_eq!(d.strategy, Strategy::None);
    assert!(d.plan.moves.is_empty());
    assert!((d.outcome.step_s - 8.0).abs() < 1e-9);
}

/// The link's timing model, by hand: only the loss phase (9 GB) is over an 8 GB cap. An
/// optimizer state (used only by the optimizer) leaves after the optimizer and comes back
/// before it: 2 s from the optimizer's end to the loss (f0, f1) for the way out, 4 s from the
/// loss to the optimizer (b1, b0) for the way back; at 1 GB/s each way takes 1 s: no stall.
/// At 0.1 GB/s each takes 10 s: 8 s of stall before the loss and 6 s before the optimizer,
/// which one stall cannot share (the copy back must end before the optimizer, the copy out
/// starts after it): 8 + 14 = 22 s, the floor, and the plan's step.
#[test]
fn the_link_model_prices_a_state_round_trip() {
    let p = Profile::from_trace(&toy_trace(3), 1).unwrap();
    let d = decide(&p, 8 * GB, &link(1.0), &SLOW_CPU).unwrap();
    assert_eq!(d.strategy, Strategy::Stream);
    assert!(d.outcome.fits);
    assert!((d.outcome.step_s - 8.0).abs() < 1e-6, "{:?}", d.outcome);
    assert_eq!((d.outcome.d2h_bytes, d.outcome.h2d_bytes), (GB, GB));
    let moved: Vec<ItemKind> = d.plan.moves.iter().map(|m| p.items[m.item].kind).collect();
    assert_eq!(moved, vec![ItemKind::OptimizerState]);
    let f = plan::floor(&p, 8 * GB, &link(1.0), &SLOW_CPU);
    assert!((f.step_s - 8.0).abs() < 1e-9, "{f:?}");
    let slow = decide(&p, 8 * GB, &link(0.1), &SLOW_CPU).unwrap();
    let f = plan::floor(&p, 8 * GB, &link(0.1), &SLOW_CPU);
    assert!((f.step_s - 22.0).abs() < 1e-6, "{f:?}");
    assert!(
        (f.out_s - 8.0).abs() < 1e-6 && (f.in_s - 6.0).abs() < 1e-6,
        "{f:?}"
    );
    assert!(
        (slow.outcome.step_s - 22.0).abs() < 1e-6,
        "{:?} {f:?}",
        slow.outcome
    );
}

#[test]
fn a_plan_that_does_not_free_enough_does_not_fit() {
    let p = Profile::from_trace(&toy_trace(3), 1).unwrap();
    let o = simulate(&p, &Plan::default(), 8 * GB, &link(1.0), &SLOW_CPU, 4);
    assert!(!o.fits);
    assert_eq!(o.overflow_phase, Some(3));
    // At the loss the device must hold the 1 GB loss and the 1 GB activation made in f1 and
    // used there... (its uses: f1 and b1): under 1 GB nothing can fit.
    assert!(decide(&p, GB / 2, &link(1.0), &SLOW_CPU).is_none());
    let f = plan::floor(&p, GB / 2, &link(1.0), &SLOW_CPU);
    assert!(f.step_s.is_infinite());
}

/// A move's copies are ordered by events: the phase after its last use must end before the
/// copy out starts, and its next use waits for the copy back.
#[test]
fn copies_wait_for_their_events() {
    let p = Profile::from_trace(&toy_trace(3), 1).unwrap();
    let a0 = p
        .items
        .iter()
        .position(|i| i.kind == ItemKind::Activation)
        .unwrap();
    // f0 ends at 1 s; out 1..11 s at 0.1 GB/s; back issued at b1's start, needed at b0.
    let plan = Plan {
        moves: vec![Move {
            item: a0,
            after: 1,
            back: 5,
            issue: 4,
            wraps: false,
        }],
        host_chunks: vec![],
    };
    let o = simulate(&p, &plan, 8 * GB, &link(0.1), &SLOW_CPU, 4);
    assert!(o.fits);
    // f1 (1..2) and the loss wait for 9 GB → 8: the copy out ends at 11 s; b1 runs 12..14
    // while the copy back (issued at 12) runs to 22; b0 waits until 22: step 22 + 2 + 1 = 25.
    assert!((o.step_s - 25.0).abs() < 1e-6, "{o:?}");
}

/// When the link is slow and the host's CPU fast, the planner updates optimizer chunks on
/// the host instead of streaming their states (here each weight is a tenth of its states, so
/// a host update moves a fifth of the bytes), and says so; with a slow CPU it streams.
#[test]
fn the_planner_chooses_between_streaming_and_updating_on_the_host() {
    let p = Profile::from_trace(&toy_trace_with(3, GB / 5, GB), 2).unwrap();
    let fast_cpu = HostCpu {
        adamw_params_per_s: 1e12,
    };
    // Live at the loss: 0.4 + 4 + 2 + 1 = 7.4 GB; the cap leaves 2 GB out.
    let d = decide(&p, 5_400 * MB, &link(0.05), &fast_cpu).unwrap();
    assert_eq!(d.strategy, Strategy::HostUpdate, "{d:?}");
    assert!(d.host_update.as_ref().unwrap().step_s < d.stream.step_s);
    assert!(d.outcome.cpu_s > 0.0);
    let slower = HostCpu {
        adamw_params_per_s: 1e5,
    };
    let slow = decide(&p, 5_400 * MB, &link(0.05), &slower).unwrap();
    assert_eq!(slow.strategy, Strategy::Stream, "{slow:?}");
    assert_eq!(Strategy::HostUpdate.code(), 2);
}

/// The floor is a lower bound: no plan the planner finds beats it, on random steps.
mod floor_bound {
    use super::*;
    use proptest::prelude::{prop_assert, proptest, ProptestConfig};
    use proptest::strategy::Strategy as _;

    fn profile() -> impl proptest::strategy::Strategy<Value = (Profile, u64, f64)> {
        let layers = 1usize..5;
        (
            layers,
            1usize..4,
            proptest::collection::vec(1u64..2000, 40),
            1u32..100,
            1u32..20,
        )
            .prop_map(|(l, chunks, sizes, cap_pct, gbs)| {
                let mut s = sizes.into_iter().cycle();
                let mut ev = Vec::new();
                let mut id = 0u64;
                let mut next = |ev: &mut Vec<TraceEvent>, cat: &str, b: u64| {
                    id += 1;
                    ev.push(TraceEvent::Alloc {
                        alloc: id,
                        bytes: b * MB,
                        category: cat.into(),
                    });
                    id
                };
                let mut phases = vec![phase("before", PhaseKind::Other, 0.0)];
                for i in 0..l {
                    phases.push(phase(
                        &format!("f{i}"),
                        PhaseKind::Forward,
                        0.01 * (i + 1) as f64,
                    ));
                }
                phases.push(phase("loss", PhaseKind::Loss, 0.02));
                for i in (0..l).rev() {
                    phases.push(phase(&format!("b{i}"), PhaseKind::Backward, 0.02));
                }
                phases.push(phase("opt", PhaseKind::Optimizer, 0.01));
                let n = phases.len();
                let weights: Vec<u64> = (0..l).map(|_| s.next().unwrap()).collect();
                for step in 0..3 {
                    ev.push(TraceEvent::Phase { phase: 0 });
                    if step == 0 {
                        for &w in &weights {
                            next(&mut ev, "parameters", w);
                        }
                    }
                    let mut acts = Vec::new();
                    for i in 0..l {
                        ev.push(TraceEvent::Phase { phase: 1 + i });
                        acts.push(next(&mut ev, "activations", s.next().unwrap()));
                    }
                    ev.push(TraceEvent::Phase { phase: 1 + l });
                    let loss = next(&mut ev, "loss", s.next().unwrap());
                    ev.push(TraceEvent::Free { free: loss });
                    let mut grads = Vec::new();
                    for i in (0..l).rev() {
                        ev.push(TraceEvent::Phase {
                            phase: 2 + l + (l - 1 - i),
                        });
                        grads.push(next(&mut ev, "gradients", weights[i]));
                        ev.push(TraceEvent::Free { free: acts[i] });
                    }
                    ev.push(TraceEvent::Phase { phase: n - 1 });
                    if step == 0 {
                        for &w in &weights {
                            next(&mut ev, "optimizer_states", w);
                            next(&mut ev, "optimizer_states", w);
                        }
                    }
                    for g in grads {
                        ev.push(TraceEvent::Free { free: g });
                    }
                }
                let t = Trace {
                    source: "random".into(),
                    phases,
                    events: ev,
                };
                let p = Profile::from_trace(&t, chunks).unwrap();
                let cap = p.peak().0 * u64::from(cap_pct) / 100;
                (p, cap, f64::from(gbs))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn no_plan_beats_the_floor((p, cap, gbs) in profile()) {
            let l = link(gbs);
            let cpu = HostCpu { adamw_params_per_s: 1e9 };
            let f = plan::floor(&p, cap, &l, &cpu);
            if let Some(d) = decide(&p, cap, &l, &cpu) {
                prop_assert!(d.outcome.fits);
                prop_assert!(
                    d.outcome.step_s >= f.step_s * (1.0 - 1e-9) - 1e-9,
                    "plan {} s beats floor {} s ({f:?})", d.outcome.step_s, f.step_s
                );
                prop_assert!(d.outcome.peak_bytes <= cap);
            }
        }
    }
}

/// Weights are read by the backward too (`dX = dY·Wᵀ`; a profile lists only the forwards,
/// not knowing which layer owns which weight), and the runtime never moves them: the floor
/// takes only movable items. Forward, backward, optimizer (1 s each); a 1 GB weight used by
/// the forward and the optimizer; 1, 2 and 1 GB of other bytes. Under 2.5 GB the backward
/// (3 GB) has nothing it can move: no plan, no floor (counting the weight, it had one).
#[test]
fn the_floor_moves_only_what_the_runtime_can() {
    let weight = Item {
        bytes: GB,
        kind: ItemKind::Parameter,
        persistent: true,
        alloc: 0,
        free: 2,
        uses: vec![0, 2],
        chunk: Some(0),
        at_alloc_peak: true,
        at_free_peak: true,
        movable: false,
    };
    let p = Profile {
        phases: vec![
            phase("f0", PhaseKind::Forward, 1.0),
            phase("b0", PhaseKind::Backward, 1.0),
            phase("opt", PhaseKind::Optimizer, 1.0),
        ],
        items: vec![weight],
        base: vec![GB, 2 * GB, GB],
        chunks: 1,
    };
    let cap = 2_500 * MB;
    assert!(decide(&p, cap, &link(1.0), &SLOW_CPU).is_none());
    let f = plan::floor(&p, cap, &link(1.0), &SLOW_CPU);
    assert!(f.step_s.is_infinite(), "{f:?}");
    assert_eq!(f.phase, Some(1));
}

/// The host's AdamW starts when the optimizer step does, and the delay an activation's
/// copies need falls before it: the floor adds them. The toy step with 0.2 GB weights, both
/// chunks updated on the host (their 4 GB of states gone), a 2.4 GB cap, 0.1 GB/s each way:
/// at the loss (0.4 GB weights, 2 GB activations, the 1 GB loss) 1 GB must leave. f0's
/// activation leaves after f0 (ends at 1 s; the loss starts at 2 s): 10 s of copy, 9 s of
/// delay; it is back for b0 (starts at 5 s, the loss ends at 3 s): 8 s; apart, 17 s. The
/// optimizer starts at 7 s + 17 s; the host then takes a chunk's 0.2 GB of gradients down
/// (2 s), updates (1e12 params/s: nothing), and puts a chunk's weights up (2 s), and all of
/// them, 0.4 GB, take 4 s each way: 7 + 17 + 4 = 28 s, where the delay alone gives
/// 8 − 1 + 17 = 24 s.
#[test]
fn the_host_update_waits_for_the_delay_before_the_optimizer() {
    let p = Profile::from_trace(&toy_trace_with(3, GB / 5, GB), 2).unwrap();
    let fast_cpu = HostCpu {
        adamw_params_per_s: 1e12,
    };
    let cap = 2_400 * MB;
    let f = plan::floor(&p, cap, &link(0.1), &fast_cpu);
    assert_eq!((f.host_chunks, f.phase), (2, Some(3)), "{f:?}");
    assert!(
        (f.out_s - 9.0).abs() < 1e-6 && (f.in_s - 8.0).abs() < 1e-6,
        "{f:?}"
    );
    assert!((f.step_s - 28.0).abs() < 1e-3, "{f:?}");
    let d = decide(&p, cap, &link(0.1), &fast_cpu).unwrap();
    assert!(d.outcome.fits);
    assert!(d.outcome.step_s >= f.step_s, "{:?} {f:?}", d.outcome);
}
