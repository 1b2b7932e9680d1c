//! The vocabulary of caches: what one layer's cache holds per sequence ([`CacheTensor`],
//! summed in [`CacheSpec`]), the cache layer classes of transformers 5.24 ([`CacheKind`]), and
//! the cache of a whole model after a prefill and a decode step ([`CacheReport`]). Each token
//! mixer says what it caches in its own module ([`crate::mech::Mixer::cache_tensors`]).

use serde::Serialize;

/// What one layer's cache keeps per sequence, as transformers' `DynamicCache` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheSpec {
    /// The cache layer class.
    pub kind: CacheKind,
    /// Elements cached per token (keys and values, or latent and indexer keys), in the model's
    /// dtype.
    pub per_token: u64,
    /// For sliding/chunked layers, the window `w` (`w − 1` tokens kept after each update).
    pub window: Option<u64>,
    /// Fixed state elements per sequence in the model's dtype (convolution state).
    pub state: u64,
    /// Fixed state elements per sequence in fp32 (Gated DeltaNet's recurrent state).
    pub state_f32: u64,
}

/// One tensor a layer's cache holds per sequence ([`crate::mech::Mixer::cache_tensors`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheTensor {
    /// Elements per cached token (0 for a fixed state).
    pub per_token: u64,
    /// Fixed elements (a recurrent mixer's state).
    pub fixed: u64,
    /// Held in fp32 whatever the cache dtype (a recurrent state).
    pub fp32: bool,
    /// The sliding or chunked window the cache keeps.
    pub window: Option<u64>,
    /// How tensor parallelism splits it: by heads of this size (a rank keeps at least one head:
    /// multi-query K/V are replicated), 1 for an even split, 0 for none (MLA's latent).
    pub split: u64,
}

impl CacheTensor {
    /// A tensor that grows by `per_token` elements per cached token (within `window`), split
    /// by tensor parallelism as `split` says.
    pub fn grow(per_token: u64, window: Option<u64>, split: u64) -> CacheTensor {
        CacheTensor {
            per_token,
            fixed: 0,
            fp32: false,
            window,
            split,
        }
    }

    /// A fixed state of `fixed` elements per sequence (fp32 where `fp32`), split evenly.
    pub fn state(fixed: u64, fp32: bool) -> CacheTensor {
        CacheTensor {
            per_token: 0,
            fixed,
            fp32,
            window: None,
            split: 1,
        }
    }

    /// Elements on one rank of a `tp`-way job: `per_token` (or `fixed`) of them.
    pub fn local(&self, elems: u64, tp: u64) -> u64 {
        match self.split {
            0 => elems,
            1 => elems.div_ceil(tp),
            unit => elems.div_ceil(tp).max(unit.min(elems)),
        }
    }
}

/// What one layer caches, in the shapes a serving engine pages it (vLLM's and SGLang's KV-cache
/// specs): each token mixer gives its own ([`crate::mech::Mixer::cache_layouts`]), and the
/// serving model (`vram_plan::capacity::layer_caches`, one per layer) reads only this. A `Kv`
/// layer without a window is full attention; with one, sliding or chunked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CacheLayout {
    /// Keys and values per token, within `window` tokens when the layer has one.
    Kv {
        /// Key/value heads (before tensor parallelism).
        kv_heads: u64,
        /// Key width per head.
        head_dim: u64,
        /// Value width per head.
        v_head_dim: u64,
        /// The sliding or chunked window.
        window: Option<u64>,
    },
    /// One latent per token shared by every head, and further per-token elements beside it
    /// (MLA's rotary key, DSA's indexer keys).
    Latent {
        /// The latent's width (`kv_lora_rank`).
        latent: u64,
        /// Elements beside it per token.
        rope: u64,
    },
    /// Mamba, Mamba2 and Gated DeltaNet: a fixed state per request, a convolution state and a
    /// recurrent one, in the shapes vLLM's `MambaStateShapeCalculator`
    /// (`vllm/model_executor/layers/mamba/mamba_utils.py`) gives them.
    State {
        /// Convolution channels split evenly by TP (Gated DeltaNet: `2·k_heads·k_dim +
        /// v_heads·v_dim`; Mamba2: `heads·head_dim`, its B/C groups apart; Mamba: the inner
        /// width).
        conv_dim: u64,
        /// Mamba2's B/C groups (0 for Gated DeltaNet and Mamba); at TP not dividing them vLLM
        /// replicates them to `tp` (`extra_groups_for_head_shards`).
        groups: u64,
        /// Convolution channels per group (Mamba2: `2·state_size`).
        group_dim: u64,
        /// Convolution width; the engines keep `conv_kernel − 1` columns.
        conv_kernel: u64,
        /// Recurrent-state heads, split by TP.
        heads: u64,
        /// Recurrent-state elements per head (`k_dim·v_dim`, `head_dim·state_size`, or Mamba's
        /// `state_size` per channel).
        head_state: u64,
    },
}

impl CacheLayout {
    /// Elements of one request's convolution and recurrent states on one GPU of a `tp`-way job
    /// (vLLM's `mamba2_state_shape` / `gated_delta_net_state_shape`: conv `(conv_dim / tp,
    /// k − 1)`, temporal `(heads / tp, …)`); `(0, 0)` for attention layers.
    pub fn state_elements(&self, tp: u64) -> (u64, u64) {
        match *self {
            CacheLayout::State {
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
}

/// One cache kind's layers and bytes in a [`CacheReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindCache {
    /// The kind.
    pub kind: CacheKind,
    /// Layers of this kind.
    pub layers: u64,
    /// Storage kept alive right after the prefill.
    pub after_prefill_bytes: u64,
    /// Storage kept alive after one decode step.
    pub after_decode_bytes: u64,
}

impl Default for KindCache {
    fn default() -> Self {
        KindCache {
            kind: CacheKind::Full,
            layers: 0,
            after_prefill_bytes: 0,
            after_decode_bytes: 0,
        }
    }
}

/// The cache after a prefill and after one decode step (`vram estimate --inference --json`'s
/// `cache_after_prefill_bytes`, `cache_bytes_per_token`, `cache_by_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheReport {
    /// Storage the cache keeps alive right after the prefill (a sliding layer's window is a view
    /// of the whole prompt's keys and values until the first decode step).
    pub after_prefill_bytes: u64,
    /// Storage after one decode step.
    pub after_decode_bytes: u64,
    /// What one decode step adds after the prefill (negative when sliding layers drop the
    /// prompt's storage beyond their window).
    pub bytes_per_token: i64,
    /// Per reported kind, in [`CacheKind::REPORTED`] order.
    pub by_kind: [KindCache; 4],
}

/// transformers 5.24's cache layer classes (cache_utils.py, `DYNAMIC_LAYER_TYPE_MAPPING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// `DynamicLayer`: grows by `torch.cat` every step.
    Full,
    /// `DynamicSlidingWindowLayer` (sliding or chunked).
    Sliding,
    /// `LinearAttentionLayer`: conv + recurrent state (Gated DeltaNet, Mamba2).
    Linear,
    /// `DynamicIndexedLayer`: MLA latent plus the indexer's keys.
    Indexed,
    /// Nothing cached (`DummyLayer`, KV-shared consumers, mixer-less layers).
    None,
}

impl CacheKind {
    /// The four kinds `vram estimate --json` reports in `cache_by_kind`.
    pub const REPORTED: [CacheKind; 4] = [
        CacheKind::Full,
        CacheKind::Sliding,
        CacheKind::Linear,
        CacheKind::Indexed,
    ];
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            CacheKind::Full => "full",
            CacheKind::Sliding => "sliding",
            CacheKind::Linear => "linear",
            CacheKind::Indexed => "indexed",
            CacheKind::None => "none",
        }
    }
}

impl CacheSpec {
    pub(crate) const NONE: CacheSpec = CacheSpec {
        kind: CacheKind::None,
        per_token: 0,
        window: None,
        state: 0,
        state_f32: 0,
    };

    /// Tokens whose storage the layer keeps alive after a prefill of `t` tokens and `steps`
    /// decode steps. `DynamicLayer.update` concatenates (`torch.cat`), so it holds every token.
    /// `DynamicSlidingWindowLayer.update` keeps `full[:, :, -w+1:]`, a view that keeps the
    /// whole concatenated tensor alive: after the prefill that is the whole prompt, after a
    /// decode step `min(tokens before, w − 1) + 1`.
    pub fn tokens_held(&self, t: u64, steps: u64) -> u64 {
        match (self.kind, self.window) {
            (CacheKind::None | CacheKind::Linear, _) => 0,
            (CacheKind::Sliding, Some(w)) => {
                if steps == 0 {
                    t
                } else {
                    (t + steps - 1).min(w.saturating_sub(1)) + 1
                }
            }
            _ => t + steps,
        }
    }

    /// Bytes held for `batch` sequences after a prefill of `t` tokens and `steps` decode steps,
    /// with `dtype` bytes per cached element.
    pub fn bytes(&self, batch: u64, t: u64, steps: u64, dtype: u64) -> u64 {
        batch
            * (self.tokens_held(t, steps) * self.per_token * dtype
                + self.state * dtype
                + self.state_f32 * 4)
    }
}
