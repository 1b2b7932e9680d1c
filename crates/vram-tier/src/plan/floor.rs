//! The least step time the link allows: a lower bound on what any plan can reach.

use super::profile::{ItemKind, PhaseKind, Profile};
use super::sim::{HostCpu, Link};
use serde::{Deserialize, Serialize};

/// A lower bound on the step time under a cap, and how it was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// The bound, seconds (infinite when no plan can fit: a phase needs more than the cap
    /// of what it uses).
    pub step_s: f64,
    /// The step with nothing moved.
    pub native_s: f64,
    /// The phase whose bytes above the cap set the bound.
    pub phase: Option<usize>,
    /// Least stall before that phase for its bytes above the cap to leave, seconds.
    pub out_s: f64,
    /// Least stall after it for those bytes to come back before their next use, seconds
    /// (the bound adds the larger of the two).
    pub in_s: f64,
    /// Optimizer chunks on the host in the bound's best case (0: everything streams).
    pub host_chunks: usize,
    /// How it was computed, in a sentence.
    pub method: String,
}

/// The method, for reports.
pub const METHOD: &str = "native step plus the least delay per step that lets the bytes above \
the cap at the worst phase leave the device before it and come back before their next uses: \
fluid copies at the link's rates (one stream each way, full duplex), the bytes leaving taken \
from the tensors the runtime can move (saved activations, optimizer states: weights are read by \
the backward, whatever the profile's uses say, and move only through a host update) live and \
unused there that are free earliest (the end of their last use on \
the native timeline), those coming back from the ones needed latest; delay may be inserted \
anywhere in the loop, and one stall serves both directions where the copies' windows overlap \
(optimizer states: back before their chunk, out after it), not where they are apart \
(activations); allocated bytes, no fragmentation; the optimizer in the profile's chunks; the \
least over updating the last 0..=chunks optimizer chunks on the host, which removes their \
states and puts after the optimizer step begins the longest of the CPU's AdamW time, the \
gradients' and weights' copies, and the smallest chunk's copy each way around the CPU's time; \
that work follows the native time from the first forward to the optimizer and the least delay \
that must fall there (copies of items that leave after a forward began and are back before the \
optimizer), and the next step's first forward waits for it";

/// The least delay a loop must insert per step for phase `q`'s `need` bytes above the cap:
/// `(delay, delay the out copies alone need, delay the in copies alone need)`.
///
/// Time is measured from the end of `q` around the loop to its next start (`span` seconds
/// at native speed). Coming back, the bytes needed by position `d` (the latest-needed `need`
/// bytes) ask for `bytes/rate - d` of delay before `d`; leaving, the bytes that must go after
/// position `r` (what was not free before it) ask for `bytes/rate - (span - r)` of delay after
/// `r`. Delay before `d` and after `r` is one delay when `r <= d`, two when `d < r`.
fn least_delay(
    mut released: Vec<(f64, u64)>,
    mut due: Vec<(f64, u64)>,
    need: u64,
    need_in: u64,
    link: &Link,
    span: f64,
) -> (f64, f64, f64) {
    // Leaving: earliest-free first; position r asks for the bytes not free before it.
    released.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total_out: u64 = released.iter().map(|r| r.1).sum();
    due.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total_in: u64 = due.iter().map(|d| d.1).sum();
    if total_out < need || total_in < need_in {
        return (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    }
    let mut outs: Vec<(f64, f64)> = Vec::new();
    let mut before = 0u64;
    for &(r, b) in &released {
        let must = need.saturating_sub(before);
        if must == 0 {
            break;
        }
        outs.push((r, must as f64 / link.d2h_bytes_per_s - (span - r)));
        before += b;
    }
    // Coming back: the latest-needed `need_in` bytes, by position ascending.
    let mut chosen = Vec::new();
    let mut left = need_in;
    for (d, b) in due {
        if left == 0 {
            break;
        }
        let take = b.min(left);
        chosen.push((d, take));
        left -= take;
    }
    chosen.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut ins: Vec<(f64, f64)> = Vec::new();
    let mut acc = 0u64;
    for (d, b) in chosen {
        acc += b;
        ins.push((d, acc as f64 / link.h2d_bytes_per_s - d));
    }
    let o = outs.iter().map(|x| x.1).fold(0.0f64, f64::max);
    let i = ins.iter().map(|x| x.1).fold(0.0f64, f64::max);
    let mut worst = o.max(i);
    for &(d, ci) in &ins {
        for &(r, co) in &outs {
            if d < r && ci > 0.0 && co > 0.0 {
                worst = worst.max(ci + co);
            }
        }
    }
    (worst, o, i)
}

/// The stream bound of `p` under `cap` with `host` optimizer chunks' states off the device
/// for good: `(extra seconds, phase, out, in, before the optimizer)`, the last the least delay
/// that must fall between the first forward's start and the optimizer's (see [`METHOD`]).
fn stream_bound(
    p: &Profile,
    cap: u64,
    link: &Link,
    host: &[usize],
) -> (f64, Option<usize>, f64, f64, f64) {
    let n = p.phases.len();
    let starts = p.starts();
    let total = p.native_seconds();
    let ends: Vec<f64> = (0..n).map(|q| starts[q] + p.phases[q].seconds).collect();
    let host_chunk = |i: usize| p.items[i].chunk.is_some_and(|c| host.contains(&c));
    let gone = |i: usize| p.items[i].kind == ItemKind::OptimizerState && host_chunk(i);
    let mut worst = (0.0f64, None, 0.0f64, 0.0f64);
    let mut before_opt = 0.0f64;
    // The stretch of the step that must pass before the host's work can begin: from the
    // first forward (which waits for the host's weights) to the optimizer (where the
    // gradients are final).
    let first_forward = (0..n).find(|&q| p.phases[q].kind == PhaseKind::Forward);
    let first_opt = p.optimizer_phases().first().copied();
    for q in 0..n {
        let live: u64 = p.base[q]
            + p.items
                .iter()
                .enumerate()
                .filter(|(i, it)| it.live_in(q) && !gone(*i))
                .map(|(_, it)| it.bytes)
                .sum::<u64>();
        if live <= cap {
            continue;
        }
        // Positions around the loop from the end of q; the loop comes back to q's start
        // after `span`.
        let span = total - p.phases[q].seconds;
        let pos = |t: f64| (t - ends[q]).rem_euclid(total);
        let mut released = Vec::new();
        let mut due = Vec::new();
        // The same, for the delay before the optimizer: items whose gap lies inside the
        // stretch (left after a forward began, back before the optimizer) and the bytes
        // of those that may leave or come back outside it, where the delay is free.
        let (mut inner_out, mut inner_due, mut free_bytes) = (Vec::new(), Vec::new(), 0u64);
        for (i, it) in p.items.iter().enumerate() {
            if gone(i) || !it.movable {
                continue;
            }
            let Some((a, b, wraps)) = it.gap_around(q) else {
                continue;
            };
            released.push((pos(ends[a]).min(span), it.bytes));
            due.push((pos(starts[b]).min(span), it.bytes));
            let inside = !wraps
                && first_forward.is_some_and(|f| a >= f)
                && first_opt.is_some_and(|o| b <= o);
            if inside {
                inner_out.push((pos(ends[a]).min(span), it.bytes));
                inner_due.push((pos(starts[b]).min(span), it.bytes));
            } else {
                free_bytes += it.bytes;
            }
        }
        let need = live - cap;
        let (d, o, i) = least_delay(released, due, need, need, link, span);
        if d > worst.0 || worst.1.is_none() {
            worst = (d, Some(q), o, i);
        }
        let inner_need = need.saturating_sub(free_bytes);
        let stretch = first_forward.is_some_and(|f| f <= q) && first_opt.is_some_and(|o| q < o);
        if stretch && inner_need > 0 {
            let (d, ..) = least_delay(inner_out, inner_due, inner_need, inner_need, link, span);
            before_opt = before_opt.max(d);
        }
    }
    (worst.0, worst.1, worst.2, worst.3, before_opt)
}

/// The floor of `p` under `cap` (see [`METHOD`]).
pub fn floor(p: &Profile, cap: u64, link: &Link, cpu: &HostCpu) -> Floor {
    let native = p.native_seconds();
    let opt = p.optimizer_phases();
    let starts = p.starts();
    let mut best: Option<Floor> = None;
    // Nothing needs to move: the native step (no host update is considered).
    let max_h = if p.chunks > 1 && p.peak().0 > cap {
        p.chunks
    } else {
        0
    };
    for h in 0..=max_h {
        let host: Vec<usize> = (p.chunks - h..p.chunks).collect();
        let (extra, phase, o, i, before_opt) = stream_bound(p, cap, link, &host);
        // The device no longer runs the host chunks' updates.
        let saved: f64 = host
            .iter()
            .filter_map(|&c| opt.get(c))
            .map(|&q| p.phases[q].seconds)
            .sum();
        let mut t = native - saved + extra;
        if h > 0 {
            // The host's work starts when the optimizer step does (the gradients are final
            // then) and must be back before the next step's forward: CPU time, and the
            // gradients' and weights' copies (each at least as long as its own bytes take).
            let in_host = |it: &super::profile::Item| it.chunk.is_some_and(|c| host.contains(&c));
            let first_grad = opt.first().map_or(f64::INFINITY, |&q| starts[q]);
            let pbytes: u64 = p
                .items
                .iter()
                .filter(|it| it.kind == ItemKind::Parameter && in_host(it))
                .map(|it| it.bytes)
                .sum();
            let gbytes: u64 = p
                .items
                .iter()
                .filter(|it| it.kind == ItemKind::Gradient && in_host(it))
                .map(|it| it.bytes)
                .sum();
            let cpu_s = pbytes as f64 / 4.0 / cpu.adamw_params_per_s;
            // The CPU starts on no chunk before that chunk's gradients are down, and the
            // last weights go up after it has finished: at least the smallest chunk's copy
            // each way around the CPU's time.
            let least = |kind: ItemKind| {
                host.iter()
                    .map(|&c| {
                        p.items
                            .iter()
                            .filter(|it| it.kind == kind && it.chunk == Some(c))
                            .map(|it| it.bytes)
                            .sum::<u64>()
                    })
                    .min()
                    .unwrap_or(0)
            };
            let work = cpu_s
                .max(gbytes as f64 / link.d2h_bytes_per_s)
                .max(pbytes as f64 / link.h2d_bytes_per_s)
                .max(
                    least(ItemKind::Gradient) as f64 / link.d2h_bytes_per_s
                        + cpu_s
                        + least(ItemKind::Parameter) as f64 / link.h2d_bytes_per_s,
                );
            // From the first forward's start to the optimizer's, the native time and the
            // delay that must fall there; then the host's work; then the next first forward.
            let first_forward = (0..starts.len()).find(|&q| p.phases[q].kind == PhaseKind::Forward);
            if let (true, Some(f)) = (first_grad.is_finite(), first_forward) {
                t = t.max(first_grad - starts[f] + before_opt + work);
            }
        }
        let f = Floor {
            step_s: t,
            native_s: native,
            phase,
            out_s: o,
            in_s: i,
            host_chunks: h,
            method: METHOD.to_string(),
        };
        if best.as_ref().is_none_or(|b| f.step_s < b.step_s) {
            best = Some(f);
        }
    }
    best.unwrap_or(Floor {
        step_s: native,
        native_s: native,
        phase: None,
        out_s: 0.0,
        in_s: 0.0,
        host_chunks: 0,
        method: METHOD.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    fn link(rate: f64) -> Link {
        Link {
            d2h_bytes_per_s: rate,
            h2d_bytes_per_s: rate,
            latency_s: 0.0,
        }
    }

    #[test]
    fn one_delay_serves_both_directions_only_where_the_windows_overlap() {
        let l = link(1e9);
        // A loop of 10 s after the phase. 2 GB come back by position 1 (1 s of delay) and
        // leave from position 9 (needs 2 s, has 1: 1 s of delay): apart, 2 s in all.
        let (d, o, i) = least_delay(
            vec![(9.0, 2 * GB)],
            vec![(1.0, 2 * GB)],
            2 * GB,
            2 * GB,
            &l,
            10.0,
        );
        assert!((o - 1.0).abs() < 1e-9 && (i - 1.0).abs() < 1e-9, "{o} {i}");
        assert!((d - 2.0).abs() < 1e-9, "{d}");
        // Back by position 9 (no delay needed: 9 s for 2 s of copy) and out from 1: none.
        let (d, ..) = least_delay(
            vec![(1.0, 2 * GB)],
            vec![(9.0, 2 * GB)],
            2 * GB,
            2 * GB,
            &l,
            10.0,
        );
        assert_eq!(d, 0.0);
        // States: back by position 5 and out from position 5 (the same chunk), 8 GB each
        // way: 3 s of delay before 5 and 3 s after it, and one stall at 5 serves both.
        let (d, o, i) = least_delay(
            vec![(5.0, 8 * GB)],
            vec![(5.0, 8 * GB)],
            8 * GB,
            8 * GB,
            &l,
            10.0,
        );
        assert!((o - 3.0).abs() < 1e-9 && (i - 3.0).abs() < 1e-9, "{o} {i}");
        assert!((d - 3.0).abs() < 1e-9, "{d}");
        // Not enough candidates: no plan can fit.
        let (d, ..) = least_delay(vec![(5.0, GB)], vec![(5.0, GB)], 2 * GB, 2 * GB, &l, 10.0);
        assert!(d.is_infinite());
    }
}
