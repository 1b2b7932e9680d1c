//! `vram capacity` against start-up figures from real vLLM and SGLang logs
//! (`tests/data/serving/logs.json`, the source of each case next to it and in the folder's
//! README.md), and its bad inputs.
//!
//! Prints each figure's signed error (weights, KV pool in GiB, tokens, concurrency, whether it
//! starts) and the published planner's aggregate errors beside vram's own mean absolute errors.
//! The targets are asserted: weights within 1 % on every case, the KV pool within 3 % and
//! the concurrency within 5 % at the median; each case also stays within a looser bound, so that
//! no single log can get much worse unnoticed. The table is in BENCHMARKS.md ("Serving capacity").

use std::path::PathBuf;
use std::process::Command;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/serving")
}

fn vram(args: &[String]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Per-case bounds (absolute relative error): looser than the medians' targets.
const CASE_WEIGHTS: f64 = 0.01;
const CASE_KV: f64 = 0.12;
const CASE_CONCURRENCY: f64 = 0.10;

#[test]
fn capacity_against_real_logs() {
    let text = std::fs::read_to_string(data().join("logs.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let gib = (1u64 << 30) as f64;
    let (mut w_err, mut kv_err, mut tok_err, mut conc_err) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut engines = std::collections::BTreeSet::new();
    eprintln!(
        "{:<42} {:>8} {:>8} {:>8} {:>11} {:>7}",
        "case", "weights", "KV pool", "tokens", "concurrency", "starts"
    );
    for c in doc["cases"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap();
        assert!(
            c["source"].as_str().is_some_and(|s| !s.is_empty()),
            "{id}: every case names its source"
        );
        engines.insert(c["engine"].as_str().unwrap().to_string());
        let model = c["model"].as_str().unwrap();
        let model = if model.ends_with(".json") {
            data().join(model).to_string_lossy().into_owned()
        } else {
            model.to_string()
        };
        let mut args = vec!["capacity".to_string(), model];
        args.extend(
            c["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string()),
        );
        args.push("--json".into());
        let (code, out, err) = vram(&args);
        assert_eq!(code, 0, "{id}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let l = &c["logged"];
        let rel = |est: f64, logged: f64| est / logged - 1.0;
        let w = l["weights_gib"]
            .as_f64()
            .map(|x| rel(v["weights_bytes"].as_f64().unwrap() / gib, x));
        // A log without the pool's GiB (vLLM 0.19's hybrid report prints tokens and
        // concurrency only) is checked on those.
        let kv = l["kv_cache_gib"]
            .as_f64()
            .map(|x| rel(v["kv_cache_bytes"].as_f64().unwrap() / gib, x));
        let tokens = l["kv_cache_tokens"]
            .as_f64()
            .map(|x| rel(v["kv_cache_tokens"].as_f64().unwrap(), x));
        let conc = l["max_concurrency"]
            .as_f64()
            .map(|x| rel(v["max_concurrency"].as_f64().unwrap(), x));
        let starts_ok = v["starts"] == l["starts"];
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:+.1}%", x * 100.0));
        eprintln!(
            "{:<42} {:>8} {:>8} {:>8} {:>11} {:>7}",
            id,
            pct(w),
            pct(kv),
            pct(tokens),
            pct(conc),
            if starts_ok { "same" } else { "WRONG" }
        );
        // The KV pool and its tokens are the same figure in two units (blocks round down).
        if let (Some(t), Some(kv)) = (tokens, kv) {
            assert!((t - kv).abs() < 0.02, "{id}: tokens {t} vs pool {kv}");
        }
        assert!(starts_ok, "{id}: starts");
        if let Some(w) = w {
            assert!(w.abs() <= CASE_WEIGHTS, "{id}: weights off by {w}");
            w_err.push(w.abs());
        }
        if let Some(kv) = kv {
            assert!(kv.abs() <= CASE_KV, "{id}: KV pool off by {kv}");
            kv_err.push(kv.abs());
        }
        if let Some(t) = tokens {
            tok_err.push(t.abs());
        }
        if let Some(x) = conc {
            assert!(x.abs() <= CASE_CONCURRENCY, "{id}: concurrency off by {x}");
            conc_err.push(x.abs());
        }
    }
    assert!(
        engines.contains("vllm") && engines.contains("sglang"),
        "both engines are checked"
    );
    let p = &doc["published_planner"]["mean_abs_error"];
    eprintln!(
        "vram ({} cases): weights worst {:.2}% (mean {:.2}%), KV pool median {:.1}% (mean {:.1}%, {} cases), tokens median {:.1}%, concurrency median {:.1}% (mean {:.1}%, {} cases)",
        doc["cases"].as_array().unwrap().len(),
        w_err.iter().cloned().fold(0.0, f64::max) * 100.0,
        mean(&w_err) * 100.0,
        median(kv_err.clone()) * 100.0,
        mean(&kv_err) * 100.0,
        kv_err.len(),
        median(tok_err.clone()) * 100.0,
        median(conc_err.clone()) * 100.0,
        mean(&conc_err) * 100.0,
        conc_err.len()
    );
    eprintln!(
        "published planner (llm-d-planner, its own 29 H100 cases with vLLM 0.19, mean absolute): weights {:.2}%, KV pool {:.1}%, concurrency {:.1}% (none of these cases)",
        p["weights"].as_f64().unwrap() * 100.0,
        p["kv_pool"].as_f64().unwrap() * 100.0,
        p["max_concurrency"].as_f64().unwrap() * 100.0
    );
    // The targets.
    assert!(median(kv_err) <= 0.03);
    assert!(median(conc_err) <= 0.05);
}

#[test]
fn bad_capacity_inputs_are_one_line_exit_2() {
    for (args, want) in [
        (
            vec!["llama-3-8b", "--gpu-memory-utilization", "1.5"],
            "outside (0, 1]",
        ),
        (
            vec!["llama-3-8b", "--gpu-memory-utilization", "0"],
            "outside (0, 1]",
        ),
        (
            vec!["llama-3-8b", "--tensor-parallel-size", "3"],
            "does not divide",
        ),
        (
            vec!["llama-3-8b", "--max-model-len", "100000"],
            "max_position_embeddings",
        ),
        (
            vec![
                "llama-3-8b",
                "--engine",
                "vllm",
                "--mem-fraction-static",
                "0.8",
            ],
            "SGLang flag",
        ),
        (
            vec![
                "llama-3-8b",
                "--engine",
                "sglang",
                "--mem-fraction-static",
                "1.2",
            ],
            "outside (0, 1]",
        ),
        (
            vec!["llama-3-8b", "--engine-version", "0.2"],
            "layouts known",
        ),
        (
            vec!["llama-3-8b", "--quantization", "int3"],
            "--quantization",
        ),
        (vec!["bert-base-uncased"], "not a decoder-only"),
        (vec!["resnet-50"], "not a transformer"),
    ] {
        let mut a = vec!["capacity".to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        let (code, out, err) = vram(&a);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// What a run that does not start says: the largest length that would, and a change that
/// starts it at the asked length, whose own run starts.
#[test]
fn a_job_that_does_not_start_gets_the_length_and_the_change() {
    let (code, out, err) = vram(&[
        "capacity".into(),
        "llama-3-70b".into(),
        "--gpu".into(),
        "a100-80g".into(),
        "--tensor-parallel-size".into(),
        "2".into(),
        "--gpu-memory-utilization".into(),
        "0.85".into(),
        "--json".into(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "weights_bytes",
        "non_torch_bytes",
        "activation_peak_bytes",
        "cuda_graph_bytes",
        "kv_cache_bytes",
        "kv_cache_tokens",
        "max_concurrency",
        "starts",
        "max_model_len_that_fits",
    ] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    assert_eq!(v["starts"], serde_json::json!(false), "{out}");
    let fit = v["max_model_len_that_fits"].as_u64().unwrap();
    assert!(fit < 8192);
    let flags = v["cheapest_change"]["flags"].as_str().unwrap().to_string();
    let mut again: Vec<String> = [
        "capacity",
        "llama-3-70b",
        "--gpu",
        "a100-80g",
        "--tensor-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.85",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let fix: Vec<String> = flags.split_whitespace().map(String::from).collect();
    if fix[0] == "--tensor-parallel-size" {
        again[5] = fix[1].clone();
    } else {
        again.extend(fix);
    }
    let (code, out, _) = vram(&again);
    assert_eq!(code, 0);
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["starts"], serde_json::json!(true), "{flags}: {out}");
    // At the length that fits, the same job starts.
    let mut at = again[..9].to_vec();
    at.extend(["--max-model-len".to_string(), fit.to_string()]);
    let (_, out, _) = vram(&at);
    let x: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(x["starts"], serde_json::json!(true), "{out}");
}
