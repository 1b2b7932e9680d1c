//! `vram report` on a hand-edited `--json` answer: every figure out of its range is refused in
//! one line naming its JSON path and the range (exit 2, no page written), for every kind of
//! report. The answers are real ones, made by this `vram`; each numeric field of each is
//! mutated alone.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vram_report::{Error, Report};

mod common;
use common::{refused, vram};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vram-ranges-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `vram ARGS --json`, which must succeed.
fn answer(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out, err) = vram(&a);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// A training plan of GPT-2 on eight A100s, its best candidate only.
const PLAN_GPT2: &[&str] = &[
    "plan",
    "gpt2",
    "--gpu",
    "a100-80g",
    "--gpus",
    "8",
    "--global-batch",
    "64",
    "--seq",
    "1024",
    "--top",
    "1",
];

/// One real answer of every kind `vram report` renders, with the floats each kind holds: an
/// inference estimate (its serving speed, `--fragmentation`), a LoRA estimate, a capacity
/// that does not start (its cheapest change), plans (training and LoRA), batches, a checkpoint
/// placement with segments, and a replay.
fn answers(dir: &Path) -> Vec<(&'static str, String)> {
    let lengths = dir.join("lengths.txt");
    std::fs::write(&lengths, "100 700 1024 30 512 2048 64").unwrap();
    let pickle = dir.join("gpt2.pickle");
    let (code, _, err) = vram(&[
        "trace",
        "gpt2",
        "--steps",
        "2",
        "--out",
        pickle.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    vec![
        (
            "estimate",
            answer(&[
                "estimate",
                "gpt2",
                "--inference",
                "--batch",
                "2",
                "--context",
                "512",
                "--fragmentation",
                "0.05",
            ]),
        ),
        (
            "finetune",
            answer(&[
                "estimate",
                "gpt2",
                "--finetune",
                "lora",
                "--lora-dropout",
                "0.1",
            ]),
        ),
        (
            "capacity",
            answer(&[
                "capacity",
                "llama-3-70b",
                "--gpu",
                "a100-80g",
                "--tensor-parallel-size",
                "2",
                "--gpu-memory-utilization",
                "0.86",
            ]),
        ),
        (
            "plan",
            answer(&[
                "plan",
                "gpt2",
                "--gpu",
                "a100-80g",
                "--gpus",
                "8",
                "--global-batch",
                "64",
                "--seq",
                "1024",
                "--top",
                "2",
            ]),
        ),
        (
            "finetune_plan",
            answer(&[
                "plan",
                "gpt2",
                "--gpu",
                "a100-80g",
                "--gpus",
                "1",
                "--global-batch",
                "8",
                "--seq",
                "1024",
                "--finetune",
                "lora",
                "--top",
                "2",
            ]),
        ),
        (
            "batch",
            answer(&["batch", "gpt2", "--lengths", lengths.to_str().unwrap()]),
        ),
        (
            "checkpoint",
            answer(&["checkpoint", "gpt2", "--micro-batch", "64", "--seq", "1024"]),
        ),
        ("replay", answer(&["replay", pickle.to_str().unwrap()])),
    ]
}

/// Every numeric leaf of `v` with its JSON path (`plans[0].time.compute_s`) and its key.
fn leaves(v: &Value, path: &str, key: &str, out: &mut Vec<(String, String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(x, &p, k, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, &format!("{path}[{i}]"), key, out);
            }
        }
        Value::Number(_) => out.push((path.to_string(), key.to_string(), v.clone())),
        _ => {}
    }
}

/// `v` with the leaf at `path` replaced by `new`.
fn with(v: &Value, path: &str, new: Value) -> Value {
    let mut v = v.clone();
    let mut at = &mut v;
    for part in path.split('.') {
        let (key, idx) = match part.find('[') {
            Some(b) => (&part[..b], &part[b..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            at = at.get_mut(key).unwrap();
        }
        for i in idx.split(['[', ']']).filter(|s| !s.is_empty()) {
            at = at.get_mut(i.parse::<usize>().unwrap()).unwrap();
        }
    }
    *at = new;
    v
}

/// The table of ranges, by field: what may be negative, what is a share (and its top), as the
/// reports' own ranges say; everything else is at least 0.
const SIGNED: [&str; 2] = ["headroom_bytes", "cache_bytes_per_token"];
const SHARES: [(&str, f64); 6] = [
    ("mfu", 1.0),
    ("memory_fraction", 1.0),
    ("fill", 1.0),
    ("policies[].fragmentation", 1.0),
    ("dropout", 1.0),
    // `--fragmentation` takes 0 to 10 (a share of the allocated bytes).
    ("overheads.fragmentation", 10.0),
];

/// The values that `path` (key `key`, now `v`) must refuse.
fn out_of_range(path: &str, key: &str, v: &Value) -> Vec<Value> {
    let beyond = Value::from((1u64 << 53) + 1);
    if SIGNED.contains(&key) {
        return vec![beyond, Value::from(-(1i64 << 53) - 1)];
    }
    let general: String = {
        // `policies[2].fragmentation` -> `policies[].fragmentation`
        let mut s = String::new();
        let mut skip = false;
        for ch in path.chars() {
            match ch {
                '[' => {
                    skip = true;
                    s.push('[');
                }
                ']' => {
                    skip = false;
                    s.push(']');
                }
                _ if skip => {}
                _ => s.push(ch),
            }
        }
        s
    };
    if v.is_f64() {
        let mut bad = vec![Value::from(-1.5)];
        if let Some((_, top)) = SHARES.iter().find(|(s, _)| general.ends_with(s)) {
            bad.push(Value::from(top + 0.5));
        }
        bad
    } else {
        vec![Value::from(-1), beyond]
    }
}

#[test]
fn report_refuses_every_figure_out_of_its_range() {
    let dir = tmp("all");
    let mut refusals = 0;
    let mut kinds = Vec::new();
    for (kind, json) in answers(&dir) {
        // The answer as written reads back, and writes back byte for byte.
        let r = Report::from_json(&json).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(r.kind().name(), kind);
        assert_eq!(r.to_json(), json, "{kind}: not the same bytes after a read");
        let v: Value = serde_json::from_str(&json).unwrap();
        let mut all = Vec::new();
        leaves(&v, "", "", &mut all);
        let mut floats = 0;
        for (path, key, x) in all {
            if path == "schema_version" {
                continue;
            }
            floats += usize::from(x.is_f64());
            for bad in out_of_range(&path, &key, &x) {
                let text = serde_json::to_string_pretty(&with(&v, &path, bad.clone())).unwrap();
                match Report::from_json(&text) {
                    Err(Error::OutOfRange {
                        path: p,
                        value,
                        range,
                    }) => {
                        assert_eq!(p, path, "{kind}: {path} = {bad}");
                        assert_eq!(value, bad.to_string(), "{kind}: {path}");
                        let msg = Error::OutOfRange {
                            path: p,
                            value,
                            range,
                        }
                        .to_string();
                        assert!(!msg.contains('\n'), "{msg}");
                        assert!(msg.starts_with(&format!("{path} is {bad}")), "{msg}");
                    }
                    other => panic!("{kind}: {path} = {bad} gave {other:?}"),
                }
                refusals += 1;
            }
        }
        assert!(floats > 0, "{kind} holds no float: not the answer meant");
        kinds.push(kind);
    }
    assert_eq!(kinds.len(), 8);
    assert!(refusals > 200, "{refusals} refusals");
}

/// The checks beyond a figure's sign: a stage runs its forward at least once, a segment's
/// stages exist; through `vram report`, each refusal is one line and no page is written.
#[test]
fn report_refuses_a_checkpoint_that_is_not_one_and_writes_nothing() {
    let dir = tmp("ckpt");
    let json = answer(&["checkpoint", "gpt2", "--micro-batch", "64", "--seq", "1024"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    let stages = v["chain"].as_array().unwrap().len();
    let cases = [
        (
            with(&v, "candidates[1].forward_runs[0]", Value::from(0)),
            "candidates[1].forward_runs[0] is 0, out of range: a count of at least 1".to_string(),
        ),
        (
            with(&v, "recommended_segments[0]", serde_json::json!([2, 1])),
            format!("recommended_segments[0] is [2, 1], out of range: stage indices [first, last] with first <= last < {stages}"),
        ),
        (
            with(
                &v,
                "recommended_segments[0]",
                serde_json::json!([0, stages]),
            ),
            format!("recommended_segments[0] is [0, {stages}], out of range"),
        ),
        (
            with(&v, "candidates[0].overhead", Value::from(-0.25)),
            "candidates[0].overhead is -0.25, out of range: a ratio, at least 0".to_string(),
        ),
    ];
    for (i, (bad, want)) in cases.iter().enumerate() {
        let f = dir.join(format!("c{i}.json"));
        std::fs::write(&f, serde_json::to_string_pretty(bad).unwrap()).unwrap();
        let page = dir.join(format!("c{i}.html"));
        let err = refused(&["report", f.to_str().unwrap(), "-o", page.to_str().unwrap()]);
        assert!(err.contains(want.as_str()), "{err}");
        assert!(!page.exists(), "{err}");
    }
    // A plan's MFU above 1 and a negative step time, as the command says them.
    let plan = answer(PLAN_GPT2);
    let v: Value = serde_json::from_str(&plan).unwrap();
    for (path, bad, want) in [
        (
            "plans[0].mfu",
            3.0,
            "plans[0].mfu is 3, out of range: a fraction from 0 to 1",
        ),
        (
            "plans[0].time.total_s",
            -4.5,
            "plans[0].time.total_s is -4.5, out of range: a time in seconds, at least 0",
        ),
    ] {
        let f = dir.join("p.json");
        let page = dir.join("p.html");
        std::fs::write(
            &f,
            serde_json::to_string(&with(&v, path, bad.into())).unwrap(),
        )
        .unwrap();
        let err = refused(&["report", f.to_str().unwrap(), "-o", page.to_str().unwrap()]);
        assert!(err.contains(want), "{err}");
        assert!(!page.exists());
    }
}

/// A report built in the library, not read from JSON, is held to the same ranges: NaN and
/// infinities are out of every one.
#[test]
fn check_refuses_nan_and_infinity() {
    let plan = answer(PLAN_GPT2);
    let Report::Plan(p) = Report::from_json(&plan).unwrap() else {
        panic!("not a plan")
    };
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut q = p.clone();
        q.plans[0].tokens_per_s = bad;
        let e = Report::Plan(q).check().unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("plans[0].tokens_per_s is {bad}, out of range")),
            "{e}"
        );
    }
    assert!(Report::Plan(p).check().is_ok());
}
