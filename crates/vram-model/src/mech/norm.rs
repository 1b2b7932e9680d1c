//! Norms: LayerNorm and the families' RMSNorm (what a norm saves for backward, its prefill
//! ops); RMSNorms inside a mechanism (q/k norms, MLA's latent norms) through `train_rms`.

use serde::Serialize;

use super::step::Prog;
use super::step::{m, Ctx, Parts};
use super::{vector, Component, Host, Tensor};
use crate::describe::Blocks;
use crate::setup::AmpStyle;

/// A normalisation layer's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `nn.LayerNorm`: one kernel, mean and rstd saved.
    LayerNorm,
    /// The families' `*RMSNorm`, written as PyTorch ops through an fp32 copy.
    RmsNorm,
}

/// A model's normalisation layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Norm {
    /// LayerNorm or RMSNorm.
    pub kind: NormKind,
    /// A learned weight (`elementwise_affine`; false for OLMo's and OPT's parameter-free
    /// LayerNorms).
    pub weight: bool,
    /// A bias beside the weight (LayerNorm with `bias=True`).
    pub bias: bool,
    /// The weight multiplies the fp32 normalised tensor (Gemma's `output * (1.0 +
    /// self.weight.float())`, Gemma 4's `normed_output * self.weight.float()`), not the
    /// half-precision one as Llama's `self.weight * hidden_states.to(input_dtype)` does.
    pub fp32_product: bool,
}

impl Norm {
    /// RMSNorm with a plain weight (Llama's `LlamaRMSNorm`).
    pub const RMS: Norm = Norm {
        kind: NormKind::RmsNorm,
        weight: true,
        bias: false,
        fp32_product: false,
    };

    /// `nn.LayerNorm` with weight and bias.
    pub const LAYER_NORM: Norm = Norm {
        kind: NormKind::LayerNorm,
        weight: true,
        bias: true,
        fp32_product: false,
    };

    /// `nn.LayerNorm` without weight or bias (`elementwise_affine=False`: OLMo, OPT's option).
    pub const LAYER_NORM_PLAIN: Norm = Norm {
        kind: NormKind::LayerNorm,
        weight: false,
        bias: false,
        fp32_product: false,
    };

    /// Parameters of one norm over `width` features.
    pub fn params(&self, width: u64) -> u64 {
        width * (u64::from(self.weight) + u64::from(self.bias))
    }

    /// Its parameter tensors over `width` features (the weight, then the bias).
    pub(crate) fn tensors(&self, width: u64, out: &mut impl FnMut(Tensor)) {
        if self.weight {
            out(vector(Component::Norms, width));
        }
        if self.bias {
            out(vector(Component::Norms, width));
        }
    }
}

/// What one of the model's norms over the hidden state saves.
pub(crate) fn train(b: &Blocks, c: &Ctx, p: &mut Parts) {
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

/// An RMSNorm over `width` per token as transformers' `*RMSNorm` runs it: the fp32 copy, the
/// normalised output and the per-token rstd are saved.
pub(crate) fn train_rms(c: &Ctx, width: u64, p: &mut Parts) {
    p.push(m(&[c.tok, width, 4]), false);
    p.push(m(&[c.tok, width, c.cmp]), false);
    p.push(m(&[c.tok, 4]), false);
}

/// A norm's prefill ops over `elems` = tokens × width: the families' RMSNorm through an fp32
/// copy (`x.to(float32)`, `pow(2).mean(-1)`, `x * rsqrt(...)`, then `weight * x.to(dtype)`, or
/// Gemma's fp32 product `x * (1 + weight.float())` cast back), `nn.LayerNorm` in one kernel;
/// `weight: false` for the weightless norms (Llama 4's L2 q/k norm, Gemma 4's v_norm). Returns
/// its output's slot.
pub(crate) fn prefill(g: &mut Prog, norm: Norm, elems: u64, cmp: u64, weight: bool) -> u8 {
    let half = m(&[elems, cmp]);
    let f32 = m(&[elems, 4]);
    match norm.kind {
        NormKind::RmsNorm if cmp != 4 => {
            let a = g.make(f32);
            let p = g.make(f32);
            g.free(p);
            let n = g.make(f32);
            g.free(a);
            if norm.fp32_product && weight {
                let pr = g.make(f32);
                g.free(n);
                let o = g.make(half);
                g.free(pr);
                o
            } else {
                let cst = g.make(half);
                g.free(n);
                if !weight {
                    return cst;
                }
                let o = g.make(half);
                g.free(cst);
                o
            }
        }
        NormKind::RmsNorm => {
            let p = g.make(half);
            g.free(p);
            let n = g.make(half);
            if !weight {
                return n;
            }
            let o = g.make(half);
            g.free(n);
            o
        }
        NormKind::LayerNorm => g.make(half),
    }
}

/// One RMSNorm module's host work in a half-precision `generate` (transformers 5.24): `to(float32)`,
/// `pow`, `mean`, `+ eps`, `rsqrt`, `*`, `to(dtype)`, `weight *`.
pub fn rms_norm_host() -> Host {
    Host::module(8.0, 0.0, 0.0)
}

impl Norm {
    /// One of these norm modules' host work in `generate`. Counted as the RMSNorm every family
    /// counted on the CPU uses ([`rms_norm_host`]); a LayerNorm's single kernel is not told
    /// apart.
    pub fn generate_host(&self) -> Host {
        rms_norm_host()
    }
}
