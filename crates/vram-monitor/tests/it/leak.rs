use vram_monitor::leak::{
    floors, mann_kendall, normal_cdf, sen_slope, LeakConfig, LeakDetector, LeakFinding, LeakWatch,
    Series,
};
use vram_monitor::view::human_bytes;
use vram_monitor::{Pattern, Scenario, SimGpu, SimProcess, SimulatedSource, Source};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn normal_cdf_matches_tables() {
    // Standard normal table values (e.g. Abramowitz & Stegun, table 26.1).
    assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
    assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
    assert!((normal_cdf(-2.326_348) - 0.01).abs() < 1e-6);
    let mk = mann_kendall(&(0..200).map(f64::from).collect::<Vec<_>>());
    assert!(
        mk.p_increasing > 0.0 && mk.p_increasing < 1e-30,
        "tiny p is not rounded to 0"
    );
}

#[test]
fn mann_kendall_on_a_strictly_increasing_series() {
    // n = 10: S = n(n-1)/2 = 45, Var(S) = n(n-1)(2n+5)/18 = 125,
    // Z = (S-1)/sqrt(Var) = 44/sqrt(125) = 3.9354 (Mann 1945; Kendall 1975).
    let x: Vec<f64> = (0..10).map(f64::from).collect();
    let mk = mann_kendall(&x);
    assert_eq!(mk.s, 45);
    assert!((mk.var_s - 125.0).abs() < 1e-9);
    assert!((mk.z - 3.9354).abs() < 1e-4);
    assert!(mk.p_increasing < 1e-4);
    let down: Vec<f64> = x.iter().rev().copied().collect();
    assert_eq!(mann_kendall(&down).s, -45);
    assert!(mann_kendall(&down).p_increasing > 0.999);
}

#[test]
fn ties_reduce_the_variance() {
    // Values 1,1,2: one tie group of size 2: Var = (3*2*11 - 2*1*9)/18 = 48/18.
    let mk = mann_kendall(&[1.0, 1.0, 2.0]);
    assert_eq!(mk.s, 2);
    assert!((mk.var_s - 48.0 / 18.0).abs() < 1e-12);
    let flat = mann_kendall(&[5.0; 20]);
    assert_eq!((flat.s, flat.z), (0, 0.0));
}

#[test]
fn sen_slope_ignores_an_outlier() {
    let t: Vec<f64> = (0..11).map(f64::from).collect();
    let mut y: Vec<f64> = t.iter().map(|t| 3.0 * t + 1.0).collect();
    y[5] = 1e9;
    assert_eq!(sen_slope(&t, &y), Some(3.0));
    assert_eq!(sen_slope(&[1.0], &[1.0]), None);
}

#[test]
fn series_stays_bounded_and_keeps_the_mean() {
    let mut s = Series::new(16);
    for i in 0..1000 {
        s.push(f64::from(i), 10.0);
    }
    let p = s.points();
    assert!(p.len() <= 16 + 1, "{}", p.len());
    assert_eq!(s.readings(), 1000);
    assert!(p.iter().all(|(_, y)| (*y - 10.0).abs() < 1e-9));
}

#[test]
fn merged_points_keep_their_lowest_reading() {
    // A one-reading dip to 0 in a series of 10s survives every merge.
    let mut s = Series::new(8);
    for i in 0..100 {
        s.push(f64::from(i), if i == 37 { 0.0 } else { 10.0 });
    }
    let kept = s.kept();
    assert!(kept.len() <= 9);
    assert_eq!(kept.iter().filter(|p| p.min == 0.0).count(), 1);
    // Floors by time: 100 s in 4 stretches of 25 s; the dip is in the second.
    let f = floors(&kept, 4);
    assert_eq!(
        f.iter().map(|f| f.1).collect::<Vec<_>>(),
        vec![10.0, 0.0, 10.0, 10.0]
    );
}

#[test]
fn demo_flags_only_the_leaking_notebook() {
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(120).iter().for_each(|s| det.observe(s));
    let f = det.assess();
    let leaking: Vec<u32> = f.iter().filter(|f| f.leaking).map(|f| f.pid).collect();
    assert_eq!(leaking, vec![6001], "{f:#?}");
    // The trainer warms up and then saw-tooths: its floor stops rising,
    // which clears it.
    let trainer = f.iter().find(|f| f.pid == 4242).unwrap();
    assert!(!trainer.leaking);
    assert!(trainer.rising_chunks < 4, "{trainer:#?}");
    // 24 MiB per one-second sample.
    let nb = f.iter().find(|f| f.pid == 6001).unwrap();
    assert!(
        (nb.slope_bytes_per_s / f64::from(1 << 20) - 24.0).abs() < 1.0,
        "{}",
        nb.slope_bytes_per_s
    );
}

#[test]
fn too_few_readings_give_no_verdict() {
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(5).iter().for_each(|s| det.observe(s));
    assert!(det.assess().is_empty());
    // 80 one-second readings are fewer than the 90 s the default asks for,
    // even for the notebook leaking 24 MiB/s.
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(80).iter().for_each(|s| det.observe(s));
    assert!(det.assess().is_empty());
}

#[test]
fn one_process_can_be_tested_alone() {
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(100).iter().for_each(|s| det.observe(s));
    let all = det.assess();
    let one = det.assess_process(1, 6001).unwrap();
    assert_eq!(all.iter().find(|f| f.pid == 6001), Some(&one));
    assert!(det.assess_process(0, 6001).is_none(), "not on GPU 0");
}

mod props {
    use proptest::prelude::*;
    use vram_monitor::leak::{mann_kendall, Series};

    proptest! {
        /// Reversing a series negates S; p-values stay probabilities.
        #[test]
        fn reversal_negates_s(x in proptest::collection::vec(0u32..50, 2..60)) {
            let x: Vec<f64> = x.into_iter().map(f64::from).collect();
            let rev: Vec<f64> = x.iter().rev().copied().collect();
            let (a, b) = (mann_kendall(&x), mann_kendall(&rev));
            prop_assert_eq!(a.s, -b.s);
            prop_assert!((0.0..=1.0).contains(&a.p_increasing));
            prop_assert!((a.var_s - b.var_s).abs() < 1e-9);
        }

        /// Averaging pairs keeps the overall level of a series within its range.
        #[test]
        fn decimation_stays_within_range(y in proptest::collection::vec(0u32..1000, 1..500)) {
            let mut s = Series::new(8);
            for (i, v) in y.iter().enumerate() {
                s.push(i as f64, f64::from(*v));
            }
            let (lo, hi) = (f64::from(*y.iter().min().unwrap()), f64::from(*y.iter().max().unwrap()));
            prop_assert!(s.points().len() <= 9);
            prop_assert!(s.points().iter().all(|p| p.1 >= lo - 1e-9 && p.1 <= hi + 1e-9));
        }
    }
}

// ---------------------------------------------------------------------------
// False alarms and detection over many simulated processes.
//
// Three populations of processes, each process with its own parameters and
// jitter drawn from its pid, sampled at 1 Hz for 10 minutes; the live check
// runs every 5 s of sample time (as in `vram record --leak-check`) and the
// final check at the end, through the same `LeakWatch`:
// - sawtooth: models loaded and freed one after another (1 to 40 GiB each,
//   held 10 s to 3 min, 1 to 5 s between them);
// - plateau: a caching allocator warming up (running maximum of random
//   batches) for 5 to 60 s to 1 to 30 GiB, then holding it, with a training
//   sawtooth of up to 3 GiB and a 2 to 20 s period on top;
// - leak: 1 MiB/s never given back, on top of a flat process, a training
//   sawtooth or a warm-up of the plateau kind.
// Targets (issue 16): no false alarm in the first two, every leak caught
// within 5 minutes.

/// Processes per population in `cargo test`; `LEAK_SEEDS=N` asks for more
/// (BENCHMARKS.md was made with 2,000).
fn seeds() -> u32 {
    std::env::var("LEAK_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn draw(pid: u32, what: u64, lo: u64, hi: u64) -> u64 {
    // splitmix64 of (pid, what): independent draws per process and field.
    let mut z = (u64::from(pid) << 8 | what).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    lo + (z ^ (z >> 31)) % (hi - lo + 1)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Population {
    Sawtooth,
    Plateau,
    Leak,
}

fn models(pid: u32) -> Pattern {
    let min_hold = draw(pid, 4, 10, 60);
    Pattern::Models {
        base: draw(pid, 1, 300, 800) * MIB,
        min_bytes: GIB,
        max_bytes: draw(pid, 3, 1, 40) * GIB,
        min_hold,
        max_hold: min_hold + draw(pid, 5, 0, 120),
        gap: draw(pid, 6, 1, 5),
    }
}

fn warm_up(pid: u32) -> Pattern {
    let start = draw(pid, 1, 512, 2048) * MIB;
    Pattern::WarmUp {
        start,
        plateau: start + draw(pid, 2, 1, 30) * GIB,
        warmup: draw(pid, 3, 5, 60),
        saw: draw(pid, 4, 0, 3072) * MIB,
        period: draw(pid, 5, 2, 20),
    }
}

fn pattern(pop: Population, pid: u32) -> Pattern {
    match pop {
        Population::Sawtooth => models(pid),
        Population::Plateau => warm_up(pid),
        Population::Leak => Pattern::Leaking {
            per_step: MIB,
            under: Box::new(match draw(pid, 9, 0, 2) {
                0 => Pattern::Flat {
                    bytes: draw(pid, 1, 1, 40) * GIB,
                },
                1 => Pattern::Training {
                    start: GIB,
                    plateau: draw(pid, 2, 2, 40) * GIB,
                    ramp_steps: draw(pid, 3, 1, 30),
                    saw: draw(pid, 4, 0, 3072) * MIB,
                    period: draw(pid, 5, 2, 20),
                },
                _ => warm_up(pid),
            }),
        },
    }
}

fn population(pop: Population, n: u32) -> Scenario {
    Scenario {
        gpus: vec![SimGpu {
            name: "simulated".into(),
            total_bytes: u64::MAX / 4,
            driver_bytes: 0,
            utilization_pct: 50,
        }],
        processes: (1..=n)
            .map(|pid| SimProcess {
                gpu: 0,
                pid,
                user: "u".into(),
                command: format!("{pop:?} {pid}"),
                pattern: pattern(pop, pid),
            })
            .collect(),
        seed: 0x1eaf,
    }
}

/// Per process: when the live check first flagged it (seconds since its first
/// reading) and the final verdict. Every finding of every check is passed to
/// `each` (for invariants).
struct Run {
    flagged_after_s: Vec<Option<f64>>,
    final_leaking: Vec<bool>,
}

fn watch(
    scenario: Scenario,
    samples: u64,
    interval_ms: u64,
    mut each: impl FnMut(&LeakFinding),
) -> Run {
    let n = scenario.processes.len();
    let mut src = SimulatedSource::new(scenario).unwrap();
    let mut w = LeakWatch::new(LeakConfig::default(), 5_000);
    for k in 0..samples {
        for f in w.observe(&src.sample(k * interval_ms).unwrap()) {
            each(&f);
        }
    }
    let fin = w.finish();
    assert_eq!(fin.len(), n, "every process gets a final verdict");
    fin.iter().for_each(|v| each(&v.finding));
    Run {
        flagged_after_s: fin.iter().map(|v| v.flagged_after_s).collect(),
        final_leaking: fin.iter().map(|v| v.finding.leaking).collect(),
    }
}

/// A flagged finding always shows a growth rate: never "0 B/s".
fn slope_agrees(f: &LeakFinding) {
    if f.leaking {
        assert!(f.slope_bytes_per_s >= 1.0, "{f:#?}");
        assert_ne!(human_bytes(f.slope_bytes_per_s as u64), "0 B");
        assert!(f.floor_growth_bytes >= 64 << 20, "{f:#?}");
    }
}

#[test]
fn no_false_alarm_for_sawtooth_or_plateau_and_leaks_caught_within_5_minutes() {
    let n = seeds();
    let mut table = Vec::new();
    for pop in [Population::Sawtooth, Population::Plateau, Population::Leak] {
        let run = watch(population(pop, n), 600, 1000, slope_agrees);
        let live = run.flagged_after_s.iter().filter(|f| f.is_some()).count();
        let fin = run.final_leaking.iter().filter(|l| **l).count();
        let mut times: Vec<f64> = run.flagged_after_s.iter().flatten().copied().collect();
        times.sort_by(f64::total_cmp);
        let within_5_min = times.iter().filter(|t| **t <= 300.0).count();
        table.push(format!(
            "{pop:?}: {n} processes, flagged live {live}, final LEAK {fin}, live within 5 min {within_5_min}, first flag median {:?} s max {:?} s",
            times.get(times.len() / 2),
            times.last()
        ));
        match pop {
            Population::Sawtooth | Population::Plateau => {
                assert_eq!(
                    (live, fin),
                    (0, 0),
                    "false alarm in {pop:?}: {run:?}",
                    run = run.flagged_after_s
                );
            }
            Population::Leak => {
                assert_eq!(within_5_min as u32, n, "{:?}", run.flagged_after_s);
                assert_eq!(fin as u32, n);
            }
        }
    }
    // Printed for BENCHMARKS.md (`cargo test -p vram-monitor --test it no_false_alarm -- --nocapture`).
    eprintln!("leak check rates:\n{}", table.join("\n"));
}

#[test]
fn models_loaded_one_after_another_at_5_hz_are_not_flagged_live_or_at_the_end() {
    // The false alarm of ../shared/groundtruth/gpu-runs.md (monitor section,
    // measured on an H100 80GB HBM3, driver 580.159.04, 2026-11-22):
    // `vram record --interval 200ms --leak-check`, 663 samples, a process
    // loading models one after another (14 MiB -> 14.9 GiB), flagged LEAK by
    // the live check with a slope printed as 0 B/s and called ok at the end.
    // Re-enacted with 200 such processes: up to 15 GiB models held 2 to 20 s.
    let sc = Scenario {
        processes: (1..=seeds())
            .map(|pid| SimProcess {
                gpu: 0,
                pid,
                user: "u".into(),
                command: "python measure.py".into(),
                pattern: Pattern::Models {
                    base: 14 * MIB,
                    min_bytes: GIB,
                    max_bytes: 15 * GIB,
                    min_hold: 10,
                    max_hold: 100,
                    gap: draw(pid, 7, 1, 10),
                },
            })
            .collect(),
        ..population(Population::Sawtooth, 0)
    };
    let run = watch(sc, 663, 200, slope_agrees);
    assert!(
        run.flagged_after_s.iter().all(Option::is_none),
        "{:?}",
        run.flagged_after_s
    );
    assert!(run.final_leaking.iter().all(|l| !l));
}

#[test]
fn the_live_and_final_verdicts_come_from_one_watch() {
    // The demo notebook leaks 24 MiB per sample: flagged live once, and still
    // LEAK at the end, with the same rule and a matching slope.
    let mut w = LeakWatch::new(LeakConfig::default(), 5_000);
    let mut live = Vec::new();
    for s in crate::demo_samples(200) {
        live.extend(w.observe(&s));
    }
    assert_eq!(live.iter().map(|f| f.pid).collect::<Vec<_>>(), vec![6001]);
    // Flagged at the first check past 90 s of readings.
    assert!(
        live[0].span_s >= 90.0 && live[0].span_s < 96.0,
        "{}",
        live[0].span_s
    );
    let fin = w.finish();
    let nb = fin.iter().find(|v| v.finding.pid == 6001).unwrap();
    assert!(nb.finding.leaking);
    assert_eq!(nb.flagged_after_s, Some(live[0].span_s));
    assert!(((nb.finding.slope_bytes_per_s / MIB as f64) - 24.0).abs() < 1.0);
    for v in &fin {
        slope_agrees(&v.finding);
        assert_eq!(v.finding.leaking, v.finding.pid == 6001, "{v:#?}");
        assert_eq!(
            Some(&v.finding),
            w.detector()
                .assess_process(v.finding.gpu, v.finding.pid)
                .as_ref()
        );
    }
    // A leak that stops: flagged live, ok at the end, and the final verdict
    // says when it was flagged.
    let sc = Scenario {
        processes: vec![SimProcess {
            gpu: 0,
            pid: 1,
            user: "u".into(),
            command: "grows then stops".into(),
            pattern: Pattern::WarmUp {
                start: GIB,
                plateau: 2 * GIB,
                warmup: 0,
                saw: 0,
                period: 1,
            },
        }],
        ..population(Population::Sawtooth, 0)
    };
    // 10 MiB/s for 200 s, then flat for 1000 s.
    let mut src = SimulatedSource::new(sc).unwrap();
    let mut w = LeakWatch::new(LeakConfig::default(), 5_000);
    let mut flagged = 0;
    for k in 0..1200u64 {
        let mut s = src.sample(k * 1000).unwrap();
        s.gpus[0].processes[0].gpu_memory_bytes = Some(GIB + k.min(200) * 10 * MIB);
        flagged += w.observe(&s).len();
    }
    let fin = w.finish();
    assert_eq!(flagged, 1);
    assert!(!fin[0].finding.leaking);
    assert!(fin[0]
        .flagged_after_s
        .is_some_and(|t| (90.0..=200.0).contains(&t)));
}

mod verdict_props {
    use proptest::prelude::*;
    use vram_monitor::leak::{LeakConfig, LeakDetector};
    use vram_monitor::{GpuSample, ProcessSample, Sample};

    proptest! {
        /// Whatever the readings, a flagged process has a positive slope and
        /// a floor that rose by the threshold.
        #[test]
        fn flagged_means_a_positive_slope(steps in proptest::collection::vec(-40i64..60, 100..300), dt in 1u64..3) {
            let mut det = LeakDetector::new(LeakConfig::default());
            let mut bytes: i64 = 1 << 30;
            for (k, d) in steps.iter().enumerate() {
                bytes = (bytes + d * (1 << 20)).max(0);
                det.observe(&Sample {
                    t_ms: k as u64 * dt * 1000,
                    source: "test".into(),
                    gpus: vec![GpuSample {
                        index: 0, name: "g".into(), uuid: "u".into(),
                        memory_total_bytes: u64::MAX, memory_used_bytes: 0, utilization_pct: None,
                        processes: vec![ProcessSample { pid: 1, user: "u".into(), command: "c".into(), gpu_memory_bytes: Some(bytes as u64) }],
                        note: None,
                    }],
                });
            }
            for f in det.assess() {
                if f.leaking {
                    prop_assert!(f.slope_bytes_per_s >= 1.0);
                    prop_assert!(f.floor_growth_bytes >= 64 << 20);
                    prop_assert_eq!(f.rising_chunks, 4);
                }
            }
        }
    }
}
