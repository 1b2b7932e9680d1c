//! `vram estimate`, `vram models`, `vram gpus`.

use std::io::Write;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::json;
use vram_model::arch::Model;
use vram_model::estimate::{max_batch, max_context};
use vram_model::gpu::{self, Gpu};
use vram_model::setup::{self, Infer, Mode, Overheads, Parallel, Setup, Train};
use vram_model::{catalog, estimate_with_timeline, Category, Estimate};

use crate::input::{parse_bytes, resolve_model};
use crate::{bad_input, fmt};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Precision {
    Fp32,
    #[value(name = "fp16-amp")]
    Fp16Amp,
    #[value(name = "bf16-amp")]
    Bf16Amp,
    Bf16,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Optimizer {
    Sgd,
    Momentum,
    #[value(alias = "adam")]
    Adamw,
    Adam8bit,
    Adafactor,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Recompute {
    None,
    Selective,
    Full,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Attention {
    Eager,
    #[value(alias = "flash")]
    Sdpa,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Offload {
    None,
    Optimizer,
    Params,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AmpStyle {
    Autocast,
    Deepspeed,
    Megatron,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KvDtype {
    Fp32,
    Fp16,
    Bf16,
    Fp8,
    Int8,
}

/// Parses `1f1b`, `gpipe` or `interleaved:N`.
fn parse_schedule(s: &str) -> std::result::Result<setup::Schedule, String> {
    match s.to_ascii_lowercase().as_str() {
        "1f1b" => Ok(setup::Schedule::OneFOneB),
        "gpipe" => Ok(setup::Schedule::Gpipe),
        other => match other
            .strip_prefix("interleaved:")
            .or_else(|| other.strip_prefix("interleaved="))
        {
            Some(n) => n
                .parse()
                .map(setup::Schedule::Interleaved)
                .map_err(|_| format!("`{s}`: chunks must be a number")),
            None if other == "interleaved" => Ok(setup::Schedule::Interleaved(2)),
            None => Err(format!(
                "`{s}` is not a schedule (1f1b, gpipe, interleaved:N)"
            )),
        },
    }
}

fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a fraction (0.05 or 5%)"))?;
    if !(0.0..=10.0).contains(&v) {
        return Err(format!("`{s}` must be between 0 and 10"));
    }
    Ok(v)
}

/// Knobs shared by every command that estimates a step (`estimate`, later `plan` and `trace`).
#[derive(Debug, Clone, Args)]
pub struct StepArgs {
    /// Numeric precision.
    #[arg(long, value_enum, default_value = "bf16-amp")]
    precision: Precision,
    /// Mixed-precision memory layout [default: deepspeed under ZeRO, megatron under TP/PP, else autocast].
    #[arg(long, value_enum)]
    amp_style: Option<AmpStyle>,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    optimizer: Optimizer,
    /// Sequences per micro-batch per data-parallel rank.
    #[arg(long, default_value_t = 1)]
    micro_batch: u64,
    /// Sequence length [default: min(2048, the model's maximum)].
    #[arg(long)]
    seq: Option<u64>,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1)]
    grad_accum: u64,
    /// Activation recomputation.
    #[arg(long, value_enum, default_value = "none")]
    recompute: Recompute,
    /// Recompute only this many layers per pipeline stage.
    #[arg(long)]
    recompute_layers: Option<u64>,
    /// Attention implementation (eager stores the s² scores).
    #[arg(long, value_enum, default_value = "sdpa")]
    attention: Attention,
    /// ZeRO stage.
    #[arg(long, default_value_t = 0)]
    zero: u8,
    /// ZeRO offload to host memory.
    #[arg(long, value_enum, default_value = "none")]
    offload: Offload,
    /// Data-parallel degree.
    #[arg(long, default_value_t = 1)]
    dp: u64,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1)]
    tp: u64,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1)]
    pp: u64,
    /// Megatron sequence parallelism (with --tp > 1).
    #[arg(long)]
    sequence_parallel: bool,
    /// Pipeline schedule: 1f1b, gpipe or interleaved:N.
    #[arg(long, default_value = "1f1b", value_parser = parse_schedule)]
    schedule: setup::Schedule,
    /// Estimate inference (weights, KV cache, one forward) instead of training.
    #[arg(long)]
    inference: bool,
    /// Inference: concurrent sequences.
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Inference: tokens per sequence at the end of generation, prompt plus new tokens
    /// [default: min(2048, the model's maximum), or --prompt + --new-tokens].
    #[arg(long)]
    context: Option<u64>,
    /// Inference: prompt tokens per sequence (with --new-tokens; instead of --context).
    #[arg(long)]
    prompt: Option<u64>,
    /// Inference: tokens `generate` produces after the prompt (max_new_tokens).
    #[arg(long, default_value_t = 16)]
    new_tokens: u64,
    /// Inference: the KV cache of `generate` (dynamic: grows by torch.cat at every token).
    #[arg(long, value_enum, default_value = "dynamic")]
    kv_cache: KvCacheArg,
    /// Inference: KV-cache element type.
    #[arg(long, value_enum, default_value = "bf16")]
    kv_dtype: KvDtype,
    /// CUDA context and kernels outside the allocator, e.g. 500MiB.
    #[arg(long, value_parser = parse_bytes)]
    cuda_context: Option<u64>,
    /// cuBLAS/cuDNN workspace inside the allocator, e.g. 32MiB.
    #[arg(long, value_parser = parse_bytes)]
    workspace: Option<u64>,
    /// A fixed allocator overhead as a fraction of peak allocated (e.g. 0.05 or 5%), instead of
    /// replaying the step through the allocator.
    #[arg(long, value_parser = parse_fraction)]
    fragmentation: Option<f64>,
    /// The caching allocator whose replay gives the reserved bytes.
    #[arg(long, value_enum, default_value = "pytorch")]
    allocator: AllocatorArg,
    /// How half-precision weights came to be: `fp32` when the model was built in fp32 and cast
    /// (from_config, then model.to(bfloat16)), `native` when loaded in its own dtype
    /// (from_pretrained(..., dtype=torch.bfloat16)). Changes the reserved bytes only.
    #[arg(long, value_enum, default_value = "fp32")]
    weights_created: WeightsCreated,
}

/// `--weights-created`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightsCreated {
    /// Built in fp32, then cast to the step's precision.
    Fp32,
    /// Created in the step's precision.
    Native,
}

/// `--kv-cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheArg {
    /// transformers' DynamicCache (the default).
    Dynamic,
    /// StaticCache (cache_implementation="static"), allocated for the whole context up front.
    Static,
}

/// `--allocator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AllocatorArg {
    /// PyTorch's CUDACachingAllocator, default settings.
    Pytorch,
    /// PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
    PytorchExpandable,
    /// vramkit's allocator (the plug-in's default policy).
    Vramkit,
}

impl StepArgs {
    /// The setup these flags describe for `model` on the default GPU (H100).
    pub fn setup(&self, model: &Model) -> Result<Setup> {
        self.setup_on(model, None)
    }

    /// The setup these flags describe for `model` on `gpu` (its context and workspace).
    pub fn setup_on(&self, model: &Model, gpu: Option<&vram_model::gpu::Gpu>) -> Result<Setup> {
        let max_pos = match model {
            Model::Transformer(t) => t.max_positions,
            _ => 2048,
        };
        let default_len = max_pos.min(2048);
        let d = gpu.map_or_else(Overheads::default, Overheads::for_gpu);
        let overheads = Overheads {
            cuda_context_bytes: self.cuda_context.unwrap_or(d.cuda_context_bytes),
            workspace_bytes: self.workspace.unwrap_or(d.workspace_bytes),
            fragmentation: self.fragmentation,
            allocator: match self.allocator {
                AllocatorArg::Pytorch => setup::Allocator::Pytorch,
                AllocatorArg::PytorchExpandable => setup::Allocator::PytorchExpandable,
                AllocatorArg::Vramkit => setup::Allocator::Vramkit,
            },
            weights_cast_from_fp32: self.weights_created == WeightsCreated::Fp32,
        };
        let mode = if self.inference {
            let kv_bytes = match self.kv_dtype {
                KvDtype::Fp32 => 4,
                KvDtype::Fp16 | KvDtype::Bf16 => 2,
                KvDtype::Fp8 | KvDtype::Int8 => 1,
            };
            let context = match (self.context, self.prompt) {
                (Some(_), Some(_)) => {
                    return Err(bad_input!(
                        "give --context (prompt plus new tokens) or --prompt, not both"
                    ))
                }
                (Some(c), None) => c,
                (None, Some(p)) => p.saturating_add(self.new_tokens),
                (None, None) => default_len,
            };
            if self.new_tokens >= context {
                return Err(bad_input!(
                    "--new-tokens {} leaves no prompt in a context of {context} tokens",
                    self.new_tokens
                ));
            }
            Mode::Infer(Infer {
                batch: self.batch,
                context,
                new_tokens: self.new_tokens,
                kv_bytes,
                kv_cache: match self.kv_cache {
                    KvCacheArg::Dynamic => setup::KvCache::Dynamic,
                    KvCacheArg::Static => setup::KvCache::Static,
                },
            })
        } else {
            if self.context.is_some() || self.prompt.is_some() {
                return Err(bad_input!(
                    "--context and --prompt are for --inference; training takes --seq"
                ));
            }
            Mode::Train(Train {
                micro_batch: self.micro_batch,
                seq: self.seq.unwrap_or(default_len),
                grad_accum: self.grad_accum,
                optimizer: match self.optimizer {
                    Optimizer::Sgd => setup::Optimizer::Sgd,
                    Optimizer::Momentum => setup::Optimizer::Momentum,
                    Optimizer::Adamw => setup::Optimizer::Adamw,
                    Optimizer::Adam8bit => setup::Optimizer::Adam8bit,
                    Optimizer::Adafactor => setup::Optimizer::Adafactor,
                },
                recompute: match self.recompute {
                    Recompute::None => setup::Recompute::None,
                    Recompute::Selective => setup::Recompute::Selective,
                    Recompute::Full => setup::Recompute::Full,
                },
                recompute_layers: self.recompute_layers,
                offload: match self.offload {
                    Offload::None => setup::Offload::None,
                    Offload::Optimizer => setup::Offload::Optimizer,
                    Offload::Params => setup::Offload::Params,
                },
                amp_style: self.amp_style.map(|s| match s {
                    AmpStyle::Autocast => setup::AmpStyle::Autocast,
                    AmpStyle::Deepspeed => setup::AmpStyle::DeepSpeed,
                    AmpStyle::Megatron => setup::AmpStyle::Megatron,
                }),
            })
        };
        if let Some(seq) = self.seq {
            if matches!(model, Model::Transformer(_)) && seq > max_pos && !self.inference {
                let _ = writeln!(crate::output::stderr(), "vram: note: --seq {seq} exceeds the model's configured maximum of {max_pos} positions");
            }
        }
        let setup = Setup {
            precision: match self.precision {
                Precision::Fp32 => setup::Precision::Fp32,
                Precision::Fp16Amp => setup::Precision::Fp16Amp,
                Precision::Bf16Amp => setup::Precision::Bf16Amp,
                Precision::Bf16 => setup::Precision::Bf16,
            },
            attention: match self.attention {
                Attention::Eager => setup::Attention::Eager,
                Attention::Sdpa => setup::Attention::Sdpa,
            },
            parallel: Parallel {
                dp: self.dp,
                tp: self.tp,
                pp: self.pp,
                sequence_parallel: self.sequence_parallel,
                zero: self.zero,
                schedule: self.schedule,
            },
            overheads,
            mode,
        };
        setup.validate()?;
        Ok(setup)
    }
}

/// Arguments of `vram estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// A catalog id (see `vram models`), a config.json or a folder holding one, or a
    /// .safetensors file / model.safetensors.index.json.
    model: String,
    /// GPU to check the fit against (see `vram gpus`).
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    #[command(flatten)]
    step: StepArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Include the step's timeline (live bytes at every phase).
    #[arg(long)]
    timeline: bool,
}

/// Arguments of the listing commands.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &EstimateArgs) -> Result<()> {
    let gpu = gpu::lookup(&a.gpu)?;
    let resolved = resolve_model(&a.model)?;
    let model = &resolved.model;
    if let Model::Weights(w) = model {
        return print_weights(w, a.json);
    }
    let setup = a.step.setup_on(model, Some(gpu))?;
    let e = estimate_with_timeline(model, &setup)?;
    let cap = gpu.memory_bytes;
    let (fit_batch, fit_context) = match setup.mode {
        Mode::Train(_) => (max_batch(model, &setup, cap)?, None),
        Mode::Infer(_) => (
            max_batch(model, &setup, cap)?,
            max_context(model, &setup, cap)?,
        ),
    };
    let mut out = crate::output::stdout();
    if a.json {
        let timeline: Vec<_> = e
            .timeline
            .iter()
            .filter(|_| a.timeline)
            .map(|p| json!({"label": p.phase.to_string(), "phase": p.phase, "live_bytes": p.live_bytes, "high_bytes": p.high_bytes}))
            .collect();
        let mut v = json!({
            "model": e.model,
            "params": e.params,
            "params_per_gpu": e.params_per_gpu,
            "peak_bytes": e.peak_bytes,
            "peak_tensor_bytes": e.peak_tensor_bytes,
            "reserved_bytes": e.reserved_bytes,
            "total_bytes": e.total_bytes,
            "breakdown": e.breakdown,
            "peak_phase": e.peak_phase.to_string(),
            "pipeline_rank": e.pipeline_rank,
            "amp_style": e.amp_style,
            "allocator": e.allocator,
            "assumes": e.assumes,
            "cuda_context_source": gpu.context_source(),
            "gpu": {"id": gpu.id, "name": gpu.name, "memory_bytes": gpu.memory_bytes},
            "gpu_memory_bytes": gpu.memory_bytes,
            "fits": e.fits(cap),
            "headroom_bytes": cap as i128 - e.total_bytes as i128,
            "setup": setup,
        });
        if !e.mechanisms.is_empty() {
            v["mechanisms"] = json!(e.mechanisms);
        }
        if let Mode::Train(_) = setup.mode {
            v["max_micro_batch"] = json!(fit_batch);
        } else {
            v["max_batch"] = json!(fit_batch);
            v["max_context"] = json!(fit_context);
        }
        if a.timeline {
            v["timeline"] = json!(timeline);
        }
        if let Some(s) = crate::speed::of(model, gpu, &setup) {
            v["serving"] = json!(s);
        }
        if let Some(w) = &resolved.checkpoint {
            v["checkpoint_params"] = json!(w.params);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    print_table(
        &mut out,
        model,
        &setup,
        &e,
        gpu,
        fit_batch,
        fit_context,
        a.timeline,
    )?;
    if let Some(s) = crate::speed::of(model, gpu, &setup) {
        writeln!(out, "{}", crate::speed::line(&s))?;
    }
    if let Some(w) = &resolved.checkpoint {
        let verdict = if w.params == e.params {
            "matches the config".to_string()
        } else {
            format!("config says {}", fmt::thousands(e.params))
        };
        writeln!(
            out,
            "checkpoint beside the config: {} parameters ({verdict})",
            fmt::thousands(w.params)
        )?;
    }
    Ok(())
}

fn describe(setup: &Setup, e: &Estimate) -> String {
    let p = setup.parallel;
    let par = format!(
        "dp {} tp {} pp {}{}",
        p.dp,
        p.tp,
        p.pp,
        if p.sequence_parallel { " +sp" } else { "" }
    );
    let prec = serde_json::to_value(setup.precision)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let attn = serde_json::to_value(setup.attention)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    match setup.mode {
        Mode::Train(t) => {
            let style = serde_json::to_value(e.amp_style).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            let j = |v: serde_json::Value| v.as_str().map(String::from).unwrap_or_default();
            format!(
                "training, {prec} ({style} layout), {}, micro-batch {} x seq {}, grad-accum {}, recompute {}{}, attention {attn}, {par}, ZeRO {}{}",
                j(json!(t.optimizer)),
                t.micro_batch,
                t.seq,
                t.grad_accum,
                j(json!(t.recompute)),
                t.recompute_layers.map(|k| format!(" ({k} layers)")).unwrap_or_default(),
                p.zero,
                if t.offload == setup::Offload::None { String::new() } else { format!(", offload {}", j(json!(t.offload))) },
            )
        }
        Mode::Infer(i) => format!(
            "inference (generate), {prec}, batch {} x (prompt {} + {} new tokens), {} KV cache {} B/element, attention {attn}, {par}",
            i.batch,
            i.prompt(),
            i.new_tokens,
            if i.kv_cache == setup::KvCache::Static { "static" } else { "dynamic" },
            i.kv_bytes
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn print_table(
    out: &mut impl Write,
    model: &Model,
    setup: &Setup,
    e: &Estimate,
    gpu: &Gpu,
    fit_batch: Option<u64>,
    fit_context: Option<u64>,
    timeline: bool,
) -> Result<()> {
    writeln!(
        out,
        "{} — {} parameters",
        model.name(),
        fmt::thousands(e.params)
    )?;
    writeln!(out, "{}", describe(setup, e))?;
    if setup.parallel.pp > 1 {
        writeln!(
            out,
            "pipeline rank {} needs the most; figures are per GPU",
            e.pipeline_rank
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{:<22} {:>12} {:>7}", "category", "bytes", "share")?;
    for (c, b) in e.breakdown.iter() {
        let share = 100.0 * b as f64 / e.total_bytes as f64;
        writeln!(
            out,
            "{:<22} {:>12} {:>6.1}%",
            c.name(),
            fmt::bytes(b),
            share
        )?;
    }
    writeln!(out, "{:-<43}", "")?;
    writeln!(
        out,
        "{:<22} {:>12}   at {}",
        "peak allocated",
        fmt::bytes(e.peak_bytes),
        e.peak_phase
    )?;
    writeln!(
        out,
        "{:<22} {:>12}   (max_memory_reserved)",
        "peak reserved",
        fmt::bytes(e.reserved_bytes)
    )?;
    writeln!(
        out,
        "{:<22} {:>12}   (what nvidia-smi shows)",
        "device total",
        fmt::bytes(e.total_bytes)
    )?;
    writeln!(out)?;
    let cap = gpu.memory_bytes;
    if e.fits(cap) {
        let room = cap - e.total_bytes;
        writeln!(
            out,
            "fits on {} ({}): {} free ({:.0}% headroom)",
            gpu.name,
            fmt::bytes(cap),
            fmt::bytes(room),
            100.0 * room as f64 / cap as f64
        )?;
    } else {
        writeln!(
            out,
            "does NOT fit on {} ({}): {} short",
            gpu.name,
            fmt::bytes(cap),
            fmt::bytes(e.total_bytes - cap)
        )?;
    }
    match (setup.mode, fit_batch) {
        (Mode::Train(_), Some(b)) => writeln!(out, "largest micro-batch that fits: {b}")?,
        (Mode::Train(_), None) => writeln!(out, "no micro-batch fits")?,
        (Mode::Infer(i), Some(b)) => {
            writeln!(out, "largest batch at context {}: {b}", i.context)?;
            if let Some(c) = fit_context {
                writeln!(out, "longest context at batch {}: {c}", i.batch)?;
            }
        }
        (Mode::Infer(_), None) => writeln!(out, "not even batch 1 fits")?,
    }
    if !e.fits(cap) {
        let fixes = suggestions(model, setup, cap);
        if fixes.is_empty() {
            writeln!(out, "no single change tried (recompute, 8-bit Adam, ZeRO-3 over 8 GPUs, offload, TP 2-8) makes it fit")?;
        }
        for (flags, total) in fixes {
            writeln!(
                out,
                "would fit with {flags}: {} on the device",
                fmt::bytes(total)
            )?;
        }
    }
    if !gpu.bf16
        && setup.precision != setup::Precision::Fp32
        && setup.precision != setup::Precision::Fp16Amp
    {
        writeln!(
            out,
            "note: {} has no native bf16; use --precision fp16-amp or fp32",
            gpu.name
        )?;
    }
    let o = setup.overheads;
    let reserved = match o.fragmentation {
        Some(f) => format!(
            "allocator overhead {:.0}% of peak (--fragmentation)",
            f * 100.0
        ),
        None => format!(
            "reserved from a replay of the step through the {} allocator (--allocator)",
            o.allocator.name()
        ),
    };
    writeln!(
        out,
        "assumed: CUDA context {} (--cuda-context; {}), library workspace {} (--workspace), {reserved}",
        fmt::bytes(o.cuda_context_bytes),
        gpu.context_source(),
        fmt::bytes(o.workspace_bytes),
    )?;
    writeln!(
        out,
        "models: PyTorch {}, transformers {}, CUDA {}",
        e.assumes.torch, e.assumes.transformers, e.assumes.cuda
    )?;
    for m in &e.mechanisms {
        writeln!(out, "mechanism: {m}")?;
    }
    if timeline {
        writeln!(out)?;
        writeln!(
            out,
            "{:<40} {:>12} {:>12}",
            "timeline (phase entered)", "live", "prev high"
        )?;
        for p in &e.timeline {
            writeln!(
                out,
                "{:<40} {:>12} {:>12}",
                p.phase.to_string(),
                fmt::bytes(p.live_bytes),
                fmt::bytes(p.high_bytes)
            )?;
        }
    }
    let _ = Category::ALL;
    Ok(())
}

/// Changes of one or two knobs that make the step fit, with the device total each gives.
fn suggestions(model: &Model, setup: &Setup, cap: u64) -> Vec<(String, u64)> {
    let mut tries: Vec<(&str, Setup)> = Vec::new();
    let with_train = |f: &dyn Fn(&mut Train)| {
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            f(t);
        }
        s
    };
    match setup.mode {
        Mode::Train(t) => {
            if t.recompute != setup::Recompute::Full {
                tries.push((
                    "--recompute full",
                    with_train(&|t| t.recompute = setup::Recompute::Full),
                ));
            }
            if t.optimizer == setup::Optimizer::Adamw {
                tries.push((
                    "--optimizer adam8bit",
                    with_train(&|t| t.optimizer = setup::Optimizer::Adam8bit),
                ));
                tries.push((
                    "--optimizer adam8bit --recompute full",
                    with_train(&|t| {
                        t.optimizer = setup::Optimizer::Adam8bit;
                        t.recompute = setup::Recompute::Full;
                    }),
                ));
            }
            if setup.parallel.zero < 3 {
                let mut s = with_train(&|t| t.amp_style = None);
                s.parallel.zero = 3;
                s.parallel.dp = s.parallel.dp.max(8);
                tries.push(("--zero 3 --dp 8", s));
                let mut r = s;
                if let Mode::Train(t) = &mut r.mode {
                    t.recompute = setup::Recompute::Full;
                }
                tries.push(("--zero 3 --dp 8 --recompute full", r));
            }
            if setup.parallel.zero >= 1 && t.offload == setup::Offload::None {
                tries.push((
                    "--offload optimizer",
                    with_train(&|t| t.offload = setup::Offload::Optimizer),
                ));
            }
        }
        Mode::Infer(i) => {
            if i.kv_bytes > 1 {
                let mut s = *setup;
                if let Mode::Infer(i) = &mut s.mode {
                    i.kv_bytes = 1;
                }
                tries.push(("--kv-dtype fp8", s));
            }
            for (tp, flags) in [(2, "--tp 2"), (4, "--tp 4"), (8, "--tp 8")] {
                if tp > setup.parallel.tp {
                    let mut s = *setup;
                    s.parallel.tp = tp;
                    tries.push((flags, s));
                }
            }
        }
    }
    tries
        .into_iter()
        .filter_map(|(flags, s)| {
            vram_model::estimate(model, &s)
                .ok()
                .filter(|e| e.fits(cap))
                .map(|e| (flags.to_string(), e.total_bytes))
        })
        .take(3)
        .collect()
}

fn print_weights(w: &vram_model::arch::Weights, json_out: bool) -> Result<()> {
    let mut out = crate::output::stdout();
    if json_out {
        let dtypes: serde_json::Map<String, serde_json::Value> = w
            .dtypes
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(
                &json!({"model": w.name, "params": w.params, "weights_bytes": w.bytes, "dtypes": dtypes})
            )?
        )?;
    } else {
        writeln!(
            out,
            "{} — {} parameters, {} of weights",
            w.name,
            fmt::thousands(w.params),
            fmt::bytes(w.bytes)
        )?;
        for (d, n) in &w.dtypes {
            writeln!(out, "  {d:<6} {}", fmt::thousands(*n))?;
        }
        writeln!(
            out,
            "(parameters only: give the folder with config.json to estimate a step)"
        )?;
    }
    Ok(())
}

pub fn models(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    let mut rows = Vec::new();
    for id in catalog::ids() {
        let m = catalog::lookup(id)?;
        rows.push(json!({"id": id, "params": m.param_count(), "kind": match &m { Model::Transformer(t) => t.model_type.clone(), _ => "resnet".into() }}));
    }
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        for r in rows {
            writeln!(
                out,
                "{:<20} {:<10} {:>20}",
                r["id"].as_str().unwrap_or(""),
                r["kind"].as_str().unwrap_or(""),
                fmt::thousands(r["params"].as_u64().unwrap_or(0))
            )?;
        }
    }
    Ok(())
}

pub fn gpus(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(gpu::GPUS)?)?;
    } else {
        writeln!(
            out,
            "{:<11} {:<30} {:>10} {:>10} {:>9} {:>9}",
            "id", "name", "memory", "bf16 TF/s", "fp32 TF/s", "HBM GB/s"
        )?;
        for g in gpu::GPUS {
            writeln!(
                out,
                "{:<11} {:<30} {:>10} {:>10} {:>9} {:>9}",
                g.id,
                g.name,
                fmt::bytes(g.memory_bytes),
                g.half_tflops,
                g.fp32_tflops,
                g.hbm_gb_s
            )?;
        }
    }
    Ok(())
}
