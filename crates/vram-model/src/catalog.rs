//! Built-in models: the `config.json` of each catalog id, read by the same parser as user files.
//!
//! The 2019–2024 configs (`CONFIGS`) carry the fields of the published Hugging Face configs
//! that decide memory (sizes, heads, tying, biases, dropout), and the rotary base and scaling
//! that `--emit megatron` writes; token ids are left out. The current families (`FILES`) are
//! real `config.json` files kept byte-for-byte under `data/catalog/` (sources in
//! `data/catalog/SOURCES.md`).

use crate::describe::{Model, ResNet};
use crate::error::{Error, Result};
use crate::read;

/// `(id, config.json text)` for every built-in transformer.
const CONFIGS: &[(&str, &str)] = &[
    (
        "gpt2",
        r#"{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,"n_layer":12,"n_head":12}"#,
    ),
    (
        "gpt2-medium",
        r#"{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":1024,"n_layer":24,"n_head":16}"#,
    ),
    (
        "gpt2-large",
        r#"{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":1280,"n_layer":36,"n_head":20}"#,
    ),
    (
        "gpt2-xl",
        r#"{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":1600,"n_layer":48,"n_head":25}"#,
    ),
    (
        "bert-base-uncased",
        r#"{"model_type":"bert","vocab_size":30522,"hidden_size":768,"num_hidden_layers":12,"num_attention_heads":12,"intermediate_size":3072,"max_position_embeddings":512,"type_vocab_size":2,"hidden_dropout_prob":0.1,"attention_probs_dropout_prob":0.1}"#,
    ),
    (
        "bert-large-uncased",
        r#"{"model_type":"bert","vocab_size":30522,"hidden_size":1024,"num_hidden_layers":24,"num_attention_heads":16,"intermediate_size":4096,"max_position_embeddings":512,"type_vocab_size":2,"hidden_dropout_prob":0.1,"attention_probs_dropout_prob":0.1}"#,
    ),
    (
        "roberta-base",
        r#"{"model_type":"roberta","vocab_size":50265,"hidden_size":768,"num_hidden_layers":12,"num_attention_heads":12,"intermediate_size":3072,"max_position_embeddings":514,"type_vocab_size":1,"hidden_dropout_prob":0.1,"attention_probs_dropout_prob":0.1}"#,
    ),
    (
        "t5-base",
        r#"{"model_type":"t5","vocab_size":32128,"d_model":768,"d_kv":64,"d_ff":3072,"num_layers":12,"num_decoder_layers":12,"num_heads":12,"relative_attention_num_buckets":32,"dropout_rate":0.1,"feed_forward_proj":"relu","n_positions":512}"#,
    ),
    (
        "llama-2-7b",
        r#"{"model_type":"llama","vocab_size":32000,"hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"max_position_embeddings":4096,"tie_word_embeddings":false}"#,
    ),
    (
        "llama-2-13b",
        r#"{"model_type":"llama","vocab_size":32000,"hidden_size":5120,"intermediate_size":13824,"num_hidden_layers":40,"num_attention_heads":40,"num_key_value_heads":40,"max_position_embeddings":4096,"tie_word_embeddings":false}"#,
    ),
    (
        "llama-2-70b",
        r#"{"model_type":"llama","vocab_size":32000,"hidden_size":8192,"intermediate_size":28672,"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,"max_position_embeddings":4096,"tie_word_embeddings":false}"#,
    ),
    (
        "llama-3-8b",
        r#"{"model_type":"llama","vocab_size":128256,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"max_position_embeddings":8192,"rope_theta":500000.0,"tie_word_embeddings":false}"#,
    ),
    (
        "llama-3-70b",
        r#"{"model_type":"llama","vocab_size":128256,"hidden_size":8192,"intermediate_size":28672,"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,"max_position_embeddings":8192,"rope_theta":500000.0,"tie_word_embeddings":false}"#,
    ),
    (
        "llama-3.1-405b",
        r#"{"model_type":"llama","vocab_size":128256,"hidden_size":16384,"intermediate_size":53248,"num_hidden_layers":126,"num_attention_heads":128,"num_key_value_heads":8,"max_position_embeddings":131072,"rope_theta":500000.0,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":false}"#,
    ),
    (
        "mistral-7b",
        r#"{"model_type":"mistral","vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"max_position_embeddings":32768,"sliding_window":4096,"tie_word_embeddings":false}"#,
    ),
    (
        "mixtral-8x7b",
        r#"{"model_type":"mixtral","vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"max_position_embeddings":32768,"num_local_experts":8,"num_experts_per_tok":2,"tie_word_embeddings":false}"#,
    ),
    (
        "qwen2-7b",
        r#"{"model_type":"qwen2","vocab_size":152064,"hidden_size":3584,"intermediate_size":18944,"num_hidden_layers":28,"num_attention_heads":28,"num_key_value_heads":4,"max_position_embeddings":131072,"rope_theta":1000000.0,"tie_word_embeddings":false}"#,
    ),
    (
        "qwen2-72b",
        r#"{"model_type":"qwen2","vocab_size":152064,"hidden_size":8192,"intermediate_size":29568,"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,"max_position_embeddings":131072,"rope_theta":1000000.0,"rope_theta":500000.0,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":false}"#,
    ),
    (
        "gemma-7b",
        r#"{"model_type":"gemma","vocab_size":256000,"hidden_size":3072,"intermediate_size":24576,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":16,"head_dim":256,"max_position_embeddings":8192}"#,
    ),
    (
        "gemma-2-9b",
        r#"{"model_type":"gemma2","vocab_size":256000,"hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"max_position_embeddings":8192}"#,
    ),
    (
        "phi-3-mini",
        r#"{"model_type":"phi3","vocab_size":32064,"hidden_size":3072,"intermediate_size":8192,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"max_position_embeddings":4096,"resid_pdrop":0.0,"tie_word_embeddings":false}"#,
    ),
    (
        "falcon-7b",
        r#"{"model_type":"falcon","vocab_size":65024,"hidden_size":4544,"num_hidden_layers":32,"num_attention_heads":71,"multi_query":true,"parallel_attn":true,"bias":false,"new_decoder_architecture":false,"alibi":false}"#,
    ),
    (
        "pythia-1.4b",
        r#"{"model_type":"gpt_neox","vocab_size":50304,"hidden_size":2048,"intermediate_size":8192,"num_hidden_layers":24,"num_attention_heads":16,"max_position_embeddings":2048,"use_parallel_residual":true,"tie_word_embeddings":false}"#,
    ),
];

/// `(id, config.json text)` of the current families' common sizes: real files, see
/// `data/catalog/SOURCES.md`.
const FILES: &[(&str, &str)] = &[
    (
        "qwen3-0.6b",
        include_str!("../data/catalog/qwen3-0.6b.json"),
    ),
    (
        "qwen3-1.7b",
        include_str!("../data/catalog/qwen3-1.7b.json"),
    ),
    ("qwen3-8b", include_str!("../data/catalog/qwen3-8b.json")),
    ("qwen3-32b", include_str!("../data/catalog/qwen3-32b.json")),
    (
        "qwen3-30b-a3b",
        include_str!("../data/catalog/qwen3-30b-a3b.json"),
    ),
    (
        "qwen3-30b-a3b-2507",
        include_str!("../data/catalog/qwen3-30b-a3b-2507.json"),
    ),
    (
        "qwen3-235b-a22b",
        include_str!("../data/catalog/qwen3-235b-a22b.json"),
    ),
    (
        "qwen3-coder-480b-a35b",
        include_str!("../data/catalog/qwen3-coder-480b-a35b.json"),
    ),
    (
        "qwen3.5-27b",
        include_str!("../data/catalog/qwen3.5-27b.json"),
    ),
    (
        "qwen3.5-35b-a3b",
        include_str!("../data/catalog/qwen3.5-35b-a3b.json"),
    ),
    (
        "qwen3.5-122b-a10b",
        include_str!("../data/catalog/qwen3.5-122b-a10b.json"),
    ),
    (
        "qwen3.5-397b-a17b",
        include_str!("../data/catalog/qwen3.5-397b-a17b.json"),
    ),
    (
        "qwen2-vl-2b",
        include_str!("../data/catalog/qwen2-vl-2b.json"),
    ),
    (
        "qwen2.5-vl-7b",
        include_str!("../data/catalog/qwen2.5-vl-7b.json"),
    ),
    (
        "qwen3-vl-8b",
        include_str!("../data/catalog/qwen3-vl-8b.json"),
    ),
    (
        "qwen3-vl-30b-a3b",
        include_str!("../data/catalog/qwen3-vl-30b-a3b.json"),
    ),
    (
        "qwen3-next-80b-a3b",
        include_str!("../data/catalog/qwen3-next-80b-a3b.json"),
    ),
    (
        "deepseek-v3",
        include_str!("../data/catalog/deepseek-v3.json"),
    ),
    (
        "deepseek-r1",
        include_str!("../data/catalog/deepseek-r1.json"),
    ),
    (
        "deepseek-v3.2",
        include_str!("../data/catalog/deepseek-v3.2.json"),
    ),
    ("kimi-k2", include_str!("../data/catalog/kimi-k2.json")),
    ("glm-5", include_str!("../data/catalog/glm-5.json")),
    (
        "gpt-oss-20b",
        include_str!("../data/catalog/gpt-oss-20b.json"),
    ),
    (
        "gpt-oss-120b",
        include_str!("../data/catalog/gpt-oss-120b.json"),
    ),
    (
        "llama-3.1-8b",
        include_str!("../data/catalog/llama-3.1-8b.json"),
    ),
    (
        "llama-3.1-70b",
        include_str!("../data/catalog/llama-3.1-70b.json"),
    ),
    (
        "llama-4-scout",
        include_str!("../data/catalog/llama-4-scout.json"),
    ),
    (
        "llama-4-maverick",
        include_str!("../data/catalog/llama-4-maverick.json"),
    ),
    (
        "gemma-3-1b",
        include_str!("../data/catalog/gemma-3-1b.json"),
    ),
    (
        "gemma-4-26b-a4b",
        include_str!("../data/catalog/gemma-4-26b-a4b.json"),
    ),
    (
        "mixtral-8x22b",
        include_str!("../data/catalog/mixtral-8x22b.json"),
    ),
    (
        "minimax-m2.5",
        include_str!("../data/catalog/minimax-m2.5.json"),
    ),
    (
        "nemotron-3-nano-30b-a3b",
        include_str!("../data/catalog/nemotron-3-nano-30b-a3b.json"),
    ),
    (
        "nemotron-3-super-120b-a12b-fp8",
        include_str!("../data/catalog/nemotron-3-super-120b-a12b-fp8.json"),
    ),
    (
        "nemotron-h-56b",
        include_str!("../data/catalog/nemotron-h-56b.json"),
    ),
    ("mimo-7b", include_str!("../data/catalog/mimo-7b.json")),
    (
        "smollm3-3b",
        include_str!("../data/catalog/smollm3-3b.json"),
    ),
];

/// ResNet catalog ids and their depths.
const RESNETS: &[(&str, u64)] = &[
    ("resnet-18", 18),
    ("resnet-34", 34),
    ("resnet-50", 50),
    ("resnet-101", 101),
    ("resnet-152", 152),
];

/// `(id, preprocessor_config.json, video_preprocessor_config.json)` of the catalog's
/// vision-language checkpoints whose processor files replace the processor classes' defaults:
/// the fields that decide how large an image or a video becomes (`size`, or Qwen2-VL's
/// `min_pixels`/`max_pixels`), as Qwen ships them for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and
/// Qwen3.5 (`data/catalog/SOURCES.md`, "Processor sizes"). Qwen2-VL and Qwen2.5-VL ship no video
/// processor file (their video frames are sized like images). A model not listed keeps its
/// processor class's defaults.
const PROCESSORS: &[(&str, &str, Option<&str>)] = &[
    (
        "qwen2-vl-2b",
        r#"{"min_pixels":3136,"max_pixels":12845056,"patch_size":14,"temporal_patch_size":2,"merge_size":2}"#,
        None,
    ),
    (
        "qwen2.5-vl-7b",
        r#"{"min_pixels":3136,"max_pixels":12845056,"patch_size":14,"temporal_patch_size":2,"merge_size":2}"#,
        None,
    ),
    (
        "qwen3-vl-30b-a3b",
        r#"{"size":{"longest_edge":16777216,"shortest_edge":65536},"patch_size":16,"temporal_patch_size":2,"merge_size":2}"#,
        Some(
            r#"{"size":{"longest_edge":25165824,"shortest_edge":4096},"patch_size":16,"temporal_patch_size":2,"merge_size":2}"#,
        ),
    ),
    (
        "qwen3.5-27b",
        r#"{"size":{"longest_edge":16777216,"shortest_edge":65536},"patch_size":16,"temporal_patch_size":2,"merge_size":2}"#,
        Some(
            r#"{"size":{"longest_edge":25165824,"shortest_edge":4096},"patch_size":16,"temporal_patch_size":2,"merge_size":2}"#,
        ),
    ),
];

/// Every catalog id, in display order.
pub fn ids() -> impl Iterator<Item = &'static str> {
    CONFIGS
        .iter()
        .chain(FILES)
        .map(|(id, _)| *id)
        .chain(RESNETS.iter().map(|(id, _)| *id))
}

/// The built-in `config.json` text of a transformer id, if there is one.
pub fn config_text(id: &str) -> Option<&'static str> {
    CONFIGS
        .iter()
        .chain(FILES)
        .find(|(i, _)| *i == id)
        .map(|(_, c)| *c)
}

/// Looks up a catalog id (case-insensitive; `resnet50` and `resnet-50` both work).
pub fn lookup(id: &str) -> Result<Model> {
    let lower = id.to_ascii_lowercase();
    if let Some(text) = config_text(&lower) {
        let mut model = read::parse_config(text, &lower)?;
        if let Some((_, image, video)) = PROCESSORS.iter().find(|(i, _, _)| *i == lower) {
            read::apply_preprocessor(&mut model, image)?;
            if let Some(video) = video {
                read::apply_video_preprocessor(&mut model, video)?;
            }
        }
        return Ok(model);
    }
    let dashed = lower.replacen("resnet", "resnet-", 1).replace("--", "-");
    if let Some((_, depth)) = RESNETS.iter().find(|(i, _)| *i == dashed) {
        return Ok(Model::ResNet(
            ResNet::torchvision(*depth).expect("catalog depths are torchvision's"),
        ));
    }
    Err(Error::Unknown {
        kind: "model",
        name: id.into(),
        known: ids().collect::<Vec<_>>().join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::describe::{VideoSize, VisionInput};

    fn smart_resize(id: &str) -> (u64, u64, VideoSize) {
        let Model::Transformer(t) = lookup(id).unwrap() else {
            unreachable!()
        };
        match t.blocks.vision.unwrap().input {
            VisionInput::SmartResize {
                min_pixels,
                max_pixels,
                video,
                ..
            } => (min_pixels, max_pixels, video),
            other => panic!("{other:?}"),
        }
    }

    /// The processor sizes Qwen ships replace the processor classes' defaults for the catalog
    /// ids listed in `PROCESSORS`; the others keep the defaults (Qwen2VLImageProcessor's
    /// 56·56 / 28·28·1280, Qwen3VLVideoProcessor's 32·32·768). Qwen2-VL's and Qwen2.5-VL's
    /// cards give 4 to 16,384 visual tokens per image: 4·28² to 16,384·28² pixels.
    #[test]
    fn processor_sizes_apply_to_the_listed_ids() {
        let clip = |max_pixels| VideoSize::Clip { max_pixels };
        assert_eq!(
            smart_resize("qwen3-vl-30b-a3b"),
            (65_536, 16_777_216, clip(25_165_824))
        );
        assert_eq!(
            smart_resize("qwen3.5-27b"),
            (65_536, 16_777_216, clip(25_165_824))
        );
        assert_eq!(
            smart_resize("qwen3-vl-8b"),
            (3_136, 1_003_520, clip(786_432))
        );
        for id in ["qwen2-vl-2b", "qwen2.5-vl-7b"] {
            assert_eq!(smart_resize(id), (4 * 784, 16_384 * 784, VideoSize::Frames));
        }
    }

    /// M-RoPE as the configs write it: Qwen2-VL's `rope_scaling` (type `mrope`), Qwen3.5's
    /// interleaved `rope_parameters`; a plain rotary model has none.
    #[test]
    fn mrope_is_read_from_the_rope_settings() {
        use crate::describe::MRope;
        let mrope = |id: &str| match lookup(id).unwrap() {
            Model::Transformer(t) => t.blocks.mrope,
            _ => unreachable!(),
        };
        assert_eq!(mrope("qwen2-vl-2b"), Some(MRope { interleaved: false }));
        assert_eq!(mrope("qwen3.5-27b"), Some(MRope { interleaved: true }));
        assert_eq!(mrope("qwen3-8b"), None);
        let bad = r#"{"model_type":"qwen2_vl","vocab_size":10,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"rope_scaling":{"mrope_section":[1,1,2],"mrope_interleaved":"yes"},"vision_config":{}}"#;
        let e = read::parse_config(bad, "bad").unwrap_err().to_string();
        assert!(e.contains("mrope_interleaved"), "{e}");
    }

    /// A video processor file with a bad size is one error; a model without a dynamic-resolution
    /// tower is left as it is.
    #[test]
    fn video_processor_sizes_are_checked() {
        let mut m = lookup("qwen3-vl-8b").unwrap();
        assert!(read::apply_video_preprocessor(&mut m, r#"{"size":{"longest_edge":0}}"#).is_err());
        assert!(read::apply_video_preprocessor(&mut m, "not json").is_err());
        let changed =
            read::apply_video_preprocessor(&mut m, r#"{"size":{"longest_edge":25165824}}"#)
                .unwrap();
        assert_eq!(
            changed,
            ["video longest_edge 25165824 (class default 786432)"]
        );
        let mut text = lookup("qwen3-8b").unwrap();
        let before = format!("{text:?}");
        assert!(
            read::apply_video_preprocessor(&mut text, r#"{"size":{"longest_edge":25165824}}"#)
                .unwrap()
                .is_empty()
        );
        assert_eq!(format!("{text:?}"), before);
    }
}
