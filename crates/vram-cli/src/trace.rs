//! `vram trace`: a synthetic PyTorch memory snapshot from the estimator's step timeline.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use vram_alloc::snapshot::TraceAction;
use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};
use vram_model::arch::Model;
use vram_model::estimate::Phase;
use vram_model::setup::{Mode, Setup};
use vram_model::trace::{training_events_with_phases, TraceEvent};

use crate::estimate::StepArgs;
use crate::input::resolve_model;
use crate::{bad_input, fmt};

/// Arguments of `vram trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    #[command(flatten)]
    step: StepArgs,
    /// Steps to record.
    #[arg(long, default_value_t = 3)]
    steps: u32,
    /// Allocator policy that lays the tensors out in the snapshot.
    #[arg(long, default_value = "pytorch", value_parser = parse_policy)]
    policy: Policy,
    /// Where to write the snapshot pickle (open it at pytorch.org/memory_viz or with `vram replay`).
    #[arg(long, required_unless_present = "events")]
    out: Option<PathBuf>,
    /// Also (or instead) write the events with the phase each begins, as JSON, with each
    /// phase's time from the planner's step-time model on `--gpu` (for the host tier's
    /// simulator, `vram-tier-sim`; training steps of transformers only).
    #[arg(long)]
    events: Option<PathBuf>,
    /// The GPU whose step-time model prices each phase in `--events`.
    #[arg(long, default_value = "h100")]
    gpu: String,
}

fn parse_policy(s: &str) -> std::result::Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| format!("unknown policy `{s}`"))
}

/// Runs `vram trace`.
pub fn run(a: &TraceArgs) -> Result<()> {
    if a.steps == 0 || a.steps > 100 {
        return Err(bad_input!("--steps must be between 1 and 100"));
    }
    let mut resolved = resolve_model(&a.model, &a.hub)?;
    resolved.model = a.step.apply_to(resolved.model)?;
    let model = &resolved.model;
    if matches!(model, Model::Weights(_)) {
        return Err(bad_input!(
            "{} gives only weights; trace needs an architecture (a config.json or catalog id)",
            a.model
        ));
    }
    let setup = a.step.setup(model)?;
    let (events, marks) = training_events_with_phases(model, &setup, a.steps)?;
    // Both outputs are computed before either is written, and written together: a failure
    // leaves neither.
    let events_text = match &a.events {
        Some(_) => Some(events_json(a, model, &setup, &events, &marks)?),
        None => None,
    };
    let Some(out_path) = a.out.as_ref() else {
        let (Some(path), Some(json)) = (&a.events, &events_text) else {
            unreachable!("clap requires --out or --events")
        };
        crate::output::write_file(path, json.as_bytes())?;
        writeln!(
            crate::output::stdout(),
            "wrote {} ({}): {} events over {} steps with their phases (vramkit's model of the step, not a GPU recording)",
            path.display(),
            fmt::bytes(json.len() as u64),
            fmt::thousands(events.len() as u64),
            a.steps
        )?;
        return Ok(());
    };
    // Record through a simulated device large enough for any single-GPU step.
    let alloc = CachingAllocator::new(
        SimDevice::new(1 << 46),
        AllocatorConfig::new(a.policy).with_history(usize::MAX),
    )?;
    let mut live = std::collections::HashMap::new();
    for e in &events {
        match *e {
            TraceEvent::Alloc { id, bytes, .. } => {
                live.insert(id, alloc.malloc(bytes, 0)?);
            }
            TraceEvent::Free { id } => {
                if let Some(addr) = live.remove(&id) {
                    alloc.free(addr)?;
                }
            }
        }
    }
    let stats = alloc.memory_stats();
    // Each malloc recorded exactly one `alloc` entry, in order: label them with
    // the estimator's categories so memory_viz colours the tensors by kind.
    let mut snap = alloc.snapshot();
    let mut cats = events.iter().filter_map(|e| match e {
        TraceEvent::Alloc { category, .. } => Some(category.name()),
        TraceEvent::Free { .. } => None,
    });
    for t in snap
        .traces
        .iter_mut()
        .filter(|t| t.action == TraceAction::Alloc)
    {
        t.category = cats.next().map(str::to_string);
    }
    let bytes = snap.to_pickle();
    let mut files = vec![(out_path.as_path(), bytes.as_slice())];
    if let (Some(path), Some(json)) = (&a.events, &events_text) {
        files.push((path.as_path(), json.as_bytes()));
    }
    crate::output::write_files(&files)?;
    let mut out = crate::output::stdout();
    writeln!(
        out,
        "wrote {} ({}): {} events over {} steps; {} policy peak allocated {}, peak reserved {}",
        out_path.display(),
        fmt::bytes(bytes.len() as u64),
        fmt::thousands(events.len() as u64),
        a.steps,
        a.policy.name(),
        fmt::bytes(stats.allocated_bytes[0].peak.max(0) as u64),
        fmt::bytes(stats.reserved_bytes[0].peak.max(0) as u64),
    )?;
    Ok(())
}

/// What a phase is, for the simulator: its kind and a name.
fn phase_kind(p: &Phase) -> (&'static str, String) {
    match p {
        Phase::Setup => ("other", "before forward".into()),
        Phase::Forward { micro, layer } => ("forward", format!("forward {micro}.{layer}")),
        Phase::Loss { micro } => ("loss", format!("loss {micro}")),
        Phase::Backward { micro, layer } => ("backward", format!("backward {micro}.{layer}")),
        Phase::Optimizer => ("optimizer", "optimizer".into()),
        other => ("other", format!("{other}")),
    }
}

/// `--events`: the walk's events with phase marks, and each phase of one step priced by the
/// planner's step-time model (`vram_plan::eager`: a layer's forward and backward, head and
/// loss, the optimizer step) on `--gpu`.
fn events_json(
    a: &TraceArgs,
    model: &Model,
    setup: &Setup,
    events: &[TraceEvent],
    marks: &[(usize, Phase)],
) -> Result<String> {
    use serde_json::json;
    let (Model::Transformer(t), Mode::Train(tr)) = (model, setup.mode) else {
        return Err(bad_input!(
            "--events needs a transformer's training step (the simulator prices its phases)"
        ));
    };
    let p = setup.parallel;
    if p.tp * p.pp * p.dp != 1 || tr.grad_accum != 1 {
        return Err(bad_input!(
            "--events prices one GPU's step without gradient accumulation: drop --tp/--pp/--dp/--grad-accum"
        ));
    }
    let gpu = vram_model::gpu::lookup(&a.gpu)?;
    let cal = vram_plan::eager::EagerCalibration::default();
    let tokens = (tr.micro_batch * tr.seq) as f64;
    let mb = vram_plan::eager::micro_batch(
        t,
        gpu,
        &cal,
        setup.attention,
        setup.precision,
        setup.amp_style(),
        tokens,
        tr.seq as f64,
        1.0,
        false,
    );
    let params = model.param_count() as f64;
    let state_bytes = if setup.precision == vram_model::setup::Precision::Bf16 {
        2.0
    } else {
        4.0
    };
    let opt_s = vram_plan::eager::optimizer_s(
        gpu,
        &cal,
        tr.optimizer,
        params,
        params * mb.tensors_per_param,
        state_bytes,
        setup.precision == vram_model::setup::Precision::Fp16Amp,
    );
    // The phases of one step: the first step's marks, up to the second `Setup`.
    let starts: Vec<usize> = marks
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| *p == Phase::Setup)
        .map(|(i, _)| i)
        .collect();
    let per_step = starts.get(1).copied().unwrap_or(marks.len());
    if starts.len() != a.steps as usize || marks.len() != per_step * a.steps as usize {
        return Err(anyhow::anyhow!(
            "the walk's steps do not repeat the same phases ({} marks, {} steps)",
            marks.len(),
            a.steps
        ));
    }
    // A phase the walk marks twice in a row (the embedding before layer 0's forward; the
    // loss's forward and backward) shares its price between the marks.
    let step_marks = &marks[..per_step];
    let phases: Vec<serde_json::Value> = step_marks
        .iter()
        .map(|(_, p)| {
            let (kind, name) = phase_kind(p);
            let seconds = match p {
                Phase::Forward { .. } => mb.layer_fwd_s,
                Phase::Backward { .. } => mb.layer_bwd_s,
                Phase::Loss { .. } => mb.head_s,
                Phase::Optimizer => opt_s,
                _ => 0.0,
            };
            let same = step_marks.iter().filter(|(_, q)| q == p).count();
            json!({"name": name, "kind": kind, "seconds": seconds / same as f64})
        })
        .collect();
    let mut list = Vec::with_capacity(events.len() + marks.len());
    let mut m = marks.iter().enumerate().peekable();
    for (i, e) in events.iter().enumerate() {
        while let Some((k, _)) = m.next_if(|(_, (at, _))| *at <= i) {
            list.push(json!({"phase": k % per_step}));
        }
        list.push(match *e {
            TraceEvent::Alloc {
                id,
                bytes,
                category,
            } => json!({"alloc": id, "bytes": bytes, "category": category.name()}),
            TraceEvent::Free { id } => json!({"free": id}),
        });
    }
    for (k, _) in m {
        list.push(json!({"phase": k % per_step}));
    }
    let doc = json!({
        "source": "vram trace: vramkit's own model of the step (vram-model's walk, the planner's step-time model), not a GPU recording",
        "model": a.model,
        "micro_batch": tr.micro_batch,
        "seq": tr.seq,
        "gpu": gpu.name,
        "params": model.param_count(),
        "steps": a.steps,
        "phases": phases,
        "events": list,
    });
    Ok(serde_json::to_string(&doc)?)
}
