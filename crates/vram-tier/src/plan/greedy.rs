//! The planner: which items leave the device in which phases, and when each comes back.

use super::profile::{ItemKind, Profile};
use super::sim::{simulate, HostCpu, Link, Move, Outcome, Plan};
use serde::{Deserialize, Serialize};

/// How the optimizer's states are handled when they do not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Nothing needs to move.
    None,
    /// Items (activations, states, gradients, weights) go to host memory and come back
    /// through the device (prefetched on a copy stream before their next use).
    Stream,
    /// Some optimizer chunks are updated on the host (CPU AdamW, as ZeRO-Offload): their
    /// states stay there, gradients go down and weights come up; the rest streams.
    HostUpdate,
}

impl Strategy {
    /// A number for `memory_stats()` (`tier.plan.strategy`): 0 none, 1 stream, 2 host update.
    pub fn code(self) -> i64 {
        match self {
            Strategy::None => 0,
            Strategy::Stream => 1,
            Strategy::HostUpdate => 2,
        }
    }
}

/// A chosen plan with what the simulator says it costs, and the alternative it beat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The strategy chosen.
    pub strategy: Strategy,
    /// The plan.
    pub plan: Plan,
    /// Its simulated step.
    pub outcome: Outcome,
    /// The best plan that streams everything (no host update), simulated.
    pub stream: Outcome,
    /// The best plan that updates some chunks on the host, simulated (`None` when the
    /// optimizer is not chunked or nothing needed to move).
    pub host_update: Option<Outcome>,
    /// How many optimizer chunks the host updates in `host_update`'s plan.
    pub host_chunks: usize,
}

/// Greedy choice of moves so that every phase fits under `cap`, nothing of `host_chunks`
/// on the device: at the phase most over the cap, move the item (live there, unused
/// there) whose gap around it leaves the most time to copy out before and back after,
/// largest first on ties; repeat. Copies back are scheduled as late as the host-to-device
/// stream allows (latest deadline first, backwards from each deadline), which may raise
/// other phases and add moves. Returns `None` when some phase cannot fit (what stays is
/// used there).
pub fn plan_moves(p: &Profile, cap: u64, link: &Link, host_chunks: &[usize]) -> Option<Plan> {
    let n = p.phases.len();
    let starts = p.starts();
    let total = p.native_seconds();
    let ends: Vec<f64> = (0..n).map(|q| starts[q] + p.phases[q].seconds).collect();
    // A host-updated chunk's states never come to the device (its gradients stay until the
    // optimizer step copies them down).
    let on_host = |i: usize| {
        let it = &p.items[i];
        it.kind == ItemKind::OptimizerState && it.chunk.is_some_and(|c| host_chunks.contains(&c))
    };
    let mut moves: Vec<Move> = Vec::new();
    // The earliest phase each move's copy back may be issued (raised when issuing it
    // earlier made a phase too full).
    let mut floors: Vec<usize> = Vec::new();
    for _round in 0..20_000 {
        // Residency with the moves as planned (issue times included).
        let mut over: Option<(u64, usize)> = None;
        for q in 0..n {
            let away: std::collections::HashSet<usize> = moves
                .iter()
                .filter(|m| m.away_in(q))
                .map(|m| m.item)
                .collect();
            let held = p.base[q]
                + p.items
                    .iter()
                    .enumerate()
                    .filter(|(i, it)| it.live_in(q) && !away.contains(i) && !on_host(*i))
                    .map(|(_, it)| it.bytes)
                    .sum::<u64>();
            if held > cap && over.is_none_or(|(e, _)| held - cap > e) {
                over = Some((held - cap, q));
            }
        }
        let Some((_, q)) = over else {
            return Some(Plan {
                moves,
                host_chunks: host_chunks.to_vec(),
            });
        };
        // Candidates: live and unused at q, not already away over q.
        let best = p
            .items
            .iter()
            .enumerate()
            .filter(|(i, it)| it.movable && !on_host(*i))
            .filter(|(i, _)| !moves.iter().any(|m| m.item == *i && m.away_in(q)))
            .filter_map(|(i, it)| {
                let (a, b, wraps) = it.gap_around(q)?;
                // Already planned over this gap but back too early for q: push the issue later.
                let out = if wraps && a >= q {
                    starts[q] + total - ends[a]
                } else {
                    starts[q] - ends[a]
                };
                let back = if wraps && b <= q {
                    starts[b] + total - ends[q]
                } else {
                    starts[b] - ends[q]
                };
                Some((out.min(back), it.bytes, i, a, b, wraps))
            })
            .max_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(y.2.cmp(&x.2)));
        let (_, _, i, a, b, wraps) = best?;
        if let Some(k) = moves
            .iter()
            .position(|m| m.item == i && m.after == a && m.back == b)
        {
            // The same gap, its copy back issued before q: issue it after q.
            if floors[k] > q || q >= b {
                return None;
            }
            floors[k] = q + 1;
        } else {
            moves.push(Move {
                item: i,
                after: a,
                back: b,
                issue: b,
                wraps,
            });
            floors.push(if wraps { 0 } else { a + 1 });
        }
        schedule_backwards(p, &mut moves, &floors, link, &starts);
    }
    None
}

/// Sets each move's `issue` phase as late as the host-to-device stream allows: copies are
/// laid out backwards from their deadlines (latest first), each ending no later than its
/// deadline and before the next one starts; a copy is issued at the start of the latest
/// phase that begins before its laid-out start, and never before its item has left.
fn schedule_backwards(
    p: &Profile,
    moves: &mut [Move],
    floors: &[usize],
    link: &Link,
    starts: &[f64],
) {
    let n = p.phases.len();
    // Deadlines on one time line: a wrapping move's `back` is in the next step.
    let deadline = |m: &Move| starts[m.back];
    let mut order: Vec<usize> = (0..moves.len()).collect();
    order.sort_by(|&x, &y| deadline(&moves[y]).total_cmp(&deadline(&moves[x])));
    let mut cursor = f64::INFINITY;
    for k in order {
        let m = &moves[k];
        let dur = link.h2d(p.items[m.item].bytes);
        let finish = deadline(m).min(cursor);
        let begin = finish - dur;
        cursor = begin;
        // The latest phase starting at or before `begin` (the step's first when the copy
        // would have to begin before it), never before the move's floor.
        let issue = (0..n).rev().find(|&q| starts[q] <= begin).unwrap_or(0);
        moves[k].issue = issue.max(floors[k]).min(m.back);
    }
}

/// Plans the step under `cap`: the best streaming plan, and the best plan that updates the
/// last 1..=chunks optimizer chunks on the host (the chunks whose gradients the backward
/// makes first), each simulated; the faster one that fits is chosen.
pub fn decide(p: &Profile, cap: u64, link: &Link, cpu: &HostCpu) -> Option<Decision> {
    let (peak, _) = p.peak();
    let sim = |plan: &Plan| simulate(p, plan, cap, link, cpu, 4);
    if peak <= cap {
        let plan = Plan::default();
        let o = sim(&plan);
        return Some(Decision {
            strategy: Strategy::None,
            plan,
            outcome: o.clone(),
            stream: o,
            host_update: None,
            host_chunks: 0,
        });
    }
    let refine = |host: &[usize]| -> Option<(Plan, Outcome)> {
        let plan = plan_moves(p, cap, link, host)?;
        let o = sim(&plan);
        Some((plan, o))
    };
    let stream = refine(&[]);
    let mut best_host: Option<(Plan, Outcome, usize)> = None;
    if p.chunks > 1 {
        for h in 1..=p.chunks {
            let chunks: Vec<usize> = (p.chunks - h..p.chunks).collect();
            if let Some((plan, o)) = refine(&chunks) {
                if o.fits
                    && best_host
                        .as_ref()
                        .is_none_or(|(_, b, _)| o.step_s < b.step_s)
                {
                    best_host = Some((plan, o, h));
                }
            }
        }
    }
    let stream_ok = stream.as_ref().filter(|(_, o)| o.fits);
    let (strategy, plan, outcome) = match (stream_ok, &best_host) {
        (Some((sp, so)), Some((hp, ho, _))) => {
            if ho.step_s < so.step_s {
                (Strategy::HostUpdate, hp.clone(), ho.clone())
            } else {
                (Strategy::Stream, sp.clone(), so.clone())
            }
        }
        (Some((sp, so)), None) => (Strategy::Stream, sp.clone(), so.clone()),
        (None, Some((hp, ho, _))) => (Strategy::HostUpdate, hp.clone(), ho.clone()),
        (None, None) => return None,
    };
    Some(Decision {
        strategy,
        plan,
        outcome,
        stream: stream.map(|(_, o)| o).unwrap_or_default(),
        host_update: best_host.as_ref().map(|(_, o, _)| o.clone()),
        host_chunks: best_host.map_or(0, |(_, _, h)| h),
    })
}
