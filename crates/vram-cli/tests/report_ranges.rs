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

/// A mutation of one real answer: which answer, the field's JSON path, its new value (from the
/// whole answer), and what `vram report` must say: `out of range` or `inconsistent with` and
/// the words that name the other side. The field named is the edited one, but where the edit
/// breaks a figure `vram` derives from it: then the derived one is named (a breakdown's entry
/// or `needed_bytes` against `total_bytes`), which the words say.
type Case = (
    &'static str,
    &'static str,
    fn(&Value) -> Value,
    &'static str,
);

fn u(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| match k.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[k],
        })
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not an integer"))
}

/// Every field-consistency rule of `check` (and the narrower integer ranges beside it), one
/// case each, on real answers: each edited answer is refused in one line naming the field,
/// with exit code 2 and no page written, and the answer as written still reads.
#[test]
fn report_refuses_fields_that_disagree_with_each_other() {
    let dir = tmp("consistent");
    let answers: Vec<(&str, String)> = vec![
        (
            "infer",
            answer(&[
                "estimate",
                "gpt2",
                "--inference",
                "--batch",
                "2",
                "--context",
                "512",
            ]),
        ),
        ("train_pp2", answer(&["estimate", "gpt2", "--pp", "2"])),
        ("lora", answer(&["estimate", "gpt2", "--finetune", "lora"])),
        ("plan", answer(PLAN_GPT2)),
        (
            "ft_plan",
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
                "1",
            ]),
        ),
        (
            "starts",
            answer(&["capacity", "llama-3-8b", "--gpu", "h100-80g"]),
        ),
    ];
    // Batches with a sequence too long for the GPU, and a replay against a capacity it
    // runs out of.
    let lengths = dir.join("lengths.txt");
    std::fs::write(&lengths, "100 700 1024 30 512 2048 64 999999").unwrap();
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
    let mut answers = answers;
    answers.push((
        "batch",
        answer(&[
            "batch",
            "gpt2",
            "--gpu",
            "t4",
            "--lengths",
            lengths.to_str().unwrap(),
        ]),
    ));
    answers.push((
        "replay",
        answer(&["replay", pickle.to_str().unwrap(), "--capacity", "3GiB"]),
    ));
    let cases: &[Case] = &[
        // A setup's degrees and sizes, as the flags take them.
        (
            "infer",
            "setup.parallel.tp",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "infer",
            "setup.parallel.dp",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "train_pp2",
            "setup.parallel.pp",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "train_pp2",
            "setup.parallel.zero",
            |_| 4.into(),
            "out of range: a ZeRO stage from 0 to 3",
        ),
        (
            "train_pp2",
            "setup.mode.train.micro_batch",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "train_pp2",
            "setup.mode.train.grad_accum",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "lora",
            "setup.mode.train.seq",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "infer",
            "setup.mode.infer.batch",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "infer",
            "setup.mode.infer.new_tokens",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "infer",
            "setup.mode.infer.kv_bytes",
            |_| 3.into(),
            "out of range: 1 (fp8, int8), 2 (fp16, bf16) or 4 (fp32) bytes per element",
        ),
        (
            "infer",
            "setup.mode.infer.new_tokens",
            |_| 512.into(),
            "inconsistent with context 512",
        ),
        (
            "train_pp2",
            "pipeline_rank",
            |_| 2.into(),
            "inconsistent with setup.parallel.pp 2",
        ),
        (
            "train_pp2",
            "params_per_gpu",
            |v| (u(v, "params") + 1).into(),
            "inconsistent with params",
        ),
        (
            "infer",
            "trainable_params",
            |v| (u(v, "params") + 1).into(),
            "inconsistent with params",
        ),
        // An estimate's totals.
        (
            "infer",
            "total_bytes",
            |v| (u(v, "total_bytes") + 1).into(),
            "inconsistent with the breakdown, which sums to",
        ),
        (
            "lora",
            "breakdown.activations",
            |v| (u(v, "breakdown.activations") + 4096).into(),
            "inconsistent with the breakdown, which sums to",
        ),
        (
            "infer",
            "needed_bytes",
            |v| (u(v, "needed_bytes") - 512).into(),
            "inconsistent with needed_bytes",
        ),
        (
            "lora",
            "setup.overheads.cuda_context_bytes",
            |_| 0.into(),
            "inconsistent with the breakdown's cuda_context",
        ),
        (
            "infer",
            "peak_tensor_bytes",
            |v| (u(v, "peak_bytes") + 1).into(),
            "inconsistent with peak_bytes",
        ),
        (
            "train_pp2",
            "peak_bytes",
            |v| (u(v, "reserved_bytes") + 1).into(),
            "which holds the allocated peak",
        ),
        (
            "infer",
            "gpu_memory_bytes",
            |v| (u(v, "gpu_memory_bytes") * 2).into(),
            "inconsistent with gpu.memory_bytes",
        ),
        (
            "lora",
            "headroom_bytes",
            |_| 1.into(),
            "inconsistent with gpu_memory_bytes",
        ),
        (
            "infer",
            "fits",
            |_| false.into(),
            "inconsistent with total_bytes",
        ),
        (
            "lora",
            "lora.rank",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        // A training plan's row against its report.
        (
            "plan",
            "plans[0].tp",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "plan",
            "plans[0].zero_stage",
            |_| 5.into(),
            "out of range: a ZeRO stage from 0 to 3",
        ),
        (
            "plan",
            "plans[0].tp",
            |_| 2.into(),
            "plans[0] is tp 2 x pp 1 x dp 8 = 16 GPUs, inconsistent with gpus 8",
        ),
        (
            "plan",
            "plans[0].grad_accum",
            |_| 3.into(),
            "is dp 8 x micro_batch 8 x grad_accum 3 = 192 sequences, inconsistent with global_batch 64",
        ),
        (
            "plan",
            "plans[0].step_time_s",
            |_| 1.5.into(),
            "inconsistent with time.total_s",
        ),
        (
            "plan",
            "plans[0].tokens_per_s",
            |_| 10.5.into(),
            "inconsistent with global_batch 64 x seq 1024",
        ),
        (
            "plan",
            "plans[0].peak_bytes_per_gpu",
            |v| (u(v, "gpu_memory_bytes") + 1).into(),
            "a plan is one that fits",
        ),
        (
            "plan",
            "plans[0].label",
            |_| "tp2 pp1 dp4 mb8x2 zero2".into(),
            "inconsistent with the row's fields, which read tp1 pp1 dp8 mb8x1 zero1",
        ),
        (
            "plan",
            "plans[0].zero_stage",
            |_| 3.into(),
            "plans[0].label is \"tp1 pp1 dp8 mb8x1 zero1\", inconsistent with the row's fields, which read tp1 pp1 dp8 mb8x1 zero3",
        ),
        (
            "plan",
            "gpus_per_node",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        // A LoRA plan's row.
        (
            "ft_plan",
            "plans[0].dp",
            |_| 2.into(),
            "inconsistent with gpus 1: one replica per GPU",
        ),
        (
            "ft_plan",
            "plans[0].micro_batch",
            |_| 3.into(),
            "is dp 1 x micro_batch 3 x grad_accum 1 = 3 sequences, inconsistent with global_batch 8",
        ),
        (
            "ft_plan",
            "plans[0].bytes_per_gpu",
            |v| (u(v, "gpu_memory_bytes") + 1).into(),
            "a plan is one that fits",
        ),
        (
            "ft_plan",
            "plans[0].trainable_params",
            |_| 7.into(),
            "inconsistent with the report's trainable_params",
        ),
        (
            "ft_plan",
            "plans[0].label",
            |_| "dp1 mb4x2".into(),
            "inconsistent with the row's fields, which read \"dp1 mb8x1\"",
        ),
        (
            "ft_plan",
            "seq",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        // A capacity's budget, pool and lengths.
        (
            "starts",
            "budget_bytes",
            |v| (u(v, "total_bytes") + 1).into(),
            "inconsistent with total_bytes",
        ),
        (
            "starts",
            "kv_cache_bytes",
            |v| (u(v, "budget_bytes") + 1).into(),
            "inconsistent with budget_bytes",
        ),
        (
            "starts",
            "max_model_len_that_fits",
            |v| (u(v, "max_model_len") + 1).into(),
            "inconsistent with max_model_len",
        ),
        (
            "starts",
            "max_model_len_that_fits",
            |v| (u(v, "max_model_len") - 1).into(),
            "inconsistent with starts true under vLLM",
        ),
        (
            "starts",
            "max_num_seqs",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "starts",
            "kv_groups[0].block_size",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        (
            "starts",
            "gpu.memory_bytes",
            |_| 0.into(),
            "out of range: a count of at least 1",
        ),
        // Batches: a partition of the sequences, each batch fitting.
        (
            "batch",
            "batches[0].indices[0]",
            |_| 99.into(),
            "inconsistent with sequences 8: indices are 0 to sequences - 1",
        ),
        (
            "batch",
            "batches[1].indices[0]",
            |v| v["batches"][0]["indices"][0].clone(),
            "inconsistent with another index of the same sequence",
        ),
        (
            "batch",
            "too_long[0]",
            |v| v["batches"][0]["indices"][1].clone(),
            "inconsistent with another index of the same sequence",
        ),
        (
            "batch",
            "sequences",
            |_| 9.into(),
            "inconsistent with the 8 sequences the batches and too_long hold",
        ),
        (
            "batch",
            "batches[0].total_bytes",
            |v| (u(v, "capacity_bytes") + 1).into(),
            "a batch is one that fits",
        ),
        // A replay's allocator figures.
        (
            "replay",
            "policies[0].peak_requested_bytes",
            |v| (u(v, "policies.0.peak_allocated_bytes") + 512).into(),
            "inconsistent with peak_allocated_bytes",
        ),
        (
            "replay",
            "policies[0].peak_allocated_bytes",
            |v| (u(v, "policies.0.peak_reserved_bytes") + 512).into(),
            "inconsistent with peak_reserved_bytes",
        ),
        (
            "replay",
            "policies[1].fragmentation",
            |_| 0.5.into(),
            "inconsistent with 1 - peak_allocated_bytes / peak_reserved_bytes",
        ),
        (
            "replay",
            "policies[0].device_frees",
            |v| (u(v, "policies.0.device_allocs") + 1).into(),
            "inconsistent with device_allocs",
        ),
        (
            "replay",
            "capacity_bytes",
            |_| Value::Null,
            "inconsistent with capacity_bytes null",
        ),
        (
            "replay",
            "policies[2].first_oom_event",
            |_| Value::Null,
            "inconsistent with would_oom true",
        ),
        (
            "replay",
            "policies[0].first_oom_event",
            |v| v["events"].clone(),
            "indices are 0 to events - 1",
        ),
    ];
    for (name, json) in &answers {
        Report::from_json(json).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (i, (name, path, new, want)) in cases.iter().enumerate() {
        let json = &answers.iter().find(|(n, _)| n == name).unwrap().1;
        let v: Value = serde_json::from_str(json).unwrap();
        let bad = new(&v);
        let f = dir.join(format!("k{i}.json"));
        std::fs::write(
            &f,
            serde_json::to_string(&with(&v, path, bad.clone())).unwrap(),
        )
        .unwrap();
        let page = dir.join(format!("k{i}.html"));
        let err = refused(&["report", f.to_str().unwrap(), "-o", page.to_str().unwrap()]);
        // The path as `check` writes it: `plans[0].tp`; the value as the JSON wrote it. A
        // breakdown entry or `needed_bytes` makes `total_bytes` disagree, which is named; a plan
        // row's factor, the row.
        let named = match *path {
            // A replay without its capacity: each policy's verdict disagrees with it.
            "capacity_bytes" => "policies[0].would_oom is true, ".to_string(),
            // The label that no longer reads as the row's fields.
            "plans[0].zero_stage" if bad == 3 => "plans[0].label is ".to_string(),
            "breakdown.activations" | "needed_bytes" => {
                format!("total_bytes is {}, ", u(&v, "total_bytes"))
            }
            // A plan row's layout and batch split are named by the row.
            "plans[0].tp" | "plans[0].grad_accum" | "plans[0].micro_batch" if bad != 0 => {
                "plans[0] is ".to_string()
            }
            _ => format!("{path} is {bad}, "),
        };
        assert!(err.contains(&named), "{name} {path}: {err}");
        assert!(err.contains(want), "{name} {path}: {err}");
        assert!(!page.exists(), "{name} {path}: {err}");
    }
}
