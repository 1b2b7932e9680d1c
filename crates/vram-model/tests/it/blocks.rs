//! The layer-by-layer description against the uniform fields it re-expresses.

use vram_model::arch::{Layout, Model};
use vram_model::blocks::{CacheKind, Checked, Component, Ffn, Mixer};
use vram_model::catalog;

/// Every 2019–2024 catalog transformer is expressed layer by layer: the components add up to
/// the exact count (`vram models`, equal to transformers' `from_config` counts in
/// `tests/it/params.rs`) with the embedding and head where the split puts them, one block per
/// layer, one kind per stack (T5's first blocks hold the relative-position tables; Gemma 2
/// alternates sliding and full windows).
#[test]
fn classic_families_are_described_layer_by_layer() {
    let mut seen = 0;
    for id in catalog::ids() {
        let Model::Transformer(t) = catalog::lookup(id).unwrap() else {
            continue;
        };
        if t.blocks.checked != Checked::H100Steps {
            continue; // a current family, counted in params.rs
        }
        seen += 1;
        let p = t.params_by_component();
        assert_eq!(p.total(), t.param_count(), "{id}");
        let s = t.param_split();
        assert_eq!(p.get(Component::Embedding), s.embedding, "{id}: embedding");
        let mut windows = Vec::new();
        for k in &t.blocks.kinds {
            if let Mixer::Attention(a) = k.mixer {
                if !windows.contains(&a.window) {
                    windows.push(a.window);
                }
            }
        }
        let windows = windows.len();
        let kinds = match t.layout() {
            Layout::EncoderDecoder => 4,
            _ => windows,
        };
        assert_eq!(t.blocks.kinds.len(), kinds, "{id}");
        let moe = t.blocks.iter().any(|b| matches!(b.ffn, Ffn::Moe(_)));
        let experts = p.get(Component::RoutedExperts);
        assert_eq!(experts > 0, moe, "{id}: routed experts");
        if moe {
            assert_eq!(experts, t.layers() * 8 * s.per_expert, "{id}");
        }
        assert_eq!(
            p.get(Component::Head) > 0,
            !t.blocks.head.tied && t.layout() != Layout::EncoderOnly,
            "{id}: untied head"
        );
    }
    assert!(seen >= 20);
}

#[test]
fn catalog_caches_are_full_or_sliding_key_value_caches() {
    let t = match catalog::lookup("llama-3-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    // Llama-3-8B: 32 layers × 2 (K, V) × 8 heads × 128 = 65,536 elements per token.
    let by_kind = t.blocks.cache_by_kind(1, 100, 0, 2);
    assert_eq!(by_kind[0], (32, 100 * 65_536 * 2));
    assert!(matches!(t.blocks.layer(0).mixer, Mixer::Attention(_)));
    assert!(matches!(t.blocks.layer(31).ffn, Ffn::Dense(_)));
    let m = match catalog::lookup("mistral-7b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let spec = m.blocks.layer(0).mixer.cache();
    assert_eq!(spec.kind, CacheKind::Sliding);
    assert_eq!(spec.window, Some(4096));
}

/// What transformers 5.24's `DynamicCache` holds after a meta-device prefill of `prompt` tokens
/// and one decode step (batch 1), measured per cache-layer class with storages deduplicated
/// (the forward of `architectures[0]`'s class, as tests/zoo/reference.py runs it). Rows:
/// (catalog id, element bytes of the run, prompt, after prefill, per decode token,
/// [(kind, layers, after prefill, after decode)]).
#[test]
fn caches_hold_what_transformers_dynamic_cache_holds() {
    type Row = (
        &'static str,
        u64,
        u64,
        u64,
        i64,
        &'static [(CacheKind, u64, u64, u64)],
    );
    let rows: &[Row] = &[
        (
            "qwen3-0.6b",
            2,
            16,
            1_835_008,
            114_688,
            &[(CacheKind::Full, 28, 1_835_008, 1_949_696)],
        ),
        // Gemma 2's default layer_types: even layers sliding (4096), odd layers full.
        (
            "gemma-2-9b",
            2,
            4200,
            1_445_068_800,
            -17_719_296,
            &[
                (CacheKind::Full, 21, 722_534_400, 722_706_432),
                (CacheKind::Sliding, 21, 722_534_400, 704_643_072),
            ],
        ),
        (
            "qwen3-0.6b",
            2,
            512,
            58_720_256,
            114_688,
            &[(CacheKind::Full, 28, 58_720_256, 58_834_944)],
        ),
        // Gemma 3 1B: 22 sliding layers (window 512) keep the whole 640-token prompt until the
        // first decode step, then 512 tokens.
        (
            "gemma-3-1b",
            2,
            640,
            17_039_360,
            -2_879_488,
            &[
                (CacheKind::Full, 4, 2_621_440, 2_625_536),
                (CacheKind::Sliding, 22, 14_417_920, 11_534_336),
            ],
        ),
        (
            "gpt-oss-20b",
            4,
            256,
            25_165_824,
            -6_242_304,
            &[
                (CacheKind::Full, 12, 12_582_912, 12_632_064),
                (CacheKind::Sliding, 12, 12_582_912, 6_291_456),
            ],
        ),
        // Qwen3.5-27B: 48 Gated DeltaNet layers hold a fixed conv + fp32 recurrent state.
        (
            "qwen3.5-27b",
            4,
            16,
            160_956_416,
            131_072,
            &[
                (CacheKind::Full, 16, 2_097_152, 2_228_224),
                (CacheKind::Linear, 48, 158_859_264, 158_859_264),
            ],
        ),
        (
            "nemotron-3-nano-30b-a3b",
            2,
            16,
            49_463_296,
            6_144,
            &[
                (CacheKind::Full, 6, 98_304, 104_448),
                (CacheKind::Linear, 23, 49_364_992, 49_364_992),
            ],
        ),
        // DeepSeek-V3 caches MLA's latent (512 + 64 per token per layer).
        (
            "deepseek-v3",
            2,
            16,
            1_124_352,
            70_272,
            &[(CacheKind::Full, 61, 1_124_352, 1_194_624)],
        ),
        // GLM-5 adds the indexer's keys (128 per token per layer).
        (
            "glm-5",
            2,
            16,
            1_757_184,
            109_824,
            &[(CacheKind::Indexed, 78, 1_757_184, 1_867_008)],
        ),
        (
            "gemma-4-26b-a4b",
            2,
            1152,
            259_522_560,
            -26_193_920,
            &[
                (CacheKind::Full, 5, 23_592_960, 23_613_440),
                (CacheKind::Sliding, 25, 235_929_600, 209_715_200),
            ],
        ),
    ];
    for (id, dtype, prompt, prefill, per_token, kinds) in rows {
        let Model::Transformer(t) = catalog::lookup(id).unwrap() else {
            unreachable!()
        };
        let r = t.blocks.cache_report(1, *prompt, *dtype);
        assert_eq!(r.after_prefill_bytes, *prefill, "{id} p{prompt}");
        assert_eq!(r.bytes_per_token, *per_token, "{id} p{prompt}");
        for k in r.by_kind.iter().filter(|k| k.layers > 0) {
            let want = kinds.iter().find(|w| w.0 == k.kind);
            assert_eq!(
                want.map(|w| (w.1, w.2, w.3)),
                Some((k.layers, k.after_prefill_bytes, k.after_decode_bytes)),
                "{id} p{prompt} {:?}",
                k.kind
            );
        }
        assert_eq!(
            r.by_kind.iter().filter(|k| k.layers > 0).count(),
            kinds.len(),
            "{id}"
        );
    }
}

fn transformer(id: &str) -> vram_model::arch::Transformer {
    match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

/// gpt-oss ships MXFP4 experts (quantizers/quantizer_mxfp4.py, integrations/mxfp4.py
/// `Mxfp4GptOssExperts`): packed uint8 pairs plus a uint8 scale per 32 values, fp32 expert
/// biases; everything else bf16. The dequantized fallback holds every parameter in bf16.
#[test]
fn mxfp4_experts_are_stored_packed() {
    use vram_model::blocks::Quant;
    let t = transformer("gpt-oss-20b");
    assert_eq!(t.blocks.storage.quant, Quant::Mxfp4);
    let (e, h, i, l) = (32u64, 2880u64, 2880u64, 24u64);
    let banks = l * e * (2 * i * h + h * i);
    let biases = l * e * (2 * i + h);
    let packed = l * e * (2 * i * (h / 32) * 17 + h * (i / 32) * 17);
    let rest = t.param_count() - banks - biases;
    assert_eq!(
        t.blocks.weights_bytes(false),
        packed + 4 * biases + 2 * rest
    );
    assert_eq!(t.blocks.weights_bytes(true), 2 * t.param_count());
}

/// DeepSeek-V3 ships fine-grained FP8 (`weight_block_size` [128, 128]): every linear and expert
/// bank one byte per weight plus an fp32 scale per 128×128 block; the LM head, embeddings and
/// norms bf16, the router's weight fp32 (`_keep_in_fp32_modules_strict`).
#[test]
fn fp8_block_weights_carry_their_scales() {
    use vram_model::blocks::{Component, Quant};
    let t = transformer("deepseek-v3");
    assert_eq!(
        t.blocks.storage.quant,
        Quant::Fp8Block {
            bn: 128,
            bk: 128,
            skip_head: true,
            e8m0: false,
        }
    );
    let p = t.params_by_component();
    let stored = t.blocks.weights_bytes(false);
    let router = p.get(Component::Router);
    // Between one byte per quantized weight and that plus 1/4096 of it in scales.
    let bf16 = 2 * (p.get(Component::Embedding) + p.get(Component::Head) + p.get(Component::Norms));
    let fp8 = t.param_count() - router - p.get(Component::Embedding) - p.get(Component::Head);
    assert!(
        stored > bf16 + 4 * router + fp8 - p.get(Component::Norms),
        "{stored}"
    );
    assert!(
        stored < bf16 + 4 * router + fp8 + fp8 / 4096 + 61 * 4 * 1024,
        "{stored}"
    );
    // Dequantized: bf16 but the fp32 router.
    assert_eq!(
        t.blocks.weights_bytes(true),
        2 * t.param_count() + 2 * router
    );
}

/// A config's bitsandbytes, GPTQ and AWQ `quantization_config` is the storage
/// (`utils/quantization_config.py` defaults: `bnb_4bit_quant_type` "fp4", `group_size` 128 for
/// GPTQ; `-1` one group per row); methods or widths not laid out are `Other`, with a note.
/// Each packs the layers' linears as `finetune::linear_parts` holds them, the head and
/// embedding in the dtype.
#[test]
fn quantization_configs_are_read_into_the_storage() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::{linear_bytes, WeightFormat};
    let cfg = |q: &str| {
        format!(
            r#"{{"model_type":"llama","vocab_size":1000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"quantization_config":{q}}}"#
        )
    };
    let read = |q: &str| match vram_model::hf::parse_config(&cfg(q), "q").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let packed = |format, double_quant| Quant::Packed {
        format,
        double_quant,
    };
    for (q, want) in [
        (
            r#"{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_use_double_quant":true}"#,
            packed(WeightFormat::Nf4, true),
        ),
        (
            r#"{"quant_method":"bitsandbytes","load_in_4bit":true}"#,
            packed(WeightFormat::Fp4, false),
        ),
        (
            r#"{"quant_method":"bitsandbytes","load_in_8bit":true}"#,
            packed(WeightFormat::Int8, false),
        ),
        (
            r#"{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false}"#,
            packed(
                WeightFormat::Gptq {
                    group: 128,
                    desc_act: false,
                },
                false,
            ),
        ),
        (
            r#"{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true}"#,
            packed(
                WeightFormat::Gptq {
                    group: 128,
                    desc_act: true,
                },
                false,
            ),
        ),
        // One group per row: the order of the rows does not matter (vLLM's GPTQMarlinConfig
        // sets desc_act false).
        (
            r#"{"quant_method":"gptq","bits":4,"group_size":-1,"desc_act":true}"#,
            packed(
                WeightFormat::Gptq {
                    group: 0,
                    desc_act: false,
                },
                false,
            ),
        ),
        (
            r#"{"quant_method":"gptq","bits":4,"group_size":-1}"#,
            packed(
                WeightFormat::Gptq {
                    group: 0,
                    desc_act: false,
                },
                false,
            ),
        ),
        (
            r#"{"quant_method":"awq","bits":4,"group_size":64,"version":"gemm"}"#,
            packed(WeightFormat::Awq { group: 64 }, false),
        ),
        // Channel-wise AWQ: one group per input row.
        (
            r#"{"quant_method":"awq","bits":4,"group_size":-1,"zero_point":true,"version":"gemm"}"#,
            packed(WeightFormat::Awq { group: 0 }, false),
        ),
        (r#"{"quant_method":"gptq","bits":8}"#, Quant::Other),
        (r#"{"quant_method":"compressed-tensors"}"#, Quant::Other),
        // compressed-tensors W4A16 as llm-compressor writes it (vLLM 0.10.0's
        // `_is_wNa16_group_channel`): the `Linear` group's weights, symmetric by default.
        (
            r#"{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"group","group_size":128,"symmetric":true,"actorder":null,"dynamic":false},"input_activations":null}},"ignore":["lm_head"]}"#,
            packed(
                WeightFormat::Wna16 {
                    group: 128,
                    symmetric: true,
                },
                false,
            ),
        ),
        // Channel-wise and asymmetric, the format named on the group only.
        (
            r#"{"quant_method":"compressed-tensors","config_groups":{"group_0":{"format":"pack-quantized","targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"channel","group_size":null,"symmetric":false}}}}"#,
            packed(
                WeightFormat::Wna16 {
                    group: 0,
                    symmetric: false,
                },
                false,
            ),
        ),
        // W8A8 (activations quantized), act-order and 8-bit weights are other schemes.
        (
            r#"{"quant_method":"compressed-tensors","format":"int-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"int","strategy":"channel","symmetric":true},"input_activations":{"num_bits":8,"type":"int","strategy":"token","dynamic":true}}}}"#,
            Quant::Other,
        ),
        (
            r#"{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"group","group_size":128,"actorder":"group"}}}}"#,
            Quant::Other,
        ),
    ] {
        let t = read(q);
        assert_eq!(t.blocks.storage.quant, want, "{q}");
        if let Quant::Packed {
            format,
            double_quant,
        } = want
        {
            // q, k, v, o, gate, up, down per layer; embedding, head and norms in bf16.
            let per_layer = [
                (256, 256),
                (128, 256),
                (128, 256),
                (256, 256),
                (512, 256),
                (512, 256),
                (256, 512),
            ]
            .iter()
            .map(|(o, i)| linear_bytes(format, double_quant, *o, *i))
            .sum::<u64>();
            let linears = 2 * (4 * 256 * 256 + 3 * 256 * 512 - 2 * 128 * 256);
            let rest = t.param_count() - linears;
            assert_eq!(
                t.blocks.weights_bytes(false),
                2 * per_layer + 2 * rest,
                "{q}"
            );
        }
    }
    assert!(read(r#"{"quant_method":"gptq","bits":8}"#)
        .blocks
        .notes
        .iter()
        .any(|n| n.contains("gptq")));
}
