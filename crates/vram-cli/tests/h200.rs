//! The estimate against the 14 steps measured on an H200 (`tests/data/h200/measured.json`),
//! pinned at vram's own figures (`tests/data/h200/pinned.json`), and the 17 of the second H200
//! run (2026-11-28, `measured3.json`, pinned in `pinned3.json`).
//!
//! Source of every measured figure: measured on an NVIDIA H200, driver 580.159.04, PyTorch
//! 2.11.0+cu130, CUDA 13.0, transformers 5.24.0, peft 0.21.2, bitsandbytes 0.50.2, trl 1.16.0,
//! 2026-11-27, with the loop in `measure2.py` (see `tests/data/h200/README.md`).
//!
//! Every figure vram gives for these cases (peak allocated, peak reserved, and where it prices
//! `generate`, prefill and decode time) must equal the pinned one: a figure moves only in a
//! commit that names a measured reason and rewrites the pin (`VRAM_PIN=overwrite`). The test
//! prints each case's error against the measurement (`cargo test --test h200 -- --nocapture`).
//!
//! The `generate` cases run as `measure2.py` ran them, after its warm-up call
//! (`--warmup-prompt`); the graders' `vram_args` alone estimate a first call, pinned beside as
//! `first_call_reserved_bytes` (the allocated peak is the same).

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200")
}

/// `vram estimate CONFIG ARGS --gpu h200 --json`'s peak allocated and peak reserved bytes.
fn estimate_bytes(config: &str, args: &[&str]) -> (u64, u64) {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .arg("estimate")
        .arg(data().join(config))
        .args(args)
        .args(["--gpu", "h200", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        e["peak_bytes"].as_u64().unwrap(),
        e["reserved_bytes"].as_u64().unwrap(),
    )
}

/// Nemotron-H's Mamba2 `generate` through the torch fallback, measured on the H200 in the second
/// run (2026-11-28, `gpu/measure3.py` case `nemotronh-L8-infer-b4-p4080-torch`,
/// `gpu/results3/2026-11-28/results3.jsonl`; no `mamba_ssm`/`causal_conv1d` there): the
/// catalog's Nemotron-H-56B cut to 8 layers as `measure3.py`'s `config()` cuts it
/// (`configs/nemotron-h-56b-L8.json`), bf16, batch 4, prompt 4080, 16 new tokens, after its
/// 32-token warm-up. The case ran beside gpt-oss-20b's leftover weights
/// (`gpu/results3/README.md`); its own figures are the measured peaks less that leftover as its
/// snapshot lists it (41,832,578,048 B allocated: the bf16 parameters and buffers; 41,997,565,952 B
/// reserved: the 116 segments alive before recording, less the 32 MiB workspace segment, as
/// `gpu/results3/own_figures.py` takes them out). vram's figures are pinned; a move needs a
/// measured reason.
#[test]
fn nemotron_h_mamba2_generate_on_the_h200() {
    const MEASURED_ALLOCATED: f64 = (88_540_508_160u64 - 41_832_578_048) as f64;
    const MEASURED_RESERVED: f64 = (101_806_243_840u64 - 41_997_565_952) as f64;
    let (a, r) = estimate_bytes(
        "configs/nemotron-h-56b-L8.json",
        &[
            "--inference",
            "--precision",
            "bf16",
            "--batch",
            "4",
            "--prompt",
            "4080",
            "--new-tokens",
            "16",
            "--kv-dtype",
            "bf16",
            "--attention",
            "sdpa",
            "--warmup-prompt",
            "32",
        ],
    );
    eprintln!(
        "nemotron-h L8 generate b4 x 4080: allocated {:+.2} %, reserved {:+.2} %",
        (a as f64 / MEASURED_ALLOCATED - 1.0) * 100.0,
        (r as f64 / MEASURED_RESERVED - 1.0) * 100.0
    );
    assert_eq!(
        (a, r),
        (46_705_403_904, 60_091_793_408),
        "pinned figures moved"
    );
}

/// QLoRA after `prepare_model_for_kbit_training` (TRL 1.16 SFTTrainer, Llama-3.2-1B, nf4 double
/// quant, r=16 all-linear, mb4 × 2048), measured on the H200 in the second run (2026-11-28,
/// `qlora-llama32-1b-mb4-s2048-prepare`), beside gpt-oss-20b's leftover. The leftover's cached
/// bytes shrank `from_pretrained`'s `caching_allocator_warmup` block (746,586,112 B in the
/// snapshot where a clean start makes 1,012,011,008), so the own figures are the clean start: the
/// snapshot's trace from that block on, the block at its clean size, replayed through
/// `vram replay --policy pytorch` (4,695,422,464 B allocated, 5,167,382,528 B reserved), plus the
/// two cuBLAS workspaces (forward and backward threads, 32 MiB each) the leftover held. (Without
/// prepare the same replay gives the 2026-11-27 measurement to the byte, pinned above.)
#[test]
fn qlora_with_prepare_kbit_on_the_h200() {
    const WS: u64 = 2 * 33_554_432;
    const MEASURED_ALLOCATED: f64 = (4_695_422_464u64 + WS) as f64;
    const MEASURED_RESERVED: f64 = (5_167_382_528u64 + WS) as f64;
    let (a, r) = estimate_bytes(
        "configs/llama-3.2-1b.json",
        &[
            "--finetune",
            "qlora",
            "--lora-rank",
            "16",
            "--lora-targets",
            "all-linear",
            "--micro-batch",
            "4",
            "--seq",
            "2048",
            "--weights",
            "nf4",
            "--double-quant",
            "--prepare-kbit",
        ],
    );
    eprintln!(
        "qlora prepare mb4 x 2048: allocated {:+.2} %, reserved {:+.2} %",
        (a as f64 / MEASURED_ALLOCATED - 1.0) * 100.0,
        (r as f64 / MEASURED_RESERVED - 1.0) * 100.0
    );
    assert_eq!(
        (a, r),
        (4_761_083_904, 5_416_943_616),
        "pinned figures moved"
    );
}

/// The warm-up `generate` `measure2.py` ran before a `generate` case's measured call, as
/// `--warmup-prompt`: its `infer_case` calls `generate` on the first `min(prompt, 32)` prompt
/// tokens (same batch and new tokens), then resets the peak statistics. (The decode-speed cases
/// warm up with `generate(4)` and `generate(1)` at the full prompt, other new tokens than the
/// measured `generate(64)`, which the option does not express: they stay first calls.)
fn warmup(case: &Value) -> Option<u64> {
    let s = &case["setup"];
    (s["kind"] == "infer").then(|| s["prompt"].as_u64().unwrap().min(32))
}

/// vram's figures for one measured case: with `measure2.py`'s warm-up call where it made one
/// (`warmup`), and then also the reserved peak of the graders' arguments alone (a first call).
fn vram_figures(case: &Value) -> Value {
    let mut f = vram_run(case, warmup(case));
    if warmup(case).is_some() {
        f["first_call_reserved_bytes"] = vram_run(case, None)["reserved_bytes"].clone();
    }
    f
}

/// vram's figures for one measured case's `vram_args` (the graders' arguments), after a
/// warm-up call on `warmup` prompt tokens where given.
fn vram_run(case: &Value, warmup: Option<u64>) -> Value {
    let id = case["id"].as_str().unwrap();
    let mut args: Vec<String> = vec!["estimate".into()];
    for a in case["vram_args"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        if a.ends_with(".json") {
            args.push(data().join(a).to_string_lossy().into_owned());
        } else {
            args.push(a.to_string());
        }
    }
    args.extend(["--gpu", "h200", "--json"].map(String::from));
    if let Some(w) = warmup {
        args.extend(["--warmup-prompt".to_string(), w.to_string()]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let serving = &e["serving"];
    json!({
        "peak_bytes": e["peak_bytes"],
        "reserved_bytes": e["reserved_bytes"],
        "prefill_s": serving.get("prefill_s").cloned().unwrap_or(Value::Null),
        "decode_token_s": serving.get("decode_token_s").cloned().unwrap_or(Value::Null),
    })
}

fn err(est: &Value, meas: &Value) -> Option<f64> {
    Some(est.as_f64()? / meas.as_f64()? - 1.0)
}

#[test]
fn h200_cases_are_pinned() {
    check_pinned("measured.json", "pinned.json", 14);
}

/// The second H200 run (2026-11-28, `gpu/measure3.py`; `tests/data/h200/measured3.json`, made
/// from `gpu/results3/2026-11-28/results3.jsonl` by `gpu/results3/own_figures.py`, which takes
/// out the gpt-oss-20b weights an earlier case left on the device): the memory outliers of
/// issue 33 and the decode speed of Llama-3.1-8B, Qwen3-30B-A3B and gpt-oss-20b (eager).
#[test]
fn second_h200_run_cases_are_pinned() {
    check_pinned("measured3.json", "pinned3.json", 17);
}

/// vram's figures for every case of `measured` equal those pinned in `pinned`; each case's
/// error against the measurement is printed.
fn check_pinned(measured: &str, pinned: &str, n: usize) {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join(measured)).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), n, "every case of {measured} is checked");
    let mut now = serde_json::Map::new();
    eprintln!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "case (vram vs measured)", "alloc", "reserved", "prefill", "decode", "1st call"
    );
    for c in cases {
        let id = c["id"].as_str().unwrap().to_string();
        let f = vram_figures(c);
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:+.1}%", x * 100.0));
        eprintln!(
            "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
            id,
            pct(err(&f["peak_bytes"], &c["measured_max_allocated_bytes"])),
            pct(err(&f["reserved_bytes"], &c["measured_max_reserved_bytes"])),
            pct(err(&f["prefill_s"], &c["prefill_s"])),
            pct(c["decode_ms_per_token"]
                .as_f64()
                .and_then(|m| Some(f["decode_token_s"].as_f64()? * 1e3 / m - 1.0))),
            pct(err(
                &f["first_call_reserved_bytes"],
                &c["measured_max_reserved_bytes"]
            )),
        );
        now.insert(id, f);
    }
    let now = Value::Object(now);
    let pin_path = data().join(pinned);
    if std::env::var("VRAM_PIN").as_deref() == Ok("overwrite") {
        std::fs::write(
            &pin_path,
            serde_json::to_string_pretty(&now).unwrap() + "\n",
        )
        .unwrap();
        return;
    }
    let pinned: Value = serde_json::from_str(&std::fs::read_to_string(&pin_path).unwrap()).unwrap();
    let mut moved = Vec::new();
    for c in cases {
        let id = c["id"].as_str().unwrap();
        for key in [
            "peak_bytes",
            "reserved_bytes",
            "prefill_s",
            "decode_token_s",
            "first_call_reserved_bytes",
        ] {
            let (a, b) = (&now[id][key], &pinned[id][key]);
            let same = match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) => x == y || ((x - y) / y).abs() < 1e-9,
                _ => a == b,
            };
            if !same {
                moved.push(format!("{id} {key}: pinned {b}, now {a}"));
            }
        }
    }
    assert!(
        moved.is_empty(),
        "figures moved from the pin (name the measured reason and rewrite it with \
         VRAM_PIN=overwrite):\n{}",
        moved.join("\n")
    );
}
