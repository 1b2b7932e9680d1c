//! Mamba2 (Nemotron-H's `NemotronHMamba2Mixer`, Granite 4's `GraniteMoeHybridMambaLayer`)
//! through its torch fallback: its cache is the convolution state and the fp32 SSM state.

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::step::{m, Ctx, Extra, Parts, Prog, CACHE};
use super::{lin, vector, CacheLayout, CacheTensor, Component, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};

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
    /// Bias on `in_proj`.
    pub bias: bool,
    /// Bias on `out_proj` (Falcon-H1's `projectors_bias`; the same key as `bias` elsewhere).
    pub out_bias: bool,
    /// The gated RMSNorm over the inner width before `out_proj` (Falcon-H1's `mamba_rms_norm`
    /// turns it off; always there in Nemotron-H, Granite 4 and Mamba2).
    pub gated_norm: bool,
    /// Bias on the convolution.
    pub conv_bias: bool,
    /// PEFT refuses LoRA on this mixer's `out_proj` (and `conv1d`): PEFT 0.21.2
    /// `tuners/tuners_utils.py::_check_lora_target_modules_mamba` raises for the model classes it
    /// knows as Mamba-based (Nemotron-H, Falcon-H1, Mamba, Mamba2, FalconMamba). Set by the
    /// config reader for those families; `false` for hybrids PEFT adapts freely (Granite 4).
    pub peft_refuses_out_proj: bool,
}

impl Mamba2 {
    /// The tensors its cache holds per sequence: the convolution state and the fp32 SSM state
    /// `[heads, head_dim, state]`.
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        let m = self;
        let d_in = m.heads * m.head_dim;
        let conv_dim = d_in + 2 * m.groups * m.state_size;
        out(CacheTensor::state(conv_dim * m.conv_kernel, false));
        out(CacheTensor::state(
            m.heads * m.head_dim * m.state_size,
            true,
        ));
    }

    /// Its state as a serving engine pages it: the convolution over x (its B/C groups apart)
    /// and the SSM state per head.
    pub fn cache_layout(&self) -> CacheLayout {
        let m = self;
        CacheLayout::State {
            conv_dim: m.heads * m.head_dim,
            groups: m.groups,
            group_dim: 2 * m.state_size,
            conv_kernel: m.conv_kernel,
            heads: m.heads,
            head_state: m.head_dim * m.state_size,
        }
    }

    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        "Mamba2: torch fallback (mamba_ssm and causal_conv1d absent): torch_forward's fp32 chunked scan"
    }
}

impl Mechanism for Mamba2 {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        // NemotronHMamba2Mixer: in_proj H → d_in + conv_dim + heads, conv1d, dt_bias,
        // A_log, D, gated RMSNorm(d_in), out_proj.
        let (c, m) = (Component::Mixer, self);
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
        if m.gated_norm {
            out(vector(c, d_in));
        }
        out(lin(c, h, d_in));
        if m.out_bias {
            out(vector(c, h));
        }
    }

    /// FLOPs per token of the state update.
    fn mixing_flops_per_token(&self, _ctx: u64) -> u64 {
        4 * self.heads * self.head_dim * self.state_size
    }

    fn sites(&self, _n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let m = self;
        let mut site = super::module_sites("mixer", Component::Mixer, out);
        let d_in = m.heads * m.head_dim;
        let conv_dim = d_in + 2 * m.groups * m.state_size;
        site("in_proj", d_in + conv_dim + m.heads, h, 0);
        site("out_proj", h, d_in, 1);
    }
}

/// Mamba2 (`NemotronHMamba2Mixer.torch_forward`, modeling_nemotron_h.py, taken without
/// `mamba_ssm`/`causal_conv1d`): `in_proj`, conv + SiLU over `xBC`, `dt` softplus in fp32, and
/// the chunked SSD: `exp(segsum(A))` `[b, H, nc, C, C]`, the C·Bᵀ products per chunk, the
/// per-chunk states `[b, nc, H, P, N]` in fp32, then the gated RMSNorm and `out_proj`.
pub(crate) fn train(mb: &Mamba2, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let mb = *mb;
    let hidden = b.hidden;
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
    super::norm::train(b, c, p);
    // in_proj's input.
    p.push(c.rep(hidden, cmp), false);
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
    // The inference high point, in `torch_forward`'s chunked scan (every intermediate bound to a
    // local until it returns) at the inter-chunk recurrence: the layer's input and normed
    // input; in_proj's output and the SiLU'd conv output; fp32 per padded token: B and C
    // repeated to the heads and padded, `B * decay_states` and its einsum copy (4 × H·N), x
    // cast and padded, `x * dt` and the two einsum outputs of Y_diag (4 × d_in), `L`, `G` and
    // `M` (3 × H·chunk), dt padded, its cumsum and two decays (4 × H); the chunk states' einsum
    // copy and the states with the initial one (`2 · chunks + 1`); two state-sized zeros; the
    // clamped dt. Held to `tests/engines/live_peak.py` on a 4-layer Nemotron-H-56B slice
    // (b2 × 2000): these are the 8.77 GB alive at its peak (less the model's `inputs_embeds`).
    let infer = c
        .rep(hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, proj + conv, cmp]))
        .saturating_add(m(&[
            tok32,
            4 * hn + 4 * d_in + 3 * heads * chunk + 4 * heads,
            4,
        ]))
        .saturating_add(m(&[
            c.b,
            2 * chunks + 1,
            heads,
            mb.head_dim * mb.state_size,
            4,
        ]))
        .saturating_add(m(&[state, 2]))
        .saturating_add(m(&[c.tok, heads, cmp]));
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd: fwd.saturating_add(m(&[tok32, d_in, 4, 2])),
        fwd,
        infer,
        kept: 0,
        decode: m(&[c.b, hidden * 2 + conv * 3, cmp]).saturating_add(m(&[state, 3])),
        decode_per_ctx: 0,
        decode_experts: [0, 0],
    }
}

/// The prefill forward of a Mamba2 layer in `generate` without `mamba_ssm`/`causal_conv1d`,
/// tensor by tensor, as transformers 5.24 runs it (`NemotronHMamba2Mixer.forward` with a cache
/// and `mamba2_chunk_scan`, the reference implementation `use_kernel_func_from_hub_with_fallback`
/// falls back to; Granite 4's, Bamba's, Falcon-H1's and Mamba2's own modelling files carry the
/// same copy). Every local stays bound until its function returns, so the scan's tensors pile
/// up: `repeat_interleave`'s B and C, their padded chunk copies, `segment_sum`'s three
/// `[b, H, nc, C, C]` tensors, and each `einsum`'s operand copies (`bmm` wants contiguous
/// `[batch, m, k]` operands, so a permuted operand is cloned). `cache[0]` (the conv state) is
/// made by `update_conv_state` after `in_proj`, `cache[1]` (the SSM state) by
/// `update_recurrent_state` after the scan. Held to `tests/engines/gen_trace.py` on an 8-layer
/// Nemotron-H-56B slice and to the H200's snapshot of the same call
/// (`gpu/results3/2026-11-28/`, `nemotronh-L8-infer-b4-p4080-torch`). Returns `out_proj`'s
/// output.
pub(crate) fn prefill(mb: &Mamba2, g: &mut Prog, b: &Blocks, c: &Ctx, cache: &[u64]) -> u8 {
    let heads = mb.heads.div_ceil(c.t);
    let d_in = heads * mb.head_dim;
    let hn = heads * mb.state_size;
    let gn = mb.groups * mb.state_size;
    let conv = d_in + 2 * gn;
    let proj = d_in + conv + heads;
    let chunk = mb.chunk.max(1);
    let padded = c.s.div_ceil(chunk) * chunk;
    let chunks = padded / chunk;
    let (tok, tok32, cmp) = (c.tok, m(&[c.b, padded]), c.cmp);
    let state = m(&[c.b, heads, mb.head_dim * mb.state_size, 4]);
    let n = super::norm::prefill(g, b.norm, m(&[tok, b.hidden]), cmp, true);
    let zx = g.make(m(&[tok, proj, cmp]));
    if let Some(&bytes) = cache.first() {
        g.ops.push((CACHE, bytes));
    }
    // causal_conv1d_fn's fallback: `F.conv1d` over the sequence and its padding, SiLU.
    let co = g.make(m(&[c.b, conv, c.s + mb.conv_kernel.saturating_sub(1), cmp]));
    let xbc = g.make(m(&[tok, conv, cmp]));
    g.free(co);
    // mamba2_chunk_scan: dt + dt_bias, softplus, clamp (the clamped dt stays bound).
    let dth = m(&[tok, heads, cmp]);
    let d0 = g.make(dth);
    let d1 = g.make(dth);
    g.free(d0);
    let dt = g.make(dth);
    g.free(d1);
    let x32 = g.make(m(&[tok, d_in, 4]));
    let b32 = g.make(m(&[tok, gn, 4]));
    let bh = g.make(m(&[tok, hn, 4]));
    g.free(b32);
    let c32 = g.make(m(&[tok, gn, 4]));
    let ch = g.make(m(&[tok, hn, 4]));
    g.free(c32);
    // D_residual = D · pad(x).
    let xp = g.make(m(&[tok32, d_in, 4]));
    let dres = g.make(m(&[tok32, d_in, 4]));
    g.free(xp);
    // x · dt, A · dt (each over dt's fp32 copy).
    let dtf = g.make(m(&[tok, heads, 4]));
    let xdt = g.make(m(&[tok, d_in, 4]));
    g.free(dtf);
    g.free(x32);
    let dtf = g.make(m(&[tok, heads, 4]));
    let adt = g.make(m(&[tok, heads, 4]));
    g.free(dtf);
    // reshape_into_chunks: padded copies of x, A, B and C; the unpadded ones are rebound.
    let xc = g.make(m(&[tok32, d_in, 4]));
    let ac = g.make(m(&[tok32, heads, 4]));
    let bc = g.make(m(&[tok32, hn, 4]));
    let cc = g.make(m(&[tok32, hn, 4]));
    for s in [xdt, adt, bh, ch] {
        g.free(s);
    }
    let acum = g.make(m(&[tok32, heads, 4]));
    // L = exp(segment_sum(A)): masked_fill, cumsum, masked_fill, then exp.
    let seg = m(&[tok32, heads, chunk, 4]);
    let s0 = g.make(seg);
    let s1 = g.make(seg);
    let s2 = g.make(seg);
    g.free(s1);
    g.free(s0);
    let l = g.make(seg);
    g.free(s2);
    // G = einsum(C, B): both operands copied, then M = G · L.
    let o1 = g.make(m(&[tok32, hn, 4]));
    let o2 = g.make(m(&[tok32, hn, 4]));
    let gg = g.make(seg);
    g.free(o2);
    g.free(o1);
    let mm = g.make(seg);
    // Y_diag = einsum(M, x): x copied.
    let o1 = g.make(m(&[tok32, d_in, 4]));
    let ydiag = g.make(m(&[tok32, d_in, 4]));
    g.free(o1);
    let t = g.make(m(&[tok32, heads, 4]));
    let decay = g.make(m(&[tok32, heads, 4]));
    g.free(t);
    let bdecay = g.make(m(&[tok32, hn, 4]));
    // states = einsum(B_decay, x): both copied.
    let o1 = g.make(m(&[tok32, d_in, 4]));
    let o2 = g.make(m(&[tok32, hn, 4]));
    let st = g.make(m(&[state, chunks]));
    g.free(o2);
    g.free(o1);
    // The initial state (zeros) and the states with it.
    let z = g.make(state);
    let cat = g.make(m(&[state, chunks + 1]));
    g.free(st);
    // decay_chunk = exp(segment_sum(pad(A_cumsum[..., -1]))), [b, H, nc + 1, nc + 1].
    let dc = m(&[c.b, heads, (chunks + 1) * (chunks + 1), 4]);
    let p = g.make(m(&[c.b, heads, chunks + 1, 4]));
    let s0 = g.make(dc);
    g.free(p);
    let s1 = g.make(dc);
    let s2 = g.make(dc);
    g.free(s1);
    g.free(s0);
    let dch = g.make(dc);
    g.free(s2);
    // new_states = einsum(decay_chunk, states): states copied; its last chunk is the final
    // state (a view, so the whole stays).
    let o1 = g.make(m(&[state, chunks + 1]));
    let news = g.make(m(&[state, chunks + 1]));
    g.free(o1);
    g.free(cat);
    let sdo = g.make(m(&[tok32, heads, 4]));
    // C_times_states = einsum(C, states): both copied; Y_off, Y_diag + Y_off made contiguous,
    // + D_residual.
    let o1 = g.make(m(&[tok32, hn, 4]));
    let o2 = g.make(m(&[state, chunks]));
    let cts = g.make(m(&[tok32, d_in, 4]));
    g.free(o2);
    g.free(o1);
    let yoff = g.make(m(&[tok32, d_in, 4]));
    let sum = g.make(m(&[tok32, d_in, 4]));
    let ct = g.make(m(&[tok32, d_in, 4]));
    g.free(sum);
    let out = g.make(m(&[tok32, d_in, 4]));
    g.free(ct);
    // The scan returns: its locals go; the output and the final state's base stay.
    for s in [
        xc, dt, ac, bc, cc, dres, acum, l, gg, mm, ydiag, decay, bdecay, z, dch, sdo, cts, yoff,
    ] {
        g.free(s);
    }
    if let Some(&bytes) = cache.get(1) {
        g.ops.push((CACHE + 1, bytes));
    }
    // The gated RMSNorm over the fp32 scan output: the gate's fp32 copy, its SiLU, the product,
    // `pow`, the normalised groups, the weight product (fp32: the input was fp32). Then the cast
    // to the compute dtype and `out_proj`.
    let f32 = m(&[tok, d_in, 4]);
    let normed = if mb.gated_norm {
        let gz = g.make(f32);
        let sz = g.make(f32);
        g.free(gz);
        let pr = g.make(f32);
        g.free(sz);
        let pw = g.make(f32);
        g.free(pw);
        let nr = g.make(f32);
        g.free(pr);
        let w = g.make(f32);
        g.free(nr);
        Some(w)
    } else {
        // Falcon-H1 without `mamba_rms_norm`: `scan_output * silu(gate)`, the SiLU in the
        // compute dtype, the product fp32.
        let sz = g.make(m(&[tok, d_in, cmp]));
        let w = g.make(f32);
        g.free(sz);
        Some(w)
    };
    let cast = g.make(m(&[tok, d_in, cmp]));
    let y = g.make(m(&[tok, b.hidden, cmp]));
    g.free(cast);
    for s in [zx, xbc].into_iter().chain(normed).chain([out, news, n]) {
        g.free(s);
    }
    y
}

impl Mamba2 {
    /// Host work of the Mamba2 mixer's `torch_forward` (no mamba_ssm) in one `generate` forward
    /// beyond its linears and gated norm, counted like the Gated DeltaNet path (transformers
    /// 5.24's NemotronH).
    pub fn mixer_host(prefill: bool) -> Host {
        Host::module(if prefill { 69.0 } else { 42.0 }, 40.0, 12.0)
    }

    /// Host work of the Mamba2 mixer in one `generate` forward beyond its linears: the mixer
    /// ([`Mamba2::mixer_host`]) and its gated RMSNorm (11 kernels).
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let mut w = Mamba2::mixer_host(c.prefill());
        w.add(Host::module(11.0, 0.0, 0.0));
        w
    }
}
