//! The weights as stored, end to end (issue 31 item 2): `vram estimate --inference` holds a
//! packed checkpoint as transformers 5.24 loads it, in the walk and the allocator replay, and
//! says which layout it assumed; `vram capacity` reads the same storage for a catalog id and
//! its config file.

mod common;
mod fakehub;

use common::{report, report_file, unescape};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

use vram_hub::fake::{safetensors, FakeFile};

fn json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .arg("--json")
        .output()
        .expect("run vram");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json parses")
}

fn zoo(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/zoo/configs")
        .join(format!("{name}.json"))
        .to_string_lossy()
        .into_owned()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// gpt-oss-120b's card: it fits one 80 GB GPU (huggingface.co/openai/gpt-oss-120b, "fit into a
/// single 80GB GPU"), with `pip install -U transformers kernels torch`. transformers 5.24 keeps
/// its MXFP4 experts packed on an H100 when `kernels` and Triton >= 3.4 are there
/// (`Mxfp4HfQuantizer.validate_environment`): the walk holds them as stored and it fits; the
/// catalog id and the config file give the same answer. Without the kernels it dequantizes to
/// bf16 (218 GiB) and does not fit.
#[test]
fn gpt_oss_120b_fits_one_h100_with_its_experts_as_stored() {
    let file = zoo("gpt-oss-120b");
    let mut totals = Vec::new();
    for model in ["gpt-oss-120b", file.as_str()] {
        let v = json(&["estimate", model, "--inference", "--gpu", "h100-80g"]);
        assert_eq!(v["fits"], Value::Bool(true), "{model}");
        let load = &v["weights_load"];
        assert_eq!(load["dequantized"], Value::Bool(false));
        assert_eq!(v["kernels"]["packages"], "mxfp4");
        // The walk holds exactly the stored bytes: 60.8 GiB.
        assert_eq!(u(&v["breakdown"], "parameters"), u(load, "held_bytes"));
        assert_eq!(u(load, "held_bytes"), u(&v, "weights_bytes"));
        assert_eq!(u(load, "stored_bytes"), u(load, "held_bytes"));
        assert!(u(&v, "total_bytes") < 70 << 30, "{}", v["total_bytes"]);
        totals.push(u(&v, "total_bytes"));
    }
    assert_eq!(totals[0], totals[1], "catalog id and config file");
    let none = json(&[
        "estimate",
        &file,
        "--inference",
        "--gpu",
        "h100-80g",
        "--kernels",
        "none",
    ]);
    assert_eq!(none["fits"], Value::Bool(false));
    assert_eq!(none["weights_load"]["dequantized"], Value::Bool(true));
    assert_eq!(
        u(&none["breakdown"], "parameters"),
        u(&none["weights_load"], "dequantized_bytes")
    );
    // --dequantized changes the walk the same way.
    let deq = json(&[
        "estimate",
        &file,
        "--inference",
        "--gpu",
        "h100-80g",
        "--dequantized",
    ]);
    assert_eq!(
        u(&deq["breakdown"], "parameters"),
        u(&none["breakdown"], "parameters")
    );
}

/// gpt-oss-20b on an RTX 4090 (Ada, compute capability 8.9): transformers 5.24 asks for 7.5 or
/// later, so the experts stay packed there (12.8 GiB) and generate fits; on a V100 (7.0) it
/// dequantizes to bf16 and says so.
#[test]
fn gpt_oss_20b_on_an_rtx_4090_and_a_v100() {
    let v = json(&[
        "estimate",
        "gpt-oss-20b",
        "--inference",
        "--gpu",
        "rtx-4090",
    ]);
    assert_eq!(v["fits"], Value::Bool(true));
    assert_eq!(v["weights_load"]["dequantized"], Value::Bool(false));
    assert!(u(&v["breakdown"], "parameters") < 13 << 30);
    let old = json(&[
        "estimate",
        "gpt-oss-20b",
        "--inference",
        "--gpu",
        "v100-32g",
    ]);
    assert_eq!(old["weights_load"]["dequantized"], Value::Bool(true));
    assert!(old["weights_load"]["why"].as_str().unwrap().contains("7.5"));
    // Training dequantizes MXFP4 (the quantizer is not trainable), and says so.
    let train = json(&["estimate", "gpt-oss-20b", "--gpu", "h100-80g"]);
    assert_eq!(train["weights_load"]["dequantized"], Value::Bool(true));
    assert!(train["weights_load"]["why"]
        .as_str()
        .unwrap()
        .contains("training"));
}

/// FP8 DeepSeek-V3 (block-wise, 128 x 128): held as stored on an H100 (compute capability 9.0 >=
/// 8.9, `FineGrainedFP8HfQuantizer.validate_environment`), dequantized on an A100 (8.0).
#[test]
fn fp8_deepseek_v3_is_stored_as_fp8_on_an_h100() {
    let v = json(&[
        "estimate",
        "deepseek-v3",
        "--inference",
        "--gpu",
        "h100-80g",
    ]);
    let load = &v["weights_load"];
    assert_eq!(load["dequantized"], Value::Bool(false));
    assert_eq!(u(&v["breakdown"], "parameters"), u(load, "held_bytes"));
    // About one byte per parameter (with fp32 scales and the bf16 embedding/head).
    let params = u(&v, "params");
    assert!(u(load, "held_bytes") < params * 21 / 20, "{}", load);
    let a100 = json(&[
        "estimate",
        "deepseek-v3",
        "--inference",
        "--gpu",
        "a100-80g",
    ]);
    assert_eq!(a100["weights_load"]["dequantized"], Value::Bool(true));
}

/// `--weights nf4` (alias `--quantization`) for inference: the walk allocates the packed
/// linears, the same bytes `--finetune qlora` holds for its base; both spellings agree.
#[test]
fn weights_and_quantization_are_one_flag() {
    let a = json(&["estimate", "llama-3-8b", "--inference", "--weights", "nf4"]);
    let b = json(&[
        "estimate",
        "llama-3-8b",
        "--inference",
        "--quantization",
        "nf4",
    ]);
    assert_eq!(a["total_bytes"], b["total_bytes"]);
    assert_eq!(u(&a["breakdown"], "parameters"), u(&a, "weights_bytes"));
    let q = json(&["estimate", "llama-3-8b", "--finetune", "qlora"]);
    assert_eq!(u(&q, "weights_bytes"), u(&a, "weights_bytes"));
}

/// `vram capacity` reads the same storage for a catalog id and its config file.
#[test]
fn capacity_reads_one_storage_for_an_id_and_its_file() {
    for name in ["gpt-oss-120b", "deepseek-v3"] {
        let id = json(&["capacity", name, "--gpu", "h200"]);
        let file = json(&["capacity", &zoo(name), "--gpu", "h200"]);
        assert_eq!(id["weights_bytes"], file["weights_bytes"], "{name}");
    }
}

/// A two-layer gpt-oss (transformers 5.24's GptOss names) with 4 experts of width 64, its
/// experts as the published checkpoints store them: U8 MXFP4 blocks and scales, bf16 biases.
const GPT_OSS: &str = r#"{"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 128,
    "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2,
    "vocab_size": 256, "max_position_embeddings": 4096, "attention_bias": true,
    "rope_theta": 150000, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"QUANT}"#;

const MXFP4: &str = r#", "quantization_config": {"quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
    "model.embed_tokens", "lm_head"]}"#;

fn gpt_oss_tensors() -> Vec<(String, &'static str, Vec<u64>)> {
    let (h, i, e, v, heads, kv, hd) = (64, 64, 4, 256, 4, 2, 16);
    let mut t = vec![("model.embed_tokens.weight".to_string(), "BF16", vec![v, h])];
    for l in 0..2 {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push((p("input_layernorm.weight"), "BF16", vec![h]));
        for (n, out, inp) in [
            ("q_proj", heads * hd, h),
            ("k_proj", kv * hd, h),
            ("v_proj", kv * hd, h),
            ("o_proj", h, heads * hd),
        ] {
            t.push((p(&format!("self_attn.{n}.weight")), "BF16", vec![out, inp]));
            t.push((p(&format!("self_attn.{n}.bias")), "BF16", vec![out]));
        }
        t.push((p("self_attn.sinks"), "BF16", vec![heads]));
        t.push((p("post_attention_layernorm.weight"), "BF16", vec![h]));
        t.push((p("mlp.router.weight"), "BF16", vec![e, h]));
        t.push((p("mlp.router.bias"), "BF16", vec![e]));
        for (n, out, inp) in [("gate_up_proj", 2 * i, h), ("down_proj", h, i)] {
            let x = |s: &str| p(&format!("mlp.experts.{n}_{s}"));
            t.push((x("blocks"), "U8", vec![e, out, inp / 32, 16]));
            t.push((x("scales"), "U8", vec![e, out, inp / 32]));
            t.push((x("bias"), "BF16", vec![e, out]));
        }
    }
    t.push(("model.norm.weight".to_string(), "BF16", vec![h]));
    t.push(("lm_head.weight".to_string(), "BF16", vec![v, h]));
    t
}

/// Bytes of the tensors a safetensors file holds (the file less its header).
fn data_bytes(f: &FakeFile) -> u64 {
    f.len - f.head.len() as u64
}

fn vram(args: &[&str], env: &[(&str, String)]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .arg("--json")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run vram");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    (
        serde_json::from_slice(&out.stdout).expect("--json parses"),
        err,
    )
}

/// The text output (no `--json`) and stderr.
fn vram_text(args: &[&str], env: &[(&str, String)]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run vram");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// A report's `notes`.
fn notes(v: &Value) -> Vec<String> {
    v["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("notes in {v}"))
        .iter()
        .map(|n| n.as_str().expect("a note is a string").to_string())
        .collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("storage")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A checkpoint's safetensors headers decide the stored bytes (issue 31 item 2, issue 32
/// item 2). gpt-oss by Hub id (the loopback hub, two shards, headers only): where the config
/// says MXFP4 too, the weights are the headers' bytes plus the expert biases transformers
/// holds in fp32 (`Mxfp4GptOssExperts`), the same figure as its config alone, and no note;
/// where the config says bf16 and nothing else, the headers win and a note gives both figures.
#[test]
fn a_checkpoints_headers_decide_its_stored_bytes() {
    let hub = fakehub::start();
    let d = tmp("hub");
    let env = fakehub::vars(&hub, &d);
    let tensors = gpt_oss_tensors();
    let (e, h, i, layers) = (4, 64, 64, 2);
    let upcast = e * (2 * i + h) * 2 * layers;
    let mut figures = Vec::new();
    for (repo, quant) in [("org/oss-mxfp4", MXFP4), ("org/oss-bare", "")] {
        let config = GPT_OSS.replace("QUANT", quant);
        let shards = [
            ("model-00001-of-00002.safetensors", &tensors[..10]),
            ("model-00002-of-00002.safetensors", &tensors[10..]),
        ];
        let mut files = vec![("config.json".to_string(), FakeFile::bytes(config.clone()))];
        let mut map = serde_json::Map::new();
        let mut stored = 0;
        for (name, ts) in shards {
            for (t, _, _) in ts {
                map.insert(t.clone(), name.into());
            }
            let f = safetensors(ts);
            stored += data_bytes(&f);
            files.push((name.to_string(), f));
        }
        let index = serde_json::json!({"metadata": {}, "weight_map": map});
        files.push((
            "model.safetensors.index.json".into(),
            FakeFile::bytes(serde_json::to_vec(&index).unwrap()),
        ));
        fakehub::add(&hub, repo, &files);
        let (v, err) = vram(
            &["estimate", repo, "--inference", "--gpu", "h100-80g"],
            &env,
        );
        assert_eq!(u(&v, "weights_bytes"), stored + upcast, "{repo}");
        assert_eq!(u(&v["weights_load"], "held_bytes"), stored + upcast);
        assert_eq!(u(&v["weights_load"], "stored_bytes"), stored + upcast);
        assert_eq!(v["weights_load"]["dequantized"], Value::Bool(false));
        // The walk holds what is stored, within a byte a tensor of the shares.
        let held = u(&v["breakdown"], "parameters");
        assert!(held.abs_diff(stored + upcast) < 64, "{held} vs {stored}");
        // The note is the report's (text, `--json` and HTML render the one list).
        let note = notes(&v).into_iter().find(|l| l.contains("headers hold"));
        if quant.is_empty() {
            let note = note.unwrap_or_else(|| panic!("{v}\n{err}"));
            assert!(
                note.contains("mxfp4 experts") && note.contains("config.json says bf16"),
                "{note}"
            );
            let (text, _) = vram_text(
                &["estimate", repo, "--inference", "--gpu", "h100-80g"],
                &env,
            );
            assert!(text.contains(&format!("note: {note}")), "{text}");
            let (c, _) = vram(&["capacity", repo, "--gpu", "h100-80g"], &env);
            assert!(notes(&c).contains(&note), "{c}");
        } else {
            assert_eq!(note, None, "{v}");
            // Headers and config agree: the config alone gives the same figure.
            let file = d.join("gpt-oss.json");
            std::fs::write(&file, &config).unwrap();
            let (alone, _) = vram(
                &[
                    "estimate",
                    file.to_str().unwrap(),
                    "--inference",
                    "--gpu",
                    "h100-80g",
                ],
                &env,
            );
            assert_eq!(u(&alone, "weights_bytes"), u(&v, "weights_bytes"));
        }
        figures.push(u(&v, "weights_bytes"));
    }
    assert_eq!(figures[0], figures[1]);

    // A local folder: a bf16 Llama config whose checkpoint holds FP8 linears with their
    // `weight_scale_inv` (128x128 blocks): the headers win, their bytes exactly.
    let d = tmp("fp8");
    let mut ts = fakehub::decoder_tensors(fakehub::TINY);
    let mut more = Vec::new();
    for (name, dtype, shape) in ts.iter_mut() {
        if name.contains(".layers.") && name.ends_with("_proj.weight") {
            *dtype = "F8_E4M3";
            let s = vec![shape[0].div_ceil(128), shape[1].div_ceil(128)];
            more.push((format!("{name}_scale_inv"), "F32", s));
        }
    }
    ts.extend(more);
    let f = safetensors(&ts);
    std::fs::write(d.join("config.json"), fakehub::TINY).unwrap();
    std::fs::write(d.join("model.safetensors"), f.materialize()).unwrap();
    let (v, err) = vram(&["estimate", d.to_str().unwrap(), "--inference"], &[]);
    assert_eq!(u(&v, "weights_bytes"), data_bytes(&f));
    let note = notes(&v)
        .into_iter()
        .find(|l| l.contains("headers hold"))
        .unwrap_or_else(|| panic!("{v}\n{err}"));
    assert!(
        note.contains("fp8 blocks 128x128") && note.contains("says bf16"),
        "{note}"
    );
}

/// An AWQ MoE checkpoint (Qwen3-30B-A3B's config with an AWQ g128 `quantization_config`):
/// `vram capacity` holds its expert banks packed as vLLM's `AWQMoEMethod` does, the figure
/// `--quantization awq` gives over the bf16 config (55.6 GiB before: the experts unpacked);
/// `vram estimate` says what transformers 5.24 holds (the banks as built in bf16, loaded from
/// nothing), text, `--json` and the HTML report alike.
#[test]
fn awq_moe_experts_are_packed_by_the_engines_and_built_by_transformers() {
    let dir = std::env::temp_dir().join(format!("vram-awq-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string(zoo("qwen3-30b-a3b")).unwrap()).unwrap();
    c["quantization_config"] = serde_json::json!({"quant_method": "awq", "bits": 4,
        "group_size": 128, "zero_point": true, "version": "gemm"});
    let awq = dir.join("awq.json");
    std::fs::write(&awq, c.to_string()).unwrap();
    let awq = awq.to_string_lossy().into_owned();
    let read = json(&["capacity", &awq, "--gpu", "h100"]);
    let flag = json(&[
        "capacity",
        &zoo("qwen3-30b-a3b"),
        "--gpu",
        "h100",
        "--quantization",
        "awq",
    ]);
    assert_eq!(read["weights_bytes"], flag["weights_bytes"]);
    assert!(u(&read, "weights_bytes") < 17 << 30, "{read}");

    let v = json(&["estimate", &awq, "--inference", "--gpu", "h100"]);
    let load = &v["weights_load"];
    let (held, stored) = (u(load, "held_bytes"), u(load, "stored_bytes"));
    assert!(held > 3 * stored, "{load}");
    assert!(load.get("dequantized_at_load").is_none(), "{load}");
    let part = load["not_loaded"].as_str().expect("not_loaded");
    assert!(part.starts_with("the expert banks"), "{part}");
    let fmt = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    let (text, _) = vram_text(&["estimate", &awq, "--inference", "--gpu", "h100"], &[]);
    assert!(
        text.contains(&format!(
            "weights held: {}, as the library loads them: {part} held as built in the dtype, not loaded from the checkpoint",
            fmt(held)
        )),
        "{text}"
    );
    assert!(!text.contains("dequantized into"), "{text}");
    let html = unescape(&report("awq-moe", &v.to_string()).0);
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        html.contains("held as built, not loaded from the checkpoint"),
        "{html}"
    );
    assert!(!html.contains("dequantized at load"), "{html}");
    assert!(
        html.contains(&fmt(held)) && html.contains(&fmt(stored)),
        "{html}"
    );
}

/// `vram report` on estimates saved by the last `vram` to write schema version 1 (c72f1e1;
/// `crates/vram-report/tests/data/schema-v1/README.md`). A compressed-tensors W4A16 MoE: its one
/// weights figure is what that vram held (the banks packed, as stored), and the page says that
/// transformers 5.24 dequantizes them. An AWQ MoE, whose figure is not the checkpoint's stored
/// bytes, and a version this build does not know: bad input, one line, no page.
#[test]
fn a_version_1_estimate_renders_what_that_vram_held() {
    let saved = |name: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../vram-report/tests/data/schema-v1")
            .join(name)
    };
    let w4a16 = saved("estimate-w4a16-moe-qwen3-30b-a3b.json");
    let text = std::fs::read_to_string(&w4a16).unwrap();
    let old: Value = serde_json::from_str(&text).unwrap();
    let stored = u(&old["weights_load"], "stored_bytes");
    let d = tmp("v1");
    let page = d.join("v1.html");
    let out = report_file(&w4a16, &page);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = unescape(&std::fs::read_to_string(&page).unwrap());
    let gib = format!("{:.1} GiB", stored as f64 / (1u64 << 30) as f64);
    assert!(
        html.contains("weights held as stored") && html.contains(&gib),
        "{html}"
    );
    assert!(
        html.contains("read from a schema version 1 report"),
        "{html}"
    );
    assert!(!html.contains("dequantized at load"), "{html}");

    let later = d.join("v3.json");
    std::fs::write(
        &later,
        text.replacen("\"schema_version\": 1", "\"schema_version\": 3", 1),
    )
    .unwrap();
    for (input, says) in [
        (later, "schema_version 3: this vram reads versions 1 and 2"),
        (
            saved("estimate-awq-moe-qwen3-30b-a3b.json"),
            "a schema_version 1 estimate whose checkpoint is an MoE in awq-g128",
        ),
    ] {
        let page = d.join("refused.html");
        let out = report_file(&input, &page);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!page.exists());
    }
}
