//! Mixtures of experts: the router (softmax or sigmoid, an fp32 router, correction biases),
//! routed expert banks run by transformers' dispatch (`grouped_mm_experts_forward`, Llama 4's
//! every-token-through-every-expert, a loop), shared experts and their gate, Nemotron-H's
//! latent projections.

use serde::Serialize;

use super::host::{Host, HostCtx, Phase};
use super::step::{m, Ctx, Extra, Parts, Prog};
use super::{
    col_bias, lin, vector, Component, Dense, Mechanism, Site, SiteKind, Tensor, TensorKind,
};
use crate::describe::{Blocks, Names};
use crate::setup::AmpStyle;

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
    /// The router's `[E, H]` weight belongs to an `nn.Linear` (or a subclass) at this path in
    /// the layer, which PEFT's `all-linear` and list targets see as a module (Llama 4's
    /// `Llama4Router(nn.Linear)` at `feed_forward.router`, Gemma 4's `router.proj`); `None`
    /// where it is a parameter of a custom router module (transformers 5's `*TopKRouter`).
    pub router_linear: Option<&'static str>,
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

impl Moe {
    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        match self.dispatch {
            Dispatch::GroupedMm => "MoE: grouped_mm_experts_forward (transformers integrations/moe.py): sorted [tokens x top_k, hidden] rows",
            Dispatch::AllExperts => "MoE: Llama4TextMoe, every token through every expert",
            Dispatch::Loop => "MoE: a Python loop over the experts hit",
        }
    }
}

impl Mechanism for Moe {
    /// Router, expert banks, latent projections, shared experts and their gate.
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        let (e, i) = (self.experts, self.expert_intermediate);
        let r = Component::RoutedExperts;
        let inner = self.latent.unwrap_or(h);
        out(Tensor {
            component: Component::Router,
            kind: TensorKind::Linear,
            rows: e,
            cols: h,
            fp32: self.router_param_fp32,
            tp: false,
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
            tp: true,
        };
        out(bank(up, inner));
        if self.expert_bias {
            out(col_bias(r, e * up));
        }
        out(bank(inner, i));
        if self.expert_bias {
            out(vector(r, e * inner));
        }
        if let Some(l) = self.latent {
            out(lin(r, l, h));
            out(lin(r, h, l));
            if self.latent_bias {
                out(col_bias(r, l));
                out(vector(r, h));
            }
        }
        if let Some(s) = self.shared {
            s.tensors_as(h, Component::SharedExperts, out);
        }
        if self.shared_gate {
            out(lin(Component::SharedExperts, 1, h));
        }
    }

    /// Matmul parameters one token runs through (top-k experts, or all of them where the
    /// dispatch computes every expert; the router; shared experts), for FLOPs.
    fn active_params(&self, h: u64) -> u64 {
        let m = self;
        let per = (if m.gated { 3 } else { 2 }) * m.latent.unwrap_or(h) * m.expert_intermediate;
        let run = if m.dispatch == Dispatch::AllExperts {
            m.experts
        } else {
            m.top_k
        };
        run * per + m.experts * h + m.shared.as_ref().map_or(0, |d| d.active_params(h))
    }

    fn sites(&self, n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let m = self;
        let inner = m.latent.unwrap_or(h);
        let (e, i) = (m.experts, m.expert_intermediate);
        out(Site {
            path: match m.router_linear {
                Some(p) => p.to_string(),
                None => format!("{}.gate.weight", n.mlp),
            },
            out: e,
            inp: h,
            kind: if m.router_linear.is_some() {
                SiteKind::Module
            } else {
                SiteKind::Param
            },
            component: Component::Router,
            input: 4,
        });
        let up = if m.gated { 2 * i } else { i };
        let up_name = if m.gated { "gate_up_proj" } else { "up_proj" };
        out(Site {
            path: format!("{}.experts.{up_name}", n.mlp),
            out: up,
            inp: inner,
            kind: SiteKind::Experts(e),
            component: Component::RoutedExperts,
            input: 10,
        });
        out(Site {
            path: format!("{}.experts.down_proj", n.mlp),
            out: inner,
            inp: i,
            kind: SiteKind::Experts(e),
            component: Component::RoutedExperts,
            input: 11,
        });
        if let Some(l) = m.latent {
            let mut module = super::module_sites(n.mlp, Component::RoutedExperts, out);
            module("fc1_latent_proj", l, h, 4);
            module("fc2_latent_proj", h, l, 12);
        }
        if let Some(s) = m.shared {
            let prefix = format!("{}.shared_experts", n.mlp);
            s.sites_as(n, &prefix, Component::SharedExperts, 4, h, out);
        }
        if m.shared_gate {
            super::module_sites(n.mlp, Component::SharedExperts, out)(
                "shared_expert_gate",
                1,
                h,
                4,
            );
        }
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
pub(crate) fn train(mo: &Moe, b: &Blocks, c: &Ctx, norm: bool, p: &mut Parts) -> Extra {
    let cmp = c.cmp;
    let hidden = b.hidden;
    let h = mo.latent.unwrap_or(hidden);
    let e = mo.experts;
    let i = mo.expert_intermediate.div_ceil(c.t);
    let up = if mo.gated { 2 * i } else { i };
    if norm {
        super::norm::train(b, c, p);
        p.push(c.rep(hidden, cmp), false); // router and experts' input
    }
    // Router.
    let fp32_router = mo.correction_bias;
    if fp32_router {
        p.push(m(&[c.tok, hidden, 4]), false); // hidden_states.type(float32)
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
        .rep(hidden, c.res + cmp)
        .saturating_add(m(&[c.tok, e, 4 + cmp]))
        .saturating_add(m(&[rows, h, cmp]))
        .saturating_add(m(&[rows, up + 2 * i, cmp]).max(m(&[rows, h, cmp + 2 * wb])));
    if let Some(s) = mo.shared {
        // The shared expert reads the same normed input (no second norm).
        let (b2, i2) = super::dense::train(&s, b, c, true, p);
        bwd = bwd.max(b2);
        infer = infer.saturating_add(i2.saturating_sub(c.rep(hidden, c.res + cmp)));
        if mo.shared_gate {
            p.push(m(&[c.tok, cmp, 2]), false); // sigmoid(shared_expert_gate(x))
        }
    }
    let per_token = infer / c.tok.max(1);
    // `generate` decodes inside `_optimize_model_for_decode` (generation/utils.py, 5.24), which
    // on any device but the CPU switches `grouped_mm` experts to `batched_mm_experts_forward`:
    // per step, `gate_up_proj[expert_ids]` `[b·top_k, 2I, H]` and then, while it is alive,
    // `down_proj[expert_ids]` `[b·top_k, H, I]`: one copy of an expert's weights per routed row.
    let decode_experts = if mo.dispatch == Dispatch::GroupedMm {
        [
            m(&[c.b, mo.top_k, up, h, cmp]),
            m(&[c.b, mo.top_k, h, i, cmp]),
        ]
    } else {
        [0, 0]
    };
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd,
        fwd,
        infer,
        kept: 0,
        decode: per_token.saturating_mul(c.b),
        decode_experts,
        decode_per_ctx: 0,
    }
}

/// Whether [`prefill`] walks this mixture's prefill tensor by tensor: `grouped_mm` dispatch over
/// the hidden width (no latent projections) with plain gated or ungated experts. The others
/// (Llama 4's every-expert path, the loop, Nemotron-H's latent, gpt-oss's clamped SwiGLU with
/// biases) keep their inference high point as one temporary.
pub(crate) fn prefill_walked(mo: &Moe) -> bool {
    mo.dispatch == Dispatch::GroupedMm && mo.latent.is_none() && !mo.expert_bias
}

/// The prefill of a mixture of experts (inference, no grad) as PyTorch eager makes and frees
/// its tensors, the norm first; returns the slot of its output `[T, H]`. Read from transformers
/// 5.24 and held to `tests/engines/gen_trace.py` (every storage of the real modules on the meta
/// device):
///
/// - the router: its logits `[T, E]` (fp32 from an fp32 copy of the input where the router runs
///   in fp32, `DeepseekV3TopkRouter`) kept until the block returns, an fp32 softmax or sigmoid
///   and the top-k's values, indices and normalised weights (the weights and indices kept);
/// - `grouped_mm_experts_forward` (integrations/moe.py): the sort's two `[S]` int64 outputs
///   (`S = T · top_k`), `perm // top_k`, the gathered rows `[S, H]` and the routing weights
///   `sample_weights[perm]` `[S]`, all kept to the function's end; the up `grouped_mm` `[S, 2I]`,
///   the activation and the product `[S, I]` (the up output freed after the product), the down
///   `grouped_mm` `[S, H]` (kept), its product with the weights `[S, H]` (fp32 when the routing
///   weights are), `inv_perm`, the un-permuted copy `[S, H]` (the product freed), the sum over
///   top-k `[T, H]` and its cast back to the hidden dtype;
/// - a shared expert after the routed ones (DeepSeek-V3's `hidden_states + shared_experts(
///   residuals)`), or before them with its sigmoid gate (Qwen2/3-MoE-style
///   `shared_expert_output = self.shared_expert(hidden_states)` first, Qwen3.5-MoE, Qwen3-Next).
pub(crate) fn prefill(mo: &Moe, g: &mut Prog, b: &Blocks, c: &Ctx) -> u8 {
    let (tok, cmp) = (c.tok, c.cmp);
    let h = b.hidden;
    let e = mo.experts;
    let k = mo.top_k;
    let i = mo.expert_intermediate.div_ceil(c.t);
    let up = if mo.gated { 2 * i } else { i };
    let s = m(&[tok, k]);
    let wb = if mo.router_weights_fp32 { 4 } else { cmp };
    let wo = cmp.max(wb);
    let n2 = super::norm::prefill(g, b.norm, m(&[tok, h]), cmp, true);
    let shared_first = mo.shared_gate;
    let shared = |g: &mut Prog, d: &Dense| -> u8 {
        let fb = m(&[tok, d.intermediate.div_ceil(c.t), cmp]);
        let u = g.make(fb);
        let a = g.make(fb);
        g.free(u);
        let p = if d.gated {
            let u2 = g.make(fb);
            let p = g.make(fb);
            g.free(a);
            g.free(u2);
            p
        } else {
            a
        };
        let o = g.make(m(&[tok, h, cmp]));
        g.free(p);
        o
    };
    let sh_out = match mo.shared {
        Some(d) if shared_first => Some(shared(g, &d)),
        _ => None,
    };
    // The router.
    let fp32_router = mo.correction_bias || mo.router_param_fp32;
    let logits = if fp32_router {
        let xin = g.make(m(&[tok, h, 4])); // hidden_states.type(torch.float32)
        let l = g.make(m(&[tok, e, 4]));
        g.free(xin);
        l
    } else {
        g.make(m(&[tok, e, cmp]))
    };
    let p1 = g.make(m(&[tok, e, 4])); // the fp32 copy, or the sigmoid
    let p2 = g.make(m(&[tok, e, 4])); // the softmax, or the biased scores
    g.free(p1);
    let vals = g.make(m(&[tok, k, 4]));
    let idx = g.make(m(&[tok, k, 8]));
    let w = g.make(m(&[tok, k, wb]));
    g.free(vals);
    g.free(p2);
    // grouped_mm_experts_forward.
    let so1 = g.make(m(&[s, 8]));
    let so2 = g.make(m(&[s, 8]));
    let pk = g.make(m(&[s, 8]));
    let gx = g.make(m(&[s, h, cmp]));
    g.free(pk);
    let sw = g.make(m(&[s, wb]));
    let off = g.make(m(&[e, 4]));
    let u = g.make(m(&[s, up, cmp]));
    let a = g.make(m(&[s, i, cmp]));
    let p = if mo.gated {
        let p = g.make(m(&[s, i, cmp]));
        g.free(a);
        p
    } else {
        a
    };
    g.free(u);
    let dn = g.make(m(&[s, h, cmp]));
    g.free(p);
    let wt = g.make(m(&[s, h, wo]));
    let ip = g.make(m(&[s, 8]));
    let ix = g.make(m(&[s, h, wo]));
    g.free(wt);
    let sm = g.make(m(&[tok, h, wo]));
    let routed = if wo != cmp {
        let cs = g.make(m(&[tok, h, cmp]));
        g.free(sm);
        cs
    } else {
        sm
    };
    for t in [so1, so2, gx, sw, off, dn, ix, ip] {
        g.free(t);
    }
    let out = match (mo.shared, sh_out) {
        (Some(_), Some(so)) => {
            let gate = if mo.shared_gate {
                let gm = g.make(m(&[tok, cmp]));
                let sg = g.make(m(&[tok, cmp]));
                g.free(gm);
                let prod = g.make(m(&[tok, h, cmp]));
                g.free(sg);
                g.free(so);
                prod
            } else {
                so
            };
            let o = g.make(m(&[tok, h, cmp]));
            g.free(routed);
            g.free(gate);
            o
        }
        (Some(d), None) => {
            let so = shared(g, &d);
            let o = g.make(m(&[tok, h, cmp]));
            g.free(so);
            g.free(routed);
            o
        }
        _ => routed,
    };
    g.free(logits);
    g.free(w);
    g.free(idx);
    g.free(n2);
    out
}

impl Moe {
    /// Host work of the sparse block in one `generate` forward (transformers 5.24): its
    /// reshapes; the router (softmax top-k: `F.linear`, fp32 softmax, `topk`, renormalise, 7
    /// kernels; DeepSeek's grouped sigmoid router with its correction bias, kept in fp32, 19;
    /// gpt-oss's top-k then softmax with a bias, 3); the activation module of
    /// `_default_apply_gate` (gpt-oss writes its own gate); the experts as the phase runs them;
    /// the fp32 routing weights' cast; the shared experts and their sum.
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let mut w = Host::module(0.0, 2.0, 0.0);
        let views = if self.fp32_router_input() {
            6.0
        } else if self.router_bias {
            1.0
        } else {
            2.0
        };
        w.add(Host::module(self.router_kernels(), views, 0.0));
        let bias = f64::from(self.expert_bias);
        if !self.expert_bias && self.dispatch != Dispatch::Loop {
            w.add(Host::module(1.0, 0.0, 0.0));
        }
        w.add(match (self.dispatch, c.phase) {
            // batched_mm (the decode loop, `_optimize_model_for_decode`): repeat_interleave, two
            // gathers of expert weights, two bmm, the gate, the weighting and the sum over top-k
            // (gpt-oss: biases, clamps).
            (Dispatch::GroupedMm, Phase::Decode) => {
                Host::module(8.0 + 10.0 * bias, 12.0 + bias, 9.0 + 8.0 * bias)
            }
            // grouped_mm: sort, the gathers, histc, cumsum, two grouped GEMMs, the gate, the
            // weighting, the inverse permutation, the sum.
            (Dispatch::GroupedMm, Phase::Prefill) => {
                Host::module(16.0 + 10.0 * bias, 7.0 - bias, 24.0 + 9.0 * bias)
            }
            // Llama 4: every token through every expert.
            (Dispatch::AllExperts, _) => Host::module(10.0, 8.0, 2.0),
            // The per-expert Python loop after `nonzero` (a sync); each expert hit adds
            // [`Moe::loop_host`].
            (Dispatch::Loop, _) => {
                let mut l = Host::module(4.0, 4.0, 0.0);
                l.syncs += 1.0;
                l
            }
        });
        if self.router_weights_fp32 && self.dispatch == Dispatch::GroupedMm {
            w.add(Host::op(1.0, 0.0));
        }
        if let Some(s) = self.shared {
            w.add(Host::op(1.0, 0.0));
            w.add(s.generate_host());
        }
        w
    }

    /// Kernels the router launches, its GEMM included (transformers 5.24, counted on the CPU
    /// and the meta device): softmax top-k (`F.linear`, fp32 softmax, `topk`, renormalise) 7;
    /// DeepSeek's group-limited sigmoid router with its correction bias, run in fp32 (the
    /// input's cast, sigmoid, the bias, the groups' top-2 sums and top-k, the group mask's
    /// `zeros_like`/`scatter_`/`masked_fill`, `topk`, `gather`, the renormalisation and the
    /// routed scaling) 19; gpt-oss's linear with a bias, `topk`, then softmax, 3.
    pub fn router_kernels(&self) -> f64 {
        if self.fp32_router_input() {
            19.0
        } else if self.router_bias {
            3.0
        } else {
            7.0
        }
    }

    /// The router casts its input to fp32 (`F.linear(hidden_states.type(torch.float32), ...)`):
    /// the routers with a correction bias or fp32 parameters.
    pub fn fp32_router_input(&self) -> bool {
        self.correction_bias || self.router_param_fp32
    }

    /// Expected experts that receive at least one of `rows` routed rows, routed uniformly at
    /// random (a model built by `from_config`); at least one.
    pub fn occupied(&self, rows: f64) -> f64 {
        let e = self.experts as f64;
        (e * (1.0 - (1.0 - 1.0 / e).powf(rows))).max(1.0)
    }

    /// Host work of the `Dispatch::Loop` path's experts for `tokens` tokens: per expert hit,
    /// `where` (a sync), the gather, two GEMMs, the activation and product, the weighting and
    /// `index_add_`. None for the other dispatches.
    pub fn loop_host(&self, tokens: f64) -> Host {
        if self.dispatch != Dispatch::Loop {
            return Host::default();
        }
        Host {
            kernels: 8.0,
            views: 4.0,
            py: 2.0,
            syncs: 1.0,
            ..Host::default()
        }
        .times(self.occupied(tokens * self.top_k as f64))
    }

    /// Whether `generate` switches these experts from `grouped_mm` to `batched_mm` for its
    /// decode loop (`_optimize_model_for_decode`).
    pub fn switched_for_decode(&self) -> bool {
        self.dispatch == Dispatch::GroupedMm
    }
}
