//! `--finetune`, `--lora-*`, `--weights`, `--double-quant`: fine-tuning and quantized weights
//! (issue 22) for `vram estimate` and `vram plan`.

use std::io::Write;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use vram_model::arch::Model;
use vram_model::finetune::step::{self, FinetuneEstimate, FinetuneSpec, Method};
use vram_model::finetune::{self as ft, LoraSpec, Targets, WeightFormat};
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Setup, Train};
use vram_model::Estimate;

use crate::{bad_input, fmt};

/// Fine-tuning flags.
#[derive(Debug, Clone, Args)]
pub struct FinetuneArgs {
    /// Fine-tuning method: full (every parameter), lora (PEFT adapters on a frozen half base) or
    /// qlora (adapters on a bitsandbytes int8/nf4/fp4 base).
    #[arg(long, default_value = "full", value_parser = ["full", "lora", "qlora"])]
    pub finetune: String,
    /// LoRA rank `r`.
    #[arg(long, default_value_t = 16)]
    pub lora_rank: u64,
    /// LoRA `lora_alpha` (emitted into the config; no memory effect) [default: 2 × rank].
    #[arg(long)]
    pub lora_alpha: Option<u64>,
    /// LoRA targets with PEFT's names: all-linear, or module suffixes such as q_proj,v_proj.
    #[arg(long, default_value = "all-linear")]
    pub lora_targets: String,
    /// LoRA dropout probability.
    #[arg(long, default_value_t = 0.0)]
    pub lora_dropout: f64,
    /// Storage of the base's weights: bf16, fp16, fp32, int8, nf4, fp4, fp8, gptq[-gN], awq[-gN]
    /// [default: nf4 for qlora, bf16 otherwise].
    #[arg(long)]
    pub weights: Option<String>,
    /// bitsandbytes 4-bit double quantization (bnb_4bit_use_double_quant).
    #[arg(long)]
    pub double_quant: bool,
    /// QLoRA: peft.prepare_model_for_kbit_training was called (casts the unquantized half
    /// parameters to fp32); TRL's SFTTrainer does not call it.
    #[arg(long)]
    pub prepare_kbit: bool,
    /// LoRA/QLoRA: turn off gradient checkpointing (TRL's SFTConfig turns it on).
    #[arg(long)]
    pub no_gradient_checkpointing: bool,
}

impl FinetuneArgs {
    /// The method.
    pub fn method(&self) -> Method {
        Method::parse(&self.finetune).unwrap_or(Method::Full)
    }

    /// The `--weights` format, with its default.
    pub fn weights(&self) -> Result<WeightFormat> {
        Ok(match &self.weights {
            Some(w) => WeightFormat::parse(w)?,
            None if self.method() == Method::Qlora => WeightFormat::Nf4,
            None => WeightFormat::Bf16,
        })
    }

    /// The whole spec, validated.
    pub fn spec(&self) -> Result<FinetuneSpec> {
        let targets = Targets::parse(&self.lora_targets)?;
        let s = FinetuneSpec {
            method: self.method(),
            weights: self.weights()?,
            double_quant: self.double_quant,
            lora: LoraSpec {
                rank: self.lora_rank,
                alpha: self.lora_alpha.unwrap_or(2 * self.lora_rank),
                dropout: self.lora_dropout,
                targets,
            },
            skip_modules: Vec::new(),
            prepare_kbit: self.prepare_kbit,
            gradient_checkpointing: !self.no_gradient_checkpointing,
        };
        if s.method == Method::Full {
            if self.weights.is_some() && s.weights.is_quantized() {
                s.validate()?;
            }
            if self.weights.is_some() {
                return Err(bad_input!(
                    "--weights {} with --finetune full: full training holds the weights as --precision says; --weights is for --finetune lora/qlora and --inference",
                    s.weights.name()
                ));
            }
            if self.double_quant || self.prepare_kbit || self.no_gradient_checkpointing {
                return Err(bad_input!(
                    "--double-quant, --prepare-kbit and --no-gradient-checkpointing are for --finetune lora/qlora"
                ));
            }
            return Ok(s);
        }
        s.validate()?;
        if s.lora.rank == 0 {
            return Err(bad_input!("--lora-rank must be at least 1"));
        }
        Ok(s)
    }

    /// Whether any fine-tuning flag was given beyond the defaults of full training.
    pub fn is_lora(&self) -> bool {
        self.method() != Method::Full
    }
}

/// The largest micro-batch whose LoRA/QLoRA step fits in `cap` (None: not even 1).
pub fn max_micro_batch(
    model: &Model,
    setup: &Setup,
    spec: &FinetuneSpec,
    cap: u64,
) -> Result<Option<u64>> {
    let with = |b: u64| -> Result<bool> {
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            t.micro_batch = b;
        }
        Ok(step::estimate(model, &s, spec)?.fits(cap))
    };
    if !with(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= 4096 && with(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > 4096 {
        return Ok(Some(lo));
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if with(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// `vram estimate --finetune lora|qlora`.
pub fn run_estimate(
    model: &Model,
    setup: &Setup,
    spec: &FinetuneSpec,
    gpu: &Gpu,
    json_out: bool,
) -> Result<()> {
    let e = step::estimate(model, setup, spec)?;
    let cap = gpu.memory_bytes;
    let fit = max_micro_batch(model, setup, spec, cap)?;
    let mut out = crate::output::stdout();
    if json_out {
        let breakdown: serde_json::Map<String, serde_json::Value> = e
            .breakdown
            .iter()
            .map(|(c, b)| (c.name().to_string(), json!(b)))
            .collect();
        let v = json!({
            "model": e.model,
            "params": e.params,
            "finetune": spec.method.name(),
            "weights": spec.weights.name(),
            "double_quant": spec.double_quant,
            "lora": {
                "rank": spec.lora.rank,
                "alpha": spec.lora.alpha,
                "dropout": spec.lora.dropout,
                "targets": spec.lora.targets.display(),
                "target_parameters": e.plan.target_parameters,
                "adapted_modules": e.plan.adapted.iter().map(|a| json!({"path": a.site.path, "rank": a.rank, "layers": a.count, "params": a.params()})).collect::<Vec<_>>(),
            },
            "trainable_params": e.trainable_params,
            "weights_bytes": e.weights.total,
            "weights": {
                "total_bytes": e.weights.total,
                "quantized_bytes": e.weights.quantized,
                "unquantized_bytes": e.weights.unquantized,
                "format": spec.weights.name(),
            },
            "adapter_dtype_bytes": e.adapter_bytes,
            "frozen_layer_discount_bytes": e.frozen_layer_discount,
            "adapter_saved_bytes": e.adapter_saved.iter().map(|(p, b)| json!({"path": p, "bytes": b})).collect::<Vec<_>>(),
            "peak_tensor_bytes": e.peak_tensor_bytes,
            "peak_bytes": e.peak_bytes,
            "reserved_bytes": e.reserved_bytes,
            "total_bytes": e.total_bytes,
            "breakdown": breakdown,
            "peak_phase": e.peak_phase,
            "gpu": {"id": gpu.id, "name": gpu.name, "memory_bytes": gpu.memory_bytes},
            "gpu_memory_bytes": cap,
            "fits": e.fits(cap),
            "headroom_bytes": cap as i128 - e.total_bytes as i128,
            "max_micro_batch": fit,
            "gradient_checkpointing": spec.gradient_checkpointing,
            "prepare_kbit": spec.prepare_kbit,
            "notes": e.notes,
            "assumes": e.assumes,
            "setup": setup,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    print(&mut out, setup, spec, &e, gpu, fit)
}

fn print(
    out: &mut impl Write,
    setup: &Setup,
    spec: &FinetuneSpec,
    e: &FinetuneEstimate,
    gpu: &Gpu,
    fit: Option<u64>,
) -> Result<()> {
    let Mode::Train(t) = setup.mode else {
        return Ok(());
    };
    writeln!(
        out,
        "{} — {} parameters, {} trainable ({:.3}%)",
        e.model,
        fmt::thousands(e.params),
        fmt::thousands(e.trainable_params),
        100.0 * e.trainable_params as f64 / e.params.max(1) as f64
    )?;
    writeln!(
        out,
        "{}: base {}{} ({} stored), adapters r={} on {} in {}, micro-batch {} x seq {}, grad-accum {}, gradient checkpointing {}",
        spec.method.name(),
        spec.weights.name(),
        if spec.double_quant { " double-quant" } else { "" },
        fmt::bytes(e.weights.total),
        spec.lora.rank,
        spec.lora.targets.display(),
        if e.adapter_bytes == 4 { "fp32" } else { "bf16" },
        t.micro_batch,
        t.seq,
        t.grad_accum,
        if spec.gradient_checkpointing { "on" } else { "off" },
    )?;
    writeln!(out)?;
    writeln!(out, "{:<22} {:>12} {:>7}", "category", "bytes", "share")?;
    for (c, b) in e.breakdown.iter() {
        writeln!(
            out,
            "{:<22} {:>12} {:>6.1}%",
            c.name(),
            fmt::bytes(b),
            100.0 * b as f64 / e.total_bytes as f64
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
    crate::estimate::fit_verdict(out, gpu, e.total_bytes)?;
    match fit {
        Some(b) => writeln!(out, "largest micro-batch that fits: {b}")?,
        None => writeln!(out, "no micro-batch fits")?,
    }
    for n in &e.notes {
        writeln!(out, "note: {n}")?;
    }
    writeln!(
        out,
        "models: PEFT 0.21.2, bitsandbytes 0.50.2, transformers 5.24, TRL 1.16.0 SFTTrainer defaults (--json assumes names each function)"
    )?;
    Ok(())
}

/// LoRA and QLoRA figures for a full-training setup that does not fit: (flags, device total).
pub fn suggestions(model: &Model, setup: &Setup, cap: u64) -> Vec<(String, u64)> {
    let Mode::Train(t) = setup.mode else {
        return Vec::new();
    };
    let mut s = *setup;
    s.parallel = vram_model::setup::Parallel::default();
    s.mode = Mode::Train(Train {
        recompute: vram_model::setup::Recompute::None,
        recompute_layers: None,
        amp_style: None,
        offload: vram_model::setup::Offload::None,
        ..t
    });
    let mut out = Vec::new();
    for (flags, method, weights) in [
        ("--finetune lora", Method::Lora, WeightFormat::Bf16),
        ("--finetune qlora", Method::Qlora, WeightFormat::Nf4),
    ] {
        let spec = FinetuneSpec {
            method,
            weights,
            double_quant: false,
            lora: LoraSpec {
                rank: 16,
                alpha: 32,
                dropout: 0.0,
                targets: Targets::AllLinear,
            },
            skip_modules: Vec::new(),
            prepare_kbit: false,
            gradient_checkpointing: true,
        };
        if let Ok(e) = step::estimate(model, &s, &spec) {
            if e.fits(cap) {
                out.push((
                    format!(
                        "{flags} (r=16 all-linear, {} trainable)",
                        fmt::thousands(e.trainable_params)
                    ),
                    e.total_bytes,
                ));
            }
        }
    }
    out
}

/// Inference with quantized weights: the estimate's weights replaced by their stored bytes.
/// Returns the change in bytes (added to the parameters, peak, reserved and total).
pub fn apply_inference_weights(
    model: &Model,
    setup: &Setup,
    e: &mut Estimate,
    format: WeightFormat,
    double_quant: bool,
) -> Result<(i128, u64)> {
    let Model::Transformer(t) = model else {
        return Err(bad_input!("--weights is modelled for transformers"));
    };
    if double_quant && !format.is_bnb_4bit() {
        return Err(bad_input!(
            "--double-quant applies to bitsandbytes 4-bit (--weights nf4 or fp4)"
        ));
    }
    let w = ft::weights_bytes(t, format, double_quant, &[]);
    let held = e.breakdown.get(vram_model::Category::Parameters);
    let mut delta = w.total as i128 - held as i128;
    // bitsandbytes' gemm_4bit takes its dequantizing fallback above 1536 rows
    // (backends/cuda/ops.py): a whole weight in the compute dtype during the prefill.
    if let Mode::Infer(i) = setup.mode {
        if format.is_bnb_4bit() && i.batch * i.prompt() > 1536 {
            let deq = w.largest_quantized * 2;
            e.breakdown.0[vram_model::Category::Temporaries as usize] += deq;
            delta += deq as i128;
        }
    }
    let adj = |x: u64| (x as i128 + delta).max(0) as u64;
    e.breakdown.0[vram_model::Category::Parameters as usize] = w.total;
    // The allocator's overhead was replayed on half weights; it is kept as it is.
    e.peak_bytes = adj(e.peak_bytes);
    e.peak_tensor_bytes = adj(e.peak_tensor_bytes);
    e.reserved_bytes = adj(e.reserved_bytes);
    e.total_bytes = adj(e.total_bytes);
    Ok((delta, w.total))
}

/// One LoRA/QLoRA configuration `vram plan --finetune` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FtPlan {
    /// Data-parallel replicas (DDP), one per GPU.
    pub dp: u64,
    /// Sequences per micro-batch per GPU.
    pub micro_batch: u64,
    /// Micro-batches per optimizer step.
    pub grad_accum: u64,
    /// Gradient checkpointing.
    pub gradient_checkpointing: bool,
    /// Device total per GPU.
    pub bytes_per_gpu: u64,
    /// Matmul FLOPs per optimizer step per GPU: 2·(active weights)·tokens per forward; the
    /// backward computes input gradients through the frozen base (another 2) and the adapters'
    /// weight gradients; a checkpointed forward runs twice.
    pub flops_per_gpu: f64,
    /// The adapters.
    pub trainable_params: u64,
}

impl FtPlan {
    /// A short label.
    pub fn label(&self) -> String {
        format!(
            "dp{} mb{}x{}{}",
            self.dp,
            self.micro_batch,
            self.grad_accum,
            if self.gradient_checkpointing {
                " gc"
            } else {
                ""
            }
        )
    }
}

/// What `vram plan --emit peft|peft-yaml` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitKind {
    /// A Python snippet building BitsAndBytesConfig, LoraConfig and SFTConfig.
    Python,
    /// The same as YAML (three mappings of keyword arguments).
    Yaml,
}

/// `vram plan --finetune lora|qlora`: every DDP layout (one replica per GPU) whose step fits,
/// with the micro-batch and accumulation that meet the global batch, checkpointing on or off;
/// best first by FLOPs per step (no recomputation beats recomputation), then fewer
/// accumulation steps.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    model: &Model,
    gpu: &'static Gpu,
    gpus: u64,
    global_batch: u64,
    seq: u64,
    optimizer: vram_model::setup::Optimizer,
    pin_mb: Option<u64>,
    a: &FinetuneArgs,
    emit: Option<EmitKind>,
    json_out: bool,
    top: usize,
) -> Result<()> {
    let spec = a.spec()?;
    if spec.method == Method::Full {
        return Err(bad_input!(
            "--emit peft/peft-yaml writes LoRA/QLoRA configs: add --finetune lora or qlora"
        ));
    }
    if global_batch % gpus != 0 {
        return Err(bad_input!(
            "--global-batch {global_batch} is not a multiple of --gpus {gpus} (one DDP replica per GPU)"
        ));
    }
    let per_gpu = global_batch / gpus;
    let Model::Transformer(t) = model else {
        return Err(bad_input!("vram plan needs a transformer"));
    };
    let mut plans = Vec::new();
    let cap = gpu.memory_bytes;
    let gc_options: &[bool] = if a.no_gradient_checkpointing {
        &[false]
    } else {
        &[false, true]
    };
    let trainable = ft::lora(t, &spec.lora)?.trainable_params;
    for &gc in gc_options {
        for mb in (1..=per_gpu).filter(|m| per_gpu % m == 0) {
            if pin_mb.is_some_and(|p| p != mb) {
                continue;
            }
            let s = Setup {
                mode: Mode::Train(Train {
                    micro_batch: mb,
                    seq,
                    grad_accum: per_gpu / mb,
                    optimizer,
                    ..Train::default()
                }),
                parallel: vram_model::setup::Parallel {
                    dp: gpus,
                    ..Default::default()
                },
                overheads: vram_model::setup::Overheads::for_gpu(gpu),
                ..Setup::default()
            };
            let sp = FinetuneSpec {
                gradient_checkpointing: gc,
                ..spec.clone()
            };
            let e = step::estimate(model, &s, &sp)?;
            if !e.fits(cap) {
                continue;
            }
            let tokens = (per_gpu * seq) as f64;
            let active =
                t.blocks.flops_per_token(seq / 2) as f64 / 2.0 + (t.vocab() * t.hidden()) as f64;
            let fwd = 2.0 * active * tokens;
            let flops = fwd * if gc { 3.0 } else { 2.0 } + 6.0 * trainable as f64 * tokens;
            plans.push(FtPlan {
                dp: gpus,
                micro_batch: mb,
                grad_accum: per_gpu / mb,
                gradient_checkpointing: gc,
                bytes_per_gpu: e.total_bytes,
                flops_per_gpu: flops,
                trainable_params: trainable,
            });
        }
    }
    plans.sort_by(|x, y| {
        x.flops_per_gpu
            .total_cmp(&y.flops_per_gpu)
            .then(x.grad_accum.cmp(&y.grad_accum))
    });
    let mut out = crate::output::stdout();
    if let Some(kind) = emit {
        let Some(best) = plans.first() else {
            return Err(bad_input!(
                "no {} configuration fits on {} x {}: try --finetune qlora, a smaller --seq or more GPUs",
                spec.method.name(),
                gpus,
                gpu.id
            ));
        };
        let text = emit_config(t, &spec, best, seq, kind);
        out.write_all(text.as_bytes())?;
        let _ = writeln!(
            crate::output::stderr(),
            "vram: emitted {} {} at {} per GPU",
            spec.method.name(),
            best.label(),
            fmt::bytes(best.bytes_per_gpu)
        );
        return Ok(());
    }
    plans.truncate(top);
    if json_out {
        let v = json!({
            "model": t.name,
            "params": t.param_count(),
            "finetune": spec.method.name(),
            "weights": spec.weights.name(),
            "trainable_params": trainable,
            "gpu": gpu.id,
            "gpus": gpus,
            "global_batch": global_batch,
            "seq": seq,
            "plans": plans,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} ({} parameters, {} trainable) {} on {} x {} (DDP), global batch {} x {} tokens",
        t.name,
        fmt::thousands(t.param_count()),
        fmt::thousands(trainable),
        spec.method.name(),
        gpus,
        gpu.id,
        global_batch,
        seq
    )?;
    writeln!(
        out,
        "ranked by matmul FLOPs per step (checkpointing recomputes the forward), then fewer accumulation steps"
    )?;
    if plans.is_empty() {
        writeln!(out, "\nnothing fits in {} per GPU", fmt::bytes(cap))?;
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<20} {:>12} {:>10}",
        "configuration", "TFLOP/step", "mem/GPU"
    )?;
    for p in &plans {
        writeln!(
            out,
            "{:<20} {:>12.1} {:>10}",
            p.label(),
            p.flops_per_gpu / 1e12,
            fmt::bytes(p.bytes_per_gpu)
        )?;
    }
    Ok(())
}

fn py_str(s: &str) -> String {
    format!("{s:?}")
}

/// The PEFT/TRL/bitsandbytes configs that run `p` (PEFT 0.21.2, TRL 1.16.0, transformers 5.24).
pub fn emit_config(
    t: &vram_model::arch::Transformer,
    spec: &FinetuneSpec,
    p: &FtPlan,
    seq: u64,
    kind: EmitKind,
) -> String {
    let targets = match &spec.lora.targets {
        Targets::AllLinear => py_str("all-linear"),
        Targets::List(v) => format!(
            "[{}]",
            v.iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", ")
        ),
    };
    let bnb: Option<Vec<(&str, String)>> = match spec.weights {
        WeightFormat::Int8 => Some(vec![("load_in_8bit", "True".into())]),
        WeightFormat::Nf4 | WeightFormat::Fp4 => Some(vec![
            ("load_in_4bit", "True".into()),
            ("bnb_4bit_quant_type", py_str(&spec.weights.name())),
            (
                "bnb_4bit_use_double_quant",
                if spec.double_quant { "True" } else { "False" }.into(),
            ),
            ("bnb_4bit_compute_dtype", py_str("bfloat16")),
        ]),
        _ => None,
    };
    let lora = vec![
        ("r", spec.lora.rank.to_string()),
        ("lora_alpha", spec.lora.alpha.to_string()),
        ("lora_dropout", format!("{}", spec.lora.dropout)),
        ("target_modules", targets),
        ("task_type", py_str("CAUSAL_LM")),
    ];
    let sft = vec![
        ("per_device_train_batch_size", p.micro_batch.to_string()),
        ("gradient_accumulation_steps", p.grad_accum.to_string()),
        // transformers 5.24 renamed gradient_checkpointing (a deprecated alias now).
        (
            "activation_checkpointing",
            if p.gradient_checkpointing {
                "True"
            } else {
                "False"
            }
            .into(),
        ),
        ("max_length", seq.to_string()),
        ("bf16", "True".into()),
        ("optim", py_str("adamw_torch_fused")),
    ];
    let header = format!(
        "vram plan --finetune {}: {} on {} GPU(s), {} per GPU; {} trainable parameters",
        spec.method.name(),
        p.label(),
        p.dp,
        fmt::bytes(p.bytes_per_gpu),
        fmt::thousands(p.trainable_params)
    );
    let yaml_val = |v: &str| -> String {
        match v {
            "True" => "true".into(),
            "False" => "false".into(),
            _ if v.starts_with('[') => v.replace('"', "'"),
            _ => v.to_string(),
        }
    };
    match kind {
        EmitKind::Python => {
            let mut s = format!("# {header}\n");
            s += "# PEFT 0.21.2, TRL 1.16.0, transformers 5.24.0, bitsandbytes 0.50.2\n";
            s += "import torch\n";
            if bnb.is_some() {
                s += "from transformers import BitsAndBytesConfig\n";
            }
            s += "from peft import LoraConfig\nfrom trl import SFTConfig\n\n";
            s += &format!("model_id = {}\n", py_str(&t.name));
            match &bnb {
                Some(kv) => {
                    s += "bnb_config = BitsAndBytesConfig(\n";
                    for (k, v) in kv {
                        let v = if *k == "bnb_4bit_compute_dtype" {
                            "torch.bfloat16".to_string()
                        } else {
                            v.clone()
                        };
                        s += &format!("    {k}={v},\n");
                    }
                    s += ")\n";
                }
                None => s += "bnb_config = None\n",
            }
            s += "peft_config = LoraConfig(\n";
            for (k, v) in &lora {
                s += &format!("    {k}={v},\n");
            }
            s += ")\nsft_config = SFTConfig(\n    output_dir=\"out\",\n";
            for (k, v) in &sft {
                s += &format!("    {k}={v},\n");
            }
            s += ")\n";
            s += "# model = AutoModelForCausalLM.from_pretrained(model_id, quantization_config=bnb_config, dtype=torch.bfloat16)\n";
            s += "# SFTTrainer(model=model, args=sft_config, peft_config=peft_config, train_dataset=...).train()\n";
            s
        }
        EmitKind::Yaml => {
            let mut s = format!("# {header}\n");
            s += "# keyword arguments of BitsAndBytesConfig, LoraConfig and SFTConfig\n";
            s += &format!("model_id: {}\n", py_str(&t.name));
            match &bnb {
                Some(kv) => {
                    s += "bnb_config:\n";
                    for (k, v) in kv {
                        s += &format!("  {k}: {}\n", yaml_val(v));
                    }
                }
                None => s += "bnb_config: null\n",
            }
            s += "peft_config:\n";
            for (k, v) in &lora {
                s += &format!("  {k}: {}\n", yaml_val(v));
            }
            s += "sft_config:\n  output_dir: out\n";
            for (k, v) in &sft {
                s += &format!("  {k}: {}\n", yaml_val(v));
            }
            s
        }
    }
}
