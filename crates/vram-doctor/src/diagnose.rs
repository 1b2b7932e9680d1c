//! Causes and ranked remedies from the message and whatever else is known.

use serde::Serialize;
use vram_alloc::replay::{self, Event};
use vram_model::arch::Model;
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Optimizer, Setup};
use vram_monitor::leak::{LeakConfig, LeakDetector};
use vram_monitor::{ProcessSample, Sample};
use vram_plan::cluster::Cluster;
use vram_plan::{Pins, Request};

use crate::message::OomMessage;
use crate::stats::StatsDump;
use crate::Result;

/// The job that ran out of memory, described as for `vram estimate`.
#[derive(Debug, Clone)]
pub struct Job {
    /// The model.
    pub model: Model,
    /// The setup that failed.
    pub setup: Setup,
    /// The GPU (its time model; its memory is taken from the message).
    pub gpu: &'static Gpu,
}

/// Everything the doctor may be given; only the message is required.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The out-of-memory message.
    pub message: OomMessage,
    /// The model and setup.
    pub job: Option<Job>,
    /// `memory_stats()` dumps, earliest first (two or more: growth between them).
    pub stats: Vec<StatsDump>,
    /// The alloc/free events of a memory snapshot of this job.
    pub events: Option<Vec<Event>>,
    /// A `vram record` recording.
    pub recording: Option<Vec<Sample>>,
    /// The processes NVML lists now on the message's GPU.
    pub device_processes: Option<Vec<ProcessSample>>,
    /// This process's pid, left out of `device_processes` (the doctor itself
    /// holds no GPU memory, but a wrapper may pass it).
    pub self_pid: Option<u32>,
}

impl Inputs {
    /// Inputs with only the message.
    pub fn new(message: OomMessage) -> Self {
        Inputs {
            message,
            job: None,
            stats: Vec::new(),
            events: None,
            recording: None,
            device_processes: None,
            self_pid: None,
        }
    }
}

/// What ran the memory out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CauseKind {
    /// One request is larger than everything this process could ever get.
    TensorLargerThanDevice,
    /// Free bytes in PyTorch's cache, too scattered for the request.
    Fragmentation,
    /// Live tensors plus the request exceed what the process can get.
    StepTooLarge,
    /// Other processes hold memory on the device.
    OtherProcesses,
    /// `set_per_process_memory_fraction` caps the process below the device.
    ProcessCap,
    /// Memory grows from step to step.
    Leak,
}

/// One cause, with the bytes it accounts for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    /// Which cause.
    pub kind: CauseKind,
    /// Bytes it accounts for (its share of the memory that was missing or held).
    pub bytes: u64,
    /// True when this cause alone explains the failure.
    pub sufficient: bool,
    /// One line with the figures.
    pub detail: String,
}

/// One remedy, ranked: remedies that are enough come first, cheapest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remedy {
    /// The cause it addresses.
    pub kind: CauseKind,
    /// What to do (a setting, flags, an action).
    pub action: String,
    /// Bytes it frees or saves on this job, when known.
    pub saves_bytes: Option<u64>,
    /// True when, by the figures at hand, it makes the request fit.
    pub enough: bool,
    /// Predicted step time, for remedies that change the step.
    pub step_time_s: Option<f64>,
    /// One line with the figures and how they were obtained.
    pub detail: String,
}

/// One allocator policy replayed on the snapshot's events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicySaving {
    /// Policy name (`pytorch`, `pytorch-expandable`, `vramkit`).
    pub policy: String,
    /// Peak reserved bytes on an unbounded device.
    pub peak_reserved_bytes: u64,
    /// Peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Reserved bytes saved against PyTorch's default policy.
    pub saves_bytes: u64,
    /// Whether it runs out of the memory the process could get.
    pub would_oom: bool,
}

/// The estimate of the job, where one was given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EstimateSummary {
    /// Peak bytes of live tensors (`max_memory_allocated()`).
    pub peak_allocated_bytes: u64,
    /// Device memory at the peak, the CUDA context and library memory seen in
    /// the message included.
    pub total_bytes: u64,
    /// Phase of the peak.
    pub peak_phase: String,
    /// Category and bytes at the peak, largest first.
    pub breakdown: Vec<(String, u64)>,
    /// Whether it fits in what the process can get.
    pub fits: bool,
}

/// The doctor's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The message's figures.
    pub message: OomMessage,
    /// Bytes this process could hold at most: the device (or the cap) less
    /// other processes and this process's memory outside PyTorch.
    pub usable_bytes: u64,
    /// What this process holds outside PyTorch (context, libraries), from the
    /// message, or inferred as total − free − reserved − other processes.
    pub non_pytorch_bytes: u64,
    /// Bytes missing even if every cached byte could have been used:
    /// request − (free + reserved but unallocated), 0 when the request would
    /// have fit without fragmentation.
    pub shortfall_bytes: u64,
    /// Causes, the most important first.
    pub causes: Vec<Cause>,
    /// Remedies, ranked.
    pub remedies: Vec<Remedy>,
    /// The estimate of the job, when the model was given.
    pub estimate: Option<EstimateSummary>,
    /// The snapshot replay, when a snapshot was given.
    pub replay: Vec<PolicySaving>,
    /// Things worth knowing that are neither causes nor remedies.
    pub notes: Vec<String>,
}

/// Bytes as PyTorch's `format_size` writes them (`0 bytes`, `20.00 MiB`).
pub fn human_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if b <= 1024 {
        format!("{b} bytes")
    } else if f <= K * K {
        format!("{:.2} KiB", f / K)
    } else if f <= K * K * K {
        format!("{:.2} MiB", f / (K * K))
    } else {
        format!("{:.2} GiB", f / (K * K * K))
    }
}

/// Diagnoses an out-of-memory error.
///
/// # Errors
/// Only from the inputs: an invalid setup ([`crate::DoctorError::Model`]), a
/// planner refusal, a snapshot whose events cannot be replayed.
pub fn diagnose(inp: &Inputs) -> Result<Diagnosis> {
    let m = &inp.message;
    let hb = human_bytes;
    let mut notes = Vec::new();
    let listed_others = m.other_process_bytes();
    // Processes NVML lists now that the message did not (another job started
    // since, or a message without the process list).
    let now_others: Vec<&ProcessSample> = inp
        .device_processes
        .iter()
        .flatten()
        .filter(|p| Some(p.pid) != inp.self_pid)
        .filter(|p| !m.other_processes.iter().any(|q| q.pid == p.pid))
        .filter(|p| p.gpu_memory_bytes.unwrap_or(0) > 0)
        .collect();
    let non_pytorch = m.non_pytorch_bytes().unwrap_or_else(|| {
        m.total_bytes
            .saturating_sub(m.free_bytes)
            .saturating_sub(m.reserved_bytes)
            .saturating_sub(listed_others)
    });
    let inferred_non_pytorch = m.non_pytorch_bytes().is_none();
    let cap = m.allowed_bytes.unwrap_or(u64::MAX).min(m.total_bytes);
    let usable = cap
        .saturating_sub(listed_others)
        .saturating_sub(non_pytorch);
    let unalloc = m.reserved_unallocated_bytes();
    let available = m.free_bytes.saturating_add(unalloc);
    let shortfall = m.requested_bytes.saturating_sub(available);
    // What the allocated tensors plus the request need, against what the
    // process could get: positive when the step is too large whatever the
    // allocator does.
    let need = m.allocated_bytes.saturating_add(m.requested_bytes);
    let over = need.saturating_sub(usable);

    let mut causes = Vec::new();
    let mut remedies = Vec::new();

    if m.requested_bytes > usable {
        causes.push(Cause {
            kind: CauseKind::TensorLargerThanDevice,
            bytes: m.requested_bytes,
            sufficient: true,
            detail: format!(
                "the request alone ({}) is larger than all this process could hold ({})",
                hb(m.requested_bytes),
                hb(usable)
            ),
        });
        remedies.push(Remedy {
            kind: CauseKind::TensorLargerThanDevice,
            action: "make that one tensor smaller (shorter sequence, smaller batch, chunked loss or attention) or shard it (tensor parallelism)".into(),
            saves_bytes: None,
            enough: false,
            step_time_s: None,
            detail: format!(
                "no allocator setting helps: {} requested, {} usable",
                hb(m.requested_bytes),
                hb(usable)
            ),
        });
    }

    // Fragmentation: cached but unallocated bytes that, with the free bytes,
    // would have served the request.
    if unalloc > 0 && (unalloc >= m.requested_bytes / 4 || available >= m.requested_bytes) {
        let sufficient = available >= m.requested_bytes;
        causes.push(Cause {
            kind: CauseKind::Fragmentation,
            bytes: unalloc,
            sufficient,
            detail: format!(
                "{} is reserved by PyTorch but unallocated ({:.0}% of reserved): free blocks too scattered for a {} request{}",
                hb(unalloc),
                100.0 * unalloc as f64 / m.reserved_bytes.max(1) as f64,
                hb(m.requested_bytes),
                if sufficient {
                    format!("; with the {} free, the request would have fit", hb(m.free_bytes))
                } else {
                    String::new()
                }
            ),
        });
    }
    if let Some(s) = inp.stats.last() {
        if s.alloc_retries > 0 || s.inactive_split > 0 {
            notes.push(format!(
                "memory_stats(): {} cudaMalloc retries (each flushed the cache and synchronised), {} in split segments' free blocks",
                s.alloc_retries,
                hb(s.inactive_split)
            ));
        }
    }

    // Replay of the snapshot: what each policy reserves on this job.
    let mut replay_rows = Vec::new();
    if let Some(events) = &inp.events {
        let results = replay::replay_all(events, Some(usable))?;
        let base = results
            .iter()
            .find(|r| r.name == "pytorch")
            .map_or(0, |r| r.peak_reserved_bytes);
        for r in &results {
            replay_rows.push(PolicySaving {
                policy: r.name.clone(),
                peak_reserved_bytes: r.peak_reserved_bytes,
                peak_allocated_bytes: r.peak_allocated_bytes,
                saves_bytes: base.saturating_sub(r.peak_reserved_bytes),
                would_oom: r.would_oom.unwrap_or(false),
            });
        }
    }
    let frag = causes.iter().any(|c| c.kind == CauseKind::Fragmentation);
    if frag || !replay_rows.is_empty() {
        // Step-time costs measured on an H100 80GB HBM3 (driver 580.159.04,
        // PyTorch 2.11.0+cu130, 2026-11-22), five training loops (GPT-2,
        // BERT, ResNet-50, Pythia-1.4B, Llama-3-8B cut to 4 layers), median
        // step against PyTorch's default allocator: expandable segments
        // 1.00-1.09x, the vramkit plug-in 1.08-1.82x.
        for (policy, action, cost) in [
            (
                "pytorch-expandable",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                "no code change; 1.00-1.09x the default's step time on five training loops measured on an H100",
            ),
            (
                "vramkit",
                "vramkit's allocator (import vramkit_torch; vramkit_torch.install())",
                "1.08-1.82x the default's step time on five training loops measured on an H100",
            ),
        ] {
            let row = replay_rows.iter().find(|r| r.policy == policy);
            let (saves, enough, how) = match row {
                Some(r) => (
                    Some(r.saves_bytes),
                    !r.would_oom,
                    format!(
                        "the snapshot replayed: peak reserved {} against {} with PyTorch's default, {} in the {} usable",
                        hb(r.peak_reserved_bytes),
                        hb(r.peak_reserved_bytes + r.saves_bytes),
                        if r.would_oom { "still out of memory" } else { "fits" },
                        hb(usable)
                    ),
                ),
                None => (
                    Some(unalloc),
                    available >= m.requested_bytes,
                    format!(
                        "up to the {} reserved but unallocated (pass --snapshot for a replay of this job)",
                        hb(unalloc)
                    ),
                ),
            };
            remedies.push(Remedy {
                kind: CauseKind::Fragmentation,
                action: action.into(),
                saves_bytes: saves,
                enough,
                step_time_s: None,
                detail: format!("{how}; {cost}"),
            });
        }
    }

    // Other processes.
    let now_bytes: u64 = now_others.iter().filter_map(|p| p.gpu_memory_bytes).sum();
    if listed_others > 0 || now_bytes > 0 {
        let sufficient = listed_others >= shortfall && shortfall > 0
            || listed_others.saturating_add(available) >= m.requested_bytes;
        let mut who: Vec<String> = m
            .other_processes
            .iter()
            .map(|p| format!("pid {} {}", p.pid, hb(p.bytes)))
            .collect();
        who.extend(now_others.iter().map(|p| {
            format!(
                "pid {} ({}) {} now",
                p.pid,
                p.command.chars().take(40).collect::<String>(),
                hb(p.gpu_memory_bytes.unwrap_or(0))
            )
        }));
        causes.push(Cause {
            kind: CauseKind::OtherProcesses,
            bytes: listed_others.max(now_bytes),
            sufficient,
            detail: format!(
                "other processes hold memory on GPU {}: {}",
                m.device,
                who.join(", ")
            ),
        });
        remedies.push(Remedy {
            kind: CauseKind::OtherProcesses,
            action: format!(
                "stop or move the other processes on GPU {} ({})",
                m.device,
                who.join(", ")
            ),
            saves_bytes: Some(listed_others.max(now_bytes)),
            enough: sufficient,
            step_time_s: None,
            detail: format!(
                "frees {}; the request needed {} beyond what was free and cached",
                hb(listed_others.max(now_bytes)),
                hb(shortfall)
            ),
        });
    }

    // The per-process cap.
    if let Some(allowed) = m.allowed_bytes.filter(|a| *a < m.total_bytes) {
        let gain = m.total_bytes - allowed;
        causes.push(Cause {
            kind: CauseKind::ProcessCap,
            bytes: gain,
            sufficient: gain >= over && over > 0,
            detail: format!(
                "set_per_process_memory_fraction allows {} of the {} device",
                hb(allowed),
                hb(m.total_bytes)
            ),
        });
        remedies.push(Remedy {
            kind: CauseKind::ProcessCap,
            action: "raise torch.cuda.set_per_process_memory_fraction".into(),
            saves_bytes: Some(gain),
            enough: gain >= over,
            step_time_s: None,
            detail: format!("up to {} more for this process", hb(gain)),
        });
    }

    // Leak: growth between memory_stats() dumps, or a recording's verdict.
    if inp.stats.len() >= 2 {
        let (a, b) = (inp.stats[0], inp.stats[inp.stats.len() - 1]);
        let grew = b.allocated.saturating_sub(a.allocated);
        if grew >= 1 << 20 {
            causes.push(Cause {
                kind: CauseKind::Leak,
                bytes: grew,
                sufficient: grew >= over && over > 0,
                detail: format!(
                    "allocated memory grew by {} between the first and last memory_stats() dumps ({} -> {})",
                    hb(grew),
                    hb(a.allocated),
                    hb(b.allocated)
                ),
            });
            remedies.push(Remedy {
                kind: CauseKind::Leak,
                action: "find what keeps tensors alive across steps (a loss or output kept with its graph: use .item() or .detach(); growing lists or caches on the GPU)".into(),
                saves_bytes: Some(grew),
                enough: grew >= over,
                step_time_s: None,
                detail: format!("{} per interval between the dumps", hb(grew)),
            });
        } else {
            notes.push(format!(
                "no growth between the memory_stats() dumps ({} -> {} allocated): not a leak",
                hb(a.allocated),
                hb(b.allocated)
            ));
        }
    }
    if let Some(samples) = &inp.recording {
        let mut det = LeakDetector::new(LeakConfig::default());
        samples.iter().for_each(|s| det.observe(s));
        let findings = det.assess();
        for f in findings.iter().filter(|f| f.leaking) {
            let grew = f.floor_growth_bytes.max(0) as u64;
            causes.push(Cause {
                kind: CauseKind::Leak,
                bytes: grew,
                sufficient: false,
                detail: format!(
                    "the recording's leak check flags GPU {} pid {}: its floor rose {} at {}/s",
                    f.gpu,
                    f.pid,
                    hb(grew),
                    hb(f.slope_bytes_per_s.max(0.0) as u64)
                ),
            });
        }
        if findings.is_empty() {
            notes.push("the recording is too short for a leak verdict".into());
        } else if !findings.iter().any(|f| f.leaking) {
            notes.push(format!(
                "the recording's leak check finds no growing process ({} processes)",
                findings.len()
            ));
        }
    }

    // The step: from the message alone, and with the model when given.
    let mut estimate = None;
    if over > 0 && m.requested_bytes <= usable {
        causes.push(Cause {
            kind: CauseKind::StepTooLarge,
            bytes: over,
            sufficient: true,
            detail: format!(
                "live tensors ({}) plus the request ({}) exceed the {} this process can hold by {}",
                hb(m.allocated_bytes),
                hb(m.requested_bytes),
                hb(usable),
                hb(over)
            ),
        });
    }
    if let Some(job) = &inp.job {
        let (summary, mut fixes) = step_remedies(job, m, usable, non_pytorch, listed_others)?;
        let est_over = summary
            .total_bytes
            .saturating_sub(usable.saturating_add(non_pytorch));
        if !summary.fits {
            causes.retain(|c| c.kind != CauseKind::StepTooLarge);
            causes.push(Cause {
                kind: CauseKind::StepTooLarge,
                bytes: est_over.max(over),
                sufficient: true,
                detail: format!(
                    "the estimate of this step needs {} at its peak ({}), {} more than this process can hold{}",
                    hb(summary.total_bytes),
                    summary.peak_phase,
                    hb(est_over),
                    if over > 0 {
                        format!("; at the failure, live tensors plus the request were already {} over", hb(over))
                    } else {
                        String::new()
                    }
                ),
            });
            // A remedy that frees less than the step is over is not enough,
            // whatever it does for this one request.
            for r in remedies
                .iter_mut()
                .filter(|r| r.kind != CauseKind::StepTooLarge)
            {
                if r.enough && r.saves_bytes.unwrap_or(0) < est_over {
                    r.enough = false;
                    r.detail.push_str(&format!(
                        "; not enough for the whole step, which the estimate puts {} over",
                        hb(est_over)
                    ));
                }
            }
            for c in causes
                .iter_mut()
                .filter(|c| c.kind != CauseKind::StepTooLarge)
            {
                c.sufficient = false;
            }
        }
        if summary.fits && over > 0 {
            notes.push(format!(
                "the estimate ({} at the peak) fits in {}: the setup given may not be the one that ran, or memory is held that the step does not explain (see the leak and other-process causes)",
                hb(summary.total_bytes),
                hb(usable)
            ));
        }
        if !summary.fits || over > 0 {
            remedies.append(&mut fixes);
        }
        estimate = Some(summary);
    } else if over > 0 {
        remedies.push(Remedy {
            kind: CauseKind::StepTooLarge,
            action: format!("make the step need {} less (give the model and step flags for the breakdown and the fastest setup that fits)", hb(over)),
            saves_bytes: None,
            enough: false,
            step_time_s: None,
            detail: format!("{} allocated + {} requested > {} usable", hb(m.allocated_bytes), hb(m.requested_bytes), hb(usable)),
        });
    }
    if inferred_non_pytorch {
        notes.push(format!(
            "the message does not list processes (PyTorch 2.0 layout, or NVML unavailable): {} used outside PyTorch's cache is taken as this process's context and libraries",
            hb(non_pytorch)
        ));
    }

    // Rank causes: sufficient ones first, then by bytes.
    causes.sort_by(|a, b| b.sufficient.cmp(&a.sufficient).then(b.bytes.cmp(&a.bytes)));
    // Rank remedies: enough first; then cheapest: settings, other processes,
    // the cap, the step (fastest first), then vramkit's allocator, the leak,
    // and last the changes that rewrite the model.
    let rank = |r: &Remedy| match (r.kind, r.action.starts_with("vramkit")) {
        (CauseKind::Fragmentation, false) => 0,
        (CauseKind::OtherProcesses, _) => 1,
        (CauseKind::ProcessCap, _) => 2,
        (CauseKind::Leak, _) => 3,
        (CauseKind::StepTooLarge, _) => 4,
        (CauseKind::Fragmentation, true) => 5,
        (CauseKind::TensorLargerThanDevice, _) => 6,
    };
    remedies.sort_by(|a, b| {
        b.enough.cmp(&a.enough).then(rank(a).cmp(&rank(b))).then(
            a.step_time_s
                .unwrap_or(0.0)
                .total_cmp(&b.step_time_s.unwrap_or(0.0)),
        )
    });
    Ok(Diagnosis {
        message: m.clone(),
        usable_bytes: usable,
        non_pytorch_bytes: non_pytorch,
        shortfall_bytes: shortfall,
        causes,
        remedies,
        estimate,
        replay: replay_rows,
        notes,
    })
}

/// The estimate of the job against the memory the message shows, and the
/// fastest configurations that fit it.
fn step_remedies(
    job: &Job,
    m: &OomMessage,
    usable: u64,
    non_pytorch: u64,
    others: u64,
) -> Result<(EstimateSummary, Vec<Remedy>)> {
    let hb = human_bytes;
    // Anchor the estimate to the device in the message: this process's
    // memory outside PyTorch as measured, and everything else it cannot
    // have (other processes, the cap, a catalog GPU larger than the device)
    // as extra context.
    let catalog = job.gpu.memory_bytes;
    let room = m.allowed_bytes.unwrap_or(u64::MAX).min(m.total_bytes);
    let mut setup = job.setup;
    setup.overheads.cuda_context_bytes = non_pytorch
        .saturating_add(others)
        .saturating_add(catalog.saturating_sub(room));
    let e = vram_model::estimate(&job.model, &setup)?;
    let mut breakdown: Vec<(String, u64)> = e
        .breakdown
        .iter()
        .filter(|(_, b)| *b > 0)
        .map(|(c, b)| {
            let b = if c == vram_model::Category::CudaContext {
                non_pytorch
            } else {
                b
            };
            (c.name().to_string(), b)
        })
        .collect();
    breakdown.sort_by_key(|b| std::cmp::Reverse(b.1));
    let fits = e.fits(catalog);
    let summary = EstimateSummary {
        peak_allocated_bytes: e.peak_bytes,
        total_bytes: e
            .total_bytes
            .saturating_sub(others)
            .saturating_sub(catalog.saturating_sub(room)),
        peak_phase: e.peak_phase.to_string(),
        breakdown,
        fits,
    };
    let mut fixes = Vec::new();
    let (Mode::Train(t), Model::Transformer(_)) = (setup.mode, &job.model) else {
        // Inference, or a model the planner does not take: the largest batch that fits.
        if let Mode::Infer(i) = setup.mode {
            let mut b = i.batch.saturating_sub(1);
            while b >= 1 {
                let mut s = setup;
                if let Mode::Infer(ii) = &mut s.mode {
                    ii.batch = b;
                }
                if vram_model::estimate(&job.model, &s).is_ok_and(|e| e.fits(catalog)) {
                    fixes.push(Remedy {
                        kind: CauseKind::StepTooLarge,
                        action: format!("--batch {b}"),
                        saves_bytes: None,
                        enough: true,
                        step_time_s: None,
                        detail: format!(
                            "the largest batch that fits in {} at context {}",
                            hb(usable),
                            i.context
                        ),
                    });
                    break;
                }
                b /= 2;
            }
        }
        return Ok((summary, fixes));
    };
    let p = setup.parallel;
    let gpus = p.dp * p.tp * p.pp;
    let mut optimizers = vec![t.optimizer];
    if t.optimizer == Optimizer::Adamw {
        optimizers.push(Optimizer::Adam8bit);
    }
    for opt in optimizers {
        let cluster = Cluster::for_gpu(job.gpu.id, gpus)?;
        let mut req = Request::new(
            job.model.clone(),
            cluster,
            p.dp * t.micro_batch * t.grad_accum,
            t.seq,
        );
        req.precisions = vec![setup.precision];
        req.attention = setup.attention;
        req.optimizer = opt;
        req.overheads = setup.overheads;
        req.pins = Pins {
            tp: Some(p.tp),
            pp: Some(p.pp),
            dp: Some(p.dp),
            ..Pins::default()
        };
        req.top = 2;
        let out = vram_plan::search(&req, &mut |_| {})?;
        let best_so_far = fixes
            .iter()
            .filter_map(|f: &Remedy| f.step_time_s)
            .fold(f64::INFINITY, f64::min);
        for plan in out
            .plans
            .iter()
            .take(if opt == t.optimizer { 2 } else { 1 })
            // 8-bit Adam changes the optimizer: worth it only when faster.
            .filter(|p| opt == t.optimizer || p.step_time_s < best_so_far * 0.99)
        {
            let mut action = plan_flags(plan);
            if opt != t.optimizer {
                action.push_str(" --optimizer adam8bit");
            }
            fixes.push(Remedy {
                kind: CauseKind::StepTooLarge,
                action,
                saves_bytes: Some(summary.total_bytes.saturating_sub(plan.peak_bytes_per_gpu.saturating_sub(others))),
                enough: true,
                step_time_s: Some(plan.step_time_s),
                detail: format!(
                    "{}: {} per GPU of the {} usable, {:.3} s/step predicted, same global batch of {}",
                    plan.label(),
                    hb(plan.peak_bytes_per_gpu.saturating_sub(others).saturating_sub(catalog.saturating_sub(room))),
                    hb(usable),
                    plan.step_time_s,
                    p.dp * t.micro_batch * t.grad_accum
                ),
            });
        }
    }
    Ok((summary, fixes))
}

/// The `vram estimate` flags of a plan's per-GPU choices.
fn plan_flags(p: &vram_plan::Plan) -> String {
    use vram_model::setup::{Offload, Recompute};
    let mut f = format!(
        "--micro-batch {} --grad-accum {}",
        p.micro_batch, p.grad_accum
    );
    match p.recompute {
        Recompute::None => {}
        Recompute::Selective => f.push_str(" --recompute selective"),
        Recompute::Full => f.push_str(" --recompute full"),
    }
    if let Some(k) = p.recompute_layers {
        f.push_str(&format!(" --recompute-layers {k}"));
    }
    if p.zero_stage > 0 {
        f.push_str(&format!(" --zero {}", p.zero_stage));
    }
    match p.offload {
        Offload::None => {}
        Offload::Optimizer => f.push_str(" --offload optimizer"),
        Offload::Params => f.push_str(" --offload params"),
    }
    f
}
