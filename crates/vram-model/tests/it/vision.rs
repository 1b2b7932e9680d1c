//! Issue 21 item 4: image tokens. `tests/zoo/vision_expected.json` holds what transformers
//! 5.24's image processors and processors make of images of several sizes for each
//! vision-language config of `tests/zoo/configs` (`tests/zoo/vision_reference.py`, rerun by
//! `.ci/zoo-tests`); `vram_model::estimate::image_tokens` must give the same numbers for every
//! one, and refuse what the processor refuses.

use std::path::PathBuf;

use serde_json::Value;
use vram_model::arch::Model;
use vram_model::estimate::image_tokens;

fn zoo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo")
}

fn u(v: &Value) -> u64 {
    v.as_u64().expect("an integer")
}

/// A text-only training step of `model` (AdamW, sequence 16) in fp32 and in bf16 autocast: it
/// peaks in `AdamW.step()` with fp32 gradients of the `grads` parameters the forward used and
/// `states` fp32 optimizer-state elements, every one of its `params` weights held in fp32.
fn check_text_only_step(model: &Model, params: u64, grads: u64, states: u64) {
    use vram_model::estimate::{estimate, Category};
    use vram_model::setup::{Mode, Precision, Setup, Train};
    for precision in [Precision::Fp32, Precision::Bf16Amp] {
        let setup = Setup {
            precision,
            mode: Mode::Train(Train {
                seq: 16,
                ..Train::default()
            }),
            ..Setup::default()
        };
        let e = estimate(model, &setup).expect("estimates");
        assert_eq!(
            e.breakdown.get(Category::OptimizerStates),
            states * 4,
            "{precision:?}"
        );
        assert_eq!(e.peak_phase, vram_model::Phase::Optimizer, "{precision:?}");
        assert_eq!(
            e.breakdown.get(Category::Gradients),
            grads * 4,
            "{precision:?}"
        );
        assert_eq!(
            e.breakdown.get(Category::Parameters),
            params * 4,
            "{precision:?}"
        );
    }
}

#[test]
fn image_tokens_equal_the_processors() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(zoo().join("vision_expected.json")).expect("vision_expected.json"),
    )
    .expect("parses");
    let models = doc["models"].as_object().expect("models");
    assert!(
        models.len() >= 7,
        "every vision-language family is in the reference"
    );
    let mut checked = 0;
    for (name, entry) in models {
        let text = std::fs::read_to_string(zoo().join("configs").join(format!("{name}.json")))
            .expect("config");
        let Model::Transformer(t) = vram_model::hf::parse_config(&text, name).expect("reads")
        else {
            panic!("{name}: not a transformer")
        };
        let v = t
            .blocks
            .vision
            .unwrap_or_else(|| panic!("{name}: no vision tower"));
        for (size, want) in entry["images"].as_object().expect("images") {
            let (w, h) = size.split_once('x').expect("WxH");
            let (w, h): (u64, u64) = (w.parse().unwrap(), h.parse().unwrap());
            let got = image_tokens(&v, w, h);
            if want.get("refused").is_some() {
                assert!(
                    got.is_err(),
                    "{name} {size}: the processor refuses it, vram gave {got:?}"
                );
                checked += 1;
                continue;
            }
            let got = got.unwrap_or_else(|e| panic!("{name} {size}: {e}"));
            let r = &want["resized"];
            assert_eq!(
                (got.resized.0, got.resized.1),
                (u(&r[0]), u(&r[1])),
                "{name} {size}: resized"
            );
            assert_eq!(got.tiles, u(&want["tiles"]), "{name} {size}: tiles");
            assert_eq!(got.patches, u(&want["patches"]), "{name} {size}: patches");
            assert_eq!(got.tokens, u(&want["tokens"]), "{name} {size}: tokens");
            assert_eq!(
                got.sequence,
                u(&want["sequence"]),
                "{name} {size}: sequence"
            );
            checked += 1;
        }
        // The real tower's outputs (Qwen3-VL, Qwen3.5): its features are one row per image
        // token, of the text model's width, and one more tensor per deepstack merger.
        if let Some(tower) = entry.get("tower") {
            let size = entry["tower_at"].as_str().unwrap();
            let (w, h) = size.split_once('x').unwrap();
            let got = image_tokens(&v, w.parse().unwrap(), h.parse().unwrap()).unwrap();
            assert_eq!(got.patches, u(&tower["patches_in"]), "{name}: tower input");
            assert_eq!(got.tokens, u(&tower["features"][0]), "{name}: feature rows");
            assert_eq!(v.out, u(&tower["features"][1]), "{name}: feature width");
            assert_eq!(
                v.deepstack,
                u(&tower["deepstack_mergers"]),
                "{name}: deepstack"
            );
            for d in tower["deepstack_features"].as_array().unwrap() {
                assert_eq!(
                    (got.tokens, v.out),
                    (u(&d[0]), u(&d[1])),
                    "{name}: deepstack"
                );
            }
        }
    }
    assert!(checked >= 70, "{checked} sizes checked");
}

/// Llama 3.2 Vision (`mllama`): the vision tower and projector as transformers 5.24's
/// `MllamaForConditionalGeneration` counts them (895,028,755 of 10,670,220,835 parameters for
/// the 11B config: `MllamaConfig`'s defaults with the checkpoint's image size and rope scaling;
/// the text model's cross-attention layers with their q/k norms and gates, and `vocab_size + 8`
/// embedding rows, as transformers 5.24 builds them on the meta device).
#[test]
fn mllama_vision_tower_counts_as_transformers_does() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-cli/tests/data/serving/configs/llama-3.2-11b-vision.json");
    let text = std::fs::read_to_string(path).expect("config");
    let Model::Transformer(t) = vram_model::hf::parse_config(&text, "mllama").expect("reads")
    else {
        panic!("not a transformer")
    };
    let v = t.blocks.vision.as_ref().expect("a vision tower");
    assert_eq!(v.params, 895_028_755);
    assert_eq!(t.param_count(), 10_670_220_835);
}

/// Mistral-3 (`Mistral3ForConditionalGeneration`): the Pixtral tower and projector as
/// transformers 5.24 builds them on the meta device from `Mistral3Config`'s defaults, given as
/// the bare `model_type` (the wrapper's text and vision defaults) and as the default written out
/// (`AutoConfig.for_model("mistral3").to_json_string(use_diff=False)`): 23,340,272,640
/// parameters, 403,305,472 in `vision_tower` and 35,652,608 in `multi_modal_projector`. The
/// real configs (Mistral-Small-3.1-24B, Ministral-3-3B) are in the zoo. `--images` is refused
/// for it in one line.
#[test]
fn mistral3_pixtral_tower_counts_as_transformers_does() {
    let bare = r#"{"model_type": "mistral3"}"#;
    let written = r#"{"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
        "multimodal_projector_bias": false, "spatial_merge_size": 2, "tie_word_embeddings": true,
        "vision_feature_layer": -1,
        "text_config": {"model_type": "mistral", "head_dim": 128, "hidden_size": 5120,
          "intermediate_size": 32768, "max_position_embeddings": 131072, "num_attention_heads": 32,
          "num_hidden_layers": 40, "num_key_value_heads": 8, "sliding_window": null,
          "vocab_size": 131072},
        "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "image_size": 1540,
          "intermediate_size": 4096, "num_attention_heads": 16, "num_channels": 3,
          "num_hidden_layers": 24, "patch_size": 14}}"#;
    for text in [bare, written] {
        let Model::Transformer(t) = vram_model::hf::parse_config(text, "mistral3").expect("reads")
        else {
            panic!("not a transformer")
        };
        let v = t.blocks.vision.as_ref().expect("a vision tower");
        assert_eq!(v.params, 403_305_472 + 35_652_608);
        assert_eq!(t.param_count(), 23_340_272_640);
        // transformers ties by the wrapper (the count above has one table); the text config
        // alone, which vLLM builds, does not.
        assert!(t.blocks.head.tied);
        assert!(!t.blocks.head.vllm_tied());
        let err = image_tokens(v, 1024, 1024).expect_err("Pixtral's images are refused");
        assert!(err.to_string().contains("--images"), "{err}");
    }
}

/// Llama 3.2 Vision's text model trained on text alone: `MllamaTextModel.forward` passes over
/// its cross-attention layers when there are no image features (`continue` in transformers
/// 5.24's modeling_mllama.py), so their parameters get no gradient and torch's AdamW
/// (`_init_group` skips a parameter whose `grad` is None) makes no state for them. One
/// forward, backward and `AdamW.step()` of this tiny `MllamaForCausalLM` on the CPU
/// (`tests/engines/mllama_text_grads.py`, transformers 5.24.0, torch 2.15): 181,380
/// parameters, 107,328 with a gradient, 214,656 state elements (`exp_avg`, `exp_avg_sq`);
/// the two cross-attention layers hold the other 74,052.
#[test]
fn mllama_text_only_training_skips_the_cross_attention_layers_gradients() {
    let config = r#"{"model_type": "mllama", "text_config": {"model_type": "mllama_text_model",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "cross_attention_layers": [1, 3],
        "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "pad_token_id": 0}}"#;
    let model = vram_model::hf::parse_config(config, "tiny-mllama").expect("reads");
    assert_eq!(model.param_count(), 181_380);
    // Every layer's weights stay; gradients, and AdamW's two moments, only for the 107,328
    // parameters the forward used.
    check_text_only_step(&model, 181_380, 107_328, 214_656);
}

/// A text-only training step of a vision-language model whose tower is built
/// (`*ForConditionalGeneration`): the forward calls the tower only for pixel values, so its and
/// the projector's parameters get no gradient and torch's AdamW no state; LoRA adapters on the
/// tower's linears (`all-linear` takes them) get neither. One forward, backward and
/// `AdamW.step()` of this tiny `Qwen3VLForConditionalGeneration` on the CPU
/// (`tests/engines/vlm_text_grads.py`, transformers 5.24.0, PEFT 0.21.2, torch 2.15):
/// 177,440 parameters, 70,560 in the tower, 106,880 with a gradient and 213,760 state elements;
/// LoRA r=4 `all-linear`: 14,848 adapter parameters, 6,656 on the tower, 8,192 with a gradient
/// and 16,384 state elements.
#[test]
fn a_text_only_step_gives_the_vision_tower_no_gradients() {
    use vram_model::estimate::Category;
    use vram_model::finetune::step::{estimate as lora_step, FinetuneSpec, Method};
    use vram_model::finetune::{LoraSpec, Targets, WeightFormat};
    use vram_model::setup::{Mode, Setup, Train};
    let config = r#"{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "tie_word_embeddings": false,
        "text_config": {"model_type": "qwen3_vl_text", "vocab_size": 256, "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
          "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
            "mrope_section": [2, 3, 3], "mrope_interleaved": true},
          "tie_word_embeddings": false},
        "vision_config": {"model_type": "qwen3_vl", "depth": 2, "hidden_size": 32,
          "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64, "patch_size": 4,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 16,
          "deepstack_visual_indexes": [0]}}"#;
    let model = vram_model::hf::parse_config(config, "tiny-qwen3-vl").expect("reads");
    assert_eq!(model.param_count(), 177_440);
    let Model::Transformer(t) = &model else {
        panic!("not a transformer")
    };
    assert_eq!(t.blocks.vision.as_ref().expect("a tower").params, 70_560);
    check_text_only_step(&model, 177_440, 106_880, 213_760);
    let spec = FinetuneSpec {
        method: Method::Lora,
        weights: WeightFormat::Bf16,
        double_quant: false,
        lora: LoraSpec {
            rank: 4,
            alpha: 8,
            dropout: 0.0,
            targets: Targets::AllLinear,
        },
        skip_modules: Vec::new(),
        prepare_kbit: false,
        load_fp32: false,
        gradient_checkpointing: true,
    };
    let setup = Setup {
        mode: Mode::Train(Train {
            seq: 16,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let l = lora_step(&model, &setup, &spec).expect("estimates");
    assert_eq!(l.trainable_params, 14_848);
    // fp32 adapters: AdamW's two fp32 moments for the 8,192 that get a gradient.
    assert_eq!(l.breakdown.get(Category::OptimizerStates), 16_384 * 4);
    // Every adapter is held, the tower's too, on top of the bf16 base.
    assert_eq!(
        l.breakdown.get(Category::Parameters),
        l.weights.total + 14_848 * 4
    );
}

/// Qwen2-VL and Qwen2.5-VL (`qwen2_vl`, `qwen2_5_vl`): a Qwen2 decoder with M-RoPE and Qwen's
/// dynamic-resolution ViT (Qwen2-VL: LayerNorm blocks with a 4× fc1/fc2 MLP; Qwen2.5-VL:
/// RMSNorm blocks with a SwiGLU MLP and window attention). `sum(p.numel())` of transformers
/// 5.24.0's `architectures[0]` class built from each config on the meta device, and of its
/// `model.visual` parameters (data/vision/README.md names the configs' sources).
#[test]
fn qwen2_vl_and_qwen2_5_vl_match_transformers_5_24() {
    for (name, text, total, tower) in [
        (
            "qwen2-vl-2b-instruct",
            include_str!("../data/vision/qwen2-vl-2b-instruct.json"),
            2_208_985_600,
            665_271_296,
        ),
        (
            "qwen2.5-vl-7b-instruct",
            include_str!("../data/vision/qwen2.5-vl-7b-instruct.json"),
            8_292_166_656,
            676_550_144,
        ),
    ] {
        let model = vram_model::hf::parse_config(text, name).expect("reads");
        assert_eq!(model.param_count(), total, "{name}");
        let Model::Transformer(t) = &model else {
            panic!("{name} is not a transformer")
        };
        let v = t.blocks.vision.as_ref().expect("a tower");
        assert_eq!(v.params, tower, "{name}");
        assert_eq!(v.depth, 32, "{name}");
        assert_eq!(v.hidden, 1280, "{name}");
        // Qwen2.5-VL's tower MLP is gated (gate/up/down), Qwen2-VL's is fc1/fc2 at 4×.
        let (gated, intermediate) = if name.starts_with("qwen2.5") {
            (true, 3420)
        } else {
            (false, 5120)
        };
        assert_eq!((v.gated, v.intermediate), (gated, intermediate), "{name}");
    }
}

/// Kimi-K2.5's MoonViT tower and projector (`tests/zoo/kimi_k25_expected.json`, transformers
/// 5.24's `Kimi_K25VisionModel` and `Kimi_K25MultimodalProjection` built from the checkpoint's
/// config on the meta device by `tests/zoo/kimi_k25_reference.py`): the same parameters, the
/// sizes the library's config took and its image processor's merge and patch limits; images
/// are refused in one line (the tower's activations are not modelled).
#[test]
fn kimi_k25_tower_equals_the_library() {
    use vram_model::blocks::VisionInput;
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(zoo().join("kimi_k25_expected.json")).expect("kimi_k25_expected"),
    )
    .expect("parses");
    let text = std::fs::read_to_string(zoo().join("nearmiss/kimi-k2.5.json")).expect("config");
    let Model::Transformer(t) = vram_model::hf::parse_config(&text, "kimi-k2.5").expect("reads")
    else {
        panic!("not a transformer")
    };
    assert!(!t.blocks.vision_unmodelled);
    let v = t.blocks.vision.as_ref().expect("a vision tower");
    assert_eq!(v.params, u(&doc["tower"]) + u(&doc["projector"]));
    assert_eq!(v.params, 416_866_032 + 54_277_888);
    let vc = &doc["vision_config"];
    assert_eq!(v.hidden, u(&vc["hidden_size"]));
    assert_eq!(v.intermediate, u(&vc["intermediate_size"]));
    assert_eq!(v.depth, u(&vc["num_hidden_layers"]));
    assert_eq!(v.heads, u(&vc["num_attention_heads"]));
    assert_eq!(v.patch, u(&vc["patch_size"]));
    assert_eq!(v.out, u(&doc["text_hidden_size"]));
    let ip = &doc["image_processor"];
    assert_eq!(
        v.input,
        VisionInput::Navit {
            merge: u(&ip["merge_size"]),
            max_patches: u(&ip["max_patches"]),
            max_side: u(&ip["size"]["max_height"]),
        }
    );
    assert_eq!(u(&vc["merge_kernel_size"][0]), u(&ip["merge_size"]));
    let err = image_tokens(v, 1024, 768).unwrap_err().to_string();
    assert!(err.contains("Kimi-K2.5") && !err.contains('\n'), "{err}");
    // The checkpoint's own key names (`vt_*`, which vLLM's and SGLang's config classes read)
    // move the count where they differ from the class defaults.
    let mut cfg: Value = serde_json::from_str(&text).unwrap();
    cfg["vision_config"]["vt_num_hidden_layers"] = 26.into();
    let Model::Transformer(t26) =
        vram_model::hf::parse_config(&cfg.to_string(), "kimi-26").expect("reads")
    else {
        panic!("not a transformer")
    };
    let per_layer = 2 * 2 * 1152 + 4 * (1152 * 1152 + 1152) + 2 * 1152 * 4304 + 4304 + 1152;
    assert_eq!(t26.blocks.vision.unwrap().params, v.params - per_layer);
    // A merge kernel that is not square is refused, not misread.
    cfg["vision_config"]["merge_kernel_size"] = serde_json::json!([2, 3]);
    let err = vram_model::hf::parse_config(&cfg.to_string(), "kimi-23")
        .unwrap_err()
        .to_string();
    assert!(err.contains("merge_kernel_size"), "{err}");
}
