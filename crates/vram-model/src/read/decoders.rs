//! The 2025–2026 decoder families, read into the layer-by-layer description.
//!
//! Every family goes through one generic path ([`Draft`] → [`build`]): a small adapter per
//! family says which keys hold the attention, feed-forward and per-layer pattern, and what the
//! modelling code's defaults are. The facts come from transformers 5.24.0's
//! `models/<family>/{configuration,modeling}_<family>.py` (named per adapter).

use serde_json::Value;

use super::{kind_of, Cfg};
use crate::describe::Transformer;
use crate::describe::{
    Act, Attention, AudioTower, Block, Blocks, Checked, Component, Dense, Dispatch, Dropout,
    Embedding, Ends, Ffn, Gdn, Head, Hybrid, Indexer, Layout, MRope, Mamba, Mamba2, Mixer, Mla,
    Moe, MoeConversion, Mtp, Names, Norm, Norms, QkNorm, Residual, VideoSize, Vision, VisionInput,
    Window,
};
use crate::error::{Error, Result};
use crate::mech::vision::tower_linear;
use crate::mech::{Site, SiteKind};

/// The `model_type`s read here (`kimi_k2` and `mimo` are remote-code families whose
/// architecture is DeepSeek-V3's and Qwen2's).
pub const FAMILIES: &[&str] = &[
    "qwen3",
    "qwen3_moe",
    "qwen3_5",
    "qwen3_5_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_next",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen2_vl",
    "qwen2_5_vl",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "deepseek_v32",
    "glm_moe_dsa",
    "glm4_moe",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "minimax_m2",
    "nemotron_h",
    "granitemoehybrid",
    "mimo",
    "olmo2",
    "olmo3",
    "smollm3",
    "ernie4_5",
    "ernie4_5_moe",
    "exaone4",
    "seed_oss",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "glm",
    "glm4",
    "granite_swa",
    "granite",
    "phi",
    "starcoder2",
    "gpt_bigcode",
    "bloom",
    "opt",
    "gptj",
    "cohere",
    "cohere2",
    "qwen2_moe",
    "olmoe",
    "olmo",
    "minicpm3",
    "mamba2",
    "granitemoe",
    "granitemoeshared",
    "ministral3",
    "mistral3",
    "sarvam_mla",
    "sarvam_moe",
    "stablelm",
    "phimoe",
    "hyperclovax",
    "granitemoe_swa",
    "mllama",
    "falcon_h1",
    "mamba",
    "falcon_mamba",
    "jamba",
];

/// One layer's mixer kind, as `layer_types` names it (legacy names remapped as
/// configuration_utils.py `_LEGACY_LAYER_TYPE_REMAP` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LayerType {
    Full,
    Sliding,
    Chunked,
    Linear,
    Indexed,
    /// Attention and Mamba2 side by side (Falcon-H1).
    Hybrid,
    /// Nemotron-H's mixer-less `moe` and `mlp` layers.
    MoeOnly,
    MlpOnly,
}

fn layer_type(field: &str, s: &str) -> Result<LayerType> {
    Ok(match s {
        "full_attention" | "attention" | "global" => LayerType::Full,
        "sliding_attention" | "local" => LayerType::Sliding,
        "chunked_attention" => LayerType::Chunked,
        "linear_attention" | "mamba" => LayerType::Linear,
        "indexed_attention" | "deepseek_sparse_attention" => LayerType::Indexed,
        "moe" => LayerType::MoeOnly,
        "mlp" => LayerType::MlpOnly,
        other => {
            return Err(Error::OutOfRange {
                field: field.into(),
                value: other.into(),
                why: "unknown layer type (full_attention, sliding_attention, chunked_attention, linear_attention, indexed_attention, moe, mlp)".into(),
            })
        }
    })
}

/// Which feed-forward a layer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FfnKind {
    Dense,
    Moe,
    DenseAndMoe,
    None,
}

/// What a family adapter fills in; [`build`] turns it into the description.
pub(super) struct Draft {
    pub(super) model_type: String,
    pub(super) vocab: u64,
    pub(super) hidden: u64,
    pub(super) attn: Attention,
    pub(super) sliding_window: Option<u64>,
    pub(super) chunk: Option<u64>,
    pub(super) layer_types: Vec<LayerType>,
    /// Per layer: rotary positions (false for NoPE layers).
    pub(super) rope: Vec<bool>,
    pub(super) ffn: Vec<FfnKind>,
    pub(super) dense: Dense,
    pub(super) moe: Option<Moe>,
    pub(super) linear: Option<Mixer>,
    pub(super) mla: Option<Mla>,
    /// Norms per layer outside the mixer and feed-forward modules.
    pub(super) norms: u64,
    /// The norms' class.
    pub(super) norm: Norm,
    /// How mixer and feed-forward meet the residual stream.
    pub(super) residual: Residual,
    pub(super) tied: bool,
    pub(super) head_bias: bool,
    pub(super) act: Act,
    pub(super) max_positions: u64,
    pub(super) mtp: Option<Mtp>,
    pub(super) notes: Vec<String>,
    pub(super) attention_dropout: f64,
    pub(super) hidden_dropout: f64,
    /// Per layer, an attention shape overriding `attn` (Gemma 4's full layers).
    pub(super) per_layer_attn: Vec<Option<Attention>>,
    /// Per layer, a dense MLP overriding `dense` (Gemma 4's double-wide KV-shared layers).
    pub(super) per_layer_dense: Vec<Option<Dense>>,
    /// Extra per-layer parameters (Gemma 4's per-layer-input gate, projection and norm).
    pub(super) layer_extra: (Component, u64),
    /// Embedding parameters beyond the token, position and type tables and the embedding norm
    /// (Gemma 4's per-layer-input tables).
    pub(super) embedding_extra: u64,
    /// Gemma 4's per-layer-input width ([`Block::per_layer_input`]).
    pub(super) per_layer_input: u64,
    /// What the model does around its token embedding (learned positions, types, norm).
    pub(super) embedding: Embedding,
    /// `final_logit_softcapping` is set.
    pub(super) softcap: bool,
    /// How the layers are wired; an encoder-decoder's first `encoder_layers` layers are its
    /// encoder, the rest its decoder (each with a cross-attention and its norm).
    pub(super) layout: Layout,
    pub(super) encoder_layers: u64,
    /// Buckets of the relative-position table the first layer of each stack holds (T5).
    pub(super) rel_buckets: u64,
    /// A final norm after each stack.
    pub(super) final_norm: bool,
    /// A pooler on top (BERT/RoBERTa).
    pub(super) pooler: bool,
    /// A tied head's input is rescaled (T5).
    pub(super) tied_rescale: bool,
    /// The text config's own tying, where a wrapper's decides otherwise ([`Head::text_tied`]).
    pub(super) text_tied: Option<bool>,
    /// Module names for LoRA targets.
    pub(super) names: Names,
    /// What the family's figures are checked against.
    pub(super) checked: Checked,
}

impl Cfg<'_> {
    /// A count that may be 0 (`first_k_dense_replace`, `n_shared_experts`, ...).
    fn count(&self, names: &[&str], default: u64) -> Result<u64> {
        match self.find(names) {
            None => Ok(default),
            Some((_, Value::Number(n))) if n.as_u64() == Some(0) => Ok(0),
            Some(_) => Ok(self.opt_u64(names)?.unwrap_or(default)),
        }
    }

    /// A size whose config class has a default and takes null for "none": the class default
    /// when the key is absent, `None` when it is null (DeepSeek's `q_lora_rank: null`, a plain
    /// `q_proj`).
    fn default_or_null(&self, name: &str, default: u64) -> Result<Option<u64>> {
        match self.map.get(name) {
            None => Ok(Some(default)),
            Some(Value::Null) => Ok(None),
            Some(_) => self.opt_u64(&[name]),
        }
    }

    fn list(&self, name: &str) -> Result<Option<&Vec<Value>>> {
        match self.find(&[name]) {
            None => Ok(None),
            Some((_, Value::Array(a))) => Ok(Some(a)),
            Some((_, other)) => Err(Error::WrongType {
                field: name.into(),
                expected: "a list",
                found: kind_of(other).into(),
            }),
        }
    }

    fn u64_list(&self, name: &str) -> Result<Option<Vec<u64>>> {
        let Some(a) = self.list(name)? else {
            return Ok(None);
        };
        a.iter()
            .map(|v| {
                v.as_u64().ok_or_else(|| Error::WrongType {
                    field: name.into(),
                    expected: "a list of non-negative integers",
                    found: kind_of(v).into(),
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    fn layer_types(&self, name: &str, layers: u64) -> Result<Option<Vec<LayerType>>> {
        let Some(a) = self.list(name)? else {
            return Ok(None);
        };
        let v = a
            .iter()
            .map(|v| match v {
                Value::String(s) => layer_type(name, s),
                other => Err(Error::WrongType {
                    field: name.into(),
                    expected: "a list of strings",
                    found: kind_of(other).into(),
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        if layers > 0 && v.len() as u64 != layers {
            return Err(Error::OutOfRange {
                field: name.into(),
                value: format!("{} entries", v.len()),
                why: format!("must list num_hidden_layers = {layers} layers"),
            });
        }
        Ok(Some(v))
    }
}

/// Every `p`-th layer full and the others sliding: the families' pattern when the config lists
/// no `layer_types` (gpt-oss: every 2nd full; Olmo 3: every 4th; Gemma 3 and 4: every 6th).
fn every_nth_full(layers: u64, p: u64) -> Vec<LayerType> {
    (1..=layers)
        .map(|i| {
            if i % p == 0 {
                LayerType::Full
            } else {
                LayerType::Sliding
            }
        })
        .collect()
}

pub(super) fn moe_template(experts: u64, top_k: u64, expert_intermediate: u64) -> Moe {
    Moe {
        experts,
        top_k,
        expert_intermediate,
        gated: true,
        expert_bias: false,
        router_bias: false,
        correction_bias: false,
        router_extra: 0,
        router_weights_fp32: false,
        router_param_fp32: false,
        router_linear: None,
        dispatch: Dispatch::GroupedMm,
        shared: None,
        shared_gate: false,
        latent: None,
        latent_bias: false,
    }
}

fn dense(intermediate: u64) -> Dense {
    Dense::new(intermediate)
}

/// The common decoder keys: sizes, heads, head_dim, tying, activation.
pub(super) fn common(c: &Cfg, tie_default: bool) -> Result<(Draft, u64)> {
    let layers = c.u64(&["num_hidden_layers", "num_layers", "n_layer"])?;
    common_with(c, tie_default, layers)
}

/// [`common`] with the layer count given (Nemotron-H's comes from its pattern).
fn common_with(c: &Cfg, tie_default: bool, layers: u64) -> Result<(Draft, u64)> {
    let hidden = c.u64(&["hidden_size", "d_model", "n_embd"])?;
    let heads = c.u64(&["num_attention_heads", "n_head", "num_heads"])?;
    let kv_heads = c
        .opt_u64(&["num_key_value_heads", "num_kv_heads"])?
        .unwrap_or(heads);
    if heads % kv_heads != 0 {
        return Err(Error::NotDivisible {
            what: format!("{}: attention heads by key/value heads", c.model_type),
            a: heads,
            b: kv_heads,
        });
    }
    // `getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)`: a floor.
    let head_dim = match c.opt_u64(&["head_dim"])? {
        Some(d) => d,
        None if hidden >= heads => hidden / heads,
        None => {
            return Err(Error::MissingField {
                field: "head_dim".into(),
                model_type: c.model_type.into(),
            })
        }
    };
    let intermediate = c.opt_u64(&["intermediate_size"])?.unwrap_or(4 * hidden);
    let attn = Attention {
        rotary_pct: super::classic::partial_rotary_pct(c, head_dim)?,
        ..Attention::new(heads, kv_heads, head_dim)
    };
    let d = Draft {
        model_type: c.model_type.to_string(),
        vocab: c.u64(&["vocab_size"])?,
        hidden,
        attn,
        sliding_window: None,
        chunk: None,
        layer_types: vec![LayerType::Full; layers as usize],
        rope: vec![true; layers as usize],
        ffn: vec![FfnKind::Dense; layers as usize],
        dense: dense(intermediate),
        moe: None,
        linear: None,
        mla: None,
        norms: 2,
        norm: Norm::RMS,
        residual: Residual::Sequential,
        tied: c.bool("tie_word_embeddings", tie_default)?,
        head_bias: false,
        act: c.act(&["hidden_act", "hidden_activation"], "silu")?,
        max_positions: c.opt_u64(&["max_position_embeddings"])?.unwrap_or(4096),
        mtp: None,
        notes: Vec::new(),
        attention_dropout: c.prob(&["attention_dropout"], 0.0)?,
        hidden_dropout: 0.0,
        per_layer_attn: vec![None; layers as usize],
        per_layer_dense: vec![None; layers as usize],
        layer_extra: (Component::Other, 0),
        embedding_extra: 0,
        per_layer_input: 0,
        embedding: Embedding::default(),
        softcap: false,
        layout: Layout::DecoderOnly,
        encoder_layers: 0,
        rel_buckets: 0,
        final_norm: true,
        pooler: false,
        tied_rescale: false,
        text_tied: None,
        names: Names::LLAMA,
        checked: Checked::Zoo,
    };
    Ok((d, layers))
}

/// Layers whose index satisfies `moe`, MoE; the rest dense.
pub(super) fn place_moe(d: &mut Draft, moe: impl Fn(usize) -> bool) {
    for (i, f) in d.ffn.iter_mut().enumerate() {
        *f = if moe(i) { FfnKind::Moe } else { FfnKind::Dense };
    }
}

/// Biases on q/k/v and o alike, from the config's `key` (the config class's `default`); returns
/// it for the adapters that bias other linears with it too.
fn attention_bias(d: &mut Draft, c: &Cfg, key: &str, default: bool) -> Result<bool> {
    let bias = c.bool(key, default)?;
    (d.attn.qkv_bias, d.attn.out_bias) = (bias, bias);
    Ok(bias)
}

/// The multi-token-prediction layers a config declares under `keys`, which transformers 5.24
/// does not build (it ignores their weights at load); `None` for none.
fn ignored_mtp(c: &Cfg, keys: &[&str]) -> Result<Option<Mtp>> {
    let layers = c.count(keys, 0)?;
    Ok((layers > 0).then_some(Mtp {
        layers,
        instantiated: false,
        params: 0,
    }))
}

fn sliding(c: &Cfg, default: Option<u64>) -> Result<Option<u64>> {
    if c.map.contains_key("sliding_window") {
        c.opt_u64(&["sliding_window"])
    } else {
        Ok(default)
    }
}

/// Reads a config of one of [`FAMILIES`]; `outer` is the top-level config when `c` is its
/// `text_config` (a wrapper this reader does not know is read as its text config's family).
pub(super) fn read(c: &Cfg, outer: &Cfg) -> Result<Transformer> {
    let mt = if FAMILIES.contains(&outer.model_type) {
        outer.model_type
    } else {
        c.model_type
    };
    let mut d = match mt {
        "qwen3" | "qwen3_moe" | "qwen3_vl" | "qwen3_vl_moe" => qwen3(c)?,
        // Qwen2VLTextModel / Qwen2_5_VLTextModel: Qwen2's decoder (q/k/v biases, no o_proj
        // bias, the same sliding-window keys); M-RoPE only splits the rotary frequencies
        // (`mrope_section`) and adds no weights.
        // Checked as the 5.24 families are (module tree and counts against transformers 5.24,
        // tests/data/vision/README.md), not by the H100 steps Qwen2's decoder was.
        "qwen2_vl" | "qwen2_5_vl" => Draft {
            checked: Checked::Zoo,
            ..super::classic::llama_like(&Cfg {
                map: c.map,
                model_type: "qwen2",
            })?
        },
        "qwen3_5" | "qwen3_5_text" | "qwen3_5_moe" | "qwen3_5_moe_text" | "qwen3_next" => {
            qwen3_5(c, mt)?
        }
        // Sarvam's MLA and MoE models are DeepSeek-V3's and GLM-4.5's classes
        // (modeling_auto.py maps them to DeepseekV3ForCausalLM and Glm4MoeForCausalLM).
        "deepseek_v3" | "kimi_k2" | "deepseek_v32" | "glm_moe_dsa" | "sarvam_mla" => {
            deepseek(c, mt)?
        }
        "glm4_moe" | "sarvam_moe" => glm4_moe(c)?,
        "gpt_oss" => gpt_oss(c)?,
        "llama4" | "llama4_text" => llama4(c)?,
        "gemma3" | "gemma3_text" => {
            // Gemma3TextConfig's defaults for the keys a multimodal checkpoint leaves out
            // (gemma-3-4b-it's text_config lists five keys).
            let mut map = serde_json::Map::new();
            for (k, v) in [
                ("vocab_size", 262_208),
                ("hidden_size", 2304),
                ("intermediate_size", 9216),
                ("num_hidden_layers", 26),
                ("num_attention_heads", 8),
                ("num_key_value_heads", 4),
                ("head_dim", 256),
                ("max_position_embeddings", 131_072),
            ] {
                map.insert(k.into(), Value::from(v));
            }
            for (k, v) in c.map {
                map.insert(k.clone(), v.clone());
            }
            gemma3(&Cfg {
                map: &map,
                model_type: c.model_type,
            })?
        }
        "gemma4" | "gemma4_text" => gemma4(c)?,
        "minimax_m2" => minimax_m2(c)?,
        "nemotron_h" => nemotron_h(c)?,
        "granitemoehybrid" => granite_hybrid(c)?,
        "mimo" => mimo(c)?,
        "olmo2" | "olmo3" => olmo(c, mt)?,
        "smollm3" => smollm3(c)?,
        "ernie4_5" | "ernie4_5_moe" => ernie(c, mt)?,
        "exaone4" => exaone4(c)?,
        "seed_oss" => seed_oss(c)?,
        "hunyuan_v1_dense" | "hunyuan_v1_moe" => hunyuan(c, mt)?,
        "glm" | "glm4" => glm(c, mt)?,
        "granite_swa" => granite_swa(c)?,
        "granite" => granite(c)?,
        "phi" => phi(c)?,
        "starcoder2" => starcoder2(c)?,
        "gpt_bigcode" => gpt_bigcode(c)?,
        "bloom" => bloom(c)?,
        "opt" => opt(c)?,
        "gptj" => gptj(c)?,
        "cohere" | "cohere2" => cohere(c, mt)?,
        "qwen2_moe" => qwen2_moe(c)?,
        "olmoe" => olmoe(c)?,
        "olmo" => olmo1(c)?,
        "deepseek_v2" => deepseek_v2(c)?,
        "minicpm3" => minicpm3(c)?,
        "mamba2" => mamba2(c)?,
        "granitemoe" | "granitemoeshared" => granite_moe(c)?,
        "ministral3" => mistral_text(c, "ministral3")?,
        "stablelm" => stablelm(c)?,
        "phimoe" => phimoe(c)?,
        "hyperclovax" => hyperclovax(c)?,
        "granitemoe_swa" => {
            let mut d = granite_moe(c)?;
            swa_layers(c, &mut d)?;
            d
        }
        "mllama" => mllama(c)?,
        "falcon_h1" => falcon_h1(c)?,
        "mamba" | "falcon_mamba" => mamba(c)?,
        "jamba" => jamba(c)?,
        // Without a `text_config`, Mistral3Config's own text defaults (configuration_mistral3.py
        // `sub_configs_defaults`: Mistral-Small-3.1's decoder, no sliding window).
        "mistral3" if std::ptr::eq(c.map, outer.map) => {
            let mut map = serde_json::Map::new();
            for (k, v) in [
                ("head_dim", 128),
                ("hidden_size", 5120),
                ("intermediate_size", 32_768),
                ("max_position_embeddings", 131_072),
                ("num_attention_heads", 32),
                ("num_hidden_layers", 40),
                ("num_key_value_heads", 8),
                ("vocab_size", 131_072),
            ] {
                map.insert(k.into(), Value::from(v));
            }
            map.insert("sliding_window".into(), Value::Null);
            map.insert("rope_theta".into(), Value::from(1e9));
            mistral_text(
                &Cfg {
                    map: &map,
                    model_type: "mistral",
                },
                "mistral",
            )?
        }
        "mistral3" => match c.str("model_type")? {
            Some(inner @ ("mistral" | "ministral3")) => mistral_text(c, inner)?,
            None => mistral_text(c, "mistral")?,
            Some(other) => {
                return Err(Error::NotDescribed {
                    model_type: mt.into(),
                    what: format!("its text_config of model_type `{other}` is not read"),
                })
            }
        },
        other => return Err(Error::UnknownModelType(other.into())),
    };
    // The class built is the wrapper's: its config's `tie_word_embeddings` decides the tying
    // (modeling_utils.py `tie_weights` reads `self.config`, the top level); Mistral3Config's
    // own default is true. The text config's own tying is kept where it differs: it is what
    // vLLM builds ([`Head::text_tied`]).
    if (!std::ptr::eq(c.map, outer.map) || is_mistral3(outer)?) && builds_vision(outer)? {
        let text_tied = d.tied;
        if outer.find(&["tie_word_embeddings"]).is_some() {
            d.tied = outer.bool("tie_word_embeddings", d.tied)?;
        } else if is_mistral3(outer)? {
            d.tied = true;
        }
        if d.tied != text_tied {
            d.text_tied = Some(text_tied);
        }
    }
    let text_hidden = d.hidden;
    let mut t = build(d)?;
    t.blocks.mrope = match mrope(c)? {
        Some(m) => Some(m),
        None => mrope(outer)?,
    };
    if builds_vision(outer)? {
        t.blocks.vision = vision(outer, text_hidden)?;
        t.blocks.audio = audio(outer, text_hidden)?;
    }
    Ok(t)
}

/// M-RoPE from a config's `rope_scaling` or `rope_parameters` (transformers 5.24's name):
/// present where it lists `mrope_section`, interleaved where `mrope_interleaved` is true.
fn mrope(c: &Cfg) -> Result<Option<MRope>> {
    for key in ["rope_scaling", "rope_parameters"] {
        let Some(Value::Object(r)) = c.map.get(key) else {
            continue;
        };
        if r.contains_key("mrope_section") {
            let interleaved = match r.get("mrope_interleaved") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(Error::WrongType {
                        field: format!("{key}.mrope_interleaved"),
                        expected: "a boolean",
                        found: kind_of(other).into(),
                    })
                }
            };
            return Ok(Some(MRope { interleaved }));
        }
    }
    Ok(None)
}

/// Gemma 4's audio tower (`Gemma4Model.audio_tower`, built when `audio_config` is not null:
/// the E2B/E4B releases) and `embed_audio`, as transformers 5.24's modeling_gemma4.py builds
/// them (missing keys take `Gemma4AudioConfig`'s defaults): the subsampling convolutions (two
/// bias-free 3×3 Conv2d, each with a bias-free LayerNorm) and `input_proj_linear`; per
/// conformer layer two feed-forwards (`ffw_layer_1` H→4H, `ffw_layer_2` 4H→H, two RMSNorms),
/// the chunked attention (q/k/v/`post`, `relative_k_proj`, `per_dim_scale`), the light
/// convolution (`linear_start` H→2H, a depthwise Conv1d, `linear_end`, two RMSNorms) and three
/// RMSNorms; `output_proj` with its bias; `embed_audio`'s bias-free projection to the text
/// width (its norm has no weight). Projections inside a `Gemma4ClippableLinear` are the
/// `nn.Linear` named `linear`; its clipping bounds are buffers.
fn audio(outer: &Cfg, text_hidden: u64) -> Result<Option<AudioTower>> {
    if outer.model_type != "gemma4" {
        return Ok(None);
    }
    let map = match outer.map.get("audio_config") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => return Ok(None),
        Some(other) => {
            return Err(Error::WrongType {
                field: "audio_config".into(),
                expected: "an object",
                found: kind_of(other).into(),
            })
        }
    };
    let a = Cfg {
        map,
        model_type: outer.model_type,
    };
    let h = a.opt_u64(&["hidden_size"])?.unwrap_or(1024);
    let layers = a.opt_u64(&["num_hidden_layers"])?.unwrap_or(12);
    let heads = a.opt_u64(&["num_attention_heads"])?.unwrap_or(8).max(1);
    let k = a.opt_u64(&["conv_kernel_size"])?.unwrap_or(5);
    let o = a.opt_u64(&["output_proj_dims"])?.unwrap_or(1536);
    let (c0, c1) = match a.u64_list("subsampling_conv_channels")? {
        Some(l) if l.len() == 2 => (l[0], l[1]),
        Some(l) => {
            return Err(Error::OutOfRange {
                field: "audio_config.subsampling_conv_channels".into(),
                value: format!("{l:?}"),
                why: "must be two channel counts".into(),
            })
        }
        None => (128, 32),
    };
    let hd = h / heads;
    let qk = heads * hd;
    // Gemma4AudioSubSampleConvProjection: `proj_input_dim = (channels[0] // 4) * channels[1]`.
    let sub_in = c0 / 4 * c1;
    let subsample = 9 * c0 + c0 + 9 * c0 * c1 + c1 + h * sub_in;
    let ffw = 8 * h * h + 2 * h;
    let attn = 3 * qk * h + h * h + qk * h + hd;
    let lconv = 2 * h * h + h * h + h * k + 2 * h;
    let layer = 2 * ffw + attn + lconv + 3 * h;
    let params = subsample + layers * layer + o * h + o + text_hidden * o;
    let lin = |path: &str, out: u64, inp: u64, input: u8| Site {
        path: path.into(),
        out,
        inp,
        kind: SiteKind::Module,
        component: Component::Audio,
        input,
    };
    let linears = vec![
        (
            vec![lin(
                "subsample_conv_projection.input_proj_linear",
                h,
                sub_in,
                0,
            )],
            1,
        ),
        (
            vec![
                lin("feed_forward1.ffw_layer_1.linear", 4 * h, h, 0),
                lin("feed_forward1.ffw_layer_2.linear", h, 4 * h, 1),
                lin("self_attn.q_proj.linear", qk, h, 2),
                lin("self_attn.k_proj.linear", qk, h, 2),
                lin("self_attn.v_proj.linear", qk, h, 2),
                lin("self_attn.relative_k_proj", qk, h, 3),
                lin("self_attn.post.linear", h, h, 4),
                lin("lconv1d.linear_start.linear", 2 * h, h, 5),
                lin("lconv1d.linear_end.linear", h, h, 6),
                lin("feed_forward2.ffw_layer_1.linear", 4 * h, h, 7),
                lin("feed_forward2.ffw_layer_2.linear", h, 4 * h, 8),
            ],
            layers,
        ),
        (
            vec![
                lin("output_proj", o, h, 0),
                lin("embed_audio.embedding_projection", text_hidden, o, 1),
            ],
            1,
        ),
    ];
    // What a tensor-parallel encoder splits (SGLang's gemma4_audio.py): every linear above but
    // `embed_audio`'s projection, and each layer's depthwise convolution and its norm;
    // `output_proj`'s bias stays whole.
    let linear_params: u64 = linears
        .iter()
        .map(|(sites, n)| n * sites.iter().map(|s| s.out * s.inp).sum::<u64>())
        .sum();
    let tp_split_params = linear_params - text_hidden * o + layers * (h * k + h);
    Ok(Some(AudioTower {
        params,
        tp_split_params,
        linears,
    }))
}

/// Whether the checkpoint is Mistral-3's `Mistral3ForConditionalGeneration` (a Pixtral tower
/// around a Mistral or Ministral 3 text model): `model_type` `mistral3`, or the class named by
/// `architectures` (mlc-llm's copy of Ministral-3-3B-Instruct-2512 writes `ministral3` at the
/// top level beside a `vision_config`; transformers 5.24's AutoConfig cannot load that file,
/// vLLM picks its class by `architectures`).
fn is_mistral3(outer: &Cfg) -> Result<bool> {
    if outer.model_type == "mistral3" {
        return Ok(true);
    }
    Ok(match outer.list("architectures")? {
        Some(a) => {
            matches!(a.first(), Some(Value::String(n)) if n == "Mistral3ForConditionalGeneration")
        }
        None => false,
    })
}

/// Whether the class the checkpoint names builds the vision tower: `architectures[0]` a
/// `*ForConditionalGeneration`; without `architectures`, the class `AutoModelForCausalLM` maps
/// the `model_type` to (models/auto/modeling_auto.py: qwen3_vl, gemma3 and gemma4 to their
/// `*ForConditionalGeneration`, qwen3_5 and llama4 to text-only `*ForCausalLM`); mistral3 has no
/// causal-LM class, only `Mistral3ForConditionalGeneration` (image-text-to-text).
fn builds_vision(outer: &Cfg) -> Result<bool> {
    if let Some(a) = outer.list("architectures")? {
        if let Some(Value::String(name)) = a.first() {
            return Ok(name.ends_with("ForConditionalGeneration"));
        }
    }
    Ok(matches!(
        outer.model_type,
        "qwen3_vl" | "qwen3_vl_moe" | "qwen2_vl" | "qwen2_5_vl" | "gemma3" | "gemma4" | "mistral3"
    ))
}

/// Bytes one tensor may take: `vram_alloc`'s largest block, 2^48 bytes (256 TiB), in which the
/// allocator replay of `vram estimate` and `vram trace` places each tensor; 900 times the
/// memory of the largest GPU (288 GB: B300, MI355X). A tensor beyond it is held by no device.
pub(crate) const MAX_TENSOR_BYTES: u64 = 1 << 48;

/// The patch merger's input width, `hidden_size × spatial_merge_size²` (one merged token is
/// `spatial_merge_size²` patches side by side), for a merger whose widest linear holds
/// `rows × width` weights, `rows` from the width (Qwen's `linear_fc1` / `mlp.0`: `width ×
/// width`; Pixtral's `merging_layer`: `hidden_size × width`). Its weights grow with the merge's
/// fourth (Qwen) or second power: at `spatial_merge_size` 100 Qwen3.5's `linear_fc1` is
/// 11,520,000 × 11,520,000, 483 TiB in fp32, where every released tower merges 2. A linear
/// whose fp32 weight passes [`MAX_TENSOR_BYTES`] is refused in one line naming the field
/// (found by `vram trace` failing on a 552 TiB simulated device, the replay's block limit; at
/// 4096 the count had overflowed 64 bits).
fn merger_width(field: &str, hv: u64, m: u64, rows: impl Fn(u64) -> u64) -> Result<u64> {
    let width = m.checked_mul(m).and_then(|mm| mm.checked_mul(hv));
    let bytes = width.and_then(|w| rows(w).checked_mul(w)?.checked_mul(4));
    if let (Some(w), Some(b)) = (width, bytes) {
        if b <= MAX_TENSOR_BYTES {
            return Ok(w);
        }
    }
    let key = field.rsplit('.').next().unwrap_or(field);
    let shape = match (width, bytes) {
        (Some(w), Some(b)) => format!(
            " ({} x {}, {})",
            crate::fmt::thousands(rows(w)),
            crate::fmt::thousands(w),
            crate::fmt::bytes(b)
        ),
        _ => String::new(),
    };
    Err(Error::OutOfRange {
        field: field.into(),
        value: m.to_string(),
        why: format!(
            "the patch merger's widest linear takes hidden_size {hv} x {key}^2 inputs, and its fp32 weight{shape} passes the 256 TiB one tensor can be placed in (no GPU holds it; released towers merge 2)"
        ),
    })
}

/// The vision tower and projector of a multimodal wrapper, from `vision_config` (missing keys
/// take the vision config class's defaults).
pub(super) fn vision(outer: &Cfg, text_hidden: u64) -> Result<Option<Vision>> {
    let empty = serde_json::Map::new();
    let map = match outer.map.get("vision_config") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => &empty,
        Some(other) => {
            return Err(Error::WrongType {
                field: "vision_config".into(),
                expected: "an object",
                found: kind_of(other).into(),
            })
        }
    };
    let v = Cfg {
        map,
        model_type: outer.model_type,
    };
    let family = if is_mistral3(outer)? {
        "mistral3"
    } else {
        outer.model_type
    };
    Ok(Some(match family {
        // Qwen3VLVisionModel / Qwen3_5VisionModel: Conv3d patch embedding with bias, learned
        // positions, `depth` blocks (two LayerNorms, fused qkv and proj with biases, a
        // non-gated MLP with biases), the patch merger (LayerNorm, fc1, fc2 with biases) and one
        // more merger per `deepstack_visual_indexes` entry (its LayerNorm over the merged width).
        "qwen3_vl" | "qwen3_vl_moe" | "qwen3_5" | "qwen3_5_moe" => {
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(1152);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(4304);
            let depth = v.opt_u64(&["depth"])?.unwrap_or(27);
            let heads = v.opt_u64(&["num_heads"])?.unwrap_or(16);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(16);
            let tp = v.opt_u64(&["temporal_patch_size"])?.unwrap_or(2);
            let ch = v.opt_u64(&["in_channels"])?.unwrap_or(3);
            let m = v.opt_u64(&["spatial_merge_size"])?.unwrap_or(2);
            let out = v.opt_u64(&["out_hidden_size"])?.unwrap_or(text_hidden);
            let pos = v.opt_u64(&["num_position_embeddings"])?.unwrap_or(2304);
            let deepstack = match v.u64_list("deepstack_visual_indexes")? {
                Some(l) => l.len() as u64,
                None if outer.model_type.starts_with("qwen3_vl") => 3,
                None => 0,
            };
            let block = 4 * hv + 3 * hv * hv + 3 * hv + hv * hv + hv + 2 * i * hv + i + hv;
            // The merger's fc1 holds (hidden_size · merge²)² weights, once per merger.
            let merged = merger_width("vision_config.spatial_merge_size", hv, m, |w| w)?;
            if (merged * merged)
                .checked_mul(deepstack + 1)
                .is_none_or(|n| n >= 1 << 60)
            {
                return Err(Error::OutOfRange {
                    field: "vision_config.deepstack_visual_indexes".into(),
                    value: format!("{deepstack} entries"),
                    why: "one patch merger each, whose weights together pass 2^60".into(),
                });
            }
            let merger = |norm: u64| 2 * norm + merged * merged + merged + out * merged + out;
            let params = hv * ch * tp * p * p
                + hv
                + pos * hv
                + depth * block
                + merger(hv)
                + deepstack * merger(merged);
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                // Qwen2VLImageProcessor's class defaults (image_processing_qwen2_vl.py: `size`
                // shortest_edge 56·56, longest_edge 28·28·1280) and Qwen3VLVideoProcessor's
                // (video_processing_qwen3_vl.py: longest_edge 32·32·768); patch and merge from
                // the tower. A checkpoint's processor files replace them
                // (`read::apply_preprocessor`, `read::apply_video_preprocessor`).
                input: VisionInput::SmartResize {
                    merge: m,
                    min_pixels: 56 * 56,
                    max_pixels: 28 * 28 * 1280,
                    video: VideoSize::Clip {
                        max_pixels: 32 * 32 * 768,
                    },
                },
                patch_elems: ch * tp * p * p,
                out,
                gated: false,
                deepstack,
                tp_split: true,
                projector_split: (1 + deepstack) * (merged * merged + merged + out * merged),
                images: None,
                // Qwen3VLVisionBlock's fused qkv and proj, the MLP's linear_fc1/linear_fc2; the
                // patch merger's and each deepstack merger's linear_fc1/linear_fc2 (the patch
                // embedding is a Conv3d).
                linears: vec![
                    (
                        vec![
                            tower_linear("attn.qkv", 3 * hv, hv, 0),
                            tower_linear("attn.proj", hv, hv, 1),
                            tower_linear("mlp.linear_fc1", i, hv, 2),
                            tower_linear("mlp.linear_fc2", hv, i, 3),
                        ],
                        depth,
                    ),
                    (
                        vec![
                            tower_linear("merger.linear_fc1", merged, merged, 0),
                            tower_linear("merger.linear_fc2", out, merged, 1),
                        ],
                        1,
                    ),
                    (
                        vec![
                            tower_linear("deepstack_merger_list.linear_fc1", merged, merged, 0),
                            tower_linear("deepstack_merger_list.linear_fc2", out, merged, 1),
                        ],
                        deepstack,
                    ),
                ],
            }
        }
        // Qwen2VisionTransformerPretrainedModel (qwen2_vl) / Qwen2_5_VisionTransformerPretrainedModel
        // (qwen2_5_vl): a bias-free Conv3d patch embedding, rotary positions (no weights), `depth`
        // blocks (fused qkv and proj with biases; Qwen2-VL: two LayerNorms over `embed_dim` and
        // a biased fc1/fc2 MLP of `embed_dim · mlp_ratio`; Qwen2.5-VL: two RMSNorms over
        // `hidden_size` and a biased gate/up/down MLP of `intermediate_size`, full attention
        // only at `fullatt_block_indexes`, windows elsewhere, which changes no weight), and the
        // patch merger (its norm as the blocks', `mlp.0` and `mlp.2` with biases) into the text
        // width: Qwen2-VL's vision `hidden_size`, Qwen2.5-VL's `out_hidden_size`.
        "qwen2_vl" | "qwen2_5_vl" => {
            let v25 = family == "qwen2_5_vl";
            let (hv, i) = if v25 {
                let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(3584);
                (hv, v.opt_u64(&["intermediate_size"])?.unwrap_or(3420))
            } else {
                let hv = v.opt_u64(&["embed_dim"])?.unwrap_or(1280);
                (hv, hv * v.opt_u64(&["mlp_ratio"])?.unwrap_or(4))
            };
            let depth = v.opt_u64(&["depth"])?.unwrap_or(32);
            let heads = v.opt_u64(&["num_heads"])?.unwrap_or(16);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(14);
            let tp = v.opt_u64(&["temporal_patch_size"])?.unwrap_or(2);
            let ch = v.opt_u64(&["in_channels"])?.unwrap_or(3);
            let m = v.opt_u64(&["spatial_merge_size"])?.unwrap_or(2);
            let out = if v25 {
                v.opt_u64(&["out_hidden_size"])?
            } else {
                v.opt_u64(&["hidden_size"])?
            }
            .unwrap_or(text_hidden);
            // LayerNorm: weight and bias; RMSNorm: weight.
            let norm = if v25 { hv } else { 2 * hv };
            let mlp = if v25 {
                2 * (i * hv + i) + hv * i + hv
            } else {
                i * hv + i + hv * i + hv
            };
            let block = 2 * norm + 3 * hv * hv + 3 * hv + hv * hv + hv + mlp;
            let merged = merger_width("vision_config.spatial_merge_size", hv, m, |w| w)?;
            let params = hv * ch * tp * p * p
                + depth * block
                + norm
                + merged * merged
                + merged
                + out * merged
                + out;
            let mut per_block = vec![
                tower_linear("attn.qkv", 3 * hv, hv, 0),
                tower_linear("attn.proj", hv, hv, 1),
            ];
            if v25 {
                per_block.extend([
                    tower_linear("mlp.gate_proj", i, hv, 2),
                    tower_linear("mlp.up_proj", i, hv, 2),
                    tower_linear("mlp.down_proj", hv, i, 3),
                ]);
            } else {
                per_block.extend([
                    tower_linear("mlp.fc1", i, hv, 2),
                    tower_linear("mlp.fc2", hv, i, 3),
                ]);
            }
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                // Qwen2VLImageProcessor's class defaults (image_processing_qwen2_vl.py: `size`
                // shortest_edge 56·56, longest_edge 28·28·1280; Qwen2.5-VL uses the same
                // processor class); a checkpoint's preprocessor_config.json replaces them.
                // Qwen2VLVideoProcessor resizes each frame like an image (its longest_edge
                // bounds one frame, not a clip).
                input: VisionInput::SmartResize {
                    merge: m,
                    min_pixels: 56 * 56,
                    max_pixels: 28 * 28 * 1280,
                    video: VideoSize::Frames,
                },
                patch_elems: ch * tp * p * p,
                out,
                gated: v25,
                deepstack: 0,
                tp_split: true,
                projector_split: merged * merged + merged + out * merged,
                images: None,
                linears: vec![
                    (per_block, depth),
                    (
                        vec![
                            tower_linear("merger.mlp.0", merged, merged, 0),
                            tower_linear("merger.mlp.2", out, merged, 1),
                        ],
                        1,
                    ),
                ],
            }
        }
        // Gemma3: SiglipVisionModel (Conv2d patch embedding with bias, learned positions,
        // pre-LN encoder layers with biased projections and a non-gated MLP, post LayerNorm,
        // the pooling head if `vision_use_head`) and `Gemma3MultiModalProjector` (an `[hv, H]` weight and an
        // RMSNorm over hv).
        "gemma3" => {
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(768);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(3072);
            let depth = v.opt_u64(&["num_hidden_layers"])?.unwrap_or(12);
            let heads = v.opt_u64(&["num_attention_heads"])?.unwrap_or(12);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(16);
            let image = v.opt_u64(&["image_size"])?.unwrap_or(224);
            let ch = v.opt_u64(&["num_channels"])?.unwrap_or(3);
            let block = 4 * hv + 4 * (hv * hv + hv) + 2 * i * hv + i + hv;
            // SiglipMultiheadAttentionPoolingHead when `vision_use_head` (the class default):
            // probe, nn.MultiheadAttention, LayerNorm, MLP.
            let use_head = v.bool("vision_use_head", true)?;
            let head = if use_head {
                hv + 4 * hv * hv + 4 * hv + 2 * hv + 2 * i * hv + i + hv
            } else {
                0
            };
            let params = hv * ch * p * p
                + hv
                + (image / p).pow(2) * hv
                + depth * block
                + 2 * hv
                + head
                + hv * text_hidden
                + hv;
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                input: VisionInput::Fixed {
                    image,
                    tokens: outer.opt_u64(&["mm_tokens_per_image"])?.unwrap_or(256),
                },
                patch_elems: ch * p * p,
                out: text_hidden,
                gated: false,
                deepstack: 0,
                tp_split: true,
                projector_split: 0,
                images: None,
                // SiglipEncoderLayer's q/k/v/out_proj and fc1/fc2; the pooling head's
                // nn.MultiheadAttention keeps its out_proj as an nn.Linear subclass
                // (NonDynamicallyQuantizableLinear), its in-projection as a bare parameter. The
                // projector's weight is a bare parameter too.
                linears: {
                    let mut l = vec![(
                        vec![
                            tower_linear("self_attn.k_proj", hv, hv, 0),
                            tower_linear("self_attn.v_proj", hv, hv, 0),
                            tower_linear("self_attn.q_proj", hv, hv, 0),
                            tower_linear("self_attn.out_proj", hv, hv, 1),
                            tower_linear("mlp.fc1", i, hv, 2),
                            tower_linear("mlp.fc2", hv, i, 3),
                        ],
                        depth,
                    )];
                    if use_head {
                        l.push((
                            vec![
                                tower_linear("head.attention.out_proj", hv, hv, 0),
                                tower_linear("head.mlp.fc1", i, hv, 1),
                                tower_linear("head.mlp.fc2", hv, i, 2),
                            ],
                            1,
                        ));
                    }
                    l
                },
            }
        }
        // Llama4VisionModel (class embedding, positions for every patch plus the class token,
        // a bias-free linear patch embedding, pre/post LayerNorms, biased attention and MLP
        // layers, the `vision_adapter` MLP without biases) and `Llama4MultiModalProjector`.
        "llama4" => {
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(768);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(5632);
            let depth = v.opt_u64(&["num_hidden_layers"])?.unwrap_or(34);
            let heads = v.opt_u64(&["num_attention_heads"])?.unwrap_or(16);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(14);
            let image = v.opt_u64(&["image_size"])?.unwrap_or(448);
            let ch = v.opt_u64(&["num_channels"])?.unwrap_or(3);
            let pin = v.opt_u64(&["projector_input_dim"])?.unwrap_or(4096);
            let pout = v.opt_u64(&["projector_output_dim"])?.unwrap_or(4096);
            let vout = v.opt_u64(&["vision_output_dim"])?.unwrap_or(7680);
            let block = 4 * hv + 4 * (hv * hv + hv) + 2 * i * hv + i + hv;
            let params = hv
                + ((image / p).pow(2) + 1) * hv
                + hv * ch * p * p
                + 4 * hv
                + depth * block
                + pin * i
                + pout * pout
                + text_hidden * vout;
            // pixel_shuffle_ratio (0.5 by default): 1/ratio² patches make one token.
            let ratio = match v.map.get("pixel_shuffle_ratio") {
                Some(Value::Number(n)) => n.as_f64().unwrap_or(0.5),
                _ => 0.5,
            };
            let inv = 1.0 / ratio;
            if !(inv.is_finite() && inv >= 1.0 && (inv - inv.round()).abs() < 1e-9) {
                return Err(Error::OutOfRange {
                    field: "vision_config.pixel_shuffle_ratio".into(),
                    value: ratio.to_string(),
                    why: "must be 1/n for a whole n".into(),
                });
            }
            let shuffle = inv.round() as u64;
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                // Llama4ImageProcessor: `max_patches` 16 tiles; its tile side is the tower's
                // `image_size` (the positions are learned for that many patches).
                input: VisionInput::Tiles {
                    tile: image,
                    max_tiles: 16,
                    shuffle,
                },
                patch_elems: ch * p * p,
                out: text_hidden,
                gated: false,
                deepstack: 0,
                tp_split: true,
                projector_split: 0,
                images: None,
                // Llama4UnfoldConvolution's linear, the encoder layers' q/k/v/o_proj and
                // fc1/fc2, the vision adapter's MLP (Llama4VisionMLP2: fc1 from the tower's
                // intermediate size, fc2) and the projector's linear_1.
                linears: vec![
                    (
                        vec![tower_linear("patch_embedding.linear", hv, ch * p * p, 0)],
                        1,
                    ),
                    (
                        vec![
                            tower_linear("self_attn.q_proj", hv, hv, 0),
                            tower_linear("self_attn.k_proj", hv, hv, 0),
                            tower_linear("self_attn.v_proj", hv, hv, 0),
                            tower_linear("self_attn.o_proj", hv, hv, 1),
                            tower_linear("mlp.fc1", i, hv, 2),
                            tower_linear("mlp.fc2", hv, i, 3),
                        ],
                        depth,
                    ),
                    (
                        vec![
                            tower_linear("vision_adapter.mlp.fc1", pin, i, 0),
                            tower_linear("vision_adapter.mlp.fc2", pout, pout, 1),
                            tower_linear("multi_modal_projector.linear_1", text_hidden, vout, 2),
                        ],
                        1,
                    ),
                ],
            }
        }
        // Gemma4VisionModel: a bias-free patch projection, a two-row position table, layers of
        // bias-free q/k/v/o and gated MLP with per-head q/k norms and four RMSNorms, and
        // `embed_vision`'s bias-free projection to the text width. `vision_config: null` builds
        // none; an audio tower is described apart (`audio`).
        "gemma4" => {
            if matches!(outer.map.get("vision_config"), Some(Value::Null)) {
                return Ok(None);
            }
            // Gemma4VisionConfig's defaults (transformers 5.24).
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(768);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(3072);
            let depth = v.opt_u64(&["num_hidden_layers"])?.unwrap_or(16);
            let heads = v.opt_u64(&["num_attention_heads"])?.unwrap_or(12);
            let kv = v.opt_u64(&["num_key_value_heads"])?.unwrap_or(12);
            let hd = v.opt_u64(&["head_dim"])?.unwrap_or(64);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(16);
            let pos = v.opt_u64(&["position_embedding_size"])?.unwrap_or(10_240);
            let block = 2 * heads * hd * hv + 2 * kv * hd * hv + 2 * hd + 3 * i * hv + 4 * hv;
            let params = 2 * pos * hv + hv * 3 * p * p + depth * block + text_hidden * hv;
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                input: VisionInput::PatchBudget {
                    pool: v.opt_u64(&["pooling_kernel_size"])?.unwrap_or(3),
                    soft_tokens: outer
                        .opt_u64(&["vision_soft_tokens_per_image"])?
                        .unwrap_or(280),
                },
                patch_elems: 3 * p * p,
                out: text_hidden,
                gated: true,
                deepstack: 0,
                tp_split: true,
                projector_split: 0,
                images: None,
                // The patch embedder's input_proj; the encoder layers' projections, each an
                // nn.Linear named `linear` inside a Gemma4ClippableLinear; embed_vision's
                // embedding_projection.
                linears: vec![
                    (
                        vec![tower_linear("patch_embedder.input_proj", hv, 3 * p * p, 0)],
                        1,
                    ),
                    (
                        vec![
                            tower_linear("self_attn.q_proj.linear", heads * hd, hv, 0),
                            tower_linear("self_attn.k_proj.linear", kv * hd, hv, 0),
                            tower_linear("self_attn.v_proj.linear", kv * hd, hv, 0),
                            tower_linear("self_attn.o_proj.linear", hv, heads * hd, 1),
                            tower_linear("mlp.gate_proj.linear", i, hv, 2),
                            tower_linear("mlp.up_proj.linear", i, hv, 2),
                            tower_linear("mlp.down_proj.linear", hv, i, 3),
                        ],
                        depth,
                    ),
                    (
                        vec![tower_linear(
                            "embed_vision.embedding_projection",
                            text_hidden,
                            hv,
                            0,
                        )],
                        1,
                    ),
                ],
            }
        }
        // MllamaVisionModel (transformers `modeling_mllama.py`): a bias-free Conv2d patch
        // embedding, a class embedding, gated positional embeddings with a tile table per aspect
        // ratio (`len(supported_aspect_ratios) + 1` rows of `max_num_tiles` x patches x width),
        // gated pre/post tile embeddings, two LayerNorms, `num_hidden_layers` local and
        // `num_global_layers` gated encoder layers (bias-free q/k/v/o, a biased fc1/fc2 MLP, two
        // LayerNorms), and the projector from `vision_output_dim` to the text width. Llama 3.2
        // Vision feeds the image to the text model by cross-attention, so it adds no text tokens.
        "mllama" => {
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(1280);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(5120);
            let depth = v.opt_u64(&["num_hidden_layers"])?.unwrap_or(32);
            let global = v.opt_u64(&["num_global_layers"])?.unwrap_or(8);
            let heads = v.opt_u64(&["attention_heads"])?.unwrap_or(16);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(14);
            let image = v.opt_u64(&["image_size"])?.unwrap_or(448);
            let ch = v.opt_u64(&["num_channels"])?.unwrap_or(3);
            let tiles = v.opt_u64(&["max_num_tiles"])?.unwrap_or(4);
            let vout = v.opt_u64(&["vision_output_dim"])?.unwrap_or(7680);
            let ratios = match v.map.get("supported_aspect_ratios") {
                Some(Value::Array(a)) => a.len() as u64,
                _ => 8,
            };
            let patches = (image / p).pow(2) + 1;
            let layer = 4 * hv * hv + 2 * hv * i + i + hv + 4 * hv;
            let params = ch * p * p * hv
                + hv
                + patches * hv
                + 1
                + (ratios + 1) * tiles * patches * hv
                + 2 * ((ratios + 1) * tiles * hv + 1)
                + 4 * hv
                + depth * layer
                + global * (layer + 2)
                + vout * text_hidden
                + text_hidden;
            Vision {
                depth: depth + global,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params,
                input: VisionInput::CrossTiles {
                    image,
                    tiles,
                    intermediate_layers: v
                        .u64_list("intermediate_layers_indices")?
                        .map_or(5, |l| l.len() as u64),
                },
                patch_elems: ch * p * p,
                out: text_hidden,
                gated: false,
                deepstack: 0,
                tp_split: true,
                projector_split: 0,
                images: None,
                // The local and global encoder layers' q/k/v/o_proj and fc1/fc2 (the same
                // names and shapes), and the projector, itself one nn.Linear.
                linears: vec![
                    (
                        vec![
                            tower_linear("self_attn.q_proj", hv, hv, 0),
                            tower_linear("self_attn.k_proj", hv, hv, 0),
                            tower_linear("self_attn.v_proj", hv, hv, 0),
                            tower_linear("self_attn.o_proj", hv, hv, 1),
                            tower_linear("mlp.fc1", i, hv, 2),
                            tower_linear("mlp.fc2", hv, i, 3),
                        ],
                        depth + global,
                    ),
                    (
                        vec![tower_linear("multi_modal_projector", text_hidden, vout, 0)],
                        1,
                    ),
                ],
            }
        }
        // Mistral3ForConditionalGeneration (transformers 5.24 `modeling_pixtral.py`
        // `PixtralVisionModel`, `modeling_mistral3.py` `Mistral3MultiModalProjector`): a
        // bias-free patch Conv2d, the `ln_pre` RMSNorm, layers of two RMSNorms
        // (`attention_norm`, `ffn_norm`), bias-free q/k/v/o and a gated MLP; the 2D rotary has
        // no parameters. The projector: an RMSNorm over the tower's width, the patch merger's
        // bias-free `merging_layer` (`spatial_merge_size`² patches in, one out), `linear_1`
        // (one tower width per `vision_feature_layer`) and `linear_2`, biased by
        // `multimodal_projector_bias` (class default false). Without `vision_config` the
        // wrapper's own defaults apply (Mistral3Config: patch 14, image 1540); a given
        // `vision_config` takes PixtralVisionConfig's (patch 16, image 1024).
        "mistral3" => {
            let given = outer.map.get("vision_config").is_some_and(Value::is_object);
            let hv = v.opt_u64(&["hidden_size"])?.unwrap_or(1024);
            let i = v.opt_u64(&["intermediate_size"])?.unwrap_or(4096);
            let depth = v.opt_u64(&["num_hidden_layers"])?.unwrap_or(24);
            let heads = v.opt_u64(&["num_attention_heads"])?.unwrap_or(16);
            let p = v
                .opt_u64(&["patch_size"])?
                .unwrap_or(if given { 16 } else { 14 });
            let image = v
                .opt_u64(&["image_size"])?
                .unwrap_or(if given { 1024 } else { 1540 });
            let ch = v.opt_u64(&["num_channels"])?.unwrap_or(3);
            let merge = outer.opt_u64(&["spatial_merge_size"])?.unwrap_or(2);
            let feature_layers = match outer.map.get("vision_feature_layer") {
                Some(Value::Array(l)) => l.len() as u64,
                _ => 1,
            };
            let bias = u64::from(outer.bool("multimodal_projector_bias", false)?);
            let tower = hv * ch * p * p + hv + depth * (2 * hv + 4 * hv * hv + 3 * hv * i);
            let merged = merger_width("spatial_merge_size", hv, merge, |_| hv)?;
            let projector = hv
                + merged * hv
                + feature_layers * hv * text_hidden
                + text_hidden * text_hidden
                + bias * 2 * text_hidden;
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params: tower + projector,
                input: VisionInput::Pixtral {
                    merge,
                    longest_edge: image,
                },
                patch_elems: ch * p * p,
                out: text_hidden,
                gated: true,
                deepstack: 0,
                // Mistral's repos ship Mistral-format weights beside config.json (`params.json`,
                // `consolidated*.safetensors`); vLLM 0.18's `config_format` "auto" loads those
                // first (transformers_utils/config.py, repo_utils.py `is_mistral_model_repo`)
                // into `PixtralForConditionalGeneration`, whose `VisionTransformer` and adapter
                // are plain `nn.Linear`s on every GPU (model_executor/models/pixtral.py).
                tp_split: false,
                projector_split: 0,
                images: None,
                // PixtralAttentionLayer's q/k/v/o_proj and gated feed_forward; the projector's
                // patch merger and linear_1/linear_2.
                linears: vec![
                    (
                        vec![
                            tower_linear("attention.q_proj", hv, hv, 0),
                            tower_linear("attention.k_proj", hv, hv, 0),
                            tower_linear("attention.v_proj", hv, hv, 0),
                            tower_linear("attention.o_proj", hv, hv, 1),
                            tower_linear("feed_forward.gate_proj", i, hv, 2),
                            tower_linear("feed_forward.up_proj", i, hv, 2),
                            tower_linear("feed_forward.down_proj", hv, i, 3),
                        ],
                        depth,
                    ),
                    (
                        vec![
                            tower_linear(
                                "multi_modal_projector.patch_merger.merging_layer",
                                hv,
                                merged,
                                0,
                            ),
                            tower_linear(
                                "multi_modal_projector.linear_1",
                                text_hidden,
                                feature_layers * hv,
                                1,
                            ),
                            tower_linear(
                                "multi_modal_projector.linear_2",
                                text_hidden,
                                text_hidden,
                                2,
                            ),
                        ],
                        1,
                    ),
                ],
            }
        }
        // Kimi-K2.5 (transformers 5.24 `modeling_kimi_k25.py`: `Kimi_K25VisionModel`,
        // `Kimi_K25MultimodalProjection`; counted on the meta device by
        // `tests/zoo/kimi_k25_reference.py`): a biased Conv2d patch embedding, a learned
        // `pos_emb_height` × `pos_emb_width` position table (the time table is a buffer), layers
        // of two LayerNorms, biased q/k/v/proj and a biased two-matmul MLP, a final LayerNorm;
        // the 2D rotary has no parameters. The projector: a LayerNorm over the tower's width,
        // `in_proj` over `merge_kernel_size` patches and `out_proj` to the text width, both
        // biased. The in-tree config class reads `hidden_size`, `num_hidden_layers`, ...; the
        // checkpoint's remote-code config (which vLLM's and SGLang's `KimiK25VisionConfig`
        // read) names them `vt_hidden_size`, `vt_num_hidden_layers`, ...: the in-tree name
        // first, then the checkpoint's, then the class default (Kimi-K2.5's sizes).
        "kimi_k25" => {
            let hv = v
                .opt_u64(&["hidden_size", "vt_hidden_size"])?
                .unwrap_or(1152);
            let i = v
                .opt_u64(&["intermediate_size", "vt_intermediate_size"])?
                .unwrap_or(4304);
            let depth = v
                .opt_u64(&["num_hidden_layers", "vt_num_hidden_layers"])?
                .unwrap_or(27);
            let heads = v
                .opt_u64(&["num_attention_heads", "vt_num_attention_heads"])?
                .unwrap_or(16);
            let p = v.opt_u64(&["patch_size"])?.unwrap_or(14);
            let pos_h = v
                .opt_u64(&["pos_emb_height", "init_pos_emb_height"])?
                .unwrap_or(64);
            let pos_w = v
                .opt_u64(&["pos_emb_width", "init_pos_emb_width"])?
                .unwrap_or(64);
            let merge = match v.u64_list("merge_kernel_size")?.as_deref() {
                None => 2,
                Some([a, b]) if a == b && *a > 0 => *a,
                Some(other) => {
                    return Err(Error::OutOfRange {
                        field: "vision_config.merge_kernel_size".into(),
                        value: format!("{other:?}"),
                        why: "vram models Kimi-K2.5's square merge kernel only (two equal sizes)"
                            .into(),
                    })
                }
            };
            let ch = 3;
            let merged = merger_width("vision_config.merge_kernel_size", hv, merge, |w| w)?;
            let layer = 2 * 2 * hv + 4 * (hv * hv + hv) + (hv * i + i) + (i * hv + hv);
            let tower = ch * p * p * hv + hv + pos_h * pos_w * hv + depth * layer + 2 * hv;
            let projector =
                2 * hv + (merged * merged + merged) + (merged * text_hidden + text_hidden);
            Vision {
                depth,
                hidden: hv,
                intermediate: i,
                heads,
                patch: p,
                params: tower + projector,
                // Kimi_K25ImageProcessor's class defaults (transformers 5.24
                // `image_processing_kimi_k25.py`): `max_patches` 16384, `size["max_height"]`
                // 512 patches a side, `merge_size` 2 (the tower's merge kernel).
                input: VisionInput::Navit {
                    merge,
                    max_patches: 16_384,
                    max_side: 512,
                },
                patch_elems: ch * p * p,
                out: text_hidden,
                gated: false,
                deepstack: 0,
                // vLLM's `kimi_k25_vit.py` (`MoonViTEncoderLayer`: QKVParallelLinear `wqkv`,
                // RowParallelLinear `wo`, MLP2's Column/RowParallelLinear) and SGLang's
                // `kimi_k25.py` (`VisionAttention` with `use_qkv_parallel`, `kimi_vl_moonvit`'s
                // MLP2) split the layers' linears over TP unless the encoder runs data-parallel;
                // both build the projector from ReplicatedLinear / plain modules (read at
                // vllm-project/vllm 009dff45 and 055e47c2, sgl-project/sglang 00a239e5).
                tp_split: true,
                projector_split: 0,
                images: None,
                linears: vec![
                    (
                        vec![
                            tower_linear("attn.q_proj", hv, hv, 0),
                            tower_linear("attn.k_proj", hv, hv, 0),
                            tower_linear("attn.v_proj", hv, hv, 0),
                            tower_linear("attn.proj", hv, hv, 1),
                            tower_linear("mlp.fc1", i, hv, 2),
                            tower_linear("mlp.fc2", hv, i, 3),
                        ],
                        depth,
                    ),
                    (
                        vec![
                            tower_linear("mm_projector.in_proj", merged, merged, 0),
                            tower_linear("mm_projector.out_proj", text_hidden, merged, 1),
                        ],
                        1,
                    ),
                ],
            }
        }
        _ => return Ok(None),
    }))
}

/// Refuses an unknown `model_type` whose config carries a key that changes the module tree in
/// ways a generic decoder would silently miss: experts, MLA, linear attention or Mamba, and
/// per-layer block lists (`block_configs`: Nemotron-NAS/DeciLM, whose layers each choose their
/// own KV grouping and MLP width or drop the attention or MLP altogether).
pub(super) fn refuse_family_keys(c: &Cfg) -> Result<()> {
    for key in [
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_num_experts",
        "kv_lora_rank",
        "linear_num_key_heads",
        "mamba_num_heads",
        "hybrid_override_pattern",
        "block_configs",
    ] {
        let present = match c.map.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Number(n)) => n.as_u64().is_some_and(|n| n > 0),
            Some(_) => true,
        };
        if present {
            return Err(Error::Undescribable {
                field: key.into(),
                model_type: c.model_type.into(),
            });
        }
    }
    Ok(())
}

/// An unknown `model_type` with the standard decoder keys and no structural key it does not
/// read (`keys::check_generic`, run first): a Llama-style decoder (pre-norm, GQA attention
/// without biases, gated SiLU MLP, untied head), with a note naming what was assumed.
pub(super) fn generic(c: &Cfg) -> Result<Transformer> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = c.bool("attention_bias", false)?;
    d.attn.out_bias = d.attn.qkv_bias;
    d.dense.bias = c.bool("mlp_bias", false)?;
    let mut assumed = vec![
        "a Llama-style decoder: pre-norm RMSNorm (2 per layer), separate q/k/v/o projections, a gated MLP".to_string(),
    ];
    if !c.map.contains_key("attention_bias") {
        assumed.push("no attention biases".into());
    }
    if !c.map.contains_key("tie_word_embeddings") {
        assumed.push("an untied LM head".into());
    }
    // A window slides every layer unless `use_sliding_window: false` turns it off (Qwen2-style
    // configs keep the window's size there).
    if let Some(w) =
        sliding(c, None)?.filter(|_| c.bool("use_sliding_window", true).unwrap_or(true))
    {
        d.sliding_window = Some(w);
        d.layer_types
            .iter_mut()
            .for_each(|t| *t = LayerType::Sliding);
    }
    if let Some(t) = c.layer_types("layer_types", d.layer_types.len() as u64)? {
        // Only attention layers: any other kind (`mlp`, `linear_attention`, ...) has modules a
        // generic decoder does not build.
        if t.iter()
            .any(|t| !matches!(t, LayerType::Full | LayerType::Sliding))
        {
            return Err(Error::Undescribable {
                field: "layer_types".into(),
                model_type: c.model_type.into(),
            });
        }
        if t.contains(&LayerType::Sliding) && d.sliding_window.is_none() {
            d.sliding_window = c.opt_u64(&["sliding_window"])?;
        }
        d.layer_types = t;
    }
    d.notes.push(format!(
        "model_type `{}` is not known: read as {}",
        c.model_type,
        assumed.join(", ")
    ));
    build(d)
}

/// qwen3 / qwen3_moe (`Qwen3Attention`: q/k/v/o bias = `attention_bias`, per-head q/k RMSNorm;
/// `Qwen3MoeSparseMoeBlock`: router `gate` without bias, softmax top-k weights cast to the
/// model dtype, no shared expert; dense where `i in mlp_only_layers` or
/// `(i + 1) % decoder_sparse_step != 0`).
fn qwen3(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    if c.bool("use_sliding_window", false)? {
        if let Some(w) = c.opt_u64(&["sliding_window"])? {
            let from = c.count(&["max_window_layers"], 28)?;
            d.sliding_window = Some(w);
            for (i, t) in d.layer_types.iter_mut().enumerate() {
                if i as u64 >= from {
                    *t = LayerType::Sliding;
                }
            }
        }
    }
    if let Some(t) = c.layer_types("layer_types", layers)? {
        d.layer_types = t;
        if d.sliding_window.is_none() && d.layer_types.contains(&LayerType::Sliding) {
            d.sliding_window = c.opt_u64(&["sliding_window"])?;
        }
    }
    if c.model_type == "qwen3_moe" || c.find(&["num_experts", "num_local_experts"]).is_some() {
        let e = c.u64(&["num_experts", "num_local_experts"])?;
        let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
        d.moe = Some(moe_template(e, k, c.u64(&["moe_intermediate_size"])?));
        let step = c.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1);
        let only = c.u64_list("mlp_only_layers")?.unwrap_or_default();
        place_moe(&mut d, |i| {
            !only.contains(&(i as u64)) && (i as u64 + 1) % step == 0
        });
    }
    Ok(d)
}

/// qwen3_5(_moe) and qwen3_next: `layer_types` or `full_attention_interval` (default 4) of
/// Gated DeltaNet and gated full attention (`q_proj` twice as wide, per-head q/k norms);
/// qwen3_5_moe has MoE in every layer with a sigmoid-gated shared expert; qwen3_next places
/// MoE by `decoder_sparse_step`/`mlp_only_layers`. MTP weights (`mtp_*`) are ignored at load
/// (`_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]`).
fn qwen3_5(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    d.attn.q_gate = true;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => {
            let every = c.opt_u64(&["full_attention_interval"])?.unwrap_or(4);
            (0..layers)
                .map(|i| {
                    if (i + 1) % every == 0 {
                        LayerType::Full
                    } else {
                        LayerType::Linear
                    }
                })
                .collect()
        }
    };
    d.linear = Some(Mixer::GatedDeltaNet(Gdn {
        num_k_heads: c.u64(&["linear_num_key_heads"])?,
        num_v_heads: c.u64(&["linear_num_value_heads"])?,
        k_head_dim: c.u64(&["linear_key_head_dim"])?,
        v_head_dim: c.u64(&["linear_value_head_dim"])?,
        conv_kernel: c.opt_u64(&["linear_conv_kernel_dim"])?.unwrap_or(4),
    }));
    let is_moe = mt.contains("moe") || mt == "qwen3_next";
    if is_moe {
        let e = c.u64(&["num_experts", "num_local_experts"])?;
        let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
        let mut m = moe_template(e, k, c.u64(&["moe_intermediate_size"])?);
        let shared = c.count(&["shared_expert_intermediate_size"], 0)?;
        if shared > 0 {
            m.shared = Some(dense(shared));
            m.shared_gate = true;
        }
        d.moe = Some(m);
        if mt == "qwen3_next" {
            let step = c.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1);
            let only = c.u64_list("mlp_only_layers")?.unwrap_or_default();
            place_moe(&mut d, |i| {
                !only.contains(&(i as u64)) && (i as u64 + 1) % step == 0
            });
        } else {
            place_moe(&mut d, |_| true);
        }
    }
    d.mtp = ignored_mtp(c, &["mtp_num_hidden_layers", "num_nextn_predict_layers"])?;
    Ok(d)
}

/// DeepSeek-V3 (and Kimi-K2, its architecture under remote code), DeepSeek-V3.2 and GLM-5
/// (`glm_moe_dsa`): MLA (`DeepseekV3Attention`), the first `first_k_dense_replace` layers dense,
/// the rest MoE with `n_shared_experts × moe_intermediate_size` shared experts and the fp32
/// sigmoid router with `e_score_correction_bias` (`DeepseekV3TopkRouter`,
/// `_keep_in_fp32_modules_strict`). V3.2/GLM-5 add the DSA indexer (`GlmMoeDsaIndexer`:
/// `wq_b`, `wk`, LayerNorm `k_norm`, `weights_proj`). Next-n (MTP) layers are not built
/// (`_keys_to_ignore_on_load_unexpected`).
fn deepseek(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    let heads = d.attn.heads;
    let q_lora = c.default_or_null("q_lora_rank", if mt == "glm_moe_dsa" { 2048 } else { 1536 })?;
    let mut mla = Mla {
        heads,
        q_lora_rank: q_lora,
        kv_lora_rank: c.u64(&["kv_lora_rank"])?,
        qk_nope_head_dim: c.u64(&["qk_nope_head_dim"])?,
        qk_rope_head_dim: c.u64(&["qk_rope_head_dim"])?,
        v_head_dim: c.u64(&["v_head_dim"])?,
        bias: c.bool("attention_bias", false)?,
        indexer: None,
    };
    let dsa = mt == "deepseek_v32" || mt == "glm_moe_dsa";
    if dsa {
        let ih = c.u64(&["index_n_heads"])?;
        let id = c.u64(&["index_head_dim"])?;
        let h = d.hidden;
        let q_in = q_lora.ok_or_else(|| Error::MissingField {
            field: "q_lora_rank".into(),
            model_type: mt.into(),
        })?;
        mla.indexer = Some(Indexer {
            heads: ih,
            head_dim: id,
            topk: c.opt_u64(&["index_topk"])?.unwrap_or(2048),
            params: ih * id * q_in + id * h + 2 * id + ih * h,
        });
    }
    d.mla = Some(mla);
    d.layer_types = vec![
        if dsa {
            LayerType::Indexed
        } else {
            LayerType::Full
        };
        layers as usize
    ];
    d.attn.head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    d.attn.v_head_dim = mla.v_head_dim;
    d.attn.kv_heads = heads;
    let e = c.u64(&["n_routed_experts", "num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
    let mi = c.u64(&["moe_intermediate_size"])?;
    let mut m = moe_template(e, k, mi);
    let shared = c.count(&["n_shared_experts"], 1)?;
    if shared > 0 {
        m.shared = Some(dense(mi * shared));
    }
    m.router_weights_fp32 = true;
    m.router_param_fp32 = true;
    d.moe = Some(m);
    let first_dense = c.count(&["first_k_dense_replace"], 0)?;
    match c.list("mlp_layer_types")? {
        Some(types) if mt == "glm_moe_dsa" => {
            let v: Vec<bool> = types.iter().map(|t| t.as_str() == Some("sparse")).collect();
            place_moe(&mut d, |i| v.get(i).copied().unwrap_or(true));
        }
        _ => place_moe(&mut d, |i| i as u64 >= first_dense),
    }
    d.mtp = ignored_mtp(c, &["num_nextn_predict_layers"])?;
    Ok(d)
}

/// GLM-4.5/4.6 (`Glm4MoeAttention`: q/k/v bias = `attention_bias`, no output bias, per-head q/k
/// norms if `use_qk_norm`; MoE as DeepSeek-V3's after `first_k_dense_replace` dense layers).
fn glm4_moe(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = c.bool("attention_bias", false)?;
    if c.bool("use_qk_norm", false)? {
        d.attn.qk_norm = QkNorm::PerHead;
    }
    let e = c.u64(&["n_routed_experts", "num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
    let mi = c.u64(&["moe_intermediate_size"])?;
    let mut m = moe_template(e, k, mi);
    let shared = c.count(&["n_shared_experts"], 1)?;
    if shared > 0 {
        m.shared = Some(dense(mi * shared));
    }
    m.router_weights_fp32 = true;
    m.router_param_fp32 = true;
    d.moe = Some(m);
    let first_dense = c.count(&["first_k_dense_replace"], 1)?;
    place_moe(&mut d, |i| i as u64 >= first_dense);
    d.mtp = ignored_mtp(c, &["num_nextn_predict_layers"])?;
    Ok(d)
}

/// gpt-oss (`GptOssAttention`: biased q/k/v/o and per-head `sinks`; `layer_types` alternating
/// sliding (128) and full; `GptOssExperts` with biases and `GptOssTopKRouter` with bias in every
/// layer).
fn gpt_oss(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", true)?;
    d.attn.sinks = true;
    d.sliding_window = sliding(c, Some(128))?;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => every_nth_full(layers, 2),
    };
    let e = c.u64(&["num_local_experts", "num_experts"])?;
    let k = c
        .opt_u64(&["num_experts_per_tok", "experts_per_token"])?
        .unwrap_or(4);
    let mut m = moe_template(e, k, d.dense.intermediate);
    m.expert_bias = true;
    m.router_bias = true;
    d.moe = Some(m);
    place_moe(&mut d, |_| true);
    Ok(d)
}

/// Llama 4 text (`Llama4TextAttention`: L2 q/k norm without weights on rope layers;
/// `layer_types` or chunked rope layers from `no_rope_layers`/`attention_chunk_size`; MoE where
/// `i in moe_layers` (default every `interleave_moe_layer_step`-th), run over all experts
/// (`Llama4TextMoe`), with a shared expert of `intermediate_size`; dense layers use
/// `intermediate_size_mlp`).
fn llama4(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    let interval = c.opt_u64(&["no_rope_layer_interval"])?.unwrap_or(4);
    let rope: Vec<bool> = match c.u64_list("no_rope_layers")? {
        Some(v) if !v.is_empty() => v.iter().map(|x| *x != 0).collect(),
        _ => (0..layers).map(|i| (i + 1) % interval != 0).collect(),
    };
    if rope.len() as u64 != layers {
        return Err(Error::OutOfRange {
            field: "no_rope_layers".into(),
            value: format!("{} entries", rope.len()),
            why: format!("must list num_hidden_layers = {layers} layers"),
        });
    }
    d.chunk = c.opt_u64(&["attention_chunk_size"])?;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => rope
            .iter()
            .map(|r| {
                if *r && d.chunk.is_some() {
                    LayerType::Chunked
                } else {
                    LayerType::Full
                }
            })
            .collect(),
    };
    if c.bool("use_qk_norm", true)? {
        d.attn.qk_norm = QkNorm::L2;
    }
    d.rope = rope;
    let shared = d.dense.intermediate;
    let e = c.u64(&["num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(1);
    let mut m = moe_template(e, k, shared);
    m.shared = Some(dense(shared));
    m.dispatch = Dispatch::AllExperts;
    m.router_linear = Some("feed_forward.router"); // Llama4Router(nn.Linear)
    d.moe = Some(m);
    d.dense = dense(c.u64(&["intermediate_size_mlp"])?);
    let step = c.opt_u64(&["interleave_moe_layer_step"])?.unwrap_or(1);
    let moe_layers = match c.u64_list("moe_layers")? {
        Some(v) => v,
        None => (step - 1..layers).step_by(step as usize).collect(),
    };
    place_moe(&mut d, |i| moe_layers.contains(&(i as u64)));
    Ok(d)
}

/// Gemma 3 text (`Gemma3Attention`: per-head q/k norms, bias = `attention_bias`; four norms per
/// layer; `layer_types` or `sliding_window_pattern` (default 6); tied head by default).
fn gemma3(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    d.act = c.act(&["hidden_activation", "hidden_act"], "gelu_pytorch_tanh")?;
    // Gemma3RMSNorm: `output * (1.0 + self.weight.float())`; Gemma4RMSNorm:
    // `normed_output * self.weight.float()`.
    d.norm.fp32_product = true;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    d.norms = 4;
    d.sliding_window = sliding(c, Some(4096))?;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => {
            let p = c
                .opt_u64(&["sliding_window_pattern", "_sliding_window_pattern"])?
                .unwrap_or(6);
            every_nth_full(layers, p)
        }
    };
    Ok(d)
}

/// Gemma 4 text (configuration_gemma4.py `__post_init__`, modeling_gemma4.py
/// `Gemma4TextAttention`, `Gemma4TextDecoderLayer`): `layer_types` (default 5 sliding : 1 full,
/// the last layer forced full); full layers take `global_head_dim` and, with
/// `attention_k_eq_v`, `num_global_key_value_heads` and no `v_proj`; per-head q/k norms, a
/// weightless v_norm; the last `num_kv_shared_layers` layers reuse earlier K/V (no k/v
/// projections, no cache; `use_double_wide_mlp` doubles their MLP); with `enable_moe_block` a
/// dense MLP and a MoE side by side (router: a scale over H, a per-expert scale, `proj`), three
/// more norms; per-layer inputs when `hidden_size_per_layer_input > 0`.
fn gemma4(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    d.act = c.act(&["hidden_activation", "hidden_act"], "gelu_pytorch_tanh")?;
    // Gemma3RMSNorm: `output * (1.0 + self.weight.float())`; Gemma4RMSNorm:
    // `normed_output * self.weight.float()`.
    d.norm.fp32_product = true;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    d.attn.v_norm = true;
    d.norms = 4;
    d.sliding_window = sliding(c, Some(512))?;
    d.softcap = matches!(
        c.find(&["final_logit_softcapping"]),
        Some((_, Value::Number(_)))
    );
    let mut types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => every_nth_full(layers, 6),
    };
    if let Some(last) = types.last_mut() {
        *last = LayerType::Full;
    }
    let k_eq_v = c.bool("attention_k_eq_v", false)?;
    let global_hd = c.opt_u64(&["global_head_dim"])?.unwrap_or(512);
    let global_kv = if k_eq_v {
        c.opt_u64(&["num_global_key_value_heads"])?
    } else {
        None
    };
    let shared = c.count(&["num_kv_shared_layers"], 0)?.min(layers);
    let double = c.bool("use_double_wide_mlp", false)?;
    // A config saved by transformers 5.24 spells the full layers' overrides out in
    // `per_layer_config` (PretrainedConfig's sparse per-layer overrides), which then replaces
    // `global_head_dim`/`num_global_key_value_heads` (configuration_gemma4.py `__post_init__`).
    let overrides = per_layer_overrides(c, layers)?;
    for (i, t) in types.iter().enumerate() {
        let reuse = (i as u64) >= layers - shared;
        let mut a = d.attn;
        if *t == LayerType::Full {
            a.k_eq_v = k_eq_v;
        }
        if let Some(o) = &overrides {
            let (hd, kv) = o[i];
            (a.head_dim, a.v_head_dim) = (hd.unwrap_or(a.head_dim), hd.unwrap_or(a.head_dim));
            a.kv_heads = kv.unwrap_or(a.kv_heads);
        } else if *t == LayerType::Full {
            a.head_dim = global_hd;
            a.v_head_dim = global_hd;
            if let Some(kv) = global_kv {
                a.kv_heads = kv;
            }
        }
        a.kv_shared = reuse;
        d.per_layer_attn[i] = Some(a);
        if reuse && double {
            d.per_layer_dense[i] = Some(dense(2 * d.dense.intermediate));
        }
    }
    d.layer_types = types;
    if c.bool("enable_moe_block", false)? {
        let e = c.u64(&["num_experts"])?;
        let k = c.u64(&["top_k_experts"])?;
        let mut m = moe_template(e, k, c.u64(&["moe_intermediate_size"])?);
        m.router_extra = d.hidden + e;
        m.router_weights_fp32 = true;
        m.router_linear = Some("router.proj"); // Gemma4TextRouter's nn.Linear
        d.moe = Some(m);
        d.ffn.iter_mut().for_each(|f| *f = FfnKind::DenseAndMoe);
        d.norms = 7;
    }
    let hpl = c.count(&["hidden_size_per_layer_input"], 256)?;
    if hpl > 0 {
        let vpl = c
            .opt_u64(&["vocab_size_per_layer_input"])?
            .unwrap_or(262_144);
        d.embedding_extra = vpl * layers * hpl + layers * hpl * d.hidden + hpl;
        d.layer_extra = (Component::Embedding, 2 * d.hidden * hpl + d.hidden);
        d.per_layer_input = hpl;
    }
    Ok(d)
}

/// One layer's `head_dim` and `num_key_value_heads` overrides.
type LayerOverride = (Option<u64>, Option<u64>);

/// Per layer, the `head_dim` and `num_key_value_heads` overrides of `per_layer_config` (a map
/// from layer index to attribute overrides), or `None` without one; any other override is
/// refused naming it.
fn per_layer_overrides(c: &Cfg, layers: u64) -> Result<Option<Vec<LayerOverride>>> {
    let map = match c.map.get("per_layer_config") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(Error::WrongType {
                field: "per_layer_config".into(),
                expected: "an object",
                found: kind_of(other).into(),
            })
        }
    };
    let mut out = vec![(None, None); layers as usize];
    for (idx, v) in map {
        let field = format!("per_layer_config.{idx}");
        let i = idx
            .parse::<u64>()
            .ok()
            .filter(|i| *i < layers)
            .ok_or_else(|| Error::OutOfRange {
                field: "per_layer_config".into(),
                value: idx.clone(),
                why: format!("keys are layer indices below num_hidden_layers = {layers}"),
            })?;
        let Value::Object(o) = v else {
            return Err(Error::WrongType {
                field,
                expected: "an object",
                found: kind_of(v).into(),
            });
        };
        let layer = Cfg {
            map: o,
            model_type: c.model_type,
        };
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "head_dim" | "num_key_value_heads"))
        {
            return Err(Error::NotDescribed {
                model_type: c.model_type.into(),
                what: format!("its per-layer override `{field}.{k}` is not modelled"),
            });
        }
        out[i as usize] = (
            layer.opt_u64(&["head_dim"])?,
            layer.opt_u64(&["num_key_value_heads"])?,
        );
    }
    Ok(Some(out))
}

/// MiniMax-M2 (`MiniMaxM2Attention`: q/k RMSNorm over the whole projection width;
/// `MiniMaxM2SparseMoeBlock` in every layer with `e_score_correction_bias`, fp32 weights).
fn minimax_m2(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    if c.bool("use_qk_norm", true)? {
        d.attn.qk_norm = QkNorm::FullWidth;
    }
    let e = c.u64(&["num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
    let mut m = moe_template(e, k, d.dense.intermediate);
    m.router_weights_fp32 = true;
    d.moe = Some(m);
    place_moe(&mut d, |_| true);
    Ok(d)
}

/// Nemotron-H (`NemotronHBlock`: one norm and one mixer per layer from
/// `hybrid_override_pattern` (M/E/*/-) or `layers_block_type`; Mamba2 `NemotronHMamba2Mixer`;
/// attention without rope, bias = `attention_bias`; non-gated relu² MLP and experts
/// (`up_proj`/`down_proj`), non-gated shared expert, optional latent projections; the router's
/// correction bias is a buffer, not a parameter).
fn nemotron_h(c: &Cfg) -> Result<Draft> {
    let types = if let Some((_, v)) = c.find(&["hybrid_override_pattern"]) {
        let s = v.as_str().ok_or_else(|| Error::WrongType {
            field: "hybrid_override_pattern".into(),
            expected: "a string",
            found: kind_of(v).into(),
        })?;
        s.chars()
            .map(|ch| match ch {
                'M' => Ok(LayerType::Linear),
                'E' => Ok(LayerType::MoeOnly),
                '*' => Ok(LayerType::Full),
                '-' => Ok(LayerType::MlpOnly),
                other => Err(Error::OutOfRange {
                    field: "hybrid_override_pattern".into(),
                    value: other.to_string(),
                    why: "expected M, E, * or -".into(),
                }),
            })
            .collect::<Result<Vec<_>>>()?
    } else if let Some(t) = c.layer_types("layers_block_type", 0)? {
        t
    } else if let Some(t) = c.layer_types("layer_types", 0)? {
        t
    } else {
        return Err(Error::MissingField {
            field: "hybrid_override_pattern".into(),
            model_type: c.model_type.into(),
        });
    };
    let (mut d, _) = common_with(c, false, types.len() as u64)?;
    let n = types.len();
    d.norms = 1;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.rope = false;
    d.rope = vec![false; n];
    d.act = Act::Fused;
    d.dense = Dense {
        gated: false,
        bias: c.bool("mlp_bias", false)?,
        ..Dense::new(d.dense.intermediate)
    };
    let heads = c.u64(&["mamba_num_heads"])?;
    d.linear = Some(Mixer::Mamba2(Mamba2 {
        heads,
        head_dim: c.u64(&["mamba_head_dim"])?,
        state_size: c.u64(&["ssm_state_size"])?,
        groups: c.opt_u64(&["n_groups"])?.unwrap_or(8),
        conv_kernel: c.opt_u64(&["conv_kernel"])?.unwrap_or(4),
        chunk: c.opt_u64(&["chunk_size"])?.unwrap_or(128),
        bias: c.bool("use_bias", false)?,
        out_bias: c.bool("use_bias", false)?,
        gated_norm: true,
        conv_bias: c.bool("use_conv_bias", true)?,
        // PEFT 0.21.2 `_check_lora_target_modules_mamba` lists nemotron_h.
        peft_refuses_out_proj: true,
    }));
    d.ffn = types
        .iter()
        .map(|t| match t {
            LayerType::MoeOnly => FfnKind::Moe,
            LayerType::MlpOnly => FfnKind::Dense,
            _ => FfnKind::None,
        })
        .collect();
    if types.contains(&LayerType::MoeOnly) {
        let e = c.u64(&["n_routed_experts", "num_local_experts"])?;
        let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
        let mut m = moe_template(e, k, c.u64(&["moe_intermediate_size"])?);
        m.gated = false;
        m.router_weights_fp32 = true;
        m.router_param_fp32 = true;
        let shared_n = c.count(&["n_shared_experts"], 1)?;
        if shared_n > 0 {
            m.shared = Some(Dense {
                gated: false,
                bias: d.dense.bias,
                ..Dense::new(c.u64(&["moe_shared_expert_intermediate_size"])? * shared_n)
            });
        }
        m.latent = c.opt_u64(&["moe_latent_size"])?;
        m.latent_bias = m.latent.is_some() && d.dense.bias;
        d.moe = Some(m);
    }
    d.layer_types = types;
    d.mtp = ignored_mtp(c, &["num_nextn_predict_layers"])?;
    Ok(d)
}

/// Granite 4 hybrids (`GraniteMoeHybridDecoderLayer`: Mamba2 or attention per `layer_types`,
/// a gated `shared_mlp` of `shared_intermediate_size` in every layer, plus MoE if
/// `num_local_experts > 0`).
fn granite_hybrid(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    if let Some(t) = c.layer_types("layer_types", layers)? {
        d.layer_types = t;
    } else if let Some(t) = c.layer_types("layers_block_type", layers)? {
        d.layer_types = t;
    }
    let nope = c.str("position_embedding_type")? != Some("rope");
    d.attn.rope = !nope;
    d.rope = vec![!nope; layers as usize];
    let heads = c.opt_u64(&["mamba_n_heads"])?.unwrap_or(128);
    let expand = c.opt_u64(&["mamba_expand"])?.unwrap_or(2);
    let head_dim = match c.find(&["mamba_d_head"]) {
        Some((_, Value::Number(_))) => c.u64(&["mamba_d_head"])?,
        _ => expand * d.hidden / heads,
    };
    d.linear = Some(Mixer::Mamba2(Mamba2 {
        heads,
        head_dim,
        state_size: c.opt_u64(&["mamba_d_state"])?.unwrap_or(256),
        groups: c.opt_u64(&["mamba_n_groups"])?.unwrap_or(1),
        conv_kernel: c.opt_u64(&["mamba_d_conv"])?.unwrap_or(4),
        chunk: c.opt_u64(&["mamba_chunk_size"])?.unwrap_or(256),
        bias: c.bool("mamba_proj_bias", false)?,
        out_bias: c.bool("mamba_proj_bias", false)?,
        gated_norm: true,
        conv_bias: c.bool("mamba_conv_bias", true)?,
        // Not in PEFT 0.21.2's `_check_lora_target_modules_mamba` list: adapted like any linear.
        peft_refuses_out_proj: false,
    }));
    let shared = dense(c.opt_u64(&["shared_intermediate_size"])?.unwrap_or(1024));
    let e = c.count(&["num_local_experts"], 0)?;
    if e > 0 {
        let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
        let mut m = moe_template(e, k, d.dense.intermediate);
        m.shared = Some(shared);
        d.moe = Some(m);
        place_moe(&mut d, |_| true);
    } else {
        d.dense = shared;
    }
    Ok(d)
}

/// MiMo-7B (remote code `MiMoForCausalLM`, Qwen2 architecture: q/k/v biases): its
/// `num_nextn_predict_layers` MTP layers are instantiated (`MiMoMTPLayers`: token and hidden
/// norms, `input_proj` 2H→H, a Qwen2 decoder layer, a final norm).
fn mimo(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = true;
    let mtp = c.count(&["num_nextn_predict_layers"], 0)?;
    if mtp > 0 {
        let h = d.hidden;
        let block = Block {
            mixer: Mixer::Attention(d.attn),
            cross_attention: false,
            ffn: Ffn::Dense(d.dense),
            norms: Norms {
                count: 2,
                width: h,
                norm: Norm::RMS,
            },
            residual: Residual::Sequential,
            extra: (Component::Other, 0),
            per_layer_input: 0,
        };
        let per = block.params(h).total() + 2 * h * h + 3 * h;
        d.mtp = Some(Mtp {
            layers: mtp,
            instantiated: true,
            params: per * mtp,
        });
    }
    Ok(d)
}

/// OLMo 2/3 (`Olmo2Attention`: q/k RMSNorm over the whole width, bias = `attention_bias`;
/// post-norms; OLMo 3 `layer_types` 3 sliding : 1 full).
fn olmo(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::FullWidth;
    if mt == "olmo3" {
        d.sliding_window = sliding(c, Some(4096))?;
        d.layer_types = match c.layer_types("layer_types", layers)? {
            Some(t) => t,
            None => every_nth_full(layers, 4),
        };
    }
    Ok(d)
}

/// SmolLM3 (Llama-like with `no_rope_layers`; biases = `attention_bias`/`mlp_bias`; tied).
fn smollm3(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    let interval = c.opt_u64(&["no_rope_layer_interval"])?.unwrap_or(4);
    d.rope = match c.u64_list("no_rope_layers")? {
        Some(v) if v.len() as u64 == layers => v.iter().map(|x| *x != 0).collect(),
        _ => (0..layers).map(|i| (i + 1) % interval != 0).collect(),
    };
    if let Some(t) = c.layer_types("layer_types", layers)? {
        d.layer_types = t;
    } else if c.bool("use_sliding_window", false)? {
        if let Some(w) = c.opt_u64(&["sliding_window"])? {
            d.sliding_window = Some(w);
            for (t, r) in d.layer_types.iter_mut().zip(&d.rope) {
                if !r {
                    *t = LayerType::Sliding;
                }
            }
        }
    }
    if d.layer_types.contains(&LayerType::Sliding) && d.sliding_window.is_none() {
        d.sliding_window = c.opt_u64(&["sliding_window"])?;
    }
    Ok(d)
}

/// ERNIE 4.5 (`use_bias` on every projection, and on the MoE model's LM head; tied by default);
/// MoE layers where `(i + 1) % moe_layer_interval == 0` and `moe_layer_start_index ≤ i ≤
/// moe_layer_end_index`, with `moe_num_shared_experts × moe_intermediate_size` shared experts
/// and an fp32 router with `e_score_correction_bias`.
fn ernie(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    let bias = c.bool("use_bias", false)?;
    (d.attn.qkv_bias, d.attn.out_bias, d.dense.bias) = (bias, bias, bias);
    if mt == "ernie4_5_moe" {
        d.head_bias = bias && !d.tied;
        let e = c.u64(&["moe_num_experts", "num_experts"])?;
        let k = c.opt_u64(&["moe_k", "num_experts_per_tok"])?.unwrap_or(6);
        let mi = c.u64(&["moe_intermediate_size"])?;
        let mut m = moe_template(e, k, mi);
        let shared = c.count(&["moe_num_shared_experts"], 0)?;
        if shared > 0 {
            m.shared = Some(Dense {
                bias,
                ..dense(mi * shared)
            });
        }
        m.correction_bias = true;
        m.router_weights_fp32 = true;
        m.router_param_fp32 = true;
        d.moe = Some(m);
        let start = c.count(&["moe_layer_start_index"], 1)?;
        let end = match c.find(&["moe_layer_end_index"]) {
            Some((_, Value::Number(n))) if n.as_i64() == Some(-1) => layers - 1,
            _ => c.count(&["moe_layer_end_index"], layers - 1)?,
        };
        let interval = c.opt_u64(&["moe_layer_interval"])?.unwrap_or(1);
        place_moe(&mut d, |i| {
            let i = i as u64;
            (i + 1) % interval == 0 && i >= start && i <= end
        });
    }
    Ok(d)
}

/// EXAONE 4 (`Exaone4Attention`: per-head q/k norms, no biases; post-norms; `layer_types` or
/// `sliding_window_pattern` (an int period, or a string such as "LLLG")).
fn exaone4(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    d.sliding_window = sliding(c, Some(4096))?;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None if d.sliding_window.is_none() => vec![LayerType::Full; layers as usize],
        None => match c.find(&["sliding_window_pattern"]) {
            Some((_, Value::String(s))) if !s.is_empty() => {
                let p: Vec<char> = s.chars().collect();
                (0..layers as usize)
                    .map(|i| {
                        if p[i % p.len()] == 'L' {
                            LayerType::Sliding
                        } else {
                            LayerType::Full
                        }
                    })
                    .collect()
            }
            _ => {
                let p = c.opt_u64(&["sliding_window_pattern"])?.unwrap_or(4);
                every_nth_full(layers, p)
            }
        },
    };
    Ok(d)
}

/// Seed-OSS (`SeedOssAttention`: q/k/v bias = `attention_bias`, output bias =
/// `attention_out_bias`; `mlp_bias`; default dropouts 0.1).
fn seed_oss(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = c.bool("attention_bias", true)?;
    d.attn.out_bias = c.bool("attention_out_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    d.attention_dropout = c.prob(&["attention_dropout"], 0.1)?;
    d.hidden_dropout = c.prob(&["residual_dropout"], 0.1)?;
    Ok(d)
}

/// Hunyuan (`HunYuan*Attention`: `query_layernorm`/`key_layernorm` per head, biases =
/// `attention_bias`; the MoE model's every layer has a shared MLP of `intermediate_size` and
/// `num_experts` experts of `intermediate_size`, router `wg` in fp32).
fn hunyuan(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::PerHead;
    if mt == "hunyuan_v1_moe" {
        let e = c.u64(&["num_experts", "num_local_experts"])?;
        let k = match c.find(&["moe_topk"]) {
            Some((_, Value::Array(a))) => a.first().and_then(Value::as_u64).unwrap_or(1),
            _ => c.opt_u64(&["moe_topk"])?.unwrap_or(1),
        };
        let mut m = moe_template(e, k, d.dense.intermediate);
        m.shared = Some(d.dense);
        m.router_weights_fp32 = true;
        d.moe = Some(m);
        place_moe(&mut d, |_| true);
    }
    Ok(d)
}

/// GLM and GLM-4 (`GlmAttention`: q/k/v bias = `attention_bias`, default true, no output bias;
/// `GlmMLP`: one `gate_up_proj`; `Glm4DecoderLayer` adds `post_self_attn_layernorm` and
/// `post_mlp_layernorm`).
fn glm(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = c.bool("attention_bias", true)?;
    d.dense.fused_gate_up = true;
    if mt == "glm4" {
        d.norms = 4;
    }
    Ok(d)
}

/// Granite 3.x dense (transformers 5.24.0 `models/granite/modeling_granite.py`): Llama's layer
/// (`GraniteAttention` q/k/v/o with biases = `attention_bias`, `head_dim` from the config or
/// hidden / heads; a gated `GraniteMLP` with biases = `mlp_bias`; two RMSNorms per layer, a final
/// one) and `GraniteForCausalLM`'s `lm_head` tied by `tie_word_embeddings`, default false in
/// `GraniteConfig`. `embedding_multiplier`, `residual_multiplier`, `attention_multiplier` and
/// `logits_scaling` scale activations only.
fn granite(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    Ok(d)
}

/// Granite with sliding windows (`GraniteSWAAttention`: biases = `attention_bias` on q/k/v/o,
/// a learned per-head `sinks` logit; `layer_types` of full and sliding layers, 1 full : 3
/// sliding by default; tied head by default). Granite's multipliers scale activations only.
fn granite_swa(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, true)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    swa_layers(c, &mut d)?;
    Ok(d)
}

/// LayerNorm with weight and bias (the 2019–2023 families).
fn layer_norm(d: &mut Draft) {
    d.norm = Norm::LAYER_NORM;
}

/// A plain `down(act(up(x)))` MLP of `intermediate`, with biases or not.
fn plain(intermediate: u64, bias: bool) -> Dense {
    Dense {
        gated: false,
        bias,
        ..dense(intermediate)
    }
}

/// A `*_config` key or flag the family reads only at its default: anything else is refused,
/// naming it.
fn refuse_if(c: &Cfg, on: bool, key: &str, what: &str) -> Result<()> {
    if on {
        return Err(Error::NotDescribed {
            model_type: c.model_type.into(),
            what: format!("`{key}`: {what} is not modelled"),
        });
    }
    Ok(())
}

/// Phi-1/1.5/2 (`PhiDecoderLayer`: one LayerNorm feeding attention and MLP side by side;
/// q/k/v and `dense` with biases; `fc1`/`fc2` with biases; final LayerNorm; an untied LM head
/// with a bias; partial rotary, which changes no tensor's size).
fn phi(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    refuse_if(
        c,
        c.bool("qk_layernorm", false)?,
        "qk_layernorm",
        "a LayerNorm with bias over each head's queries and keys",
    )?;
    d.act = c.act(&["hidden_act"], "gelu_new")?;
    (d.attn.qkv_bias, d.attn.out_bias) = (true, true);
    d.dense = plain(d.dense.intermediate, true);
    layer_norm(&mut d);
    d.norms = 1;
    d.residual = Residual::Parallel;
    d.head_bias = !d.tied;
    d.hidden_dropout = c.prob(&["resid_pdrop"], 0.0)?;
    Ok(d)
}

/// StarCoder2 (`Starcoder2Attention`/`Starcoder2MLP`: every projection biased by `use_bias`,
/// a plain `c_fc`/`c_proj` MLP; LayerNorms with bias; tied; every layer slides when
/// `sliding_window` is set).
fn starcoder2(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    d.act = c.act(&["hidden_act"], "gelu_pytorch_tanh")?;
    let bias = attention_bias(&mut d, c, "use_bias", true)?;
    d.dense = plain(d.dense.intermediate, bias);
    layer_norm(&mut d);
    d.sliding_window = sliding(c, None)?;
    if d.sliding_window.is_some() {
        d.layer_types = vec![LayerType::Sliding; layers as usize];
    }
    d.hidden_dropout = c.prob(&["residual_dropout"], 0.0)?;
    Ok(d)
}

/// GPT-BigCode / StarCoder (`GPTBigCodeAttention`: one `c_attn` for q and the shared k/v, one
/// key/value head with `multi_query`, biases everywhere; learned positions `wpe` of
/// `n_positions`; LayerNorms with bias; a plain MLP of `n_inner` (4H); tied).
fn gpt_bigcode(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, true)?;
    refuse_if(
        c,
        c.bool("add_cross_attention", false)?,
        "add_cross_attention",
        "a cross-attention in every layer",
    )?;
    d.act = c.act(&["activation_function"], "gelu_pytorch_tanh")?;
    if c.bool("multi_query", true)? {
        d.attn.kv_heads = 1;
    }
    (d.attn.qkv_bias, d.attn.out_bias, d.attn.fused_qkv) = (true, true, true);
    d.attn.rope = false;
    d.rope = vec![false; d.rope.len()];
    let inner = c.opt_u64(&["n_inner"])?.unwrap_or(4 * d.hidden);
    d.dense = plain(inner, true);
    layer_norm(&mut d);
    let positions = c
        .opt_u64(&["n_positions", "max_position_embeddings"])?
        .unwrap_or(1024);
    d.embedding.learned_positions = positions;
    d.max_positions = positions;
    d.attention_dropout = c.prob(&["attn_pdrop"], 0.1)?;
    d.hidden_dropout = c.prob(&["resid_pdrop"], 0.1)?;
    Ok(d)
}

/// BLOOM (`BloomAttention`: one biased `query_key_value`, biased `dense`; ALiBi, no position
/// table; `word_embeddings_layernorm`; LayerNorms with bias; a plain 4H MLP with biases; tied).
fn bloom(c: &Cfg) -> Result<Draft> {
    let mut map = c.map.clone();
    // BloomConfig takes the older `n_embed` for `hidden_size`.
    if !map.contains_key("hidden_size") {
        if let Some(v) = map.get("n_embed").cloned() {
            map.insert("hidden_size".into(), v);
        }
    }
    let c = &Cfg {
        map: &map,
        model_type: c.model_type,
    };
    let (mut d, _) = common(c, true)?;
    refuse_if(
        c,
        c.bool("apply_residual_connection_post_layernorm", false)?,
        "apply_residual_connection_post_layernorm",
        "the residual taken after each LayerNorm",
    )?;
    // BloomGelu is an autograd Function that saves only its input (`GeLUFunction`).
    d.act = Act::Fused;
    (d.attn.qkv_bias, d.attn.out_bias, d.attn.fused_qkv) = (true, true, true);
    d.attn.rope = false;
    d.rope = vec![false; d.rope.len()];
    d.dense = plain(4 * d.hidden, true);
    layer_norm(&mut d);
    d.embedding.norm = true;
    d.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    Ok(d)
}

/// OPT (`OPTAttention`/`OPTDecoderLayer`: q/k/v/out and `fc1`/`fc2` biased by `enable_bias`,
/// a plain MLP of `ffn_dim`; LayerNorms with `layer_norm_elementwise_affine`; learned positions
/// of `max_position_embeddings + 2` rows (OPTLearnedPositionalEmbedding's offset); tied).
/// The post-norm variant (`do_layer_norm_before: false`, OPT-350m) and its
/// `word_embed_proj_dim` projections are refused.
fn opt(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, true)?;
    refuse_if(
        c,
        !c.bool("do_layer_norm_before", true)? || c.bool("_remove_final_layer_norm", false)?,
        "do_layer_norm_before",
        "OPT's post-norm layout without a final norm",
    )?;
    let proj = c.opt_u64(&["word_embed_proj_dim"])?.unwrap_or(d.hidden);
    refuse_if(
        c,
        proj != d.hidden,
        "word_embed_proj_dim",
        "the projections between embedding and hidden width",
    )?;
    d.act = c.act(&["activation_function"], "relu")?;
    let bias = attention_bias(&mut d, c, "enable_bias", true)?;
    d.attn.rope = false;
    d.rope = vec![false; d.rope.len()];
    d.dense = plain(c.u64(&["ffn_dim"])?, bias);
    layer_norm(&mut d);
    if !c.bool("layer_norm_elementwise_affine", true)? {
        d.norm = Norm::LAYER_NORM_PLAIN;
    }
    d.embedding.learned_positions = d.max_positions + 2;
    d.hidden_dropout = c.prob(&["dropout"], 0.1)?;
    Ok(d)
}

/// GPT-J (`GPTJBlock`: one LayerNorm feeding attention and MLP side by side; q/k/v/out without
/// biases; `fc_in`/`fc_out` with biases, `n_inner` (4H); partial rotary (`rotary_dim`); an
/// untied LM head with a bias).
fn gptj(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.act = c.act(&["activation_function"], "gelu_new")?;
    let inner = c.opt_u64(&["n_inner"])?.unwrap_or(4 * d.hidden);
    d.dense = plain(inner, true);
    layer_norm(&mut d);
    d.norms = 1;
    d.residual = Residual::Parallel;
    d.head_bias = !d.tied;
    d.max_positions = c.opt_u64(&["n_positions"])?.unwrap_or(2048);
    d.attention_dropout = c.prob(&["attn_pdrop"], 0.0)?;
    d.hidden_dropout = c.prob(&["resid_pdrop"], 0.0)?;
    Ok(d)
}

/// Command-R (`CohereDecoderLayer`: one LayerNorm without bias feeding attention and the gated
/// MLP side by side; q/k/v/o biased by `attention_bias`; `use_qk_norm` LayerNorms over every
/// head's queries and keys; tied). Cohere 2 adds `layer_types` (3 sliding : 1 full by default,
/// `sliding_window_pattern`), rotary positions on its sliding layers only, and `head_dim` =
/// H / heads.
fn cohere(c: &Cfg, mt: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    if c.bool("use_qk_norm", false)? {
        d.attn.qk_norm = QkNorm::FullWidth;
    }
    d.norm = Norm {
        bias: false,
        ..Norm::LAYER_NORM
    };
    d.norms = 1;
    d.residual = Residual::Parallel;
    if mt == "cohere2" {
        d.attn.head_dim = d.hidden / d.attn.heads;
        d.attn.v_head_dim = d.attn.head_dim;
        d.sliding_window = sliding(c, Some(4096))?;
        d.layer_types = match c.layer_types("layer_types", layers)? {
            Some(t) => t,
            None => {
                let p = c.opt_u64(&["sliding_window_pattern"])?.unwrap_or(4);
                every_nth_full(layers, p)
            }
        };
        d.rope = d
            .layer_types
            .iter()
            .map(|t| *t == LayerType::Sliding)
            .collect();
    }
    Ok(d)
}

/// Qwen2-MoE / Qwen1.5-MoE (`Qwen2MoeAttention`: q/k/v biased by `qkv_bias`, no q/k norms;
/// `Qwen2MoeSparseMoeBlock`: routed experts, one shared expert of
/// `shared_expert_intermediate_size` behind a sigmoid `shared_expert_gate`; MoE placement,
/// `use_sliding_window`/`max_window_layers`/`layer_types` as Qwen3's).
fn qwen2_moe(c: &Cfg) -> Result<Draft> {
    let mut d = qwen3(c)?;
    d.attn.qk_norm = QkNorm::None;
    d.attn.qkv_bias = c.bool("qkv_bias", true)?;
    d.attn.out_bias = false;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(4);
    if let Some(m) = d.moe.as_mut() {
        m.top_k = k;
        let shared = c.count(&["shared_expert_intermediate_size"], 0)?;
        if shared > 0 {
            m.shared = Some(dense(shared));
            m.shared_gate = true;
        }
    }
    Ok(d)
}

/// OLMoE (`OlmoeAttention`: q/k RMSNorms over the whole projection width, biases =
/// `attention_bias`; `OlmoeSparseMoeBlock` in every layer, experts of `intermediate_size`, no
/// shared expert; `clip_qkv` clamps in place).
fn olmoe(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.attn.qk_norm = QkNorm::FullWidth;
    let e = c.u64(&["num_experts", "num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(8);
    d.moe = Some(moe_template(e, k, d.dense.intermediate));
    place_moe(&mut d, |_| true);
    Ok(d)
}

/// OLMo 1 (`OlmoLayerNorm`: a LayerNorm without weight or bias; biases = `attention_bias`;
/// `clip_qkv` clamps in place).
fn olmo1(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.norm = Norm::LAYER_NORM_PLAIN;
    Ok(d)
}

/// DeepSeek-V2 (DeepSeek-V3's MLA and MoE; `DeepseekV2MLP`, dense layers and shared experts,
/// biased by `mlp_bias`; the router an fp32 `[E, H]` weight without correction bias).
fn deepseek_v2(c: &Cfg) -> Result<Draft> {
    let mut d = deepseek(c, "deepseek_v2")?;
    let bias = c.bool("mlp_bias", false)?;
    d.dense.bias = bias;
    if let Some(m) = d.moe.as_mut() {
        if let Some(s) = m.shared.as_mut() {
            s.bias = bias;
        }
    }
    Ok(d)
}

/// MiniCPM3 (`MiniCPM3Attention`: DeepSeek-style MLA with a `q_lora_rank`; a dense gated MLP
/// biased by `mlp_bias` in every layer; tied; `scale_emb`/`scale_depth` scale activations).
fn minicpm3(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, true)?;
    let heads = d.attn.heads;
    let mla = Mla {
        heads,
        q_lora_rank: c.default_or_null("q_lora_rank", 768)?,
        kv_lora_rank: c.u64(&["kv_lora_rank"])?,
        qk_nope_head_dim: c.u64(&["qk_nope_head_dim"])?,
        qk_rope_head_dim: c.u64(&["qk_rope_head_dim"])?,
        v_head_dim: c.u64(&["v_head_dim"])?,
        bias: c.bool("attention_bias", false)?,
        indexer: None,
    };
    d.mla = Some(mla);
    d.layer_types = vec![LayerType::Full; layers as usize];
    d.attn.head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    d.attn.v_head_dim = mla.v_head_dim;
    d.dense.bias = c.bool("mlp_bias", false)?;
    Ok(d)
}

/// Mamba-2 (`Mamba2Block`: an RMSNorm and a `Mamba2Mixer`, no feed-forward; the mixer's inner
/// width `expand × H` split into `num_heads × head_dim`; final `norm_f`).
fn mamba2(c: &Cfg) -> Result<Draft> {
    let mut map = c.map.clone();
    // Mamba2Config has no attention keys: `common` reads the SSM heads as stand-in heads.
    if !map.contains_key("num_attention_heads") {
        if let Some(v) = map.get("num_heads").cloned() {
            map.insert("num_attention_heads".into(), v);
        }
    }
    let c = &Cfg {
        map: &map,
        model_type: c.model_type,
    };
    let (mut d, layers) = common(c, false)?;
    let heads = c.u64(&["num_heads"])?;
    let head_dim = c.u64(&["head_dim"])?;
    let expand = c.opt_u64(&["expand"])?.unwrap_or(2);
    if heads * head_dim != expand * d.hidden {
        return Err(Error::NotDivisible {
            what: "mamba2: expand × hidden_size (the inner width) by num_heads × head_dim".into(),
            a: expand * d.hidden,
            b: heads * head_dim,
        });
    }
    d.linear = Some(Mixer::Mamba2(Mamba2 {
        heads,
        head_dim,
        state_size: c.opt_u64(&["state_size"])?.unwrap_or(128),
        groups: c.opt_u64(&["n_groups"])?.unwrap_or(8),
        conv_kernel: c.opt_u64(&["conv_kernel"])?.unwrap_or(4),
        chunk: c.opt_u64(&["chunk_size"])?.unwrap_or(256),
        bias: c.bool("use_bias", false)?,
        out_bias: c.bool("use_bias", false)?,
        gated_norm: true,
        conv_bias: c.bool("use_conv_bias", true)?,
        // PEFT 0.21.2 `_check_lora_target_modules_mamba` lists mamba2.
        peft_refuses_out_proj: true,
    }));
    d.layer_types = vec![LayerType::Linear; layers as usize];
    d.ffn = vec![FfnKind::None; layers as usize];
    d.norms = 1;
    Ok(d)
}

/// Granite-MoE (`GraniteMoeMoE`: a bias-free router and expert banks of `intermediate_size` in
/// every layer; biases = `attention_bias`); Granite-MoE-Shared adds a gated `shared_mlp` of
/// `shared_intermediate_size` when that is positive. The multipliers scale activations only.
fn granite_moe(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    let e = c.u64(&["num_local_experts", "num_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
    let mut m = moe_template(e, k, d.dense.intermediate);
    let shared = c.count(&["shared_intermediate_size"], 0)?;
    if shared > 0 {
        m.shared = Some(dense(shared));
    }
    d.moe = Some(m);
    place_moe(&mut d, |_| true);
    Ok(d)
}

/// StableLM (`StableLmAttention`: q/k/v biased by `use_qkv_bias`, a bias-free `o_proj`,
/// `qk_layernorm` LayerNorms without bias over each head; LayerNorms with bias, one per layer
/// when `use_parallel_residual`; a gated MLP without biases; partial rotary).
fn stablelm(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    d.attn.qkv_bias = c.bool("use_qkv_bias", false)?;
    if c.bool("qk_layernorm", false)? {
        d.attn.qk_norm = QkNorm::FullWidth;
    }
    layer_norm(&mut d);
    if c.bool("use_parallel_residual", false)? {
        d.norms = 1;
        d.residual = Residual::Parallel;
    }
    d.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    Ok(d)
}

/// Phi-3.5-MoE (`PhimoeAttention`: biases = `attention_bias`; `PhimoeSparseMoeBlock` in every
/// layer, `num_local_experts` gated experts of `intermediate_size`, a bias-free router;
/// LayerNorms with bias; an LM head biased by `lm_head_bias`; every layer slides when
/// `sliding_window` is set).
fn phimoe(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    let e = c.u64(&["num_local_experts"])?;
    let k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
    d.moe = Some(moe_template(e, k, d.dense.intermediate));
    place_moe(&mut d, |_| true);
    layer_norm(&mut d);
    d.head_bias = c.bool("lm_head_bias", false)? && !d.tied;
    d.sliding_window = sliding(c, None)?;
    if d.sliding_window.is_some() {
        d.layer_types = vec![LayerType::Sliding; layers as usize];
    }
    Ok(d)
}

/// HyperCLOVA X (Llama's layers; `use_post_norm` adds RMSNorms after attention and MLP;
/// biases = `attention_bias`/`mlp_bias`; the multipliers scale activations only).
fn hyperclovax(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    if c.bool("use_post_norm", true)? {
        d.norms = 4;
    }
    Ok(d)
}

/// Granite's sliding-window layout (`GraniteSWAAttention`, `GraniteMoeSWAAttention`): a learned
/// per-head `sinks` logit, `layer_types` of full and sliding layers (1 full : 3 sliding by
/// default) and a `sliding_window` of 128 by default.
fn swa_layers(c: &Cfg, d: &mut Draft) -> Result<()> {
    let layers = d.layer_types.len() as u64;
    d.attn.sinks = true;
    d.sliding_window = sliding(c, Some(128))?;
    d.layer_types = match c.layer_types("layer_types", layers)? {
        Some(t) => t,
        None => (0..layers)
            .map(|i| {
                if i % 4 == 0 {
                    LayerType::Full
                } else {
                    LayerType::Sliding
                }
            })
            .collect(),
    };
    Ok(())
}

/// Mamba (1) and FalconMamba (modeling_mamba.py `MambaBlock`, modeling_falcon_mamba.py: an
/// RMSNorm and a Mamba mixer per layer, no feed-forward; final `norm_f`; tied by default).
/// FalconMamba's B/C/dt norms have no weights; `time_step_rank: "auto"` is
/// `ceil(hidden_size / 16)` (MambaConfig).
fn mamba(c: &Cfg) -> Result<Draft> {
    let mut map = c.map.clone();
    // MambaConfig has no attention keys: one stand-in head for `common`.
    map.entry("num_attention_heads").or_insert(Value::from(1));
    let c = &Cfg {
        map: &map,
        model_type: c.model_type,
    };
    let (mut d, layers) = common(c, true)?;
    let inner = match c.map.get("intermediate_size") {
        None | Some(Value::Null) => c.opt_u64(&["expand"])?.unwrap_or(2) * d.hidden,
        _ => c.u64(&["intermediate_size"])?,
    };
    let dt_rank = match c.map.get("time_step_rank") {
        Some(Value::String(s)) if s == "auto" => d.hidden.div_ceil(16),
        None | Some(Value::Null) => d.hidden.div_ceil(16),
        _ => c.u64(&["time_step_rank"])?,
    };
    d.linear = Some(Mixer::Mamba(Mamba {
        inner,
        state_size: c.opt_u64(&["state_size"])?.unwrap_or(16),
        dt_rank,
        conv_kernel: c.opt_u64(&["conv_kernel"])?.unwrap_or(4),
        bias: c.bool("use_bias", false)?,
        conv_bias: c.bool("use_conv_bias", true)?,
        bcdt_norms: false,
    }));
    d.layer_types = vec![LayerType::Linear; layers as usize];
    d.ffn = vec![FfnKind::None; layers as usize];
    d.norms = 1;
    Ok(d)
}

/// Jamba (modeling_jamba.py): layer `i` is attention (bias-free q/k/v/o, no positions) when
/// `i % attn_layer_period == attn_layer_offset`, else a Mamba (1) mixer with weighted RMSNorms
/// on its time step, B and C; its feed-forward is a mixture of `num_experts` gated experts with
/// a bias-free softmax top-k router when `i % expert_layer_period == expert_layer_offset` (and
/// `num_experts > 1`), else a gated MLP; two RMSNorms per layer.
fn jamba(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    let period = |k: &str, default: u64| -> Result<u64> {
        let v = c.opt_u64(&[k])?.unwrap_or(default);
        if v == 0 {
            return Err(Error::OutOfRange {
                field: k.into(),
                value: "0".into(),
                why: "must be positive".into(),
            });
        }
        Ok(v)
    };
    let (ap, ao) = (
        period("attn_layer_period", 8)?,
        c.count(&["attn_layer_offset"], 4)?,
    );
    let (ep, eo) = (
        period("expert_layer_period", 2)?,
        c.count(&["expert_layer_offset"], 1)?,
    );
    d.attn.rope = false;
    d.rope = vec![false; layers as usize];
    d.linear = Some(Mixer::Mamba(Mamba {
        inner: c.opt_u64(&["mamba_expand"])?.unwrap_or(2) * d.hidden,
        state_size: c.opt_u64(&["mamba_d_state"])?.unwrap_or(16),
        dt_rank: match c.map.get("mamba_dt_rank") {
            Some(Value::String(s)) if s == "auto" => d.hidden.div_ceil(16),
            None | Some(Value::Null) => d.hidden.div_ceil(16),
            _ => c.u64(&["mamba_dt_rank"])?,
        },
        conv_kernel: c.opt_u64(&["mamba_d_conv"])?.unwrap_or(4),
        bias: c.bool("mamba_proj_bias", false)?,
        conv_bias: c.bool("mamba_conv_bias", true)?,
        bcdt_norms: true,
    }));
    d.layer_types = (0..layers)
        .map(|i| {
            if i % ap == ao {
                LayerType::Full
            } else {
                LayerType::Linear
            }
        })
        .collect();
    let experts = c.opt_u64(&["num_experts"])?.unwrap_or(16);
    if experts > 1 {
        let top_k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
        d.moe = Some(moe_template(experts, top_k, d.dense.intermediate));
        place_moe(&mut d, |i| i as u64 % ep == eo);
    }
    Ok(d)
}

/// Falcon-H1 (modeling_falcon_h1.py `FalconH1DecoderLayer`): in every layer one RMSNorm
/// feeds `mamba` (a Mamba2 mixer of `mamba_n_heads × mamba_d_head` = `mamba_d_ssm`, or
/// `mamba_expand × hidden_size` when that is null; `in_proj` biased by `mamba_proj_bias`,
/// `out_proj` by `projectors_bias`, the gated RMSNorm only with `mamba_rms_norm`) and
/// `self_attn` (q/k/v/o biased by `attention_bias`) side by side, their outputs summed; then
/// `pre_ff_layernorm` and a gated MLP (`mlp_bias`). The µP multipliers (`*_multiplier`,
/// `mlp_multipliers`, `ssm_multipliers`) scale activations only.
fn falcon_h1(c: &Cfg) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    attention_bias(&mut d, c, "attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    let heads = c.opt_u64(&["mamba_n_heads"])?.unwrap_or(128);
    let inner = match c.map.get("mamba_d_ssm") {
        Some(Value::Null) => c.opt_u64(&["mamba_expand"])?.unwrap_or(2) * d.hidden,
        _ => c.opt_u64(&["mamba_d_ssm"])?.unwrap_or(1024),
    };
    // `mamba_d_head: "auto"` (the class default) is the inner width over the heads.
    let head_dim = match c.map.get("mamba_d_head") {
        Some(Value::String(s)) if s == "auto" => None,
        None | Some(Value::Null) => None,
        Some(_) => c.opt_u64(&["mamba_d_head"])?,
    }
    .unwrap_or(inner / heads.max(1));
    if heads == 0 || heads * head_dim != inner {
        return Err(Error::NotDivisible {
            what: "falcon_h1: mamba_d_ssm (the Mamba inner width) by mamba_n_heads × mamba_d_head"
                .into(),
            a: inner,
            b: heads * head_dim,
        });
    }
    d.linear = Some(Mixer::Mamba2(Mamba2 {
        heads,
        head_dim,
        state_size: c.opt_u64(&["mamba_d_state"])?.unwrap_or(256),
        groups: c.opt_u64(&["mamba_n_groups"])?.unwrap_or(1),
        conv_kernel: c.opt_u64(&["mamba_d_conv"])?.unwrap_or(4),
        chunk: c.opt_u64(&["mamba_chunk_size"])?.unwrap_or(256),
        bias: c.bool("mamba_proj_bias", false)?,
        out_bias: c.bool("projectors_bias", false)?,
        gated_norm: c.bool("mamba_rms_norm", false)?,
        conv_bias: c.bool("mamba_conv_bias", true)?,
        // PEFT 0.21.2 `_check_lora_target_modules_mamba` lists falcon_h1.
        peft_refuses_out_proj: true,
    }));
    d.layer_types = vec![LayerType::Hybrid; layers as usize];
    Ok(d)
}

/// Llama 3.2 Vision's text model (modeling_mllama.py `MllamaTextModel`): a Llama whose
/// `cross_attention_layers` are `MllamaCrossAttentionDecoderLayer`s (bias-free q/k/v/o over the
/// image features with per-head `q_norm`/`k_norm`, no positions, and two scalar tanh gates),
/// and whose `embed_tokens` has `vocab_size + 8` rows (the image and padding tokens). The
/// class `AutoModelForCausalLM` builds is the text model alone (`MllamaForCausalLM`).
fn mllama(c: &Cfg) -> Result<Draft> {
    let (mut d, _) = common(c, false)?;
    let cross = c
        .u64_list("cross_attention_layers")?
        .unwrap_or_else(|| vec![3, 8, 13, 18, 23, 28, 33, 38]);
    let image_cross = Attention {
        image_cross: true,
        qk_norm: QkNorm::PerHead,
        rope: false,
        ..d.attn
    };
    for i in cross {
        // `layer_idx in self.cross_attention_layers`: indices past the last layer build nothing.
        if let Some(slot) = d.per_layer_attn.get_mut(i as usize) {
            *slot = Some(image_cross);
        }
    }
    d.embedding_extra = 8 * d.hidden;
    d.attention_dropout = c.prob(&["dropout"], 0.0)?;
    Ok(d)
}

/// Mistral's and Ministral 3's text models (`MistralAttention`/`Ministral3Attention`: q/k/v/o
/// without biases; every layer slides when `sliding_window` is set, Mistral's default 4096,
/// Ministral 3's none).
fn mistral_text(c: &Cfg, inner: &str) -> Result<Draft> {
    let (mut d, layers) = common(c, false)?;
    let default = if inner == "mistral" { Some(4096) } else { None };
    d.sliding_window = sliding(c, default)?;
    if d.sliding_window.is_some() {
        d.layer_types = vec![LayerType::Sliding; layers as usize];
    }
    Ok(d)
}

/// The description a draft gives.
pub(super) fn build(d: Draft) -> Result<Transformer> {
    let h = d.hidden;
    let n = d.layer_types.len();
    if d.ffn.len() != n {
        return Err(Error::OutOfRange {
            field: "num_hidden_layers".into(),
            value: n.to_string(),
            why: format!("the per-layer pattern lists {} layers", d.ffn.len()),
        });
    }
    if d.attn.kv_heads > d.attn.heads {
        return Err(Error::OutOfRange {
            field: "num_key_value_heads".into(),
            value: d.attn.kv_heads.to_string(),
            why: format!("cannot exceed num_attention_heads = {}", d.attn.heads),
        });
    }
    // Every family's routed top-k (num_experts_per_tok, moe_topk, ...): more experts per token
    // than there are is corrupt input, and its dispatch buffers overflowed byte counts.
    if let Some(m) = d.moe.filter(|m| m.top_k > m.experts) {
        return Err(Error::OutOfRange {
            field: "the experts each token is routed to (top-k)".into(),
            value: m.top_k.to_string(),
            why: format!("cannot exceed the {} experts", m.experts),
        });
    }
    // A model beyond 1e15 parameters is corrupt input, and would overflow byte counts.
    let experts = d.moe.map_or(1, |m| m.experts);
    let rough = (d.vocab as f64 + 12.0 * h as f64 * n as f64) * h as f64 * experts as f64;
    if rough > 1e15 {
        return Err(Error::OutOfRange {
            field: "model size".into(),
            value: format!("~{rough:.1e} parameters"),
            why: "larger than 1e15 parameters; check the config".into(),
        });
    }
    let enc_dec = d.layout == Layout::EncoderDecoder;
    let with_act = |x: Dense| Dense { act: d.act, ..x };
    let mut layers = Vec::with_capacity(n);
    for (i, t) in d.layer_types.iter().enumerate() {
        let base = d.per_layer_attn.get(i).copied().flatten().unwrap_or(d.attn);
        let rope = d.rope.get(i).copied().unwrap_or(true) && base.rope;
        let first_of_stack = i == 0 || (enc_dec && i as u64 == d.encoder_layers);
        let attn = |window| {
            Mixer::Attention(Attention {
                window,
                rope,
                qk_norm: if base.qk_norm == QkNorm::L2 && !rope {
                    QkNorm::None
                } else {
                    base.qk_norm
                },
                rel_buckets: if first_of_stack { d.rel_buckets } else { 0 },
                ..base
            })
        };
        let missing = |key: &str| Error::MissingField {
            field: key.into(),
            model_type: d.model_type.clone(),
        };
        let need = |what: Option<u64>, key: &str| what.ok_or_else(|| missing(key));
        let mixer = match t {
            LayerType::Full => match d.mla {
                Some(m) => Mixer::Mla(Mla { indexer: None, ..m }),
                None => attn(Window::Full),
            },
            LayerType::Sliding => attn(Window::Sliding(need(d.sliding_window, "sliding_window")?)),
            LayerType::Chunked => attn(Window::Chunked(need(d.chunk, "attention_chunk_size")?)),
            LayerType::Indexed => match d.mla {
                Some(m) => Mixer::Mla(m),
                None => return Err(missing("kv_lora_rank")),
            },
            LayerType::Linear => d.linear.ok_or_else(|| missing("linear_num_key_heads"))?,
            LayerType::Hybrid => match (attn(Window::Full), d.linear) {
                (Mixer::Attention(a), Some(Mixer::Mamba2(m))) => {
                    Mixer::Hybrid(Hybrid { attn: a, mamba: m })
                }
                _ => return Err(missing("mamba_n_heads")),
            },
            LayerType::MoeOnly | LayerType::MlpOnly => Mixer::None,
        };
        let moe = || {
            d.moe
                .map(|m| Moe {
                    shared: m.shared.map(with_act),
                    ..m
                })
                .ok_or_else(|| missing("num_experts"))
        };
        let dense = with_act(
            d.per_layer_dense
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(d.dense),
        );
        let ffn = match d.ffn[i] {
            FfnKind::Dense => Ffn::Dense(dense),
            FfnKind::Moe => Ffn::Moe(moe()?),
            FfnKind::DenseAndMoe => Ffn::DenseAndMoe(dense, moe()?),
            FfnKind::None => Ffn::None,
        };
        let cross = enc_dec && i as u64 >= d.encoder_layers;
        layers.push(Block {
            mixer,
            cross_attention: cross,
            ffn,
            norms: Norms {
                count: d.norms + u64::from(cross),
                width: h,
                norm: d.norm,
            },
            residual: d.residual,
            extra: d.layer_extra,
            per_layer_input: d.per_layer_input,
        });
    }
    if layers.is_empty() {
        return Err(Error::OutOfRange {
            field: "num_hidden_layers".into(),
            value: "0".into(),
            why: "must be positive".into(),
        });
    }
    let e = d.embedding;
    let embedding = d.vocab * h
        + (e.learned_positions + e.type_vocab) * h
        + if e.norm { d.norm.params(h) } else { 0 }
        + d.embedding_extra;
    let head = if d.tied || d.layout == Layout::EncoderOnly {
        0
    } else {
        d.vocab * h + if d.head_bias { d.vocab } else { 0 }
    };
    let stacks = if enc_dec { 2 } else { 1 };
    let mut blocks = Blocks::from_layers(
        h,
        &layers,
        Ends {
            embedding,
            vocab: d.vocab,
            final_norm: if d.final_norm {
                stacks * d.norm.params(h)
            } else {
                0
            },
            head,
            other: if d.pooler { h * h + h } else { 0 },
        },
    );
    if blocks.kinds.len() > 256 {
        return Err(Error::OutOfRange {
            field: "layer_types".into(),
            value: blocks.kinds.len().to_string(),
            why: "more than 256 distinct layer kinds".into(),
        });
    }
    blocks.layout = d.layout;
    blocks.max_positions = d.max_positions;
    blocks.embedding = e;
    blocks.head = Head {
        tied: d.tied,
        pooler: d.pooler,
        softcap: d.softcap,
        tied_rescale: d.tied_rescale,
        text_tied: d.text_tied,
    };
    blocks.norm = d.norm;
    blocks.dropout = Dropout {
        attention: d.attention_dropout,
        hidden: d.hidden_dropout,
    };
    blocks.names = d.names;
    blocks.checked = d.checked;
    blocks.mtp = d.mtp;
    blocks.notes = d.notes;
    if d.per_layer_input > 0 {
        // Gemma4TextModel's `per_layer_model_projection`: hidden → layers × width, no bias.
        blocks.linears.push(Site {
            path: "per_layer_model_projection".into(),
            out: layers.len() as u64 * d.per_layer_input,
            inp: h,
            kind: SiteKind::Module,
            component: Component::Embedding,
            input: 0,
        });
    }
    Ok(Transformer {
        name: String::new(),
        model_type: String::new(),
        blocks,
    })
}

/// transformers' `conversion_mapping._MODEL_TO_CONVERSION_PATTERN` (5.24.0), as PEFT 0.21.2
/// copies it (with `mixtral` added): the model types whose `all-linear`/list targets
/// `_convert_peft_config_moe` rewrites, and to which base pattern.
pub(super) fn peft_moe_conversion(model_type: &str) -> Option<MoeConversion> {
    Some(match model_type {
        "mixtral" | "minimax" | "minimax_m2" => MoeConversion::Mixtral,
        "afmoe"
        | "deepseek_v2"
        | "deepseek_v3"
        | "deepseek_v32"
        | "dots1"
        | "ernie4_5_moe"
        | "glm4_moe"
        | "glm4_moe_lite"
        | "glm_moe_dsa"
        | "glm4v_moe"
        | "longcat_flash"
        | "solar_open"
        | "mellum"
        | "qwen2_moe"
        | "qwen3_moe"
        | "beam"
        | "qwen3_omni_moe"
        | "qwen3_omni_moe_thinker"
        | "qwen3_omni_moe_text"
        | "qwen3_next"
        | "hunyuan_v1_moe"
        | "flex_olmo"
        | "olmoe"
        | "sarvam_mla"
        | "exaone_moe"
        | "cohere2_moe" => MoeConversion::Qwen2Moe,
        _ => return None,
    })
}
