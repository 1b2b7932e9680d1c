//! `vram replay`: a recorded snapshot's alloc/free history through allocator policies
//! ([`vram_alloc::replay`]).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_alloc::replay::{events_from_snapshot, PolicyResult, RecordedFigures};
use vram_alloc::{AllocatorConfig, Snapshot};
use vram_model::fmt::{bytes, thousands};

use crate::check::{Checker, Ranges};
use crate::error::{input, Error, RunError};
use crate::{Kind, SCHEMA_VERSION};

/// What to replay.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// Each allocator configuration, with the name its row takes (`None`: the policy's).
    pub configs: Vec<(AllocatorConfig, Option<String>)>,
    /// The device capacity for the would-OOM check.
    pub capacity: Option<u64>,
}

/// Each policy's peaks and fragmentation on the snapshot's history, beside what the recorded
/// allocator did. `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `replay`.
    pub kind: Kind,
    /// The snapshot file, as given.
    pub snapshot: String,
    /// Alloc and free events replayed.
    pub events: u64,
    /// Of which allocations.
    pub allocations: u64,
    /// The capacity of the would-OOM check (null: none).
    pub capacity_bytes: Option<u64>,
    /// What the allocator that wrote the trace did.
    pub recorded: RecordedFigures,
    /// One row per configuration, in the request's order.
    pub policies: Vec<PolicyResult>,
}

impl Ranges for ReplayReport {
    fn ranges(&self, c: &mut Checker) -> Result<(), Error> {
        c.each("policies", &self.policies, |c, p| {
            p.ranges(c)?;
            // What the allocator's own statistics hold (`vram_alloc::replay::replay`): a
            // request is rounded up to its block, a block sits in a reserved segment, a segment
            // is freed only after it was allocated, and `fragmentation` is
            // `1 - peak_allocated / peak_reserved`.
            c.agree(
                "peak_requested_bytes",
                p.peak_requested_bytes,
                p.peak_requested_bytes <= p.peak_allocated_bytes,
                || {
                    format!(
                        "peak_allocated_bytes {}, the requests rounded up",
                        p.peak_allocated_bytes
                    )
                },
            )?;
            c.agree(
                "peak_allocated_bytes",
                p.peak_allocated_bytes,
                p.peak_allocated_bytes <= p.peak_reserved_bytes,
                || {
                    format!(
                        "peak_reserved_bytes {}, which holds every block",
                        p.peak_reserved_bytes
                    )
                },
            )?;
            let frag = if p.peak_reserved_bytes == 0 {
                0.0
            } else {
                1.0 - p.peak_allocated_bytes as f64 / p.peak_reserved_bytes as f64
            };
            c.agree(
                "fragmentation",
                p.fragmentation,
                (p.fragmentation - frag).abs() <= 1e-9,
                || format!("1 - peak_allocated_bytes / peak_reserved_bytes, {frag}"),
            )?;
            c.agree(
                "device_frees",
                p.device_frees,
                p.device_frees <= p.device_allocs,
                || {
                    format!(
                        "device_allocs {}: a segment is freed after it is allocated",
                        p.device_allocs
                    )
                },
            )?;
            // Replayed against a capacity, each policy says whether it runs out, and where.
            let show = |v: Option<bool>| v.map_or("null".to_string(), |b| b.to_string());
            c.agree(
                "would_oom",
                show(p.would_oom),
                p.would_oom.is_some() == self.capacity_bytes.is_some(),
                || match self.capacity_bytes {
                    Some(b) => format!("capacity_bytes {b}, against which it is replayed"),
                    None => "capacity_bytes null: no capacity to run out of".into(),
                },
            )?;
            let at = p
                .first_oom_event
                .map_or("null".to_string(), |e| e.to_string());
            c.agree(
                "first_oom_event",
                &at,
                p.first_oom_event.is_some() == (p.would_oom == Some(true)),
                || format!("would_oom {}", show(p.would_oom)),
            )?;
            c.agree(
                "first_oom_event",
                &at,
                p.first_oom_event.is_none_or(|e| (e as u64) < self.events),
                || format!("events {}: indices are 0 to events - 1", self.events),
            )
        })
    }
}

/// Replays `snap` (the file `name`) under each configuration of `req`.
pub fn replay(name: &str, snap: &Snapshot, req: &ReplayRequest) -> Result<ReplayReport, RunError> {
    let (events, recorded) = events_from_snapshot(snap);
    let allocations = events
        .iter()
        .filter(|e| matches!(e, vram_alloc::replay::Event::Alloc { .. }))
        .count() as u64;
    if allocations == 0 {
        return Err(input(format!(
            "snapshot {name} has no allocation history (record it with torch.cuda.memory._record_memory_history())"
        ))
        .into());
    }
    let mut policies = Vec::with_capacity(req.configs.len());
    for (c, row) in &req.configs {
        let mut r = vram_alloc::replay::replay(&events, c, req.capacity)?;
        if let Some(n) = row {
            r.name = n.clone();
        }
        policies.push(r);
    }
    Ok(ReplayReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Replay,
        snapshot: name.to_string(),
        events: events.len() as u64,
        allocations,
        capacity_bytes: req.capacity,
        recorded,
        policies,
    })
}

impl ReplayReport {
    /// The first line: the snapshot and its events.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} events ({} allocations)",
            self.snapshot,
            thousands(self.events),
            thousands(self.allocations)
        )
    }

    /// What the recorded allocator did.
    pub fn recorded_line(&self) -> String {
        let r = &self.recorded;
        format!(
            "as recorded (the allocator that wrote the trace): peak allocated {}, peak reserved {}{}",
            bytes(r.peak_allocated_bytes),
            bytes(r.peak_reserved_bytes),
            if r.unmatched_frees > 0 {
                format!(
                    " ({} frees of blocks allocated before the trace began)",
                    r.unmatched_frees
                )
            } else {
                String::new()
            }
        )
    }

    /// The OOM column's header.
    pub fn oom_head(&self) -> String {
        match self.capacity_bytes {
            Some(c) => format!("OOM at {}", bytes(c)),
            None => "OOM".to_string(),
        }
    }

    /// The table's header (`reserved/allocated` is one column).
    pub fn head(&self) -> [String; 6] {
        [
            "policy".into(),
            "peak allocated".into(),
            "peak reserved".into(),
            "reserved/allocated".into(),
            "fragmentation".into(),
            self.oom_head(),
        ]
    }

    /// The table's rows, one per policy.
    pub fn rows(&self) -> Vec<[String; 6]> {
        self.policies
            .iter()
            .map(|r| {
                let oom = match (r.would_oom, r.first_oom_event) {
                    (Some(true), Some(i)) => format!("yes (event {i})"),
                    (Some(true), None) => "yes".to_string(),
                    (Some(false), _) => "no".to_string(),
                    (None, _) => "-".to_string(),
                };
                [
                    r.name.clone(),
                    bytes(r.peak_allocated_bytes),
                    bytes(r.peak_reserved_bytes),
                    format!(
                        "{:.3}",
                        r.peak_reserved_bytes as f64 / r.peak_allocated_bytes.max(1) as f64
                    ),
                    format!("{:.2}%", r.fragmentation * 100.0),
                    oom,
                ]
            })
            .collect()
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = self.write_text(&mut o);
        o
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "{}", self.summary())?;
        writeln!(out, "{}", self.recorded_line())?;
        writeln!(out)?;
        let w = self
            .policies
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(0)
            .max(20);
        writeln!(
            out,
            "{:<w$} {:>15} {:>15} {:>9} {:>14} {:>17}",
            "policy",
            "peak allocated",
            "peak reserved",
            "reserved/",
            "fragmentation",
            self.oom_head()
        )?;
        writeln!(out, "{:<w$} {:>15} {:>15} {:>9}", "", "", "", "allocated")?;
        for r in self.rows() {
            writeln!(
                out,
                "{:<w$} {:>15} {:>15} {:>9} {:>14} {:>17}",
                r[0], r[1], r[2], r[3], r[4], r[5]
            )?;
        }
        Ok(())
    }
}
