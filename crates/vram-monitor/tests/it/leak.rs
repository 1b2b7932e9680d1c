use vram_monitor::leak::{mann_kendall, normal_cdf, sen_slope, LeakConfig, LeakDetector, Series};

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
fn demo_flags_only_the_leaking_notebook() {
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(120).iter().for_each(|s| det.observe(s));
    let f = det.assess();
    let leaking: Vec<u32> = f.iter().filter(|f| f.leaking).map(|f| f.pid).collect();
    assert_eq!(leaking, vec![6001], "{f:#?}");
    // The trainer warms up (significant over the whole window) and then
    // saw-tooths: the second-half and high-water conditions clear it.
    let trainer = f.iter().find(|f| f.pid == 4242).unwrap();
    assert!(trainer.whole.p_increasing < 0.01);
    assert!(!trainer.leaking);
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
}

#[test]
fn one_process_can_be_tested_alone() {
    let mut det = LeakDetector::new(LeakConfig::default());
    crate::demo_samples(60).iter().for_each(|s| det.observe(s));
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
