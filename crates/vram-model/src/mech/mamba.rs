//! Mamba (1) (transformers 5.24's `MambaMixer`, `FalconMambaMixer`, `JambaMambaMixer`) through its torch fallback
//! (`mamba_selective_scan` without the `kernels` hub's `mamba_ssm`): `in_proj` to the inner
//! width twice (x and the gate z), a depthwise causal conv over x, `x_proj` to the time-step
//! rank and B, C, `dt_proj` back to the inner width, the selective scan over a per-channel state
//! of `state_size`, and `out_proj`. Its cache is the convolution state `[inner, kernel]` in the
//! model's dtype and the SSM state `[inner, state]` in fp32 (checked against the library's cache
//! on the meta device: `tests/zoo/causal_lm_expected.json`).
//!
//! A training step is not modelled (the walk refuses it): the fallback's scan is a Python loop
//! over the sequence whose autograd graph keeps a state per token, and the block keeps its
//! residual in fp32 (`residual_in_fp32`), which the walk's residual stream does not describe.

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::step::{m, Ctx, Extra, Parts};
use super::Mamba2;
use super::{lin, vector, CacheLayout, CacheTensor, Component, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};

/// The Mamba (1) selective state-space mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mamba {
    /// Inner width (`intermediate_size`, `expand × hidden_size`).
    pub inner: u64,
    /// SSM state per channel (`state_size`).
    pub state_size: u64,
    /// `time_step_rank`.
    pub dt_rank: u64,
    /// Convolution width (`conv_kernel`).
    pub conv_kernel: u64,
    /// Bias on `in_proj` and `out_proj` (`use_bias`).
    pub bias: bool,
    /// Bias on the convolution (`use_conv_bias`).
    pub conv_bias: bool,
    /// RMSNorms with weights on the time step, B and C (Jamba's `dt_layernorm`, `b_layernorm`,
    /// `c_layernorm`; FalconMamba's have no weights).
    pub bcdt_norms: bool,
}

impl Mamba {
    /// The tensors its cache holds per sequence: the convolution state and the fp32 SSM state.
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        out(CacheTensor::state(self.inner * self.conv_kernel, false));
        out(CacheTensor::state(self.inner * self.state_size, true));
    }

    /// Its state as a serving engine pages it (vLLM's `mamba1_state_shape`: the conv over the
    /// inner width, the SSM state per channel).
    pub fn cache_layout(&self) -> CacheLayout {
        CacheLayout::State {
            conv_dim: self.inner,
            groups: 0,
            group_dim: 0,
            conv_kernel: self.conv_kernel,
            heads: self.inner,
            head_state: self.state_size,
        }
    }

    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        "Mamba (1): torch fallback (no mamba_ssm kernels): mamba_selective_scan's sequential loop; its cache exact against transformers 5.24; a training step is not modelled"
    }
}

impl Mechanism for Mamba {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        // MambaMixer: conv1d, in_proj, x_proj, dt_proj (biased), A_log, D, out_proj.
        let (c, x) = (Component::Mixer, self);
        out(vector(c, x.inner * x.conv_kernel));
        if x.conv_bias {
            out(vector(c, x.inner));
        }
        out(lin(c, 2 * x.inner, h));
        if x.bias {
            out(vector(c, 2 * x.inner));
        }
        out(lin(c, x.dt_rank + 2 * x.state_size, x.inner));
        out(lin(c, x.inner, x.dt_rank));
        out(vector(c, x.inner));
        out(vector(c, x.inner * x.state_size));
        out(vector(c, x.inner));
        out(lin(c, h, x.inner));
        if x.bias {
            out(vector(c, h));
        }
        if x.bcdt_norms {
            out(vector(c, x.dt_rank));
            out(vector(c, x.state_size));
            out(vector(c, x.state_size));
        }
    }

    /// FLOPs per token of the state update and the output read.
    fn mixing_flops_per_token(&self, _ctx: u64) -> u64 {
        6 * self.inner * self.state_size
    }

    fn sites(&self, _n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let x = self;
        let mut site = super::module_sites("mixer", Component::Mixer, out);
        site("in_proj", 2 * x.inner, h, 0);
        site("x_proj", x.dt_rank + 2 * x.state_size, x.inner, 1);
        site("dt_proj", x.inner, x.dt_rank, 2);
        site("out_proj", h, x.inner, 3);
    }
}

/// A forward without autograd (`generate`'s prefill) through `mamba_selective_scan`'s loop:
/// `in_proj`'s output `[tokens, 2·inner]`, the conv's output, `x_proj`'s and `dt_proj`'s, then
/// in fp32 `discrete_A` and `deltaB_u` `[tokens, inner, state]` (with `discrete_B` made and
/// dropped between them) live through the loop, whose outputs are stacked, and the gated
/// output. The walk refuses a training step, so nothing is pushed for backward.
pub(crate) fn train(x: &Mamba, b: &Blocks, c: &Ctx, _p: &mut Parts) -> Extra {
    let tok = c.tok;
    let cmp = c.cmp;
    let i = x.inner.div_ceil(c.t);
    let proj = m(&[tok, 2 * i, cmp]);
    let small = m(&[tok, i, cmp, 3]);
    let scan = m(&[tok, i, x.state_size, 4]);
    let infer = c
        .rep(b.hidden, c.res + cmp)
        .saturating_add(proj)
        .saturating_add(small)
        .saturating_add(m(&[scan, 3]))
        .saturating_add(m(&[tok, i, 4, 2]));
    let state = m(&[c.b, i, x.state_size, 4]);
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd: 0,
        fwd: 0,
        infer,
        kept: 0,
        decode: m(&[c.b, b.hidden * 2 + i * 4, cmp]).saturating_add(m(&[state, 3])),
        decode_per_ctx: 0,
        decode_experts: [0, 0],
    }
}

impl Mamba {
    /// Host work of `MambaMixer`'s torch fallback in one `generate` forward beyond its
    /// linears: not counted on the CPU; the Mamba2 path's counts ([`Mamba2::mixer_host`])
    /// stand in (its prefill scan loops over the tokens in Python besides).
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        Mamba2::mixer_host(c.prefill())
    }
}
