//! The profile run's activation peak: one decoder layer's live set and the dummy sampler.

use super::*;

/// Activation peak of a forward over `tokens` tokens on one GPU, in the model dtype: the largest
/// live set inside one decoder layer as the engine's modules hold their tensors.
///
/// Eager PyTorch (vLLM V0, V1 with `--enforce-eager`, SGLang): the decoder layer keeps the
/// residual and the post-attention-norm output it passes to the MLP, and an MLP written
/// `gate_up, _ = self.gate_up_proj(x); x = self.act_fn(gate_up); x, _ = self.down_proj(x)`
/// (vLLM's Qwen2MLP, Gemma's, Granite's, DeepSeek-V2's) keeps `gate_up` as a local until it
/// returns, so at `down_proj` the residual, the normed input, `gate_up` (2f), the activation (f)
/// and the output (h) are live: `tokens × (3h + 3f)` (what vLLM's caller adds, and `LlamaMLP`'s
/// rebinding, are in [`Held`]). A plain MLP rebinds its
/// one local: `tokens × (3h + 2f)`. Under `torch.compile` (vLLM V1's default) Inductor frees each
/// buffer after its last use: the larger of residual + normed input + `gate_up` and residual +
/// `gate_up` + activation, beside the running piece's inputs under vLLM's own piecewise
/// compilation ([`Held`]'s `piece_inputs`). MoE layers (`fused_moe`) allocate their
/// intermediate caches up front over chunks of at most `VLLM_FUSED_MOE_CHUNK_SIZE` = 32768
/// tokens (`M`): through vLLM 0.7 three of them, `[M, top_k, 2f]`, `[M·top_k, f]` and
/// `[M, top_k, h]`; from 0.8.0 the first and the third share one buffer, `[M·top_k·max(2f, h)]`
/// and `[M·top_k, f]` ([`Held`]'s `moe_cache13`). Attention (the fused QKV output, the attention
/// output and `o_proj`'s) is counted where it is larger. What the caller's frame adds on top
/// when the forward runs eagerly is [`Held`].
pub(super) fn forward_peak(t: &Transformer, tokens: u64, k: &Knobs, compiled: bool) -> u64 {
    forward_peak_held(t, tokens, k, compiled, Held::default())
}

/// Tensors an eager forward holds beyond one decoder layer's own live set (`forward_peak`), as
/// vLLM's model code holds them (read at v0.7.2, v0.8.5 V0 and V1, v0.10.1, v0.11.0):
/// - `input`: `LlamaModel.forward`'s loop `hidden_states, residual = layer(positions,
///   hidden_states, residual)` (`models/llama.py` 367 at v0.8.5, 385 at v0.10.1, 405 at v0.11.0)
///   keeps the layer's input bound while the layer runs, and from the second layer on
///   `input_layernorm` is `fused_add_rms_norm`, which writes the normed values into that input
///   in place (`layers/layernorm.py`): the buffer `qkv_proj` reads stays live through the MLP
///   (`tokens × h`). Under `torch.compile` Inductor frees it after its last use; not held.
/// - `reduce_out`: `RowParallelLinear.forward` (`layers/linear.py` 1286 at v0.8.5) all-reduces
///   `o_proj`'s and `down_proj`'s output at TP > 1 through `GroupCoordinator.all_reduce`, which
///   is out of place on every CUDA path: PyNccl's `all_reduce` makes `out_tensor =
///   torch.empty_like(in_tensor)` (`pynccl.py` 122 at v0.7.2 and v0.8.5, 123 at v0.10.1, 158 at
///   v0.11.0), custom all-reduce's `all_reduce` `out = torch.empty_like(inp)`
///   (`custom_all_reduce.py` 240 at v0.8.5, 248 at v0.11.0; only below its 8 MiB `max_size`, so
///   a profile run's tens of MiB go through PyNccl in any case), quick and symmetric-memory
///   all-reduce likewise (v0.11.0). While the collective runs both the projection's output and
///   the new one are live (`tokens × h` more). At TP 1 `all_reduce` returns its input.
///   Compiled, Inductor frees the projection's input and `gate_up` first, so the collective's
///   residual + output + result (`3h`) stays under the counted live set.
/// - `gate_up_freed`: `LlamaMLP.forward` rebinds its one local (`x, _ = self.gate_up_proj(x);
///   x = self.act_fn(x); x, _ = self.down_proj(x)`, `models/llama.py` 90-92 at v0.7.2, 91-93 at
///   v0.8.5, 93-95 at v0.10.1, 97-99 at v0.11.0), so `gate_up` is freed when the activation
///   returns and is not live at `down_proj`; Qwen2MLP (also Qwen3's), Gemma 2/3, Granite and
///   DeepSeek-V2's MLPs keep `gate_up` bound (`gate_up, _ = ...; x = self.act_fn(gate_up)`).
///   Then the MLP's peak is the larger of the activation's site (input, residual, normed input,
///   `gate_up`, activation) and `down_proj`'s (input, residual, normed input, activation, output
///   and its all-reduce result).
/// - `moe_cache13`: from 0.8.0 `fused_experts_impl` makes one `cache13 = torch.empty(M *
///   top_k_num * max(N, K))` and views `intermediate_cache1` (`[M, top_k, N]`, N = 2f the gated
///   up-projection) and `intermediate_cache3` (`[M, top_k, K]`, K = h) into it, since cache1 is
///   dead when the down-projection writes cache3 (`layers/fused_moe/fused_moe.py` 1353 at
///   v0.8.0, 1209 at v0.8.3, 1291 at v0.9.2, 1536 at v0.10.1, 1566 at v0.11.0, 1725 at v0.19.0;
///   0.7.2 and 0.7.3 allocate the three caches apart, 1172-1180 and 1176 on). The Marlin MoE
///   path for AWQ/GPTQ experts, read at v0.8.5, does the same (`fused_marlin_moe.py` 264-277,
///   `intermediate_cache13` of `M * topk * max(2 * N, K)`), unchunked. The live caches are
///   `M·top_k·(max(2f, h) + f)` instead of `M·top_k·(3f + h)`.
/// - `piece_inputs`: compiled by vLLM's own backend (`CompilationMode.VLLM_COMPILE`, V1's
///   default), the forward is split at the attention ops (`split_graph`, `torch.fx.passes.
///   split_module.split_module(..., keep_original_order=True)`) and the split module's
///   generated `forward` calls each compiled piece with its arguments as locals, dropping them
///   (`name = None`) only after the call returns; `PiecewiseBackend.__call__(*args)` holds the
///   same tuple while the piece runs (`compilation/backends.py` 596 at 0.7.3, 608 at 0.8.5;
///   `cuda_piecewise_backend.py` 86 at 0.10.1 and 0.11.0; `piecewise_backend.py` 182 at
///   0.14.1, 334 at 0.17.1, 355 at 0.19.1, 358 at 0.22.1 and 0.23.0). So Inductor's
///   `args.clear()` frees nothing, and the piece that runs `o_proj`, the MLP and the next
///   layer's QKV keeps its two inputs, the attention output (`tokens × q`) and the residual it
///   came in with (`tokens × h`), beside the new residual: with Inductor as the backend the
///   custom ops are off (`custom_ops` "none": `config.py` at 0.7.3 and 0.8.5, `config/vllm.py`
///   at 0.14.1, 0.17.1, 0.19.1, 0.22.1, 0.23.0) and `RMSNorm.forward_native` makes the residual
///   sum as a new tensor. The capture of a
///   CUDA graph runs the same pieces through the same frame, so a graph's live set holds them
///   too. Not under the other compilation modes (one whole graph, no split) nor eagerly.
/// - `moe_workspace`: the widths `(h, f)` the experts' caches are sized by where they live in
///   the persistent workspace ([`vllm_moe_workspace_widths`], which says for which paths), else
///   `None`. From 0.14.0 the unquantized experts run through the modular kernel
///   (`FusedMoEModularKernel` with `TritonExperts`: `unquantized_fused_moe_method.py`
///   `process_weights_after_loading` at 0.14.0, `oracle/unquantized.py`
///   `make_unquantized_moe_kernel` at 0.19.1; 0.13.0 still calls `fused_experts`), whose
///   caches are views into the worker's one persistent workspace (`v1/worker/workspace.py`
///   `WorkspaceManager.get_simultaneous`, which only ever grows it and never frees it), sized
///   as [`vllm_moe_workspace`] says. So the buffer the profile's forward makes stays allocated
///   through the dummy sampler, the warm-up and the CUDA-graph captures.
/// - `workspace_kept`: the workspace is already allocated at its largest (after the profile
///   run): a forward then adds nothing for the experts' caches.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Held {
    pub input: bool,
    pub reduce_out: bool,
    pub gate_up_freed: bool,
    pub moe_cache13: bool,
    pub piece_inputs: bool,
    pub moe_workspace: Option<(u64, u64)>,
    pub workspace_kept: bool,
}

impl Held {
    /// What vLLM's forward holds for this model at this version: eagerly, the layer input
    /// always, the all-reduce's new result from 0.7 (0.7.2 is the oldest read; 0.6 not read,
    /// left out), `gate_up` freed for the model types vLLM runs through `llama.py`'s `LlamaMLP`
    /// (`LlamaForCausalLM`, `MistralForCausalLM`; Phi-3 subclasses it); compiled, each piece's
    /// inputs under vLLM's own compilation mode from 0.7.3 (the oldest read).
    pub(super) fn vllm(t: &Transformer, k: &Knobs, gpu: &Gpu) -> Self {
        Held {
            input: true,
            reduce_out: Engine::Vllm.version_in_force(k) >= [0, 7, 0],
            gate_up_freed: vram_model::hf::vllm_mlp_frees_gate_up(&t.model_type),
            moe_cache13: Engine::Vllm.version_in_force(k) >= [0, 8, 0],
            piece_inputs: Engine::Vllm.version_in_force(k) >= [0, 7, 3]
                && super::engine::vllm_compiles(k),
            moe_workspace: vllm_moe_workspace_widths(t, k, gpu),
            workspace_kept: false,
        }
    }
}

/// Where the experts' caches live in vLLM's persistent workspace ([`Held`]'s `moe_workspace`),
/// the hidden and per-GPU intermediate widths its experts class sizes them by; `None` where
/// they do not. From 0.14.0, without expert or data parallelism, the experts run through
/// `FusedMoEModularKernel` (`FusedMoEKernel` from 0.17) with `MoEPrepareAndFinalizeNoEP`, whose
/// `_allocate_buffers` takes them from the worker's `WorkspaceManager`, for:
/// - unquantized experts (`TritonExperts`; read at 0.13.0, 0.14.0, 0.14.1, 0.17.1, 0.18.1,
///   0.19.1);
/// - `--quantization fp8` (online: per-tensor weight scales, dynamic activation scales) on CUDA
///   below compute capability 10: `Fp8MoEMethod.apply` calls its modular `self.kernel` for every
///   backend but FlashInfer TRT-LLM (read at 0.14.1; `self.moe_kernel` at 0.17.1 to 0.23.0), and
///   the backend is `TritonExperts` from compute capability 8.9, `MarlinExperts` below
///   (weight-only FP8): `select_fp8_moe_backend` at 0.14.1 takes FlashInfer only under
///   `VLLM_USE_FLASHINFER_MOE_FP8` and vLLM's CUTLASS only where `allow_vllm_cutlass`, which
///   `Fp8MoEMethod` leaves `False` (0.16.0 to 0.23.0 pass `allow_vllm_cutlass=False`); from 0.17
///   the priority list puts FlashInfer CUTLASS first, but `FlashInferExperts` takes FP8
///   per-tensor only with static activation scales (`_supports_quant_scheme` at 0.17.1, 0.19.1
///   and 0.22.1), and DeepGEMM block scales only. The Qwen3-30B-A3B-2507 log at 0.22.1 on an
///   H100 prints "Using TRITON Fp8 MoE backend". The workspace is in the activation dtype
///   (`workspace_dtype` is not overridden by either class), `MarlinExperts.workspace_shapes`
///   (`(M·top_k, max(f, h))` and `M·top_k·max(2f, h)`) the same bytes as Triton's. vram's
///   `Quantization::Fp8` does not say whether a checkpoint's activation scales are static: one
///   that has them takes FlashInfer CUTLASS on Hopper from 0.17 where FlashInfer is installed,
///   whose workspace is `[M, h]` alone (`FlashInferExperts.workspace_shapes` at 0.19.1), and
///   is priced here as Triton's;
/// - MXFP4 on Marlin (compute capability below 9, [`super::engine::vllm_mxfp4_layout`]) from
///   0.17: `Mxfp4MoEMethod` builds `FusedMoEKernel(…, MarlinExperts)` (read at 0.17.1, 0.18.1;
///   the oracle's `make_mxfp4_moe_kernel` at 0.19.1), where 0.14.1 and 0.16.0 call
///   `fused_marlin_moe` directly, whose caches are freed temporaries. Marlin's widths are the
///   padded ones its layout holds (hidden to 256, intermediate to 128,
///   `mxfp4_round_up_hidden_size_and_intermediate_size`).
///
/// Not here, the caches being temporaries or not read: MXFP4 on Hopper (`triton_kernel_moe_forward`
/// allocates its own, through 0.16 directly and from 0.17 as the monolithic
/// `OAITritonMxfp4ExpertsMonolithic`, read at 0.19.1), AWQ-Marlin and GPTQ-Marlin through 0.21
/// and 0.19 (`fused_marlin_moe` called directly, read at 0.14.1 to 0.21.0), block FP8 checkpoints
/// (DeepGEMM or FlashInfer CUTLASS by release, not sized), Blackwell's FlashInfer paths and ROCm.
fn vllm_moe_workspace_widths(t: &Transformer, k: &Knobs, gpu: &Gpu) -> Option<(u64, u64)> {
    use vram_model::blocks::Quant;
    let version = Engine::Vllm.version_in_force(k);
    if t.blocks.typical().experts <= 1 || version < [0, 14, 0] || k.expert_parallel || k.dp > 1 {
        return None;
    }
    let w = Widths::of(t, k.tp);
    let stored = t.blocks.storage.quant;
    match k.quantization {
        Quantization::None if stored == Quant::None => Some((w.h, w.f)),
        Quantization::Fp8
            if stored == Quant::None && !super::engine::is_rocm(gpu) && gpu.sm_major < 10 =>
        {
            Some((w.h, w.f))
        }
        Quantization::None | Quantization::Mxfp4
            if super::weights::quantization_in_force(t, k) == Quantization::Mxfp4
                && version >= [0, 17, 0]
                && super::engine::vllm_mxfp4_layout(k, gpu).0 == "Marlin" =>
        {
            let (_, im, hm) = super::engine::vllm_mxfp4_layout(k, gpu);
            Some((w.h.div_ceil(hm) * hm, w.f.div_ceil(im) * im))
        }
        _ => None,
    }
}

/// Bytes of vLLM's persistent MoE workspace after a forward over `tokens` tokens, where it
/// applies ([`Held`]'s `moe_workspace`, [`vllm_moe_workspace_widths`]), else 0.
/// `TritonExperts.workspace_shapes` (`fused_moe.py` at 0.14.1 and 0.19.1) asks for
/// `workspace13` of `[M, top_k, max(f, h)]` (the activation's output, and the fused output
/// `[M, h]` folded into it) and `workspace2` of `[M, top_k, max(2f, h)]` (the gated
/// up-projection, then the down-projection's per-expert output), in the model dtype, each
/// rounded up to 256 bytes (`get_simultaneous`). Through 0.17 `M` is a chunk of at most
/// `VLLM_FUSED_MOE_CHUNK_SIZE` = 16384 tokens (`envs.py` at 0.14.1 and 0.17.1; activation
/// chunking on by default), with the whole `[tokens, h]` output a third buffer when there is
/// more than one chunk (`modular_kernel.py` `_allocate_buffers` at 0.14.1); from 0.18 (read at
/// 0.18.1 and 0.19.1) there is no chunking and the output shares `workspace13`.
pub(super) fn vllm_moe_workspace(t: &Transformer, tokens: u64, k: &Knobs, gpu: &Gpu) -> u64 {
    vllm_moe_workspace_widths(t, k, gpu)
        .map_or(0, |widths| moe_workspace_bytes(t, tokens, k, widths))
}

/// [`vllm_moe_workspace`] for the experts class's widths `(h, f)`
/// ([`vllm_moe_workspace_widths`]).
fn moe_workspace_bytes(t: &Transformer, tokens: u64, k: &Knobs, (h, f): (u64, u64)) -> u64 {
    if tokens == 0 {
        return 0;
    }
    let w = Widths::of(t, k.tp);
    let topk = t.blocks.typical().top_k.max(1);
    let d = k.dtype_bytes;
    let n = if w.gated { 2 * f } else { f };
    let chunked = Engine::Vllm.version_in_force(k) < [0, 18, 0];
    let m = if chunked { tokens.min(16384) } else { tokens };
    let ws13 = m * topk * f.max(h) * d;
    let ws2 = m * topk * n.max(h) * d;
    let out = tokens * h * d;
    let round = |b: u64| b.div_ceil(256) * 256;
    if chunked && m < tokens {
        round(ws13) + round(ws2) + round(out)
    } else {
        round(ws13.max(out)) + round(ws2)
    }
}

/// Bytes per routed token-expert pair of `fused_moe`'s intermediate caches, in elements of the
/// model dtype: `2f + f + h` apart, `max(2f, h) + f` where cache1 and cache3 share one buffer
/// ([`Held`]'s `moe_cache13`).
pub(super) fn moe_cache_width(f: u64, h: u64, cache13: bool) -> u64 {
    if cache13 {
        (2 * f).max(h) + f
    } else {
        3 * f + h
    }
}

/// One decoder layer's widths on one GPU, in elements: the hidden size, the fused QKV and the
/// query projection's outputs and the MLP's intermediate (both split over TP).
struct Widths {
    h: u64,
    qkv: u64,
    q: u64,
    f: u64,
    gated: bool,
}

impl Widths {
    fn of(t: &Transformer, tp: u64) -> Self {
        let typical = t.blocks.typical();
        let (q, kv) = typical.attn_widths();
        Widths {
            h: t.hidden(),
            qkv: (q + 2 * kv).div_ceil(tp),
            q: q.div_ceil(tp),
            f: typical.intermediate.div_ceil(tp),
            gated: typical.gated,
        }
    }

    /// The eager dense MLP's live set at `down_proj` per token, before the caller's held input
    /// and the all-reduce's result: the residual, the normed input, the activation and the
    /// output, with `gate_up` (2f) where the MLP keeps it bound, or the plain MLP's up output.
    fn eager_down(&self, gate_up_freed: bool) -> u64 {
        let (h, f) = (self.h, self.f);
        match (self.gated, gate_up_freed) {
            (true, true) => 3 * h + f,
            (true, false) => 3 * h + 3 * f,
            (false, _) => 3 * h + 2 * f,
        }
    }
}

/// [`forward_peak`] with what an eager caller's frame holds ([`Held`]): the layer input at every
/// site after it is normed (+h at `o_proj` and `down_proj`), the all-reduce's result at each
/// reduced projection (+h there).
pub(super) fn forward_peak_held(
    t: &Transformer,
    tokens: u64,
    k: &Knobs,
    compiled: bool,
    held: Held,
) -> u64 {
    let d = k.dtype_bytes;
    let tp = k.tp;
    let w = Widths::of(t, tp);
    let Widths {
        h,
        qkv,
        q: q_tp,
        f,
        gated,
    } = w;
    // The caller's extra tensors exist only where the forward runs eagerly; compiled piecewise,
    // the running piece's inputs instead (attention output and incoming residual).
    let input = if held.input && !compiled { h } else { 0 };
    let reduced = if held.reduce_out && !compiled && tp > 1 {
        h
    } else {
        0
    };
    let pieces = piece_inputs(&w, compiled, held);
    // Residual, normed input (the layer's input buffer) and `o_proj`'s output, with its
    // all-reduce result.
    let attn = tokens * (3 * h + qkv + q_tp + reduced);
    // The experts' caches in bytes where they sit in vLLM's persistent workspace (nothing
    // where it is already held); 0 otherwise, where the caches are counted below.
    let workspace = match held.moe_workspace {
        Some(widths) if !held.workspace_kept => moe_workspace_bytes(t, tokens, k, widths),
        _ => 0,
    };
    let mlp = if t.blocks.typical().experts > 1 {
        // The experts' all-reduce runs after `fused_moe` has freed its caches, so the caches'
        // phase stays the peak; the held input is live through both. (A persistent workspace
        // is not freed; the all-reduce's residual, output and result are the 3h counted here.)
        let m = tokens.min(32768);
        let topk = t.blocks.typical().top_k.max(1);
        let caches = if held.moe_workspace.is_some() {
            0
        } else {
            m * topk * moe_cache_width(f, h, held.moe_cache13)
        };
        tokens * (3 * h + input + pieces) + caches
    } else if compiled {
        let up = if gated { 2 * f } else { f };
        tokens * (pieces + h + (h + up).max(up + f))
    } else {
        let down = w.eager_down(held.gate_up_freed) + input + reduced;
        if gated && held.gate_up_freed {
            // `gate_up` is live at the activation's site instead.
            tokens * (2 * h + input + 3 * f).max(down)
        } else {
            tokens * down
        }
    };
    (attn * d).max(mlp * d + workspace)
}

/// Elements per token a compiled piece's arguments keep live ([`Held`]'s `piece_inputs`): the
/// attention output (`q` split over TP) and the residual the piece came in with (`h`).
fn piece_inputs(w: &Widths, compiled: bool, held: Held) -> u64 {
    if compiled && held.piece_inputs {
        w.q + w.h
    } else {
        0
    }
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
/// `LinearBase` layers only). An eager caller's held layer input ([`Held`]) is live at the MLP's
/// two sites; the all-reduce comes after the weight is freed. Never below [`forward_peak_held`].
pub(super) fn dequant_forward_peak(
    t: &Transformer,
    tokens: u64,
    k: &Knobs,
    compiled: bool,
    held: Held,
) -> u64 {
    let d = k.dtype_bytes;
    let w = Widths::of(t, k.tp);
    let Widths {
        h,
        qkv,
        q: q_tp,
        f,
        gated,
    } = w;
    let up = if gated { 2 * f } else { f };
    let input = if held.input && !compiled { h } else { 0 };
    // `qkv_proj`, `gate_up_proj` and `down_proj` run in the piece that holds the previous
    // attention's output and residual; `o_proj` in the one after the attention, whose inputs
    // the eager count there already covers.
    let pieces = piece_inputs(&w, compiled, held);
    let mut sites = vec![
        tokens * (2 * h + qkv + pieces) + h * qkv,
        tokens * (3 * h + qkv + q_tp) + q_tp * h,
    ];
    if t.blocks.typical().experts <= 1 {
        let down_live = if compiled {
            tokens * (2 * h + f + pieces)
        } else {
            tokens * w.eager_down(held.gate_up_freed)
        };
        sites.push(tokens * (2 * h + up + input + pieces) + h * up);
        sites.push(down_live + tokens * input + f * h);
    }
    let peak = sites.into_iter().max().unwrap_or(0) * d;
    peak.max(forward_peak_held(t, tokens, k, compiled, held))
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
    let v = padded_vocab(t);
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

/// The profile run's logits under V1 before 0.8 (`GPUModelRunner.profile_run`, read at 0.7.2):
/// after the dummy forward over `tokens` it calls `compute_logits` on every row and runs no
/// sampler ("TODO(woosuk): Consider the memory usage of the sampler"). `LogitsProcessor` under
/// V1 all-gathers (`use_all_gather`): each GPU holds its `[tokens, vocab / tp]` part, the
/// gathered `[tp, tokens, vocab / tp]` and, from `movedim` and `reshape`, a contiguous
/// `[tokens, vocab]` copy; at TP 1 the part is the logits. Plus the hidden states.
pub(super) fn v1_07_logits_peak(t: &Transformer, tokens: u64, k: &Knobs) -> u64 {
    let v = padded_vocab(t);
    let d = k.dtype_bytes;
    let logits = if k.tp > 1 {
        v.div_ceil(k.tp) + 2 * v
    } else {
        v
    };
    tokens * (t.hidden() + logits) * d
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
