//! The host link's timing model and a step simulator: one compute stream running the
//! phases, one copy stream each way (device to host, host to device) at the link's bandwidth,
//! and the host CPU (AdamW on the host), ordered by events as the runtime orders them.

use super::profile::{ItemKind, Profile};
use serde::{Deserialize, Serialize};

/// The link between device and host memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Device-to-host copy rate, bytes per second.
    pub d2h_bytes_per_s: f64,
    /// Host-to-device copy rate, bytes per second.
    pub h2d_bytes_per_s: f64,
    /// Fixed cost of one copy, seconds.
    pub latency_s: f64,
}

impl Link {
    /// 54 GB/s each way and 10 µs a copy: the H100 probe of 2026-11-22 copied a 256 MiB
    /// block into host-located memory at 54.0 GB/s and the GPU wrote into it at 51.7 GB/s
    /// (`../shared/groundtruth/gpu-runs.md`, copied in `gpu/sim/calibration.json`); the
    /// host-to-device rate was not measured and is taken as equal (PCIe Gen5 x16 is
    /// symmetric). The latency is a typical `cudaMemcpyAsync` launch-to-start, not measured.
    pub const H100_PROBE: Link = Link {
        d2h_bytes_per_s: 54.0e9,
        h2d_bytes_per_s: 54.0e9,
        latency_s: 10e-6,
    };

    /// Seconds to copy `bytes` device to host.
    pub fn d2h(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.d2h_bytes_per_s
    }

    /// Seconds to copy `bytes` host to device.
    pub fn h2d(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.h2d_bytes_per_s
    }
}

/// The host CPU's optimizer speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// fp32 AdamW updates per second (parameter elements).
    pub adamw_params_per_s: f64,
}

impl HostCpu {
    /// `torch.optim.AdamW(fused=True)` on CPU tensors, measured on the project's 2-core VM
    /// (torch 2.15, 50 M parameters: 690 M/s on one thread, 781 M/s on two): memory-bound, so
    /// a larger host does not scale it with its cores. A GPU run measures the device host's
    /// (`gpu/run.sh` stage `hostadam`).
    pub const VM_FUSED_ADAMW: HostCpu = HostCpu {
        adamw_params_per_s: 0.78e9,
    };
}

/// One item's trip to host memory and back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Move {
    /// Index into [`Profile::items`].
    pub item: usize,
    /// The use after which it leaves (the copy to the host is issued when this phase ends).
    pub after: usize,
    /// The use before which it is back (the phase waits for the copy).
    pub back: usize,
    /// The phase at whose start the copy back is issued (`after < issue <= back`, or, when
    /// `wraps`, `issue <= back` in the next step).
    pub issue: usize,
    /// The gap runs from one step into the next.
    pub wraps: bool,
}

impl Move {
    /// Whether the item is planned to be off the device during phase `q` (outside its
    /// copies' time, which the simulator accounts).
    pub fn away_in(&self, q: usize) -> bool {
        if self.wraps {
            q > self.after || q < self.issue
        } else {
            self.after < q && q < self.issue
        }
    }
}

/// What the planner decided for one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Items moved to host memory and back.
    pub moves: Vec<Move>,
    /// Optimizer chunks updated on the host (their states live there; their gradients go
    /// down after the backward makes them, their weights come back up before the next
    /// forward).
    pub host_chunks: Vec<usize>,
}

/// A simulated step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Steady-state step time, seconds.
    pub step_s: f64,
    /// The step with nothing moved (the profile's compute time).
    pub native_s: f64,
    /// Bytes copied to the host per step.
    pub d2h_bytes: u64,
    /// Bytes copied to the device per step.
    pub h2d_bytes: u64,
    /// Host CPU seconds per step (AdamW on the host).
    pub cpu_s: f64,
    /// Highest device bytes at a phase start.
    pub peak_bytes: u64,
    /// Whether every phase fitted under the cap (else the runtime's reactive path would
    /// have to take over; the step time is then not meaningful).
    pub fits: bool,
    /// The first phase that did not fit, if any.
    pub overflow_phase: Option<usize>,
}

struct Queue {
    free_at: f64,
}

impl Queue {
    fn push(&mut self, ready: f64, dur: f64) -> f64 {
        let start = ready.max(self.free_at);
        self.free_at = start + dur;
        self.free_at
    }
}

/// Simulates `steps` consecutive steps (at least 3) of `p` under `plan` with `cap` bytes of
/// device memory, and reports the last one (moves that wrap are taken as already on the host
/// when the first step begins, as in a steady loop).
///
/// Each phase starts when the one before has finished, when every copy back it waits for
/// has arrived, and when the device holds no more than `cap` bytes at its start: the base,
/// the items that stay, and the items planned away whose copy to the host has not finished
/// (their memory is returned when it finishes). A copy back is issued at the start of its
/// `issue` phase (its bytes count from then); copies to the host are issued when the phase
/// of their last use ends. Each direction is one stream: copies run one after another in
/// the order issued.
pub fn simulate(
    p: &Profile,
    plan: &Plan,
    cap: u64,
    link: &Link,
    cpu: &HostCpu,
    steps: usize,
) -> Outcome {
    let n = p.phases.len();
    let steps = steps.max(3);
    let host_chunk = |c: Option<usize>| c.is_some_and(|c| plan.host_chunks.contains(&c));
    // Items updated on the host: states never on the device; gradients copied down when the
    // optimizer step begins (after anything the loop does to them, e.g. clipping); weights
    // copied up after the CPU's update, before the next forward.
    let host_state = |i: usize| {
        let it = &p.items[i];
        it.kind == ItemKind::OptimizerState && host_chunk(it.chunk)
    };
    let host_grad = |i: usize| {
        let it = &p.items[i];
        it.kind == ItemKind::Gradient && host_chunk(it.chunk)
    };
    let host_param_bytes: u64 = p
        .items
        .iter()
        .filter(|it| it.kind == ItemKind::Parameter && host_chunk(it.chunk))
        .map(|it| it.bytes)
        .sum();
    let host_params = host_param_bytes as f64 / 4.0;
    let cpu_s = if plan.host_chunks.is_empty() {
        0.0
    } else {
        host_params / cpu.adamw_params_per_s
    };
    let first_forward = (0..n)
        .find(|&q| p.phases[q].kind == super::profile::PhaseKind::Forward)
        .unwrap_or(0);
    let opt_phases = p.optimizer_phases();
    let phase_seconds = |q: usize| {
        let ph = &p.phases[q];
        if ph.kind == super::profile::PhaseKind::Optimizer {
            let c = opt_phases.iter().position(|&o| o == q);
            if c.is_some_and(|c| plan.host_chunks.contains(&c)) {
                return 0.0;
            }
        }
        ph.seconds
    };
    // Static residency per phase: base plus items that stay (not moved over q, not host).
    let moved_over: Vec<Vec<usize>> = (0..n)
        .map(|q| {
            plan.moves
                .iter()
                .enumerate()
                .filter(|(_, m)| m.away_in(q))
                .map(|(k, _)| k)
                .collect()
        })
        .collect();
    let stay: Vec<u64> = (0..n)
        .map(|q| {
            let away: std::collections::HashSet<usize> =
                moved_over[q].iter().map(|&k| plan.moves[k].item).collect();
            p.base[q]
                + p.items
                    .iter()
                    .enumerate()
                    .filter(|(i, it)| it.live_in(q) && !away.contains(i) && !host_state(*i))
                    .map(|(_, it)| it.bytes)
                    .sum::<u64>()
        })
        .collect();
    let total = steps * n;
    let mut start = vec![0.0f64; total];
    let mut end = vec![0.0f64; total];
    let mut d2h = Queue { free_at: 0.0 };
    let mut h2d = Queue { free_at: 0.0 };
    let mut cpu_free = 0.0f64;
    // Per move: when its copy to the host finished (for the gap it is in) and when its copy
    // back arrives (for the current step).
    let mut evicted_at: Vec<f64> = plan
        .moves
        .iter()
        .map(|m| if m.wraps { 0.0 } else { f64::INFINITY })
        .collect();
    let mut back_at = vec![0.0f64; plan.moves.len()];
    let mut last_grad_down = 0.0f64;
    let mut upload_ready: Option<f64> = None;
    let mut upload_done = 0.0f64;
    let mut fits = true;
    let mut overflow_phase = None;
    let mut peak_bytes = 0u64;
    let (mut d2h_bytes, mut h2d_bytes) = (0u64, 0u64);
    for k in 0..total {
        let (j, q) = (k / n, k % n);
        let t0 = if k == 0 { 0.0 } else { end[k - 1] };
        // Memory: items planned away whose copy has not finished still hold their bytes.
        let mut pending: Vec<(f64, u64)> = moved_over[q]
            .iter()
            .map(|&m| (evicted_at[m], p.items[plan.moves[m].item].bytes))
            .collect();
        pending.retain(|x| x.0 > t0);
        pending.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut held: u64 = stay[q] + pending.iter().map(|x| x.1).sum::<u64>();
        let mut t = t0;
        for &(when, bytes) in &pending {
            if held <= cap || !when.is_finite() {
                break;
            }
            t = when;
            held -= bytes;
        }
        if held > cap && fits {
            fits = false;
            overflow_phase = Some(q);
        }
        peak_bytes = peak_bytes.max(held);
        // Copies back issued at this phase's start, soonest deadline first.
        let mut issue: Vec<usize> = (0..plan.moves.len())
            .filter(|&m| plan.moves[m].issue == q)
            .collect();
        issue.sort_by_key(|&m| (plan.moves[m].back, m));
        if let Some(r) = upload_ready {
            if r <= t {
                upload_done = h2d.push(r, link.h2d(host_param_bytes));
                upload_ready = None;
            }
        }
        for m in issue {
            back_at[m] = h2d.push(t, link.h2d(p.items[plan.moves[m].item].bytes));
            if j == steps - 2 {
                h2d_bytes += p.items[plan.moves[m].item].bytes;
            }
        }
        let mut s = t;
        for (m, mv) in plan.moves.iter().enumerate() {
            if mv.back == q {
                s = s.max(back_at[m]);
            }
        }
        if q == first_forward && j > 0 && !plan.host_chunks.is_empty() {
            if let Some(r) = upload_ready.take() {
                upload_done = h2d.push(r, link.h2d(host_param_bytes));
            }
            s = s.max(upload_done);
        }
        start[k] = s;
        end[k] = s + phase_seconds(q);
        // Copies to the host after this phase: moved items whose last use this was.
        for (m, mv) in plan.moves.iter().enumerate() {
            if mv.after == q {
                let b = p.items[mv.item].bytes;
                evicted_at[m] = d2h.push(end[k], link.d2h(b));
                if j == steps - 2 {
                    d2h_bytes += b;
                }
            }
        }
        // The optimizer step begins: the host chunks' gradients go down (the CPU starts no
        // earlier, even with no gradient to wait for).
        if opt_phases.first() == Some(&q) {
            last_grad_down = last_grad_down.max(s);
            for (i, it) in p.items.iter().enumerate() {
                if host_grad(i) {
                    let done = d2h.push(s, link.d2h(it.bytes));
                    last_grad_down = last_grad_down.max(done);
                    if j == steps - 2 {
                        d2h_bytes += it.bytes;
                    }
                }
            }
        }
        // At the last phase of the step the CPU updates the host chunks once every one of
        // their gradients is down; the weights go up.
        if q == n - 1 && !plan.host_chunks.is_empty() {
            let c0 = last_grad_down.max(cpu_free);
            cpu_free = c0 + cpu_s;
            upload_ready = Some(cpu_free);
            if j == steps - 2 {
                h2d_bytes += host_param_bytes;
            }
            last_grad_down = 0.0;
        }
        // A move's gap ends at its `back` phase: the next gap's eviction starts unknown.
        for (m, mv) in plan.moves.iter().enumerate() {
            if mv.back == q && !mv.wraps {
                evicted_at[m] = f64::INFINITY;
            }
        }
    }
    let step_s = start[(steps - 1) * n] - start[(steps - 2) * n];
    Outcome {
        step_s,
        native_s: p.native_seconds(),
        d2h_bytes,
        h2d_bytes,
        cpu_s,
        peak_bytes,
        fits,
        overflow_phase,
    }
}
