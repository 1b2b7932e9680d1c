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

use std::fmt::Write;

use vram_model::arch::Transformer;
use vram_model::setup::{Offload, Precision, Recompute, Schedule};

use crate::search::Plan;

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
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
        "bf16": {"enabled": p.precision == Precision::Bf16Amp || p.precision == Precision::Bf16},
        "fp16": {"enabled": p.precision == Precision::Fp16Amp},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    });
    if p.recompute != Recompute::None {
        v["activation_checkpointing"] = serde_json::json!({
            "partition_activations": p.tp > 1,
            "contiguous_memory_optimization": false,
            "number_checkpoints": p.recompute_layers,
        });
    }
    if p.pp > 1 {
        v["pipeline"] = serde_json::json!({"stages": p.pp});
    }
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// Megatron-LM `pretrain_gpt.py` arguments, one per line.
pub fn megatron(p: &Plan, job: &Job<'_>) -> String {
    let t = job.model;
    let mut a = vec![
        format!("--tensor-model-parallel-size {}", p.tp),
        format!("--pipeline-model-parallel-size {}", p.pp),
        format!("--num-layers {}", t.layers),
        format!("--hidden-size {}", t.hidden),
        format!("--num-attention-heads {}", t.heads),
        format!("--ffn-hidden-size {}", t.intermediate),
        format!("--seq-length {}", job.seq),
        format!("--max-position-embeddings {}", job.seq.max(t.max_positions)),
        format!("--micro-batch-size {}", p.micro_batch),
        format!("--global-batch-size {}", job.global_batch),
    ];
    if t.kv_heads != t.heads {
        a.push("--group-query-attention".into());
        a.push(format!("--num-query-groups {}", t.kv_heads));
    }
    if let Schedule::Interleaved(v) = p.schedule {
        if p.pp > 1 {
            a.push(format!(
                "--num-layers-per-virtual-pipeline-stage {}",
                t.layers / (p.pp * v)
            ));
        }
    }
    if p.sequence_parallel {
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
        }
    }
    match p.precision {
        Precision::Fp16Amp => a.push("--fp16".into()),
        Precision::Fp32 => {}
        _ => a.push("--bf16".into()),
    }
    let mut s = format!(
        "# torchrun --nnodes {} --nproc-per-node {} pretrain_gpt.py \\\n",
        nodes(p, job),
        per_node(p, job)
    );
    if p.offload != Offload::None {
        s += "# the plan offloads optimizer states to the CPU: recent Megatron-core has \
              --optimizer-cpu-offload; otherwise use --emit deepspeed\n";
    }
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
            p.sequence_parallel
        );
        let _ = writeln!(
            s,
            "  megatron_lm_recompute_activations: {}",
            p.recompute != Recompute::None
        );
        let _ = writeln!(
            s,
            "  megatron_lm_use_distributed_optimizer: {}",
            p.zero_stage >= 1
        );
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
    let _ = writeln!(s, "mixed_precision: {}", half(p));
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
/// in the training script.
pub fn torchrun(p: &Plan, job: &Job<'_>) -> String {
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
    let _ = writeln!(s, "# In train.py (PyTorch >= 2.6, FSDP2):");
    let _ = writeln!(
        s,
        "# from torch.distributed.device_mesh import init_device_mesh"
    );
    let _ = writeln!(
        s,
        "# from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy"
    );
    if p.tp > 1 {
        let _ = writeln!(
            s,
            "# mesh = init_device_mesh(\"cuda\", ({}, {}), mesh_dim_names=(\"dp\", \"tp\"))",
            p.dp * p.pp,
            p.tp
        );
        let _ = writeln!(
            s,
            "# parallelize_module(block, mesh[\"tp\"], plan)  # torch.distributed.tensor.parallel, per block"
        );
    } else {
        let _ = writeln!(
            s,
            "# mesh = init_device_mesh(\"cuda\", ({},), mesh_dim_names=(\"dp\",))",
            p.dp * p.pp
        );
    }
    if p.pp > 1 {
        let _ = writeln!(
            s,
            "# pipeline: torch.distributed.pipelining with {} stages, schedule {}",
            p.pp,
            match p.schedule {
                Schedule::Gpipe => "ScheduleGPipe".to_string(),
                Schedule::OneFOneB => "Schedule1F1B".to_string(),
                Schedule::Interleaved(v) =>
                    format!("ScheduleInterleaved1F1B ({v} stages per rank)"),
            }
        );
    }
    let dtype = if p.precision == Precision::Fp16Amp {
        "torch.float16"
    } else {
        "torch.bfloat16"
    };
    let offload = if p.offload != Offload::None {
        ", offload_policy=CPUOffloadPolicy()"
    } else {
        ""
    };
    // ZeRO-3 reshards after forward; ZeRO-1/2 keep the gathered parameters until backward.
    let reshard = if p.zero_stage >= 3 { "True" } else { "False" };
    let _ = writeln!(
        s,
        "# mp = MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype=torch.float32)"
    );
    if p.recompute != Recompute::None {
        let _ = writeln!(
            s,
            "# torch.utils.checkpoint (checkpoint_wrapper) on {} blocks",
            p.recompute_layers
                .map_or("all".to_string(), |k| format!("the first {k}"))
        );
    }
    let mesh = if p.tp > 1 { "mesh[\"dp\"]" } else { "mesh" };
    let _ = writeln!(
        s,
        "# for block in model.layers: fully_shard(block, mesh={mesh}, reshard_after_forward={reshard}, mp_policy=mp{offload})"
    );
    let _ = writeln!(
        s,
        "# fully_shard(model, mesh={mesh}, reshard_after_forward={reshard}, mp_policy=mp{offload})"
    );
    s
}
