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
    (1u64 << 56) | (layer << 20) | (gen << 8) | slot
}

/// Slots with a fixed meaning across layers.
const X: u8 = 0; // the residual stream entering the layer (then leaving it)
const K_CACHE: u8 = 1;
const V_CACHE: u8 = 2;

/// Builds the prefill program of a decoder layer `blk` (softmax attention and a dense MLP) over
/// `tok` tokens. The layer output ends in slot [`X`]; the cache update creates
/// [`K_CACHE`]/[`V_CACHE`] (kept by the caller).
fn prefill_ops(b: &Blocks, blk: &Block, c: &Ctx, kv_bytes: u64, cache_made_here: bool) -> Vec<Op> {
    let Mixer::Attention(a) = blk.mixer else {
        return Vec::new();
    };
    // A mixture of experts is walked as one expert's MLP (what this walk has always priced).
    let dense = match blk.ffn {
        Ffn::Dense(d) => d,
        Ffn::Moe(m) => crate::blocks::Dense {
            gated: m.gated,
            ..crate::blocks::Dense::new(m.expert_intermediate)
        },
        _ => return Vec::new(),
    };
    let mut ops: Vec<Op> = Vec::with_capacity(64);
    let mut next = 3u8;
    let mut new = |ops: &mut Vec<Op>, bytes: u64| -> u8 {
        let s = next;
        next += 1;
        ops.push((s, bytes));
        s
    };
    let free = |ops: &mut Vec<Op>, s: u8| ops.push((s, FREE));
    let tok = c.tok;
    let (h, cmp) = (b.hidden, c.cmp);
    let tp = c.t;
    let q_w = (a.heads * a.head_dim).div_ceil(tp);
    let kv_w = (a.kv_heads * a.head_dim).div_ceil(tp).max(a.head_dim);
    let f = dense.intermediate.div_ceil(tp);
    let hd = m(&[tok, h, cmp]);
    // A norm of the tensor in `input`; returns the slot of its output.
    let norm = |ops: &mut Vec<Op>, new: &mut dyn FnMut(&mut Vec<Op>, u64) -> u8| -> u8 {
        match b.norm.kind {
            NormKind::RmsNorm if cmp != 4 => {
                // x.to(float32); x.pow(2).mean(-1); x * rsqrt(...); weight * x.to(dtype)
                let a = new(ops, m(&[tok, h, 4]));
                let p = new(ops, m(&[tok, h, 4]));
                free(ops, p);
                let n = new(ops, m(&[tok, h, 4]));
                free(ops, a);
                let cst = new(ops, hd);
                free(ops, n);
                let o = new(ops, hd);
                free(ops, cst);
                o
            }
            NormKind::RmsNorm => {
                let p = new(ops, hd);
                free(ops, p);
                let n = new(ops, hd);
                let o = new(ops, hd);
                free(ops, n);
                o
            }
            NormKind::LayerNorm => new(ops, hd),
        }
    };
    let n1 = norm(&mut ops, &mut new);
    let q_bytes = m(&[tok, q_w, cmp]);
    let kv_act = m(&[tok, kv_w, cmp]);
    // Projections: one fused tensor (views for q, k, v) or three.
    let (q, k, v, fused) = if a.fused_qkv {
        let qkv = new(&mut ops, m(&[tok, q_w + 2 * kv_w, cmp]));
        (qkv, qkv, qkv, true)
    } else {
        let q = new(&mut ops, q_bytes);
        let k = new(&mut ops, kv_act);
        let v = new(&mut ops, kv_act);
        (q, k, v, false)
    };
    free(&mut ops, n1);
    // Rotary embeddings: q * cos + rotate_half(q) * sin, rotate_half = cat(-x2, x1).
    let rope = |ops: &mut Vec<Op>, new: &mut dyn FnMut(&mut Vec<Op>, u64) -> u8, bytes: u64| {
        let t1 = new(ops, bytes);
        let neg = new(ops, bytes / 2);
        let rh = new(ops, bytes);
        free(ops, neg);
        let t2 = new(ops, bytes);
        free(ops, rh);
        let e = new(ops, bytes);
        free(ops, t1);
        free(ops, t2);
        e
    };
    let (qe, ke) = if a.rope {
        let qe = rope(&mut ops, &mut new, q_bytes);
        let ke = rope(&mut ops, &mut new, kv_act);
        if !fused {
            free(&mut ops, q);
            free(&mut ops, k);
        }
        (qe, ke)
    } else {
        (q, k)
    };
    // The cache update copies keys and values into the cache (DynamicLayer: torch.cat).
    let cache = m(&[tok, kv_w, kv_bytes]);
    if cache_made_here {
        ops.push((K_CACHE, cache));
        ops.push((V_CACHE, cache));
    }
    if ke != qe && ke != k {
        free(&mut ops, ke);
    }
    if !fused {
        if ke == k {
            free(&mut ops, k);
        }
        free(&mut ops, v);
    }
    // Attention.
    let heads = a.heads.div_ceil(tp);
    let kernel = attention_kernel(&a, c.attention, cmp != 4, false, c.s);
    let masked = has_mask(&a, c.s);
    let sdt = c.sdt(a.softmax_upcast);
    // `repeat_kv`: keys and values expanded to every head (copies) where SDPA's grouped-query
    // path is off, freed when the attention function returns.
    let repeated: Vec<u8> = if c.attention == Attention::Sdpa && repeats_kv_at(&a, c.attention, c.s)
    {
        vec![new(&mut ops, q_bytes), new(&mut ops, q_bytes)]
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
            let fm = if masked {
                Some(new(&mut ops, m(&[mask_elems, cmp])))
            } else {
                None
            };
            let mut locals = Vec::new();
            if cmp != 4 {
                locals.push(new(&mut ops, widen(q_bytes)));
                locals.push(new(&mut ops, widen(kv_seen)));
                locals.push(new(&mut ops, widen(kv_seen)));
            }
            locals.push(new(&mut ops, widen(q_bytes))); // the scaled q
            let ks = new(&mut ops, widen(kv_seen));
            // K/V with fewer heads than q, not repeated: `at::matmul` expands them to every
            // head and reshapes the expanded view into a copy for the batched matmul, freed
            // when it returns.
            let broadcast = kv_seen < q_bytes;
            let kx = if broadcast {
                Some(new(&mut ops, widen(q_bytes)))
            } else {
                None
            };
            let scores = m(&[c.b, heads, c.s, c.s]);
            let attn = new(&mut ops, m(&[scores, 4]));
            if let Some(kx) = kx {
                free(&mut ops, kx);
            }
            free(&mut ops, ks);
            let w = new(&mut ops, m(&[scores, 4]));
            let neginf = new(&mut ops, scores);
            let rows = new(&mut ops, m(&[c.b, heads, c.s]));
            free(&mut ops, rows);
            free(&mut ops, neginf);
            free(&mut ops, attn);
            let half = new(&mut ops, m(&[scores, cmp]));
            let vx = if broadcast {
                Some(new(&mut ops, widen(q_bytes)))
            } else {
                None
            };
            let o32 = new(&mut ops, widen(q_bytes));
            if let Some(vx) = vx {
                free(&mut ops, vx);
            }
            let o = new(&mut ops, q_bytes);
            free(&mut ops, o32);
            free(&mut ops, w);
            for l in locals {
                free(&mut ops, l);
            }
            free(&mut ops, half);
            if let Some(fm) = fm {
                free(&mut ops, fm);
            }
            o
        }
        (Attention::Sdpa, _) => {
            if masked {
                // The fused kernels take an additive mask: `where(~mask, -65504, 0)` in the
                // query's dtype (`convert_boolean_attn_mask_cudnn`), made per call.
                let not = new(&mut ops, mask_elems);
                let add = new(&mut ops, m(&[mask_elems, cmp]));
                free(&mut ops, not);
                let o = new(&mut ops, q_bytes);
                free(&mut ops, add);
                o
            } else {
                new(&mut ops, q_bytes)
            }
        }
        (Attention::Eager, _) => {
            let s = m(&[c.b, heads, c.s, c.s]);
            let sc = new(&mut ops, m(&[s, cmp]));
            let sm = new(&mut ops, m(&[s, sdt]));
            free(&mut ops, sc);
            let sd = if sdt != cmp {
                let sd = new(&mut ops, m(&[s, cmp]));
                free(&mut ops, sm);
                sd
            } else {
                sm
            };
            let o = new(&mut ops, q_bytes);
            free(&mut ops, sd);
            o
        }
    };
    for r in repeated {
        free(&mut ops, r);
    }
    if qe != q {
        free(&mut ops, qe);
    }
    let at = new(&mut ops, q_bytes); // transpose(1, 2).contiguous()
    free(&mut ops, out);
    let y = new(&mut ops, hd);
    free(&mut ops, at);
    if fused {
        free(&mut ops, q);
    }
    let r = new(&mut ops, hd);
    // GPT-2's block names the attention output (`hidden_states = attn_output + residual`), so
    // it lives until the block returns; the others rebind `hidden_states` and free it here.
    let named_attn_out = blk.residual == Residual::SequentialHeld;
    if !named_attn_out {
        free(&mut ops, y);
    }
    let n2 = norm(&mut ops, &mut new);
    let fb = m(&[tok, f, cmp]);
    let d = match (dense.gated, dense.act) {
        (true, _) => {
            let g = new(&mut ops, fb);
            let a = new(&mut ops, fb);
            free(&mut ops, g);
            let u = new(&mut ops, fb);
            let p = new(&mut ops, fb);
            free(&mut ops, a);
            free(&mut ops, u);
            let d = new(&mut ops, hd);
            free(&mut ops, p);
            d
        }
        (_, Act::ComposedTanh) => {
            // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), one op at a time.
            let u = new(&mut ops, fb);
            let t0 = new(&mut ops, fb);
            let mut prev = new(&mut ops, fb);
            for _ in 0..4 {
                let nx = new(&mut ops, fb);
                free(&mut ops, prev);
                prev = nx;
            }
            let g = new(&mut ops, fb); // 1 + tanh
            free(&mut ops, prev);
            let a = new(&mut ops, fb); // 0.5·x · (1 + tanh)
            free(&mut ops, t0);
            free(&mut ops, g);
            free(&mut ops, u);
            let d = new(&mut ops, hd);
            free(&mut ops, a);
            d
        }
        _ => {
            let u = new(&mut ops, fb);
            let a = new(&mut ops, fb);
            free(&mut ops, u);
            let d = new(&mut ops, hd);
            free(&mut ops, a);
            d
        }
    };
    free(&mut ops, n2);
    // The layer's output becomes slot X. The model's loop (`hidden_states =
    // decoder_layer(hidden_states, ...)`) holds the layer's input until the layer returns.
    ops.push((X, hd));
    free(&mut ops, d);
    free(&mut ops, r);
    if named_attn_out {
        free(&mut ops, y);
    }
    free(&mut ops, X);
    ops
}

impl Step<'_> {
    /// The decode steps the walk of this `generate` call takes (both walks: `decode_steps`
    /// with what the walk repeats). Only the uniform walk under a static cache repeats every
    /// step; the layer-by-layer walk does not even then (MLA re-expands the whole latent, which
    /// grows with the context).
    pub(super) fn walked_decode_steps(&self, t: &Transformer, inf: Infer, full: bool) -> Vec<u64> {
        let per_layer = !t.blocks.legacy_generate && !t.blocks.is_empty();
        let identical = !per_layer && inf.kv_cache != KvCache::Dynamic;
        let steps = inf.new_tokens.saturating_sub(1);
        decode_steps(steps, full, identical, self.setup.overheads.decode_replay)
    }

    /// The decode steps an allocator replay of this `generate` call walks, when it samples
    /// them (not when every one is walked, nor when the steps repeat).
    pub(super) fn decode_sampled(&self) -> Option<super::DecodeSample> {
        let Mode::Infer(inf) = self.setup.mode else {
            return None;
        };
        let t = match self.model {
            Model::Transformer(t) if t.layout() == Layout::DecoderOnly => t,
            _ => return None,
        };
        let steps = inf.new_tokens.saturating_sub(1);
        let replayed = self.walked_decode_steps(t, inf, true).len() as u64;
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
        if !t.blocks.legacy_generate && !t.blocks.is_empty() {
            return self.walk_generate_blocks(rank, stack, inf, sink, full);
        }
        let b = &t.blocks;
        let kvb = inf.kv_bytes;
        // One layer's keys (or values) per token, per kind.
        let per_token: Vec<u64> = b
            .kinds
            .iter()
            .map(|k| match k.mixer {
                Mixer::Attention(a) => {
                    let kv_w = (a.kv_heads * a.head_dim).div_ceil(c.t).max(a.head_dim);
                    m(&[c.b, kv_w, kvb])
                }
                _ => 0,
            })
            .collect();
        let layers = stack.len();
        let key = generate_key;
        let kind = |layer: u64| stack.kind(layer).unwrap_or(0);
        let cache_handle = |layer: u64, which: u64, len: u64, gen: u64| Handle {
            cat: Category::KvCache,
            bytes: m(&[per_token[kind(layer)], len]),
            key: key(layer, which, gen),
        };
        let prompt = inf.prompt();
        let dynamic = inf.kv_cache == KvCache::Dynamic;
        // The cache ends holding every token but the last generated one: StaticCache's
        // `max_cache_len` is `max_length − 1` (prompt + new tokens − 1), and the dynamic cache
        // grows to the same length.
        let cache_len = inf.context.saturating_sub(1).max(prompt);
        if !dynamic {
            // StaticCache: every layer's keys and values for the whole length, up front.
            for i in 0..layers {
                for which in [K_CACHE, V_CACHE] {
                    sink.alloc(cache_handle(i, which as u64, cache_len, 0), &[]);
                }
            }
        }
        // Prefill: the embedding output, then each layer's program.
        let ops: Vec<Vec<Op>> = b
            .kinds
            .iter()
            .map(|k| prefill_ops(b, k, &c, kvb, dynamic))
            .collect();
        let hd = m(&[c.tok, b.hidden, c.cmp]);
        let x0 = Handle {
            cat: Category::Activations,
            bytes: hd,
            key: key(0, X as u64, 0),
        };
        sink.phase(Phase::Prefill { layer: 0 });
        // What the model's forward holds in locals until it returns: the embedding output
        // (`inputs_embeds`; GPT-2's `position_embeds` too, per sequence as `generate` passes
        // positions), the rotary tables (`position_embeddings = (cos, sin)`, `[b, s, head_dim]`
        // each), and the explicit mask when there is one (bool `[b, 1, s, s]`).
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
        // Gemma scales the embeddings (`inputs_embeds * normalizer`) and GPT-2 adds learned
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
        if let Some(a) = attentions().find(|a| a.rope) {
            keep(sink, m(&[c.tok, a.head_dim, c.cmp]));
            keep(sink, m(&[c.tok, a.head_dim, c.cmp]));
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
                let (cat, k) = match slot {
                    X => (Category::Activations, key(0, X as u64, (i + 1) & 1)),
                    K_CACHE | V_CACHE => (Category::KvCache, key(i, slot as u64, 0)),
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
        // Decode: each new token runs every layer on one position per sequence; the dynamic
        // cache reallocates each layer's keys and values one token longer.
        let walked = self.walked_decode_steps(t, inf, full);
        let mut len = prompt;
        let mut gen = 0u64;
        for token in walked {
            sink.phase(Phase::Decode {
                token: token as u32,
            });
            let new_len = prompt + token;
            for i in 0..layers {
                if dynamic {
                    for which in [K_CACHE, V_CACHE] {
                        sink.alloc(cache_handle(i, which as u64, new_len, gen + 1), &[]);
                        sink.free(cache_handle(i, which as u64, len, gen));
                    }
                }
                let act = Handle {
                    cat: Category::Activations,
                    bytes: stack.get(i).decode,
                    key: key(i, 6, token),
                };
                sink.alloc(act, &[]);
                sink.free(act);
            }
            self.generate_logits(sink, layers, last_rank, token);
            len = new_len;
            gen += 1;
        }
        for i in 0..layers {
            for which in [K_CACHE, V_CACHE] {
                let h = if dynamic {
                    cache_handle(i, which as u64, len, gen)
                } else {
                    cache_handle(i, which as u64, cache_len, 0)
                };
                sink.free(h);
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
