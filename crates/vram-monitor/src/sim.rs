//! A scripted, deterministic source: GPUs and processes whose memory follows
//! simple patterns, one of them leaking. Used by every test and by `--demo`.

use crate::{GpuSample, MonitorError, ProcessSample, Result, Sample, Source};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// How a simulated process's memory evolves with the sample number `k`.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// Constant, plus a little jitter.
    Flat {
        /// Bytes held.
        bytes: u64,
    },
    /// Ramps from `start` to `plateau` over `ramp_steps` samples, then a
    /// sawtooth of `saw` bytes with period `period` (a caching allocator
    /// growing and being emptied): stable, not a leak.
    Training {
        /// Bytes at the first sample.
        start: u64,
        /// Bytes after warm-up.
        plateau: u64,
        /// Samples the warm-up lasts.
        ramp_steps: u64,
        /// Sawtooth height in bytes.
        saw: u64,
        /// Sawtooth period in samples (at least 1).
        period: u64,
    },
    /// Grows by `per_step` bytes each sample (with jitter) until `cap`, then
    /// starts again from `start` (the process was restarted after an OOM).
    Leak {
        /// Bytes at the first sample.
        start: u64,
        /// Growth per sample.
        per_step: u64,
        /// Where it wraps around.
        cap: u64,
    },
    /// Models loaded and freed one after another (a notebook, a sweep, a
    /// measurement script): model `i` takes a size drawn in
    /// `[min_bytes, max_bytes]`, loads over 1 to 3 samples, is held for a
    /// drawn `[min_hold, max_hold]` samples with a caching allocator's
    /// sawtooth of up to a tenth of its size on top, then is freed
    /// (`empty_cache()`) back to `base` for `gap` samples. Not a leak.
    Models {
        /// Bytes held between models (CUDA context, libraries).
        base: u64,
        /// Smallest model (with its training state) in bytes.
        min_bytes: u64,
        /// Largest model in bytes.
        max_bytes: u64,
        /// Fewest samples a model is held.
        min_hold: u64,
        /// Most samples a model is held.
        max_hold: u64,
        /// Samples between freeing one model and loading the next (at least 1).
        gap: u64,
    },
    /// A caching allocator warming up: it grows each time a batch needs more
    /// than every batch before it (often at first, then rarely, as the
    /// running maximum of random draws), reaches `plateau` after `warmup`
    /// samples and holds it, with a sawtooth of `saw` bytes and period
    /// `period` on top from the start. Not a leak.
    WarmUp {
        /// Bytes at the first sample.
        start: u64,
        /// Bytes once warm.
        plateau: u64,
        /// Samples the warm-up lasts.
        warmup: u64,
        /// Sawtooth height in bytes.
        saw: u64,
        /// Sawtooth period in samples (at least 1).
        period: u64,
    },
    /// Another pattern plus `per_step` bytes per sample that are never given
    /// back: a real leak under whatever the process does otherwise.
    Leaking {
        /// What the process would hold without the leak.
        under: Box<Pattern>,
        /// Bytes leaked per sample.
        per_step: u64,
    },
    /// Present for `on` samples, absent for `off` samples, repeating.
    Intermittent {
        /// Bytes held while present.
        bytes: u64,
        /// Samples present.
        on: u64,
        /// Samples absent.
        off: u64,
    },
}

/// A simulated GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct SimGpu {
    /// Product name.
    pub name: String,
    /// Installed memory in bytes.
    pub total_bytes: u64,
    /// Memory the driver itself holds (counted in "used").
    pub driver_bytes: u64,
    /// Mean utilisation in percent; samples vary ±10 around it.
    pub utilization_pct: u32,
}

/// A simulated process.
#[derive(Debug, Clone, PartialEq)]
pub struct SimProcess {
    /// Index into [`Scenario::gpus`].
    pub gpu: usize,
    /// Process id.
    pub pid: u32,
    /// Owner.
    pub user: String,
    /// Command line.
    pub command: String,
    /// Memory over time.
    pub pattern: Pattern,
}

/// A complete simulated machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The GPUs.
    pub gpus: Vec<SimGpu>,
    /// The processes.
    pub processes: Vec<SimProcess>,
    /// Seed of the deterministic jitter.
    pub seed: u64,
}

impl Scenario {
    /// The `--demo` machine: an H100 running a training job and an inference
    /// server, and an A100 with a leaking notebook (pid 6001) and an
    /// evaluation job that comes and goes.
    pub fn demo() -> Self {
        let p = |gpu, pid, user: &str, command: &str, pattern| SimProcess {
            gpu,
            pid,
            user: user.into(),
            command: command.into(),
            pattern,
        };
        Scenario {
            gpus: vec![
                SimGpu {
                    name: "Simulated H100 80GB HBM3".into(),
                    total_bytes: 80 * GIB,
                    driver_bytes: 512 * MIB,
                    utilization_pct: 88,
                },
                SimGpu {
                    name: "Simulated A100-SXM4-40GB".into(),
                    total_bytes: 40 * GIB,
                    driver_bytes: 420 * MIB,
                    utilization_pct: 35,
                },
            ],
            processes: vec![
                p(
                    0,
                    4242,
                    "alice",
                    "python train.py --model llama-7b --bs 8",
                    Pattern::Training {
                        start: 2 * GIB,
                        plateau: 38 * GIB,
                        ramp_steps: 20,
                        saw: 3 * GIB,
                        period: 10,
                    },
                ),
                p(
                    0,
                    5150,
                    "bob",
                    "python -m vllm.entrypoints.openai.api_server --gpu-memory-utilization 0.4",
                    Pattern::Flat { bytes: 31 * GIB },
                ),
                p(
                    1,
                    6001,
                    "carol",
                    "python -m ipykernel_launcher -f kernel-6001.json",
                    Pattern::Leak {
                        start: 3 * GIB,
                        per_step: 24 * MIB,
                        cap: 36 * GIB,
                    },
                ),
                p(
                    1,
                    7007,
                    "dave",
                    "python eval.py --ckpt step_1200",
                    Pattern::Intermittent {
                        bytes: 2 * GIB,
                        on: 40,
                        off: 20,
                    },
                ),
            ],
            seed: 0x5eed,
        }
    }

    /// Check that every process sits on an existing GPU and patterns are sane.
    ///
    /// # Errors
    /// [`MonitorError::InvalidScenario`] describing the first problem.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(MonitorError::InvalidScenario { reason });
        if self.gpus.is_empty() {
            return bad("no GPUs".into());
        }
        for p in &self.processes {
            if p.gpu >= self.gpus.len() {
                return bad(format!(
                    "pid {} on GPU {} which does not exist",
                    p.pid, p.gpu
                ));
            }
            match p.pattern {
                Pattern::Training { period: 0, .. } => {
                    return bad(format!("pid {}: sawtooth period 0", p.pid))
                }
                Pattern::Intermittent { on: 0, .. } => {
                    return bad(format!("pid {}: never present", p.pid))
                }
                Pattern::Leak { start, cap, .. } if cap <= start => {
                    return bad(format!("pid {}: leak cap below start", p.pid))
                }
                Pattern::Models {
                    min_bytes,
                    max_bytes,
                    min_hold,
                    max_hold,
                    gap,
                    ..
                } if min_bytes > max_bytes || min_hold == 0 || min_hold > max_hold || gap == 0 => {
                    return bad(format!("pid {}: model sizes or holds out of order", p.pid))
                }
                Pattern::WarmUp { period: 0, .. } => {
                    return bad(format!("pid {}: sawtooth period 0", p.pid))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// splitmix64: a tiny, good-enough deterministic hash for jitter.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform jitter in `[-amp, amp]`.
fn jitter(seed: u64, k: u64, id: u64, amp: u64) -> i64 {
    if amp == 0 {
        return 0;
    }
    let r = mix(seed ^ mix(k.wrapping_mul(1_000_003) ^ id));
    (r % (2 * amp + 1)) as i64 - amp as i64
}

fn add(base: u64, delta: i64) -> u64 {
    base.saturating_add_signed(delta)
}

impl Pattern {
    /// Bytes held at sample `k`, or `None` when the process is absent.
    pub fn bytes_at(&self, k: u64, seed: u64, id: u64) -> Option<u64> {
        match *self {
            Pattern::Flat { bytes } => Some(add(bytes, jitter(seed, k, id, 2 * MIB))),
            Pattern::Training {
                start,
                plateau,
                ramp_steps,
                saw,
                period,
            } => {
                let period = period.max(1);
                if k < ramp_steps {
                    Some(start + (plateau.saturating_sub(start)) * k / ramp_steps.max(1))
                } else {
                    Some(plateau + saw * ((k - ramp_steps) % period) / period)
                }
            }
            Pattern::Leak {
                start,
                per_step,
                cap,
            } => {
                let span = cap.saturating_sub(start).max(1);
                let grown = per_step.saturating_mul(k) % span;
                Some(add(start + grown, jitter(seed, k, id, per_step / 2)))
            }
            Pattern::Models {
                base,
                min_bytes,
                max_bytes,
                min_hold,
                max_hold,
                gap,
            } => {
                let draw = |i: u64, what: u64, lo: u64, hi: u64| {
                    lo + mix(seed ^ mix(id ^ mix(i.wrapping_mul(31).wrapping_add(what))))
                        % (hi.saturating_sub(lo).saturating_add(1)).max(1)
                };
                let mut start = 0;
                for i in 0.. {
                    let size = draw(i, 1, min_bytes, max_bytes);
                    let load = draw(i, 2, 1, 3);
                    let hold = draw(i, 3, min_hold.max(1), max_hold.max(min_hold.max(1)));
                    let end = start + load + hold + gap.max(1);
                    if k < end {
                        let j = k - start;
                        let held = if j < load {
                            size * (j + 1) / load
                        } else if j < load + hold {
                            let period = 5;
                            size + size / 10 * ((j - load) % period) / period
                        } else {
                            0
                        };
                        return Some(add(base + held, jitter(seed, k, id, MIB)));
                    }
                    start = end;
                }
                None
            }
            Pattern::WarmUp {
                start,
                plateau,
                warmup,
                saw,
                period,
            } => {
                let period = period.max(1);
                let span = plateau.saturating_sub(start);
                let level = if k >= warmup {
                    plateau
                } else {
                    // Running maximum of uniform draws in [0, 1): the batch
                    // that needs the most memory so far.
                    let most = (0..=k)
                        .map(|j| mix(seed ^ mix(id ^ mix(j))) >> 11)
                        .max()
                        .unwrap_or(0);
                    start + (span as f64 * most as f64 / (1u64 << 53) as f64) as u64
                };
                Some(level + saw * (k % period) / period)
            }
            Pattern::Leaking {
                ref under,
                per_step,
            } => under
                .bytes_at(k, seed, id)
                .map(|b| b.saturating_add(per_step.saturating_mul(k))),
            Pattern::Intermittent { bytes, on, off } => {
                let cycle = on + off;
                (cycle == 0 || k % cycle < on).then_some(bytes)
            }
        }
    }
}

/// Replays a [`Scenario`]; sample `k` is fully determined by the scenario and
/// `k`, whatever the clock says.
#[derive(Debug, Clone)]
pub struct SimulatedSource {
    scenario: Scenario,
    step: u64,
}

impl SimulatedSource {
    /// A source for `scenario`.
    ///
    /// # Errors
    /// [`MonitorError::InvalidScenario`] when [`Scenario::validate`] fails.
    pub fn new(scenario: Scenario) -> Result<Self> {
        scenario.validate()?;
        Ok(SimulatedSource { scenario, step: 0 })
    }

    /// The `--demo` source ([`Scenario::demo`]).
    pub fn demo() -> Self {
        SimulatedSource {
            scenario: Scenario::demo(),
            step: 0,
        }
    }

    /// Skip ahead so the next sample is number `k` (e.g. to start `--demo`
    /// with the training job already warmed up).
    pub fn starting_at(mut self, k: u64) -> Self {
        self.step = k;
        self
    }

    /// Number of samples taken so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The sample number `k`, without advancing.
    pub fn sample_at(&self, k: u64, t_ms: u64) -> Sample {
        let s = &self.scenario;
        let mut gpus: Vec<GpuSample> = s
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuSample {
                index: i as u32,
                name: g.name.clone(),
                uuid: format!("GPU-5151-0000-0000-0000-{:012x}", i + 1),
                memory_total_bytes: g.total_bytes,
                memory_used_bytes: g.driver_bytes.min(g.total_bytes),
                utilization_pct: Some(
                    add(
                        u64::from(g.utilization_pct),
                        jitter(s.seed, k, 1000 + i as u64, 10),
                    )
                    .min(100) as u32,
                ),
                processes: Vec::new(),
                note: None,
            })
            .collect();
        for p in &s.processes {
            let Some(gpu) = gpus.get_mut(p.gpu) else {
                continue;
            };
            if let Some(bytes) = p.pattern.bytes_at(k, s.seed, u64::from(p.pid)) {
                let room =
                    gpu.memory_total_bytes - gpu.memory_used_bytes.min(gpu.memory_total_bytes);
                let bytes = bytes.min(room);
                gpu.memory_used_bytes += bytes;
                gpu.processes.push(ProcessSample {
                    pid: p.pid,
                    user: p.user.clone(),
                    command: p.command.clone(),
                    gpu_memory_bytes: Some(bytes),
                });
            }
        }
        Sample {
            t_ms,
            source: "simulated".into(),
            gpus,
        }
    }
}

impl Source for SimulatedSource {
    fn sample(&mut self, t_ms: u64) -> Result<Sample> {
        let s = self.sample_at(self.step, t_ms);
        self.step += 1;
        Ok(s)
    }

    fn describe(&self) -> String {
        format!(
            "simulated ({} GPUs, {} processes)",
            self.scenario.gpus.len(),
            self.scenario.processes.len()
        )
    }
}
