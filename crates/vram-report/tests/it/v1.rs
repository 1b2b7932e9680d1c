//! Reports saved by `vram` at c72f1e1, the last to write schema version 1
//! (`tests/data/schema-v1/README.md` says how each was made): every kind reads, every field
//! reads back as it was saved, an estimate's `weights_load` holds what that vram held, and
//! text, `--json` and the page say the same figures.

use serde_json::Value;
use vram_model::fmt::bytes;
use vram_report::html::{detect_kind, render};
use vram_report::{Kind, Report, SCHEMA_VERSION};

/// Every file that reads (the AWQ MoE estimate does not: see its test).
const FILES: [&str; 15] = [
    "estimate-dense-llama-3.1-8b.json",
    "estimate-gptq-llama-3.1-8b.json",
    "estimate-nf4-llama-3.1-8b.json",
    "estimate-w4a16-moe-qwen3-30b-a3b.json",
    "estimate-mxfp4-moe-gpt-oss-20b.json",
    "estimate-mxfp4-moe-gpt-oss-20b-v100.json",
    "finetune-qlora-llama-3.1-8b.json",
    "weights-tiny-safetensors.json",
    "capacity-llama-3.1-8b.json",
    "capacity-awq-moe-qwen3-30b-a3b.json",
    "plan-llama-3.1-70b.json",
    "finetune-plan-llama-3.1-8b.json",
    "batch-llama-3.1-8b.json",
    "checkpoint-llama-3.1-8b.json",
    "replay-gpt2.json",
];

fn saved(name: &str) -> String {
    crate::fixture(&format!("schema-v1/{name}"))
}

fn read(name: &str) -> Report {
    Report::from_json(&saved(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every field of `old` is in `new` with the same value (`new` may have more, and more notes).
fn keeps(new: &Value, old: &Value, at: &str) {
    match (new, old) {
        (Value::Object(n), Value::Object(o)) => {
            for (k, v) in o {
                let n = n.get(k).unwrap_or_else(|| panic!("{at}.{k} was dropped"));
                keeps(n, v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(n), Value::Array(o)) => {
            if at.ends_with(".notes") {
                assert!(n.len() >= o.len(), "{at}");
            } else {
                assert_eq!(n.len(), o.len(), "{at}");
            }
            for (i, (n, o)) in n.iter().zip(o).enumerate() {
                keeps(n, o, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(new, old, "{at}"),
    }
}

#[test]
fn every_kind_saved_in_version_1_reads_with_every_field_as_saved() {
    for name in FILES {
        let text = saved(name);
        let mut old: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(old["schema_version"], 1, "{name}");
        let r = read(name);
        assert_eq!(Some(r.kind().name()), old["kind"].as_str(), "{name}");
        // Read, it is this version's report, and writes this version.
        let json = r.to_json();
        let new: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(new["schema_version"], SCHEMA_VERSION, "{name}");
        old["schema_version"] = SCHEMA_VERSION.into();
        keeps(&new, &old, name);
        assert_eq!(Report::from_json(&json).unwrap(), r, "{name}");
        // The page renders it, and says what the text says of its peak or capacity.
        let (kind, html) = render(&text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(detect_kind(&text).unwrap(), kind, "{name}");
        let t = r.text();
        assert!(!t.trim().is_empty(), "{name}");
        let html = html.replace("&#39;", "'");
        for key in ["peak_bytes", "total_bytes", "weights_bytes"] {
            if let Some(b) = old[key].as_u64() {
                if t.contains(&bytes(b)) {
                    assert!(html.contains(&bytes(b)), "{name}: {key} {}", bytes(b));
                }
            }
        }
    }
}

/// The estimate of each packed checkpoint, with `weights_load` as that vram held it.
fn load(name: &str) -> (Report, vram_report::estimate::WeightsLoad, Value) {
    let r = read(name);
    let Report::Estimate(e) = &r else {
        panic!("{name}: {:?}", r.kind())
    };
    let l = e.weights_load.clone().expect("weights_load");
    (r, l, serde_json::from_str(&saved(name)).unwrap())
}

const VERSION_NOTE: &str = "read from a schema version 1 report";

#[test]
fn a_version_1_estimate_holds_what_that_vram_held() {
    // Packed and held as stored: the one figure is both.
    for name in [
        "estimate-gptq-llama-3.1-8b.json",
        "estimate-nf4-llama-3.1-8b.json",
        "estimate-mxfp4-moe-gpt-oss-20b.json",
        "estimate-w4a16-moe-qwen3-30b-a3b.json",
    ] {
        let (r, l, old) = load(name);
        let stored = old["weights_load"]["stored_bytes"].as_u64().unwrap();
        assert!(!l.dequantized, "{name}");
        assert_eq!((l.held_bytes, l.stored_bytes), (stored, stored), "{name}");
        assert_eq!(
            l.dequantized_bytes,
            old["weights_load"]["dequantized_bytes"].as_u64().unwrap()
        );
        assert_eq!((&l.not_loaded, &l.dequantized_at_load), (&None, &None));
        // That vram's walk held it: the breakdown's parameters are the same bytes.
        assert_eq!(
            old["breakdown"]["parameters"].as_u64(),
            Some(stored),
            "{name}"
        );
        let line = format!("weights held as stored: {}", bytes(stored));
        assert!(r.text().contains(&line), "{name}: {}", r.text());
        let html = vram_report::html::report(&r);
        assert!(html.contains("weights held as stored"), "{name}");
        assert!(html.contains(&bytes(stored)), "{name}");
    }
    // Dequantized at load (MXFP4 below compute capability 7.5): it held the dequantized bytes.
    let (r, l, old) = load("estimate-mxfp4-moe-gpt-oss-20b-v100.json");
    assert!(l.dequantized);
    let deq = old["weights_load"]["dequantized_bytes"].as_u64().unwrap();
    assert_eq!(l.held_bytes, deq);
    assert_eq!(
        l.stored_bytes,
        old["weights_load"]["stored_bytes"].as_u64().unwrap()
    );
    assert!(r
        .text()
        .contains(&format!("weights held dequantized: {}", bytes(deq))));
    assert!(!r.text().contains(VERSION_NOTE));
}

#[test]
fn a_version_1_w4a16_moe_says_its_experts_were_held_packed() {
    // Version 1 held the compressed-tensors W4A16 expert banks packed; transformers 5.24
    // dequantizes them at load. The report keeps that vram's figures and says so in every
    // output; no other report does.
    let (r, _, _) = load("estimate-w4a16-moe-qwen3-30b-a3b.json");
    let note = |r: &Report| -> Vec<String> {
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str().filter(|n| n.starts_with(VERSION_NOTE)))
            .map(String::from)
            .collect()
    };
    let n = note(&r);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].contains("held these compressed-tensors W4A16 expert banks packed"));
    assert!(
        r.text().contains(&format!("note: {}", n[0])),
        "{}",
        r.text()
    );
    let html = vram_report::html::report(&r).replace("&#39;", "'");
    assert!(html.contains(VERSION_NOTE), "{html}");
    // Read again (now version 2), the note is not added twice.
    let again = Report::from_json(&r.to_json()).unwrap();
    assert_eq!(note(&again).len(), 1);
    for name in FILES.iter().filter(|f| !f.contains("w4a16-moe")) {
        let r = read(name);
        if r.kind() == Kind::Estimate {
            assert!(note(&r).is_empty(), "{name}");
        }
    }
}

/// Version 1 counted AWQ and GPTQ expert banks in the dtype: its one figure is what
/// transformers 5.24 holds (today's `held_bytes`, 59,722,985,472 for this file) but not what
/// the checkpoint stores, and the file has no stored figure. It is refused, in one line.
#[test]
fn a_version_1_awq_moe_is_refused_in_one_line() {
    let text = saved("estimate-awq-moe-qwen3-30b-a3b.json");
    let old: Value = serde_json::from_str(&text).unwrap();
    let e = Report::from_json(&text).unwrap_err().to_string();
    assert!(
        e.starts_with("a schema_version 1 estimate whose checkpoint is an MoE in awq-g128: version 1 counted its expert banks in the dtype"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    // Its figure is the dequantized banks': within 3 % of the whole model in bf16.
    let (stored, bf16) = (
        old["weights_load"]["stored_bytes"].as_u64().unwrap(),
        old["weights_load"]["dequantized_bytes"].as_u64().unwrap(),
    );
    assert!(stored > bf16 / 100 * 97, "{stored} {bf16}");
    assert!(render(&text, "awq").is_err());
}

#[test]
fn a_weights_load_of_the_wrong_version_is_refused_in_one_line() {
    let v1 = saved("estimate-gptq-llama-3.1-8b.json");
    // Version 2 without `held_bytes`: not read as version 1.
    let unheld = v1.replacen("\"schema_version\": 1", "\"schema_version\": 2", 1);
    // Version 1 with version 2's `held_bytes`: written by neither.
    let held = v1.replacen(
        "\"stored_bytes\":",
        "\"held_bytes\": 1,\n    \"stored_bytes\":",
        1,
    );
    let later = v1.replacen("\"schema_version\": 1", "\"schema_version\": 3", 1);
    for (text, says) in [
        (unheld, "missing field `held_bytes`"),
        (held, "unknown field `held_bytes`"),
        (later, "schema_version 3: this vram reads versions 1 and 2"),
    ] {
        assert_ne!(text, v1);
        let e = Report::from_json(&text).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
