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
    // Selective or some-layer recomputation, sequence parallelism and pipelines are
    // Megatron-LM's (`Stack::partial_recompute`, `Stack::pipeline`): pinned, they are searched
    // on its stack.
    if matches!(
        pins.recompute,
        Some(RecomputeChoice::Selective | RecomputeChoice::Optimal)
    ) || pins.sequence_parallel == Some(true)
        || pins.pp.is_some_and(|pp| pp > 1)
    {
        req.stack = vram_plan::Stack::Megatron;
    }
    req.pins = pins;
    req.top = 1;
    (search(&req, &mut |_| {}).unwrap().plans[0].clone(), t)
}

fn job(t: &Transformer) -> Job<'_> {
    job_on(t, vram_plan::Stack::Transformers)
}

fn job_on(t: &Transformer, stack: vram_plan::Stack) -> Job<'_> {
    Job {
        model: t,
        global_batch: 256,
        seq: 4096,
        gpus_per_node: 8,
        config: catalog::config_text("llama-2-13b"),
        stack,
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
    let y = accelerate(&p, &job_on(&t, vram_plan::Stack::Megatron));
    let get = |k: &str| {
        y.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k} in\n{y}"))
            .to_string()
    };
    assert_eq!(get("distributed_type"), "MEGATRON_LM");
    assert_eq!(get("num_processes"), "16");
    assert_eq!(get("num_machines"), "2");
    // Quoted: PyYAML reads a bare `no` (fp32) as false; accelerate wants the string.
    assert_eq!(get("mixed_precision"), "'bf16'");
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

// ---- What each engine refuses (issue 15). Each rule is quoted from the engine's source, at the
// versions the acceptance tests in tests/engines install: DeepSpeed 0.19.8
// (runtime/pipe/engine.py, runtime/engine.py), Megatron-LM megatron/training/arguments.py
// (main, 2026-08-22) with megatron-core 0.16.1 (TransformerConfig, OptimizerConfig), accelerate
// 1.15.0 (utils/dataclasses.py MegatronLMPlugin, commands/launch.py).

use vram_model::setup::{Offload, Precision, Recompute, Schedule};
use vram_plan::emit::{check, emit, Engine};
use vram_plan::Stack;

fn refused(engine: Engine, p: &Plan, t: &Transformer, needle: &str) {
    refused_on(Stack::Transformers, engine, p, t, needle)
}

fn refused_on(stack: Stack, engine: Engine, p: &Plan, t: &Transformer, needle: &str) {
    let job = |t| job_on(t, stack);
    let r = check(engine, p, &job(t)).expect_err("the engine should refuse this plan");
    assert_eq!(r.engine, engine);
    assert!(r.rule.contains(needle), "{needle:?} not in {:?}", r.rule);
    assert!(!r.to_string().contains('\n'), "one line: {r}");
    // emit() refuses with the same rule and writes nothing.
    assert_eq!(emit(engine, p, &job(t)).unwrap_err(), r);
}

fn accepted(engine: Engine, p: &Plan, t: &Transformer) -> String {
    accepted_on(Stack::Transformers, engine, p, t)
}

fn accepted_on(stack: Stack, engine: Engine, p: &Plan, t: &Transformer) -> String {
    emit(engine, p, &job_on(t, stack)).unwrap_or_else(|r| panic!("{r}"))
}

fn base() -> (Plan, Transformer) {
    plan(
        Pins {
            tp: Some(1),
            pp: Some(1),
            zero: Some(3),
            ..Pins::default()
        },
        16,
    )
}

/// DeepSpeed 0.19.8 pipelines only a `PipelineModule` (`deepspeed.initialize`), which a Hugging
/// Face model is not, whatever the ZeRO stage or schedule; the torchrun + FSDP2 snippet shards a
/// whole model. Both refuse a pipeline (the transformers stack never plans one; a plan made on
/// Megatron-LM's stack is not written for them).
#[test]
fn deepspeed_and_torchrun_refuse_pipelines_and_deepspeed_misplaced_offload() {
    let (mut p, t) = base();
    accepted(Engine::Deepspeed, &p, &t);
    accepted(Engine::Torchrun, &p, &t);
    p.pp = 2;
    for schedule in [
        Schedule::OneFOneB,
        Schedule::Gpipe,
        Schedule::Interleaved(2),
    ] {
        p.schedule = schedule;
        for z in [0, 1, 2, 3] {
            p.zero_stage = z;
            refused(Engine::Deepspeed, &p, &t, "pipelines only a PipelineModule");
        }
        p.zero_stage = 1;
        refused(
            Engine::Torchrun,
            &p,
            &t,
            "shards a whole Hugging Face model",
        );
    }
    p.schedule = Schedule::OneFOneB;
    p.pp = 1;
    // offload_param reaches only the stage-3 optimizer.
    p.offload = Offload::Params;
    for z in [0, 1, 2] {
        p.zero_stage = z;
        refused(Engine::Deepspeed, &p, &t, "only under ZeRO-3");
    }
    p.zero_stage = 3;
    let v: serde_json::Value = serde_json::from_str(&accepted(Engine::Deepspeed, &p, &t)).unwrap();
    assert_eq!(v["zero_optimization"]["offload_param"]["device"], "cpu");
    // Optimizer offload needs a ZeRO optimizer.
    p.offload = Offload::Optimizer;
    p.zero_stage = 0;
    refused(Engine::Deepspeed, &p, &t, "ZeRO-0 would ignore");
    p.zero_stage = 1;
    accepted(Engine::Deepspeed, &p, &t);
}

#[test]
fn megatron_refuses_what_validate_args_and_transformer_config_refuse() {
    // llama-2-13b: 40 layers, 40 heads, 40 KV heads, untied embeddings.
    let (mut p, t) = base();
    let ty = t.blocks.typical();
    assert_eq!((t.layers(), ty.heads, ty.kv_heads), (40, 40, 40));
    p.zero_stage = 1;
    p.pp = 3; // 40 % 3 != 0
    refused(
        Engine::Megatron,
        &p,
        &t,
        "divisible by the pipeline-model-parallel size",
    );
    p.pp = 4;
    p.schedule = Schedule::Interleaved(4); // 10 layers per stage, 4 chunks
    refused(Engine::Megatron, &p, &t, "virtual pipeline stage");
    p.schedule = Schedule::Interleaved(2); // 5 layers per chunk
    let s = accepted(Engine::Megatron, &p, &t);
    assert!(
        s.contains("--num-layers-per-virtual-pipeline-stage 5"),
        "{s}"
    );
    p.pp = 1;
    p.schedule = Schedule::OneFOneB;
    p.tp = 3; // 40 heads % 3 != 0
    refused(Engine::Megatron, &p, &t, "num_attention_heads (40)");
    p.tp = 8;
    accepted(Engine::Megatron, &p, &t);
    // ZeRO-3 is Megatron-LM's FSDP2 path: no pipelines, no fp16, untied embeddings.
    p.tp = 2;
    p.zero_stage = 3;
    let s = accepted(Engine::Megatron, &p, &t);
    for arg in [
        "--use-torch-fsdp2",
        "--untie-embeddings-and-output-weights",
        "--ckpt-format torch_dist",
        "--no-gradient-accumulation-fusion",
    ] {
        assert!(s.contains(arg), "missing {arg} in\n{s}");
    }
    p.pp = 2;
    refused(
        Engine::Megatron,
        &p,
        &t,
        "not supported with pipeline parallelism",
    );
    p.pp = 1;
    p.precision = Precision::Fp16Amp;
    refused(Engine::Megatron, &p, &t, "not supported with fp16");
    p.precision = Precision::Bf16Amp;
    let gpt2 = match catalog::lookup("gpt2-xl").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    assert!(gpt2.blocks.head.tied);
    p.tp = 1;
    refused(Engine::Megatron, &p, &gpt2, "untie-embeddings");
    // Offload: optimizer states through the distributed optimizer only; parameters never.
    p.offload = Offload::Optimizer;
    refused(Engine::Megatron, &p, &t, "only with distributed optimizer");
    p.zero_stage = 0;
    refused(Engine::Megatron, &p, &t, "only with distributed optimizer");
    p.zero_stage = 2;
    let s = accepted(Engine::Megatron, &p, &t);
    assert!(s.contains("--optimizer-cpu-offload \\\n--use-precision-aware-optimizer"));
    assert!(s.contains("--use-distributed-optimizer"));
    p.offload = Offload::Params;
    refused(Engine::Megatron, &p, &t, "no parameter offload");
    // Sequence parallelism is dropped at tp 1 (megatron-core refuses it there).
    p.offload = Offload::None;
    p.sequence_parallel = true;
    assert!(!accepted(Engine::Megatron, &p, &t).contains("--sequence-parallel"));
    p.tp = 2;
    assert!(accepted(Engine::Megatron, &p, &t).contains("--sequence-parallel"));
}

#[test]
fn accelerate_megatron_lm_writes_only_full_recompute_and_zero_1_2() {
    let (mut p, t) = base();
    p.tp = 2;
    p.zero_stage = 1;
    p.recompute = Recompute::Full;
    p.recompute_layers = Some(3);
    let y = accepted_on(Stack::Megatron, Engine::Accelerate, &p, &t);
    for line in [
        "distributed_type: MEGATRON_LM",
        "  megatron_lm_recompute_granularity: full",
        "  megatron_lm_recompute_method: block",
        "  megatron_lm_recompute_num_layers: 3",
        "  megatron_lm_use_distributed_optimizer: true",
    ] {
        assert!(y.lines().any(|l| l == line), "missing {line:?} in\n{y}");
    }
    for r in [Recompute::None, Recompute::Selective] {
        p.recompute = r;
        p.recompute_layers = None;
        refused_on(
            Stack::Megatron,
            Engine::Accelerate,
            &p,
            &t,
            "only full recomputation",
        );
    }
    p.recompute = Recompute::Full;
    p.zero_stage = 3;
    refused_on(
        Stack::Megatron,
        Engine::Accelerate,
        &p,
        &t,
        "no ZeRO-3 setting",
    );
    p.zero_stage = 1;
    p.pp = 4;
    p.schedule = Schedule::Interleaved(2);
    refused_on(
        Stack::Megatron,
        Engine::Accelerate,
        &p,
        &t,
        "virtual pipeline",
    );
    // Without tp/pp accelerate hands ZeRO to DeepSpeed, and DeepSpeed's rules apply.
    let (mut p, t) = base();
    p.offload = Offload::Params;
    p.zero_stage = 2;
    refused(Engine::Accelerate, &p, &t, "only under ZeRO-3");
    p.zero_stage = 0;
    p.offload = Offload::Optimizer;
    refused(Engine::Accelerate, &p, &t, "drop the offload");
}

#[test]
fn torchrun_snippet_is_python_after_the_prefix() {
    let (mut p, t) = base();
    p.precision = Precision::Fp32;
    let s = accepted(Engine::Torchrun, &p, &t);
    let py: Vec<&str> = s
        .lines()
        .skip(2)
        .map(|l| l.strip_prefix("# ").unwrap())
        .collect();
    assert!(py.contains(&"mp = MixedPrecisionPolicy()"), "{s}");
    assert!(py
        .iter()
        .any(|l| l.starts_with("fully_shard(model, mesh=mesh")));
    p.precision = Precision::Fp16Amp;
    let s = accepted(Engine::Torchrun, &p, &t);
    assert!(s.contains("MixedPrecisionPolicy(param_dtype=torch.float16"));
}

/// meta-llama/Llama-3.1-8B's config.json, as published (tests/engines/data/configs has the copy
/// the engine tests build it from).
const LLAMA_3_1_8B: &str = include_str!("../../../../tests/engines/data/configs/llama-3.1-8b.json");

#[test]
fn megatron_arguments_build_llama_3_1_8b_not_gpt_2() {
    // Megatron-LM's defaults are GPT-2's (biases on every linear layer, rotary base 10000, no
    // scaling): each way Llama 3.1 differs is written.
    let s = megatron_script(LLAMA_3_1_8B, "llama-3.1-8b");
    let args: Vec<&str> = s.lines().map(|l| l.trim_end_matches(" \\")).collect();
    for arg in [
        "--disable-bias-linear",
        "--rotary-base 500000",
        "--use-rope-scaling",
        "--rope-scaling-factor 8",
        "--normalization RMSNorm",
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--group-query-attention",
        "--num-query-groups 8",
        "--ffn-hidden-size 14336",
        "--make-vocab-size-divisible-by 128",
    ] {
        assert!(args.contains(&arg), "missing {arg} in\n{s}");
    }
    assert!(!s.contains("--add-qkv-bias"), "{s}");
    // 128,256 = 501 × 256: no padding at tp 2 (Megatron-LM pads to 128 × tp).
    assert!(s.contains("128256 tokens"), "{s}");
    assert!(s.contains("padded by Megatron-LM to 128256"), "{s}");
    assert_eq!(vram_plan::emit::megatron_padded_vocab(50257, 1), 50304);
    assert_eq!(vram_plan::emit::megatron_padded_vocab(50257, 2), 50432);
}

#[test]
fn megatron_is_not_emitted_for_models_its_gpt_model_builds_differently() {
    // Gemma's gate is GeLU (Megatron-LM's --swiglu is SiLU); Pythia adds attention and MLP in
    // parallel; BERT has an encoder.
    for (id, rule) in [
        ("gemma-7b", "gelu_pytorch_tanh"),
        ("pythia-1.4b", "in parallel"),
        ("bert-base-uncased", "encoder"),
        ("gemma-2-9b", "norms"),
    ] {
        let model = catalog::lookup(id).unwrap();
        let Model::Transformer(t) = &model else {
            unreachable!()
        };
        let mut req = Request::new(
            model.clone(),
            Cluster::for_gpu("h100-80g", 16).unwrap(),
            256,
            1024,
        );
        req.top = 1;
        let p = search(&req, &mut |_| {}).unwrap().plans[0].clone();
        let job = Job {
            config: catalog::config_text(id),
            stack: vram_plan::Stack::Megatron,
            ..job(t)
        };
        let e = vram_plan::emit::check(vram_plan::emit::Engine::Megatron, &p, &job).unwrap_err();
        assert!(e.rule.contains(rule), "{id}: {e}");
    }
}

/// Megatron-LM's flags (tests/engines/data/megatron-lm-flags.txt, read from its parser at the
/// commit named there).
const MEGATRON_FLAGS: &str = include_str!("../../../../tests/engines/data/megatron-lm-flags.txt");
/// mistralai/Mistral-7B-v0.1's shape as the engine tests build it (sliding_window 4096, no
/// `rms_norm_eps`: `MistralConfig`'s default 1e-6).
const MISTRAL_7B: &str = include_str!("../../../../tests/engines/data/configs/mistral-7b.json");

/// The Megatron-LM script of the best plan for `config` (Hugging Face's config.json text) on 16
/// H100 80GB, 256 sequences of 4096 tokens a step, pinned to TP 2, PP 1 and ZeRO 1.
fn megatron_script(config: &'static str, name: &str) -> String {
    let model = vram_model::hf::parse_config(config, name).unwrap();
    let Model::Transformer(t) = &model else {
        unreachable!()
    };
    let mut req = Request::new(
        model.clone(),
        Cluster::for_gpu("h100-80g", 16).unwrap(),
        256,
        4096,
    );
    req.pins = Pins {
        tp: Some(2),
        pp: Some(1),
        zero: Some(1),
        ..Pins::default()
    };
    req.top = 1;
    let p = search(&req, &mut |_| {}).unwrap().plans[0].clone();
    let job = Job {
        config: Some(config),
        stack: vram_plan::Stack::Megatron,
        ..job(t)
    };
    vram_plan::emit::emit(vram_plan::emit::Engine::Megatron, &p, &job).unwrap()
}

/// The arguments of `megatron_script`, each checked to be one of Megatron-LM's flags.
fn megatron_args_of(config: &'static str, name: &str) -> Vec<String> {
    let s = megatron_script(config, name);
    let flags: Vec<&str> = MEGATRON_FLAGS
        .lines()
        .filter(|l| l.starts_with("--"))
        .collect();
    let args: Vec<String> = s
        .lines()
        .filter(|l| l.starts_with("--"))
        .map(|l| l.trim_end_matches(" \\").to_string())
        .collect();
    for a in &args {
        let flag = a.split(' ').next().unwrap();
        assert!(flags.contains(&flag), "{flag} is not a Megatron-LM flag");
    }
    args
}

/// The norms' epsilon and the sliding window are Megatron-LM arguments (`--norm-epsilon`,
/// `--window-size`): Mistral 7B's RMSNorm epsilon is `MistralConfig`'s 1e-6 (Megatron's default
/// is 1e-5) and it attends to the last 4096 keys, which megatron-core's `(left, right)` window
/// writes as `4095,0`. Llama 3.1 8B's epsilon is Megatron's default and it has no window.
#[test]
fn megatron_writes_the_norm_epsilon_and_the_sliding_window() {
    let mistral = megatron_args_of(MISTRAL_7B, "mistral-7b");
    for arg in ["--norm-epsilon 0.000001", "--window-size 4095,0"] {
        assert!(
            mistral.iter().any(|a| a == arg),
            "missing {arg}: {mistral:?}"
        );
    }
    assert!(!mistral
        .iter()
        .any(|a| a.starts_with("--window-attn-skip-freq")));
    let llama = megatron_args_of(LLAMA_3_1_8B, "llama-3.1-8b");
    assert!(
        !llama
            .iter()
            .any(|a| a.starts_with("--norm-epsilon") || a.starts_with("--window")),
        "{llama:?}"
    );
}

/// A Hugging Face model recomputes every layer or none (`gradient_checkpointing_enable`), and
/// DeepSpeed's `number_checkpoints` selects no layers: the stacks that run one refuse a plan with
/// some layers or only the attention core recomputed, or Megatron's sequence parallelism, and
/// Megatron-LM writes it.
#[test]
fn hugging_face_stacks_refuse_partial_and_selective_recompute() {
    let (mut p, t) = base();
    p.recompute = Recompute::Full;
    p.recompute_layers = None;
    for e in [Engine::Deepspeed, Engine::Accelerate, Engine::Torchrun] {
        let s = accepted(e, &p, &t);
        assert!(!s.contains("number_checkpoints"), "{s}");
    }
    p.recompute_layers = Some(20);
    for e in [Engine::Deepspeed, Engine::Accelerate, Engine::Torchrun] {
        refused(e, &p, &t, "every layer or none");
    }
    p.recompute_layers = None;
    p.recompute = Recompute::Selective;
    for e in [Engine::Deepspeed, Engine::Accelerate, Engine::Torchrun] {
        refused(e, &p, &t, "every layer or none");
    }
    p.zero_stage = 1;
    let s = accepted(Engine::Megatron, &p, &t);
    assert!(s.contains("--recompute-granularity selective"), "{s}");
}

/// A tensor-parallel plan of the transformers stack is written as a route that shards a Hugging
/// Face model runs it: torchrun with transformers 5.24's `DistributedConfig` (ZeRO-3 as its FSDP2
/// plan over `fsdp_size`, ZeRO-0 as replicas), DeepSpeed's AutoTP (any ZeRO stage); accelerate
/// 1.15's config file cannot load the model sharded, and its MEGATRON_LM type trains Megatron-LM's
/// own model, so it refuses and names both.
#[test]
fn transformers_stack_tensor_parallelism_is_written_as_a_real_route() {
    let (mut p, t) = base();
    p.tp = 2;
    p.dp = 8;
    let s = accepted(Engine::Torchrun, &p, &t);
    assert!(
        s.contains("# dc = DistributedConfig(tp_size=2, fsdp_size=8, fsdp_mixed_precision=True)"),
        "{s}"
    );
    assert!(s.contains("from_pretrained(model_id, distributed_config=dc, dtype=torch.float32)"));
    assert!(!s.contains("fully_shard"), "transformers shards it: {s}");
    let v: serde_json::Value = serde_json::from_str(&accepted(Engine::Deepspeed, &p, &t)).unwrap();
    assert_eq!(v["tensor_parallel"]["autotp_size"], 2);
    refused(Engine::Accelerate, &p, &t, "--emit torchrun");
    refused(Engine::Accelerate, &p, &t, "--emit deepspeed (AutoTP)");
    // The Megatron stack's plan is accelerate's MEGATRON_LM type.
    let mut q = p.clone();
    q.zero_stage = 1;
    q.recompute = Recompute::Full;
    let y = accepted_on(Stack::Megatron, Engine::Accelerate, &q, &t);
    assert!(y.contains("distributed_type: MEGATRON_LM"), "{y}");

    p.zero_stage = 0;
    let s = accepted(Engine::Torchrun, &p, &t);
    assert!(
        s.contains("DistributedConfig(tp_size=2, dp_replicate_size=8,"),
        "{s}"
    );
    for z in [1, 2] {
        p.zero_stage = z;
        refused(
            Engine::Torchrun,
            &p,
            &t,
            "reshards every layer after forward",
        );
        accepted(Engine::Deepspeed, &p, &t);
    }
    p.zero_stage = 3;
    p.offload = Offload::Optimizer;
    assert!(accepted(Engine::Torchrun, &p, &t).contains("fsdp_cpu_offload=True"));
    p.offload = Offload::None;
    p.precision = Precision::Fp16Amp;
    refused(Engine::Torchrun, &p, &t, "bf16 only");
    p.precision = Precision::Bf16;
    assert!(accepted(Engine::Torchrun, &p, &t).contains("dtype=torch.bfloat16"));
    // tp alone: no data-parallel ranks to shard over.
    p.dp = 1;
    p.zero_stage = 0;
    let s = accepted(Engine::Torchrun, &p, &t);
    assert!(s.contains("# dc = DistributedConfig(tp_size=2)\n"), "{s}");
    p.zero_stage = 1;
    p.offload = Offload::Optimizer;
    refused(Engine::Torchrun, &p, &t, "only over data-parallel ranks");
    // llama-2-13b has 40 heads: tp 16 splits some of them.
    p.offload = Offload::None;
    p.zero_stage = 0;
    p.tp = 16;
    refused(Engine::Torchrun, &p, &t, "splits whole heads");
}

/// transformers 5.24 shards only model types with a `base_model_tp_plan` (a composite model by
/// its text model's); GPT-2's config has none.
#[test]
fn torchrun_tensor_parallelism_needs_the_model_types_plan() {
    let (mut p, t) = base();
    p.tp = 2;
    p.dp = 8;
    let with = |config: &'static str| Job {
        config: Some(config),
        ..job(&t)
    };
    let r = check(Engine::Torchrun, &p, &with(r#"{"model_type": "gpt2"}"#)).unwrap_err();
    assert!(
        r.rule.contains("no base_model_tp_plan for model type gpt2"),
        "{r}"
    );
    assert!(r.rule.contains("--emit deepspeed"), "{r}");
    check(
        Engine::Torchrun,
        &p,
        &with(r#"{"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}"#),
    )
    .unwrap();
    let none = Job {
        config: None,
        ..job(&t)
    };
    let r = check(Engine::Torchrun, &p, &none).unwrap_err();
    assert!(r.rule.contains("no config.json model_type"), "{r}");
    assert_eq!(
        vram_plan::emit::tp_plan_model_type(Some(r#"{"model_type": "llama"}"#)),
        Ok("llama".into())
    );
}
