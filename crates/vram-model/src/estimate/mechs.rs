//! Layers read from the layer-by-layer description ([`crate::blocks`]): one [`LayerDesc`] per
//! distinct block kind, built once by [`Step::new`], and the `generate` walk of models whose
//! layers differ (sliding/full/linear/MLA caches side by side).
//!
//! One function per mechanism, each itemising what transformers 5.24 allocates for it (the file
//! and function named at each), in training (what autograd saves, the forward's and backward's
//! high points) and in inference (the prefill's high point, a decode step's temporaries):
//! - [`attention`]: softmax attention through the uniform families' attention sub-block with
//!   the layer's own heads, head size and window, plus QK-norm and the Qwen3.5 output gate;
//!   [`sinks`] for gpt-oss's eager attention with sinks;
//! - [`mla`]: multi-head latent attention (DeepSeek-V3, Kimi-K2, GLM-5);
//! - [`gdn`] and [`mamba2`]: the recurrent mixers through their torch fallbacks (fla and
//!   mamba_ssm absent, as in a plain `pip install transformers`);
//! - [`moe`]: experts through `grouped_mm_experts_forward` (integrations/moe.py) or Llama 4's
//!   every-token-through-every-expert `Llama4TextMoe`, with the router's tensors.

use super::*;
use crate::arch::Mlp;
use crate::blocks::{Block, Component, Dense, Dispatch, Ffn, Mixer, Moe, TensorKind};
use crate::setup::{Infer, KvCache};
use inference::generate_key;
use layers::{attention_parts, mlp_parts};

/// The recurrent mixers' scan chunk in the torch fallbacks (`torch_chunk_gated_delta_rule`'s
/// `chunk_size=64`).
const GDN_CHUNK: u64 = 64;

/// What one mixer or feed-forward adds to a layer besides its saved tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Extra {
    /// Extra bytes at the sub-block's backward high point.
    pub(super) bwd: u64,
    /// Extra bytes at its forward high point (not kept).
    pub(super) fwd: u64,
    /// Live bytes at its inference high point over the step's tokens.
    pub(super) infer: u64,
    /// Bytes kept only until the model's forward returns (the training forward's cache).
    pub(super) kept: u64,
    /// A decode step's temporaries over one new token per sequence: fixed bytes, and bytes per
    /// context token the step reads (re-expanded or repeated K/V, score rows).
    pub(super) decode: u64,
    pub(super) decode_per_ctx: u64,
}

/// The uniform families' transformer with one block's shapes: the attention sub-block and the
/// dense MLP of [`super::layers`] then price this layer's own heads, window and sizes.
fn shaped(t: &Transformer, blk: &Block) -> Transformer {
    let (mut heads, mut kv_heads, mut head_dim) = (t.heads, t.kv_heads, t.head_dim);
    let (mut sliding, mut qkv_bias, mut out_bias, mut fused_qkv) =
        (None, t.qkv_bias, t.out_bias, t.fused_qkv);
    if let Mixer::Attention(a) = blk.mixer {
        heads = a.heads;
        kv_heads = a.kv_heads;
        head_dim = a.head_dim;
        sliding = match a.window {
            crate::blocks::Window::Full => None,
            crate::blocks::Window::Sliding(w) | crate::blocks::Window::Chunked(w) => Some(w),
        };
        qkv_bias = a.qkv_bias;
        out_bias = a.out_bias;
        fused_qkv = a.fused_qkv;
    }
    let (mut intermediate, mut mlp, mut mlp_bias, mut fused_gate_up) =
        (t.intermediate, t.mlp, t.mlp_bias, t.fused_gate_up);
    if let Ffn::Dense(d) | Ffn::DenseAndMoe(d, _) = blk.ffn {
        intermediate = d.intermediate;
        mlp = if d.gated { Mlp::Gated } else { Mlp::Plain };
        mlp_bias = d.bias;
        fused_gate_up = d.fused_gate_up;
    }
    Transformer {
        name: String::new(),
        model_type: t.model_type.clone(),
        heads,
        kv_heads,
        head_dim,
        sliding_window: sliding,
        qkv_bias,
        out_bias,
        fused_qkv,
        intermediate,
        mlp,
        mlp_bias,
        fused_gate_up,
        experts: 1,
        experts_per_token: 1,
        blocks: crate::blocks::Blocks::empty(),
        ..*t
    }
}

/// A dense MLP of `d` over the step's tokens, through the uniform families' MLP sub-block.
fn dense(t: &Transformer, d: &Dense, c: &Ctx, norm: bool, p: &mut Parts) -> (u64, u64) {
    let tv = Transformer {
        name: String::new(),
        model_type: t.model_type.clone(),
        intermediate: d.intermediate,
        mlp: if d.gated { Mlp::Gated } else { Mlp::Plain },
        mlp_bias: d.bias,
        fused_gate_up: d.fused_gate_up,
        experts: 1,
        experts_per_token: 1,
        blocks: crate::blocks::Blocks::empty(),
        ..*t
    };
    mlp_parts(&tv, c, !norm, p)
}

/// An RMSNorm over `width` per token as transformers' `*RMSNorm` runs it: the fp32 copy, the
/// normalised output and the per-token rstd are saved.
fn rms(c: &Ctx, width: u64, p: &mut Parts) {
    p.push(m(&[c.tok, width, 4]), false);
    p.push(m(&[c.tok, width, c.cmp]), false);
    p.push(m(&[c.tok, 4]), false);
}

/// Softmax attention of a block (heads, window, sinks, QK-norm, output gate).
pub(super) fn attention(t: &Transformer, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
    let Mixer::Attention(a) = blk.mixer else {
        return Extra::default();
    };
    if a.sinks {
        return sinks(t, blk, c, p);
    }
    let tv = shaped(t, blk);
    let (bwd, infer, kept) = attention_parts(&tv, c, false, p);
    let tp = c.t;
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    match a.qk_norm {
        // q_norm / k_norm (Qwen3 `Qwen3RMSNorm` over each head, OLMo 2 over the projection):
        // an RMSNorm of q and of k each.
        crate::blocks::QkNorm::PerHead | crate::blocks::QkNorm::FullWidth => {
            rms(c, q_w, p);
            rms(c, kv_w, p);
        }
        crate::blocks::QkNorm::L2 | crate::blocks::QkNorm::None => {}
    }
    if a.q_gate {
        // Qwen3.5 (`Qwen3_5Attention.forward`): `attn_output * torch.sigmoid(gate)`: the gate
        // half of q_proj's output and the sigmoid's output are saved, and the product is
        // o_proj's input.
        p.push(m(&[c.tok, q_w, c.cmp]), false);
        p.push(m(&[c.tok, q_w, c.cmp]), false);
        p.push(m(&[c.tok, q_w, c.cmp]), false);
    }
    // A sliding or chunked layer the prompt reaches gets an explicit mask (masking_utils'
    // `sdpa_mask` stops skipping it): the model keeps the bool `[b, 1, s, s]`, and each SDPA call
    // makes `logical_not` and the additive mask in the query's dtype; with grouped-query heads
    // transformers then repeats K/V to every head (`use_gqa_in_sdpa` is off with a mask).
    let mut infer = infer;
    if let crate::blocks::Window::Sliding(w) | crate::blocks::Window::Chunked(w) = a.window {
        if c.s >= w {
            infer = infer.saturating_add(m(&[c.b, c.s, c.s, 2 + c.cmp]));
        }
    }
    // Decode: one token per sequence; SDPA reads the cache in place (grouped-query path,
    // no mask for one query without padding: `sdpa_mask` skips it).
    Extra {
        bwd,
        fwd: 0,
        infer,
        kept,
        decode: infer / c.s.max(1),
        decode_per_ctx: 0,
    }
}

/// gpt-oss's attention (`GptOssAttention` with `eager_attention_forward`, modeling_gpt_oss.py;
/// the class sets `_supports_sdpa = False`, so eager runs): K/V repeated to every head
/// (`repeat_kv` copies), scores `[b, h, q, k]`, the mask added, the sinks concatenated into
/// `[b, h, q, k + 1]`, the max subtracted, a softmax in the model's dtype whose output is saved,
/// the sink column dropped (a view) and made contiguous for the value matmul.
pub(super) fn sinks(t: &Transformer, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
    let Mixer::Attention(a) = blk.mixer else {
        return Extra::default();
    };
    let tp = c.t;
    let heads = a.heads.div_ceil(tp);
    let q_w = heads * a.head_dim;
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    let tv = shaped(t, blk);
    norm_parts(&tv, c, p);
    p.push(c.rep(t.hidden, c.cmp), false); // projections' input
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
        .rep(t.hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, q_w + 2 * kv_w, cmp]))
        .saturating_add(m(&[c.tok, 2 * q_w, cmp]))
        .saturating_add(m(&[with_sink, cmp, 3]));
    // A decode step repeats the whole cache to every head and makes score rows over it.
    Extra {
        bwd,
        fwd,
        infer,
        kept,
        decode: m(&[c.b, t.hidden + 2 * q_w + 2 * kv_w, cmp]),
        decode_per_ctx: m(&[c.b, heads, 2 * a.head_dim + 4, cmp]),
    }
}

/// Multi-head latent attention (`DeepseekV3Attention.forward`, modeling_deepseek_v3.py): the
/// q LoRA (`q_a_proj` → `q_a_layernorm` → `q_b_proj`), the compressed KV (`kv_a_proj_with_mqa`
/// → `kv_a_layernorm`), the cache update on the latent, then `expand_kv`: `kv_b_proj` over every
/// cached token (`[b, h, ctx, nope + v]`, values a view of it) and keys built in a `new_empty`
/// `[b, h, ctx, nope + rope]`; SDPA (head sizes differ for q/k and v: the memory-efficient
/// kernel, which saves q, k, v, output and log-sum-exp like the fused ones).
pub(super) fn mla(t: &Transformer, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
    let Mixer::Mla(a) = blk.mixer else {
        return Extra::default();
    };
    let tv = shaped(t, blk);
    let heads = a.heads.div_ceil(c.t);
    let qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    let kv_out = heads * (a.qk_nope_head_dim + a.v_head_dim);
    let latent = a.kv_lora_rank + a.qk_rope_head_dim;
    let cmp = c.cmp;
    norm_parts(&tv, c, p);
    p.push(c.rep(t.hidden, cmp), false); // q_a_proj / kv_a_proj_with_mqa input
    let mut q_lora = 0;
    if let Some(r) = a.q_lora_rank {
        rms(c, r, p); // q_a_layernorm; its output is q_b_proj's input
        q_lora = r;
    }
    rms(c, a.kv_lora_rank, p); // kv_a_layernorm; its output is kv_b_proj's input
    p.push(m(&[c.tok, heads * qk, cmp]), false); // query_states = cat(q_pass, q_rot)
    p.push(m(&[c.tok, heads * qk, cmp]), false); // key_states (new_empty, filled)
    p.push(m(&[c.tok, kv_out, cmp]), false); // kv_b_proj output (values are a view)
    p.push(m(&[c.tok, heads * a.v_head_dim, cmp]), false); // attention output
    p.push(m(&[c.b, heads, c.s, 4]), false); // log-sum-exp
    let kept = if c.hf_cache {
        // DynamicCache.update concatenates the latent and the rotary key.
        m(&[c.tok, latent, cmp])
    } else {
        0
    };
    let q_all = m(&[c.tok, heads * qk + q_lora + latent, cmp]);
    let expanded = m(&[c.tok, kv_out + heads * qk, cmp]);
    let infer = c
        .rep(t.hidden, c.res + cmp)
        .saturating_add(q_all)
        .saturating_add(expanded)
        .saturating_add(m(&[c.tok, heads * a.v_head_dim, cmp]));
    Extra {
        bwd: q_all.saturating_add(expanded),
        fwd: 0,
        infer,
        kept,
        decode: m(&[
            c.b,
            t.hidden * 2 + heads * qk * 2 + q_lora + latent + heads * a.v_head_dim,
            cmp,
        ]),
        // Every decode step re-expands the whole cached latent: kv_b_proj's output and keys.
        decode_per_ctx: m(&[c.b, kv_out + heads * qk, cmp]),
    }
}

/// Gated DeltaNet (`Qwen3_5GatedDeltaNet.forward`, modeling_qwen3_5.py) through the torch
/// fallbacks the module takes without `flash-linear-attention` and `causal-conv1d`:
/// `F.conv1d` + SiLU over the mixed q/k/v, and `torch_chunk_gated_delta_rule`: q, k (repeated
/// to the value heads), v, beta and the decay cast to fp32 `[b, hv, T, d]`, L2-normalised,
/// `k·beta` and `v·beta`, the intra-chunk `[b, hv, T/64, 64, 64]` attention and decay mask, and
/// a loop over the chunks that saves the fp32 recurrent state `[b, hv, dk, dv]` per chunk; then
/// the gated RMSNorm in fp32 and `out_proj`.
pub(super) fn gdn(t: &Transformer, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
    let Mixer::GatedDeltaNet(g) = blk.mixer else {
        return Extra::default();
    };
    let tv = shaped(t, blk);
    let hv = g.num_v_heads.div_ceil(c.t);
    let hk = g.num_k_heads.div_ceil(c.t);
    let (dk, dv) = (g.k_head_dim, g.v_head_dim);
    let conv = 2 * hk * dk + hv * dv;
    let cmp = c.cmp;
    let padded = c.s.div_ceil(GDN_CHUNK) * GDN_CHUNK;
    let tok32 = m(&[c.b, padded]);
    let chunks = padded / GDN_CHUNK;
    norm_parts(&tv, c, p);
    p.push(c.rep(t.hidden, cmp), false); // in_proj_* input
    p.push(m(&[c.tok, conv, cmp]), false); // conv1d input (mixed_qkv)
    p.push(m(&[c.tok, conv, cmp]), false); // conv1d output, SiLU's input
    p.push(m(&[c.tok, conv, cmp]), false); // SiLU output (q, k, v views)
    p.push(m(&[c.tok, hv * dv, cmp]), false); // z
    p.push(m(&[c.tok, hv, 4 * 4]), false); // beta = sigmoid(b), g's fp32 chain
                                           // torch_chunk_gated_delta_rule, fp32 [b, hv, T, ·]: q and k cast (l2norm's inputs), the
                                           // scaled q, the l2norm'd k, k·beta, k_cumdecay, the decayed q and k of the scan (8 × dk);
                                           // v, new_values, the chunks' v_new (3 × dv).
    p.push(m(&[tok32, hv, 8 * dk + 3 * dv, 4]), false);
    // [b, hv, T/64, 64, 64]: k_beta·kᵀ and q·kᵀ, the pairwise decay, the UT system and the
    // intra-chunk attention.
    p.push(m(&[tok32, hv, GDN_CHUNK, 4, 5]), false);
    // The recurrent state each chunk's matmuls and decay save.
    p.push(m(&[c.b, chunks, hv, dk * dv, 4]), false);
    // Gated RMSNorm in fp32 (`Qwen3_5RMSNormGated`): input, z, silu(z), the normalised tensor.
    p.push(m(&[c.tok, hv * dv, 4, 4]), false);
    p.push(m(&[c.tok, hv * dv, cmp]), false); // out_proj input
    let state = m(&[c.b, hv, dk * dv, 4]);
    let fwd = m(&[tok32, hv, GDN_CHUNK, 4, 2]).saturating_add(state);
    let infer = c
        .rep(t.hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, conv * 3 + hv * dv, cmp]))
        .saturating_add(m(&[tok32, hv, 2 * dk + 3 * dv, 4]))
        .saturating_add(m(&[tok32, hv, GDN_CHUNK, 4, 3]))
        .saturating_add(state);
    Extra {
        bwd: fwd.saturating_add(m(&[tok32, hv, 2 * dk + 2 * dv, 4])),
        fwd,
        infer,
        kept: 0,
        // `torch_recurrent_gated_delta_rule` for one token: fp32 q, k, v and the state's update.
        decode: m(&[c.b, t.hidden * 2 + conv * 3, cmp]).saturating_add(m(&[state, 3])),
        decode_per_ctx: 0,
    }
}

/// Mamba2 (`NemotronHMamba2Mixer.torch_forward`, modeling_nemotron_h.py, taken without
/// `mamba_ssm`/`causal_conv1d`): `in_proj`, conv + SiLU over `xBC`, `dt` softplus in fp32, and
/// the chunked SSD: `exp(segsum(A))` `[b, H, nc, C, C]`, the C·Bᵀ products per chunk, the
/// per-chunk states `[b, nc, H, P, N]` in fp32, then the gated RMSNorm and `out_proj`.
pub(super) fn mamba2(t: &Transformer, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
    let Mixer::Mamba2(mb) = blk.mixer else {
        return Extra::default();
    };
    let tv = shaped(t, blk);
    let heads = mb.heads.div_ceil(c.t);
    let d_in = heads * mb.head_dim;
    let gn = mb.groups * mb.state_size;
    let conv = d_in + 2 * gn;
    let chunk = mb.chunk.max(1);
    let padded = c.s.div_ceil(chunk) * chunk;
    let tok32 = m(&[c.b, padded]);
    let chunks = padded / chunk;
    let cmp = c.cmp;
    let proj = d_in + conv + heads;
    let hn = heads * mb.state_size;
    norm_parts(&tv, c, p);
    // in_proj's input.
    p.push(c.rep(t.hidden, cmp), false);
    // The conv's input is a view of in_proj's whole output (gate, xBC, dt). The conv's output,
    // over the sequence plus its `kernel - 1` padding (`causal_conv1d_fn` slices it to the
    // sequence after the call), is what SiLU saves; SiLU's output (x, B and C) is only read by
    // `.float()` casts and `repeat_interleave`, which save nothing. Softplus and clamp save dt.
    p.push(m(&[c.tok, proj, cmp]), false);
    p.push(
        m(&[c.b, c.s + mb.conv_kernel.saturating_sub(1), conv, cmp]),
        false,
    );
    p.push(m(&[c.tok, heads, cmp, 2]), false);
    // mamba2_chunk_scan in fp32, per (padded) token:
    // - 5 × d_in: `x.float()` (saved by `x * dt`), the padded copy `D_residual` multiplies,
    //   the `x·dt` operand copies of the Y_diag and states einsums (`torch.einsum` reshapes
    //   each permuted operand into a contiguous `[batch, m, k]` copy for `bmm`, and `bmm` saves
    //   the copies), and `C_times_states` (saved by the decay product);
    // - 5 × H·N: B repeated to the heads (saved by `B * decay_states`), the C and B copies of
    //   the G einsum, the B·decay copy of the states einsum, the C copy of `C_times_states`;
    // - 3 × H·chunk: `L = exp(segsum)`, `G` (saved by `G * L`), M's einsum copy;
    // - 4 × H: dt twice, `decay_states`, `state_decay_out`.
    p.push(
        m(&[tok32, 5 * d_in + 5 * hn + 3 * heads * chunk + 4 * heads, 4]),
        false,
    );
    // The chunk states as einsum copies, fp32: with the initial state for the inter-chunk
    // recurrence (`chunks + 1`), and the chunk-start states for `C_times_states` (`chunks`).
    p.push(
        m(&[c.b, 2 * chunks + 1, heads, mb.head_dim * mb.state_size, 4]),
        false,
    );
    // NemotronHRMSNormGated on the scan's fp32 output (`mamba2_chunk_scan` returns fp32, so
    // `.to(input_dtype)` is a no-op): the input, the gate's fp32 copy, its SiLU, the gated
    // product (saved by `pow` and the rstd product) and the normalised tensor (saved by the
    // weight product), five fp32 tensors, and rstd per group; out_proj's input cast back.
    p.push(m(&[c.tok, d_in, 4, 5]), false);
    p.push(m(&[c.tok, mb.groups, 4]), false);
    p.push(m(&[c.tok, d_in, cmp]), false);
    let state = m(&[c.b, heads, mb.head_dim * mb.state_size, 4]);
    let fwd = m(&[tok32, heads, chunk, 4, 2]);
    let infer = c
        .rep(t.hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, conv * 3 + d_in, cmp]))
        .saturating_add(m(&[tok32, heads, chunk, 4, 3]))
        .saturating_add(m(&[c.b, chunks + 1, heads, mb.head_dim * mb.state_size, 4]));
    Extra {
        bwd: fwd.saturating_add(m(&[tok32, d_in, 4, 2])),
        fwd,
        infer,
        kept: 0,
        decode: m(&[c.b, t.hidden * 2 + conv * 3, cmp]).saturating_add(m(&[state, 3])),
        decode_per_ctx: 0,
    }
}

/// A mixture of experts over the step's tokens `T`, `S = T · top_k` routed rows.
///
/// Router: the linear's logits `[T, E]`, softmax or sigmoid in fp32 (saved output), top-k; a
/// router that runs in fp32 (`DeepseekV3TopkRouter.forward`: `F.linear(hidden_states.type(
/// torch.float32), ...)`, those with `e_score_correction_bias`) saves an fp32 copy of its input.
///
/// `grouped_mm_experts_forward` (integrations/moe.py): `torch.sort` of the expert ids, the
/// gathered rows `hidden_states[perm // top_k]` `[S, H]` (the index saved), the up grouped_mm's
/// `[S, 2I]` output, the gate's activation and product `[S, I]`, the down grouped_mm's `[S, H]`
/// output, the routing weights `[S]` (fp32 when the router keeps them: the product is then fp32
/// `[S, H]`), `weighted_out[inv_perm]` and the sum over top-k.
///
/// Llama 4 (`Llama4TextMoe.forward`, modeling_llama4.py): every token through every expert:
/// `hidden_states.repeat(E, 1)` scaled by the sigmoid scores, two `bmm`s over `[E·T, ·]`.
pub(super) fn moe(t: &Transformer, mo: &Moe, c: &Ctx, norm: bool, p: &mut Parts) -> Extra {
    let tv = shaped(
        t,
        &crate::blocks::Block {
            mixer: Mixer::None,
            cross_attention: false,
            ffn: Ffn::None,
            norms: crate::blocks::Norms {
                count: 0,
                params_each: 0,
            },
            extra: (Component::Other, 0),
        },
    );
    let cmp = c.cmp;
    let h = mo.latent.unwrap_or(t.hidden);
    let e = mo.experts;
    let i = mo.expert_intermediate.div_ceil(c.t);
    let up = if mo.gated { 2 * i } else { i };
    if norm {
        norm_parts(&tv, c, p);
        p.push(c.rep(t.hidden, cmp), false); // router and experts' input
    }
    // Router.
    let fp32_router = mo.correction_bias;
    if fp32_router {
        p.push(m(&[c.tok, t.hidden, 4]), false); // hidden_states.type(float32)
    }
    p.push(m(&[c.tok, e, 4]), false); // softmax / sigmoid output (fp32)
    if mo.dispatch == Dispatch::AllExperts {
        // Llama4Router: top-k's indices (scatter_ reuses them), and the scores made a column
        // (`transpose(0, 1).reshape(-1, 1)`, a copy) for the product with the repeated rows.
        p.push(m(&[c.tok, mo.top_k, 8]), false);
        p.push(m(&[c.tok, e, cmp]), false);
    } else {
        p.push(m(&[c.tok, mo.top_k, 8 + 4]), false); // top-k indices and weights
        p.push(m(&[c.tok, 4]), false); // the top-k normalisation's divisor
    }
    let (rows, wb) = match mo.dispatch {
        Dispatch::AllExperts => (m(&[c.tok, e]), cmp),
        _ => (
            m(&[c.tok, mo.top_k]),
            if mo.router_weights_fp32 { 4 } else { cmp },
        ),
    };
    // `_grouped_mm` (transformers integrations/moe.py) casts its input to the expert bank's
    // dtype, and `torch._grouped_mm` has no autocast rule: in an autocast training step the
    // banks are the fp32 master weights and the residual stream is fp32, so the gathered rows
    // and every expert tensor after them are fp32 (PyTorch runs its per-expert fallback).
    let xb = if mo.dispatch == Dispatch::GroupedMm
        && c.training
        && c.style == AmpStyle::Autocast
        && c.res == 4
    {
        4
    } else {
        cmp
    };
    // `proj_out * sample_weights_g`: the wider of the two.
    let wo = xb.max(wb);
    let mut saved = 0u64;
    let mut push = |p: &mut Parts, b: u64| {
        saved = saved.saturating_add(b);
        p.push(b, false)
    };
    if let Some(l) = mo.latent {
        push(p, m(&[c.tok, l, cmp])); // fc1_latent_proj output
    }
    match mo.dispatch {
        Dispatch::AllExperts => {
            push(p, m(&[rows, h, cmp])); // hidden_states.repeat(E, 1)
            push(p, m(&[rows, h, cmp])); // scaled by the scores: the first bmm's input
        }
        _ => {
            push(p, m(&[rows, 8])); // perm // top_k, the gather's index
            push(p, m(&[rows, 8])); // perm, the index of `sample_weights[perm]`
            push(p, m(&[e, 4])); // offsets (int32), saved by both grouped_mm calls
            push(p, m(&[rows, h, xb])); // gathered rows, the up grouped_mm's input
        }
    }
    let eb = if mo.dispatch == Dispatch::AllExperts {
        cmp
    } else {
        xb
    };
    push(p, m(&[rows, up, eb])); // up (gate_up) output; the gate's input is a view of it
    if mo.gated {
        push(p, m(&[rows, i, eb])); // act(gate)
        if mo.expert_bias {
            // gpt-oss's clamped SwiGLU (`GptOssExperts._apply_gate`): clamped gate and up,
            // sigmoid, glu and up + 1 saved.
            push(p, m(&[rows, i, eb, 4]));
        }
    }
    push(p, m(&[rows, i, eb])); // the down projection's input
    if mo.dispatch != Dispatch::AllExperts {
        push(p, m(&[rows, h, xb])); // down output, multiplied by the routing weights
        push(p, m(&[rows, wb])); // sample_weights_g
        push(p, m(&[rows, 8])); // inv_perm
    }
    let fwd = match mo.dispatch {
        // next_states [E·T, H] and its sum over experts.
        Dispatch::AllExperts => m(&[rows, h, cmp]).saturating_add(m(&[c.tok, h, cmp])),
        // weighted_out and its permuted copy, the sum over top-k, the cast.
        _ => m(&[rows, h, wo, 2])
            .saturating_add(m(&[c.tok, h, wo]))
            .saturating_add(m(&[c.tok, h, cmp])),
    };
    let mut bwd = m(&[rows, h, 2 * wo + xb]).max(m(&[rows, up + 2 * i, eb]));
    let mut infer = c
        .rep(t.hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, e, 4 + cmp]))
        .saturating_add(m(&[rows, h, cmp]))
        .saturating_add(m(&[rows, up + 2 * i, cmp]).max(m(&[rows, h, cmp + 2 * wb])));
    if let Some(s) = mo.shared {
        // The shared expert reads the same normed input (no second norm).
        let (b2, i2) = dense(t, &s, c, false, p);
        bwd = bwd.max(b2);
        infer = infer.saturating_add(i2.saturating_sub(c.rep(t.hidden, c.res + cmp)));
        if mo.shared_gate {
            p.push(m(&[c.tok, cmp, 2]), false); // sigmoid(shared_expert_gate(x))
        }
    }
    let per_token = infer / c.tok.max(1);
    Extra {
        bwd,
        fwd,
        infer,
        kept: 0,
        decode: per_token.saturating_mul(c.b),
        decode_per_ctx: 0,
    }
}

/// What an estimate over the layer-by-layer description assumed, one line per mechanism
/// present (none for the uniform families).
pub(super) fn notes(t: &Transformer) -> Vec<&'static str> {
    let b = &t.blocks;
    if b.uniform || b.is_empty() {
        return Vec::new();
    }
    let mut v = Vec::new();
    let mut add = |s: &'static str| {
        if !v.contains(&s) {
            v.push(s);
        }
    };
    for k in &b.kinds {
        match k.mixer {
            Mixer::Attention(a) if a.sinks => add(
                "attention with sinks: gpt-oss's eager_attention_forward ([b, h, q, k + 1] scores, K/V repeated to every head)",
            ),
            Mixer::Mla(_) => add(
                "MLA: latent cache; K/V re-expanded by kv_b_proj over the whole context at every step (DeepseekV3Attention.expand_kv)",
            ),
            Mixer::GatedDeltaNet(_) => add(
                "Gated DeltaNet: torch fallback (flash-linear-attention and causal-conv1d absent): torch_chunk_gated_delta_rule's fp32 chunk tensors",
            ),
            Mixer::Mamba2(_) => add(
                "Mamba2: torch fallback (mamba_ssm and causal_conv1d absent): torch_forward's fp32 chunked scan",
            ),
            _ => {}
        }
        if let Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) = k.ffn {
            add(match m.dispatch {
                Dispatch::GroupedMm => "MoE: grouped_mm_experts_forward (transformers integrations/moe.py): sorted [tokens x top_k, hidden] rows",
                Dispatch::AllExperts => "MoE: Llama4TextMoe, every token through every expert",
                Dispatch::Loop => "MoE: a Python loop over the experts hit",
            });
        }
    }
    match b.vision {
        Some(v) if v.images.is_some() => add("vision tower: each image's patches through it and its tokens in the text sequence (estimate/vision.rs, from transformers 5.24's image processors and vision models)"),
        Some(_) => add("vision tower: its weights are counted; no images in the step (--images N counts their tokens and the tower's activations)"),
        None => {}
    }
    v
}

/// One layer of the layer-by-layer description: its mixer, its feed-forward(s), its norms.
pub(super) fn block_layer(
    t: &Transformer,
    blk: &Block,
    c: &Ctx,
    params: u64,
    matmul: u64,
) -> (LayerDesc, Extra) {
    let mut p = Parts::default();
    let mx = match blk.mixer {
        Mixer::Attention(_) => attention(t, blk, c, &mut p),
        Mixer::Mla(_) => mla(t, blk, c, &mut p),
        Mixer::GatedDeltaNet(_) => gdn(t, blk, c, &mut p),
        Mixer::Mamba2(_) => mamba2(t, blk, c, &mut p),
        Mixer::None => Extra::default(),
    };
    let tv = shaped(t, blk);
    let ffn_from = if blk.cross_attention { 0 } else { p.n };
    let ff = match blk.ffn {
        Ffn::Dense(d) => {
            let (b, i) = dense(t, &d, c, true, &mut p);
            Extra {
                bwd: b,
                infer: i,
                decode: i / c.s.max(1),
                ..Extra::default()
            }
        }
        Ffn::Moe(mo) => moe(t, &mo, c, true, &mut p),
        Ffn::DenseAndMoe(d, mo) => {
            let (b, i) = dense(t, &d, c, true, &mut p);
            let x = moe(t, &mo, c, true, &mut p);
            Extra {
                bwd: b.max(x.bwd),
                fwd: x.fwd,
                infer: i.max(x.infer),
                decode: (i / c.s.max(1)).max(x.decode),
                ..Extra::default()
            }
        }
        Ffn::None => Extra::default(),
    };
    let ran = u64::from(!matches!(blk.mixer, Mixer::None)) + u64::from(blk.ffn != Ffn::None);
    for _ in ran..blk.norms.count {
        norm_parts(&tv, c, &mut p); // post-norms (Gemma 3/4)
    }
    let grads_in_out = 2 * c.rep(t.hidden, c.res);
    let mut bwd_tmp = grads_in_out.saturating_add(mx.bwd.max(ff.bwd));
    let mut half_grad = 0;
    if c.style == AmpStyle::Autocast && c.cmp != 4 && c.res == 4 {
        // Mixed precision: the half gradient of the largest weight (an expert bank is one
        // parameter) before it is added to the fp32 `.grad`.
        let mut largest = 0u64;
        blk.tensors(t.hidden, &mut |x| {
            if x.kind != TensorKind::Vector {
                largest = largest.max(x.numel().div_ceil(c.t));
            }
        });
        half_grad = m(&[largest, c.cmp]);
        bwd_tmp = bwd_tmp.saturating_add(half_grad);
    }
    // The feed-forward's output projection (rows = hidden; an expert bank is one parameter):
    // its gradient comes first in a two-half backward.
    let mut first_grad = 0u64;
    blk.ffn.tensors(t.hidden, &mut |x| {
        if x.kind != TensorKind::Vector && x.rows == t.hidden {
            first_grad = first_grad.max(x.numel().div_ceil(c.t));
        }
    });
    let base_fwd = c.rep(t.hidden, c.res).saturating_add(c.rep(t.hidden, 4));
    let desc = LayerDesc {
        parts: p,
        checkpoint: c.rep(t.hidden, c.res),
        fwd_tmp: base_fwd.max(c.rep(t.hidden, c.res).saturating_add(mx.fwd.max(ff.fwd))),
        bwd_tmp,
        params,
        matmul_params: matmul,
        infer_tmp: mx.infer.max(ff.infer),
        fwd_kept: mx.kept,
        ffn_from,
        ffn_bwd_tmp: grads_in_out
            .saturating_add(ff.bwd)
            .saturating_add(half_grad),
        mixer_bwd_tmp: grads_in_out
            .saturating_add(mx.bwd)
            .saturating_add(half_grad),
        ffn_first_grad: first_grad,
        ..LayerDesc::default()
    }
    .with_totals();
    let decode = Extra {
        decode: mx.decode.max(ff.decode),
        decode_per_ctx: mx.decode_per_ctx,
        ..Extra::default()
    };
    (desc, decode)
}

/// A decode step's and the cache's figures of one layer kind.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KindGen {
    /// Cached bytes per token per sequence (after TP; the cache's dtype).
    pub(super) per_token: u64,
    /// The sliding/chunked window, 0 if none.
    pub(super) window: u64,
    /// Fixed state bytes per sequence.
    pub(super) state: u64,
    /// A decode step's temporaries: fixed, and per context token read.
    pub(super) decode: u64,
    pub(super) decode_per_ctx: u64,
}

impl Step<'_> {
    /// One [`LayerDesc`] per kind of the layer-by-layer description, and the per-layer index.
    pub(super) fn init_blocks(&mut self, t: &Transformer) {
        let b = &t.blocks;
        let tp = self.setup.parallel.tp;
        let c = self.ctx;
        let kv_bytes = match self.setup.mode {
            Mode::Infer(i) => i.kv_bytes,
            Mode::Train(_) => c.cmp,
        };
        self.kinds.clear();
        self.kind_tensors.clear();
        self.gen.clear();
        for kind in &b.kinds {
            let mut elems = Vec::new();
            let (mut params, mut matmul) = (0u64, 0u64);
            kind.tensors(b.hidden, &mut |x| {
                let n = x.numel();
                let split = x.kind != TensorKind::Vector && x.component != Component::Router;
                let local = if split { n.div_ceil(tp) } else { n };
                elems.push(local);
                params += local;
                if split {
                    matmul += local;
                }
            });
            let (desc, gen) = block_layer(t, kind, &c, params, matmul);
            let spec = kind.mixer.cache();
            let split = match kind.mixer {
                Mixer::Mla(_) => 1,
                _ => tp,
            };
            self.gen.push(KindGen {
                per_token: m(&[spec.per_token.div_ceil(split), kv_bytes]),
                window: spec.window.unwrap_or(0),
                state: m(&[spec.state.div_ceil(split), kv_bytes])
                    .saturating_add(m(&[spec.state_f32.div_ceil(split), 4])),
                decode: gen.decode,
                decode_per_ctx: gen.decode_per_ctx,
            });
            self.kinds.push(desc);
            self.kind_tensors.push(elems);
        }
        self.pattern = b.pattern.clone();
    }

    /// `generate` over the layer-by-layer description: the prefill layer by layer (each
    /// layer's cache as `DynamicCache` keeps it: a full layer the prompt, a sliding layer the
    /// whole prompt until the first decode step then `w` tokens, a linear layer its fixed
    /// state, an MLA layer its latent), then the decode steps, each re-making every growing
    /// layer's cache one token longer (`torch.cat`) with the step's temporaries (MLA re-expands
    /// K/V over the whole context; gpt-oss's eager attention repeats it to every head).
    pub(super) fn walk_generate_blocks<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        inf: Infer,
        sink: &mut S,
        full: bool,
    ) {
        let c = self.ctx;
        let last_rank = rank == self.setup.parallel.pp - 1;
        let Model::Transformer(t) = self.model else {
            return;
        };
        let layers = stack.len();
        let key = generate_key;
        let prompt = inf.prompt();
        let dynamic = inf.kv_cache == KvCache::Dynamic;
        let cache_len = inf.context.saturating_sub(1).max(prompt);
        let held = |g: &KindGen, steps: u64| -> u64 {
            let toks = if !dynamic {
                if g.window > 0 {
                    g.window.min(cache_len)
                } else {
                    cache_len
                }
            } else if g.window > 0 {
                if steps == 0 {
                    prompt
                } else {
                    (prompt + steps - 1).min(g.window.saturating_sub(1)) + 1
                }
            } else {
                prompt + steps
            };
            m(&[c.b, toks, g.per_token]).saturating_add(m(&[c.b, g.state]))
        };
        let gen_of = |i: u64| -> &KindGen { &self.gen[stack.kind(i).unwrap_or(0)] };
        let cache = |i: u64, steps: u64, gen: u64| Handle {
            cat: Category::KvCache,
            bytes: held(gen_of(i), steps),
            key: key(i, 1, gen),
        };
        let hd = m(&[c.tok, t.hidden, c.cmp]);
        let x = Handle {
            cat: Category::Activations,
            bytes: hd,
            key: key(0, 0, 0),
        };
        self.vision_prefill(sink); // the vision tower first (vision.rs; nothing without images)
        sink.phase(Phase::Prefill { layer: 0 });
        sink.alloc(x, &[]);
        for i in 0..layers {
            sink.phase(Phase::Prefill { layer: i as u32 });
            let h = cache(i, 0, 0);
            if h.bytes > 0 {
                sink.alloc(h, &[]);
            }
            let tmp = Handle {
                cat: Category::Temporaries,
                bytes: stack.get(i).infer_tmp,
                key: key(i, 2, 0),
            };
            sink.alloc(tmp, &[]);
            sink.free(tmp);
        }
        self.generate_logits(sink, layers, last_rank, 0);
        sink.free(x);
        self.vision_prefill_end(sink);
        let walked = self.walked_decode_steps(t, inf, full);
        let mut done = 0u64;
        for token in walked {
            sink.phase(Phase::Decode {
                token: token as u32,
            });
            for i in 0..layers {
                let g = gen_of(i);
                let old = cache(i, done, done);
                let new = cache(i, token, token);
                if dynamic && g.per_token > 0 && new.bytes != old.bytes {
                    sink.alloc(new, &[]);
                    sink.free(old);
                } else if old.bytes > 0 {
                    // Fixed-size or static: the same tensors, rekeyed.
                    sink.free(old);
                    sink.alloc(new, &[]);
                }
                let ctx = prompt + token;
                let seen = if g.window > 0 { ctx.min(g.window) } else { ctx };
                let act = Handle {
                    cat: Category::Activations,
                    bytes: g.decode.saturating_add(m(&[seen, g.decode_per_ctx])),
                    key: key(i, 6, token),
                };
                sink.alloc(act, &[]);
                sink.free(act);
            }
            self.generate_logits(sink, layers, last_rank, token);
            done = token;
        }
        for i in 0..layers {
            let h = cache(i, done, done);
            if h.bytes > 0 {
                sink.free(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{Attention as Attn, Blocks, Dense, Ends, Gdn, Mla, Norms, QkNorm, Window};
    use crate::setup::{Attention as Impl, Precision, Setup};

    /// A step context: `b` sequences of `s` tokens, pure bf16, SDPA, no TP.
    fn ctx(b: u64, s: u64) -> Ctx {
        Ctx {
            tok: b * s,
            b,
            s,
            t: 1,
            sp: false,
            res: 2,
            cmp: 2,
            sdt: 2,
            attention: Impl::Sdpa,
            style: AmpStyle::Autocast,
            training: true,
            hf_cache: false,
        }
    }

    fn llama() -> Transformer {
        match crate::catalog::lookup("llama-3-8b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    fn attn(heads: u64, kv: u64, d: u64, window: Window, sinks: bool) -> Attn {
        Attn {
            heads,
            kv_heads: kv,
            head_dim: d,
            v_head_dim: d,
            window,
            sinks,
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

    fn moe(experts: u64, top_k: u64, i: u64, dispatch: Dispatch, fp32: bool) -> Moe {
        Moe {
            experts,
            top_k,
            expert_intermediate: i,
            gated: true,
            expert_bias: false,
            router_bias: false,
            correction_bias: false,
            router_extra: 0,
            router_weights_fp32: fp32,
            router_param_fp32: false,
            dispatch,
            shared: None,
            shared_gate: false,
            latent: None,
            latent_bias: false,
        }
    }

    fn block(mixer: Mixer, ffn: Ffn, hidden: u64) -> Block {
        Block {
            mixer,
            cross_attention: false,
            ffn,
            norms: Norms {
                count: 2,
                params_each: hidden,
            },
            extra: (Component::Other, 0),
        }
    }

    /// A decoder-only transformer of `layers` with the uniform fields as stand-ins (Llama's
    /// module kinds: RMSNorm, SwiGLU, rotary) and `layers` as its description.
    fn model(hidden: u64, vocab: u64, heads: u64, head_dim: u64, layers: &[Block]) -> Model {
        let mut b = Blocks::from_layers(
            hidden,
            layers,
            Ends {
                embedding: vocab * hidden,
                vocab,
                final_norm: hidden,
                head: vocab * hidden,
                other: 0,
            },
        );
        b.uniform = false;
        Model::Transformer(Transformer {
            name: "test".into(),
            vocab,
            hidden,
            layers: layers.len() as u64,
            heads,
            kv_heads: heads,
            head_dim,
            intermediate: 64,
            tied_embeddings: false,
            sliding_window: None,
            blocks: b,
            ..llama()
        })
    }

    fn deepseek_v3_layer(moe_layer: bool) -> Block {
        // DeepSeek-V3's config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
        // qk_nope 128, qk_rope 64, v 128; dense 18432; 256 experts of 2048, top-8, 1 shared.
        let mla = Mixer::Mla(Mla {
            heads: 128,
            q_lora_rank: Some(1536),
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            bias: false,
            indexer: None,
        });
        let ffn = if moe_layer {
            Ffn::Moe(Moe {
                correction_bias: true,
                shared: Some(Dense {
                    intermediate: 2048,
                    gated: true,
                    bias: false,
                    fused_gate_up: false,
                }),
                ..moe(256, 8, 2048, Dispatch::GroupedMm, true)
            })
        } else {
            Ffn::Dense(Dense {
                intermediate: 18432,
                gated: true,
                bias: false,
                fused_gate_up: false,
            })
        };
        block(mla, ffn, 7168)
    }

    /// Records the cache bytes live when each phase starts.
    #[derive(Default)]
    struct CacheAt {
        live: u64,
        at: Vec<(Phase, u64)>,
    }
    impl Sink for CacheAt {
        fn alloc(&mut self, h: Handle, _: &[u64]) {
            if h.cat == Category::KvCache {
                self.live += h.bytes;
            }
        }
        fn free(&mut self, h: Handle) {
            if h.cat == Category::KvCache {
                self.live -= h.bytes;
            }
        }
        fn phase(&mut self, p: Phase) {
            self.at.push((p, self.live));
        }
    }

    fn cache_at(model: &Model, prompt: u64, new: u64) -> Vec<(Phase, u64)> {
        let setup = Setup {
            precision: Precision::Bf16,
            mode: Mode::Infer(Infer {
                batch: 1,
                context: prompt + new,
                new_tokens: new,
                kv_bytes: 2,
                kv_cache: KvCache::Dynamic,
            }),
            ..Setup::default()
        };
        let step = Step::new(model, &setup).unwrap();
        let mut sink = CacheAt::default();
        step.walk(0, &mut sink, true, Run::Whole);
        sink.at
    }

    fn decode_entry(at: &[(Phase, u64)], token: u32) -> u64 {
        at.iter()
            .find(|(p, _)| *p == Phase::Decode { token })
            .map(|(_, b)| *b)
            .unwrap()
    }

    /// grouped_mm_experts_forward (integrations/moe.py) over T = 16 tokens, top-2 of 4 experts,
    /// H = 64, I = 32, bf16 with fp32 routing weights: S = 32 rows.
    #[test]
    fn grouped_mm_saves_the_sorted_rows_and_fp32_products() {
        let t = llama();
        let t = Transformer { hidden: 64, ..t };
        let c = ctx(2, 8);
        let mut p = Parts::default();
        let x = super::moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, true),
            &c,
            false,
            &mut p,
        );
        let (tok, s, h, i) = (16u64, 32u64, 64u64, 32u64);
        let expected = tok * 4 * 4 // router softmax output, fp32 [T, E]
            + tok * 2 * (8 + 4) // top-k indices (int64) and weights (fp32)
            + tok * 4 // the normalisation's divisor
            + s * 8 // perm // top_k
            + s * 8 // perm
            + 4 * 4 // offsets
            + s * h * 2 // gathered rows
            + s * 2 * i * 2 // gate_up output
            + s * i * 2 // act(gate)
            + s * i * 2 // act(gate) * up
            + s * h * 2 // down output
            + s * 4 // sample_weights_g, fp32
            + s * 8; // inv_perm
        assert_eq!(p.total(false), expected);
        // weighted_out = proj_out * fp32 weights is fp32, then permuted: two [S, H] fp32, the
        // fp32 sum over top-k and its cast back.
        assert_eq!(x.fwd, 2 * s * h * 4 + tok * h * 4 + tok * h * 2);
        // With bf16 routing weights the products stay bf16.
        let mut p2 = Parts::default();
        let y = super::moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &c,
            false,
            &mut p2,
        );
        assert_eq!(y.fwd, 2 * s * h * 2 + tok * h * 2 + tok * h * 2);
        assert_eq!(p.total(false) - p2.total(false), s * 2);
        // Against the real module: `Qwen3MoeSparseMoeBlock` (transformers 5.24.0, torch 2.15 on
        // the CPU, `_experts_implementation="grouped_mm"`, bf16 routing weights) over these
        // shapes saves 19,984 bytes of activations (distinct storages seen by
        // `saved_tensors_hooks`, parameters excluded), its [16, 64] bf16 input included.
        assert_eq!(p2.total(false) + tok * h * 2, 19_984);
    }

    /// Under autocast the expert banks are fp32 master weights and `torch._grouped_mm` has no
    /// autocast rule, so the gathered rows and every expert tensor are fp32.
    #[test]
    fn grouped_mm_under_autocast_runs_in_the_banks_fp32() {
        let t = Transformer {
            hidden: 64,
            ..llama()
        };
        let c = Ctx {
            res: 4,
            ..ctx(2, 8)
        };
        let mut p = Parts::default();
        super::moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &c,
            false,
            &mut p,
        );
        // Against the real module: `Qwen3MoeSparseMoeBlock` in fp32 under CPU bf16 autocast
        // (transformers 5.24.0, torch 2.15, tests/data/mechs/qwen3_moe_grouped_mm_autocast_saved.py)
        // saves 36,880 bytes besides its parameters; 2,560 of them are the router linear's
        // autocast copies of its input and weight ([16, 64] and [64, 4] bf16), counted with the
        // layer's casts, not here.
        assert_eq!(p.total(false), 36_880 - 16 * 64 * 2 - 64 * 4 * 2);
        // Inference (bf16 banks) keeps the compute dtype.
        let mut q = Parts::default();
        super::moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &Ctx {
                training: false,
                ..c
            },
            false,
            &mut q,
        );
        assert!(q.total(false) < p.total(false));
    }

    /// Llama4TextMoe.forward (modeling_llama4.py): every token through every expert.
    #[test]
    fn llama4_runs_every_token_through_every_expert() {
        let t = Transformer {
            hidden: 64,
            ..llama()
        };
        let c = ctx(2, 8);
        let mut p = Parts::default();
        super::moe(
            &t,
            &moe(4, 1, 32, Dispatch::AllExperts, false),
            &c,
            false,
            &mut p,
        );
        let (tok, rows, h, i) = (16u64, 64u64, 64u64, 32u64);
        let expected = tok * 4 * 4 // sigmoid scores (fp32)
            + tok * 8 // top-1 index
            + rows * 2 // the scores as a column
            + rows * h * 2 // hidden_states.repeat(E, 1)
            + rows * h * 2 // scaled by the scores
            + rows * 2 * i * 2 // bmm gate_up
            + rows * i * 2 // act(gate)
            + rows * i * 2; // up * act(gate), the down bmm's input
        assert_eq!(p.total(false), expected);
        // Against the real module: `Llama4TextMoe` (transformers 5.24.0, torch 2.15 on the CPU,
        // bf16) over these shapes, its shared expert replaced by zeros, saves 35,328 bytes of
        // activations (distinct storages, parameters excluded), its [16, 64] input included.
        assert_eq!(expected + tok * h * 2, 35_328);
    }

    /// DeepseekV3Attention.expand_kv re-expands the whole cached latent at every decode step:
    /// kv_b_proj's `[b, ctx, 128 · (128 + 128)]` output and `[b, 128, ctx, 192]` keys, bf16.
    #[test]
    fn mla_decode_reexpands_kv_over_the_context() {
        let t = Transformer {
            hidden: 7168,
            ..llama()
        };
        let c = ctx(1, 16);
        let mut p = Parts::default();
        let x = mla(&t, &deepseek_v3_layer(false), &c, &mut p);
        assert_eq!(x.decode_per_ctx, 128 * 256 * 2 + 128 * 192 * 2);
    }

    /// The cache after the prefill holds the latent and rotary key only: 576 elements a token
    /// per layer (`DynamicLayer` over `kv_nope` [b, 1, s, 512] and `k_rot` [b, 1, s, 64]).
    #[test]
    fn deepseek_v3_caches_the_latent() {
        let mut layers = vec![deepseek_v3_layer(false); 3];
        layers.extend(vec![deepseek_v3_layer(true); 58]);
        let model = model(7168, 129_280, 128, 192, &layers);
        let at = cache_at(&model, 1000, 4);
        assert_eq!(decode_entry(&at, 1), 61 * 1000 * 576 * 2);
        assert_eq!(decode_entry(&at, 2), 61 * 1001 * 576 * 2);
    }

    /// DynamicSlidingWindowLayer keeps the whole prompt until the first decode step, then
    /// `w − 1` plus the new token; the full layer keeps everything; a Gated DeltaNet layer its
    /// fixed conv state (bf16) and fp32 recurrent state.
    #[test]
    fn sliding_full_and_linear_caches_side_by_side() {
        let h = 512;
        let dense = Ffn::Dense(Dense {
            intermediate: 1024,
            gated: true,
            bias: false,
            fused_gate_up: false,
        });
        let sliding = block(
            Mixer::Attention(attn(8, 2, 64, Window::Sliding(128), false)),
            dense,
            h,
        );
        let full = block(
            Mixer::Attention(attn(8, 2, 64, Window::Full, false)),
            dense,
            h,
        );
        let g = Gdn {
            num_k_heads: 4,
            num_v_heads: 8,
            k_head_dim: 64,
            v_head_dim: 64,
            conv_kernel: 4,
        };
        let linear = block(Mixer::GatedDeltaNet(g), dense, h);
        let model = model(h, 1000, 8, 64, &[sliding, full, linear]);
        let per_token = 2 * 2 * 64 * 2; // K and V, 2 heads of 64, bf16
        let state = (2 * 4 * 64 + 8 * 64) * 4 * 2 + 8 * 64 * 64 * 4;
        for prompt in [1000u64, 2000] {
            let at = cache_at(&model, prompt, 4);
            assert_eq!(
                decode_entry(&at, 1),
                2 * prompt * per_token + state,
                "prompt {prompt}"
            );
            assert_eq!(
                decode_entry(&at, 2),
                128 * per_token + (prompt + 1) * per_token + state
            );
        }
    }

    /// gpt-oss's eager attention with sinks: softmax over `[b, h, q, k + 1]`, saved, and the
    /// sink column dropped and made contiguous `[b, h, q, k]` for the value matmul.
    #[test]
    fn sinks_save_the_scores_with_the_sink_column() {
        let t = Transformer {
            hidden: 256,
            ..llama()
        };
        let c = ctx(1, 10);
        let blk = block(
            Mixer::Attention(attn(4, 2, 64, Window::Full, true)),
            Ffn::None,
            256,
        );
        let mut with = Parts::default();
        let x = sinks(&t, &blk, &c, &mut with);
        let scores = 4 * 10 * 11 * 2 + 4 * 10 * 10 * 2;
        // Selective recomputation drops the score tensors only.
        assert_eq!(with.total(false) - with.total(true), scores);
        // A decode step repeats the cached K/V to all 4 heads and makes score rows.
        assert_eq!(x.decode_per_ctx, 4 * (2 * 64 + 4) * 2);
    }

    /// The blocks path over Llama's own layers gives the uniform path's training peak: one
    /// place per mechanism, the same bytes.
    #[test]
    fn llama_through_the_blocks_matches_the_uniform_walk() {
        let t = llama();
        let mut b = t.uniform_blocks();
        b.uniform = false;
        let blocks_model = Model::Transformer(Transformer {
            blocks: b,
            ..t.clone()
        });
        let uniform = Model::Transformer(t);
        let setup = Setup::default();
        let a = crate::estimate::estimate_allocated(&uniform, &setup).unwrap();
        let z = crate::estimate::estimate_allocated(&blocks_model, &setup).unwrap();
        assert_eq!(a.peak_bytes, z.peak_bytes);
        assert_eq!(a.params_per_gpu, z.params_per_gpu);
    }

    /// A sliding layer the prompt reaches holds the explicit mask (bool, kept by the model) and
    /// SDPA's `logical_not` and additive copy of it; below the window it has none.
    #[test]
    fn a_sliding_layer_masks_once_the_window_is_reached() {
        let t = Transformer {
            hidden: 256,
            ..llama()
        };
        let infer = |window, s| {
            let blk = block(
                Mixer::Attention(attn(4, 4, 64, window, false)),
                Ffn::None,
                256,
            );
            let mut c = ctx(1, s);
            c.training = false;
            super::attention(&t, &blk, &c, &mut Parts::default()).infer
        };
        assert_eq!(
            infer(Window::Sliding(8), 16) - infer(Window::Full, 16),
            16 * 16 * (2 + 2)
        );
        assert_eq!(infer(Window::Sliding(32), 16), infer(Window::Full, 16));
        assert_eq!(
            infer(Window::Chunked(8), 16) - infer(Window::Full, 16),
            16 * 16 * (2 + 2)
        );
    }

    /// Pipeline stages split the description's layers; the rank holding the MoE layers (and
    /// the head) needs more than the one holding the dense layers.
    #[test]
    fn pipeline_stages_split_the_described_layers() {
        let mut layers = vec![deepseek_v3_layer(false); 2];
        layers.extend(vec![deepseek_v3_layer(true); 2]);
        let model = model(7168, 129_280, 128, 192, &layers);
        let mut setup = Setup::default();
        setup.parallel.pp = 2;
        let step = Step::new(&model, &setup).unwrap();
        let (s0, s1) = (step.stack(0), step.stack(1));
        assert_eq!((s0.len(), s1.len()), (2, 2));
        assert!(step.rank_params(1, &s1) > step.rank_params(0, &s0));
        let e = crate::estimate::estimate_allocated(&model, &setup).unwrap();
        assert_eq!(e.pipeline_rank, 1);
    }

    /// Against the real module: the saved-tensor bytes of `Qwen3_5GatedDeltaNet.forward`
    /// (transformers 5.24.0, torch 2.15 on the CPU: the same torch fallbacks a GPU runs without
    /// flash-linear-attention and causal-conv1d), bf16, hidden 256, 2 key and 4 value heads of
    /// 32, conv 4, one sequence; distinct storages seen by `saved_tensors_hooks`, parameters
    /// excluded: 1,925,696 bytes at 128 tokens and 15,365,920 at 1024 (measured in this
    /// session with the engines' venv). The itemisation lands within 5 %.
    #[test]
    fn gated_deltanet_fallback_saves_what_the_real_module_saves() {
        let t = Transformer {
            hidden: 256,
            ..llama()
        };
        let g = Gdn {
            num_k_heads: 2,
            num_v_heads: 4,
            k_head_dim: 32,
            v_head_dim: 32,
            conv_kernel: 4,
        };
        let blk = block(Mixer::GatedDeltaNet(g), Ffn::None, 256);
        for (s, real) in [(128u64, 1_925_696f64), (1024, 15_365_920.0)] {
            let c = ctx(1, s);
            let mut p = Parts::default();
            gdn(&t, &blk, &c, &mut p);
            // The module alone: without the input norm's fp32 copy, output and rstd.
            let ours = (p.total(false) - (s * 256 * 4 + s * 256 * 2 + s * 4)) as f64;
            assert!((ours / real - 1.0).abs() < 0.05, "{s}: {ours} vs {real}");
        }
    }

    /// Against the real module: `NemotronHMamba2Mixer.forward` (transformers 5.24.0, torch 2.15
    /// on the CPU: `torch_forward`, mamba_ssm and causal_conv1d absent), bf16, hidden 256, 8
    /// heads of 32, state 16, 2 groups, conv 4, chunk 64, one sequence, saves 2,901,234 bytes at
    /// 128 tokens and 23,031,330 at 1024 (distinct storages, parameters excluded). Each saved
    /// storage is itemised (`tests/data/mechs/nemotron_h_mamba2_saved.py` lists them with their
    /// shapes), `torch.einsum`'s contiguous operand copies for `bmm` included: within 1 %
    /// (before they were itemised, 13 % short).
    #[test]
    fn mamba2_fallback_against_the_real_module() {
        let t = Transformer {
            hidden: 256,
            ..llama()
        };
        let mb = crate::blocks::Mamba2 {
            heads: 8,
            head_dim: 32,
            state_size: 16,
            groups: 2,
            conv_kernel: 4,
            chunk: 64,
            bias: false,
            conv_bias: true,
            peft_refuses_out_proj: false,
        };
        let blk = block(Mixer::Mamba2(mb), Ffn::None, 256);
        for (s, real) in [(128u64, 2_901_234f64), (1024, 23_031_330.0)] {
            let mut p = Parts::default();
            mamba2(&t, &blk, &ctx(1, s), &mut p);
            let ours = (p.total(false) - (s * 256 * 4 + s * 256 * 2 + s * 4)) as f64;
            eprintln!(
                "mamba2 {s}: ours {ours} real {real} ({:+.2} %)",
                (ours / real - 1.0) * 100.0
            );
            assert!((ours / real - 1.0).abs() < 0.01, "{s}: {ours} vs {real}");
        }
    }

    /// The estimate says how the description's mechanisms were modelled.
    #[test]
    fn the_estimate_names_its_mechanisms() {
        let layers = vec![deepseek_v3_layer(false), deepseek_v3_layer(true)];
        let model = model(7168, 129_280, 128, 192, &layers);
        let e = crate::estimate::estimate_allocated(&model, &Setup::default()).unwrap();
        assert_eq!(e.mechanisms.len(), 2);
        assert!(e.mechanisms[0].starts_with("MLA: latent cache"));
        assert!(e.mechanisms[1].starts_with("MoE: grouped_mm_experts_forward"));
        let uniform = crate::catalog::lookup("llama-3-8b").unwrap();
        let u = crate::estimate::estimate_allocated(&uniform, &Setup::default()).unwrap();
        assert!(u.mechanisms.is_empty());
    }

    /// DeepSeek-V3 trains and generates through the description; the MoE layers' fp32 router
    /// input and routed rows make them save more than the dense layers at the same tokens.
    #[test]
    fn deepseek_v3_layers_differ_by_kind() {
        let t = Transformer {
            hidden: 7168,
            ..llama()
        };
        let c = ctx(1, 512);
        let (dense, _) = block_layer(&t, &deepseek_v3_layer(false), &c, 0, 0);
        let (moe_l, _) = block_layer(&t, &deepseek_v3_layer(true), &c, 0, 0);
        assert!(dense.parts.n < 48 && moe_l.parts.n < 48);
        // 512 tokens · top-8 = 4096 rows of 7168 gathered (bf16): 58.7 MB alone.
        assert!(moe_l.saved_all > 4096 * 7168 * 2 * 3);
        assert!(moe_l.saved_all > dense.saved_all);
    }
}

#[cfg(test)]
mod backward_tests {
    use super::*;
    use crate::setup::{Precision, Setup, Train};

    fn last_layer(precision: Precision) -> LayerDesc {
        let model = crate::catalog::lookup("llama-3-8b").unwrap();
        let setup = Setup {
            precision,
            mode: Mode::Train(Train {
                micro_batch: 1,
                seq: 128,
                ..Train::default()
            }),
            ..Setup::default()
        };
        Step::new(&model, &setup).unwrap().last_kind()
    }

    /// Pure bf16 weights: the matmul's weight gradient is the `.grad` AccumulateGrad keeps; under
    /// autocast the bf16 gradient of the fp32 weight's cast comes first and `ToCopyBackward`
    /// makes the fp32 `.grad` from it (the largest: a 4096 × 14336 projection).
    #[test]
    fn only_mixed_precision_has_a_half_gradient_temporary() {
        let (tok, h, f) = (128u64, 4096u64, 14336u64);
        let pure = last_layer(Precision::Bf16);
        // The two residual-stream gradients and the SwiGLU backward's three [tok, f] tensors.
        assert_eq!(pure.bwd_tmp, 2 * tok * h * 2 + 3 * tok * f * 2);
        // Node by node the down projection's input gradient replaces the product it consumed.
        assert_eq!(pure.ffn_bwd_tmp, 2 * tok * h * 2 + 2 * tok * f * 2);
        assert_eq!(pure.ffn_first_grad, h * f);
        let amp = last_layer(Precision::Bf16Amp);
        assert_eq!(amp.bwd_tmp - h * f * 2, 2 * tok * h * 4 + 3 * tok * f * 2);
    }
}
