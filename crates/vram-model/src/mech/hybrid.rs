//! Softmax attention and Mamba2 side by side in one layer (Falcon-H1's `FalconH1DecoderLayer`:
//! `mamba(h) · ssm_out_multiplier + self_attn(h · attention_in_multiplier) ·
//! attention_out_multiplier`, both reading the same normed input `h`, their sum added to the
//! residual stream before the feed-forward). Each half is its own mechanism ([`Attention`],
//! [`Mamba2`]); this module says what the pair is: both tensor sets, both caches (the layer's
//! `LinearAttentionAndFullAttentionLayer` holds keys and values and the Mamba2 states), both
//! sets of LoRA sites, and the inference high point of running one after the other. The µP
//! multipliers scale activations and add no parameters; the Mamba2 half's `mup_vector` is a
//! non-persistent buffer of `in_proj`'s width (counted by no `parameters()`).

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::step::{m, Ctx, Extra, Parts};
use super::{Attention, CacheLayout, CacheTensor, Mamba2, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};

/// Attention and Mamba2 run in parallel on one normed input, outputs summed (Falcon-H1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hybrid {
    /// The attention half (`self_attn`).
    pub attn: Attention,
    /// The Mamba2 half (`mamba`).
    pub mamba: Mamba2,
}

impl Hybrid {
    /// Its cache per sequence: the attention's keys and values, then the Mamba2 convolution
    /// and fp32 SSM states.
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        self.attn.cache_tensors(out);
        self.mamba.cache_tensors(out);
    }

    /// Both caches as a serving engine pages them.
    pub fn cache_layouts(&self, out: &mut impl FnMut(CacheLayout)) {
        if let Some(l) = self.attn.cache_layout() {
            out(l);
        }
        out(self.mamba.cache_layout());
    }

    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        "attention and Mamba2 in parallel in each layer (Falcon-H1): both caches; both halves' steps composed from their modules (Mamba2 through its torch fallback), not measured on a GPU"
    }
}

impl Mechanism for Hybrid {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        // Module order of FalconH1DecoderLayer: `mamba`, then `self_attn`.
        self.mamba.tensors(h, out);
        self.attn.tensors(h, out);
    }

    /// FLOPs per token of both halves' token interaction.
    fn mixing_flops_per_token(&self, ctx: u64) -> u64 {
        self.attn.mixing_flops_per_token(ctx) + self.mamba.mixing_flops_per_token(ctx)
    }

    fn sites(&self, n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        // The Mamba2 half is the layer's `mamba` module (Nemotron-H names it `mixer`).
        self.mamba.sites(n, h, &mut |s| {
            let path = match s.path.strip_prefix("mixer.") {
                Some(rest) => format!("mamba.{rest}"),
                None => s.path.clone(),
            };
            out(Site { path, ..s })
        });
        // The attention half reads its own copy of the input (`h · attention_in_multiplier`).
        self.attn.sites(n, h, &mut |s| {
            out(Site {
                input: s.input + 2,
                ..s
            })
        });
    }
}

/// A step of the pair as transformers 5.24 runs it (the Mamba2 half through its torch
/// fallback): the layer's one RMSNorm, the Mamba2 half's tensors (`mamba2::train`, its input
/// `h · ssm_in_multiplier` standing for the normed input it saves), then the attention half's
/// (`attention::train` less its own input norm, which the pair shares: its projections save
/// `h · attention_in_multiplier`, their own copy). In a forward without autograd the Mamba2
/// half runs first and its output `[tokens, hidden]` is held while the attention half runs.
/// Composed from the two mechanisms' modules, not measured on a GPU.
pub(crate) fn train(hy: &Hybrid, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let mb = super::mamba2::train(&hy.mamba, b, c, p);
    let mut norm = Parts::default();
    super::norm::train(b, c, &mut norm);
    let mut attn = Parts::default();
    let at = super::attention::train(&hy.attn, b, c, &mut attn);
    for i in norm.n as usize..attn.n as usize {
        p.push(attn.bytes[i], attn.s2 & (1 << i) != 0);
    }
    let held = c.rep(b.hidden, c.cmp);
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd: mb.bwd.max(at.bwd),
        fwd: mb.fwd.max(held.saturating_add(at.fwd)),
        infer: mb
            .infer
            .max(held.saturating_add(held).saturating_add(at.infer)),
        kept: mb.kept.saturating_add(at.kept),
        decode: mb
            .decode
            .max(m(&[c.b, b.hidden, c.cmp]).saturating_add(at.decode)),
        decode_per_ctx: at.decode_per_ctx,
        decode_experts: [0, 0],
    }
}

impl Hybrid {
    /// Host work of Falcon-H1's pair in one `generate` forward beyond its linears: the Mamba2
    /// half as [`Mamba2::mixer_host`] (its gated norm is off by default), the attention half as
    /// a plain attention module ([`Attention::module_host`]), and the µP multipliers' four
    /// products and the halves' sum (not counted on the CPU).
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let mut w = Mamba2::mixer_host(c.prefill());
        w.add(Attention::module_host(c.prefill()));
        w.add(Host::module(5.0, 0.0, 0.0));
        w
    }
}
