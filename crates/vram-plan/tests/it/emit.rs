//! Launch configs carry the keys each engine reads, with values that agree with the plan.
//!
//! Key names from each engine's documentation: DeepSpeed "Configuration JSON"
//! (deepspeed.ai/docs/config-json: `train_batch_size`, `train_micro_batch_size_per_gpu`,
//! `gradient_accumulation_steps`, `bf16.enabled`, `zero_optimization.stage`,
//! `zero_optimization.offload_optimizer.device`); Megatron-LM `megatron/training/arguments.py`;
//! accelerate's config YAML (`distributed_type`, `num_processes`, `num_machines`,
//! `mixed_precision`, `megatron_lm_config.megatron_lm_tp_degree`, `deepspeed_config.zero_stage`);
//! `torchrun --nnodes --nproc-per-node` and `torch.distributed.fsdp.fully_shard`.

use vram_model::arch::{Model, Transformer};
use vram_model::catalog;
use vram_plan::cluster::Cluster;
use vram_plan::emit::{accelerate, deepspeed, megatron, torchrun, Job};
use vram_plan::{search, Pins, Plan, RecomputeChoice, Request};

fn plan(pins: Pins, gpus: u64) -> (Plan, Transformer) {
    let model = catalog::lookup("llama-2-13b").unwrap();
    let t = match &model {
        Model::Transformer(t) => t.clone(),
        _ => unreachable!(),
    };
    let mut req = Request::new(
        model,
        Cluster::for_gpu("h100-80g", gpus).unwrap(),
        256,
        4096,
    );
    req.pins = pins;
    req.top = 1;
    (search(&req, &mut |_| {}).unwrap().plans[0].clone(), t)
}

fn job(t: &Transformer) -> Job<'_> {
    Job {
        model: t,
        global_batch: 256,
        seq: 4096,
        gpus_per_node: 8,
    }
}

#[test]
fn deepspeed_json_has_the_batch_triple_and_zero() {
    let (p, t) = plan(
        Pins {
            tp: Some(1),
            pp: Some(1),
            zero: Some(3),
            offload: Some(vram_model::setup::Offload::Optimizer),
            ..Pins::default()
        },
        16,
    );
    let v: serde_json::Value = serde_json::from_str(&deepspeed(&p, &job(&t))).unwrap();
    // DeepSpeed checks train_batch_size = micro × accumulation × data-parallel world size.
    let tb = v["train_batch_size"].as_u64().unwrap();
    let mb = v["train_micro_batch_size_per_gpu"].as_u64().unwrap();
    let ga = v["gradient_accumulation_steps"].as_u64().unwrap();
    assert_eq!(tb, 256);
    assert_eq!(mb * ga * p.dp, tb);
    assert_eq!(v["zero_optimization"]["stage"], 3);
    assert_eq!(v["zero_optimization"]["offload_optimizer"]["device"], "cpu");
    assert_eq!(v["bf16"]["enabled"], true);
}

#[test]
fn megatron_arguments_name_every_dimension() {
    let (p, t) = plan(
        Pins {
            tp: Some(4),
            pp: Some(2),
            zero: Some(1),
            sequence_parallel: Some(true),
            schedule: Some(vram_model::setup::Schedule::Interleaved(2)),
            recompute: Some(RecomputeChoice::Selective),
            ..Pins::default()
        },
        32,
    );
    let s = megatron(&p, &job(&t));
    for arg in [
        "--tensor-model-parallel-size 4",
        "--pipeline-model-parallel-size 2",
        "--num-layers-per-virtual-pipeline-stage 10", // 40 layers / (2 stages × 2 chunks)
        "--sequence-parallel",
        "--recompute-granularity selective",
        "--use-distributed-optimizer",
        "--global-batch-size 256",
        "--seq-length 4096",
        "--bf16",
    ] {
        assert!(s.contains(arg), "missing {arg} in\n{s}");
    }
    assert!(s.contains(&format!("--micro-batch-size {}", p.micro_batch)));
    // Megatron-LM derives the accumulation: global / (micro × dp).
    assert_eq!(256 / (p.micro_batch * p.dp), p.grad_accum);
    // ZeRO-3 is Megatron-LM's FSDP2 path, not the distributed optimizer.
    let (p, t) = plan(
        Pins {
            tp: Some(2),
            pp: Some(1),
            zero: Some(3),
            ..Pins::default()
        },
        16,
    );
    let s = megatron(&p, &job(&t));
    assert!(s.contains("--use-torch-fsdp2"));
    assert!(!s.contains("--use-distributed-optimizer"));
}

#[test]
fn accelerate_yaml_keys() {
    let (p, t) = plan(
        Pins {
            tp: Some(2),
            pp: Some(1),
            zero: Some(1),
            ..Pins::default()
        },
        16,
    );
    let y = accelerate(&p, &job(&t));
    let get = |k: &str| {
        y.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k} in\n{y}"))
            .to_string()
    };
    assert_eq!(get("distributed_type"), "MEGATRON_LM");
    assert_eq!(get("num_processes"), "16");
    assert_eq!(get("num_machines"), "2");
    assert_eq!(get("mixed_precision"), "bf16");
    assert_eq!(get("megatron_lm_tp_degree"), "2");
    assert_eq!(get("megatron_lm_pp_degree"), "1");
    assert_eq!(
        get("megatron_lm_num_micro_batches"),
        p.grad_accum.to_string()
    );
    let (p, t) = plan(
        Pins {
            tp: Some(1),
            pp: Some(1),
            zero: Some(2),
            ..Pins::default()
        },
        16,
    );
    let y = accelerate(&p, &job(&t));
    assert!(y.contains("distributed_type: DEEPSPEED"));
    assert!(y.contains("  zero_stage: 2"));
    assert!(y.contains("  offload_optimizer_device: none"));
}

#[test]
fn torchrun_fsdp2_command() {
    let (p, t) = plan(
        Pins {
            tp: Some(1),
            pp: Some(1),
            zero: Some(3),
            ..Pins::default()
        },
        16,
    );
    let s = torchrun(&p, &job(&t));
    assert!(s.starts_with("torchrun --nnodes 2 --nproc-per-node 8 "));
    assert!(s.contains("fully_shard(model, mesh=mesh, reshard_after_forward=True"));
    assert!(s.contains("MixedPrecisionPolicy(param_dtype=torch.bfloat16"));
}
