//! The per-layer caches of a model as the serving engines see them (full, sliding, MLA
//! latent, Mamba2 / Gated DeltaNet state), read from the layer-by-layer description, and what
//! one token or one request of each costs.

use super::*;

/// Bytes of one request's state on one GPU (`MambaSpec.page_size_bytes`): the convolution state
/// in the model dtype (`--mamba-cache-dtype auto`), the recurrent one in
/// [`Knobs::mamba_ssm_bytes`] or the model dtype; 0 for attention layers.
pub(super) fn state_bytes(c: &CacheLayout, k: &Knobs) -> u64 {
    let (conv, ssm) = c.state_elements(k.tp);
    conv * k.dtype_bytes + ssm * k.mamba_ssm_bytes.unwrap_or(k.dtype_bytes)
}

/// The per-layer cache kinds of a transformer as the serving engines see them.
///
/// This is the one place the capacity model reads the model's layer structure, and it reads
/// what each layer's mechanism says it caches in the engines' shapes ([`CacheLayout`], from
/// `vram_model::mech`, one per layer in order): a full-attention layer caches its keys and
/// values; a sliding or chunked layer its window (vLLM and SGLang treat a window not shorter
/// than `max_model_len` as full); an MLA layer one latent and the rotary key per token
/// (DeepSeek sparse attention's indexer keys are counted at the KV dtype beside it, an upper
/// bound: vLLM keeps them in fp8 with a scale); a Mamba, Mamba2 or Gated DeltaNet layer a fixed
/// state per request in the engine's shapes ([`CacheLayout::state_elements`]); a layer whose
/// keys and values come from an earlier layer (Gemma 4's KV sharing), or without a mixer,
/// nothing; a layer with attention beside Mamba2 (Falcon-H1) both its keys and values and its
/// state.
pub fn layer_caches(t: &Transformer) -> Vec<CacheLayout> {
    let mut layouts = Vec::with_capacity(t.blocks.len());
    for b in t.blocks.iter() {
        b.mixer.cache_layouts(&mut |l| layouts.push(l));
    }
    layouts
}

/// Whether the model is hybrid as the engines treat it: some layer keeps a per-request state
/// ([`CacheLayout::State`]: Mamba, Mamba2, Gated DeltaNet; vLLM's `MambaModelConfig` and
/// `has_inner_state`, its KV-cache groups' `has_mamba_layers`), over all its layers, as
/// vLLM's config decides it for every pipeline stage. The one place the capacity model asks.
pub(super) fn is_hybrid(t: &Transformer) -> bool {
    layer_caches(t)
        .iter()
        .any(|c| matches!(c, CacheLayout::State { .. }))
}

/// KV-cache bytes one more token of context costs on the most loaded GPU: the full-attention
/// and MLA layers of the first pipeline stage (sliding layers stop growing at their window,
/// states never grow), at `--kv-cache-dtype`.
pub fn kv_bytes_per_token(t: &Transformer, k: &Knobs) -> u64 {
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    stage_layers(t, k.pp)
        .iter()
        .filter(|c| {
            matches!(
                c,
                CacheLayout::Kv { window: None, .. } | CacheLayout::Latent { .. }
            )
        })
        .map(|c| token_bytes(c, kv, attention_tp(k)))
        .sum()
}

/// Bytes per token of one layer's cache on one GPU (`State`: 0).
pub(super) fn token_bytes(c: &CacheLayout, kv: u64, tp: u64) -> u64 {
    match *c {
        CacheLayout::Kv {
            kv_heads,
            head_dim,
            v_head_dim,
            ..
        } => kv_heads.div_ceil(tp).max(1) * (head_dim + v_head_dim) * kv,
        CacheLayout::Latent { latent, rope } => (latent + rope) * kv,
        CacheLayout::State { .. } => 0,
    }
}

/// Layers of this pipeline stage's cache (the first stage's `⌈layers / pp⌉`).
pub(super) fn stage_layers(t: &Transformer, pp: u64) -> Vec<CacheLayout> {
    let all = layer_caches(t);
    let n = (t.blocks.len() as u64).div_ceil(pp) as usize;
    all.into_iter().take(n).collect()
}
