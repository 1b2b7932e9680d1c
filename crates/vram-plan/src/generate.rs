//! The time of one `model.generate(...)` call of Hugging Face transformers 5.24 on one GPU:
//! what the host does (Python, module calls, operator dispatch, kernel launches, host syncs)
//! and what the GPU does (bytes over HBM, FLOPs), step by step.
//!
//! # What `generate` runs (transformers 5.24, `generation/utils.py`)
//! - **Set-up** (`generate` before `_sample`): the generation config is copied and validated,
//!   logits processors and stopping criteria are built, the attention mask is inferred from the
//!   pad token, a `DynamicCache` is made with one layer object per decoder layer. Six host syncs
//!   (`isin(...).any()` on the pad and eos tokens, the mask checks). The GPU is idle.
//! - **Prefill** (`_prefill`): one forward over the prompt, `logits_to_keep=1`.
//! - **Decode loop** (`_sample`): per new token, `prepare_inputs_for_generation` (slice and
//!   clone the last token), the forward at one token, `logits[:, -1].to(float32, copy=True)`,
//!   the logits processors (`MinNewTokensLengthLogitsProcessor` while `min_new_tokens` is not
//!   reached: `arange`, `isin`, `where`), `argmax`, the unfinished-sequence arithmetic, the
//!   `input_ids` `cat`, the stopping criteria (max length, eos `isin`) and
//!   `StopCheck`'s `bool(unfinished_sequences.max() == 0)`: a host sync every step on CUDA
//!   (`DeferredStopCheck`, which reads the flag a step late, is only taken on `mps`). So one
//!   step's host work and GPU work overlap only within the step: a step takes the larger of the
//!   two, then the sync.
//! - The decode loop runs inside `_optimize_model_for_decode`, which on any device but the CPU
//!   switches experts run by `grouped_mm` to **`batched_mm`** (`integrations/moe.py`): each of
//!   the `tokens × top_k` routed rows gathers its expert's `gate_up_proj` and `down_proj`
//!   (`self.gate_up_proj[expert_ids]`: a copy of one expert's weights per row) and runs a
//!   `bmm`. The prefill runs before the switch, with `grouped_mm`.
//!
//! # The host model
//! Host seconds are kernels × [`EagerCalibration::launch_s`] (the measured per-kernel cost of
//! a Python loop of tiny CUDA ops, 9.6 µs on the H100 machine's host: its dispatch and launch),
//! plus (Python function calls and view operators) × [`PY_CALL_S`], plus host syncs ×
//! `launch_s`. Kernels, views, module calls and Python function calls are counted per mechanism from what
//! transformers 5.24 runs (each mechanism's `generate_host` in `vram_model::mech`, which
//! [`block_host`] asks the layer for; [`ends_host`] and the glue constants below), and held
//! to the library by `tests/engines/generate_ops.py`, which counts them on the CPU at the
//! dispatcher and with `sys.setprofile` (`tests/data/generate_ops/counts.json`,
//! `tests/it/generate.rs`). A module call runs about 7 Python functions
//! (`Module.__call__`, `_call_impl`, `forward` and its decorators: 7.0–7.7 per module over the
//! dense, attention and Gated DeltaNet layers counted, [`PY_PER_MODULE`]).
//!
//! # The GPU model
//! - Decode: bytes over the element-wise bandwidth ([`crate::eager::Rates::bytes_per_s`]):
//!   every weight the step reads (a dense layer's linears; routed experts as `batched_mm`
//!   moves them: each routed row's expert weights read from the bank, written as a copy, read
//!   by the `bmm`, whole contiguous matrices streamed at the copy bandwidth,
//!   [`crate::eager::Rates::copy_s`], as the H200's profiles ran them), the cache as transformers keeps it (`DynamicCache`: attention reads the
//!   keys and values, `torch.cat` reads the old ones and writes the new; a sliding layer its
//!   window; a Gated DeltaNet layer's fp32 recurrent state through
//!   `torch_recurrent_gated_delta_rule`'s passes), the head; or FLOPs over the dense peak,
//!   whichever is longer.
//! - What a decode step does not do (transformers 5.24 on the CPU, `sdpa`, read with
//!   `TorchDispatchMode` at batch 1 and 16): no `repeat_kv` (with no mask SDPA gets
//!   `enable_gqa=True`; with a padding mask `pack_gqa` folds the query heads onto the key/value
//!   heads), no causal mask (`_ignore_causal_mask_sdpa` skips it when the attention mask has no
//!   zero; a prompt holding the pad token gets a `[b, 1, 1, T]` bool mask and a host sync per
//!   step), logits `[b, vocab]` only (bf16 out of the head, the fp32 copy, two processors'
//!   `clone`/`where`): at batch 16 all of these are under 0.1 GB a step against the weights'
//!   16 GB. On an H200 (sm90, PyTorch 2.11 cu130, cuDNN above 9.15) `check_prefer_cudnn_attention`
//!   puts cuDNN's SDPA first, which takes the GQA shapes; its graph cache is keyed by the key
//!   length, so every new cache length builds a graph once (a first call pays it; a repeated
//!   call of the same length does not).
//! - Prefill: each layer's operators priced by [`crate::eager::block_layer`] (GEMMs from the H100
//!   grid, fused or eager attention, experts through `grouped_mm`, element-wise bytes).

use serde::Serialize;
use vram_model::arch::{Layout, Transformer};
use vram_model::blocks::{Block, CacheKind, Component, Dispatch, Ffn, Mixer, Quant, TensorKind};
use vram_model::gpu::Gpu;
use vram_model::mech::host::HostCtx;
pub use vram_model::mech::host::{Host, Phase, PY_PER_MODULE};
use vram_model::setup::{AmpStyle, Attention, Precision};

pub use crate::eager::Kernels;
use crate::eager::{self, EagerCalibration, Rates, Shape};

/// Host seconds per Python function call or view operator on the machine the shared H200
/// measurements ran on: the one host cost this model fits.
///
/// Derived from one measurement: Llama-3.1-8B in bf16, batch 1, prompt 1024, greedy, dynamic
/// cache, decodes at 24.27 ms a token on an NVIDIA H200 (vramkit's shared ground truth,
/// 2026-11-27, transformers 5.24, PyTorch 2.11). Its GPU work is 4.6 ms (15.4 GB at the H200's
/// element-wise bandwidth), so the step is the host's: 1332 kernel launches and one sync at the
/// measured 9.6 µs (12.80 ms), and 4796 Python function calls and views as this module counts
/// them (32 layers × (91 + 36), the loop's 678 and its 54): 11.47 ms, 2.392 µs each. The 9.6 µs
/// launch cost was measured on the H100 machine's host (a Python loop of tiny CUDA ops); the
/// H200 machine's own was not, so the split between launches and Python calls is this
/// constant's, not a measurement's (the prepared GPU run measures both: `gpu/measure3.py`).
pub const PY_CALL_S: f64 = 2.392e-6;

/// Python function calls of one decode step outside the model's layers (`_sample`'s loop,
/// `prepare_inputs_for_generation`, `_update_model_kwargs_for_generation`, the processors and
/// stopping criteria, the model's own `forward` and output classes, the cache's bookkeeping):
/// 468 with 4 decoder layers and 504 with 8 (Llama, counts.json), so 432 and 9 per layer, less
/// the 42 of the six model-level module calls counted in [`ends_host`].
const STEP_GLUE_PY: (f64, f64) = (390.0, 9.0);

/// Python function calls of `generate(max_new_tokens=1)` outside the layers, in two parts
/// (Llama with 4 and 8 decoder layers, counts.json):
/// - [`SETUP_PY`], before the model's first forward (generation config copied and validated,
///   processors, stopping criteria, the cache with one layer object per decoder layer): 1840
///   and 1976, so 1704 and 34 per layer (`setup` in counts.json);
/// - [`PREFILL_GLUE_PY`], the rest: the model's own code around its layers and one token's
///   selection after the forward: 412 and 448 (`outside`), so 376 and 9 per layer, less the 42
///   of the model-level module calls counted in [`ends_host`].
const SETUP_PY: (f64, f64) = (1704.0, 34.0);
/// See [`SETUP_PY`].
const PREFILL_GLUE_PY: (f64, f64) = (334.0, 9.0);

/// Host cost of one Python call of `generate`'s set-up against one counted call of a decode
/// step ([`PY_CALL_S`]): 0.33.
///
/// [`PY_CALL_S`] is fitted on a decode step, where every counted call is followed by tensor
/// operators whose argument parsing, dispatch and allocation the bare launch loop (9.6 µs) does
/// not include, so the fitted cost carries them. The set-up is plain Python (config copies and
/// validation, dictionaries, the cache's layer objects) with 30 operators among 2792 calls.
/// Measured on the CPU with the pinned libraries by `tests/engines/generate_host.py` (the tiny
/// 32-layer Llama of `generate_ops.py` in bf16: the set-up's wall time per call against a
/// decode step's residual per counted call after its 1333 operators at the bare loop's cost):
/// 0.319, 0.335 and 0.350 in three runs on the project's 2-core VM (2026-11-27; torch 2.15,
/// transformers 5.24), 0.33 taken. The H200 host's own ratio was not measured.
pub const SETUP_CALL_WEIGHT: f64 = 0.33;

/// Extra set-up Python work of a model whose experts run `grouped_mm`: `generate` enters
/// `_optimize_model_for_decode`, whose `set_experts_implementation` walks every module
/// (`self.modules()`) to switch them to `batched_mm` and again to switch them back. The walk's
/// calls are light (a generator step each: 13 bytecode instructions a call against 28 in the
/// layers' calls and in the rest of `generate`'s), so it is counted in calls of the layers'
/// weight: 15,400 instructions with 4 layers and 2,520 more per layer on the tiny Qwen3-MoE
/// (`sys.settrace` opcode events), 190 + 90 per layer at 28 instructions a call.
const MOE_SETUP_GLUE_PY: (f64, f64) = (190.0, 90.0);

/// Host seconds of `w`: its launches and syncs at the launch cost, its Python calls and views
/// at [`PY_CALL_S`].
pub fn host_seconds(w: &Host, cal: &EagerCalibration) -> f64 {
    (w.kernels + w.syncs) * cal.launch_s + (w.py + w.views) * PY_CALL_S
}

/// One RMSNorm module in a bf16 model (`vram_model::mech::norm::rms_norm_host`).
fn rms_norm() -> Host {
    vram_model::mech::norm::rms_norm_host()
}

/// The host work of one decoder layer of `blk` in `phase`, as transformers 5.24 writes it:
/// what the layer's mechanisms count ([`Block::generate_host`]; counted on the CPU:
/// `tests/data/generate_ops/counts.json`).
pub fn block_host(
    t: &Transformer,
    blk: &Block,
    attention: Attention,
    phase: Phase,
    kernels: Kernels,
) -> Host {
    let h = t.blocks.hidden.max(t.hidden());
    blk.generate_host(
        h,
        &HostCtx {
            attention,
            phase,
            kernels,
        },
    )
}

/// The model's work outside its layers in one forward (`phase`): the embedding, the rotary
/// tables, eager attention's explicit masks, the final norm and head, the model classes; and
/// for a decode step `generate`'s loop around it (33 kernels, 7 views, the stop check's sync,
/// and its Python, [`STEP_GLUE_PY`]).
pub fn ends_host(t: &Transformer, attention: Attention, phase: Phase) -> Host {
    let mut w = Host::module(1.0, 0.0, 0.0); // embedding
    w.add(Host::module(9.0, 1.0, 0.0)); // rotary tables
    w.add(rms_norm());
    w.add(vram_model::mech::host::linears(1.0));
    w.add(Host::module(0.0, 1.0, 0.0)); // *ForCausalLM: the logits slice
    w.add(Host::module(0.0, 0.0, 0.0)); // *Model
    if attention == Attention::Eager {
        // Eager attention needs the masks as tensors: `create_causal_mask` and the sliding
        // one build them every forward (25 kernels, 26 views for gpt-oss's two).
        w.add(Host::op(25.0, 26.0));
    }
    if phase == Phase::Decode {
        w.add(Host::op(33.0, 7.0));
        w.syncs += 1.0;
        w.py += STEP_GLUE_PY.0 + STEP_GLUE_PY.1 * t.layers() as f64;
    }
    w
}

/// `generate`'s own work in `generate(max_new_tokens=1)` before the prompt's forward, the GPU
/// idle: the set-up (30 kernels, 6 views, 5 host syncs, counted on the CPU) and its Python
/// ([`SETUP_PY`]; price it with [`setup_seconds`]).
pub fn setup_host(t: &Transformer) -> Host {
    let l = t.layers() as f64;
    let mut w = Host::op(30.0, 6.0);
    w.syncs = 5.0;
    w.py = SETUP_PY.0 + SETUP_PY.1 * l;
    w
}

/// Host seconds of the set-up: its launches and syncs at the launch cost, its Python calls at
/// [`SETUP_CALL_WEIGHT`] of a decode step's.
pub fn setup_seconds(s: &Host, cal: &EagerCalibration) -> f64 {
    (s.kernels + s.syncs) * cal.launch_s + (s.py * SETUP_CALL_WEIGHT + s.views) * PY_CALL_S
}

/// `generate(max_new_tokens=1)`'s own work after the set-up and outside the model's layers and
/// modules: the model's code around its layers and one token's selection (31 kernels, 5 views,
/// the stop check's sync, [`PREFILL_GLUE_PY`]); with experts switched to `batched_mm`,
/// `_optimize_model_for_decode`'s module walks ([`MOE_SETUP_GLUE_PY`]). It is launched behind
/// the prompt's forward, so it runs while the GPU works.
pub fn prefill_glue_host(t: &Transformer) -> Host {
    let l = t.layers() as f64;
    let mut w = Host::op(31.0, 5.0);
    w.syncs = 1.0;
    w.py = PREFILL_GLUE_PY.0 + PREFILL_GLUE_PY.1 * l;
    if grouped_experts(t) {
        w.py += MOE_SETUP_GLUE_PY.0 + MOE_SETUP_GLUE_PY.1 * l;
    }
    w
}

/// Whether any layer runs experts through `grouped_mm` (so `generate` switches them).
fn grouped_experts(t: &Transformer) -> bool {
    t.blocks
        .kinds
        .iter()
        .any(|b| b.ffn.moe().is_some_and(|m| m.switched_for_decode()))
}

/// The blocks with how many layers use each.
fn kinds(t: &Transformer) -> Vec<(Block, f64)> {
    t.blocks
        .kinds
        .iter()
        .copied()
        .zip(t.blocks.kind_counts().into_iter().map(|n| n as f64))
        .collect()
}

/// Bytes one decode step of `b` sequences moves through layer `blk` at cache length `ctx`
/// (weights in `wbytes`, the cache in `kv_bytes`), and its FLOPs.
#[allow(clippy::too_many_arguments)]
fn block_decode(
    t: &Transformer,
    blk: &Block,
    b: f64,
    ctx: f64,
    static_len: Option<f64>,
    wbytes: f64,
    kv_bytes: f64,
    kernels: Kernels,
    dequantized: bool,
) -> (f64, f64, f64) {
    let h = t.blocks.hidden.max(t.hidden());
    let storage = &t.blocks.storage;
    let mut bytes = 0.0;
    // Bytes streamed at the copy bandwidth (`eager::Rates::copy_s`): `batched_mm`'s copies.
    let mut streamed = 0.0;
    let mut flops = 0.0;
    // The routed experts' bytes as held (packed, or in the model's dtype).
    let mut held_experts = 0.0;
    // Every weight but the routed experts (and norms, vectors) is read once, as held.
    blk.tensors(h, &mut |x| {
        if x.component != Component::RoutedExperts {
            bytes += if x.fp32 {
                x.numel() as f64 * 4.0
            } else {
                storage.held_bytes(&x, wbytes as u64, dequantized) as f64
            };
            if x.kind == TensorKind::Linear {
                flops += 2.0 * b * x.numel() as f64;
            }
        } else {
            held_experts += storage.held_bytes(&x, wbytes as u64, dequantized) as f64;
        }
    });
    if let Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) = blk.ffn {
        let width = m.latent.unwrap_or(h) as f64;
        let up = if m.gated { 2.0 } else { 1.0 } * m.expert_intermediate as f64;
        let per_expert = (up + m.expert_intermediate as f64) * width * wbytes;
        let rows = b * m.top_k as f64;
        flops += 2.0 * rows * per_expert / wbytes;
        if m.dispatch == Dispatch::GroupedMm
            && !(storage.quant == Quant::Mxfp4 && kernels.mxfp4 && !dequantized)
        {
            // Each routed row's expert copied out of the bank (read and written, whole
            // contiguous matrices) and read again by the GEMV-shaped bmm: streaming traffic.
            streamed += 3.0 * rows * per_expert;
        }
        bytes += if storage.quant == Quant::Mxfp4 && kernels.mxfp4 && !dequantized {
            // `Mxfp4GptOssMLP` (transformers 5.24, integrations/mxfp4.py): the router, then
            // the `kernels` hub's Triton `matmul_ogs` twice (gate/up with the fused SwiGLU,
            // down with the routing weights), over the packed FP4 blocks and their scales as
            // held: each expert a row is routed to is read once, fp32 biases included.
            m.occupied(rows) * held_experts / (m.experts as f64).max(1.0)
        } else {
            match m.dispatch {
                // `batched_mm`'s copies: counted in `streamed` above.
                Dispatch::GroupedMm => 0.0,
                Dispatch::AllExperts => m.experts as f64 * per_expert,
                Dispatch::Loop => m.occupied(rows) * per_expert,
            }
        };
    }
    let spec = blk.mixer.cache();
    let per_token = spec.per_token as f64 * kv_bytes;
    match spec.kind {
        CacheKind::Full | CacheKind::Indexed => {
            bytes += match static_len {
                // `StaticCache`: attention reads the whole preallocated length, `index_copy_`
                // writes the new token.
                Some(full) => b * per_token * (full + 1.0),
                // Attention reads ctx + 1 tokens; `torch.cat` reads ctx and writes ctx + 1.
                None => b * per_token * (3.0 * ctx + 2.0),
            };
            if let Mixer::Mla(m) = blk.mixer {
                // transformers re-expands the latent cache through kv_b_proj every step:
                // the expanded keys and values written and read by SDPA.
                let exp = m.heads as f64
                    * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) as f64;
                bytes += 2.0 * b * (ctx + 1.0) * exp * wbytes;
                flops += 2.0
                    * b
                    * (ctx + 1.0)
                    * m.kv_lora_rank as f64
                    * (m.heads * (m.qk_nope_head_dim + m.v_head_dim)) as f64;
            }
            if let Mixer::Attention(a) = blk.mixer {
                flops += 2.0 * b * (ctx + 1.0) * (a.heads * (a.head_dim + a.v_head_dim)) as f64;
            }
        }
        CacheKind::Sliding => {
            let w = spec.window.map_or(ctx, |w| (w as f64).min(ctx));
            bytes += b * per_token * (3.0 * w + 2.0);
        }
        CacheKind::Linear => {
            // The conv state (`cat` and `copy_`), and the fp32 recurrent state through
            // torch_recurrent_gated_delta_rule's passes (decay, the kv memory, the rank-1
            // update, the output: about ten reads and writes of the state) or fla's fused
            // kernel (read once, written once).
            bytes += b * spec.state as f64 * kv_bytes * 3.0;
            let passes = if kernels.fla { 2.0 } else { 10.0 };
            bytes += b * spec.state_f32 as f64 * 4.0 * passes;
        }
        CacheKind::None => {}
    }
    (bytes, streamed, flops)
}

/// Serving speed of `generate` on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Serving {
    /// `generate(max_new_tokens=1)`: `generate`'s set-up on the host (the GPU idle), then the
    /// prompt's forward, the larger of its host and GPU time.
    pub prefill_s: f64,
    /// Host seconds of the set-up (`generate`'s Python, five syncs) before the prompt's forward.
    pub setup_s: f64,
    /// Host seconds of the prompt's forward (its launches, module calls and views) and of the
    /// glue launched behind it (the token's selection, the expert switch).
    pub prefill_host_s: f64,
    /// GPU seconds of the prompt's forward.
    pub prefill_gpu_s: f64,
    /// One decode step (one new token for every sequence), seconds, the mean over the call's
    /// steps: the larger of [`Serving::decode_gpu_s`] and [`Serving::decode_host_s`], then the
    /// step's host sync.
    pub decode_token_s: f64,
    /// GPU time of a mean decode step: [`Serving::decode_bytes`] over the element-wise
    /// bandwidth (`batched_mm`'s expert copies over the copy bandwidth), or its FLOPs over the
    /// dense peak, whichever is longer.
    pub decode_gpu_s: f64,
    /// Bytes a mean decode step moves (weights as held: packed ones as stored unless
    /// dequantized; `batched_mm`'s expert copies, or each routed MXFP4 expert once under the
    /// `kernels` package; the cache's reads and `torch.cat` copies, the head).
    pub decode_bytes: f64,
    /// Host time of a decode step.
    pub decode_host_s: f64,
    /// Kernels one decode step launches.
    pub decode_kernels: f64,
    /// Python function calls and view operators of one decode step.
    pub decode_calls: f64,
    /// `"gpu"` or `"host"`: which side bounds a decode step.
    pub decode_bound: &'static str,
    /// The whole `generate` call: the prefill (which yields the first token), then one decode
    /// step per further token.
    pub generate_s: f64,
    /// Tokens generated per second over the batch while decoding.
    pub decode_tokens_per_s: f64,
    /// Whether this call's figures were checked against a measurement of the same model, batch
    /// and prompt on the same GPU (see [`Serving::checks`]): `false` unless they were.
    pub validated: bool,
    /// What the model was held to: the one fitted host constant and the measurements it was
    /// checked against.
    pub checks: &'static str,
}

/// What this model was fitted on and checked against (vramkit's shared H200 ground truth).
/// The figures are the two H200 runs' (`crates/vram-cli/tests/data/h200/`: `measured.json` of
/// 2026-11-27, `measured3.json` of 2026-11-28), as `cargo test -p vram-cli --test h200` prints them.
pub const CHECKS: &str = "host cost per Python call fitted on Llama-3.1-8B batch-1 decode (H200, 24.27 ms; 25.34 ms in a second run); prefill within 4 % on Llama-3.1-8B batch 1 and 16 (H200); this gives less than measured, causes not found: Llama-3.1-8B batch-16 decode by 20-34 %, Qwen3-30B-A3B decode by 37-48 % and prefill by 9-13 %, gpt-oss-20b (eager, bf16) decode by 59 % at batch 1 and 10 % at 16, prefill by 24-46 %; other models unchecked";

/// A `generate` call: `batch` sequences of a `prompt`-token prompt, `new_tokens` generated,
/// KV cache of `kv_bytes` per element; `static_cache`: transformers' `StaticCache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Generate {
    /// Sequences.
    pub batch: u64,
    /// Prompt tokens per sequence.
    pub prompt: u64,
    /// Tokens generated per sequence.
    pub new_tokens: u64,
    /// Bytes per KV-cache element.
    pub kv_bytes: u64,
    /// `cache_implementation="static"`.
    pub static_cache: bool,
    /// The model's dtype: `Fp32` runs fp32 weights and GEMMs; every other precision is a
    /// half-precision model (inference has no master weights).
    pub precision: Precision,
    /// The attention implementation (`attn_implementation`).
    pub attention: Attention,
    /// Installed kernel packages transformers picks up.
    pub kernels: Kernels,
    /// Packed weights dequantized at load (`Overheads::weights_dequantized`: an MXFP4
    /// checkpoint without the `kernels` package, `--dequantized`): every weight is read in the
    /// model's dtype. Otherwise packed weights are read as held.
    pub weights_dequantized: bool,
}

/// Prices `generate` of `new_tokens` tokens after a `prompt`-token prompt for `batch`
/// sequences of a decoder-only `t` on one GPU. `None` for models without a decoder-only
/// generate path.
pub fn serving(
    t: &Transformer,
    gpu: &Gpu,
    cal: &EagerCalibration,
    g: &Generate,
) -> Option<Serving> {
    if t.layout() != Layout::DecoderOnly || g.batch == 0 || g.prompt == 0 || t.blocks.is_empty() {
        return None;
    }
    let prec = if g.precision == Precision::Fp32 {
        Precision::Fp32
    } else {
        Precision::Bf16
    };
    let wbytes = prec.compute_bytes() as f64;
    let cal = &EagerCalibration {
        kernels: g.kernels,
        ..*cal
    };
    let r = Rates::new(gpu, cal);
    let b = g.batch as f64;
    let p = g.prompt as f64;
    let h = t.blocks.hidden.max(t.hidden()) as f64;
    let v = t.vocab() as f64;
    let blocks = kinds(t);

    // --- prefill: generate(max_new_tokens=1) ---
    let s = Shape::new(b * p, p, prec, AmpStyle::Autocast, false);
    let mut pre_host = Host::default();
    let mut pre_gpu = 0.0;
    for (blk, n) in &blocks {
        let ctx = HostCtx {
            attention: g.attention,
            phase: Phase::Prefill,
            kernels: g.kernels,
        };
        let mut hw = block_host(t, blk, g.attention, Phase::Prefill, g.kernels);
        hw.add(blk.mixer.prefill_loop_host(p, &ctx));
        hw.add(blk.ffn.loop_host(b * p));
        pre_host.add(hw.times(*n));
        let w = eager::block_layer(&t.blocks, blk, &s, &r, g.attention, prec, None);
        pre_gpu += n * (w.gemm_s + w.attn_s + w.ew_s + w.score_s + w.slow_copy_s + w.serial_gpu_s);
    }
    pre_host.add(ends_host(t, g.attention, Phase::Prefill));
    pre_host.add(prefill_glue_host(t));
    // Final norm over the prompt, the head on the last position, the fp32 logits copy.
    pre_gpu += r.bytes_s(b * p * h * 2.0 * wbytes)
        + r.gemm_s(b, h, v, 1.0, prec == Precision::Fp32)
            .max(r.bytes_s(v * h * wbytes))
        + r.bytes_s(b * v * (wbytes + 4.0));
    // The set-up runs before any kernel of the forward; its syncs wait for nothing. The
    // forward's launches, the model's glue and the token's selection overlap the GPU.
    let setup_s = setup_seconds(&setup_host(t), cal);
    let prefill_host_s = host_seconds(&pre_host, cal);
    let prefill_s = setup_s + prefill_host_s.max(pre_gpu);

    // --- decode ---
    // The prefill yields the first token; `new_tokens - 1` decode steps follow, at cache lengths
    // prompt .. prompt + new_tokens - 2 (`DeferredStopCheck`'s extra step is taken on `mps`
    // only): the bytes are linear in the length, so the mean step is the one at the mean
    // length. With one new token the step priced is the one that would come next.
    let steps = g.new_tokens.saturating_sub(1) as f64;
    let mean_ctx = p + (steps - 1.0).max(0.0) / 2.0;
    let static_len = g.static_cache.then_some(p + g.new_tokens as f64);
    let mut host = Host::default();
    let mut bytes = 0.0;
    let mut streamed = 0.0;
    let mut flops = 0.0;
    for (blk, n) in &blocks {
        let mut hw = block_host(t, blk, g.attention, Phase::Decode, g.kernels);
        hw.add(blk.ffn.loop_host(b));
        host.add(hw.times(*n));
        let (by, st, fl) = block_decode(
            t,
            blk,
            b,
            mean_ctx,
            static_len,
            wbytes,
            g.kv_bytes as f64,
            g.kernels,
            g.weights_dequantized,
        );
        bytes += n * by;
        streamed += n * st;
        flops += n * fl;
    }
    host.add(ends_host(t, g.attention, Phase::Decode));
    // The head reads its weights (the input embedding only gathers rows), the logits copy.
    bytes += v * h * wbytes + b * v * (wbytes + 4.0);
    flops += 2.0 * b * v * h;
    let peak = if prec == Precision::Fp32 {
        gpu.fp32_tflops
    } else {
        gpu.half_tflops
    } * 1e12;
    let decode_gpu_s = (r.bytes_s(bytes) + r.copy_s(streamed)).max(flops / peak);
    let bytes = bytes + streamed;
    let decode_host_s = host_seconds(&Host { syncs: 0.0, ..host }, cal);
    let decode_token_s = decode_gpu_s.max(decode_host_s) + host.syncs * cal.launch_s;
    Some(Serving {
        prefill_s,
        setup_s,
        prefill_host_s,
        prefill_gpu_s: pre_gpu,
        decode_token_s,
        decode_gpu_s,
        decode_bytes: bytes,
        decode_host_s,
        decode_kernels: host.kernels,
        decode_calls: host.py + host.views,
        decode_bound: if decode_gpu_s >= decode_host_s {
            "gpu"
        } else {
            "host"
        },
        generate_s: prefill_s + steps * decode_token_s,
        decode_tokens_per_s: b / decode_token_s,
        validated: false,
        checks: CHECKS,
    })
}
