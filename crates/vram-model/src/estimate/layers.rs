//! Layer descriptions: what each layer saves for backward, its transient high points, its
//! parameters; and the bytes of each model state by precision.

use crate::arch::Model;
use crate::blocks::{self, Act, Blocks, Dense, NormKind, Window};
use crate::setup::{AmpStyle, Attention, Optimizer, Precision};

/// What one layer stores and needs, on one GPU, for one micro-batch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LayerDesc {
    /// Saved tensors (bytes) without recomputation; `s2` marks the attention-score tensors.
    pub(super) parts: Parts,
    /// `parts` summed: everything, and without the attention scores (selective recompute).
    pub(super) saved_all: u64,
    pub(super) saved_selective: u64,
    /// Bytes of the block input kept under full recomputation.
    pub(super) checkpoint: u64,
    /// Extra bytes live at the layer's forward high point (not kept).
    pub(super) fwd_tmp: u64,
    /// Extra bytes live at the layer's backward high point.
    pub(super) bwd_tmp: u64,
    /// Parameter elements on this GPU.
    pub(super) params: u64,
    /// Of which weights of matmuls/convolutions (copied to half under autocast).
    pub(super) matmul_params: u64,
    /// Live bytes at the high point of an inference forward (nothing kept).
    pub(super) infer_tmp: u64,
    /// Bytes made in the layer's forward and kept until the model's forward returns, not for
    /// backward (transformers' `DynamicCache` copies of K and V in training).
    pub(super) fwd_kept: u64,
    /// Saved tensors made before the forward's temporary (`fwd_tmp`) in traces; 0: all of them.
    pub(super) tmp_after: u8,
    /// The backward's temporaries op by op, where the layer describes them so (CNNs); when
    /// empty, the backward makes one `bwd_tmp` block.
    pub(super) bwd_prog: Program,
    /// The tensors `fwd_tmp` and `bwd_tmp` are made of, for the allocator replay (each op's
    /// output is its own allocation); all zero where the layer does not say.
    pub(super) tmp_parts: TmpParts,
    /// Index of the first saved tensor of the feed-forward sub-block in `parts` (0: not
    /// split). Autograd runs the feed-forward's backward first and frees its saved tensors
    /// node by node, before the mixer's backward.
    pub(super) ffn_from: u8,
    /// Where the backward is walked in two halves: the feed-forward half's temporaries (its
    /// first node's gradient replaces the tensor it consumed), the mixer half's, and the
    /// elements of the feed-forward's last projection, whose gradient comes first.
    pub(super) ffn_bwd_tmp: u64,
    pub(super) mixer_bwd_tmp: u64,
    pub(super) ffn_first_grad: u64,
    /// A `generate` decode step's temporaries over one new token per sequence: fixed bytes,
    /// and bytes per context token the step reads (re-expanded or repeated K/V, score rows).
    pub(super) decode: u64,
    pub(super) decode_per_ctx: u64,
    /// The inference high points of the mixer and of the feed-forward on their own (what
    /// `generate`'s prefill walks for the mechanisms it does not walk op by op).
    pub(super) infer_mixer: u64,
    pub(super) infer_ffn: u64,
}

/// The individual tensors of a layer's forward and backward temporaries.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TmpParts {
    /// `fwd_tmp`'s tensors.
    pub(super) fwd: [u64; 2],
    /// `bwd_tmp`'s tensors.
    pub(super) bwd: [u64; 12],
}

impl TmpParts {
    /// `list`'s non-zero tensors when they make up `total`, else `total` as one tensor.
    pub(super) fn of(list: &[u64], total: u64) -> Vec<u64> {
        if list.iter().sum::<u64>() == total && total > 0 {
            list.iter().copied().filter(|&b| b > 0).collect()
        } else {
            vec![total]
        }
    }
}

/// One step of a layer's temporaries in order of execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum TmpOp {
    /// The end of the program.
    #[default]
    End,
    /// A temporary of this many bytes in the layer's slot (0–7).
    Alloc(u8, u64),
    /// The temporary in the layer's slot goes.
    Free(u8),
    /// The temporary in this slot of the layer walked just before goes: the gradient it handed
    /// on has been consumed.
    FreeHanded(u8),
}

/// Up to 16 temporaries steps.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Program {
    pub(super) ops: [TmpOp; 16],
}

impl Program {
    pub(super) fn new(ops: &[TmpOp]) -> Program {
        let mut p = Program::default();
        let ops: Vec<TmpOp> = ops
            .iter()
            .copied()
            .filter(|op| !matches!(op, TmpOp::Alloc(_, 0)))
            .collect();
        assert!(ops.len() <= p.ops.len(), "a program of at most 16 steps");
        p.ops[..ops.len()].copy_from_slice(&ops);
        p
    }
    /// Bytes live at the program's high point (the gradient handed in from the layer after
    /// not counted).
    pub(super) fn high(&self) -> u64 {
        let mut slots = [0u64; 8];
        let mut high = 0u64;
        for op in self.steps() {
            match op {
                TmpOp::Alloc(n, bytes) => slots[n as usize] = bytes,
                TmpOp::Free(n) => slots[n as usize] = 0,
                TmpOp::FreeHanded(_) | TmpOp::End => {}
            }
            high = high.max(slots.iter().sum());
        }
        high
    }
    pub(super) fn is_empty(&self) -> bool {
        self.ops[0] == TmpOp::End
    }
    pub(super) fn steps(&self) -> impl Iterator<Item = TmpOp> + '_ {
        self.ops.iter().copied().take_while(|op| *op != TmpOp::End)
    }
}

impl LayerDesc {
    pub(super) fn with_totals(mut self) -> Self {
        self.saved_all = self.parts.total(false);
        self.saved_selective = self.parts.total(true);
        self
    }
    pub(super) fn saved(&self, selective: bool) -> u64 {
        if selective {
            self.saved_selective
        } else {
            self.saved_all
        }
    }
}

/// Up to 48 saved tensors of a layer (an MLA + MoE layer with a shared expert saves ~36).
#[derive(Debug, Clone, Copy)]
pub(super) struct Parts {
    pub(super) bytes: [u64; 48],
    pub(super) s2: u64,
    pub(super) n: u8,
}

impl Default for Parts {
    fn default() -> Self {
        Parts {
            bytes: [0; 48],
            s2: 0,
            n: 0,
        }
    }
}

impl Parts {
    pub(super) fn push(&mut self, bytes: u64, s2: bool) {
        if bytes == 0 {
            return;
        }
        if self.n as usize >= self.bytes.len() {
            // Full: the bytes still count, in the last tensor.
            let last = self.bytes.len() - 1;
            self.bytes[last] = self.bytes[last].saturating_add(bytes);
            return;
        }
        if s2 {
            self.s2 |= 1 << self.n;
        }
        self.bytes[self.n as usize] = bytes;
        self.n += 1;
    }
    pub(super) fn total(&self, selective: bool) -> u64 {
        let mut t = 0u64;
        for i in 0..self.n as usize {
            if !(selective && self.s2 & (1 << i) != 0) {
                t = t.saturating_add(self.bytes[i]);
            }
        }
        t
    }
    /// The tensors kept, as a list (for traces).
    pub(super) fn list(&self, selective: bool) -> Vec<u64> {
        (0..self.n as usize)
            .filter(|i| !(selective && self.s2 & (1 << i) != 0))
            .map(|i| self.bytes[i])
            .collect()
    }
}

/// Saturating product, so absurd sizes become "does not fit" rather than overflow.
pub(super) fn m(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |a, b| a.saturating_mul(*b))
}

/// Element sizes and geometry shared by all layers of one step.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx {
    /// Tokens per micro-batch (`b · s`).
    pub(super) tok: u64,
    pub(super) b: u64,
    pub(super) s: u64,
    pub(super) t: u64,
    pub(super) sp: bool,
    /// Bytes of the residual stream.
    pub(super) res: u64,
    /// Bytes of matmul inputs/outputs.
    pub(super) cmp: u64,
    /// The step runs in a mixed precision (autocast's fp32 softmax in training).
    pub(super) amp: bool,
    pub(super) attention: Attention,
    pub(super) style: AmpStyle,
    pub(super) training: bool,
    /// Whether transformers builds its `DynamicCache` in this training forward.
    pub(super) hf_cache: bool,
}

impl Ctx {
    /// Bytes of an eager softmax's stored output: fp32 in fp32 steps, in autocast training
    /// (softmax is an fp32 op), and where the attention's code upcasts (`upcast`) outside
    /// Megatron's fused kernels; else the compute dtype.
    pub(super) fn sdt(&self, upcast: bool) -> u64 {
        if self.cmp == 4
            || (self.style == AmpStyle::Autocast && self.training && self.amp)
            || (upcast && self.style != AmpStyle::Megatron)
        {
            4
        } else {
            self.cmp
        }
    }

    /// Bytes of a `[tokens, hidden]` tensor outside the tensor-parallel region.
    pub(super) fn rep(&self, h: u64, bytes: u64) -> u64 {
        let v = m(&[self.tok, h, bytes]);
        if self.sp {
            v.div_ceil(self.t)
        } else {
            v
        }
    }
}

/// What one of the model's norms over the hidden state saves.
pub(super) fn norm_parts(b: &Blocks, c: &Ctx, p: &mut Parts) {
    let per_token = if c.sp { c.tok.div_ceil(c.t) } else { c.tok };
    if c.style == AmpStyle::Megatron {
        // Fused LayerNorm/RMSNorm kernels keep the input and per-token statistics only.
        p.push(c.rep(b.hidden, c.res), false);
        p.push(m(&[per_token, 8]), false);
        return;
    }
    match b.norm.kind {
        NormKind::LayerNorm => {
            p.push(c.rep(b.hidden, c.res), false);
            p.push(m(&[per_token, 8]), false); // mean and rstd, fp32
        }
        NormKind::RmsNorm => {
            // HF's RMSNorm: the fp32 view of the input, the normalised tensor, and rstd.
            p.push(c.rep(b.hidden, 4), false);
            p.push(c.rep(b.hidden, c.res), false);
            p.push(m(&[per_token, 4]), false);
        }
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
/// cross-attention as [`blocks::Block::cross`] gives it) run by transformers on PyTorch 2.11,
/// at sequence length `seq`, with `half` (bf16/fp16) or fp32 inputs. Megatron-LM's own fused
/// attention is not covered: it always runs its fused kernel.
pub fn attention_kernel(
    a: &blocks::Attention,
    attention: Attention,
    half: bool,
    training: bool,
    seq: u64,
) -> Kernel {
    if attention == Attention::Eager {
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
pub(super) fn kernel_of(a: &blocks::Attention, c: &Ctx) -> Kernel {
    if c.style == AmpStyle::Megatron && c.attention == Attention::Sdpa {
        return Kernel::Fused;
    }
    attention_kernel(a, c.attention, c.cmp != 4, c.training, c.s)
}

/// Whether transformers repeats K/V to every head before SDPA (`repeat_kv`): grouped-query
/// attention with an explicit mask or a head dimension over 256 (`use_gqa_in_sdpa`), or the
/// eager path.
pub fn repeats_kv_at(a: &blocks::Attention, attention: Attention, seq: u64) -> bool {
    if a.own_sdpa && attention == Attention::Sdpa {
        // `FalconAttention.forward` (modeling_falcon.py) hands SDPA its one-head K/V as they
        // are (no `repeat_kv`); the math kernel broadcasts them inside its matmuls.
        return false;
    }
    a.kv_heads < a.heads && (attention == Attention::Eager || has_mask(a, seq) || a.head_dim > 256)
}

/// Whether transformers hands SDPA an explicit mask: a sliding or chunked window the sequence
/// reaches (masking_utils' `sdpa_mask` stops skipping it), or a module that always passes one
/// (Falcon).
pub(super) fn has_mask(a: &blocks::Attention, seq: u64) -> bool {
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
pub(super) fn attention_parts(
    b: &Blocks,
    a: &blocks::Attention,
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
        if c.attention == Attention::Sdpa {
            kv_real
        } else {
            q_w
        }
    } else if repeats_kv_at(a, c.attention, c.s) || (kernel == Kernel::Math && gqa) {
        q_w
    } else {
        kv_real
    };
    norm_parts(b, c, p);
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
    let cache = c.hf_cache && !megatron && b.layout != blocks::Layout::EncoderOnly;
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
        Attention::Eager => m(&[scores, sdt + c.cmp]),
        Attention::Sdpa => m(&[c.tok, q_w, c.cmp]),
    };
    let infer = c
        .rep(hidden, c.res + c.cmp)
        .saturating_add(m(&[c.tok, q_w + 2 * kv_w, c.cmp]))
        .saturating_add(core);
    (fwd_tmp.max(bwd), infer, fwd_kept)
}

/// A dense feed-forward sub-block of `d` in model `b`; `shared_norm`: it reads the normed
/// input the mixer read (Falcon-7B's one norm per block). Returns (backward extra, inference
/// high point).
pub(super) fn mlp_parts(
    b: &Blocks,
    d: &Dense,
    c: &Ctx,
    shared_norm: bool,
    p: &mut Parts,
) -> (u64, u64) {
    let hidden = b.hidden;
    if !shared_norm {
        norm_parts(b, c, p);
    }
    let autocast_casts = c.style == AmpStyle::Autocast && c.res != c.cmp;
    if !shared_norm || autocast_casts {
        // As for attention: separate gate and up projections cast their input separately.
        let copies = if autocast_casts && d.gated && !d.fused_gate_up {
            2
        } else {
            1
        };
        for _ in 0..copies {
            p.push(c.rep(hidden, c.cmp), false);
        }
    }
    let f = m(&[c.tok, d.intermediate.div_ceil(c.t), c.cmp]);
    let drop = b.dropout.hidden > 0.0 && c.training;
    // What the activation saves besides its input/output (fused kernels under Megatron).
    let act_extra = match (d.act, c.style) {
        (_, AmpStyle::Megatron) | (Act::Fused | Act::Relu, _) => 0,
        (Act::ComposedTanh, _) => {
            // `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` as separate ops (NewGELUActivation):
            // pow saves its input, tanh its output, the last product `0.5·x` and `1 + tanh`.
            // Under autocast pow is an fp32 op, so its input is an fp32 copy and tanh, 1 + tanh
            // follow in fp32; `0.5·x` stays half. The projection's input itself is not saved.
            let up = if c.style == AmpStyle::Autocast && c.training && c.res == 4 {
                4
            } else {
                c.cmp
            };
            m(&[f / c.cmp, 3 * up + c.cmp])
        }
        (Act::QuickGelu, _) => f,
    };
    if d.gated {
        // gate output, activation output, up output, their product
        for _ in 0..4 {
            p.push(f, false);
        }
        p.push(act_extra, false);
    } else if d.act == Act::Relu {
        // ReLU's backward reads its output: the output (and dropout's mask and output).
        p.push(f, false);
        if drop && d.inner_dropout {
            p.push(f / c.cmp, false);
            p.push(f, false);
        }
    } else {
        if d.act != Act::ComposedTanh || c.style == AmpStyle::Megatron {
            p.push(f, false); // activation input
        }
        p.push(act_extra, false);
        p.push(f, false); // activation output, the second projection's input
    }
    if drop {
        p.push(c.rep(hidden, 1), false);
    }
    let live = if d.gated { 3 } else { 2 };
    (
        m(&[f, live]),
        c.rep(hidden, c.res + c.cmp).saturating_add(m(&[f, live])),
    )
}

/// The layers of one pipeline rank, borrowed from the [`Step`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Stack<'s> {
    /// Transformer layers: layer `i` is `kinds[pattern[i]]` (encoder then decoder for T5).
    Blocks {
        kinds: &'s [LayerDesc],
        pattern: &'s [u8],
    },
    /// Heterogeneous layers (CNNs).
    List(&'s [LayerDesc]),
}

impl Stack<'_> {
    pub(super) fn len(&self) -> u64 {
        match self {
            Stack::Blocks { pattern, .. } => pattern.len() as u64,
            Stack::List(v) => v.len() as u64,
        }
    }
    /// Layer `i`'s kind index (transformers only).
    pub(super) fn kind(&self, i: u64) -> Option<usize> {
        match self {
            Stack::Blocks { pattern, .. } => Some(pattern[i as usize] as usize),
            Stack::List(_) => None,
        }
    }
    pub(super) fn get(&self, i: u64) -> &LayerDesc {
        match self {
            Stack::Blocks { kinds, pattern } => &kinds[pattern[i as usize] as usize],
            Stack::List(v) => &v[i as usize],
        }
    }
}

/// Bytes per element of each model state, by precision and style.
#[derive(Debug, Clone, Copy)]
pub(super) struct StateBytes {
    pub(super) weight: u64,
    pub(super) grad: u64,
    pub(super) master: u64,
    pub(super) state: u64,
}

pub(super) fn state_bytes(precision: Precision, style: AmpStyle) -> StateBytes {
    match precision {
        Precision::Fp32 => StateBytes {
            weight: 4,
            grad: 4,
            master: 0,
            state: 4,
        },
        Precision::Bf16 => StateBytes {
            weight: 2,
            grad: 2,
            master: 0,
            state: 2,
        },
        Precision::Fp16Amp | Precision::Bf16Amp => match style {
            AmpStyle::Autocast => StateBytes {
                weight: 4,
                grad: 4,
                master: 0,
                state: 4,
            },
            AmpStyle::DeepSpeed => StateBytes {
                weight: 2,
                grad: 2,
                master: 4,
                state: 4,
            },
            AmpStyle::Megatron => StateBytes {
                weight: 2,
                grad: 4,
                master: 4,
                state: 4,
            },
        },
    }
}

/// Optimizer state elements per parameter (excluding master weights).
pub(super) fn optimizer_elems(model: &Model, opt: Optimizer) -> f64 {
    match opt {
        Optimizer::Sgd => 0.0,
        Optimizer::Momentum => 1.0,
        Optimizer::Adamw => 2.0,
        // Two 1-byte states and one fp32 scale per 2048-element block each (bitsandbytes),
        // expressed in 4-byte state elements.
        Optimizer::Adam8bit => (2.0 + 8.0 / 2048.0) / 4.0,
        Optimizer::Adafactor => match model {
            Model::Transformer(t) => {
                let tensors = t.param_tensors();
                let factored: u64 = tensors
                    .iter()
                    .map(|p| {
                        if p.cols > 1 && p.rows > 1 {
                            (p.rows + p.cols) * p.count
                        } else {
                            p.numel()
                        }
                    })
                    .sum();
                factored as f64 / t.param_count().max(1) as f64
            }
            // Convolution kernels are factored over their first two dimensions; close to zero.
            _ => 0.01,
        },
    }
}
