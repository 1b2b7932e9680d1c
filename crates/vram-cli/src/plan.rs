//! `vram plan`: the fastest configuration that fits, and the launch config that runs it.
//!
//! When nothing fits, that is an answer, not an error: the command prints the configuration
//! that came closest and what would make it fit, and exits 0 (`--json`: `"plans": []` with
//! `closest` and `suggestions`). Only `--emit`, which needs a plan to write, fails then
//! (exit 2).

use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::json;
use vram_model::arch::Model;
use vram_model::setup::{Attention, Offload, Optimizer, Precision, Schedule};
use vram_plan::cluster::{self, Cluster};
use vram_plan::emit::{self, Job};
use vram_plan::{search, Outcome, Pins, Plan, Progress, RecomputeChoice, Request, Stack};

use crate::input::resolve_model;
use crate::{bad_input, fmt};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RecomputeArg {
    None,
    Selective,
    Full,
    /// The fewest layers per stage recomputed in full that make the plan fit.
    Optimal,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OffloadArg {
    None,
    Optimizer,
    Params,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PrecisionArg {
    Fp32,
    #[value(name = "fp16-amp")]
    Fp16Amp,
    #[value(name = "bf16-amp")]
    Bf16Amp,
    Bf16,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AttentionArg {
    Eager,
    #[value(alias = "flash")]
    Sdpa,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StackArg {
    /// Hugging Face transformers under PyTorch eager (DeepSpeed, accelerate, torchrun).
    Transformers,
    /// Megatron-LM's fused kernels.
    Megatron,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OptimizerArg {
    Sgd,
    Momentum,
    #[value(alias = "adam")]
    Adamw,
    Adam8bit,
    Adafactor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    Deepspeed,
    Megatron,
    Accelerate,
    Torchrun,
    /// PEFT LoraConfig + TRL SFTConfig (+ BitsAndBytesConfig) as a Python snippet (with
    /// --finetune lora|qlora).
    Peft,
    /// The same as YAML.
    PeftYaml,
}

/// Parses `1f1b`, `gpipe` or `interleaved:N`.
fn parse_schedule(s: &str) -> std::result::Result<Schedule, String> {
    match s.to_ascii_lowercase().as_str() {
        "1f1b" => Ok(Schedule::OneFOneB),
        "gpipe" => Ok(Schedule::Gpipe),
        other => match other
            .strip_prefix("interleaved:")
            .or_else(|| other.strip_prefix("interleaved-"))
        {
            Some(n) => match n.parse::<u64>() {
                Ok(v) if (1..=64).contains(&v) => Ok(Schedule::Interleaved(v)),
                _ => Err(format!("`{s}`: chunks must be a number from 1 to 64")),
            },
            None => Err(format!(
                "`{s}` is not a schedule (1f1b, gpipe, interleaved:N)"
            )),
        },
    }
}

/// Arguments of `vram plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// GPU (see `vram gpus`); the preset's GPU when `--cluster` is given.
    #[arg(long, required_unless_present = "cluster")]
    gpu: Option<String>,
    /// GPUs in the job.
    #[arg(long)]
    gpus: u64,
    /// Sequences per optimizer step over the whole job (met exactly: dp x micro-batch x
    /// accumulation).
    #[arg(long)]
    global_batch: u64,
    /// Sequence length.
    #[arg(long)]
    seq: u64,
    /// Cluster preset: dgx-a100-80g, dgx-h100, hgx-h200, 8x-rtx4090, workstation. Default:
    /// DGX-class nodes of 8 for data-centre GPUs, PCIe nodes of 8 otherwise.
    #[arg(long)]
    cluster: Option<String>,
    /// Pin the tensor-parallel degree.
    #[arg(long)]
    tp: Option<u64>,
    /// Pin the pipeline-parallel degree.
    #[arg(long)]
    pp: Option<u64>,
    /// Pin the data-parallel degree.
    #[arg(long)]
    dp: Option<u64>,
    /// Pin the micro-batch size.
    #[arg(long)]
    micro_batch: Option<u64>,
    /// Pin recomputation.
    #[arg(long, value_enum)]
    recompute: Option<RecomputeArg>,
    /// Pin the ZeRO stage (0-3).
    #[arg(long)]
    zero: Option<u8>,
    /// Pin offload.
    #[arg(long, value_enum)]
    offload: Option<OffloadArg>,
    /// Pin sequence parallelism on.
    #[arg(long, conflicts_with = "no_sequence_parallel")]
    sequence_parallel: bool,
    /// Pin sequence parallelism off.
    #[arg(long)]
    no_sequence_parallel: bool,
    /// Pin the pipeline schedule: 1f1b, gpipe, interleaved:N.
    #[arg(long, value_parser = parse_schedule)]
    schedule: Option<Schedule>,
    /// Precision, or a comma-separated list to search (e.g. `bf16-amp,bf16`). Default: only
    /// bf16-amp (fp16-amp on GPUs without bf16), since pure bf16 always wins on memory but
    /// changes the numerics.
    #[arg(long, value_enum, value_delimiter = ',')]
    precision: Vec<PrecisionArg>,
    /// Attention implementation.
    #[arg(long, value_enum, default_value = "sdpa")]
    attention: AttentionArg,
    /// Optimizer (its states count in memory, its step in time).
    #[arg(long, value_enum, default_value = "adamw")]
    optimizer: OptimizerArg,
    /// The software that runs the step, which decides the kernels priced [default: megatron
    /// with `--emit megatron`, else transformers].
    #[arg(long, value_enum)]
    stack: Option<StackArg>,
    /// Kernel packages installed beside transformers that it runs instead of its torch
    /// fallbacks, comma-separated: fla (flash-linear-attention), causal-conv1d; none by
    /// default, as `pip install transformers` gives (the transformers stack's step time).
    #[arg(long, default_value = "none", value_parser = vram_plan::eager::Kernels::parse)]
    kernels: vram_plan::eager::Kernels,
    /// How many plans to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Print `{"plans": [...]}` (best first) instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the best plan as a launch config for this engine to stdout.
    #[arg(long, value_enum)]
    emit: Option<Engine>,
    #[command(flatten)]
    finetune: crate::finetune::FinetuneArgs,
}

/// A plan as JSON with the label the text prints (`tp2 pp1 dp32 mb1x16 zero3 sp rc-full:4`).
fn labelled(p: &vram_plan::Plan) -> serde_json::Value {
    let mut v = json!(p);
    v["label"] = p.label().into();
    v
}

fn transformer(model: &Model) -> Result<&vram_model::arch::Transformer> {
    match model {
        Model::Transformer(t) => Ok(t),
        other => Err(bad_input!(
            "vram plan needs a transformer; `{}` is not one",
            other.name()
        )),
    }
}

pub fn run(a: &PlanArgs) -> Result<()> {
    let resolved = resolve_model(&a.model, &a.hub)?;
    let (model, config) = (resolved.model, resolved.config);
    transformer(&model)?;
    let cluster = match &a.cluster {
        Some(name) => Cluster::from_preset(cluster::preset(name)?, a.gpu.as_deref(), a.gpus)?,
        None => Cluster::for_gpu(a.gpu.as_deref().unwrap_or_default(), a.gpus)?,
    };
    if a.gpus > cluster.gpus_per_node && a.gpus % cluster.gpus_per_node != 0 {
        return Err(bad_input!(
            "--gpus {} is not a whole number of {}-GPU nodes",
            a.gpus,
            cluster.gpus_per_node
        ));
    }
    if a.top == 0 {
        return Err(bad_input!("--top must be at least 1"));
    }
    // Issue 22: LoRA/QLoRA plans (DDP replicas) and their PEFT/TRL configs.
    let peft_emit = match a.emit {
        Some(Engine::Peft) => Some(crate::finetune::EmitKind::Python),
        Some(Engine::PeftYaml) => Some(crate::finetune::EmitKind::Yaml),
        _ => None,
    };
    if a.finetune.is_lora() || peft_emit.is_some() {
        if a.finetune.is_lora() && a.emit.is_some() && peft_emit.is_none() {
            return Err(bad_input!(
                "--finetune {} writes PEFT/TRL configs: use --emit peft or --emit peft-yaml",
                a.finetune.finetune
            ));
        }
        for (flag, set) in [
            ("--tp", a.tp.is_some_and(|v| v > 1)),
            ("--pp", a.pp.is_some_and(|v| v > 1)),
            ("--zero", a.zero.is_some_and(|v| v > 0)),
            ("--dp", a.dp.is_some_and(|v| v != a.gpus)),
            ("--offload", a.offload.is_some()),
        ] {
            if set {
                return Err(bad_input!(
                    "{flag}: --finetune lora/qlora is planned as DDP, one replica per GPU"
                ));
            }
        }
        if a.gpus == 0 || a.global_batch == 0 || a.seq == 0 {
            return Err(bad_input!(
                "--gpus, --global-batch and --seq must be at least 1"
            ));
        }
        let optimizer = match a.optimizer {
            OptimizerArg::Sgd => Optimizer::Sgd,
            OptimizerArg::Momentum => Optimizer::Momentum,
            OptimizerArg::Adamw => Optimizer::Adamw,
            OptimizerArg::Adam8bit => Optimizer::Adam8bit,
            OptimizerArg::Adafactor => Optimizer::Adafactor,
        };
        return crate::finetune::plan(
            &model,
            cluster.gpu,
            a.gpus,
            a.global_batch,
            a.seq,
            optimizer,
            a.micro_batch,
            &a.finetune,
            peft_emit,
            a.json,
            a.top,
        );
    }
    let mut req = Request::new(model, cluster, a.global_batch, a.seq);
    if !a.precision.is_empty() {
        req.precisions = a
            .precision
            .iter()
            .map(|p| match p {
                PrecisionArg::Fp32 => Precision::Fp32,
                PrecisionArg::Fp16Amp => Precision::Fp16Amp,
                PrecisionArg::Bf16Amp => Precision::Bf16Amp,
                PrecisionArg::Bf16 => Precision::Bf16,
            })
            .collect();
        req.precisions.dedup();
    }
    req.attention = match a.attention {
        AttentionArg::Eager => Attention::Eager,
        AttentionArg::Sdpa => Attention::Sdpa,
    };
    req.optimizer = match a.optimizer {
        OptimizerArg::Sgd => Optimizer::Sgd,
        OptimizerArg::Momentum => Optimizer::Momentum,
        OptimizerArg::Adamw => Optimizer::Adamw,
        OptimizerArg::Adam8bit => Optimizer::Adam8bit,
        OptimizerArg::Adafactor => Optimizer::Adafactor,
    };
    req.calibration.eager.kernels = a.kernels;
    req.stack = match (a.stack, a.emit) {
        (Some(StackArg::Transformers), _) => Stack::Transformers,
        (Some(StackArg::Megatron), _) | (None, Some(Engine::Megatron)) => Stack::Megatron,
        (None, _) => Stack::Transformers,
    };
    req.top = a.top;
    if a.emit.is_some() {
        // Room for the nearest plan the engine runs when it refuses the best one.
        req.top = req.top.max(256);
    }
    req.pins = Pins {
        tp: a.tp,
        pp: a.pp,
        dp: a.dp,
        micro_batch: a.micro_batch,
        recompute: a.recompute.map(|r| match r {
            RecomputeArg::None => RecomputeChoice::None,
            RecomputeArg::Selective => RecomputeChoice::Selective,
            RecomputeArg::Full => RecomputeChoice::Full,
            RecomputeArg::Optimal => RecomputeChoice::Optimal,
        }),
        zero: a.zero,
        offload: a.offload.map(|o| match o {
            OffloadArg::None => Offload::None,
            OffloadArg::Optimizer => Offload::Optimizer,
            OffloadArg::Params => Offload::Params,
        }),
        sequence_parallel: if a.sequence_parallel {
            Some(true)
        } else if a.no_sequence_parallel {
            Some(false)
        } else {
            None
        },
        schedule: a.schedule,
    };
    if let Some(z) = a.zero {
        if z > 3 {
            return Err(bad_input!("--zero {z} must be 0, 1, 2 or 3"));
        }
    }
    for (flag, v) in [
        ("--tp", a.tp),
        ("--pp", a.pp),
        ("--dp", a.dp),
        ("--micro-batch", a.micro_batch),
    ] {
        if v == Some(0) {
            return Err(bad_input!("{flag} must be at least 1"));
        }
    }

    // A progress bar, drawn only once the search has run for a second.
    let start = Instant::now();
    let bar = indicatif::ProgressBar::hidden();
    let mut shown = false;
    let mut on_progress = |p: Progress| {
        if !shown && start.elapsed().as_secs_f64() > 1.0 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.set_length(p.total);
            shown = true;
        }
        bar.set_position(p.done);
    };
    let out = search(&req, &mut on_progress)?;
    bar.finish_and_clear();

    let mut stdout = crate::output::stdout();
    if let Some(engine) = a.emit {
        let Some(best) = out.plans.first() else {
            return Err(bad_input!(
                "nothing fits, so there is no plan to emit; {}",
                out.suggestions.join("; ")
            ));
        };
        let job = Job {
            model: transformer(&req.model)?,
            global_batch: req.global_batch,
            seq: req.seq,
            gpus_per_node: req.cluster.gpus_per_node,
            config: config.as_deref(),
        };
        let engine = match engine {
            Engine::Deepspeed => emit::Engine::Deepspeed,
            Engine::Megatron => emit::Engine::Megatron,
            Engine::Accelerate => emit::Engine::Accelerate,
            Engine::Torchrun => emit::Engine::Torchrun,
            Engine::Peft | Engine::PeftYaml => {
                return Err(bad_input!("--emit peft needs --finetune lora or qlora"))
            }
        };
        // The fastest plan the engine can run; when that is not the best one, say why.
        let refusal = emit::check(engine, best, &job).err();
        let Some(chosen) = out
            .plans
            .iter()
            .find(|p| emit::check(engine, p, &job).is_ok())
        else {
            let r = refusal.map_or_else(String::new, |r| r.to_string());
            return Err(bad_input!(
                "{r} (nor can it run the other {} plans that fit; pin --zero, --pp, --offload or \
                 --recompute to one it runs)",
                out.plans.len() - 1
            ));
        };
        let text = emit::emit(engine, chosen, &job).map_err(|r| bad_input!("{r}"))?;
        stdout.write_all(text.as_bytes())?;
        if let Some(r) = refusal {
            let _ = writeln!(
                std::io::stderr(),
                "vram: the best plan, {}, is not emitted: {r}; the nearest plan it runs follows",
                best.label()
            );
        }
        let _ = writeln!(
            crate::output::stderr(),
            "vram: emitted {} at {:.2} s/step, {} per GPU",
            chosen.label(),
            chosen.step_time_s,
            fmt::bytes(chosen.peak_bytes_per_gpu)
        );
        return Ok(());
    }
    if a.json {
        let v = json!({
            "model": req.model.name(),
            "params": req.model.param_count(),
            "gpu": req.cluster.gpu.id,
            "gpus": req.cluster.gpus,
            "gpus_per_node": req.cluster.gpus_per_node,
            "global_batch": req.global_batch,
            "seq": req.seq,
            "stack": req.stack,
            "optimizer": req.optimizer,
            "plans": out.plans.iter().map(labelled).collect::<Vec<_>>(),
            "closest": out.closest.as_ref().map(labelled),
            "suggestions": out.suggestions,
            "candidates": out.candidates,
            "estimates": out.estimates,
        });
        serde_json::to_writer_pretty(&mut stdout, &v)?;
        writeln!(stdout)?;
        return Ok(());
    }
    table(&mut stdout, &req, &out)?;
    Ok(())
}

fn row(p: &Plan) -> [String; 7] {
    [
        p.label(),
        format!("{:.3}", p.step_time_s),
        format!("{:.0}", p.tokens_per_s),
        format!("{:.1}%", p.mfu * 100.0),
        format!("{:.1}", p.tflops_per_gpu),
        fmt::bytes(p.peak_bytes_per_gpu),
        format!("{:?}", p.bound).to_lowercase(),
    ]
}

fn table(w: &mut impl Write, req: &Request, out: &Outcome) -> Result<()> {
    let c = &req.cluster;
    writeln!(
        w,
        "{} ({} parameters) on {} x {} ({} per node, {}), global batch {} x {} tokens",
        req.model.name(),
        fmt::thousands(req.model.param_count()),
        c.gpus,
        c.gpu.id,
        c.gpus_per_node,
        c.fabric,
        req.global_batch,
        req.seq
    )?;
    writeln!(
        w,
        "priced as {} with {}; searched {} configurations, {} memory estimates",
        match req.stack {
            Stack::Transformers => "transformers (PyTorch eager, H100-measured kernels)",
            Stack::Megatron => "Megatron-LM (fused kernels)",
        },
        serde_json::to_value(req.optimizer)?
            .as_str()
            .unwrap_or("adamw"),
        fmt::thousands(out.candidates),
        fmt::thousands(out.estimates)
    )?;
    let rows: Vec<[String; 7]> = if out.plans.is_empty() {
        out.closest.iter().map(row).collect()
    } else {
        out.plans.iter().map(row).collect()
    };
    if out.plans.is_empty() {
        writeln!(
            w,
            "\nnothing fits in {} per GPU; closest:",
            fmt::bytes(c.gpu.memory_bytes)
        )?;
    } else {
        writeln!(w)?;
    }
    let head = [
        "configuration",
        "step s",
        "tokens/s",
        "MFU",
        "TFLOP/s/GPU",
        "mem/GPU",
        "bound",
    ];
    let mut width = head.map(str::len);
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            width[i] = width[i].max(cell.len());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 0 {
                s += &format!("{:<w$}", cell, w = width[0]);
            } else {
                s += &format!("  {:>w$}", cell, w = width[i]);
            }
        }
        s.trim_end().to_string()
    };
    writeln!(w, "{}", line(&head.map(String::from)))?;
    for r in &rows {
        writeln!(w, "{}", line(r))?;
    }
    for s in &out.suggestions {
        writeln!(w, "- {s}")?;
    }
    Ok(())
}
