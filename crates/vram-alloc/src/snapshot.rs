//! Memory snapshots in the format of `torch.cuda.memory._snapshot()`.
//!
//! A snapshot is a dict with `segments` (each with its `blocks`) and
//! `device_traces` (one list of history entries per device), which
//! `torch.cuda.memory._dump_snapshot` pickles and pytorch.org/memory_viz
//! draws. [`Snapshot::to_pickle`] writes one; [`Snapshot::from_pickle`] reads
//! one safely (see [`crate::pickle`]), keeping device 0.

use crate::error::AllocError;
use crate::pickle::{self, Encoder, Value};

/// What a history entry records (PyTorch `TraceEntry::Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// The caller freed a block (it may still wait for stream events).
    FreeRequested,
    /// The block became reusable.
    FreeCompleted,
    /// A segment was allocated from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// Pages of an expandable segment were mapped.
    SegmentMap,
    /// Pages of an expandable segment were unmapped.
    SegmentUnmap,
    /// An allocation failed with out-of-memory.
    Oom,
    /// A snapshot was taken.
    Snapshot,
}

impl TraceAction {
    /// The `action` string PyTorch writes.
    pub fn name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            TraceAction::Alloc,
            TraceAction::FreeRequested,
            TraceAction::FreeCompleted,
            TraceAction::SegmentAlloc,
            TraceAction::SegmentFree,
            TraceAction::SegmentMap,
            TraceAction::SegmentUnmap,
            TraceAction::Oom,
            TraceAction::Snapshot,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Address of the block or segment (0 for `oom`).
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Stream (PyTorch writes the `cudaStream_t` value; ours are small integers).
    pub stream: u64,
    /// Timestamp; the allocator writes a sequence number.
    pub time_us: u64,
    /// What the tensor is (e.g. "activations"); pytorch.org/memory_viz colours by it.
    pub category: Option<String>,
    /// For `oom` entries: device bytes free at the time (0 otherwise).
    pub device_free: u64,
}

/// State of a block (PyTorch's `state` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out.
    ActiveAllocated,
    /// Freed, waiting for stream events.
    ActivePendingFree,
    /// Free.
    Inactive,
}

impl BlockState {
    /// The string PyTorch writes.
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

/// A block inside a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 when inactive).
    pub requested_size: u64,
    /// Allocation state.
    pub state: BlockState,
}

/// A segment (for expandable segments: one contiguous mapped range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Start address.
    pub address: u64,
    /// Size in bytes.
    pub total_size: u64,
    /// Stream the segment belongs to.
    pub stream: u64,
    /// Whether it belongs to the small pool.
    pub is_small: bool,
    /// Whether it is (part of) an expandable segment.
    pub is_expandable: bool,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks.
    pub active_size: u64,
    /// Bytes requested by callers of active blocks.
    pub requested_size: u64,
    /// Blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

/// Segments and history of one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Segments at the time of the snapshot.
    pub segments: Vec<SegmentInfo>,
    /// History entries, oldest first.
    pub traces: Vec<TraceEntry>,
}

/// A value of a snapshot's dicts, for [`Snapshot::to_pickle`] (what [`Snapshot::to_value`]
/// builds as a [`Value`]).
#[derive(Clone, Copy)]
enum Field<'a> {
    Int(u64),
    Str(&'a str),
    Bool(bool),
    /// `frames`: an empty list (no stack traces are recorded).
    NoFrames,
    /// `segment_pool_id`: `(0, 0)`.
    PoolId,
    Blocks(&'a [BlockInfo]),
}

/// The top-level dict's values.
enum Top {
    Segments,
    Traces,
    Settings,
}

/// Writes one `(key, value)` of a snapshot's dicts as [`Snapshot::to_value`]'s would be.
fn field(e: &mut Encoder, (key, v): &(&str, Field)) {
    e.str(key);
    match *v {
        Field::Int(x) => e.int(i64::try_from(x).unwrap_or(i64::MAX)),
        Field::Str(x) => e.str(x),
        Field::Bool(b) => e.bool(b),
        Field::NoFrames => e.list::<()>(&[], |_, _| {}),
        Field::PoolId => e.value(&Value::Tuple(vec![Value::Int(0), Value::Int(0)])),
        Field::Blocks(blocks) => e.list(blocks, |e, b| {
            e.dict(
                &[
                    ("address", Field::Int(b.address)),
                    ("size", Field::Int(b.size)),
                    ("requested_size", Field::Int(b.requested_size)),
                    ("state", Field::Str(b.state.name())),
                    ("frames", Field::NoFrames),
                ],
                field,
            )
        }),
    }
}

fn s(x: &str) -> Value {
    Value::Str(x.to_string())
}

fn int(x: u64) -> Value {
    Value::Int(i64::try_from(x).unwrap_or(i64::MAX))
}

impl Snapshot {
    /// Total bytes of all segments (saturating: a hostile snapshot's sizes
    /// can sum past `u64::MAX`).
    pub fn reserved_bytes(&self) -> u64 {
        self.segments
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.total_size))
    }

    /// The snapshot as the value `torch.cuda.memory._snapshot()` returns.
    pub fn to_value(&self) -> Value {
        let segments = self
            .segments
            .iter()
            .map(|g| {
                let blocks = g
                    .blocks
                    .iter()
                    .map(|b| {
                        Value::Dict(vec![
                            (s("address"), int(b.address)),
                            (s("size"), int(b.size)),
                            (s("requested_size"), int(b.requested_size)),
                            (s("state"), s(b.state.name())),
                            (s("frames"), Value::List(vec![])),
                        ])
                    })
                    .collect();
                Value::Dict(vec![
                    (s("device"), Value::Int(0)),
                    (s("address"), int(g.address)),
                    (s("total_size"), int(g.total_size)),
                    (s("allocated_size"), int(g.allocated_size)),
                    (s("active_size"), int(g.active_size)),
                    (s("requested_size"), int(g.requested_size)),
                    (s("stream"), int(g.stream)),
                    (
                        s("segment_type"),
                        s(if g.is_small { "small" } else { "large" }),
                    ),
                    (
                        s("segment_pool_id"),
                        Value::Tuple(vec![Value::Int(0), Value::Int(0)]),
                    ),
                    (s("is_expandable"), Value::Bool(g.is_expandable)),
                    (s("frames"), Value::List(vec![])),
                    (s("blocks"), Value::List(blocks)),
                ])
            })
            .collect();
        let has_categories = self.traces.iter().any(|t| t.category.is_some());
        let traces = self
            .traces
            .iter()
            .map(|t| {
                let mut d = vec![
                    (s("action"), s(t.action.name())),
                    (s("addr"), int(t.addr)),
                    (s("size"), int(t.size)),
                    (s("stream"), int(t.stream)),
                    (s("time_us"), int(t.time_us)),
                    (s("frames"), Value::List(vec![])),
                ];
                if t.action == TraceAction::Oom {
                    d.push((s("device_free"), int(t.device_free)));
                }
                if has_categories {
                    // MemoryViz.js expects 'unknown' among the categories whenever
                    // any entry has one, so every entry gets one.
                    d.push((s("category"), s(t.category.as_deref().unwrap_or("unknown"))));
                }
                Value::Dict(d)
            })
            .collect();
        Value::Dict(vec![
            (s("segments"), Value::List(segments)),
            (s("device_traces"), Value::List(vec![Value::List(traces)])),
            (
                s("allocator_settings"),
                Value::Dict(vec![(s("PYTORCH_CUDA_ALLOC_CONF"), s(""))]),
            ),
        ])
    }

    /// The snapshot as a pickle for `torch.cuda.memory._dump_snapshot` readers
    /// and pytorch.org/memory_viz: the bytes of `pickle::to_vec(&self.to_value())`, written
    /// entry by entry without that value (a dict of strings per history entry: at a million
    /// entries, most of the time and memory of writing it).
    pub fn to_pickle(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        let segment = |e: &mut Encoder, g: &SegmentInfo| {
            let kind = if g.is_small { "small" } else { "large" };
            e.dict(
                &[
                    ("device", Field::Int(0)),
                    ("address", Field::Int(g.address)),
                    ("total_size", Field::Int(g.total_size)),
                    ("allocated_size", Field::Int(g.allocated_size)),
                    ("active_size", Field::Int(g.active_size)),
                    ("requested_size", Field::Int(g.requested_size)),
                    ("stream", Field::Int(g.stream)),
                    ("segment_type", Field::Str(kind)),
                    ("segment_pool_id", Field::PoolId),
                    ("is_expandable", Field::Bool(g.is_expandable)),
                    ("frames", Field::NoFrames),
                    ("blocks", Field::Blocks(&g.blocks)),
                ],
                field,
            )
        };
        let has_categories = self.traces.iter().any(|t| t.category.is_some());
        let trace = |e: &mut Encoder, t: &TraceEntry| {
            let mut d = [("", Field::NoFrames); 8];
            let mut n = 0;
            for f in [
                ("action", Field::Str(t.action.name())),
                ("addr", Field::Int(t.addr)),
                ("size", Field::Int(t.size)),
                ("stream", Field::Int(t.stream)),
                ("time_us", Field::Int(t.time_us)),
                ("frames", Field::NoFrames),
            ] {
                d[n] = f;
                n += 1;
            }
            if t.action == TraceAction::Oom {
                d[n] = ("device_free", Field::Int(t.device_free));
                n += 1;
            }
            if has_categories {
                d[n] = (
                    "category",
                    Field::Str(t.category.as_deref().unwrap_or("unknown")),
                );
                n += 1;
            }
            e.dict(&d[..n], field);
        };
        e.dict(
            &[
                ("segments", Top::Segments),
                ("device_traces", Top::Traces),
                ("allocator_settings", Top::Settings),
            ],
            |e, (k, v)| {
                e.str(k);
                match v {
                    Top::Segments => e.list(&self.segments, segment),
                    Top::Traces => e.list(&[()], |e, _| e.list(&self.traces, trace)),
                    Top::Settings => e.dict(&[("PYTORCH_CUDA_ALLOC_CONF", "")], |e, (k, v)| {
                        e.str(k);
                        e.str(v);
                    }),
                }
            },
        );
        e.finish()
    }

    /// Reads a PyTorch snapshot pickle (device 0). Never executes code.
    pub fn from_pickle(data: &[u8]) -> Result<Snapshot, AllocError> {
        Snapshot::from_value(&pickle::from_slice(data)?)
    }

    /// Interprets a decoded snapshot value.
    pub fn from_value(v: &Value) -> Result<Snapshot, AllocError> {
        let bad = |reason: String| AllocError::Snapshot { reason };
        if !matches!(v, Value::Dict(_)) {
            return Err(bad(format!(
                "top level is a {}, expected a dict",
                v.type_name()
            )));
        }
        let segs = v
            .get("segments")
            .ok_or_else(|| bad("no 'segments' key".into()))?
            .as_seq()
            .ok_or_else(|| bad("'segments' is not a list".into()))?;
        let mut segments = Vec::new();
        for (i, g) in segs.iter().enumerate() {
            let ctx = format!("segments[{i}]");
            if let Some(d) = g.get("device").and_then(Value::as_i64) {
                if d != 0 {
                    continue;
                }
            }
            let mut blocks = Vec::new();
            if let Some(bs) = g.get("blocks") {
                let bs = bs
                    .as_seq()
                    .ok_or_else(|| bad(format!("{ctx}.blocks is not a list")))?;
                for (j, b) in bs.iter().enumerate() {
                    let bctx = format!("{ctx}.blocks[{j}]");
                    let state = match field_str(b, "state", &bctx)? {
                        "active_allocated" => BlockState::ActiveAllocated,
                        "active_pending_free" => BlockState::ActivePendingFree,
                        "inactive" => BlockState::Inactive,
                        other => {
                            return Err(bad(format!(
                                "{bctx}.state '{}' is unknown",
                                other.escape_debug()
                            )))
                        }
                    };
                    blocks.push(BlockInfo {
                        address: field_u64(b, "address", &bctx)?,
                        size: field_u64(b, "size", &bctx)?,
                        requested_size: opt_u64(b, "requested_size", &bctx)?.unwrap_or(0),
                        state,
                    });
                }
            }
            segments.push(SegmentInfo {
                address: field_u64(g, "address", &ctx)?,
                total_size: field_u64(g, "total_size", &ctx)?,
                stream: opt_u64(g, "stream", &ctx)?.unwrap_or(0),
                is_small: g.get("segment_type").and_then(Value::as_str) == Some("small"),
                is_expandable: g.get("is_expandable").and_then(Value::as_i64) == Some(1),
                allocated_size: opt_u64(g, "allocated_size", &ctx)?.unwrap_or(0),
                active_size: opt_u64(g, "active_size", &ctx)?.unwrap_or(0),
                requested_size: opt_u64(g, "requested_size", &ctx)?.unwrap_or(0),
                blocks,
            });
        }
        let mut traces = Vec::new();
        if let Some(dt) = v.get("device_traces") {
            let dt = dt
                .as_seq()
                .ok_or_else(|| bad("'device_traces' is not a list".into()))?;
            if let Some(dev0) = dt.first() {
                let entries = dev0
                    .as_seq()
                    .ok_or_else(|| bad("device_traces[0] is not a list".into()))?;
                for (i, e) in entries.iter().enumerate() {
                    let ctx = format!("device_traces[0][{i}]");
                    let name = field_str(e, "action", &ctx)?;
                    let action = TraceAction::parse(name).ok_or_else(|| {
                        bad(format!("{ctx}.action '{}' is unknown", name.escape_debug()))
                    })?;
                    traces.push(TraceEntry {
                        action,
                        addr: opt_u64(e, "addr", &ctx)?.unwrap_or(0),
                        size: opt_u64(e, "size", &ctx)?.unwrap_or(0),
                        stream: opt_u64(e, "stream", &ctx)?.unwrap_or(0),
                        time_us: opt_u64(e, "time_us", &ctx)?.unwrap_or(i as u64),
                        category: e
                            .get("category")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        device_free: opt_u64(e, "device_free", &ctx)?.unwrap_or(0),
                    });
                }
            }
        }
        Ok(Snapshot { segments, traces })
    }
}

fn field_str<'a>(v: &'a Value, key: &str, ctx: &str) -> Result<&'a str, AllocError> {
    match v.get(key) {
        Some(Value::Str(s)) => Ok(s),
        Some(other) => Err(AllocError::Snapshot {
            reason: format!("{ctx}.{key} is a {}, expected str", other.type_name()),
        }),
        None => Err(AllocError::Snapshot {
            reason: format!("{ctx} has no '{key}' (or is not a dict)"),
        }),
    }
}

fn opt_u64(v: &Value, key: &str, ctx: &str) -> Result<Option<u64>, AllocError> {
    if !matches!(v, Value::Dict(_)) {
        return Err(AllocError::Snapshot {
            reason: format!("{ctx} is a {}, expected a dict", v.type_name()),
        });
    }
    match v.get(key) {
        None | Some(Value::None) => Ok(None),
        // Sizes, addresses, streams and times are never negative in a snapshot; `as u64` read
        // a -1 size as 16 EiB and replayed it as nothing.
        Some(Value::Int(i)) => u64::try_from(*i)
            .map(Some)
            .map_err(|_| AllocError::Snapshot {
                reason: format!("{ctx}.{key} is {i}, expected a non-negative int"),
            }),
        Some(other) => Err(AllocError::Snapshot {
            reason: format!("{ctx}.{key} is a {}, expected int", other.type_name()),
        }),
    }
}

fn field_u64(v: &Value, key: &str, ctx: &str) -> Result<u64, AllocError> {
    opt_u64(v, key, ctx)?.ok_or_else(|| AllocError::Snapshot {
        reason: format!("{ctx} has no '{key}'"),
    })
}
