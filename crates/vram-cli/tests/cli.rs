//! End-to-end tests of the `vram` binary: bad input, output contracts, file inputs.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::vram;

/// A fresh temporary folder for one test.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vram-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_string_lossy().into_owned()
}

const LLAMA: &str = r#"{"model_type":"llama","vocab_size":32000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":8}"#;

/// A minimal safetensors file: one BF16 tensor of `shape`, zero-filled data.
fn safetensors(shape: &[u64]) -> Vec<u8> {
    safetensors_named("w", shape)
}

/// [`safetensors`] with the tensor named `name`.
fn safetensors_named(name: &str, shape: &[u64]) -> Vec<u8> {
    let n: u64 = shape.iter().product::<u64>() * 2;
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let header = format!(
        r#"{{"{name}":{{"dtype":"BF16","shape":[{}],"data_offsets":[0,{n}]}}}}"#,
        dims.join(",")
    );
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend(std::iter::repeat_n(0u8, n as usize));
    v
}

#[test]
fn bad_input_table() {
    let dir = tmp("bad");
    let cfg = |name: &str, text: &str| write(&dir, name, text.as_bytes());
    let llama_with = |field: &str, value: &str| {
        let v: serde_json::Value = serde_json::from_str(LLAMA).unwrap();
        let mut m = v.as_object().unwrap().clone();
        m.insert(field.into(), serde_json::from_str(value).unwrap());
        serde_json::to_string(&m).unwrap()
    };
    let empty_dir = dir.join("empty");
    std::fs::create_dir_all(&empty_dir).unwrap();
    let mut trunc = safetensors(&[4, 4]);
    trunc.truncate(20);
    let idx_dir = dir.join("sharded");
    std::fs::create_dir_all(&idx_dir).unwrap();
    std::fs::write(
        idx_dir.join("model.safetensors.index.json"),
        r#"{"weight_map":{"w":"model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();

    // (args, what the one-line error must mention)
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![cfg("trunc.json", r#"{"model_type": "llama","#)],
            "not valid JSON",
        ),
        (vec![cfg("empty.json", "")], "empty"),
        (
            vec![write(&dir, "bin.json", &[0xff, 0x00, 0xfe, 0x01])],
            "not UTF-8",
        ),
        (
            vec![cfg("unknown.json", r#"{"model_type":"frobnet"}"#)],
            "unknown model_type `frobnet`",
        ),
        (
            vec![cfg("notype.json", r#"{"hidden_size":4}"#)],
            "unknown model_type `(missing)`",
        ),
        (vec![cfg("array.json", "[1,2]")], "should be an object"),
        (
            vec![cfg(
                "missing.json",
                r#"{"model_type":"llama","vocab_size":32000,"num_hidden_layers":2,"num_attention_heads":8,"intermediate_size":512}"#,
            )],
            "no `hidden_size`",
        ),
        (
            vec![cfg("typed.json", &llama_with("hidden_size", "\"256\""))],
            "`hidden_size` should be a positive integer",
        ),
        (
            vec![cfg("zero.json", &llama_with("num_hidden_layers", "0"))],
            "num_hidden_layers = 0",
        ),
        (
            vec![cfg("neg.json", &llama_with("hidden_size", "-1"))],
            "hidden_size = -1",
        ),
        (
            vec![cfg(
                "absurd.json",
                &llama_with("hidden_size", "1000000000000"),
            )],
            "hidden_size",
        ),
        (
            vec![cfg("float.json", &llama_with("num_attention_heads", "7.5"))],
            "num_attention_heads",
        ),
        (
            vec![cfg(
                "heads.json",
                r#"{"model_type":"gpt2","vocab_size":100,"n_embd":100,"n_layer":2,"n_head":3,"n_positions":64}"#,
            )],
            "hidden size by attention heads",
        ),
        (
            vec![cfg("kv.json", &llama_with("num_key_value_heads", "3"))],
            "key/value heads",
        ),
        (
            vec![cfg("kvbig.json", &llama_with("num_key_value_heads", "16"))],
            "key/value heads",
        ),
        (
            vec![cfg(
                "bool.json",
                &llama_with("tie_word_embeddings", "\"yes\""),
            )],
            "tie_word_embeddings",
        ),
        (
            vec![cfg("drop.json", &llama_with("attention_dropout", "1.5"))],
            "attention_dropout",
        ),
        (
            vec![cfg(
                "moe.json",
                r#"{"model_type":"mixtral","vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_local_experts":2,"num_experts_per_tok":4}"#,
            )],
            "num_experts_per_tok",
        ),
        (
            vec!["llama-3-8b".into(), "--tp".into(), "3".into()],
            "--tp must divide the attention heads",
        ),
        (
            vec!["llama-3-8b".into(), "--gpu".into(), "z100".into()],
            "unknown GPU `z100`",
        ),
        // A size out of range was an "unknown GPU" whose list ends "or a size such as 23.58GiB".
        (
            vec!["llama-3-8b".into(), "--gpu".into(), "0GiB".into()],
            "--gpu = 0GiB is out of range",
        ),
        (
            vec!["llama-3-8b".into(), "--gpu".into(), "1e30GiB".into()],
            "--gpu = 1e30GiB is out of range",
        ),
        (vec!["llama-9".into()], "unknown model `llama-9`"),
        (
            vec![empty_dir.to_string_lossy().into_owned()],
            "has no config.json",
        ),
        (
            vec![dir.join("nope/config.json").to_string_lossy().into_owned()],
            "no such file",
        ),
        (vec!["gpt2".into(), "--frobnicate".into()], "--frobnicate"),
        (
            vec!["gpt2".into(), "--micro-batch".into(), "0".into()],
            "--micro-batch = 0",
        ),
        (
            vec!["gpt2".into(), "--micro-batch".into(), "-3".into()],
            "-3",
        ),
        (
            vec!["gpt2".into(), "--micro-batch".into(), "99999999999".into()],
            "--micro-batch",
        ),
        (vec!["gpt2".into(), "--seq".into(), "0".into()], "--seq = 0"),
        // Beyond gpt2's 1024 positions too: the note on that is not printed before the error.
        (
            vec!["gpt2".into(), "--seq".into(), "99999999999".into()],
            "--seq = 99999999999",
        ),
        (
            vec![
                "gpt2".into(),
                "--inference".into(),
                "--prompt".into(),
                "8".into(),
                "--new-tokens".into(),
                "0".into(),
            ],
            "--new-tokens must be at least 1",
        ),
        (
            vec![
                "llama-3-8b".into(),
                "--pp".into(),
                "4".into(),
                "--recompute".into(),
                "full".into(),
                "--recompute-layers".into(),
                "9".into(),
            ],
            "--recompute-layers 9 exceeds the 8 layers of a pipeline stage",
        ),
        (
            vec![
                "gpt2".into(),
                "--zero".into(),
                "4".into(),
                "--dp".into(),
                "2".into(),
            ],
            "--zero",
        ),
        // Adapter flags without adapters changed nothing, silently.
        (
            vec!["gpt2".into(), "--lora-rank".into(), "8".into()],
            "--lora-rank is for adapters: add --finetune lora or qlora",
        ),
        (
            vec![
                "gpt2".into(),
                "--lora-targets".into(),
                "c_attn".into(),
                "--lora-dropout".into(),
                "0.1".into(),
            ],
            "--lora-targets, --lora-dropout are for adapters",
        ),
        (
            vec!["gpt2".into(), "--sequence-parallel".into()],
            "--sequence-parallel needs --tp",
        ),
        (
            vec![
                "gpt2".into(),
                "--zero".into(),
                "2".into(),
                "--offload".into(),
                "params".into(),
            ],
            "--offload params needs --zero 3",
        ),
        (
            vec!["gpt2".into(), "--offload".into(), "optimizer".into()],
            "--offload needs ZeRO",
        ),
        (
            vec!["gpt2".into(), "--precision".into(), "fp64".into()],
            "fp64",
        ),
        (
            vec!["gpt2".into(), "--pp".into(), "100".into()],
            "exceeds the model's 12 layers",
        ),
        (
            vec!["gpt2".into(), "--fragmentation".into(), "50".into()],
            "between 0 and 10",
        ),
        (
            vec!["gpt2".into(), "--warmup-prompt".into(), "32".into()],
            "it goes with --inference",
        ),
        (
            vec![
                "gpt2".into(),
                "--inference".into(),
                "--warmup-prompt".into(),
                "32".into(),
                "--fragmentation".into(),
                "0.1".into(),
            ],
            "--fragmentation replaces",
        ),
        (
            vec!["gpt2".into(), "--schedule".into(), "interleaved:x".into()],
            "chunks must be a number",
        ),
        (
            vec!["gpt2".into(), "--cuda-context".into(), "12XB".into()],
            "unknown unit",
        ),
        (
            vec!["gpt2".into(), "--recompute-layers".into(), "4".into()],
            "--recompute-layers needs",
        ),
        (
            vec!["gpt2".into(), "--context".into(), "128".into()],
            "--context and --prompt are for --inference",
        ),
        (
            vec![
                "gpt2".into(),
                "--inference".into(),
                "--dp".into(),
                "2".into(),
            ],
            "inference takes",
        ),
        (
            vec!["resnet-50".into(), "--tp".into(), "2".into()],
            "transformers only",
        ),
        (vec![write(&dir, "trunc.safetensors", &trunc)], "truncated"),
        (
            vec![write(&dir, "tiny.safetensors", &[1, 2, 3])],
            "shorter than the 8-byte",
        ),
        (
            vec![idx_dir
                .join("model.safetensors.index.json")
                .to_string_lossy()
                .into_owned()],
            "is missing",
        ),
    ];
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for (args, needle) in &cases {
        let mut full = vec!["estimate"];
        full.extend(args.iter().map(String::as_str));
        let (code, _out, err) = vram(&full);
        let lines = err.trim_end().lines().count();
        if code != 2 || lines != 1 || !err.contains(needle) || err.contains("panicked") {
            failures.push(format!(
                "{args:?}: exit {code}, {lines} lines, stderr {err:?} (wanted {needle:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn json_output_contract() {
    let (code, out, err) = vram(&["estimate", "llama-3-8b", "--gpu", "h100-80g", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["params"].as_u64(), Some(8_030_261_248));
    let peak = v["peak_bytes"].as_u64().unwrap();
    let total = v["total_bytes"].as_u64().unwrap();
    let breakdown = v["breakdown"].as_object().unwrap();
    let sum: u64 = breakdown.values().map(|b| b.as_u64().unwrap()).sum();
    assert_eq!(sum, total, "breakdown sums to the device total");
    assert!(peak < total);
    // Model states alone, 16 bytes per parameter under AMP + AdamW, are already over 80 GB.
    assert_eq!(v["fits"], serde_json::Value::Bool(false));
    assert!(peak > 16 * 8_030_261_248);
}

#[test]
fn readme_command_runs() {
    let (code, out, _) = vram(&["estimate", "llama-3-8b", "--gpu", "h100-80g"]);
    assert_eq!(code, 0);
    assert!(out.contains("8,030,261,248 parameters"));
    assert!(out.contains("peak allocated"));
    assert!(out.contains("optimizer_states"));
    // It does not fit one H100; ZeRO-3 over 8 GPUs shards the 16 bytes/param to 2 and fits.
    assert!(out.contains("would fit with --zero 3 --dp 8:"), "{out}");
}

#[test]
fn config_folder_and_checkpoint_cross_check() {
    let dir = tmp("folder");
    // A llama with 2 layers; its checkpoint would have the same count. We write a fake
    // single-tensor checkpoint of a different size to see the cross-check report it.
    write(&dir, "config.json", LLAMA.as_bytes());
    write(&dir, "model.safetensors", &safetensors(&[16, 8]));
    let (code, out, err) = vram(&["estimate", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("checkpoint beside the config: 128 parameters (config says"),
        "{out}"
    );
}

#[test]
fn safetensors_header_only() {
    let dir = tmp("st");
    let path = write(&dir, "model.safetensors", &safetensors(&[1000, 64]));
    let (code, out, err) = vram(&["estimate", &path, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["params"].as_u64(), Some(64_000));
    assert_eq!(v["weights_bytes"].as_u64(), Some(128_000));
    // Sharded: two shards listed in an index.
    let shard_dir = dir.join("sharded");
    std::fs::create_dir_all(&shard_dir).unwrap();
    write(
        &shard_dir,
        "a.safetensors",
        &safetensors_named("x", &[10, 10]),
    );
    write(&shard_dir, "b.safetensors", &safetensors_named("y", &[5]));
    let index = write(
        &shard_dir,
        "model.safetensors.index.json",
        br#"{"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}"#,
    );
    let (code, out, err) = vram(&["estimate", &index, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["params"].as_u64(), Some(105));
    // A tensor stored in two shards is a broken checkpoint (an index maps each name to one
    // shard): refused in one line naming it, not counted once or twice.
    write(&shard_dir, "c.safetensors", &safetensors_named("x", &[5]));
    let dup = write(
        &shard_dir,
        "dup.safetensors.index.json",
        br#"{"metadata":{},"weight_map":{"x":"a.safetensors","y":"c.safetensors"}}"#,
    );
    let (code, _, err) = vram(&["estimate", &dup, "--json"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("tensor `x` is stored in two shards"), "{err}");
}

#[test]
fn inference_reports_kv_cache() {
    let (code, out, _) = vram(&[
        "estimate",
        "llama-2-7b",
        "--inference",
        "--batch",
        "4",
        "--context",
        "4097",
        "--kv-cache",
        "static",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // KV cache by hand: 2 (K and V) x 32 layers x 4 x 4096 tokens x 4096 (32 heads x 128) x 2 bytes = 8 GiB.
    // transformers' StaticCache holds prompt + new tokens - 1 = 4097 - 1 tokens.
    assert_eq!(
        v["breakdown"]["kv_cache"].as_u64(),
        Some(2 * 32 * 4 * 4096 * 4096 * 2)
    );
    assert!(v["max_batch"].as_u64().unwrap() >= 4);
}

#[test]
fn help_and_listings() {
    let (code, out, _) = vram(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("estimate"));
    let (code, out, _) = vram(&["models", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.as_array().unwrap().len() >= 26);
    let (code, out, _) = vram(&["gpus"]);
    assert_eq!(code, 0);
    assert!(out.contains("mi300x"));
}

// ---- vram trace / vram replay ------------------------------------------------

fn alloc_fixture(name: &str) -> String {
    format!(
        "{}/../vram-alloc/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn replay_json(path: &str) -> serde_json::Value {
    let (code, out, err) = vram(&[
        "replay",
        path,
        "--json",
        "--capacity",
        "80GiB",
        "--trim-slack",
        "0.005",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("replay --json prints JSON")
}

/// The issue-4 target: on `vram trace` snapshots of at least three models,
/// vramkit's peak reserved is at most 1.05 x peak allocated and below the
/// PyTorch-policy baseline. Since issue 13 that is the memory-first setting
/// (`--trim-slack 0.005`); the default vramkit policy, which makes no device
/// call in steady state, stays no higher than PyTorch's expandable segments.
#[test]
fn trace_then_replay_meets_the_expandable_target_on_three_models() {
    let dir = tmp("trace-replay");
    for model in ["gpt2", "bert-large-uncased", "llama-2-7b"] {
        let out = dir
            .join(format!("{model}.pickle"))
            .to_string_lossy()
            .into_owned();
        let (code, stdout, err) = vram(&["trace", model, "--steps", "2", "--out", &out]);
        assert_eq!(code, 0, "{err}");
        assert!(stdout.starts_with("wrote "), "{stdout}");
        let v = replay_json(&out);
        let policies = v["policies"].as_array().unwrap();
        let get = |name: &str| policies.iter().find(|p| p["name"] == name).unwrap().clone();
        let (base, ours) = (get("pytorch"), get("vramkit [trim_slack 0.005]"));
        let (exp, default) = (get("pytorch-expandable"), get("vramkit"));
        // Within 0.5 %: on the estimator's synthetic trace of bert-large (per-tensor weights,
        // gradients and optimizer states created in the first step) the default policy holds
        // 0.3 % more than expandable segments; on the four real H100 snapshots it is at or
        // below (vram-alloc's `vramkit_makes_no_device_calls_in_steady_state_on_real_traces`).
        assert!(
            default["peak_reserved_bytes"].as_f64().unwrap()
                <= 1.005 * exp["peak_reserved_bytes"].as_f64().unwrap(),
            "{model}"
        );
        let alloc = ours["peak_allocated_bytes"].as_f64().unwrap();
        let reserved = ours["peak_reserved_bytes"].as_f64().unwrap();
        assert!(reserved <= 1.05 * alloc, "{model}: {reserved} vs {alloc}");
        assert!(
            reserved < base["peak_reserved_bytes"].as_f64().unwrap(),
            "{model}"
        );
        // The trace was recorded under the PyTorch policy, so replaying that
        // policy reproduces the recorded peak.
        assert_eq!(
            v["recorded"]["peak_reserved_bytes"], base["peak_reserved_bytes"],
            "{model}"
        );
    }
}

/// `vram trace --events` (issue 34): the walk's events with each phase's start and its price
/// by the planner's step-time model, one step's phases repeated in every step, the file saying
/// it is vramkit's model and not a recording; what it cannot price is refused in one line.
#[test]
fn trace_events_carry_phases_for_the_simulator() {
    let dir = tmp("trace-events");
    let out = dir.join("gpt2.json").to_string_lossy().into_owned();
    let (code, stdout, err) = vram(&[
        "trace",
        "gpt2",
        "--steps",
        "2",
        "--micro-batch",
        "2",
        "--seq",
        "512",
        "--events",
        &out,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("not a GPU recording"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(v["source"]
        .as_str()
        .unwrap()
        .contains("not a GPU recording"));
    let phases = v["phases"].as_array().unwrap();
    let kinds: Vec<&str> = phases.iter().map(|p| p["kind"].as_str().unwrap()).collect();
    // GPT-2 small: before, the embedding and 12 layers' forward, the loss (twice), 12 backward,
    // the optimizer.
    assert_eq!(kinds.iter().filter(|k| **k == "forward").count(), 13);
    assert_eq!(kinds.iter().filter(|k| **k == "backward").count(), 12);
    assert_eq!(kinds.last(), Some(&"optimizer"));
    assert!(phases.iter().all(|p| p["seconds"].as_f64().unwrap() >= 0.0));
    let starts = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["phase"] == 0)
        .count();
    assert_eq!(starts, 2, "each step starts with phase 0");
    let (code, _, err) = vram(&["trace", "gpt2", "--inference", "--events", &out]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--events needs a transformer's training step"),
        "{err}"
    );
}

#[test]
fn replay_adds_a_row_for_alloc_conf() {
    let (code, out, err) = vram(&[
        "replay",
        &alloc_fixture("torch_like_snapshot.pickle"),
        "--json",
        "--policy",
        "pytorch",
        "--alloc-conf",
        "expandable_segments:True",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["pytorch", "pytorch-expandable [expandable_segments:True]"]
    );
}

#[test]
fn replay_reads_cpython_snapshots_and_prints_a_table() {
    let (code, out, err) = vram(&["replay", &alloc_fixture("torch_like_snapshot.pickle")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("as recorded (the allocator that wrote the trace): peak allocated 12.0 MiB, peak reserved 20.0 MiB"),
        "{out}"
    );
    for name in ["pytorch ", "pytorch-expandable ", "vramkit "] {
        assert!(out.contains(name), "{out}");
    }
}

#[test]
fn replay_bad_input_exits_2_with_one_line() {
    let dir = tmp("replay-bad");
    let good = std::fs::read(alloc_fixture("torch_like_snapshot.pickle")).unwrap();
    let truncated = write(&dir, "truncated.pickle", &good[..good.len() / 2]);
    let cases = [
        (
            alloc_fixture("evil_reduce.pickle"),
            "global posix.system is not allowed",
        ),
        (
            alloc_fixture("evil_global_p0.pickle"),
            "global os.system is not allowed",
        ),
        (
            alloc_fixture("wrong_types.pickle"),
            "'segments' is not a list",
        ),
        (alloc_fixture("not_a_dict.pickle"), "expected a dict"),
        (truncated, "truncated pickle"),
        (
            dir.join("missing.pickle").to_string_lossy().into_owned(),
            "cannot read snapshot",
        ),
    ];
    for (path, want) in cases {
        let (code, out, err) = vram(&["replay", &path]);
        assert_eq!(code, 2, "{path}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("vram: ") && err.contains(want),
            "{path}: {err}"
        );
    }
    let (code, _, err) = vram(&[
        "replay",
        &alloc_fixture("torch_like_snapshot.pickle"),
        "--policy",
        "magic",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown policy"), "{err}");
    // A capacity of nothing made every policy "OOM at 0 B" beside its peak reserved.
    let (code, out, err) = vram(&[
        "replay",
        &alloc_fixture("torch_like_snapshot.pickle"),
        "--capacity",
        "0B",
    ]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert_eq!(err.trim_end(), "vram: --capacity must be more than 0 bytes");
    // A policy named twice was two rows.
    let (code, out, err) = vram(&[
        "replay",
        &alloc_fixture("torch_like_snapshot.pickle"),
        "--policy",
        "pytorch",
        "--policy",
        "pytorch",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("pytorch ")).count(),
        1,
        "{out}"
    );
}

/// A protocol-2 pickle of a snapshot with no segments and one trace of `events`, each
/// `(action, addr, size)` (BININT: a signed 32-bit integer).
fn snapshot_pickle(events: &[(&str, i32, i32)]) -> Vec<u8> {
    fn text(b: &mut Vec<u8>, s: &str) {
        b.push(b'X');
        b.extend((s.len() as u32).to_le_bytes());
        b.extend(s.as_bytes());
    }
    let mut b = vec![0x80, 2, b'}', b'('];
    text(&mut b, "segments");
    b.push(b']');
    text(&mut b, "device_traces");
    b.extend([b']', b']', b'(']);
    for &(action, addr, size) in events {
        b.extend([b'}', b'(']);
        for (k, v) in [("addr", addr), ("size", size)] {
            text(&mut b, k);
            b.push(b'J');
            b.extend(v.to_le_bytes());
        }
        text(&mut b, "action");
        text(&mut b, action);
        b.push(b'u');
    }
    b.extend([b'e', b'a', b'u', b'.']);
    b
}

/// Hostile input to every command, found by a sweep of each subcommand and option (session 12):
/// each case exited 0 with nonsense, exited 1, or named no cause, and is now exit 2 with one
/// specific line (a `vram record` status line may precede it), nothing on stdout, no file left.
#[test]
fn hostile_input_every_command_is_one_line_and_exit_2() {
    let dir = tmp("hostile");
    let good = snapshot_pickle(&[("alloc", 4096, 512), ("free_completed", 4096, 512)]);
    let (code, _, err) = vram(&["replay", &write(&dir, "good.pickle", &good)]);
    assert_eq!(
        code, 0,
        "the pickle builder writes a snapshot vram reads: {err}"
    );
    let negative = write(&dir, "neg.pickle", &snapshot_pickle(&[("alloc", 0, -1)]));
    // Frees of blocks allocated before the history began, and no allocation.
    let no_allocs = write(
        &dir,
        "frees.pickle",
        &snapshot_pickle(&[("free_completed", 64, 512)]),
    );
    let config = write(&dir, "config.json", LLAMA.as_bytes());
    let gptq_no_bits = write(
        &dir,
        "gptq.json",
        LLAMA
            .replace(
                '}',
                r#","quantization_config":{"quant_method":"gptq","group_size":128}}"#,
            )
            .as_bytes(),
    );
    let empty = write(&dir, "empty.jsonl", b"");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = |name: &str| out_dir.join(name).display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let doctor = |extra: &[&str]| {
        let mut v = s(&["doctor", OOM_2_5, "--no-nvml"]);
        v.extend(s(extra));
        v
    };
    // (args, what the error line must say)
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        // A -1 size read as 16 EiB: "as recorded: peak allocated 16384 PiB", every policy 0 B.
        (
            s(&["replay", &negative]),
            "device_traces[0][0].size is -1, expected a non-negative int",
        ),
        (doctor(&["--snapshot", &negative]), "size is -1"),
        // An empty history replayed to "peak reserved 0 bytes, fits" under the doctor's remedies.
        (
            doctor(&["--snapshot", &no_allocs]),
            "the snapshot has no allocation history",
        ),
        // A file with no sample was "the recording is too short for a leak verdict".
        (
            doctor(&["--recording", &config]),
            "the recording holds no complete sample",
        ),
        (
            doctor(&["--recording", &empty]),
            "the recording holds no complete sample",
        ),
        // Every strategy printed as "no", exit 0.
        (
            s(&["checkpoint", "gpt2", "--gpu", "h100-80g", "--budget", "0"]),
            "--budget must be more than 0 bytes",
        ),
        // Blamed --new-tokens: "--new-tokens 16 leaves no prompt in a context of 16 tokens".
        (
            s(&["estimate", "gpt2", "--inference", "--prompt", "0"]),
            "--prompt must be at least 1 token",
        ),
        // "unknown GPU size `0GiB`" for a size that is one, out of range (a bare 0GiB said so).
        (
            s(&["estimate", "gpt2", "--gpu", "h100:0GiB"]),
            "--gpu = h100:0GiB is out of range",
        ),
        (
            s(&["capacity", "llama-3-8b", "--gpu", "h100:1e30GiB"]),
            "--gpu = h100:1e30GiB is out of range",
        ),
        // Negative values were "unexpected argument '-1' found" with a tip (`-- -1`) that
        // cannot pass a value to an option.
        (
            s(&["estimate", "gpt2", "--seq", "-1"]),
            "invalid value '-1' for '--seq <SEQ>'",
        ),
        (
            s(&["estimate", "gpt2", "--fragmentation", "-0.1"]),
            "`-0.1` must be between 0 and 10",
        ),
        (
            s(&["estimate", "gpt2", "--cuda-context", "-1GiB"]),
            "invalid value '-1GiB' for '--cuda-context",
        ),
        (
            s(&["estimate", "gpt2", "--gpu", "-1GiB"]),
            "--gpu = -1GiB is out of range",
        ),
        (
            s(&[
                "checkpoint",
                "gpt2",
                "--gpu",
                "h100-80g",
                "--budget",
                "-8GiB",
            ]),
            "invalid value '-8GiB' for '--budget",
        ),
        (
            s(&["capacity", "llama-3-8b", "--gpu", "h100-80g", "-O", "-1"]),
            "invalid value '-1' for '--optimization-level",
        ),
        (
            s(&[
                "capacity",
                "llama-3-8b",
                "--gpu",
                "h100-80g",
                "--gpu-memory-utilization",
                "-0.5",
            ]),
            "--gpu-memory-utilization -0.5 is outside (0, 1]",
        ),
        (
            s(&["top", "--demo", "--once", "--interval", "-1s"]),
            "invalid value '-1s' for '--interval",
        ),
        (
            s(&[
                "replay",
                &write(&dir, "g.pickle", &good),
                "--trim-slack",
                "-1",
            ]),
            "--trim-slack -1: expected a non-negative fraction",
        ),
        // Read as 4 bits; transformers 5.24's GPTQConfig has no default for `bits` (TypeError).
        (
            s(&["estimate", &gptq_no_bits]),
            "config.json has no `quantization_config.bits`",
        ),
        (
            s(&["capacity", &gptq_no_bits, "--gpu", "h100-80g"]),
            "no `quantization_config.bits`",
        ),
        // Read as the 0.11 series: a patch is a number.
        (
            s(&[
                "capacity",
                "llama-3-8b",
                "--gpu",
                "h100-80g",
                "--engine-version",
                "0.11.-1",
            ]),
            "--engine-version 0.11.-1: the vllm memory layouts known are",
        ),
        // A revision is a path under the cache's refs/: `../../x` wrote outside the cache.
        (
            s(&["estimate", "org/name", "--revision", "../../x"]),
            "--revision `../../x` is not a branch, tag or commit name",
        ),
        (
            s(&["estimate", "org/name", "--revision", ""]),
            "--revision `` is not a branch, tag or commit name: it is empty",
        ),
    ];
    #[cfg(target_os = "linux")]
    {
        // "cannot write /proc/version: entity not found": the kind's words, no cause.
        cases.push((
            s(&["trace", "gpt2", "--out", "/proc/version"]),
            "cannot create a file in /proc: No such file or directory",
        ));
        // A full disk was exit 1; the place the user chose has no room, as a read-only one.
        for args in [
            s(&["trace", "gpt2", "--out", "/dev/full"]),
            s(&[
                "trace",
                "gpt2",
                "--out",
                &out("t.pickle"),
                "--events",
                "/dev/full",
            ]),
            s(&["report", "--demo", "-o", "/dev/full"]),
            s(&["record", "--demo", "--count", "1", "-o", "/dev/full"]),
        ] {
            cases.push((args, "No space left on device"));
        }
    }
    let mut failures = Vec::new();
    for (args, needle) in &cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, err) = vram(&argv);
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| !l.starts_with("vram record: "))
            .collect();
        if code != 2
            || errors.len() != 1
            || !errors[0].starts_with("vram: ")
            || !errors[0].contains(needle)
            || !stdout.is_empty()
        {
            failures.push(format!(
                "{args:?}: exit {code}, stderr {err:?}, stdout {} bytes (wanted {needle:?})",
                stdout.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        listing(&out_dir),
        Vec::<String>::new(),
        "a refused write left a file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn output_files_are_whole_or_absent_and_a_bad_path_is_exit_2() {
    let dir = tmp("outfiles");
    let folder = dir.join("a-folder");
    std::fs::create_dir_all(&folder).unwrap();
    // A file beside the output that an earlier version overwrote with its temporary.
    let beside = write(&dir, "snap.partial", b"keep me");
    let missing = dir.join("no-such-folder/x.out");
    let recording = write(&dir, "rec.jsonl", b"");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "trace".into(),
            "gpt2".into(),
            "--out".into(),
            folder.display().to_string(),
        ],
        vec![
            "trace".into(),
            "gpt2".into(),
            "--out".into(),
            missing.display().to_string(),
        ],
        // --events is computed and then not written when --out cannot be.
        vec![
            "trace".into(),
            "gpt2".into(),
            "--events".into(),
            dir.join("ev.json").display().to_string(),
            "--out".into(),
            missing.display().to_string(),
        ],
        vec![
            "report".into(),
            "--demo".into(),
            "-o".into(),
            folder.display().to_string(),
        ],
        vec![
            "report".into(),
            "--demo".into(),
            "-o".into(),
            missing.display().to_string(),
        ],
        // An unreadable recording writes nothing at its default output (rec.html).
        vec!["report".into(), recording.clone()],
    ];
    let before = listing(&dir);
    for args in &cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = vram(&argv);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("vram: ") && !err.contains(".partial"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(listing(&dir), before, "{args:?} left a file behind");
        assert!(
            listing(&folder).is_empty(),
            "{args:?} wrote into the folder"
        );
    }
    let snap = dir.join("snap.pickle");
    let (code, _, err) = vram(&["trace", "gpt2", "--out", &snap.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&beside).unwrap(), b"keep me");
    let (code, _, err) = vram(&["replay", &snap.display().to_string()]);
    assert_eq!(code, 0, "the snapshot written is whole: {err}");
}

/// PyTorch 2.5+'s message (format of c10/cuda/CUDACachingAllocator.cpp): 42 GiB
/// cached but unallocated (more than the 35 GiB live), a 2 GiB request, 1.5 GiB free.
const OOM_2_5: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB memory in use. Of the allocated memory 35.00 GiB is allocated by PyTorch, and 42.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

#[test]
fn doctor_reads_an_argument_a_file_or_stdin() {
    let (code, out, err) = vram(&["doctor", OOM_2_5, "--no-nvml"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1. fragmentation (explains it alone)"),
        "{out}"
    );
    assert!(
        out.contains(
            "1. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  [enough; saves 42.00 GiB]"
        ),
        "{out}"
    );
    let dir = tmp("doctor");
    let f = write(
        &dir,
        "log.txt",
        format!("Traceback ...\n{OOM_2_5}\n").as_bytes(),
    );
    let (code, out2, _) = vram(&["doctor", &f, "--no-nvml"]);
    assert_eq!((code, &out2), (0, &out));
    let (code, out, err) = common::vram_stdin(&["doctor", "--no-nvml", "--json"], OOM_2_5);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["causes"][0]["kind"], "fragmentation");
    assert_eq!(v["message"]["requested_bytes"], 2u64 << 30);
    assert_eq!(v["remedies"][0]["saves_bytes"], 42u64 << 30);
}

/// A pasted vLLM start-up log with the engine's profiling lines (vllm#13882's V0 0.7.3 profile,
/// in vram-doctor's `tests/data/serving-profiles.txt`, with the error 0.7.3 raises at 0 blocks):
/// text and JSON name the weights, with the same figures, and the JSON carries the profile read.
#[test]
fn doctor_reads_the_engines_profile_lines_in_a_pasted_serving_log() {
    let log = "the current vLLM instance can use total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70) = 5.60GiB\n\
               model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.\n\
               ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let dir = tmp("doctor-profile");
    let f = write(&dir, "serve.log", log.as_bytes());
    let (code, out, err) = vram(&["doctor", &f, "--no-nvml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("the weights took the most: 5.20 GiB"), "{out}");
    assert!(
        out.contains("1. --gpu-memory-utilization 0.84  [not enough alone]"),
        "{out}"
    );
    let (code, json, _) = vram(&["doctor", &f, "--no-nvml", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["cause"], "weights");
    assert_eq!(v["profile"]["layout"], "vllm-v0");
    assert_eq!(v["remedies"][0]["action"], "--gpu-memory-utilization 0.84");
    assert!(v["explanation"]
        .as_str()
        .unwrap()
        .contains("the weights took the most: 5.20 GiB"));
}

/// vllm#23278's V1 lines (weights and how far short the cache is, no budget): alone they leave
/// the cause open; with `--gpu h100-80g` the catalog's total and vLLM's default utilizations
/// complete the budget, the weights are named, and text and JSON say which figures were supplied.
#[test]
fn doctor_completes_a_v1_budget_from_the_named_gpu() {
    let log = "gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds\n\
               gpu_worker.py:276] Available KV cache memory: -2.14 GiB\n\
               ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let dir = tmp("doctor-v1-gpu");
    let f = write(&dir, "serve.log", log.as_bytes());
    let (code, out, err) = vram(&["doctor", &f, "--no-nvml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("the budget is not printed"), "{out}");
    let (code, out, err) = vram(&["doctor", &f, "--no-nvml", "--gpu", "h100-80g"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("the weights took the most: 65.97 GiB"),
        "{out}"
    );
    assert!(
        out.contains("as PyTorch reports it (the log prints no total)"),
        "{out}"
    );
    let (code, json, _) = vram(&["doctor", &f, "--no-nvml", "--gpu", "h100-80g", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["cause"], "weights");
    let s = &v["profile"]["supplied"];
    assert!(s["catalog_gpu"].as_str().unwrap().contains("H100"), "{s}");
    assert_eq!(s["default_utilization"], serde_json::json!([0.9, 0.92]));
    // The text is the JSON's explanation and remedies.
    assert!(out.contains(v["explanation"].as_str().unwrap()));
    assert!(out.contains(v["remedies"][0]["action"].as_str().unwrap()));
}

/// A real 1.4-2.0 message (nanoporetech/bonito#93: the maintainer's answer was that the job
/// needs about 8 GB): 1.19 GiB of slack could serve the 450 MiB request but is less than the
/// 3.50 GiB of live tensors, the step's own churn. Text and JSON name the step first and
/// fragmentation second, neither remedy called enough alone.
#[test]
fn doctor_names_the_step_when_the_slack_is_the_steps_own_churn() {
    let msg = "RuntimeError: CUDA out of memory. Tried to allocate 450.00 MiB (GPU 0; 5.79 GiB total capacity; 3.50 GiB already allocated; 305.12 MiB free; 4.69 GiB reserved in total by PyTorch)";
    let (code, out, err) = vram(&["doctor", msg, "--no-nvml"]);
    assert_eq!(code, 0, "{err}");
    let first = out.find("1. the step is too large (explains it alone)");
    let second = out.find("2. fragmentation: 1.19 GiB");
    assert!(first.is_some() && second > first, "{out}");
    assert!(
        out.contains("1. make the step need at least 400.26 MiB less"),
        "{out}"
    );
    let (code, json, err) = vram(&["doctor", msg, "--no-nvml", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["causes"][0]["kind"], "step-too-large");
    assert_eq!(v["causes"][1]["kind"], "fragmentation");
    assert_eq!(v["causes"][1]["sufficient"], false);
    assert!(v["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["enough"] == false));
}

#[test]
fn doctor_with_the_model_gives_the_estimate_and_a_setup_that_fits() {
    let (code, out, err) = vram(&[
        "doctor",
        "CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in use. Of the allocated memory 76.10 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated.",
        "--model",
        "gpt2-large",
        "--micro-batch",
        "32",
        "--seq",
        "1024",
        "--no-nvml",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1. the step is too large"), "{out}");
    assert!(
        out.contains("estimate of the step:") && out.contains("activations"),
        "{out}"
    );
    // The first remedy is a planner configuration with the same global batch.
    let first = out
        .lines()
        .find(|l| l.starts_with("1. --micro-batch"))
        .unwrap();
    assert!(first.contains("[enough"), "{out}");
}

/// A message names no GPU, only its total: `--model` without `--gpu` times the plans on the
/// catalog GPU nearest that total, and says it was picked for that alone and which others the
/// total fits. The RTX 4080's "15.99 GiB total capacity" (aigc-apps/sd-webui-EasyPhoto#281,
/// the poster's RTX 4080) is nearest the V100 16GB's 15.78 GiB, not the 4080's own 15.67 GiB
/// (torch on Linux, the catalog's source); both are within the spread one card's total shows
/// across platforms (`gpu::TOTAL_SPREAD`). Text and JSON say the same;
/// with --gpu, nothing is guessed and no note says so.
#[test]
fn doctor_says_the_gpu_it_times_the_plans_on_was_picked_by_memory_alone() {
    let msg = "OutOfMemoryError: CUDA out of memory. Tried to allocate 11.39 GiB (GPU 0; 15.99 GiB total capacity; 8.01 GiB already allocated; 5.48 GiB free; 8.14 GiB reserved in total by PyTorch)";
    let args = ["doctor", msg, "--model", "qwen3-1.7b", "--no-nvml"];
    let (code, out, err) = vram(&args);
    assert_eq!(code, 0, "{err}");
    let note = out
        .lines()
        .find_map(|l| l.strip_prefix("note: the plans are searched"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        note.contains("on the NVIDIA V100 16GB SXM2 (v100-16g), picked only because its memory as torch reports it (15.78 GiB) is the catalog's nearest to the message's total (15.99 GiB)"),
        "{note}"
    );
    assert!(
        note.contains("the catalog GPUs whose total is within 2.2 % of the message's (the most one card's total has been seen to move across platforms and drivers): v100-16g, rtx-4080."),
        "{note}"
    );
    assert!(out.contains("s/step predicted"), "{out}");
    let (code, json, _) = vram(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes.contains(&format!("the plans are searched{note}").as_str()),
        "{notes:?}"
    );
    let (code, named, err) = vram(&[&args[..], &["--gpu", "rtx-4080"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(!named.contains("picked only because"), "{named}");
    assert!(named.contains("s/step predicted"), "{named}");
}

/// `--gpu` names the GPU the plans are searched and timed on. One with less memory than the
/// message's device (an RTX 4090 for a 79.19 GiB total) makes every plan fit the smaller card,
/// so the answer says so and how to plan for the message's device; text and JSON carry the same
/// note. A GPU as large as the message's (within the spread one card's total shows), or larger,
/// adds no such note.
#[test]
fn doctor_says_when_the_given_gpu_is_smaller_than_the_messages_device() {
    let msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated memory 75.31 GiB is allocated by PyTorch, and 1.33 GiB is reserved by PyTorch but unallocated.";
    let base = ["doctor", msg, "--model", "qwen3-1.7b", "--no-nvml"];
    let (code, out, err) = vram(&[&base[..], &["--gpu", "rtx-4090"]].concat());
    assert_eq!(code, 0, "{err}");
    let note = out
        .lines()
        .find_map(|l| l.strip_prefix("note: --gpu rtx-4090 holds "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        note.contains("less than the message's device (79.19 GiB in all): the plans are searched to fit the NVIDIA GeForce RTX 4090"),
        "{note}"
    );
    assert!(out.contains("s/step predicted"), "{out}");
    let (code, json, _) = vram(&[&base[..], &["--gpu", "rtx-4090", "--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str() == Some(&format!("--gpu rtx-4090 holds {note}"))),
        "{json}"
    );
    for gpu in ["h100-80g", "h200"] {
        let (code, same, err) = vram(&[&base[..], &["--gpu", gpu]].concat());
        assert_eq!(code, 0, "{gpu}: {err}");
        assert!(
            !same.contains("less than the message's device"),
            "{gpu}: {same}"
        );
    }
}

/// With `--model` and `--gpu`, vLLM's no-cache error is offered a utilization only where the cache
/// then holds one request of max_model_len (the engine's next check): Llama 3.1 8B at its own
/// 131072 tokens needs 32.90 GiB on a 23.55 GiB RTX 4090, so none is enough (0.72 was offered
/// as enough, beside the capacity model's TP 2 at 131072), and the answer does not ask for the
/// `--gpu` it was given. The paste's device given as its total runs the free-memory error's
/// figures on it, and the capacity model's change is not that error's fix.
#[test]
fn doctor_serving_remedies_hold_for_the_start_they_name() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages");
    let paste = dir.join("vllm-no-cache-blocks.txt").display().to_string();
    let args = [
        "doctor",
        &paste,
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "rtx-4090",
    ];
    let (code, out, err) = vram(&args);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("or name the GPU, --gpu"), "{out}");
    let (code, json, _) = vram(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rs = v["remedies"].as_array().unwrap();
    let u = rs
        .iter()
        .find(|r| {
            r["action"]
                .as_str()
                .unwrap()
                .contains("--gpu-memory-utilization")
        })
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(u["enough"], false, "{u}");
    assert!(
        u["detail"].as_str().unwrap().contains("131072 tokens")
            && u["detail"]
                .as_str()
                .unwrap()
                .contains("no utilization is enough"),
        "{u}"
    );
    let free = dir
        .join("vllm-free-below-utilization.txt")
        .display()
        .to_string();
    let (code, out, err) = vram(&[
        "doctor",
        &free,
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "121.63GiB",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1. --gpu-memory-utilization 0.86  [enough]"),
        "{out}"
    );
    for line in out.lines().filter(|l| l.contains("(vram capacity)")) {
        assert!(
            line.trim_start().starts_with("not this error's fix"),
            "{out}"
        );
    }
}

/// `--gpu` without `--model` on a serving start-up error is used only to complete a V1 budget
/// the log does not print; elsewhere it was silently ignored (a PyTorch message refuses it), so
/// the answer says it is not used, in text and JSON alike. Where it completes the budget
/// (vllm#23278's lines), no such note.
#[test]
fn doctor_says_when_a_serving_paste_does_not_use_the_gpu_given() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages");
    let paste = dir.join("vllm-v0-max-seq-len.txt").display().to_string();
    let args = ["doctor", &paste, "--gpu", "rtx-4090"];
    let (code, out, err) = vram(&args);
    assert_eq!(code, 0, "{err}");
    let note = out
        .lines()
        .find_map(|l| l.strip_prefix("note: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(note.starts_with("--gpu is not used: "), "{note}");
    let (code, json, _) = vram(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["notes"][0].as_str(), Some(note), "{json}");
    let log = "gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds\n\
               gpu_worker.py:276] Available KV cache memory: -2.14 GiB\n\
               ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let d = tmp("doctor-gpu-used");
    let f = write(&d, "serve.log", log.as_bytes());
    let (code, out, err) = vram(&["doctor", &f, "--gpu", "h100-80g"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("--gpu is not used"), "{out}");
}

/// The doctor's plans follow `vram plan`'s rule on a GPU without native bf16 (compute
/// capability below 8.0), whether picked by the message's memory (the V100 16GB for a 15.99 GiB
/// total) or named (`--gpu t4`, `--gpu gtx-1080`): each plan is searched in fp16 AMP, its action
/// says `--precision fp16-amp`, and its detail why; the estimate of the step keeps the step's
/// precision with `vram estimate`'s note. The JSON's remedies and notes are the text's. A GPU
/// with bf16, or a step already in fp16 AMP, adds no flag.
#[test]
fn doctor_plans_on_a_gpu_without_bf16_are_fp16_and_say_so() {
    let msg = "OutOfMemoryError: CUDA out of memory. Tried to allocate 11.39 GiB (GPU 0; 15.99 GiB total capacity; 8.01 GiB already allocated; 5.48 GiB free; 8.14 GiB reserved in total by PyTorch)";
    let base = ["doctor", msg, "--model", "qwen3-1.7b", "--no-nvml"];
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "NVIDIA V100 16GB SXM2", "bf16-amp"),
        (&["--gpu", "t4"], "NVIDIA T4 16GB", "bf16-amp"),
        (&["--gpu", "v100-32g"], "NVIDIA V100 32GB SXM2", "bf16-amp"),
        (
            &["--gpu", "gtx-1080", "--precision", "bf16"],
            "NVIDIA GeForce GTX 1080 8GB",
            "bf16",
        ),
    ];
    for (extra, name, asked) in cases {
        let args = [&base[..], extra].concat();
        let (code, out, err) = vram(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let (code, json, _) = vram(&[&args[..], &["--json"]].concat());
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let planned: Vec<&serde_json::Value> = v["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["step_time_s"].is_number())
            .collect();
        assert!(!planned.is_empty(), "{extra:?}: {out}");
        let why = format!("(the {name} has no native bf16: planned in fp16-amp, not {asked})");
        for r in planned {
            let action = r["action"].as_str().unwrap();
            let detail = r["detail"].as_str().unwrap();
            assert!(action.ends_with("--precision fp16-amp"), "{action}");
            assert!(detail.ends_with(&why), "{detail}");
            assert!(out.contains(&format!(". {action}  [")), "{out}");
            assert!(out.contains(&format!("   {detail}\n")), "{out}");
        }
        assert!(!out.contains("pure-bf16"), "{out}");
        let note = format!("{name} has no native bf16 (");
        assert!(
            out.lines().any(|l| l.starts_with(&format!("note: {note}"))),
            "{out}"
        );
        assert!(
            v["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().starts_with(&note)),
            "{json}"
        );
    }
    for extra in [
        &["--gpu", "rtx-4080"][..],
        &["--gpu", "t4", "--precision", "fp16-amp"],
    ] {
        let (code, out, err) = vram(&[&base[..], extra].concat());
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("s/step predicted"), "{out}");
        assert!(
            !out.contains("bf16") && !out.contains("--precision"),
            "{out}"
        );
    }
}

/// vram-doctor's message fixtures (one per layout and rule; their README names the sources).
fn doctor_fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    v.sort();
    v
}

/// The cause names, in order, of `vram doctor`'s text: the lines under
/// "causes (most important first):" up to the blank line.
fn text_causes(out: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("causes"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(". ")
                .map(|(_, r)| r.split([':', '(']).next().unwrap().trim().to_string())
        })
        .collect()
}

#[test]
fn doctor_text_and_json_name_the_same_causes_in_the_same_order() {
    // The names the text prints for each JSON kind (vram_doctor::CauseKind::label).
    let name = |k: &str| match k {
        "process-cap" => "per-process cap",
        "unexplained" => "the figures do not explain it",
        "tensor-larger-than-device" => "one tensor larger than the device",
        "other-processes" => "other processes",
        "outside-pytorch" => "memory outside PyTorch",
        "private-pools" => "CUDA-graph private pools",
        "fragmentation" => "fragmentation",
        "step-too-large" => "the step is too large",
        "leak" => "growth",
        other => panic!("unknown kind {other}"),
    };
    let mut pytorch = 0;
    for f in doctor_fixtures() {
        let f = f.to_str().unwrap();
        let (code, text, err) = vram(&["doctor", f, "--no-nvml"]);
        assert_eq!(code, 0, "{f}: {err}");
        let (code, json, _) = vram(&["doctor", f, "--no-nvml", "--json"]);
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let Some(causes) = v["causes"].as_array() else {
            // A serving engine's start-up error: its knob in both.
            assert!(text.contains(v["knob"].as_str().unwrap()), "{f}");
            continue;
        };
        pytorch += 1;
        let from_json: Vec<&str> = causes
            .iter()
            .map(|c| name(c["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(text_causes(&text), from_json, "{f}\n{text}");
        // The remedies too, and "enough" only where the JSON says so.
        for (i, r) in v["remedies"].as_array().unwrap().iter().enumerate() {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with(&format!("{}. ", i + 1))
                        && l.contains(r["action"].as_str().unwrap())
                })
                .unwrap_or_else(|| panic!("{f}: remedy {i}\n{text}"));
            assert_eq!(
                line.contains("[enough"),
                r["enough"].as_bool().unwrap(),
                "{f}: {line}"
            );
        }
    }
    assert!(pytorch >= 20, "{pytorch} PyTorch fixtures");
}

#[test]
fn doctor_words_rocm_and_npu_messages_for_their_runtime_in_text_and_json() {
    // A ROCm build's and torch_npu's messages: the text and `--json` say the same causes and
    // remedies, both in that runtime's words; NVML (NVIDIA's) is not asked about their device.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages");
    let cuda_only = [
        "CUDA context",
        "cuda_context",
        "cudaMalloc",
        "PYTORCH_CUDA_ALLOC_CONF",
        "nvidia-smi",
        "cuBLAS",
        "CUDA graphs",
        "CUDA-graph",
        "CUDA_MPS",
        "vramkit's allocator",
    ];
    let hb = |v: &serde_json::Value| vram_doctor::human_bytes(v.as_u64().unwrap());
    for (runtime, device, context, context_category, smi) in [
        ("HIP", "GPU", "HIP context", "hip_context", "rocm-smi"),
        (
            "NPU",
            "NPU",
            "NPU (CANN) context",
            "npu_context",
            "npu-smi info",
        ),
    ] {
        // With --model the estimate's breakdown and plans join them, in the same words.
        for (f, model) in [
            ("pytorch-2.0-outside.txt", None),
            ("pytorch-2.9-graph-pools.txt", None),
            ("pytorch-2.3-request-below-free.txt", None),
            ("pytorch-2.0-outside.txt", Some("llama-3-8b")),
            ("pytorch-2.9-graph-pools.txt", Some("llama-3-8b")),
        ] {
            let mut msg = std::fs::read_to_string(dir.join(f))
                .unwrap()
                .replace("CUDA out of memory", &format!("{runtime} out of memory"));
            if runtime == "NPU" {
                msg = msg.replace("(GPU ", "(NPU ");
            }
            let mut args = vec!["doctor", msg.as_str()];
            if let Some(m) = model {
                args.extend(["--model", m]);
            }
            let (code, text, err) = vram(&args);
            assert_eq!(code, 0, "{runtime} {f} {model:?}: {err}");
            args.push("--json");
            let (code, json, _) = vram(&args);
            assert_eq!(code, 0);
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            if model.is_some() {
                let e = &v["estimate"];
                assert!(
                    text.contains(&format!("estimate of the step: {}", hb(&e["total_bytes"]))),
                    "{runtime} {f}: {text}"
                );
                let breakdown = e["breakdown"].as_array().unwrap();
                for row in breakdown.iter().take(8) {
                    let (cat, b) = (row[0].as_str().unwrap(), &row[1]);
                    assert!(
                        text.lines()
                            .any(|l| l.trim_start().starts_with(cat)
                                && l.trim_end().ends_with(&hb(b))),
                        "{runtime} {f}: {cat} in\n{text}"
                    );
                }
                // Plans' times are a catalog GPU's: an AMD one for ROCm, named for the NPU.
                let timed = v["remedies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["step_time_s"].is_number());
                assert_eq!(
                    text.contains("the catalog has no Ascend NPU"),
                    runtime == "NPU" && timed,
                    "{runtime} {f}: {text}"
                );
                // The graph-pools message lists this process's memory outside PyTorch: the
                // estimate's context is that memory, named for the runtime.
                if f == "pytorch-2.9-graph-pools.txt" {
                    assert!(
                        breakdown.iter().any(|r| r[0] == context_category),
                        "{runtime} {f}: {json}"
                    );
                    assert!(text.contains(context_category), "{runtime} {f}: {text}");
                }
            }
            assert!(
                text.starts_with(&format!("{device} ")),
                "{runtime} {f}: {text}"
            );
            for w in cuda_only {
                assert!(!text.contains(w), "{runtime} {f}: `{w}` in\n{text}");
                assert!(!json.contains(w), "{runtime} {f}: `{w}` in\n{json}");
            }
            for c in v["causes"].as_array().unwrap() {
                assert!(
                    text.contains(c["detail"].as_str().unwrap()),
                    "{runtime} {f}"
                );
            }
            for r in v["remedies"].as_array().unwrap() {
                assert!(
                    text.contains(r["action"].as_str().unwrap()),
                    "{runtime} {f}"
                );
            }
            for n in v["notes"].as_array().unwrap() {
                assert!(text.contains(n.as_str().unwrap()), "{runtime} {f}: {n}");
            }
            assert!(
                json.contains(&format!("(`{smi}` on the host lists them)")),
                "{runtime} {f}: {json}"
            );
            if f == "pytorch-2.0-outside.txt" {
                assert!(text.contains(context), "{runtime} {f}: {text}");
            }
        }
    }
}

#[test]
fn doctor_explains_a_serving_engines_start_up_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages");
    let f = dir.join("vllm-v0-max-seq-len.txt");
    let (code, out, err) = vram(&["doctor", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("vllm start-up error"), "{out}");
    assert!(out.contains("1. --max-model-len 93760  [enough]"), "{out}");
    let (code, json, _) = vram(&["doctor", f.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["error"]["error"], "vllm-max-seq-len");
    assert_eq!(v["error"]["kv_tokens"], 93760);
    let f = dir.join("sglang-not-enough.txt");
    let (code, out, _) = vram(&["doctor", f.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("raise --mem-fraction-static above 0.6"),
        "{out}"
    );
    // PyTorch-only inputs do not apply.
    let (code, _, err) = vram(&["doctor", f.to_str().unwrap(), "--stats", "s.json"]);
    assert_eq!(code, 2);
    assert!(err.contains("serving engine"), "{err}");
}

#[test]
fn doctor_names_llama_cpp_tgi_and_cut_async_errors_the_same_in_text_and_json() {
    // Real messages of public.txt that carry no figures the doctor reads: the refusal names the
    // engine, in one line, with exit 2 and nothing on stdout, the same with and without --json.
    let public = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages/public.txt"),
    )
    .unwrap();
    let message = |source: &str| {
        public
            .split("\n\n")
            .find(|b| b.starts_with(&format!("source: {source}\n")))
            .and_then(|b| b.split_once("\nmessage:\n"))
            .unwrap_or_else(|| panic!("{source}"))
            .1
            .to_string()
    };
    let dir = tmp("doctor-foreign");
    for (source, says) in [
        (
            "https://github.com/ggml-org/llama.cpp/issues/1230",
            "cannot diagnose llama.cpp's (ggml's) GPU allocation error",
        ),
        (
            "https://github.com/ggml-org/llama.cpp/issues/7366",
            "cannot diagnose llama.cpp's model-load error",
        ),
        (
            "https://github.com/huggingface/text-generation-inference/issues/755",
            "cannot diagnose Text Generation Inference's warmup refusal",
        ),
        (
            "https://github.com/Comfy-Org/ComfyUI/issues/8336",
            "cannot diagnose PyTorch's cudaMallocAsync out-of-memory message cut",
        ),
    ] {
        let f = write(&dir, "m.txt", message(source).as_bytes());
        let (code, out, err) = vram(&["doctor", &f, "--no-nvml"]);
        let (jcode, jout, jerr) = vram(&["doctor", &f, "--no-nvml", "--json"]);
        assert_eq!((code, jcode), (2, 2), "{source}: {err}");
        assert!(out.is_empty() && jout.is_empty(), "{source}");
        assert_eq!(err, jerr, "{source}");
        assert_eq!(err.lines().count(), 1, "{source}: {err}");
        assert!(err.starts_with(&format!("vram: {says}")), "{source}: {err}");
    }
}

#[test]
fn doctor_says_what_would_tell_its_causes_apart_the_same_in_text_and_json() {
    // Real messages of public.txt whose thread named the cause the doctor ranked second: the
    // answer names the pair and the one check that separates them, and the text prints exactly
    // the JSON's `undecided` entries (the doctor has no HTML page: `vram report` refuses its
    // JSON, so text and JSON are the whole answer).
    let public = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../vram-doctor/tests/data/messages/public.txt"),
    )
    .unwrap();
    let message = |source: &str| {
        public
            .split("\n\n")
            .find(|b| b.starts_with(&format!("source: {source}\n")))
            .and_then(|b| b.split_once("\nmessage:\n"))
            .unwrap_or_else(|| panic!("{source}"))
            .1
            .to_string()
    };
    let dir = tmp("doctor-undecided");
    for (source, pair, check) in [
        // Labelled fragmentation (max_split_size_mb at the same step); the step leads.
        (
            "https://github.com/OpenTalker/SadTalker/issues/229",
            ["step-too-large", "fragmentation"],
            "expandable_segments:True",
        ),
        // Labelled the step (a smaller model); `unexplained` leads.
        (
            "https://github.com/Vaibhavs10/insanely-fast-whisper/issues/162",
            ["unexplained", "step-too-large"],
            "memory.used,memory.total",
        ),
        // Labelled the step (a smaller batch); memory outside PyTorch leads, no process list.
        (
            "https://github.com/ACEsuit/mace/issues/265",
            ["outside-pytorch", "step-too-large"],
            "nvidia-smi --query-compute-apps",
        ),
        // Labelled fragmentation (the native allocator ran it); cudaMallocAsync's pool.
        (
            "https://github.com/pytorch/pytorch/issues/110194",
            ["step-too-large", "outside-pytorch"],
            "torch.cuda.memory_reserved()",
        ),
    ] {
        let f = write(&dir, "m.txt", message(source).as_bytes());
        let (code, out, err) = vram(&["doctor", &f, "--no-nvml"]);
        let (jcode, jout, _) = vram(&["doctor", &f, "--no-nvml", "--json"]);
        assert_eq!((code, jcode), (0, 0), "{source}: {err}");
        let j: serde_json::Value = serde_json::from_str(&jout).unwrap();
        let undecided = j["undecided"].as_array().unwrap();
        let u = undecided
            .iter()
            .find(|u| u["causes"][0] == pair[0] && u["causes"][1] == pair[1])
            .unwrap_or_else(|| panic!("{source}: {undecided:#?}"));
        assert!(
            u["check"].as_str().unwrap().contains(check),
            "{source}: {u}"
        );
        assert!(
            out.contains("what this message cannot tell apart, and what would:"),
            "{source}: {out}"
        );
        for u in undecided {
            assert!(out.contains(u["why"].as_str().unwrap()), "{source}: {out}");
            assert!(
                out.contains(&format!("  check: {}", u["check"].as_str().unwrap())),
                "{source}: {out}"
            );
        }
        assert_eq!(
            out.matches("  check: ").count(),
            undecided.len(),
            "{source}: {out}"
        );
    }
}

#[test]
fn doctor_bad_input_is_one_line_and_exit_2() {
    let dir = tmp("doctor-bad");
    let stats = write(&dir, "s.json", b"{\"reserved_bytes.all.current\": 1}");
    for (args, says) in [
        (
            vec![
                "doctor",
                "RuntimeError: CUDA error: out of memory",
                "--no-nvml",
            ],
            "CUDA runtime",
        ),
        (
            vec!["doctor", "/nonexistent/log.txt", "--no-nvml"],
            "cannot read message file",
        ),
        // An empty argument is no message, not a file named "".
        (vec!["doctor", "", "--no-nvml"], "the message is empty"),
        (
            vec!["doctor", OOM_2_5, "--gpu", "h100-80g", "--no-nvml"],
            "--gpu is for --model",
        ),
        (
            vec!["doctor", OOM_2_5, "--stats", &stats, "--no-nvml"],
            "allocated_bytes.all.current",
        ),
        (
            vec!["doctor", OOM_2_5, "--model", "nope-7b", "--no-nvml"],
            "nope-7b",
        ),
        // Not PyTorch's, or without figures.
        (
            vec!["doctor", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!", "--no-nvml"],
            "no out-of-memory message found: neither PyTorch's",
        ),
        (
            vec!["doctor", "2026-01-02 03:04:05 Killed process 4242 (python) total-vm:123456kB: out of memory", "--no-nvml"],
            "no out-of-memory message found: neither PyTorch's",
        ),
        (
            vec!["doctor", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[64,1024,1024]", "--no-nvml"],
            "no out-of-memory message found: neither PyTorch's",
        ),
        (
            vec!["doctor", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 162.00 MiB. GPU 0 has a total capacity of 14.56 GiB of which 29.81 MiB is free.", "--no-nvml"],
            "paste it whole",
        ),
        // A utilization no vLLM starts with was multiplied out ("inf x 121.63 GiB").
        (
            vec!["doctor", "ValueError: Free memory on device cuda:0 (10.5/121.63 GiB) on startup is less than desired GPU memory utilization (inf, 110.0 GiB).", "--no-nvml"],
            "gpu_memory_utilization inf, which no vLLM starts with",
        ),
        (
            vec!["doctor", "ValueError: Free memory on device cuda:0 (10.5/121.63 GiB) on startup is less than desired GPU memory utilization (1.8e19, 110.0 GiB).", "--no-nvml"],
            "no vLLM starts with (it takes a share in (0, 1])",
        ),
        (
            vec!["doctor", "ValueError: Free memory on device cuda:0 (10.5/121.63 GiB) on startup is less than desired GPU memory utilization (0, 110.0 GiB).", "--no-nvml"],
            "gpu_memory_utilization 0, which no vLLM starts with",
        ),
        // The same bound on the profiling lines pasted with a start-up error.
        (
            vec!["doctor", "INFO [worker.py:267] the current vLLM instance can use total_gpu_memory (23.58GiB) x gpu_memory_utilization (1.50) = 35.37GiB\nINFO [worker.py:267] model weights take 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory reserved for KV Cache is -1.57GiB.\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "--no-nvml"],
            "the pasted vLLM profile prints gpu_memory_utilization 1.5, which no vLLM starts with",
        ),
        (
            vec!["doctor", "ValueError: The model's max seq len is larger than the maximum number of tokens that can be stored in KV cache", "--no-nvml"],
            "vLLM's start-up memory error is there but its figures could not be read",
        ),
        (
            vec!["doctor", "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (21840). Try increasing `VLLM_CPU_KVCACHE_SPACE` or decreasing `max_model_len` when initializing the engine.", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-nvml"],
            "no GPU to model",
        ),
        (
            vec!["doctor", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.19 GiB total capacity; 1.00 GiB already", "--no-nvml"],
            "already allocated",
        ),
    ] {
        let (code, out, err) = vram(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A vLLM start-up error with `--model` and `--gpu`: the capacity model turns the knob into a
/// number — the cache must grow to 131072 tokens of Llama-3.1-8B's 128 KiB each
/// (32 layers × 8 KV heads × 2 × 128 × 2 bytes), beside what the engine holds outside it.
/// Without `--gpu` the model alone cannot be priced: one line, exit 2.
#[test]
fn doctor_prices_a_serving_error_with_the_capacity_model() {
    let msg = "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (84320). Try increasing gpu_memory_utilization or decreasing max_model_len when initializing the engine.";
    let (code, out, err) = vram(&[
        "doctor",
        msg,
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "rtx-4090",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("131072 tokens × 128.00 KiB per token"),
        "{out}"
    );
    assert!(out.contains("(capacity model)"), "{out}");
    let (code, _, err) = vram(&["doctor", msg, "--model", "llama-3.1-8b"]);
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("needs --gpu"), "{err}");
}

/// What the process could hold and what the step is read against are one figure, or the
/// difference is named: the latter adds the process's own memory outside PyTorch (its CUDA
/// context, which the estimate counts). A request beyond 2^64 bytes is refused in one line, not
/// saturated to 17179869184.00 GiB.
#[test]
fn doctor_room_agrees_with_could_hold_and_refuses_sizes_beyond_64_bits() {
    let msg = "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.54 GiB of which 20.00 MiB is free. Process 1234 has 23.52 GiB memory in use. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 800.00 MiB is reserved by PyTorch but unallocated.";
    let (code, out, err) = vram(&["doctor", "--no-nvml", "--model", "llama-3-8b", msg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("could hold at most 22.70 GiB"), "{out}");
    let room = "23.54 GiB this process could have (the 22.70 GiB it could hold at most, and its 858.88 MiB outside PyTorch)";
    assert!(out.contains(room), "{out}");
    assert!(
        !out.replace(room, "").contains("this process could have"),
        "{out}"
    );
    let huge = "CUDA out of memory. Tried to allocate 99999999999999999999.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free. Of the allocated memory 60.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.";
    let (code, out, err) = vram(&["doctor", "--no-nvml", huge]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("more than 2^64 bytes"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // 2^64 bytes as PyTorch prints an underflowed counter is still read.
    let (code, _, err) = vram(&[
        "doctor",
        "--no-nvml",
        &huge.replace("99999999999999999999.00", "17179869184.00"),
    ]);
    assert_eq!(code, 0, "{err}");
}

/// Overheads beyond the device are refused, and a 5,000-character name is cut in the message.
#[test]
fn overheads_beyond_the_device_and_very_long_names_are_one_short_line() {
    let (code, _, err) = vram(&["estimate", "gpt2", "--cuda-context", "1000000TiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cuda-context 977 PiB is more than the GPU's 79.2 GiB"),
        "{err}"
    );
    let (code, _, err) = vram(&["estimate", "gpt2", "--gpu", "a10", "--workspace", "100GiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--workspace 100 GiB is more than the GPU's"),
        "{err}"
    );
    let long = "A".repeat(5000);
    let (code, _, err) = vram(&["estimate", &long]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("… (5000 characters)"), "{err}");
    assert!(err.len() < 5000, "{}", err.len());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn doctor_reads_vllm_mamba_block_errors_in_text_and_json_alike() {
    // vLLM 0.23-0.28's hybrid-model check (`config/compilation.py`): real, vllm-project/recipes#551.
    let msg = "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 856 or increase gpu_memory_utilization.";
    let (code, text, err) = vram(&["doctor", msg]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("1. --max-num-seqs 856  [enough]"), "{text}");
    let (code, json, err) = vram(&["doctor", msg, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["error"]["error"], "vllm-mamba-blocks");
    assert_eq!(v["error"]["max_num_seqs"], 1024);
    assert_eq!(v["error"]["blocks"], 856);
    assert_eq!(v["cause"], "profile");
    assert!(text.contains(v["explanation"].as_str().unwrap()), "{text}");
    // Text lists the same remedies, in the same order, with the same words.
    let remedies = v["remedies"].as_array().unwrap();
    assert_eq!(remedies.len(), 4);
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("remedies"))
        .skip(1)
        .collect();
    for (i, r) in remedies.iter().enumerate() {
        let action = format!("{}. {}", i + 1, r["action"].as_str().unwrap());
        assert!(lines[2 * i].starts_with(&action), "{action} in\n{text}");
        assert_eq!(lines[2 * i].ends_with("[enough]"), r["enough"] == true);
        assert_eq!(lines[2 * i + 1].trim(), r["detail"].as_str().unwrap());
    }
    // Cut before the block count: one line, exit 2.
    let (code, out, err) = vram(&[
        "doctor",
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks",
    ]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn doctor_reads_mps_messages_in_text_and_json_alike() {
    // Apple's MPS allocator: no device size nor free memory, the high watermark instead. The
    // text's first line carries the message's own figures, and text and `--json` list the same
    // causes in the same order. Real: lllyasviel/Fooocus#980.
    let msg = "RuntimeError: MPS backend out of memory (MPS allocated: 8.93 GB, other allocations: 120.39 MB, max allowed: 9.07 GB). Tried to allocate 25.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).";
    let (code, text, err) = vram(&["doctor", msg]);
    assert_eq!(code, 0, "{err}");
    let first = text.lines().next().unwrap();
    for s in [
        "MPS (Apple GPU)",
        "25.00 MiB requested",
        "8.93 GiB",
        "120.39 MiB",
        "9.07 GiB",
    ] {
        assert!(first.contains(s), "{s} in {first}");
    }
    assert!(!text.contains("free of"), "{text}");
    for word in [
        "nvidia-smi",
        "cudaMalloc",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA context",
    ] {
        assert!(!text.contains(word), "{word} in\n{text}");
    }
    let (code, json, _) = vram(&["doctor", msg, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["message"]["backend"], "mps");
    assert_eq!(v["message"]["layout"], "mps");
    let kinds: Vec<&str> = v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[0], "step-too-large");
    let causes: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("causes"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(causes.len(), kinds.len(), "{text}");
    for (line, c) in causes.iter().zip(v["causes"].as_array().unwrap()) {
        assert!(line.contains(c["detail"].as_str().unwrap()), "{line}");
    }
    // No catalog GPU stands for an Apple one: --model needs --gpu, in one line, exit 2.
    let (code, out, err) = vram(&["doctor", msg, "--model", "llama-3-8b"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no Apple GPU"), "{err}");
    // Cut before the request: one line, exit 2.
    let (code, _, err) = vram(&[
        "doctor",
        "MPS backend out of memory (MPS allocated: 18.05 GB, other allocations: 4.48 MB",
    ]);
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The audit of 2026-11-28: input that overflowed, was read without bound, or was ignored
/// without a word. Each is one line naming what is wrong, exit 2, nothing on stdout.
#[test]
fn what_the_audit_found_is_one_line_and_exit_2() {
    let dir = tmp("audit");
    let out = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let lengths = write(&dir, "lengths.txt", b"128 256 512");
    // A binary "lengths" file is one long item: the message shows it cut short.
    let binary = write(&dir, "lengths.bin", &[b'x'; 100_000]);
    let mut no_tensor = 2u64.to_le_bytes().to_vec();
    no_tensor.extend_from_slice(b"{}");
    let no_tensor = write(&dir, "empty.safetensors", &no_tensor);
    let (_, doctor_json, _) = vram(&["doctor", OOM_2_5, "--no-nvml", "--json"]);
    // A doctor's answer edited by hand: a shortfall beside what would be left; a remedy's
    // `enough` a string.
    let mut edited: serde_json::Value = serde_json::from_str(&doctor_json).unwrap();
    edited["shortfall_bytes"] = 1.into();
    let doctor_json = write(&dir, "doctor.json", edited.to_string().as_bytes());
    edited["shortfall_bytes"] = 0.into();
    edited["remedies"][0]["enough"] = "yes".into();
    let doctor_type_json = write(&dir, "doctor-type.json", edited.to_string().as_bytes());
    // Neither UTF-8 nor UTF-16 with a byte-order mark (FF FE would read as UTF-16LE).
    let binary_json = write(&dir, "binary.json", &[0x80, 0xfe, b'{', 0x00]);
    let vllm = "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (84320). Try increasing gpu_memory_utilization or decreasing max_model_len when initializing the engine.";
    let max = u64::MAX.to_string();
    let plan = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["plan", "llama-3-8b", "--gpu", "h100-80g", "--gpus", "8"]
            .map(String::from)
            .to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        // u64 arithmetic overflowed (a panic in a debug build, wrapped figures in release).
        (
            plan(&["--global-batch", &max, "--seq", "2048"]),
            "--global-batch 18446744073709551615 must be between 1 and 4294967296",
        ),
        (
            plan(&["--global-batch", "8", "--seq", &max]),
            "--seq 18446744073709551615 must be between 1 and 16777216",
        ),
        (
            plan(&[
                "--global-batch",
                &max,
                "--seq",
                "2048",
                "--finetune",
                "lora",
            ]),
            "--global-batch 18446744073709551615 must be between",
        ),
        (
            [
                "estimate",
                "llama-3-8b",
                "--finetune",
                "lora",
                "--lora-rank",
                &max,
            ]
            .map(String::from)
            .to_vec(),
            "--lora-rank 18446744073709551615 must be between 1 and 16777216",
        ),
        // A device reports length 0 and was read until memory ran out.
        (
            ["estimate", "/dev/zero"].map(String::from).to_vec(),
            "/dev/zero is larger than 16.0 MiB",
        ),
        (
            ["doctor", "/dev/zero", "--no-nvml"]
                .map(String::from)
                .to_vec(),
            "/dev/zero is larger than 64.0 MiB",
        ),
        (
            ["batch", "gpt2", "--lengths", &binary]
                .map(String::from)
                .to_vec(),
            "item 1 `xxxxxxxxxxxxxxxxxxxxxxxx...` is not a whole number",
        ),
        // A doctor's JSON was "JSON object with keys [...]", then "has no page"; a page now,
        // and a hand-edited one is refused in one line naming the field.
        (
            ["report", &doctor_json, "-o", &out("d.html")]
                .map(String::from)
                .to_vec(),
            "a vram doctor answer (PyTorch message) whose figures disagree: shortfall_bytes 1 and left_bytes",
        ),
        (
            ["report", &doctor_type_json, "-o", &out("d.html")]
                .map(String::from)
                .to_vec(),
            "a vram doctor answer (PyTorch message) with a bad field: invalid type: string \"yes\", expected a boolean",
        ),
        (
            ["report", &binary_json, "-o", &out("d.html")]
                .map(String::from)
                .to_vec(),
            "is not UTF-8 or UTF-16 text",
        ),
        // It was "0 parameters, 0 B of weights".
        (
            ["estimate", &no_tensor].map(String::from).to_vec(),
            "the safetensors header holds no tensor",
        ),
        // Flags the run would have ignored.
        (
            ["estimate", "llama-3-8b", "--dequantized"]
                .map(String::from)
                .to_vec(),
            "llama-3-8b's weights are stored as bf16, not packed",
        ),
        (
            ["estimate", "gpt2", "--schedule", "gpipe"]
                .map(String::from)
                .to_vec(),
            "--schedule gpipe orders a pipeline's stages: it needs --pp greater than 1",
        ),
        (
            ["estimate", "gpt2", "--batch", "8"]
                .map(String::from)
                .to_vec(),
            "--batch is for --inference; training takes --micro-batch and --seq",
        ),
        (
            [
                "estimate",
                "gpt2",
                "--inference",
                "--micro-batch",
                "4",
                "--seq",
                "512",
            ]
            .map(String::from)
            .to_vec(),
            "--micro-batch, --seq are for training",
        ),
        (
            ["checkpoint", "gpt2", "--kv-dtype", "fp8"]
                .map(String::from)
                .to_vec(),
            "--kv-dtype is for --inference",
        ),
        (
            [
                "trace",
                "gpt2",
                "--inference",
                "--optimizer",
                "sgd",
                "--out",
                &out("t.pickle"),
            ]
            .map(String::from)
            .to_vec(),
            "--optimizer is for training",
        ),
        (
            ["doctor", OOM_2_5, "--tp", "2", "--no-nvml"]
                .map(String::from)
                .to_vec(),
            "--tp describes the job's step, which is estimated only with --model",
        ),
        (
            ["doctor", vllm, "--micro-batch", "2", "--no-nvml"]
                .map(String::from)
                .to_vec(),
            "serving engine's start-up error: --micro-batch describes a PyTorch step",
        ),
        (
            ["batch", "gpt2", "--lengths", &lengths, "--micro-batch", "4"]
                .map(String::from)
                .to_vec(),
            "--micro-batch: vram batch sets each batch's micro-batch",
        ),
        (
            [
                "trace",
                "gpt2",
                "--out",
                &out("t.pickle"),
                "--gpu",
                "a100-80g",
            ]
            .map(String::from)
            .to_vec(),
            "--events",
        ),
        (
            ["top", "--demo", "--once", "--count", "3"]
                .map(String::from)
                .to_vec(),
            "'--once' cannot be used with '--count <COUNT>'",
        ),
        (
            [
                "record",
                "--demo",
                "--out",
                &out("r.jsonl"),
                "--leak-min-span",
                "5s",
            ]
            .map(String::from)
            .to_vec(),
            "--leak-check",
        ),
        // Settings that change nothing were printed as "assumed" (the follow-up's items 2-3).
        (
            ["capacity", "llama-3-8b", "--gpu", "h100-80g", "--interconnect", "pcie"]
                .map(String::from)
                .to_vec(),
            "--interconnect is how a TP, PP or DP group's GPUs talk",
        ),
        (
            ["estimate", "llama-3-8b", "--gpu", "h100-80g", "--kernels", "mxfp4"]
                .map(String::from)
                .to_vec(),
            "--kernels mxfp4 changes nothing for llama-3-8b: mxfp4 keeps MXFP4 experts packed and its weights are stored as bf16",
        ),
        (
            ["estimate", "llama-3-8b", "--gpu", "h100-80g", "--kernels", "fla"]
                .map(String::from)
                .to_vec(),
            "fla runs Gated DeltaNet layers and it has none",
        ),
        (
            [
                "estimate",
                "llama-3-8b",
                "--gpu",
                "h100-80g",
                "--precision",
                "fp32",
                "--weights-created",
                "fp32",
            ]
            .map(String::from)
            .to_vec(),
            "--weights-created fp32 is a cast of fp32-built weights to a narrower dtype",
        ),
        (
            [
                "estimate",
                "llama-3-8b",
                "--gpu",
                "h100-80g",
                "--inference",
                "--weights",
                "nf4",
                "--weights-created",
                "fp32",
            ]
            .map(String::from)
            .to_vec(),
            "a quantized --weights is quantized while loading",
        ),
        // Zero requests or seconds served nothing and exited at once (item 4).
        (
            ["serve", "--demo", "--max-seconds", "0"].map(String::from).to_vec(),
            "invalid value '0' for '--max-seconds",
        ),
        (
            ["serve", "--demo", "--max-requests", "0"].map(String::from).to_vec(),
            "invalid value '0' for '--max-requests",
        ),
    ];
    let mut failures = Vec::new();
    for (args, needle) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, err) = vram(&args);
        if code != 2
            || err.trim_end().lines().count() != 1
            || err.len() > 400
            || !err.contains(needle)
            || !stdout.is_empty()
        {
            failures.push(format!(
                "{args:?}: exit {code}, stdout {} bytes, stderr {err:?} (wanted {needle:?})",
                stdout.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Nothing was written where a run was refused.
    for name in ["t.pickle", "r.jsonl", "d.html"] {
        assert!(!dir.join(name).exists(), "{name} written");
    }
}

/// The setup line names the pipeline schedule its JSON holds (it said only "pp 2", so a
/// GPipe estimate read like a 1F1B one).
#[test]
fn the_setup_line_names_the_pipeline_schedule() {
    for (schedule, shown) in [
        ("gpipe", "pp 2 (gpipe)"),
        ("interleaved:2", "pp 2 (interleaved:2)"),
    ] {
        let args = [
            "estimate",
            "llama-3-8b",
            "--pp",
            "2",
            "--schedule",
            schedule,
        ];
        let (code, text, err) = vram(&args);
        assert_eq!(code, 0, "{err}");
        assert!(text.lines().nth(1).unwrap().contains(shown), "{text}");
        let (_, json, _) = vram(&[&args[..], &["--json"]].concat());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let want = match schedule {
            "gpipe" => serde_json::json!("gpipe"),
            _ => serde_json::json!({"interleaved": 2}),
        };
        assert_eq!(v["setup"]["parallel"]["schedule"], want);
    }
    // One stage has no schedule to name.
    let (_, text, _) = vram(&["estimate", "llama-3-8b"]);
    assert!(
        text.lines().nth(1).unwrap().contains("pp 1, ZeRO"),
        "{text}"
    );
}

/// Where a setting acts, it is taken: the refusals above are of settings that change nothing.
#[test]
fn settings_that_act_are_taken() {
    for args in [
        &[
            "capacity",
            "llama-3-8b",
            "--gpu",
            "h100-80g",
            "--interconnect",
            "pcie",
            "--tensor-parallel-size",
            "2",
        ][..],
        &[
            "estimate",
            "gpt-oss-20b",
            "--gpu",
            "h100-80g",
            "--kernels",
            "mxfp4",
        ],
        &[
            "estimate",
            "llama-3-8b",
            "--gpu",
            "h100-80g",
            "--precision",
            "bf16",
            "--weights-created",
            "fp32",
        ],
    ] {
        let (code, _, err) = vram(args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
}

/// `--interconnect shm`: one node's GPUs without peer-to-peer access, where NCCL's ring (cuMem
/// on, vLLM from 0.10.2) keeps its buffers in host memory, so the communicator the profile
/// connects leaves only its 2 MiB device-state granules: 2 channels x 12 MiB less on a Gen4
/// board. GeForce RTX boards take it by default (no P2P under NVIDIA's stock driver); `pcie`
/// says a patched driver grants it.
#[test]
fn interconnect_shm_keeps_nccls_ring_in_host_memory() {
    let non_torch = |gpu: &str, link: Option<&str>| {
        let mut args = vec![
            "capacity",
            "llama-3-8b",
            "--gpu",
            gpu,
            "--engine-version",
            "0.18.1",
            "--enforce-eager",
            "--tensor-parallel-size",
            "2",
            "--json",
        ];
        if let Some(l) = link {
            args.extend(["--interconnect", l]);
        }
        let (code, out, err) = vram(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["non_torch_bytes"].as_u64().unwrap()
    };
    let ring = 24u64 << 20;
    assert_eq!(non_torch("l4", None), non_torch("l4", Some("shm")) + ring);
    assert_eq!(
        non_torch("rtx-4090", None),
        non_torch("rtx-4090", Some("shm"))
    );
    assert_eq!(
        non_torch("rtx-4090", Some("pcie")),
        non_torch("rtx-4090", None) + ring
    );
}

/// `checkpoint --budget` takes the spellings `--gpu` takes (one parser): `12G` is 12 GiB, as is
/// `12GiB`; `vram record` counts one sample in the singular.
#[test]
fn size_flags_share_one_spelling_and_one_sample_is_singular() {
    let budget = |b: &str| {
        let (code, out, err) = vram(&["checkpoint", "gpt2", "--budget", b, "--json"]);
        assert_eq!(code, 0, "{b}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["budget_bytes"].clone()
    };
    assert_eq!(budget("12G"), budget("12GiB"));
    assert_eq!(budget("12 GB"), budget("12000000000"));
    let dir = tmp("record-one");
    let out = dir.join("r.jsonl");
    let (code, _, err) = vram(&[
        "record",
        "--demo",
        "--count",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 sample appended"), "{err}");
}

/// Standard input from a pipe gets no prompt (the prompt is for a terminal only): stderr
/// stays empty for `vram doctor` and `vram batch --lengths -`, as scripts read it.
#[test]
fn reading_a_pipe_prints_no_prompt() {
    let (code, _, err) = common::vram_stdin(&["doctor", "--no-nvml"], OOM_2_5.as_bytes());
    assert_eq!((code, err.as_str()), (0, ""));
    let (code, _, err) =
        common::vram_stdin(&["doctor", "-", "--no-nvml", "--json"], OOM_2_5.as_bytes());
    assert_eq!((code, err.as_str()), (0, ""));
    let (code, _, err) =
        common::vram_stdin(&["batch", "gpt2", "--lengths", "-"], b"128 256\n512\n");
    assert_eq!((code, err.as_str()), (0, ""));
}

fn utf16le_with_bom(s: &str) -> Vec<u8> {
    let mut v = vec![0xff, 0xfe];
    v.extend(s.encode_utf16().flat_map(u16::to_le_bytes));
    v
}

/// The second audit: `-o`/`--out` naming a symbolic link writes its target and keeps the link,
/// and one naming a pipe (or a device: `-o /dev/null`) writes into it. The rename that makes a
/// regular file's write whole replaced the node itself: as root, `vram report --demo -o
/// /dev/null` turned /dev/null into a regular file (and as anyone else it failed on /dev's
/// permissions). No test writes to /dev: a regression would replace the machine's node.
#[test]
#[cfg(unix)]
fn outputs_write_through_links_and_into_pipes() {
    use std::io::Write;
    use std::os::unix::fs::FileTypeExt;
    let dir = tmp("outputs");
    let target = dir.join("real.html");
    std::fs::write(&target, "old").unwrap();
    let link = dir.join("link.html");
    std::os::unix::fs::symlink("real.html", &link).unwrap();
    let (code, _, err) = vram(&["report", "--demo", "-o", link.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&target)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
    // A dangling link: the file it names is created, the link kept.
    let dangling = dir.join("dangling.pickle");
    std::os::unix::fs::symlink("made.pickle", &dangling).unwrap();
    let (code, _, err) = vram(&["trace", "gpt2", "--out", dangling.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::metadata(dir.join("made.pickle")).unwrap().len() > 0);

    let fifo = dir.join("pipe.html");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP outputs_write_through_links_and_into_pipes (pipe): no mkfifo here"
        );
        return;
    }
    // The reader takes what vram writes; if vram replaced the pipe instead, the reader stays
    // blocked on an open no writer makes, and the check below fails before anyone joins it.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let (code, _, err) = vram(&["report", "--demo", "-o", fifo.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the pipe was replaced"
    );
    let html = reader.join().unwrap();
    assert!(html.starts_with(b"<!DOCTYPE html>"), "{} bytes", html.len());
}

/// `-o /dev/stdout` with standard output a pipe (`vram report --demo -o /dev/stdout | head`):
/// /dev/stdout links to /proc/self/fd/1, whose link text for a pipe is `pipe:[N]`, no file;
/// followed by hand it gave "cannot write ...: entity not found", exit 2. The same chain from a
/// link of the test's own (so no test writes to /dev): the HTML arrives on the pipe.
#[test]
#[cfg(target_os = "linux")]
fn an_output_linked_to_a_piped_standard_output_is_written_into_the_pipe() {
    let dir = tmp("stdout-link");
    let link = dir.join("stdout.html");
    std::os::unix::fs::symlink("/proc/self/fd/1", &link).unwrap();
    let (code, out, err) = vram(&["report", "--demo", "-o", link.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("<!DOCTYPE html>"),
        "{}",
        &out[..out.len().min(200)]
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

/// The second audit: a `--duration` or `--leak-min-span` in hours beyond what a `Duration`
/// holds (2^64 s) panicked in `Duration::from_secs_f64`; it is one line and exit 2.
#[test]
fn durations_beyond_a_duration_are_one_line_and_exit_2() {
    let dir = tmp("durations");
    let rec = dir.join("r.jsonl");
    let rec = rec.to_str().unwrap();
    for args in [
        vec!["record", "--demo", "--out", rec, "--duration", "1e16h"],
        vec!["record", "--demo", "--out", rec, "--duration", "1e300h"],
        vec![
            "record",
            "--demo",
            "--out",
            rec,
            "--count",
            "1",
            "--leak-check",
            "--leak-min-span",
            "6e15h",
        ],
    ] {
        let (code, _, err) = vram(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("longer than a duration can be"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // 1e6 hours is a duration: the recording stops at --count.
    let (code, _, err) = vram(&[
        "record",
        "--demo",
        "--out",
        rec,
        "--count",
        "1",
        "--duration",
        "1e6h",
    ]);
    assert_eq!(code, 0, "{err}");
}

/// The second audit: every command writes through the capturable streams, so an in-process
/// run (the Python binding's `vramkit.cli`) gets what the binary prints; `vram doctor` and
/// `vram top` wrote to the process's own stdout, and `vramkit.cli(["doctor", msg])` returned "".
#[test]
fn in_process_runs_return_what_the_binary_prints() {
    for args in [
        vec!["doctor", OOM_2_5, "--no-nvml"],
        vec!["doctor", OOM_2_5, "--no-nvml", "--json"],
        vec!["top", "--demo", "--once"],
        vec!["top", "--demo", "--json", "--count", "1"],
    ] {
        let done = vram_cli::run_captured(args.clone());
        assert_eq!(done.code, 0, "{args:?}");
        let captured = String::from_utf8(done.stdout).unwrap();
        let (_, printed, _) = vram(&args);
        assert!(!captured.is_empty(), "{args:?} captured nothing");
        if args[0] == "doctor" {
            assert_eq!(captured, printed, "{args:?}");
        } else {
            // The demo's figures move with the clock; the shape is the same.
            assert_eq!(
                captured.lines().count(),
                printed.lines().count(),
                "{args:?}"
            );
        }
    }
}

/// The second audit: text a shell saved as UTF-16 (Windows PowerShell 5's `>`), with a UTF-8
/// byte-order mark, with bytes that are not UTF-8 on standard input, or with a terminal's colour
/// codes around its figures, reads as the same text: the same diagnosis, lengths and report.
/// Each was "no out-of-memory message found", "stream did not contain valid UTF-8", "item 1
/// `\u{feff}10` is not a whole number" or "neither JSON nor JSON Lines".
#[test]
fn text_saved_as_utf16_with_a_bom_or_colour_codes_reads_the_same() {
    let dir = tmp("encodings");
    let (code, plain, err) = vram(&["doctor", OOM_2_5, "--no-nvml"]);
    assert_eq!(code, 0, "{err}");
    let mut be = vec![0xfe, 0xff];
    be.extend(OOM_2_5.encode_utf16().flat_map(u16::to_be_bytes));
    let mut bom8 = vec![0xef, 0xbb, 0xbf];
    bom8.extend_from_slice(OOM_2_5.as_bytes());
    let coloured = OOM_2_5
        .replace(
            "torch.OutOfMemoryError",
            "\x1b[31mtorch.OutOfMemoryError\x1b[0m",
        )
        .replace("2.00 GiB", "\x1b[1m2.00 GiB\x1b[0m")
        .replace(
            "42.00 GiB",
            "\x1b]8;;https://x\x07\x1b[1;36m42.00\x1b[0;0m GiB",
        );
    for (name, bytes) in [
        ("le.txt", utf16le_with_bom(OOM_2_5)),
        ("be.txt", be),
        ("bom8.txt", bom8),
        ("ansi.txt", coloured.into_bytes()),
    ] {
        let f = write(&dir, name, &bytes);
        let (code, out, err) = vram(&["doctor", &f, "--no-nvml"]);
        assert_eq!((code, out.as_str()), (0, plain.as_str()), "{name}: {err}");
        let (code, out, err) = common::vram_stdin(&["doctor", "--no-nvml"], &bytes);
        assert_eq!(
            (code, out.as_str()),
            (0, plain.as_str()),
            "{name} on stdin: {err}"
        );
    }
    // Latin-1 around the message: on standard input as from a file.
    let mut latin1 = b"Fehler \xe9: ".to_vec();
    latin1.extend_from_slice(OOM_2_5.as_bytes());
    let (code, out, err) = common::vram_stdin(&["doctor", "--no-nvml"], &latin1);
    assert_eq!((code, out.as_str()), (0, plain.as_str()), "{err}");

    // Lengths.
    let plain_len = write(&dir, "len.txt", b"128\n256\n512\n");
    let (code, want, err) = vram(&["batch", "gpt2", "--lengths", &plain_len]);
    assert_eq!(code, 0, "{err}");
    for (name, bytes) in [
        ("len16.txt", utf16le_with_bom("128\r\n256\r\n512\r\n")),
        ("len8.txt", b"\xef\xbb\xbf128\n256\n512\n".to_vec()),
    ] {
        let f = write(&dir, name, &bytes);
        let (code, out, err) = vram(&["batch", "gpt2", "--lengths", &f]);
        assert_eq!((code, out.as_str()), (0, want.as_str()), "{name}: {err}");
    }
    let (code, out, err) = common::vram_stdin(
        &["batch", "gpt2", "--lengths", "-"],
        utf16le_with_bom("128 256 512"),
    );
    assert_eq!((code, out.as_str()), (0, want.as_str()), "stdin: {err}");
    let bad = write(&dir, "len_bad.txt", &[0x80, 0x31, 0x32]);
    let (code, _, err) = vram(&["batch", "gpt2", "--lengths", &bad]);
    assert_eq!(code, 2);
    assert!(err.contains("is not UTF-8 or UTF-16 text"), "{err}");

    // An estimate's --json redirected by Windows PowerShell 5 renders as the UTF-8 one does.
    let (_, json, _) = vram(&["estimate", "gpt2", "--json"]);
    let j8 = write(&dir, "e8.json", json.as_bytes());
    let j16 = write(&dir, "e16.json", &utf16le_with_bom(&json));
    let h8 = dir.join("e8.html");
    let h16 = dir.join("e16.html");
    let (c8, _, e8) = vram(&["report", &j8, "-o", h8.to_str().unwrap()]);
    let (c16, _, e16) = vram(&["report", &j16, "-o", h16.to_str().unwrap()]);
    assert_eq!((c8, c16), (0, 0), "{e8} {e16}");
    assert_eq!(
        std::fs::read_to_string(&h8).unwrap(),
        std::fs::read_to_string(&h16)
            .unwrap()
            .replace("e16.json", "e8.json")
    );
}

/// The second audit: a config.json (or processor config) that starts with a UTF-8 byte-order
/// mark is refused naming the mark, as transformers' `json.loads` refuses it; serde_json said
/// only "expected value at line 1 column 1".
#[test]
fn a_config_with_a_byte_order_mark_is_refused_naming_it() {
    let dir = tmp("bom-config");
    let model = dir.join("m");
    std::fs::create_dir_all(&model).unwrap();
    let mut text = b"\xef\xbb\xbf".to_vec();
    text.extend_from_slice(LLAMA.as_bytes());
    std::fs::write(model.join("config.json"), &text).unwrap();
    for cmd in ["estimate", "capacity", "checkpoint"] {
        let (code, _, err) = vram(&[cmd, model.to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("starts with a UTF-8 byte-order mark"), "{err}");
    }
}

/// The second audit: text from a config never reaches the terminal as control characters. A
/// `_name_or_path` holding a newline or an escape sequence named the model (the answer's first
/// line split in two, the terminal recoloured); the config is named by its folder instead. An
/// error quoting a config's string (an unknown `model_type`) shows them escaped.
#[test]
fn control_characters_from_a_config_never_reach_the_terminal() {
    let dir = tmp("control");
    let named = dir.join("folder-name");
    std::fs::create_dir_all(&named).unwrap();
    let cfg = LLAMA.replace(
        '{',
        r#"{"_name_or_path":"org/evil\nsecond line\u001b[31mred","#,
    );
    std::fs::write(named.join("config.json"), cfg).unwrap();
    let (code, out, err) = vram(&["estimate", named.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("folder-name "), "{out}");
    assert!(!out.contains('\x1b'), "{out}");
    let (_, json, _) = vram(&["estimate", named.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["model"], "folder-name");

    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(
        bad.join("config.json"),
        r#"{"model_type":"llama\u001b]0;pwned\u0007\u001b[2J\u202e"}"#,
    )
    .unwrap();
    let (code, _, err) = vram(&["estimate", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert!(
        err.contains(r"llama\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}"),
        "{err}"
    );
}

/// A safetensors header mixing the dtypes the format added after safetensors 0.4 (F4,
/// F6_E2M3, F6_E3M2, F8_E8M0, C64) gives its true parameter and byte count (F4 two values a
/// byte, F6 four in three bytes: huggingface/safetensors 0.8.0 `Dtype::bitsize`), in text and
/// `--json`; a dtype the format does not name is refused in one line naming the tensor.
#[test]
fn newer_safetensors_dtypes_are_counted_exactly() {
    let dir = tmp("dtype");
    let st = |name: &str, header: &str, data: usize| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&vec![0; data]);
        write(&dir, name, &bytes)
    };
    let mixed = st(
        "mixed.safetensors",
        concat!(
            r#"{"w4":{"dtype":"F4","shape":[4,32],"data_offsets":[0,64]},"#,
            r#""w4_scale":{"dtype":"F8_E8M0","shape":[4,1],"data_offsets":[64,68]},"#,
            r#""w6a":{"dtype":"F6_E2M3","shape":[4,8],"data_offsets":[68,92]},"#,
            r#""w6b":{"dtype":"F6_E3M2","shape":[2,2],"data_offsets":[92,95]},"#,
            r#""norm":{"dtype":"BF16","shape":[8],"data_offsets":[95,111]},"#,
            r#""c":{"dtype":"C64","shape":[1],"data_offsets":[111,119]}}"#
        ),
        119,
    );
    let (code, out, err) = vram(&["estimate", &mixed]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("mixed.safetensors — 177 parameters, 119 B of weights"),
        "{out}"
    );
    let (_, json, _) = vram(&["estimate", &mixed, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (v["params"].as_u64(), v["weights_bytes"].as_u64()),
        (Some(177), Some(119))
    );
    assert_eq!(v["dtypes"]["F6_E3M2"], 4);

    let odd = st(
        "odd.safetensors",
        r#"{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
        2,
    );
    let (code, _, err) = vram(&["estimate", &odd]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("tensor `w`: 3 elements of F4 (4 bits each) do not fill whole bytes"),
        "{err}"
    );

    let unknown = st(
        "unknown.safetensors",
        r#"{"s":{"dtype":"F2","shape":[4],"data_offsets":[0,1]}}"#,
        1,
    );
    let (code, _, err) = vram(&["estimate", &unknown]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("tensor `s`: its dtype is not one vram reads (unknown variant `F2`"),
        "{err}"
    );
    assert!(!err.contains("not valid JSON"), "{err}");
}

/// The second audit: one batch of one sequence is said in the singular ("1 batches" before).
#[test]
fn one_batch_is_singular() {
    let dir = tmp("singular");
    let one = write(&dir, "one.txt", b"10\n");
    let (code, out, err) = vram(&["batch", "gpt2", "--lengths", &one]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("1 sequence -> 1 batch on "), "{out}");
    let two = write(&dir, "two.txt", b"10 20\n");
    let (_, out, _) = vram(&["batch", "gpt2", "--lengths", &two]);
    assert!(out.starts_with("2 sequences -> 1 batch on "), "{out}");
}

/// The second audit: `trace --out` and `--events` naming one file (or a link to the other)
/// wrote the events over the snapshot and said "wrote x (895 KiB): 4,622 events", a snapshot
/// that was not there. It is refused in one line, and nothing is written.
#[test]
#[cfg(unix)]
fn two_outputs_naming_one_file_are_refused() {
    let dir = tmp("same-output");
    let same = dir.join("same.out");
    let s = same.to_str().unwrap();
    let (code, _, err) = vram(&["trace", "gpt2", "--out", s, "--events", s]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("two outputs name the same file"), "{err}");
    assert!(!same.exists());
    let alias = dir.join("alias.out");
    std::os::unix::fs::symlink("same.out", &alias).unwrap();
    let (code, _, err) = vram(&[
        "trace",
        "gpt2",
        "--out",
        s,
        "--events",
        alias.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(!same.exists());
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let dotted = format!("{}/sub/../same.out", dir.display());
    let (code, _, err) = vram(&["trace", "gpt2", "--out", s, "--events", &dotted]);
    assert_eq!(code, 2, "{err}");
    // Two files: both written.
    let events = dir.join("events.json");
    let (code, _, err) = vram(&[
        "trace",
        "gpt2",
        "--out",
        s,
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(same.exists() && events.exists());
}

/// The second audit: `vram record --out config.json` emptied the config (its one unterminated
/// line taken for a torn sample); a file that is not a recording is refused and left as it was.
#[test]
fn record_leaves_a_file_that_is_not_a_recording_alone() {
    let dir = tmp("record-other");
    let cfg = write(&dir, "config.json", LLAMA.as_bytes());
    let (code, _, err) = vram(&["record", "--demo", "--out", &cfg, "--count", "1"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a vram recording"), "{err}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), LLAMA);
    // A recording is appended to.
    let rec = dir.join("r.jsonl");
    let rec = rec.to_str().unwrap();
    for _ in 0..2 {
        let (code, _, err) = vram(&["record", "--demo", "--out", rec, "--count", "1"]);
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(std::fs::read_to_string(rec).unwrap().lines().count(), 2);
}

/// The second audit: `vram report` on the --json of `vram models` or `vram gpus` says what it
/// is, as it does for the doctor's ("JSON that is not an object" before).
#[test]
fn report_names_a_catalog_listing() {
    let dir = tmp("report-catalog");
    for cmd in ["models", "gpus"] {
        let (code, json, _) = vram(&[cmd, "--json"]);
        assert_eq!(code, 0);
        let f = write(&dir, &format!("{cmd}.json"), json.as_bytes());
        let html = dir.join(format!("{cmd}.html"));
        let (code, _, err) = vram(&["report", &f, "-o", html.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("the --json of vram models or vram gpus (a catalog listing) has no page"),
            "{err}"
        );
        assert!(!html.exists());
    }
    // Any other list is still "not an object".
    let f = write(&dir, "list.json", b"[1, 2]");
    let (code, _, err) = vram(&["report", &f, "-o", dir.join("l.html").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("JSON that is not an object"), "{err}");
}

/// A loopback server that answers every request with `response` (status line, headers and body
/// as given), for the Hub path's failures; its address. Serves until the test process ends.
fn canned_http(response: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(response);
        }
    });
    addr
}

/// Bad input, second pass (session 13): parallel flags in combination, a `--model` that is
/// not the pasted log's, degenerate configs, broken safetensors headers and a Hub that answers
/// 404, 500 or a page that is not one. Each is exit 2, one specific line, nothing on stdout.
/// Found failing before this pass: the two `doctor --model` cases (the paste's KV figure and
/// another model's were mixed in one remedy, exit 0); the rest held and are pinned here.
#[test]
fn hostile_input_round_two_is_one_line_and_exit_2() {
    let dir = tmp("hostile2");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let cap = |extra: &[&str]| {
        let mut v = s(&["capacity", "llama-3-8b", "--gpu", "h100-80g"]);
        v.extend(s(extra));
        v
    };
    let moe = |extra: &[&str]| {
        let mut v = s(&["capacity", "mixtral-8x7b", "--gpu", "h100-80g"]);
        v.extend(s(extra));
        v
    };
    let config = |name: &str, field: &str, value: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let mut j: serde_json::Value = serde_json::from_str(LLAMA).unwrap();
        j[field] = serde_json::from_str(value).unwrap();
        std::fs::write(d.join("config.json"), j.to_string()).unwrap();
        d.display().to_string()
    };
    let raw_config = |name: &str, bytes: &[u8]| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), bytes).unwrap();
        d.display().to_string()
    };
    // A safetensors file of header length `len` (little-endian u64) followed by `rest`.
    let st = |name: &str, len: u64, rest: &[u8]| {
        let mut b = len.to_le_bytes().to_vec();
        b.extend_from_slice(rest);
        write(&dir, name, &b)
    };
    let kv_paste = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-doctor/tests/data/messages/vllm-v1-kv-memory.txt")
        .display()
        .to_string();
    let kv_doctor = |model: &str| s(&["doctor", &kv_paste, "--model", model, "--gpu", "h100-80g"]);
    let free_paste = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-doctor/tests/data/messages/vllm-free-below-utilization.txt")
        .display()
        .to_string();
    let hub_404 = canned_http(b"HTTP/1.1 404 Not Found\r\nX-Error-Code: RepoNotFound\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let hub_500 = canned_http(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\nConnection: close\r\n\r\noops!",
    );
    let hub_html = canned_http(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 21\r\nConnection: close\r\n\r\n<html>captive</html>\n");
    let hub_junk = canned_http(b"\x00\x01 not http\r\n\r\n");
    // The Hub's headers over a body that is no JSON (a proxy's page served as the file).
    let hub_page = canned_http(b"HTTP/1.1 200 OK\r\nX-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\nETag: \"abc\"\r\nContent-Length: 21\r\nConnection: close\r\n\r\n<html>captive</html>\n");
    // (args, environment, what the error line must say)
    type Case<'a> = (Vec<String>, Vec<(&'a str, String)>, &'a str);
    let cases: Vec<Case> = vec![
        // The paste needs 16.00 GiB for one 131072-token request (128 KiB per token: an 8B
        // Llama 3.1); a 70B or DeepSeek-V3 --model was priced into the same remedy, exit 0.
        (
            kv_doctor("llama-3.1-70b"),
            vec![],
            "needs 40.00 GiB of KV cache at tensor-parallel size 1 by the capacity model, where the paste's vLLM needed 16.00 GiB",
        ),
        (
            kv_doctor("deepseek-v3"),
            vec![],
            "needs 8.58 GiB of KV cache at tensor-parallel size 1 by the capacity model, where the paste's vLLM needed 16.00 GiB",
        ),
        // The paste's device has 121.63 GiB (its free-memory check); an RTX 4090's figures
        // were put beside it in one answer, exit 0.
        (
            s(&["doctor", &free_paste, "--model", "llama-3.1-8b", "--gpu", "rtx-4090"]),
            vec![],
            "--gpu rtx-4090 holds 23.55 GiB, but the paste's device has 121.63 GiB: the capacity figures would be of another GPU than the engine's; give --gpu the paste's device, or its total (--gpu 121.63GiB)",
        ),
        (kv_doctor("llama-3-8b"), vec![], "--model llama-3-8b cannot run as the paste ran (its max_model_len, TP size and share): --max-model-len 131072 is larger than the model's max_position_embeddings 8192"),
        // Parallel flags in combination.
        (cap(&["--data-parallel-size", "0"]), vec![], "--data-parallel-size and --ep-size must be between 1 and 1024"),
        (cap(&["--enable-expert-parallel"]), vec![], "`llama-3-8b` has no experts to spread"),
        (s(&["capacity", "llama-3-8b", "--gpu", "h100-80g", "--engine", "sglang", "--ep-size", "2", "--tp-size", "2"]), vec![], "`llama-3-8b` has no experts to spread"),
        (moe(&["--engine", "sglang", "--ep-size", "4", "--tp-size", "2"]), vec![], "--ep-size 4 does not divide --tp-size 2"),
        (moe(&["--enable-expert-parallel", "--tensor-parallel-size", "3"]), vec![], "--tensor-parallel-size 3 does not divide the model's 32 attention heads"),
        (cap(&["--pipeline-parallel-size", "33"]), vec![], "--pipeline-parallel-size 33 exceeds the model's 32 layers"),
        (cap(&["--pipeline-parallel-size", "0"]), vec![], "must be between 1 and 1024"),
        (cap(&["--pipeline-parallel-size", "2", "--mem-fraction-static", "0.8"]), vec![], "--mem-fraction-static is an SGLang flag; not for --engine vllm"),
        (cap(&["--enable-dp-attention"]), vec![], "--enable-dp-attention is an SGLang flag"),
        (moe(&["--engine", "sglang", "--enable-expert-parallel"]), vec![], "--enable-expert-parallel is a vLLM flag; not for --engine sglang"),
        (cap(&["--gpu-memory-utilization", "0"]), vec![], "--gpu-memory-utilization 0 is outside (0, 1]"),
        (cap(&["--gpu-memory-utilization", "1.5"]), vec![], "--gpu-memory-utilization 1.5 is outside (0, 1]"),
        (cap(&["--gpu-memory-utilization", "NaN"]), vec![], "--gpu-memory-utilization NaN is outside (0, 1]"),
        (cap(&["--engine", "sglang", "--mem-fraction-static", "nan"]), vec![], "--mem-fraction-static NaN is outside (0, 1]"),
        (cap(&["--max-model-len", "0"]), vec![], "--max-model-len \"0\": a length is a positive number"),
        (cap(&["--max-model-len", "10000000"]), vec![], "--max-model-len 10000000 is larger than the model's max_position_embeddings 8192"),
        (cap(&["--max-model-len", "99999999999999999999"]), vec![], "too large"),
        (cap(&["--engine", "sglang", "--context-length", "0"]), vec![], "--context-length \"0\": a length is a positive number"),
        // Degenerate and broken configs.
        (s(&["estimate", &config("l0", "num_hidden_layers", "0")]), vec![], "num_hidden_layers = 0 is out of range"),
        (s(&["plan", &config("h0", "num_attention_heads", "0"), "--gpu", "h100-80g", "--gpus", "8", "--global-batch", "64", "--seq", "512"]), vec![], "num_attention_heads = 0 is out of range"),
        (s(&["estimate", &config("h7", "num_attention_heads", "7"), "--inference"]), vec![], "is not divisible by 7"),
        (s(&["capacity", &config("v0", "vocab_size", "0"), "--gpu", "h100-80g"]), vec![], "vocab_size = 0 is out of range"),
        (s(&["estimate", &config("neg", "num_hidden_layers", "-1")]), vec![], "num_hidden_layers = -1 is out of range"),
        (s(&["estimate", &config("half", "num_hidden_layers", "2.5")]), vec![], "num_hidden_layers = 2.5 is out of range"),
        (s(&["estimate", &config("wide", "hidden_size", "1000000000")]), vec![], "hidden_size = 1000000000 is out of range"),
        (s(&["estimate", &raw_config("trunc", br#"{"model_type":"llama","hidden_size":"#)]), vec![], "config.json is not valid JSON"),
        (s(&["estimate", &raw_config("bin", b"\xff\xfe\x00\x01garbage")]), vec![], "is not UTF-8 text"),
        (s(&["estimate", &raw_config("arr", b"[1, 2]")]), vec![], "should be an object, found an array"),
        // Broken safetensors headers.
        (s(&["estimate", &write(&dir, "tiny.safetensors", b"\x01\x02")]), vec![], "shorter than the 8-byte header length"),
        (s(&["estimate", &st("past.safetensors", 100_000, b"{}")]), vec![], "runs past the end of the"),
        (s(&["estimate", &st("huge.safetensors", u64::MAX, b"{}")]), vec![], "header length 18446744073709551615 is not between 1 and 100000000"),
        (s(&["estimate", &st("cut.safetensors", 20, br#"{"w":{"dtype":"BF16""#)]), vec![], "safetensors header is not valid JSON"),
        (
            s(&["estimate", &{
                let h = br#"{"w":{"dtype":"F64","shape":[1099511627776,1099511627776,1099511627776],"data_offsets":[0,8]}}"#;
                st("over.safetensors", h.len() as u64, h)
            }]),
            vec![],
            "shape overflows",
        ),
        // A Hub that answers 404, 500, a page that is not the Hub's, or not HTTP.
        (s(&["estimate", "org/x"]), vec![("HF_ENDPOINT", hub_404)], "org/x: repo not found on http://127.0.0.1:"),
        (s(&["capacity", "org/x", "--gpu", "h100-80g"]), vec![("HF_ENDPOINT", hub_500)], "answered HTTP 500 to 3 tries"),
        (s(&["estimate", "org/x"]), vec![("HF_ENDPOINT", hub_html)], "no X-Repo-Commit header (not a Hugging Face Hub endpoint?"),
        (s(&["estimate", "org/x"]), vec![("HF_ENDPOINT", hub_junk)], "cannot reach http://127.0.0.1:"),
        (s(&["estimate", "org/page"]), vec![("HF_ENDPOINT", hub_page)], "org/page@0123456 config.json: config.json is not valid JSON: expected value at line 1 column 1"),
    ];
    let hf_home = dir.join("hf");
    let mut failures = Vec::new();
    for (args, env, needle) in &cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vram"))
            .args(args)
            .env("HF_HOME", &hf_home)
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        let (code, stdout, err) = (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if code != 2
            || err.lines().count() != 1
            || !err.starts_with("vram: ")
            || !err.contains(needle)
            || !stdout.is_empty()
        {
            failures.push(format!(
                "{args:?}: exit {code}, stderr {err:?}, stdout {} bytes (wanted {needle:?})",
                stdout.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A paste whose `collect_env` names an NVIDIA driver before R550 prices the CUDA graphs at the
/// R535 figure when the doctor runs the capacity model (`--model`), and says so in text and
/// JSON alike; a later driver, or none, adds no such note.
#[test]
fn doctor_names_a_pasted_driver_before_r550() {
    let error = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let dir = tmp("doctor-driver");
    let note = "CUDA graphs on driver R535 (before R550)";
    for (name, env, noted) in [
        ("r535.log", "Nvidia driver version: 535.161.08\n", true),
        ("r550.log", "Nvidia driver version: 550.54.15\n", false),
        ("none.log", "", false),
    ] {
        let f = write(&dir, name, format!("{env}{error}").as_bytes());
        let run = |json: bool| {
            let mut a = vec!["doctor", f.as_str(), "--no-nvml", "--model", "llama-3.1-8b"];
            a.extend(["--gpu", "l20"]);
            if json {
                a.push("--json");
            }
            let (code, out, err) = vram(&a);
            assert_eq!(code, 0, "{name}: {err}");
            out
        };
        let text = run(false);
        assert_eq!(text.contains(note), noted, "{name}: {text}");
        let v: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
        let in_json = v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(note));
        assert_eq!(in_json, noted, "{name}: {v}");
    }
}

/// `vram doctor --driver` gives the host's driver for a vLLM start-up error with `--model`, as
/// `vram capacity --driver` does, and wins over the one the paste prints; without `--model`, on
/// an SGLang error or a PyTorch message it has nothing to price and is refused in one line.
#[test]
fn doctor_takes_the_driver_as_a_flag() {
    let error = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n";
    let dir = tmp("doctor-driver-flag");
    let note = "CUDA graphs on driver R535 (before R550)";
    let bare = write(&dir, "bare.log", error.as_bytes());
    let r550 = write(
        &dir,
        "r550.log",
        format!("Nvidia driver version: 550.54.15\n{error}").as_bytes(),
    );
    for (f, driver, noted) in [
        (&bare, None, false),
        (&bare, Some("535.161.08"), true),
        (&r550, None, false),
        (&r550, Some("535"), true),
    ] {
        let mut a = vec!["doctor", f.as_str(), "--no-nvml", "--model", "llama-3.1-8b"];
        a.extend(["--gpu", "l20", "--json"]);
        if let Some(d) = driver {
            a.extend(["--driver", d]);
        }
        let (code, out, err) = vram(&a);
        assert_eq!(code, 0, "{f} {driver:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let in_json = v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(note));
        assert_eq!(in_json, noted, "{f} {driver:?}: {v}");
    }
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.68 GiB memory in use. Of the allocated memory 35.00 GiB is allocated by PyTorch, and 42.00 GiB is reserved by PyTorch but unallocated.";
    let sglang = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.";
    for (a, want) in [
        (
            vec!["doctor", bare.as_str(), "--no-nvml", "--driver", "535"],
            "need --model",
        ),
        (
            vec!["doctor", oom, "--no-nvml", "--driver", "535"],
            "this is a PyTorch out-of-memory message",
        ),
        (
            vec![
                "doctor",
                sglang,
                "--no-nvml",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "l20",
                "--driver",
                "535",
            ],
            "this is an SGLang start-up error",
        ),
        (
            vec!["doctor", bare.as_str(), "--no-nvml", "--driver", "12.2"],
            "reads as a CUDA version",
        ),
    ] {
        let (code, out, err) = vram(&a);
        assert_eq!(code, 2, "{a:?}: {out}{err}");
        assert!(err.contains(want), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{a:?}: {err}");
    }
}
