//! `vram doctor [MESSAGE | FILE | -]`: why a PyTorch job ran out of GPU
//! memory (or a serving engine would not start) and what to change. The work is in `vram_doctor`; this reads the
//! inputs (argument, file or stdin; model and step flags; memory_stats()
//! dumps; a snapshot; a recording), asks NVML when a driver is present, and
//! prints.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use vram_doctor::message::Backend;
use vram_doctor::serving::{self, ServingError};
use vram_doctor::{stats, DoctorError, Inputs, Job};
use vram_model::arch::Model;
use vram_model::gpu;
use vram_monitor::{NvmlSource, Source};

use crate::bad_input;
use crate::estimate::StepArgs;
use crate::input::resolve_model;

/// Arguments of `vram doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The out-of-memory message itself (or a vLLM/SGLang start-up memory
    /// error), a file holding it (a whole log or traceback is fine), or `-`
    /// for standard input (the default).
    message: Option<String>,
    /// The model (a folder with config.json, a config file, a catalog id or a Hub id): adds
    /// the estimate's breakdown and the fastest setup that fits.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// GPU of the job, for the time model [default: the catalog GPU nearest
    /// the message's total capacity, an AMD one for a ROCm message; the total does not name the
    /// GPU, and a note says which others it fits as well].
    #[arg(long)]
    gpu: Option<String>,
    /// A serving start-up error with --model: the host's NVIDIA driver, as nvidia-smi prints it
    /// (535.161.08) or its branch (535), for the capacity figures' CUDA graphs (as `vram
    /// capacity --driver`) [default: the paste's `Nvidia driver version:` or `Driver Version:`
    /// line, else R550 or later].
    #[arg(long, value_parser = vram_plan::capacity::parse_driver)]
    driver: Option<u32>,
    #[command(flatten)]
    step: StepArgs,
    /// A `torch.cuda.memory_stats()` dump as JSON; give two (earlier first)
    /// to check growth between them.
    #[arg(long = "stats")]
    stats: Vec<PathBuf>,
    /// A memory snapshot pickle of the job (`torch.cuda.memory._dump_snapshot`):
    /// replayed to say what each allocator policy saves.
    #[arg(long)]
    snapshot: Option<PathBuf>,
    /// A `vram record` recording (JSON Lines): its leak check.
    #[arg(long)]
    recording: Option<PathBuf>,
    /// Do not ask NVML for the processes on the device now.
    #[arg(long)]
    no_nvml: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Largest message or stats file read (a log can be long; the message is at its end).
const MAX_TEXT: u64 = 64 << 20;

fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = crate::input::read_bounded(path, what, MAX_TEXT)?;
    Ok(lossy_text(&bytes))
}

/// A message, log or dump as text, whatever a shell saved it as (UTF-8, UTF-16 with its
/// byte-order mark); a byte that is not text becomes U+FFFD, from a file or standard input alike.
fn lossy_text(bytes: &[u8]) -> String {
    crate::input::decode_text(bytes, true).unwrap_or_default()
}

fn doctor_err(e: DoctorError) -> anyhow::Error {
    match e {
        DoctorError::Model(m) => anyhow::Error::new(m),
        DoctorError::Plan(p) => anyhow::Error::new(p),
        DoctorError::Alloc(a) => crate::replay::classify(a),
        other => bad_input!("{other}"),
    }
}

/// Runs `vram doctor`.
pub fn run(a: &DoctorArgs) -> Result<()> {
    let text = match a.message.as_deref() {
        None | Some("-") => {
            crate::stdin::prompt_if_terminal("the out-of-memory message or log");
            let mut bytes = Vec::new();
            std::io::stdin()
                .take(MAX_TEXT + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| bad_input!("cannot read standard input: {e}"))?;
            // As a file is (`read_bounded`): cut at the limit, a log would lose its end, where
            // the message is.
            if bytes.len() as u64 > MAX_TEXT {
                return Err(bad_input!(
                    "standard input is larger than {}",
                    vram_model::fmt::bytes(MAX_TEXT)
                ));
            }
            lossy_text(&bytes)
        }
        Some(m) if m.trim().is_empty() => {
            return Err(bad_input!(
                "the message is empty: give the out-of-memory message, a file holding it, or - to read standard input"
            ))
        }
        // An existing file is read; other text with spaces is the message itself.
        Some(p) if Path::new(p).is_file() => read_text(Path::new(p), "message file")?,
        Some(m) if m.contains(char::is_whitespace) => m.to_string(),
        Some(p) => read_text(Path::new(p), "message file")?,
    };
    let msg = match vram_doctor::read(&text).map_err(doctor_err)? {
        vram_doctor::Reading::Oom(m) => m,
        vram_doctor::Reading::Serving(e) => return serving(a, &e, &text),
    };
    if a.driver.is_some() {
        return Err(bad_input!(
            "--driver prices vLLM's CUDA graphs (a vLLM start-up error with --model); this is a PyTorch out-of-memory message"
        ));
    }
    let mut inp = Inputs::new(msg.clone());
    let mut model_notes = Vec::new();
    if let Some(model_arg) = &a.model {
        if msg.backend == Backend::Mps && a.gpu.is_none() {
            return Err(bad_input!(
                "--model {model_arg} with an MPS message: the GPU catalog has no Apple GPU; give --gpu to estimate on a catalog one"
            ));
        }
        let gpu = match &a.gpu {
            Some(g) => gpu::lookup(g)?,
            None => msg.nearest_gpu().gpu,
        };
        let resolved = resolve_model(model_arg, &a.hub)?;
        if matches!(resolved.model, Model::Weights(_)) {
            return Err(bad_input!(
                "--model {model_arg}: weights alone do not describe a step; give a config.json or catalog id"
            ));
        }
        let setup = a.step.setup(&resolved.model)?;
        // The setup's storage decision was made on the default GPU (`StepArgs::setup`).
        model_notes = vram_report::notes::of_step(
            &resolved.model,
            matches!(setup.mode, vram_model::setup::Mode::Train(_)),
            None,
        );
        model_notes.extend(vram_report::notes::of_request(
            &a.step.request(),
            &resolved.model,
        ));
        // The estimate keeps the step's precision; its plans follow the same rule (fp16 AMP).
        model_notes.extend(vram_report::notes::of_precision(setup.precision, gpu));
        inp.job = Some(Job {
            model: resolved.model,
            setup,
            gpu,
        });
    } else if a.gpu.is_some() {
        return Err(bad_input!("--gpu is for --model (the step's time model)"));
    } else if let Some(flags) = Some(a.step.request().given()).filter(|g| !g.is_empty()) {
        return Err(bad_input!(
            "{} describe{} the job's step, which is estimated only with --model: give --model",
            flags.join(", "),
            if flags.len() == 1 { "s" } else { "" }
        ));
    }
    for p in &a.stats {
        let name = p.display().to_string();
        inp.stats
            .push(stats::parse(&read_text(p, "memory_stats() dump")?, &name).map_err(doctor_err)?);
    }
    if let Some(p) = &a.snapshot {
        let snap = crate::replay::read_snapshot(p)?;
        inp.events = Some(vram_alloc::replay::events_from_snapshot(&snap).0);
    }
    if let Some(p) = &a.recording {
        let tl = vram_monitor::timeline::parse(&read_text(p, "recording")?)
            .map_err(|e| bad_input!("recording {}: {e}", p.display()))?;
        inp.recording = Some(tl.samples);
    }
    let mut nvml_note = None;
    if !a.no_nvml && msg.backend != Backend::Cuda {
        // NVML sees NVIDIA GPUs only: its device N is not this message's ROCm or Ascend device N.
        nvml_note = Some(format!(
            "processes on the device not checked now: vram reads them through NVML, which sees NVIDIA GPUs only (`{}` on the host lists them)",
            msg.backend.smi()
        ));
    } else if !a.no_nvml {
        match NvmlSource::new() {
            Ok(mut src) => {
                if let Ok(s) = src.sample(crate::monitor::now_ms()) {
                    inp.device_processes = s
                        .gpus
                        .into_iter()
                        .find(|g| g.index == msg.device)
                        .map(|g| g.processes);
                }
            }
            Err(_) => {
                nvml_note = Some(
                    "no NVIDIA driver here: processes on the device not checked now".to_string(),
                )
            }
        }
    }
    let mut d = vram_doctor::diagnose(&inp).map_err(doctor_err)?;
    if let Some(job) = inp.job.as_ref().filter(|_| a.gpu.is_none()) {
        let timed = d.remedies.iter().any(|r| r.step_time_s.is_some());
        if msg.backend == Backend::Npu && timed {
            // The catalog has no Ascend NPU: the plans' times are another device's.
            model_notes.push(format!(
                "the plans' step times are predicted for the {} (the catalog GPU nearest the NPU's memory; the catalog has no Ascend NPU): they rank the plans, they are not the NPU's times",
                job.gpu.name
            ));
        } else if msg.backend == Backend::Xpu && timed {
            // Nor an Intel GPU.
            model_notes.push(format!(
                "the plans' step times are predicted for the {} (the catalog GPU nearest the XPU's memory; the catalog has no Intel GPU): they rank the plans, they are not the XPU's times",
                job.gpu.name
            ));
        } else if d.remedies.iter().any(|r| r.step_time_s.is_some()) {
            model_notes.push(msg.nearest_gpu().note());
        }
    }
    if let Some(job) = inp.job.as_ref().filter(|_| a.gpu.is_some()) {
        // The plans are searched on the given GPU (`Cluster::for_gpu`): a card smaller than the
        // message's device (beyond the spread one card's total shows across drivers) makes
        // them fit the smaller card, and plans that only the message's device holds are not
        // among them.
        let spread = 1.0 + vram_model::gpu::TOTAL_SPREAD;
        if (job.gpu.memory_bytes as f64) * spread < msg.total_bytes as f64
            && d.remedies.iter().any(|r| r.step_time_s.is_some())
        {
            model_notes.push(format!(
                "--gpu {} holds {}, less than the message's device ({} in all): the plans are searched to fit the {} and timed on it, so a faster plan that only the message's device holds is not among them; give --gpu with the message's device to plan for it",
                job.gpu.id,
                vram_doctor::human_bytes(job.gpu.memory_bytes),
                vram_doctor::human_bytes(msg.total_bytes),
                job.gpu.name,
            ));
        }
    }
    d.notes.splice(0..0, model_notes);
    d.notes.extend(nvml_note);
    let mut out = crate::output::stdout();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&d)?)?;
    } else {
        print_answer(&mut out, &d).context("writing the diagnosis")?;
    }
    Ok(())
}

/// A serving engine's start-up error: the knob it names, explained. The
/// PyTorch-only inputs do not apply to it.
fn serving(a: &DoctorArgs, e: &ServingError, text: &str) -> Result<()> {
    if !a.stats.is_empty() || a.snapshot.is_some() || a.recording.is_some() {
        return Err(bad_input!(
            "this is a serving engine's start-up error, not a PyTorch out-of-memory message: --stats, --snapshot and --recording do not apply"
        ));
    }
    let given = a.step.request().given();
    if !given.is_empty() {
        return Err(bad_input!(
            "this is a serving engine's start-up error: {} describe{} a PyTorch step and do{} not apply (the engine's own flags are `vram capacity`'s)",
            given.join(", "),
            if given.len() == 1 { "s" } else { "" },
            if given.len() == 1 { "es" } else { "" }
        ));
    }
    // With --model (and --gpu), the capacity model's figures for the engine's defaults turn
    // each knob into a number.
    let mut conf = vram_doctor::profile::engine_configuration(text);
    if a.driver.is_some() {
        if e.engine() == vram_plan::capacity::Engine::Sglang {
            return Err(bad_input!(
                "--driver prices vLLM's CUDA graphs by driver branch; vram's SGLang graphs take no driver, and this is an SGLang start-up error"
            ));
        }
        if a.model.is_none() {
            return Err(bad_input!(
                "--driver prices the capacity figures' CUDA graphs, which need --model (and --gpu)"
            ));
        }
    }
    // The driver given wins over the one the paste prints; SGLang's graphs take none.
    conf.driver = a.driver.or(conf.driver);
    if e.engine() == vram_plan::capacity::Engine::Sglang {
        conf.driver = None;
    }
    // The engine's own profiling lines, when the paste holds them, say what took the room.
    let mut profile = vram_doctor::profile::read(text);
    // The device the paste prints (vLLM's free-memory check, its profile's total) is the one the
    // capacity figures are of: a --gpu of another size would mix two devices in one answer.
    let pasted_total = match *e {
        ServingError::VllmFreeBelowUtilization {
            total_bytes,
            cpu_backend: false,
            ..
        }
        | ServingError::VllmExternalWeightsFillShare { total_bytes, .. }
        | ServingError::VllmFreeBelowEngineBudget { total_bytes, .. } => Some(total_bytes),
        _ => None,
    }
    .or(profile.as_ref().and_then(|p| p.total_bytes));
    if let (Some(_), Some(g), Some(total)) = (&a.model, a.gpu.as_deref(), pasted_total) {
        let g = vram_model::gpu::lookup(g)?;
        let r = total as f64 / g.memory_bytes.max(1) as f64;
        let spread = 1.0 + vram_model::gpu::TOTAL_SPREAD;
        if r > spread || r * spread < 1.0 {
            return Err(bad_input!(
                "--gpu {} holds {}, but the paste's device has {}: the capacity figures would be of another GPU than the engine's; give --gpu the paste's device, or its total (--gpu {:.2}GiB)",
                g.id,
                vram_doctor::human_bytes(g.memory_bytes),
                vram_doctor::human_bytes(total),
                total as f64 / (1u64 << 30) as f64
            ));
        }
    }
    let (figures, mut notes) = match &a.model {
        None => (None, Vec::new()),
        // A load failure is not about memory: no capacity figure changes it.
        Some(_) if !e.is_memory() => (
            None,
            vec![if matches!(e, ServingError::LoadQuantCapability { .. }) {
                "--model is not used: this start-up error is the GPU's compute capability, not memory"
            } else {
                "--model is not used: this start-up error is the checkpoint's quantized layout, not memory"
            }
            .to_string()],
        ),
        // A release the capacity model refuses: its figures would be another release's.
        Some(_) if serving::CapacityFigures::unmodelled_release(e, &conf).is_some() => (
            None,
            serving::CapacityFigures::unmodelled_release(e, &conf)
                .into_iter()
                .collect(),
        ),
        Some(m) => {
            let (f, mut n) = serving_figures(m, &a.hub, a.gpu.as_deref(), e, &conf)?;
            // The pasted driver, where it moves the graphs' figure, says so.
            n.extend(vram_plan::capacity::driver_graph_assumption(conf.driver));
            (Some(f), n)
        }
    };
    if let Some(reason) = profile.as_ref().and_then(|p| p.impossible()) {
        return Err(doctor_err(DoctorError::Unparseable { reason }));
    }
    // A V1 log that prints no budget gets the named GPU's total (the catalog's, as PyTorch
    // reports it) and the logged or default utilization; the profile says which it used.
    let mut gpu_used = a.model.is_some();
    if let (Some(p), Some(g)) = (profile.as_mut(), a.gpu.as_deref()) {
        let before = p.clone();
        p.supply_device(vram_model::gpu::lookup(g)?);
        gpu_used |= *p != before;
    }
    // Without --model, --gpu only completes a V1 budget or marks a ROCm device; elsewhere the
    // answer is the paste's alone, and says so rather than seem to count the GPU named.
    if a.gpu.is_some() && !gpu_used {
        notes.push(
            "--gpu is not used: with a serving start-up error it sizes the capacity model's figures with --model, or completes a vLLM V1 budget the log does not print (beside its `Model loading took` and `Available KV cache memory` lines), and this paste has neither".to_string(),
        );
    }
    let mut d = serving::explain_profiled(e, profile.as_ref(), figures.as_ref());
    // A remedy the pasted configuration already runs is left out, and a note says so.
    notes.extend(serving::drop_already_made(&mut d, &conf));
    d.notes = notes;
    let mut out = crate::output::stdout();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&d)?)?;
    } else {
        print_answer(&mut out, &d).context("writing the diagnosis")?;
    }
    Ok(())
}

/// `--model` and `--gpu` for a serving start-up error, resolved and refused where they do not
/// apply, and the capacity model's figures for them (`CapacityFigures::of`); with the model's
/// notes.
fn serving_figures(
    model: &str,
    hub: &crate::input::HubArgs,
    gpu: Option<&str>,
    e: &ServingError,
    conf: &vram_doctor::profile::EngineConfiguration,
) -> Result<(serving::CapacityFigures, Vec<String>)> {
    if e.on_host() {
        return Err(bad_input!(
            "--model with vLLM's CPU-backend error: its KV cache is host memory (VLLM_CPU_KVCACHE_SPACE, gpu_memory_utilization of the node), there is no GPU to model"
        ));
    }
    let gpu = gpu.ok_or_else(|| {
        bad_input!("--model with a serving start-up error needs --gpu (the error does not name the device)")
    })?;
    let gpu = vram_model::gpu::lookup(gpu)?;
    let resolved = resolve_model(model, hub)?;
    let vram_model::arch::Model::Transformer(t) = &resolved.model else {
        return Err(bad_input!(
            "`{model}` is not a transformer; serving engines size a KV cache for transformers"
        ));
    };
    // The capacity model's refusals here are of the paste's own settings (its max_model_len,
    // TP size, utilization) on the model given, which the user did not type as flags.
    let figures = serving::CapacityFigures::of(t, gpu, e, conf).map_err(|err| match err {
        serving::FiguresError::Settings(vram_plan::Error::Capacity(m)) => bad_input!(
            "--model {model} cannot run as the paste ran (its max_model_len, TP size and share): {m}"
        ),
        serving::FiguresError::NotThePastesModel(m) => bad_input!("{m}"),
        serving::FiguresError::Settings(other) => anyhow::Error::new(other),
    })?;
    Ok((figures, vram_report::notes::of_transformer(t)))
}

/// The text of an answer: made from its JSON by `vram_report::doctor`, which also renders its
/// page (`vram report`), so the text, the JSON and the page say the same.
fn print_answer(out: &mut impl Write, d: &impl serde::Serialize) -> Result<()> {
    let v = serde_json::to_value(d)?;
    let a = vram_report::doctor::Answer::from_value(v)?;
    write!(out, "{}", a.text())?;
    Ok(())
}
