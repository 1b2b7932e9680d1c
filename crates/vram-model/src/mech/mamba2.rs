//! Mamba2 (Nemotron-H's `NemotronHMamba2Mixer`, Granite 4's `GraniteMoeHybridMambaLayer`)
//! through its torch fallback: its cache is the convolution state and the fp32 SSM state.

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::step::{m, Ctx, Extra, Parts};
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
