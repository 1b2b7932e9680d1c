//! Softmax attention with grouped key/value heads, as transformers' attention modules run it:
//! full, sliding or chunked windows, learned sinks (gpt-oss), QK-norm, Qwen3.5's output gate,
//! Gemma 4's raw-key values, weightless value norm and KV sharing, T5's relative-position bias,
//! Falcon's own SDPA call. The kernel PyTorch 2.11 dispatches ([`attention_kernel`]) decides
//! what a step saves and makes; the cache is its keys and values (a window's for sliding
//! layers).

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::norm::rms_norm_host;
use super::step::{m, Ctx, Extra, Parts};
use super::step::{Prog, CACHE};
use super::{
    col_bias, lin, vector, CacheKind, CacheLayout, CacheTensor, Component, Mechanism, Site, Tensor,
    TensorKind,
};
use crate::describe::{Blocks, Layout, Names};
use crate::setup::{AmpStyle, Attention as Impl};

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
    /// Rotary positions are applied (false for NoPE layers and for models whose positions are
    /// learned, relative or ALiBi).
    pub rope: bool,
    /// Percent of each head the rotary embedding turns (`rotary_pct` of GPT-NeoX, 25;
    /// `partial_rotary_factor`); the rest passes through.
    pub rotary_pct: u8,
    /// A relative-position bias is added to the scores (T5's `position_bias`, in every layer
    /// of both stacks): SDPA receives it as a mask that requires grad in training.
    pub rel_bias: bool,
    /// The eager softmax runs in fp32 and casts back (`softmax(..., dtype=torch.float32)`):
    /// its stored output is fp32 where the model's code says so.
    pub softmax_upcast: bool,
    /// The module calls `scaled_dot_product_attention` itself with an explicit mask and its
    /// keys and values as they are (`FalconAttention`): no `repeat_kv`, a multi-query K/V
    /// broadcast inside the math kernel, a mask at every length.
    pub own_sdpa: bool,
    /// Llama 3.2 Vision's gated cross-attention layer (`MllamaCrossAttentionDecoderLayer`,
    /// `cross_attn`): queries from the text, keys and values from the image features (no
    /// positions), `cross_attn_attn_gate` and `cross_attn_mlp_gate` (one tanh-gated scalar each)
    /// on its two branches. A forward without images skips the whole layer
    /// (`MllamaTextModel.forward`), so its `DynamicLayer` stays empty: it caches nothing per
    /// text token.
    pub image_cross: bool,
}

impl Attention {
    /// Full, rotary, bias-free grouped-query attention of this shape, softmax upcast to fp32
    /// (Llama's `LlamaAttention`); readers change what their family differs in.
    pub fn new(heads: u64, kv_heads: u64, head_dim: u64) -> Attention {
        Attention {
            heads,
            kv_heads,
            head_dim,
            v_head_dim: head_dim,
            window: Window::Full,
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
            rotary_pct: 100,
            rel_bias: false,
            softmax_upcast: true,
            own_sdpa: false,
            image_cross: false,
        }
    }

    /// Width of each head the rotary embedding turns: `head_dim · rotary_pct / 100`, floored as
    /// vLLM's `get_rope` does (`int(head_size * partial_rotary_factor)`).
    pub fn rotary_dim(&self) -> u64 {
        self.head_dim * self.rotary_pct as u64 / 100
    }

    /// Query width `heads · head_dim` and key (or value) width `kv_heads · head_dim`.
    pub fn widths(&self) -> (u64, u64) {
        (self.heads * self.head_dim, self.kv_heads * self.head_dim)
    }

    /// The tensors its cache holds per sequence: keys and values (none for a KV-shared layer).
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        if self.kv_shared || self.image_cross {
            return;
        }
        let window = match self.window {
            Window::Full => None,
            Window::Sliding(w) | Window::Chunked(w) => Some(w),
        };
        out(CacheTensor::grow(
            self.kv_heads * self.head_dim,
            window,
            self.head_dim,
        ));
        out(CacheTensor::grow(
            self.kv_heads * self.v_head_dim,
            window,
            self.v_head_dim,
        ));
    }

    /// Its cache as a serving engine pages it: keys and values (none for a KV-shared layer).
    /// vLLM pages an image cross-attention layer's keys and values like a self-attention
    /// layer's (one KV tensor per layer, `MllamaCrossAttentionDecoderLayer` at 0.6).
    pub fn cache_layout(&self) -> Option<CacheLayout> {
        if self.kv_shared {
            return None;
        }
        Some(CacheLayout::Kv {
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            v_head_dim: self.v_head_dim,
            window: match self.window {
                Window::Full => None,
                Window::Sliding(w) | Window::Chunked(w) => Some(w),
            },
        })
    }

    /// Its cache layer's class: full, sliding (a window or chunks), or none (KV sharing).
    pub fn cache_kind(&self) -> CacheKind {
        match self.window {
            _ if self.kv_shared => CacheKind::None,
            Window::Full => CacheKind::Full,
            Window::Sliding(_) | Window::Chunked(_) => CacheKind::Sliding,
        }
    }

    /// What an estimate says of how it is modelled, where that is worth saying.
    pub fn note(&self) -> Option<&'static str> {
        self.sinks.then_some(
            "attention with sinks: gpt-oss's eager_attention_forward ([b, h, q, k + 1] scores, K/V repeated to every head)",
        )
    }
}

impl Mechanism for Attention {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        let c = Component::Mixer;
        let a = self;
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
                out(col_bias(c, q + k + v));
            }
        } else {
            for w in [q, k, v] {
                if w > 0 {
                    out(lin(c, w, h));
                    if a.qkv_bias {
                        out(col_bias(c, w));
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
        if a.image_cross {
            // `cross_attn_attn_gate` and `cross_attn_mlp_gate`.
            out(vector(c, 1));
            out(vector(c, 1));
        }
        if a.rel_buckets > 0 {
            out(Tensor {
                component: c,
                kind: TensorKind::Embedding,
                rows: a.rel_buckets,
                cols: a.heads,
                fp32: false,
                tp: false,
            });
        }
    }

    /// FLOPs per token of `QKᵀ` and `PV` with `ctx` earlier tokens (within the window).
    fn mixing_flops_per_token(&self, ctx: u64) -> u64 {
        let a = self;
        let seen = match a.window {
            Window::Full => ctx,
            Window::Sliding(w) | Window::Chunked(w) => ctx.min(w),
        };
        2 * a.heads * seen * (a.head_dim + a.v_head_dim)
    }

    fn sites(&self, n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let a = self;
        let q = a.heads * a.head_dim * if a.q_gate { 2 } else { 1 };
        // A KV-shared layer (Gemma 4) builds no k/v projections (see `tensors`).
        let k = if a.kv_shared {
            0
        } else {
            a.kv_heads * a.head_dim
        };
        let attn = if a.image_cross { "cross_attn" } else { n.attn };
        let mut module = super::module_sites(attn, Component::Mixer, out);
        let val = if a.k_eq_v || a.kv_shared {
            0
        } else {
            a.kv_heads * a.v_head_dim
        };
        if a.fused_qkv {
            module(n.qkv, q + k + val, h, 0);
        } else {
            module(n.q, q, h, 0);
            if k > 0 {
                module(n.k, k, h, 0);
            }
            if val > 0 {
                module(n.v, val, h, 0);
            }
        }
        module(n.o, h, a.heads * a.v_head_dim, 1);
    }
}

/// The attention kernel that runs, as PyTorch 2.11 dispatches `scaled_dot_product_attention`
/// on an sm90 GPU for the call transformers 5.17 makes (`sdp_utils.cpp`: cuDNN, then flash,
/// then memory-efficient, then the math composite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernel {
    /// cuDNN or flash attention (half precision): saves q, k, v, the output and a log-sum-exp;
    /// the output is already laid out `[b, s, h, d]`, so the `transpose(1, 2).contiguous()`
    /// after it is free.
    Fused,
    /// The memory-efficient kernel (fp32 inputs; the only fused kernel that takes them):
    /// saves what `Fused` saves.
    MemEfficient,
    /// The math composite (`_scaled_dot_product_attention_math`): inputs upcast to fp32, the
    /// `[b, h, s, s]` scores materialised in fp32. Runs when no fused kernel accepts the call:
    /// an attention bias that requires grad (T5's relative position bias in training), a
    /// multi-query K/V without `enable_gqa` (Falcon), grouped-query attention in fp32 (the
    /// memory-efficient kernel has no GQA in 2.11).
    Math,
    /// The model's own eager attention (`attn_implementation="eager"`).
    Eager,
}

/// Which attention kernel runs for the attention `a` (a layer's self-attention, or its
/// cross-attention as [`crate::describe::Block::cross`] gives it) run by transformers on PyTorch 2.11,
/// at sequence length `seq`, with `half` (bf16/fp16) or fp32 inputs. Megatron-LM's own fused
/// attention is not covered: it always runs its fused kernel.
pub fn attention_kernel(
    a: &Attention,
    attention: Impl,
    half: bool,
    training: bool,
    seq: u64,
) -> Kernel {
    if attention == Impl::Eager {
        return Kernel::Eager;
    }
    let gqa = a.kv_heads < a.heads;
    if a.rel_bias && training {
        // T5's position bias requires grad: no fused kernel takes such a mask.
        return Kernel::Math;
    }
    if a.own_sdpa && gqa && a.kv_heads == 1 {
        return Kernel::Math;
    }
    if !half {
        return if gqa && !repeats_kv_at(a, attention, seq) {
            Kernel::Math
        } else {
            Kernel::MemEfficient
        };
    }
    Kernel::Fused
}

/// [`attention_kernel`] for the step described by `c` (Megatron's layout: always fused).
pub(crate) fn kernel_of(a: &Attention, c: &Ctx) -> Kernel {
    if c.style == AmpStyle::Megatron && c.attention == Impl::Sdpa {
        return Kernel::Fused;
    }
    attention_kernel(a, c.attention, c.cmp != 4, c.training, c.s)
}

/// Whether transformers repeats K/V to every head before SDPA (`repeat_kv`): grouped-query
/// attention with an explicit mask or a head dimension over 256 (`use_gqa_in_sdpa`), or the
/// eager path.
pub fn repeats_kv_at(a: &Attention, attention: Impl, seq: u64) -> bool {
    if a.own_sdpa && attention == Impl::Sdpa {
        // `FalconAttention.forward` (modeling_falcon.py) hands SDPA its one-head K/V as they
        // are (no `repeat_kv`); the math kernel broadcasts them inside its matmuls.
        return false;
    }
    a.kv_heads < a.heads && (attention == Impl::Eager || has_mask(a, seq) || a.head_dim > 256)
}

/// Whether transformers hands SDPA an explicit mask: a sliding or chunked window the sequence
/// reaches (masking_utils' `sdpa_mask` stops skipping it), or a module that always passes one
/// (Falcon).
pub(crate) fn has_mask(a: &Attention, seq: u64) -> bool {
    let reached = match a.window {
        Window::Full => false,
        Window::Sliding(w) | Window::Chunked(w) => seq >= w,
    };
    reached || a.own_sdpa
}

/// An attention sub-block (norm, projections, core, output projection, dropout) of attention
/// `a` in model `b`; `cross`: a decoder's cross-attention over the encoder's output. Returns
/// (the backward's extra bytes, the inference high point, the bytes kept only until the forward
/// ends: transformers' `DynamicCache` copies of K and V in a training forward).
pub(crate) fn train_parts(
    a: &Attention,
    b: &Blocks,
    c: &Ctx,
    cross: bool,
    p: &mut Parts,
) -> (u64, u64, u64) {
    let tp = c.t;
    let hidden = b.hidden;
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_real = (a.kv_heads * a.head_dim)
        .div_ceil(tp)
        .max(a.head_dim.min(q_w));
    let megatron = c.style == AmpStyle::Megatron;
    let kernel = kernel_of(a, c);
    let gqa = a.kv_heads < a.heads;
    // K/V as the kernel sees them: repeated to every head by transformers where it must.
    let kv_w = if megatron {
        if c.attention == Impl::Sdpa {
            kv_real
        } else {
            q_w
        }
    } else if repeats_kv_at(a, c.attention, c.s) || (kernel == Kernel::Math && gqa) {
        q_w
    } else {
        kv_real
    };
    super::norm::train(b, c, p);
    let autocast = c.style == AmpStyle::Autocast && c.res != c.cmp;
    // Projection inputs. Under autocast each nn.Linear casts its fp32 input separately
    // (autocast caches casts of parameters, not of activations).
    let copies = if autocast && !a.fused_qkv && !cross {
        3
    } else {
        1
    };
    for _ in 0..copies {
        p.push(c.rep(hidden, c.cmp), false);
    }
    if cross {
        p.push(c.rep(hidden, c.cmp), false); // encoder output cast for K/V
    }
    let rotary = a.rope;
    // transformers' DynamicCache in a training forward (use_cache defaults to True; turned off
    // by gradient checkpointing): `torch.cat` copies K and V, and attention reads the copies.
    // After rotary embeddings under autocast K is fp32 (fp32 cos/sin), and the cache's empty
    // tensors take K's dtype, so V's copy is fp32 too.
    let cache = c.hf_cache && !megatron && b.layout != Layout::EncoderOnly;
    let cache_bytes = if rotary && autocast { 4 } else { c.cmp };
    let mut fwd_kept = 0;
    if !megatron && a.fused_qkv && !rotary {
        // q, k and v are views of one projection output; whatever saves q keeps all of it.
        p.push(m(&[c.tok, q_w + 2 * kv_real, c.cmp]), false);
        if cache {
            // The kernel reads (and saves) the cache's copies of K and V.
            p.push(m(&[c.tok, 2 * kv_real, cache_bytes]), false);
        }
    } else if kernel == Kernel::Math {
        // The math composite saves its own fp32 scaled q and k and fp32 v (below), not the
        // projections' outputs; cache copies are kept until the forward returns.
        if cache {
            fwd_kept = m(&[c.tok, 2 * kv_real, cache_bytes]);
        }
    } else {
        p.push(m(&[c.tok, q_w, c.cmp]), false);
        if cache && cache_bytes != c.cmp {
            // fp32 cache copies live until the forward returns; the kernel saves half casts.
            fwd_kept = m(&[c.tok, 2 * kv_real, cache_bytes]);
        }
        p.push(m(&[c.tok, kv_w, c.cmp]), false);
        p.push(m(&[c.tok, kv_w, c.cmp]), false);
    }
    let heads = a.heads.div_ceil(tp);
    let scores = m(&[c.b, heads, c.s, c.s]);
    let mut fwd_tmp = c.rep(hidden, 4);
    let mut bwd_core = 0;
    let dropout = b.dropout.attention > 0.0 && c.training;
    let sdt = c.sdt(a.softmax_upcast);
    match kernel {
        Kernel::Eager => {
            // softmax output (fp32 where the code or autocast upcasts), then either dropout's
            // mask and output, or the cast the second matmul reads.
            p.push(m(&[scores, sdt]), true);
            if dropout {
                p.push(scores, true);
                p.push(m(&[scores, c.cmp]), true);
            } else if sdt != c.cmp {
                p.push(m(&[scores, c.cmp]), true);
            }
            fwd_tmp = fwd_tmp.max(m(&[scores, c.cmp, 2]));
            bwd_core = m(&[scores, c.cmp + sdt]);
            p.push(m(&[c.tok, q_w, c.cmp]), false); // transpose(1, 2).contiguous() for o_proj
        }
        Kernel::Fused | Kernel::MemEfficient => {
            p.push(m(&[c.tok, q_w, c.cmp]), false); // output (o_proj reads the same tensor)
            p.push(m(&[c.b, heads, c.s, 4]), false); // log-sum-exp
            if has_mask(a, c.s) {
                // The bool mask converted to an additive one in the input dtype, saved.
                p.push(m(&[c.b, c.s, c.s, c.cmp]), true);
            }
            if megatron {
                p.push(m(&[c.tok, q_w, c.cmp]), false); // output projection input
            }
        }
        Kernel::Math => {
            // fp32 scaled q, k and v saved by the two matmuls; softmax output; dropout's mask
            // and output; then the half output made contiguous for o_proj.
            p.push(m(&[c.tok, q_w + 2 * kv_w, 4]), false);
            p.push(m(&[scores, 4]), true);
            if dropout {
                p.push(scores, true);
                p.push(m(&[scores, 4]), true);
            }
            p.push(m(&[c.tok, q_w, c.cmp]), false);
            // Beyond the saved softmax output, `_safe_softmax` holds the pre-softmax fp32 scores
            // and its `isneginf` test while `where_out` writes into the softmax's own storage
            // (PyTorch 2.11, pytorch#139613: no third fp32 scores tensor).
            fwd_tmp = fwd_tmp.max(m(&[scores, 5]));
            bwd_core = m(&[scores, 8]);
        }
    }
    if b.dropout.hidden > 0.0 && c.training {
        p.push(c.rep(hidden, 1), false);
    }
    let bwd = bwd_core.max(m(&[c.tok, q_w + 2 * kv_w, c.cmp]));
    // Inference: input, normed input, q/k/v and the core's output or scores at once.
    let core = match c.attention {
        Impl::Eager => m(&[scores, sdt + c.cmp]),
        Impl::Sdpa => m(&[c.tok, q_w, c.cmp]),
    };
    let infer = c
        .rep(hidden, c.res + c.cmp)
        .saturating_add(m(&[c.tok, q_w + 2 * kv_w, c.cmp]))
        .saturating_add(core);
    (fwd_tmp.max(bwd), infer, fwd_kept)
}

/// A training step of the attention (heads, window, sinks, QK-norm, output gate): what it saves,
/// its high points, its inference and decode temporaries.
pub(crate) fn train(a: &Attention, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let a = *a;
    if a.sinks {
        return train_sinks(&a, b, c, p);
    }
    let (bwd, infer, kept) = train_parts(&a, b, c, false, p);
    let tp = c.t;
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    match a.qk_norm {
        // q_norm / k_norm (Qwen3 `Qwen3RMSNorm` over each head, OLMo 2 over the projection):
        // an RMSNorm of q and of k each.
        QkNorm::PerHead | QkNorm::FullWidth => {
            super::norm::train_rms(c, q_w, p);
            super::norm::train_rms(c, kv_w, p);
        }
        QkNorm::L2 | QkNorm::None => {}
    }
    if a.q_gate {
        // Qwen3.5 (`Qwen3_5Attention.forward`): `attn_output * torch.sigmoid(gate)`: the gate
        // half of q_proj's output and the sigmoid's output are saved, and the product is
        // o_proj's input.
        p.push(m(&[c.tok, q_w, c.cmp]), false);
        p.push(m(&[c.tok, q_w, c.cmp]), false);
        p.push(m(&[c.tok, q_w, c.cmp]), false);
    }
    // Decode: one token per sequence; SDPA reads the cache in place (grouped-query path,
    // no mask for one query without padding: `sdpa_mask` skips it).
    let decode = infer / c.s.max(1);
    // A sliding or chunked layer the prompt reaches gets an explicit mask (masking_utils'
    // `sdpa_mask` stops skipping it): the model keeps the bool `[b, 1, s, s]`, and each SDPA call
    // makes `logical_not` and the additive mask in the query's dtype; with grouped-query heads
    // transformers then repeats K/V to every head (`use_gqa_in_sdpa` is off with a mask).
    let mut infer = infer;
    if let Window::Sliding(w) | Window::Chunked(w) = a.window {
        if c.s >= w {
            infer = infer.saturating_add(m(&[c.b, c.s, c.s, 2 + c.cmp]));
        }
    }
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd,
        fwd: 0,
        infer,
        kept,
        decode,
        decode_per_ctx: 0,
        decode_experts: [0, 0],
    }
}

/// gpt-oss's attention (`GptOssAttention` with `eager_attention_forward`, modeling_gpt_oss.py;
/// the class sets `_supports_sdpa = False`, so eager runs): K/V repeated to every head
/// (`repeat_kv` copies), scores `[b, h, q, k]`, the mask added, the sinks concatenated into
/// `[b, h, q, k + 1]`, the max subtracted, a softmax in the model's dtype whose output is saved,
/// the sink column dropped (a view) and made contiguous for the value matmul.
pub(crate) fn train_sinks(a: &Attention, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let a = *a;
    let tp = c.t;
    let heads = a.heads.div_ceil(tp);
    let q_w = heads * a.head_dim;
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    let hidden = b.hidden;
    super::norm::train(b, c, p);
    p.push(c.rep(hidden, c.cmp), false); // projections' input
    let cmp = c.cmp;
    p.push(m(&[c.tok, q_w, cmp]), false); // q after rotary (the first matmul's input)
    p.push(m(&[c.tok, q_w, cmp]), false); // repeat_kv(k)
    p.push(m(&[c.tok, q_w, cmp]), false); // repeat_kv(v)
    let scores = m(&[c.b, heads, c.s, c.s]);
    let with_sink = m(&[c.b, heads, c.s, c.s + 1]);
    p.push(m(&[with_sink, cmp]), true); // softmax output
    p.push(m(&[scores, cmp]), true); // probs[..., :-1] made contiguous for the matmul
    p.push(m(&[c.tok, q_w, cmp]), false); // transpose(1, 2).contiguous() for o_proj
                                          // Forward high point: the matmul's scores, scaled, masked, concatenated, shifted.
    let fwd = m(&[scores, cmp, 3]).saturating_add(m(&[with_sink, cmp, 2]));
    let bwd = m(&[with_sink, cmp, 3]);
    let kept = if c.hf_cache {
        m(&[c.tok, 2 * kv_w, cmp])
    } else {
        0
    };
    let infer = c
        .rep(hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, q_w + 2 * kv_w, cmp]))
        .saturating_add(m(&[c.tok, 2 * q_w, cmp]))
        .saturating_add(m(&[with_sink, cmp, 3]));
    // A decode step repeats the whole cache to every head and makes score rows over it.
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd,
        fwd,
        infer,
        kept,
        decode: m(&[c.b, hidden + 2 * q_w + 2 * kv_w, cmp]),
        decode_per_ctx: m(&[c.b, heads, 2 * a.head_dim + 4, cmp]),
        decode_experts: [0, 0],
    }
}

/// gpt-oss's eager attention with sinks in a `generate` prefill, tensor by tensor as
/// `eager_attention_forward` (modeling_gpt_oss.py) makes them, each its own allocation (the
/// layer's cache, which holds the rotated K and V, is the caller's): the normed input (held by
/// the decoder layer until the attention returns), q after rotary, K and V repeated to every
/// head; the scores (`matmul`), scaled (the matmul output freed), masked (the scaled freed);
/// `attn_weights`, the masked scores, stays bound until `dropout` reassigns it, so the `cat`
/// with the sinks (`[b, h, q, k + 1]`) and the max-subtracted logits come on top of it (the
/// high point: three score-sized tensors, measured by `tests/engines/live_peak.py`); the
/// softmax (the subtracted logits freed); the value matmul over the softmax's view; the
/// transpose made contiguous; `o_proj`. Returns the output's slot.
pub(crate) fn prefill_sinks(a: &Attention, g: &mut Prog, b: &Blocks, c: &Ctx) -> u8 {
    let tok = c.tok;
    let (h, cmp, tp) = (b.hidden, c.cmp, c.t);
    let heads = a.heads.div_ceil(tp);
    let q_bytes = m(&[tok, heads * a.head_dim, cmp]);
    let scores = m(&[c.b, heads, c.s, c.s, cmp]);
    let with_sink = m(&[c.b, heads, c.s, c.s + 1, cmp]);
    let n1 = super::norm::prefill(g, b.norm, m(&[tok, h]), cmp, true);
    let q0 = g.make(q_bytes);
    let q = g.make(q_bytes);
    g.free(q0);
    let kr = g.make(q_bytes);
    let vr = g.make(q_bytes);
    let s0 = g.make(scores);
    let s1 = g.make(scores);
    g.free(s0);
    let masked = g.make(scores);
    g.free(s1);
    let cat = g.make(with_sink);
    let sub = g.make(with_sink);
    g.free(cat);
    let probs = g.make(with_sink);
    g.free(sub);
    g.free(masked);
    let out = g.make(q_bytes);
    g.free(probs);
    g.free(kr);
    g.free(vr);
    let t = g.make(q_bytes);
    g.free(out);
    g.free(q);
    let o = g.make(m(&[tok, h, cmp]));
    g.free(t);
    g.free(n1);
    o
}

/// The attention's prefill ops over the layer's input (slot `X` of the walk); returns the residual stream after it and the
/// attention's output where the block holds it until it returns (GPT-2).
pub(crate) fn prefill(
    a: &Attention,
    g: &mut Prog,
    b: &Blocks,
    c: &Ctx,
    cache: &[u64],
    held_out: bool,
) -> (u8, Option<u8>) {
    let tok = c.tok;
    let (h, cmp, tp) = (b.hidden, c.cmp, c.t);
    let hd = m(&[tok, h, cmp]);
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    let q_bytes = m(&[tok, q_w, cmp]);
    let kv_act = m(&[tok, kv_w, cmp]);
    let n1 = super::norm::prefill(g, b.norm, m(&[tok, h]), cmp, true);
    // Projections: one fused tensor (views for q, k, v) or three; q/k norms as the module
    // applies them (`q_norm(q_proj(x))` before `k_proj`); a q projection twice as wide whose
    // second half gates the output (Qwen3.5) stays alive for the gate.
    let qk_norm = |g: &mut Prog, slot: u8, width: u64| -> u8 {
        match a.qk_norm {
            QkNorm::None => slot,
            QkNorm::L2 => super::norm::prefill(g, b.norm, m(&[tok, width]), cmp, false),
            QkNorm::PerHead | QkNorm::FullWidth => {
                super::norm::prefill(g, b.norm, m(&[tok, width]), cmp, true)
            }
        }
    };
    let mut gate = None;
    let (q, k, v, fused) = if a.fused_qkv {
        let qkv = g.make(m(&[tok, q_w + 2 * kv_w, cmp]));
        (qkv, Some(qkv), Some(qkv), true)
    } else {
        let qp = g.make(if a.q_gate { 2 * q_bytes } else { q_bytes });
        let q = qk_norm(g, qp, q_w);
        if a.q_gate {
            gate = Some(qp);
        } else if q != qp {
            g.free(qp);
        }
        let (k, v) = if a.kv_shared {
            (None, None)
        } else {
            let kp = g.make(kv_act);
            let k = qk_norm(g, kp, kv_w);
            if k != kp {
                g.free(kp);
            }
            let v = if a.k_eq_v { k } else { g.make(kv_act) };
            let v = if a.v_norm {
                let vn = super::norm::prefill(g, b.norm, m(&[tok, kv_w]), cmp, false);
                if v != k {
                    g.free(v);
                }
                vn
            } else {
                v
            };
            (Some(k), Some(v))
        };
        (q, k, v, false)
    };
    if !c.training {
        g.free(n1);
    }
    let (qe, ke) = if a.rope {
        let qe = rope(g, q_bytes);
        let ke = k.map(|_| rope(g, kv_act));
        if !fused {
            g.free(q);
            if let Some(k) = k {
                if Some(k) != v {
                    g.free(k);
                }
            }
        }
        (qe, ke)
    } else {
        (q, k)
    };
    // The cache update copies keys and values into the cache (DynamicLayer: torch.cat; a static
    // layer's zeros, made at its first update).
    for (j, bytes) in cache.iter().enumerate() {
        g.ops.push((CACHE + j as u8, *bytes));
    }
    // The rotated keys and the values: freed once the cache holds its copies; a training
    // forward has no cache (`use_cache=False` under checkpointing), so the attention reads
    // them and they go when it returns.
    let release_kv = |g: &mut Prog| {
        if let Some(ke) = ke {
            if ke != qe && Some(ke) != k {
                g.free(ke);
            }
        }
        if !fused {
            if let (Some(k), Some(ke)) = (k, ke) {
                if ke == k && Some(k) != v {
                    g.free(k);
                }
            }
            if let Some(v) = v {
                g.free(v);
            }
        }
    };
    if !c.training {
        release_kv(g);
    }
    // Attention.
    let heads = a.heads.div_ceil(tp);
    let kernel = attention_kernel(a, c.attention, cmp != 4, false, c.s);
    let masked = has_mask(a, c.s);
    let sdt = c.sdt(a.softmax_upcast);
    // `repeat_kv`: keys and values expanded to every head (copies) where SDPA's grouped-query
    // path is off, freed when the attention function returns.
    let repeated: Vec<u8> = if c.attention == Impl::Sdpa && repeats_kv_at(a, c.attention, c.s) {
        vec![g.make(q_bytes), g.make(q_bytes)]
    } else {
        Vec::new()
    };
    let mask_elems = m(&[c.b, c.s, c.s]);
    let out = match (c.attention, kernel) {
        (Impl::Sdpa, Kernel::Math) => {
            // `scaled_dot_product_attention` (attention.cpp, PyTorch 2.11) first converts the
            // bool mask to an additive one in the query's dtype (`convert_boolean_attn_mask`:
            // `where(mask, 0, -inf)`), alive for the whole call. `_scaled_dot_product_attention_math`
            // then makes fp32 copies of q, k, v (half inputs) and the scaled q, all locals that
            // live until it returns; the scaled Kᵀ (a temporary of the first matmul); the fp32
            // scores, the mask added in place; then `_safe_softmax`: the softmax, the
            // `isneginf` test and its row reduction, and `where_out` writing the result into the
            // softmax's own storage (pytorch#139613, "reuse storage for out": no third fp32
            // scores tensor), the pre-softmax scores freed when `attn` is reassigned. It returns
            // `(matmul(attn, v).to(dtype), attn.to(dtype))`: the half copy of the scores is made
            // first (GCC evaluates `make_tuple`'s arguments right to left) and is dropped by the
            // caller's `std::get<0>`.
            let kv_seen = if repeated.is_empty() { kv_act } else { q_bytes };
            let widen = |b: u64| b / cmp * 4;
            let fm = masked.then(|| g.make(m(&[mask_elems, cmp])));
            let mut locals = Vec::new();
            if cmp != 4 {
                locals.push(g.make(widen(q_bytes)));
                locals.push(g.make(widen(kv_seen)));
                locals.push(g.make(widen(kv_seen)));
            }
            locals.push(g.make(widen(q_bytes))); // the scaled q
            let ks = g.make(widen(kv_seen));
            // K/V with fewer heads than q, not repeated: `at::matmul` expands them to every
            // head and reshapes the expanded view into a copy for the batched matmul, freed
            // when it returns.
            let broadcast = kv_seen < q_bytes;
            let kx = broadcast.then(|| g.make(widen(q_bytes)));
            let scores = m(&[c.b, heads, c.s, c.s]);
            let attn = g.make(m(&[scores, 4]));
            if let Some(kx) = kx {
                g.free(kx);
            }
            g.free(ks);
            let w = g.make(m(&[scores, 4]));
            let neginf = g.make(scores);
            let rows = g.make(m(&[c.b, heads, c.s]));
            g.free(rows);
            g.free(neginf);
            g.free(attn);
            let half = g.make(m(&[scores, cmp]));
            let vx = broadcast.then(|| g.make(widen(q_bytes)));
            let o32 = g.make(widen(q_bytes));
            if let Some(vx) = vx {
                g.free(vx);
            }
            let o = g.make(q_bytes);
            g.free(o32);
            g.free(w);
            for l in locals {
                g.free(l);
            }
            g.free(half);
            if let Some(fm) = fm {
                g.free(fm);
            }
            o
        }
        (Impl::Sdpa, _) => {
            if masked {
                // The fused kernels take an additive mask: `where(~mask, -65504, 0)` in the
                // query's dtype (`convert_boolean_attn_mask_cudnn`), made per call.
                let not = g.make(mask_elems);
                let add = g.make(m(&[mask_elems, cmp]));
                g.free(not);
                let o = g.make(q_bytes);
                g.free(add);
                o
            } else {
                g.make(q_bytes)
            }
        }
        (Impl::Eager, _) => {
            let s = m(&[c.b, heads, c.s, c.s]);
            let sc = g.make(m(&[s, cmp]));
            let sm = g.make(m(&[s, sdt]));
            g.free(sc);
            let sd = if sdt != cmp {
                let sd = g.make(m(&[s, cmp]));
                g.free(sm);
                sd
            } else {
                sm
            };
            let o = g.make(q_bytes);
            g.free(sd);
            o
        }
    };
    for r in repeated {
        g.free(r);
    }
    let release_q = |g: &mut Prog| {
        if qe != q {
            g.free(qe);
        } else if !fused {
            g.free(q);
        }
    };
    if !c.training {
        release_q(g);
    }
    // `transpose(1, 2).contiguous()`. In training the fused kernels' output is already a
    // `[b, h, s, d]` view of a `[b, s, h, d]` tensor (flash/cuDNN), so it copies nothing.
    let view = c.training && c.attention == Impl::Sdpa && kernel != Kernel::Math;
    let mut at = if view {
        out
    } else {
        let at = g.make(q_bytes);
        g.free(out);
        at
    };
    if let Some(gate) = gate {
        // Qwen3.5: `attn_output * torch.sigmoid(gate)`, then o_proj.
        let sg = g.make(q_bytes);
        let pr = g.make(q_bytes);
        g.free(sg);
        g.free(at);
        g.free(gate);
        at = pr;
    }
    let y = g.make(hd);
    g.free(at);
    if fused {
        g.free(q);
    }
    if c.training {
        release_q(g);
        release_kv(g);
        // The decoder layer's local keeps the normed input until the attention returns.
        g.free(n1);
    }
    let r = g.make(hd);
    // GPT-2's block names the attention output (`hidden_states = attn_output + residual`), so
    // it lives until the block returns; the others rebind `hidden_states` and free it here.
    if held_out {
        (r, Some(y))
    } else {
        g.free(y);
        (r, None)
    }
}

/// Rotary embeddings: `q * cos + rotate_half(q) * sin`, `rotate_half = cat(-x2, x1)`.
fn rope(g: &mut Prog, bytes: u64) -> u8 {
    let t1 = g.make(bytes);
    let neg = g.make(bytes / 2);
    let rh = g.make(bytes);
    g.free(neg);
    let t2 = g.make(bytes);
    g.free(rh);
    let e = g.make(bytes);
    g.free(t1);
    g.free(t2);
    e
}

impl Attention {
    /// Host work of the attention module itself in one `generate` forward, as `sdpa` runs it
    /// (transformers 5.24): the q/k/v views and transposes, rotary (`q·cos + rotate_half(q)·sin`,
    /// the same for k: 10 kernels), `DynamicCache.update`'s two `cat`s, the attention, the output
    /// reshape; a prompt's forward adds `lift_fresh` of the scaling constants (2 views). The
    /// projections are counted as the mixer's linears.
    pub fn module_host(prefill: bool) -> Host {
        Host::module(13.0, 15.0 + 2.0 * f64::from(prefill), 0.0)
    }

    /// Host work of the attention in one `generate` forward beyond its linears: the module
    /// ([`Attention::module_host`]), Qwen3.5's output gate (the doubled `q_proj` split,
    /// `sigmoid`, the product), `eager_attention_forward` (`repeat_kv` copies of k and v,
    /// `matmul`, scaling, the mask add, softmax, `matmul`, the output transpose copy; with sinks
    /// the sinks' `expand`/`cat`, the row max and its subtraction, the slice) and the q/k norms.
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let mut own = Attention::module_host(c.prefill());
        if self.q_gate {
            own.kernels += 5.0;
            own.views += 7.0;
        }
        if c.attention == Impl::Eager {
            own.kernels += if self.sinks { 13.0 } else { 7.0 };
            own.views += if self.sinks { 18.0 } else { 10.0 };
        }
        let qk_norms = match self.qk_norm {
            QkNorm::PerHead | QkNorm::FullWidth => 2.0 - f64::from(self.kv_shared),
            _ => 0.0,
        };
        own.add(rms_norm_host().times(qk_norms));
        own
    }
}
