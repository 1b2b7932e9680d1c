//! `vram estimate --finetune lora|qlora`, `--weights` (issue 22): bad input, output contracts.

mod common;

use common::vram;

fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out, err) = vram(&a);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn bad_fine_tuning_input_is_one_line_and_exit_2() {
    for (args, needle) in [
        (&["--finetune", "lora", "--lora-rank", "0"][..], "rank"),
        (
            &["--finetune", "lora", "--lora-targets", "qkv,attn_out"][..],
            "no module",
        ),
        (&["--weights", "nf4", "--finetune", "full"][..], "qlora"),
        (
            &["--finetune", "qlora", "--weights", "fp8"][..],
            "bitsandbytes",
        ),
        (&["--finetune", "lora", "--weights", "int8"][..], "qlora"),
        (&["--inference", "--weights", "int3"][..], "expected"),
        (&["--inference", "--finetune", "qlora"][..], "training"),
        (
            &["--finetune", "qlora", "--weights", "int8", "--double-quant"][..],
            "4-bit",
        ),
    ] {
        let mut a = vec!["estimate", "llama-3-8b"];
        a.extend_from_slice(args);
        let (code, out, err) = vram(&a);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn json_carries_trainable_params_and_weights_bytes() {
    // Full training: every parameter trains.
    let full = json(&["estimate", "llama-3-8b", "--gpu", "rtx-4090"]);
    assert_eq!(full["trainable_params"], full["params"]);
    assert!(full["weights_bytes"].as_u64().unwrap() > 0);
    // LoRA r=16 all-linear on Llama-3-8B: 16·(in+out) per linear, 32 layers.
    let lora = json(&["estimate", "llama-3-8b", "--finetune", "lora"]);
    let per_layer = 16 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 3);
    assert_eq!(lora["trainable_params"].as_u64().unwrap(), 32 * per_layer);
    assert_eq!(lora["weights_bytes"].as_u64().unwrap(), 2 * 8_030_261_248);
    // QLoRA NF4 stores the linears at ~4.5 bits and keeps the embedding and head in bf16.
    let q = json(&[
        "estimate",
        "llama-3-8b",
        "--finetune",
        "qlora",
        "--double-quant",
    ]);
    let wb = q["weights_bytes"].as_u64().unwrap();
    assert!(wb < lora["weights_bytes"].as_u64().unwrap() / 2, "{wb}");
    assert!(q["total_bytes"].as_u64().unwrap() < lora["total_bytes"].as_u64().unwrap());
    // The breakdown sums to the device total.
    let sum: u64 = q["breakdown"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sum, q["total_bytes"].as_u64().unwrap());
    // Inference with packed weights: the parameters are the stored bytes.
    let inf = json(&["estimate", "llama-3-8b", "--inference", "--weights", "int8"]);
    let w = inf["weights_bytes"].as_u64().unwrap();
    assert_eq!(inf["breakdown"]["parameters"].as_u64().unwrap(), w);
    let half = json(&["estimate", "llama-3-8b", "--inference"]);
    assert!(w < half["weights_bytes"].as_u64().unwrap() * 6 / 10);
    assert!(inf["max_batch"].as_u64().unwrap() > half["max_batch"].as_u64().unwrap());
}

#[test]
fn text_and_json_agree_and_full_training_suggests_qlora() {
    let q = json(&[
        "estimate",
        "llama-3-8b",
        "--gpu",
        "rtx-4090",
        "--finetune",
        "qlora",
    ]);
    let (code, text, _) = vram(&[
        "estimate",
        "llama-3-8b",
        "--gpu",
        "rtx-4090",
        "--finetune",
        "qlora",
    ]);
    assert_eq!(code, 0);
    let trainable = q["trainable_params"].as_u64().unwrap();
    let grouped = trainable
        .to_string()
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(",");
    assert!(text.contains(&format!("{grouped} trainable")), "{text}");
    assert!(text.contains(&format!(
        "largest micro-batch that fits: {}",
        q["max_micro_batch"]
    )));
    // The example: full training of Llama-3-8B on a 4090 does not fit; QLoRA does,
    // and the advice says so with its figure.
    let (_, text, _) = vram(&["estimate", "llama-3-8b", "--gpu", "rtx-4090"]);
    assert!(text.contains("does NOT fit"), "{text}");
    assert!(text.contains("would fit with --finetune qlora"), "{text}");
    assert!(text.contains("would fit with --finetune lora"), "{text}");
}

#[test]
fn a_float_weights_flag_sets_generates_dtype_and_a_quantized_one_keeps_the_configs() {
    // granite-3.1-8b-instruct's config is float32. `--inference --weights bf16` is
    // `from_pretrained(dtype=torch.bfloat16)`: the same step as `--precision bf16-amp` (it priced
    // fp32 weights, 30.4 GiB, labelled bf16). A quantized `--weights` leaves dtype="auto" at the
    // config's float32, and the note says so.
    let granite = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/serving/configs/granite-3.1-8b-instruct.json"
    );
    let base = ["estimate", granite, "--inference", "--gpu", "h100-80g"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        json(&a)
    };
    let flagged = with(&["--weights", "bf16"]);
    let given = with(&["--precision", "bf16-amp"]);
    assert_eq!(flagged["total_bytes"], given["total_bytes"]);
    assert_eq!(flagged["description"], given["description"]);
    let note = |v: &serde_json::Value| {
        v["notes"].as_array().unwrap().iter().any(|n| {
            n.as_str()
                .unwrap()
                .starts_with("precision fp32 (no --precision)")
        })
    };
    assert!(!note(&flagged));
    let int8 = with(&["--weights", "int8"]);
    assert!(note(&int8), "{int8}");
    let mut a = base.to_vec();
    a.extend(["--weights", "int8"]);
    let (_, text, _) = vram(&a);
    assert!(text.contains("inference (generate), fp32,"), "{text}");
}

#[test]
fn suggested_lora_and_qlora_print_the_figure_their_flags_give() {
    // A float32 config (granite-3.1-8b-instruct's, as published): `--finetune lora` alone holds
    // its base in fp32 (`FinetuneRequest::spec_for`), so the full step's suggestion of it must
    // be priced on that base, not on a bf16 one (it printed 18.2 GiB for a step of 36.3 GiB).
    // On a bf16 catalog model the same holds with a bf16 base.
    let granite = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/serving/configs/granite-3.1-8b-instruct.json"
    );
    for model in [granite, "llama-3-8b"] {
        let full = json(&["estimate", model, "--gpu", "h100-80g"]);
        let suggestions = full["suggestions"].as_array().unwrap();
        for method in ["lora", "qlora"] {
            let flags = format!("--finetune {method}");
            let s = suggestions
                .iter()
                .find(|s| s["flags"] == flags.as_str())
                .unwrap_or_else(|| panic!("{model}: {suggestions:#?}"));
            let run = json(&["estimate", model, "--gpu", "h100-80g", "--finetune", method]);
            assert_eq!(s["total_bytes"], run["total_bytes"], "{model} {flags}");
        }
    }
}

#[test]
fn mixtral_qlora_notes_what_bitsandbytes_leaves_in_bf16() {
    let q = json(&[
        "estimate",
        "mixtral-8x7b",
        "--finetune",
        "qlora",
        "--prepare-kbit",
    ]);
    let notes: Vec<&str> = q["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("fused 3-D experts")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("target_parameters")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("prepare_model_for_kbit_training")),
        "{notes:?}"
    );
    let tp = q["lora"]["target_parameters"].as_array().unwrap();
    assert_eq!(tp.len(), 3);
}

#[test]
fn plan_searches_lora_and_qlora_layouts() {
    let base = [
        "plan",
        "llama-3-8b",
        "--gpu",
        "rtx-4090",
        "--gpus",
        "1",
        "--global-batch",
        "16",
        "--seq",
        "2048",
    ];
    let mut q = base.to_vec();
    q.extend(["--finetune", "qlora"]);
    let v = json(&q);
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    let cap = 24 * (1u64 << 30);
    for p in plans {
        assert!(p["bytes_per_gpu"].as_u64().unwrap() <= cap);
        assert_eq!(
            p["micro_batch"].as_u64().unwrap() * p["grad_accum"].as_u64().unwrap(),
            16
        );
    }
    // Plain LoRA of an 8B model in bf16 fits a 24 GB card only with small micro-batches, and
    // every plan it lists agrees with `vram estimate` for that configuration.
    let mut l = base.to_vec();
    l.extend(["--finetune", "lora"]);
    let v = json(&l);
    let p = &v["plans"][0];
    let mb = p["micro_batch"].to_string();
    let ga = p["grad_accum"].to_string();
    let mut est = vec![
        "estimate",
        "llama-3-8b",
        "--gpu",
        "rtx-4090",
        "--seq",
        "2048",
        "--finetune",
        "lora",
        "--micro-batch",
        &mb,
        "--grad-accum",
        &ga,
    ];
    if p["gradient_checkpointing"] == false {
        est.push("--no-gradient-checkpointing");
    }
    let e = json(&est);
    assert_eq!(e["total_bytes"], p["bytes_per_gpu"]);
    // Layouts the LoRA step does not model, and an engine that cannot run it, are refused.
    for extra in [
        &["--tp", "2"][..],
        &["--zero", "3"][..],
        &["--emit", "deepspeed"][..],
    ] {
        let mut a = l.clone();
        a.extend_from_slice(extra);
        let (code, _, err) = vram(&a);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let mut a = base.to_vec();
    a.extend(["--emit", "peft"]);
    let (code, _, err) = vram(&a);
    assert_eq!(code, 2);
    assert!(err.contains("--finetune lora or qlora"), "{err}");
}
