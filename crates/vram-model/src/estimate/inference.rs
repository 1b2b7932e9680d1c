//! The inference walk: one `generate` call of transformers 5.x — the prompt's prefill, then one
//! forward per new token — with its KV cache.
//!
//! Each decoder layer of the prefill is walked op by op ([`prefill_ops`]): the tensors PyTorch
//! eager allocates and frees in the order the modelling code creates them (norms through an fp32
//! copy, rotary embeddings through `rotate_half`'s `cat`, the cache update, SDPA and its
//! `transpose(1, 2).contiguous()`, the feed-forward). That order matters for the reserved bytes:
//! the cache tensors kept by each layer land in blocks the previous layer's temporaries left.
//!
//! The dynamic cache (`DynamicLayer.update` in `cache_utils.py`) grows by `torch.cat` at every
//! token, so each decode step allocates every layer's keys and values one token longer and then
//! frees the old ones. `generate` asks the model for the last position's logits only
//! (`logits_to_keep=1`) and copies them to fp32 (`next_token_logits = outputs.logits[:, -1, :]
//! .to(copy=True, dtype=torch.float32)` in `GenerationMixin._sample`).

use super::*;
use crate::blocks::{Act, Block, Blocks, NormKind, Residual};
use crate::setup::{Attention, DecodeReplay, Infer, KvCache, SAMPLED_DECODE_STEPS};

/// One step of a layer's op program: a tensor in slot `.0` is created with `.1` bytes, or the
/// tensor in slot `.0` is released (`.1 == FREE`).
type Op = (u8, u64);
const FREE: u64 = u64::MAX;

/// The decode steps (of 1..=`steps`) a walk of `generate` takes.
///
/// The peak walk (`full` false) takes the first two and the last: the cache only grows, so the
/// last step holds the most, and the first two are where a sliding layer first drops the prompt
/// beyond its window. Where every step allocates the same tensors (`identical`: a static cache
/// with constant step tensors), an allocator replay takes the first two and the last two: the
/// later steps reuse the blocks the first ones freed. Otherwise an allocator replay takes every
/// step under [`DecodeReplay::Every`], or while there are at most [`SAMPLED_DECODE_STEPS`]; beyond
/// that, [`SAMPLED_DECODE_STEPS`] steps: the first two, the last two, and the others spaced
/// evenly between, each reallocating the cache to its length at that step.
/// `tests/it/generate_replay.rs` measures what the sampling changes against every step.
pub(super) fn decode_steps(
    steps: u64,
    full: bool,
    identical: bool,
    replay: DecodeReplay,
) -> Vec<u64> {
    let n = SAMPLED_DECODE_STEPS;
    let mut v: Vec<u64> = if steps <= 2 {
        (1..=steps).collect()
    } else if !full {
        vec![1, 2, steps]
    } else if identical {
        vec![1, 2, steps - 1, steps]
    } else if replay == DecodeReplay::Every || steps <= n {
        (1..=steps).collect()
    } else {
        // 1 and 2, `n - 4` evenly spaced strictly between them and the last two, the last two.
        let inner = n - 4;
        [1, 2]
            .into_iter()
            .chain((1..=inner).map(|i| 2 + i * (steps - 3) / (inner + 1)))
            .chain([steps - 1, steps])
            .collect()
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// The allocator key of a `generate` tensor: its layer, its slot in the layer, and the decode
/// step that made it (both generate walks use it, so their keys never collide with training's).
pub(super) fn generate_key(layer: u64, slot: u64, gen: u64) -> u64 {
    (1u64 << 56) | (layer << 32) | (gen << 8) | slot
}

/// Slots with a fixed meaning across layers.
const X: u8 = 0; // the residual stream entering the layer (then leaving it)
/// The layer's cache tensors, in [`crate::blocks::Mixer::cache_tensors`] order: slots 1..=3.
const CACHE: u8 = 1;
/// The first slot of a layer's temporaries.
const FIRST_TMP: u8 = 4;

/// One cache tensor of a layer kind on this GPU: bytes per token per sequence (in the cache's
/// dtype), fixed bytes per sequence, its window (0: none).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CacheBytes {
    pub(super) per_token: u64,
    pub(super) fixed: u64,
    pub(super) window: u64,
}

impl CacheBytes {
    /// Bytes per sequence after a prefill of `prompt` tokens and `steps` decode steps: a static
    /// cache's whole length (`cache_len`, a sliding layer's window of it) from the start; a
    /// `DynamicLayer` every token; a `DynamicSlidingWindowLayer` the whole prompt until the first
    /// decode step, then at most `w − 1` plus the new token; a state its fixed size.
    fn held(&self, prompt: u64, steps: u64, dynamic: bool, cache_len: u64) -> u64 {
        let w = self.window;
        let toks = if !dynamic {
            if w > 0 {
                w.min(cache_len)
            } else {
                cache_len
            }
        } else if w > 0 {
            if steps == 0 {
                prompt
            } else {
                (prompt + steps - 1).min(w.saturating_sub(1)) + 1
            }
        } else {
            prompt + steps
        };
        m(&[toks, self.per_token]).saturating_add(self.fixed)
    }
}

/// A layer's op program as it is built.
struct Prog {
    ops: Vec<Op>,
    next: u8,
}

impl Prog {
    /// A new tensor of `bytes`; its slot.
    fn make(&mut self, bytes: u64) -> u8 {
        let s = self.next;
        self.next += 1;
        self.ops.push((s, bytes));
        s
    }

    fn free(&mut self, s: u8) {
        self.ops.push((s, FREE));
    }

    /// A norm over `width` features per token (`elems` = tokens × width) of the model's class:
    /// the families' RMSNorm through an fp32 copy (`x.to(float32)`, `pow(2).mean(-1)`,
    /// `x * rsqrt(...)`, then `weight * x.to(dtype)`, or Gemma's fp32 product `x * (1 +
    /// weight.float())` cast back), `nn.LayerNorm` in one kernel; `weight: false` for the
    /// weightless norms (Llama 4's L2 q/k norm, Gemma 4's v_norm). Returns its output's slot.
    fn norm(&mut self, norm: crate::blocks::Norm, elems: u64, cmp: u64, weight: bool) -> u8 {
        let half = m(&[elems, cmp]);
        let f32 = m(&[elems, 4]);
        match norm.kind {
            NormKind::RmsNorm if cmp != 4 => {
                let a = self.make(f32);
                let p = self.make(f32);
                self.free(p);
                let n = self.make(f32);
                self.free(a);
                if norm.fp32_product && weight {
                    let pr = self.make(f32);
                    self.free(n);
                    let o = self.make(half);
                    self.free(pr);
                    o
                } else {
                    let cst = self.make(half);
                    self.free(n);
                    if !weight {
                        return cst;
                    }
                    let o = self.make(half);
                    self.free(cst);
                    o
                }
            }
            NormKind::RmsNorm => {
                let p = self.make(half);
                self.free(p);
                let n = self.make(half);
                if !weight {
                    return n;
                }
                let o = self.make(half);
                self.free(n);
                o
            }
            NormKind::LayerNorm => self.make(half),
        }
    }

    /// Rotary embeddings: `q * cos + rotate_half(q) * sin`, `rotate_half = cat(-x2, x1)`.
    fn rope(&mut self, bytes: u64) -> u8 {
        let t1 = self.make(bytes);
        let neg = self.make(bytes / 2);
        let rh = self.make(bytes);
        self.free(neg);
        let t2 = self.make(bytes);
        self.free(rh);
        let e = self.make(bytes);
        self.free(t1);
        self.free(t2);
        e
    }
}

/// Builds the prefill program of a decoder layer `blk` over the step's tokens: the tensors
/// PyTorch eager makes and frees in the order the modelling code makes them. The layer's input
/// is slot [`X`] and its output ends there; its cache tensors are slots [`CACHE`].. of
/// `cache[j]` bytes each (kept by the caller).
///
/// Softmax attention (without sinks) and a dense MLP are walked op by op: the norms, the q/k/v
/// projections (QK-norm, a weightless v norm, KV sharing and Qwen3.5's output gate where the
/// layer has them), rotary embeddings, the cache update (`torch.cat`, or a static cache's
/// lazily made zeros), SDPA's kernel or the eager softmax with their masks and `repeat_kv`,
/// the `transpose(1, 2).contiguous()`, the output projection, the residual adds, the MLP. The
/// other mechanisms (MLA, Gated DeltaNet, Mamba2, gpt-oss's sinks, experts) make their cache,
/// then their inference high point (`LayerDesc::infer_tmp`'s parts: the mechanism's own
/// itemisation, `estimate/mechs.rs`) comes and goes.
fn layer_ops(b: &Blocks, blk: &Block, parts: &InferParts, c: &Ctx, cache: &[u64]) -> Vec<Op> {
    let mut g = Prog {
        ops: Vec::with_capacity(64),
        next: FIRST_TMP,
    };
    let hd = m(&[c.tok, b.hidden, c.cmp]);
    let held_out = blk.residual == Residual::SequentialHeld;
    // The mixer: the residual stream after it (`r`, which may be the input itself), and the
    // mixer's output when the block holds it.
    let walked_mixer = matches!(blk.mixer, Mixer::Attention(a) if !a.sinks);
    let walked_ffn = matches!(blk.ffn, Ffn::Dense(_));
    let (r, y_held) = match blk.mixer {
        Mixer::Attention(a) if !a.sinks => attention_ops(&mut g, b, &a, c, cache, held_out),
        Mixer::None => (X, None),
        _ => {
            for (j, bytes) in cache.iter().enumerate() {
                g.ops.push((CACHE + j as u8, *bytes));
            }
            if !walked_ffn {
                // Neither half walked op by op: the layer's high point is one block (the
                // larger of the two), then its output.
                let t = g.make(parts.mixer.max(parts.ffn));
                g.free(t);
                g.ops.push((X, hd));
                g.ops.push((X, FREE));
                return g.ops;
            }
            let t = g.make(parts.mixer);
            g.free(t);
            let y = g.make(hd);
            let r = g.make(hd);
            g.free(y);
            (r, None)
        }
    };
    let _ = walked_mixer;
    // The feed-forward: its output `d`.
    let d = match blk.ffn {
        Ffn::Dense(dense) => Some(dense_ops(&mut g, b, &dense, c)),
        Ffn::Moe(_) | Ffn::DenseAndMoe(..) => {
            let t = g.make(parts.ffn);
            g.free(t);
            Some(g.make(hd))
        }
        Ffn::None => None,
    };
    // The layer's output becomes slot X. The model's loop (`hidden_states =
    // decoder_layer(hidden_states, ...)`) holds the layer's input until the layer returns.
    g.ops.push((X, hd));
    if let Some(d) = d {
        g.free(d);
    }
    if r != X {
        g.free(r);
    }
    if let Some(y) = y_held {
        g.free(y);
    }
    g.ops.push((X, FREE));
    g.ops
}

/// A softmax attention sub-block over slot [`X`]; returns the residual stream after it and the
/// attention's output where the block holds it until it returns (GPT-2).
fn attention_ops(
    g: &mut Prog,
    b: &Blocks,
    a: &crate::blocks::Attention,
    c: &Ctx,
    cache: &[u64],
    held_out: bool,
) -> (u8, Option<u8>) {
    use crate::blocks::QkNorm;
    let tok = c.tok;
    let (h, cmp, tp) = (b.hidden, c.cmp, c.t);
    let hd = m(&[tok, h, cmp]);
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    let q_bytes = m(&[tok, q_w, cmp]);
    let kv_act = m(&[tok, kv_w, cmp]);
    let n1 = g.norm(b.norm, m(&[tok, h]), cmp, true);
    // Projections: one fused tensor (views for q, k, v) or three; q/k norms as the module
    // applies them (`q_norm(q_proj(x))` before `k_proj`); a q projection twice as wide whose
    // second half gates the output (Qwen3.5) stays alive for the gate.
    let qk_norm = |g: &mut Prog, slot: u8, width: u64| -> u8 {
        match a.qk_norm {
            QkNorm::None => slot,
            QkNorm::L2 => g.norm(b.norm, m(&[tok, width]), cmp, false),
            QkNorm::PerHead | QkNorm::FullWidth => g.norm(b.norm, m(&[tok, width]), cmp, true),
        }
    };
    let mut gate = None;
    let (q, k, v, fused) = if a.fused_qkv {
        let qkv = g.make(m(&[tok, q_w + 2 * kv_w, cmp]));
        (qkv, Some(qkv), Some(qkv), true)
    } else {
        let qp = g.make(if a.q_gate { 2 * q_bytes } else { q_bytes });
        let q = qk_norm(g, qp, q_w);
        if a.q_gate {
            gate = Some(qp);
        } else if q != qp {
            g.free(qp);
        }
        let (k, v) = if a.kv_shared {
            (None, None)
        } else {
            let kp = g.make(kv_act);
            let k = qk_norm(g, kp, kv_w);
            if k != kp {
                g.free(kp);
            }
            let v = if a.k_eq_v { k } else { g.make(kv_act) };
            let v = if a.v_norm {
                let vn = g.norm(b.norm, m(&[tok, kv_w]), cmp, false);
                if v != k {
                    g.free(v);
                }
                vn
            } else {
                v
            };
            (Some(k), Some(v))
        };
        (q, k, v, false)
    };
    g.free(n1);
    let (qe, ke) = if a.rope {
        let qe = g.rope(q_bytes);
        let ke = k.map(|_| g.rope(kv_act));
        if !fused {
            g.free(q);
            if let Some(k) = k {
                if Some(k) != v {
                    g.free(k);
                }
            }
        }
        (qe, ke)
    } else {
        (q, k)
    };
    // The cache update copies keys and values into the cache (DynamicLayer: torch.cat; a static
    // layer's zeros, made at its first update).
    for (j, bytes) in cache.iter().enumerate() {
        g.ops.push((CACHE + j as u8, *bytes));
    }
    if let Some(ke) = ke {
        if ke != qe && Some(ke) != k {
            g.free(ke);
        }
    }
    if !fused {
        if let (Some(k), Some(ke)) = (k, ke) {
            if ke == k && Some(k) != v {
                g.free(k);
            }
        }
        if let Some(v) = v {
            g.free(v);
        }
    }
    // Attention.
    let heads = a.heads.div_ceil(tp);
    let kernel = attention_kernel(a, c.attention, cmp != 4, false, c.s);
    let masked = has_mask(a, c.s);
    let sdt = c.sdt(a.softmax_upcast);
    // `repeat_kv`: keys and values expanded to every head (copies) where SDPA's grouped-query
    // path is off, freed when the attention function returns.
    let repeated: Vec<u8> = if c.attention == Attention::Sdpa && repeats_kv_at(a, c.attention, c.s)
    {
        vec![g.make(q_bytes), g.make(q_bytes)]
    } else {
        Vec::new()
    };
    let mask_elems = m(&[c.b, c.s, c.s]);
    let out = match (c.attention, kernel) {
        (Attention::Sdpa, Kernel::Math) => {
            // `scaled_dot_product_attention` (attention.cpp, PyTorch 2.11) first converts the
            // bool mask to an additive one in the query's dtype (`convert_boolean_attn_mask`:
            // `where(mask, 0, -inf)`), alive for the whole call. `_scaled_dot_product_attention_math`
            // then makes fp32 copies of q, k, v (half inputs) and the scaled q, all locals that
            // live until it returns; the scaled Kᵀ (a temporary of the first matmul); the fp32
            // scores, the mask added in place; then `_safe_softmax`: the softmax, the
            // `isneginf` test and its row reduction, and `where_out` writing the result into the
            // softmax's own storage (pytorch#139613, "reuse storage for out": no third fp32
            // scores tensor), the pre-softmax scores freed when `attn` is reassigned. It returns
            // `(matmul(attn, v).to(dtype), attn.to(dtype))`: the half copy of the scores is made
            // first (GCC evaluates `make_tuple`'s arguments right to left) and is dropped by the
            // caller's `std::get<0>`.
            let kv_seen = if repeated.is_empty() { kv_act } else { q_bytes };
            let widen = |b: u64| b / cmp * 4;
            let fm = masked.then(|| g.make(m(&[mask_elems, cmp])));
            let mut locals = Vec::new();
            if cmp != 4 {
                locals.push(g.make(widen(q_bytes)));
                locals.push(g.make(widen(kv_seen)));
                locals.push(g.make(widen(kv_seen)));
            }
            locals.push(g.make(widen(q_bytes))); // the scaled q
            let ks = g.make(widen(kv_seen));
            // K/V with fewer heads than q, not repeated: `at::matmul` expands them to every
            // head and reshapes the expanded view into a copy for the batched matmul, freed
            // when it returns.
            let broadcast = kv_seen < q_bytes;
            let kx = broadcast.then(|| g.make(widen(q_bytes)));
            let scores = m(&[c.b, heads, c.s, c.s]);
            let attn = g.make(m(&[scores, 4]));
            if let Some(kx) = kx {
                g.free(kx);
            }
            g.free(ks);
            let w = g.make(m(&[scores, 4]));
            let neginf = g.make(scores);
            let rows = g.make(m(&[c.b, heads, c.s]));
            g.free(rows);
            g.free(neginf);
            g.free(attn);
            let half = g.make(m(&[scores, cmp]));
            let vx = broadcast.then(|| g.make(widen(q_bytes)));
            let o32 = g.make(widen(q_bytes));
            if let Some(vx) = vx {
                g.free(vx);
            }
            let o = g.make(q_bytes);
            g.free(o32);
            g.free(w);
            for l in locals {
                g.free(l);
            }
            g.free(half);
            if let Some(fm) = fm {
                g.free(fm);
            }
            o
        }
        (Attention::Sdpa, _) => {
            if masked {
                // The fused kernels take an additive mask: `where(~mask, -65504, 0)` in the
                // query's dtype (`convert_boolean_attn_mask_cudnn`), made per call.
                let not = g.make(mask_elems);
                let add = g.make(m(&[mask_elems, cmp]));
                g.free(not);
                let o = g.make(q_bytes);
                g.free(add);
                o
            } else {
                g.make(q_bytes)
            }
        }
        (Attention::Eager, _) => {
            let s = m(&[c.b, heads, c.s, c.s]);
            let sc = g.make(m(&[s, cmp]));
            let sm = g.make(m(&[s, sdt]));
            g.free(sc);
            let sd = if sdt != cmp {
                let sd = g.make(m(&[s, cmp]));
                g.free(sm);
                sd
            } else {
                sm
            };
            let o = g.make(q_bytes);
            g.free(sd);
            o
        }
    };
    for r in repeated {
        g.free(r);
    }
    if qe != q {
        g.free(qe);
    } else if !fused {
        g.free(q);
    }
    let mut at = g.make(q_bytes); // transpose(1, 2).contiguous()
    g.free(out);
    if let Some(gate) = gate {
        // Qwen3.5: `attn_output * torch.sigmoid(gate)`, then o_proj.
        let sg = g.make(q_bytes);
        let pr = g.make(q_bytes);
        g.free(sg);
        g.free(at);
        g.free(gate);
        at = pr;
    }
    let y = g.make(hd);
    g.free(at);
    if fused {
        g.free(q);
    }
    let r = g.make(hd);
    // GPT-2's block names the attention output (`hidden_states = attn_output + residual`), so
    // it lives until the block returns; the others rebind `hidden_states` and free it here.
    if held_out {
        (r, Some(y))
    } else {
        g.free(y);
        (r, None)
    }
}

/// A dense MLP over the residual stream after the mixer; returns its output's slot.
fn dense_ops(g: &mut Prog, b: &Blocks, dense: &crate::blocks::Dense, c: &Ctx) -> u8 {
    let tok = c.tok;
    let (h, cmp) = (b.hidden, c.cmp);
    let hd = m(&[tok, h, cmp]);
    let n2 = g.norm(b.norm, m(&[tok, h]), cmp, true);
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

/// The inference high points of a layer's mechanisms walked as one temporary each.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct InferParts {
    pub(super) mixer: u64,
    pub(super) ffn: u64,
}

impl Step<'_> {
    /// The decode steps the walk of this `generate` call takes (`decode_steps`, with whether
    /// every step allocates the same tensors: a static cache whose layers read no more at a
    /// longer context; MLA re-expands the whole latent and gpt-oss repeats the cache to every
    /// head, which grow with it).
    pub(super) fn walked_decode_steps(&self, inf: Infer, full: bool) -> Vec<u64> {
        let identical =
            inf.kv_cache != KvCache::Dynamic && self.kinds.iter().all(|k| k.decode_per_ctx == 0);
        let steps = inf.new_tokens.saturating_sub(1);
        decode_steps(steps, full, identical, self.setup.overheads.decode_replay)
    }

    /// The decode steps an allocator replay of this `generate` call walks, when it samples
    /// them (not when every one is walked, nor when the steps repeat).
    pub(super) fn decode_sampled(&self) -> Option<super::DecodeSample> {
        let Mode::Infer(inf) = self.setup.mode else {
            return None;
        };
        if !matches!(self.model, Model::Transformer(t) if t.layout() == Layout::DecoderOnly) {
            return None;
        }
        let steps = inf.new_tokens.saturating_sub(1);
        let replayed = self.walked_decode_steps(inf, true).len() as u64;
        let sampled = self.setup.overheads.decode_replay == DecodeReplay::Sampled
            && steps > SAMPLED_DECODE_STEPS
            && replayed == SAMPLED_DECODE_STEPS;
        sampled.then_some(super::DecodeSample { steps, replayed })
    }

    /// One forward's logits in `generate` on the last pipeline rank: the last position's
    /// logits (`logits_to_keep=1`) and their fp32 copy (`next_token_logits`), both freed before
    /// the next forward.
    pub(super) fn generate_logits<S: Sink>(
        &self,
        sink: &mut S,
        layers: u64,
        last_rank: bool,
        token: u64,
    ) {
        if !last_rank || self.logits == 0 {
            return;
        }
        let c = self.ctx;
        let vocab = self.logits / c.tok.max(1);
        let lg = Handle {
            cat: Category::Loss,
            bytes: m(&[c.b, vocab, c.cmp]),
            key: generate_key(layers, 4, token),
        };
        let next = Handle {
            cat: Category::Loss,
            bytes: m(&[c.b, vocab, 4]),
            key: generate_key(layers, 5, token),
        };
        sink.alloc(lg, &[]);
        sink.alloc(next, &[]);
        sink.free(lg);
        sink.free(next);
    }

    /// One `generate` call of a decoder-only model on pipeline rank `rank`: what the model's
    /// forward holds throughout the prefill (the embedding output, GPT-2's position
    /// embeddings, the rotary tables, an explicit mask), each layer's prefill program
    /// ([`layer_ops`]) with its cache, the final norm and the last position's logits; then the
    /// decode steps of [`Step::walked_decode_steps`], each re-making every growing cache
    /// tensor one token longer (`torch.cat`; a sliding layer's at its window) with the layer's
    /// decode temporaries (MLA's re-expanded K/V and gpt-oss's repeated cache grow with the
    /// context). Other models run one forward ([`Step::walk_forward_only`]).
    pub(super) fn walk_inference<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        inf: Infer,
        sink: &mut S,
        full: bool,
    ) {
        let c = self.ctx;
        let last_rank = rank == self.setup.parallel.pp - 1;
        let t = match self.model {
            Model::Transformer(t) if t.layout() == Layout::DecoderOnly => t,
            _ => return self.walk_forward_only(stack, sink),
        };
        let b = &t.blocks;
        let layers = stack.len();
        let key = generate_key;
        let kind = |layer: u64| stack.kind(layer).unwrap_or(0);
        let prompt = inf.prompt();
        let dynamic = inf.kv_cache == KvCache::Dynamic;
        // The cache ends holding every token but the last generated one: StaticCache's
        // `max_cache_len` is `max_length − 1` (prompt + new tokens − 1), and the dynamic cache
        // grows to the same length.
        let cache_len = inf.context.saturating_sub(1).max(prompt);
        // Cache tensor `j` of layer `i` after `steps` decode steps, keyed by the step that made
        // it (a tensor made once keeps the prefill's key).
        let grows = |cb: &CacheBytes| dynamic && cb.per_token > 0;
        let cache_handle = |i: u64, j: usize, steps: u64| {
            let cb = self.caches[kind(i)][j];
            Handle {
                cat: Category::KvCache,
                bytes: m(&[c.b, cb.held(prompt, steps, dynamic, cache_len)]),
                key: key(
                    i,
                    CACHE as u64 + j as u64,
                    if grows(&cb) { steps } else { 0 },
                ),
            }
        };
        // Prefill: the embedding output, then each layer's program.
        let ops: Vec<Vec<Op>> = b
            .kinds
            .iter()
            .enumerate()
            .map(|(k, blk)| {
                let cache: Vec<u64> = self.caches[k]
                    .iter()
                    .map(|cb| m(&[c.b, cb.held(prompt, 0, dynamic, cache_len)]))
                    .collect();
                let d = &self.kinds[k];
                let parts = InferParts {
                    mixer: d.infer_mixer,
                    ffn: d.infer_ffn,
                };
                layer_ops(b, blk, &parts, &c, &cache)
            })
            .collect();
        let hd = m(&[c.tok, b.hidden, c.cmp]);
        let x0 = Handle {
            cat: Category::Activations,
            bytes: hd,
            key: key(0, X as u64, 0),
        };
        self.vision_prefill(sink); // the vision tower first (vision.rs; nothing without images)
        sink.phase(Phase::Prefill { layer: 0 });
        // What the model's forward holds in locals until it returns: the embedding output
        // (`inputs_embeds`; GPT-2's `position_embeds` too, per sequence as `generate` passes
        // positions), the rotary tables (`position_embeddings = (cos, sin)`, `[b, s, head_dim]`
        // each, one pair per rotary width), and the explicit mask when there is one (bool
        // `[b, 1, s, s]`).
        let mut kept: Vec<Handle> = Vec::new();
        let mut keep = |sink: &mut S, bytes: u64| {
            let h = Handle {
                cat: Category::Activations,
                bytes,
                key: key(layers + 1, kept.len() as u64, 0),
            };
            sink.alloc(h, &[]);
            kept.push(h);
        };
        // Gemma 1/2 scale the embeddings (`inputs_embeds * normalizer`) and GPT-2 adds learned
        // positions: the first layer's input is then a tensor of its own.
        let scaled = b.embedding.scaled_copy;
        let learned = b.embedding.learned_positions > 0;
        if scaled || learned {
            keep(sink, hd); // inputs_embeds
        }
        if learned {
            keep(sink, hd); // position_embeds
        }
        let attentions = || {
            b.kinds.iter().filter_map(|k| match k.mixer {
                Mixer::Attention(a) => Some(a),
                _ => None,
            })
        };
        let mut widths: Vec<u64> = Vec::new();
        for a in attentions().filter(|a| a.rope) {
            if !widths.contains(&a.head_dim) {
                widths.push(a.head_dim);
            }
        }
        for w in widths {
            keep(sink, m(&[c.tok, w, c.cmp]));
            keep(sink, m(&[c.tok, w, c.cmp]));
        }
        if attentions().any(|a| has_mask(&a, c.s)) {
            keep(sink, m(&[c.b, c.s, c.s]));
        }
        sink.alloc(x0, &[]);
        // The first layer's input is `inputs_embeds` itself unless scaled or summed: the
        // forward's local keeps it after the loop moves on.
        let x0_kept = !(scaled || learned);
        let mut sizes = [0u64; 256];
        sizes[X as usize] = x0.bytes;
        for i in 0..layers {
            sink.phase(Phase::Prefill { layer: i as u32 });
            for &(slot, bytes) in &ops[kind(i)] {
                if i == 0 && x0_kept && slot == X && bytes == FREE {
                    continue;
                }
                if (CACHE..FIRST_TMP).contains(&slot) {
                    sink.alloc(cache_handle(i, (slot - CACHE) as usize, 0), &[]);
                    continue;
                }
                let (cat, k) = match slot {
                    X => (Category::Activations, key(0, X as u64, (i + 1) & 1)),
                    _ => (Category::Temporaries, key(i, slot as u64, 1)),
                };
                if bytes == FREE {
                    let k = if slot == X {
                        key(0, X as u64, i & 1)
                    } else {
                        k
                    };
                    let bytes = sizes[slot as usize];
                    sink.free(Handle { cat, bytes, key: k });
                } else {
                    sizes[slot as usize] = bytes;
                    sink.alloc(Handle { cat, bytes, key: k }, &[]);
                }
            }
        }
        let x_last = Handle {
            cat: Category::Activations,
            bytes: x0.bytes,
            key: key(0, X as u64, layers & 1),
        };
        // The final norm over all positions, then the head on the last position only.
        let normed = Handle {
            cat: Category::Temporaries,
            bytes: x0.bytes,
            key: key(layers, 3, 0),
        };
        sink.alloc(normed, &[]);
        sink.free(x_last);
        if x0_kept && layers > 0 {
            sink.free(x0);
        }
        for h in kept {
            sink.free(h);
        }
        self.generate_logits(sink, layers, last_rank, 0);
        sink.free(normed);
        self.vision_prefill_end(sink);
        // Decode: each new token runs every layer on one position per sequence.
        let walked = self.walked_decode_steps(inf, full);
        let mut done = 0u64;
        for token in walked {
            sink.phase(Phase::Decode {
                token: token as u32,
            });
            for i in 0..layers {
                let k = kind(i);
                for (j, cb) in self.caches[k].iter().enumerate() {
                    if !grows(cb) {
                        continue; // static, or a state updated in place
                    }
                    let old = cache_handle(i, j, done);
                    let new = cache_handle(i, j, token);
                    if new.bytes != old.bytes {
                        sink.alloc(new, &[]);
                        sink.free(old);
                    } else {
                        // A sliding layer at its window: the same size, rekeyed.
                        sink.free(old);
                        sink.alloc(new, &[]);
                    }
                }
                let d = stack.get(i);
                let ctx = prompt + token;
                let window = self.caches[k].first().map_or(0, |cb| cb.window);
                let seen = if window > 0 { ctx.min(window) } else { ctx };
                let act = Handle {
                    cat: Category::Activations,
                    bytes: d.decode.saturating_add(m(&[seen, d.decode_per_ctx])),
                    key: key(i, 6, token),
                };
                sink.alloc(act, &[]);
                sink.free(act);
            }
            self.generate_logits(sink, layers, last_rank, token);
            done = token;
        }
        for i in 0..layers {
            for j in 0..self.caches[kind(i)].len() {
                sink.free(cache_handle(i, j, done));
            }
        }
    }

    /// Models without a `generate` loop modelled op by op (encoder-only, encoder-decoder,
    /// CNNs): one forward over the batch, layer by layer, nothing kept.
    fn walk_forward_only<S: Sink>(&self, stack: &Stack, sink: &mut S) {
        for i in 0..stack.len() {
            sink.phase(Phase::Prefill { layer: i as u32 });
            let h = Handle {
                cat: Category::Activations,
                bytes: stack.get(i).infer_tmp,
                key: (1 << 59) | (i + 1),
            };
            sink.alloc(h, &[]);
            sink.free(h);
        }
    }
}
