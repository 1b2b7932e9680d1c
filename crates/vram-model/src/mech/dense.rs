//! The dense MLP: `down(act(gate(x)) · up(x))` or `down(act(up(x)))`, its activation as the
//! reference code computes it (what autograd saves differs by implementation).

use serde::Serialize;

use super::host::{linears, Host};
use super::step::Prog;
use super::step::{m, Ctx, Parts};
use super::{col_bias, lin, vector, Component, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};
use crate::setup::AmpStyle;

/// The feed-forward activation function, as the reference code computes it.
///
/// What autograd saves differs: fused kernels save their input (or output) only, while the
/// Python-composed tanh approximations save several intermediates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    /// One fused kernel that saves its input (`F.gelu`, `F.silu`, `gelu_pytorch_tanh`).
    Fused,
    /// `gelu_new`/`gelu_fast` written as elementwise ops (GPT-2, T5 v1.1): saves the tanh
    /// output, `1 + tanh` and `0.5·x` besides the input; under autocast `pow` runs in fp32.
    ComposedTanh,
    /// `quick_gelu` (`x·sigmoid(1.702x)`): saves the sigmoid output besides the input.
    QuickGelu,
    /// `F.relu`: its backward reads its output, so its input is not kept.
    Relu,
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
    /// The activation's implementation.
    pub act: Act,
    /// A dropout between the activation and the down projection, whose input is cast to the
    /// weight's dtype (T5's `T5DenseActDense`).
    pub inner_dropout: bool,
}

impl Dense {
    /// A bias-free gated MLP of `intermediate` with a fused activation (Llama's `LlamaMLP`).
    pub fn new(intermediate: u64) -> Dense {
        Dense {
            intermediate,
            gated: true,
            bias: false,
            fused_gate_up: false,
            act: Act::Fused,
            inner_dropout: false,
        }
    }
}

impl Dense {
    /// The MLP's parameter tensors, tagged `c` (a dense MLP, or shared experts).
    pub fn tensors_as(&self, h: u64, c: Component, out: &mut impl FnMut(Tensor)) {
        let f = self.intermediate;
        if self.gated {
            if self.fused_gate_up {
                out(lin(c, 2 * f, h));
                if self.bias {
                    out(col_bias(c, 2 * f));
                }
            } else {
                for _ in 0..2 {
                    out(lin(c, f, h));
                    if self.bias {
                        out(col_bias(c, f));
                    }
                }
            }
        } else {
            out(lin(c, f, h));
            if self.bias {
                out(col_bias(c, f));
            }
        }
        out(lin(c, h, f));
        if self.bias {
            out(vector(c, h));
        }
    }

    /// Its sites under `prefix` (the module path), tagged `c`; `base`: the number of the tensor
    /// its first projections read (see [`Site::input`]).
    pub fn sites_as(
        &self,
        n: &Names,
        prefix: &str,
        c: Component,
        base: u8,
        h: u64,
        out: &mut impl FnMut(Site),
    ) {
        let mut add = super::module_sites(prefix, c, out);
        let f = self.intermediate;
        if self.gated {
            if self.fused_gate_up {
                add(n.gate_up, 2 * f, h, base);
            } else {
                add(n.gate, f, h, base);
                add(n.up, f, h, base);
            }
        } else {
            add(n.up, f, h, base);
        }
        add(n.down, h, f, base + 1);
    }
}

impl Mechanism for Dense {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        self.tensors_as(h, Component::DenseMlp, out);
    }

    fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site)) {
        self.sites_as(names, names.mlp, Component::DenseMlp, 4, h, out);
    }
}

/// A dense feed-forward sub-block of `d` in model `b`; `shared_norm`: it reads the normed
/// input the mixer read (Falcon-7B's one norm per block). Returns (backward extra, inference
/// high point).
pub(crate) fn train(
    d: &Dense,
    b: &Blocks,
    c: &Ctx,
    shared_norm: bool,
    p: &mut Parts,
) -> (u64, u64) {
    let hidden = b.hidden;
    if !shared_norm {
        super::norm::train(b, c, p);
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

/// A dense MLP over the residual stream after the mixer; returns its output's slot.
pub(crate) fn prefill(dense: &Dense, g: &mut Prog, b: &Blocks, c: &Ctx) -> u8 {
    let tok = c.tok;
    let (h, cmp) = (b.hidden, c.cmp);
    let hd = m(&[tok, h, cmp]);
    let n2 = super::norm::prefill(g, b.norm, m(&[tok, h]), cmp, true);
    let fb = m(&[tok, dense.intermediate.div_ceil(c.t), cmp]);
    let d = match (dense.gated, dense.act) {
        (true, _) => {
            let gt = g.make(fb);
            let a = g.make(fb);
            g.free(gt);
            let u = g.make(fb);
            let p = g.make(fb);
            g.free(a);
            g.free(u);
            let d = g.make(hd);
            g.free(p);
            d
        }
        (_, Act::ComposedTanh) => {
            // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), one op at a time.
            let u = g.make(fb);
            let t0 = g.make(fb);
            let mut prev = g.make(fb);
            for _ in 0..4 {
                let nx = g.make(fb);
                g.free(prev);
                prev = nx;
            }
            let gt = g.make(fb); // 1 + tanh
            g.free(prev);
            let a = g.make(fb); // 0.5·x · (1 + tanh)
            g.free(t0);
            g.free(gt);
            g.free(u);
            let d = g.make(hd);
            g.free(a);
            d
        }
        _ => {
            let u = g.make(fb);
            let a = g.make(fb);
            g.free(u);
            let d = g.make(hd);
            g.free(a);
            d
        }
    };
    g.free(n2);
    d
}

impl Dense {
    /// Host work of the MLP module in one `generate` forward (transformers 5.24): the module,
    /// its activation module and product, and its linears (`gate_proj`, `up_proj`, `down_proj`;
    /// two where the gate is fused or there is none).
    pub fn generate_host(&self) -> Host {
        let mut m = Host::module(1.0, 0.0, 0.0);
        m.add(Host::module(1.0, 0.0, 0.0));
        m.add(linears(if self.gated && !self.fused_gate_up {
            3.0
        } else {
            2.0
        }));
        m
    }
}
