//! The per-layer caches of a model as the serving engines see them (full, sliding, MLA
//! latent, Mamba2 / Gated DeltaNet state), read from the layer-by-layer description, and what
//! one token or one request of each costs.

use super::*;

/// What one layer keeps per token (or per request) in the serving engine's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerCache {
    /// Full attention: keys and values of every token.
    Full {
        /// Key/value heads (before tensor parallelism).
        kv_heads: u64,
        /// Key width per head.
        head_dim: u64,
        /// Value width per head.
        v_head_dim: u64,
    },
    /// Sliding-window (or chunked) attention: the last `window` tokens.
    Sliding {
        /// Key/value heads.
        kv_heads: u64,
        /// Width per head.
        head_dim: u64,
        /// Tokens attended to.
        window: u64,
    },
    /// MLA: one compressed latent and the rotary key per token, shared by all heads.
    MlaLatent {
        /// `kv_lora_rank`.
        kv_lora_rank: u64,
        /// `qk_rope_head_dim`.
        rope_dim: u64,
    },
    /// Mamba2 / Gated DeltaNet: a fixed state per request, a convolution state and a
    /// recurrent one, in the shapes vLLM's `MambaStateShapeCalculator`
    /// (`vllm/model_executor/layers/mamba/mamba_utils.py`) gives them.
    State {
        /// Convolution channels split evenly by TP (Gated DeltaNet: `2·k_heads·k_dim +
        /// v_heads·v_dim`; Mamba2: `heads·head_dim`, its B/C groups apart).
        conv_dim: u64,
        /// Mamba2's B/C groups (0 for Gated DeltaNet); at TP not dividing them vLLM replicates
        /// them to `tp` (`extra_groups_for_head_shards`).
        groups: u64,
        /// Convolution channels per group (Mamba2: `2·state_size`).
        group_dim: u64,
        /// Convolution width; the engines keep `conv_kernel − 1` columns.
        conv_kernel: u64,
        /// Recurrent-state heads, split by TP.
        heads: u64,
        /// Recurrent-state elements per head (`k_dim·v_dim`, or `head_dim·state_size`).
        head_state: u64,
    },
}

impl LayerCache {
    /// Elements of one request's convolution and recurrent states on one GPU of a `tp`-way job
    /// (vLLM's `mamba2_state_shape` / `gated_delta_net_state_shape`: conv `(conv_dim / tp,
    /// k − 1)`, temporal `(heads / tp, …)`); `(0, 0)` for attention layers.
    pub fn state_elements(&self, tp: u64) -> (u64, u64) {
        match *self {
            LayerCache::State {
                conv_dim,
                groups,
                group_dim,
                conv_kernel,
                heads,
                head_state,
            } => {
                // `extra_groups_for_head_shards`: `tp − groups` more when TP does not divide them.
                let groups = if groups > 0 && groups % tp != 0 {
                    groups + tp.saturating_sub(groups)
                } else {
                    groups
                };
                let conv = (conv_dim + groups * group_dim).div_ceil(tp);
                (
                    conv * conv_kernel.saturating_sub(1),
                    heads.div_ceil(tp) * head_state,
                )
            }
            _ => (0, 0),
        }
    }

    /// Bytes of one request's state on one GPU (`MambaSpec.page_size_bytes`): the convolution
    /// state in the model dtype (`--mamba-cache-dtype auto`), the recurrent one in
    /// [`Knobs::mamba_ssm_bytes`] or the model dtype.
    pub fn state_bytes(&self, k: &Knobs) -> u64 {
        let (conv, ssm) = self.state_elements(k.tp);
        conv * k.dtype_bytes + ssm * k.mamba_ssm_bytes.unwrap_or(k.dtype_bytes)
    }
}

/// The per-layer cache kinds of a transformer as the serving engines see them.
///
/// This is the one place the capacity model reads the model's layer structure, and it reads
/// what each layer's mechanism says it caches in the engines' shapes
/// (`vram_model::blocks::CacheLayout`, from `vram_model::mech`): a full-attention layer caches its
/// keys and values; a sliding or chunked layer its window (vLLM and SGLang treat a window not
/// shorter than `max_model_len` as full); an MLA layer one latent and the rotary key per token
/// (DeepSeek sparse attention's indexer keys are counted at the KV dtype beside it, an upper
/// bound: vLLM keeps them in fp8 with a scale); a Gated DeltaNet or Mamba2 layer a fixed state
/// per request in the engine's shapes ([`LayerCache::state_elements`]); a layer whose keys and
/// values come from an earlier layer (Gemma 4's KV sharing), or without a mixer, nothing; a layer
/// with attention beside Mamba2 (Falcon-H1) both its keys and values and its state.
pub fn layer_caches(t: &Transformer) -> Vec<LayerCache> {
    use vram_model::blocks::CacheLayout;
    t.blocks
        .iter()
        .flat_map(|b| {
            let mut layouts = Vec::with_capacity(2);
            b.mixer.cache_layouts(&mut |l| layouts.push(l));
            layouts
        })
        .map(|layout| match layout {
            CacheLayout::Kv {
                kv_heads,
                head_dim,
                v_head_dim,
                window: None,
            } => LayerCache::Full {
                kv_heads,
                head_dim,
                v_head_dim,
            },
            CacheLayout::Kv {
                kv_heads,
                head_dim,
                window: Some(window),
                ..
            } => LayerCache::Sliding {
                kv_heads,
                head_dim,
                window,
            },
            CacheLayout::Latent { latent, rope } => LayerCache::MlaLatent {
                kv_lora_rank: latent,
                rope_dim: rope,
            },
            CacheLayout::State {
                conv_dim,
                groups,
                group_dim,
                conv_kernel,
                heads,
                head_state,
            } => LayerCache::State {
                conv_dim,
                groups,
                group_dim,
                conv_kernel,
                heads,
                head_state,
            },
        })
        .collect()
}

/// KV-cache bytes one more token of context costs on the most loaded GPU: the full-attention
/// and MLA layers of the first pipeline stage (sliding layers stop growing at their window,
/// states never grow), at `--kv-cache-dtype`.
pub fn kv_bytes_per_token(t: &Transformer, k: &Knobs) -> u64 {
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    stage_layers(t, k.pp)
        .iter()
        .filter(|c| matches!(c, LayerCache::Full { .. } | LayerCache::MlaLatent { .. }))
        .map(|c| token_bytes(c, kv, attention_tp(k)))
        .sum()
}

/// Bytes per token of one layer's cache on one GPU (`State`: 0).
pub(super) fn token_bytes(c: &LayerCache, kv: u64, tp: u64) -> u64 {
    match *c {
        LayerCache::Full {
            kv_heads,
            head_dim,
            v_head_dim,
        } => kv_heads.div_ceil(tp).max(1) * (head_dim + v_head_dim) * kv,
        LayerCache::Sliding {
            kv_heads, head_dim, ..
        } => kv_heads.div_ceil(tp).max(1) * 2 * head_dim * kv,
        LayerCache::MlaLatent {
            kv_lora_rank,
            rope_dim,
        } => (kv_lora_rank + rope_dim) * kv,
        LayerCache::State { .. } => 0,
    }
}

/// Layers of this pipeline stage's cache (the first stage's `⌈layers / pp⌉`).
pub(super) fn stage_layers(t: &Transformer, pp: u64) -> Vec<LayerCache> {
    let all = layer_caches(t);
    let n = (t.blocks.len() as u64).div_ceil(pp) as usize;
    all.into_iter().take(n).collect()
}
