//! The layer-by-layer description of a transformer: an embedding, a list of blocks and a head.
//!
//! Each block is a [`Mixer`] (attention, MLA, Gated DeltaNet, Mamba2 or none) plus an [`Ffn`]
//! (dense, mixture-of-experts, both side by side, or none) plus its norms. Every mechanism
//! answers, in one place, its parameter tensors (by [`Component`]), its cache ([`CacheSpec`])
//! and its forward FLOPs per token. [`Blocks`] holds the distinct block kinds once and a
//! per-layer index into them, so an 80-layer model costs a few kinds and 80 bytes.
//!
//! The shapes follow the modules that transformers 5.24's `from_config` builds (named per
//! mechanism below); the counts are checked against `sum(p.numel() for p in model.parameters())`
//! of the real module tree on the meta device.

use serde::Serialize;

/// Where a parameter belongs, as `vram estimate --json`'s `params_by_component` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Token, position, type and per-layer-input embeddings, and embedding norms.
    Embedding,
    /// Attention / MLA / linear-attention / Mamba weights, incl. q/k norms, sinks, gates.
    Mixer,
    /// Dense feed-forward weights.
    DenseMlp,
    /// Routed expert banks, incl. expert biases.
    RoutedExperts,
    /// Shared expert(s) and their gate.
    SharedExperts,
    /// Router weights and biases (incl. `e_score_correction_bias`).
    Router,
    /// Per-layer norms outside the mixer/MLP modules, and the final norm.
    Norms,
    /// The LM head when not tied to the embedding.
    Head,
    /// Vision tower and projector/merger.
    Vision,
    /// Instantiated multi-token-prediction layers.
    Mtp,
    /// Anything else (a pooler, per-layer-input gates).
    Other,
}

impl Component {
    /// Every component, in display (and JSON) order.
    pub const ALL: [Component; 11] = [
        Component::Embedding,
        Component::Mixer,
        Component::DenseMlp,
        Component::RoutedExperts,
        Component::SharedExperts,
        Component::Router,
        Component::Norms,
        Component::Head,
        Component::Vision,
        Component::Mtp,
        Component::Other,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Component::Embedding => "embedding",
            Component::Mixer => "mixer",
            Component::DenseMlp => "dense_mlp",
            Component::RoutedExperts => "routed_experts",
            Component::SharedExperts => "shared_experts",
            Component::Router => "router",
            Component::Norms => "norms",
            Component::Head => "head",
            Component::Vision => "vision",
            Component::Mtp => "mtp",
            Component::Other => "other",
        }
    }
}

/// Parameter elements per [`Component`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ComponentParams(pub [u64; 11]);

impl ComponentParams {
    /// Elements of one component.
    pub fn get(&self, c: Component) -> u64 {
        self.0[c as usize]
    }
    /// Adds `n` elements to `c`.
    pub fn add(&mut self, c: Component, n: u64) {
        self.0[c as usize] += n;
    }
    /// Adds every component of `o`, `times` times.
    pub fn add_all(&mut self, o: &ComponentParams, times: u64) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b * times;
        }
    }
    /// Sum over all components.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// How a parameter tensor is used, which decides how quantized storage holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// An `nn.Linear` weight `[rows = out, cols = in]`.
    Linear,
    /// An expert bank: `experts` matrices `[rows, cols]` in one 3-D parameter.
    Experts(u64),
    /// An embedding table `[rows = vocab, cols = dim]`.
    Embedding,
    /// A vector or small tensor (norm weights, biases, sinks, conv kernels, `A_log`, ...).
    Vector,
}

/// One parameter tensor (or `count` equal ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Where it belongs.
    pub component: Component,
    /// How it is used.
    pub kind: TensorKind,
    /// First dimension (output features of a linear).
    pub rows: u64,
    /// Second dimension (input features of a linear; 1 for vectors).
    pub cols: u64,
    /// Kept in fp32 whatever the model's dtype (`_keep_in_fp32_modules_strict`: DeepSeek-style
    /// router weights).
    pub fp32: bool,
}

impl Tensor {
    /// Elements of the tensor.
    pub fn numel(&self) -> u64 {
        let e = match self.kind {
            TensorKind::Experts(e) => e,
            _ => 1,
        };
        self.rows * self.cols * e
    }
}

fn lin(c: Component, out: u64, inp: u64) -> Tensor {
    Tensor {
        component: c,
        kind: TensorKind::Linear,
        rows: out,
        cols: inp,
        fp32: false,
    }
}

fn vector(c: Component, n: u64) -> Tensor {
    Tensor {
        component: c,
        kind: TensorKind::Vector,
        rows: n,
        cols: 1,
        fp32: false,
    }
}

/// Where the attention of one layer may look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// Every earlier token (`full_attention`).
    Full,
    /// The last `w` tokens (`sliding_attention`): `DynamicSlidingWindowLayer` keeps `w − 1`.
    Sliding(u64),
    /// Chunks of `c` tokens (Llama 4's `chunked_attention`); cached like a sliding window.
    Chunked(u64),
}

/// The normalisation of queries and keys inside attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    /// None.
    None,
    /// RMSNorm over each head (`q_norm`/`k_norm` of `head_dim`: Qwen3, Gemma 3, GLM-4.5).
    PerHead,
    /// RMSNorm over the whole projection width (OLMo 2/3, MiniMax-M2).
    FullWidth,
    /// L2 normalisation without weights (Llama 4).
    L2,
}

/// Multi-head attention with grouped key/value heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Attention {
    /// Query heads.
    pub heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Query/key head size.
    pub head_dim: u64,
    /// Value head size (equal to `head_dim` except in MLA-like layouts).
    pub v_head_dim: u64,
    /// Full, sliding or chunked.
    pub window: Window,
    /// Learned per-head sinks added to the softmax denominator (gpt-oss).
    pub sinks: bool,
    /// Query/key normalisation.
    pub qk_norm: QkNorm,
    /// The query projection is twice as wide and its second half gates the output (Qwen3.5).
    pub q_gate: bool,
    /// No value projection: values are the raw keys (Gemma 4's full layers, `attention_k_eq_v`).
    pub k_eq_v: bool,
    /// A weightless RMSNorm on values (Gemma 4): no parameters.
    pub v_norm: bool,
    /// Biases on the query/key/value projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub out_bias: bool,
    /// Keys and values come from an earlier layer (Gemma 4's `num_kv_shared_layers`): the layer
    /// has no key/value projections or key norm, and caches nothing.
    pub kv_shared: bool,
    /// Query, key and value come from one fused projection (GPT-2, NeoX, Falcon, Phi-3).
    pub fused_qkv: bool,
    /// T5's relative-position table (`buckets × heads`) lives in this layer; 0 if none.
    pub rel_buckets: u64,
    /// Rotary positions are applied (false for NoPE layers): no memory effect, recorded for
    /// the activations.
    pub rope: bool,
}

/// Multi-head latent attention (DeepSeek-V3 `DeepseekV3Attention`, Kimi-K2, GLM-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// Heads.
    pub heads: u64,
    /// Rank of the query compression (`q_a_proj`/`q_b_proj`), or a plain `q_proj` if `None`.
    pub q_lora_rank: Option<u64>,
    /// Rank of the key/value latent that the cache keeps.
    pub kv_lora_rank: u64,
    /// Per-head query/key size without rotary positions.
    pub qk_nope_head_dim: u64,
    /// Per-head (and shared-key) rotary size.
    pub qk_rope_head_dim: u64,
    /// Per-head value size.
    pub v_head_dim: u64,
    /// Biases on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj` (`attention_bias`).
    pub bias: bool,
    /// DeepSeek sparse attention's indexer (GLM-5, DeepSeek-V3.2).
    pub indexer: Option<Indexer>,
}

/// The lightning indexer of DeepSeek sparse attention (`GlmMoeDsaIndexer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Indexer {
    /// Indexer heads (`index_n_heads`).
    pub heads: u64,
    /// Indexer head size (`index_head_dim`), cached per token.
    pub head_dim: u64,
    /// Tokens each query keeps (`index_topk`).
    pub topk: u64,
    /// Parameters of the indexer module (its projections and norm), from the family's code.
    pub params: u64,
}

/// Gated DeltaNet linear attention (Qwen3.5 `Qwen3_5GatedDeltaNet`, Qwen3-Next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gdn {
    /// Key heads (`linear_num_key_heads`).
    pub num_k_heads: u64,
    /// Value heads (`linear_num_value_heads`).
    pub num_v_heads: u64,
    /// Key head size.
    pub k_head_dim: u64,
    /// Value head size.
    pub v_head_dim: u64,
    /// Depthwise causal convolution width (`linear_conv_kernel_dim`).
    pub conv_kernel: u64,
}

/// Mamba2 state-space mixer (`NemotronHMamba2Mixer`, `GraniteMoeHybridMambaLayer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mamba2 {
    /// SSM heads.
    pub heads: u64,
    /// Head size (`heads × head_dim` = inner width).
    pub head_dim: u64,
    /// State size `N`.
    pub state_size: u64,
    /// B/C groups.
    pub groups: u64,
    /// Convolution width.
    pub conv_kernel: u64,
    /// Scan chunk size.
    pub chunk: u64,
    /// Bias on `in_proj`/`out_proj`.
    pub bias: bool,
    /// Bias on the convolution.
    pub conv_bias: bool,
    /// PEFT refuses LoRA on this mixer's `out_proj` (and `conv1d`): PEFT 0.21.2
    /// `tuners/tuners_utils.py::_check_lora_target_modules_mamba` raises for the model classes it
    /// knows as Mamba-based (Nemotron-H, Falcon-H1, Mamba, Mamba2, FalconMamba). Set by the
    /// config reader for those families; `false` for hybrids PEFT adapts freely (Granite 4).
    pub peft_refuses_out_proj: bool,
}

/// A block's token mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mixer {
    /// Softmax attention.
    Attention(Attention),
    /// Multi-head latent attention.
    Mla(Mla),
    /// Gated DeltaNet linear attention.
    GatedDeltaNet(Gdn),
    /// Mamba2.
    Mamba2(Mamba2),
    /// No mixer (Nemotron-H's MLP-only and MoE-only layers).
    None,
}

/// A dense feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dense {
    /// Inner size.
    pub intermediate: u64,
    /// `down(act(gate(x)) · up(x))` rather than `down(act(up(x)))`.
    pub gated: bool,
    /// Biases on the projections.
    pub bias: bool,
    /// Gate and up are one `gate_up_proj` (Phi-3): the same elements, one tensor.
    pub fused_gate_up: bool,
}

/// How transformers runs the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    /// `grouped_mm_experts_forward` (integrations/moe.py), the 5.x default of classes decorated
    /// `@use_experts_implementation`.
    GroupedMm,
    /// Every token through every expert, scaled by its routing score (Llama 4's `Llama4TextMoe`).
    AllExperts,
    /// A Python loop over the experts that received tokens.
    Loop,
}

/// A mixture-of-experts feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts.
    pub experts: u64,
    /// Experts per token.
    pub top_k: u64,
    /// One expert's inner size.
    pub expert_intermediate: u64,
    /// Gated experts (`gate_up_proj` `[E, 2I, H]`) or not (`up_proj` `[E, I, H]`).
    pub gated: bool,
    /// Biases on the expert projections (gpt-oss).
    pub expert_bias: bool,
    /// Bias on the router linear (gpt-oss).
    pub router_bias: bool,
    /// `e_score_correction_bias` as a parameter (ERNIE 4.5's `moe_statics`); DeepSeek-V3,
    /// GLM, MiniMax-M2 and Nemotron-H register it as a buffer, not a parameter.
    pub correction_bias: bool,
    /// Further router parameters beyond its `[E, H]` weight and biases (Gemma 4's scale and
    /// per-expert scale).
    pub router_extra: u64,
    /// The routing weights stay fp32 when they multiply the expert outputs.
    pub router_weights_fp32: bool,
    /// The router's weight is an fp32 parameter (`_keep_in_fp32_modules_strict`: DeepSeek-V3/
    /// V3.2, Kimi-K2, GLM-4.5/5, Nemotron-H, ERNIE 4.5 MoE).
    pub router_param_fp32: bool,
    /// How the experts run.
    pub dispatch: Dispatch,
    /// Shared expert(s) as one dense MLP beside the routed ones.
    pub shared: Option<Dense>,
    /// A `Linear(H, 1)` sigmoid gate on the shared expert (Qwen3.5-MoE, Qwen3-Next).
    pub shared_gate: bool,
    /// Experts run on a projected latent of this width (Nemotron-H `moe_latent_size`).
    pub latent: Option<u64>,
    /// The latent projections carry biases (Nemotron-H: `fc1_latent_proj`/`fc2_latent_proj`
    /// are `nn.Linear(..., bias=config.mlp_bias)`, modeling_nemotron_h.py `NemotronHMoE`, 5.24).
    pub latent_bias: bool,
}

/// A block's feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ffn {
    /// One dense MLP.
    Dense(Dense),
    /// Mixture of experts.
    Moe(Moe),
    /// A dense MLP and a mixture of experts side by side (Gemma 4).
    DenseAndMoe(Dense, Moe),
    /// No feed-forward (a mixer-only layer).
    None,
}

/// The norms of a block outside its mixer and feed-forward modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Norms {
    /// How many.
    pub count: u64,
    /// Elements of each (its width; twice for LayerNorm with bias).
    pub params_each: u64,
}

/// One decoder (or encoder) layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Block {
    /// The token mixer.
    pub mixer: Mixer,
    /// A cross-attention of the same shape as the mixer (decoder of an encoder-decoder).
    pub cross_attention: bool,
    /// The feed-forward.
    pub ffn: Ffn,
    /// The norms outside mixer and feed-forward.
    pub norms: Norms,
    /// Further per-layer parameters and where they belong (Gemma 4's per-layer-input gate,
    /// projection and norm; a layer scalar).
    pub extra: (Component, u64),
}

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
    const NONE: CacheSpec = CacheSpec {
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

impl Mixer {
    /// The mixer's parameter tensors, in module order.
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        let c = Component::Mixer;
        match self {
            Mixer::Attention(a) => {
                let q = a.heads * a.head_dim * if a.q_gate { 2 } else { 1 };
                // KV-shared layers (Gemma 4 `is_kv_shared_layer`) build no k/v projections
                // and no k_norm.
                let k = if a.kv_shared {
                    0
                } else {
                    a.kv_heads * a.head_dim
                };
                let v = if a.k_eq_v || a.kv_shared {
                    0
                } else {
                    a.kv_heads * a.v_head_dim
                };
                if a.fused_qkv {
                    out(lin(c, q + k + v, h));
                    if a.qkv_bias {
                        out(vector(c, q + k + v));
                    }
                } else {
                    for w in [q, k, v] {
                        if w > 0 {
                            out(lin(c, w, h));
                            if a.qkv_bias {
                                out(vector(c, w));
                            }
                        }
                    }
                }
                out(lin(c, h, a.heads * a.v_head_dim));
                if a.out_bias {
                    out(vector(c, h));
                }
                match a.qk_norm {
                    QkNorm::PerHead => {
                        out(vector(c, a.head_dim));
                        if !a.kv_shared {
                            out(vector(c, a.head_dim));
                        }
                    }
                    QkNorm::FullWidth => {
                        out(vector(c, a.heads * a.head_dim));
                        out(vector(c, k));
                    }
                    QkNorm::None | QkNorm::L2 => {}
                }
                if a.sinks {
                    out(vector(c, a.heads));
                }
                if a.rel_buckets > 0 {
                    out(Tensor {
                        component: c,
                        kind: TensorKind::Embedding,
                        rows: a.rel_buckets,
                        cols: a.heads,
                        fp32: false,
                    });
                }
            }
            Mixer::Mla(m) => {
                let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
                match m.q_lora_rank {
                    Some(r) => {
                        out(lin(c, r, h));
                        if m.bias {
                            out(vector(c, r));
                        }
                        out(vector(c, r)); // q_a_layernorm
                        out(lin(c, m.heads * qk, r));
                    }
                    None => out(lin(c, m.heads * qk, h)),
                }
                out(lin(c, m.kv_lora_rank + m.qk_rope_head_dim, h));
                if m.bias {
                    out(vector(c, m.kv_lora_rank + m.qk_rope_head_dim));
                }
                out(vector(c, m.kv_lora_rank)); // kv_a_layernorm
                out(lin(
                    c,
                    m.heads * (m.qk_nope_head_dim + m.v_head_dim),
                    m.kv_lora_rank,
                ));
                out(lin(c, h, m.heads * m.v_head_dim));
                if m.bias {
                    out(vector(c, h));
                }
                if let Some(ix) = m.indexer {
                    out(vector(c, ix.params));
                }
            }
            Mixer::GatedDeltaNet(g) => {
                // Qwen3_5GatedDeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d
                // (depthwise, no bias), dt_bias, A_log, norm (gated RMSNorm over v_head_dim),
                // out_proj.
                let (kd, vd) = (g.num_k_heads * g.k_head_dim, g.num_v_heads * g.v_head_dim);
                let conv_dim = 2 * kd + vd;
                out(lin(c, conv_dim, h));
                out(lin(c, vd, h));
                out(lin(c, g.num_v_heads, h));
                out(lin(c, g.num_v_heads, h));
                out(vector(c, conv_dim * g.conv_kernel));
                out(vector(c, g.num_v_heads));
                out(vector(c, g.num_v_heads));
                out(vector(c, g.v_head_dim));
                out(lin(c, h, vd));
            }
            Mixer::Mamba2(m) => {
                // NemotronHMamba2Mixer: in_proj H → d_in + conv_dim + heads, conv1d, dt_bias,
                // A_log, D, gated RMSNorm(d_in), out_proj.
                let d_in = m.heads * m.head_dim;
                let conv_dim = d_in + 2 * m.groups * m.state_size;
                let proj = d_in + conv_dim + m.heads;
                out(lin(c, proj, h));
                if m.bias {
                    out(vector(c, proj));
                }
                out(vector(c, conv_dim * m.conv_kernel));
                if m.conv_bias {
                    out(vector(c, conv_dim));
                }
                out(vector(c, m.heads));
                out(vector(c, m.heads));
                out(vector(c, m.heads));
                out(vector(c, d_in));
                out(lin(c, h, d_in));
                if m.bias {
                    out(vector(c, h));
                }
            }
            Mixer::None => {}
        }
    }

    /// What the layer caches (see [`CacheSpec`]).
    pub fn cache(&self) -> CacheSpec {
        match self {
            Mixer::Attention(a) if a.kv_shared => CacheSpec::NONE,
            Mixer::Attention(a) => {
                let per_token = a.kv_heads * (a.head_dim + a.v_head_dim);
                let (kind, window) = match a.window {
                    Window::Full => (CacheKind::Full, None),
                    Window::Sliding(w) | Window::Chunked(w) => (CacheKind::Sliding, Some(w)),
                };
                CacheSpec {
                    kind,
                    per_token,
                    window,
                    ..CacheSpec::NONE
                }
            }
            Mixer::Mla(m) => {
                let latent = m.kv_lora_rank + m.qk_rope_head_dim;
                match m.indexer {
                    Some(ix) => CacheSpec {
                        kind: CacheKind::Indexed,
                        per_token: latent + ix.head_dim,
                        ..CacheSpec::NONE
                    },
                    None => CacheSpec {
                        kind: CacheKind::Full,
                        per_token: latent,
                        ..CacheSpec::NONE
                    },
                }
            }
            Mixer::GatedDeltaNet(g) => {
                let conv_dim = 2 * g.num_k_heads * g.k_head_dim + g.num_v_heads * g.v_head_dim;
                CacheSpec {
                    kind: CacheKind::Linear,
                    state: conv_dim * g.conv_kernel,
                    state_f32: g.num_v_heads * g.k_head_dim * g.v_head_dim,
                    ..CacheSpec::NONE
                }
            }
            Mixer::Mamba2(m) => {
                let d_in = m.heads * m.head_dim;
                let conv_dim = d_in + 2 * m.groups * m.state_size;
                CacheSpec {
                    kind: CacheKind::Linear,
                    state: conv_dim * m.conv_kernel,
                    state_f32: m.heads * m.head_dim * m.state_size,
                    ..CacheSpec::NONE
                }
            }
            Mixer::None => CacheSpec::NONE,
        }
    }

    /// Forward FLOPs per token of the mixer's token interaction (beyond its projections) with
    /// `ctx` earlier tokens: `QKᵀ` and `PV` for attention (within the window), the state update
    /// for recurrent mixers.
    pub fn mixing_flops_per_token(&self, ctx: u64) -> u64 {
        match self {
            Mixer::Attention(a) => {
                let seen = match a.window {
                    Window::Full => ctx,
                    Window::Sliding(w) | Window::Chunked(w) => ctx.min(w),
                };
                2 * a.heads * seen * (a.head_dim + a.v_head_dim)
            }
            Mixer::Mla(m) => {
                let seen = match m.indexer {
                    Some(ix) => ctx.min(ix.topk),
                    None => ctx,
                };
                2 * m.heads * seen * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            }
            Mixer::GatedDeltaNet(g) => 4 * g.num_v_heads * g.k_head_dim * g.v_head_dim,
            Mixer::Mamba2(m) => 4 * m.heads * m.head_dim * m.state_size,
            Mixer::None => 0,
        }
    }
}

impl Dense {
    /// The MLP's parameter tensors, tagged `c`.
    pub fn tensors(&self, h: u64, c: Component, out: &mut impl FnMut(Tensor)) {
        let f = self.intermediate;
        if self.gated {
            if self.fused_gate_up {
                out(lin(c, 2 * f, h));
                if self.bias {
                    out(vector(c, 2 * f));
                }
            } else {
                for _ in 0..2 {
                    out(lin(c, f, h));
                    if self.bias {
                        out(vector(c, f));
                    }
                }
            }
        } else {
            out(lin(c, f, h));
            if self.bias {
                out(vector(c, f));
            }
        }
        out(lin(c, h, f));
        if self.bias {
            out(vector(c, h));
        }
    }
}

impl Moe {
    /// Expert banks, router and shared experts.
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        let (e, i) = (self.experts, self.expert_intermediate);
        let r = Component::RoutedExperts;
        let inner = self.latent.unwrap_or(h);
        out(Tensor {
            component: Component::Router,
            kind: TensorKind::Linear,
            rows: e,
            cols: h,
            fp32: self.router_param_fp32,
        });
        if self.router_bias {
            out(vector(Component::Router, e));
        }
        if self.correction_bias {
            out(vector(Component::Router, e));
        }
        if self.router_extra > 0 {
            out(vector(Component::Router, self.router_extra));
        }
        let up = if self.gated { 2 * i } else { i };
        let bank = |rows, cols| Tensor {
            component: r,
            kind: TensorKind::Experts(e),
            rows,
            cols,
            fp32: false,
        };
        out(bank(up, inner));
        if self.expert_bias {
            out(vector(r, e * up));
        }
        out(bank(inner, i));
        if self.expert_bias {
            out(vector(r, e * inner));
        }
        if let Some(l) = self.latent {
            out(lin(r, l, h));
            out(lin(r, h, l));
            if self.latent_bias {
                out(vector(r, l));
                out(vector(r, h));
            }
        }
        if let Some(s) = self.shared {
            s.tensors(h, Component::SharedExperts, out);
        }
        if self.shared_gate {
            out(lin(Component::SharedExperts, 1, h));
        }
    }
}

impl Ffn {
    /// The feed-forward's parameter tensors.
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        match self {
            Ffn::Dense(d) => d.tensors(h, Component::DenseMlp, out),
            Ffn::Moe(m) => m.tensors(h, out),
            Ffn::DenseAndMoe(d, m) => {
                d.tensors(h, Component::DenseMlp, out);
                m.tensors(h, out);
            }
            Ffn::None => {}
        }
    }

    /// Matmul parameters one token runs through (top-k experts, or all of them where the
    /// dispatch computes every expert), for FLOPs.
    pub fn active_params(&self, h: u64) -> u64 {
        let dense = |d: &Dense| (if d.gated { 3 } else { 2 }) * h * d.intermediate;
        let moe = |m: &Moe| {
            let per = (if m.gated { 3 } else { 2 }) * m.latent.unwrap_or(h) * m.expert_intermediate;
            let run = if m.dispatch == Dispatch::AllExperts {
                m.experts
            } else {
                m.top_k
            };
            run * per + m.experts * h + m.shared.as_ref().map_or(0, dense)
        };
        match self {
            Ffn::Dense(d) => dense(d),
            Ffn::Moe(m) => moe(m),
            Ffn::DenseAndMoe(d, m) => dense(d) + moe(m),
            Ffn::None => 0,
        }
    }
}

impl Block {
    /// Every parameter tensor of the block, in module order (mixer, cross-attention,
    /// feed-forward, norms, extras).
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        self.mixer.tensors(h, out);
        if self.cross_attention {
            if let Mixer::Attention(a) = self.mixer {
                Mixer::Attention(Attention {
                    rel_buckets: 0,
                    ..a
                })
                .tensors(h, out);
            }
        }
        self.ffn.tensors(h, out);
        for _ in 0..self.norms.count {
            out(vector(Component::Norms, self.norms.params_each));
        }
        if self.extra.1 > 0 {
            out(vector(self.extra.0, self.extra.1));
        }
    }

    /// The block's parameters per component.
    pub fn params(&self, h: u64) -> ComponentParams {
        let mut p = ComponentParams::default();
        self.tensors(h, &mut |t| p.add(t.component, t.numel()));
        p
    }

    /// Forward FLOPs per token with `ctx` earlier tokens: 2 per matmul weight the token runs
    /// through plus the mixer's token interaction.
    pub fn flops_per_token(&self, h: u64, ctx: u64) -> u64 {
        let mut mixer = 0;
        self.mixer.tensors(h, &mut |t| {
            if t.kind == TensorKind::Linear {
                mixer += t.numel();
            }
        });
        if self.cross_attention {
            mixer *= 2;
        }
        2 * (mixer + self.ffn.active_params(h)) + self.mixer.mixing_flops_per_token(ctx)
    }
}

/// A vision tower with its projector (instantiated by `*ForConditionalGeneration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Vision {
    /// Encoder layers.
    pub depth: u64,
    /// Encoder width.
    pub hidden: u64,
    /// Encoder feed-forward size.
    pub intermediate: u64,
    /// Encoder heads.
    pub heads: u64,
    /// Patch side in pixels.
    pub patch: u64,
    /// Parameters of the tower and projector, from the family's module tree.
    pub params: u64,
    /// How the family's image processor cuts an image and how the tower merges patches into
    /// text tokens (`estimate::vision` counts both).
    pub input: VisionInput,
    /// Elements of one patch as the tower's patch embedding reads it (channels × temporal
    /// patch × patch²).
    pub patch_elems: u64,
    /// Width of the image features handed to the text model (the text hidden size).
    pub out: u64,
    /// Gated MLP in the tower's layers (Gemma 4), else a two-matmul MLP.
    pub gated: bool,
    /// Extra mergers whose outputs the text model adds at early layers (Qwen3-VL's deepstack).
    pub deepstack: u64,
    /// The images each sequence carries (`--images`), none by default.
    pub images: Option<Images>,
}

/// Images fed with every sequence: how many and their size before the processor resizes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Images {
    /// Images per sequence.
    pub count: u64,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
}

/// How a vision-language family turns one image into patches and text tokens, read from
/// transformers 5.24's image processor and vision model (`estimate::vision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VisionInput {
    /// Qwen3-VL / Qwen3.5: `Qwen2VLImageProcessor`'s `smart_resize` to multiples of
    /// patch × merge within [min_pixels, max_pixels]; `merge`² patches make one token.
    SmartResize {
        /// `spatial_merge_size`.
        merge: u64,
        /// `size["shortest_edge"]` (min_pixels).
        min_pixels: u64,
        /// `size["longest_edge"]` (max_pixels).
        max_pixels: u64,
    },
    /// Llama 4: tiles of `tile` pixels on the best-fitting canvas of at most `max_tiles`, plus
    /// a global tile when there are several; pixel shuffle by `1/shuffle`² per tile.
    Tiles {
        /// Tile side (the processor's `size`, the tower's `image_size`).
        tile: u64,
        /// `max_patches` (tiles) of `Llama4ImageProcessor`.
        max_tiles: u64,
        /// 1 / `pixel_shuffle_ratio`.
        shuffle: u64,
    },
    /// Llama 3.2 Vision (mllama): up to `tiles` tiles of `image`² each, their patches (and a class
    /// token) encoded together; the text model reads them by cross-attention, so an image is one
    /// `<|image|>` token in the text. `intermediate_layers` of the local encoder's outputs are
    /// kept and stacked with the last (`intermediate_layers_indices`).
    CrossTiles {
        /// `vision_config.image_size`.
        image: u64,
        /// `vision_config.max_num_tiles`.
        tiles: u64,
        /// `len(vision_config.intermediate_layers_indices)`.
        intermediate_layers: u64,
    },
    /// Gemma 3: every image resized to `image`² (SigLIP), pooled to `tokens` tokens.
    Fixed {
        /// `vision_config.image_size`.
        image: u64,
        /// `mm_tokens_per_image`.
        tokens: u64,
    },
    /// Gemma 4: aspect-preserving resize to at most `soft_tokens`·`pool`² patches, padded to
    /// that many; `pool`² patches make one soft token.
    PatchBudget {
        /// `pooling_kernel_size`.
        pool: u64,
        /// `vision_soft_tokens_per_image` (the processor's `max_soft_tokens`).
        soft_tokens: u64,
    },
}

/// Multi-token-prediction layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mtp {
    /// How many the config declares.
    pub layers: u64,
    /// Whether the loading code builds them (MiMo's remote code does; DeepSeek-V3, GLM and
    /// Qwen3.5 in transformers 5.24 ignore their weights at load).
    pub instantiated: bool,
    /// Parameters of all declared layers (counted only when instantiated).
    pub params: u64,
}

/// Element type of stored weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// float32.
    F32,
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

/// How the checkpoint stores its weights (`quantization_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Quant {
    /// Unquantized, in the config's dtype.
    None,
    /// Fine-grained FP8 (`quant_method: fp8`, `weight_block_size` `[bn, bk]`): every linear and
    /// expert bank outside `modules_to_not_convert` as `float8_e4m3fn` plus an fp32
    /// `weight_scale_inv` of `ceil(N/bn) × ceil(K/bk)` (quantizers/quantizer_finegrained_fp8.py).
    Fp8Block {
        /// Block rows.
        bn: u64,
        /// Block columns.
        bk: u64,
        /// The LM head stays unquantized: `get_modules_to_not_convert` (quantizers/base.py)
        /// always adds the output embeddings to the config's `modules_to_not_convert`.
        skip_head: bool,
    },
    /// MXFP4 experts (gpt-oss, quantizers/quantizer_mxfp4.py): expert banks packed two values a
    /// byte with one uint8 scale per 32 values; everything else in the config's dtype.
    Mxfp4,
    /// A `quantization_config` whose method is not modelled (NVFP4 via modelopt, compressed
    /// tensors, ...): counted in the config's dtype, with a note.
    Other,
}

/// The weights as shipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Storage {
    /// The config's `dtype` (`torch_dtype` in older files); bf16 when absent.
    pub dtype: Dtype,
    /// The quantization.
    pub quant: Quant,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            dtype: Dtype::Bf16,
            quant: Quant::None,
        }
    }
}

impl Storage {
    /// Bytes one tensor takes as transformers holds it on an H100 (FP8 and MXFP4 kernels
    /// available); with `dequantized`, as the fallback holds it (everything in `dtype`).
    pub fn tensor_bytes(&self, t: &Tensor, dequantized: bool) -> u64 {
        let d = self.dtype.bytes();
        if t.fp32 {
            return t.numel() * 4;
        }
        if dequantized {
            return t.numel() * d;
        }
        let e = match t.kind {
            TensorKind::Experts(e) => e,
            _ => 1,
        };
        match self.quant {
            Quant::Fp8Block { bn, bk, skip_head } => match t.kind {
                TensorKind::Linear | TensorKind::Experts(_)
                    if !(t.component == Component::Router
                        || t.component == Component::Vision
                        || (t.component == Component::Head && skip_head)
                        || t.rows == 1) =>
                {
                    t.numel() + e * t.rows.div_ceil(bn) * t.cols.div_ceil(bk) * 4
                }
                _ => t.numel() * d,
            },
            Quant::Mxfp4 => match t.kind {
                // Mxfp4GptOssExperts (integrations/mxfp4.py): packed uint8 [E, rows, cols/2] and
                // one uint8 scale per 32 values; its expert biases are fp32.
                TensorKind::Experts(_) => e * t.rows * (t.cols.div_ceil(32) * 17),
                TensorKind::Vector if t.component == Component::RoutedExperts => t.numel() * 4,
                _ => t.numel() * d,
            },
            Quant::None | Quant::Other => t.numel() * d,
        }
    }
}

/// The model-level parts that are not per-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Ends {
    /// Embedding parameters (token, position, type, per-layer-input tables, embedding norm).
    pub embedding: u64,
    /// Vocabulary rows of the token embedding (for storage: an embedding table).
    pub vocab: u64,
    /// Final norm(s).
    pub final_norm: u64,
    /// Untied output head (0 when tied).
    pub head: u64,
    /// Other model-level parameters (a pooler).
    pub other: u64,
}

/// The whole layer-by-layer description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Blocks {
    /// Hidden size the blocks read and write.
    pub hidden: u64,
    /// The distinct block kinds.
    pub kinds: Vec<Block>,
    /// Per layer (encoder layers first for encoder-decoders), its index into `kinds`.
    pub pattern: Vec<u8>,
    /// Embedding, final norm, head.
    pub ends: Ends,
    /// A vision tower, if the model carries one.
    pub vision: Option<Vision>,
    /// Multi-token-prediction layers, if the config declares them.
    pub mtp: Option<Mtp>,
    /// The weights as shipped.
    pub storage: Storage,
    /// The uniform fields of [`crate::arch::Transformer`] describe every layer exactly (the
    /// 2019–2024 families); otherwise they are stand-ins that keep the uniform walks running,
    /// and the parameter split comes from these blocks.
    pub uniform: bool,
    /// What the reader assumed or left out, for the estimate's notes (true text only).
    pub notes: Vec<String>,
    /// The config declares a vision tower this reader does not describe (a wrapper read through
    /// its `text_config`, a generic decoder): images would be taken, but are not counted.
    pub vision_unmodelled: bool,
}

impl Blocks {
    /// No layers yet (a reader fills them in).
    pub fn empty() -> Blocks {
        Blocks {
            hidden: 0,
            kinds: Vec::new(),
            pattern: Vec::new(),
            ends: Ends::default(),
            vision: None,
            mtp: None,
            storage: Storage::default(),
            uniform: false,
            notes: Vec::new(),
            vision_unmodelled: false,
        }
    }

    /// A description with one kind repeated `layers` times.
    pub fn uniform(hidden: u64, block: Block, layers: u64, ends: Ends) -> Blocks {
        Blocks {
            hidden,
            kinds: vec![block],
            pattern: vec![0; layers as usize],
            ends,
            vision: None,
            mtp: None,
            storage: Storage::default(),
            uniform: false,
            notes: Vec::new(),
            vision_unmodelled: false,
        }
    }

    /// Builds the description from one block per layer, keeping each distinct block once.
    pub fn from_layers(hidden: u64, layers: &[Block], ends: Ends) -> Blocks {
        let mut kinds: Vec<Block> = Vec::new();
        let mut pattern = Vec::with_capacity(layers.len());
        for b in layers {
            let i = match kinds.iter().position(|k| k == b) {
                Some(i) => i,
                None => {
                    kinds.push(*b);
                    kinds.len() - 1
                }
            };
            pattern.push(u8::try_from(i).expect("at most 256 distinct block kinds"));
        }
        Blocks {
            hidden,
            kinds,
            pattern,
            ends,
            vision: None,
            mtp: None,
            storage: Storage::default(),
            uniform: false,
            notes: Vec::new(),
            vision_unmodelled: false,
        }
    }

    /// Whether the layers differ in a way the uniform walk cannot follow: more than one kind
    /// outside an encoder-decoder's stacks, or a mixer other than attention.
    pub fn varies(&self) -> bool {
        if self.uniform {
            return false;
        }
        self.kinds.len() > 1
            || self.kinds.iter().any(|k| {
                !matches!(k.mixer, Mixer::Attention(_))
                    || matches!(k.ffn, Ffn::None | Ffn::DenseAndMoe(..))
            })
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.pattern.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.pattern.is_empty()
    }

    /// Layer `i`'s block.
    pub fn layer(&self, i: usize) -> &Block {
        &self.kinds[self.pattern[i] as usize]
    }

    /// Every layer's block, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Block> + '_ {
        self.pattern.iter().map(|&k| &self.kinds[k as usize])
    }

    /// How many layers use each kind.
    pub fn kind_counts(&self) -> Vec<u64> {
        let mut n = vec![0; self.kinds.len()];
        for &k in &self.pattern {
            n[k as usize] += 1;
        }
        n
    }

    /// Parameters of the layers alone, per component.
    pub fn layer_params(&self) -> ComponentParams {
        let mut p = ComponentParams::default();
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            p.add_all(&kind.params(self.hidden), n);
        }
        p
    }

    /// Every parameter of the model per component; sums to the exact count.
    pub fn params_by_component(&self) -> ComponentParams {
        let mut p = self.layer_params();
        p.add(Component::Embedding, self.ends.embedding);
        p.add(Component::Norms, self.ends.final_norm);
        p.add(Component::Head, self.ends.head);
        p.add(Component::Other, self.ends.other);
        if let Some(v) = self.vision {
            p.add(Component::Vision, v.params);
        }
        if let Some(m) = self.mtp.filter(|m| m.instantiated) {
            p.add(Component::Mtp, m.params);
        }
        p
    }

    /// Exact parameter count (the unquantized module tree `from_config` builds).
    pub fn param_count(&self) -> u64 {
        self.params_by_component().total()
    }

    /// Bytes of the weights as stored (quantization metadata included); `dequantized` for the
    /// fallback that holds everything in the config's dtype. Embedding, norms, vision tower and
    /// MTP layers stay in the config's dtype.
    pub fn weights_bytes(&self, dequantized: bool) -> u64 {
        let d = self.storage.dtype.bytes();
        let mut bytes = 0;
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            let mut b = 0;
            kind.tensors(self.hidden, &mut |t| {
                b += self.storage.tensor_bytes(&t, dequantized)
            });
            bytes += b * n;
        }
        let head = Tensor {
            component: Component::Head,
            kind: TensorKind::Linear,
            rows: self.ends.vocab,
            cols: self.ends.head / self.ends.vocab.max(1),
            fp32: false,
        };
        bytes += if self.ends.head > 0 && head.numel() == self.ends.head {
            self.storage.tensor_bytes(&head, dequantized)
        } else {
            self.ends.head * d
        };
        let rest = self.ends.embedding
            + self.ends.final_norm
            + self.ends.other
            + self.vision.map_or(0, |v| v.params)
            + self.mtp.filter(|m| m.instantiated).map_or(0, |m| m.params);
        bytes + rest * d
    }

    /// Each layer's cache spec, in layer order (no allocation: an iterator).
    pub fn caches(&self) -> impl Iterator<Item = CacheSpec> + '_ {
        self.iter().map(|b| b.mixer.cache())
    }

    /// Cache bytes for `batch` sequences after a prefill of `t` tokens and `steps` decode
    /// steps, per reported kind (`layers`, bytes), with `dtype` bytes per cached element.
    pub fn cache_by_kind(&self, batch: u64, t: u64, steps: u64, dtype: u64) -> [(u64, u64); 4] {
        let mut out = [(0, 0); 4];
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            let spec = kind.mixer.cache();
            if let Some(i) = CacheKind::REPORTED.iter().position(|k| *k == spec.kind) {
                out[i].0 += n;
                out[i].1 += n * spec.bytes(batch, t, steps, dtype);
            }
        }
        out
    }

    /// What transformers' `DynamicCache` holds for `batch` sequences of a `prompt`-token
    /// prefill and after one decode step, with `dtype` bytes per cached element (fp32 recurrent
    /// states are 4 bytes whatever `dtype` is).
    pub fn cache_report(&self, batch: u64, prompt: u64, dtype: u64) -> CacheReport {
        let prefill = self.cache_by_kind(batch, prompt, 0, dtype);
        let decode = self.cache_by_kind(batch, prompt, 1, dtype);
        let mut by_kind = [KindCache::default(); 4];
        for (i, k) in by_kind.iter_mut().enumerate() {
            *k = KindCache {
                kind: CacheKind::REPORTED[i],
                layers: prefill[i].0,
                after_prefill_bytes: prefill[i].1,
                after_decode_bytes: decode[i].1,
            };
        }
        let after_prefill: u64 = by_kind.iter().map(|k| k.after_prefill_bytes).sum();
        let after_decode: u64 = by_kind.iter().map(|k| k.after_decode_bytes).sum();
        CacheReport {
            after_prefill_bytes: after_prefill,
            after_decode_bytes: after_decode,
            bytes_per_token: after_decode as i64 - after_prefill as i64,
            by_kind,
        }
    }

    /// Forward FLOPs per token of all layers with `ctx` earlier tokens.
    pub fn flops_per_token(&self, ctx: u64) -> u64 {
        self.kinds
            .iter()
            .zip(self.kind_counts())
            .map(|(k, n)| n * k.flops_per_token(self.hidden, ctx))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attn(window: Window) -> Attention {
        Attention {
            heads: 8,
            kv_heads: 2,
            head_dim: 64,
            v_head_dim: 64,
            window,
            sinks: false,
            qk_norm: QkNorm::None,
            q_gate: false,
            k_eq_v: false,
            v_norm: false,
            qkv_bias: false,
            out_bias: false,
            kv_shared: false,
            fused_qkv: false,
            rel_buckets: 0,
            rope: true,
        }
    }

    #[test]
    fn sliding_cache_keeps_the_prompt_until_the_first_decode_step() {
        let spec = Mixer::Attention(attn(Window::Sliding(128))).cache();
        assert_eq!(spec.kind, CacheKind::Sliding);
        // Long prompt: the whole prompt stays alive after prefill, then w tokens.
        assert_eq!(spec.tokens_held(1000, 0), 1000);
        assert_eq!(spec.tokens_held(1000, 1), 128);
        assert_eq!(spec.tokens_held(1000, 5), 128);
        // Short prompt: grows like a full layer until the window.
        assert_eq!(spec.tokens_held(10, 0), 10);
        assert_eq!(spec.tokens_held(10, 1), 11);
        let full = Mixer::Attention(attn(Window::Full)).cache();
        assert_eq!(full.tokens_held(1000, 1), 1001);
        assert_eq!(full.bytes(2, 10, 0, 2), 2 * 10 * 2 * 2 * 64 * 2);
    }

    #[test]
    fn gdn_state_is_fixed_and_its_recurrent_part_fp32() {
        let g = Mixer::GatedDeltaNet(Gdn {
            num_k_heads: 16,
            num_v_heads: 32,
            k_head_dim: 128,
            v_head_dim: 128,
            conv_kernel: 4,
        });
        let s = g.cache();
        assert_eq!(s.kind, CacheKind::Linear);
        assert_eq!(s.bytes(1, 10, 0, 2), s.bytes(1, 5000, 3, 2));
        assert_eq!(s.state_f32, 32 * 128 * 128);
        assert_eq!(s.state, (2 * 16 * 128 + 32 * 128) * 4);
    }

    #[test]
    fn blocks_group_equal_layers_and_components_sum_to_the_total() {
        let dense = Block {
            mixer: Mixer::Attention(attn(Window::Full)),
            cross_attention: false,
            ffn: Ffn::Dense(Dense {
                intermediate: 1024,
                gated: true,
                bias: false,
                fused_gate_up: false,
            }),
            norms: Norms {
                count: 2,
                params_each: 512,
            },
            extra: (Component::Other, 0),
        };
        let moe = Block {
            ffn: Ffn::Moe(Moe {
                experts: 4,
                top_k: 2,
                expert_intermediate: 256,
                gated: true,
                expert_bias: false,
                router_bias: false,
                correction_bias: true,
                router_extra: 0,
                router_weights_fp32: true,
                router_param_fp32: false,
                dispatch: Dispatch::GroupedMm,
                shared: Some(Dense {
                    intermediate: 256,
                    gated: true,
                    bias: false,
                    fused_gate_up: false,
                }),
                shared_gate: false,
                latent: None,
                latent_bias: false,
            }),
            ..dense
        };
        let b = Blocks::from_layers(
            512,
            &[dense, moe, moe, moe],
            Ends {
                embedding: 1000 * 512,
                vocab: 1000,
                final_norm: 512,
                head: 1000 * 512,
                other: 0,
            },
        );
        assert_eq!(b.kinds.len(), 2);
        assert_eq!(b.pattern, vec![0, 1, 1, 1]);
        let p = b.params_by_component();
        assert_eq!(p.get(Component::RoutedExperts), 3 * 4 * 3 * 512 * 256);
        assert_eq!(p.get(Component::SharedExperts), 3 * 3 * 512 * 256);
        assert_eq!(p.get(Component::Router), 3 * (4 * 512 + 4));
        assert_eq!(p.get(Component::DenseMlp), 3 * 512 * 1024);
        assert_eq!(p.get(Component::Norms), 4 * 2 * 512 + 512);
        assert_eq!(p.total(), b.param_count());
        // bf16 unquantized: two bytes per parameter.
        assert_eq!(b.weights_bytes(false), 2 * b.param_count());
    }
}
