//! Launch configurations for existing engines, written from a [`Plan`].
//!
//! Key names are the engines' documented ones: DeepSpeed's JSON config
//! (`train_batch_size`, `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`,
//! `bf16.enabled`, `zero_optimization.stage`, `offload_optimizer.device`, ...), Megatron-LM's
//! `megatron/training/arguments.py` flags (`--tensor-model-parallel-size`,
//! `--pipeline-model-parallel-size`, `--num-layers-per-virtual-pipeline-stage`,
//! `--sequence-parallel`, `--recompute-granularity`, `--use-distributed-optimizer`, ...),
//! Hugging Face accelerate's config YAML (`distributed_type`, `num_processes`,
//! `deepspeed_config.zero_stage`, `fsdp_config`, `megatron_lm_config.megatron_lm_tp_degree`,
//! ...), and `torchrun` flags with PyTorch FSDP2's `fully_shard`.
//!
//! [`check`] refuses a plan that an engine cannot run with the settings written for it (each
//! rule names the engine's source and version); [`emit`] writes only plans [`check`] accepts.
//! The acceptance tests in `tests/engines` (run by `.ci/engine-tests`) feed what these functions
//! write to the engines themselves: DeepSpeed 0.19.8, accelerate 1.15.0, megatron-core 0.16.1,
//! PyTorch 2.15.0.

use std::fmt::Write;

use vram_model::arch::{Act, Layout, Transformer};
use vram_model::blocks::{NormKind, Residual};
use vram_model::setup::{Offload, Precision, Recompute, Schedule};

use crate::eager::Stack;
use crate::search::Plan;

/// The engines a plan can be written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// A DeepSpeed JSON config.
    Deepspeed,
    /// Megatron-LM `pretrain_gpt.py` arguments.
    Megatron,
    /// A Hugging Face accelerate config YAML.
    Accelerate,
    /// A `torchrun` command with PyTorch FSDP2.
    Torchrun,
}

impl Engine {
    /// The name used on the command line (`--emit NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Deepspeed => "deepspeed",
            Engine::Megatron => "megatron",
            Engine::Accelerate => "accelerate",
            Engine::Torchrun => "torchrun",
        }
    }
}

/// Why an engine cannot run a plan as it would be emitted: the engine's own rule, and where
/// the engine states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The engine that refuses.
    pub engine: Engine,
    /// The rule, one line, naming the engine's source.
    pub rule: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cannot run this plan: {}",
            self.engine.name(),
            self.rule
        )
    }
}

fn refuse(engine: Engine, rule: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal {
        engine,
        rule: rule.into(),
    })
}

/// DeepSpeed 0.19.8's rules on ZeRO, offload and pipelines (shared by `--emit deepspeed` and
/// accelerate's `DEEPSPEED` type).
fn deepspeed_rules(engine: Engine, p: &Plan) -> Result<(), Refusal> {
    if p.pp > 1 {
        // deepspeed/__init__.py initialize: a PipelineEngine only for a PipelineModule; a
        // plain nn.Module gets a DeepSpeedEngine, which never uses the `pipeline` section.
        return refuse(
            engine,
            "DeepSpeed 0.19.8 pipelines only a PipelineModule (deepspeed.initialize), which a \
             Hugging Face model is not; use --pp 1, or Megatron-LM (--emit megatron)",
        );
    }
    if p.offload == Offload::Params && p.zero_stage < 3 {
        // deepspeed/runtime/engine.py, _configure_zero_optimizer: only the stage-3 optimizer
        // takes offload_param_config.
        return refuse(
            engine,
            format!(
                "DeepSpeed 0.19.8 offloads parameters only under ZeRO-3 (offload_param reaches \
                 only the stage-3 optimizer, runtime/engine.py); ZeRO-{} would keep them on the GPU",
                p.zero_stage
            ),
        );
    }
    if p.offload != Offload::None && p.zero_stage == 0 {
        return refuse(
            engine,
            "DeepSpeed 0.19.8 offloads optimizer states only through a ZeRO optimizer (stages \
             1-3, runtime/engine.py _configure_zero_optimizer); ZeRO-0 would ignore offload_optimizer",
        );
    }
    Ok(())
}

/// What Megatron-LM's arguments describe of a model: one layer's shape, as the description's
/// representative layer ([`vram_model::blocks::Blocks::representative`]) gives it.
struct Shape {
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    intermediate: u64,
    gated: bool,
    act: Act,
    experts: u64,
    top_k: u64,
    qkv_bias: bool,
    out_bias: bool,
    mlp_bias: bool,
    rope: bool,
    rel_bias: bool,
    learned_positions: u64,
    parallel: bool,
    norms_per_layer: u64,
    tied: bool,
}

fn shape(t: &Transformer) -> Shape {
    let b = &t.blocks;
    let r = b.representative();
    let ty = b.typical();
    let a =
        r.mixer.as_attention().copied().unwrap_or_else(|| {
            vram_model::blocks::Attention::new(ty.heads, ty.kv_heads, ty.head_dim)
        });
    // The MLP's biases: the first dense MLP's (none for a model of experts only).
    let mlp_bias = b
        .iter()
        .find_map(|k| k.ffn.dense().map(|d| d.bias))
        .unwrap_or(false);
    let act = b
        .iter()
        .find_map(|k| {
            k.ffn
                .dense()
                .map(|d| d.act)
                .or_else(|| k.ffn.moe()?.shared.map(|d| d.act))
        })
        .unwrap_or(Act::Fused);
    Shape {
        layers: t.layers(),
        hidden: b.hidden,
        heads: ty.heads,
        kv_heads: ty.kv_heads,
        head_dim: ty.head_dim,
        intermediate: ty.intermediate,
        gated: ty.gated,
        act,
        experts: ty.experts,
        top_k: ty.top_k,
        qkv_bias: a.qkv_bias,
        out_bias: a.out_bias,
        mlp_bias,
        rope: a.rope,
        rel_bias: a.rel_bias,
        learned_positions: b.embedding.learned_positions,
        parallel: r.residual == Residual::Parallel,
        norms_per_layer: r.norms.count,
        tied: b.head.tied,
    }
}

/// DeepSpeed 0.19.8's AutoTP, the way it trains a Hugging Face model with tensor parallelism
/// (`tensor_parallel.autotp_size`: `deepspeed.initialize` shards the model's linears in
/// `DeepSpeedEngine._configure_tensor_parallel`, runtime/engine.py). What it does not do:
/// pipelines (refused before, by [`deepspeed_rules`]), Megatron's sequence parallelism (its `LinearAllreduce` all-reduces
/// whole activations, module_inject/layers.py), and attention shards for ranks beyond the
/// key-value heads (`_apply_autotp_partitioning` warns they hold none, so the plan's per-GPU
/// figures would not hold). ZeRO-3 is accepted: the AutoTP training tutorial
/// (deepspeed.ai/tutorials/autotp-training) lists stages 0-2, but 0.19.8's engine runs it
/// ("AutoTP + ZeRO stage 3 is supported for both inference and training",
/// `_configure_tensor_parallel_states`), and `tests/engines/test_deepspeed.py` trains a step
/// with it.
fn autotp_rules(engine: Engine, p: &Plan, t: &Transformer) -> Result<(), Refusal> {
    if p.tp <= 1 {
        return Ok(());
    }
    let kv_heads = t.blocks.typical().kv_heads;
    if p.sequence_parallel {
        return refuse(
            engine,
            "DeepSpeed 0.19.8's AutoTP has no Megatron sequence parallelism (its LinearAllreduce \
             all-reduces whole activations, module_inject/layers.py); pin --no-sequence-parallel",
        );
    }
    if p.tp > kv_heads {
        return refuse(
            engine,
            format!(
                "DeepSpeed 0.19.8's AutoTP gives ranks beyond the model's {} key-value heads no \
                 attention shard (runtime/engine.py _apply_autotp_partitioning), so tp {} would not \
                 hold the memory planned per GPU; pin --tp {} or lower",
                kv_heads, p.tp, kv_heads
            ),
        );
    }
    Ok(())
}

/// The `model_type`s whose transformers 5.24.0 config class has a `base_model_tp_plan`
/// (`data/tp-plan-model-types.txt`, listed from the library's `CONFIG_MAPPING`).
const TP_PLAN_MODEL_TYPES: &str = include_str!("../data/tp-plan-model-types.txt");

/// The `model_type` transformers' tensor-parallel plan is looked up under: the config's own,
/// else its `text_config`'s (a composite model takes its language model's plan: `_tp_plan` is
/// gathered from the children, transformers 5.24 `distributed/mixin.py`). `None` without a
/// config.json, or with a type that has no plan.
pub fn tp_plan_model_type(config: Option<&str>) -> Result<String, Option<String>> {
    let v: serde_json::Value = config
        .and_then(|c| serde_json::from_str(c).ok())
        .ok_or(None)?;
    let ty = |v: &serde_json::Value| v.get("model_type")?.as_str().map(str::to_string);
    let planned = |t: &str| {
        TP_PLAN_MODEL_TYPES
            .lines()
            .any(|l| !l.starts_with('#') && l.trim() == t)
    };
    let own = ty(&v);
    for t in [own.clone(), v.get("text_config").and_then(ty)]
        .into_iter()
        .flatten()
    {
        if planned(&t) {
            return Ok(t);
        }
    }
    Err(own)
}

/// transformers 5.24's own tensor parallelism, as `--emit torchrun` writes it:
/// `from_pretrained(..., distributed_config=DistributedConfig(tp_size, fsdp_size,
/// dp_replicate_size))` under torchrun. Its rules: the model type has a `base_model_tp_plan`
/// (`_resolve_parallel_plans` raises "has no `tp_plan`" otherwise); the colwise `q_proj`/`k_proj`
/// shards split whole heads, so tp divides the query and the key-value heads (the attention
/// forward views each shard as `(-1, head_dim)`; `get_kv_heads_per_rank` gives no even split
/// otherwise); the mesh `(pp, dp_replicate, fsdp, tp)` must cover the world
/// (`initialize_distributed_mesh`). Data parallelism is the library's FSDP2 plan, which
/// `fully_shard`s every decoder layer with `reshard_after_forward=True` (`distributed/fsdp.py`):
/// ZeRO-3 over `fsdp_size`, or whole replicas over `dp_replicate_size` (ZeRO-0); ZeRO-1/2 keep
/// gathered weights it has no setting for. `fsdp_cpu_offload` is `CPUOffloadPolicy` (parameters,
/// gradients and the optimizer step); `fsdp_mixed_precision` is bf16 parameters with fp32
/// reductions only.
fn native_tp_rules(engine: Engine, p: &Plan, job: &Job<'_>) -> Result<(), Refusal> {
    if p.tp <= 1 {
        return Ok(());
    }
    let ty = job.model.blocks.typical();
    match tp_plan_model_type(job.config) {
        Ok(_) => {}
        Err(None) => {
            return refuse(
                engine,
                "transformers 5.24 shards only model types with a base_model_tp_plan, and this \
                 model has no config.json model_type to look it up; pin --tp 1, or use --emit \
                 deepspeed (AutoTP)",
            )
        }
        Err(Some(t)) => {
            return refuse(
                engine,
                format!(
                    "transformers 5.24 has no base_model_tp_plan for model type {t} \
                     (DistributedConfig(tp_size) raises \"has no `tp_plan`\"); pin --tp 1, or use \
                     --emit deepspeed (AutoTP)"
                ),
            )
        }
    }
    if ty.heads % p.tp != 0 || ty.kv_heads % p.tp != 0 {
        return refuse(
            engine,
            format!(
                "transformers 5.24's tensor-parallel plan splits whole heads, and tp {} does not \
                 divide the {} query and {} key-value heads; pin a --tp that does",
                p.tp, ty.heads, ty.kv_heads
            ),
        );
    }
    if p.dp == 1 && (p.zero_stage > 0 || p.offload != Offload::None) {
        return refuse(
            engine,
            "transformers 5.24's DistributedConfig shards and offloads only over data-parallel \
             ranks (its FSDP2 plan), and this plan has none; use --emit deepspeed (AutoTP)",
        );
    }
    if p.dp > 1 && (1..=2).contains(&p.zero_stage) {
        return refuse(
            engine,
            format!(
                "transformers 5.24's DistributedConfig shards data-parallel ranks with its FSDP2 \
                 plan, which reshards every layer after forward (ZeRO-3, distributed/fsdp.py), \
                 or replicates them (ZeRO-0); ZeRO-{} with tensor parallelism needs --emit \
                 deepspeed (AutoTP)",
                p.zero_stage
            ),
        );
    }
    if p.dp > 1 && p.precision == Precision::Fp16Amp {
        return refuse(
            engine,
            "transformers 5.24's fsdp_mixed_precision is bf16 only (MixedPrecisionPolicy \
             param_dtype=torch.bfloat16, distributed/fsdp.py); use --precision bf16-amp, or \
             --emit deepspeed (AutoTP)",
        );
    }
    Ok(())
}

/// Megatron-LM's (`megatron/training/arguments.py` `validate_args`, main of 2026-08-22) and
/// megatron-core 0.16.1's (`TransformerConfig.__post_init__`) rules.
fn megatron_rules(engine: Engine, p: &Plan, model: &Transformer) -> Result<(), Refusal> {
    let t = shape(model);
    if t.layers % p.pp != 0 {
        return refuse(
            engine,
            format!(
                "Megatron-LM asserts \"Number of layers should be divisible by the \
                 pipeline-model-parallel size\" ({} layers, pp {})",
                t.layers, p.pp
            ),
        );
    }
    if let Schedule::Interleaved(v) = p.schedule {
        if p.pp > 1 && v > 1 && (t.layers / p.pp) % v != 0 {
            return refuse(
                engine,
                format!(
                    "Megatron-LM asserts \"number of layers per pipeline stage must be divisible \
                     number of layers per virtual pipeline stage\" ({} layers per stage, {v} chunks)",
                    t.layers / p.pp
                ),
            );
        }
    }
    if t.heads % p.tp != 0 {
        return refuse(
            engine,
            format!(
                "megatron-core 0.16.1 TransformerConfig: num_attention_heads ({}) must be a \
                 multiple of tensor_model_parallel_size ({})",
                t.heads, p.tp
            ),
        );
    }
    if t.kv_heads % p.tp != 0 && p.tp % t.kv_heads != 0 {
        return refuse(
            engine,
            format!(
                "megatron-core 0.16.1 TransformerConfig: num_query_groups ({}) and \
                 tensor_model_parallel_size ({}) must divide one another",
                t.kv_heads, p.tp
            ),
        );
    }
    if p.offload == Offload::Params {
        return refuse(
            engine,
            "Megatron-LM has no parameter offload (only --optimizer-cpu-offload); use --emit \
             deepspeed with ZeRO-3",
        );
    }
    if p.zero_stage >= 3 {
        // Megatron-LM's ZeRO-3 is its PyTorch FSDP2 path: validate_args, `if args.use_torch_fsdp2`.
        if p.pp > 1 {
            return refuse(
                engine,
                "Megatron-LM asserts \"--use-torch-fsdp2 is not supported with pipeline \
                 parallelism\" (ZeRO-3 is its FSDP2 path)",
            );
        }
        if p.precision == Precision::Fp16Amp {
            return refuse(
                engine,
                "Megatron-LM asserts \"--use-torch-fsdp2 not supported with fp16 yet\" (ZeRO-3 is \
                 its FSDP2 path)",
            );
        }
        if model.blocks.head.tied {
            return refuse(
                engine,
                "Megatron-LM asserts \"--use-torch-fsdp2 requires \
                 --untie-embeddings-and-output-weights\", and this model ties them",
            );
        }
    }
    if p.offload == Offload::Optimizer && !(1..=2).contains(&p.zero_stage) {
        return refuse(
            engine,
            format!(
                "Megatron-LM's --optimizer-cpu-offload needs --use-precision-aware-optimizer, which \
                 megatron-core 0.16.1 allows \"only with distributed optimizer\" (ZeRO-1/2), not \
                 ZeRO-{}",
                p.zero_stage
            ),
        );
    }
    Ok(())
}

/// Whether megatron-core 0.16.1's `GPTModel` (`get_gpt_layer_local_spec`, the arguments
/// [`megatron`] writes) builds the same model as transformers: every parameter tensor the same
/// shape, except the vocabulary rows Megatron-LM pads.
fn megatron_model_rules(
    engine: Engine,
    model: &Transformer,
    f: &ConfigFields,
) -> Result<(), Refusal> {
    let t = shape(model);
    let b = &model.blocks;
    // Megatron-LM writes biases on every linear layer, on none, or on the QKV projection only.
    let biases_written =
        (t.qkv_bias == t.out_bias && t.out_bias == t.mlp_bias) || (!t.out_bias && !t.mlp_bias);
    let what = if model.layout() != Layout::DecoderOnly {
        Some(
            "megatron-core's GPTModel is a decoder-only causal LM; this model has an encoder"
                .into(),
        )
    } else if t.parallel {
        Some(
            "megatron-core 0.16.1's TransformerLayer runs attention then MLP, each on its own \
             residual (transformer_layer.py); this model adds them in parallel"
                .into(),
        )
    } else if t.norms_per_layer != 2 || b.ends.final_norm == 0 {
        Some(format!(
            "megatron-core 0.16.1's TransformerLayer has 2 norms (input_layernorm, \
             pre_mlp_layernorm) and GPTModel a final one; this model has {} per layer",
            t.norms_per_layer
        ))
    } else if b.norm.kind == NormKind::LayerNorm && !b.norm.bias {
        Some("megatron-core's LayerNorm has a bias; this model's LayerNorms have none".into())
    } else if !biases_written {
        Some(
            "Megatron-LM sets biases on all linear layers (its default), none \
             (--disable-bias-linear) or on the QKV projection only (--add-qkv-bias); this model \
             has another combination"
                .into(),
        )
    } else if t.gated && f.hidden_act != "silu" {
        Some(format!(
            "Megatron-LM's gated MLP (--swiglu) is SiLU-gated; this model's gate is {}",
            f.hidden_act
        ))
    } else if t.rope && !matches!(f.rope_type.as_str(), "default" | "llama3") {
        Some(format!(
            "Megatron-LM writes default and Llama 3 rotary embeddings (--use-rope-scaling); this \
             model's rope_type is {}",
            f.rope_type
        ))
    } else if t.rope && f.rope_theta.fract() != 0.0 {
        Some(format!(
            "Megatron-LM's --rotary-base is an integer (arguments.py); this model's rope_theta is {}",
            f.rope_theta
        ))
    } else if f
        .llama3
        .is_some_and(|l| l[1] != 1.0 || l[2] != 4.0 || l[3] != 8192.0)
    {
        Some(
            "megatron-core 0.16.1's RotaryEmbedding._apply_scaling fixes low_freq_factor 1, \
             high_freq_factor 4 and original_max_position_embeddings 8192; this model's Llama 3 \
             scaling differs"
                .into(),
        )
    } else if t.rel_bias {
        Some("megatron-core's GPTModel has no relative attention bias".into())
    } else {
        megatron_window(model).err()
    };
    match what {
        Some(w) => refuse(engine, format!("{w} (model {})", model.name)),
        None => Ok(()),
    }
}

/// A Hugging Face model recomputes through `gradient_checkpointing_enable()`, which
/// checkpoints every `GradientCheckpointingLayer` (transformers 5.24): every layer or none.
/// DeepSpeed 0.19.8's `activation_checkpointing.number_checkpoints` only sizes its contiguous
/// buffers (`activation_checkpointing/checkpointing.py`) and selects no layer. So a plan that
/// recomputes some layers, or only the attention core, cannot be written for the stacks that
/// run a Hugging Face model (DeepSpeed, accelerate without Megatron-LM, torchrun); the
/// transformers stack's search does not offer one ([`crate::eager::Stack::partial_recompute`]),
/// this refuses one planned for Megatron-LM.
fn hf_recompute_rules(engine: Engine, p: &Plan, t: &Transformer) -> Result<(), Refusal> {
    let per_stage = t.layers() / p.pp.max(1);
    let partial =
        p.recompute == Recompute::Full && p.recompute_layers.is_some_and(|k| k < per_stage);
    if p.recompute == Recompute::Selective || partial || p.sequence_parallel {
        return refuse(
            engine,
            format!(
                "a Hugging Face model recomputes every layer or none (gradient_checkpointing_enable, \
                 transformers 5.24) and has no Megatron sequence parallelism, so {} needs Megatron-LM \
                 (--emit megatron); pin --recompute none or full",
                p.label()
            ),
        );
    }
    Ok(())
}

/// Whether `engine` can run `p` with the settings [`emit`] writes for it; the refusal names
/// the engine's rule.
pub fn check(engine: Engine, p: &Plan, job: &Job<'_>) -> Result<(), Refusal> {
    match engine {
        Engine::Deepspeed => {
            deepspeed_rules(engine, p)?;
            autotp_rules(engine, p, job.model)?;
            hf_recompute_rules(engine, p, job.model)
        }
        Engine::Megatron => {
            megatron_model_rules(engine, job.model, &fields(job))?;
            megatron_rules(engine, p, job.model)
        }
        Engine::Accelerate => {
            if (p.tp > 1 || p.pp > 1) && job.stack != Stack::Megatron {
                // accelerate 1.15.0 tensor-parallelises a Hugging Face model only as loaded:
                // `prepare` asks the model's `config.distributed_config.tp_size`
                // (`get_model_tp_size`, utils/other.py) and raises "Model should undergo tensor
                // parallel before passing it to accelerate" without one. The loading is the
                // script's (transformers' DistributedConfig), which a config YAML cannot hold; its
                // MEGATRON_LM type trains Megatron-LM's own model, not this one.
                return refuse(
                    engine,
                    format!(
                        "accelerate 1.15.0 runs tensor parallelism for a Hugging Face model only \
                         when the script loads it sharded (prepare checks \
                         config.distributed_config.tp_size), which its config file cannot say; \
                         for tp {} use --emit torchrun (transformers' DistributedConfig) or --emit \
                         deepspeed (AutoTP)",
                        p.tp
                    ),
                );
            }
            if p.tp > 1 || p.pp > 1 {
                megatron_rules(engine, p, job.model)?;
                if p.zero_stage >= 3 {
                    return refuse(
                        engine,
                        "accelerate 1.15.0's MEGATRON_LM type has no ZeRO-3 setting \
                         (megatron_lm_use_distributed_optimizer is ZeRO-1/2)",
                    );
                }
                if p.recompute != Recompute::Full {
                    // accelerate/utils/dataclasses.py MegatronLMPlugin.__post_init__ defaults
                    // recompute_granularity to "full" and recompute_method to "uniform", and
                    // utils/megatron_lm.py passes them to Megatron-LM's validate_args.
                    return refuse(
                        engine,
                        "accelerate 1.15.0's MegatronLMPlugin always passes recompute_granularity \
                         (default full) with a recompute_method (default uniform) to Megatron-LM, \
                         which asserts no method with selective; only full recomputation can be \
                         written",
                    );
                }
                if matches!(p.schedule, Schedule::Interleaved(v) if v > 1) && p.pp > 1 {
                    return refuse(
                        engine,
                        "accelerate 1.15.0 launch has no megatron_lm key for virtual pipeline \
                         stages (MegatronLMPlugin.num_layers_per_virtual_pipeline_stage is set only \
                         in code), so the interleaved schedule would be lost",
                    );
                }
                Ok(())
            } else if p.zero_stage >= 1 {
                hf_recompute_rules(engine, p, job.model)?;
                deepspeed_rules(engine, p)
            } else if p.offload != Offload::None {
                refuse(
                    engine,
                    "accelerate 1.15.0 offloads only through DeepSpeed (ZeRO 1-3) or FSDP; a \
                     ZeRO-0 plan is MULTI_GPU, which would drop the offload",
                )
            } else {
                hf_recompute_rules(engine, p, job.model)
            }
        }
        Engine::Torchrun => {
            if p.pp > 1 {
                return refuse(
                    engine,
                    "torchrun + FSDP2 shards a whole Hugging Face model; pipeline stages need it \
                     cut into stage modules (torch.distributed.pipelining), which vram does not \
                     write; use --pp 1, or Megatron-LM (--emit megatron)",
                );
            }
            native_tp_rules(engine, p, job)?;
            hf_recompute_rules(engine, p, job.model)
        }
    }
}

/// The launch config of `p` for `engine`, or the engine's rule that refuses it.
pub fn emit(engine: Engine, p: &Plan, job: &Job<'_>) -> Result<String, Refusal> {
    check(engine, p, job)?;
    Ok(match engine {
        Engine::Deepspeed => deepspeed(p, job),
        Engine::Megatron => megatron(p, job),
        Engine::Accelerate => accelerate(p, job),
        Engine::Torchrun => torchrun(p, job),
    })
}

/// What the emitters need besides the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job<'a> {
    /// The model (sizes for Megatron-LM).
    pub model: &'a Transformer,
    /// Sequences per step, all ranks.
    pub global_batch: u64,
    /// Sequence length.
    pub seq: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// The model's `config.json` text, when there is one (a catalog id's embedded config, or
    /// the user's file): Megatron-LM needs what [`Transformer`] does not hold (the rotary base
    /// and scaling, the activation), read by [`ConfigFields::read`]; transformers' tensor
    /// parallelism needs its `model_type` ([`tp_plan_model_type`]).
    pub config: Option<&'a str>,
    /// The stack the plan was searched for: accelerate writes a tensor-parallel plan of
    /// Megatron-LM's stack as its `MEGATRON_LM` type, and refuses one of the transformers stack.
    pub stack: Stack,
}

/// The `config.json` fields Megatron-LM's arguments need besides the sizes in [`Transformer`].
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFields {
    /// `rope_parameters.rope_theta` (transformers 5.x) or `rope_theta` (4.x files); absent, the
    /// default of transformers 5.24's config class (1e6 for `MixtralConfig`, 1e4 for the others:
    /// `LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Phi3Config`, ... `default_theta`).
    pub rope_theta: f64,
    /// `rope_type` of `rope_parameters` / `rope_scaling` (`default` when absent).
    pub rope_type: String,
    /// Llama 3's scaling: `factor`, `low_freq_factor`, `high_freq_factor`,
    /// `original_max_position_embeddings`.
    pub llama3: Option<[f64; 4]>,
    /// `partial_rotary_factor` (1 when absent).
    pub partial_rotary_factor: f64,
    /// `hidden_act` / `hidden_activation`; absent, the config class's default (`silu` for
    /// `LlamaConfig` and most, `gelu_pytorch_tanh` for Gemma's).
    pub hidden_act: String,
    /// The norms' epsilon (`rms_norm_eps`, `layer_norm_eps`, `layer_norm_epsilon`,
    /// `norm_epsilon`); absent, the config class's default in transformers 5.24 (1e-6 for
    /// `LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`, `GemmaConfig`,
    /// `SmolLM3Config`, `T5Config`; 1e-5 for `MixtralConfig`, `Phi3Config`, `GPT2Config`,
    /// `GPTNeoXConfig`, `FalconConfig`, `Olmo2Config`; 1e-12 for BERT's and RoBERTa's); `None`
    /// for another model type without the key.
    pub norm_eps: Option<f64>,
}

impl ConfigFields {
    /// The fields of `text` (a config.json), with transformers 5.24's defaults for the absent
    /// ones; `None` for text that is not a JSON object.
    pub fn read(text: &str) -> Option<ConfigFields> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let o = v.as_object()?;
        let rope = o
            .get("rope_parameters")
            .filter(|r| r.is_object())
            .or_else(|| o.get("rope_scaling").filter(|r| r.is_object()));
        let num = |r: Option<&serde_json::Value>, k: &str| r.and_then(|r| r.get(k)?.as_f64());
        let model_type = o.get("model_type").and_then(|m| m.as_str()).unwrap_or("");
        let defaults = vram_model::hf::class_defaults(model_type);
        let rope_theta = num(rope, "rope_theta")
            .or_else(|| o.get("rope_theta")?.as_f64())
            .unwrap_or(defaults.rope_theta);
        let rope_type = rope
            .and_then(|r| r.get("rope_type").or_else(|| r.get("type"))?.as_str())
            .unwrap_or("default")
            .to_string();
        let llama3 = (rope_type == "llama3").then(|| {
            [
                num(rope, "factor").unwrap_or(8.0),
                num(rope, "low_freq_factor").unwrap_or(1.0),
                num(rope, "high_freq_factor").unwrap_or(4.0),
                num(rope, "original_max_position_embeddings").unwrap_or(8192.0),
            ]
        });
        let partial_rotary_factor = num(rope, "partial_rotary_factor")
            .or_else(|| o.get("partial_rotary_factor")?.as_f64())
            .unwrap_or(1.0);
        let hidden_act = o
            .get("hidden_act")
            .or_else(|| o.get("hidden_activation"))
            .and_then(|a| a.as_str())
            .unwrap_or(defaults.hidden_act)
            .to_string();
        let norm_eps = [
            "rms_norm_eps",
            "layer_norm_eps",
            "layer_norm_epsilon",
            "norm_epsilon",
        ]
        .iter()
        .find_map(|k| o.get(*k)?.as_f64())
        .or(defaults.norm_eps);
        Some(ConfigFields {
            rope_theta,
            rope_type,
            llama3,
            partial_rotary_factor,
            hidden_act,
            norm_eps,
        })
    }
}

/// Megatron-LM's vocabulary after its padding (`vocab_size_with_padding` in
/// megatron/core/tokenizers/utils/build_tokenizer.py: a multiple of
/// `--make-vocab-size-divisible-by` × tensor-parallel size).
pub fn megatron_padded_vocab(vocab: u64, tp: u64) -> u64 {
    vocab.div_ceil(MEGATRON_VOCAB_MULTIPLE * tp) * MEGATRON_VOCAB_MULTIPLE * tp
}

/// `--make-vocab-size-divisible-by`, Megatron-LM's default, written explicitly.
pub const MEGATRON_VOCAB_MULTIPLE: u64 = 128;

/// megatron-core's `TransformerConfig.layernorm_epsilon` default (`--norm-epsilon`).
const MEGATRON_NORM_EPS: f64 = 1e-5;

/// Megatron-LM's sliding-window arguments for a model.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MegatronWindow {
    /// The keys a query attends to, itself included (transformers' `sliding_window`).
    size: u64,
    /// `--window-attn-skip-freq` when some layers attend to everything: `N` (every `N`-th
    /// layer full) or a list (`1` sliding, `0` full), quoted for the shell.
    skip_freq: Option<String>,
}

/// The sliding window of `t`'s attention layers as Megatron-LM's arguments take it, `None`
/// when no layer slides; an error naming what megatron-core 0.16.1 cannot express.
///
/// transformers attends to the last `w` keys (masking_utils.py `sliding_window_overlay`:
/// `kv_idx > q_idx - w`); megatron-core's `window_size = (left, right)` to `left + 1` before
/// and `right` after (transformer/utils.py `get_sliding_window_causal_mask`), so `w` is
/// `--window-size w-1,0`. `is_layer_window_attention` slides layer `n` (1-based) when
/// `n % N != 0` for an integer `--window-attn-skip-freq N`, or when the list's `n`-th entry
/// is 1. One window size for every sliding layer; no chunked attention.
fn megatron_window(t: &Transformer) -> Result<Option<MegatronWindow>, String> {
    use vram_model::blocks::Window;
    let windows: Vec<Window> = t
        .blocks
        .iter()
        .filter_map(|b| b.mixer.as_attention().map(|a| a.window))
        .collect();
    let mut size = None;
    for w in &windows {
        match *w {
            Window::Full => {}
            Window::Chunked(c) => {
                return Err(format!(
                    "megatron-core 0.16.1 has no chunked attention; this model attends in chunks of {c}"
                ))
            }
            Window::Sliding(w) => match size {
                Some(s) if s != w => {
                    return Err(format!(
                        "megatron-core 0.16.1 takes one --window-size; this model slides over {s} and {w} tokens"
                    ))
                }
                _ => size = Some(w),
            },
        }
    }
    let Some(size) = size else {
        return Ok(None);
    };
    let slides: Vec<bool> = windows.iter().map(|w| *w != Window::Full).collect();
    let skip_freq = if slides.iter().all(|s| *s) {
        None
    } else if let Some(n) = (2..=slides.len()).find(|n| {
        slides
            .iter()
            .enumerate()
            .all(|(i, s)| *s == ((i + 1) % n != 0))
    }) {
        Some(n.to_string())
    } else {
        let list: Vec<&str> = slides.iter().map(|s| if *s { "1" } else { "0" }).collect();
        Some(format!("'[{}]'", list.join(",")))
    };
    Ok(Some(MegatronWindow {
        size: size.max(1),
        skip_freq,
    }))
}

/// What the user should know about the config [`emit`] writes for `p`: with AutoTP, DeepSpeed
/// counts its batch over every rank (each rank of a tensor-parallel group is fed the same
/// sequences: the engine checks it on the first batch, `check_dataloader_inputs_same_across_ranks`).
pub fn notes(engine: Engine, p: &Plan, job: &Job<'_>) -> Vec<String> {
    if engine != Engine::Deepspeed || p.tp <= 1 {
        return Vec::new();
    }
    vec![format!(
        "tensor parallelism {} through DeepSpeed's AutoTP: launch {} ranks and feed the {} ranks of \
         each tensor-parallel group the same micro-batches; DeepSpeed then counts its \
         train_batch_size over every rank ({} = {} x {} x {} ranks), {} distinct sequences a step",
        p.tp,
        p.tp * p.dp,
        p.tp,
        p.micro_batch * p.grad_accum * p.dp * p.tp,
        p.micro_batch,
        p.grad_accum,
        p.dp * p.tp,
        job.global_batch
    )]
}

fn fields(job: &Job<'_>) -> ConfigFields {
    job.config
        .and_then(ConfigFields::read)
        .unwrap_or_else(|| ConfigFields::read("{}").expect("an empty object reads"))
}

fn nodes(p: &Plan, job: &Job<'_>) -> u64 {
    (p.tp * p.pp * p.dp).div_ceil(job.gpus_per_node.max(1))
}

fn per_node(p: &Plan, job: &Job<'_>) -> u64 {
    job.gpus_per_node.min(p.tp * p.pp * p.dp)
}

fn half(p: &Plan) -> &'static str {
    match p.precision {
        Precision::Fp16Amp => "fp16",
        Precision::Fp32 => "no",
        _ => "bf16",
    }
}

/// A DeepSpeed JSON config (`deepspeed --deepspeed_config ds.json`).
pub fn deepspeed(p: &Plan, job: &Job<'_>) -> String {
    let mut zero = serde_json::json!({
        "stage": p.zero_stage,
        "overlap_comm": true,
        "contiguous_gradients": true,
    });
    if p.offload != Offload::None {
        zero["offload_optimizer"] = serde_json::json!({"device": "cpu", "pin_memory": true});
    }
    if p.offload == Offload::Params {
        zero["offload_param"] = serde_json::json!({"device": "cpu", "pin_memory": true});
    }
    let mut v = serde_json::json!({
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
        "bf16": {"enabled": p.precision == Precision::Bf16Amp || p.precision == Precision::Bf16},
        "fp16": {"enabled": p.precision == Precision::Fp16Amp},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    });
    if p.tp > 1 {
        // AutoTP (see `autotp_rules`). DeepSpeedConfig has no model-parallel unit here, so it
        // checks train_batch_size against every rank; it is left for DeepSpeed to derive
        // (micro-batch × accumulation × ranks) rather than written as the job's distinct
        // sequences, which it would refuse.
        v["tensor_parallel"] = serde_json::json!({"autotp_size": p.tp});
    } else {
        // DeepSpeed checks train_batch_size = micro × accumulation × data-parallel world size.
        v["train_batch_size"] = job.global_batch.into();
    }
    if p.recompute != Recompute::None {
        v["activation_checkpointing"] = serde_json::json!({
            // Partitioning needs Megatron's model-parallel unit; AutoTP's linears are not
            // checkpointed through DeepSpeed's checkpointing API.
            "partition_activations": false,
            "contiguous_memory_optimization": false,
        });
    }
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// Megatron-LM `pretrain_gpt.py` arguments, one per line.
pub fn megatron(p: &Plan, job: &Job<'_>) -> String {
    let model = job.model;
    let t = shape(model);
    let f = fields(job);
    // Learned positions are a table of exactly the model's rows; rotary ones are computed.
    let max_positions = match t.learned_positions {
        0 => job.seq.max(model.max_positions()),
        n => n,
    };
    let mut a = vec![
        format!("--tensor-model-parallel-size {}", p.tp),
        format!("--pipeline-model-parallel-size {}", p.pp),
        format!("--num-layers {}", t.layers),
        format!("--hidden-size {}", t.hidden),
        format!("--num-attention-heads {}", t.heads),
        format!("--ffn-hidden-size {}", t.intermediate),
        format!("--seq-length {}", job.seq),
        format!("--max-position-embeddings {max_positions}"),
        format!("--micro-batch-size {}", p.micro_batch),
        format!("--global-batch-size {}", job.global_batch),
    ];
    if t.kv_heads != t.heads {
        a.push("--group-query-attention".into());
        a.push(format!("--num-query-groups {}", t.kv_heads));
    }
    if t.head_dim * t.heads != t.hidden {
        a.push(format!("--kv-channels {}", t.head_dim));
    }
    // Model shape flags whose Megatron-LM defaults are GPT-2's (tied embeddings, GeLU MLP,
    // LayerNorm, learned positions).
    if !t.tied {
        a.push("--untie-embeddings-and-output-weights".into());
    }
    if t.gated {
        a.push("--swiglu".into());
    } else if t.act == Act::ComposedTanh {
        // GPT-2's gelu_new is the tanh approximation: Megatron-LM's --openai-gelu.
        a.push("--openai-gelu".into());
    }
    if model.blocks.norm.kind == NormKind::RmsNorm {
        a.push("--normalization RMSNorm".into());
    }
    // TransformerConfig.layernorm_epsilon, `--norm-epsilon` (default 1e-5).
    if let Some(eps) = f.norm_eps.filter(|e| *e != MEGATRON_NORM_EPS) {
        a.push(format!("--norm-epsilon {eps}"));
    }
    if let Ok(Some(w)) = megatron_window(model) {
        a.push(format!("--window-size {},0", w.size - 1));
        if let Some(skip) = w.skip_freq {
            a.push(format!("--window-attn-skip-freq {skip}"));
        }
    }
    if t.rope {
        a.push("--position-embedding-type rope".into());
        a.push(format!("--rotary-base {}", f.rope_theta));
        if f.partial_rotary_factor != 1.0 {
            a.push(format!("--rotary-percent {}", f.partial_rotary_factor));
        }
        if let Some([factor, ..]) = f.llama3 {
            a.push("--use-rope-scaling".into());
            a.push(format!("--rope-scaling-factor {factor}"));
        }
    }
    // Megatron-LM's default is a bias on every linear layer (GPT-2's); Llama-style models have
    // none, Qwen2 only on the QKV projection.
    if !t.out_bias && !t.mlp_bias {
        a.push("--disable-bias-linear".into());
        if t.qkv_bias {
            a.push("--add-qkv-bias".into());
        }
    }
    if t.experts > 1 {
        a.push(format!("--num-experts {}", t.experts));
        a.push(format!("--moe-router-topk {}", t.top_k));
    }
    // The tokenizer gives the vocabulary; Megatron-LM pads it (build_tokenizer.py
    // vocab_size_with_padding), written explicitly so the padding is visible.
    a.push(format!(
        "--make-vocab-size-divisible-by {MEGATRON_VOCAB_MULTIPLE}"
    ));
    if let Schedule::Interleaved(v) = p.schedule {
        if p.pp > 1 {
            a.push(format!(
                "--num-layers-per-virtual-pipeline-stage {}",
                t.layers / (p.pp * v)
            ));
        }
    }
    // Megatron-LM turns sequence parallelism off at tp 1 (and megatron-core refuses it).
    if p.sequence_parallel && p.tp > 1 {
        a.push("--sequence-parallel".into());
    }
    match p.recompute {
        Recompute::None => {}
        Recompute::Selective => a.push("--recompute-granularity selective".into()),
        Recompute::Full => {
            a.push("--recompute-granularity full".into());
            match p.recompute_layers {
                Some(k) => {
                    a.push("--recompute-method block".into());
                    a.push(format!("--recompute-num-layers {k}"));
                }
                None => {
                    a.push("--recompute-method uniform".into());
                    a.push("--recompute-num-layers 1".into());
                }
            }
        }
    }
    // Megatron-LM's distributed optimizer shards optimizer states and reduce-scatters
    // gradients (ZeRO-1/2); parameter sharding (ZeRO-3) is its PyTorch FSDP2 path.
    match p.zero_stage {
        0 => {}
        1 | 2 => a.push("--use-distributed-optimizer".into()),
        _ => {
            a.push("--use-torch-fsdp2".into());
            a.push("--no-gradient-accumulation-fusion".into());
            a.push("--ckpt-format torch_dist".into());
        }
    }
    if p.offload == Offload::Optimizer {
        // validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer.
        a.push("--optimizer-cpu-offload".into());
        a.push("--use-precision-aware-optimizer".into());
    }
    match p.precision {
        Precision::Fp16Amp => a.push("--fp16".into()),
        Precision::Fp32 => {}
        _ => a.push("--bf16".into()),
    }
    let padded = megatron_padded_vocab(model.vocab(), p.tp);
    let mut s = format!(
        "# vocabulary: {} tokens from the model's tokenizer (--tokenizer-type HuggingFaceTokenizer \
         --tokenizer-model <its repository>), padded by Megatron-LM to {padded}\n\
         # torchrun --nnodes {} --nproc-per-node {} pretrain_gpt.py \\\n",
        model.vocab(),
        nodes(p, job),
        per_node(p, job)
    );
    for (i, arg) in a.iter().enumerate() {
        let _ = writeln!(s, "{arg}{}", if i + 1 < a.len() { " \\" } else { "" });
    }
    s
}

/// A Hugging Face accelerate config YAML (`accelerate launch --config_file plan.yaml`).
pub fn accelerate(p: &Plan, job: &Job<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "compute_environment: LOCAL_MACHINE");
    let megatron = p.tp > 1 || p.pp > 1;
    if megatron {
        let _ = writeln!(s, "distributed_type: MEGATRON_LM");
        let _ = writeln!(s, "megatron_lm_config:");
        let _ = writeln!(s, "  megatron_lm_tp_degree: {}", p.tp);
        let _ = writeln!(s, "  megatron_lm_pp_degree: {}", p.pp);
        let _ = writeln!(s, "  megatron_lm_num_micro_batches: {}", p.grad_accum);
        let _ = writeln!(
            s,
            "  megatron_lm_sequence_parallelism: {}",
            p.sequence_parallel && p.tp > 1
        );
        let _ = writeln!(s, "  megatron_lm_recompute_granularity: full");
        match p.recompute_layers {
            Some(k) => {
                let _ = writeln!(s, "  megatron_lm_recompute_method: block");
                let _ = writeln!(s, "  megatron_lm_recompute_num_layers: {k}");
            }
            None => {
                let _ = writeln!(s, "  megatron_lm_recompute_method: uniform");
                let _ = writeln!(s, "  megatron_lm_recompute_num_layers: 1");
            }
        }
        let _ = writeln!(
            s,
            "  megatron_lm_use_distributed_optimizer: {}",
            p.zero_stage >= 1
        );
        if p.offload == Offload::Optimizer {
            let _ = writeln!(s, "  megatron_lm_optimizer_cpu_offload: true");
            let _ = writeln!(s, "  megatron_lm_use_precision_aware_optimizer: true");
        }
        let _ = writeln!(s, "  megatron_lm_gradient_clipping: 1.0");
    } else if p.zero_stage >= 1 {
        let dev = |on: bool| if on { "cpu" } else { "none" };
        let _ = writeln!(s, "distributed_type: DEEPSPEED");
        let _ = writeln!(s, "deepspeed_config:");
        let _ = writeln!(s, "  zero_stage: {}", p.zero_stage);
        let _ = writeln!(s, "  gradient_accumulation_steps: {}", p.grad_accum);
        let _ = writeln!(
            s,
            "  offload_optimizer_device: {}",
            dev(p.offload != Offload::None)
        );
        let _ = writeln!(
            s,
            "  offload_param_device: {}",
            dev(p.offload == Offload::Params)
        );
        let _ = writeln!(s, "  zero3_init_flag: {}", p.zero_stage == 3);
    } else if p.dp > 1 {
        let _ = writeln!(s, "distributed_type: MULTI_GPU");
    } else {
        let _ = writeln!(s, "distributed_type: 'NO'");
    }
    // Quoted: YAML 1.1 (PyYAML, which accelerate uses) reads a bare `no` as the boolean false.
    let _ = writeln!(s, "mixed_precision: '{}'", half(p));
    let _ = writeln!(s, "num_machines: {}", nodes(p, job));
    let _ = writeln!(s, "num_processes: {}", p.tp * p.pp * p.dp);
    let _ = writeln!(s, "machine_rank: 0");
    let _ = writeln!(s, "main_training_function: main");
    let _ = writeln!(s, "rdzv_backend: static");
    let _ = writeln!(s, "same_network: true");
    let _ = writeln!(s, "use_cpu: false");
    s
}

/// A `torchrun` command and the FSDP2 (`torch.distributed.fsdp.fully_shard`) setup it expects
/// in the training script. Every line after the command starts with `# `; with that prefix cut,
/// the lines are Python (prose is a Python comment) that runs once `model` (a transformers
/// `PreTrainedModel`) exists and the process group is up. Its blocks are the modules whose class
/// is in `model._no_split_modules`, as accelerate 1.15.0's FSDP2 auto-wrap picks them
/// (`transformer_cls_names_to_wrap` defaults to `_no_split_modules`). A tensor-parallel plan is
/// instead the model loaded sharded by transformers 5.24 (`torchrun_tp`).
pub fn torchrun(p: &Plan, job: &Job<'_>) -> String {
    let py = if p.tp > 1 {
        torchrun_tp(p)
    } else {
        torchrun_fsdp2(p)
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "torchrun --nnodes {} --nproc-per-node {} --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 train.py \\",
        nodes(p, job),
        per_node(p, job)
    );
    let _ = writeln!(
        s,
        "  --micro-batch-size {} --grad-accum {} --seq-len {}",
        p.micro_batch, p.grad_accum, job.seq
    );
    for line in py {
        let _ = writeln!(s, "# {line}");
    }
    s
}

fn torchrun_fsdp2(p: &Plan) -> Vec<String> {
    let mut py: Vec<String> = vec![
        "# In train.py (PyTorch >= 2.6, FSDP2), once `model` is built:".into(),
        "import torch".into(),
        "from torch.distributed.device_mesh import init_device_mesh".into(),
        "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy"
            .into(),
    ];
    py.push(format!(
        "mesh = init_device_mesh(\"cuda\", ({},), mesh_dim_names=(\"dp\",))",
        p.dp
    ));
    // FSDP2 casts parameters for compute with its policy; fp32 needs none, and pure bf16 keeps
    // the model itself in bf16.
    let mp = match p.precision {
        Precision::Fp16Amp => {
            "MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)"
        }
        Precision::Bf16Amp => {
            "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"
        }
        Precision::Bf16 | Precision::Fp32 => "MixedPrecisionPolicy()",
    };
    if p.precision == Precision::Bf16 {
        py.push("model = model.to(torch.bfloat16)".into());
    }
    py.push(format!("mp = {mp}"));
    if p.recompute != Recompute::None {
        py.push(format!(
            "# torch.utils.checkpoint (checkpoint_wrapper) on {} blocks",
            p.recompute_layers
                .map_or("all".to_string(), |k| format!("the first {k}"))
        ));
    }
    // FSDP2's CPUOffloadPolicy moves parameters, gradients and the optimizer step to the CPU
    // together: it offloads at least what the plan offloads.
    let offload = if p.offload != Offload::None {
        ", offload_policy=CPUOffloadPolicy()"
    } else {
        ""
    };
    // ZeRO-3 reshards after forward; ZeRO-1/2 keep the gathered parameters until backward.
    let reshard = if p.zero_stage >= 3 { "True" } else { "False" };
    let mesh = "mesh";
    py.push(
        "blocks = [m for m in model.modules() if type(m).__name__ in model._no_split_modules]"
            .into(),
    );
    py.push(format!(
        "for block in blocks: fully_shard(block, mesh={mesh}, reshard_after_forward={reshard}, mp_policy=mp{offload})"
    ));
    py.push(format!(
        "fully_shard(model, mesh={mesh}, reshard_after_forward={reshard}, mp_policy=mp{offload})"
    ));
    py
}

/// The tensor-parallel setup: transformers 5.24 loads the checkpoint sharded
/// (`DistributedConfig`, whose rules [`native_tp_rules`] holds) and builds the
/// `(pp, dp_replicate, fsdp, tp)` mesh itself; ZeRO-3 is its FSDP2 plan over `fsdp_size`,
/// ZeRO-0 whole replicas over `dp_replicate_size`.
fn torchrun_tp(p: &Plan) -> Vec<String> {
    let mut args = vec![format!("tp_size={}", p.tp)];
    if p.dp > 1 {
        if p.zero_stage >= 3 {
            args.push(format!("fsdp_size={}", p.dp));
        } else {
            args.push(format!("dp_replicate_size={}", p.dp));
        }
        if p.precision == Precision::Bf16Amp {
            args.push("fsdp_mixed_precision=True".into());
        }
        if p.offload != Offload::None {
            args.push("fsdp_cpu_offload=True".into());
        }
    }
    let dtype = if p.precision == Precision::Bf16 {
        "torch.bfloat16"
    } else {
        "torch.float32"
    };
    let mut py: Vec<String> = vec![
        "# In train.py (transformers 5.24, PyTorch >= 2.8): load the checkpoint `model_id` sharded;"
            .into(),
        "# DistributedConfig builds the device mesh and applies the model's tensor-parallel plan."
            .into(),
        "import torch".into(),
        "from transformers import AutoModelForCausalLM, DistributedConfig".into(),
        format!("dc = DistributedConfig({})", args.join(", ")),
        format!(
            "model = AutoModelForCausalLM.from_pretrained(model_id, distributed_config=dc, dtype={dtype})"
        ),
    ];
    if p.dp == 1 && matches!(p.precision, Precision::Bf16Amp | Precision::Fp16Amp) {
        let half = if p.precision == Precision::Bf16Amp {
            "bfloat16"
        } else {
            "float16"
        };
        py.push(format!(
            "# run each forward under torch.autocast(\"cuda\", dtype=torch.{half})"
        ));
    }
    if p.recompute != Recompute::None {
        py.push("model.gradient_checkpointing_enable()".into());
    }
    py.push(format!(
        "# the {} ranks of each tensor-parallel group take the same micro-batches",
        p.tp
    ));
    py
}

#[cfg(test)]
mod tests {
    use super::*;
    use vram_model::arch::Model;
    use vram_model::blocks::{Mixer, Window};

    /// Mistral 7B's layers with the windows of `pattern` (`None`: full attention).
    fn with_windows(pattern: &[Option<u64>]) -> Transformer {
        let Model::Transformer(mut t) = vram_model::catalog::lookup("mistral-7b").unwrap() else {
            unreachable!()
        };
        let base = t.blocks.kinds[0];
        let layers: Vec<_> = pattern
            .iter()
            .map(|w| {
                let mut b = base;
                if let Mixer::Attention(a) = &mut b.mixer {
                    a.window = w.map_or(Window::Full, Window::Sliding);
                }
                b
            })
            .collect();
        t.blocks.set_layers(&layers);
        t
    }

    /// `is_layer_window_attention` (megatron-core transformer/utils.py): an integer N slides
    /// every layer but each N-th (1-based); other patterns are written as the list.
    #[test]
    fn window_patterns_become_megatron_skip_frequencies() {
        let w = Some(128);
        // gpt-oss: sliding, full, sliding, full.
        let alt = megatron_window(&with_windows(&[w, None, w, None])).unwrap();
        assert_eq!(
            alt,
            Some(MegatronWindow {
                size: 128,
                skip_freq: Some("2".into())
            })
        );
        // Gemma 3: five sliding layers, then a full one.
        let g3 = megatron_window(&with_windows(&[w, w, w, w, w, None, w, w, w, w, w, None]));
        assert_eq!(g3.unwrap().unwrap().skip_freq.as_deref(), Some("6"));
        // Full first, sliding after: no integer N fits.
        let list = megatron_window(&with_windows(&[None, None, w, w]))
            .unwrap()
            .unwrap();
        assert_eq!(list.skip_freq.as_deref(), Some("'[0,0,1,1]'"));
        assert_eq!(megatron_window(&with_windows(&[None, None])), Ok(None));
        // One window size only.
        let two = megatron_window(&with_windows(&[w, Some(64)])).unwrap_err();
        assert!(two.contains("one --window-size"), "{two}");
    }
}
