//! Exact parameter counts against published figures.
//!
//! Each figure is `sum(p.numel() for p in model.parameters())` of the PyTorch model, as printed
//! by the model's Hugging Face card or paper, or torchvision's documentation table.

use vram_model::catalog;

fn check(id: &str, expected: u64) {
    let model = catalog::lookup(id).unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(model.param_count(), expected, "{id}");
}

#[test]
fn published_parameter_counts() {
    // (catalog id, count, source)
    let cases: &[(&str, u64, &str)] = &[
        (
            "gpt2",
            124_439_808,
            "GPT2LMHeadModel, HF model card / num_parameters()",
        ),
        (
            "gpt2-medium",
            354_823_168,
            "GPT2LMHeadModel num_parameters()",
        ),
        (
            "gpt2-large",
            774_030_080,
            "GPT2LMHeadModel num_parameters()",
        ),
        ("gpt2-xl", 1_557_611_200, "GPT2LMHeadModel num_parameters()"),
        (
            "bert-base-uncased",
            109_482_240,
            "BertModel num_parameters()",
        ),
        (
            "bert-large-uncased",
            335_141_888,
            "BertModel num_parameters()",
        ),
        ("roberta-base", 124_645_632, "RobertaModel num_parameters()"),
        (
            "t5-base",
            222_903_552,
            "T5ForConditionalGeneration num_parameters()",
        ),
        (
            "llama-2-7b",
            6_738_415_616,
            "Llama 2 HF checkpoint, safetensors total / 2 bytes",
        ),
        ("llama-2-13b", 13_015_864_320, "Llama 2 HF checkpoint"),
        ("llama-2-70b", 68_976_648_192, "Llama 2 HF checkpoint"),
        (
            "llama-3-8b",
            8_030_261_248,
            "Meta-Llama-3-8B model card (8.03B), safetensors metadata",
        ),
        (
            "llama-3-70b",
            70_553_706_496,
            "Meta-Llama-3-70B safetensors metadata",
        ),
        (
            "llama-3.1-405b",
            405_853_388_800,
            "Llama 3.1 405B safetensors metadata",
        ),
        (
            "mistral-7b",
            7_241_732_096,
            "Mistral-7B-v0.1 safetensors metadata",
        ),
        (
            "mixtral-8x7b",
            46_702_792_704,
            "Mixtral-8x7B-v0.1 safetensors metadata",
        ),
        ("qwen2-7b", 7_615_616_512, "Qwen2-7B safetensors metadata"),
        (
            "qwen2-72b",
            72_706_203_648,
            "Qwen2-72B safetensors metadata",
        ),
        ("gemma-7b", 8_537_680_896, "gemma-7b safetensors metadata"),
        (
            "gemma-2-9b",
            9_241_705_984,
            "gemma-2-9b safetensors metadata",
        ),
        (
            "phi-3-mini",
            3_821_079_552,
            "Phi-3-mini-4k-instruct safetensors metadata",
        ),
        ("falcon-7b", 6_921_720_704, "falcon-7b safetensors metadata"),
        (
            "pythia-1.4b",
            1_414_647_808,
            "Pythia paper Table 1 / EleutherAI model card",
        ),
        (
            "resnet-18",
            11_689_512,
            "torchvision ResNet18_Weights.IMAGENET1K_V1 num_params",
        ),
        (
            "resnet-34",
            21_797_672,
            "torchvision ResNet34_Weights num_params",
        ),
        (
            "resnet-50",
            25_557_032,
            "torchvision ResNet50_Weights num_params",
        ),
        (
            "resnet-101",
            44_549_160,
            "torchvision ResNet101_Weights num_params",
        ),
        (
            "resnet-152",
            60_192_808,
            "torchvision ResNet152_Weights num_params",
        ),
    ];
    let mut failures = Vec::new();
    for (id, expected, _source) in cases {
        let got = catalog::lookup(id).map(|m| m.param_count());
        if got != Ok(*expected) {
            failures.push(format!("{id}: got {got:?}, expected {expected}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_catalog_id_parses() {
    for id in catalog::ids() {
        check(id, catalog::lookup(id).unwrap().param_count());
        assert!(
            catalog::lookup(id).unwrap().param_count() > 1_000_000,
            "{id}"
        );
    }
}

#[test]
fn gpt2_by_hand() {
    // GPT-2 small, summed by hand from its modules (h = 768, V = 50257, 1024 positions):
    // wte 50257·768 + wpe 1024·768 + 12 × (ln 2·1536 + c_attn 768·2304+2304 + c_proj 768·768+768
    // + c_fc 768·3072+3072 + c_proj 3072·768+768) + ln_f 1536.
    let per_layer = 2 * 1536
        + (768 * 2304 + 2304)
        + (768 * 768 + 768)
        + (768 * 3072 + 3072)
        + (3072 * 768 + 768);
    let expected = 50257 * 768 + 1024 * 768 + 12 * per_layer + 1536;
    check("gpt2", expected);
}

#[test]
fn tied_and_untied_heads_differ_by_the_embedding() {
    let tied = r#"{"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"tie_word_embeddings":true}"#;
    let untied = tied.replace(
        "\"tie_word_embeddings\":true",
        "\"tie_word_embeddings\":false",
    );
    let a = vram_model::hf::parse_config(tied, "a")
        .unwrap()
        .param_count();
    let b = vram_model::hf::parse_config(&untied, "b")
        .unwrap()
        .param_count();
    assert_eq!(b - a, 1000 * 64);
}

#[test]
fn gqa_head_dim_and_fused_variants() {
    // Falcon-40B style (new decoder architecture, 8 KV heads, two norms): by hand,
    // qkv = h·(a + 2g)·d, dense = h², MLP 2·h·4h, two LayerNorms 2·2h.
    let cfg = r#"{"model_type":"falcon","vocab_size":65024,"hidden_size":8192,"num_hidden_layers":60,"num_attention_heads":128,"num_kv_heads":8,"new_decoder_architecture":true,"parallel_attn":true,"bias":false}"#;
    let h: u64 = 8192;
    let d = 64;
    let layer = h * (128 + 16) * d + h * h + 2 * h * 4 * h + 4 * h;
    let expected = 65024 * h + 60 * layer + 2 * h;
    assert_eq!(
        vram_model::hf::parse_config(cfg, "falcon-40b")
            .unwrap()
            .param_count(),
        expected
    );
}

/// The current families' catalog entries (real config.json files, data/catalog/SOURCES.md):
/// `sum(p.numel() for p in model.parameters())` of transformers 5.24.0's `architectures[0]`
/// class built by `from_config` on the meta device (Kimi-K2 as DeepSeek-V3, MiMo as Qwen2 plus
/// its remote code's MTP blocks), and a few components of the same module trees.
#[test]
fn current_families_match_transformers_5_24() {
    use vram_model::arch::Model;
    use vram_model::blocks::Component;
    let cases: &[(&str, u64)] = &[
        ("qwen3-0.6b", 596_049_920),
        ("qwen3-1.7b", 1_720_574_976),
        ("qwen3-8b", 8_190_735_360),
        ("qwen3-32b", 32_762_123_264),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("qwen3-30b-a3b-2507", 30_532_122_624),
        ("qwen3-235b-a22b", 235_093_634_560),
        ("qwen3-coder-480b-a35b", 480_154_875_392),
        ("qwen3.5-27b", 27_356_728_560),
        ("qwen3.5-35b-a3b", 35_107_181_936),
        ("qwen3.5-122b-a10b", 122_562_817_776),
        ("qwen3.5-397b-a17b", 396_802_360_816),
        ("qwen2-vl-2b", 2_208_985_600),
        ("qwen2.5-vl-7b", 8_292_166_656),
        ("qwen3-vl-8b", 8_767_123_696),
        ("qwen3-vl-30b-a3b", 31_070_754_032),
        ("qwen3-next-80b-a3b", 79_674_391_296),
        ("deepseek-v3", 671_026_404_352),
        ("deepseek-r1", 671_026_404_352),
        ("deepseek-v3.2", 671_877_929_216),
        ("kimi-k2", 1_026_408_209_408),
        ("glm-5", 743_911_199_232),
        ("gpt-oss-20b", 20_914_757_184),
        ("gpt-oss-120b", 116_829_156_672),
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-4-scout", 108_641_793_536),
        ("llama-4-maverick", 401_167_027_200),
        ("gemma-3-1b", 999_885_952),
        ("gemma-4-26b-a4b", 25_805_933_872),
        ("mixtral-8x22b", 140_620_634_112),
        ("minimax-m2.5", 228_689_748_992),
        ("nemotron-3-nano-30b-a3b", 31_577_937_344),
        ("nemotron-3-super-120b-a12b-fp8", 120_668_687_360),
        ("nemotron-h-56b", 56_324_350_464),
        ("mimo-7b", 7_833_409_536),
        ("smollm3-3b", 3_075_098_624),
    ];
    for (id, want) in cases {
        check(id, *want);
    }
    let comp = |id: &str, c: Component| match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t.params_by_component().get(c),
        _ => unreachable!(),
    };
    // Components as the module tree names them (tests/zoo/reference.py `component()`).
    assert_eq!(comp("qwen3-vl-8b", Component::Vision), 576_388_336);
    // Qwen2-VL's and Qwen2.5-VL's towers (names under `model.visual`,
    // tests/data/vision/README.md).
    assert_eq!(comp("qwen2-vl-2b", Component::Vision), 665_271_296);
    assert_eq!(comp("qwen2.5-vl-7b", Component::Vision), 676_550_144);
    assert_eq!(comp("llama-4-scout", Component::Vision), 871_932_416);
    assert_eq!(comp("gemma-4-26b-a4b", Component::Vision), 572_792_112);
    assert_eq!(comp("gemma-4-26b-a4b", Component::Router), 10_901_760);
    assert_eq!(comp("deepseek-v3", Component::Router), 106_430_464);
    assert_eq!(comp("deepseek-v3", Component::SharedExperts), 2_554_331_136);
    assert_eq!(comp("deepseek-v3", Component::DenseMlp), 1_189_085_184);
    assert_eq!(comp("deepseek-v3", Component::Mixer), 11_413_547_008);
    assert_eq!(
        comp("qwen3.5-35b-a3b", Component::SharedExperts),
        125_911_040
    );
    assert_eq!(comp("gpt-oss-20b", Component::Router), 2_212_608);
    assert_eq!(comp("mimo-7b", Component::Mtp), 210_790_400);
    assert_eq!(comp("nemotron-h-56b", Component::Mixer), 25_184_862_720);
}

/// Unknown `model_type`s: the standard decoder keys give a generic decoder with a note; a
/// structural key it cannot honour is refused, naming the key.
#[test]
fn unknown_model_types_are_read_generically_or_refused_by_key() {
    use vram_model::arch::Model;
    let generic = r#"{"model_type": "brand_new", "vocab_size": 1000, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}"#;
    let Model::Transformer(t) = vram_model::hf::parse_config(generic, "x").unwrap() else {
        unreachable!()
    };
    // Embedding, untied head, 2 × (4·64² attention + 3·64·128 MLP + 2 norms), final norm.
    assert_eq!(
        t.param_count(),
        2 * 1000 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 128) + 64
    );
    assert!(
        t.blocks.notes[0].contains("brand_new"),
        "{:?}",
        t.blocks.notes
    );
    let moe = generic.replace(
        "\"intermediate_size\"",
        "\"n_routed_experts\": 8, \"intermediate_size\"",
    );
    let err = vram_model::hf::parse_config(&moe, "x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("n_routed_experts") && err.contains("brand_new"),
        "{err}"
    );
    // A decoder's config with one standard key null: that key is named, not the list of
    // known types; a per-layer `block_configs` (Nemotron-NAS) is named before it.
    let null_ffn = generic.replace("\"intermediate_size\": 128", "\"intermediate_size\": null");
    let err = vram_model::hf::parse_config(&null_ffn, "x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no `intermediate_size`") && err.contains("brand_new"),
        "{err}"
    );
    let nas = null_ffn.replace(
        "\"intermediate_size\"",
        "\"block_configs\": [{\"ffn\": {\"ffn_mult\": 2.625}}], \"intermediate_size\"",
    );
    let err = vram_model::hf::parse_config(&nas, "x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`block_configs` needs a family reader"),
        "{err}"
    );
    // Hardly a decoder at all: the unknown model_type, as before.
    let bare = r#"{"model_type": "brand_new", "hidden_size": 64}"#;
    let err = vram_model::hf::parse_config(bare, "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown model_type `brand_new`"), "{err}");
}

/// Issue 31 item 4: an unknown `model_type` is read as a generic decoder only when every
/// structural key of its config is one the generic decoder reads; otherwise the first such key
/// is named (exit 2 in the CLI). `false`, `0` and null agree with a generic decoder.
#[test]
fn structural_keys_decide_what_a_generic_decoder_reads() {
    let generic = r#"{"model_type": "brand_new", "vocab_size": 1000, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128"#;
    let with = |extra: &str| format!("{generic}, {extra}}}");
    let refused = |extra: &str, key: &str| {
        let err = vram_model::hf::parse_config(&with(extra), "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("`{key}`")) && err.contains("brand_new"),
            "{extra}: {err}"
        );
    };
    // Sizes, norms, biases, blocks and towers a generic decoder would drop or misshape.
    refused(r#""type_vocab_size": 2"#, "type_vocab_size");
    refused(r#""layer_norm_eps": 1e-5"#, "layer_norm_eps");
    refused(r#""use_bias": true"#, "use_bias");
    refused(r#""use_parallel_residual": true"#, "use_parallel_residual");
    refused(r#""mamba_d_ssm": 1024"#, "mamba_d_ssm");
    refused(r#""attention_window_size": 2048"#, "attention_window_size");
    refused(r#""auto_map": {"AutoModelForCausalLM": "m.M"}"#, "auto_map");
    refused(r#""vision_config": {"hidden_size": 32}"#, "vision_config");
    refused(r#""layer_types": ["full_attention", "mlp"]"#, "layer_types");
    // What a generic decoder is anyway.
    for fine in [
        r#""use_bias": false"#,
        r#""num_experts": 0"#,
        r#""qk_layernorm": false"#,
        r#""rms_norm_eps": 1e-6"#,
        r#""chunk_size_feed_forward": 0"#,
        r#""layer_types": ["full_attention", "sliding_attention"], "sliding_window": 16"#,
    ] {
        vram_model::hf::parse_config(&with(fine), "x").unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
    // A wrapper of a text model it does not know: its tower keys count, unless the class named
    // is the text model's own.
    let wrapper = format!(
        r#"{{"model_type": "brand_new_vl", "vision_config": {{"hidden_size": 32}}, "text_config": {}}}"#,
        with(r#""model_type": "brand_new_text""#)
    );
    let err = vram_model::hf::parse_config(&wrapper, "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`vision_config`"), "{err}");
    let text_only = wrapper.replacen('{', r#"{"architectures": ["BrandNewForCausalLM"], "#, 1);
    vram_model::hf::parse_config(&text_only, "x").unwrap();
    // transformers types that look like a generic decoder but are not one: refused by name.
    let diff =
        with(r#""model_type": "diffllama""#).replacen(r#""model_type": "brand_new", "#, "", 1);
    let err = vram_model::hf::parse_config(&diff, "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`diffllama` cannot be described"), "{err}");
}

/// Known families: a class key their reader does not model is refused, not dropped.
#[test]
fn known_families_refuse_what_their_reader_does_not_model() {
    let err = |cfg: &str| {
        vram_model::hf::parse_config(cfg, "x")
            .unwrap_err()
            .to_string()
    };
    let gpt2 = r#"{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64, "add_cross_attention": true}"#;
    assert!(err(gpt2).contains("add_cross_attention"), "{}", err(gpt2));
    let bert = r#"{"model_type": "bert", "architectures": ["BertLMHeadModel"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}"#;
    assert!(err(bert).contains("BertLMHeadModel"), "{}", err(bert));
    // BertForMaskedLM (bert-base-uncased's own config) is still read as the encoder.
    vram_model::hf::parse_config(&bert.replace("BertLMHeadModel", "BertForMaskedLM"), "x").unwrap();
}

/// Qwen2 with `use_sliding_window` slides the layers from `max_window_layers` on
/// (configuration_qwen2.py: `layer_types`), which the cache reflects; without it none slide.
#[test]
fn qwen2_sliding_window_layers() {
    use vram_model::arch::Model;
    use vram_model::blocks::{Mixer, Window};
    let cfg = |use_sw: bool| {
        format!(
            r#"{{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "intermediate_size": 128, "use_sliding_window": {use_sw},
            "sliding_window": 32, "max_window_layers": 3}}"#
        )
    };
    let windows = |use_sw| {
        let Model::Transformer(t) = vram_model::hf::parse_config(&cfg(use_sw), "x").unwrap() else {
            unreachable!()
        };
        t.blocks
            .iter()
            .map(|b| match b.mixer {
                Mixer::Attention(a) => a.window,
                _ => unreachable!(),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        windows(true),
        [
            Window::Full,
            Window::Full,
            Window::Full,
            Window::Sliding(32)
        ]
    );
    assert!(windows(false).iter().all(|w| *w == Window::Full));
}

/// Gemma 4 configs saved by transformers 5.24 carry `per_layer_config` (the full layers'
/// `head_dim` and `num_key_value_heads`), which replaces `global_head_dim`.
#[test]
fn gemma4_per_layer_config_sets_the_full_layers() {
    use vram_model::arch::Model;
    use vram_model::blocks::{Mixer, Window};
    let cfg = r#"{"model_type": "gemma4_text", "vocab_size": 100, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 128, "hidden_size_per_layer_input": 0, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "per_layer_config": {"1": {"head_dim": 48, "num_key_value_heads": 1}}}"#;
    let Model::Transformer(t) = vram_model::hf::parse_config(cfg, "x").unwrap() else {
        unreachable!()
    };
    let attn: Vec<_> = t
        .blocks
        .iter()
        .map(|b| match b.mixer {
            Mixer::Attention(a) => (a.window, a.head_dim, a.kv_heads),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(attn, [(Window::Sliding(8), 16, 2), (Window::Full, 48, 1)]);
    let other = cfg.replace("\"num_key_value_heads\": 1", "\"intermediate_size\": 9");
    let err = vram_model::hf::parse_config(&other, "x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("per_layer_config.1.intermediate_size"),
        "{err}"
    );
}

/// Nemotron-H's latent MoE projections are `nn.Linear(..., bias=config.mlp_bias)`
/// (modeling_nemotron_h.py `NemotronHMoE`, transformers 5.24): with `mlp_bias` each MoE layer
/// gains the two projections' biases (latent + hidden) in `routed_experts`, on top of the
/// shared expert's own biases. Checked on the real Nemotron-3-Super config of the zoo.
#[test]
fn nemotron_h_latent_projections_follow_mlp_bias() {
    use vram_model::arch::Model;
    use vram_model::blocks::Component;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/zoo/configs/nemotron-3-super-120b-a12b-fp8.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let routed = |text: &str| {
        let Model::Transformer(t) = vram_model::hf::parse_config(text, "x").unwrap() else {
            unreachable!()
        };
        t.params_by_component().get(Component::RoutedExperts)
    };
    assert!(text.contains("\"mlp_bias\": false") && text.contains("\"moe_latent_size\": 1024"));
    let biased = text.replace("\"mlp_bias\": false", "\"mlp_bias\": true");
    let key = "\"hybrid_override_pattern\": \"";
    let pattern = &text[text.find(key).unwrap() + key.len()..];
    let moe_layers = pattern[..pattern.find('"').unwrap()]
        .chars()
        .filter(|&c| c == 'E')
        .count() as u64;
    assert_eq!(moe_layers, 40);
    assert_eq!(routed(&biased) - routed(&text), moe_layers * (1024 + 4096));
}

/// Granite 3.x dense (`model_type: granite`, transformers 5.24.0 `modeling_granite.py`): the
/// releases' shapes read exactly, and the config keys that change shapes. The counts are
/// `sum(p.numel())` of `GraniteForCausalLM` built on the meta device by transformers 5.24.0
/// (tests/zoo/expected.json for the two configs; the variant below built the same way with
/// `attention_bias`, `mlp_bias` true and `tie_word_embeddings` false: 2,635,143,168).
#[test]
fn granite_dense_counts_match_transformers() {
    use vram_model::arch::Model;
    let read = |text: &str| match vram_model::hf::parse_config(text, "granite").unwrap() {
        Model::Transformer(t) => t.param_count(),
        _ => unreachable!(),
    };
    let zoo = |name: &str| {
        let path = format!(
            "{}/../../tests/zoo/configs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    };
    let two = zoo("granite-3.1-2b-instruct");
    assert_eq!(read(&two), 2_533_531_648);
    assert_eq!(read(&zoo("granite-3.1-8b-instruct")), 8_170_848_256);
    // The multipliers scale activations only: changing them changes no count.
    let scaled = two.replace("\"logits_scaling\": 8.0", "\"logits_scaling\": 1.0");
    assert_ne!(scaled, two);
    assert_eq!(read(&scaled), 2_533_531_648);
    let variant = two
        .replace("\"attention_bias\": false", "\"attention_bias\": true")
        .replace("\"mlp_bias\": false", "\"mlp_bias\": true")
        .replace(
            "\"tie_word_embeddings\": true",
            "\"tie_word_embeddings\": false",
        );
    // 40 layers x (q 2,048 + k 512 + v 512 + o 2,048 biases, gate/up 2 x 8,192 + down 2,048
    // biases) + an untied 49,155 x 2,048 head.
    assert_eq!(
        read(&variant) - read(&two),
        40 * (5_120 + 18_432) + 49_155 * 2_048
    );
    assert_eq!(read(&variant), 2_635_143_168);
}
