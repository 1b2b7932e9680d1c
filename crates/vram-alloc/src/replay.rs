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
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
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
