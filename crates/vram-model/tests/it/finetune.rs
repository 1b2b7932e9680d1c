//! Fine-tuning figures against the real libraries (issue 22). The expected JSON is written by
//! `tests/engines/finetune_reference.py` with transformers 5.24.0, PEFT 0.21.2 and
//! bitsandbytes 0.50.2 on the CPU, and re-checked against them by `.ci/engine-tests`.

use serde_json::Value;
use vram_model::arch::{Model, Transformer};
use vram_model::finetune::{lora, weights_bytes, LoraSpec, SiteKind, Targets, WeightFormat};
use vram_model::hf;

/// The configs the fine-tuning code was developed on; the others are held back (current families
/// whose model types the config reader learns in issue 21: checked as soon as it reads them).
const DEVELOPED: [&str; 7] = [
    "llama-3.1-8b",
    "mixtral-8x7b",
    "phi-4",
    "tiny-llama-odd",
    "tiny-qwen2",
    "tiny-mixtral",
    "tiny-gpt2",
];

fn config(name: &str) -> Transformer {
    held_back(name).unwrap_or_else(|| panic!("{name}: the reader does not know its model type"))
}

/// The config as vram reads it, or `None` when its model type is not known to the reader yet.
fn held_back(name: &str) -> Option<Transformer> {
    let text = match name {
        "qwen3-0.6b" => include_str!("../data/finetune/configs/qwen3-0.6b.json"),
        "qwen3-30b-a3b" => include_str!("../data/finetune/configs/qwen3-30b-a3b.json"),
        "deepseek-v3" => include_str!("../data/finetune/configs/deepseek-v3.json"),
        "gpt-oss-20b" => include_str!("../data/finetune/configs/gpt-oss-20b.json"),
        "llama-3.1-8b" => include_str!("../data/finetune/configs/llama-3.1-8b.json"),
        "mixtral-8x7b" => include_str!("../data/finetune/configs/mixtral-8x7b.json"),
        "phi-4" => include_str!("../data/finetune/configs/phi-4.json"),
        "tiny-llama-odd" => include_str!("../data/finetune/configs/tiny-llama-odd.json"),
        "tiny-qwen2" => include_str!("../data/finetune/configs/tiny-qwen2.json"),
        "tiny-mixtral" => include_str!("../data/finetune/configs/tiny-mixtral.json"),
        "tiny-gpt2" => include_str!("../data/finetune/configs/tiny-gpt2.json"),
        "gemma-4-e2b-shape" => include_str!("../data/finetune/configs/gemma-4-e2b-shape.json"),
        "gemma-4-e4b-it" => include_str!("../data/finetune/configs/gemma-4-e4b-it.json"),
        // Vision-language checkpoints of the zoo, built as their `*ForConditionalGeneration`.
        "zoo/llama-3.2-11b-vision" => {
            include_str!("../../../../tests/zoo/configs/llama-3.2-11b-vision.json")
        }
        "zoo/gemma-3-4b-it" => include_str!("../../../../tests/zoo/configs/gemma-3-4b-it.json"),
        "zoo/gemma-4-26b-a4b" => {
            include_str!("../../../../tests/zoo/configs/gemma-4-26b-a4b.json")
        }
        "zoo/llama-4-scout-17b-16e-instruct" => {
            include_str!("../../../../tests/zoo/configs/llama-4-scout-17b-16e-instruct.json")
        }
        "zoo/ministral-3-3b-instruct-2512" => {
            include_str!("../../../../tests/zoo/configs/ministral-3-3b-instruct-2512.json")
        }
        "zoo/mistral-small-3.1-24b-instruct-2503" => {
            include_str!("../../../../tests/zoo/configs/mistral-small-3.1-24b-instruct-2503.json")
        }
        "zoo/qwen3-vl-2b-instruct" => {
            include_str!("../../../../tests/zoo/configs/qwen3-vl-2b-instruct.json")
        }
        "zoo/qwen3-vl-30b-a3b-instruct" => {
            include_str!("../../../../tests/zoo/configs/qwen3-vl-30b-a3b-instruct.json")
        }
        "zoo/qwen3.5-27b" => include_str!("../../../../tests/zoo/configs/qwen3.5-27b.json"),
        "zoo/qwen3.5-35b-a3b" => {
            include_str!("../../../../tests/zoo/configs/qwen3.5-35b-a3b.json")
        }
        // Qwen2-VL and Qwen2.5-VL (data/vision/README.md names the sources).
        "vision/qwen2-vl-2b-instruct" => include_str!("../data/vision/qwen2-vl-2b-instruct.json"),
        "vision/qwen2.5-vl-7b-instruct" => {
            include_str!("../data/vision/qwen2.5-vl-7b-instruct.json")
        }
        other => panic!("no config {other}"),
    };
    match hf::parse_config(text, name) {
        Ok(Model::Transformer(t)) => Some(t),
        Err(vram_model::Error::UnknownModelType(_)) if !DEVELOPED.contains(&name) => None,
        Ok(_) => panic!("{name} is not a transformer"),
        Err(e) => panic!("{name}: {e}"),
    }
}

fn cases(text: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// Every byte the quantized model holds (parameters plus bitsandbytes' quantization state).
#[test]
fn bnb_storage_equals_what_bitsandbytes_holds() {
    let rows = cases(include_str!("../data/finetune/bnb_storage.json"));
    assert!(rows.len() >= 10);
    for c in rows {
        let name = c["config"].as_str().unwrap();
        let t = config(name);
        let f = WeightFormat::parse(c["weights"].as_str().unwrap()).unwrap();
        let dq = c["double_quant"].as_bool().unwrap();
        let skip: Vec<String> = c["skip_modules"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        let w = weights_bytes(&t, f, dq, &skip);
        let what = format!("{name} {} dq={dq} skip={skip:?}", f.name());
        assert_eq!(w.total, c["weights_bytes"].as_u64().unwrap(), "{what}");
        // get_memory_footprint() misses the quantization state: vram does not.
        assert!(
            w.total
                > c["get_memory_footprint"].as_u64().unwrap()
                    - c["buffers_bytes"].as_u64().unwrap(),
            "{what}"
        );
    }
}

/// `get_peft_model(...).get_nb_trainable_parameters()[0]` for every recipe.
#[test]
fn lora_trainable_params_equal_peft() {
    let rows = cases(include_str!("../data/finetune/lora_counts.json"));
    assert!(rows.len() >= 10);
    let (mut checked, mut held) = (0, Vec::new());
    for c in rows {
        let name = c["config"].as_str().unwrap();
        let Some(t) = held_back(name) else {
            held.push(name.to_string());
            continue;
        };
        checked += 1;
        let targets = match &c["target_modules"] {
            Value::String(s) => Targets::parse(s).unwrap(),
            Value::Array(a) => {
                Targets::List(a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            }
            _ => panic!(),
        };
        let r = c["r"].as_u64().unwrap();
        let spec = LoraSpec {
            rank: r,
            alpha: 2 * r,
            dropout: c["lora_dropout"].as_f64().unwrap(),
            targets,
        };
        let plan = lora(&t, &spec).unwrap();
        let what = format!("{name} r={r} {}", spec.targets.display());

        assert_eq!(
            plan.trainable_params,
            c["trainable_params"].as_u64().unwrap(),
            "{what}"
        );
        let mut tp: Vec<String> = plan.target_parameters.clone();
        tp.sort();
        let expected: Vec<String> = c["target_parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        assert_eq!(tp, expected, "{what}");
        // PEFT's total is the unquantized model plus the adapters.
        assert_eq!(
            t.param_count() + plan.trainable_params,
            c["all_params"].as_u64().unwrap(),
            "{what}"
        );
    }
    assert!(checked >= 14, "{checked} recipes checked");
    // The reader knows every recipe's model type (issue 21): none may be skipped.
    assert!(held.is_empty(), "recipes the reader refused: {held:?}");
}

#[test]
fn bad_lora_recipes_are_refused_with_a_reason() {
    let llama = config("tiny-llama-odd");
    let spec = |r, t: &str, p| LoraSpec {
        rank: r,
        alpha: 16,
        dropout: p,
        targets: Targets::parse(t).unwrap(),
    };
    let e = lora(&llama, &spec(0, "all-linear", 0.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank"), "{e}");
    let e = lora(&llama, &spec(8, "qkv,attn_out", 0.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no module") && e.contains("q_proj"), "{e}");
    let mixtral = config("tiny-mixtral");
    // PEFT: w1 and w3 are fused into gate_up_proj; one without the other cannot be converted.
    let e = lora(&mixtral, &spec(8, "w1", 0.0)).unwrap_err().to_string();
    assert!(e.contains("w3"), "{e}");
    // ParamWrapper refuses dropout.
    let e = lora(&mixtral, &spec(8, "all-linear", 0.1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("lora_dropout"), "{e}");
    // all-linear on Mixtral adapts the expert banks and the router, never lm_head.
    let p = lora(&mixtral, &spec(8, "all-linear", 0.0)).unwrap();
    assert!(p
        .adapted
        .iter()
        .any(|a| matches!(a.site.kind, SiteKind::Experts(_))));
    assert!(p.adapted.iter().all(|a| a.site.path != "lm_head"));
    // Gemma 4's vision tower wraps each projection (`Gemma4ClippableLinear`): PEFT 0.21.2 fails
    // on `q_proj` there ("Target module Gemma4ClippableLinear(...) is not supported"), measured
    // on the meta device; all-linear takes the nn.Linear inside it.
    let gemma4 = config("zoo/gemma-4-26b-a4b");
    let e = lora(&gemma4, &spec(8, "q_proj,v_proj", 0.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("PEFT") && e.contains("self_attn.q_proj"), "{e}");
    assert!(lora(&gemma4, &spec(8, "all-linear", 0.0)).is_ok());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any rank is counted or refused in one line, never overflowed: a rank of 2^64 - 1 on
    /// Mixtral's expert banks multiplied past u64 (a panic in debug, wrapped figures in
    /// release). Within the limit the count is linear in the rank, as `r·(in + out)` per site.
    #[test]
    fn any_lora_rank_is_counted_or_refused(rank in proptest::prop_oneof![
        1..=vram_model::setup::MAX_SIZE,
        proptest::prelude::any::<u64>(),
    ]) {
        let mixtral = config("mixtral-8x7b");
        let spec = |r| LoraSpec {
            rank: r,
            alpha: 16,
            dropout: 0.0,
            targets: Targets::AllLinear,
        };
        match lora(&mixtral, &spec(rank)) {
            Ok(p) => {
                proptest::prop_assert!((1..=vram_model::setup::MAX_SIZE).contains(&rank));
                let one = lora(&mixtral, &spec(1)).unwrap().trainable_params;
                proptest::prop_assert_eq!(p.trainable_params, one * rank);
            }
            Err(e) => {
                proptest::prop_assert!(rank > vram_model::setup::MAX_SIZE);
                let e = e.to_string();
                proptest::prop_assert!(e.contains("--lora-rank") && !e.contains('\n'), "{}", e);
            }
        }
    }
}

mod step {
    use super::config;
    use crate::setups::finetune as spec;
    use vram_model::arch::Model;
    use vram_model::estimate::Category;
    use vram_model::finetune::step::{estimate, FinetuneSpec, Method};
    use vram_model::finetune::WeightFormat;
    use vram_model::setup::{Mode, Setup, Train};

    fn setup(mb: u64) -> Setup {
        Setup {
            mode: Mode::Train(Train {
                micro_batch: mb,
                seq: 1024,
                ..Train::default()
            }),
            ..Setup::default()
        }
    }

    #[test]
    fn the_frozen_base_holds_no_gradients_and_the_adapters_their_adam_states() {
        let m = Model::Transformer(config("llama-3.1-8b"));
        let lora = estimate(&m, &setup(1), &spec(Method::Lora, WeightFormat::Bf16)).unwrap();
        let p = lora.trainable_params;
        // fp32 adapters: 4 B weights, 4 B grads, 8 B AdamW states.
        assert_eq!(lora.adapter_bytes, 4);
        assert_eq!(lora.breakdown.get(Category::OptimizerStates), 8 * p);
        assert!(lora.breakdown.get(Category::Gradients) <= 4 * p);
        assert_eq!(
            lora.breakdown.get(Category::Parameters),
            lora.weights.total + 4 * p
        );
        // QLoRA under TRL: bf16 adapters and states, a ~4-bit base.
        let q = estimate(&m, &setup(1), &spec(Method::Qlora, WeightFormat::Nf4)).unwrap();
        assert_eq!(q.adapter_bytes, 2);
        assert_eq!(q.breakdown.get(Category::OptimizerStates), 4 * p);
        assert!(q.total_bytes < lora.total_bytes / 2);
    }

    #[test]
    fn the_libraries_knobs_move_the_estimate_the_way_they_should() {
        let m = Model::Transformer(config("llama-3.1-8b"));
        let base = spec(Method::Qlora, WeightFormat::Nf4);
        let q = estimate(&m, &setup(1), &base).unwrap();
        // prepare_model_for_kbit_training: every unpacked half parameter becomes fp32.
        let prep = estimate(
            &m,
            &setup(1),
            &FinetuneSpec {
                prepare_kbit: true,
                ..base.clone()
            },
        )
        .unwrap();
        assert_eq!(
            prep.breakdown.get(Category::Parameters) - q.breakdown.get(Category::Parameters),
            2 * q.weights.unquantized_params
        );
        // Dropout saves a mask and its output per adapted linear.
        let mut d = base.clone();
        d.lora.dropout = 0.1;
        let drop = estimate(&m, &setup(1), &d).unwrap();
        assert!(drop.breakdown.get(Category::Activations) > q.breakdown.get(Category::Activations));
        // Without checkpointing every layer keeps its tensors.
        let nogc = estimate(
            &m,
            &setup(1),
            &FinetuneSpec {
                gradient_checkpointing: false,
                ..base.clone()
            },
        )
        .unwrap();
        assert!(nogc.peak_bytes > q.peak_bytes + 2 * (1 << 30));
        // Double quant stores less; bigger micro-batches need more.
        let dq = estimate(
            &m,
            &setup(1),
            &FinetuneSpec {
                double_quant: true,
                ..base.clone()
            },
        )
        .unwrap();
        assert!(dq.weights.total < q.weights.total);
        let mut prev = 0;
        for mb in [1, 2, 4, 8] {
            let e = estimate(&m, &setup(mb), &base).unwrap();
            assert!(e.peak_bytes > prev);
            assert!(e.reserved_bytes >= e.peak_bytes);
            prev = e.peak_bytes;
        }
    }
}

/// The one description of a packed linear against bitsandbytes 0.50.2 on the CPU: a 256 × 512
/// bf16 weight through `functional.quantize_4bit(blocksize=64, quant_type="nf4")` gives a
/// `uint8 [65536, 1]` and, with `compress_statistics=True`, `QuantState.as_dict(packed=False)`
/// `absmax uint8 [2048]`, `quant_map float32 [16]`, `nested_absmax float32 [8]`,
/// `nested_quant_map float32 [256]` and a 0-d fp32 `offset`; without it `absmax float32 [2048]`;
/// `int8_vectorwise_quant` gives `CB int8 [256, 512]` and `SCB float32 [256]`.
#[test]
fn packed_linears_hold_what_bitsandbytes_makes() {
    use vram_model::finetune::{linear_parts, linear_tensors, WeightFormat};
    let seen = |f, dq| -> Vec<(&str, Vec<u64>, &str)> {
        linear_tensors(f, dq, 256, 512)
            .into_iter()
            .map(|t| (t.name, t.shape, t.dtype))
            .collect()
    };
    let mut nested = seen(WeightFormat::Nf4, true);
    nested.sort();
    assert_eq!(
        nested,
        vec![
            ("absmax", vec![2048], "uint8"),
            ("nested_absmax", vec![8], "float32"),
            ("nested_quant_map", vec![256], "float32"),
            ("offset", vec![], "float32"),
            ("quant_map", vec![16], "float32"),
            ("weight", vec![65536, 1], "uint8"),
        ]
    );
    assert_eq!(
        seen(WeightFormat::Nf4, false),
        vec![
            ("weight", vec![65536, 1], "uint8"),
            ("absmax", vec![2048], "float32"),
            ("quant_map", vec![16], "float32"),
        ]
    );
    assert_eq!(
        seen(WeightFormat::Int8, false),
        vec![
            ("CB", vec![256, 512], "int8"),
            ("SCB", vec![256], "float32")
        ]
    );
    // The bytes are the shapes' elements at the dtypes' widths.
    assert_eq!(
        linear_parts(WeightFormat::Nf4, true, 256, 512),
        vec![65536, 2048, 32, 64, 4, 1024]
    );
    // GPTQ stores `g_idx` (int32, one per input column), AWQ none.
    let gptq = seen(
        WeightFormat::Gptq {
            group: 128,
            desc_act: false,
        },
        false,
    );
    assert_eq!(gptq[3], ("g_idx", vec![512], "int32"));
    assert_eq!(gptq[0], ("qweight", vec![64, 256], "int32"));
    let awq = seen(WeightFormat::Awq { group: 128 }, false);
    assert_eq!(awq[0], ("qweight", vec![512, 32], "int32"));
    assert_eq!(awq.len(), 3);
}
