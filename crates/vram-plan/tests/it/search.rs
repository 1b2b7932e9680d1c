//! The search: hand-checked FLOPs, bubble, pins, exact global batch, "nothing fits".

use vram_model::catalog;
use vram_model::hf;
use vram_model::setup::{AmpStyle, Attention, Offload, Optimizer, Precision, Recompute, Schedule};
use vram_plan::cluster::Cluster;
use vram_plan::cost::{step_time, token_flops, Calibration, Config};
use vram_plan::{search, Pins, RecomputeChoice, Request, Stack};

fn gpt(h: u64, l: u64, a: u64) -> vram_model::arch::Model {
    let cfg = format!(
        r#"{{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":{h},"n_layer":{l},"n_head":{a}}}"#
    );
    hf::parse_config(&cfg, "gpt").unwrap()
}

#[test]
fn hardware_flops_equal_megatron_formula() {
    // Narayanan et al. 2021, appendix: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per step with
    // full recomputation. 1.7B row: B = 512, s = 2048, l = 24, h = 2304, V = 51200.
    let (b, s, l, h, v) = (512.0, 2048.0, 24.0, 2304.0, 51200.0);
    let f = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
    let mut req = Request::new(
        gpt(2304, 24, 24),
        Cluster::for_gpu("a100-80g", 32).unwrap(),
        512,
        2048,
    );
    req.pins = Pins {
        tp: Some(1),
        pp: Some(1),
        recompute: Some(RecomputeChoice::Full),
        ..Pins::default()
    };
    req.top = 1;
    let p = &search(&req, &mut |_| {}).unwrap().plans[0];
    assert!(
        (p.time.hardware_flops / f - 1.0).abs() < 1e-9,
        "{} vs {f}",
        p.time.hardware_flops
    );
    // Model FLOPs drop the recomputed forward: 72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V.
    let m = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h)) + 6.0 * b * s * h * v;
    assert!((p.time.model_flops / m - 1.0).abs() < 1e-9);
}

#[test]
fn token_flops_of_llama_count_gated_mlp_and_gqa() {
    // Llama-2-70B: h 8192, 64 heads of 128, 8 KV heads, f 28672, 80 layers, V 32000.
    // Matmuls per layer: 2·(h·(q + 2kv) + q·h + 3·h·f) with q = 8192, kv = 1024.
    let t = match catalog::lookup("llama-2-70b").unwrap() {
        vram_model::arch::Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let f = token_flops(&t, 4096);
    let h = 8192.0;
    let want = 2.0 * (h * (8192.0 + 2048.0) + 8192.0 * h + 3.0 * h * 28672.0);
    assert_eq!(f.layer_matmul, want);
    assert_eq!(f.layer_attention, 4.0 * 4096.0 * 8192.0);
    assert_eq!(f.head, 2.0 * h * 32000.0);
    // 6·N per token is the usual shorthand: within 5 % of 3·forward without attention.
    let n = t.param_count() as f64;
    let dense = 3.0 * (80.0 * f.layer_matmul + f.head);
    assert!((dense / (6.0 * n) - 1.0).abs() < 0.05);
}

fn cfg(pp: u64, m: u64, schedule: Schedule) -> Config {
    Config {
        tp: 8,
        pp,
        dp: 1,
        micro_batch: 1,
        grad_accum: m,
        zero: 0,
        offload: Offload::None,
        recompute: Recompute::None,
        recompute_layers: None,
        sequence_parallel: false,
        schedule,
        amp_style: AmpStyle::Megatron,
        precision: Precision::Bf16Amp,
        stack: Stack::Megatron,
        optimizer: Optimizer::Adamw,
    }
}

#[test]
fn bubble_fractions_follow_the_schedules() {
    // Narayanan et al. 2021 §2.2: bubble = (p−1)/m of the ideal time for 1F1B (and GPipe),
    // (p−1)/(v·m) for interleaving with v chunks. Here p = 4, m = 8, v = 2.
    let t = match gpt(12288, 96, 96) {
        vram_model::arch::Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let c = Cluster::for_gpu("a100-80g", 32).unwrap();
    let cal = Calibration::default();
    for (schedule, want) in [
        (Schedule::OneFOneB, 3.0 / 8.0),
        (Schedule::Gpipe, 3.0 / 8.0),
        (Schedule::Interleaved(2), 3.0 / 16.0),
    ] {
        let s = step_time(&t, &c, &cal, Attention::Sdpa, 2048, &cfg(4, 8, schedule));
        let steady = s.total_s - s.bubble_s - s.dp_comm_s - s.optimizer_s - s.offload_s;
        assert!((s.bubble_s / steady - want).abs() < 1e-9, "{schedule:?}");
    }
}

fn request() -> Request {
    Request::new(
        catalog::lookup("llama-2-13b").unwrap(),
        Cluster::for_gpu("h100-80g", 32).unwrap(),
        192,
        4096,
    )
}

#[test]
fn plans_meet_the_global_batch_and_pins() {
    let mut req = request();
    let out = search(&req, &mut |_| {}).unwrap();
    assert_eq!(out.plans.len(), 10);
    for p in &out.plans {
        assert_eq!(p.tp * p.pp * p.dp, 32);
        assert_eq!(p.dp * p.micro_batch * p.grad_accum, 192);
        assert!(p.peak_bytes_per_gpu <= req.cluster.gpu.memory_bytes);
    }
    assert!(out
        .plans
        .windows(2)
        .all(|w| w[0].step_time_s <= w[1].step_time_s));
    // Selective recomputation and sequence parallelism are Megatron-LM's.
    req.stack = Stack::Megatron;
    req.pins = Pins {
        tp: Some(4),
        pp: Some(2),
        micro_batch: Some(1),
        recompute: Some(RecomputeChoice::Selective),
        sequence_parallel: Some(true),
        schedule: Some(Schedule::Interleaved(2)),
        zero: Some(1),
        ..Pins::default()
    };
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(!out.plans.is_empty());
    for p in &out.plans {
        assert_eq!(
            (p.tp, p.pp, p.dp, p.micro_batch, p.grad_accum),
            (4, 2, 4, 1, 48)
        );
        assert_eq!(p.recompute, Recompute::Selective);
        assert!(p.sequence_parallel);
        assert_eq!(p.schedule, Schedule::Interleaved(2));
        assert_eq!(p.zero_stage, 1);
    }
}

#[test]
fn search_is_deterministic_and_reports_progress() {
    let req = request();
    let mut calls = Vec::new();
    let a = search(&req, &mut |p| calls.push(p)).unwrap();
    let b = search(&req, &mut |_| {}).unwrap();
    assert_eq!(a, b);
    let last = calls.last().unwrap();
    assert!(last.done <= last.total && last.total == a.candidates);
}

#[test]
fn optimal_recompute_is_the_fewest_layers_that_fit() {
    // Pinned "optimal" on a setup that needs some recomputation: the plan recomputes k layers
    // per stage, k − 1 would not fit (checked with the estimator directly).
    let mut req = Request::new(
        catalog::lookup("llama-2-7b").unwrap(),
        Cluster::for_gpu("a100-80g", 8).unwrap(),
        64,
        4096,
    );
    req.pins = Pins {
        tp: Some(1),
        pp: Some(1),
        zero: Some(1),
        micro_batch: Some(2),
        recompute: Some(RecomputeChoice::Optimal),
        ..Pins::default()
    };
    req.top = 1;
    // Some layers recomputed: Megatron-LM's `--recompute-method block`.
    req.stack = Stack::Megatron;
    let p = search(&req, &mut |_| {}).unwrap().plans[0].clone();
    let k = p.recompute_layers.expect("a layer count");
    assert!((1..32).contains(&k), "{}", p.label());
    let setup = |layers: Option<u64>, rc: Recompute| vram_model::setup::Setup {
        parallel: vram_model::setup::Parallel {
            dp: 8,
            zero: 1,
            ..Default::default()
        },
        mode: vram_model::setup::Mode::Train(vram_model::setup::Train {
            micro_batch: 2,
            seq: 4096,
            grad_accum: 4,
            recompute: rc,
            recompute_layers: layers,
            // Megatron-LM's own layout (half weights, fp32 main gradients).
            amp_style: Some(AmpStyle::Megatron),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cap = req.cluster.gpu.memory_bytes;
    let fits = |l: Option<u64>, rc| {
        vram_model::estimate(&req.model, &setup(l, rc))
            .unwrap()
            .fits(cap)
    };
    assert!(fits(Some(k), Recompute::Full));
    assert!(!fits(None, Recompute::None));
    if k > 1 {
        assert!(!fits(Some(k - 1), Recompute::Full));
    }
}

#[test]
fn nothing_fits_is_a_result_with_advice() {
    // Llama-2-70B on one RTX 4090 (24 GiB): 70B parameters cannot fit; 16 bytes each under
    // Adam alone is 1.1 TB.
    let req = Request::new(
        catalog::lookup("llama-2-70b").unwrap(),
        Cluster::from_preset(vram_plan::cluster::preset("workstation").unwrap(), None, 1).unwrap(),
        8,
        4096,
    );
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(out.plans.is_empty());
    let closest = out.closest.unwrap();
    assert!(closest.peak_bytes_per_gpu > req.cluster.gpu.memory_bytes);
    assert!(out.suggestions[0].contains("needs"));
    assert!(out.suggestions.iter().any(|s| s.contains("GPUs would fit")));
}

#[test]
fn inconsistent_pins_are_an_error() {
    let mut req = request();
    req.pins = Pins {
        tp: Some(8),
        pp: Some(8),
        dp: Some(8),
        ..Pins::default()
    };
    assert!(search(&req, &mut |_| {}).is_err());
    let mut req = request();
    req.pins.tp = Some(3); // 40 heads, 32 GPUs: no such layout
    assert!(search(&req, &mut |_| {}).is_err());
}

#[test]
fn offload_respects_host_memory() {
    // A 1T model's optimizer states (12 bytes/param = 12 TB) do not fit the 2 TB of one DGX
    // when sharded over only 8 GPUs: no plan may offload there.
    let cfg = r#"{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":25600,"n_layer":128,"n_head":160}"#;
    let mut req = Request::new(
        hf::parse_config(cfg, "gpt-1t").unwrap(),
        Cluster::for_gpu("a100-80g", 8).unwrap(),
        8,
        2048,
    );
    req.pins.offload = Some(Offload::Optimizer);
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(out.plans.is_empty());
    assert!(out.suggestions[0].contains("host memory"));
}

/// A Hugging Face model runs whole on every GPU under DeepSpeed, accelerate and torchrun: the
/// transformers stack plans no pipeline stage, refuses one pinned (naming `--stack megatron`),
/// and where only Megatron-LM's layouts fit, says so.
#[test]
fn the_transformers_stack_plans_no_pipeline() {
    let mut req = request();
    req.top = 200;
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(!out.plans.is_empty());
    assert!(
        out.plans.iter().all(|p| p.pp == 1),
        "a pipeline was planned"
    );
    req.stack = Stack::Megatron;
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(
        out.plans.iter().any(|p| p.pp > 1),
        "megatron plans pipelines"
    );
    for (pp, schedule) in [(Some(2), None), (None, Some(Schedule::Gpipe))] {
        let mut req = request();
        req.pins.pp = pp;
        req.pins.schedule = schedule;
        let e = search(&req, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("needs --stack megatron"), "{e}");
    }
    let mut req = request();
    req.pins.pp = Some(1);
    req.pins.schedule = Some(Schedule::OneFOneB);
    assert!(!search(&req, &mut |_| {}).unwrap().plans.is_empty());
    // Llama-3-70B on 64 RTX 4090s without offload: no layout a Hugging Face model runs fits
    // 24 GiB, Megatron-LM's pipelines with sequence parallelism do.
    let mut req = Request::new(
        catalog::lookup("llama-3-70b").unwrap(),
        Cluster::for_gpu("rtx-4090", 64).unwrap(),
        64,
        4096,
    );
    req.pins.offload = Some(Offload::None);
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(out.plans.is_empty());
    let line = out
        .suggestions
        .iter()
        .find(|s| s.starts_with("Megatron-LM would fit it on these 64 GPUs (--stack megatron"))
        .unwrap_or_else(|| panic!("{:?}", out.suggestions));
    assert!(line.contains(" pp") && !line.contains(" pp1 "), "{line}");
}

#[test]
fn gpipe_only_when_pinned() {
    // GPipe has 1F1B's bubble (Narayanan et al. 2021 §2.2) and holds all m micro-batches'
    // activations instead of at most p, so the unpinned search never lists it.
    let mut req = request();
    req.stack = Stack::Megatron;
    req.pins.pp = Some(4);
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(out.plans.iter().all(|p| p.schedule != Schedule::Gpipe));
    req.pins.schedule = Some(Schedule::Gpipe);
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(!out.plans.is_empty());
    assert!(out.plans.iter().all(|p| p.schedule == Schedule::Gpipe));
}

#[test]
fn precision_is_searched_when_asked() {
    // Pure bf16 drops the fp32 master weights (4 bytes per parameter) and keeps bf16 Adam
    // states, so the same configuration needs less memory than bf16 AMP at the same speed;
    // fp32 runs at the A100's 19.5 fp32 TFLOP/s instead of 312, so it is far slower.
    let mut req = Request::new(
        catalog::lookup("llama-2-7b").unwrap(),
        Cluster::for_gpu("a100-80g", 8).unwrap(),
        64,
        2048,
    );
    req.precisions = vec![Precision::Bf16Amp, Precision::Bf16, Precision::Fp32];
    req.pins = Pins {
        tp: Some(1),
        pp: Some(1),
        zero: Some(3),
        micro_batch: Some(1),
        recompute: Some(RecomputeChoice::Full),
        offload: Some(Offload::None),
        ..Pins::default()
    };
    req.top = 3;
    let out = search(&req, &mut |_| {}).unwrap();
    let by = |p: Precision| out.plans.iter().find(|x| x.precision == p).unwrap();
    let (amp, pure, fp32) = (
        by(Precision::Bf16Amp),
        by(Precision::Bf16),
        by(Precision::Fp32),
    );
    assert!(pure.peak_bytes_per_gpu < amp.peak_bytes_per_gpu);
    assert!(fp32.step_time_s > 5.0 * amp.step_time_s);
    assert!(pure.label().contains("pure-bf16"));
    req.precisions.clear();
    assert!(search(&req, &mut |_| {}).is_err());
}

#[test]
fn equally_fast_plans_rank_by_memory() {
    // Llama-3-8B on 8 H100s: ZeRO stages whose communication the model hides tie on time;
    // the one with the most headroom must come first.
    let mut req = Request::new(
        catalog::lookup("llama-3-8b").unwrap(),
        Cluster::for_gpu("h100-80g", 8).unwrap(),
        64,
        4096,
    );
    req.top = 6;
    let plans = search(&req, &mut |_| {}).unwrap().plans;
    assert!(plans.len() >= 2);
    for w in plans.windows(2) {
        assert!(
            w[0].step_time_s < w[1].step_time_s
                || (w[0].step_time_s == w[1].step_time_s
                    && w[0].peak_bytes_per_gpu <= w[1].peak_bytes_per_gpu),
            "ranked by time, then memory"
        );
    }
}

/// The transformers stack (a Hugging Face model: every layer recomputed or none) offers no plan
/// with some layers or only the attention core recomputed, nor sequence parallelism, and
/// refuses those pins in one line; the Megatron stack keeps them.
#[test]
fn the_transformers_stack_plans_only_what_hugging_face_models_run() {
    let mut req = Request::new(
        catalog::lookup("llama-3-70b").unwrap(),
        Cluster::for_gpu("h100-80g", 8).unwrap(),
        64,
        4096,
    );
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(!out.plans.is_empty());
    for p in &out.plans {
        assert!(
            p.recompute != Recompute::Selective
                && p.recompute_layers.is_none()
                && !p.sequence_parallel,
            "{}",
            p.label()
        );
    }
    for pins in [
        Pins {
            recompute: Some(RecomputeChoice::Selective),
            ..Pins::default()
        },
        Pins {
            recompute: Some(RecomputeChoice::Optimal),
            ..Pins::default()
        },
        Pins {
            sequence_parallel: Some(true),
            ..Pins::default()
        },
    ] {
        req.pins = pins;
        let e = search(&req, &mut |_| {}).unwrap_err().to_string();
        assert!(
            e.contains("needs --stack megatron") && !e.contains('\n') && !e.contains("  "),
            "{e}"
        );
    }
    req.stack = Stack::Megatron;
    req.pins = Pins::default();
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(
        out.plans
            .iter()
            .any(|p| p.recompute == Recompute::Selective || p.recompute_layers.is_some()),
        "{:?}",
        out.plans.iter().map(|p| p.label()).collect::<Vec<_>>()
    );
}

/// A Hugging Face model's tensor parallelism gives each rank whole key-value heads
/// (transformers 5.24's tensor-parallel plan shards `k_proj` colwise; DeepSpeed's AutoTP leaves
/// ranks beyond the heads without a shard): with 2 key-value heads the transformers stack plans
/// tp 1 or 2 and refuses a pinned tp 4 naming Megatron-LM, which replicates the heads.
#[test]
fn the_transformers_stack_splits_whole_key_value_heads() {
    let cfg = r#"{"model_type":"llama","vocab_size":32000,"hidden_size":2048,"intermediate_size":8192,
        "num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":2,"max_position_embeddings":4096}"#;
    let model = hf::parse_config(cfg, "kv2").unwrap();
    let mut req = Request::new(model, Cluster::for_gpu("h100-80g", 8).unwrap(), 64, 4096);
    req.top = 200;
    let out = search(&req, &mut |_| {}).unwrap();
    assert!(out.plans.iter().any(|p| p.tp == 2));
    assert!(
        out.plans.iter().all(|p| p.tp <= 2),
        "a tp above the kv heads"
    );
    req.pins.tp = Some(4);
    let e = search(&req, &mut |_| {}).unwrap_err().to_string();
    assert!(
        e.contains("--tp 4 needs --stack megatron") && e.contains("has 2") && !e.contains("  "),
        "{e}"
    );
    req.stack = Stack::Megatron;
    assert!(search(&req, &mut |_| {})
        .unwrap()
        .plans
        .iter()
        .all(|p| p.tp == 4));
}
