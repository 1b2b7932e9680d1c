//! The last N samples, for graphs in `vram top` and `vram serve`.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

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

    /// Everything the web page draws: per GPU the time axis, used bytes, utilisation and one
    /// aligned series per process seen in the window (`None` where absent).
    pub fn chart(&self) -> ChartState {
        let Some(latest) = self.latest() else {
            return ChartState::default();
        };
        let gpus = latest
            .gpus
            .iter()
            .map(|g| {
                let mut seen: BTreeMap<u32, (String, String)> = BTreeMap::new();
                for s in &self.samples {
                    if let Some(sg) = s.gpus.iter().find(|x| x.index == g.index) {
                        for p in &sg.processes {
                            seen.entry(p.pid)
                                .or_insert_with(|| (p.user.clone(), p.command.clone()));
                        }
                    }
                }
                let processes = seen
                    .into_iter()
                    .map(|(pid, (user, command))| ChartProcess {
                        pid,
                        user,
                        command,
                        current_bytes: g
                            .processes
                            .iter()
                            .find(|p| p.pid == pid)
                            .and_then(|p| p.gpu_memory_bytes),
                        bytes: self.process_bytes(g.index, pid),
                    })
                    .collect();
                ChartGpu {
                    index: g.index,
                    name: g.name.clone(),
                    uuid: g.uuid.clone(),
                    memory_total_bytes: g.memory_total_bytes,
                    memory_used_bytes: g.memory_used_bytes,
                    utilization_pct: g.utilization_pct,
                    used: self.gpu_used(g.index),
                    util: self.gpu_util(g.index),
                    processes,
                }
            })
            .collect();
        ChartState {
            source: Some(latest.source.clone()),
            t_ms: Some(latest.t_ms),
            t: self.samples.iter().map(|s| s.t_ms).collect(),
            gpus,
            last_error: None,
        }
    }

    /// [`History::chart`] as a JSON value (what the page embeds).
    pub fn to_chart_json(&self) -> Value {
        serde_json::to_value(self.chart()).unwrap_or(Value::Null)
    }
}

/// What the web page draws (`vram serve`'s `/api/state`, and the state embedded in its page).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChartState {
    /// Where the samples come from (null before the first sample).
    pub source: Option<String>,
    /// The latest sample's time, ms since the epoch.
    pub t_ms: Option<u64>,
    /// Every sample's time in the window.
    pub t: Vec<u64>,
    /// Each GPU of the latest sample.
    pub gpus: Vec<ChartGpu>,
    /// The sampler's last error, where its last sample failed (`vram serve`; null otherwise).
    #[serde(default)]
    pub last_error: Option<String>,
}

/// One GPU on the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartGpu {
    /// Its index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its UUID.
    pub uuid: String,
    /// Its memory.
    pub memory_total_bytes: u64,
    /// Used now.
    pub memory_used_bytes: u64,
    /// Utilisation now.
    pub utilization_pct: Option<u32>,
    /// Used at each sample.
    pub used: Vec<u64>,
    /// Utilisation at each sample (0 where unreported).
    pub util: Vec<u64>,
    /// Each process seen in the window.
    pub processes: Vec<ChartProcess>,
}

/// One process on a GPU of the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartProcess {
    /// Its pid.
    pub pid: u32,
    /// Its user.
    pub user: String,
    /// Its command line.
    pub command: String,
    /// Its memory now (null: absent now or unreported).
    pub current_bytes: Option<u64>,
    /// Its memory at each sample, aligned with `t`.
    pub bytes: Vec<Option<u64>>,
}
