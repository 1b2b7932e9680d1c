//! Reading Hugging Face `config.json` files into a [`Transformer`].
//!
//! Each supported `model_type` maps its field names (and their variants across releases:
//! `n_embd`/`hidden_size`, `n_head`/`num_attention_heads`, `multi_query`/`num_kv_heads`, ...)
//! onto the same description. Defaults are those of the `transformers` config classes.

use serde_json::{Map, Value};

use crate::arch::{Act, Layout, Mlp, Model, Norm, Positions, Transformer};
use crate::blocks::{Blocks, Dtype, Quant, Storage};
use crate::error::{Error, Result};

mod decoders;
pub mod keys;

/// The `model_type` values of the 2019–2024 families the uniform reader understands; the current
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
    let legacy = match model_type.as_str() {
        "gpt2" => Some(gpt2(&c)?),
        "gpt_neox" => Some(gpt_neox(&c)?),
        "llama" | "mistral" | "mixtral" | "qwen2" | "gemma" | "gemma2" | "phi3" => {
            Some(llama_like(&c)?)
        }
        "falcon" | "RefinedWeb" | "RefinedWebModel" => Some(falcon(&c)?),
        "bert" | "roberta" => Some(bert(&c)?),
        "t5" => Some(t5(&c)?),
        _ => None,
    };
    let mut t = match legacy {
        Some(mut t) => {
            validate(&t)?;
            t.blocks = t.uniform_blocks();
            legacy_windows(&c, &mut t)?;
            t
        }
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
                // A multimodal wrapper this reader does not know around a decoder it does
                // (Kimi-K2.5: `kimi_k25` around `kimi_k2`): the decoder alone, said so.
                let wrapped = Cfg {
                    map: text.map,
                    model_type: inner,
                };
                let mut t = decoders::read(&wrapped, &c)?;
                t.blocks.vision_unmodelled = c.map.contains_key("vision_config");
                t.blocks.notes.push(format!(
                    "model_type `{model_type}` is not known: its text_config (`{inner}`) is read; any vision or audio tower is not counted"
                ));
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
                        if model_type == "mllama" {
                            // Llama 3.2 Vision's decoder is a Llama whose cross-attention
                            // layers have the same projections; its tower is described.
                            let mut t = decoders::generic(&text)?;
                            let hidden = t.hidden;
                            t.blocks.vision = decoders::vision(&c, hidden)?;
                            t
                        } else {
                            decoders::refuse_family_keys(&text)?;
                            keys::check_generic(&text, &c)?;
                            decoders::generic(&text)?
                        }
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
    t.blocks.storage = storage(&c)?;
    if t.blocks.storage.quant == Quant::Other {
        let method = match map.get("quantization_config") {
            Some(Value::Object(q)) => q
                .get("quant_method")
                .and_then(Value::as_str)
                .unwrap_or("(none named)")
                .to_string(),
            _ => String::new(),
        };
        t.blocks.notes.push(format!(
            "quantization_config's method `{method}` is not modelled: weights are counted in the config's dtype"
        ));
    }
    t.name = name.to_string();
    t.model_type = model_type;
    validate(&t)?;
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
        | "relu" | "gelu_10" => Act::Fused,
        "gelu_new" | "gelu_fast" => Act::ComposedTanh,
        "quick_gelu" => Act::QuickGelu,
        _ => return None,
    })
}

/// A decoder-only transformer with defaults filled in by the family readers.
fn base(vocab: u64, hidden: u64, layers: u64, heads: u64) -> Transformer {
    Transformer {
        name: String::new(),
        model_type: String::new(),
        layout: Layout::DecoderOnly,
        vocab,
        hidden,
        layers,
        encoder_layers: 0,
        heads,
        kv_heads: heads,
        head_dim: hidden / heads.max(1),
        intermediate: 4 * hidden,
        max_positions: 2048,
        mlp: Mlp::Gated,
        act: Act::Fused,
        fused_qkv: false,
        fused_gate_up: false,
        norm: Norm::RmsNorm,
        norm_bias: false,
        norms_per_layer: 2,
        qkv_bias: false,
        out_bias: false,
        mlp_bias: false,
        experts: 1,
        experts_per_token: 1,
        positions: Positions::Rotary,
        type_vocab: 0,
        tied_embeddings: false,
        embedding_norm: false,
        pooler: false,
        final_norm: true,
        parallel_residual: false,
        attention_dropout: 0.0,
        hidden_dropout: 0.0,
        softmax_upcast: true,
        sliding_window: None,
        logit_softcap: false,
        blocks: Blocks::empty(),
    }
}

fn check_heads(c: &Cfg, hidden: u64, heads: u64) -> Result<()> {
    if hidden % heads != 0 {
        return Err(Error::NotDivisible {
            what: format!("{}: hidden size by attention heads", c.model_type),
            a: hidden,
            b: heads,
        });
    }
    Ok(())
}

/// `add_cross_attention: true` builds a cross-attention in every layer (GPT-2 and BERT as the
/// decoder of an encoder-decoder), which these readers do not describe.
fn refuse_cross_attention(c: &Cfg) -> Result<()> {
    if c.bool("add_cross_attention", false)? {
        return Err(Error::NotDescribed {
            model_type: c.model_type.into(),
            what: "`add_cross_attention: true` (a cross-attention in every layer, for an encoder-decoder) is not modelled".into(),
        });
    }
    Ok(())
}

fn gpt2(c: &Cfg) -> Result<Transformer> {
    refuse_cross_attention(c)?;
    let hidden = c.u64(&["n_embd", "hidden_size"])?;
    let heads = c.u64(&["n_head", "num_attention_heads"])?;
    check_heads(c, hidden, heads)?;
    let positions = c.u64(&["n_positions", "n_ctx", "max_position_embeddings"])?;
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["n_layer", "num_hidden_layers"])?,
        heads,
    );
    t.intermediate = c.opt_u64(&["n_inner"])?.unwrap_or(4 * hidden);
    t.max_positions = positions;
    t.positions = Positions::Learned(positions);
    t.mlp = Mlp::Plain;
    t.act = c.act(&["activation_function"], "gelu_new")?;
    t.fused_qkv = true;
    t.norm = Norm::LayerNorm;
    t.norm_bias = true;
    (t.qkv_bias, t.out_bias, t.mlp_bias) = (true, true, true);
    t.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    t.attention_dropout = c.prob(&["attn_pdrop"], 0.1)?;
    t.hidden_dropout = c.prob(&["resid_pdrop"], 0.1)?;
    t.softmax_upcast = false;
    Ok(t)
}

fn gpt_neox(c: &Cfg) -> Result<Transformer> {
    let hidden = c.u64(&["hidden_size"])?;
    let heads = c.u64(&["num_attention_heads"])?;
    check_heads(c, hidden, heads)?;
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    t.intermediate = c.opt_u64(&["intermediate_size"])?.unwrap_or(4 * hidden);
    t.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    t.mlp = Mlp::Plain;
    t.act = c.act(&["hidden_act"], "gelu")?;
    t.fused_qkv = true;
    t.norm = Norm::LayerNorm;
    t.norm_bias = true;
    let bias = c.bool("attention_bias", true)?;
    (t.qkv_bias, t.out_bias, t.mlp_bias) = (bias, bias, true);
    t.tied_embeddings = c.bool("tie_word_embeddings", false)?;
    t.parallel_residual = c.bool("use_parallel_residual", true)?;
    t.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    t.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    Ok(t)
}

/// Llama and its descendants: Mistral, Mixtral, Qwen2, Gemma, Gemma 2, Phi-3.
fn llama_like(c: &Cfg) -> Result<Transformer> {
    let mt = c.model_type;
    let hidden = c.u64(&["hidden_size"])?;
    let heads = c.u64(&["num_attention_heads"])?;
    let kv_heads = c.opt_u64(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = match c.opt_u64(&["head_dim"])? {
        Some(d) => d,
        None => {
            check_heads(c, hidden, heads)?;
            hidden / heads
        }
    };
    if heads % kv_heads != 0 {
        return Err(Error::NotDivisible {
            what: format!("{mt}: attention heads by key/value heads"),
            a: heads,
            b: kv_heads,
        });
    }
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    t.kv_heads = kv_heads;
    t.head_dim = head_dim;
    t.intermediate = c.u64(&["intermediate_size"])?;
    t.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    let gemma = mt == "gemma" || mt == "gemma2";
    t.act = if gemma {
        c.act(&["hidden_activation", "hidden_act"], "gelu_pytorch_tanh")?
    } else {
        c.act(&["hidden_act"], "silu")?
    };
    t.tied_embeddings = c.bool("tie_word_embeddings", gemma)?;
    t.qkv_bias = mt == "qwen2" || c.bool("attention_bias", false)?;
    t.out_bias = mt != "qwen2" && c.bool("attention_bias", false)?;
    t.mlp_bias = c.bool("mlp_bias", false)?;
    t.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    if mt == "phi3" {
        (t.fused_qkv, t.fused_gate_up) = (true, true);
        t.hidden_dropout = c.prob(&["resid_pdrop"], 0.0)?;
    }
    if mt == "gemma2" {
        t.norms_per_layer = 4;
        // Gemma2Config defaults: final_logit_softcapping=30.0 (null turns it off).
        t.logit_softcap = match c.map.get("final_logit_softcapping") {
            None => true,
            Some(Value::Null) => false,
            Some(Value::Number(_)) => true,
            Some(other) => {
                return Err(Error::WrongType {
                    field: "final_logit_softcapping".into(),
                    expected: "a number or null",
                    found: kind_of(other).into(),
                })
            }
        };
    }
    if mt == "mistral" {
        // MistralConfig's default sliding_window is 4096; null turns it off.
        t.sliding_window = if c.map.contains_key("sliding_window") {
            c.opt_u64(&["sliding_window"])?
        } else {
            Some(4096)
        };
    }
    if mt == "mixtral" {
        t.experts = c.u64(&["num_local_experts"])?;
        t.experts_per_token = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
        if t.experts_per_token > t.experts {
            return Err(Error::OutOfRange {
                field: "num_experts_per_tok".into(),
                value: t.experts_per_token.to_string(),
                why: format!("cannot exceed num_local_experts = {}", t.experts),
            });
        }
    }
    Ok(t)
}

fn falcon(c: &Cfg) -> Result<Transformer> {
    let hidden = c.u64(&["hidden_size", "n_embed"])?;
    let heads = c.u64(&["num_attention_heads", "n_head"])?;
    check_heads(c, hidden, heads)?;
    let new_arch = c.bool("new_decoder_architecture", false)?;
    let kv_heads = if new_arch {
        c.opt_u64(&["num_kv_heads", "n_head_kv"])?.unwrap_or(heads)
    } else if c.bool("multi_query", true)? {
        1
    } else {
        heads
    };
    if heads % kv_heads != 0 {
        return Err(Error::NotDivisible {
            what: "falcon: attention heads by key/value heads".into(),
            a: heads,
            b: kv_heads,
        });
    }
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers", "n_layer"])?,
        heads,
    );
    t.kv_heads = kv_heads;
    t.intermediate = c.opt_u64(&["ffn_hidden_size"])?.unwrap_or(4 * hidden);
    t.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    t.mlp = Mlp::Plain;
    t.fused_qkv = true;
    t.norm = Norm::LayerNorm;
    t.norm_bias = true;
    let bias = c.bool("bias", false)?;
    (t.qkv_bias, t.out_bias, t.mlp_bias) = (bias, bias, bias);
    t.parallel_residual = c.bool("parallel_attn", true)?;
    t.norms_per_layer = if t.parallel_residual && !new_arch {
        1
    } else {
        2
    };
    t.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    if c.bool("alibi", false)? {
        t.positions = Positions::None;
    }
    t.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    t.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    t.softmax_upcast = false;
    Ok(t)
}

fn bert(c: &Cfg) -> Result<Transformer> {
    // BertLMHeadModel / RobertaForCausalLM: the encoder run as a causal decoder with a
    // vocabulary head, which the encoder's walk (no logits, no cache) does not describe.
    if let Some(Value::Array(a)) = c.map.get("architectures") {
        if let Some(class) = a
            .first()
            .and_then(Value::as_str)
            .filter(|n| n.ends_with("LMHeadModel") || n.ends_with("ForCausalLM"))
        {
            return Err(Error::NotDescribed {
                model_type: c.model_type.into(),
                what: format!(
                    "`{class}` (the encoder as a causal decoder with a vocabulary head) is not modelled; vram reads {} as the encoder with its pooler, as sequence classification fine-tunes it",
                    c.model_type
                ),
            });
        }
    }
    refuse_cross_attention(c)?;
    let hidden = c.u64(&["hidden_size"])?;
    let heads = c.u64(&["num_attention_heads"])?;
    check_heads(c, hidden, heads)?;
    let positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(512);
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    t.layout = Layout::EncoderOnly;
    t.intermediate = c.opt_u64(&["intermediate_size"])?.unwrap_or(4 * hidden);
    t.max_positions = positions;
    t.positions = Positions::Learned(positions);
    t.type_vocab = match c.find(&["type_vocab_size"]) {
        // RoBERTa configs set 1; a literal 0 is legal and means no token types.
        Some((_, Value::Number(n))) if n.as_u64() == Some(0) => 0,
        _ => c.opt_u64(&["type_vocab_size"])?.unwrap_or(2),
    };
    t.mlp = Mlp::Plain;
    t.norm = Norm::LayerNorm;
    t.norm_bias = true;
    (t.qkv_bias, t.out_bias, t.mlp_bias) = (true, true, true);
    t.act = c.act(&["hidden_act"], "gelu")?;
    t.embedding_norm = true;
    t.pooler = true;
    t.final_norm = false;
    t.attention_dropout = c.prob(&["attention_probs_dropout_prob"], 0.1)?;
    t.hidden_dropout = c.prob(&["hidden_dropout_prob"], 0.1)?;
    t.softmax_upcast = false;
    Ok(t)
}

fn t5(c: &Cfg) -> Result<Transformer> {
    let hidden = c.u64(&["d_model"])?;
    let heads = c.u64(&["num_heads"])?;
    let layers = c.u64(&["num_layers"])?;
    let mut t = base(
        c.u64(&["vocab_size"])?,
        hidden,
        c.opt_u64(&["num_decoder_layers"])?.unwrap_or(layers),
        heads,
    );
    t.layout = Layout::EncoderDecoder;
    t.encoder_layers = layers;
    t.head_dim = c.u64(&["d_kv"])?;
    t.intermediate = c.u64(&["d_ff"])?;
    t.max_positions = c.opt_u64(&["n_positions"])?.unwrap_or(512);
    t.positions = Positions::RelativeBuckets(
        c.opt_u64(&["relative_attention_num_buckets"])?
            .unwrap_or(32),
    );
    t.mlp = match c.str("feed_forward_proj")?.unwrap_or("relu") {
        "relu" => Mlp::Relu,
        s if s.starts_with("gated-") => {
            // T5Config maps "gated-gelu" to gelu_new.
            let act = if s == "gated-gelu" {
                "gelu_new"
            } else {
                &s[6..]
            };
            t.act = activation(act).ok_or_else(|| Error::OutOfRange {
                field: "feed_forward_proj".into(),
                value: s.into(),
                why: "unknown activation".into(),
            })?;
            Mlp::Gated
        }
        other => {
            return Err(Error::OutOfRange {
                field: "feed_forward_proj".into(),
                value: other.into(),
                why: "expected `relu` or `gated-<act>`".into(),
            })
        }
    };
    t.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    let p = c.prob(&["dropout_rate"], 0.1)?;
    (t.attention_dropout, t.hidden_dropout) = (p, p);
    t.softmax_upcast = true;
    Ok(t)
}

/// The per-layer windows transformers 5.24 gives the older families' caches, where the uniform
/// fields keep one: Gemma 2's `layer_types` default alternates sliding (even layers) and full
/// (configuration_gemma2.py); Phi-3 with a `sliding_window` slides every layer
/// (cache_utils.py `get_layer_types_and_kwargs`); Qwen2 with `use_sliding_window` slides the
/// layers its `layer_types` name, by default those from `max_window_layers` on
/// (configuration_qwen2.py). Only the cache description changes.
fn legacy_windows(c: &Cfg, t: &mut Transformer) -> Result<()> {
    use crate::blocks::{Mixer, Window};
    let window = match c.model_type {
        "gemma2" if !c.map.contains_key("sliding_window") => Some(4096),
        "gemma2" | "phi3" => c.opt_u64(&["sliding_window"])?,
        "qwen2" if c.bool("use_sliding_window", false)? => c.opt_u64(&["sliding_window"])?,
        _ => None,
    };
    let Some(w) = window else {
        return Ok(());
    };
    let slides: Vec<bool> = match c.model_type {
        "gemma2" => (0..t.layers).map(|i| i % 2 == 0).collect(),
        "qwen2" => match c.map.get("layer_types") {
            Some(Value::Array(a)) if a.len() as u64 == t.layers => a
                .iter()
                .map(|v| v.as_str() == Some("sliding_attention"))
                .collect(),
            _ => {
                let from = c.opt_u64(&["max_window_layers"])?.unwrap_or(28);
                (0..t.layers).map(|i| i >= from).collect()
            }
        },
        _ => vec![true; t.layers as usize],
    };
    let layers: Vec<_> = t
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut b = *b;
            if let Mixer::Attention(a) = &mut b.mixer {
                if slides.get(i).copied().unwrap_or(false) {
                    a.window = Window::Sliding(w);
                }
            }
            b
        })
        .collect();
    let old = std::mem::replace(&mut t.blocks, Blocks::empty());
    t.blocks = Blocks {
        kinds: Vec::new(),
        pattern: Vec::new(),
        ..old
    };
    let fresh = Blocks::from_layers(t.blocks.hidden, &layers, t.blocks.ends);
    t.blocks.kinds = fresh.kinds;
    t.blocks.pattern = fresh.pattern;
    Ok(())
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
    let quant = match c.map.get("quantization_config") {
        None | Some(Value::Null) => Quant::None,
        // A quantization_config whose method is not read (modelopt NVFP4, compressed-tensors,
        // bitsandbytes...): the weights are counted in the config's dtype, with a note.
        Some(Value::Object(q))
            if !matches!(
                q.get("quant_method").and_then(Value::as_str),
                Some("fp8") | Some("mxfp4")
            ) =>
        {
            Quant::Other
        }
        Some(Value::Object(q)) => {
            let qc = Cfg {
                map: q,
                model_type: c.model_type,
            };
            match qc.str("quant_method")? {
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
                    }
                }
                _ => Quant::Mxfp4,
            }
        }
        Some(other) => {
            return Err(Error::WrongType {
                field: "quantization_config".into(),
                expected: "an object",
                found: kind_of(other).into(),
            })
        }
    };
    Ok(Storage { dtype, quant })
}

/// Checks that the sizes hang together; the readers have checked each field on its own.
pub(crate) fn validate(t: &Transformer) -> Result<()> {
    if t.kv_heads > t.heads {
        return Err(Error::OutOfRange {
            field: "num_key_value_heads".into(),
            value: t.kv_heads.to_string(),
            why: format!("cannot exceed num_attention_heads = {}", t.heads),
        });
    }
    if t.head_dim == 0 {
        return Err(Error::OutOfRange {
            field: "head_dim".into(),
            value: "0".into(),
            why: "must be positive".into(),
        });
    }
    // A model beyond 1e15 parameters is corrupt input, and would overflow byte counts.
    let rough = (t.vocab as f64 + 12.0 * t.hidden as f64 * (t.layers + t.encoder_layers) as f64)
        * t.hidden as f64
        * t.experts as f64;
    if rough > 1e15 {
        return Err(Error::OutOfRange {
            field: "model size".into(),
            value: format!("~{rough:.1e} parameters"),
            why: "larger than 1e15 parameters; check the config".into(),
        });
    }
    Ok(())
}

/// Applies a vision-language model's `preprocessor_config.json`: the processor settings a
/// checkpoint ships replace the image processor class defaults the description assumed
/// (`from_pretrained` loads them the same way). Read: Qwen's `size` (`shortest_edge`,
/// `longest_edge`) or `min_pixels`/`max_pixels`, and `merge_size`
/// (transformers 5.24 `image_processing_qwen2_vl.py`); Llama 4's `max_patches`
/// (`image_processing_llama4_fast.py`). Returns one line per setting that changed; a model
/// without a vision tower is left as it is.
pub fn apply_preprocessor(model: &mut Model, text: &str) -> Result<Vec<String>> {
    use crate::blocks::VisionInput;
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
