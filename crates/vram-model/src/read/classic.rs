//! The 2019–2024 families (GPT-2, GPT-NeoX, Llama and its descendants, Falcon, BERT/RoBERTa,
//! T5) as drafts for the one builder ([`super::decoders::build`]): each adapter reads its
//! family's field names (and their variants across releases: `n_embd`/`hidden_size`,
//! `multi_query`/`num_kv_heads`, ...) with the defaults of the `transformers` config classes.
//! Their step figures are checked against the H100 measurements (transformers 5.17; the module
//! trees are the same in 5.24).

use serde_json::Value;

use super::decoders::{moe_template, place_moe, Draft, FfnKind, LayerType};
use super::{activation, kind_of, Cfg};
use crate::describe::{
    Act, Attention, Checked, Component, Dense, Embedding, Layout, Names, Norm, Residual,
};
use crate::error::{Error, Result};

/// A pre-norm decoder of `layers` layers with the 2019–2024 readers' defaults: multi-head
/// attention with rotary positions, a gated MLP of `4h`, RMSNorm twice per layer, an untied
/// head, 2048 positions.
fn base(c: &Cfg, vocab: u64, hidden: u64, layers: u64, heads: u64) -> Draft {
    let n = layers as usize;
    let head_dim = hidden / heads.max(1);
    Draft {
        model_type: c.model_type.to_string(),
        vocab,
        hidden,
        attn: Attention::new(heads, heads, head_dim),
        sliding_window: None,
        chunk: None,
        layer_types: vec![LayerType::Full; n],
        rope: vec![true; n],
        ffn: vec![FfnKind::Dense; n],
        dense: Dense::new(4 * hidden),
        moe: None,
        linear: None,
        mla: None,
        norms: 2,
        norm: Norm::RMS,
        residual: Residual::Sequential,
        tied: false,
        head_bias: false,
        act: Act::Fused,
        max_positions: 2048,
        mtp: None,
        notes: Vec::new(),
        attention_dropout: 0.0,
        hidden_dropout: 0.0,
        per_layer_attn: vec![None; n],
        per_layer_dense: vec![None; n],
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
        checked: Checked::H100Steps,
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

/// Every bias on (GPT-2, BERT): q/k/v, the output projection and the MLP's.
fn all_biases(d: &mut Draft) {
    (d.attn.qkv_bias, d.attn.out_bias, d.dense.bias) = (true, true, true);
}

/// A two-matmul MLP (`fc2(act(fc1(x)))`).
fn plain(d: &mut Draft, intermediate: u64) {
    d.dense = Dense {
        gated: false,
        ..Dense::new(intermediate)
    };
}

/// GPT-2 (`GPT2Block`: learned positions, fused `c_attn` Conv1D, LayerNorms, `gelu_new`, every
/// bias, dropout 0.1; the block keeps the attention output until it returns).
pub(super) fn gpt2(c: &Cfg) -> Result<Draft> {
    refuse_cross_attention(c)?;
    let hidden = c.u64(&["n_embd", "hidden_size"])?;
    let heads = c.u64(&["n_head", "num_attention_heads"])?;
    check_heads(c, hidden, heads)?;
    let positions = c.u64(&["n_positions", "n_ctx", "max_position_embeddings"])?;
    let mut d = base(
        c,
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["n_layer", "num_hidden_layers"])?,
        heads,
    );
    plain(&mut d, c.opt_u64(&["n_inner"])?.unwrap_or(4 * hidden));
    d.max_positions = positions;
    d.embedding.learned_positions = positions;
    d.attn.rope = false;
    d.act = c.act(&["activation_function"], "gelu_new")?;
    d.attn.fused_qkv = true;
    d.norm = Norm::LAYER_NORM;
    all_biases(&mut d);
    d.tied = c.bool("tie_word_embeddings", true)?;
    d.attention_dropout = c.prob(&["attn_pdrop"], 0.1)?;
    d.hidden_dropout = c.prob(&["resid_pdrop"], 0.1)?;
    d.attn.softmax_upcast = false;
    d.residual = Residual::SequentialHeld;
    d.names = Names {
        attn: "attn",
        qkv: "c_attn",
        o: "c_proj",
        up: "c_fc",
        down: "c_proj",
        ..Names::LLAMA
    };
    Ok(d)
}

/// GPT-NeoX / Pythia (`GPTNeoXLayer`: fused `query_key_value`, partial rotary (`rotary_pct`),
/// LayerNorms, parallel residual by default).
pub(super) fn gpt_neox(c: &Cfg) -> Result<Draft> {
    let hidden = c.u64(&["hidden_size"])?;
    let heads = c.u64(&["num_attention_heads"])?;
    check_heads(c, hidden, heads)?;
    let mut d = base(
        c,
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    plain(
        &mut d,
        c.opt_u64(&["intermediate_size"])?.unwrap_or(4 * hidden),
    );
    d.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    d.act = c.act(&["hidden_act"], "gelu")?;
    d.attn.fused_qkv = true;
    d.attn.rotary_pct = fraction_pct(c, "rotary_pct", 0.25)?;
    d.norm = Norm::LAYER_NORM;
    let bias = c.bool("attention_bias", true)?;
    (d.attn.qkv_bias, d.attn.out_bias, d.dense.bias) = (bias, bias, true);
    d.tied = c.bool("tie_word_embeddings", false)?;
    if c.bool("use_parallel_residual", true)? {
        d.residual = Residual::Parallel;
    }
    d.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    d.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    d.names = Names {
        attn: "attention",
        qkv: "query_key_value",
        o: "dense",
        up: "dense_h_to_4h",
        down: "dense_4h_to_h",
        ..Names::LLAMA
    };
    Ok(d)
}

/// Percent of each head the rotary embedding turns, from whichever key the config names it by:
/// `rotary_dim` (GPT-J, MiniMax-M2: a width), else `partial_rotary_factor` at the top level or
/// inside a flat `rope_parameters`/`rope_scaling` (Qwen3.5, GLM, Phi, Phi-3's Phi-4-mini,
/// StableLM), else the whole head. vLLM's `get_rope` reads the same factor
/// (`rotary_dim = int(head_size * partial_rotary_factor)`, `rotary_embedding/__init__.py`, read
/// at v0.10.2 and v0.19.0).
pub(super) fn partial_rotary_pct(c: &Cfg, head_dim: u64) -> Result<u8> {
    if let Some(dim) = c.opt_u64(&["rotary_dim"])? {
        if dim > head_dim || dim * 100 % head_dim != 0 {
            return Err(Error::OutOfRange {
                field: "rotary_dim".into(),
                value: dim.to_string(),
                why: format!("must be a whole percent of head_dim {head_dim}"),
            });
        }
        return Ok((dim * 100 / head_dim) as u8);
    }
    if c.find(&["partial_rotary_factor"]).is_some() {
        return fraction_pct(c, "partial_rotary_factor", 1.0);
    }
    for key in ["rope_parameters", "rope_scaling"] {
        if let Some((_, Value::Object(m))) = c.find(&[key]) {
            let nested = Cfg {
                map: m,
                model_type: c.model_type,
            };
            if nested.find(&["partial_rotary_factor"]).is_some() {
                return fraction_pct(&nested, "partial_rotary_factor", 1.0);
            }
        }
    }
    Ok(100)
}

/// A fraction in (0, 1] as a percent (`rotary_pct`).
fn fraction_pct(c: &Cfg, name: &str, default: f64) -> Result<u8> {
    let f = match c.find(&[name]) {
        None => default,
        Some((_, Value::Number(n))) => n.as_f64().unwrap_or(-1.0),
        Some((_, other)) => {
            return Err(Error::WrongType {
                field: name.into(),
                expected: "a number",
                found: kind_of(other).into(),
            })
        }
    };
    if !(f > 0.0 && f <= 1.0) {
        return Err(Error::OutOfRange {
            field: name.into(),
            value: f.to_string(),
            why: "must be in (0, 1]".into(),
        });
    }
    Ok((f * 100.0).round().max(1.0) as u8)
}

/// Llama and its descendants: Mistral, Mixtral, Qwen2, Gemma, Gemma 2, Phi-3.
pub(super) fn llama_like(c: &Cfg) -> Result<Draft> {
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
    let mut d = base(
        c,
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    let layers = d.layer_types.len();
    d.attn.kv_heads = kv_heads;
    d.attn.head_dim = head_dim;
    d.attn.v_head_dim = head_dim;
    d.attn.rotary_pct = partial_rotary_pct(c, head_dim)?;
    d.dense.intermediate = c.u64(&["intermediate_size"])?;
    d.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    let gemma = mt == "gemma" || mt == "gemma2";
    d.act = if gemma {
        c.act(&["hidden_activation", "hidden_act"], "gelu_pytorch_tanh")?
    } else {
        c.act(&["hidden_act"], "silu")?
    };
    d.tied = c.bool("tie_word_embeddings", gemma)?;
    d.attn.qkv_bias = mt == "qwen2" || c.bool("attention_bias", false)?;
    d.attn.out_bias = mt != "qwen2" && c.bool("attention_bias", false)?;
    d.dense.bias = c.bool("mlp_bias", false)?;
    d.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    if mt == "phi3" {
        (d.attn.fused_qkv, d.dense.fused_gate_up) = (true, true);
        d.hidden_dropout = c.prob(&["resid_pdrop"], 0.0)?;
    }
    if gemma {
        // GemmaRMSNorm: `output * (1.0 + self.weight.float())`; the model scales its
        // embeddings into a new tensor (`hidden_states = inputs_embeds * normalizer`).
        d.norm.fp32_product = true;
        d.embedding.scaled_copy = true;
    }
    if mt == "gemma2" {
        d.norms = 4;
        // Gemma2Config defaults: final_logit_softcapping=30.0 (null turns it off).
        d.softcap = match c.map.get("final_logit_softcapping") {
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
        d.sliding_window = if c.map.contains_key("sliding_window") {
            c.opt_u64(&["sliding_window"])?
        } else {
            Some(4096)
        };
        if d.sliding_window.is_some() {
            d.layer_types = vec![LayerType::Sliding; layers];
        }
    }
    if mt == "mixtral" {
        let experts = c.u64(&["num_local_experts"])?;
        let top_k = c.opt_u64(&["num_experts_per_tok"])?.unwrap_or(2);
        if top_k > experts {
            return Err(Error::OutOfRange {
                field: "num_experts_per_tok".into(),
                value: top_k.to_string(),
                why: format!("cannot exceed num_local_experts = {experts}"),
            });
        }
        // MixtralSparseMoeBlock (5.17 and 5.24): `MixtralTopKRouter` returns the top-k of the
        // fp32 softmax without casting it back; `MixtralExperts` is decorated
        // `@use_experts_implementation` (grouped_mm by default).
        let mut m = moe_template(experts, top_k, d.dense.intermediate);
        m.expert_bias = d.dense.bias;
        m.router_weights_fp32 = true;
        d.moe = Some(m);
        place_moe(&mut d, |_| true);
    }
    // The per-layer windows of transformers' caches and masks: Gemma 2's `layer_types` default
    // alternates sliding (even layers) and full (configuration_gemma2.py); Phi-3 with a
    // `sliding_window` slides every layer (cache_utils.py `get_layer_types_and_kwargs`); Qwen2
    // with `use_sliding_window` slides the layers its `layer_types` name, by default those
    // from `max_window_layers` on (configuration_qwen2.py).
    let window = match mt {
        "gemma2" if !c.map.contains_key("sliding_window") => Some(4096),
        "gemma2" | "phi3" => c.opt_u64(&["sliding_window"])?,
        "qwen2" if c.bool("use_sliding_window", false)? => c.opt_u64(&["sliding_window"])?,
        _ => None,
    };
    if let Some(w) = window {
        let n = d.layer_types.len();
        let slides: Vec<bool> = match mt {
            "gemma2" => (0..n).map(|i| i % 2 == 0).collect(),
            "qwen2" => match c.map.get("layer_types") {
                Some(Value::Array(a)) if a.len() == n => a
                    .iter()
                    .map(|v| v.as_str() == Some("sliding_attention"))
                    .collect(),
                _ => {
                    let from = c.opt_u64(&["max_window_layers"])?.unwrap_or(28);
                    (0..n as u64).map(|i| i >= from).collect()
                }
            },
            _ => vec![true; n],
        };
        d.sliding_window = Some(w);
        for (t, s) in d.layer_types.iter_mut().zip(slides) {
            if s {
                *t = LayerType::Sliding;
            }
        }
    }
    Ok(d)
}

/// Falcon (`FalconDecoderLayer`: fused `query_key_value`, multi-query or grouped K/V, parallel
/// attention with one shared LayerNorm (7B) or two (`new_decoder_architecture`), ALiBi or
/// rotary; `FalconAttention` calls SDPA itself).
pub(super) fn falcon(c: &Cfg) -> Result<Draft> {
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
    let mut d = base(
        c,
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers", "n_layer"])?,
        heads,
    );
    d.attn.kv_heads = kv_heads;
    plain(
        &mut d,
        c.opt_u64(&["ffn_hidden_size"])?.unwrap_or(4 * hidden),
    );
    d.max_positions = c.opt_u64(&["max_position_embeddings"])?.unwrap_or(2048);
    d.attn.fused_qkv = true;
    d.norm = Norm::LAYER_NORM;
    let bias = c.bool("bias", false)?;
    (d.attn.qkv_bias, d.attn.out_bias, d.dense.bias) = (bias, bias, bias);
    let parallel = c.bool("parallel_attn", true)?;
    if parallel {
        d.residual = Residual::Parallel;
    }
    d.norms = if parallel && !new_arch { 1 } else { 2 };
    d.tied = c.bool("tie_word_embeddings", true)?;
    if c.bool("alibi", false)? {
        d.attn.rope = false;
    }
    d.attention_dropout = c.prob(&["attention_dropout"], 0.0)?;
    d.hidden_dropout = c.prob(&["hidden_dropout"], 0.0)?;
    d.attn.softmax_upcast = false;
    d.attn.own_sdpa = true;
    d.names = Names {
        attn: "self_attention",
        qkv: "query_key_value",
        o: "dense",
        up: "dense_h_to_4h",
        down: "dense_4h_to_h",
        ..Names::LLAMA
    };
    Ok(d)
}

/// BERT / RoBERTa (`BertModel`: learned positions and token types, an embedding LayerNorm,
/// post-norm layers with every bias, a pooler; no LM head).
pub(super) fn bert(c: &Cfg) -> Result<Draft> {
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
    let mut d = base(
        c,
        c.u64(&["vocab_size"])?,
        hidden,
        c.u64(&["num_hidden_layers"])?,
        heads,
    );
    d.layout = Layout::EncoderOnly;
    plain(
        &mut d,
        c.opt_u64(&["intermediate_size"])?.unwrap_or(4 * hidden),
    );
    d.max_positions = positions;
    d.embedding.learned_positions = positions;
    d.attn.rope = false;
    d.embedding.type_vocab = match c.find(&["type_vocab_size"]) {
        // RoBERTa configs set 1; a literal 0 is legal and means no token types.
        Some((_, Value::Number(n))) if n.as_u64() == Some(0) => 0,
        _ => c.opt_u64(&["type_vocab_size"])?.unwrap_or(2),
    };
    d.norm = Norm::LAYER_NORM;
    all_biases(&mut d);
    d.act = c.act(&["hidden_act"], "gelu")?;
    d.embedding.norm = true;
    d.pooler = true;
    d.final_norm = false;
    d.attention_dropout = c.prob(&["attention_probs_dropout_prob"], 0.1)?;
    d.hidden_dropout = c.prob(&["hidden_dropout_prob"], 0.1)?;
    d.attn.softmax_upcast = false;
    Ok(d)
}

/// T5 (`T5ForConditionalGeneration`: an encoder and a decoder stack, relative position tables
/// in the first layer of each, cross-attention in every decoder layer, RMS-style
/// `T5LayerNorm`, ReLU (v1.0) or gated (v1.1) feed-forwards, tied head rescaled).
pub(super) fn t5(c: &Cfg) -> Result<Draft> {
    let hidden = c.u64(&["d_model"])?;
    let heads = c.u64(&["num_heads"])?;
    let layers = c.u64(&["num_layers"])?;
    let vocab = c.u64(&["vocab_size"])?;
    let decoder = c.opt_u64(&["num_decoder_layers"])?.unwrap_or(layers);
    let mut d = base(c, vocab, hidden, layers + decoder, heads);
    d.layout = Layout::EncoderDecoder;
    d.encoder_layers = layers;
    let head_dim = c.u64(&["d_kv"])?;
    (d.attn.head_dim, d.attn.v_head_dim) = (head_dim, head_dim);
    d.dense.intermediate = c.u64(&["d_ff"])?;
    d.max_positions = c.opt_u64(&["n_positions"])?.unwrap_or(512);
    d.rel_buckets = c
        .opt_u64(&["relative_attention_num_buckets"])?
        .unwrap_or(32);
    d.attn.rope = false;
    d.attn.rel_bias = true;
    match c.str("feed_forward_proj")?.unwrap_or("relu") {
        "relu" => {
            // T5DenseActDense: `wo(dropout(relu(wi(x))))`.
            d.dense.gated = false;
            d.act = Act::Relu;
            d.dense.inner_dropout = true;
        }
        s if s.starts_with("gated-") => {
            // T5Config maps "gated-gelu" to gelu_new.
            let act = if s == "gated-gelu" {
                "gelu_new"
            } else {
                &s[6..]
            };
            d.act = activation(act).ok_or_else(|| Error::OutOfRange {
                field: "feed_forward_proj".into(),
                value: s.into(),
                why: "unknown activation".into(),
            })?;
        }
        other => {
            return Err(Error::OutOfRange {
                field: "feed_forward_proj".into(),
                value: other.into(),
                why: "expected `relu` or `gated-<act>`".into(),
            })
        }
    }
    d.tied = c.bool("tie_word_embeddings", true)?;
    d.tied_rescale = d.tied;
    let p = c.prob(&["dropout_rate"], 0.1)?;
    (d.attention_dropout, d.hidden_dropout) = (p, p);
    Ok(d)
}
