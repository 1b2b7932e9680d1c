//! vLLM V1's multimodal encoder profile: before the language model's dummy run, `profile_run`
//! runs the vision tower on a dummy batch of the modality whose largest item has the most tokens
//! and keeps the outputs (and the batch's inputs) allocated through the language model's dummy
//! run and the sampler, so the profile's torch peak is the larger of the tower's own forward and
//! what it holds plus the language model's peak.
//!
//! Read in `v1/worker/gpu_model_runner.py` `profile_run` and `v1/worker/utils.py`
//! `MultiModalBudget` (`v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget`) at
//! v0.8.5, v0.9.2, v0.10.1, v0.11.0, v0.12.0, v0.13.0, v0.14.0, v0.18.0 and v0.19.0:
//! - the budget is `max(max_num_batched_tokens, the largest item's tokens)` (the encoder's
//!   compute budget and the cache's size both; `get_encoder_budget` is their minimum);
//! - the items profiled: `budget // tokens` (0.10.1 on, at least one; `cdiv` at 0.8.5 and
//!   0.9.2), at most `max_num_seqs` times the items one prompt of `max_model_len` holds;
//! - `batched_dummy_mm_inputs` (the processor's pixels, on the device) and the encoder's
//!   outputs stay referenced until `profile_run` returns. transformers' image processors
//!   normalise in float32 (`image_processing_backends.py`), and from v0.11.0 (read at 0.11.0,
//!   0.12.0, 0.13.0, 0.14.0, 0.18.0, 0.19.0) vLLM casts every floating tensor of the processor's
//!   output to the model dtype (`InputProcessingContext._postprocess_output`, "mimics
//!   transformers.BatchFeature"); v0.8.5 has no such cast (0.9 and 0.10 not read: as 0.8.5);
//! - v0.11.0 expands each output smaller than the budget to `[budget, width]`
//!   (`new_zeros((encoder_budget, ...))`), v0.12.0 to `[the modality's largest item, width]`;
//!   v0.13.0 and later keep the outputs as they come.
//!
//! The largest item, for Qwen3-VL's and Qwen3.5's dynamic-resolution towers
//! (`model_executor/models/qwen3_vl.py` `Qwen3VLProcessingInfo`):
//! an image of the processor's `longest_edge` pixels, `longest_edge / (patch · merge)²` tokens;
//! a video of the video processor's `longest_edge` pixels over all its frames (the dummy frames
//! are the largest image, so the cap binds), `longest_edge / (patch² · temporal patch · merge²)`
//! tokens. Through v0.12.0 `get_max_video_tokens` counts a video token as 12.5 formatted
//! tokens ("<{timestamp} seconds>" and the vision start/end tokens); from v0.13.0 it counts the
//! soft tokens of two frames at `longest_edge / temporal patch` pixels each (the same count).
//! The tower's output is `[tokens, out_hidden × (1 + deepstack levels)]` (`torch.cat` of the
//! merger's and each deepstack merger's output, `Qwen3_VisionTransformer.forward`).
//!
//! Qwen2-VL and Qwen2.5-VL (`qwen2_vl.py` `Qwen2VLProcessingInfo`, which
//! `Qwen2_5_VLProcessingInfo` inherits; read at v0.10.1 and v0.10.2 only): the image of the most
//! features within `max_pixels`, or a video of as many such frames as `max_model_len` holds (at
//! most 16) where it has more tokens ([`qwen2_vl_video_tokens`]). Their towers' forwards are
//! [`qwen2_vl_forward_peak`] and [`qwen2_5_vl_forward_peak`] (the windowed one).
//!
//! Mistral's Pixtral (`model_executor/models/pixtral.py` `PixtralProcessingInfo`,
//! `VisionTransformer`; the Mistral-format `PixtralForConditionalGeneration` vLLM loads from
//! Mistral's repos): the largest item is a square image of `max_image_size` (the tower's
//! `image_size`), `ncols * nrows` tokens of `ceil(side / (patch · merge))` each way; the
//! output is `[tokens, text hidden]` after the patch merger and adapter. Its forward is
//! [`pixtral_forward_peak`].
//!
//! Llama 4 (`model_executor/models/mllama4.py` `Mllama4ProcessingInfo`, read at v0.19.0): the
//! largest item is an image of `max_patches` tiles stacked 16:1, whose best fit is that many
//! tiles plus the global tile; each tile gives `(tile / patch)² / shuffle²` tokens. The pixels
//! are whole tiles; the output is `[tokens, text hidden]` after the projector. Its forward is
//! [`llama4_forward_peak`].
//!
//! Gemma 4 (`model_executor/models/gemma4_mm.py`, read in the vLLM 0.19.0 sdist):
//! `get_mm_max_tokens_per_item` gives an image `default_output_length` (the soft tokens, 280)
//! and a video 32 frames × (70 soft tokens + 2 + 6 timestamp tokens) = 2,496, so the video is
//! profiled; audio counts only where `audio_config` exists (not modelled: such configs keep the
//! "not counted" line). The dummy frames are 224 × 224 (`Gemma4ImageProcessor.size` is None),
//! which the processor resizes (transformers 5.24 `get_aspect_ratio_preserving_size`) to 384 ×
//! 384 at 70 soft tokens: 576 patches, 64 soft tokens, padded to 630 patches
//! (`max_soft_tokens · pool²`) with int64 position ids. The tower (transformers'
//! `Gemma4VisionModel`, built by `AutoModel.from_config`, whole on every GPU) runs each frame
//! alone; each video's frame outputs are `torch.cat`ed into `[32 · 64, text hidden]`. Its
//! forward is [`gemma4_frame_peak`].

use super::*;
use vram_model::blocks::{smart_resize_largest, VideoSize, Vision, VisionInput};

/// What the encoder profile adds to the profile run, as vLLM logs and sizes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct EncoderProfile {
    /// "Encoder cache will be initialized with a budget of N tokens".
    pub budget: u64,
    /// Items of the modality profiled ("profiled with N video items").
    pub items: u64,
    /// `image` or `video`.
    pub modality: &'static str,
    /// Bytes held through the language model's dummy run: the outputs (expanded where the
    /// version expands them) and the dummy batch's pixels.
    pub held: u64,
    /// Peak of the tower's own forward over the batch, the pixels included.
    pub forward: u64,
}

impl EncoderProfile {
    /// The profile run's torch peak given the language model's own (`lm`).
    pub(super) fn peak(&self, lm: u64) -> u64 {
        self.forward.max(self.held + lm)
    }

    /// The engine's log line.
    pub(super) fn log_line(&self) -> String {
        format!(
            "Encoder cache will be initialized with a budget of {} tokens, and profiled with {} {} items of the maximum feature size.",
            self.budget, self.items, self.modality
        )
    }
}

/// Whether vLLM V1 profiles `v`'s encoder the way this module models it (at some versions:
/// [`vllm_encoder_profile`] says which): Qwen's dynamic-resolution towers (Qwen2-VL's and
/// Qwen2.5-VL's windowed one), Mistral's Pixtral, Llama 4's tiles and Gemma 4's patch budget.
/// Other towers (Gemma 3's, mllama's) have their own largest-item rules, not read here.
pub(super) fn modelled(v: &Vision) -> bool {
    matches!(
        v.input,
        VisionInput::SmartResize { .. }
            | VisionInput::Pixtral { .. }
            | VisionInput::Tiles { .. }
            | VisionInput::PatchBudget { .. }
    )
}

/// `_MAX_FRAMES_PER_VIDEO` of `qwen2_vl.py` at v0.10.1 and v0.10.2 (14 from 0.11.0).
const QWEN2_VL_MAX_FRAMES: u64 = 16;

/// vLLM 0.10's largest Qwen2-VL video, in tokens (`Qwen2VLProcessingInfo.get_max_video_tokens`
/// with `mm_counts` of one item per modality, `seq_len` = `max_model_len`): frames of the largest
/// image (`image_tokens` each), `padded = frames + frames % temporal`, `max(padded // temporal,
/// 1)` temporal patches; as many frames as fit `seq_len` (0.10.2) or `seq_len` less one largest
/// image (0.10.1, `_get_max_video_frames(seq_len - max_image_tokens)`), at most
/// [`QWEN2_VL_MAX_FRAMES`] and at least one.
fn qwen2_vl_video_tokens(image_tokens: u64, temporal: u64, version: [u32; 3], seq_len: u64) -> u64 {
    let tokens = |frames: u64| ((frames + frames % temporal) / temporal).max(1) * image_tokens;
    let room = if version < [0, 10, 2] {
        seq_len.saturating_sub(image_tokens)
    } else {
        seq_len
    };
    // `_get_max_video_frames` counts up while the next frame fits; only the first
    // QWEN2_VL_MAX_FRAMES matter.
    let fit = (1..=QWEN2_VL_MAX_FRAMES)
        .take_while(|&n| tokens(n) <= room)
        .last()
        .unwrap_or(0);
    tokens(fit.clamp(1, QWEN2_VL_MAX_FRAMES))
}

/// `gemma4_mm.py`'s video constants at v0.19.0: `_VIDEO_MAX_FRAMES`, `_VIDEO_MAX_SOFT_TOKENS`,
/// and the tokens a frame adds to its soft tokens in `get_mm_max_tokens_per_item` (boi, eoi
/// and about six of the `mm:ss` timestamp).
const GEMMA4_VIDEO_FRAMES: u64 = 32;
const GEMMA4_VIDEO_SOFT_TOKENS: u64 = 70;
const GEMMA4_FRAME_EXTRA_TOKENS: u64 = 2 + 6;
/// The side of `get_dummy_mm_data`'s images and video frames when the processor's `size` is
/// None, as Gemma4ImageProcessor's is.
const GEMMA4_DUMMY_SIDE: u64 = 224;

/// What Gemma4ImageProcessor makes of a `side` × `side` image at `max_soft` soft tokens
/// (transformers 5.24 `get_aspect_ratio_preserving_size`, `pad_along_first_dim`): the soft
/// tokens it yields and the patches it is padded to, `max_soft · pool²`. A square image only:
/// both sides round alike.
fn gemma4_frame(side: u64, patch: u64, pool: u64, max_soft: u64) -> (u64, u64) {
    let max_patches = max_soft * pool * pool;
    let unit = patch * pool;
    let factor = ((max_patches * patch * patch) as f64 / (side * side) as f64).sqrt();
    // Both sides the same multiple of patch · pool (at least one unit).
    let target = (((side as f64 * factor) / unit as f64).floor() as u64).max(1) * unit;
    let patches = (target / patch).pow(2);
    (patches / (pool * pool), max_patches)
}

/// The encoder profile of vLLM V1 `version` for the tower `v` (`None` for a tower this module
/// does not model).
pub(super) fn vllm_encoder_profile(
    v: &Vision,
    k: &Knobs,
    version: [u32; 3],
    max_num_seqs: u64,
    mnbt: u64,
    max_model_len: u64,
) -> Option<EncoderProfile> {
    let p = v.patch.max(1);
    // (modality, the largest item's budgeted tokens, its output rows, its patches, merge).
    let (modality, tokens, rows, patches, m) = match v.input {
        VisionInput::SmartResize {
            merge,
            max_pixels,
            video: VideoSize::Clip {
                max_pixels: video_max_pixels,
            },
            ..
        } => {
            let m = merge.max(1);
            // patch_elems = channels × temporal patch × patch²; the towers read 3 channels.
            let temporal = (v.patch_elems / (3 * p * p)).max(1);
            let image_tokens = max_pixels / (p * m).pow(2);
            let video_soft = video_max_pixels / (p * p * temporal * m * m);
            let video_tokens = if version < [0, 13, 0] {
                // `int(video_soft_tokens * 12.5)`
                video_soft * 25 / 2
            } else {
                video_soft
            };
            // `max(max_tokens_by_modality.items(), key=...)`: the first of equals (image) wins.
            if video_tokens > image_tokens {
                ("video", video_tokens, video_soft, video_soft * m * m, m)
            } else {
                ("image", image_tokens, image_tokens, image_tokens * m * m, m)
            }
        }
        VisionInput::SmartResize {
            merge,
            min_pixels,
            max_pixels,
            video: VideoSize::Frames,
        } => {
            // Qwen2-VL's rule, read at v0.10.1 and v0.10.2 only; `Qwen2_5_VLProcessingInfo`
            // inherits it unchanged (`qwen2_5_vl.py` at both tags).
            if !([0, 10, 1]..[0, 11, 0]).contains(&version) {
                return None;
            }
            let m = merge.max(1);
            let temporal = (v.patch_elems / (3 * p * p)).max(1);
            let (h, w) = smart_resize_largest(p * m, min_pixels, max_pixels);
            let image_tokens = (h / p) * (w / p) / (m * m);
            let video_tokens =
                qwen2_vl_video_tokens(image_tokens, temporal, version, max_model_len);
            // The first of equals (image) wins; a video's tokens are its rows.
            if video_tokens > image_tokens {
                ("video", video_tokens, video_tokens, video_tokens * m * m, m)
            } else {
                ("image", image_tokens, image_tokens, image_tokens * m * m, m)
            }
        }
        VisionInput::Pixtral {
            merge,
            longest_edge,
        } => {
            // A square image of `max_image_size` pixels; mistral_common's `_image_to_num_tokens`
            // gives `ceil(side / (patch · merge))` columns and rows, and vLLM counts
            // `ncols * nrows` (the [IMG_BREAK]/[IMG_END] tokens are not features).
            let m = merge.max(1);
            let side = longest_edge.div_ceil(p * m);
            ("image", side * side, side * side, (side * m).pow(2), m)
        }
        VisionInput::Tiles {
            tile,
            max_tiles,
            shuffle,
        } => {
            // `get_image_size_with_most_features`: `max_patches` tiles stacked (16:1), whose
            // best fit is that many tiles plus the global one (`patches_per_image`); each
            // tile gives `(tile / patch)² / shuffle²` `<|patch|>` tokens.
            let tiles = max_tiles.max(1) + u64::from(max_tiles > 1);
            let per_tile = (tile / p).pow(2) / (shuffle * shuffle).max(1);
            let n = tiles * per_tile;
            // "patches" here are tiles: the tower reads whole tiles.
            ("image", n, n, tiles, 1)
        }
        VisionInput::PatchBudget { pool, soft_tokens } => {
            let pool = pool.max(1);
            let (frame_rows, frame_patches) =
                gemma4_frame(GEMMA4_DUMMY_SIDE, p, pool, GEMMA4_VIDEO_SOFT_TOKENS);
            let video_tokens =
                GEMMA4_VIDEO_FRAMES * (GEMMA4_VIDEO_SOFT_TOKENS + GEMMA4_FRAME_EXTRA_TOKENS);
            // An image of more soft tokens than the video (no config read has one) would be
            // profiled by `_process_image_input`'s own loop, not modelled here.
            if soft_tokens >= video_tokens {
                return None;
            }
            // "patches" are the padded patches of all the video's frames; pooling is inside.
            (
                "video",
                video_tokens,
                GEMMA4_VIDEO_FRAMES * frame_rows,
                GEMMA4_VIDEO_FRAMES * frame_patches,
                1,
            )
        }
        _ => return None,
    };
    if tokens == 0 {
        return None;
    }
    let budget = mnbt.max(tokens);
    let per_prompt = (max_model_len / tokens).max(1);
    let by_budget = if version < [0, 10, 0] {
        budget.div_ceil(tokens)
    } else {
        budget / tokens
    };
    let items = by_budget
        .min(max_num_seqs.saturating_mul(per_prompt))
        .max(1);
    let d = k.dtype_bytes;
    let width = v.out * (1 + v.deepstack);
    let pixtral = matches!(v.input, VisionInput::Pixtral { .. });
    let tiled = match v.input {
        VisionInput::Tiles { tile, .. } => Some(tile),
        _ => None,
    };
    let kept_rows = if ([0, 11, 0]..[0, 12, 0]).contains(&version) {
        rows.max(budget)
    } else if ([0, 12, 0]..[0, 13, 0]).contains(&version) {
        rows.max(tokens)
    } else {
        rows
    };
    let pixel_bytes = if version >= [0, 11, 0] { d } else { 4 };
    let gemma4 = matches!(v.input, VisionInput::PatchBudget { .. });
    let qwen2 = matches!(
        v.input,
        VisionInput::SmartResize {
            video: VideoSize::Frames,
            ..
        }
    );
    let pixels = match tiled {
        // Whole tiles of `tile`² pixels, three channels.
        Some(tile) => items * patches * 3 * tile * tile * pixel_bytes,
        // Gemma 4's patches and their int64 (x, y) position ids (not floating: not cast).
        None if gemma4 => items * patches * (v.patch_elems * pixel_bytes + 2 * 8),
        None => items * patches * v.patch_elems * pixel_bytes,
    };
    let outputs = items * rows * width * d;
    let held = items * kept_rows * width * d + pixels;
    // Expanding: each new `[kept_rows, width]` while the tower's outputs still exist.
    let expanding = if kept_rows > rows { outputs + held } else { 0 };
    Some(EncoderProfile {
        budget,
        items,
        modality,
        held,
        forward: if gemma4 {
            // One frame at a time, the earlier frames' outputs kept; then each video's
            // `torch.cat` beside its frames' outputs.
            let frames = GEMMA4_VIDEO_FRAMES;
            let (frame_patches, frame_rows) = (patches / frames, rows / frames);
            let frame_out = frame_rows * width * d;
            pixels
                + (outputs - frame_out + gemma4_frame_peak(v, k, frame_patches))
                    .max(outputs + rows * width * d)
        } else if let Some(tile) = tiled {
            llama4_forward_peak(v, k, items * patches, tile, pixel_bytes)
        } else if pixtral {
            pixtral_forward_peak(v, k, items * patches, version, pixel_bytes)
        } else if qwen2 && v.gated {
            qwen2_5_vl_forward_peak(v, k, items * patches, m, pixel_bytes)
        } else if qwen2 {
            qwen2_vl_forward_peak(v, k, items * patches, pixel_bytes)
        } else {
            tower_forward_peak(v, k, items * patches, m, pixel_bytes)
        }
        .max(expanding),
    })
}

/// Peak of vLLM's `Qwen3_VisionTransformer.forward` over `patches` patches, run eagerly
/// (`compile_mm_encoder`, off by default at 0.12.0 and 0.19.0), the pixels (`pixel_bytes` each)
/// included: read in `qwen3_vl.py` (`Qwen3_VisionTransformer`, `Qwen3_VisionBlock`,
/// `Qwen3_VisionMLP`) at v0.12.0 and `qwen2_5_vl.py` (`Qwen2_5_VisionAttention`) at v0.19.0.
/// Through the blocks the residual `[patches, hidden]` and the deepstack features made so far
/// are live; inside a block the larger of
/// - the attention call: the residual, `norm1`'s output (the call's argument), the fused QKV
///   output and its rotated copies (`qk_reshaped.contiguous()`, `qk_rotated`: q and k twice)
///   and the context, `patches × (2h + 8h/tp)`;
/// - the MLP: at the activation the block's input (the caller's loop still holds it), the
///   residual after attention, `norm2`'s output, `linear_fc1`'s output and the activation's
///   (`3h + 2i/tp`); at `linear_fc2` those but `linear_fc1`'s, and the output (`4h + i/tp`, and
///   the all-reduce's new result at TP > 1), `Qwen3_VisionBlock.forward` at v0.12.0 (the block
///   input's share measured on Qwen2-VL's 0.10.2 log, whose blocks hold it the same way);
///
/// then `torch.cat` of the merger's and the deepstack mergers' outputs with its result.
fn tower_forward_peak(v: &Vision, k: &Knobs, patches: u64, merge: u64, pixel_bytes: u64) -> u64 {
    let d = k.dtype_bytes;
    let tp = if v.tp_split { k.tp.max(1) } else { 1 };
    let (h, i) = (v.hidden, v.intermediate.div_ceil(tp));
    let pixels = patches * v.patch_elems * pixel_bytes;
    let reduced = if tp > 1 { h } else { 0 };
    let attn = 2 * h + 8 * h.div_ceil(tp);
    let mlp = (3 * h + 2 * i).max(4 * h + i + reduced);
    let merged = patches / (merge * merge).max(1);
    let deep = v.deepstack * merged * v.out * d;
    let block = patches * attn.max(mlp) * d + deep;
    let cat = 2 * merged * v.out * (1 + v.deepstack) * d;
    // The rotary tables, `[patches, head_dim]` for cos and sin together.
    let rotary = patches * (h / v.heads.max(1)) * d;
    pixels + rotary + block.max(cat)
}

/// Peak of vLLM's `Qwen2VisionTransformer.forward` over `patches` patches (`qwen2_vl.py` at
/// v0.10.1 and v0.10.2, eager), the pixels (`pixel_bytes` each) included. V1's default
/// compilation (piecewise, Inductor) leaves custom ops off (`CustomOp.default_on`), so
/// `QuickGELU` runs `forward_native`, `x * torch.sigmoid(1.702 * x)`. The block's input stays
/// referenced by the caller's loop through the whole block. Inside a block the largest of
/// - the attention's rotary step: the block input, `norm1`'s output (the call's argument), the
///   QKV output (`3h/tp`), the contiguous q, k and v (`3h/tp`) and, for k, its float32 copy,
///   the rotary kernel's float32 output and the cast back (`5h/tp`): `2h + 11h/tp`; at TP > 1
///   `split_qkv` first all-gathers the whole QKV (`3h`) beside its output and the copies;
/// - the MLP's activation: the block input, the sum after attention, `norm2`'s output,
///   `fc1`'s output and the native activation's two temporaries (`3h + 3i/tp`; under
///   `--enforce-eager` the CUDA kernel's one output, `3h + 2i/tp`); or at `fc2`
///   the activation and the output (`4h + i/tp`, and the all-reduce's result at TP > 1);
///
/// plus the rotary table gathered per patch (`[patches, head_dim / 2]` float32).
fn qwen2_vl_forward_peak(v: &Vision, k: &Knobs, patches: u64, pixel_bytes: u64) -> u64 {
    let d = k.dtype_bytes;
    let tp = if v.tp_split { k.tp.max(1) } else { 1 };
    let (h, hl, i) = (v.hidden, v.hidden.div_ceil(tp), v.intermediate.div_ceil(tp));
    let pixels = patches * v.patch_elems * pixel_bytes;
    let rotary = patches * (h / v.heads.max(1)) / 2 * 4;
    let gathered = if tp > 1 { 3 * h } else { 0 };
    let attention = 2 * h + (6 * hl + gathered).max(11 * hl);
    let reduced = if tp > 1 { h } else { 0 };
    // Without Inductor (`--enforce-eager`, compilation NONE: custom ops on) `QuickGELU.forward_cuda` writes
    // one output (`gelu_quick`, `layers/activation.py` at v0.10.2).
    let act = if engine::vllm_inductor(k) {
        3 * i
    } else {
        2 * i
    };
    let mlp = (3 * h + act).max(4 * h + i + reduced);
    pixels + rotary + patches * attention.max(mlp) * d
}

/// Peak of vLLM's `Qwen2_5_VisionTransformer.forward` over `patches` patches (`qwen2_5_vl.py`
/// at v0.10.1 and v0.10.2; `layers/layernorm.py` `RMSNorm`, `layers/activation.py`
/// `SiluAndMul`, `config/__init__.py` and `custom_op.py` `CustomOp.default_on` at v0.10.2), the
/// pixels (`pixel_bytes` each) included. Which forms the RMSNorms and the SwiGLU run: V1's
/// default (piecewise, Inductor) leaves custom ops off, so `forward_native`; under
/// `--enforce-eager` (no compilation) they are on, so the CUDA kernels (`rms_norm`'s one output;
/// `fused_add_rms_norm` in place on the block input and the attention output; `silu_and_mul`'s
/// one output). The windowed blocks and the `fullatt_block_indexes` blocks differ only in
/// `cu_seqlens` (flash-attn's varlen kernel, the CUDA default, keeps no score matrix), so
/// `window_size` moves nothing here. Through the blocks the pixels, the rotary table
/// `[patches, head_dim / 2]` float32 twice (`get_rope_by_thw`'s `lru_cache` keeps one,
/// `torch.cat` makes the other) and the int64 window index and its inverse over merged tokens
/// are live; the block's input stays referenced by the caller's loop, and `x_attn` by the block
/// through the MLP. Inside a block the largest of
/// - the attention as Qwen2-VL's (the same code but the TP gather): `2h + 11h/tp` at the rotary
///   step, with its float32 cos and sin; at TP > 1 `all_gather_interleave` holds the local QKV,
///   the gathered list and their `torch.cat` (`3h/tp + 6h`);
/// - native `norm2(x, residual=x_attn)`: at the cast back the block input, `x_attn`, the new
///   residual and the cast output beside the float32 sum, its float32 normalised product and the
///   float32 variance (`8h` in 16-bit units, and 4 bytes), above `norm1`'s `6h`; measured on the
///   CPU with vLLM 0.10.2's own `forward_native` (`tests/engines/qwen2_5_vl_block_peak.py`);
/// - the SwiGLU: native, at the product the block input, `x_attn`, the new residual,
///   `norm2`'s output, `gate_up_proj`'s output, the SiLU and the product (`4h + 4i/tp`), or at
///   `down_proj` those but the SiLU, and the output (`5h + 3i/tp`, and the all-reduce's result
///   at TP > 1; the block's native live set traced as the norm's the same way, to the byte);
///   fused, `gate_up_proj`'s output and the activation beside the in-place block
///   input and `x_attn`, and at `down_proj` the output (`3h + 3i/tp`, and the all-reduce's);
///
/// then the merger (`ln_q`, `mlp.0` `[patches / merge², merge² h / tp]`, GELU, `mlp.2`) beside
/// the last block's output, and the reverse-window gather copying the merger's output.
fn qwen2_5_vl_forward_peak(
    v: &Vision,
    k: &Knobs,
    patches: u64,
    merge: u64,
    pixel_bytes: u64,
) -> u64 {
    let d = k.dtype_bytes;
    let tp = if v.tp_split { k.tp.max(1) } else { 1 };
    let (h, hl, i) = (v.hidden, v.hidden.div_ceil(tp), v.intermediate.div_ceil(tp));
    let native = engine::vllm_inductor(k);
    let pixels = patches * v.patch_elems * pixel_bytes;
    let merged = patches / (merge * merge).max(1);
    let half_head = v.hidden / v.heads.max(1) / 2;
    let table = patches * half_head * 4;
    let tables = 2 * table + 2 * merged * 8;
    let gather = if tp > 1 { 3 * hl + 6 * h } else { 0 };
    let attention = patches * (2 * h + gather.max(11 * hl)) * d + 2 * table;
    let reduced = if tp > 1 { h } else { 0 };
    // Bytes a patch. Native norms: the float32 sum (or input) and its normalised float32
    // product with the float32 `[patches, 1]` variance, beside the model-dtype tensors live
    // then (`norm2`: the block input, `x_attn`, the new residual and the cast-back output;
    // `norm1` and `ln_q`: their input and the cast-back output).
    let (norm2, norm1, mlp) = if native {
        (
            4 * h * d + 8 * h + 4,
            2 * h * d + 8 * h + 4,
            (4 * h + 4 * i).max(5 * h + 3 * i + reduced) * d,
        )
    } else {
        (2 * h * d, 2 * h * d, (3 * h + 3 * i + reduced) * d)
    };
    let block = patches * norm2.max(norm1).max(mlp);
    // The merger: `ln_q` as `norm1`, then `mlp.0`'s output and GELU's beside the last block's
    // output and `ln_q`'s (`2h + 2h/tp`), or at `mlp.2` GELU's and the output (`merged × out`,
    // and the all-reduce's at TP > 1).
    let fc2_out = merged * v.out * d * if tp > 1 { 2 } else { 1 };
    let merger =
        (patches * norm1.max((2 * h + 2 * hl) * d)).max(patches * (2 * h + hl) * d + fc2_out);
    // `hidden_states[reverse_indices, :]` beside the merger's output.
    let reorder = 2 * merged * v.out * d;
    pixels + tables + attention.max(block).max(merger).max(reorder)
}

/// Peak of vLLM's Mistral-format Pixtral tower (`pixtral.py` `VisionTransformer`, which
/// `PixtralForConditionalGeneration` builds from plain `nn.Linear`s on every GPU) over `patches`
/// patches, read in `pixtral.py` at a September 2025 main commit (v0.10.2's code; 0.18's not
/// read, the same structure assumed). Every image of the batch is one sequence; without xFormers
/// (vLLM's default installation from 0.12 on, assumed, and vllm#52180 of August 2026 says so)
/// the blocks attend under transformers' `generate_block_attention_mask`, a dense
/// `[patches, patches]` mask in the model dtype held through all layers, and PyTorch's
/// memory-efficient SDPA kernel pads a bias whose strides are not multiples of 8 into a new
/// `[patches, patches rounded up to 8]` tensor on every call (CUDA's `preprocess_mask` /
/// `pad_bias<8>` in `aten/src/ATen/native/transformers/attention.cpp`, read in public copies of
/// that file, not at the run's torch). Before 0.12 xFormers'
/// `BlockDiagonalMask` stores no such tensor. Inside a block the largest of
/// - the attention call: the residual, `attention_norm`'s output, q, k, v and the output
///   (`6h`) beside the padded mask;
/// - `apply_rotary_emb_vit`: q and k upcast to float32, their complex products and the
///   down-cast results beside the residual, the normed input, q, k and v (`15h`);
/// - the gated MLP at the product: the residual, the sum, `ffn_norm`'s output, `silu(w1 x)`,
///   `w3 x` and the product (`3h + 3i`);
///
/// plus the pixels (and their cast to the model dtype where they came in float32) and the
/// rotary table gathered per patch (`[patches, head_dim / 2]` complex64).
fn pixtral_forward_peak(
    v: &Vision,
    k: &Knobs,
    patches: u64,
    version: [u32; 3],
    pixel_bytes: u64,
) -> u64 {
    let d = k.dtype_bytes;
    let (h, i) = (v.hidden, v.intermediate);
    let mut pixels = patches * v.patch_elems * pixel_bytes;
    if pixel_bytes != d {
        pixels += patches * v.patch_elems * d;
    }
    let rotary = patches * (h / v.heads.max(1)) * 4;
    let dense = version >= [0, 12, 0];
    let mask = if dense { patches * patches * d } else { 0 };
    let padded = if dense && patches % 8 != 0 {
        patches * patches.next_multiple_of(8) * d
    } else {
        0
    };
    let attention = 6 * patches * h * d + padded;
    let rope = 15 * patches * h * d;
    let mlp = patches * (3 * h + 3 * i) * d;
    pixels + rotary + mask + attention.max(rope).max(mlp)
}

/// Peak of vLLM's `Llama4VisionModel.forward` over `tiles` tiles of `tile`² pixels (read in
/// `mllama4.py` and `layers/rotary_embedding/llama4_vision_rope.py` at v0.19.0; the default
/// `mm_encoder_tp_mode` "weights" splits q/k/v, o_proj, fc1 and fc2 over the TP group). Every
/// tile is its own sequence of `(tile / patch)² + 1` rows (the class token). Inside a block the
/// larger of
/// - the rotary step (`Llama4VisionRotaryEmbedding.forward_native`): beside the residual and
///   `input_layernorm`'s output (`2h`), the QKV output (`3h/tp`), q and k upcast to float32 and
///   their complex products (`8h/tp` in bf16 units) and the cast-back results (`2h/tp`);
/// - the MLP: the layer's input (`Llama4VisionEncoder`'s loop still holds it), the residual,
///   `post_attention_layernorm`'s output, `fc1`'s and GELU's outputs (`3h + 2i/tp`), or at
///   `fc2` the layer's input, the residual, the normed input, the activation, the output and
///   the all-reduce's result (`5h + i/tp` at TP > 1);
///
/// plus the pixels (and `nn.Unfold`'s `[tiles, patch elems, patches]` copy of them).
fn llama4_forward_peak(v: &Vision, k: &Knobs, tiles: u64, tile: u64, pixel_bytes: u64) -> u64 {
    let d = k.dtype_bytes;
    let tp = if v.tp_split { k.tp.max(1) } else { 1 };
    let p = v.patch.max(1);
    let rows = tiles * ((tile / p).pow(2) + 1);
    let (h, hl, i) = (v.hidden, v.hidden.div_ceil(tp), v.intermediate.div_ceil(tp));
    let pixels = tiles * 3 * tile * tile * pixel_bytes;
    let unfold = tiles * (tile / p).pow(2) * v.patch_elems * d;
    let rope = 2 * h + 13 * hl;
    let reduced = if tp > 1 { h } else { 0 };
    let mlp = (3 * h + 2 * i).max(4 * h + i + reduced);
    pixels + unfold.max(rows * rope.max(mlp) * d)
}

/// Peak of transformers 5.24's `Gemma4VisionModel.forward` (the class `AutoModel.from_config`
/// builds for vLLM 0.19's Gemma 4, eager, SDPA, whole on every GPU) over one image of
/// `patches` padded patches, its input excluded: at the MLP's product the gate's matmul, its
/// GELU and the product (`3i`), four `[patches, hidden]` tensors (the residual stream, its
/// normed copies), the rotary cos and sin (`2 · head_dim`), the bool attention mask
/// `[patches, patches]` and two `[patches]` bool masks. Measured, not read: the storages alive
/// at the peak, traced on the CPU under `tests/engines/tracker.py`'s `Peak` with the
/// 26B-A4B's `vision_config` at 630 patches (`tests/engines/gemma4_frame_peak.py`: 22,654,800
/// bytes, this formula exactly).
fn gemma4_frame_peak(v: &Vision, k: &Knobs, patches: u64) -> u64 {
    let d = k.dtype_bytes;
    let head_dim = v.hidden / v.heads.max(1);
    patches * (3 * v.intermediate + 4 * v.hidden + 2 * head_dim) * d
        + patches * patches
        + 2 * patches
}

/// Qwen3-VL's deepstack buffers: `Qwen3VLForConditionalGeneration.__init__` makes one
/// `torch.zeros(max_num_batched_tokens, text hidden)` per deepstack level in the model dtype on
/// the device (`qwen3_vl.py` 1155-1161 at v0.11.0, 1503-1509 at v0.19.0), inside the load that
/// "Model loading took" measures.
pub(super) fn deepstack_buffers(t: &Transformer, k: &Knobs, mnbt: u64) -> u64 {
    match &t.blocks.vision {
        Some(v) if v.deepstack > 0 && modelled(v) => {
            v.deepstack * mnbt * t.hidden() * k.dtype_bytes
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vram_model::catalog;
    use vram_model::describe::Model;

    fn qwen3_vl() -> Transformer {
        match catalog::lookup("qwen3-vl-30b-a3b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    /// The version rules read in `profile_run` and `get_max_video_tokens`: Qwen3-VL-30B-A3B's
    /// largest video is 12,288 soft tokens (25,165,824 pixels / (16² · 2 · 2²)), budgeted at
    /// 12.5 formatted tokens each through 0.12 (153,600, the logs' figure) and as soft tokens
    /// from 0.13 (where the image's 16,384 tokens win); the held outputs are expanded to the
    /// budget at 0.11, to the largest item at 0.12 (the same 153,600 rows here), and kept as
    /// they come from 0.13.
    #[test]
    fn budget_items_and_held_outputs_by_version() {
        let t = qwen3_vl();
        let v = t.blocks.vision.as_ref().unwrap();
        let k = Knobs::default();
        let at = |ver| vllm_encoder_profile(v, &k, ver, 256, 8192, 65536).unwrap();
        let width = 2048 * 4 * 2; // out_hidden x (1 + 3 deepstack levels), bf16
        let pixels = 49_152 * 1536 * 2; // 12,288 tokens x 4 patches, 3 x 2 x 16² elements
        for ver in [[0, 11, 0], [0, 12, 0]] {
            let e = at(ver);
            assert_eq!((e.budget, e.items, e.modality), (153_600, 1, "video"));
            assert_eq!(e.held, 153_600 * width + pixels);
        }
        let e = at([0, 13, 0]);
        assert_eq!((e.budget, e.items, e.modality), (16_384, 1, "image"));
        assert_eq!(e.held, 16_384 * width + 65_536 * 1536 * 2);
        // A budget of two largest images profiles two of them.
        let two = vllm_encoder_profile(v, &k, [0, 19, 0], 256, 32_768, 65536).unwrap();
        assert_eq!((two.budget, two.items), (32_768, 2));
        // One request of 8,192 tokens still gets one item (at least one).
        let one = vllm_encoder_profile(v, &k, [0, 19, 0], 1, 8192, 8192).unwrap();
        assert_eq!(one.items, 1);
        // The peak is the tower's forward or what is held beside the language model's peak.
        assert_eq!(e.peak(0), e.forward.max(e.held));
        assert_eq!(e.peak(10 << 30), e.held + (10 << 30));
    }

    /// Ministral-3-3B's Pixtral tower (`vision_config` of the checkpoint: 24 layers of 1,024,
    /// MLP 4,096, 16 heads, 14-pixel patches, image 1,540, merge 2; text hidden 3,072): one
    /// 3,025-token image (the logs' budget line), 12,100 patches; at 0.18 the dense mask and
    /// its padded copy (12,100 is not a multiple of 8) beside the attention call's six
    /// `[patches, 1024]` tensors are the forward's peak; before 0.12 no mask is stored.
    #[test]
    fn pixtral_largest_image_and_forward() {
        let v = Vision {
            depth: 24,
            hidden: 1024,
            intermediate: 4096,
            heads: 16,
            patch: 14,
            params: 0,
            input: VisionInput::Pixtral {
                merge: 2,
                longest_edge: 1540,
            },
            patch_elems: 3 * 14 * 14,
            out: 3072,
            gated: true,
            deepstack: 0,
            tp_split: false,
            projector_split: 0,
            images: None,
            linears: vec![],
        };
        let k = Knobs {
            dtype_bytes: 2,
            ..Knobs::default()
        };
        let e = vllm_encoder_profile(&v, &k, [0, 18, 1], 64, 2048, 4096).unwrap();
        assert_eq!((e.budget, e.items, e.modality), (3025, 1, "image"));
        let n: u64 = 12_100;
        let pixels = n * 588 * 2;
        assert_eq!(e.held, 3025 * 3072 * 2 + pixels);
        let mask = n * n * 2;
        let padded = n * 12_104 * 2;
        let rotary = n * 64 * 4;
        assert_eq!(
            e.forward,
            pixels + rotary + mask + 6 * n * 1024 * 2 + padded
        );
        // xFormers' block-diagonal bias (before 0.12) stores no mask: the rotary upcast or the
        // MLP is the peak.
        let old = vllm_encoder_profile(&v, &k, [0, 10, 1], 64, 2048, 4096).unwrap();
        let rope = 15 * n * 1024 * 2;
        let mlp = n * (3 * 1024 + 3 * 4096) * 2;
        assert_eq!(old.forward, n * 588 * (4 + 2) + rotary + rope.max(mlp));
    }

    /// Llama 4 Scout's tower (the checkpoint's `vision_config`: 34 layers of 1,408, MLP 5,632,
    /// 16 heads, 14-pixel patches, 336-pixel tiles, pixel shuffle 0.5; text hidden 5,120) under
    /// vLLM 0.19 at TP 4 and 8,192 batched tokens: the largest image is 16 tiles and the global
    /// one, 17 × 144 = 2,448 tokens, three of them in the budget (the logged line); 51 tiles
    /// of 577 rows, whose `fc2` step (the layer's input held by the loop, the residual, the
    /// normed input, the activation, the output and the all-reduce's result) is the forward's
    /// peak, above the rotary step (q and k in float32 and complex64).
    #[test]
    fn llama4_largest_image_and_forward() {
        let t = match catalog::lookup("llama-4-scout").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let v = t.blocks.vision.as_ref().unwrap();
        let k = Knobs {
            dtype_bytes: 2,
            tp: 4,
            ..Knobs::default()
        };
        let e = vllm_encoder_profile(v, &k, [0, 19, 0], 1024, 8192, 8192).unwrap();
        assert_eq!((e.budget, e.items, e.modality), (8192, 3, "image"));
        let pixels = 51 * 3 * 336 * 336 * 2;
        assert_eq!(e.held, 3 * 2448 * 5120 * 2 + pixels);
        let rows = 51 * 577;
        let rope = 2 * 1408 + 13 * 352;
        let fc2 = 5 * 1408 + 1408;
        assert!(fc2 > rope);
        assert_eq!(e.forward, pixels + rows * fc2 * 2);
        assert_eq!(
            e.log_line(),
            "Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 3 image items of the maximum feature size."
        );
    }

    /// Gemma-4-26B-A4B's tower (the checkpoint's `vision_config`: 27 layers of 1,152, MLP 4,304,
    /// 16 heads, 16-pixel patches, pool 3, 280 soft tokens; text hidden 2,816) under vLLM 0.19 at
    /// 8,192 batched tokens: a video of 32 frames × 78 tokens = 2,496 beats the 280-token image,
    /// three videos fit the budget; each 224 × 224 frame becomes 384 × 384, 576 patches and 64
    /// soft tokens, padded to 630 patches. What is held (the pixels, int64 positions, outputs)
    /// dwarfs one frame's forward, whose peak is the CPU trace's 22,654,800 bytes.
    #[test]
    fn gemma4_video_frames_and_forward() {
        assert_eq!(gemma4_frame(224, 16, 3, 70), (64, 630));
        assert_eq!(gemma4_frame(224, 16, 3, 280), (256, 2520));
        let t = match catalog::lookup("gemma-4-26b-a4b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let v = t.blocks.vision.as_ref().unwrap();
        let k = Knobs {
            dtype_bytes: 2,
            ..Knobs::default()
        };
        assert_eq!(gemma4_frame_peak(v, &k, 630), 22_654_800);
        let e = vllm_encoder_profile(v, &k, [0, 19, 0], 1024, 8192, 131_072).unwrap();
        assert_eq!((e.budget, e.items, e.modality), (8192, 3, "video"));
        let frames = 3 * 32;
        let pixels = frames * 630 * (768 * 2 + 16);
        let outputs = frames * 64 * 2816 * 2;
        assert_eq!(e.held, outputs + pixels);
        let video = 32 * 64 * 2816 * 2;
        let frame = 64 * 2816 * 2;
        assert_eq!(
            e.forward,
            pixels + (outputs - frame + 22_654_800).max(outputs + video)
        );
        assert_eq!(
            e.log_line(),
            "Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 3 video items of the maximum feature size."
        );
    }

    /// Qwen2-VL-2B's tower (the checkpoint's `vision_config`: 32 layers of 1,280, MLP 5,120, 16
    /// heads, 14-pixel patches, merge 2; text hidden 1,536) under vLLM 0.10:
    /// - with the card's max_pixels (12,845,056 = 3,584²) the largest image is 128² = 16,384
    ///   tokens, more than a 4,096-token sequence, so the one-frame video ties it and the image
    ///   is profiled (round 8's log: "budget of 16384 tokens, and profiled with 1 image items");
    ///   the forward's peak is the native QuickGELU beside three `[patches, 1280]` tensors,
    ///   15 × 65,536 × 1,280 × 2 bytes, with the float32 pixels and the rotary table;
    /// - with the class defaults (max_pixels 1,003,520) the largest image is 980², 1,225 tokens;
    ///   0.10.2 fits 6 frames (3 temporal patches, 3,675 tokens) in 4,096, 0.10.1 fits 4 in
    ///   4,096 - 1,225 (2,450 tokens); 16 frames at most (8 temporal patches);
    /// - other versions are not modelled.
    #[test]
    fn qwen2_vl_largest_item_and_forward() {
        let t = match catalog::lookup("qwen2-vl-2b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let v = t.blocks.vision.as_ref().unwrap();
        let k = Knobs {
            dtype_bytes: 2,
            ..Knobs::default()
        };
        let e = vllm_encoder_profile(v, &k, [0, 10, 2], 256, 2048, 4096).unwrap();
        assert_eq!((e.budget, e.items, e.modality), (16_384, 1, "image"));
        let n: u64 = 65_536;
        let pixels = n * 1176 * 4;
        assert_eq!(e.held, 16_384 * 1536 * 2 + pixels);
        assert_eq!(e.forward, pixels + n * 40 * 4 + 15 * n * 1280 * 2);
        // 2.64 GiB: the log's "2.65 GiB for peak activation" is the larger of this and what
        // is held beside the language model's peak.
        assert_eq!(e.forward, 2_835_349_504);
        // `--enforce-eager`: QuickGELU's CUDA kernel, one `[patches, 5120]` output; the rotary
        // step (2h + 11h) is then the peak.
        let eager = Knobs {
            enforce_eager: true,
            ..k
        };
        // (3 × 1,280 + 2 × 5,120 = 14,080 < 13 × 1,280 = 16,640.)
        let e = vllm_encoder_profile(v, &eager, [0, 10, 2], 256, 2048, 4096).unwrap();
        assert_eq!(e.forward, pixels + n * 40 * 4 + n * 13 * 1280 * 2);

        let mut small = v.clone();
        if let VisionInput::SmartResize { max_pixels, .. } = &mut small.input {
            *max_pixels = 28 * 28 * 1280;
        }
        let at = |ver, len| vllm_encoder_profile(&small, &k, ver, 256, 2048, len).unwrap();
        let e = at([0, 10, 2], 4096);
        assert_eq!((e.budget, e.items, e.modality), (3675, 1, "video"));
        assert_eq!(at([0, 10, 1], 4096).budget, 2450);
        // A long sequence: 16 frames, 8 temporal patches.
        let long = at([0, 10, 2], 131_072);
        assert_eq!((long.budget, long.items, long.modality), (9800, 1, "video"));
        assert_eq!(qwen2_vl_video_tokens(16_384, 2, [0, 10, 2], 4096), 16_384);
        assert!(vllm_encoder_profile(v, &k, [0, 11, 0], 256, 2048, 4096).is_none());
    }

    /// Qwen2.5-VL-7B's windowed tower (the checkpoint's `vision_config`: 32 blocks of 1,280,
    /// SwiGLU 3,420, 16 heads of 80, 14-pixel patches, merge 2, out 3,584; the card's
    /// max_pixels) under vLLM 0.10.2: the largest item is Qwen2-VL's (the inherited rule), one
    /// 16,384-token image of 65,536 patches whose float32 pixels are held with the outputs.
    /// The forward, shape by shape:
    /// - default (custom ops off): the native SwiGLU's product, block input, `x_attn`,
    ///   residual, `norm2`'s output (4 × 1,280), `gate_up` (2 × 3,420), SiLU and product
    ///   (2 × 3,420): 18,800 elements a patch, above the rotary step's 13 × 1,280 = 16,640 and
    ///   native `norm2`'s 8 × 1,280;
    /// - `--enforce-eager` (custom ops on): the fused SwiGLU is 3 × 1,280 + 3 × 3,420 = 14,100,
    ///   so the rotary step (with its float32 cos and sin) is the peak;
    /// - TP 2: `down_proj`'s step with the all-reduce's result (5 × 1,280 + 3 × 1,710 +
    ///   1,280 = 12,810) tops the gather (2 × 1,280 + 3 × 640 + 6 × 1,280 = 12,160);
    ///
    /// beside the pixels, two `[65,536, 40]` float32 rotary tables and two int64 `[16,384]`
    /// window indices. The window size and full-attention blocks move nothing.
    #[test]
    fn qwen2_5_vl_windowed_tower_forward() {
        let t = match catalog::lookup("qwen2.5-vl-7b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let v = t.blocks.vision.as_ref().unwrap();
        assert!(modelled(v) && v.gated);
        assert_eq!(
            (v.hidden, v.intermediate, v.heads, v.out),
            (1280, 3420, 16, 3584)
        );
        let k = Knobs {
            dtype_bytes: 2,
            ..Knobs::default()
        };
        let e = vllm_encoder_profile(v, &k, [0, 10, 2], 256, 2048, 4096).unwrap();
        assert_eq!((e.budget, e.items, e.modality), (16_384, 1, "image"));
        let n: u64 = 65_536;
        let pixels = n * 1176 * 4;
        assert_eq!(e.held, 16_384 * 3584 * 2 + pixels);
        let tables = 2 * n * 40 * 4 + 2 * 16_384 * 8;
        let cos_sin = 2 * n * 40 * 4;
        assert_eq!(e.forward, pixels + tables + n * 18_800 * 2);
        assert_eq!(e.forward, 2_793_668_608);

        let eager = Knobs {
            enforce_eager: true,
            ..k
        };
        let e = vllm_encoder_profile(v, &eager, [0, 10, 1], 256, 2048, 4096).unwrap();
        assert_eq!(e.forward, pixels + tables + n * 16_640 * 2 + cos_sin);

        let tp2 = Knobs { tp: 2, ..k };
        let e = vllm_encoder_profile(v, &tp2, [0, 10, 2], 256, 2048, 4096).unwrap();
        assert_eq!(e.forward, pixels + tables + n * 12_810 * 2);
        // Other versions keep "not counted".
        assert!(vllm_encoder_profile(v, &k, [0, 11, 0], 256, 2048, 4096).is_none());
    }

    /// Qwen3-VL's deepstack buffers are in the weights vLLM measures; a text model has none.
    #[test]
    fn deepstack_buffers_are_levels_by_tokens_by_hidden() {
        let k = Knobs::default();
        assert_eq!(
            deepstack_buffers(&qwen3_vl(), &k, 8192),
            3 * 8192 * 2048 * 2
        );
        let text = match catalog::lookup("qwen3-30b-a3b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        assert_eq!(deepstack_buffers(&text, &k, 8192), 0);
    }
}
