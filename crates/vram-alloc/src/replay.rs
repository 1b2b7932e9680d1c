//! Driving a plain alloc/free event sequence through a policy.
//!
//! Any source of events — a PyTorch snapshot's `device_traces`, the
//! estimator's training timeline, a synthetic generator — becomes a list of
//! [`Event`]s, and [`replay`] runs it through a fresh allocator on a
//! [`SimDevice`].

use crate::allocator::CachingAllocator;
use crate::device::SimDevice;
use crate::error::AllocError;
use crate::policy::{AllocatorConfig, Policy};
use crate::snapshot::{Snapshot, TraceAction};
use std::collections::HashMap;

/// One step of a program's memory behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Allocate `size` bytes on `stream` for tensor `id`.
    Alloc {
        /// Caller-chosen identifier, unique among live tensors.
        id: u64,
        /// Bytes requested.
        size: u64,
        /// Stream (small integer).
        stream: u32,
    },
    /// Free tensor `id`.
    Free {
        /// Identifier given at allocation.
        id: u64,
    },
}

/// What one policy did on an event sequence.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PolicyResult {
    /// Policy name.
    pub name: String,
    /// Peak bytes handed out (after rounding).
    pub peak_allocated_bytes: u64,
    /// Peak bytes held from the device.
    pub peak_reserved_bytes: u64,
    /// Peak bytes requested (before rounding).
    pub peak_requested_bytes: u64,
    /// `1 - peak_allocated / peak_reserved`: the share of the peak footprint
    /// that was cached or fragmented.
    pub fragmentation: f64,
    /// Device allocations and maps.
    pub device_allocs: u64,
    /// Device frees and unmaps.
    pub device_frees: u64,
    /// Whether some allocation failed at the given capacity (`None` without one).
    pub would_oom: Option<bool>,
    /// Index of the first event that failed, if any.
    pub first_oom_event: Option<usize>,
}

/// Figures taken from a recorded trace itself (what PyTorch did).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedFigures {
    /// Peak of PyTorch's reserved bytes, from segment alloc/free/map/unmap
    /// entries plus the reserved bytes present before the trace began
    /// (inferred from the snapshot's segments).
    pub peak_reserved_bytes: u64,
    /// Peak of allocated bytes from the trace's alloc/free entries.
    pub peak_allocated_bytes: u64,
    /// Frees whose allocation is not in the trace (recorded before it began).
    pub unmatched_frees: u64,
}

/// Turns a snapshot's history into events, and measures what PyTorch itself
/// reserved. Frees are taken from `free_completed` entries (from
/// `free_requested` when the trace has none). Streams are renumbered 0, 1, ...
/// in order of appearance.
pub fn events_from_snapshot(snap: &Snapshot) -> (Vec<Event>, RecordedFigures) {
    let has_completed = snap
        .traces
        .iter()
        .any(|t| t.action == TraceAction::FreeCompleted);
    let free_action = if has_completed {
        TraceAction::FreeCompleted
    } else {
        TraceAction::FreeRequested
    };
    let mut streams: HashMap<u64, u32> = HashMap::new();
    let mut live: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut events = Vec::new();
    let mut next_id = 0u64;
    let mut rec = RecordedFigures::default();
    let (mut reserved, mut min_reserved, mut max_reserved) = (0i128, 0i128, 0i128);
    let (mut allocated, mut min_alloc, mut max_alloc) = (0i128, 0i128, 0i128);
    for t in &snap.traces {
        match t.action {
            TraceAction::Alloc => {
                let n = streams.len() as u32;
                let stream = *streams.entry(t.stream).or_insert(n);
                if let Some((old, size)) = live.remove(&t.addr) {
                    events.push(Event::Free { id: old });
                    allocated -= i128::from(size);
                }
                live.insert(t.addr, (next_id, t.size));
                events.push(Event::Alloc {
                    id: next_id,
                    size: t.size,
                    stream,
                });
                next_id += 1;
                allocated += i128::from(t.size);
            }
            a if a == free_action => match live.remove(&t.addr) {
                Some((id, size)) => {
                    events.push(Event::Free { id });
                    allocated -= i128::from(size);
                }
                None => {
                    rec.unmatched_frees += 1;
                    allocated -= i128::from(t.size);
                }
            },
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved += i128::from(t.size),
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved -= i128::from(t.size),
            _ => {}
        }
        min_reserved = min_reserved.min(reserved);
        max_reserved = max_reserved.max(reserved);
        min_alloc = min_alloc.min(allocated);
        max_alloc = max_alloc.max(allocated);
    }
    // Reserved bytes before the trace began: at least enough that the running
    // sum never goes negative, and consistent with the final segments.
    let final_reserved = i128::from(snap.reserved_bytes());
    let base = (-min_reserved).max(final_reserved - reserved).max(0);
    rec.peak_reserved_bytes = u64::try_from(base + max_reserved).unwrap_or(u64::MAX);
    let base_alloc = (-min_alloc).max(0);
    rec.peak_allocated_bytes = u64::try_from(base_alloc + max_alloc).unwrap_or(u64::MAX);
    (events, rec)
}

/// Capacity of the "unconstrained" device used to measure peaks.
const UNBOUNDED: u64 = 1 << 48;

/// Replays `events` under `cfg`. Peaks are measured without a capacity limit;
/// when `capacity` is given, a second run on a device of that size says
/// whether (and where) the policy would run out of memory — releasing its
/// cache and retrying first, as the real allocator does.
pub fn replay(
    events: &[Event],
    cfg: &AllocatorConfig,
    capacity: Option<u64>,
) -> Result<PolicyResult, AllocError> {
    let (alloc, _) = run(events, cfg, UNBOUNDED)?;
    let st = alloc.memory_stats();
    let peak_alloc = st.allocated_bytes[0].peak.max(0) as u64;
    let peak_res = st.reserved_bytes[0].peak.max(0) as u64;
    let mut r = PolicyResult {
        name: cfg.policy.name().to_string(),
        peak_allocated_bytes: peak_alloc,
        peak_reserved_bytes: peak_res,
        peak_requested_bytes: st.requested_bytes[0].peak.max(0) as u64,
        fragmentation: if peak_res == 0 {
            0.0
        } else {
            1.0 - peak_alloc as f64 / peak_res as f64
        },
        device_allocs: st.num_device_alloc.max(0) as u64,
        device_frees: st.num_device_free.max(0) as u64,
        would_oom: None,
        first_oom_event: None,
    };
    if let Some(cap) = capacity {
        let (_, first) = run(events, cfg, cap)?;
        r.would_oom = Some(first.is_some());
        r.first_oom_event = first;
    }
    Ok(r)
}

/// Replays under every built-in policy.
pub fn replay_all(
    events: &[Event],
    capacity: Option<u64>,
) -> Result<Vec<PolicyResult>, AllocError> {
    Policy::ALL
        .iter()
        .map(|&p| replay(events, &AllocatorConfig::new(p), capacity))
        .collect()
}

fn run(
    events: &[Event],
    cfg: &AllocatorConfig,
    capacity: u64,
) -> Result<(CachingAllocator<SimDevice>, Option<usize>), AllocError> {
    let alloc = CachingAllocator::new(SimDevice::new(capacity), cfg.clone())?;
    let mut live: HashMap<u64, Option<u64>> = HashMap::new();
    let mut first_oom = None;
    for (i, e) in events.iter().enumerate() {
        match *e {
            Event::Alloc { id, size, stream } => {
                if live.contains_key(&id) {
                    return Err(AllocError::Trace {
                        reason: format!("event {i}: id {id} allocated while live"),
                    });
                }
                match alloc.malloc(size, stream) {
                    Ok(a) => {
                        live.insert(id, Some(a));
                    }
                    Err(AllocError::OutOfMemory(_)) => {
                        first_oom.get_or_insert(i);
                        live.insert(id, None);
                    }
                    Err(e) => return Err(e),
                }
            }
            Event::Free { id } => match live.remove(&id) {
                Some(Some(a)) => alloc.free(a)?,
                Some(None) => {}
                None => {
                    return Err(AllocError::Trace {
                        reason: format!("event {i}: free of id {id} which is not live"),
                    })
                }
            },
        }
    }
    Ok((alloc, first_oom))
}

/// Where a training trace's steps end: the event indices at which the live
/// bytes fall back to the trace's floor after having risen to its ceiling.
///
/// A training step starts and ends with only the persistent state (weights,
/// optimizer states) allocated; in between, activations and gradients raise
/// the live bytes far above that. With `high` the largest live bytes and
/// `low` the smallest in the second half of the trace (where the persistent
/// state is complete), a step ends at the first event after a visit above
/// `low + (high - low) / 2` where the live bytes are at most
/// `low + (high - low) / 10` (hysteresis, so that short-lived temporaries do
/// not count as steps). Returns an empty list for a trace without that shape.
pub fn step_ends(events: &[Event]) -> Vec<usize> {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut live = 0u64;
    let mut line = Vec::with_capacity(events.len());
    for e in events {
        match *e {
            Event::Alloc { id, size, .. } => {
                sizes.insert(id, size);
                live += size;
            }
            Event::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
        }
        line.push(live);
    }
    let max = line.iter().copied().max().unwrap_or(0);
    let low = line[line.len() / 2..].iter().copied().min().unwrap_or(0);
    let (lo_mark, hi_mark) = (low + (max - low) / 10, low + (max - low) / 2);
    let mut ends = Vec::new();
    let mut up = false;
    for (i, &v) in line.iter().enumerate() {
        if v >= hi_mark {
            up = true;
        } else if up && v <= lo_mark {
            ends.push(i);
            up = false;
        }
    }
    ends
}

/// Replays `events` under `cfg` on an unbounded [`SimDevice`] and returns
/// the device calls made during each step (the events up to and including
/// each index of `ends`, then after the last one), so that the cost of a
/// policy in steady state can be read off step by step.
pub fn device_calls_per_step(
    events: &[Event],
    cfg: &AllocatorConfig,
    ends: &[usize],
) -> Result<Vec<crate::device::DeviceCalls>, AllocError> {
    let alloc = CachingAllocator::new(SimDevice::new(UNBOUNDED), cfg.clone())?;
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    let mut last = crate::device::DeviceCalls::default();
    let mut next_end = ends.iter().copied().peekable();
    for (i, e) in events.iter().enumerate() {
        match *e {
            Event::Alloc { id, size, stream } => {
                live.insert(id, alloc.malloc(size, stream)?);
            }
            Event::Free { id } => {
                let a = live.remove(&id).ok_or_else(|| AllocError::Trace {
                    reason: format!("event {i}: free of id {id} which is not live"),
                })?;
                alloc.free(a)?;
            }
        }
        if next_end.peek() == Some(&i) {
            next_end.next();
            let now = alloc.with_device(|d| d.call_counts());
            out.push(now - last);
            last = now;
        }
    }
    let now = alloc.with_device(|d| d.call_counts());
    out.push(now - last);
    Ok(out)
}
