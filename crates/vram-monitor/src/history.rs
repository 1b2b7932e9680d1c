//! The last N samples, for graphs in `vram top` and `vram serve`.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{json, Value};

use crate::Sample;

/// A bounded ring of samples: pushing beyond capacity drops the oldest.
#[derive(Debug, Clone)]
pub struct History {
    cap: usize,
    samples: VecDeque<Sample>,
}

impl History {
    /// An empty history keeping at most `cap` samples (at least 1).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        History {
            cap,
            samples: VecDeque::with_capacity(cap.min(4096)),
        }
    }

    /// Add a sample, dropping the oldest when full.
    pub fn push(&mut self, sample: Sample) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// Number of samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when no sample has been pushed.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Maximum number of samples held.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// All samples, oldest first.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// Used bytes of GPU `index` over time, oldest first (missing GPU skipped).
    pub fn gpu_used(&self, index: u32) -> Vec<u64> {
        self.samples
            .iter()
            .filter_map(|s| s.gpus.iter().find(|g| g.index == index))
            .map(|g| g.memory_used_bytes)
            .collect()
    }

    /// Utilisation percent of GPU `index` over time (0 where unreported).
    pub fn gpu_util(&self, index: u32) -> Vec<u64> {
        self.samples
            .iter()
            .filter_map(|s| s.gpus.iter().find(|g| g.index == index))
            .map(|g| u64::from(g.utilization_pct.unwrap_or(0)))
            .collect()
    }

    /// Memory of process `pid` on GPU `gpu` at each sample: `None` where the
    /// process was absent or did not report memory.
    pub fn process_bytes(&self, gpu: u32, pid: u32) -> Vec<Option<u64>> {
        self.samples
            .iter()
            .map(|s| {
                s.gpus
                    .iter()
                    .find(|g| g.index == gpu)
                    .and_then(|g| g.processes.iter().find(|p| p.pid == pid))
                    .and_then(|p| p.gpu_memory_bytes)
            })
            .collect()
    }

    /// Everything the web page draws, as one JSON value: per GPU the time
    /// axis, used bytes, utilisation and one aligned series per process seen
    /// in the window (`null` where absent).
    pub fn to_chart_json(&self) -> Value {
        let t: Vec<u64> = self.samples.iter().map(|s| s.t_ms).collect();
        let Some(latest) = self.latest() else {
            return json!({ "source": null, "t_ms": null, "gpus": [] });
        };
        let mut gpus = Vec::new();
        for g in &latest.gpus {
            let mut seen: BTreeMap<u32, (String, String)> = BTreeMap::new();
            for s in &self.samples {
                if let Some(sg) = s.gpus.iter().find(|x| x.index == g.index) {
                    for p in &sg.processes {
                        seen.entry(p.pid)
                            .or_insert_with(|| (p.user.clone(), p.command.clone()));
                    }
                }
            }
            let processes: Vec<Value> = seen
                .into_iter()
                .map(|(pid, (user, command))| {
                    let bytes = self.process_bytes(g.index, pid);
                    let current = g
                        .processes
                        .iter()
                        .find(|p| p.pid == pid)
                        .and_then(|p| p.gpu_memory_bytes);
                    json!({
                        "pid": pid, "user": user, "command": command,
                        "current_bytes": current, "bytes": bytes,
                    })
                })
                .collect();
            gpus.push(json!({
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "memory_total_bytes": g.memory_total_bytes,
                "memory_used_bytes": g.memory_used_bytes,
                "utilization_pct": g.utilization_pct,
                "used": self.gpu_used(g.index),
                "util": self.gpu_util(g.index),
                "processes": processes,
            }));
        }
        json!({ "source": latest.source, "t_ms": latest.t_ms, "t": t, "gpus": gpus })
    }
}
