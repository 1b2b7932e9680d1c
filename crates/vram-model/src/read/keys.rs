//! Which config keys shape a model, and which of them a reader understands (issue 31 item 4).
//!
//! A config is described only when the reader understands every key that shapes its modules.
//! Such a *structural* key sets a count, size or shape (`num_*`, `*_size`, `*_dim`, `*experts*`,
//! `mamba_*`, `ssm_*`, `linear_*`, `*_config`), is `auto_map` (remote code), or turns tensors on
//! or off (a key naming a norm, a bias, parallel blocks or cross-attention). An unknown
//! `model_type` is read as a generic decoder only when each of its structural keys is one the
//! generic decoder reads ([`GENERIC`]) or says what a generic decoder is anyway (`false`, `0`,
//! null); otherwise it is refused naming the first key it does not understand. A known family's
//! adapter reads its own keys; [`KNOWN`] lists, per `model_type`, the structural keys of its
//! transformers 5.24 config class and each is read by the adapter or leaves memory unchanged
//! (the zoo's default configs of every causal-LM type hold the reader to it:
//! `crates/vram-cli/tests/causal_lm.rs`).

use serde_json::Value;

use super::Cfg;
use crate::error::{Error, Result};

/// Whether `key` is structural (see the module docs).
pub fn is_structural(key: &str) -> bool {
    key.starts_with("num_")
        || key.ends_with("_size")
        || key.ends_with("_dim")
        || key.contains("experts")
        || key.starts_with("mamba_")
        || key.starts_with("ssm_")
        || key.starts_with("linear_")
        || key.ends_with("_config")
        || key == "auto_map"
        || key.contains("norm")
        || key.contains("bias")
        || key.contains("parallel")
        || key.contains("cross_attention")
}

/// The structural keys a generic decoder (pre-norm RMSNorm, separate q/k/v/o projections with
/// `attention_bias`, a gated MLP with `mlp_bias`) reads.
pub const GENERIC: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
    "rms_norm_eps",
    "attention_bias",
    "mlp_bias",
    // The storage (`storage` in read/mod.rs).
    "quantization_config",
    // PretrainedConfig's own: the feed-forward chunking of BERT-style models
    // (`apply_chunking_to_forward`), which no decoder reads.
    "chunk_size_feed_forward",
];

/// Whether a value says what a generic decoder is anyway: absent (null), off (`false`) or none
/// (`0`).
fn inactive(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Refuses a config for a generic decoder when a structural key of `text` (the decoder's keys)
/// or of `outer` (the whole config, when `text` is its `text_config` and the class the config
/// names is the wrapper, not its text model's `*ForCausalLM`) is not one it reads.
pub(super) fn check_generic(text: &Cfg, outer: &Cfg) -> Result<()> {
    let text_class = match outer.map.get("architectures") {
        Some(Value::Array(a)) => a
            .first()
            .and_then(Value::as_str)
            .is_some_and(|n| n.ends_with("ForCausalLM")),
        _ => false,
    };
    let nested = !std::ptr::eq(text.map, outer.map) && !text_class;
    let outer_keys = outer
        .map
        .iter()
        .filter(|(k, _)| nested && k.as_str() != "text_config");
    for (key, value) in text.map.iter().chain(outer_keys) {
        if is_structural(key) && !GENERIC.contains(&key.as_str()) && !inactive(value) {
            return Err(Error::Undescribable {
                field: key.clone(),
                model_type: outer.model_type.into(),
            });
        }
    }
    Ok(())
}

/// `model_type`s of transformers 5.24 whose configs carry only keys a generic decoder reads but
/// whose modules are not a generic decoder's, with what differs (from their `modeling_*.py`).
/// They are refused rather than misread; each becomes a family adapter when one is written.
pub const NOT_DESCRIBED: &[(&str, &str)] = &[(
    "diffllama",
    "differential attention (two softmax maps per head, `lambda_q1/k1/q2/k2` and a sub-layer norm per layer)",
)];

/// Refuses a `model_type` listed in [`NOT_DESCRIBED`].
pub(super) fn refuse_not_described(model_type: &str) -> Result<()> {
    match NOT_DESCRIBED.iter().find(|(t, _)| *t == model_type) {
        Some((t, what)) => Err(Error::NotDescribed {
            model_type: (*t).into(),
            what: format!("its {what} are not modelled"),
        }),
        None => Ok(()),
    }
}

/// Structural keys every family reader reads (`decoders::common`, the uniform readers) or that
/// leave memory unchanged whatever the family: norm epsilons, the storage, BERT's feed-forward
/// chunking (`chunk_size_feed_forward`, read by no decoder), and `text_config` (the reader
/// follows it).
const COMMON: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "quantization_config",
    "chunk_size_feed_forward",
    "text_config",
];

/// Per known `model_type`, the structural keys of its transformers 5.24 config class beyond
/// [`COMMON`], each read by its reader or leaving memory unchanged (said where it is not read).
/// `norm_topk_prob` (whether the top-k routing weights are renormalised), `num_nextn_predict_layers`
/// where MTP weights are dropped at load, and a `head_dim` or `qk_head_dim` that the class derives
/// from other keys leave memory unchanged.
pub const KNOWN: &[(&str, &[&str])] = &[
    // read/classic.rs (the 2019–2024 families); `add_cross_attention: true` is refused.
    ("gpt2", &["add_cross_attention"]),
    ("gpt_neox", &["attention_bias", "use_parallel_residual"]),
    ("llama", &["attention_bias", "mlp_bias"]),
    ("mistral", &[]),
    ("mixtral", &["num_local_experts", "num_experts_per_tok"]),
    ("qwen2", &[]),
    ("gemma", &["attention_bias"]),
    ("gemma2", &["attention_bias"]),
    ("phi3", &[]),
    (
        "falcon",
        &["bias", "ffn_hidden_size", "num_kv_heads", "parallel_attn"],
    ),
    ("bert", &["add_cross_attention", "type_vocab_size"]),
    ("roberta", &["add_cross_attention", "type_vocab_size"]),
    ("t5", &["num_layers", "num_decoder_layers", "num_heads"]),
    // read/decoders.rs
    ("qwen3", &["attention_bias"]),
    (
        "qwen3_moe",
        &[
            "attention_bias",
            "moe_intermediate_size",
            "num_local_experts",
            "num_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
        ],
    ),
    (
        "qwen3_vl",
        &["attention_bias", "vision_config", "num_local_experts"],
    ),
    ("qwen2_vl", &["vision_config"]),
    ("qwen2_5_vl", &["vision_config"]),
    (
        "qwen3_vl_moe",
        &[
            "attention_bias",
            "vision_config",
            "moe_intermediate_size",
            "num_local_experts",
            "num_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
        ],
    ),
    ("qwen3_5", &QWEN3_5),
    ("qwen3_5_text", &QWEN3_5),
    ("qwen3_5_moe", &QWEN3_5_MOE),
    ("qwen3_5_moe_text", &QWEN3_5_MOE),
    ("qwen3_next", &QWEN3_5_MOE),
    ("deepseek_v3", &DEEPSEEK),
    // Remote code (`auto_map`) whose architecture is DeepSeek-V3's and Qwen2's.
    ("kimi_k2", &DEEPSEEK),
    ("mimo", &["attention_bias", "num_nextn_predict_layers"]),
    ("deepseek_v32", &DEEPSEEK_DSA),
    ("glm_moe_dsa", &DEEPSEEK_DSA),
    (
        "glm4_moe",
        &[
            "attention_bias",
            "use_qk_norm",
            "moe_intermediate_size",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
            "num_nextn_predict_layers",
        ],
    ),
    (
        "gpt_oss",
        &["attention_bias", "num_local_experts", "num_experts_per_tok"],
    ),
    ("llama4", &LLAMA4),
    ("llama4_text", &LLAMA4),
    ("gemma3", &["attention_bias", "vision_config"]),
    ("gemma3_text", &["attention_bias"]),
    ("gemma4", &GEMMA4),
    ("gemma4_text", &GEMMA4),
    (
        "minimax_m2",
        &["use_qk_norm", "num_local_experts", "num_experts_per_tok"],
    ),
    (
        "nemotron_h",
        &[
            "attention_bias",
            "mlp_bias",
            "use_bias",
            "use_conv_bias",
            "mamba_num_heads",
            "mamba_head_dim",
            "ssm_state_size",
            "chunk_size",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "moe_latent_size",
            "norm_topk_prob",
            "num_nextn_predict_layers",
            // The SSM's activation, the cache's dtype for the fused kernels (the torch path
            // this models keeps the model's), a logits slice, an init-time rescale.
            "mamba_hidden_act",
            "mamba_ssm_cache_dtype",
            "num_logits_to_keep",
            "rescale_prenorm_residual",
            // A key of the class its modeling code does not read (in_proj/out_proj take
            // `use_bias`).
            "mamba_proj_bias",
        ],
    ),
    (
        "granitemoehybrid",
        &[
            "attention_bias",
            "mamba_n_heads",
            "mamba_d_head",
            "mamba_expand",
            "mamba_d_state",
            "mamba_n_groups",
            "mamba_d_conv",
            "mamba_chunk_size",
            "mamba_proj_bias",
            "mamba_conv_bias",
            "num_local_experts",
            "num_experts_per_tok",
            "shared_intermediate_size",
        ],
    ),
    ("olmo2", &["attention_bias"]),
    ("olmo3", &["attention_bias"]),
    ("smollm3", &["attention_bias", "mlp_bias"]),
    ("ernie4_5", &["use_bias"]),
    (
        "ernie4_5_moe",
        &[
            "use_bias",
            "moe_intermediate_size",
            "moe_num_experts",
            "moe_num_shared_experts",
            // The router's minimum normalisation denominator.
            "moe_norm_min",
        ],
    ),
    ("exaone4", &[]),
    (
        "seed_oss",
        &["attention_bias", "attention_out_bias", "mlp_bias"],
    ),
    ("hunyuan_v1_dense", &["attention_bias"]),
    ("hunyuan_v1_moe", &["attention_bias", "num_experts"]),
    ("glm", &["attention_bias"]),
    ("glm4", &["attention_bias"]),
    ("granite_swa", &["attention_bias", "mlp_bias"]),
    ("granite", &["attention_bias", "mlp_bias"]),
    ("phi", &["qk_layernorm"]),
    ("starcoder2", &["use_bias", "norm_epsilon"]),
    ("gpt_bigcode", &["add_cross_attention"]),
    ("bloom", &["apply_residual_connection_post_layernorm"]),
    (
        "opt",
        &[
            "ffn_dim",
            "enable_bias",
            "layer_norm_elementwise_affine",
            "do_layer_norm_before",
            "_remove_final_layer_norm",
            "word_embed_proj_dim",
        ],
    ),
    // `rotary_dim`: the rotated part of each head, no tensor's size.
    ("gptj", &["rotary_dim"]),
    ("cohere", &["attention_bias", "use_qk_norm"]),
    ("cohere2", &["attention_bias", "use_qk_norm"]),
    (
        "qwen2_moe",
        &[
            "qkv_bias",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "norm_topk_prob",
        ],
    ),
    (
        "olmoe",
        &[
            "attention_bias",
            "num_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
        ],
    ),
    ("olmo", &["attention_bias"]),
    ("deepseek_v2", &DEEPSEEK_V2),
    (
        "minicpm3",
        &[
            "attention_bias",
            "mlp_bias",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "qk_head_dim",
            "v_head_dim",
            // Scales of the embeddings and residual branches.
            "dim_model_base",
        ],
    ),
    (
        "mamba2",
        &[
            "num_heads",
            "state_size",
            "chunk_size",
            "use_bias",
            "use_conv_bias",
            // Initialisation only.
            "rescale_prenorm_residual",
        ],
    ),
    (
        "granitemoe",
        &["attention_bias", "num_local_experts", "num_experts_per_tok"],
    ),
    (
        "granitemoeshared",
        &[
            "attention_bias",
            "num_local_experts",
            "num_experts_per_tok",
            "shared_intermediate_size",
        ],
    ),
    ("ministral3", &[]),
    ("sarvam_mla", &DEEPSEEK),
    (
        "sarvam_moe",
        &[
            "attention_bias",
            "use_qk_norm",
            "moe_intermediate_size",
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
            "num_nextn_predict_layers",
        ],
    ),
    (
        "stablelm",
        &["use_qkv_bias", "qk_layernorm", "use_parallel_residual"],
    ),
    (
        "phimoe",
        &[
            "attention_bias",
            "num_local_experts",
            "num_experts_per_tok",
            "lm_head_bias",
        ],
    ),
    (
        "hyperclovax",
        &["attention_bias", "mlp_bias", "use_post_norm"],
    ),
    (
        "granitemoe_swa",
        &[
            "attention_bias",
            "num_local_experts",
            "num_experts_per_tok",
            "shared_intermediate_size",
        ],
    ),
    // Falcon-H1 (read/decoders.rs `falcon_h1`): the µP multipliers `ssm_*_multiplier`,
    // `ssm_multipliers` scale activations; `mamba_norm_before_gate` orders the gated norm;
    // `num_logits_to_keep` is generation's.
    (
        "falcon_h1",
        &[
            "attention_bias",
            "mlp_bias",
            "projectors_bias",
            "mamba_d_ssm",
            "mamba_n_heads",
            "mamba_d_head",
            "mamba_d_state",
            "mamba_n_groups",
            "mamba_d_conv",
            "mamba_expand",
            "mamba_chunk_size",
            "mamba_conv_bias",
            "mamba_proj_bias",
            "mamba_rms_norm",
            "mamba_norm_before_gate",
            "ssm_in_multiplier",
            "ssm_out_multiplier",
            "ssm_multipliers",
            "num_logits_to_keep",
        ],
    ),
    // Mamba (1) and FalconMamba: `rescale_prenorm_residual` is initialisation only.
    (
        "mamba",
        &[
            "state_size",
            "use_bias",
            "use_conv_bias",
            "rescale_prenorm_residual",
        ],
    ),
    (
        "falcon_mamba",
        &[
            "state_size",
            "use_bias",
            "use_conv_bias",
            "rescale_prenorm_residual",
        ],
    ),
    // Jamba: `router_aux_loss_coef` and `output_router_logits` are the loss's.
    (
        "jamba",
        &[
            "num_experts",
            "num_experts_per_tok",
            "mamba_d_state",
            "mamba_d_conv",
            "mamba_expand",
            "mamba_dt_rank",
            "mamba_conv_bias",
            "mamba_proj_bias",
        ],
    ),
    // Llama 3.2 Vision: the cross-attention layers and the tower (read/decoders.rs `mllama`).
    ("mllama", &["cross_attention_layers", "vision_config"]),
    // The wrapper's own keys size the Pixtral tower and projector, which the note counts.
    (
        "mistral3",
        &[
            "vision_config",
            "spatial_merge_size",
            "multimodal_projector_bias",
        ],
    ),
];

/// DeepSeek's, with the MLPs' `mlp_bias`.
const DEEPSEEK_V2: [&str; 13] = [
    "attention_bias",
    "mlp_bias",
    "moe_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "norm_topk_prob",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "qk_head_dim",
    "v_head_dim",
    "kv_lora_rank",
    "num_nextn_predict_layers",
];

const QWEN3_5: [&str; 7] = [
    "attention_bias",
    "vision_config",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
];
const QWEN3_5_MOE: [&str; 13] = [
    "attention_bias",
    "vision_config",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "norm_topk_prob",
    "num_local_experts",
];
const DEEPSEEK: [&str; 12] = [
    "attention_bias",
    "moe_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "norm_topk_prob",
    "num_nextn_predict_layers",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "qk_head_dim",
    "v_head_dim",
    "kv_lora_rank",
];
/// DeepSeek's plus the indexer; `mlp_bias` is a key of the class that its MLPs do not read
/// (`bias=False`, modeling_deepseek_v32.py / modeling_glm_moe_dsa.py).
const DEEPSEEK_DSA: [&str; 14] = [
    "attention_bias",
    "moe_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "norm_topk_prob",
    "num_nextn_predict_layers",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "qk_head_dim",
    "v_head_dim",
    "kv_lora_rank",
    "index_head_dim",
    "mlp_bias",
];
const LLAMA4: [&str; 6] = [
    "attention_bias",
    "attention_chunk_size",
    "num_local_experts",
    "num_experts_per_tok",
    "use_qk_norm",
    "vision_config",
];
const GEMMA4: [&str; 5] = [
    "attention_bias",
    "num_kv_shared_layers",
    "per_layer_config",
    "vision_config",
    "num_experts",
];

/// The structural keys the reader of a known `model_type` understands ([`COMMON`] plus its
/// row of [`KNOWN`]), or `None` for a `model_type` read as a generic decoder.
pub fn understood(model_type: &str) -> Option<Vec<&'static str>> {
    KNOWN.iter().find(|(t, _)| *t == model_type).map(|(_, k)| {
        let mut v = COMMON.to_vec();
        v.extend_from_slice(k);
        v
    })
}
