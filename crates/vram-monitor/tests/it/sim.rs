use proptest::prelude::*;
use vram_monitor::{Pattern, Scenario, SimGpu, SimProcess, SimulatedSource, Source};

#[test]
fn demo_is_deterministic_and_consistent() {
    let a = crate::demo_samples(50);
    let b = crate::demo_samples(50);
    assert_eq!(a, b, "same scenario, same samples");
    for s in &a {
        assert_eq!(s.source, "simulated");
        for g in &s.gpus {
            let procs: u64 = g.processes.iter().filter_map(|p| p.gpu_memory_bytes).sum();
            assert!(g.memory_used_bytes >= procs, "used covers the processes");
            assert!(g.memory_used_bytes <= g.memory_total_bytes);
            assert!(g.utilization_pct.is_some_and(|u| u <= 100));
        }
    }
}

#[test]
fn demo_has_a_leaking_process_and_one_that_comes_and_goes() {
    let s = crate::demo_samples(60);
    let mem = |k: usize, pid: u32| {
        s[k].gpus
            .iter()
            .flat_map(|g| &g.processes)
            .find(|p| p.pid == pid)
            .and_then(|p| p.gpu_memory_bytes)
    };
    // 24 MiB per sample for 50 samples, give or take 12 MiB of jitter.
    let grown = mem(50, 6001).unwrap() as i64 - mem(0, 6001).unwrap() as i64;
    assert!((1176 << 20..=1224 << 20).contains(&grown), "{grown}");
    assert!(mem(10, 7007).is_some() && mem(45, 7007).is_none());
}

#[test]
fn inconsistent_scenarios_are_errors_not_panics() {
    let mut sc = Scenario::demo();
    sc.processes[0].gpu = 9;
    let e = SimulatedSource::new(sc).unwrap_err();
    assert!(e.is_bad_input());
    assert!(e.to_string().contains("GPU 9"), "{e}");
    let empty = Scenario {
        gpus: vec![],
        processes: vec![],
        seed: 1,
    };
    assert!(SimulatedSource::new(empty).is_err());
}

proptest! {
    /// Whatever the scenario, used memory never exceeds the total and no
    /// process is reported with more than the GPU has.
    #[test]
    fn memory_never_exceeds_total(total in 1u64..(1 << 40), bytes in 0u64..(1 << 41), k in 0u64..10_000) {
        let sc = Scenario {
            gpus: vec![SimGpu { name: "g".into(), total_bytes: total, driver_bytes: total / 3, utilization_pct: 50 }],
            processes: (0..3).map(|i| SimProcess {
                gpu: 0, pid: i, user: "u".into(), command: "c".into(),
                pattern: Pattern::Leak { start: bytes / 2, per_step: bytes / 7 + 1, cap: bytes + 1 },
            }).collect(),
            seed: 7,
        };
        let s = SimulatedSource::new(sc).unwrap().starting_at(k).sample(0).unwrap();
        prop_assert!(s.gpus[0].memory_used_bytes <= total);
    }
}
