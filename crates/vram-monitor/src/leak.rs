//! Leak check: does a process's GPU memory keep growing?
//!
//! # The test
//!
//! For each (GPU, process) the detector keeps the series of memory readings
//! (bounded: beyond [`LeakConfig::max_points`] adjacent points are averaged in
//! pairs, so a day at 10 Hz costs a few kilobytes). A process is flagged when
//! all of these hold:
//!
//! 1. at least [`LeakConfig::min_points`] readings;
//! 2. the **Mann-Kendall trend test** rejects "no trend" in favour of an
//!    increasing trend at level [`LeakConfig::alpha`] (one-sided), over the
//!    whole series **and** over its second half, so a warm-up followed by a
//!    plateau is not a leak;
//! 3. the high-water mark keeps rising: the maximum of the last quarter exceeds
//!    the maximum of the first half by at least [`LeakConfig::min_growth_bytes`],
//!    so a caching allocator's sawtooth (grow, `empty_cache()`, grow to the same
//!    peak) is not a leak, and neither is a statistically significant but tiny
//!    drift.
//!
//! Why Mann-Kendall rather than a least-squares slope with a t-test: GPU memory
//! moves in steps (allocator segments of 2 MiB to 1 GiB), its noise is not
//! normal and a single large step would dominate a regression. Mann-Kendall
//! uses only the signs of pairwise differences, so it needs no distributional
//! assumption, detects any monotone (not only linear) growth and is robust to
//! outliers. Its magnitude companion, the Theil-Sen slope (median of pairwise
//! slopes), is reported as the growth rate.
//!
//! Caveat, stated honestly: Mann-Kendall assumes independent readings, and
//! memory readings are autocorrelated, which makes p-values optimistic. The
//! second-half and high-water-mark conditions exist to keep false alarms down
//! despite that; treat the p-value as a ranking, not an exact error rate.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Sample;

/// Thresholds of the leak check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeakConfig {
    /// One-sided significance level of the Mann-Kendall test.
    pub alpha: f64,
    /// Fewest readings before a verdict is given.
    pub min_points: usize,
    /// Least rise of the high-water mark that counts as growth.
    pub min_growth_bytes: u64,
    /// Points kept per series before pairs are averaged (also bounds the
    /// O(n²) test cost).
    pub max_points: usize,
}

impl Default for LeakConfig {
    fn default() -> Self {
        LeakConfig {
            alpha: 0.01,
            min_points: 12,
            min_growth_bytes: 64 << 20,
            max_points: 256,
        }
    }
}

/// Result of the Mann-Kendall test on one series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MannKendall {
    /// Sum of signs of all pairwise later-minus-earlier differences.
    pub s: i64,
    /// Variance of `s` under "no trend", corrected for ties.
    pub var_s: f64,
    /// Continuity-corrected standard score.
    pub z: f64,
    /// One-sided p-value for an increasing trend, `1 - Φ(z)` (computed
    /// directly, so tiny p-values do not round to 0).
    pub p_increasing: f64,
}

/// Mann-Kendall trend test (Mann 1945; Kendall 1975) with the tie-corrected
/// variance and continuity correction.
///
/// ```
/// use vram_monitor::leak::mann_kendall;
///
/// let growing = mann_kendall(&[1.0, 2.0, 2.0, 3.0, 5.0, 4.0, 6.0, 7.0, 9.0, 8.0, 10.0, 11.0]);
/// assert!(growing.p_increasing < 0.01);
/// let noise = mann_kendall(&[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 1.0]);
/// assert!(noise.p_increasing > 0.05);
/// ```
pub fn mann_kendall(x: &[f64]) -> MannKendall {
    let n = x.len();
    let mut s: i64 = 0;
    for i in 0..n {
        for j in i + 1..n {
            s += match x[j].partial_cmp(&x[i]) {
                Some(std::cmp::Ordering::Greater) => 1,
                Some(std::cmp::Ordering::Less) => -1,
                _ => 0,
            };
        }
    }
    let mut sorted: Vec<f64> = x.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mut ties = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[i] {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        ties += t * (t - 1.0) * (2.0 * t + 5.0);
        i = j + 1;
    }
    let nf = n as f64;
    let var_s = ((nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0).max(0.0);
    let z = if var_s == 0.0 || s == 0 {
        0.0
    } else if s > 0 {
        (s as f64 - 1.0) / var_s.sqrt()
    } else {
        (s as f64 + 1.0) / var_s.sqrt()
    };
    MannKendall {
        s,
        var_s,
        z,
        p_increasing: normal_sf(z),
    }
}

/// Theil-Sen slope: median of `(y_j - y_i) / (t_j - t_i)` over pairs with
/// `t_j > t_i`. `None` with fewer than two distinct times.
pub fn sen_slope(t: &[f64], y: &[f64]) -> Option<f64> {
    let n = t.len().min(y.len());
    let mut slopes = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            let dt = t[j] - t[i];
            if dt > 0.0 {
                slopes.push((y[j] - y[i]) / dt);
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_by(|a, b| a.total_cmp(b));
    let m = slopes.len();
    Some(if m % 2 == 1 {
        slopes[m / 2]
    } else {
        (slopes[m / 2 - 1] + slopes[m / 2]) / 2.0
    })
}

/// Standard normal CDF, Φ(z).
pub fn normal_cdf(z: f64) -> f64 {
    normal_sf(-z)
}

/// Standard normal upper tail, 1 − Φ(z) = erfc(z/√2)/2, via Numerical
/// Recipes' `erfcc` (fractional error below 1.2e-7 everywhere).
pub fn normal_sf(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = -a * a - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    0.5 * erfc
}

/// A series that stays bounded: beyond `cap` points, adjacent pairs are
/// averaged and each point then stands for twice as many readings.
#[derive(Debug, Clone)]
pub struct Series {
    cap: usize,
    width: usize,
    pending: (f64, f64, usize),
    points: Vec<(f64, f64)>,
    readings: usize,
}

impl Series {
    /// An empty series keeping at most `cap` points (at least 4).
    pub fn new(cap: usize) -> Self {
        Series {
            cap: cap.max(4),
            width: 1,
            pending: (0.0, 0.0, 0),
            points: Vec::new(),
            readings: 0,
        }
    }

    /// Add one reading at time `t` (seconds) of `y` bytes.
    pub fn push(&mut self, t: f64, y: f64) {
        self.readings += 1;
        self.pending.0 += t;
        self.pending.1 += y;
        self.pending.2 += 1;
        if self.pending.2 == self.width {
            let c = self.pending.2 as f64;
            self.points.push((self.pending.0 / c, self.pending.1 / c));
            self.pending = (0.0, 0.0, 0);
            if self.points.len() >= self.cap {
                self.points = self
                    .points
                    .chunks(2)
                    .map(|c| {
                        let k = c.len() as f64;
                        (
                            c.iter().map(|p| p.0).sum::<f64>() / k,
                            c.iter().map(|p| p.1).sum::<f64>() / k,
                        )
                    })
                    .collect();
                self.width *= 2;
            }
        }
    }

    /// The points (time, bytes), including a partly filled last one.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let mut p = self.points.clone();
        if self.pending.2 > 0 {
            let c = self.pending.2 as f64;
            p.push((self.pending.0 / c, self.pending.1 / c));
        }
        p
    }

    /// Number of raw readings pushed.
    pub fn readings(&self) -> usize {
        self.readings
    }
}

/// The verdict on one process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeakFinding {
    /// GPU index.
    pub gpu: u32,
    /// Process id.
    pub pid: u32,
    /// Owner.
    pub user: String,
    /// Command line.
    pub command: String,
    /// Readings seen.
    pub readings: usize,
    /// First reading in bytes.
    pub first_bytes: u64,
    /// Last reading in bytes.
    pub last_bytes: u64,
    /// Theil-Sen growth rate in bytes per second.
    pub slope_bytes_per_s: f64,
    /// Mann-Kendall over the whole series.
    pub whole: MannKendall,
    /// Mann-Kendall over the second half.
    pub recent: MannKendall,
    /// Rise of the high-water mark (max of last quarter minus max of first half).
    pub high_water_growth_bytes: i64,
    /// True when the process is flagged as leaking.
    pub leaking: bool,
}

#[derive(Debug, Clone)]
struct Tracked {
    user: String,
    command: String,
    first: u64,
    last: u64,
    series: Series,
}

/// Collects per-process memory series from samples and tests them.
#[derive(Debug, Clone)]
pub struct LeakDetector {
    config: LeakConfig,
    tracked: BTreeMap<(u32, u32), Tracked>,
}

impl LeakDetector {
    /// A detector with the given thresholds.
    pub fn new(config: LeakConfig) -> Self {
        LeakDetector {
            config,
            tracked: BTreeMap::new(),
        }
    }

    /// Record every process reading of `sample`.
    pub fn observe(&mut self, sample: &Sample) {
        let t = sample.t_ms as f64 / 1000.0;
        for g in &sample.gpus {
            for p in &g.processes {
                let Some(bytes) = p.gpu_memory_bytes else {
                    continue;
                };
                let cap = self.config.max_points;
                let tr = self
                    .tracked
                    .entry((g.index, p.pid))
                    .or_insert_with(|| Tracked {
                        user: p.user.clone(),
                        command: p.command.clone(),
                        first: bytes,
                        last: bytes,
                        series: Series::new(cap),
                    });
                tr.last = bytes;
                tr.series.push(t, bytes as f64);
            }
        }
    }

    /// Test every process seen; processes with too few readings are left out.
    pub fn assess(&self) -> Vec<LeakFinding> {
        self.tracked
            .iter()
            .filter_map(|(&(gpu, pid), tr)| self.test(gpu, pid, tr))
            .collect()
    }

    /// Test one process (`None`: never seen, or too few readings).
    pub fn assess_process(&self, gpu: u32, pid: u32) -> Option<LeakFinding> {
        self.tracked
            .get(&(gpu, pid))
            .and_then(|tr| self.test(gpu, pid, tr))
    }

    fn test(&self, gpu: u32, pid: u32, tr: &Tracked) -> Option<LeakFinding> {
        let c = &self.config;
        let pts = tr.series.points();
        if pts.len() < c.min_points {
            return None;
        }
        let t: Vec<f64> = pts.iter().map(|p| p.0).collect();
        let y: Vec<f64> = pts.iter().map(|p| p.1).collect();
        let whole = mann_kendall(&y);
        let half = y.len() / 2;
        let recent = mann_kendall(&y[half..]);
        let max_of = |s: &[f64]| s.iter().copied().fold(f64::MIN, f64::max);
        let early = max_of(&y[..half]);
        let late = max_of(&y[y.len() - y.len().div_ceil(4)..]);
        let hw = (late - early) as i64;
        let slope = sen_slope(&t, &y).unwrap_or(0.0);
        let leaking = whole.p_increasing < c.alpha
            && recent.p_increasing < c.alpha
            && hw >= c.min_growth_bytes as i64;
        Some(LeakFinding {
            gpu,
            pid,
            user: tr.user.clone(),
            command: tr.command.clone(),
            readings: tr.series.readings(),
            first_bytes: tr.first,
            last_bytes: tr.last,
            slope_bytes_per_s: slope,
            whole,
            recent,
            high_water_growth_bytes: hw,
            leaking,
        })
    }
}
