//! LoRA/QLoRA plans (`vram plan --finetune lora|qlora`): every DDP layout, one replica per GPU,
//! whose step fits, and the PEFT/TRL/bitsandbytes configs that run the chosen one.

use serde::{Deserialize, Serialize};
use vram_model::arch::Transformer;
use vram_model::finetune::step::{self, FinetuneSpec, Method};
use vram_model::finetune::{self as ft, Targets, WeightFormat};
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Optimizer, Overheads, Parallel, Setup, Train};

use crate::error::{Error, Result};

/// One LoRA/QLoRA configuration the search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// A short label (`dp1 mb4x4 gc`).
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

/// What to search: the job and the adapters.
#[derive(Debug, Clone, PartialEq)]
pub struct FtRequest {
    /// The GPU of every replica.
    pub gpu: &'static Gpu,
    /// GPUs, one DDP replica each.
    pub gpus: u64,
    /// Sequences per optimizer step over the job.
    pub global_batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// The optimizer of the adapters.
    pub optimizer: Optimizer,
    /// A pinned micro-batch.
    pub micro_batch: Option<u64>,
    /// The adapters and the base (gradient checkpointing off: only plans without it).
    pub spec: FinetuneSpec,
}

/// Every DDP layout (one replica per GPU) whose LoRA/QLoRA step fits, with the micro-batch and
/// accumulation that meet the global batch, checkpointing on or off (only off when the spec
/// turns it off); best first by FLOPs per step (no recomputation beats recomputation), then
/// fewer accumulation steps.
pub fn search(t: &Transformer, req: &FtRequest) -> Result<Vec<FtPlan>> {
    let spec = &req.spec;
    if spec.method == Method::Full {
        return Err(Error::Request(
            "--emit peft/peft-yaml writes LoRA/QLoRA configs: add --finetune lora or qlora".into(),
        ));
    }
    if req.gpus == 0 || req.global_batch == 0 || req.seq == 0 {
        return Err(Error::Request(
            "--gpus, --global-batch and --seq must be at least 1".into(),
        ));
    }
    crate::search::check_sizes(req.global_batch, req.seq)?;
    if req.global_batch % req.gpus != 0 {
        return Err(Error::Request(format!(
            "--global-batch {} is not a multiple of --gpus {} (one DDP replica per GPU)",
            req.global_batch, req.gpus
        )));
    }
    let per_gpu = req.global_batch / req.gpus;
    let model = vram_model::arch::Model::Transformer(t.clone());
    let cap = req.gpu.memory_bytes;
    let gc_options: &[bool] = if spec.gradient_checkpointing {
        &[false, true]
    } else {
        &[false]
    };
    let trainable = ft::lora(t, &spec.lora)?.trainable_params;
    let mut plans = Vec::new();
    for &gc in gc_options {
        for mb in (1..=per_gpu).filter(|m| per_gpu % m == 0) {
            if req.micro_batch.is_some_and(|p| p != mb) {
                continue;
            }
            let s = Setup {
                mode: Mode::Train(Train {
                    micro_batch: mb,
                    seq: req.seq,
                    grad_accum: per_gpu / mb,
                    optimizer: req.optimizer,
                    ..Train::default()
                }),
                parallel: Parallel {
                    dp: req.gpus,
                    ..Default::default()
                },
                overheads: Overheads::for_gpu(req.gpu),
                ..Setup::default()
            };
            let sp = FinetuneSpec {
                gradient_checkpointing: gc,
                ..spec.clone()
            };
            let e = step::estimate(&model, &s, &sp)?;
            if !e.fits(cap) {
                continue;
            }
            let tokens = (per_gpu * req.seq) as f64;
            let active = t.blocks.flops_per_token(req.seq / 2) as f64 / 2.0
                + (t.vocab() * t.hidden()) as f64;
            let fwd = 2.0 * active * tokens;
            let flops = fwd * if gc { 3.0 } else { 2.0 } + 6.0 * trainable as f64 * tokens;
            plans.push(FtPlan {
                dp: req.gpus,
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
    Ok(plans)
}

/// What `vram plan --emit peft|peft-yaml` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitKind {
    /// A Python snippet building BitsAndBytesConfig, LoraConfig and SFTConfig.
    Python,
    /// The same as YAML (three mappings of keyword arguments).
    Yaml,
}

fn py_str(s: &str) -> String {
    format!("{s:?}")
}

/// The PEFT/TRL/bitsandbytes configs that run `p` (PEFT 0.21.2, TRL 1.16.0, transformers 5.24).
pub fn emit_config(
    t: &Transformer,
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
        vram_model::fmt::bytes(p.bytes_per_gpu),
        vram_model::fmt::thousands(p.trainable_params)
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
            // The dtype the plan's frozen base was priced in (a float32 config's LoRA base is
            // fp32: `vram_report::request::FinetuneRequest::spec_for`).
            let dtype = match spec.weights {
                WeightFormat::Fp32 => "torch.float32",
                WeightFormat::Fp16 => "torch.float16",
                _ => "torch.bfloat16",
            };
            s += &format!("# model = AutoModelForCausalLM.from_pretrained(model_id, quantization_config=bnb_config, dtype={dtype})\n");
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
