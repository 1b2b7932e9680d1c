//! Weights on the most loaded GPU of a job: tensor, pipeline, expert and data parallelism,
//! quantized storage and the engines' kernel layouts, and what the caching allocator rounds.

use super::*;
use vram_alloc::policy::{allocation_size, round_size, LARGE_BUFFER, MIN_LARGE_ALLOC, SMALL_SIZE};
use vram_model::mech::Component;

/// Weights on the most loaded GPU of a `tp × pp` job: layers split evenly over stages (the first
/// holds the embedding, the last the final norm and head), tensor-parallel parts split by `tp`
/// (vocabulary padded to a multiple of 64, `DEFAULT_VOCAB_PADDING_SIZE`), quantized linear
/// layers at their storage's bytes; plus the rotary `cos_sin_cache` (`[max_positions,
/// head_dim]` in the model dtype). Expert and data parallelism move parts around
/// ([`parallel_widths`]): vLLM's `--enable-expert-parallel` spreads whole experts over the
/// `tp × dp` GPUs; SGLang's `--enable-dp-attention` splits attention `tp / dp` ways.
///
/// Without `--quantization`, a checkpoint shipped quantized (the config's FP8 blocks or MXFP4
/// experts, as `vram_model::blocks::Storage` reads them) is counted as stored: on one GPU its
/// exact stored bytes, and under TP/PP the same share of them that the layout puts on the most
/// loaded GPU of the unquantized model. vLLM's MXFP4 MoE kernels then lay the experts out padded
/// to their tile sizes (`engine::vllm_mxfp4_layout`): what loading takes can exceed what is stored.
pub fn weights_per_gpu(t: &Transformer, k: &Knobs, gpu: &Gpu, engine: Engine) -> u64 {
    let logical = logical_weights_per_gpu(t, k, engine, gpu);
    let mxfp4 = k.quantization == Quantization::Mxfp4
        || t.blocks.storage.quant == vram_model::blocks::Quant::Mxfp4;
    let base = if k.quantization != Quantization::None
        || t.blocks.storage.quant == vram_model::blocks::Quant::None
    {
        logical
    } else {
        let one = Knobs {
            tp: 1,
            pp: 1,
            dp: 1,
            expert_parallel: false,
            dp_attention: false,
            ..*k
        };
        let rotary = rotary_cache_bytes(t, k, engine, gpu) as f64;
        let whole = logical_weights_per_gpu(t, &one, engine, gpu) as f64;
        // Block-FP8 scales fp32 whatever `scale_fmt` says: vLLM's `Fp8LinearMethod` makes
        // them so (read at 0.9.1); SGLang's port of it is taken to do the same (not re-read).
        let stored = t.blocks.as_engines_hold().weights_bytes(false) as f64 + rotary;
        // The towers stay in the dtype whatever the checkpoint quantizes (`Storage` leaves
        // vision and audio unquantized), so they are held beside the scaled rest, not scaled
        // with it.
        let d = k.dtype_bytes as f64;
        let towers = towers_per_gpu(t, k.tp, engine) * d;
        let towers_whole = towers_per_gpu(t, 1, engine) * d;
        let rest = (stored - towers_whole) / (whole - towers_whole).max(1.0);
        (towers + (logical as f64 - towers) * rest).round() as u64
    };
    if engine != Engine::Vllm {
        return base;
    }
    let padding = if mxfp4 {
        mxfp4_padding(t, k, gpu)
            + mxfp4_triton_extras(t, k, gpu)
            + mxfp4_hopper_value_padding(t, k, gpu)
    } else {
        0
    };
    base + padding + mla_absorbed_bytes(t, k)
}

/// What vLLM before 0.8 keeps beside the MLA weights on the most loaded GPU
/// (`engine::vllm_mla_absorbs`): `W_Q_UK` (`q_in × heads × kv_lora_rank`) and `W_UV_O`
/// (`heads × kv_lora_rank × hidden`) in the model dtype, heads split by TP, for a quantized
/// checkpoint the dequantized `kv_b_proj` (`kv_lora_rank × heads × (qk_nope + v)`) they come
/// from, and `W_QR`, the query projection's rotary columns made contiguous (`q_in × heads ×
/// qk_rope`, `.contiguous()` then `.to(act_dtype)`: `process_weights_after_loading` in
/// `attention/backends/mla/utils.py` at 0.7.2, kept with or without the absorption).
pub(super) fn mla_absorbed_bytes(t: &Transformer, k: &Knobs) -> u64 {
    if !engine::vllm_mla_absorbs(k) {
        return 0;
    }
    let n = (t.blocks.len() as u64).div_ceil(k.pp) as usize;
    t.blocks
        .iter()
        .take(n)
        .map(|b| match b.mixer.as_mla() {
            Some(m) => {
                let heads = m.heads.div_ceil(attention_tp(k));
                let q_in = m.q_lora_rank.unwrap_or(t.hidden());
                let mut elems = q_in * heads * m.kv_lora_rank
                    + heads * m.kv_lora_rank * t.hidden()
                    + q_in * heads * m.qk_rope_head_dim;
                if k.quantization != Quantization::None || t.blocks.storage.is_packed() {
                    elems += m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
                }
                elems * k.dtype_bytes
            }
            None => 0,
        })
        .sum()
}

/// Bytes of the rotary `cos_sin_cache`s (`[rows, rotary_dim]`), which vLLM's and SGLang's
/// `get_rope` keep beside the weights. `RotaryEmbedding._compute_cos_sin_cache` concatenates
/// `rotary_dim / 2` cosines and sines per position (vLLM `rotary_embedding/base.py`, read at
/// v0.10.2), where `rotary_dim` is the part of each head the rotary embedding turns
/// ([`vram_model::blocks::Attention::rotary_dim`]: a quarter of Qwen3.5's 256, Phi-2's 32 of 80)
/// and, for MLA, `qk_rope_head_dim` (`deepseek_v2.py` passes it as the head size). None for a
/// model whose attention layers all go without rotary positions (OPT's learned positions:
/// `OPTAttention` at vLLM 0.18.1 builds no rotary embedding); layers of linear attention or
/// state-space mixers keep none.
///
/// Both engines keep one table per distinct `get_rope` key (`_ROPE_DICT`, read in vLLM at
/// v0.10.2 and v0.19.0, in SGLang at 0.4.2 and 0.5.3): one per rotary width, and in vLLM for
/// Gemma 3/4 one more for the sliding layers' own parameters
/// ([`vram_model::blocks::RopeTables`], `max_position_embeddings` rows); the config's own
/// parameters' table has the rows its class builds ([`rope_rows`]) and the bytes its engine
/// keeps it in ([`rope_element_bytes`]). SGLang's Gemma 3 builds no table before 0.5.10 and
/// from it one unscaled table per base (`RopeTables::sglang_per_base_tables`,
/// `max_position_embeddings` rows).
pub(super) fn rotary_cache_bytes(t: &Transformer, k: &Knobs, engine: Engine, gpu: &Gpu) -> u64 {
    let tables = t.blocks.rope_tables;
    if engine == Engine::Sglang && tables.sglang_per_base_tables > 0 {
        if engine.version_in_force(k) < [0, 5, 10] {
            return 0;
        }
        let width = t
            .blocks
            .iter()
            .find_map(|b| b.mixer.as_attention().map(|a| a.rotary_dim()))
            .unwrap_or(0);
        return u64::from(tables.sglang_per_base_tables)
            * t.max_positions()
            * width
            * rope_element_bytes(t, k, engine, gpu, None);
    }
    // Each key: whether it is a sliding layer's own (vLLM), the rotary width, and the head
    // size `get_rope` is given with whether the layer is MLA (DeepSeek's class).
    let widths = t
        .blocks
        .iter()
        .filter_map(|b| match (b.mixer.as_attention(), b.mixer.as_mla()) {
            (Some(a), _) => a.rope.then(|| {
                let local = engine == Engine::Vllm
                    && tables.local
                    && matches!(a.window, vram_model::blocks::Window::Sliding(_));
                (local, a.rotary_dim(), a.head_dim, false)
            }),
            (None, Some(m)) => Some((false, m.qk_rope_head_dim, m.qk_rope_head_dim, true)),
            (None, None) => None,
        });
    let mut keys: Vec<(bool, u64, u64, bool)> = widths.collect();
    keys.sort_unstable();
    keys.dedup();
    let rows = rope_rows(t, k, engine);
    // SGLang's M-RoPE from 0.5.19 registers beside its table which axis owns each rotary lane
    // (`axis_map`, int64, `rotary_dim / 2`; 0.5.16 to 0.5.18 only for GLM's interleaving).
    let axis_map = |width: u64| match t.blocks.mrope {
        Some(_) if engine == Engine::Sglang && engine.version_in_force(k) >= [0, 5, 19] => {
            width / 2 * 8
        }
        _ => 0,
    };
    keys.iter()
        .map(|&(is_local, width, head, mla)| {
            let (rows, bytes) = if is_local {
                (t.max_positions(), k.dtype_bytes)
            } else {
                (
                    rows,
                    rope_element_bytes(t, k, engine, gpu, Some((head, mla))),
                )
            };
            rows * width * bytes + axis_map(width)
        })
        .sum()
}

/// Rows of the table the config's own rope parameters build
/// ([`vram_model::blocks::RopeClass`]):
/// - no scaling, or scaling of the frequencies only: [`rotary_positions`];
/// - `linear`: `max_position_embeddings × factor`;
/// - dynamic NTK: `max_position_embeddings × factor`, from vLLM 0.22 `max_position_embeddings`
///   (`dynamic_ntk_scaling_rope.py`: 0.21.0 as 0.19.0, 0.22.0 sizes it by the positions and
///   scales the base by `max_trained_positions`; 0.20 not read, taken as 0.21);
/// - `dynamic` with `alpha`: [`rotary_positions`] where the release builds the alpha class
///   ([`alpha_first`]), else the `factor`'s table (a dict without one is refused,
///   [`super::engine::rope_refusal`]);
/// - YaRN: `original × factor`; with M-RoPE from vLLM 0.11 `get_rope` builds an
///   `MRotaryEmbedding` with the YaRN parameters, four times that (`mrope.py`:
///   `cache_max_position_num = original × 4`, then YaRN's `_compute_cos_sin_cache` of that
///   times the factor; 0.10.2 builds a plain `YaRNScalingRotaryEmbedding`);
/// - LongRoPE: vLLM from 0.7.0 keeps the short and long tables stacked
///   (`long_short_cos_sin_cache`, `original + max_position_embeddings` rows); vLLM to 0.6.6 and
///   SGLang (`Phi3LongRoPEScaledRotaryEmbedding` at 0.4.2 and 0.5.3) register the short and the
///   long table as buffers too, beside the stacked copy: twice that.
pub(super) fn rope_rows(t: &Transformer, k: &Knobs, engine: Engine) -> u64 {
    use vram_model::blocks::RopeClass;
    let vllm = engine == Engine::Vllm;
    let version = engine.version_in_force(k);
    match t.blocks.rope_tables.class {
        RopeClass::Positions | RopeClass::Ntk => rotary_positions(t, k, engine),
        RopeClass::DynamicAlpha { factor_rows } => match factor_rows {
            Some(rows) if !alpha_first(engine, k) => rows,
            _ => rotary_positions(t, k, engine),
        },
        RopeClass::Linear { rows } => rows,
        RopeClass::DynamicNtk { rows } if !(vllm && version >= [0, 22, 0]) => rows,
        RopeClass::DynamicNtk { .. } => t.max_positions(),
        RopeClass::Yarn { rows, .. }
            if vllm && t.blocks.mrope.is_some() && version >= [0, 11, 0] =>
        {
            rows * 4
        }
        RopeClass::Yarn { rows, .. } => rows,
        RopeClass::LongRope { original } if vllm && version >= [0, 7, 0] => {
            original + t.max_positions()
        }
        RopeClass::LongRope { original } => 2 * (original + t.max_positions()),
    }
}

/// Whether the release's `get_rope` checks a `dynamic` dict's `alpha` before its `factor`
/// (builds `DynamicNTKAlphaRotaryEmbedding`): vLLM from 0.9.2 (0.9.0 and 0.9.1 read `factor`
/// only, run on the CPU), SGLang from 0.5.10 (0.5.9 reads `factor` only).
pub(super) fn alpha_first(engine: Engine, k: &Knobs) -> bool {
    let version = engine.version_in_force(k);
    match engine {
        Engine::Vllm => version >= [0, 9, 2],
        Engine::Sglang => version >= [0, 5, 10],
    }
}

/// Bytes per element of the config's own rotary table, for a key `get_rope` is given head size
/// `head` on an MLA layer or not (`None`: a table no DeepSeek class builds). vLLM casts every
/// class's cache to the model dtype (`cache.to(dtype)` in `RotaryEmbedding.__init__`, read at
/// v0.10.2, v0.19.0 and v0.22.0) except where [`vllm_deepseek_rope_fp32`] says. SGLang keeps
/// `RotaryEmbedding` and its subclasses' caches in fp32 on CUDA from 0.4.2.post1 ("cache needs
/// to be in FP32 for numerical stability": the cast is skipped where `is_cuda`, read at
/// 0.4.2.post1 to post4, 0.4.3, 0.4.4, 0.4.5 and 0.5.3; 0.4.2 casts), in the model dtype on ROCm
/// (from 0.4.5 `is_cuda` asks `torch.version.cuda`; 0.4.2.post1 to 0.4.4 asked the same through
/// `is_cuda_available`) to 0.5.21, and in fp32 there too from 0.5.22 ("the fused QSA indexer
/// JIT kernel requires fp32 cos_sin_cache"; run at 0.5.4 to 0.5.11 and 0.5.15 to 0.5.23); its
/// `Phi3LongRoPEScaledRotaryEmbedding`, no subclass, casts its tables.
pub(super) fn rope_element_bytes(
    t: &Transformer,
    k: &Knobs,
    engine: Engine,
    gpu: &Gpu,
    key: Option<(u64, bool)>,
) -> u64 {
    let class = t.blocks.rope_tables.class;
    let longrope = matches!(class, vram_model::blocks::RopeClass::LongRope { .. });
    let version = engine.version_in_force(k);
    let fp32 = version > [0, 4, 2]
        || (version == [0, 4, 2] && matches!(k.engine_pin, Pin::Release { post } if post >= 1));
    let deepseek = match (class, key) {
        (vram_model::blocks::RopeClass::Yarn { deepseek, .. }, Some((head, mla))) => {
            (deepseek || mla).then_some(head)
        }
        _ => None,
    };
    let rocm_fp32 = version >= [0, 5, 22];
    let sglang_fp32 =
        engine == Engine::Sglang && !longrope && (!engine::is_rocm(gpu) || rocm_fp32) && fp32;
    let vllm_fp32 = engine == Engine::Vllm
        && deepseek.is_some_and(|head| vllm_deepseek_rope_fp32(k, gpu, head));
    if sglang_fp32 || vllm_fp32 {
        4
    } else {
        k.dtype_bytes
    }
}

/// Whether vLLM keeps DeepSeek's YaRN table (`DeepseekScalingRotaryEmbedding`, built for
/// `deepseek_yarn` and for MLA layers' scaled rope in `deepseek_v2.py`, whose `get_rope` head
/// size is `qk_rope_head_dim`) in fp32: from 0.14 its `use_flashinfer` (the custom op enabled,
/// a 16-bit model dtype, CUDA, `has_flashinfer()`, head size 64, 128, 256 or 512) skips the cast
/// to the model dtype, and the FlashInfer kernel reads the fp32 table as it is. The custom op
/// is enabled where `custom_ops` holds "all": `VllmConfig` appends it when the compilation
/// mode is NONE (`--enforce-eager`, `-O0`, `--compilation-mode none`: [`engine::vllm_inductor`]);
/// the default Inductor compilation appends
/// "none" (`CustomOp.default_on`; read at 0.14.0, 0.19.0 and 0.22.0). `has_flashinfer()` needs
/// the `flashinfer` package and `flashinfer-cubin` (or `nvcc` on the PATH): the wheel requires
/// both from 0.19 (`requirements/cuda.txt`); to 0.18 it requires `flashinfer-python` only, so
/// a pip install without the CUDA compiler casts, as modelled (the Docker image installs the
/// cubins and keeps fp32). Run on the CPU from 0.12.0 to 0.22.0 (`tests/data/get_rope`,
/// `eager` runs): fp32 from 0.14.0, the model dtype at 0.12.0 and 0.13.0 (no such branch).
pub(super) fn vllm_deepseek_rope_fp32(k: &Knobs, gpu: &Gpu, head: u64) -> bool {
    !engine::vllm_inductor(k)
        && k.dtype_bytes == 2
        && !engine::is_rocm(gpu)
        && matches!(head, 64 | 128 | 256 | 512)
        && Engine::Vllm.version_in_force(k) >= [0, 19, 0]
}

/// Rows of the learned position and token-type tables times the width: whole on the first
/// stage's every GPU (vLLM 0.18.1 `opt.py`: `OPTLearnedPositionalEmbedding` is a plain
/// `nn.Embedding` of `max_position_embeddings + 2` rows, not a `VocabParallelEmbedding`).
fn position_tables(t: &Transformer) -> u64 {
    let e = t.blocks.embedding;
    (e.learned_positions + e.type_vocab) * t.hidden()
}

/// The expert feed-forward's intermediate size and whether it is gated, for an MoE model.
pub(super) fn moe_shape(t: &Transformer) -> Option<(u64, bool)> {
    t.blocks
        .kinds
        .iter()
        .find_map(|kind| kind.ffn.moe().map(|m| (m.expert_intermediate, m.gated)))
}

/// Bytes vLLM's MXFP4 MoE layout adds on the most loaded GPU: every expert matrix padded to
/// `round_up(hidden, h) × round_up(intermediate per GPU, i)` (MXFP4 elements of half a byte
/// plus an 8-bit scale per 32).
pub(super) fn mxfp4_padding(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    let Some((inter, gated)) = moe_shape(t) else {
        return 0;
    };
    let (_, im, hm) = engine::vllm_mxfp4_layout(k, gpu);
    let per_gpu_experts = experts_on_most_loaded(t.blocks.typical().experts, k);
    let i_part = if k.expert_parallel {
        inter
    } else {
        inter.div_ceil(k.tp)
    };
    let mats = if gated { 3 } else { 2 };
    let elems = |h: u64, i: u64| per_gpu_experts * mats * h * i;
    let padded = elems(t.hidden().div_ceil(hm) * hm, i_part.div_ceil(im) * im);
    let plain = elems(t.hidden(), i_part);
    let layers_here = t.layers().div_ceil(k.pp);
    let bytes = 0.5 + 1.0 / 32.0;
    ((padded - plain) as f64 * bytes) as u64 * layers_here
}

/// Bytes vLLM's Triton MXFP4 path (Hopper from 0.12, ROCm) holds beyond the stored experts on
/// the most loaded GPU (`Mxfp4MoEMethod.process_weights_after_loading`, Triton branch, read at
/// v0.11.0 and v0.14.1):
/// - the expert biases become fp32 (`layer.w13_bias.to(torch.float32)` replaces the bf16
///   parameter): one more model-dtype copy of `[E, 2I]` and `[E, H]`;
/// - where the kernel's scale layout copies ([`engine::vllm_mxfp4_scales_copied`]), the
///   scales twice: the registered `[E, N, K/32]` bytes and the swizzled copy, its `N` rows
///   padded to 256 and its `K/32` columns to an even count (`HopperMXScaleLayout`).
///
/// `N`/`K` are the expert matrices as the Triton layout holds them: `w13` is `[2I, H]` and
/// `w2` `[H, I]`, the per-GPU intermediate size padded to 64.
pub(super) fn mxfp4_triton_extras(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    let (kernel, im, _) = engine::vllm_mxfp4_layout(k, gpu);
    if !kernel.contains("Triton") {
        return 0;
    }
    let Some(TritonExperts {
        experts,
        i_pad,
        up_rows,
        bias: expert_bias,
    }) = triton_experts(t, k, im)
    else {
        return 0;
    };
    let h = t.hidden();
    let bias = if expert_bias {
        (up_rows + h) * k.dtype_bytes
    } else {
        0
    };
    let scales = if engine::vllm_mxfp4_scales_copied(k, gpu) {
        let round = |x: u64, m: u64| x.div_ceil(m) * m;
        round(up_rows, 256) * round(h.div_ceil(32), 2)
            + round(h, 256) * round(i_pad.div_ceil(32), 2)
    } else {
        0
    };
    experts * (bias + scales) * t.layers().div_ceil(k.pp)
}

/// The MXFP4 expert banks one GPU holds in vLLM's Triton layout: experts per GPU (whole
/// experts over `tp × dp` with `--enable-expert-parallel`, else all of them), the per-GPU
/// intermediate size padded to the layout's multiple `im`, and `w13`'s rows (`2I` gated).
struct TritonExperts {
    experts: u64,
    i_pad: u64,
    up_rows: u64,
    bias: bool,
}

fn triton_experts(t: &Transformer, k: &Knobs, im: u64) -> Option<TritonExperts> {
    let moe = t.blocks.kinds.iter().find_map(|kind| kind.ffn.moe())?;
    let experts = experts_on_most_loaded(moe.experts, k);
    let inter = if k.expert_parallel {
        moe.expert_intermediate
    } else {
        moe.expert_intermediate.div_ceil(k.tp)
    };
    let i_pad = inter.div_ceil(im) * im;
    Some(TritonExperts {
        experts,
        i_pad,
        up_rows: if moe.gated { 2 * i_pad } else { i_pad },
        bias: moe.expert_bias,
    })
}

/// Whether the triton_kernels that vLLM's wheel vendors (`vllm/third_party/triton_kernels`, the
/// copy `has_triton_kernels` finds and the engine logs "Loading module triton_kernels from")
/// pads the MXFP4 values before swizzling them for Hopper. Read in the x86_64 manylinux wheels
/// of every release from 0.12.0 to 0.23.0: `HopperMXValueLayout.swizzle_data`
/// (`tensor_details/layout_details/hopper_value.py`) opens with "Pre-pad both matrix dims to
/// multiples of 64" in 0.17.0 to 0.21.0; 0.12.0 to 0.16.0 and 0.22.0 to 0.23.0 vendor the
/// older copy, which pads only to its tile packing (16 and 32, which MXFP4's shapes already
/// meet).
pub(super) fn vllm_mxfp4_value_prepad(k: &Knobs) -> bool {
    ([0, 17, 0]..[0, 22, 0]).contains(&Engine::Vllm.version_in_force(k))
}

/// Bytes vLLM's Triton MXFP4 path on Hopper adds to the expert values on the most loaded GPU
/// where its triton_kernels pre-pads them ([`vllm_mxfp4_value_prepad`]). `_swizzle_mxfp4`
/// (`quantization/utils/mxfp4_utils.py`, called for the Triton backends from
/// `convert_to_mxfp4_moe_kernel_format` in `fused_moe/oracle/mxfp4.py`, read at 0.19.1)
/// transposes each packed expert tensor so the MXFP4 axis comes first and converts it to
/// `HopperMXValueLayout` (torch 2.8.1 or newer; `make_default_matmul_mxfp4_w_layout` on compute
/// capability 9), whose `swizzle_data` pads the last two dims of that uint8 tensor to multiples
/// of 64 and keeps the padded copy as the layer's weight (the loaded one is deleted):
/// `w13` `[E, 2I, H/2]` is swizzled as `[E, H/2, 2I]`, `w2` `[E, H, I/2]` as `[E, I/2, H]`,
/// with `I` the per-GPU intermediate size already padded to 64 ([`engine::vllm_mxfp4_layout`]).
/// gpt-oss (H 2880): `H/2` = 1440 becomes 1472; at TP 2 `I/2` = 736 becomes 768.
pub(super) fn mxfp4_hopper_value_padding(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    let (kernel, im, _) = engine::vllm_mxfp4_layout(k, gpu);
    if kernel != "Triton" || !vllm_mxfp4_value_prepad(k) {
        return 0;
    }
    let Some(TritonExperts {
        experts,
        i_pad,
        up_rows,
        ..
    }) = triton_experts(t, k, im)
    else {
        return 0;
    };
    let h = t.hidden();
    let r64 = |x: u64| x.div_ceil(64) * 64;
    // Each matrix as swizzled: (packed MXFP4 axis in bytes, the other axis).
    let grown = |packed: u64, other: u64| r64(packed) * r64(other) - packed * other;
    let per_expert = grown(h / 2, up_rows) + grown(i_pad / 2, h);
    experts * per_expert * t.layers().div_ceil(k.pp)
}

/// How the experts are split: `(ways, whole)`: vLLM with `--enable-expert-parallel` spreads
/// whole experts over `tp × dp` GPUs; otherwise each expert's matrices are split `tp` ways
/// (SGLang's `--ep-size` spreads whole experts over `ep` of the TP GPUs and splits each the
/// remaining `tp / ep` ways: the same bytes per GPU).
pub(super) fn expert_split(k: &Knobs) -> (u64, bool) {
    if k.expert_parallel {
        (k.tp * k.dp, true)
    } else {
        (k.tp, false)
    }
}

/// Whole experts on the most loaded GPU under vLLM's `--enable-expert-parallel` (`ways` =
/// `tp × dp` GPUs, [`expert_split`]), as `determine_expert_map` hands them out. From 0.10.1
/// (read at 0.10.1.1, 0.10.2, 0.11.0, 0.14.1, 0.19.1 and, in `expert_map_manager.py`, 0.23.0)
/// the first `experts % ways` ranks take one more than `experts / ways`: the most loaded holds
/// `⌈experts / ways⌉`. At 0.10.0 (read there; older releases taken to do the same) every rank
/// but the last takes `experts / ways` and the last the rest, which may be all of them (8
/// experts over 16 GPUs). Neither refuses a split that does not divide the experts (0.19.1
/// asserts an even split only under EPLB), so neither does vram. `experts` without EP.
pub(super) fn experts_on_most_loaded(experts: u64, k: &Knobs) -> u64 {
    let (ways, whole) = expert_split(k);
    if !whole || ways <= 1 {
        return experts;
    }
    if Engine::Vllm.version_in_force(k) >= [0, 10, 1] {
        experts.div_ceil(ways)
    } else {
        let base = experts / ways;
        base.max(experts - (ways - 1) * base)
    }
}

/// The attention's tensor-parallel size: `tp`, or `tp / dp` with SGLang's DP attention.
pub(super) fn attention_tp(k: &Knobs) -> u64 {
    if k.dp_attention {
        (k.tp / k.dp).max(1)
    } else {
        k.tp
    }
}

/// The ways attention, experts and the rest of a layer are split on one GPU.
pub(super) fn parallel_widths(k: &Knobs) -> (f64, f64, f64) {
    (
        attention_tp(k) as f64,
        expert_split(k).0 as f64,
        k.tp as f64,
    )
}

/// The vocabulary as the engines' `VocabParallelEmbedding` and `ParallelLMHead` pad it: a
/// multiple of 64 (`DEFAULT_VOCAB_PADDING_SIZE`), before the TP split.
pub(super) fn padded_vocab(t: &Transformer) -> u64 {
    t.vocab().div_ceil(64) * 64
}

/// Bytes per weight of the linears under `q`, from the tensors [`Quantization::linear_parts`]
/// lists for the typical layer's linears at their TP-split shapes (quantization state
/// included: GPTQ's `g_idx`, the int8 row scales, bitsandbytes' statistics).
fn linear_rate(
    t: &Transformer,
    q: Quantization,
    k: &Knobs,
    gpu: &Gpu,
    eng: Engine,
    moe_bank: bool,
    freed_leaves: bool,
) -> f64 {
    let h = t.hidden();
    let tp = k.tp.max(1);
    let (qw, kvw) = t.blocks.typical().attn_widths();
    let f = t.blocks.typical().intermediate.div_ceil(tp).max(1);
    let up = if t.blocks.typical().gated { 2 * f } else { f };
    let marlin = engine::marlin_runs(t, k, gpu, eng);
    let machete_groups = engine::machete_groups(t, k, gpu, eng);
    // (out, in, unsplit in): QKV and gate-up are column-parallel, the attention output and
    // the down projection row-parallel (their input split by TP).
    let shapes = [
        ((qw + 2 * kvw).div_ceil(tp).max(1), h, h),
        (h, qw.div_ceil(tp).max(1), qw),
        (up, h, h),
        (h, f, t.blocks.typical().intermediate),
    ];
    let elems: u64 = shapes.iter().map(|(o, i, _)| o * i).sum();
    let bytes: u64 = shapes
        .iter()
        .flat_map(|&(o, i, full)| {
            q.linear_parts(
                k.dtype_bytes,
                t.blocks.storage.quant,
                true,
                o,
                i,
                true,
                LinearLoad {
                    marlin,
                    full_inp: full,
                    moe_bank,
                    freed_leaves,
                    machete_groups,
                },
            )
        })
        .sum();
    bytes as f64 / elems.max(1) as f64
}

/// The unquantized layout's bytes on the most loaded GPU. The first stage holds the token
/// table, the embedding's other parameters (`Blocks::embedding_beyond_tables`: Gemma 4's
/// per-layer-input table and projection, which vLLM builds as a `VocabParallelEmbedding` and a
/// `ColumnParallelLinear`, split like the token table) and the towers ([`towers_per_gpu`]).
/// The positions of the rotary `cos_sin_cache` an engine builds for a config without scaling
/// of its length. vLLM's `MRotaryEmbedding` (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5)
/// builds it for `max_position_embeddings * 4` positions from 0.7.2 ("In Qwen2.5-VL, the
/// maximum index value is related to the duration of the input video":
/// `layers/rotary_embedding.py` at 0.7.2, 0.7.3, 0.8.0 to 0.8.5, `rotary_embedding/mrope.py` at
/// v0.10.1 to v0.22.0; 0.7.1 and before keep one), interleaved sections (Qwen3-VL's and
/// Qwen3.5's `mrope_interleaved`) included: `get_rope` builds `MRotaryEmbeddingInterleaved`,
/// which keeps one, only for `rope_type: openpangu` (0.18.0, 0.19.0). Plain rotary positions,
/// and SGLang's `MRotaryEmbedding`, keep `max_position_embeddings`.
pub(super) fn rotary_positions(t: &Transformer, k: &Knobs, engine: Engine) -> u64 {
    match t.blocks.mrope {
        Some(_) if engine == Engine::Vllm && engine.version_in_force(k) >= [0, 7, 2] => {
            t.max_positions() * 4
        }
        _ => t.max_positions(),
    }
}

pub(super) fn logical_weights_per_gpu(
    t: &Transformer,
    k: &Knobs,
    engine: Engine,
    gpu: &Gpu,
) -> u64 {
    let split = t.param_split();
    let d = k.dtype_bytes as f64;
    // vLLM on CUDA measures what is allocated after loading; SGLang and vLLM on ROCm the fall
    // in free device memory, which still holds what loading freed into PyTorch's cache.
    let freed = engine == Engine::Vllm && !engine::is_rocm(gpu);
    let q = linear_rate(t, k.quantization, k, gpu, engine, false, freed);
    let q_experts = linear_rate(t, k.quantization, k, gpu, engine, true, freed);
    let tp = k.tp as f64;
    let (attn_ways, expert_ways, rest_ways) = parallel_widths(k);
    // vLLM keeps MLA's down-projections whole on every TP rank ([`vllm_mla_whole_down`]).
    let whole_down = if engine == Engine::Vllm {
        vllm_mla_whole_down(t) as f64
    } else {
        0.0
    };
    let sharded = (split.per_layer - split.per_layer_replicated) as f64 - whole_down;
    let (qw, kvw) = t.blocks.typical().attn_widths();
    let attn = ((t.hidden() * (qw + 2 * kvw) + qw * t.hidden()) as f64).min(sharded);
    let experts = if t.blocks.typical().experts > 1 {
        ((t.blocks.typical().experts * split.per_expert) as f64).min(sharded - attn)
    } else {
        0.0
    };
    let rest = sharded - attn - experts;
    // The routed experts' share: a `1 / ways` part of each, or with EP the whole experts the
    // most loaded GPU holds (the same bytes where the GPUs divide the experts).
    let n_experts = t.blocks.typical().experts;
    let experts_here = if expert_split(k).1 && n_experts > 1 && n_experts % expert_split(k).0 != 0 {
        experts / n_experts as f64 * experts_on_most_loaded(n_experts, k) as f64
    } else {
        experts / expert_ways
    };
    // The roles the checkpoint's ignore list leaves in the dtype (the rest of a MoE layer is
    // its shared experts, of a dense one its MLP).
    let rate = |c: Component, q: f64| if ignored(t, k, c) { d } else { q };
    let rest_role = if t.blocks.typical().experts > 1 {
        Component::SharedExperts
    } else {
        Component::DenseMlp
    };
    let layer = attn / attn_ways * rate(Component::Mixer, q)
        + rest / rest_ways * rate(rest_role, q)
        + experts_here * rate(Component::RoutedExperts, q_experts)
        + split.per_layer_replicated as f64 * d
        + whole_down * rate(Component::Mixer, q);
    let layers_here = t.layers().div_ceil(k.pp) as f64;
    let vocab_padded = padded_vocab(t) as f64;
    let embed = (vocab_padded * t.hidden() as f64 + t.blocks.embedding_beyond_tables() as f64) / tp
        * d
        + position_tables(t) as f64 * d;
    // vLLM builds a wrapper's language model from `text_config`, whose tying can differ from
    // the wrapper's (`Head::vllm_tied`); `split.head` counts the head as the description ties it.
    let engine_tied = if engine == Engine::Vllm {
        t.blocks.head.vllm_tied()
    } else {
        t.blocks.head.tied
    };
    let head_matrix = if engine_tied {
        0.0
    } else {
        vocab_padded * t.hidden() as f64 / tp * d
    };
    let head_rest = split.head as f64
        - if t.blocks.head.tied {
            0.0
        } else {
            (t.vocab() * t.hidden()) as f64
        };
    let rotary = rotary_cache_bytes(t, k, engine, gpu) as f64;
    let embed = embed + towers_per_gpu(t, k.tp, engine) * d;
    let first = embed + layers_here * layer + rotary;
    let last = layers_here * layer + head_matrix + head_rest.max(0.0) * d + rotary;
    let one = if k.pp == 1 {
        embed + t.layers() as f64 * layer + head_matrix + head_rest.max(0.0) * d + rotary
    } else {
        first.max(last)
    };
    one.round() as u64
}

/// Parameters per decoder layer (the mean over the layers, as `ParamSplit::per_layer` counts
/// them) of the MLA down-projections vLLM builds whole on every tensor-parallel rank:
/// `kv_a_proj_with_mqa` (`hidden → kv_lora_rank + qk_rope_head_dim`) and, with a query rank,
/// `q_a_proj` (`hidden → q_lora_rank`). `DeepseekV2MLAAttention` and `DeepseekV2Attention` make
/// both `ReplicatedLinear`s, or with a query rank one `fused_qkv_a_proj`, a
/// `MergedColumnParallelLinear` with `disable_tp=True` (`DeepSeekV2FusedQkvAProjLinear` from
/// 0.19): `models/deepseek_v2.py` read at 0.10.0, 0.10.2, 0.11.2, 0.13.0, 0.16.0, 0.19.1 and
/// 0.23.0. Their biases are vectors, already counted whole; the up-projections (`q_b_proj` or
/// `q_proj`, `kv_b_proj`) and `o_proj` are column- and row-parallel. The description splits
/// every linear by TP (`vram_model::mech::Mla`'s tensors), as trainers may (Megatron's
/// `linear_kv_down_proj` is duplicated under Transformer Engine and column-parallel without
/// it), so the capacity model moves these here. SGLang's layout is not read and keeps the split.
pub(super) fn vllm_mla_whole_down(t: &Transformer) -> u64 {
    let h = t.hidden();
    let sum: u64 = t
        .blocks
        .iter()
        .filter_map(|b| b.mixer.as_mla())
        .map(|m| (m.q_lora_rank.unwrap_or(0) + m.kv_lora_rank + m.qk_rope_head_dim) * h)
        .sum();
    sum.div_ceil(t.layers().max(1))
}

/// FlashInfer MLA's and CUTLASS MLA's workspaces, which vLLM allocates when its attention
/// selector imports their modules, in bytes on every GPU. `flashinfer_mla.py` makes
/// `g_fi_workspace = torch.zeros(128 MiB, uint8, device="cuda")` and `cutlass_mla.py`
/// `g_sm100_workspace = SM100Workspace(128 MiB)` (a `torch.empty` on "cuda") at module level.
/// From 0.11.1 `CudaPlatform.get_valid_backends` walks the whole priority list
/// (`_get_backend_priorities`) and imports every backend class on it to validate it, not only
/// the one it picks: for MLA on compute capability 10.x the list holds both modules, on every
/// other CUDA board FlashInfer MLA's (after FlashAttention MLA and FlashMLA). The walk runs
/// when the first MLA layer is built (`MLAAttention.__init__` calls `get_attn_backend`), inside
/// the load that "Model loading took" measures, so torch's `max_memory_allocated` counts the
/// workspaces there (the worker's init snapshot before it shows no torch memory: DeepSeek-V2-Lite
/// at vLLM 0.19.0 on an H100 logs `torch_memory=0.0GiB`, then 29.43 GiB loaded for 29.28 GiB of
/// tensors). Read in `platforms/cuda.py` and `v1/attention/backends/mla/` at 0.11.1, 0.11.2,
/// 0.12.0, 0.13.0, 0.14.1, 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0, 0.22.1 and 0.23.0
/// (the same lists, loop and 128 MiB buffers). 0.11.0 and before import only the backend they
/// choose (FlashMLA on Hopper: no workspace; CUTLASS MLA's on Blackwell is not modelled). A
/// backend the user chooses is tried alone (`get_attn_backend_cls`), and vram's
/// `--attention-backend` names neither of these two, so none is imported then. `flashinfer`
/// must import (`trtllm_batch_decode_with_kv_cache_mla`), as vLLM's CUDA builds ship it.
pub(super) fn vllm_mla_backend_workspaces(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    const WORKSPACE: u64 = 128 << 20;
    let mla = t.blocks.iter().any(|b| b.mixer.as_mla().is_some());
    if !mla
        || k.vllm_v0
        || engine::is_rocm(gpu)
        || k.attention_backend.is_some()
        || Engine::Vllm.version_in_force(k) < [0, 11, 1]
    {
        return 0;
    }
    let modules = if gpu.sm_major == 10 { 2 } else { 1 };
    modules * WORKSPACE
}

/// Parameters of a multimodal model's towers and projectors on one GPU of a TP group, held on
/// the first stage in the model dtype. Where vLLM builds the towers as transformers' own
/// modules with replicated linears (`vram_model::hf::vllm_replicates_towers`: Gemma 4), each
/// GPU holds them whole. Otherwise the vision tower splits as [`vision_tower_per_gpu`] says, and
/// an audio tower (Gemma 4's) as SGLang's `Gemma4AudioEncoder` builds it
/// (`models/gemma4_audio.py`, read at sgl-project/sglang 0b142c7b: column/row-parallel
/// projections and a depthwise convolution sharded by channel;
/// `AudioTower::tp_split_params`), the rest whole.
pub(super) fn towers_per_gpu(t: &Transformer, tp: u64, engine: Engine) -> f64 {
    let b = &t.blocks;
    if engine == Engine::Vllm && vram_model::hf::vllm_replicates_towers(&t.model_type) {
        let whole =
            b.vision.as_ref().map_or(0, |v| v.params) + b.audio.as_ref().map_or(0, |a| a.params);
        return whole as f64;
    }
    let mlp_split =
        !(engine == Engine::Sglang && vram_model::hf::sglang_replicates_tower_mlp(&t.model_type));
    let vision = b
        .vision
        .as_ref()
        .map_or(0.0, |v| vision_tower_per_gpu(v, tp, mlp_split));
    let audio = b.audio.as_ref().map_or(0.0, |a| {
        let split = a.tp_split_params.min(a.params) as f64;
        split / tp.max(1) as f64 + (a.params as f64 - split)
    });
    vision + audio
}

/// Parameters of a vision tower and its projector on one GPU of a TP group. The engines build
/// the encoder layers' attention (q, k, v, output: `4 × width²`) and MLP (two or, gated, three
/// `width × intermediate` matrices) from their parallel linear layers, split `tp` ways; the rest
/// of the tower is replicated on every GPU: the patch and position embeddings, the norms and
/// the projector. vLLM 0.6.3's `mllama.py` is the case that shows it: `MllamaVisionEncoderLayer`
/// uses `QKVParallelLinear` / `RowParallelLinear` / `ColumnParallelLinear`, while
/// `MllamaPrecomputedPositionEmbedding`'s tile table (`(max_aspect_ratio_id + 1) × max_num_tiles
/// × (patches + 1) × width`, 73.8 M parameters) and `multi_modal_projector` (an `nn.Linear`) are
/// plain modules. Bias vectors are counted with the replicated rest, a small error.
/// A tower the engine does not split (`tp_split` false: Mistral-3's Pixtral, loaded from its
/// Mistral-format weights) is whole on every GPU.
/// Where `mlp_split` is false the layers' MLP is whole on every GPU instead
/// (`vram_model::hf::sglang_replicates_tower_mlp`: SGLang's MoonViT).
/// The projector's parallel linears ([`vram_model::mech::Vision::projector_split`]) split too:
/// vLLM's Qwen patch mergers (`Qwen3_VisionPatchMerger` in `qwen3_vl.py`, read at 0.11.0,
/// 0.12.0, 0.19.1 and 0.23.0; `Qwen2_5_VisionPatchMerger` and `Qwen2VisionPatchMerger` in
/// `qwen2_5_vl.py` / `qwen2_vl.py`, read at 0.10.0 to 0.23.0; Qwen3.5 builds
/// `Qwen3_VisionTransformer`, `qwen3_5.py` at 0.19.1), each `disable_tp` only under
/// `--mm-encoder-tp-mode data`, which vram does not model; and SGLang's, read in its wheels:
/// `Qwen2VisionPatchMerger` and `Qwen2_5_VisionPatchMerger` (Column/RowParallelLinear) at
/// 0.4.6.post5, 0.5.10 and 0.5.13, `Qwen3VLMoeVisionPatchMerger` for the merger and each
/// deepstack merger at 0.5.10 and 0.5.13 (Qwen3.5's `Qwen3_5ForConditionalGeneration`
/// inherits `Qwen3VLForConditionalGeneration` at 0.5.13), whole only under
/// `--mm-enable-dp-encoder` (off by default), which vram does not model; Qwen3-VL's split over
/// the attention TP group, the TP group without DP attention. The logs
/// agree: Qwen3-VL-30B-A3B loads 58.2294 GiB at TP 1 (vLLM 0.11 development build) and 29.3115
/// at TP 2 (0.12.0), 0.39 GiB more than half: what every GPU holds whole (the M-RoPE table
/// 0.25 GiB, the deepstack buffers 0.09, the router and the tower's embeddings, norms and
/// biases 0.03); with its four mergers (0.23 GiB) whole too it would be 0.60.
pub(super) fn vision_tower_per_gpu(v: &vram_model::mech::Vision, tp: u64, mlp_split: bool) -> f64 {
    if !v.tp_split {
        return v.params as f64;
    }
    let mlp = match (mlp_split, v.gated) {
        (false, _) => 0,
        (true, true) => 3,
        (true, false) => 2,
    };
    let layers = v.depth * (4 * v.hidden * v.hidden + mlp * v.hidden * v.intermediate);
    let split = (layers + v.projector_split).min(v.params) as f64;
    split / tp.max(1) as f64 + (v.params as f64 - split)
}

/// One GPU's weight tensors as the engines create them, in bytes: per layer the fused QKV, the
/// attention output, gate-up (or up) and down projections (MoE: each stacked over the experts),
/// then the embedding and an untied head, each split by TP. A quantized linear is the tensors
/// its format stores, each its own allocation ([`Quantization::linear_parts`], from
/// `vram_model::finetune::linear_tensors`: AWQ/GPTQ `qweight`, `qzeros`, `scales`;
/// bitsandbytes' packed weight and its statistics; INT8's row scales; MXFP4 the experts only,
/// the attention in the dtype as `Mxfp4Config.get_quant_method` leaves it). Without
/// `--quantization` a checkpoint's stored format is used. Every layer is taken as the typical
/// one (a hybrid's linear-attention layers too: an approximation). Norms, biases and scales of
/// one value are left out.
/// Returns `(bytes, count)`.
fn weight_tensors(
    t: &Transformer,
    k: &Knobs,
    gpu: &Gpu,
    engine: Engine,
    freed_leaves: bool,
) -> Vec<(u64, u64)> {
    let d = k.dtype_bytes;
    let tp = k.tp;
    let h = t.hidden();
    let (qw, kvw) = t.blocks.typical().attn_widths();
    let f = t.blocks.typical().intermediate.div_ceil(tp);
    let experts = t.blocks.typical().experts.max(1);
    let up = if t.blocks.typical().gated { 2 * f } else { f };
    let quant = quantization_in_force(t, k);
    let moe = experts > 1;
    let marlin = engine::marlin_runs(t, k, gpu, engine);
    let machete_groups = engine::machete_groups(t, k, gpu, engine);
    // (out, in, unsplit in, stack, expert bank): QKV and gate-up column-parallel, the
    // attention output and the down projection row-parallel.
    let full_f = t.blocks.typical().intermediate;
    let mlp = if moe {
        Component::RoutedExperts
    } else {
        Component::DenseMlp
    };
    let layer: Vec<u64> = [
        (
            (qw + 2 * kvw).div_ceil(tp),
            h,
            h,
            1,
            false,
            Component::Mixer,
        ),
        (h, qw.div_ceil(tp), qw, 1, false, Component::Mixer),
        (up, h, h, experts, moe, mlp),
        (h, f, full_f, experts, moe, mlp),
    ]
    .into_iter()
    .flat_map(|(out, inp, full_inp, stack, expert, role)| {
        let quant = if ignored(t, k, role) {
            Quantization::None
        } else {
            quant
        };
        quant
            .linear_parts(
                d,
                t.blocks.storage.quant,
                false,
                out,
                inp,
                expert,
                LinearLoad {
                    marlin,
                    full_inp,
                    moe_bank: expert,
                    freed_leaves,
                    machete_groups,
                },
            )
            .into_iter()
            .map(move |b| b * stack)
    })
    .collect();
    let layers = t.layers().div_ceil(k.pp);
    let mut out: Vec<(u64, u64)> = layer.into_iter().map(|b| (b, layers)).collect();
    let table = padded_vocab(t).div_ceil(tp) * h * d;
    let tied = if engine == Engine::Vllm {
        t.blocks.head.vllm_tied()
    } else {
        t.blocks.head.tied
    };
    out.push((table, if tied { 1 } else { 2 }));
    out
}

/// One GPU's weight tensors in the order the engines create them (the token table, a learned
/// position table, then layer by layer [`weight_tensors`]' linears, then an untied head), in
/// bytes: what the caching allocator sees while the model is built.
fn weight_tensor_sequence(t: &Transformer, k: &Knobs, gpu: &Gpu) -> Vec<u64> {
    let grouped = weight_tensors(t, k, gpu, Engine::Vllm, true);
    let (table, tables) = *grouped.last().expect("weight_tensors ends with the table");
    let layer: Vec<u64> = grouped[..grouped.len() - 1]
        .iter()
        .map(|&(b, _)| b)
        .collect();
    let layers = grouped.first().map_or(0, |&(_, n)| n);
    let mut seq = vec![table];
    let positions = position_tables(t) * k.dtype_bytes;
    if positions > 0 {
        seq.push(positions);
    }
    for _ in 0..layers {
        seq.extend_from_slice(&layer);
    }
    if tables > 1 {
        seq.push(table);
    }
    seq
}

/// Whether the checkpoint's quantization config leaves `c`'s linears in the dtype
/// (compressed-tensors' `ignore`, `vram_model::blocks::Storage::ignores`; vLLM 0.10.0's
/// `CompressedTensorsConfig.get_quant_method` returns `UnquantizedLinearMethod` for them):
/// only where the engine loads the checkpoint's own format.
fn ignored(t: &Transformer, k: &Knobs, c: Component) -> bool {
    let own = Knobs {
        quantization: Quantization::None,
        ..*k
    };
    t.blocks.storage.ignores(c) && quantization_in_force(t, k) == quantization_in_force(t, &own)
}

/// The quantization the engine loads the linears with: `--quantization`, else the checkpoint's
/// stored format (AWQ, GPTQ, compressed-tensors W4A16, bitsandbytes NF4/FP4, INT8, block FP8,
/// MXFP4), else none.
pub(super) fn quantization_in_force(t: &Transformer, k: &Knobs) -> Quantization {
    use vram_model::blocks::Quant;
    use vram_model::finetune::WeightFormat;
    if k.quantization != Quantization::None {
        return k.quantization;
    }
    match t.blocks.storage.quant {
        Quant::Mxfp4 => Quantization::Mxfp4,
        Quant::Fp8Block { .. } => Quantization::Fp8,
        Quant::Packed { format, .. } => match format {
            WeightFormat::Awq { .. } => Quantization::Awq,
            WeightFormat::Gptq { .. } => Quantization::Gptq,
            WeightFormat::Wna16 { .. } => Quantization::Wna16,
            WeightFormat::Nf4 | WeightFormat::Fp4 => Quantization::Bitsandbytes,
            WeightFormat::Int8 => Quantization::Int8,
            _ => Quantization::None,
        },
        _ => Quantization::None,
    }
}

/// What PyTorch's caching allocator reserves beyond the weights' own bytes on the most loaded
/// GPU (`c10/cuda/CUDACachingAllocator.cpp`, as `vram_alloc::policy` ports it: a request of
/// 10 MiB (`kMinLargeAlloc`) or more gets a segment rounded up to 2 MiB (`kRoundLarge`);
/// smaller ones share 2 MiB and 20 MiB segments, counted as packed), over [`weight_tensors`].
/// An engine that measures its weights by free device memory (SGLang; vLLM on ROCm) sees this.
pub fn allocator_rounding(t: &Transformer, k: &Knobs, gpu: &Gpu, engine: Engine) -> u64 {
    weight_tensors(t, k, gpu, engine, false)
        .into_iter()
        .filter(|&(b, _)| round_size(b) >= MIN_LARGE_ALLOC)
        .map(|(b, n)| (allocation_size(round_size(b)) - b) * n)
        .sum()
}

/// What `memory_allocated` counts beyond the weights' own bytes (vLLM's "Model loading took" on
/// CUDA, `DeviceMemoryProfiler`: `max_memory_allocated` after a peak reset, read at 0.6.6,
/// 0.8.5, 0.10.1 and 0.19.0). The allocator counts the block it hands out, and it hands out a
/// whole free block unless what is left after the rounded request is more than 1 MiB
/// (`should_split`: `remaining > kSmallSize` in the large pool). So a tensor of 10 MiB or more
/// whose size is within 1 MiB below a multiple of 2 MiB counts up to that multiple (Qwen2.5-7B's
/// 259 MiB gate-up counts 260), and tensors of 1 to 10 MiB, which share 20 MiB segments
/// (`kLargeBuffer`), count the tail of a segment they end with 1 MiB or less free (OPT-125m's
/// 3.375, 1.125 and 4.5 MiB linears: 5.7 MiB over twelve layers). Replayed through
/// `vram_alloc`'s port of the allocator ([`vram_alloc::CachingAllocator`], PyTorch policy) over
/// [`weight_tensor_sequence`], the tensors in the order the model builds them.
///
/// Where the quantization's kernels replace the loaded tensors after loading
/// (`process_weights_after_loading`: the Marlin repacks of AWQ/GPTQ, FP8's and INT8's
/// transposed copies, MXFP4's swizzled experts), the allocator's final state is not that
/// sequence's, and which tails survive is not replayed: each tensor counts its own rounding and a
/// large tensor its unsplit segment, as before.
pub fn allocated_rounding(t: &Transformer, k: &Knobs, gpu: &Gpu) -> u64 {
    if !matches!(
        quantization_in_force(t, k),
        Quantization::None | Quantization::Bitsandbytes
    ) {
        return weight_tensors(t, k, gpu, Engine::Vllm, true)
            .into_iter()
            .map(|(b, n)| {
                let r = round_size(b);
                let unsplit = if r >= MIN_LARGE_ALLOC && allocation_size(r) - r <= SMALL_SIZE {
                    allocation_size(r) - r
                } else {
                    0
                };
                (r - b + unsplit) * n
            })
            .sum();
    }
    let seq = weight_tensor_sequence(t, k, gpu);
    let total: u64 = seq.iter().sum();
    // Room for every tensor in its own rounded segment, so the replay never runs out.
    let room: u64 = seq.iter().map(|&b| allocation_size(round_size(b))).sum();
    let allocator = vram_alloc::CachingAllocator::new(
        vram_alloc::SimDevice::new(room + LARGE_BUFFER),
        vram_alloc::AllocatorConfig::new(vram_alloc::Policy::PyTorch),
    )
    .expect("the PyTorch policy's default settings are valid");
    for &b in seq.iter().filter(|&&b| b > 0) {
        allocator
            .malloc(b, 0)
            .expect("the simulated device holds every tensor in its own segment");
    }
    let allocated = allocator.memory_stats().allocated_bytes[0].current;
    (allocated.max(0) as u64).saturating_sub(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V2-Lite as its checkpoints' config.json gives it (`q_lora_rank: null`).
    fn deepseek_v2_lite() -> Transformer {
        let text =
            include_str!("../../../vram-cli/tests/data/serving/configs/deepseek-v2-lite.json");
        match vram_model::hf::parse_config(text, "deepseek-v2-lite").unwrap() {
            vram_model::arch::Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    }

    fn at(tp: u64, v: [u32; 3]) -> Knobs {
        Knobs {
            tp,
            engine_version: Some(v),
            ..Knobs::default()
        }
    }

    /// The per-GPU bytes vLLM 0.19 builds for DeepSeek-V2-Lite at TP 4, from the module shapes
    /// in `deepseek_v2.py` (0.19.1): `kv_a_proj_with_mqa` whole on every rank, the rest split.
    #[test]
    fn vllm_keeps_mla_down_projections_whole_on_every_rank() {
        let t = deepseek_v2_lite();
        let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
        assert_eq!(vllm_mla_whole_down(&t), (512 + 64) * 2048);
        let (h, tp) = (2048u64, 4u64);
        let attention = 16 * 192 * h / tp // q_proj
            + 576 * h // kv_a_proj_with_mqa, ReplicatedLinear
            + 512 // kv_a_layernorm
            + 512 * 16 * 256 / tp // kv_b_proj
            + 16 * 128 * h / tp // o_proj
            + 2 * h; // the layer's two norms
        let dense = 3 * h * 10944 / tp;
        let moe = 64 * 3 * h * (1408 / tp) + 3 * h * (2816 / tp) + 64 * h;
        let ends = 2 * (102_400 / tp) * h + h;
        let params = 27 * attention + dense + 26 * moe + ends;
        let rotary = 163_840 * 64 * 2; // DeepSeek's YaRN table, bf16 under Inductor
        let want = params * 2 + rotary;
        let got = weights_per_gpu(&t, &at(tp, [0, 19, 0]), h100, Engine::Vllm);
        // vram counts a layer as the layers' mean, rounded up: a few bytes over 27 layers.
        assert!(got >= want && got - want < 1024, "{got} vs {want}");
        // Split by TP too, the same model would be 27 x 576 x 2048 x 3/4 parameters lighter.
        let sglang = weights_per_gpu(&t, &at(tp, [0, 5, 3]), h100, Engine::Sglang);
        assert!(sglang < got);
    }

    /// FlashInfer MLA's module workspace (and CUTLASS MLA's on compute capability 10) is
    /// allocated when the selector imports every MLA backend on its list, from 0.11.1.
    #[test]
    fn vllm_mla_backend_workspaces_follow_the_selector() {
        let t = deepseek_v2_lite();
        let gpu = |n: &str| vram_model::gpu::lookup(n).unwrap();
        let mib = 1 << 20;
        let ws = |k: &Knobs, g: &str| vllm_mla_backend_workspaces(&t, k, gpu(g));
        assert_eq!(ws(&at(1, [0, 19, 0]), "h100-80g"), 128 * mib);
        assert_eq!(ws(&at(4, [0, 19, 0]), "h100-80g"), 128 * mib);
        assert_eq!(ws(&at(1, [0, 11, 1]), "a100-80g"), 128 * mib);
        assert_eq!(ws(&at(1, [0, 23, 0]), "b200"), 256 * mib);
        // 0.11.0 imports only the backend it picks (FlashMLA on Hopper).
        assert_eq!(ws(&at(1, [0, 11, 0]), "h100-80g"), 0);
        // A chosen backend is tried alone; ROCm has its own selector.
        let chosen = Knobs {
            attention_backend: Some(AttentionBackend::TritonAttn),
            ..at(1, [0, 19, 0])
        };
        assert_eq!(ws(&chosen, "h100-80g"), 0);
        assert_eq!(ws(&at(1, [0, 19, 0]), "mi300x"), 0);
        // No MLA layer, no MLA backend.
        let llama = match vram_model::catalog::lookup("llama-3-8b").unwrap() {
            vram_model::arch::Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        let h100 = gpu("h100-80g");
        assert_eq!(
            vllm_mla_backend_workspaces(&llama, &at(1, [0, 19, 0]), h100),
            0
        );
    }
}
