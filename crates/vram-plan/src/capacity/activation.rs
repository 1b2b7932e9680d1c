//! The profile run's activation peak: one decoder layer's live set and the dummy sampler.

use super::*;

/// Activation peak of a forward over `tokens` tokens on one GPU, in the model dtype: the largest
/// live set inside one decoder layer as the engine's modules hold their tensors.
///
/// Eager PyTorch (vLLM V0, V1 with `--enforce-eager`, SGLang): `LlamaDecoderLayer.forward` keeps
/// the residual and the post-attention-norm output it passes to the MLP, and `LlamaMLP.forward`
/// (`gate_up, _ = self.gate_up_proj(x); x = self.act_fn(gate_up); x, _ = self.down_proj(x)`,
/// `vllm/model_executor/models/llama.py`, the same in every version read) keeps `gate_up` as a
/// local until it returns, so at `down_proj` the residual, the normed input, `gate_up` (2f),
/// the activation (f) and the output (h) are live: `tokens × (3h + 3f)`. A plain MLP rebinds its
/// one local: `tokens × (3h + 2f)`. Under `torch.compile` (vLLM V1's default) Inductor frees each
/// buffer after its last use: the larger of residual + normed input + `gate_up` and residual +
/// `gate_up` + activation. MoE layers (`fused_moe`) allocate their three intermediate caches up
/// front, `[M, top_k, 2f]`, `[M·top_k, f]` and `[M, top_k, h]`, over chunks of at most
/// `VLLM_FUSED_MOE_CHUNK_SIZE` = 32768 tokens. Attention (the fused QKV output, the attention
/// output and `o_proj`'s) is counted where it is larger.
pub(super) fn forward_peak(t: &Transformer, tokens: u64, k: &Knobs, compiled: bool) -> u64 {
    let d = k.dtype_bytes;
    let tp = k.tp;
    let h = t.hidden();
    let (q, kv) = t.blocks.typical().attn_widths();
    let qkv = (q + 2 * kv).div_ceil(tp);
    let q_tp = q.div_ceil(tp);
    let f = t.blocks.typical().intermediate.div_ceil(tp);
    let gated = t.blocks.typical().gated;
    let attn = tokens * (3 * h + qkv + q_tp);
    let mlp = if t.blocks.typical().experts > 1 {
        let m = tokens.min(32768);
        let topk = t.blocks.typical().top_k.max(1);
        tokens * 3 * h + m * topk * (3 * f + h)
    } else if compiled {
        let up = if gated { 2 * f } else { f };
        tokens * (h + (h + up).max(up + f))
    } else if gated {
        tokens * (3 * h + 3 * f)
    } else {
        tokens * (3 * h + 2 * f)
    };
    attn.max(mlp) * d
}

/// Activation peak of the same forward where every quantized linear first makes its whole
/// weight in the model dtype (vLLM's plain AWQ from 256 tokens and GPTQ kernels,
/// `engine::vllm_dequant_linears`): at each linear's matmul the live set [`forward_peak`] counts
/// there, plus that linear's per-GPU weight `in × out` (freed when the call returns). The
/// projections in order, with what is live beside the weight and the output:
/// - `qkv_proj`: the residual and the normed input, `tokens × (2h + qkv)`;
/// - `o_proj`: also the fused QKV and the attention output, `tokens × (3h + qkv + q)`;
/// - `gate_up_proj`: the residual and the normed input, `tokens × (2h + up)`;
/// - `down_proj`: eager, the MLP's live set as [`forward_peak`] counts it; compiled (Inductor
///   frees `gate_up` after the activation), the residual, the activation and the output,
///   `tokens × (2h + f)`.
///
/// MoE layers' experts run fused kernels with no such temporary; only their attention counts.
/// Embeddings and the head stay unquantized (`AWQConfig.get_quant_method` quantizes
/// `LinearBase` layers only). Never below [`forward_peak`].
pub(super) fn dequant_forward_peak(t: &Transformer, tokens: u64, k: &Knobs, compiled: bool) -> u64 {
    let d = k.dtype_bytes;
    let tp = k.tp;
    let h = t.hidden();
    let (q, kv) = t.blocks.typical().attn_widths();
    let qkv = (q + 2 * kv).div_ceil(tp);
    let q_tp = q.div_ceil(tp);
    let f = t.blocks.typical().intermediate.div_ceil(tp);
    let gated = t.blocks.typical().gated;
    let up = if gated { 2 * f } else { f };
    let mut sites = vec![
        tokens * (2 * h + qkv) + h * qkv,
        tokens * (3 * h + qkv + q_tp) + q_tp * h,
    ];
    if t.blocks.typical().experts <= 1 {
        let down_live = if compiled {
            tokens * (2 * h + f)
        } else if gated {
            tokens * (3 * h + 3 * f)
        } else {
            tokens * (3 * h + 2 * f)
        };
        sites.push(tokens * (2 * h + up) + h * up);
        sites.push(down_live + f * h);
    }
    let peak = sites.into_iter().max().unwrap_or(0) * d;
    peak.max(forward_peak(t, tokens, k, compiled))
}

/// Peak of the sampler's dummy run over `reqs` rows of logits, plus the profile run's hidden
/// states (`tokens × h`, held by `profile_run` until the sampler returns).
///
/// vLLM V1 (`GPUModelRunner._dummy_sampler_run`: "the sampler may skip top_k, top_p, and
/// logprobs"): the logits in the model dtype, `Sampler.forward`'s fp32 copy, `random_sample`'s
/// softmax probabilities and its exponential noise (`q = torch.empty_like(probs)`), fp32 each.
/// vLLM V0 (`ModelRunner.profile_run` samples with `top_p=0.99, top_k=vocab_size - 1`): the
/// logits, their fp32 copy, and inside `_apply_top_k_top_p` PyTorch's CUDA sort of the fp32 row
/// (sorted values, int64 indices, the int64 index input and cub's radix-sort double buffers of
/// both), which is larger than what the function holds once the sort returns (the sorted values
/// and indices, both masks, the softmax, its cumulative sum and the re-scattered logits).
pub(super) fn sampler_peak(t: &Transformer, reqs: u64, tokens: u64, k: &Knobs, sorts: bool) -> u64 {
    let v = t.vocab().div_ceil(64) * 64;
    let d = k.dtype_bytes;
    let hidden = tokens * t.hidden() * d;
    let per_element = if sorts {
        // during the sort: fp32 input 4, values out 4, indices in 8 and out 8, cub's alternate
        // buffers 4 + 8; after it: values 4, indices 8, masks 1 + 1, softmax 4, cumsum 4, new 4.
        (d + 4 + 4 + 8 + 8 + 4 + 8).max(d + 4 + 4 + 8 + 1 + 4 + 4 + 1 + 4)
    } else {
        d + 3 * 4
    };
    reqs * v * per_element + hidden
}

/// The profile-run peak of vLLM V0's encoder-decoder runner for a model whose images reach the
/// text by cross-attention (Llama 3.2 Vision), or `None` for any other model. Read at 0.6.3 and
/// 0.6.6 (`worker/enc_dec_model_runner.py` `profile_run`, `model_executor/models/mllama.py`):
/// each of `max_num_seqs` dummy sequences carries one image of `max_num_tiles` tiles (the
/// maximal `get_max_mllama_image_tokens`), and `MllamaVisionModel.forward` encodes them all at
/// once. Per image, over `L = tiles x round_up(patches + 1, 8)` positions: the float32 pixel
/// values, the additive attention mask `_prepare_aspect_ratio_attention_mask` builds in the model
/// dtype (`L x L`, one per image, kept for both encoders), the kept intermediate layers' outputs
/// (stacked and held through the global encoder) and one encoder layer's MLP live set (residual,
/// normed input, fc1's output split by TP, GELU's output). Then the decoder runs over
/// `max_num_batched_tokens` tokens with every image's cross-attention states
/// (`tiles x (patches + 1) x hidden`) held.
pub(super) fn cross_vision_peak(
    t: &Transformer,
    k: &Knobs,
    images: u64,
    tokens: u64,
) -> Option<u64> {
    use vram_model::blocks::VisionInput;
    let v = t.blocks.vision.as_ref()?;
    let VisionInput::CrossTiles {
        image,
        tiles,
        intermediate_layers,
    } = v.input
    else {
        return None;
    };
    let d = k.dtype_bytes;
    let per_tile = (image / v.patch.max(1)).pow(2) + 1;
    let len = tiles * per_tile.div_ceil(8) * 8;
    let pixels = tiles * 3 * image * image * 4;
    let mask = len * len * d;
    let kept = intermediate_layers * len * v.hidden * d;
    let layer = len * (2 * v.hidden + 2 * v.intermediate.div_ceil(k.tp)) * d;
    let encoder = images * (pixels + mask + kept + layer);
    let states = images * tiles * per_tile * t.hidden() * d;
    let decoder = states + forward_peak(t, tokens, k, false);
    Some(encoder.max(decoder))
}
