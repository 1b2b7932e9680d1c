//! vLLM V1's KV-cache layout: page sizes, block sizes and the grouping of layers by spec
//! (the one place it is modelled).

use super::*;

/// One kind of layer in the engine's KV cache (`kv_groups` in `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvGroup {
    /// `full`, `sliding`, `mla` or `state` (Mamba2 / Gated DeltaNet): one of [`KV_KINDS`].
    #[serde(deserialize_with = "kv_kind")]
    pub kind: KvKind,
    /// Layers of this kind on the most loaded GPU.
    pub layers: u64,
    /// vLLM KV-cache groups of this kind (`⌈layers / layers_per_group⌉`; SGLang: 1).
    pub groups: u64,
    /// Layers per group, padding included (vLLM: the same for every group).
    pub layers_per_group: u64,
    /// Tokens per block (`state`: vLLM's `max_model_len`, one block per request).
    pub block_size: u64,
    /// Bytes of one block of one layer as allocated (vLLM: the one page size of every group).
    pub page_bytes: u64,
    /// Bytes the layer's own spec needs per block before the page is unified or padded (a
    /// state's `MambaSpec` page; attention `block_size × bytes per token`).
    pub spec_page_bytes: u64,
    /// Sliding window in tokens.
    pub window: Option<u64>,
    /// Blocks one request of `max_model_len` tokens takes in each group of this kind.
    pub blocks_per_request: u64,
    /// SGLang's state pool: the requests its `MambaPool` holds (`max_mamba_cache_size`);
    /// `None` elsewhere (vLLM's states share the block pool).
    pub state_slots: Option<u64>,
}

/// A [`KvGroup::kind`]: one of [`KV_KINDS`]. (A name for the type so that serde's derive
/// reads the kind back through `kv_kind` into any lifetime instead of borrowing it.)
pub type KvKind = &'static str;

/// The kinds of [`KvGroup::kind`].
pub const KV_KINDS: [&str; 4] = ["full", "sliding", "mla", "state"];

/// [`KvGroup::kind`] read back from JSON (a report read by `vram report`).
fn kv_kind<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<KvKind, D::Error> {
    let s = String::deserialize(d)?;
    KV_KINDS
        .into_iter()
        .find(|k| *k == s)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown KV group kind `{s}`")))
}

/// vLLM V1's KV-cache layout of one GPU's layers: the groups, their one page size, the layers
/// per group.
pub(super) struct VllmLayout {
    pub(super) groups: Vec<KvGroup>,
    pub(super) page: u64,
    pub(super) layers_per_group: u64,
}

impl VllmLayout {
    /// Groups in all (`len(kv_cache_config.kv_cache_groups)`).
    pub(super) fn group_count(&self) -> u64 {
        self.groups.iter().map(|g| g.groups).sum()
    }
    /// Smallest block size of the groups (`_report_kv_cache_config`'s `min_block_size`).
    pub(super) fn min_block(&self) -> u64 {
        self.groups.iter().map(|g| g.block_size).min().unwrap_or(16)
    }

    /// The pool vLLM builds from `available` bytes: `num_blocks = available // page // layers
    /// per group` (`get_num_blocks`), the logged tokens `num_blocks // groups × min block size`
    /// (`_report_kv_cache_config`, to 0.20 at least; 0.24 logs `int(concurrency ×
    /// max_model_len)` instead), and the concurrency at `len`: `num_blocks` over the blocks one
    /// request takes in every group (`get_max_concurrency_for_kv_cache_config`).
    pub(super) fn pool(&self, available: u64, len: u64, mnbt: u64) -> (u64, u64, f64) {
        let num_blocks = available
            .checked_div(self.page)
            .map_or(0, |b| b / self.layers_per_group.max(1));
        let tokens = num_blocks / self.group_count().max(1) * self.min_block();
        let need: u64 = self
            .groups
            .iter()
            .map(|g| g.groups * vllm_blocks(g, len, mnbt))
            .sum();
        let concurrency = if need > 0 {
            num_blocks as f64 / need as f64
        } else {
            0.0
        };
        (num_blocks, tokens, concurrency)
    }
}

/// Blocks one layer of spec `g` holds for a request of `len` tokens (`max_memory_usage_bytes`
/// over the page, `vllm/v1/kv_cache_interface.py`): full and MLA `⌈len / block⌉`; sliding
/// `⌈min(window − 1 + max_num_batched_tokens, len) / block⌉ + 1`; a state one block.
pub(super) fn vllm_blocks(g: &KvGroup, len: u64, mnbt: u64) -> u64 {
    match (g.kind, g.window) {
        ("state", _) => 1,
        ("sliding", Some(w)) => (w.saturating_sub(1) + mnbt).min(len).div_ceil(g.block_size) + 1,
        _ => len.div_ceil(g.block_size),
    }
}

/// vLLM V1's KV-cache layout (the one place it is modelled), read from vLLM's source:
///
/// - Page of one block of one layer (`vllm/v1/kv_cache_interface.py`): attention
///   `block_size × 2 × kv_heads/tp × head_size × kv dtype` (`AttentionSpec.page_size_bytes`);
///   MLA `block_size × (kv_lora_rank + qk_rope_head_dim) × kv dtype`, one head, not split by TP
///   (`MLAAttentionSpec`); Mamba2 / Gated DeltaNet the request's state
///   (`MambaSpec.page_size_bytes`, the shapes of [`CacheLayout::state_elements`] in the model
///   dtype, `--mamba-cache-dtype auto`).
/// - Block size: `--block-size` (16); MLA on Hopper 64 (FlashMLA) and on Blackwell 128
///   (CUTLASS MLA), set by `vllm/platforms/cuda.py` `check_and_update_config`. A model with
///   state layers (`vllm/model_executor/models/config.py`
///   `HybridAttentionMambaModelConfig.verify_and_update_config`) takes the attention block
///   `16 × ⌈state page / (16 × attention page of one token)⌉` unless `--block-size` is larger
///   ("Setting attention block size to N tokens"), and pads the state page to the attention
///   page ("Padding mamba page size by X%").
/// - Pages still unequal (`unify_kv_cache_spec_page_size`): a smaller page's block size grows
///   by the ratio.
/// - Groups (`vllm/v1/core/kv_cache_utils.py` `_get_kv_cache_groups_uniform_page_size`):
///   layers of one spec form a type; the layers per group are the smallest type's count (the
///   largest's when it is below 1.5 × the smallest); each type splits into
///   `⌈layers / per group⌉` groups, the last padded. One model of one spec is one group.
/// - A sliding window no shorter than `max_model_len` is full attention here.
pub(super) fn vllm_layout(
    layers: &[CacheLayout],
    k: &Knobs,
    gpu: &Gpu,
    max_len: u64,
    mnbt: u64,
) -> VllmLayout {
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    let tp = attention_tp(k);
    let mla_aligned = engine::vllm_mla_entry_aligned(k, engine::vllm_v1(k, gpu).0);
    let mla = layers
        .iter()
        .any(|c| matches!(c, CacheLayout::Latent { .. }));
    let mut block = k.block_size.unwrap_or(16);
    if mla {
        match gpu.sm_major {
            9 => block = 64,
            10 => block = 128,
            _ => {}
        }
    }
    let state_page = layers.iter().map(|c| state_bytes(c, k)).max().unwrap_or(0);
    // The attention page of one token the alignment uses: the model's own kv heads and head
    // size (`FullAttentionSpec(block_size=1, ...)`), i.e. the first attention layer's.
    let attn_token = layers
        .iter()
        .map(|c| token_bytes(c, kv, tp))
        .find(|&b| b > 0)
        .unwrap_or(0);
    if state_page > 0 && attn_token > 0 {
        let aligned = 16 * state_page.div_ceil(16 * attn_token);
        if k.block_size.is_none_or(|b| b < aligned) {
            block = aligned;
        }
    }
    let attn_page = block * attn_token;
    // (kind, window, per-token bytes or state bytes) of each layer, in order.
    type Spec = (&'static str, Option<u64>, u64);
    let spec = |c: &CacheLayout| -> Spec {
        match *c {
            CacheLayout::Kv {
                window: Some(window),
                ..
            } if window < max_len => ("sliding", Some(window), block * token_bytes(c, kv, tp)),
            CacheLayout::Kv { .. } => ("full", None, block * token_bytes(c, kv, tp)),
            CacheLayout::Latent { .. } => {
                let entry = token_bytes(c, kv, tp);
                let entry = if mla_aligned {
                    entry.div_ceil(256) * 256
                } else {
                    entry
                };
                ("mla", None, block * entry)
            }
            CacheLayout::State { .. } => ("state", None, state_bytes(c, k)),
        }
    };
    // Types in first-seen order with their layer counts.
    let mut types: Vec<(Spec, u64)> = Vec::new();
    for c in layers {
        let s = spec(c);
        match types.iter_mut().find(|(t, _)| *t == s) {
            Some((_, n)) => *n += 1,
            None => types.push((s, 1)),
        }
    }
    let padded = |kind: &str, p: u64| {
        if kind == "state" && attn_page > p {
            attn_page
        } else {
            p
        }
    };
    let page = types
        .iter()
        .map(|((kind, _, p), _)| padded(kind, *p))
        .max()
        .unwrap_or(0);
    let min_n = types.iter().map(|(_, n)| *n).min().unwrap_or(1).max(1);
    let max_n = types.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let per_group = if (max_n as f64) < min_n as f64 * 1.5 {
        max_n
    } else {
        min_n
    };
    let groups = types
        .iter()
        .map(|&((kind, window, p), n)| {
            let own = padded(kind, p);
            let block_size = if kind == "state" {
                max_len
            } else if own > 0 && page % own == 0 {
                block * (page / own)
            } else {
                block * page.div_ceil(own.max(1))
            };
            let mut g = KvGroup {
                kind,
                layers: n,
                groups: n.div_ceil(per_group),
                layers_per_group: per_group,
                block_size,
                page_bytes: page,
                spec_page_bytes: p,
                window,
                blocks_per_request: 0,
                state_slots: None,
            };
            g.blocks_per_request = vllm_blocks(&g, max_len, mnbt);
            g
        })
        .collect();
    VllmLayout {
        groups,
        page,
        layers_per_group: per_group,
    }
}
