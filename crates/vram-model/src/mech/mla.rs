//! Multi-head latent attention (DeepSeek-V3's `DeepseekV3Attention`, Kimi-K2, GLM-5) and the
//! lightning indexer of DeepSeek sparse attention: the cache keeps the key/value latent, the
//! shared rotary key and the indexer's keys; every step re-expands K/V from the latent.

use serde::Serialize;

use super::host::{Host, HostCtx};
use super::norm::rms_norm_host;
use super::step::{m, Ctx, Extra, Parts, Prog, CACHE};
use super::{lin, vector, CacheKind, CacheLayout, CacheTensor, Component, Mechanism, Site, Tensor};
use crate::describe::{Blocks, Names};

/// Multi-head latent attention (DeepSeek-V3 `DeepseekV3Attention`, Kimi-K2, GLM-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// Heads.
    pub heads: u64,
    /// Rank of the query compression (`q_a_proj`/`q_b_proj`), or a plain `q_proj` if `None`.
    pub q_lora_rank: Option<u64>,
    /// Rank of the key/value latent that the cache keeps.
    pub kv_lora_rank: u64,
    /// Per-head query/key size without rotary positions.
    pub qk_nope_head_dim: u64,
    /// Per-head (and shared-key) rotary size.
    pub qk_rope_head_dim: u64,
    /// Per-head value size.
    pub v_head_dim: u64,
    /// Biases on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj` (`attention_bias`).
    pub bias: bool,
    /// DeepSeek sparse attention's indexer (GLM-5, DeepSeek-V3.2).
    pub indexer: Option<Indexer>,
}

/// The lightning indexer of DeepSeek sparse attention (`GlmMoeDsaIndexer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Indexer {
    /// Indexer heads (`index_n_heads`).
    pub heads: u64,
    /// Indexer head size (`index_head_dim`), cached per token.
    pub head_dim: u64,
    /// Tokens each query keeps (`index_topk`).
    pub topk: u64,
    /// Parameters of the indexer module (its projections and norm), from the family's code.
    pub params: u64,
}

impl Mla {
    /// The tensors its cache holds per sequence: the latent, the rotary key and, with DSA, the
    /// indexer's keys (each a plain tensor tensor parallelism does not split).
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        out(CacheTensor::grow(self.kv_lora_rank, None, 0));
        out(CacheTensor::grow(self.qk_rope_head_dim, None, 0));
        if let Some(ix) = self.indexer {
            out(CacheTensor::grow(ix.head_dim, None, 0));
        }
    }

    /// Its cache as a serving engine pages it: the latent, and the rotary key with DSA's
    /// indexer keys beside it.
    pub fn cache_layout(&self) -> CacheLayout {
        CacheLayout::Latent {
            latent: self.kv_lora_rank,
            rope: self.qk_rope_head_dim + self.indexer.map_or(0, |ix| ix.head_dim),
        }
    }

    /// Its cache layer's class: full, or indexed with DSA.
    pub fn cache_kind(&self) -> CacheKind {
        if self.indexer.is_some() {
            CacheKind::Indexed
        } else {
            CacheKind::Full
        }
    }

    /// Multi-head attention of its heads and query/key size (what it amounts to once K/V are
    /// expanded from the latent).
    pub fn as_multi_head(&self) -> super::Attention {
        super::Attention::new(
            self.heads,
            self.heads,
            self.qk_nope_head_dim + self.qk_rope_head_dim,
        )
    }

    /// What an estimate says of how it is modelled.
    pub fn note(&self) -> &'static str {
        "MLA: latent cache; K/V re-expanded by kv_b_proj over the whole context at every step (DeepseekV3Attention.expand_kv)"
    }
}

impl Mechanism for Mla {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        let (c, m) = (Component::Mixer, self);
        let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        match m.q_lora_rank {
            Some(r) => {
                out(lin(c, r, h));
                if m.bias {
                    out(vector(c, r));
                }
                out(vector(c, r)); // q_a_layernorm
                out(lin(c, m.heads * qk, r));
            }
            None => out(lin(c, m.heads * qk, h)),
        }
        out(lin(c, m.kv_lora_rank + m.qk_rope_head_dim, h));
        if m.bias {
            out(vector(c, m.kv_lora_rank + m.qk_rope_head_dim));
        }
        out(vector(c, m.kv_lora_rank)); // kv_a_layernorm
        out(lin(
            c,
            m.heads * (m.qk_nope_head_dim + m.v_head_dim),
            m.kv_lora_rank,
        ));
        out(lin(c, h, m.heads * m.v_head_dim));
        if m.bias {
            out(vector(c, h));
        }
        if let Some(ix) = m.indexer {
            // The DSA indexer (`DeepseekV32Indexer`, transformers 5.24): `wq_b` and `wk` are
            // linears a block-FP8 checkpoint stores packed, `k_norm` a LayerNorm (weight and
            // bias), `weights_proj` a linear stored and held unquantized (DeepSeek-V3.2's
            // headers: `wq_b`/`wk` F8_E4M3 with `weight_scale_inv`, `weights_proj` BF16;
            // transformers' quantizers skip it as a `_keep_in_fp32_modules` entry, vLLM's and
            // SGLang's indexers make it with `quant_config=None`), so a plain tensor here.
            // Every rank keeps all of it (`ReplicatedLinear`).
            let q_in = m.q_lora_rank.unwrap_or(h);
            let whole = |t: Tensor| Tensor { tp: false, ..t };
            out(whole(lin(c, ix.heads * ix.head_dim, q_in)));
            out(whole(lin(c, ix.head_dim, h)));
            out(vector(c, 2 * ix.head_dim));
            out(vector(c, ix.heads * h));
            debug_assert_eq!(
                ix.params,
                ix.heads * ix.head_dim * q_in + ix.head_dim * h + 2 * ix.head_dim + ix.heads * h
            );
        }
    }

    /// FLOPs per token of the scores and the value product over `ctx` earlier tokens (the
    /// indexer's top-k of them with DSA).
    fn mixing_flops_per_token(&self, ctx: u64) -> u64 {
        let seen = match self.indexer {
            Some(ix) => ctx.min(ix.topk),
            None => ctx,
        };
        2 * self.heads * seen * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
    }

    fn sites(&self, _n: &Names, h: u64, out: &mut impl FnMut(Site)) {
        let m = self;
        let mut site = super::module_sites("self_attn", Component::Mixer, out);
        let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        match m.q_lora_rank {
            Some(r) => {
                site("q_a_proj", r, h, 0);
                site("q_b_proj", m.heads * qk, r, 2);
            }
            None => site("q_proj", m.heads * qk, h, 0),
        }
        site(
            "kv_a_proj_with_mqa",
            m.kv_lora_rank + m.qk_rope_head_dim,
            h,
            0,
        );
        site(
            "kv_b_proj",
            m.heads * (m.qk_nope_head_dim + m.v_head_dim),
            m.kv_lora_rank,
            3,
        );
        site("o_proj", h, m.heads * m.v_head_dim, 1);
        if let (Some(ix), Some(r)) = (m.indexer, m.q_lora_rank) {
            // The indexer's packed linears (`wq_b` reads the normed q latent, `wk` the hidden
            // states). Its `weights_proj` is no site: transformers 5.24's quantizers leave it
            // whole (`_keep_in_fp32_modules = ["indexer.weights_proj"]` joins their
            // `modules_to_not_convert`), though PEFT's `all-linear` would also take it.
            site("indexer.wq_b", ix.heads * ix.head_dim, r, 2);
            site("indexer.wk", ix.head_dim, h, 0);
        }
    }
}

/// Multi-head latent attention (`DeepseekV3Attention.forward`, modeling_deepseek_v3.py): the
/// q LoRA (`q_a_proj` → `q_a_layernorm` → `q_b_proj`), the compressed KV (`kv_a_proj_with_mqa`
/// → `kv_a_layernorm`), the cache update on the latent, then `expand_kv`: `kv_b_proj` over every
/// cached token (`[b, h, ctx, nope + v]`, values a view of it) and keys built in a `new_empty`
/// `[b, h, ctx, nope + rope]`; SDPA (head sizes differ for q/k and v: the memory-efficient
/// kernel, which saves q, k, v, output and log-sum-exp like the fused ones).
pub(crate) fn train(a: &Mla, b: &Blocks, c: &Ctx, p: &mut Parts) -> Extra {
    let a = *a;
    let hidden = b.hidden;
    let heads = a.heads.div_ceil(c.t);
    let qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    let kv_out = heads * (a.qk_nope_head_dim + a.v_head_dim);
    let latent = a.kv_lora_rank + a.qk_rope_head_dim;
    let cmp = c.cmp;
    super::norm::train(b, c, p);
    p.push(c.rep(hidden, cmp), false); // q_a_proj / kv_a_proj_with_mqa input
    let mut q_lora = 0;
    if let Some(r) = a.q_lora_rank {
        super::norm::train_rms(c, r, p); // q_a_layernorm; its output is q_b_proj's input
        q_lora = r;
    }
    super::norm::train_rms(c, a.kv_lora_rank, p); // kv_a_layernorm; its output is kv_b_proj's input
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
        .rep(hidden, c.res + cmp)
        .saturating_add(q_all)
        .saturating_add(expanded)
        .saturating_add(m(&[c.tok, heads * a.v_head_dim, cmp]));
    Extra {
        bwd_parts: [0; super::step::BWD_PARTS],
        bwd: q_all.saturating_add(expanded),
        fwd: 0,
        infer,
        kept,
        decode: m(&[
            c.b,
            hidden * 2 + heads * qk * 2 + q_lora + latent + heads * a.v_head_dim,
            cmp,
        ]),
        // Every decode step re-expands the whole cached latent: kv_b_proj's output and keys.
        decode_per_ctx: m(&[c.b, kv_out + heads * qk, cmp]),
        decode_experts: [0, 0],
    }
}

/// Whether [`prefill`] walks this attention's prefill tensor by tensor (without DeepSeek sparse
/// attention's indexer, whose tensors it does not list).
pub(crate) fn prefill_walked(a: &Mla) -> bool {
    a.indexer.is_none()
}

/// The prefill of multi-head latent attention (inference, no grad) as PyTorch eager makes and
/// frees its tensors (`DeepseekV3Attention.forward`, modeling_deepseek_v3.py, transformers
/// 5.24), the input norm first; returns the slot of `o_proj`'s output `[T, H]`. Held to
/// `tests/engines/gen_trace.py`:
///
/// - the normed input (the decoder layer's local until the attention returns); `q_a_proj`,
///   `q_a_layernorm` (the projection freed after it), `q_b_proj` `[T, h·(nope + rope)]` (the
///   norm's output freed), or one `q_proj`; `kv_a_proj_with_mqa` `[T, latent + rope]`, and
///   `kv_a_layernorm` over its latent slice;
/// - rotary in the interleaved form (`apply_rotary_pos_emb_interleave`, DeepseekV3Config's
///   default `rope_interleave=True`): `q1·cos`, `q2·sin`, their difference, `q2·cos`, `q1·sin`,
///   their sum (each half the rotary width), then the `cat`; the same for the shared key;
/// - the cache update (`torch.cat` of the normed latent and the rotated key into the cache),
///   after which the layer's own latent and rotated key go;
/// - `query_states = cat(q_pass, q_rot)`; `expand_kv`: `kv_b_proj` over the cached latent
///   `[T, h·(nope + v)]` and `key_states` (`new_empty`, filled); SDPA's output `[b, h, s, v]`
///   and `reshape(...).contiguous()`'s copy (the output freed); `o_proj`; then every local of
///   the attention goes with its frame.
pub(crate) fn prefill(a: &Mla, g: &mut Prog, b: &Blocks, c: &Ctx, cache: &[u64]) -> u8 {
    let (tok, cmp) = (c.tok, c.cmp);
    let hidden = b.hidden;
    let heads = a.heads.div_ceil(c.t);
    let qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    let kv_out = heads * (a.qk_nope_head_dim + a.v_head_dim);
    let n1 = super::norm::prefill(g, b.norm, m(&[tok, hidden]), cmp, true);
    let q = match a.q_lora_rank {
        Some(r) => {
            let qa = g.make(m(&[tok, r, cmp]));
            let qn = super::norm::prefill(g, b.norm, m(&[tok, r]), cmp, true);
            g.free(qa);
            let q = g.make(m(&[tok, heads * qk, cmp]));
            g.free(qn);
            q
        }
        None => g.make(m(&[tok, heads * qk, cmp])),
    };
    let kva = g.make(m(&[tok, a.kv_lora_rank + a.qk_rope_head_dim, cmp]));
    let kn = super::norm::prefill(g, b.norm, m(&[tok, a.kv_lora_rank]), cmp, true);
    // Interleaved rotary over `heads` heads of the rotary width: four products, a difference and
    // a sum (half the width each), then their `cat`.
    let rotary = |g: &mut Prog, heads: u64| -> u8 {
        let half = m(&[tok, heads, a.qk_rope_head_dim / 2, cmp]);
        let t1 = g.make(half);
        let t2 = g.make(half);
        let d = g.make(half);
        g.free(t1);
        g.free(t2);
        let t3 = g.make(half);
        let t4 = g.make(half);
        let s = g.make(half);
        g.free(t3);
        g.free(t4);
        let e = g.make(m(&[tok, heads, a.qk_rope_head_dim, cmp]));
        g.free(s);
        g.free(d);
        e
    };
    let qrot = rotary(g, heads);
    let krot = rotary(g, 1);
    for (j, bytes) in cache.iter().enumerate() {
        g.ops.push((CACHE + j as u8, *bytes));
    }
    g.free(kn);
    g.free(krot);
    let qs = g.make(m(&[tok, heads * qk, cmp])); // query_states
    let kv = g.make(m(&[tok, kv_out, cmp])); // kv_b_proj over the cached latent
    let ks = g.make(m(&[tok, heads * qk, cmp])); // key_states
    let out = g.make(m(&[tok, heads * a.v_head_dim, cmp]));
    let at = g.make(m(&[tok, heads * a.v_head_dim, cmp])); // reshape(...).contiguous()
    g.free(out);
    let y = g.make(m(&[tok, hidden, cmp]));
    for s in [at, q, qrot, kva, qs, ks, kv, n1] {
        g.free(s);
    }
    y
}

impl Mla {
    /// Host work of `DeepseekV3Attention` in one `generate` forward beyond its linears
    /// (transformers 5.24): the q/kv splits, `k_pe` rotary in the interleaved form, the
    /// expanded keys' `new_empty`/`copy_`, the cache update, SDPA, casts; its q_a and kv_a
    /// layer norms.
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let p = c.prefill();
        let mut w = Host::module(
            if p { 38.0 } else { 31.0 },
            if p { 36.0 } else { 34.0 },
            0.0,
        );
        let norms = 1.0 + f64::from(self.q_lora_rank.is_some());
        w.add(rms_norm_host().times(norms));
        w
    }
}
