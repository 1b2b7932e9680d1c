//! Images in a vision-language step (issue 21, `--images`): how many patches the vision tower
//! sees and how many positions each image takes in the text sequence, and the vision tower's
//! own tensors in training and in `generate`'s prefill.
//!
//! Token counts follow transformers 5.24's image processors and processors exactly (tested
//! against them on the CPU: `tests/zoo/vision_reference.py`):
//! - Qwen3-VL / Qwen3.5 (`qwen2_vl/image_processing_qwen2_vl.py::smart_resize`,
//!   `get_number_of_image_patches`; `qwen3_vl/processing_qwen3_vl.py::replace_image_token`):
//!   the image is resized to multiples of patch × merge within [min_pixels, max_pixels], one
//!   frame padded to the temporal patch, `merge`² patches per token; the chat template puts
//!   `<|vision_start|>` and `<|vision_end|>` around them.
//! - Llama 4 (`llama4/image_processing_llama4.py::find_supported_resolutions`, `get_best_fit`,
//!   `_preprocess`; `processing_llama4.py::_prompt_split_image`): the best canvas of at most 16
//!   tiles, one more global tile when there are several; each tile is `(tile/patch)² + 1` patches
//!   in the tower (the class token) and `(tile/patch)² / shuffle²` `<|patch|>` tokens after the
//!   pixel shuffle, with start/end, `<|image|>` and tile-separator tokens around them.
//! - Gemma 3 (`gemma3/processing_gemma3.py`): every image resized to the tower's `image_size`,
//!   `mm_tokens_per_image` tokens after the average pool, written as `"\n\n<boi>" + tokens +
//!   "<eoi>\n\n"` (`"\n\n"` one token in Gemma's vocabulary).
//! - Gemma 4 (`gemma4/image_processing_gemma4.py::get_aspect_ratio_preserving_size`,
//!   `_preprocess`; `processing_gemma4.py::replace_image_token`): resized within a budget of
//!   `soft_tokens · pool²` patches and padded to it (the tower runs over the padding, masked),
//!   `pool`² patches per soft token, between `<boi>` and `<eoi>`.
//!
//! The vision tower's tensors are counted from its modelling code's layers (pre-norm blocks over
//! the patches: norms, q/k/v, SDPA per image or per tile, the output projection's input, the
//! MLP), not measured on a GPU: the estimate says so. TRL 1.16's `SFTTrainer` freezes nothing
//! (`sft_trainer.py`), so in training the tower is trainable and autograd keeps its tensors
//! until the backward reaches it, last (`emb_saved`, with the embedding's). In `generate` the
//! tower runs once, before the prefill (`vision_prefill`), and its image features (and
//! Qwen3-VL's deepstack features) stay in the model's locals until the prefill returns.

use serde::Serialize;

use super::step::{m, Ctx};
use super::{Component, Site, SiteKind};
use crate::error::{Error, Result};
use crate::setup::{Attention, Recompute};

/// A vision tower with its projector (instantiated by `*ForConditionalGeneration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vision {
    /// Encoder layers.
    pub depth: u64,
    /// Encoder width.
    pub hidden: u64,
    /// Encoder feed-forward size.
    pub intermediate: u64,
    /// Encoder heads.
    pub heads: u64,
    /// Patch side in pixels.
    pub patch: u64,
    /// Parameters of the tower and projector, from the family's module tree.
    pub params: u64,
    /// How the family's image processor cuts an image and how the tower merges patches into
    /// text tokens (this module counts both).
    pub input: VisionInput,
    /// Elements of one patch as the tower's patch embedding reads it (channels × temporal
    /// patch × patch²).
    pub patch_elems: u64,
    /// Width of the image features handed to the text model (the text hidden size).
    pub out: u64,
    /// Gated MLP in the tower's layers (Gemma 4), else a two-matmul MLP.
    pub gated: bool,
    /// Extra mergers whose outputs the text model adds at early layers (Qwen3-VL's deepstack).
    pub deepstack: u64,
    /// Whether the serving engine splits the encoder layers' linears across a TP group (vLLM's
    /// parallel linear layers); false where it builds them as plain `nn.Linear`s on every GPU.
    /// A family whose towers vLLM alone builds as transformers modules
    /// (`hf::vllm_replicates_towers`: Gemma 4) keeps `true` for SGLang's split tower.
    pub tp_split: bool,
    /// Parameters of the projector that vLLM builds from its parallel linear layers, split
    /// across a TP group as the encoder layers are (where `tp_split`): the patch merger of
    /// Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5, and each of Qwen3-VL's deepstack mergers,
    /// whose `linear_fc1` / `mlp.0` is a `ColumnParallelLinear` (weight and bias split) and
    /// `linear_fc2` / `mlp.2` a `RowParallelLinear` (weight split, bias whole). 0 where the
    /// projector is built from plain `nn.Linear`s (mllama's) or was not read.
    pub projector_split: u64,
    /// The images each sequence carries (`--images`), none by default.
    pub images: Option<Images>,
    /// The `nn.Linear`s of the tower and projector as transformers names them (PEFT's
    /// `all-linear` matches every one, and a list target matches their names as suffixes), as
    /// [`crate::finetune::sites`] groups sites: per group, the sites and how many times the
    /// module tree repeats them. Paths are relative to the repeated layer, or to the tower's
    /// or projector's root for the ones built once.
    pub linears: Vec<(Vec<Site>, u64)>,
}

/// One `nn.Linear` of a vision tower or projector (`input`: which tensor it reads within its
/// group, as [`Site::input`]).
pub(crate) fn tower_linear(path: &str, out: u64, inp: u64, input: u8) -> Site {
    Site {
        path: path.into(),
        out,
        inp,
        kind: SiteKind::Module,
        component: Component::Vision,
        input,
    }
}

/// Images fed with every sequence: how many and their size before the processor resizes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Images {
    /// Images per sequence.
    pub count: u64,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
}

/// How a dynamic-resolution tower's video processor sizes a clip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoSize {
    /// Qwen3-VL / Qwen3.5: the video processor's `size["longest_edge"]`
    /// (`video_preprocessor_config.json`) bounds the pixels of the whole clip, frames times
    /// height times width (transformers 5.24 `qwen3_vl/video_processing_qwen3_vl.py`
    /// `smart_resize`).
    Clip {
        /// `size["longest_edge"]` of the clip.
        max_pixels: u64,
    },
    /// Qwen2-VL / Qwen2.5-VL: every frame is resized like an image (`Qwen2VLVideoProcessor`),
    /// so a clip's size is its number of frames, which the caller chooses (vLLM counts frames
    /// at the image processor's largest size and fills the sequence with them).
    Frames,
}

/// How a vision-language family turns one image into patches and text tokens, read from
/// transformers 5.24's image processor and vision model (counted in this module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VisionInput {
    /// Qwen3-VL / Qwen3.5: `Qwen2VLImageProcessor`'s `smart_resize` to multiples of
    /// patch × merge within [min_pixels, max_pixels]; `merge`² patches make one token.
    SmartResize {
        /// `spatial_merge_size`.
        merge: u64,
        /// `size["shortest_edge"]` (min_pixels).
        min_pixels: u64,
        /// `size["longest_edge"]` (max_pixels).
        max_pixels: u64,
        /// How the video processor sizes a clip (serving engines size their largest video item
        /// from it: `vram_plan::capacity`'s encoder profile).
        video: VideoSize,
    },
    /// Llama 4: tiles of `tile` pixels on the best-fitting canvas of at most `max_tiles`, plus
    /// a global tile when there are several; pixel shuffle by `1/shuffle`² per tile.
    Tiles {
        /// Tile side (the processor's `size`, the tower's `image_size`).
        tile: u64,
        /// `max_patches` (tiles) of `Llama4ImageProcessor`.
        max_tiles: u64,
        /// 1 / `pixel_shuffle_ratio`.
        shuffle: u64,
    },
    /// Llama 3.2 Vision (mllama): up to `tiles` tiles of `image`² each, their patches (and a class
    /// token) encoded together; the text model reads them by cross-attention, so an image is one
    /// `<|image|>` token in the text. `intermediate_layers` of the local encoder's outputs are
    /// kept and stacked with the last (`intermediate_layers_indices`).
    CrossTiles {
        /// `vision_config.image_size`.
        image: u64,
        /// `vision_config.max_num_tiles`.
        tiles: u64,
        /// `len(vision_config.intermediate_layers_indices)`.
        intermediate_layers: u64,
    },
    /// Gemma 3: every image resized to `image`² (SigLIP), pooled to `tokens` tokens.
    Fixed {
        /// `vision_config.image_size`.
        image: u64,
        /// `mm_tokens_per_image`.
        tokens: u64,
    },
    /// Gemma 4: aspect-preserving resize to at most `soft_tokens`·`pool`² patches, padded to
    /// that many; `pool`² patches make one soft token.
    PatchBudget {
        /// `pooling_kernel_size`.
        pool: u64,
        /// `vision_soft_tokens_per_image` (the processor's `max_soft_tokens`).
        soft_tokens: u64,
    },
    /// Kimi-K2.5 (MoonViT): the weights are counted; images are refused. Its processor
    /// (`Kimi_K25ImageProcessor`, transformers 5.24 `navit_resize`) scales an image down, never
    /// up, to at most `max_patches` patches and `max_side` patches a side, then pads it to
    /// multiples of patch × `merge`; `merge`² patches make one token. The tower's tensors over
    /// those patches (its 2D rotary, its per-image attention) are not modelled, nor the engines'
    /// encoder profile for it (vLLM's dummy item is a 3000 × 3000 image or a video chunk sized by
    /// the checkpoint's remote-code media processor, not read).
    Navit {
        /// `merge_kernel_size` (square).
        merge: u64,
        /// `max_patches` of the image processor.
        max_patches: u64,
        /// `size["max_height"]`, in patches a side.
        max_side: u64,
    },
    /// Mistral-3 (Pixtral): the weights are counted; images are refused. Its processor resizes
    /// to at most `longest_edge` and `merge`² patches make one `[IMG]` token, but the tower runs
    /// every image of a batch as one sequence under a block-diagonal mask, whose tensors this
    /// crate's estimate does not model (`vram_plan::capacity`'s vLLM V1 encoder profile does:
    /// the dense mask and its padded copy).
    Pixtral {
        /// `spatial_merge_size`.
        merge: u64,
        /// `vision_config.image_size`.
        longest_edge: u64,
    },
}

impl Vision {
    /// What an estimate says of how the tower is modelled.
    pub fn note(&self) -> &'static str {
        if let VisionInput::Pixtral { .. } = self.input {
            "vision tower (Pixtral): its weights are counted; images are not modelled for it (--images is refused)"
        } else if let VisionInput::Navit { .. } = self.input {
            "vision tower (Kimi-K2.5's MoonViT and projector): its weights are counted; its activations over images are not modelled (--images is refused)"
        } else if self.images.is_some() {
            "vision tower: each image's patches through it and its tokens in the text sequence (mech/vision.rs, from transformers 5.24's image processors and vision models)"
        } else {
            "vision tower: its weights are counted; no images in the step (--images N counts their tokens and the tower's activations)"
        }
    }
}

/// What one image becomes, by the family's processor and vision tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImageTokens {
    /// The size the processor resizes the image to (width, height); for tiles, the canvas.
    pub resized: (u64, u64),
    /// Tiles (Llama 4, global tile included), else 1.
    pub tiles: u64,
    /// Positions the vision tower's layers run over for this image (padding, class tokens).
    pub patches: u64,
    /// Image-feature positions the text sequence gets (the placeholders the features fill).
    pub tokens: u64,
    /// The image's span in the token sequence, its start/end and separator tokens included.
    pub sequence: u64,
    /// Length of one attention call's sequence in the tower (per image, or per tile).
    pub attention_len: u64,
}

fn bad(what: String) -> Error {
    Error::Setup(what)
}

/// The largest image a [`VisionInput::SmartResize`] tower takes, as (height, width):
/// `smart_resize` of a 9,999,999-pixel square to multiples of `factor` (patch × merge) within
/// [`min_px`, `max_px`], as vLLM's `get_image_size_with_most_features` asks it for Qwen2-VL
/// (`qwen2_vl.py` at v0.10.2).
pub fn smart_resize_largest(factor: u64, min_px: u64, max_px: u64) -> (u64, u64) {
    const SIDE: u64 = 9_999_999;
    smart_resize(SIDE, SIDE, factor.max(1), min_px, max_px).expect("a square is within 200:1")
}

/// Python's `round()` of `a / b` (half to even, in doubles as CPython computes it).
fn py_round_div(a: u64, b: u64) -> u64 {
    (a as f64 / b as f64).round_ties_even() as u64
}

/// `smart_resize` of transformers 5.24 (`qwen2_vl/image_processing_qwen2_vl.py`), as
/// (height, width).
fn smart_resize(h: u64, w: u64, factor: u64, min_px: u64, max_px: u64) -> Result<(u64, u64)> {
    if (h.max(w) as f64) / (h.min(w) as f64) > 200.0 {
        return Err(bad(format!(
            "--image-size {w}x{h}: smart_resize refuses an aspect ratio above 200"
        )));
    }
    let mut hb = py_round_div(h, factor) * factor;
    let mut wb = py_round_div(w, factor) * factor;
    let (hf, wf, ff) = (h as f64, w as f64, factor as f64);
    if hb * wb > max_px {
        let beta = ((hf * wf) / max_px as f64).sqrt();
        hb = factor.max(((hf / beta / ff).floor() as u64) * factor);
        wb = factor.max(((wf / beta / ff).floor() as u64) * factor);
    } else if hb * wb < min_px {
        let beta = (min_px as f64 / (hf * wf)).sqrt();
        hb = ((hf * beta / ff).ceil() as u64) * factor;
        wb = ((wf * beta / ff).ceil() as u64) * factor;
    }
    Ok((hb, wb))
}

/// Gemma 4's `get_aspect_ratio_preserving_size`, as (height, width).
fn gemma4_size(h: u64, w: u64, patch: u64, max_patches: u64, pool: u64) -> Result<(u64, u64)> {
    let total = (h * w) as f64;
    let target_px = (max_patches * patch * patch) as f64;
    let factor = (target_px / total).sqrt();
    let side = pool * patch;
    let mut th = ((factor * h as f64) / side as f64).floor() as u64 * side;
    let mut tw = ((factor * w as f64) / side as f64).floor() as u64 * side;
    if th == 0 && tw == 0 {
        return Err(bad(format!(
            "--image-size {w}x{h}: Gemma 4's processor would resize it to 0x0"
        )));
    }
    let max_side = (max_patches / (pool * pool)) * side;
    if th == 0 {
        th = side;
        tw = ((w as f64 / h as f64).floor() as u64 * side).min(max_side);
    } else if tw == 0 {
        tw = side;
        th = ((h as f64 / w as f64).floor() as u64 * side).min(max_side);
    }
    if th * tw > max_patches * patch * patch {
        return Err(bad(format!(
            "--image-size {w}x{h}: Gemma 4's processor refuses it ({th}x{tw} exceeds {max_patches} patches)"
        )));
    }
    Ok((th, tw))
}

/// What one `width` × `height` image becomes for the model whose tower is `v`.
pub fn image_tokens(v: &Vision, width: u64, height: u64) -> Result<ImageTokens> {
    if width == 0 || height == 0 || width > 1 << 16 || height > 1 << 16 {
        return Err(Error::OutOfRange {
            field: "--image-size".into(),
            value: format!("{width}x{height}"),
            why: "each side must be between 1 and 65536 pixels".into(),
        });
    }
    let p = v.patch.max(1);
    Ok(match v.input {
        VisionInput::Pixtral { .. } => {
            return Err(bad(
                "--images: Mistral-3's Pixtral tower is counted in the weights, but its image tokens and activations are not modelled; estimate without --images".into(),
            ))
        }
        VisionInput::Navit { .. } => {
            return Err(bad(
                "--images: Kimi-K2.5's MoonViT tower is counted in the weights, but its image tokens and activations are not modelled; estimate without --images".into(),
            ))
        }
        VisionInput::SmartResize {
            merge,
            min_pixels,
            max_pixels,
            ..
        } => {
            let (h, w) = smart_resize(height, width, p * merge, min_pixels, max_pixels)?;
            let patches = (h / p) * (w / p);
            let tokens = patches / (merge * merge);
            ImageTokens {
                resized: (w, h),
                tiles: 1,
                patches,
                tokens,
                sequence: tokens + 2,
                attention_len: patches,
            }
        }
        VisionInput::Tiles {
            tile,
            max_tiles,
            shuffle,
        } => {
            let (ch, cw) = best_canvas_px(height, width, max_tiles, tile);
            let (rh, rw) = (ch / tile, cw / tile);
            let grid = rh * rw;
            let tiles = if grid > 1 { grid + 1 } else { 1 };
            let per_tile = (tile / p) * (tile / p);
            let n = per_tile / (shuffle * shuffle);
            // <|image_start|>, per tile row: tiles × n patches, x-separators between them and
            // a y-separator; then <|image|>, the global tile's n and <|image_end|>.
            let separators = if grid > 1 { rh * (rw - 1) + rh } else { 0 };
            ImageTokens {
                resized: (rw * tile, rh * tile),
                tiles,
                patches: tiles * (per_tile + 1),
                tokens: tiles * n,
                sequence: tiles * n + separators + 3,
                attention_len: per_tile + 1,
            }
        }
        VisionInput::Fixed { image, tokens } => {
            let patches = (image / p) * (image / p);
            ImageTokens {
                resized: (image, image),
                tiles: 1,
                patches,
                tokens,
                sequence: tokens + 4,
                attention_len: patches,
            }
        }
        VisionInput::CrossTiles { image, tiles, .. } => {
            let per_tile = (image / p) * (image / p) + 1;
            ImageTokens {
                resized: (image, image),
                tiles,
                patches: tiles * per_tile,
                tokens: 0,
                sequence: 1,
                attention_len: tiles * per_tile.div_ceil(8) * 8,
            }
        }
        VisionInput::PatchBudget { pool, soft_tokens } => {
            let max_patches = soft_tokens * pool * pool;
            let (h, w) = gemma4_size(height, width, p, max_patches, pool)?;
            let tokens = (h / p) * (w / p) / (pool * pool);
            ImageTokens {
                resized: (w, h),
                tiles: 1,
                patches: max_patches,
                tokens,
                sequence: tokens + 2,
                attention_len: max_patches,
            }
        }
    })
}

/// Llama 4's canvas, as (height, width) in pixels: `find_supported_resolutions` in its order
/// (aspect-ratio groups of a Python dict, first seen first), then `get_best_fit` with float32
/// scales (torch divides the int64 canvases by the image's int sides).
fn best_canvas_px(h: u64, w: u64, max_tiles: u64, tile: u64) -> (u64, u64) {
    let mut groups: Vec<(f64, Vec<(u64, u64)>)> = Vec::new();
    for chunks in (1..=max_tiles).rev() {
        for f in (1..=chunks).filter(|f| chunks % f == 0) {
            let pair = (f, chunks / f);
            let ratio = pair.0 as f64 / pair.1 as f64;
            match groups.iter_mut().find(|(r, _)| *r == ratio) {
                Some((_, v)) => v.push(pair),
                None => groups.push((ratio, vec![pair])),
            }
        }
    }
    let canvases: Vec<(u64, u64)> = groups
        .into_iter()
        .flat_map(|(_, v)| v)
        .map(|(a, b)| (a * tile, b * tile))
        .collect();
    let scales: Vec<f32> = canvases
        .iter()
        .map(|&(th, tw)| {
            let sw = tw as f32 / w as f32;
            let sh = th as f32 / h as f32;
            if sh > sw {
                sw
            } else {
                sh
            }
        })
        .collect();
    let up = scales.iter().copied().filter(|s| *s >= 1.0);
    let selected = if scales.iter().any(|s| *s >= 1.0) {
        up.fold(f32::INFINITY, f32::min)
    } else {
        scales.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    };
    let mut best: Option<(u64, u64)> = None;
    for (c, s) in canvases.iter().zip(&scales) {
        // torch.argmin over the tied canvases' areas: the first smallest.
        if *s == selected && best.is_none_or(|b| c.0 * c.1 < b.0 * b.1) {
            best = Some(*c);
        }
    }
    best.unwrap_or((tile, tile))
}

/// The image size a family's processor assumes when `--image-size` is absent: the fixed size
/// it resizes to (Gemma 3's `image_size`, Llama 4's one tile), any square image for Gemma 4
/// (every square is resized to the same size); none for Qwen's dynamic resolution.
pub fn default_image_size(v: &Vision) -> Option<(u64, u64)> {
    match v.input {
        VisionInput::Fixed { image, .. } | VisionInput::CrossTiles { image, .. } => {
            Some((image, image))
        }
        VisionInput::Tiles { tile, .. } => Some((tile, tile)),
        VisionInput::Pixtral { longest_edge, .. } => Some((longest_edge, longest_edge)),
        VisionInput::PatchBudget { .. } => Some((1024, 1024)),
        // Kimi-K2.5: the largest square its processor keeps unscaled (√max_patches patches a
        // side); its images are refused by `image_tokens` all the same.
        VisionInput::Navit { max_patches, .. } => {
            let side = (max_patches as f64).sqrt() as u64 * v.patch;
            Some((side, side))
        }
        VisionInput::SmartResize { .. } => None,
    }
}

/// Image positions one sequence carries: images × each image's span.
pub fn sequence_tokens(v: &Vision, images: &Images) -> Result<u64> {
    let per = image_tokens(v, images.width, images.height)?;
    Ok(images.count.saturating_mul(per.sequence))
}

/// The vision tower's bytes for `images` per sequence and `b` sequences.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TowerBytes {
    /// What autograd keeps until the tower's backward (training).
    pub(crate) saved: u64,
    /// The highest transient inside one layer's forward without autograd (inference).
    pub(crate) infer_tmp: u64,
    /// The tower's output, residual stream and the pixel values live through its forward
    /// (inference).
    pub(crate) infer_live: u64,
    /// The image features (and deepstack features) the model keeps until its forward returns.
    pub(crate) features: u64,
}

/// Element sizes of a tower's tensors.
#[derive(Debug, Clone, Copy)]
struct Dt {
    /// The residual stream (fp32 under autocast).
    res: u64,
    /// Matmul inputs and outputs.
    cmp: u64,
    /// A LayerNorm's saved mean and rstd per row: fp32 on CUDA (8), the input's dtype on the
    /// CPU where the references were taken (4 in bf16).
    stats: u64,
}

/// What one tower layer saves over `patches` positions in `units` attention calls of `len`
/// (SDPA; eager's scores are added by the caller), from the tensors autograd keeps in
/// transformers 5.24's layers (`tests/data/vision/tower_saved.py` measures them). Qwen3-VL,
/// SigLIP and Llama 4: the two LayerNorms' inputs (residual dtype) and statistics, SDPA's fp32
/// log-sum-exp per head, the MLP's input and intermediates, and the attention's tensors:
/// - Qwen3-VL / Qwen3.5 (`Qwen3VLVisionAttention`): the norm's output (the fused qkv's input),
///   q and k after the rotary, the fused qkv output whole (v is a view of it: 3 widths), SDPA's
///   output and `torch.cat`'s copy of the per-image outputs (the projection's input): 8;
/// - Gemma 3 (`SiglipAttention`) and Llama 4 (`Llama4VisionAttention`; its complex rotary saves
///   only the shared frequencies): the norm's output, q, k, v and SDPA's output, which the
///   output projection reads (`.contiguous()` of flash's layout is a no-op): 5.
///
/// Gemma 4 (`Gemma4VisionEncoderLayer`): four composed RMSNorms (each its fp32 input, the
/// normalised fp32 product and two fp32 statistics per row, and an fp32 copy of its weight), the
/// per-head q/k RMSNorms (the same per head) and v's scale-free one (its fp32 input and
/// statistics), the projections' input, q, k, v, SDPA's output and log-sum-exp, the additive
/// mask each layer makes in the compute dtype, and the gated MLP's input and four
/// intermediates.
fn layer_saved(v: &Vision, patches: u64, units: u64, len: u64, d: Dt) -> u64 {
    let (hv, i, heads) = (v.hidden, v.intermediate, v.heads);
    let lse = 4 * heads;
    if let VisionInput::PatchBudget { .. } = v.input {
        let head_dim = hv / heads.max(1);
        let norms = 4 * (8 * hv + 8) + 2 * (8 * hv + 8 * heads) + (4 * hv + 8 * heads);
        let per = norms + lse + d.cmp * (6 * hv + 4 * i);
        let weights = 4 * 4 * hv + 2 * 4 * head_dim;
        return m(&[patches, per]) + weights + m(&[units, len, len, d.cmp]);
    }
    let attn = match v.input {
        VisionInput::SmartResize { .. } => 8,
        _ => 5,
    };
    // Non-gated MLP: fc1's output (the activation's input) and fc2's input.
    let per = 2 * hv * d.res + 2 * d.stats + lse + d.cmp * (hv * (attn + 1) + 2 * i);
    m(&[patches, per])
}

/// What the tower saves outside its layers over `patches` positions (measured with it), and its
/// projector over `tokens` (not measured: the modelling code's matmul inputs and norms).
fn outside_layers(v: &Vision, patches: u64, tokens: u64, d: Dt) -> (u64, u64) {
    let hv = v.hidden;
    let pixels = m(&[patches, v.patch_elems, d.cmp]);
    let head_dim = hv / v.heads.max(1);
    match v.input {
        // Qwen3VLVisionModel: the patch embedding's input, `fast_pos_embed_interpolate`'s four
        // int64 indices and fp32 weights per patch, the rotary cos/sin (fp32), the merger (its
        // LayerNorm's input, then its fc1 input, GELU input and fc2 input over the merged
        // width), each deepstack merger (its norm reads a block output already kept: fc1 input,
        // GELU input, fc2 input, the statistics of its merged rows).
        VisionInput::SmartResize { merge, .. } => {
            let merger = m(&[patches, hv * d.res + d.stats + 3 * hv * d.cmp]);
            let deep = m(&[
                v.deepstack,
                patches,
                3 * hv * d.cmp + d.stats / (merge * merge).max(1),
            ]);
            let tower = pixels + m(&[patches, 48 + 2 * head_dim * 4]) + merger + deep;
            (tower, 0)
        }
        // SiglipVisionModel: the patch embedding's input, the position ids, the post-LayerNorm's
        // input; Gemma3MultiModalProjector: the avg-pool's input (a reshaped copy), the
        // RMSNorm's fp32 input and the projection's input over the pooled tokens.
        VisionInput::Fixed { .. } => {
            let tower = pixels + m(&[patches, 8 + hv * d.res + d.stats]);
            let projector = m(&[patches, hv, d.cmp]) + m(&[tokens, hv, 4 + d.cmp]);
            (tower, projector)
        }
        // Llama4VisionModel: the patch embedding's input (unfolded), positions, pre and post
        // LayerNorms' inputs; the vision adapter's MLP after the pixel shuffle and the
        // projector's input.
        VisionInput::Tiles { .. } => {
            let tower = pixels + m(&[patches, 2 * (hv * d.res + d.stats) + 3 * hv * d.cmp]);
            (tower, m(&[tokens, v.out, d.cmp]))
        }
        // MllamaVisionModel (not measured): the patch embedding's input, the pre and post
        // LayerNorms' inputs and the kept intermediate layers' outputs; the projector reads
        // their concatenation with the last (`vision_output_dim` wide).
        VisionInput::CrossTiles {
            intermediate_layers,
            ..
        } => {
            let tower = pixels
                + m(&[
                    patches,
                    2 * (hv * d.res + d.stats) + intermediate_layers * hv * d.cmp,
                ]);
            (tower, m(&[patches, (intermediate_layers + 1) * hv, d.cmp]))
        }
        // Gemma4VisionModel: the patch embedding's input and positions, the pooler's fp32
        // tensors; embed_vision's RMSNorm and projection input over the soft tokens.
        VisionInput::PatchBudget { .. } => {
            let tower = pixels + m(&[patches, 16 + 2 * hv * 4]);
            (tower, m(&[tokens, hv, 4 + d.cmp]))
        }
        // Never reached: `image_tokens` refuses Pixtral's and Kimi-K2.5's images, so no image
        // enters a step.
        VisionInput::Pixtral { .. } | VisionInput::Navit { .. } => (0, 0),
    }
}

/// The vision tower's tensors, from the layers of its modelling code (per-layer figures checked
/// against the real towers on the CPU; not measured on a GPU).
pub(crate) fn tower_bytes(
    v: &Vision,
    images: &Images,
    c: &Ctx,
    recompute: Option<Recompute>,
) -> TowerBytes {
    let Ok(it) = image_tokens(v, images.width, images.height) else {
        return TowerBytes::default();
    };
    let n_img = c.b.saturating_mul(images.count);
    if n_img == 0 {
        return TowerBytes::default();
    }
    let patches = m(&[n_img, it.patches]);
    let tokens = m(&[n_img, it.tokens]);
    let units = m(&[n_img, it.tiles]);
    let (hv, i) = (v.hidden, v.intermediate);
    let d = Dt {
        res: c.res,
        cmp: c.cmp,
        stats: 8,
    };
    let scores = |bytes: u64| {
        if c.attention == Attention::Eager {
            m(&[units, v.heads, it.attention_len, it.attention_len, bytes])
        } else {
            0
        }
    };
    // The towers' eager attention runs its softmax in fp32 (`softmax(..., dtype=float32)`).
    let layer_saved = layer_saved(v, patches, units, it.attention_len, d) + scores(c.sdt(true));
    let layers = if recompute == Some(Recompute::Full) {
        // Gradient checkpointing reaches the tower's blocks too (GradientCheckpointingLayer):
        // their inputs only.
        m(&[v.depth, patches, hv, d.res])
    } else {
        m(&[v.depth, layer_saved])
    };
    let (tower, projector) = outside_layers(v, patches, tokens, d);
    let saved = layers.saturating_add(tower).saturating_add(projector);
    // Inference: one layer at a time; inside it the larger of the attention's (norm output,
    // qkv output, q and k rotated in fp32) and the MLP's (norm output, two intermediates).
    let attn_tmp = m(&[patches, d.cmp * 4 * hv + 4 * 4 * hv]) + scores(4);
    let mlp_tmp = m(&[patches, d.cmp * (hv + if v.gated { 3 * i } else { 2 * i })]);
    let features = m(&[1 + v.deepstack, tokens, v.out, d.cmp]);
    TowerBytes {
        saved,
        infer_tmp: attn_tmp.max(mlp_tmp),
        infer_live: m(&[patches, hv, d.cmp]) + m(&[patches, v.patch_elems, d.cmp]),
        features,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_rounding_is_half_to_even() {
        assert_eq!(py_round_div(48, 32), 2); // 1.5 -> 2
        assert_eq!(py_round_div(80, 32), 2); // 2.5 -> 2
        assert_eq!(py_round_div(112, 32), 4); // 3.5 -> 4
    }

    fn tower(config: &str) -> Vision {
        match crate::read::parse_config(config, "zoo").unwrap() {
            crate::describe::Model::Transformer(t) => t.blocks.vision.unwrap(),
            _ => unreachable!(),
        }
    }

    /// The real towers' saved bytes (transformers 5.24, torch 2.15, CPU, bf16, SDPA;
    /// `tests/data/vision/tower_saved.py`, measured 2026-11-25): one layer (all four families),
    /// and the rest of the tower (Qwen3-VL, Gemma 3; the projector outside it). On the CPU LayerNorm saves its statistics in bf16 (4
    /// bytes a row), on CUDA in fp32 (8): the estimate uses 8, the check the CPU's 4.
    #[test]
    fn layer_bytes_equal_the_real_towers() {
        let cpu = Dt {
            res: 2,
            cmp: 2,
            stats: 4,
        };
        let qwen = tower(include_str!(
            "../../../../tests/zoo/configs/qwen3-vl-8b-instruct.json"
        ));
        let mut no_deepstack = qwen.clone();
        no_deepstack.deepstack = 0; // the script builds the tower without deepstack mergers
        assert_eq!(layer_saved(&qwen, 768, 1, 768, cpu), 32_741_376);
        assert_eq!(outside_layers(&no_deepstack, 768, 192, cpu).0, 9_919_488);
        let gemma3 = tower(include_str!(
            "../../../../tests/zoo/configs/gemma-3-4b-it.json"
        ));
        assert_eq!(layer_saved(&gemma3, 4096, 1, 4096, cpu), 146_309_120);
        assert_eq!(outside_layers(&gemma3, 4096, 256, cpu).0, 14_303_232);
        // Llama 4 with Scout's published tower (the script's LLAMA4_SCOUT_VISION): one tile of
        // 336 pixels, 576 patches and the class token.
        let scout = r#"{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
            "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 2,
              "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 8192, "intermediate_size_mlp": 16384, "vocab_size": 202048,
              "num_local_experts": 16, "num_experts_per_tok": 1, "max_position_embeddings": 10485760},
            "vision_config": {"hidden_size": 1408, "image_size": 336, "intermediate_size": 5632,
              "num_attention_heads": 16, "num_hidden_layers": 34, "patch_size": 14,
              "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
              "projector_output_dim": 4096, "vision_output_dim": 4096}}"#;
        let llama4 = tower(scout);
        assert_eq!(layer_saved(&llama4, 577, 1, 577, cpu), 26_038_856);
        // Gemma 4: a 630-patch budget (576 real patches), one image: composed norms, no
        // LayerNorm statistics to differ between the CPU and CUDA.
        let gemma4 = tower(include_str!(
            "../../../../tests/zoo/configs/gemma-4-26b-a4b.json"
        ));
        assert_eq!(layer_saved(&gemma4, 630, 1, 630, cpu), 69_256_008);
    }

    #[test]
    fn smart_resize_keeps_pixels_in_range() {
        let (h, w) = smart_resize(10, 10, 32, 3136, 1_003_520).unwrap();
        assert!(h * w >= 3136 && h % 32 == 0 && w % 32 == 0);
        let (h, w) = smart_resize(4000, 3000, 32, 3136, 1_003_520).unwrap();
        assert!(h * w <= 1_003_520 && h % 32 == 0 && w % 32 == 0);
        assert!(smart_resize(1, 300, 32, 3136, 1_003_520).is_err());
    }
}
