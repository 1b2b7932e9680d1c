//! End-to-end tests of `vram plan`, `vram batch` and `vram checkpoint`.

mod common;

use common::{refused, vram};

const BASE: &[&str] = &[
    "plan",
    "llama-2-7b",
    "--gpu",
    "a100-80g",
    "--gpus",
    "16",
    "--global-batch",
    "128",
    "--seq",
    "4096",
];

fn with(extra: &[&str]) -> Vec<&'static str> {
    let mut v: Vec<&str> = BASE.to_vec();
    for e in extra {
        v.push(Box::leak(e.to_string().into_boxed_str()));
    }
    v
}

#[test]
fn table_lists_ranked_plans() {
    let (code, out, err) = vram(&with(&["--top", "3"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration"));
    assert!(out.contains("TFLOP/s/GPU"));
    assert!(out.contains("bound"));
    // Header, searched line, blank, column header, 3 rows, and the transformers stack's note
    // that it plans no pipeline stages.
    assert_eq!(out.lines().count(), 8, "{out}");
    assert!(out
        .lines()
        .last()
        .unwrap()
        .starts_with("note: the transformers stack plans no pipeline stages"));
}

#[test]
fn json_has_the_documented_fields_best_first() {
    let (code, out, err) = vram(&with(&["--json", "--top", "4"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 4);
    for p in plans {
        for k in [
            "tp",
            "pp",
            "dp",
            "micro_batch",
            "grad_accum",
            "zero_stage",
            "offload",
            "recompute",
            "sequence_parallel",
            "schedule",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "tflops_per_gpu",
            "peak_bytes_per_gpu",
        ] {
            assert!(p.get(k).is_some(), "missing {k}");
        }
        let n = |k: &str| p[k].as_u64().unwrap();
        assert_eq!(n("tp") * n("pp") * n("dp"), 16);
        assert_eq!(n("dp") * n("micro_batch") * n("grad_accum"), 128);
        // A100 80GB: 81920 MiB as the driver reports it.
        assert!(n("peak_bytes_per_gpu") <= 81_920 << 20);
    }
    let t: Vec<f64> = plans
        .iter()
        .map(|p| p["step_time_s"].as_f64().unwrap())
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn pins_are_honoured() {
    let (code, out, _) = vram(&with(&[
        "--json",
        "--tp",
        "2",
        "--pp",
        "2",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--sequence-parallel",
        "--schedule",
        "interleaved:2",
        // Sequence parallelism is Megatron-LM's (a Hugging Face model has none).
        "--stack",
        "megatron",
    ]));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for p in v["plans"].as_array().unwrap() {
        assert_eq!(p["tp"], 2);
        assert_eq!(p["pp"], 2);
        assert_eq!(p["dp"], 4);
        assert_eq!(p["micro_batch"], 1);
        assert_eq!(p["recompute"], "full");
        assert_eq!(p["zero_stage"], 1);
        assert_eq!(p["sequence_parallel"], true);
        assert_eq!(p["schedule"], "interleaved-2");
    }
}

#[test]
fn nothing_fits_is_a_result() {
    let args = [
        "plan",
        "llama-2-70b",
        "--cluster",
        "workstation",
        "--gpus",
        "1",
        "--global-batch",
        "8",
        "--seq",
        "4096",
    ];
    let (code, out, _) = vram(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plans"].as_array().unwrap().len(), 0);
    assert!(v["closest"]["peak_bytes_per_gpu"].as_u64().unwrap() > 24 << 30);
    assert!(!v["suggestions"].as_array().unwrap().is_empty());
    let (code, out, _) = vram(&args);
    assert_eq!(code, 0);
    assert!(out.contains("nothing fits"), "{out}");
    assert!(out.contains("GPUs would fit it"), "{out}");
}

#[test]
fn emit_writes_engine_configs() {
    let (code, out, err) = vram(&with(&["--emit", "deepspeed", "--tp", "1", "--pp", "1"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["train_batch_size"], 128);
    assert!(err.contains("emitted"));
    let (code, out, _) = vram(&with(&["--emit", "megatron"]));
    assert_eq!(code, 0);
    assert!(out.contains("--tensor-model-parallel-size"));
    let (code, out, _) = vram(&with(&["--emit", "accelerate"]));
    assert_eq!(code, 0);
    assert!(out.contains("num_processes: 16"));
    let (code, out, _) = vram(&with(&["--emit", "torchrun"]));
    assert_eq!(code, 0);
    assert!(out.contains("torchrun --nnodes 2 --nproc-per-node 8"));
}

/// A plan the engine cannot run is not emitted for it (issue 15): exit 2 naming the rule when
/// none of the plans that fit runs. A pipeline is Megatron-LM's: the transformers stack refuses
/// one pinned, and DeepSpeed 0.19.8 pipelines only a `PipelineModule` (deepspeed.initialize),
/// which a Hugging Face model is not. Megatron-LM arguments.py: FSDP2 needs untied embeddings;
/// GPT-2 ties them.
#[test]
fn emit_refuses_what_the_engine_refuses() {
    for (extra, rule) in [
        (&[][..], "--pp 4 needs --stack megatron"),
        (
            &["--stack", "megatron"][..],
            "pipelines only a PipelineModule",
        ),
    ] {
        let mut args = with(&["--emit", "deepspeed", "--pp", "4"]);
        args.extend_from_slice(extra);
        let err = refused(&args);
        assert!(err.contains(rule), "{err}");
    }
    let err = refused(&[
        "plan",
        "gpt2-xl",
        "--gpu",
        "a100-80g",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--seq",
        "1024",
        "--zero",
        "3",
        "--emit",
        "megatron",
    ]);
    assert!(
        err.contains("megatron cannot run this plan") && err.contains("untie"),
        "{err}"
    );
}

#[test]
fn bad_input_exits_2_on_one_line() {
    for args in [
        with(&["--tp", "3"]),
        with(&["--tp", "4", "--pp", "4", "--dp", "4"]),
        with(&["--zero", "7"]),
        with(&["--cluster", "dgx-z"]),
        with(&["--schedule", "zigzag"]),
        with(&["--schedule", "interleaved:0"]),
        // Fine-tuning flags on a full-training plan would change nothing: refused.
        with(&["--weights", "nf4"]),
        with(&["--double-quant"]),
        vec![
            "plan",
            "resnet-50",
            "--gpu",
            "a100",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq",
            "1",
        ],
        vec![
            "plan",
            "gpt2",
            "--gpu",
            "a100",
            "--gpus",
            "12",
            "--global-batch",
            "8",
            "--seq",
            "128",
        ],
    ] {
        refused(&args);
    }
}

#[test]
fn batch_packs_lengths_from_a_file() {
    let dir = std::env::temp_dir().join(format!("vram-plan-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lengths.txt");
    std::fs::write(&file, "100 200, 300\n400\n50\n").unwrap();
    let f = file.to_string_lossy().into_owned();
    let (code, out, err) = vram(&[
        "batch",
        "gpt2",
        "--gpu",
        "a100-80g",
        "--lengths",
        &f,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Five short sequences of gpt2 fit in one 80 GB batch, padded to the longest (400).
    let batches = v["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0]["padded_len"], 400);
    assert_eq!(batches[0]["indices"], serde_json::json!([3, 2, 1, 0, 4]));
    std::fs::write(&file, "100 x").unwrap();
    let (code, _, err) = vram(&["batch", "gpt2", "--lengths", &f]);
    assert_eq!(code, 2);
    assert!(err.contains("not a whole number"));
    let _ = std::fs::remove_dir_all(&dir);
}

const CKPT: &[&str] = &[
    "checkpoint",
    "llama-2-7b",
    "--gpu",
    "h100-80g",
    "--micro-batch",
    "2",
    "--seq",
    "4096",
    "--optimizer",
    "adam8bit",
];

#[test]
fn checkpoint_recommends_a_schedule_that_fits_and_agrees_with_estimate() {
    let mut args = CKPT.to_vec();
    args.push("--json");
    let (code, out, err) = vram(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k = v["device"]["block_layers"]
        .as_u64()
        .expect("some recomputation");
    // `vram estimate` with the block method at k layers fits; at k − 1 it does not.
    let fits = |k: u64| {
        let ks = k.to_string();
        let mut e = vec![
            "estimate",
            "llama-2-7b",
            "--gpu",
            "h100-80g",
            "--micro-batch",
            "2",
        ];
        e.extend(["--seq", "4096", "--optimizer", "adam8bit", "--json"]);
        e.extend(["--recompute", "full", "--recompute-layers", &ks]);
        let (code, out, err) = vram(&e);
        assert_eq!(code, 0, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        j["fits"].as_bool().unwrap()
    };
    assert!(fits(k) && !fits(k - 1), "k = {k}");
    let rec = v["recommended"].as_str().unwrap();
    let cands = v["candidates"].as_array().unwrap();
    let pick = cands.iter().find(|c| c["name"] == rec).unwrap();
    assert_eq!(pick["fits"], true);
    // Nothing that fits is cheaper than the recommendation; store-all does not fit.
    let cost = pick["cost"].as_f64().unwrap();
    for c in cands.iter().filter(|c| c["fits"] == true) {
        assert!(c["cost"].as_f64().unwrap() >= cost * (1.0 - 1e-9), "{c}");
    }
    assert_eq!(cands[0]["name"], "store-all");
    assert_eq!(cands[0]["fits"], false);
    // Per-stage forward runs: the 32 layers and the head, each run once or twice.
    let runs = pick["forward_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 33);
    let device = v["device_peak_bytes"].as_u64().unwrap();
    assert!(device <= v["device"]["allocatable_bytes"].as_u64().unwrap());

    let (code, out, err) = vram(CKPT);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("--recompute-layers {k}")), "{out}");
    assert!(out.contains("recommended:"), "{out}");
}

#[test]
fn checkpoint_without_pressure_recommends_no_recomputation() {
    let (code, out, err) = vram(&["checkpoint", "gpt2", "--gpu", "h100-80g", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["device"]["block_layers"].as_u64(), Some(0));
    assert_eq!(v["recommended"], "store-all");
}

#[test]
fn checkpoint_bad_input_exits_2_on_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["checkpoint", "t5-base"], "not a chain"),
        (&["checkpoint", "resnet-50"], "transformers only"),
        (&["checkpoint", "gpt2", "--inference"], "drop --inference"),
        (
            &["checkpoint", "gpt2", "--recompute", "full"],
            "drop --recompute",
        ),
        (&["checkpoint", "gpt2", "--pp", "2"], "--pp 1"),
        (&["checkpoint", "gpt2", "--slots", "0"], "--slots 0"),
        (&["checkpoint", "gpt2", "--budget", "lots"], "--budget"),
        (&["checkpoint", "no-such-model"], "no-such-model"),
    ];
    for (args, needle) in cases {
        let (code, _, err) = vram(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err} (wanted {needle})");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A model given as a config file is named by the file, not by its folder (issue 12).
#[test]
fn config_file_is_named_by_its_stem_or_name_or_path() {
    let dir = std::env::temp_dir().join(format!("vram-plan-name-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("configs")).unwrap();
    let gpt2 = r#"{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,"n_layer":12,"n_head":12}"#;
    let plain = dir.join("configs").join("my-gpt2.json");
    std::fs::write(&plain, gpt2).unwrap();
    let named = dir.join("configs").join("config.json");
    std::fs::write(
        &named,
        gpt2.replace('{', r#"{"_name_or_path":"openai-community/gpt2","#),
    )
    .unwrap();
    for (path, want) in [(&plain, "my-gpt2"), (&named, "gpt2")] {
        let p = path.to_str().unwrap();
        let args = [
            "plan",
            p,
            "--gpu",
            "h100-80g",
            "--gpus",
            "1",
            "--global-batch",
            "8",
            "--seq",
            "1024",
            "--json",
            "--top",
            "1",
        ];
        let (code, out, err) = vram(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["model"], want);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn stack_defaults_to_transformers_and_follows_emit() {
    let stack = |extra: &[&str]| {
        let (code, out, err) = vram(&with(&[&["--json", "--top", "1"][..], extra].concat()));
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (
            v["stack"].as_str().unwrap().to_string(),
            v["plans"][0]["step_time_s"].as_f64().unwrap(),
        )
    };
    let (t, t_s) = stack(&[]);
    let (m, m_s) = stack(&["--stack", "megatron"]);
    assert_eq!(t, "transformers");
    assert_eq!(m, "megatron");
    // PyTorch eager launches unfused kernels: slower than Megatron-LM's fused ones.
    assert!(t_s > m_s, "{t_s} vs {m_s}");
    // --emit megatron prices the Megatron stack unless told otherwise.
    let (code, _, err) = vram(&with(&["--emit", "megatron"]));
    assert_eq!(code, 0);
    assert!(err.contains("s/step"), "{err}");
    let m_emit: f64 = err
        .split(" at ")
        .nth(1)
        .and_then(|s| s.split(" s/step").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap();
    assert!(
        (m_emit - m_s).abs() < 0.01 + 0.01 * m_s,
        "{m_emit} vs {m_s}"
    );
    let (code, _, err) = vram(&with(&["--stack", "jax"]));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn optimizer_changes_memory_and_time() {
    // Pure-bf16 SGD of a 7B model on one H100 has no optimizer state; AdamW adds its states
    // to memory and its longer step to time.
    let run = |opt: &str| {
        let (code, out, err) = vram(&[
            "plan",
            "llama-2-7b",
            "--gpu",
            "h100-80g",
            "--gpus",
            "1",
            "--global-batch",
            "1",
            "--seq",
            "2048",
            "--precision",
            "bf16",
            "--optimizer",
            opt,
            "--recompute",
            "full",
            "--json",
            "--top",
            "1",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let p = &v["plans"][0];
        (
            p["peak_bytes_per_gpu"].as_u64().unwrap(),
            p["step_time_s"].as_f64().unwrap(),
        )
    };
    let (sgd_mem, sgd_s) = run("sgd");
    let (adam_mem, adam_s) = run("adamw");
    // 6.74e9 parameters x (two bf16 Adam states, 4 bytes, + the foreach step's temporary
    // sqrt(v), 2 bytes) = 40.4 GB more (reserved bytes come from the allocator replay, whose
    // blocks for these parameter-sized tensors are within a few MiB of their sizes).
    let more = adam_mem as f64 - sgd_mem as f64;
    assert!((more / (6.738e9 * 6.0) - 1.0).abs() < 0.03, "{more}");
    assert!(adam_s > sgd_s);
    let (code, _, _) = vram(&[
        "plan",
        "llama-2-7b",
        "--gpu",
        "h100-80g",
        "--gpus",
        "1",
        "--global-batch",
        "1",
        "--seq",
        "2048",
        "--optimizer",
        "lion",
    ]);
    assert_eq!(code, 2);
}

/// `vram estimate --inference` reports serving speed (issue 12): decode is bandwidth-bound.
#[test]
fn estimate_inference_reports_serving_speed() {
    let (code, out, err) = vram(&[
        "estimate",
        "llama-2-7b",
        "--inference",
        "--precision",
        "bf16",
        "--batch",
        "4",
        "--context",
        "4096",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["serving"];
    let f = |k: &str| s[k].as_f64().unwrap();
    // By hand: bf16 weights, 2 x (6,738,415,616 - the 32000 x 4096 input embedding, which
    // is only gathered, and the 4096 of the final norm) bytes, the fp32 copy of the last
    // position's logits (4 x 32000 x (2 + 4) bytes), plus the KV cache (2 x 32 layers x 4096
    // wide x 2 bytes = 512 KiB a token a sequence) at the mean cache length of the 15 decode
    // steps after a 4080-token prompt (the prefill yields the first of the 16 tokens; lengths
    // 4080..4094, mean 4087): attention reads ctx + 1 tokens, DynamicCache's torch.cat reads
    // ctx and writes ctx + 1; over the H100's measured 2925 GB/s x 0.8 for real kernels.
    let weights = 2.0 * (6_738_415_616.0 - 32000.0 * 4096.0 - 4096.0) + 4.0 * 32000.0 * 6.0;
    let bytes = weights + 4.0 * 524_288.0 * (3.0 * 4087.0 + 2.0);
    assert!(
        (f("decode_bytes") / bytes - 1.0).abs() < 1e-9,
        "{}",
        f("decode_bytes")
    );
    let want = bytes / (2925e9 * 0.8);
    assert!(
        (f("decode_gpu_s") / want - 1.0).abs() < 0.002,
        "{} vs {want}",
        f("decode_gpu_s")
    );
    assert_eq!(s["validated"], serde_json::json!(false));
    assert!(f("decode_token_s") >= f("decode_gpu_s"));
    assert!((f("decode_tokens_per_s") - 4.0 / f("decode_token_s")).abs() < 1e-6);
    // Prefill of 4 x 4096 tokens is compute-bound: at least 2 x params x tokens FLOPs at the
    // H100's 989 TFLOP/s peak.
    assert!(f("prefill_s") > 2.0 * 6.738e9 * 16384.0 / 989.4e12);
    let (code, out, _) = vram(&[
        "estimate",
        "llama-2-7b",
        "--inference",
        "--batch",
        "4",
        "--context",
        "4096",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("tokens/s"), "{out}");
}

/// The serving speed prices the estimate's own `generate` call: fp32 weights and an fp32 cache
/// under `--precision fp32` (twice the bf16 bytes; transformers 5.24's cache holds the keys and
/// values in the dtype the model makes them), and `--kv-cache static` (the whole preallocated
/// cache read every step, no `torch.cat` copy) (issue 25 item 11).
#[test]
fn serving_speed_follows_precision_and_cache_kind() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "estimate",
            "llama-2-7b",
            "--inference",
            "--batch",
            "1",
            "--prompt",
            "100",
            "--new-tokens",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = vram(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["serving"].clone()
    };
    let bf16 = run(&[]);
    let fp32 = run(&["--precision", "fp32"]);
    let kv_token = 2.0 * 32.0 * 4096.0 * 2.0;
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    // One step at a 100-token cache: dynamic reads 101 tokens and copies 100 -> 101; the last
    // position's logits copied to fp32 (32000 x (2 + 4) bytes from bf16, x (4 + 4) from fp32).
    let w16 = f(&bf16, "decode_bytes") - kv_token * 302.0 - 32000.0 * 6.0;
    let w32 = f(&fp32, "decode_bytes") - 2.0 * kv_token * 302.0 - 32000.0 * 8.0;
    assert!((w32 / w16 - 2.0).abs() < 1e-9, "{w16} {w32}");
    let st = run(&["--kv-cache", "static"]);
    // Static: 101 tokens preallocated (prompt + new tokens) read, one written.
    assert!(
        (f(&bf16, "decode_bytes") - f(&st, "decode_bytes") - kv_token * (302.0 - 102.0)).abs()
            < 1.0
    );
}

/// Pins that cannot hold together name the pins whose release would give configurations,
/// where the message said only "the pinned degrees, the GPU count and the global batch must
/// agree" (wrong for `--offload params --zero 2`, which breaks neither).
#[test]
fn pins_that_cannot_hold_together_are_named() {
    let base = [
        "plan",
        "llama-3-8b",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--gpu",
        "h100-80g",
    ];
    for (extra, says) in [
        (
            &["--offload", "params", "--zero", "2"][..],
            "without --zero 2 or without --offload params it would",
        ),
        (
            &["--offload", "optimizer", "--zero", "0"][..],
            "without --zero 0 or without --offload optimizer it would",
        ),
        (
            &[
                "--stack",
                "megatron",
                "--pp",
                "2",
                "--schedule",
                "interleaved:64",
            ][..],
            "without --pp 2 or without --schedule interleaved:64 it would",
        ),
        (
            &["--tp", "2", "--dp", "2"][..],
            "without --tp 2 or without --dp 2 it would",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (code, _, err) = vram(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--precision bf16,bf16-amp,bf16` searched bf16 twice and listed each of its plans twice.
#[test]
fn a_precision_named_twice_is_searched_once() {
    let (code, out, err) = vram(&[
        "plan",
        "gpt2",
        "--gpus",
        "1",
        "--global-batch",
        "8",
        "--seq",
        "512",
        "--gpu",
        "h100-80g",
        "--precision",
        "bf16,bf16-amp,bf16",
        "--top",
        "6",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plans: Vec<String> = v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(plans.len(), 6);
    for (i, p) in plans.iter().enumerate() {
        assert!(!plans[..i].contains(p), "listed twice: {p}");
    }
}
