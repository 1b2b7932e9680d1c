//! Gated DeltaNet linear attention (Qwen3.5's `Qwen3_5GatedDeltaNet`, Qwen3-Next) through the
//! torch fallbacks: its cache is the convolution state and the fp32 recurrent state.

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::step::{m, Ctx, Extra, Parts, Prog};
use super::{lin, vector, CacheLayout, CacheTensor, Component, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};

/// The recurrent mixers' scan chunk in the torch fallbacks (`torch_chunk_gated_delta_rule`'s
/// `chunk_size=64`).
pub(crate) const GDN_CHUNK: u64 = 64;

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

impl Gdn {
    /// The tensors its cache holds per sequence: the convolution state and the fp32 recurrent
    /// state `[heads, dk, dv]`.
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        let g = self;
        let conv_dim = 2 * g.num_k_heads * g.k_head_dim + g.num_v_heads * g.v_head_dim;
        out(CacheTensor::state(conv_dim * g.conv_kernel, false));
        out(CacheTensor::state(
            g.num_v_heads * g.k_head_dim * g.v_head_dim,
            true,
        ));
    }

    /// Its state as a serving engine pages it: the convolution over q, k and v, and the
    /// recurrent state per value head.
    pub fn cache_layout(&self) -> CacheLayout {
        let g = self;
        CacheLayout::State {
            conv_dim: 2 * g.num_k_heads * g.k_head_dim + g.num_v_heads * g.v_head_dim,
            groups: 0,
            group_dim: 0,
            conv_kernel: g.conv_kernel,
            heads: g.num_v_heads,
            head_state: g.k_head_dim * g.v_head_dim,
        }
    }

    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        "Gated DeltaNet: torch fallback (flash-linear-attention and causal-conv1d absent): torch_chunk_gated_delta_rule's fp32 chunk tensors"
    }
}

impl Mechanism for Gdn {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        // Qwen3_5GatedDeltaNet's parameters in the order `__init__` registers them, which is
        // `model.parameters()`'s and so the optimizer's (its states and `foreach`
        // temporaries are made in it): dt_bias, A_log, conv1d (depthwise, no bias), norm
        // (gated RMSNorm over v_head_dim), out_proj, in_proj_qkv, in_proj_z, in_proj_b,
        // in_proj_a (transformers 5.24, modeling_qwen3_5.py).
        let (c, g) = (Component::Mixer, self);
        let (kd, vd) = (g.num_k_heads * g.k_head_dim, g.num_v_heads * g.v_head_dim);
        let conv_dim = 2 * kd + vd;
        out(vector(c, g.num_v_heads));
        out(vector(c, g.num_v_heads));
        out(vector(c, conv_dim * g.conv_kernel));
        out(vector(c, g.v_head_dim));
        out(lin(c, h, vd));
        out(lin(c, conv_dim, h));
        out(lin(c, vd, h));
        out(lin(c, g.num_v_heads, h));
        out(lin(c, g.num_v_heads, h));
    }

    /// FLOPs per token of the state update.
    fn mixing_flops_per_token(&self, _ctx: u64) -> u64 {
        4 * self.num_v_heads * self.k_head_dim * self.v_head_dim
    }

    fn sites(&self, _n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let g = self;
        let mut site = super::module_sites("linear_attn", Component::Mixer, out);
        let (kd, vd) = (g.num_k_heads * g.k_head_dim, g.num_v_heads * g.v_head_dim);
        site("in_proj_qkv", 2 * kd + vd, h, 0);
        site("in_proj_z", vd, h, 0);
        site("in_proj_b", g.num_v_heads, h, 0);
        site("in_proj_a", g.num_v_heads, h, 0);
        site("out_proj", h, vd, 1);
    }
}

/// Gated DeltaNet (`Qwen3_5GatedDeltaNet.forward`, modeling_qwen3_5.py) through the torch
/// fallbacks the module takes without `flash-linear-attention` and `causal-conv1d`:
/// `F.conv1d` + SiLU over the mixed q/k/v, and `torch_chunk_gated_delta_rule`: q, k (repeated
/// to the value heads), v, beta and the decay cast to fp32 `[b, hv, T, d]`, L2-normalised,
/// `k·beta` and `v·beta`, the intra-chunk `[b, hv, T/64, 64, 64]` attention and decay mask, and
/// a loop over the chunks that saves the fp32 recurrent state `[b, hv, dk, dv]` per chunk; then
/// the gated RMSNorm in fp32 and `out_proj`.
pub(crate) fn train(g: &Gdn, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let g = *g;
    let hidden = b.hidden;
    let hv = g.num_v_heads.div_ceil(c.t);
    let hk = g.num_k_heads.div_ceil(c.t);
    let (dk, dv) = (g.k_head_dim, g.v_head_dim);
    let conv = 2 * hk * dk + hv * dv;
    let cmp = c.cmp;
    let padded = c.s.div_ceil(GDN_CHUNK) * GDN_CHUNK;
    let tok32 = m(&[c.b, padded]);
    let chunks = padded / GDN_CHUNK;
    super::norm::train(b, c, p);
    p.push(c.rep(hidden, cmp), false); // in_proj_* input
    p.push(m(&[c.tok, conv, cmp]), false); // conv1d input (mixed_qkv)
    p.push(m(&[c.tok, conv, cmp]), false); // conv1d output, SiLU's input
    p.push(m(&[c.tok, conv, cmp]), false); // SiLU output (q, k, v views)
    p.push(m(&[c.tok, hv * dv, cmp]), false); // z
    p.push(m(&[c.tok, hv, 4 * 4]), false); // beta = sigmoid(b), g's fp32 chain
                                           // torch_chunk_gated_delta_rule, fp32 [b, hv, T, ·]: q and k cast (l2norm's inputs), the
                                           // scaled q, the l2norm'd k, k·beta, k_cumdecay, the decayed q and k of the scan (8 × dk);
                                           // v, new_values, the chunks' v_new (3 × dv).
                                           // Each its own tensor (the allocator sees 48 MiB ones on the Qwen3.5-27B slice at 2048
                                           // tokens, not one block: `snapshots/qwen35-L4-bf16-mb1-s2048`).
    for _ in 0..8 {
        p.push(m(&[tok32, hv, dk, 4]), false);
    }
    for _ in 0..3 {
        p.push(m(&[tok32, hv, dv, 4]), false);
    }
    // [b, hv, T/64, 64, 64]: k_beta·kᵀ and q·kᵀ, the pairwise decay, the UT system and the
    // intra-chunk attention, one tensor each.
    for _ in 0..5 {
        p.push(m(&[tok32, hv, GDN_CHUNK, 4]), false);
    }
    // The recurrent state each chunk's matmuls and decay save.
    p.push(m(&[c.b, chunks, hv, dk * dv, 4]), false);
    // Gated RMSNorm in fp32 (`Qwen3_5RMSNormGated`): input, z, silu(z), the normalised tensor.
    p.push(m(&[c.tok, hv * dv, 4, 4]), false);
    p.push(m(&[c.tok, hv * dv, cmp]), false); // out_proj input
    let state = m(&[c.b, hv, dk * dv, 4]);
    let fwd = m(&[tok32, hv, GDN_CHUNK, 4, 2]).saturating_add(state);
    // The backward's high point, in the backward of the UT system
    // (`ut_system = (k_beta @ key.T) * pairwise_decay`, after the chunk loop's and both
    // `solve_triangular`s' backwards): the gradient entering the rule (bf16, before its fp32
    // cast); fp32 `[b, hv, T, ·]` gradients of the decayed query and key, of `decayed_k_beta`
    // (the second solve's), of the value (`v_beta`'s times beta), and the matmul's two, of
    // `k_beta` and of `key`; the `[b, hv, T/64, 64, 64]` gradient of the UT system (`tril`) and
    // of its two factors. Each its own allocation: read on the allocations
    // `tests/engines/train_trace.py` follows through the Qwen3.5-27B slice's recomputed
    // backward (mb1 x 2048: 25 MB, 3 x 25 MB and 6 x 50 MB alive at that node).
    let mut bwd_parts = [0u64; super::step::BWD_PARTS];
    bwd_parts[0] = m(&[c.tok, hv * dv, cmp]);
    for s in &mut bwd_parts[1..4] {
        *s = m(&[tok32, hv, GDN_CHUNK, 4]);
    }
    for s in &mut bwd_parts[4..9] {
        *s = m(&[tok32, hv, dk, 4]);
    }
    bwd_parts[9] = m(&[tok32, hv, dv, 4]);
    // The inference high point, inside `torch_chunk_gated_delta_rule` (which keeps every
    // intermediate bound to a local until it returns) as it makes the chunks' decayed q: the
    // layer's input and normed input; the SiLU'd conv output (q, k, v are its views) and z;
    // fp32 `[b, hv, T, ·]` q, k, v (padded, normed, scaled), k·beta, v·beta, the decayed k·beta,
    // the two `solve_triangular` outputs (new values, k_cumdecay), the `zeros_like` output and
    // the decayed q being made (6 × dk + 4 × dv); the decay mask, the UT system and the
    // intra-chunk attention `[b, hv, T/64, 64, 64]`; two state-sized `zeros_like`. Held to
    // `tests/engines/live_peak.py` on the Qwen3.5-27B slice, b4 × 4080: these tensors are the
    // 5.57 GB alive at its peak (less the model's `inputs_embeds`).
    let infer = c
        .rep(hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, conv + hv * dv, cmp]))
        .saturating_add(m(&[tok32, hv, 6 * dk + 4 * dv, 4]))
        .saturating_add(m(&[tok32, hv, GDN_CHUNK, 4, 3]))
        .saturating_add(m(&[state, 2]));
    Extra {
        bwd: bwd_parts.iter().sum(),
        bwd_parts,
        fwd,
        infer,
        kept: 0,
        // `torch_recurrent_gated_delta_rule` for one token: fp32 q, k, v and the state's update.
        decode: m(&[c.b, hidden * 2 + conv * 3, cmp]).saturating_add(m(&[state, 3])),
        decode_per_ctx: 0,
        decode_experts: [0, 0],
    }
}

/// Gated DeltaNet's `generate` prefill tensor by tensor, in the order the torch fallbacks make
/// them (the layer's cache is the caller's): the normed input (held by the decoder layer until
/// the mixer returns), `in_proj_qkv`'s output, the causal `conv1d` output and its SiLU (q, k and
/// v are views of it, held until `forward` returns), z; in `torch_chunk_gated_delta_rule` every
/// fp32 intermediate stays bound to a local until it returns (the high point of [`train`]'s
/// inference figure); its output back in bf16; the gated RMSNorm in fp32; `out_proj`. Each
/// tensor is its own allocation, as the caching allocator sees them. Returns the output's slot.
pub(crate) fn prefill(g: &Gdn, prog: &mut Prog, b: &Blocks, c: &Ctx) -> u8 {
    let hv = g.num_v_heads.div_ceil(c.t);
    let hk = g.num_k_heads.div_ceil(c.t);
    let (dk, dv) = (g.k_head_dim, g.v_head_dim);
    let conv = 2 * hk * dk + hv * dv;
    let cmp = c.cmp;
    let padded = c.s.div_ceil(GDN_CHUNK) * GDN_CHUNK;
    let tok32 = m(&[c.b, padded]);
    let n = super::norm::prefill(prog, b.norm, m(&[c.tok, b.hidden]), cmp, true);
    let qkv = prog.make(m(&[c.tok, conv, cmp]));
    let co = prog.make(m(&[c.tok, conv, cmp]));
    let act = prog.make(m(&[c.tok, conv, cmp]));
    prog.free(co);
    prog.free(qkv);
    let z = prog.make(m(&[c.tok, hv * dv, cmp]));
    // The chunked rule's locals: 6 of width dk, 4 of width dv (the last one `core_attn_out`),
    // the three [b, hv, T/64, 64, 64], two state-sized.
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(prog.make(m(&[tok32, hv, dk, 4])));
    }
    for _ in 0..3 {
        held.push(prog.make(m(&[tok32, hv, dv, 4])));
    }
    for _ in 0..3 {
        held.push(prog.make(m(&[tok32, hv, GDN_CHUNK, 4])));
    }
    let state = m(&[c.b, hv, dk * dv, 4]);
    held.push(prog.make(state));
    held.push(prog.make(state));
    let core = prog.make(m(&[tok32, hv, dv, 4]));
    for s in held {
        prog.free(s);
    }
    let o16 = prog.make(m(&[c.tok, hv * dv, cmp]));
    prog.free(core);
    // Qwen3_5RMSNormGated: fp32 input, normalised, fp32 gate and its SiLU, the product, bf16.
    let f32 = m(&[c.tok, hv * dv, 4]);
    let x32 = prog.make(f32);
    let nrm = prog.make(f32);
    prog.free(x32);
    let z32 = prog.make(f32);
    let sz = prog.make(f32);
    prog.free(z32);
    let pr = prog.make(f32);
    prog.free(nrm);
    prog.free(sz);
    let ob = prog.make(m(&[c.tok, hv * dv, cmp]));
    prog.free(pr);
    prog.free(o16);
    prog.free(z);
    let y = prog.make(m(&[c.tok, b.hidden, cmp]));
    prog.free(ob);
    prog.free(act);
    prog.free(n);
    y
}

impl Gdn {
    /// Host work of `Qwen3_5GatedDeltaNet` in one `generate` forward beyond its linears
    /// (transformers 5.24): the conv (`F.conv1d` with the state `cat`, or causal-conv1d's
    /// kernel: 4 fewer), `sigmoid`/`softplus`/`exp` of the gates, l2norm of q and k, then
    /// `torch_recurrent_gated_delta_rule` (decode: ten operators over the fp32 state) or
    /// `torch_chunk_gated_delta_rule` (prefill: the padded chunks, `solve_triangular`, and a
    /// Python loop of six operators per 64-token chunk, counted here at one chunk;
    /// [`Gdn::chunk_loop_host`] adds the rest), or with fla one Triton kernel for the delta
    /// rule (with its l2norm and gates); the gated RMSNorm (11 kernels) and its SiLU, the
    /// conv's SiLU.
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let (k, v, py) = match (c.prefill(), c.kernels.fla) {
            (false, false) => (42.0, 39.0, 12.0),
            (true, false) => (69.0, 85.0, 49.0),
            (false, true) => (24.0, 25.0, 10.0),
            (true, true) => (26.0, 27.0, 12.0),
        };
        let conv = if c.kernels.causal_conv1d { -4.0 } else { 0.0 };
        let mut w = Host::module(k + conv, v, py);
        w.add(Host::module(11.0, 0.0, 0.0));
        w.add(Host::module(1.0, 0.0, 0.0).times(2.0));
        w
    }

    /// `torch_chunk_gated_delta_rule`'s Python loop over 64-token chunks of a `prompt`-token
    /// prefill beyond the one chunk [`Gdn::generate_host`] counts: per chunk a `matmul` and
    /// `sub` (`v_new`), the inter-chunk `matmul`, the intra-chunk `matmul` and `add` written
    /// into the output slice, the state's decay, `matmul` and `add`: 9 kernels, and 28 views
    /// (the chunk selects and `matmul`'s expands and reshapes), counted on the CPU at 40, 104
    /// and 168 prompt tokens. fla's chunked kernel has no Python loop.
    pub fn chunk_loop_host(&self, prompt: f64, fla: bool) -> Host {
        if fla {
            return Host::default();
        }
        let chunks = (prompt / 64.0).ceil().max(1.0) - 1.0;
        Host {
            kernels: 9.0 * chunks,
            views: 28.0 * chunks,
            py: 0.0,
            ..Host::default()
        }
    }
}
