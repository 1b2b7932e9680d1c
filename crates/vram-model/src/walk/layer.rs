//! Layers read from the layer-by-layer description ([`crate::describe`]): one [`LayerDesc`] per
//! distinct block kind, built once by [`Step::new`] from what each mechanism's module says a
//! training step saves and makes ([`crate::mech`]: `train` in each), composed here into the
//! layer (its norms, a decoder's cross-attention, the feed-forward after the mixer, the
//! backward's gradients) and the notes an estimate carries.

use super::*;
use crate::describe::{Block, Blocks, Ffn, Mixer, Residual, TensorKind};
use crate::mech::step::Extra;
use crate::mech::{attention, dense, moe};
use generate::CacheBytes;
use parts::TmpParts;

/// What an estimate over the layer-by-layer description assumed, one line per mechanism
/// present that says how it is modelled (each mechanism's `note`), and the vision tower's.
pub(super) fn notes(b: &Blocks) -> Vec<&'static str> {
    if b.is_empty() {
        return Vec::new();
    }
    let mut v = Vec::new();
    let mut add = |s: &'static str| {
        if !v.contains(&s) {
            v.push(s);
        }
    };
    for k in &b.kinds {
        if let Some(n) = k.mixer.note() {
            add(n);
        }
        if let Some(n) = k.ffn.note() {
            add(n);
        }
    }
    if let Some(v) = &b.vision {
        add(v.note());
    }
    v
}

/// One layer of the description: its mixer (and a decoder's cross-attention), its
/// feed-forward(s), its norms; what it saves, its forward's and backward's high points as the
/// allocator sees them, its inference and decode temporaries.
pub(super) fn block_layer(b: &Blocks, blk: &Block, c: &Ctx, params: u64, matmul: u64) -> LayerDesc {
    if blk.skipped_without_images() {
        // Llama 3.2 Vision's cross-attention layer in a text-only step: the model's loop
        // passes over it (`Step::new` refuses images for it), so it holds only its weights:
        // no activations, no gradient, no optimizer state.
        return LayerDesc {
            params,
            matmul_params: matmul,
            no_grad: true,
            ..LayerDesc::default()
        }
        .with_totals();
    }
    let hidden = b.hidden;
    let mut p = Parts::default();
    let mx = blk.mixer.train(b, c, &mut p);
    let mut ran = u64::from(!matches!(blk.mixer, Mixer::None));
    let mut mixer_bwd = mx.bwd;
    let mut infer = mx.infer;
    let mut fwd_kept = mx.kept;
    if let Some(cross) = blk.cross() {
        // T5's `EncDecAttention` over the encoder's output, with its own norm.
        let (bwd, inf, kept) = attention::train_parts(&cross, b, c, true, &mut p);
        mixer_bwd = mixer_bwd.max(bwd);
        infer = infer.max(inf);
        fwd_kept += kept;
        ran += 1;
    }
    // One norm for both branches (Falcon-7B): the feed-forward reads the mixer's normed input.
    let shared_norm = blk.residual == Residual::Parallel && blk.norms.count == 1;
    let ffn_from = if blk.cross_attention || shared_norm {
        0
    } else {
        p.n
    };
    // The feed-forward's backward as tensors, where a dense MLP's dominates: its `live`
    // intermediate-sized gradients; and the input gradient of its down projection, which
    // replaces the saved tensor it consumed.
    let mut pieces = 1u64;
    let mut down_input = 0u64;
    let ff = match blk.ffn {
        Ffn::Dense(d) => {
            let (bwd, inf) = dense::train(&d, b, c, shared_norm, &mut p);
            pieces = if d.gated { 3 } else { 2 };
            down_input = m(&[c.tok, d.intermediate.div_ceil(c.t), c.cmp]);
            Extra {
                bwd,
                infer: inf,
                decode: inf / c.s.max(1),
                ..Extra::default()
            }
        }
        Ffn::Moe(mo) => moe::train(&mo, b, c, true, &mut p),
        Ffn::DenseAndMoe(d, mo) => {
            let (bwd, inf) = dense::train(&d, b, c, false, &mut p);
            let x = moe::train(&mo, b, c, true, &mut p);
            Extra {
                bwd: bwd.max(x.bwd),
                fwd: x.fwd,
                infer: inf.max(x.infer),
                decode: (inf / c.s.max(1)).max(x.decode),
                decode_experts: x.decode_experts,
                ..Extra::default()
            }
        }
        Ffn::None => Extra::default(),
    };
    ran += u64::from(blk.ffn != Ffn::None && !shared_norm);
    for _ in ran..blk.norms.count {
        crate::mech::norm::train(b, c, &mut p); // post-norms (Gemma 2/3/4)
    }
    let bwd = mixer_bwd.max(ff.bwd);
    let grads_in_out = 2 * c.rep(hidden, c.res);
    let mut bwd_tmp = grads_in_out.saturating_add(bwd);
    // The same bytes tensor by tensor, for the allocator replay: the gradients flowing in and
    // out, the feed-forward's intermediate-sized gradients (or one block), the half weight
    // gradient.
    let mut tmp_parts = TmpParts::default();
    tmp_parts.bwd[0] = c.rep(hidden, c.res);
    tmp_parts.bwd[1] = c.rep(hidden, c.res);
    // The mixer's high point as its tensors where the mechanism names them (Gated DeltaNet's
    // chunk-rule backward), else one block. A two-half backward's mixer half is the two
    // gradients and those where the mixer's high point is the layer's, else one block.
    let named = mx.bwd > 0 && mx.bwd_parts.iter().sum::<u64>() == mx.bwd;
    let mut mixer_parts = [0u64; crate::mech::step::BWD_PARTS];
    if named {
        mixer_parts = mx.bwd_parts;
    } else {
        mixer_parts[0] = mx.bwd;
    }
    let mixer_listed = named || (bwd == mx.bwd && !blk.cross_attention);
    if mixer_listed {
        tmp_parts.mixer_bwd[0] = c.rep(hidden, c.res);
        tmp_parts.mixer_bwd[1] = c.rep(hidden, c.res);
        tmp_parts.mixer_bwd[2..2 + mixer_parts.len()].copy_from_slice(&mixer_parts);
    }
    if ff.bwd >= bwd && down_input > 0 && ff.bwd % pieces == 0 {
        for j in 0..pieces as usize {
            tmp_parts.bwd[2 + j] = ff.bwd / pieces;
        }
    } else if bwd == mx.bwd && !blk.cross_attention {
        tmp_parts.bwd[2..2 + mixer_parts.len()].copy_from_slice(&mixer_parts);
    } else {
        tmp_parts.bwd[2] = bwd;
    }
    let mut half_grad = 0;
    if c.style == AmpStyle::Autocast && c.cmp != 4 && c.res == 4 {
        // Mixed precision: the half gradient of the largest weight (an expert bank is one
        // parameter) before it is added to the fp32 `.grad` (`ToCopyBackward` makes the fp32
        // one). Pure half weights have none: the matmul's gradient is the `.grad`
        // AccumulateGrad keeps.
        let mut largest = 0u64;
        blk.tensors(hidden, &mut |x| {
            if x.kind != TensorKind::Vector {
                largest = largest.max(x.numel().div_ceil(c.t));
            }
        });
        half_grad = m(&[largest, c.cmp]);
        bwd_tmp = bwd_tmp.saturating_add(half_grad);
        tmp_parts.bwd[parts::HALF_GRAD] = half_grad;
        if mixer_listed {
            tmp_parts.mixer_bwd[parts::HALF_GRAD] = half_grad;
        }
    }
    // The feed-forward's output projection (rows = hidden; an expert bank is one parameter):
    // its gradient comes first in a two-half backward.
    let mut first_grad = 0u64;
    blk.ffn.tensors(hidden, &mut |x| {
        if x.kind != TensorKind::Vector && x.rows == hidden {
            first_grad = first_grad.max(x.numel().div_ceil(c.t));
        }
    });
    // The forward's high point beyond the layer's output: the fp32 residual-stream tensor, an
    // eager attention's two score tensors, or a mechanism's own.
    let eager_scores = match blk.mixer {
        Mixer::Attention(a) if !a.sinks && c.attention == crate::setup::Attention::Eager => {
            Some(m(&[c.b, a.heads.div_ceil(c.t), c.s, c.s, c.cmp, 2]))
        }
        _ => None,
    };
    let core = eager_scores
        .unwrap_or_else(|| c.rep(hidden, 4))
        .max(mx.fwd)
        .max(ff.fwd);
    tmp_parts.fwd = [c.rep(hidden, c.res), core];
    LayerDesc {
        parts: p,
        checkpoint: c.rep(hidden, c.res),
        fwd_tmp: c.rep(hidden, c.res).saturating_add(core),
        tmp_parts,
        bwd_tmp,
        params,
        matmul_params: matmul,
        infer_tmp: infer.max(ff.infer),
        fwd_kept,
        ffn_from,
        ffn_bwd_tmp: grads_in_out
            .saturating_add(ff.bwd.saturating_sub(down_input))
            .saturating_add(half_grad),
        mixer_bwd_tmp: grads_in_out
            .saturating_add(mx.bwd)
            .saturating_add(half_grad),
        ffn_first_grad: first_grad,
        half_grad,
        decode: mx.decode.max(ff.decode),
        decode_per_ctx: mx.decode_per_ctx,
        decode_experts: ff.decode_experts,
        // Less the layer's input, which the walk holds as the residual stream.
        infer_mixer: mx.infer.saturating_sub(c.rep(hidden, c.res)),
        infer_ffn: ff.infer.saturating_sub(c.rep(hidden, c.res)),
        ..LayerDesc::default()
    }
    .with_totals()
}

impl Step<'_> {
    /// One [`LayerDesc`] per kind of the description, its tensors on this GPU, its cache, and
    /// the per-layer index.
    pub(super) fn init_blocks(&mut self, t: &Transformer) {
        let b = &t.blocks;
        let tp = self.setup.parallel.tp;
        let c = self.ctx;
        let kv_bytes = match self.setup.mode {
            Mode::Infer(i) => i.kv_bytes,
            Mode::Train(_) => c.cmp,
        };
        self.kinds.clear();
        self.kind_tensors.clear();
        self.kind_mixer_late.clear();
        self.caches.clear();
        for kind in &b.kinds {
            let mut elems = Vec::new();
            let (mut params, mut matmul) = (0u64, 0u64);
            // The mixer's tensors lead the list (`Block::tensors`); its output projection is
            // its largest matrix whose rows are the hidden size.
            let (mut late, mut leading, mut out) = (Vec::new(), true, None::<(usize, u64)>);
            kind.tensors(b.hidden, &mut |x| {
                let n = x.numel();
                let local = if x.tp { n.div_ceil(tp) } else { n };
                leading &= x.component == crate::mech::Component::Mixer;
                if leading
                    && x.kind != crate::mech::TensorKind::Vector
                    && x.rows == b.hidden
                    && out.is_none_or(|(_, e)| n > e)
                {
                    out = Some((elems.len(), n));
                }
                late.push(leading);
                elems.push(local);
                params += local;
                if x.tp {
                    matmul += local;
                }
            });
            let desc = block_layer(b, kind, &c, params, matmul);
            let mut caches = Vec::new();
            kind.mixer.cache_tensors(&mut |x| {
                let bytes = if x.fp32 { 4 } else { kv_bytes };
                caches.push(CacheBytes {
                    per_token: m(&[x.local(x.per_token, tp), bytes]),
                    fixed: m(&[x.local(x.fixed, tp), bytes]),
                    window: x.window.unwrap_or(0),
                });
            });
            self.caches.push(caches);
            self.kinds.push(desc);
            if let Some((j, _)) = out {
                late[j] = false;
            }
            self.kind_tensors.push(elems);
            self.kind_mixer_late.push(late);
        }
        self.pattern = b.pattern.clone();
        self.late_mixer_grads = self.walks_node_order(t);
        self.checkpointed = if self.walks_checkpointed_ops(t) {
            b.kinds
                .iter()
                .zip(&self.kinds)
                .map(|(kind, d)| {
                    let parts = super::generate::InferParts {
                        mixer: d.infer_mixer,
                        ffn: d.infer_ffn,
                    };
                    super::generate::layer_ops(b, kind, &parts, &c, &[])
                })
                .collect()
        } else {
            Vec::new()
        };
    }

    /// Whether a recomputed layer's forward is walked as its op program: transformers'
    /// non-reentrant checkpoint (`gradient_checkpointing_enable()`, `use_reentrant=False` in
    /// 5.24's `activation_checkpointing_enable`) runs the layer's forward with a pack hook that
    /// keeps nothing (torch.utils.checkpoint `_checkpoint_hook`: a `_Holder` per saved
    /// tensor), so each tensor goes when the modelling code drops it, as in a no-grad forward.
    /// That program is the one `generate`'s prefill walks (one dtype throughout, no cache): a
    /// decoder-only transformers model on one GPU in one dtype (bf16 or fp32; autocast's
    /// casts are not in it, so an autocast step keeps the forward's tensors as one block).
    fn walks_checkpointed_ops(&self, t: &Transformer) -> bool {
        let full = matches!(self.setup.mode, Mode::Train(tr) if tr.recompute == crate::setup::Recompute::Full);
        full && self.walks_node_order(t)
    }

    /// Whether the training step is one whose tensors `tests/engines/train_trace.py` follows
    /// (a decoder-only transformers model in one dtype on one GPU): there the walk follows
    /// autograd's node order where the trace showed it matters (a recomputed layer's forward
    /// op by op, the mixer's gradients after its temporaries); autocast, tensor- and
    /// sequence-parallel and Megatron steps keep their blocks.
    fn walks_node_order(&self, t: &Transformer) -> bool {
        let c = self.ctx;
        t.layout() == Layout::DecoderOnly
            && self.style != AmpStyle::Megatron
            && c.res == c.cmp
            && c.t == 1
            && !c.sp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::describe::{
        Attention as Attn, Blocks, Component, Dense, Dispatch, Ends, Gdn, Mla, Moe, Norm, Norms,
        Window,
    };

    /// A training step of the block's mixer (its mechanism's `train`).
    fn train_mixer(b: &Blocks, blk: &Block, c: &Ctx, p: &mut Parts) -> Extra {
        blk.mixer.train(b, c, p)
    }

    /// A training step of a mixture of experts (`mech::moe::train`).
    fn train_moe(b: &Blocks, mo: &Moe, c: &Ctx, norm: bool, p: &mut Parts) -> Extra {
        moe::train(mo, b, c, norm, p)
    }
    use crate::setup::{Attention as Impl, Infer, KvCache, Precision, Setup};

    /// A step context: `b` sequences of `s` tokens, pure bf16, SDPA, no TP.
    fn ctx(b: u64, s: u64) -> Ctx {
        Ctx {
            tok: b * s,
            b,
            s,
            t: 1,
            sp: false,
            res: 2,
            cmp: 2,
            amp: false,
            attention: Impl::Sdpa,
            style: AmpStyle::Autocast,
            training: true,
            hf_cache: false,
        }
    }

    /// Llama-3-8B's description (RMSNorm, SwiGLU, rotary) with hidden size `hidden`.
    fn llama(hidden: u64) -> Blocks {
        match crate::catalog::lookup("llama-3-8b").unwrap() {
            Model::Transformer(t) => Blocks { hidden, ..t.blocks },
            _ => unreachable!(),
        }
    }

    fn attn(heads: u64, kv: u64, d: u64, window: Window, sinks: bool) -> Attn {
        Attn {
            window,
            sinks,
            ..Attn::new(heads, kv, d)
        }
    }

    fn moe(experts: u64, top_k: u64, i: u64, dispatch: Dispatch, fp32: bool) -> Moe {
        Moe {
            experts,
            top_k,
            expert_intermediate: i,
            gated: true,
            expert_bias: false,
            router_bias: false,
            correction_bias: false,
            router_extra: 0,
            router_weights_fp32: fp32,
            router_param_fp32: false,
            router_linear: None,
            dispatch,
            shared: None,
            shared_gate: false,
            latent: None,
            latent_bias: false,
        }
    }

    fn block(mixer: Mixer, ffn: Ffn, hidden: u64) -> Block {
        Block {
            mixer,
            cross_attention: false,
            ffn,
            norms: Norms {
                count: 2,
                width: hidden,
                norm: Norm::RMS,
            },
            residual: Residual::Sequential,
            extra: (Component::Other, 0),
            per_layer_input: 0,
        }
    }

    /// A decoder-only transformer (RMSNorm, untied head) of `layers`.
    fn model(hidden: u64, vocab: u64, layers: &[Block]) -> Model {
        let mut b = Blocks::from_layers(
            hidden,
            layers,
            Ends {
                embedding: vocab * hidden,
                vocab,
                final_norm: hidden,
                head: vocab * hidden,
                other: 0,
            },
        );
        b.max_positions = 131_072;
        Model::Transformer(Transformer {
            name: "test".into(),
            model_type: "test".into(),
            blocks: b,
        })
    }

    fn deepseek_v3_layer(moe_layer: bool) -> Block {
        // DeepSeek-V3's config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
        // qk_nope 128, qk_rope 64, v 128; dense 18432; 256 experts of 2048, top-8, 1 shared.
        let mla = Mixer::Mla(Mla {
            heads: 128,
            q_lora_rank: Some(1536),
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            bias: false,
            indexer: None,
        });
        let ffn = if moe_layer {
            Ffn::Moe(Moe {
                correction_bias: true,
                shared: Some(Dense::new(2048)),
                ..moe(256, 8, 2048, Dispatch::GroupedMm, true)
            })
        } else {
            Ffn::Dense(Dense::new(18432))
        };
        block(mla, ffn, 7168)
    }

    /// Records the cache bytes live when each phase starts.
    #[derive(Default)]
    struct CacheAt {
        live: u64,
        at: Vec<(Phase, u64)>,
    }
    impl Sink for CacheAt {
        fn alloc(&mut self, h: Handle, _: &[u64]) {
            if h.cat == Category::KvCache {
                self.live += h.bytes;
            }
        }
        fn free(&mut self, h: Handle) {
            if h.cat == Category::KvCache {
                self.live -= h.bytes;
            }
        }
        fn phase(&mut self, p: Phase) {
            self.at.push((p, self.live));
        }
    }

    fn cache_at(model: &Model, prompt: u64, new: u64) -> Vec<(Phase, u64)> {
        let setup = Setup {
            precision: Precision::Bf16,
            mode: Mode::Infer(Infer {
                batch: 1,
                context: prompt + new,
                new_tokens: new,
                kv_bytes: 2,
                kv_cache: KvCache::Dynamic,
            }),
            ..Setup::default()
        };
        let step = Step::new(model, &setup).unwrap();
        let mut sink = CacheAt::default();
        step.walk(0, &mut sink, true, Run::Whole);
        sink.at
    }

    fn decode_entry(at: &[(Phase, u64)], token: u32) -> u64 {
        at.iter()
            .find(|(p, _)| *p == Phase::Decode { token })
            .map(|(_, b)| *b)
            .unwrap()
    }

    /// grouped_mm_experts_forward (integrations/moe.py) over T = 16 tokens, top-2 of 4 experts,
    /// H = 64, I = 32, bf16 with fp32 routing weights: S = 32 rows.
    #[test]
    fn grouped_mm_saves_the_sorted_rows_and_fp32_products() {
        let t = llama(64);
        let c = ctx(2, 8);
        let mut p = Parts::default();
        let x = train_moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, true),
            &c,
            false,
            &mut p,
        );
        let (tok, s, h, i) = (16u64, 32u64, 64u64, 32u64);
        let expected = tok * 4 * 4 // router softmax output, fp32 [T, E]
            + tok * 2 * (8 + 4) // top-k indices (int64) and weights (fp32)
            + tok * 4 // the normalisation's divisor
            + s * 8 // perm // top_k
            + s * 8 // perm
            + 4 * 4 // offsets
            + s * h * 2 // gathered rows
            + s * 2 * i * 2 // gate_up output
            + s * i * 2 // act(gate)
            + s * i * 2 // act(gate) * up
            + s * h * 2 // down output
            + s * 4 // sample_weights_g, fp32
            + s * 8; // inv_perm
        assert_eq!(p.total(false), expected);
        // weighted_out = proj_out * fp32 weights is fp32, then permuted: two [S, H] fp32, the
        // fp32 sum over top-k and its cast back.
        assert_eq!(x.fwd, 2 * s * h * 4 + tok * h * 4 + tok * h * 2);
        // With bf16 routing weights the products stay bf16.
        let mut p2 = Parts::default();
        let y = train_moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &c,
            false,
            &mut p2,
        );
        assert_eq!(y.fwd, 2 * s * h * 2 + tok * h * 2 + tok * h * 2);
        assert_eq!(p.total(false) - p2.total(false), s * 2);
        // Against the real module: `Qwen3MoeSparseMoeBlock` (transformers 5.24.0, torch 2.15 on
        // the CPU, `_experts_implementation="grouped_mm"`, bf16 routing weights) over these
        // shapes saves 19,984 bytes of activations (distinct storages seen by
        // `saved_tensors_hooks`, parameters excluded), its [16, 64] bf16 input included.
        assert_eq!(p2.total(false) + tok * h * 2, 19_984);
    }

    /// Under autocast the expert banks are fp32 master weights and `torch._grouped_mm` has no
    /// autocast rule, so the gathered rows and every expert tensor are fp32.
    #[test]
    fn grouped_mm_under_autocast_runs_in_the_banks_fp32() {
        let t = llama(64);
        let c = Ctx {
            res: 4,
            ..ctx(2, 8)
        };
        let mut p = Parts::default();
        train_moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &c,
            false,
            &mut p,
        );
        // Against the real module: `Qwen3MoeSparseMoeBlock` in fp32 under CPU bf16 autocast
        // (transformers 5.24.0, torch 2.15, tests/data/mechs/qwen3_moe_grouped_mm_autocast_saved.py)
        // saves 36,880 bytes besides its parameters; 2,560 of them are the router linear's
        // autocast copies of its input and weight ([16, 64] and [64, 4] bf16), counted with the
        // layer's casts, not here.
        assert_eq!(p.total(false), 36_880 - 16 * 64 * 2 - 64 * 4 * 2);
        // Inference (bf16 banks) keeps the compute dtype.
        let mut q = Parts::default();
        train_moe(
            &t,
            &moe(4, 2, 32, Dispatch::GroupedMm, false),
            &Ctx {
                training: false,
                ..c
            },
            false,
            &mut q,
        );
        assert!(q.total(false) < p.total(false));
    }

    /// Llama4TextMoe.forward (modeling_llama4.py): every token through every expert.
    #[test]
    fn llama4_runs_every_token_through_every_expert() {
        let t = llama(64);
        let c = ctx(2, 8);
        let mut p = Parts::default();
        train_moe(
            &t,
            &moe(4, 1, 32, Dispatch::AllExperts, false),
            &c,
            false,
            &mut p,
        );
        let (tok, rows, h, i) = (16u64, 64u64, 64u64, 32u64);
        let expected = tok * 4 * 4 // sigmoid scores (fp32)
            + tok * 8 // top-1 index
            + rows * 2 // the scores as a column
            + rows * h * 2 // hidden_states.repeat(E, 1)
            + rows * h * 2 // scaled by the scores
            + rows * 2 * i * 2 // bmm gate_up
            + rows * i * 2 // act(gate)
            + rows * i * 2; // up * act(gate), the down bmm's input
        assert_eq!(p.total(false), expected);
        // Against the real module: `Llama4TextMoe` (transformers 5.24.0, torch 2.15 on the CPU,
        // bf16) over these shapes, its shared expert replaced by zeros, saves 35,328 bytes of
        // activations (distinct storages, parameters excluded), its [16, 64] input included.
        assert_eq!(expected + tok * h * 2, 35_328);
    }

    /// DeepseekV3Attention.expand_kv re-expands the whole cached latent at every decode step:
    /// kv_b_proj's `[b, ctx, 128 · (128 + 128)]` output and `[b, 128, ctx, 192]` keys, bf16.
    #[test]
    fn mla_decode_reexpands_kv_over_the_context() {
        let t = llama(7168);
        let c = ctx(1, 16);
        let mut p = Parts::default();
        let x = train_mixer(&t, &deepseek_v3_layer(false), &c, &mut p);
        assert_eq!(x.decode_per_ctx, 128 * 256 * 2 + 128 * 192 * 2);
    }

    /// The cache after the prefill holds the latent and rotary key only: 576 elements a token
    /// per layer (`DynamicLayer` over `kv_nope` [b, 1, s, 512] and `k_rot` [b, 1, s, 64]).
    #[test]
    fn deepseek_v3_caches_the_latent() {
        let mut layers = vec![deepseek_v3_layer(false); 3];
        layers.extend(vec![deepseek_v3_layer(true); 58]);
        let model = model(7168, 129_280, &layers);
        let at = cache_at(&model, 1000, 4);
        assert_eq!(decode_entry(&at, 1), 61 * 1000 * 576 * 2);
        assert_eq!(decode_entry(&at, 2), 61 * 1001 * 576 * 2);
    }

    /// DynamicSlidingWindowLayer keeps the whole prompt until the first decode step, then
    /// `w − 1` plus the new token; the full layer keeps everything; a Gated DeltaNet layer its
    /// fixed conv state (bf16) and fp32 recurrent state.
    #[test]
    fn sliding_full_and_linear_caches_side_by_side() {
        let h = 512;
        let dense = Ffn::Dense(Dense::new(1024));
        let sliding = block(
            Mixer::Attention(attn(8, 2, 64, Window::Sliding(128), false)),
            dense,
            h,
        );
        let full = block(
            Mixer::Attention(attn(8, 2, 64, Window::Full, false)),
            dense,
            h,
        );
        let g = Gdn {
            num_k_heads: 4,
            num_v_heads: 8,
            k_head_dim: 64,
            v_head_dim: 64,
            conv_kernel: 4,
        };
        let linear = block(Mixer::GatedDeltaNet(g), dense, h);
        let model = model(h, 1000, &[sliding, full, linear]);
        let per_token = 2 * 2 * 64 * 2; // K and V, 2 heads of 64, bf16
        let state = (2 * 4 * 64 + 8 * 64) * 4 * 2 + 8 * 64 * 64 * 4;
        for prompt in [1000u64, 2000] {
            let at = cache_at(&model, prompt, 4);
            assert_eq!(
                decode_entry(&at, 1),
                2 * prompt * per_token + state,
                "prompt {prompt}"
            );
            assert_eq!(
                decode_entry(&at, 2),
                128 * per_token + (prompt + 1) * per_token + state
            );
        }
    }

    /// gpt-oss's eager attention with sinks: softmax over `[b, h, q, k + 1]`, saved, and the
    /// sink column dropped and made contiguous `[b, h, q, k]` for the value matmul.
    #[test]
    fn sinks_save_the_scores_with_the_sink_column() {
        let t = llama(256);
        let c = ctx(1, 10);
        let blk = block(
            Mixer::Attention(attn(4, 2, 64, Window::Full, true)),
            Ffn::None,
            256,
        );
        let mut with = Parts::default();
        let x = train_mixer(&t, &blk, &c, &mut with);
        let scores = 4 * 10 * 11 * 2 + 4 * 10 * 10 * 2;
        // Selective recomputation drops the score tensors only.
        assert_eq!(with.total(false) - with.total(true), scores);
        // A decode step repeats the cached K/V to all 4 heads and makes score rows.
        assert_eq!(x.decode_per_ctx, 4 * (2 * 64 + 4) * 2);
    }

    /// A sliding layer the prompt reaches holds the explicit mask (bool, kept by the model) and
    /// SDPA's `logical_not` and additive copy of it; below the window it has none.
    #[test]
    fn a_sliding_layer_masks_once_the_window_is_reached() {
        let t = llama(256);
        let infer = |window, s| {
            let blk = block(
                Mixer::Attention(attn(4, 4, 64, window, false)),
                Ffn::None,
                256,
            );
            let mut c = ctx(1, s);
            c.training = false;
            train_mixer(&t, &blk, &c, &mut Parts::default()).infer
        };
        assert_eq!(
            infer(Window::Sliding(8), 16) - infer(Window::Full, 16),
            16 * 16 * (2 + 2)
        );
        assert_eq!(infer(Window::Sliding(32), 16), infer(Window::Full, 16));
        assert_eq!(
            infer(Window::Chunked(8), 16) - infer(Window::Full, 16),
            16 * 16 * (2 + 2)
        );
    }

    /// Pipeline stages split the description's layers; the rank holding the MoE layers (and
    /// the head) needs more than the one holding the dense layers.
    #[test]
    fn pipeline_stages_split_the_described_layers() {
        let mut layers = vec![deepseek_v3_layer(false); 2];
        layers.extend(vec![deepseek_v3_layer(true); 2]);
        let model = model(7168, 129_280, &layers);
        let mut setup = Setup::default();
        setup.parallel.pp = 2;
        let step = Step::new(&model, &setup).unwrap();
        let (s0, s1) = (step.stack(0), step.stack(1));
        assert_eq!((s0.len(), s1.len()), (2, 2));
        assert!(step.rank_params(1, &s1) > step.rank_params(0, &s0));
        let e = crate::walk::estimate_allocated(&model, &setup).unwrap();
        assert_eq!(e.pipeline_rank, 1);
    }

    /// Against the real module: the saved-tensor bytes of `Qwen3_5GatedDeltaNet.forward`
    /// (transformers 5.24.0, torch 2.15 on the CPU: the same torch fallbacks a GPU runs without
    /// flash-linear-attention and causal-conv1d), bf16, hidden 256, 2 key and 4 value heads of
    /// 32, conv 4, one sequence; distinct storages seen by `saved_tensors_hooks`, parameters
    /// excluded: 1,925,696 bytes at 128 tokens and 15,365,920 at 1024 (measured in this
    /// session with the engines' venv). The itemisation lands within 5 %.
    #[test]
    fn gated_deltanet_fallback_saves_what_the_real_module_saves() {
        let t = llama(256);
        let g = Gdn {
            num_k_heads: 2,
            num_v_heads: 4,
            k_head_dim: 32,
            v_head_dim: 32,
            conv_kernel: 4,
        };
        let blk = block(Mixer::GatedDeltaNet(g), Ffn::None, 256);
        for (s, real) in [(128u64, 1_925_696f64), (1024, 15_365_920.0)] {
            let c = ctx(1, s);
            let mut p = Parts::default();
            train_mixer(&t, &blk, &c, &mut p);
            // The module alone: without the input norm's fp32 copy, output and rstd.
            let ours = (p.total(false) - (s * 256 * 4 + s * 256 * 2 + s * 4)) as f64;
            assert!((ours / real - 1.0).abs() < 0.05, "{s}: {ours} vs {real}");
        }
    }

    /// Against the real module: `NemotronHMamba2Mixer.forward` (transformers 5.24.0, torch 2.15
    /// on the CPU: `torch_forward`, mamba_ssm and causal_conv1d absent), bf16, hidden 256, 8
    /// heads of 32, state 16, 2 groups, conv 4, chunk 64, one sequence, saves 2,901,234 bytes at
    /// 128 tokens and 23,031,330 at 1024 (distinct storages, parameters excluded). Each saved
    /// storage is itemised (`tests/data/mechs/nemotron_h_mamba2_saved.py` lists them with their
    /// shapes), `torch.einsum`'s contiguous operand copies for `bmm` included: within 1 %
    /// (before they were itemised, 13 % short).
    #[test]
    fn mamba2_fallback_against_the_real_module() {
        let t = llama(256);
        let mb = crate::describe::Mamba2 {
            heads: 8,
            head_dim: 32,
            state_size: 16,
            groups: 2,
            conv_kernel: 4,
            chunk: 64,
            bias: false,
            out_bias: false,
            gated_norm: true,
            conv_bias: true,
            peft_refuses_out_proj: false,
        };
        let blk = block(Mixer::Mamba2(mb), Ffn::None, 256);
        for (s, real) in [(128u64, 2_901_234f64), (1024, 23_031_330.0)] {
            let mut p = Parts::default();
            train_mixer(&t, &blk, &ctx(1, s), &mut p);
            let ours = (p.total(false) - (s * 256 * 4 + s * 256 * 2 + s * 4)) as f64;
            eprintln!(
                "mamba2 {s}: ours {ours} real {real} ({:+.2} %)",
                (ours / real - 1.0) * 100.0
            );
            assert!((ours / real - 1.0).abs() < 0.01, "{s}: {ours} vs {real}");
        }
    }

    /// The estimate says how the description's mechanisms were modelled.
    #[test]
    fn the_estimate_names_its_mechanisms() {
        let layers = vec![deepseek_v3_layer(false), deepseek_v3_layer(true)];
        let model = model(7168, 129_280, &layers);
        let e = crate::walk::estimate_allocated(&model, &Setup::default()).unwrap();
        assert_eq!(e.mechanisms.len(), 2);
        assert!(e.mechanisms[0].starts_with("MLA: latent cache"));
        assert!(e.mechanisms[1].starts_with("MoE: grouped_mm_experts_forward"));
        let uniform = crate::catalog::lookup("llama-3-8b").unwrap();
        let u = crate::walk::estimate_allocated(&uniform, &Setup::default()).unwrap();
        assert!(u.mechanisms.is_empty());
    }

    /// DeepSeek-V3 trains and generates through the description; the MoE layers' fp32 router
    /// input and routed rows make them save more than the dense layers at the same tokens.
    #[test]
    fn deepseek_v3_layers_differ_by_kind() {
        let t = llama(7168);
        let c = ctx(1, 512);
        let dense = block_layer(&t, &deepseek_v3_layer(false), &c, 0, 0);
        let moe_l = block_layer(&t, &deepseek_v3_layer(true), &c, 0, 0);
        assert!(dense.parts.n < 48 && moe_l.parts.n < 48);
        // 512 tokens · top-8 = 4096 rows of 7168 gathered (bf16): 58.7 MB alone.
        assert!(moe_l.saved_all > 4096 * 7168 * 2 * 3);
        assert!(moe_l.saved_all > dense.saved_all);
    }
}

#[cfg(test)]
mod backward_tests {
    use super::*;
    use crate::setup::{Precision, Setup, Train};

    fn last_layer(precision: Precision) -> LayerDesc {
        let model = crate::catalog::lookup("llama-3-8b").unwrap();
        let setup = Setup {
            precision,
            mode: Mode::Train(Train {
                micro_batch: 1,
                seq: 128,
                ..Train::default()
            }),
            ..Setup::default()
        };
        Step::new(&model, &setup).unwrap().last_kind()
    }

    /// Pure bf16 weights: the matmul's weight gradient is the `.grad` AccumulateGrad keeps; under
    /// autocast the bf16 gradient of the fp32 weight's cast comes first and `ToCopyBackward`
    /// makes the fp32 `.grad` from it (the largest: a 4096 × 14336 projection).
    #[test]
    fn only_mixed_precision_has_a_half_gradient_temporary() {
        let (tok, h, f) = (128u64, 4096u64, 14336u64);
        let pure = last_layer(Precision::Bf16);
        // The two residual-stream gradients and the SwiGLU backward's three [tok, f] tensors.
        assert_eq!(pure.bwd_tmp, 2 * tok * h * 2 + 3 * tok * f * 2);
        // Node by node the down projection's input gradient replaces the product it consumed.
        assert_eq!(pure.ffn_bwd_tmp, 2 * tok * h * 2 + 2 * tok * f * 2);
        assert_eq!(pure.ffn_first_grad, h * f);
        let amp = last_layer(Precision::Bf16Amp);
        assert_eq!(amp.bwd_tmp - h * f * 2, 2 * tok * h * 4 + 3 * tok * f * 2);
    }
}
