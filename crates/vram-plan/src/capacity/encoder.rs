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
//! (`model_executor/models/qwen3_vl.py` `Qwen3VLProcessingInfo`, the only towers modelled here):
//! an image of the processor's `longest_edge` pixels, `longest_edge / (patch · merge)²` tokens;
//! a video of the video processor's `longest_edge` pixels over all its frames (the dummy frames
//! are the largest image, so the cap binds), `longest_edge / (patch² · temporal patch · merge²)`
//! tokens. Through v0.12.0 `get_max_video_tokens` counts a video token as 12.5 formatted
//! tokens ("<{timestamp} seconds>" and the vision start/end tokens); from v0.13.0 it counts the
//! soft tokens of two frames at `longest_edge / temporal patch` pixels each (the same count).
//! The tower's output is `[tokens, out_hidden × (1 + deepstack levels)]` (`torch.cat` of the
//! merger's and each deepstack merger's output, `Qwen3_VisionTransformer.forward`).

use super::*;
use vram_model::blocks::{Vision, VisionInput};

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

/// Whether vLLM V1 at this version profiles `v`'s encoder the way this module models it: Qwen's
/// dynamic-resolution towers. Other towers (Gemma's, Llama 4's, Pixtral's, mllama's) have their
/// own largest-item rules, not read here.
pub(super) fn modelled(v: &Vision) -> bool {
    matches!(v.input, VisionInput::SmartResize { .. })
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
    let VisionInput::SmartResize {
        merge,
        max_pixels,
        video_max_pixels,
        ..
    } = v.input
    else {
        return None;
    };
    let p = v.patch.max(1);
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
    let (modality, tokens, rows, patches) = if video_tokens > image_tokens {
        ("video", video_tokens, video_soft, video_soft * m * m)
    } else {
        ("image", image_tokens, image_tokens, image_tokens * m * m)
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
    let kept_rows = if ([0, 11, 0]..[0, 12, 0]).contains(&version) {
        rows.max(budget)
    } else if ([0, 12, 0]..[0, 13, 0]).contains(&version) {
        rows.max(tokens)
    } else {
        rows
    };
    let pixel_bytes = if version >= [0, 11, 0] { d } else { 4 };
    let pixels = items * patches * v.patch_elems * pixel_bytes;
    let outputs = items * rows * width * d;
    let held = items * kept_rows * width * d + pixels;
    // Expanding: each new `[kept_rows, width]` while the tower's outputs still exist.
    let expanding = if kept_rows > rows { outputs + held } else { 0 };
    Some(EncoderProfile {
        budget,
        items,
        modality,
        held,
        forward: tower_forward_peak(v, k, items * patches, m, pixel_bytes).max(expanding),
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
/// - the MLP: at the activation the residual, `norm2`'s output, `linear_fc1`'s output and the
///   activation's (`2h + 2i/tp`); at `linear_fc2` the residual, `norm2`'s output, the activation
///   and the output (`3h + i/tp`, and the all-reduce's new result at TP > 1);
///
/// then `torch.cat` of the merger's and the deepstack mergers' outputs with its result.
fn tower_forward_peak(v: &Vision, k: &Knobs, patches: u64, merge: u64, pixel_bytes: u64) -> u64 {
    let d = k.dtype_bytes;
    let tp = if v.tp_split { k.tp.max(1) } else { 1 };
    let (h, i) = (v.hidden, v.intermediate.div_ceil(tp));
    let pixels = patches * v.patch_elems * pixel_bytes;
    let reduced = if tp > 1 { h } else { 0 };
    let attn = 2 * h + 8 * h.div_ceil(tp);
    let mlp = (2 * h + 2 * i).max(3 * h + i + reduced);
    let merged = patches / (merge * merge).max(1);
    let deep = v.deepstack * merged * v.out * d;
    let block = patches * attn.max(mlp) * d + deep;
    let cat = 2 * merged * v.out * (1 + v.deepstack) * d;
    // The rotary tables, `[patches, head_dim]` for cos and sin together.
    let rotary = patches * (h / v.heads.max(1)) * d;
    pixels + rotary + block.max(cat)
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
