//! Library-level errors: each names the problem (the CLI's table test covers exit codes).

use vram_model::setup::{Mode, Parallel, Setup, Train};
use vram_model::{catalog, estimate, hf, Error};

#[test]
fn errors_name_the_problem() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"model_type":"gemma","vocab_size":10,"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4}"#,
            "no `intermediate_size`",
        ),
        (
            r#"{"model_type":"t5","vocab_size":10,"d_model":64,"d_kv":16,"d_ff":128,"num_layers":2,"num_heads":4,"feed_forward_proj":"swish"}"#,
            "feed_forward_proj",
        ),
        (
            r#"{"model_type":"falcon","vocab_size":10,"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"new_decoder_architecture":true,"num_kv_heads":3}"#,
            "key/value heads",
        ),
        (r#"{"model_type":null}"#, "should be a string"),
        // Rows of the rotary table past u64 (the serving model multiplied them into bytes):
        // a fuzzed gpt-oss factor of 2^63 panicked `vram capacity`.
        (
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"max_position_embeddings":4096,"rope_scaling":{"rope_type":"yarn","factor":9223372036854775808,"original_max_position_embeddings":4096}}"#,
            "rope_scaling = 4096 positions x factor 9.223372036854776e18 is out of range: gives a rotary table of more than 4294967296 positions",
        ),
        (
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"max_position_embeddings":4096,"rope_scaling":{"rope_type":"linear","factor":1e300}}"#,
            "factor 1e300",
        ),
        (
            r#"{"model_type":"bert","vocab_size":10,"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"hidden_dropout_prob":"x"}"#,
            "hidden_dropout_prob",
        ),
    ];
    for (cfg, needle) in cases {
        let e = hf::parse_config(cfg, "x").unwrap_err();
        assert!(e.to_string().contains(needle), "{cfg}: {e}");
    }
}

#[test]
fn setup_errors() {
    let model = catalog::lookup("llama-2-70b").unwrap();
    let mut s = Setup {
        parallel: Parallel {
            tp: 16,
            ..Parallel::default()
        },
        ..Setup::default()
    };
    // 64 heads divide by 16, but 8 KV heads and 16 divide one another too: this one is fine.
    assert!(estimate(&model, &s).is_ok());
    s.parallel.tp = 3;
    assert!(matches!(
        estimate(&model, &s),
        Err(Error::NotDivisible { .. })
    ));
    let s = Setup {
        mode: Mode::Train(Train {
            seq: 0,
            ..Train::default()
        }),
        ..Setup::default()
    };
    assert!(matches!(
        estimate(&model, &s),
        Err(Error::OutOfRange { .. })
    ));
    // A huge but valid-looking request is refused rather than overflowing.
    let s = Setup {
        mode: Mode::Train(Train {
            seq: 1 << 24,
            micro_batch: 1 << 24,
            ..Train::default()
        }),
        ..Setup::default()
    };
    assert!(estimate(&model, &s).is_err());
}

/// The current families: a missing or contradictory per-layer key is named in one line.
#[test]
fn current_family_errors_name_the_key() {
    let base = r#""vocab_size":100,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128"#;
    let cases: &[(String, &str)] = &[
        (
            format!(r#"{{"model_type":"deepseek_v3",{base},"q_lora_rank":16,"qk_nope_head_dim":8,"qk_rope_head_dim":8,"v_head_dim":8,"n_routed_experts":4,"moe_intermediate_size":32}}"#),
            "`kv_lora_rank`",
        ),
        (
            format!(r#"{{"model_type":"gpt_oss",{base},"num_local_experts":4,"layer_types":["sliding_attention"]}}"#),
            "must list num_hidden_layers = 2",
        ),
        (
            format!(r#"{{"model_type":"qwen3_5",{base},"layer_types":["linear_attention","full_attention"]}}"#),
            "`linear_num_key_heads`",
        ),
        (
            format!(r#"{{"model_type":"gemma3_text",{base},"layer_types":["sliding_attention","lightning"]}}"#),
            "lightning",
        ),
        (
            r#"{"model_type":"nemotron_h","vocab_size":100,"hidden_size":64,"num_attention_heads":4,"hybrid_override_pattern":"M?"}"#.into(),
            "hybrid_override_pattern",
        ),
        (
            format!(r#"{{"model_type":"qwen3",{base},"quantization_config":{{"quant_method":"fp8","weight_block_size":[0,128]}}}}"#),
            "weight_block_size",
        ),
    ];
    for (cfg, needle) in cases {
        let e = hf::parse_config(cfg, "x").unwrap_err().to_string();
        assert!(e.contains(needle), "{cfg}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// A routed top-k above the expert count is refused for every family, where only Mixtral's
/// reader checked it: Hunyuan-A13B with `moe_topk` 2^53 (found by mutating the zoo's configs)
/// overflowed the serving model's dispatch buffers.
#[test]
fn a_top_k_above_the_experts_is_refused() {
    let mut v: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../tests/zoo/configs/hunyuan-a13b.json"
    ))
    .unwrap();
    v["moe_topk"][0] = serde_json::json!(9007199254740992u64);
    let e = hf::parse_config(&v.to_string(), "hunyuan").unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("top-k) = 9007199254740992 is out of range: cannot exceed the 64 experts"),
        "{e}"
    );
}

/// A Qwen3.5 vision tower whose `spatial_merge_size` makes the patch merger's weights pass 2^60
/// is refused in one line, where 4096 overflowed the parameter count (a panic in `vram plan`
/// and `vram trace`, found by mutating the zoo's configs).
#[test]
fn a_merge_that_overflows_the_merger_is_refused() {
    let mut v: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../tests/zoo/configs/qwen3.5-27b.json"
    ))
    .unwrap();
    v["vision_config"]["spatial_merge_size"] = serde_json::json!(4096);
    let e = hf::parse_config(&v.to_string(), "qwen3.5").unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("vision_config.spatial_merge_size = 4096 is out of range"),
        "{e}"
    );
    v["vision_config"]["spatial_merge_size"] = serde_json::json!(2);
    assert!(hf::parse_config(&v.to_string(), "qwen3.5").is_ok());
}

/// The patch merger's widest linear grows with the merge's fourth power: at
/// `spatial_merge_size` 100 Qwen3.5's `linear_fc1` is 11,520,000 x 11,520,000, 483 TiB in fp32,
/// past the 256 TiB one tensor can be placed in (`vram trace` replayed it and failed as out of
/// memory on a 552 TiB simulated device). Refused in one line naming the field and the tensor,
/// for every tower with a merge (Qwen2-VL's and Qwen2.5-VL's merger overflowed 64 bits at
/// 5000, a panic); a merge of 10 is still a model.
#[test]
fn a_merger_no_device_holds_is_refused_naming_the_merge() {
    let qwen35 = include_str!("../../../../tests/zoo/configs/qwen3.5-27b.json");
    let qwen25 = include_str!("../../data/catalog/qwen2.5-vl-7b.json");
    for (text, name, merge, shape) in [
        (
            qwen35,
            "qwen3.5",
            100,
            Some("(11,520,000 x 11,520,000, 483 TiB)"),
        ),
        (
            qwen25,
            "qwen2.5-vl",
            100,
            Some("(12,800,000 x 12,800,000, 596 TiB)"),
        ),
        (qwen25, "qwen2.5-vl", 5000, None),
        (qwen25, "qwen2.5-vl", 1 << 24, None),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["vision_config"]["spatial_merge_size"] = serde_json::json!(merge);
        let e = hf::parse_config(&v.to_string(), name).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::OutOfRange { .. }), "{msg}");
        assert!(
            msg.contains(&format!(
                "vision_config.spatial_merge_size = {merge} is out of range"
            )) && msg.contains("passes the 256 TiB one tensor can be placed in")
                && shape.is_none_or(|s| msg.contains(s)),
            "{msg}"
        );
        v["vision_config"]["spatial_merge_size"] = serde_json::json!(10);
        assert!(
            hf::parse_config(&v.to_string(), name).is_ok(),
            "{name} at 10"
        );
    }
}

/// More layers than any model has (`read::MAX_LAYERS`, 1,024: DeepNet's 1,000 is the deepest
/// Transformer trained) are refused before anything is read, in one line naming the key the
/// count came from: 2^20 layers made `vram plan` and `vram trace` run for minutes, and reading
/// 2^24 took 32 s and 6 GiB. A pattern's length counts as its layers; 1,024 layers still read.
#[test]
fn a_layer_count_past_any_model_is_refused_naming_its_key() {
    let qwen3: serde_json::Value =
        serde_json::from_str(include_str!("../../data/catalog/qwen3-0.6b.json")).unwrap();
    for (key, n) in [
        ("num_hidden_layers", 1u64 << 20),
        ("num_hidden_layers", 1 << 24),
    ] {
        let mut v = qwen3.clone();
        v[key] = serde_json::json!(n);
        let e = hf::parse_config(&v.to_string(), "deep").unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
        assert!(
            e.to_string().starts_with(&format!(
                "{key} = {n} is out of range: more than 1024 layers"
            )),
            "{e}"
        );
    }
    let mut v = qwen3.clone();
    v["num_hidden_layers"] = serde_json::json!(1024);
    v["layer_types"] = serde_json::json!(vec!["full_attention"; 1024]);
    let vram_model::arch::Model::Transformer(t) = hf::parse_config(&v.to_string(), "deep").unwrap()
    else {
        panic!("a decoder")
    };
    assert_eq!(t.layers(), 1024);
    v["num_hidden_layers"] = serde_json::json!(1025);
    v["layer_types"] = serde_json::json!(vec!["full_attention"; 1025]);
    let e = hf::parse_config(&v.to_string(), "deep").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("num_hidden_layers = 1025 is out of range"),
        "{e}"
    );
    // GPT-2 names its count n_layer.
    let gpt2 = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
        "n_layer": 5000, "n_head": 12}"#;
    let e = hf::parse_config(gpt2, "gpt2").unwrap_err();
    assert!(
        e.to_string().starts_with("n_layer = 5000 is out of range"),
        "{e}"
    );
}

/// A safetensors file of `(name, dtype, shape, data bytes)` tensors laid end to end.
fn safetensors_file(tensors: &[(&str, &str, &[u64], u64)]) -> (Vec<u8>, u64) {
    let mut header = serde_json::Map::new();
    let mut off = 0;
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + bytes]}),
        );
        off += bytes;
    }
    let json = serde_json::Value::Object(header).to_string();
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    let len = file.len() as u64 + off;
    (file, len)
}

/// The dtypes safetensors added after 0.4 (F4, F6_E2M3, F6_E3M2, F8_E8M0, C64) are read with
/// their sizes as the format defines them (huggingface/safetensors 0.8.0 `Dtype::bitsize`):
/// F4 two values a byte, F6 four values in three bytes, F8_E8M0 one, C64 eight.
#[test]
fn newer_safetensors_dtypes_count_exact_bytes() {
    use vram_model::safetensors_header::Tally;
    let (file, len) = safetensors_file(&[
        ("w4", "F4", &[4, 32], 64),
        ("w4.scale", "F8_E8M0", &[4, 1], 4),
        ("w6a", "F6_E2M3", &[4, 8], 24),
        ("w6b", "F6_E3M2", &[2, 2], 3),
        ("norm", "BF16", &[8], 16),
        ("c", "C64", &[1], 8),
    ]);
    let mut t = Tally::default();
    t.add_header(&file, len).unwrap();
    let w = t.weights("mixed");
    assert_eq!(
        (w.params, w.bytes),
        (128 + 4 + 32 + 4 + 8 + 1, 64 + 4 + 24 + 3 + 16 + 8)
    );
    assert_eq!(t.bytes["F6_E3M2"], 3);
    assert_eq!(t.elements["F4"], 128);

    // A size the format's packing does not give is refused, naming the tensor.
    let (file, len) = safetensors_file(&[("w6", "F6_E2M3", &[4], 4)]);
    let err = Tally::default()
        .add_header(&file, len)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `w6`: data offsets 0..4 do not match"),
        "{err}"
    );
    // A sub-byte tensor that ends mid-byte is refused as such, not as bad JSON.
    for (dtype, n, bits) in [("F4", 3u64, 4), ("F6_E3M2", 2, 6)] {
        let (file, len) = safetensors_file(&[("odd", dtype, &[n], (n * bits).div_ceil(8))]);
        let err = Tally::default()
            .add_header(&file, len)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "tensor `odd`: {n} elements of {dtype} ({bits} bits each) do not fill whole bytes"
            )),
            "{err}"
        );
        assert!(!err.contains("JSON"), "{err}");
    }
}
