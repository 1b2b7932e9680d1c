//! The weights as stored, end to end (issue 31 item 2): `vram estimate --inference` holds a
//! packed checkpoint as transformers 5.24 loads it, in the walk and the allocator replay, and
//! says which layout it assumed; `vram capacity` reads the same storage for a catalog id and
//! its config file.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

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
        assert_eq!(u(&v["breakdown"], "parameters"), u(load, "stored_bytes"));
        assert_eq!(u(load, "stored_bytes"), u(&v, "weights_bytes"));
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
    assert_eq!(u(&v["breakdown"], "parameters"), u(load, "stored_bytes"));
    // About one byte per parameter (with fp32 scales and the bf16 embedding/head).
    let params = u(&v, "params");
    assert!(u(load, "stored_bytes") < params * 21 / 20, "{}", load);
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
