//! Issue 21 item 4: `--images` on vision-language models. Each image's positions lengthen the
//! sequence (so the KV cache, the text activations and the logits grow as for text of that
//! length), the vision tower's tensors are added, the JSON carries `image_tokens`, and a
//! vision-language config whose tower vram does not describe says that images are not counted.
//! The per-image counts themselves are checked against transformers' processors in
//! `crates/vram-model/tests/it/vision.rs`; here the figures the CLI prints are read from the
//! same reference file.

use std::path::PathBuf;

use serde_json::Value;

mod common;

use common::vram;

fn json(args: &[&str]) -> Value {
    let mut a = vec!["estimate"];
    a.extend_from_slice(args);
    a.push("--json");
    let (code, out, err) = vram(&a);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).expect("one JSON object")
}

fn zoo(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/zoo")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn reference(model: &str, size: &str) -> Value {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(zoo("vision_expected.json")).unwrap())
            .unwrap();
    doc["models"][model]["images"][size].clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn the_prompt_and_the_cache_grow_by_the_image_positions() {
    for (model, size) in [
        ("qwen3-vl-8b-instruct", "1024x768"),
        ("gemma-3-4b-it", "640x480"),
        ("llama-4-scout-17b-16e-instruct", "1920x1080"),
        ("gemma-4-26b-a4b", "1280x720"),
    ] {
        let cfg = zoo(&format!("configs/{model}.json"));
        let want = reference(model, size);
        let with = json(&[
            &cfg,
            "--inference",
            "--prompt",
            "100",
            "--images",
            "2",
            "--image-size",
            size,
        ]);
        let it = &with["image_tokens"];
        assert_eq!(u(&it["per_image"]), u(&want["tokens"]), "{model}");
        assert_eq!(
            u(&it["sequence_per_image"]),
            u(&want["sequence"]),
            "{model}"
        );
        assert_eq!(u(&it["patches_per_image"]), u(&want["patches"]), "{model}");
        assert_eq!(
            u(&it["sequence_total"]),
            2 * u(&want["sequence"]),
            "{model}"
        );
        let positions = 2 * u(&want["sequence"]);
        let context = &with["setup"]["mode"]["infer"]["context"];
        assert_eq!(u(context), 100 + 16 + positions, "{model}");
        // The same length of text alone: the same cache, and less memory at the peak (the
        // tower's forward and the image features come on top).
        let prompt = (100 + positions).to_string();
        let text = json(&[&cfg, "--inference", "--prompt", &prompt]);
        for key in ["cache_after_prefill_bytes", "cache_bytes_per_token"] {
            assert_eq!(with[key], text[key], "{model}: {key}");
        }
        assert!(
            u(&with["peak_bytes"]) > u(&text["peak_bytes"]),
            "{model}: the vision tower's tensors are counted"
        );
        let notes = with["notes"].to_string();
        assert!(notes.contains("not validated on a GPU"), "{model}: {notes}");
    }
}

#[test]
fn training_saves_the_towers_tensors_until_its_backward() {
    let cfg = zoo("configs/qwen3-vl-8b-instruct.json");
    let want = reference("qwen3-vl-8b-instruct", "1024x768");
    let seq = 256 + u(&want["sequence"]);
    // Live bytes when the loss is computed: every saved tensor of the forward is alive. A
    // text-only step gives the tower no gradient and AdamW no state for it (torch makes none for
    // a parameter whose grad is None): those states are taken out, so the difference is the
    // tower's saved tensors.
    let at_loss = |v: &Value| -> u64 {
        v["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"]["phase"] == "loss")
            .map(|p| u(&p["live_bytes"]))
            .expect("a loss point")
            - u(&v["breakdown"]["optimizer_states"])
    };
    let with = json(&[
        &cfg,
        "--seq",
        "256",
        "--images",
        "1",
        "--image-size",
        "1024x768",
        "--timeline",
    ]);
    let seq_s = seq.to_string();
    let text = json(&[&cfg, "--seq", &seq_s, "--timeline"]);
    assert_eq!(u(&with["setup"]["mode"]["train"]["seq"]), seq);
    let tower = at_loss(&with) - at_loss(&text);
    // 27 layers over 3072 patches keep far more than a megabyte each.
    assert!(tower > 27 * 3072 * 1152 * 2, "{tower}");
    // Under full recomputation the tower's blocks keep their inputs only.
    let rc = |extra: &[&str]| {
        let mut a = vec![cfg.as_str(), "--recompute", "full", "--timeline"];
        a.extend_from_slice(extra);
        at_loss(&json(&a))
    };
    let tower_rc =
        rc(&["--seq", "256", "--images", "1", "--image-size", "1024x768"]) - rc(&["--seq", &seq_s]);
    assert!(tower_rc < tower / 3, "{tower_rc} vs {tower}");
}

#[test]
fn text_output_names_the_images() {
    let cfg = zoo("configs/gemma-3-4b-it.json");
    let (code, out, err) = vram(&["estimate", &cfg, "--images", "3", "--inference"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("images: 3 per sequence at 896x896 (resized to 896x896): 4096 patches each through the vision tower, 256 image tokens each (260 positions with their markers), 780 positions per sequence"),
        "{out}"
    );
    assert!(out.contains("not validated on a GPU"), "{out}");
}

#[test]
fn a_tower_vram_does_not_describe_is_said_not_counted() {
    let dir = std::env::temp_dir().join(format!("vram-vision-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text: Value =
        serde_json::from_str(&std::fs::read_to_string(zoo("configs/qwen3-0.6b.json")).unwrap())
            .unwrap();
    let wrapper = serde_json::json!({
        "model_type": "some_new_vl",
        "text_config": text,
        "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, wrapper.to_string()).unwrap();
    let p = path.to_string_lossy().into_owned();
    let v = json(&[&p, "--images", "2"]);
    assert!(v.get("image_tokens").is_none());
    let notes = v["notes"].to_string();
    assert!(notes.contains("image tokens are not counted"), "{notes}");
    let (code, out, _) = vram(&["estimate", &p, "--images", "2"]);
    assert_eq!(code, 0);
    assert!(out.contains("note: image tokens are not counted"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_image_flags_are_one_line_and_exit_2() {
    let qwen = zoo("configs/qwen3-vl-8b-instruct.json");
    let gemma = zoo("configs/gemma-3-4b-it.json");
    for args in [
        &["estimate", "llama-3-8b", "--images", "1"][..],
        &["estimate", "llama-3-8b", "--image-size", "640x480"],
        &["estimate", &qwen, "--images", "1"], // dynamic resolution: needs a size
        &[
            "estimate",
            &qwen,
            "--images",
            "1",
            "--image-size",
            "20000x64",
        ], // aspect > 200
        &["estimate", &qwen, "--images", "1", "--image-size", "0x64"],
        &["estimate", &qwen, "--images", "1", "--image-size", "wide"],
        &["estimate", &gemma, "--images", "0"],
        &["estimate", &gemma, "--image-size", "896x896"], // without --images
        &["estimate", "resnet-50", "--image-size", "320x240"],
        &["estimate", "resnet-50", "--images", "2"],
        &[
            "batch",
            &gemma,
            "--gpu",
            "h100-80g",
            "--lengths",
            "/dev/null",
            "--images",
            "1",
        ],
    ] {
        let (code, out, err) = vram(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}
