//! Reading Hugging Face `config.json` files (and safetensors headers, [`safetensors`]) into the
//! one description ([`crate::describe`]).
//!
//! Each supported `model_type` is one row of a family table and one adapter function that
//! fills a draft (`decoders`'s `Draft`: the mechanisms of each layer and the model-wide facts)
//! from its field names (and their variants across releases: `n_embd`/`hidden_size`,
//! `n_head`/`num_attention_heads`, `multi_query`/`num_kv_heads`, ...), with the defaults of the
//! `transformers` config classes; one builder turns every draft into the description. The
//! 2019–2024 families' adapters are in `classic`, the current ones in `decoders`, the
//! structural-key rule that refuses what cannot be described in [`keys`]. This module and the
//! catalog are the only places that name a family: everything a family differs in reaches the
//! walks as a flag or a parameter of a mechanism.

use serde_json::{Map, Value};

use crate::describe::{Act, Dtype, Quant, Storage};
use crate::describe::{Model, Transformer};
use crate::error::{Error, Result};
use crate::finetune::WeightFormat;

pub(crate) mod classic;
pub(crate) mod decoders;
pub mod ignore;
pub mod keys;
mod rope;
pub mod safetensors;

/// The `model_type` values of the 2019–2024 families ([`classic`]'s adapters); the current
/// families are [`decoders::FAMILIES`], and any decoder with the standard keys is read as a
/// generic decoder.
const UNIFORM_MODEL_TYPES: &[&str] = &[
    "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2", "phi3",
    "falcon", "bert", "roberta", "t5",
];

/// Every `model_type` the reader knows by name (besides any decoder with the standard keys).
pub fn known_model_types() -> impl Iterator<Item = &'static str> {
    UNIFORM_MODEL_TYPES
        .iter()
        .chain(decoders::FAMILIES)
        .copied()
}

/// What transformers 5.24's config class of a `model_type` gives the fields an engine's
/// arguments need when `config.json` leaves them out ([`class_defaults`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassDefaults {
    /// `rope_theta`: 1e6 for `MixtralConfig`, 1e4 for the others (`LlamaConfig`,
    /// `MistralConfig`, `Qwen2Config`, `Phi3Config`, ... `default_theta`).
    pub rope_theta: f64,
    /// `hidden_act`: `gelu_pytorch_tanh` for `GemmaConfig`/`Gemma2Config`, `gelu` for
    /// `GPTNeoXConfig`, `silu` for `LlamaConfig` and most.
    pub hidden_act: &'static str,
    /// The norms' epsilon: 1e-6 for `LlamaConfig`, `MistralConfig`, `Qwen2Config`,
    /// `Qwen3Config`, `GemmaConfig`, `SmolLM3Config`, `T5Config`; 1e-5 for `MixtralConfig`,
    /// `Phi3Config`, `GPT2Config`, `GPTNeoXConfig`, `FalconConfig`, `Olmo2Config`; 1e-12 for
    /// BERT's and RoBERTa's; `None` for another model type.
    pub norm_eps: Option<f64>,
}

/// The defaults of the config class of `model_type` (see [`ClassDefaults`]).
pub fn class_defaults(model_type: &str) -> ClassDefaults {
    ClassDefaults {
        rope_theta: if model_type == "mixtral" { 1e6 } else { 1e4 },
        hidden_act: match model_type {
            "gemma" | "gemma2" => "gelu_pytorch_tanh",
            "gpt_neox" => "gelu",
            _ => "silu",
        },
        norm_eps: match model_type {
            "llama" | "mistral" | "qwen2" | "qwen3" | "qwen3_moe" | "gemma" | "gemma2"
            | "smollm3" | "t5" => Some(1e-6),
            "mixtral" | "phi3" | "gpt2" | "gpt_neox" | "falcon" | "olmo2" => Some(1e-5),
            "bert" | "roberta" => Some(1e-12),
            _ => None,
        },
    }
}

/// Whether a model type's `max_position_embeddings` already counts its rope scaling, so that
/// vLLM derives no longer `max_model_len` from the scaling factor (Gemma 3: vLLM's
/// `_get_and_verify_max_len` skips model types containing `gemma3`).
pub fn positions_include_rope_scaling(model_type: &str) -> bool {
    model_type.contains("gemma3")
}

/// Whether vLLM registers a config hook for this model type (`MODELS_CONFIG_MAP`, keyed by
/// architecture) that raises the CUDA-graph capture sizes whatever `max_num_seqs` is: gpt-oss's
/// `GptOssForCausalLMConfig` (0.10.1 onward). The sizes themselves are the engine's, in
/// `vram_plan::capacity`.
pub fn vllm_raises_capture_sizes(model_type: &str) -> bool {
    model_type == "gpt_oss"
}

/// The causal-LM class transformers builds for a `model_type`, where a config names no
/// `architectures` (the catalog's short configs): `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`
/// (`transformers/models/auto/modeling_auto.py`, transformers 5.24.0), for the types whose class
/// an engine's per-architecture table names (vLLM's V2-runner defaults, 0.22-0.26).
pub fn causal_lm_class(model_type: &str) -> Option<&'static str> {
    match model_type {
        "llama" => Some("LlamaForCausalLM"),
        "mistral" => Some("MistralForCausalLM"),
        "qwen3" => Some("Qwen3ForCausalLM"),
        "deepseek_v2" => Some("DeepseekV2ForCausalLM"),
        "qwen2_moe" => Some("Qwen2MoeForCausalLM"),
        "granitemoe" => Some("GraniteMoeForCausalLM"),
        _ => None,
    }
}

/// The first vLLM release whose `is_mm_prefix_lm` lists this model type, so that its image
/// tokens attend to each other both ways and the attention selector refuses every backend that
/// cannot mask so (`AttentionBackend.validate_configuration`: "partial multimodal token full
/// attention not supported"). Read in the releases' sources (PyPI sdists): none at 0.12.0;
/// `config/model.py` lists `gemma3` at 0.13.0, adds `paligemma` at 0.14.0, `molmo2` at 0.16.0
/// (0.15 has no sdist) and `bagel` at 0.18.0; from 0.20.0 the list moves to
/// `transformers_utils/model_arch_config_convertor.py`, adding `umm` at 0.20.0 and `moondream3`
/// at 0.21.0, the same at 0.22.1 and 0.23.0. A config's own `is_mm_prefix_lm` (taken before the
/// list from 0.17, [`config_mm_prefix_lm`]) and Gemma 4's `use_bidirectional_attention: "vision"`
/// (what decides for `gemma4` from 0.20, [`bidirectional_vision`] at
/// [`vllm_mm_prefix_lm_from_bidirectional_since`]) are read beside it. Which
/// backend that leaves is the engine's, in `vram_plan::capacity`.
pub fn vllm_mm_prefix_lm_since(model_type: &str) -> Option<[u32; 3]> {
    match model_type {
        "gemma3" => Some([0, 13, 0]),
        "paligemma" => Some([0, 14, 0]),
        "molmo2" => Some([0, 16, 0]),
        "bagel" => Some([0, 18, 0]),
        "umm" => Some([0, 20, 0]),
        "moondream3" => Some([0, 21, 0]),
        _ => None,
    }
}

/// The first vLLM release whose model config answers `is_mm_prefix_lm` for this model type from
/// its text config's `use_bidirectional_attention` alone ([`bidirectional_vision`]), before the
/// config's own key and the list of [`vllm_mm_prefix_lm_since`]: `gemma4`, whose
/// `Gemma4ModelArchConfigConvertor` (`transformers_utils/model_arch_config_convertor.py`, keyed
/// by the config's `model_type`) is present at 0.20.0, 0.20.2, 0.21.0 and 0.22.1 and absent
/// before 0.20 (Gemma 4's first release). Which answer that gives is the engine's, in
/// `vram_plan::capacity`.
pub fn vllm_mm_prefix_lm_from_bidirectional_since(model_type: &str) -> Option<[u32; 3]> {
    (model_type == "gemma4").then_some([0, 20, 0])
}

/// The first vLLM release that runs every attention layer of this model type on Triton
/// attention when its layers' head sizes differ and the largest is above FlashAttention's 256:
/// Gemma 4's `Gemma4Config.verify_and_update_config` (`model_executor/models/config.py`, for
/// `Gemma4ForCausalLM` and `Gemma4ForConditionalGeneration`; present at 0.20.0, 0.20.2, 0.21.0,
/// 0.22.1 and 0.23.0, absent at 0.18.1 and 0.19.1), unless the user chose a backend. The head
/// sizes and the backend's memory are the engine's, in `vram_plan::capacity`.
pub fn vllm_unifies_mixed_head_sizes_since(model_type: &str) -> Option<[u32; 3]> {
    matches!(model_type, "gemma4" | "gemma4_text").then_some([0, 20, 0])
}

/// Whether vLLM runs this model type's MLP through `models/llama.py`'s `LlamaMLP`, which rebinds
/// its one local (`x, _ = self.gate_up_proj(x); x = self.act_fn(x)`) so `gate_up` is freed
/// before `down_proj` (v0.7.2 to v0.11.0): `LlamaForCausalLM`, `MistralForCausalLM`, and
/// Phi-3, which subclasses it. Other MLPs (Qwen2/Qwen3, Gemma 2/3, Granite, DeepSeek-V2) keep
/// `gate_up` bound. The live set itself is the engine's, in `vram_plan::capacity`.
pub fn vllm_mlp_frees_gate_up(model_type: &str) -> bool {
    matches!(model_type, "llama" | "mistral" | "phi3")
}

/// Whether vLLM builds this model type's vision and audio towers as transformers' own modules
/// (`AutoModel.from_config`) whose `nn.Linear`s become `ReplicatedLinear`s
/// (`transformers/utils.py`'s `recursive_replace_linear`, style "replicate"), so every GPU of a
/// TP group holds the whole towers: Gemma 4's `Gemma4ForConditionalGeneration`
/// (`models/gemma4_mm.py`, read at vllm-project/vllm 01bae219). The split itself is the
/// engine's, in `vram_plan::capacity`.
pub fn vllm_replicates_towers(model_type: &str) -> bool {
    model_type == "gemma4"
}

/// Whether SGLang builds this model type's vision-tower MLP from plain `nn.Linear`s, whole on
/// every GPU of a TP group, while it splits the tower's attention: Kimi-K2.5's MoonViT
/// (`models/kimi_k25.py` at SGLang 0.5.9, its first release with the model: `MoonViTEncoderLayer`
/// takes `MLP2` from `models/kimi_vl_moonvit.py`, two `nn.Linear`s, beside a `VisionAttention`
/// with `use_qkv_parallel=True`). The split itself is the engine's, in `vram_plan::capacity`.
pub fn sglang_replicates_tower_mlp(model_type: &str) -> bool {
    model_type == "kimi_k25"
}

/// The standard decoder keys that let an unknown `model_type` be read as a generic decoder.
const STANDARD_DECODER_KEYS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
];

/// Largest size accepted for any dimension; anything above is a typo or corrupt file.
const MAX_DIM: u64 = 1 << 24;

/// A JSON file that starts with a UTF-8 byte-order mark is refused by name: transformers reads
/// config.json and the processor configs with `open(path, encoding="utf-8")` and `json.loads`
/// (`PreTrainedConfig._dict_from_json_file`, `ImageProcessingMixin` likewise), which raises
/// "Unexpected UTF-8 BOM", so the model does not load as it is; serde_json's own words
/// ("expected value at line 1 column 1") do not say why.
fn refuse_bom(text: &str, what: &str) -> Result<()> {
    if text.starts_with('\u{feff}') {
        return Err(Error::Json {
            what: what.into(),
            reason: "it starts with a UTF-8 byte-order mark, which transformers' json.loads \
                     refuses too (\"Unexpected UTF-8 BOM\"); save it without one"
                .into(),
        });
    }
    Ok(())
}

/// Most layers a model's stacks may have together. The deepest Transformer reported trained is
/// DeepNet's, 1,000 layers (500 encoder and 500 decoder layers, "2,500 attention and
/// feed-forward network sublayers": Wang et al. 2022, arXiv:2203.00555); released decoders stop
/// near 128 (Llama 3.1 405B: 126; the deepest config in vram's zoo and catalog has 128). Every
/// walk visits each layer (the allocator replay places each layer's tensors, several replays an
/// answer, and `vram trace` writes each one), so a count far past any model only costs time:
/// 2^20 layers ran for minutes, and a 4,096-layer trace wrote 405 MB. 1,024 holds DeepNet.
pub const MAX_LAYERS: u64 = 1 << 10;

/// The config keys a layer count is read from, in the order [`parse_config`] names them when
/// the count passes [`MAX_LAYERS`] (in `text_config` first for a multimodal wrapper).
const LAYER_KEYS: &[&str] = &[
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_decoder_layers",
    "hybrid_override_pattern",
    "layers_block_type",
    "layer_types",
];

/// [`MAX_LAYERS`], before anything is read (a reader builds each layer: 2^24 of them took 32 s
/// and 6 GiB to read): the first of [`LAYER_KEYS`] in the config (`text_config` first) whose
/// count passes it, refused in one line naming the key; a pattern's or a list's length counts.
fn refuse_deep(map: &Map<String, Value>) -> Result<()> {
    match deep_key(map) {
        Some((field, n)) => Err(too_deep(field, n)),
        None => Ok(()),
    }
}

/// [`MAX_LAYERS`] for a read model, whatever key its count came from ([`refuse_deep`] names the
/// known ones before reading).
fn check_layers(t: &Transformer) -> Result<()> {
    match t.layers() {
        n if n > MAX_LAYERS => Err(too_deep("the layer count".into(), n)),
        _ => Ok(()),
    }
}

fn too_deep(field: String, n: u64) -> Error {
    Error::OutOfRange {
        field,
        value: n.to_string(),
        why: format!(
            "more than {MAX_LAYERS} layers; the deepest Transformer trained has 1,000 (DeepNet, arXiv:2203.00555) and released models stop near 128"
        ),
    }
}

/// The first of [`LAYER_KEYS`] whose count passes [`MAX_LAYERS`], with the count.
fn deep_key(map: &Map<String, Value>) -> Option<(String, u64)> {
    let text = match map.get("text_config") {
        Some(Value::Object(m)) => Some(m),
        _ => None,
    };
    let count = |v: &Value| match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => Some(s.chars().count() as u64),
        Value::Array(a) => Some(a.len() as u64),
        _ => None,
    };
    text.into_iter().chain([map]).find_map(|m| {
        LAYER_KEYS.iter().find_map(|k| {
            let n = count(m.get(*k)?)?;
            (n > MAX_LAYERS).then(|| (k.to_string(), n))
        })
    })
}

/// Parses the text of a `config.json`.
///
/// `name` is used for display (the catalog id or the file's folder name).
///
/// ```
/// let cfg = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
///               "vocab_size": 50257, "n_positions": 1024}"#;
/// let model = vram_model::hf::parse_config(cfg, "gpt2").unwrap();
/// assert_eq!(model.param_count(), 124_439_808);
/// ```
pub fn parse_config(text: &str, name: &str) -> Result<Model> {
    if text.trim().is_empty() {
        return Err(Error::Json {
            what: "config.json".into(),
            reason: "the file is empty".into(),
        });
    }
    refuse_bom(text, "config.json")?;
    let cleaned = non_finite_to_json(text);
    let value: Value = serde_json::from_str(&cleaned).map_err(|e| Error::Json {
        what: "config.json".into(),
        reason: e.to_string(),
    })?;
    let Value::Object(map) = value else {
        return Err(Error::WrongType {
            field: "(top level)".into(),
            expected: "an object",
            found: kind_of(&value).into(),
        });
    };
    let model_type = match map.get("model_type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Error::WrongType {
                field: "model_type".into(),
                expected: "a string",
                found: kind_of(other).into(),
            })
        }
        None => return Err(Error::UnknownModelType("(missing)".into())),
    };
    let c = Cfg {
        map: &map,
        model_type: &model_type,
    };
    refuse_deep(&map)?;
    let classic = match model_type.as_str() {
        "gpt2" => Some(classic::gpt2(&c)?),
        "gpt_neox" => Some(classic::gpt_neox(&c)?),
        "llama" | "mistral" | "mixtral" | "qwen2" | "gemma" | "gemma2" | "phi3" => {
            Some(classic::llama_like(&c)?)
        }
        "falcon" | "RefinedWeb" | "RefinedWebModel" => Some(classic::falcon(&c)?),
        "bert" | "roberta" => Some(classic::bert(&c)?),
        "t5" => Some(classic::t5(&c)?),
        _ => None,
    };
    let mut t = match classic {
        Some(d) => decoders::build(d)?,
        None => {
            // Multimodal wrappers keep the decoder's keys in `text_config`.
            let text_map = match map.get("text_config") {
                Some(Value::Object(m)) => Some(m),
                None | Some(Value::Null) => None,
                Some(other) => {
                    return Err(Error::WrongType {
                        field: "text_config".into(),
                        expected: "an object",
                        found: kind_of(other).into(),
                    })
                }
            };
            let text = Cfg {
                map: text_map.unwrap_or(&map),
                model_type: &model_type,
            };
            let text_type = match text.map.get("model_type") {
                Some(Value::String(s)) if text_map.is_some() => Some(s.as_str()),
                _ => None,
            };
            if decoders::FAMILIES.contains(&model_type.as_str()) {
                decoders::read(&text, &c)?
            } else if let Some(inner) = text_type.filter(|t| decoders::FAMILIES.contains(t)) {
                // A multimodal wrapper around a decoder this reader models (Kimi-K2.5:
                // `kimi_k25` around `kimi_k2`; transformers 5.24 has `kimi_k25` natively,
                // `Kimi_K25ForConditionalGeneration` with a `deepseek_v3` decoder, its `kimi_k2`
                // text_config renamed). `decoders::read` adds the vision tower of a wrapper it
                // knows (`decoders::vision`: Kimi-K2.5's MoonViT); any other wrapper's towers
                // are not counted, said so.
                let wrapped = Cfg {
                    map: text.map,
                    model_type: inner,
                };
                let mut t = decoders::read(&wrapped, &c)?;
                if t.blocks.vision.is_none() {
                    t.blocks.vision_unmodelled = c.map.contains_key("vision_config");
                    t.blocks.notes.push(format!(
                        "vram does not model the wrapper `{model_type}`: only its text_config (`{inner}`) is read, so any vision or audio tower is not counted"
                    ));
                }
                t
            } else {
                keys::refuse_not_described(&model_type)?;
                let missing: Vec<&str> = STANDARD_DECODER_KEYS
                    .iter()
                    .copied()
                    .filter(|k| text.find(&[k]).is_none())
                    .collect();
                match missing.first() {
                    // Read as a generic decoder only when it reads every structural key (a
                    // multimodal wrapper's tower keys included: its tower would be lost).
                    None => {
                        decoders::refuse_family_keys(&text)?;
                        keys::check_generic(&text, &c)?;
                        decoders::generic(&text)?
                    }
                    // A decoder's config (most standard keys there) that a generic decoder
                    // cannot read: the key that stops it is named, a structural key first
                    // (Nemotron-NAS: `block_configs`, with `intermediate_size: null`).
                    Some(&key) if missing.len() <= 2 => {
                        decoders::refuse_family_keys(&text)?;
                        keys::check_generic(&text, &c)?;
                        return Err(Error::MissingField {
                            field: key.into(),
                            model_type: model_type.clone(),
                        });
                    }
                    Some(_) => return Err(Error::UnknownModelType(model_type.clone())),
                }
            }
        }
    };
    check_layers(&t)?;
    t.blocks.storage = storage(&c)?;
    if let Some(note) = quant_lookup_note(&map) {
        t.blocks.notes.push(note);
    }
    if let (Quant::Packed { .. }, Some(qc)) = (t.blocks.storage.quant, compressed_tensors(&c)) {
        let (ignored, notes) = ignore::read(qc, &t.blocks)?;
        t.blocks.storage.ignored = ignored;
        t.blocks.notes.extend(notes);
    }
    let text_map = match map.get("text_config") {
        Some(Value::Object(m)) => m,
        _ => &map,
    };
    t.blocks.rope_tables = rope::rope_tables(
        &Cfg {
            map: text_map,
            model_type: match text_map.get("model_type") {
                Some(Value::String(s)) if !std::ptr::eq(text_map, &map) => s,
                _ => &model_type,
            },
        },
        t.blocks.max_positions,
    )?;
    if t.blocks.storage.quant == Quant::Other {
        let method = match quantization_config(&map, QuantLookup::Transformers).map(|f| f.value) {
            Some(Value::Object(q)) => q
                .get("quant_method")
                .and_then(Value::as_str)
                .unwrap_or("(none named)")
                .to_string(),
            _ => String::new(),
        };
        t.blocks.notes.push(format!(
            "quantization_config's method `{method}` is not modelled with these settings (read: fp8 block-wise, mxfp4, bitsandbytes 4/8-bit, gptq and awq at 4 bits, compressed-tensors W4A16): weights are counted in the config's dtype"
        ));
    }
    t.blocks.names.moe_conversion = decoders::peft_moe_conversion(&model_type);
    t.name = name.to_string();
    t.model_type = model_type;
    Ok(Model::Transformer(t))
}

/// Python's `json.dump` writes `Infinity`, `-Infinity` and `NaN` (Nemotron-H's
/// `time_step_limit: [0.0, Infinity]`); JSON has no such tokens. Outside strings they become
/// ±1e308 and null, which no size field accepts.
fn non_finite_to_json(text: &str) -> std::borrow::Cow<'_, str> {
    if !(text.contains("Infinity") || text.contains("NaN")) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_str, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(ch) = rest.chars().next() {
        if in_str {
            out.push(ch);
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_str = false;
            }
            rest = &rest[ch.len_utf8()..];
            continue;
        }
        let replaced = [
            ("-Infinity", "-1e308"),
            ("Infinity", "1e308"),
            ("NaN", "null"),
        ]
        .iter()
        .find(|(from, _)| rest.starts_with(from));
        if let Some((from, to)) = replaced {
            out.push_str(to);
            rest = &rest[from.len()..];
            continue;
        }
        if ch == '"' {
            in_str = true;
        }
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

struct Cfg<'a> {
    map: &'a Map<String, Value>,
    model_type: &'a str,
}

impl Cfg<'_> {
    /// The first of `names` present and not null.
    fn find<'n>(&self, names: &[&'n str]) -> Option<(&'n str, &Value)> {
        names.iter().find_map(|n| match self.map.get(*n) {
            None | Some(Value::Null) => None,
            Some(v) => Some((*n, v)),
        })
    }

    fn opt_u64(&self, names: &[&str]) -> Result<Option<u64>> {
        let Some((name, v)) = self.find(names) else {
            return Ok(None);
        };
        let bad = |found: String| Error::WrongType {
            field: name.into(),
            expected: "a positive integer",
            found,
        };
        let n = match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    u
                } else if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && *f > 0.0) {
                    f as u64
                } else {
                    return Err(Error::OutOfRange {
                        field: name.into(),
                        value: n.to_string(),
                        why: "must be a positive integer".into(),
                    });
                }
            }
            other => return Err(bad(kind_of(other).into())),
        };
        if n == 0 || n > MAX_DIM {
            return Err(Error::OutOfRange {
                field: name.into(),
                value: n.to_string(),
                why: format!("must be between 1 and {MAX_DIM}"),
            });
        }
        Ok(Some(n))
    }

    fn u64(&self, names: &[&str]) -> Result<u64> {
        self.opt_u64(names)?.ok_or_else(|| Error::MissingField {
            field: names[0].into(),
            model_type: self.model_type.into(),
        })
    }

    fn bool(&self, name: &str, default: bool) -> Result<bool> {
        match self.find(&[name]) {
            None => Ok(default),
            Some((_, Value::Bool(b))) => Ok(*b),
            Some((_, other)) => Err(Error::WrongType {
                field: name.into(),
                expected: "a boolean",
                found: kind_of(other).into(),
            }),
        }
    }

    fn prob(&self, names: &[&str], default: f64) -> Result<f64> {
        match self.find(names) {
            None => Ok(default),
            Some((name, Value::Number(n))) => {
                let p = n.as_f64().unwrap_or(-1.0);
                if (0.0..1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(Error::OutOfRange {
                        field: name.into(),
                        value: n.to_string(),
                        why: "must be in [0, 1)".into(),
                    })
                }
            }
            Some((name, other)) => Err(Error::WrongType {
                field: name.into(),
                expected: "a number",
                found: kind_of(other).into(),
            }),
        }
    }

    /// The activation named by the first present field of `names` (or `default`).
    fn act(&self, names: &[&str], default: &str) -> Result<Act> {
        let (field, name) = match self.find(names) {
            None => (names[0], default),
            Some((f, Value::String(s))) => (f, s.as_str()),
            Some((f, other)) => {
                return Err(Error::WrongType {
                    field: f.into(),
                    expected: "a string",
                    found: kind_of(other).into(),
                })
            }
        };
        activation(name).ok_or_else(|| Error::OutOfRange {
            field: field.into(),
            value: name.into(),
            why: "unknown activation (gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, quick_gelu, silu, swish, relu)".into(),
        })
    }

    fn str(&self, name: &str) -> Result<Option<&str>> {
        match self.find(&[name]) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((_, other)) => Err(Error::WrongType {
                field: name.into(),
                expected: "a string",
                found: kind_of(other).into(),
            }),
        }
    }
}

/// How `transformers`' `ACT2FN` implements an activation name.
fn activation(name: &str) -> Option<Act> {
    Some(match name {
        "gelu" | "gelu_python" | "gelu_pytorch_tanh" | "gelu_accurate" | "silu" | "swish"
        | "gelu_10" => Act::Fused,
        "relu" => Act::Relu,
        "gelu_new" | "gelu_fast" => Act::ComposedTanh,
        "quick_gelu" => Act::QuickGelu,
        _ => return None,
    })
}

/// Whose lookup of a config's quantization settings to follow: the estimate loads with
/// transformers, capacity with vLLM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantLookup {
    /// transformers 5.24 `quantizers/auto.py` `get_hf_quantizer`: `config.quantization_config`
    /// when truthy, else that of `config.get_text_config(decoder=True)` (the one sub-config
    /// named `decoder`, `generator` or `text_config`; several is an error there).
    Transformers,
    /// vLLM at a version (`None`: the newest modelled). 0.10.2 `ModelConfig._verify_quantization`
    /// / `_parse_quant_hf_config`, and 0.19.0 to 0.22.1
    /// `ModelArchConfigConvertor.get_quantization_config` / `_normalize_quantization_config`: the
    /// top level's `quantization_config`, else its `compression_config`, when not None; else the
    /// same two in `text_config`. 0.10.1.1 and earlier (0.6.4, 0.8.5, 0.9.2, 0.10.0 read) look at
    /// the top level only.
    Vllm(Option<[u32; 3]>),
    /// SGLang 0.4.6, 0.5.3 and 0.5.9 `ModelConfig._parse_quant_hf_config`: the top level's
    /// `quantization_config`, else its `compression_config` (else a modelopt
    /// `hf_quant_config.json` beside the config, which a config alone does not show); not
    /// `text_config`'s, except where the config class copies it up
    /// ([`CONFIG_CLASS_LIFTS_TEXT_QUANT`]).
    Sglang,
}

/// The `model_type`s whose config class copies `text_config.quantization_config` to the top
/// level when it is built (`if getattr(text_config, "quantization_config", None) is not None:
/// self.quantization_config = ...` in `__init__`), so that an engine reading the top level only
/// finds it. SGLang's own config classes (`python/sglang/srt/configs/`), the engine that reads
/// the top level only at the versions that know these types:
/// - `kimi_k25`: `KimiK25Config` (SGLang 0.5.9 `kimi_k25.py`; vLLM's `K2VLConfig` and
///   `kimi_k25.py` too; both adapted from the checkpoint's own `configuration_kimi_k25.py`);
/// - `kimi_k3`: `KimiK3Config` around a `KimiLinearConfig` (`kimi_k3.py` at SGLang
///   0d7ff71496fe);
/// - `glm5_next`: `Glm5NextConfig` (`glm5_next.py` at SGLang 16e1767c34e4).
///
/// vLLM's `Glm5vConfig` (`glm5v`, `transformers_utils/configs/glm5v.py` at 3b0277c3fd8c) copies
/// it up as well, but vLLM from 0.10.2 reads `text_config`'s anyway and no SGLang `glm5v` class
/// was found, so it is not listed. Searched: every `self.quantization_config =
/// [self.]text_config.quantization_config` in the index.
pub const CONFIG_CLASS_LIFTS_TEXT_QUANT: &[&str] = &["kimi_k25", "kimi_k3", "glm5_next"];

impl QuantLookup {
    /// Whether this lookup reads `text_config`'s `compression_config` and `quantization_config`
    /// when the top level has neither.
    pub fn falls_back_to_text_config(self) -> bool {
        match self {
            QuantLookup::Transformers => true,
            QuantLookup::Vllm(v) => v.is_none_or(|v| v >= [0, 10, 2]),
            QuantLookup::Sglang => false,
        }
    }
}

/// A config's quantization settings as one library finds them, and where they were found
/// (`quantization_config`, `text_config.quantization_config`, ...).
#[derive(Clone, Copy, Debug)]
pub struct QuantFound<'a> {
    /// The settings object (or whatever value the key holds).
    pub value: &'a Value,
    /// Where it was found, as a dotted key path.
    pub path: &'static str,
}

/// The one reader of where a config keeps its quantization settings ([`QuantLookup`]).
pub fn quantization_config(
    config: &Map<String, Value>,
    lookup: QuantLookup,
) -> Option<QuantFound<'_>> {
    let present = |m: &Map<String, Value>, key: &str| m.get(key).filter(|v| !v.is_null()).is_some();
    match lookup {
        QuantLookup::Transformers => {
            // Python truthiness: None and an empty dict fall through.
            let truthy = |v: &Value| !(v.is_null() || v.as_object().is_some_and(Map::is_empty));
            if let Some(v) = config.get("quantization_config").filter(|v| truthy(v)) {
                return Some(QuantFound {
                    value: v,
                    path: "quantization_config",
                });
            }
            let subs: Vec<&str> = ["decoder", "generator", "text_config"]
                .into_iter()
                .filter(|k| present(config, k))
                .collect();
            let [sub] = subs[..] else { return None };
            let v = config
                .get(sub)?
                .get("quantization_config")
                .filter(|v| !v.is_null())?;
            let path = match sub {
                "decoder" => "decoder.quantization_config",
                "generator" => "generator.quantization_config",
                _ => "text_config.quantization_config",
            };
            Some(QuantFound { value: v, path })
        }
        QuantLookup::Vllm(_) | QuantLookup::Sglang => {
            fn in_map(m: &Map<String, Value>) -> Option<(&Value, bool)> {
                if let Some(v) = m.get("quantization_config").filter(|v| !v.is_null()) {
                    return Some((v, false));
                }
                m.get("compression_config")
                    .filter(|v| !v.is_null())
                    .map(|v| (v, true))
            }
            if let Some((v, compression)) = in_map(config) {
                let path = if compression {
                    "compression_config"
                } else {
                    "quantization_config"
                };
                return Some(QuantFound { value: v, path });
            }
            let text = config.get("text_config")?.as_object()?;
            let (v, compression) = if lookup.falls_back_to_text_config() {
                in_map(text)?
            } else if config
                .get("model_type")
                .and_then(Value::as_str)
                .is_some_and(|m| CONFIG_CLASS_LIFTS_TEXT_QUANT.contains(&m))
            {
                // The config class has copied the text config's `quantization_config` up.
                (
                    text.get("quantization_config").filter(|v| !v.is_null())?,
                    false,
                )
            } else {
                return None;
            };
            let path = if compression {
                "text_config.compression_config"
            } else {
                "text_config.quantization_config"
            };
            Some(QuantFound { value: v, path })
        }
    }
}

/// What a reader should know of where the quantization settings were read: nothing when both
/// libraries read the top level's `quantization_config`; where, when that is elsewhere; and
/// both places when transformers and vLLM read different ones (the estimate counts
/// transformers', capacity's method is vLLM's).
fn quant_lookup_note(config: &Map<String, Value>) -> Option<String> {
    let hf = quantization_config(config, QuantLookup::Transformers);
    let vllm = quantization_config(config, QuantLookup::Vllm(None));
    let at = |f: Option<QuantFound>| f.map_or("none", |f| f.path);
    let same = match (hf, vllm) {
        (None, None) => return None,
        (Some(a), Some(b)) => std::ptr::eq(a.value, b.value),
        _ => false,
    };
    if same {
        let path = at(hf);
        return (path != "quantization_config").then(|| {
            format!("the quantization settings are read from `{path}` (the top level has none), where transformers 5.24 and vLLM 0.10.2+ both look")
        });
    }
    Some(format!(
        "transformers 5.24 reads the quantization settings from `{}`, vLLM from `{}`: the weights are counted as transformers loads them; vLLM's method is the one capacity uses",
        at(hf),
        at(vllm)
    ))
}

/// The config's quantization settings (transformers' lookup) where its method is
/// `compressed-tensors`.
fn compressed_tensors<'a>(c: &Cfg<'a>) -> Option<&'a Map<String, Value>> {
    let q = quantization_config(c.map, QuantLookup::Transformers)?
        .value
        .as_object()?;
    (q.get("quant_method")?.as_str()? == "compressed-tensors").then_some(q)
}

/// The weights as shipped: the config's `dtype` (`torch_dtype` in older files) and
/// `quantization_config`.
fn storage(c: &Cfg) -> Result<Storage> {
    // The top level's dtype, else the text config's (Qwen3.5, Qwen3-VL keep it there); absent,
    // from_pretrained takes the checkpoint's (modeling_utils.py `_get_dtype`): bf16 for every
    // current release.
    let text = match c.map.get("text_config") {
        Some(Value::Object(m)) => Some(Cfg {
            map: m,
            model_type: c.model_type,
        }),
        _ => None,
    };
    let mut name = c.str("dtype")?.or(c.str("torch_dtype")?);
    if name.is_none() {
        if let Some(t) = &text {
            name = t.str("dtype")?.or(t.str("torch_dtype")?);
        }
    }
    let dtype = match name {
        None | Some("bfloat16") | Some("auto") => Dtype::Bf16,
        Some("float16") | Some("half") => Dtype::F16,
        Some("float32") | Some("float") => Dtype::F32,
        Some(other) => {
            return Err(Error::OutOfRange {
                field: "dtype".into(),
                value: other.into(),
                why: "expected bfloat16, float16 or float32".into(),
            })
        }
    };
    let quant = match quantization_config(c.map, QuantLookup::Transformers) {
        None => Quant::None,
        Some(QuantFound {
            value: Value::Object(q),
            ..
        }) => {
            let qc = Cfg {
                map: q,
                model_type: c.model_type,
            };
            quantization(&qc)?
        }
        Some(QuantFound { value, path }) => {
            return Err(Error::WrongType {
                field: path.into(),
                expected: "an object",
                found: kind_of(value).into(),
            })
        }
    };
    Ok(Storage {
        dtype,
        quant,
        ignored: Default::default(),
        checkpoint: None,
        holder: Default::default(),
    })
}
/// The stored format a `quantization_config` names, as transformers 5.24's quantizer for its
/// `quant_method` lays the weights out (`quantizers/quantizer_*.py`, `utils/quantization_config.py`
/// for the defaults), and compressed-tensors' int4 weight-only scheme as vLLM reads it. A method or
/// variant not read here (modelopt NVFP4, compressed-tensors' other schemes, GPTQ/AWQ at other
/// than 4 bits, ...) is [`Quant::Other`]: counted in the config's dtype, with a
/// note.
fn quantization(qc: &Cfg) -> Result<Quant> {
    let group = |qc: &Cfg| -> Result<u64> {
        // `group_size: -1` is one group per input row.
        Ok(match qc.map.get("group_size") {
            None | Some(Value::Null) => 128,
            Some(v) if v.as_i64() == Some(-1) => 0,
            Some(v) => match v.as_u64().filter(|g| *g > 0) {
                Some(g) => g,
                None => {
                    return Err(Error::OutOfRange {
                        field: "quantization_config.group_size".into(),
                        value: v.to_string(),
                        why: "expected a positive integer or -1".into(),
                    })
                }
            },
        })
    };
    // AwqConfig's `bits` defaults to 4; GPTQConfig's has no default (transformers 5.24:
    // `__init__(self, bits: int, ...)`), so from_pretrained fails with a TypeError on a gptq
    // config without it, which vram read as 4 bits.
    if qc.str("quant_method")? == Some("gptq") && qc.find(&["bits"]).is_none() {
        return Err(Error::MissingField {
            field: "quantization_config.bits".into(),
            model_type: qc.model_type.into(),
        });
    }
    let bits = qc.opt_u64(&["bits"])?.unwrap_or(4);
    let flag = |k: &str| qc.map.get(k).and_then(Value::as_bool).unwrap_or(false);
    Ok(match qc.str("quant_method")? {
        Some("fp8") => {
            let (bn, bk) = match qc.find(&["weight_block_size"]) {
                Some((_, Value::Array(a))) if a.len() == 2 => (
                    a[0].as_u64().filter(|n| *n > 0),
                    a[1].as_u64().filter(|n| *n > 0),
                ),
                None => (Some(128), Some(128)),
                _ => (None, None),
            };
            let (Some(bn), Some(bk)) = (bn, bk) else {
                return Err(Error::OutOfRange {
                    field: "quantization_config.weight_block_size".into(),
                    value: "?".into(),
                    why: "expected two positive integers".into(),
                });
            };
            // get_modules_to_not_convert (quantizers/base.py) always keeps the output
            // embeddings unquantized, whatever `modules_to_not_convert` adds.
            Quant::Fp8Block {
                bn,
                bk,
                skip_head: true,
                e8m0: qc.str("scale_fmt")? == Some("ue8m0"),
            }
        }
        Some("mxfp4") => Quant::Mxfp4,
        // BitsAndBytesConfig: `load_in_8bit` (LLM.int8), or `load_in_4bit` with
        // `bnb_4bit_quant_type` (default "fp4") and `bnb_4bit_use_double_quant`.
        Some("bitsandbytes") if flag("load_in_8bit") => Quant::Packed {
            format: WeightFormat::Int8,
            double_quant: false,
        },
        Some("bitsandbytes") if flag("load_in_4bit") => Quant::Packed {
            format: match qc.str("bnb_4bit_quant_type")? {
                Some("nf4") => WeightFormat::Nf4,
                _ => WeightFormat::Fp4,
            },
            double_quant: flag("bnb_4bit_use_double_quant"),
        },
        // GPTQConfig (gptqmodel's QuantLinear: qweight, qzeros, scales, g_idx) and AwqConfig
        // (GEMM layout: qweight, qzeros, scales), 4 bits.
        Some("gptq") if bits == 4 => Quant::Packed {
            format: WeightFormat::Gptq {
                group: group(qc)?,
                // GPTQConfig's `desc_act` (default false); with one group per row the order
                // of the rows does not matter and vLLM's GPTQMarlinConfig sets it false.
                desc_act: flag("desc_act") && group(qc)? > 0,
            },
            double_quant: false,
        },
        // `group_size: -1` (channel-wise) is one group over the whole input row: AutoAWQ's
        // `WQLinear_GEMM` takes the group as `in_features` (`awq/modules/linear/gemm.py`), so
        // `qzeros` is `[1, out/8]` and `scales` `[1, out]`.
        Some("awq") if bits == 4 => Quant::Packed {
            format: WeightFormat::Awq { group: group(qc)? },
            double_quant: false,
        },
        Some("compressed-tensors") => {
            compressed_tensors_wna16(qc)?.map_or(Quant::Other, |format| Quant::Packed {
                format,
                double_quant: false,
            })
        }
        _ => Quant::Other,
    })
}

/// A compressed-tensors `quantization_config` that is int4 weight-only (`format:
/// pack-quantized`, the `config_groups` group targeting `Linear` with `weights` `num_bits: 4`,
/// `type: int`, strategy `group` or `channel`, and no `input_activations`): vLLM 0.10.0's
/// `CompressedTensorsConfig._is_wNa16_group_channel` and its `CompressedTensorsWNA16` scheme
/// (`compressed_tensors.py`, `schemes/compressed_tensors_wNa16.py`). `symmetric` defaults to
/// true and `group_size` is read from the group (channel: one group per row). Any other scheme
/// (FP8, W8A8, act-order, other bit widths) is `None`: not modelled.
fn compressed_tensors_wna16(qc: &Cfg) -> Result<Option<WeightFormat>> {
    let Some(Value::Object(groups)) = qc.map.get("config_groups") else {
        return Ok(None);
    };
    let linear = groups.values().find(|g| {
        g["targets"]
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x.as_str() == Some("Linear")))
    });
    let Some(g) = linear else {
        return Ok(None);
    };
    // The top-level `format` (what vLLM 0.10.0 reads), else the group's own (later writers).
    let format = qc
        .map
        .get("format")
        .and_then(Value::as_str)
        .or(g["format"].as_str());
    let w = &g["weights"];
    let activations = g.get("input_activations").is_some_and(|a| !a.is_null());
    let actorder = w.get("actorder").is_some_and(|a| !a.is_null());
    let int4 = w["num_bits"].as_u64() == Some(4) && w["type"].as_str().unwrap_or("int") == "int";
    if format != Some("pack-quantized") || activations || actorder || !int4 {
        return Ok(None);
    }
    let group = match w["strategy"].as_str() {
        Some("channel") => 0,
        Some("group") => match w["group_size"].as_u64().filter(|g| *g > 0 && g % 8 == 0) {
            Some(g) => g,
            None => {
                return Err(Error::OutOfRange {
                    field: "quantization_config.config_groups.weights.group_size".into(),
                    value: w["group_size"].to_string(),
                    why: "expected a positive multiple of 8 for strategy group".into(),
                })
            }
        },
        _ => return Ok(None),
    };
    Ok(Some(WeightFormat::Wna16 {
        group,
        symmetric: w["symmetric"].as_bool().unwrap_or(true),
    }))
}

/// Applies a vision-language model's `preprocessor_config.json`: the processor settings a
/// checkpoint ships replace the image processor class defaults the description assumed
/// (`from_pretrained` loads them the same way). Read: Qwen's `size` (`shortest_edge`,
/// `longest_edge`) or `min_pixels`/`max_pixels`, and `merge_size`
/// (transformers 5.24 `image_processing_qwen2_vl.py`); Llama 4's `max_patches`
/// (`image_processing_llama4_fast.py`). Returns one line per setting that changed; a model
/// without a vision tower is left as it is.
pub fn apply_preprocessor(model: &mut Model, text: &str) -> Result<Vec<String>> {
    use crate::describe::VisionInput;
    refuse_bom(text, "preprocessor_config.json")?;
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Json {
        what: "preprocessor_config.json".into(),
        reason: e.to_string(),
    })?;
    let Model::Transformer(t) = model else {
        return Ok(Vec::new());
    };
    let Some(vision) = t.blocks.vision.as_mut() else {
        return Ok(Vec::new());
    };
    let num = |keys: &[&str]| -> Result<Option<u64>> {
        let mut v = &value;
        for k in keys {
            match v.get(k) {
                Some(x) => v = x,
                None => return Ok(None),
            }
        }
        match v.as_u64() {
            Some(n) if n > 0 && n <= u64::from(u32::MAX) => Ok(Some(n)),
            _ => Err(Error::OutOfRange {
                field: format!("preprocessor_config.json {}", keys.join(".")),
                value: v.to_string(),
                why: "must be a positive integer".into(),
            }),
        }
    };
    let mut changed = Vec::new();
    let mut set = |what: &str, slot: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            if *slot != v {
                changed.push(format!("{what} {v} (class default {})", *slot));
                *slot = v;
            }
        }
    };
    match &mut vision.input {
        VisionInput::SmartResize {
            merge,
            min_pixels,
            max_pixels,
            ..
        } => {
            let min = num(&["size", "shortest_edge"])?.or(num(&["min_pixels"])?);
            let max = num(&["size", "longest_edge"])?.or(num(&["max_pixels"])?);
            set("min_pixels", min_pixels, min);
            set("max_pixels", max_pixels, max);
            set("merge_size", merge, num(&["merge_size"])?);
            if *min_pixels > *max_pixels {
                return Err(Error::OutOfRange {
                    field: "preprocessor_config.json size".into(),
                    value: format!("shortest_edge {min_pixels}, longest_edge {max_pixels}"),
                    why: "shortest_edge must not exceed longest_edge".into(),
                });
            }
        }
        VisionInput::Tiles { max_tiles, .. } => {
            set("max_patches", max_tiles, num(&["max_patches"])?);
        }
        _ => {}
    }
    Ok(changed)
}

/// Applies a vision-language model's `video_preprocessor_config.json`: Qwen3-VL's and
/// Qwen3.5's `size.longest_edge`, the pixels of a whole clip (frames x height x width) that
/// `Qwen3VLVideoProcessor` keeps a video under (transformers 5.24
/// `qwen3_vl/video_processing_qwen3_vl.py` `smart_resize`). Returns one line per setting that
/// changed; a model without such a tower is left as it is.
pub fn apply_video_preprocessor(model: &mut Model, text: &str) -> Result<Vec<String>> {
    use crate::describe::{VideoSize, VisionInput};
    refuse_bom(text, "video_preprocessor_config.json")?;
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Json {
        what: "video_preprocessor_config.json".into(),
        reason: e.to_string(),
    })?;
    let Model::Transformer(t) = model else {
        return Ok(Vec::new());
    };
    // A tower whose video processor bounds frames, not clips (Qwen2-VL, Qwen2.5-VL), has no
    // clip budget to replace.
    let Some(VisionInput::SmartResize {
        video: VideoSize::Clip {
            max_pixels: video_max_pixels,
        },
        ..
    }) = t.blocks.vision.as_mut().map(|v| &mut v.input)
    else {
        return Ok(Vec::new());
    };
    let Some(v) = value.get("size").and_then(|s| s.get("longest_edge")) else {
        return Ok(Vec::new());
    };
    match v.as_u64() {
        Some(n) if n > 0 && n <= 1 << 40 => {
            if *video_max_pixels == n {
                return Ok(Vec::new());
            }
            let line = format!("video longest_edge {n} (class default {video_max_pixels})");
            *video_max_pixels = n;
            Ok(vec![line])
        }
        _ => Err(Error::OutOfRange {
            field: "video_preprocessor_config.json size.longest_edge".into(),
            value: v.to_string(),
            why: "must be a positive integer".into(),
        }),
    }
}

/// The classes a model's `config.json` names in `architectures` (the engines' registries look
/// them up), empty when it names none.
pub fn architectures(config: &serde_json::Value) -> Vec<String> {
    config["architectures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The method a model's `config.json` names in its quantization settings' `quant_method`, if any,
/// found where the engine at hand looks (`lookup`): capacity's reader.
pub fn quant_method(config: &serde_json::Value, lookup: QuantLookup) -> Option<&str> {
    quantization_config(config.as_object()?, lookup)?
        .value
        .get("quant_method")?
        .as_str()
}

/// The config's own `is_mm_prefix_lm`, as Python's `bool()` reads the attribute transformers
/// keeps for any key (`null`, `false`, `0`, `""`, `[]` and `{}` false); `None` where the config
/// has no such key. vLLM from 0.17 asks the top-level config (`hasattr(self.hf_config,
/// "is_mm_prefix_lm")`) before its list of model types; which release does is the engine's, in
/// `vram_plan::capacity`.
pub fn config_mm_prefix_lm(config: &serde_json::Value) -> Option<bool> {
    let v = config.get("is_mm_prefix_lm")?;
    Some(match v {
        serde_json::Value::Null => false,
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(o) => !o.is_empty(),
    })
}

/// Whether the text config (`text_config`, else the top level: vLLM's `hf_text_config`) sets
/// `use_bidirectional_attention` to `"vision"`, Gemma 4's switch for image tokens attending
/// both ways (vLLM's `Gemma4ModelArchConfigConvertor.is_mm_prefix_lm`, from 0.20).
pub fn bidirectional_vision(config: &serde_json::Value) -> bool {
    config
        .get("text_config")
        .unwrap_or(config)
        .get("use_bidirectional_attention")
        .and_then(serde_json::Value::as_str)
        == Some("vision")
}

/// Bytes of the recurrent-state dtype a model's `config.json` names (`mamba_ssm_dtype`, at the
/// top or in `text_config`: Qwen3.5 ships `float32`); `None` when it names none. vLLM copies it
/// into `mamba_ssm_cache_dtype` (`vllm/model_executor/models/config.py`
/// `Qwen3_5ForConditionalGenerationConfig`) before the hybrid page alignment.
pub fn mamba_ssm_bytes(config_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(config_json).ok()?;
    let d = v
        .get("mamba_ssm_dtype")
        .or_else(|| v.get("text_config")?.get("mamba_ssm_dtype"))?
        .as_str()?;
    match d {
        "float32" | "fp32" => Some(4),
        "bfloat16" | "float16" | "bf16" | "fp16" => Some(2),
        _ => None,
    }
}

#[cfg(test)]
mod quant_lookup_tests {
    use super::{quant_lookup_note, quantization_config, QuantLookup};
    use serde_json::{json, Map, Value};

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn at(m: &Map<String, Value>, l: QuantLookup) -> Option<&'static str> {
        quantization_config(m, l).map(|f| f.path)
    }

    #[test]
    fn both_libraries_fall_back_to_the_text_config() {
        let q = json!({"quant_method": "fp8"});
        let m = obj(json!({"text_config": {"quantization_config": q}}));
        for l in [QuantLookup::Transformers, QuantLookup::Vllm(None)] {
            assert_eq!(at(&m, l), Some("text_config.quantization_config"));
        }
        let m = obj(
            json!({"quantization_config": q, "text_config": {"quantization_config": {"quant_method": "awq"}}}),
        );
        for l in [QuantLookup::Transformers, QuantLookup::Vllm(None)] {
            assert_eq!(at(&m, l), Some("quantization_config"), "the top level wins");
        }
        assert_eq!(quant_lookup_note(&m), None);
        assert_eq!(quant_lookup_note(&obj(json!({"hidden_size": 8}))), None);
    }

    #[test]
    fn where_the_libraries_differ_each_is_followed_and_said() {
        // An empty dict is falsy to transformers' `or`, not None to vLLM.
        let m = obj(
            json!({"quantization_config": {}, "text_config": {"quantization_config": {"quant_method": "fp8"}}}),
        );
        assert_eq!(
            at(&m, QuantLookup::Transformers),
            Some("text_config.quantization_config")
        );
        assert_eq!(at(&m, QuantLookup::Vllm(None)), Some("quantization_config"));
        let note = quant_lookup_note(&m).unwrap();
        assert!(note.contains("transformers 5.24 reads the quantization settings from `text_config.quantization_config`, vLLM from `quantization_config`"), "{note}");
        // vLLM reads `compression_config`; transformers 5.24 does not.
        let m = obj(json!({"compression_config": {"quant_method": "compressed-tensors"}}));
        assert_eq!(at(&m, QuantLookup::Transformers), None);
        assert_eq!(at(&m, QuantLookup::Vllm(None)), Some("compression_config"));
        // transformers' get_text_config(decoder=True) also names `decoder`; vLLM looks only
        // in `text_config`.
        let m = obj(json!({"decoder": {"quantization_config": {"quant_method": "gptq"}}}));
        assert_eq!(
            at(&m, QuantLookup::Transformers),
            Some("decoder.quantization_config")
        );
        assert_eq!(at(&m, QuantLookup::Vllm(None)), None);
        // Two text configs: ambiguous to transformers (it raises), none read.
        let m = obj(
            json!({"decoder": {"quantization_config": {"quant_method": "gptq"}}, "text_config": {}}),
        );
        assert_eq!(at(&m, QuantLookup::Transformers), None);
    }

    #[test]
    fn the_text_config_fallback_follows_the_engine_and_its_version() {
        let m = obj(json!({"model_type": "llava",
            "text_config": {"quantization_config": {"quant_method": "fp8"}}}));
        // vLLM 0.10.2 added the fallback; 0.10.1.1 and earlier read the top level only.
        assert_eq!(at(&m, QuantLookup::Vllm(Some([0, 10, 1]))), None);
        assert_eq!(at(&m, QuantLookup::Vllm(Some([0, 6, 4]))), None);
        for v in [Some([0, 10, 2]), Some([0, 22, 1]), None] {
            assert_eq!(
                at(&m, QuantLookup::Vllm(v)),
                Some("text_config.quantization_config"),
                "{v:?}"
            );
        }
        // The top level is read at every version.
        let top = obj(json!({"quantization_config": {"quant_method": "awq"}}));
        assert_eq!(
            at(&top, QuantLookup::Vllm(Some([0, 6, 4]))),
            Some("quantization_config")
        );
        // SGLang reads the top level only...
        assert_eq!(at(&m, QuantLookup::Sglang), None);
        assert_eq!(at(&top, QuantLookup::Sglang), Some("quantization_config"));
        // ...where Kimi-K2.5's config class has copied the text config's settings, for every
        // engine that builds it.
        let kimi = obj(json!({"model_type": "kimi_k25",
            "text_config": {"quantization_config": {"quant_method": "compressed-tensors"}}}));
        for l in [QuantLookup::Sglang, QuantLookup::Vllm(Some([0, 10, 1]))] {
            assert_eq!(
                at(&kimi, l),
                Some("text_config.quantization_config"),
                "{l:?}"
            );
        }
        // So do SGLang's Kimi-K3 and GLM-5-Next classes; an unlisted wrapper does not.
        for (model_type, found) in [
            ("kimi_k3", Some("text_config.quantization_config")),
            ("glm5_next", Some("text_config.quantization_config")),
            ("glm5v", None),
        ] {
            let c = obj(json!({"model_type": model_type,
                "text_config": {"quantization_config": {"quant_method": "compressed-tensors"}}}));
            assert_eq!(at(&c, QuantLookup::Sglang), found, "{model_type}");
        }
        // It copies `quantization_config` only, not `compression_config`.
        let kimi = obj(json!({"model_type": "kimi_k25",
            "text_config": {"compression_config": {"quant_method": "compressed-tensors"}}}));
        assert_eq!(at(&kimi, QuantLookup::Sglang), None);
    }
}
