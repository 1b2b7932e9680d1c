//! The transformers stack against steps measured on an H100 (`tests/data/measured_steps.csv`,
//! `tests/data/measured_generate.csv`; sources in their headers): a plan pinned to each
//! measured setup must predict the measured step time within 10 % median and 30 % at worst;
//! `generate` calls bound it from above (first calls: nothing is fitted to them).
//!
//! The training cases are split (the CSV's `set` column): the fitted constants of
//! `EagerCalibration` are the best on the `fit` cases alone (checked here by refitting them),
//! and the `check` cases, which no constant saw, say how good the model is.

use vram_model::arch::Model;
use vram_model::hf;
use vram_model::setup::{Attention, Offload, Optimizer, Precision};
use vram_plan::cluster::Cluster;
use vram_plan::cost::Calibration;
use vram_plan::eager::{self, Stack};
use vram_plan::{search, Pins, Plan, RecomputeChoice, Request};

fn config(name: &str) -> Model {
    let text = match name {
        "gpt2.json" => include_str!("../data/configs/gpt2.json"),
        "gpt2-medium.json" => include_str!("../data/configs/gpt2-medium.json"),
        "bert-base-uncased.json" => include_str!("../data/configs/bert-base-uncased.json"),
        "roberta-base.json" => include_str!("../data/configs/roberta-base.json"),
        "t5-base.json" => include_str!("../data/configs/t5-base.json"),
        "pythia-1.4b.json" => include_str!("../data/configs/pythia-1.4b.json"),
        "llama-3-8b-L4.json" => include_str!("../data/configs/llama-3-8b-L4.json"),
        "llama-3-8b.json" => include_str!("../data/configs/llama-3-8b.json"),
        "mistral-7b-L4.json" => include_str!("../data/configs/mistral-7b-L4.json"),
        "mistral-7b.json" => include_str!("../data/configs/mistral-7b.json"),
        "gemma-2-9b-L4.json" => include_str!("../data/configs/gemma-2-9b-L4.json"),
        "mixtral-8x7b-L2.json" => include_str!("../data/configs/mixtral-8x7b-L2.json"),
        "qwen3-8b-L4.json" => include_str!("../data/configs/qwen3-8b-L4.json"),
        "qwen3-30b-a3b-L4.json" => include_str!("../data/configs/qwen3-30b-a3b-L4.json"),
        "gpt-oss-20b-L4.json" => include_str!("../data/configs/gpt-oss-20b-L4.json"),
        "deepseek-v3-L2-e64.json" => include_str!("../data/configs/deepseek-v3-L2-e64.json"),
        "qwen3.5-27b-L4.json" => include_str!("../data/configs/qwen3.5-27b-L4.json"),
        "gemma-3-1b.json" => include_str!("../data/configs/gemma-3-1b.json"),
        other => panic!("no test config {other}"),
    };
    hf::parse_config(text, name.trim_end_matches(".json")).unwrap()
}

fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// The plan of one measured training case, pinned to its setup on one H100.
fn pinned(r: &[String], stack: Stack) -> Plan {
    pinned_on(r, stack, "h100-80g")
}

/// The plan of one measured training case, pinned to its setup on one `gpu`.
fn pinned_on(r: &[String], stack: Stack, gpu: &str) -> Plan {
    let model = config(&r[1]);
    let (mb, seq, ga): (u64, u64, u64) = (
        r[4].parse().unwrap(),
        r[5].parse().unwrap(),
        r[8].parse().unwrap(),
    );
    let cluster = Cluster::for_gpu(gpu, 1).unwrap();
    let mut req = Request::new(model, cluster, mb * ga, seq);
    req.stack = stack;
    req.precisions = vec![match r[2].as_str() {
        "fp32" => Precision::Fp32,
        "bf16-amp" => Precision::Bf16Amp,
        "fp16-amp" => Precision::Fp16Amp,
        "bf16" => Precision::Bf16,
        p => panic!("{p}"),
    }];
    req.optimizer = match r[3].as_str() {
        "adamw" => Optimizer::Adamw,
        "sgd" => Optimizer::Sgd,
        "momentum" => Optimizer::Momentum,
        "adafactor" => Optimizer::Adafactor,
        o => panic!("{o}"),
    };
    req.attention = if r[7] == "eager" {
        Attention::Eager
    } else {
        Attention::Sdpa
    };
    req.pins = Pins {
        tp: Some(1),
        pp: Some(1),
        dp: Some(1),
        micro_batch: Some(mb),
        recompute: Some(if r[6] == "full" {
            RecomputeChoice::Full
        } else {
            RecomputeChoice::None
        }),
        zero: Some(0),
        offload: Some(Offload::None),
        ..Pins::default()
    };
    req.top = 1;
    let out = search(&req, &mut |_| {}).unwrap();
    // The time model is what is checked; a case the memory model puts over 80 GiB is priced
    // all the same (`closest`).
    out.plans.into_iter().next().or(out.closest).unwrap()
}

/// `(id, set, predicted / measured)` for every training case, and the pinned plans.
fn errors(stack: Stack) -> Vec<(String, String, f64)> {
    cases(stack)
        .into_iter()
        .map(|(r, p)| {
            let measured: f64 = r[9].parse().unwrap();
            let ratio = p.step_time_s / measured;
            eprintln!(
                "{:45} {:5} measured {:7.1} ms  predicted {:7.1} ms  ratio {:.2}  ({:?})",
                r[0],
                r[10],
                measured * 1e3,
                p.step_time_s * 1e3,
                ratio,
                p.time
            );
            (r[0].clone(), r[10].clone(), ratio)
        })
        .collect()
}

fn cases(stack: Stack) -> Vec<(Vec<String>, Plan)> {
    rows(include_str!("../data/measured_steps.csv"))
        .into_iter()
        .map(|r| {
            assert!(
                r[10] == "fit" || r[10] == "check",
                "{}: set {}",
                r[0],
                r[10]
            );
            let p = pinned(&r, stack);
            (r, p)
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn transformers_stack_predicts_measured_h100_steps() {
    let e = errors(Stack::Transformers);
    for set in ["fit", "check"] {
        let abs: Vec<f64> = e
            .iter()
            .filter(|(_, s, _)| s == set)
            .map(|(_, _, r)| (r - 1.0).abs())
            .collect();
        assert!(abs.len() >= 10, "{set}: {} cases", abs.len());
        let med = median(abs.clone());
        let worst = abs.iter().cloned().fold(0.0, f64::max);
        eprintln!(
            "{set} set ({} cases): median |error| {:.1} %, worst {:.1} %",
            abs.len(),
            med * 100.0,
            worst * 100.0
        );
        assert!(med <= 0.10, "{set}: median |error| {med:.3}");
    }
    for (id, _, r) in &e {
        assert!((r - 1.0).abs() <= 0.30, "{id}: predicted/measured {r:.2}");
    }
}

/// The constants `EagerCalibration` says were fitted (`fwd_cpu_s`, `bwd_bytes`,
/// `elementwise_eta`) are refitted here on the `fit` cases alone, over a grid around them:
/// the defaults must be the grid's best on those cases (mean squared log error), so that the
/// `check` cases stay a test the constants never saw.
#[test]
fn fitted_constants_come_from_the_fitting_set() {
    let cases = cases(Stack::Transformers);
    let fit: Vec<_> = cases.iter().filter(|(r, _)| r[10] == "fit").collect();
    let cluster = Cluster::for_gpu("h100-80g", 1).unwrap();
    let loss = |cal: &Calibration| -> f64 {
        fit.iter()
            .map(|(r, p)| {
                let Model::Transformer(t) = config(&r[1]) else {
                    panic!()
                };
                let cfg = vram_plan::cost::Config {
                    tp: p.tp,
                    pp: p.pp,
                    dp: p.dp,
                    micro_batch: p.micro_batch,
                    grad_accum: p.grad_accum,
                    zero: p.zero_stage,
                    offload: p.offload,
                    recompute: p.recompute,
                    recompute_layers: p.recompute_layers,
                    sequence_parallel: p.sequence_parallel,
                    schedule: p.schedule,
                    amp_style: p.amp_style,
                    precision: p.precision,
                    stack: Stack::Transformers,
                    optimizer: match r[3].as_str() {
                        "adamw" => Optimizer::Adamw,
                        "sgd" => Optimizer::Sgd,
                        "momentum" => Optimizer::Momentum,
                        "adafactor" => Optimizer::Adafactor,
                        o => panic!("{o}"),
                    },
                };
                let attention = if r[7] == "eager" {
                    Attention::Eager
                } else {
                    Attention::Sdpa
                };
                let seq: u64 = r[5].parse().unwrap();
                let t_s =
                    vram_plan::cost::step_time(&t, &cluster, cal, attention, seq, &cfg).total_s;
                let measured: f64 = r[9].parse().unwrap();
                (t_s / measured).ln().powi(2)
            })
            .sum::<f64>()
            / fit.len() as f64
    };
    let base = Calibration::default();
    let at_default = loss(&base);
    let mut best = (f64::INFINITY, 0.0, 0.0, 0.0);
    for fwd in [40e-6, 45e-6, 50e-6, 55e-6, 60e-6, 65e-6, 70e-6] {
        for bwd in [2.0, 2.5, 3.0] {
            for eta in [0.8, 0.85, 0.9, 0.95, 1.0] {
                let mut cal = base;
                cal.eager.fwd_cpu_s = fwd;
                cal.eager.bwd_bytes = bwd;
                cal.eager.elementwise_eta = eta;
                let l = loss(&cal);
                eprintln!("fwd_cpu_s {fwd:.0e} bwd_bytes {bwd} elementwise_eta {eta}: {l:.5}");
                if l < best.0 {
                    best = (l, fwd, bwd, eta);
                }
            }
        }
    }
    eprintln!("best on the fitting set: {best:?}; the defaults give {at_default:.5}");
    assert_eq!(
        (best.1, best.2, best.3),
        (
            base.eager.fwd_cpu_s,
            base.eager.bwd_bytes,
            base.eager.elementwise_eta
        ),
        "the defaults are not the fitting set's best"
    );
}

/// The transformers stack against the training steps measured on an H200
/// (`tests/data/measured_steps_h200.csv`: today's families, their mechanisms as transformers
/// 5.24 runs them: grouped_mm experts, gpt-oss's eager attention with sinks, DeepSeek-V3's MLA,
/// Qwen3.5's Gated DeltaNet through its torch fallback). No constant was fitted to these: the
/// calibration is the H100's. Median within 10 %, none beyond 25 %.
#[test]
fn transformers_stack_predicts_measured_h200_steps() {
    h200_steps(include_str!("../data/measured_steps_h200.csv"), 6);
}

/// The second H200 run (`tests/data/measured_steps_h200_2026-11-28.csv`, `gpu/measure3.py`):
/// three of the cases above measured again, and Qwen3-MoE with full recomputation. The same
/// targets: median within 10 %, none beyond 25 %.
#[test]
fn transformers_stack_predicts_the_second_h200_run() {
    h200_steps(
        include_str!("../data/measured_steps_h200_2026-11-28.csv"),
        4,
    );
}

/// Every case of one H200 step set within 25 %, their median within 10 %.
fn h200_steps(csv: &str, n: usize) {
    let mut abs = Vec::new();
    for r in rows(csv) {
        let p = pinned_on(&r, Stack::Transformers, "h200");
        let measured: f64 = r[9].parse().unwrap();
        let ratio = p.step_time_s / measured;
        eprintln!(
            "{:34} measured {:6.1} ms  predicted {:6.1} ms  {:+5.1} %",
            r[0],
            measured * 1e3,
            p.step_time_s * 1e3,
            (ratio - 1.0) * 100.0
        );
        assert!(
            (ratio - 1.0).abs() <= 0.25,
            "{}: predicted/measured {ratio:.2}",
            r[0]
        );
        abs.push((ratio - 1.0).abs());
    }
    assert_eq!(abs.len(), n);
    let med = median(abs);
    eprintln!("H200 steps: median |error| {:.1} %", med * 100.0);
    assert!(med <= 0.10, "median |error| {med:.3}");
}

/// Gated DeltaNet with flash-linear-attention installed (a user's `--kernels fla`) is priced
/// as its fused kernels, far faster than the torch fallback `pip install transformers` gives.
#[test]
fn gated_delta_net_with_fla_is_faster_than_its_torch_fallback() {
    let Model::Transformer(t) = config("qwen3.5-27b-L4.json") else {
        panic!()
    };
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let price = |fla: bool| {
        let mut cal = Calibration::default().eager;
        cal.kernels.fla = fla;
        eager::micro_batch(
            &t,
            gpu,
            &cal,
            Attention::Sdpa,
            Precision::Bf16,
            vram_model::setup::AmpStyle::Autocast,
            2048.0,
            2048.0,
            1.0,
            false,
        )
    };
    let (torch, fla) = (price(false), price(true));
    eprintln!("qwen3.5 layer: torch fallback {:?}, fla {:?}", torch, fla);
    // The fallback's chunk loop: 32 chunks, about 400 forward kernels in a Gated DeltaNet layer.
    assert!(torch.layer_kernels > 200.0, "{}", torch.layer_kernels);
    assert!(fla.layer_fwd_s + fla.layer_bwd_s < 0.5 * (torch.layer_fwd_s + torch.layer_bwd_s));
}

#[test]
fn megatron_stack_is_optimistic_for_eager_pytorch() {
    // What issue 12 reported: Megatron-LM's fused kernels priced for PyTorch eager runs are
    // optimistic (median about 0.6 of the measured time). The transformers stack must be
    // closer on every measured case but a handful.
    let m = errors(Stack::Megatron);
    let t = errors(Stack::Transformers);
    let med = median(m.iter().map(|(_, _, r)| *r).collect());
    assert!(med < 0.8, "megatron stack median ratio {med:.2}");
    let closer = m
        .iter()
        .zip(&t)
        .filter(|((_, _, a), (_, _, b))| (b.ln()).abs() < (a.ln()).abs())
        .count();
    assert!(closer * 4 >= m.len() * 3, "{closer} of {}", m.len());
}

/// The three timed `generate` calls are first calls at their prompt length (the warm-up used
/// a 32-token prompt) and mix first-call costs, the prefill and 16 decode steps (shared ground
/// truth README): they bound the steady-state model from above and validate none of its
/// figures, so nothing is fitted to them and only the bound is checked.
#[test]
fn generate_calls_are_bounded_by_the_first_call_timings() {
    let cal = Calibration::default().eager;
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    for r in rows(include_str!("../data/measured_generate.csv")) {
        let Model::Transformer(t) = config(&r[1]) else {
            panic!()
        };
        let (b, ctx, new): (u64, u64, u64) = (
            r[2].parse().unwrap(),
            r[3].parse().unwrap(),
            r[5].parse().unwrap(),
        );
        let g = vram_plan::generate::Generate {
            batch: b,
            prompt: ctx - new,
            new_tokens: new,
            kv_bytes: 2,
            static_cache: r[4] == "static",
            precision: vram_model::setup::Precision::Bf16,
            attention: Attention::Sdpa,
            kernels: vram_plan::generate::Kernels::default(),
            weights_dequantized: false,
        };
        let s = vram_plan::generate::serving(&t, gpu, &cal, &g).unwrap();
        let measured: f64 = r[6].parse().unwrap();
        eprintln!(
            "{:35} first call {:7.3} s, steady-state model {:7.3} s ({:?})",
            r[0], measured, s.generate_s, s
        );
        assert!(s.generate_s < measured, "{}", r[0]);
        assert!(!s.validated);
        // The decode step is at least its weights over the bandwidth.
        assert!(s.decode_token_s * 2925e9 >= 2.0 * 0.9 * t.param_count() as f64);
    }
}

/// No MoE step is among the visible H100 measurements, so the MoE price is held to what
/// transformers 5.17 and PyTorch 2.11 run rather than to a timing. Under autocast the experts'
/// banks are the fp32 master weights and `grouped_mm` (no autocast rule) runs them as they
/// are: `_grouped_mm_fallback`'s fp32 GEMM per expert (TF32 off), forward and the two backward
/// GEMMs. A Mixtral layer's step can then be no faster than those FLOPs at the best fp32 rate
/// measured on the H100 (51.9 TFLOP/s); in pure bf16 the CUTLASS grouped kernel runs them at
/// the bf16 rate. Autocast casts no expert bank, so a layer's launches do not grow with the
/// expert count.
#[test]
fn moe_layers_price_the_grouped_gemms_transformers_runs() {
    let Model::Transformer(t) = config("mixtral-8x7b-L2.json") else {
        panic!()
    };
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let cal = Calibration::default().eager;
    let tokens = 4096.0;
    let price = |p: Precision| {
        eager::micro_batch(
            &t,
            gpu,
            &cal,
            Attention::Sdpa,
            p,
            vram_model::setup::AmpStyle::Autocast,
            tokens,
            4096.0,
            1.0,
            false,
        )
    };
    let (amp, bf16) = (price(Precision::Bf16Amp), price(Precision::Bf16));
    // gate/up and down over tokens x top-2 rows: 2 * rows * hidden * 3 * intermediate FLOPs.
    let expert_flops = 2.0 * tokens * 2.0 * 4096.0 * 3.0 * 14336.0;
    let amp_layer = amp.layer_fwd_s + amp.layer_bwd_s;
    let bf16_layer = bf16.layer_fwd_s + bf16.layer_bwd_s;
    eprintln!("mixtral layer: bf16-amp {amp_layer:.4} s, pure bf16 {bf16_layer:.4} s");
    assert!(amp_layer >= 3.0 * expert_flops / 51.95e12, "{amp_layer}");
    // The bf16 rate is over ten times the fp32 one; attention and element-wise work are
    // shared.
    assert!(bf16_layer * 5.0 < amp_layer, "{bf16_layer}");
    // Launches per layer: the attention block's, the router's and a fixed set for the experts,
    // whatever the expert count (the old count cast 24 expert matrices one by one).
    assert!(amp.layer_kernels < 80.0, "{}", amp.layer_kernels);
}

/// The step-time model's operators, layer by layer, against what transformers 5.24 launches in
/// the H200 training steps it misses most (`tests/data/train_ops/counts.json`, counted on the
/// meta device by `tests/engines/train_ops.py`: every ATen operator of the forward and
/// backward, full widths, mb1 × 2048, bf16). Forward element-wise bytes within 5 %. Forward
/// kernels within 12 %: gpt-oss launches 6 more than priced (its own rotary form, 7 kernels
/// for each of q and k against `rotate_half`'s 5; the two `cat`s into the `DynamicCache` that
/// a training forward builds because `use_cache` defaults on), about 0.4 ms of launches over
/// the 4 layers. Backward kernels and
/// bytes within 25 %, where the planner takes 1.5 kernels and twice the bytes of each forward
/// kernel and byte: the counts show bf16 RMSNorm's backward moving 102 bytes an element
/// against its forward's 36, and the grouped experts' fp32 routing-weight gradients, which
/// that ratio does not reach (DeepSeek-V3's MoE layer: 11.4 GB priced against 14.2 counted;
/// backward is GPU-bound, about 0.9 ms of the step).
#[test]
fn step_model_launches_what_transformers_runs_per_layer() {
    use serde_json::Value;
    let doc: Value = serde_json::from_str(include_str!("../data/train_ops/counts.json")).unwrap();
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let cal = Calibration::default().eager;
    let r = eager::Rates::new(gpu, &cal);
    let mut checked = 0;
    for (name, case) in doc["cases"].as_object().unwrap() {
        let Model::Transformer(t) = config(&format!("{}.json", case["config"].as_str().unwrap()))
        else {
            panic!("{name}")
        };
        let attention = if case["attention"] == "eager" {
            Attention::Eager
        } else {
            Attention::Sdpa
        };
        let tokens = (case["micro_batch"].as_u64().unwrap() * case["seq"].as_u64().unwrap()) as f64;
        let s = eager::Shape::new(
            tokens,
            case["seq"].as_f64().unwrap(),
            Precision::Bf16,
            vram_model::setup::AmpStyle::Autocast,
            true,
        );
        for (i, counted) in case["layers"].as_object().unwrap() {
            let Ok(i) = i.parse::<usize>() else {
                continue;
            };
            let w = eager::block_layer(
                &t.blocks,
                t.blocks.layer(i),
                &s,
                &r,
                attention,
                Precision::Bf16,
                None,
            );
            let model = [
                w.kernels,
                (w.ew_s + w.score_s) * r.bytes_per_s,
                (w.kernels + w.serial_kernels) * cal.bwd_kernels + w.bwd_extra_kernels,
                (cal.bwd_bytes * w.ew_s + cal.score_bwd_bytes * w.score_s + w.bwd_extra_s)
                    * r.bytes_per_s,
            ];
            let c = &counted;
            let real = [
                c["fwd"]["kernels"].as_f64().unwrap(),
                c["fwd"]["bytes"].as_f64().unwrap(),
                c["bwd"]["kernels"].as_f64().unwrap(),
                c["bwd"]["bytes"].as_f64().unwrap(),
            ];
            eprintln!(
                "{name} layer {i}: forward {} kernels / {:.2} GB (counted {} / {:.2}), backward {} / {:.2} GB (counted {} / {:.2})",
                model[0], model[1] / 1e9, real[0], real[1] / 1e9, model[2], model[3] / 1e9, real[2], real[3] / 1e9
            );
            for (k, (m, c)) in model.iter().zip(real).enumerate() {
                let tol = [0.12, 0.05, 0.25, 0.25][k];
                assert!(
                    (m / c - 1.0).abs() <= tol,
                    "{name} layer {i} figure {k}: model {m} against counted {c}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6);
}
