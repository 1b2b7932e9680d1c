//! The inference walk: one `generate` call of transformers 5.x — the prompt's prefill, then one
//! forward per new token — with its KV cache.
//!
//! Each decoder layer of the prefill is walked op by op ([`layer_ops`]): the tensors PyTorch
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
use crate::describe::{Block, Blocks, Residual};
use crate::mech::step::{Op, Prog, CACHE, FREE, X};
use crate::mech::{attention, dense};
use crate::setup::{DecodeReplay, Infer, KvCache, SAMPLED_DECODE_STEPS};

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

/// The first slot of a layer's temporaries (after at most four cache tensors: attention's keys
/// and values beside Mamba2's two states).
const FIRST_TMP: u8 = 5;

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

/// The layer's cache tensors, made before a mechanism's own prefill ops.
fn push_cache(g: &mut Prog, cache: &[u64]) {
    for (j, bytes) in cache.iter().enumerate() {
        g.ops.push((CACHE + j as u8, *bytes));
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
/// the `transpose(1, 2).contiguous()`, the output projection, the residual adds, the MLP. Gated
/// DeltaNet's torch fallback and gpt-oss's eager attention with sinks are walked tensor by
/// tensor too (`gdn::prefill`, `attention::prefill_sinks`), and so are MLA without DSA's
/// indexer (`mla::prefill`) and `grouped_mm` experts (`moe::prefill`). The other mechanisms
/// (DSA, Mamba2, other experts) make their cache,
/// then their inference high point (`LayerDesc::infer_tmp`'s parts: the mechanism's own
/// itemisation in its `mech/` module) comes and goes.
pub(super) fn layer_ops(
    b: &Blocks,
    blk: &Block,
    parts: &InferParts,
    c: &Ctx,
    cache: &[u64],
) -> Vec<Op> {
    if blk.skipped_without_images() {
        return Vec::new(); // a text-only forward passes over it (Block::skipped_without_images)
    }
    let mut g = Prog {
        ops: Vec::with_capacity(64),
        next: FIRST_TMP,
    };
    let hd = m(&[c.tok, b.hidden, c.cmp]);
    let held_out = blk.residual == Residual::SequentialHeld;
    // The mixer: the residual stream after it (`r`, which may be the input itself), and the
    // mixer's output when the block holds it.
    let walked_mixer = matches!(blk.mixer, Mixer::Attention(a) if !a.sinks);
    let walked_ffn = match blk.ffn {
        Ffn::Dense(_) => true,
        Ffn::Moe(mo) => crate::mech::moe::prefill_walked(&mo),
        _ => false,
    };
    let (r, y_held) = match blk.mixer {
        Mixer::Attention(a) if !a.sinks => attention::prefill(&a, &mut g, b, c, cache, held_out),
        Mixer::None => (X, None),
        Mixer::GatedDeltaNet(gd) => {
            push_cache(&mut g, cache);
            let y = crate::mech::gdn::prefill(&gd, &mut g, b, c);
            let r = g.make(hd);
            g.free(y);
            (r, None)
        }
        Mixer::Mamba2(mb) => {
            let y = crate::mech::mamba2::prefill(&mb, &mut g, b, c, cache);
            let r = g.make(hd);
            g.free(y);
            (r, None)
        }
        Mixer::Mla(ml) if crate::mech::mla::prefill_walked(&ml) => {
            let y = crate::mech::mla::prefill(&ml, &mut g, b, c, cache);
            let r = g.make(hd);
            g.free(y);
            (r, None)
        }
        Mixer::Attention(a) => {
            // With sinks (without them, the arm above).
            push_cache(&mut g, cache);
            let y = attention::prefill_sinks(&a, &mut g, b, c);
            let r = g.make(hd);
            g.free(y);
            (r, None)
        }
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
        Ffn::Dense(d) => Some(dense::prefill(&d, &mut g, b, c)),
        Ffn::Moe(mo) if walked_ffn => Some(crate::mech::moe::prefill(&mo, &mut g, b, c)),
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
                Mixer::Hybrid(x) => Some(x.attn),
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
        // bitsandbytes' 4-bit matmul dequantizes each weight in a prefill of over 1536 rows:
        // held here through the layer as its largest packed linear (an upper bound on each
        // linear's own, which comes and goes with its matmul).
        let dequant = self.held.as_ref().map_or(0, |h| h.dequant_tmp);
        for i in 0..layers {
            sink.phase(Phase::Prefill { layer: i as u32 });
            let deq = Handle {
                cat: Category::Temporaries,
                bytes: dequant,
                key: key(i, 255, 0),
            };
            if dequant > 0 {
                sink.alloc(deq, &[]);
            }
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
            if dequant > 0 {
                sink.free(deq);
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
                // `batched_mm`'s expert-weight copies: the up bank's, then the down bank's
                // while the first is alive.
                let [eu, ed] = d.decode_experts;
                if eu > 0 {
                    let cu = Handle {
                        cat: Category::Temporaries,
                        bytes: eu,
                        key: key(i, 7, token),
                    };
                    let cd = Handle {
                        cat: Category::Temporaries,
                        bytes: ed,
                        key: key(i, 8, token),
                    };
                    sink.alloc(cu, &[]);
                    sink.alloc(cd, &[]);
                    sink.free(cu);
                    sink.free(cd);
                }
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
