//! Which engine a vLLM version runs, and the rules that changed between versions, each read
//! from vLLM's source at the version named (the wheels' `vllm/` sources from PyPI).
//!
//! - **V0 or V1.** Up to 0.7 vLLM runs V0 unless `VLLM_USE_V1=1`. From 0.8 to 0.10 it runs V1
//!   but falls back to V0 (`vllm/engine/arg_utils.py` `EngineArgs._is_v1_supported_oracle`,
//!   read at 0.8.5 and 0.10.1) on a GPU of compute capability below 8.0 ("Compute Capability <
//!   8.0"), for a dtype other than bf16/fp16 (`V1_SUPPORTED_DTYPES`), and for an fp8 KV cache
//!   that FlashAttention cannot read (0.8.5: FA3 only, i.e. Hopper), or with `VLLM_USE_V1=0`.
//!   From 0.11 V0 is gone (the oracle has no compute-capability fallback at 0.11.0).
//! - **CUDA graphs in the budget.** V1 estimates the graphs' memory before sizing the KV cache
//!   and subtracts it when `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` is set: default 0 at
//!   0.19.0 (the estimate is only logged), default 1 from 0.20.0 (`vllm/envs.py`).
//! - **The sampler in the profile run.** Every V1 version profiles `_dummy_sampler_run` with
//!   `top_k = vocab − 1` and `top_p = 0.9` (`gpu_model_runner.py`). Before 0.17
//!   `apply_top_k_top_p` sorts the logits (`logits.sort`, the same live set as V0's sampler);
//!   from 0.17 batches of 8 rows or more go through `apply_top_k_top_p_triton`, which does not
//!   (`vllm/v1/sample/ops/topk_topp_sampler.py` at 0.15.0, 0.17.0 and 0.19.0). From 0.21
//!   `_dummy_sampler_run` samples a second time with a seeded generator, which FlashInfer's
//!   sampler cannot take, so the PyTorch path runs in every profile whatever the sampler in force
//!   (`gpu_model_runner.py` and `topk_topp_sampler.py` `forward_cuda` at 0.21.0).
//! - **The model runner.** 0.22 runs a dense `Qwen3ForCausalLM` checkpoint without a
//!   `quantization_config` on its V2 model runner (`vllm/v1/worker/gpu/`) by default; 0.23 adds
//!   Llama and Mistral, 0.24 three MoE architectures and drops the dense, unquantized condition;
//!   from 0.25 every model without experts that is not hybrid runs on it too, beside the MoE
//!   architectures listed (`config/vllm.py` `use_v2_model_runner`,
//!   `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`, read at 0.22.0, 0.22.1, 0.23.0, 0.24.0, 0.25.0,
//!   0.25.1 and 0.26.0: [`VLLM_V2_RUNNER_DEFAULTS`], [`VLLM_V2_RUNNER_LACKS`]), whose profile
//!   vram does not model.
//! - **The graph estimate on ROCm.** 0.20.0 to 0.25.1 profile the CUDA-graph estimate only on
//!   CUDA; 0.26.0 also on ROCm (`is_cuda_alike`), so it comes out of the budget there too.

use vram_model::arch::Transformer;
use vram_model::finetune::WeightFormat;
use vram_model::gpu::Gpu;

use super::weights::quantization_in_force;
use super::{Engine, Knobs, Quantization};

/// The vLLM engine these knobs run on this GPU, and the fallback's reason when V1 was asked
/// for but V0 runs.
pub(super) fn vllm_v1(k: &Knobs, gpu: &Gpu) -> (bool, Option<&'static str>) {
    let v = Engine::Vllm.version_in_force(k);
    if v < [0, 8, 0] {
        return (k.vllm_v1 && !k.vllm_v0, None);
    }
    if v >= [0, 11, 0] {
        return (true, None);
    }
    if k.vllm_v0 {
        return (false, None);
    }
    if gpu.sm_major < 8 {
        return (false, Some("Compute Capability < 8.0"));
    }
    if k.dtype_bytes > 2 {
        return (false, Some("--dtype float32"));
    }
    if k.kv_bytes == Some(1) && gpu.sm_major != 9 {
        return (false, Some("--kv-cache-dtype"));
    }
    (true, None)
}

/// Whether V1 subtracts its CUDA-graph estimate before sizing the KV cache (0.20 and later).
pub(super) fn vllm_graphs_in_budget(k: &Knobs, v1: bool, gpu: &Gpu) -> bool {
    // ROCm: "On ROCm, cudagraph_memory_estimate is always 0" (gpu_worker.py, 0.20.0; 0.21.0 to
    // 0.25.1 profile the graphs only where `is_cuda()`); 0.26.0 asks `is_cuda_alike()`, true on
    // ROCm as well (`determine_available_memory`, read against 0.25.1).
    let v = Engine::Vllm.version_in_force(k);
    v1 && v >= [0, 20, 0] && (!is_rocm(gpu) || v >= [0, 26, 0])
}

/// Whether vLLM refuses to start a hybrid model (Mamba2 / Gated DeltaNet state layers) whose
/// `max_num_seqs` exceeds the KV pool's blocks: `ValueError: max_num_seqs (N) exceeds available
/// Mamba cache blocks (M)`, raised by `CompilationConfig.resolve_cudagraph_mode_and_sizes`
/// (`config/compilation.py`), which `GPUModelRunner.initialize_kv_cache` calls once the pool is
/// sized (not in the profile run: `is_profiling`), before the graphs are captured. Read in the
/// sdists from PyPI: the check is there at 0.20.0, 0.21.0, 0.22.0, 0.22.1 and 0.23.0 (the
/// condition `cudagraph_mode.has_full_cudagraphs() and kv_cache_config.has_mamba_layers and
/// max_num_reqs > kv_cache_config.num_blocks`); 0.19.0 and 0.19.1 instead cap the capture sizes
/// to the blocks with a warning (`adjust_cudagraph_sizes_for_mamba_cache`) and start. Hybrid
/// models get `FULL_AND_PIECEWISE` (`MambaModelConfig`, `model_executor/models/config.py`, the
/// same at 0.19.0 to 0.22.1); the mode is the one [`vllm_cudagraph_mode`] resolves, so
/// `--enforce-eager` (`NONE`), a user's `PIECEWISE` or `NONE`, `-O0`/`-O1` left at their
/// levels' modes, and a piecewise mode without vLLM's compilation start. `hybrid` is
/// [`super::layers::is_hybrid`], `blocks` the pool's `num_blocks`.
pub(super) fn vllm_mamba_blocks_short(
    k: &Knobs,
    hybrid: bool,
    max_num_seqs: u64,
    blocks: u64,
) -> bool {
    Engine::Vllm.version_in_force(k) >= [0, 20, 0]
        && hybrid
        && vllm_cudagraph_mode(k, hybrid).has_full()
        && max_num_seqs > blocks
}

/// Whether vLLM compiles with its own piecewise backend (`CompilationMode.VLLM_COMPILE`), as
/// `VllmConfig.__post_init__` resolves the mode ([`vllm_compilation_mode`]).
pub fn vllm_compiles(k: &Knobs) -> bool {
    vllm_compilation_mode(k) == super::CompilationMode::VllmCompile
}

/// Whether `--enforce-eager` sets the compilation mode itself (`NONE`, "Enforce eager set,
/// disabling torch.compile and CUDAGraphs. This is equivalent to setting -cc.mode=none
/// -cc.cudagraph_mode=none", `VllmConfig.__post_init__` from 0.17.0), rather than only dropping
/// the optimization level to `-O0` ("Enforce eager set, overriding optimization level to -O0",
/// 0.12.0 to 0.16.x), which leaves a mode the user set as it is. Read in `config/vllm.py` of
/// every minor release's `.0` from 0.12.0 to 0.20.0.
pub(super) fn vllm_eager_sets_mode(k: &Knobs) -> bool {
    Engine::Vllm.version_in_force(k) >= [0, 17, 0]
}

/// The compilation mode `VllmConfig.__post_init__` resolves (`config/vllm.py`, read at every
/// minor release's `.0` from 0.12.0 to 0.20.0, and 0.21.0 and 0.22.0; the mode and the levels
/// exist from 0.12, and are refused before): under `--enforce-eager` `NONE` from 0.17, while
/// 0.12 to 0.16 only drop the level to `-O0`, so a mode the user set stays (and compiles, with
/// no graphs); otherwise the user's mode, else `VLLM_COMPILE` above `-O0` and `NONE` at `-O0`.
pub(super) fn vllm_compilation_mode(k: &Knobs) -> super::CompilationMode {
    use super::CompilationMode as C;
    let level = if k.enforce_eager {
        0
    } else {
        k.optimization_level.unwrap_or(2)
    };
    match k.compilation_mode {
        _ if k.enforce_eager && vllm_eager_sets_mode(k) => C::None,
        Some(m) => m,
        None if level > 0 => C::VllmCompile,
        None => C::None,
    }
}

/// Whether a CUDA-graph mode is turned off for want of vLLM's own compilation ("Cudagraph mode
/// ... is not compatible with compilation mode ... Overriding to NONE", `VllmConfig.__post_init__`):
/// at 0.12.0 every mode but `NONE` under any compilation mode but `VLLM_COMPILE`; from 0.13.0
/// only a mode with piecewise graphs (`requires_piecewise_compilation`), so `FULL` and
/// `FULL_DECODE_ONLY` stay. Read at every minor release's `.0` from 0.12.0 to 0.20.0.
pub(super) fn vllm_graphs_need_compile(k: &Knobs, m: super::CudagraphMode) -> bool {
    if Engine::Vllm.version_in_force(k) < [0, 13, 0] {
        m != super::CudagraphMode::None
    } else {
        m.has_piecewise()
    }
}

/// Whether V1 runs the model through torch.compile's Inductor, which frees each buffer after
/// its last use and, as the backend, turns vLLM's custom ops off (`custom_ops` "none" when the
/// backend is Inductor and the mode is not `NONE`, `VllmConfig.__post_init__` at 0.20.0-0.22.0):
/// every compilation mode but `NONE`.
pub(super) fn vllm_inductor(k: &Knobs) -> bool {
    vllm_compilation_mode(k) != super::CompilationMode::None
}

/// The CUDA-graph mode vLLM V1 (0.11 and later) runs, from the user's choice
/// ([`Knobs::cudagraph_mode`], [`Knobs::compilation_mode`], [`Knobs::optimization_level`]),
/// read at 0.20.0, 0.21.0 and 0.22.0 (`VllmConfig.__post_init__`, `config/vllm.py`), and at
/// 0.11.0, 0.12.0, 0.13.0, 0.15.0, 0.16.0, 0.17.0, 0.18.0 and 0.19.0 (the compilation knobs'
/// part at every `.0` from 0.12.0: they are refused at 0.11, which has neither), where the same
/// modes come out but where named ([`vllm_graph_mode_source`] names where each release decides
/// them):
/// - `--enforce-eager` sets `NONE` whatever was asked ("Enforce eager set, disabling
///   torch.compile and CUDAGraphs").
/// - Unset, the optimization level's default (`OPTIMIZATION_LEVEL_TO_CONFIG`, applied only to
///   fields the user left unset; from 0.12): `NONE` at `-O0`, `PIECEWISE` at `-O1`,
///   `FULL_AND_PIECEWISE` at `-O2` (the default level) and `-O3`. 0.11 has no levels: V1 under
///   its default piecewise compilation level takes `FULL_AND_PIECEWISE` ("default to full and
///   piecewise for most models", `config/__init__.py`; hybrid models the same through
///   `MambaModelConfig`, except `Lfm2ForCausalLM` and `MiniMaxText01ForCausalLM`, which vram
///   does not read).
/// - A mode with piecewise graphs (`PIECEWISE`, `FULL_AND_PIECEWISE`:
///   `requires_piecewise_compilation`; at 0.12 any mode but `NONE`: [`vllm_graphs_need_compile`])
///   under any compilation mode but `VLLM_COMPILE` ([`vllm_compiles`]: `-O0`, `-cc.mode=none`,
///   `TORCH_COMPILE_DISABLE=1`) becomes `NONE` ("Cudagraph mode ... is not compatible with
///   compilation mode ... Overriding to NONE").
/// - `FULL` on a hybrid model: its state layers' backends support full graphs for uniform
///   batches only (`AttentionCGSupport.UNIFORM_BATCH` in `v1/attention/backends/gdn_attn.py`,
///   and in `mamba_attn.py` from 0.17; `UNIFORM_SINGLE_TOKEN_DECODE` there at 0.11-0.16), so
///   vLLM downgrades a mixed-batch `FULL` (`resolve_cudagraph_mode_and_sizes` from 0.20, the
///   model runner before, the same test at every release read): to `FULL_AND_PIECEWISE` where
///   attention is among the splitting ops (under `VLLM_COMPILE`), else to `FULL_DECODE_ONLY`
///   (`set_splitting_ops_for_v1` leaves none under other modes). On other models the attention
///   backend's own support decides, which is not modelled: `FULL` is taken as asked.
pub(super) fn vllm_cudagraph_mode(k: &Knobs, hybrid: bool) -> super::CudagraphMode {
    use super::CudagraphMode as M;
    if k.enforce_eager {
        return M::None;
    }
    let compiles = vllm_compiles(k);
    let level_default = match k.optimization_level.unwrap_or(2) {
        0 => M::None,
        1 => M::Piecewise,
        _ => M::FullAndPiecewise,
    };
    match k.cudagraph_mode.unwrap_or(level_default) {
        m if vllm_graphs_need_compile(k, m) && !compiles => M::None,
        M::Full if hybrid && compiles => M::FullAndPiecewise,
        M::Full if hybrid => M::FullDecodeOnly,
        m => m,
    }
}

/// Where the vLLM release in force resolves the CUDA-graph mode, for the lines that say why a
/// mode came out ([`vllm_cudagraph_mode`]): the releases read, the function that downgrades a
/// hybrid model's `FULL`, and its state layers' full-graph support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GraphModeSource {
    /// The releases whose source the rules were read in.
    pub read: &'static str,
    /// What sets an unset mode.
    pub default: &'static str,
    /// The function that downgrades a hybrid model's `FULL`.
    pub downgrade: &'static str,
    /// The file it is in.
    pub file: &'static str,
    /// The state layers' `AttentionCGSupport`.
    pub state_support: &'static str,
}

/// [`GraphModeSource`] for the vLLM release in force (0.11 and later).
pub(super) fn vllm_graph_mode_source(k: &Knobs) -> GraphModeSource {
    let v = Engine::Vllm.version_in_force(k);
    let state_support = if v < [0, 17, 0] {
        "mamba_attn.py UNIFORM_SINGLE_TOKEN_DECODE, gdn_attn.py UNIFORM_BATCH"
    } else {
        "mamba_attn.py, gdn_attn.py: UNIFORM_BATCH"
    };
    if v >= [0, 20, 0] {
        GraphModeSource {
            read: "0.20.0-0.22.0",
            default: "the default at -O2",
            downgrade: "resolve_cudagraph_mode_and_sizes",
            file: "config/compilation.py",
            state_support,
        }
    } else if v >= [0, 12, 0] {
        GraphModeSource {
            read: "read at 0.12.0, 0.13.0, 0.15.0-0.19.0",
            default: "the default at -O2",
            downgrade: "GPUModelRunner._check_and_update_cudagraph_mode",
            file: "v1/worker/gpu_model_runner.py",
            state_support,
        }
    } else {
        GraphModeSource {
            read: "read at 0.11.0",
            default: "V1's default under its piecewise compilation level",
            downgrade: "GPUModelRunner.initialize_cudagraph_capture",
            file: "v1/worker/gpu_model_runner.py",
            state_support,
        }
    }
}

/// Whether vLLM's budget holds the CUDA context.
///
/// - V1 before 0.9: `determine_available_memory` takes no baseline (`v1/worker/gpu_worker.py`
///   at 0.7.2 and 0.8.5: the device's whole use less PyTorch's allocated bytes after the profile
///   run); 0.9.2 and later subtract the snapshot taken once the context exists
///   (`memory_profiling(self.init_snapshot, ...)`).
/// - V0 (`worker/worker.py` `determine_num_available_blocks`, read at 0.5.5, 0.6.0, 0.6.3.post1,
///   0.6.4, 0.6.5 and 0.6.6.post1): only 0.6.4 counts it. Its peak is PyTorch's allocated peak
///   plus `non_torch_allocations`, the device's whole use less PyTorch's allocated bytes after
///   `empty_cache()`, so the context (and any other process's memory) is inside. 0.5.5 to
///   0.6.3.post1 take `init_gpu_memory - free` after the profile, and 0.6.5 and 0.6.6.post1 pass
///   `total - init_gpu_memory` to `memory_profiling` as the baseline: `init_device` reads
///   `init_gpu_memory` once the context exists and before the distributed environment, so the
///   context sits beside the budget and the communicators inside it.
pub(super) fn vllm_context_in_budget(k: &Knobs, v1: bool) -> bool {
    let v = Engine::Vllm.version_in_force(k);
    if v1 {
        v < [0, 9, 0]
    } else {
        ([0, 6, 4]..[0, 6, 5]).contains(&v)
    }
}

/// An AMD Instinct GPU (ROCm).
pub(super) fn is_rocm(gpu: &Gpu) -> bool {
    gpu.is_rocm()
}

/// Whether the profile run's sampler sorts the logits for top-k/top-p: V0 always, V1 before
/// 0.17 (afterwards a Triton kernel filters them in place for batches of 8 rows or more).
pub(super) fn vllm_sampler_sorts(k: &Knobs, v1: bool, rows: u64) -> bool {
    if v1 && k.flashinfer_sampler && vllm_flashinfer_profiled(k) {
        // FlashInfer's `top_k_top_p_sampling_from_logits` masks and samples without a sort
        // (`flashinfer_sample`, read at 0.9.2 and 0.10.1).
        return false;
    }
    !v1 || Engine::Vllm.version_in_force(k) < [0, 17, 0] || rows < 8
}

/// Whether `--flashinfer-sampler` decides the profile's sampler: before 0.21 (from 0.21 the
/// profile's second, seeded sampler call runs the PyTorch path as well).
pub(super) fn vllm_flashinfer_profiled(k: &Knobs) -> bool {
    Engine::Vllm.version_in_force(k) < [0, 21, 0]
}

/// vLLM's default `gpu_memory_utilization` (`CacheConfig`) from each release on: 0.9 to 0.19.1,
/// 0.92 from 0.20.0 (`vllm/config/cache.py`, the same 0.92 through 0.33.0). The capacity model
/// and the doctor's reading of a log that prints no utilization both take it from here.
pub const VLLM_DEFAULT_UTILIZATION: &[([u32; 3], f64)] = &[([0, 0, 0], 0.9), ([0, 20, 0], 0.92)];

/// [`VLLM_DEFAULT_UTILIZATION`] in force at `version`.
pub fn vllm_default_utilization(version: [u32; 3]) -> f64 {
    VLLM_DEFAULT_UTILIZATION
        .iter()
        .rev()
        .find(|(from, _)| version >= *from)
        .map_or(0.9, |&(_, u)| u)
}

/// vLLM's `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` by release series: the architectures whose
/// checkpoints run on the V2 model runner (`vllm/v1/worker/gpu/`) unless the start says
/// otherwise. Read from `vllm/config/vllm.py` in the sdists: 0.22.0 and 0.22.1 (line 69, the two
/// files identical) `{"Qwen3ForCausalLM"}`; 0.23.0 (line 69) adds `LlamaForCausalLM` and
/// `MistralForCausalLM`; 0.24.0 (line 68) adds `DeepseekV2ForCausalLM`, `Qwen2MoeForCausalLM`
/// and `GraniteMoeForCausalLM`. 0.25.0 (line 68; 0.25.1 the same) keeps only the three MoE
/// architectures, since from 0.25 `_is_default_v2_model_runner_model` sends every model
/// without experts to the V2 runner anyway ([`vllm_v2_runner_of`]); 0.26.0 (line 69) adds
/// `InklingForCausalLM`, `InklingForConditionalGeneration` and `LongcatFlashNgramForCausalLM`.
/// 0.21.0 has no such list: its `VLLM_USE_V2_MODEL_RUNNER` defaults to 0 (`vllm/envs.py`), so
/// every model runs on V1. From 0.27 vLLM is refused whole ([`super::Engine::unmodelled`]).
pub const VLLM_V2_RUNNER_DEFAULTS: &[([u32; 2], &[&str])] = &[
    ([0, 22], &["Qwen3ForCausalLM"]),
    (
        [0, 23],
        &["LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"],
    ),
    (
        [0, 24],
        &[
            "Qwen3ForCausalLM",
            "DeepseekV2ForCausalLM",
            "Qwen2MoeForCausalLM",
            "GraniteMoeForCausalLM",
            "LlamaForCausalLM",
            "MistralForCausalLM",
        ],
    ),
    (
        [0, 25],
        &[
            "DeepseekV2ForCausalLM",
            "Qwen2MoeForCausalLM",
            "GraniteMoeForCausalLM",
        ],
    ),
    (
        [0, 26],
        &[
            "DeepseekV2ForCausalLM",
            "GraniteMoeForCausalLM",
            "InklingForCausalLM",
            "InklingForConditionalGeneration",
            "LongcatFlashNgramForCausalLM",
            "Qwen2MoeForCausalLM",
        ],
    ),
];

/// What sends a model of [`VLLM_V2_RUNNER_DEFAULTS`] back to the V1 runner, by release series,
/// as the `vllm serve` flags that set it: `VllmConfig._get_v2_model_runner_unsupported_features`
/// (`config/vllm.py`), in its order, read at 0.22.0, 0.22.1, 0.23.0 and 0.24.0. 0.23 drops the
/// reasoning config (budget enforcement) and sends a hybrid/mamba model back only with
/// `--mamba-cache-mode align` (default `none`, `config/cache.py`); 0.24 adds pipeline
/// parallelism under the external launcher, dynamic speculative decoding and elastic expert
/// parallelism, and takes `dflash` drafting. 0.25.0 (0.25.1 the same) drops the hybrid/mamba
/// align case (a hybrid model is no default of the V2 runner from 0.25) and dynamic
/// speculative decoding, and takes `dspark` drafting; 0.26.0 keeps prefill context parallelism
/// on V2 for an MLA model and drops the logprobs modes. Each is off by default, and vram has no input for
/// them; `--vllm-use-v2-model-runner 0` stands for any of them. Sequence parallelism is not on
/// by default at any `-O` level: `IS_DENSE` is `False`, so `pass_config.enable_sp` is off unless
/// asked for. Beside these the V1 runner runs without Triton (`HAS_TRITON`), which the CUDA and
/// ROCm wheels ship.
pub const VLLM_V2_RUNNER_LACKS: &[([u32; 2], &[&str])] = &[
    (
        [0, 22],
        &[
            "--prefill-context-parallel-size above 1",
            "--compilation-config with mode 1 (STOCK_TORCH_COMPILE)",
            "--compilation-config with pass_config.enable_sp (sequence parallelism) at TP above 1",
            "--speculative-config with a method other than eagle, eagle3 or mtp, or with parallel drafting, or eagle3 with PP",
            "--reasoning-parser or --reasoning-config",
            "--enable-dbo",
            "--enable-return-routed-experts",
            "--logits-processors or a vllm.logits_processors plug-in",
            "--enable-prompt-embeds",
            "--logprobs-mode raw_logits or processed_logits",
            "--kv-sharing-fast-prefill",
            "--ec-transfer-config",
        ],
    ),
    (
        [0, 23],
        &[
            "--mamba-cache-mode align for a hybrid/mamba model",
            "--prefill-context-parallel-size above 1",
            "--compilation-config with mode 1 (STOCK_TORCH_COMPILE)",
            "--compilation-config with pass_config.enable_sp (sequence parallelism) at TP above 1",
            "--speculative-config with a method other than eagle, eagle3 or mtp, or with parallel drafting, or eagle3 with PP",
            "--enable-dbo",
            "--enable-return-routed-experts",
            "--logits-processors or a vllm.logits_processors plug-in",
            "--enable-prompt-embeds",
            "--logprobs-mode raw_logits or processed_logits",
            "--kv-sharing-fast-prefill",
            "--ec-transfer-config",
        ],
    ),
    (
        [0, 24],
        &[
            "--mamba-cache-mode align for a hybrid/mamba model",
            "--prefill-context-parallel-size above 1",
            "--compilation-config with mode 1 (STOCK_TORCH_COMPILE)",
            "--compilation-config with pass_config.enable_sp (sequence parallelism) at TP above 1",
            "--distributed-executor-backend external_launcher with PP above 1",
            "--speculative-config with a method other than eagle, eagle3, mtp or dflash, dynamic speculative decoding, parallel drafting other than dflash's, or eagle3 with PP",
            "--enable-dbo",
            "--enable-elastic-ep",
            "--enable-return-routed-experts",
            "--logits-processors or a vllm.logits_processors plug-in",
            "--enable-prompt-embeds",
            "--logprobs-mode raw_logits or processed_logits",
            "--kv-sharing-fast-prefill",
            "--ec-transfer-config",
        ],
    ),
    (
        [0, 25],
        &[
            "--prefill-context-parallel-size above 1",
            "--compilation-config with mode 1 (STOCK_TORCH_COMPILE)",
            "--compilation-config with pass_config.enable_sp (sequence parallelism) at TP above 1",
            "--distributed-executor-backend external_launcher with PP above 1",
            "--speculative-config with ngram/ngram_gpu or a method other than eagle, eagle3, mtp, dflash or dspark, parallel drafting other than dflash's or dspark's, or eagle3 with PP",
            "--enable-dbo",
            "--enable-elastic-ep",
            "--enable-return-routed-experts",
            "--logits-processors or a vllm.logits_processors plug-in",
            "--enable-prompt-embeds",
            "--logprobs-mode raw_logits or processed_logits",
            "--kv-sharing-fast-prefill",
            "--ec-transfer-config",
        ],
    ),
    (
        [0, 26],
        &[
            "--prefill-context-parallel-size above 1 for a model without MLA",
            "--compilation-config with mode 1 (STOCK_TORCH_COMPILE)",
            "--compilation-config with pass_config.enable_sp (sequence parallelism) at TP above 1",
            "--distributed-executor-backend external_launcher with PP above 1",
            "--speculative-config with ngram/ngram_gpu or a method other than eagle, eagle3, mtp, dflash or dspark, parallel drafting other than dflash's or dspark's, or eagle3 with PP",
            "--enable-dbo",
            "--enable-elastic-ep",
            "--enable-return-routed-experts",
            "--logits-processors or a vllm.logits_processors plug-in",
            "--enable-prompt-embeds",
            "--kv-sharing-fast-prefill",
            "--ec-transfer-config",
        ],
    ),
];

/// vLLM's refusal when the V2 model runner would run, whose memory profile vram does not
/// model. `--vllm-use-v2-model-runner` ([`Knobs::vllm_v2_runner`]) decides when given, as
/// `VLLM_USE_V2_MODEL_RUNNER` does; else `VllmConfig.use_v2_model_runner` (`config/vllm.py`,
/// read at 0.22.0, 0.22.1, 0.23.0, 0.24.0, 0.25.0, 0.25.1 and 0.26.0): the runner type is `generate` (what `vram
/// capacity` serves) and an architecture of the config is in [`VLLM_V2_RUNNER_DEFAULTS`] for the
/// series in force. At 0.22 and 0.23 `_is_default_v2_model_runner_model` also asks that
/// `ModelConfig.is_moe` be false (no experts) and `is_quantized` false — the checkpoint's config
/// has no `quantization_config` (`getattr(hf_config, "quantization_config")`; an in-flight
/// `--quantization fp8` over a bf16 checkpoint does not count); 0.24 drops both conditions;
/// from 0.25 any model without experts runs on V2 as well, and a hybrid or attention-free one
/// never does by default ([`vllm_v2_by_default`]), so at 0.25 and 0.26 vram models the V1
/// runner's starts of MoE models outside the list, hybrid models and starts that say
/// `--vllm-use-v2-model-runner 0`. At
/// 0.22 a model with recurrent state (`has_inner_state`, "hybrid/mamba models") goes back to V1;
/// from 0.23 only under `--mamba-cache-mode align`, which vram does not take (default `none`).
/// The features of [`VLLM_V2_RUNNER_LACKS`] are taken to be off, as they are by default. A
/// config that names no architecture is refused at those releases, since the runner cannot be
/// told ([`vllm_v2_runner_of`] reads its `model_type` first).
pub fn vllm_v2_runner(archs: &[String], t: &Transformer, k: &Knobs) -> Option<String> {
    vllm_v2_runner_of(archs, None, t, k)
}

/// [`vllm_v2_runner`] for a config that may name no `architectures` (the catalog's short
/// configs): its `model_type` then stands for transformers' causal-LM class of that type
/// (`vram_model::hf::causal_lm_class`; a type it does not name is no default of the V2 runner). Only with
/// neither is the start refused as one whose runner cannot be told.
pub fn vllm_v2_runner_of(
    archs: &[String],
    model_type: Option<&str>,
    t: &Transformer,
    k: &Knobs,
) -> Option<String> {
    if archs.is_empty() {
        if let Some(mt) = model_type {
            if let Some(class) = vram_model::hf::causal_lm_class(mt) {
                return vllm_v2_runner_of(&[class.to_string()], None, t, k);
            }
        }
    }
    use vram_model::blocks::Quant;
    let version = super::version_label(Engine::Vllm, k);
    match k.vllm_v2_runner {
        Some(false) => return None,
        Some(true) => {
            return Some(format!(
                "--vllm-use-v2-model-runner 1 (VLLM_USE_V2_MODEL_RUNNER=1): vLLM {version} would run its V2 model runner, whose memory profile vram does not model; vram models the V1 runner (--vllm-use-v2-model-runner 0)"
            ))
        }
        None => {}
    }
    let v = Engine::Vllm.version_in_force(k);
    let in_series = |table: &'static [([u32; 2], &'static [&'static str])]| {
        table
            .iter()
            .find(|(series, _)| v[..2] == series[..])
            .map(|&(_, names)| names)
    };
    let defaults = in_series(VLLM_V2_RUNNER_DEFAULTS)?;
    let lacks = in_series(VLLM_V2_RUNNER_LACKS).unwrap_or(&[]);
    let moe = t.blocks.kinds.iter().any(|kind| kind.ffn.moe().is_some());
    let quantized = !matches!(t.blocks.storage.quant, Quant::None);
    let hybrid = super::layers::is_hybrid(t);
    // From 0.25 a generating model without experts that is neither hybrid nor attention-free
    // runs on V2 whatever its architecture (`... or not model_config.is_moe`).
    let any_dense = v >= [0, 25, 0];
    if archs.is_empty() {
        // No architecture, and a model_type `hf::causal_lm_class` does not name, or none: from 0.25
        // the experts decide for a model that is not hybrid; before, a known type is no listed
        // class (V1), and a config with neither cannot be told.
        if any_dense && !moe && !hybrid {
            return Some(v2_refusal(
                &version,
                "this model",
                "a generating model without experts that is not hybrid, whatever its architecture",
                lacks,
                "0.24",
            ));
        }
        if model_type.is_some() || (any_dense && hybrid) {
            return None;
        }
        return Some(format!(
            "vLLM {version} runs {} on its V2 model runner by default (config/vllm.py use_v2_model_runner), whose memory profile vram does not model, and this model's config names neither its architectures nor its model_type, so vram cannot tell which runner starts it: give the checkpoint's config.json, or --vllm-use-v2-model-runner 0 where the V1 runner runs it",
            defaults.join(", ")
        ));
    }
    let series = [v[0], v[1]];
    let arch = archs
        .iter()
        .find(|a| vllm_v2_by_default(series, defaults, a, moe, quantized, hybrid))?;
    // The newest release series whose default does not put this model on V2.
    let v1_release = VLLM_V2_RUNNER_DEFAULTS
        .iter()
        .find(|(s, names)| vllm_v2_by_default(*s, names, arch, moe, quantized, hybrid))
        .map_or_else(String::new, |(s, _)| format!("0.{}", s[1] - 1));
    let which = if any_dense && !defaults.contains(&arch.as_str()) {
        String::from(
            "a generating model without experts that is not hybrid, whatever its architecture",
        )
    } else if v < [0, 24, 0] {
        format!("a dense {arch} checkpoint without a quantization_config")
    } else {
        format!("a {arch} checkpoint, MoE and quantized ones included")
    };
    Some(v2_refusal(&version, arch, &which, lacks, &v1_release))
}

/// Whether vLLM's `_is_default_v2_model_runner_model` (`config/vllm.py`) is true for an
/// architecture at a release series whose `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` is `names`:
/// 0.22 asks for a listed, dense, unquantized model without recurrent state (`has_inner_state`
/// sends it back); 0.23 the same but lets a hybrid model through (only `--mamba-cache-mode
/// align` sends it back); 0.24 any listed model; from 0.25 any model that is neither hybrid nor
/// attention-free (`is_hybrid`, `is_attention_free`; vram's [`super::layers::is_hybrid`] holds
/// both) and is listed or has no experts (`or not model_config.is_moe`; read at 0.25.0, 0.25.1
/// and 0.26.0).
fn vllm_v2_by_default(
    series: [u32; 2],
    names: &[&str],
    arch: &str,
    moe: bool,
    quantized: bool,
    hybrid: bool,
) -> bool {
    let listed = names.contains(&arch);
    match series {
        [0, 22] => listed && !moe && !quantized && !hybrid,
        [0, 23] => listed && !moe && !quantized,
        [0, 24] => listed,
        _ => !hybrid && (listed || !moe),
    }
}

/// The one-line refusal of a start the V2 model runner would run.
fn v2_refusal(version: &str, arch: &str, which: &str, lacks: &[&str], v1_release: &str) -> String {
    format!(
        "vLLM {version} runs {arch} on its V2 model runner by default (config/vllm.py use_v2_model_runner: {which}), whose memory profile vram does not model; where the start sets VLLM_USE_V2_MODEL_RUNNER=0 or one of what that runner lacks ({}), vLLM runs its V1 runner: say so with --vllm-use-v2-model-runner 0; --engine-version {v1_release} is the newest that runs it on V1 by default",
        lacks.join("; ")
    )
}

/// vLLM's MXFP4 MoE kernel for this GPU and version, and the rounding its weight layout needs
/// (`Mxfp4MoEMethod.create_weights` / `mxfp4_round_up_hidden_size_and_intermediate_size`):
/// Marlin (compute capability below 9, or Hopper before 0.12 — "Your GPU does not have native
/// support for FP4 computation ... Marlin kernel") pads the per-GPU intermediate size to 128 and
/// the hidden size to 256; Triton (Hopper from 0.12) pads the intermediate size to 64;
/// FlashInfer on Blackwell pads both to 256; ROCm pads the intermediate size to 128 (0.10) or
/// both to 256 (0.19).
///
/// Hopper takes Triton only where `has_triton_kernels()` and torch 2.8 or newer
/// (`get_mxfp4_backend`, read at 0.11.0 and 0.11.2). Before 0.12 that is the separate, optional
/// `triton_kernels` package, which vLLM's `requirements/cuda.txt` does not list and its
/// Dockerfile does not install (read at 0.11.0 and 0.11.2), so a default install runs Marlin —
/// as vllm-project/recipes' GPT-OSS page of late 2025 says ("works on Hopper devices by default,
/// using the FlashAttention3 backend and Marlin MXFP4 MoE") and Kaggle's 0.11.2 logs show
/// ("Using Marlin backend" on an H100, serving round 11). From 0.12.0 the wheel builds its own
/// copy (`cmake/external_projects/triton_kernels.cmake`, and `has_triton_kernels` also finds
/// `vllm.third_party.triton_kernels`; read at 0.12.0, 0.13.0, 0.14.0 and 0.19.0). Before 0.11
/// torch 2.7 rules Triton out as well. `(name, intermediate multiple, hidden multiple)`.
pub(super) fn vllm_mxfp4_layout(k: &Knobs, gpu: &Gpu) -> (&'static str, u64, u64) {
    let v = Engine::Vllm.version_in_force(k);
    if is_rocm(gpu) {
        // `current_platform.is_rocm()`: the intermediate size to 128 (0.10), both to 256 (0.19).
        return if v < [0, 11, 0] {
            ("ROCm Triton", 128, 1)
        } else {
            ("ROCm Triton", 256, 256)
        };
    }
    match gpu.sm_major {
        0..=8 => ("Marlin", 128, 256),
        9 if v < [0, 12, 0] => ("Marlin", 128, 256),
        9 => ("Triton", 64, 1),
        _ => ("FlashInfer", 256, 256),
    }
}

/// Whether vLLM's Triton MXFP4 path keeps a second, padded copy of the experts' scales
/// (`Mxfp4MoEMethod.process_weights_after_loading`, Triton branch, and `_swizzle_mxfp4` in
/// `quantization/utils/mxfp4_utils.py`, read at v0.11.0 and v0.14.1): the kernel's scale is
/// `convert_layout(wrap_torch_tensor(scale), scale_layout)`, and `layer.w13_weight_scale` /
/// `w2_weight_scale` stay registered (only the weights are deleted). On Hopper with torch
/// older than 2.8.1 the layout is triton_kernels' `StridedLayout`, whose `swizzle_data`
/// returns its input (a view: one copy); with torch 2.8.1 or newer it is `HopperMXScaleLayout`,
/// whose `swizzle_data` makes a contiguous copy padded to 2 × num_warps × 2 × 8 = 256 rows
/// and an even number of scale columns (triton_kernels' `layout_details/hopper_scale.py`, the
/// `HopperMXScaleLayout(shape, mx_axis, num_warps)` class that this `convert_layout` API
/// constructs). vLLM 0.11.0 pins torch 2.8.0 and 0.11.1 on torch 2.9.0 (the wheels'
/// `Requires-Dist`); Hopper takes the Triton path by default only from 0.12
/// ([`vllm_mxfp4_layout`]), so wherever vram picks it the copy is there. ROCm's gfx950 scale
/// layout copies too; vram does not tell gfx950 apart and leaves it out.
pub(super) fn vllm_mxfp4_scales_copied(k: &Knobs, gpu: &Gpu) -> bool {
    vllm_mxfp4_layout(k, gpu).0 == "Triton"
}

/// vLLM before 0.8 absorbs MLA's up-projections into the query and output projections at load
/// (`VLLM_MLA_PERFORM_MATRIX_ABSORPTION`, default 1: `W_Q_UK = einsum(W_Q, W_UK)` and `W_UV_O =
/// einsum(W_UV, W_O)`, kept in the activation dtype beside the checkpoint's own weights,
/// `vllm/attention/backends/mla/utils.py` at 0.7.2); from 0.8 it keeps only `W_UK_T` and `W_UV`.
pub(super) fn vllm_mla_absorbs(k: &Knobs) -> bool {
    Engine::Vllm.version_in_force(k) < [0, 8, 0]
}

/// The quantization (vLLM's name for it) under which vLLM 0.7.0-0.7.2 turns an MLA model's MLA
/// off, if it does. `ModelConfig.use_mla` at 0.7.2 (`vllm/config.py`) returns False, with the
/// warning "MLA is not supported with %s quantization. Disabling MLA.", for every quantization
/// but `fp8` and `compressed-tensors` (whose groups must then all be fp8: an int8 W8A8 one turns
/// it off too), and `DeepseekV2Attention` then caches full K and V per head (`qk_head_dim` wide,
/// V padded to it; `models/deepseek_v2.py` at 0.7.2). So the MLA backend's refusal of quantized
/// projections ("Only FP8 and UnquantizedLinearMethod are supported for MLA, please run with
/// VLLM_MLA_DISABLE=1", `MLACommonImpl.process_weights_after_loading` in
/// `attention/backends/mla/utils.py` at 0.7.2) is not reached with AWQ, GPTQ or bitsandbytes:
/// the engine starts, without MLA. 0.7.3 drops the gate (`use_mla` is `is_deepseek_mla and not
/// VLLM_MLA_DISABLE`) and dequantizes such projections through an identity matmul at load
/// (`get_and_maybe_dequant_weights`, read at 0.7.3). 0.7.0 and 0.7.1 are not read and taken as
/// 0.7.2.
pub(super) fn vllm_07_mla_disabled_by(t: &Transformer, k: &Knobs) -> Option<&'static str> {
    use super::layers::layer_caches;
    use super::CacheLayout;
    let v = Engine::Vllm.version_in_force(k);
    let mla = layer_caches(t)
        .iter()
        .any(|c| matches!(c, CacheLayout::Latent { .. }));
    if !mla || !([0, 7, 0]..[0, 7, 3]).contains(&v) {
        return None;
    }
    let q = quantization_in_force(t, k);
    match q {
        Quantization::Awq => Some("awq"),
        Quantization::Gptq => Some("gptq"),
        Quantization::Bitsandbytes => Some("bitsandbytes"),
        Quantization::Int8 | Quantization::Wna16 => Some("compressed-tensors"),
        Quantization::Mxfp4 => Some("mxfp4"),
        Quantization::None | Quantization::Fp8 => None,
    }
}

/// V0 before 0.8 aligns each MLA cache entry to 256 bytes (`CacheEngine._align_cache`,
/// `align_to_256bytes`, `VLLM_CUDA_MEM_ALIGN_KV_CACHE` default 1, `vllm/worker/cache_engine.py`
/// at 0.7.2): 576 bf16 elements take 640.
pub(super) fn vllm_mla_entry_aligned(k: &Knobs, v1: bool) -> bool {
    !v1 && Engine::Vllm.version_in_force(k) < [0, 8, 0]
}

/// Whether V0 turns chunked prefill on by itself (then 2048 tokens a step): only above 32K
/// tokens, and not for a multimodal model (0.6.3 and later: "Chunked prefill is currently
/// disabled for multimodal models by default"), an MLA model (0.8.3: "Chunked prefill not
/// supported for Multimodal or MLA in V0", `_set_default_args_v0`; 0.7.2 still chunks an MLA
/// model, as its DeepSeek-Coder-V2-Lite log in `unseen.json`'s fit half shows, so the rule is
/// taken from 0.8) or a model with a sliding window (`use_sliding_window`);
/// `vllm/engine/arg_utils.py` at 0.6.3 and 0.8.3. Without it the profile batch is the whole
/// `max_model_len`.
pub(super) fn vllm_v0_chunked_by_default(
    k: &Knobs,
    max_len: u64,
    multimodal: bool,
    mla: bool,
    sliding: bool,
) -> bool {
    let v = Engine::Vllm.version_in_force(k);
    let mla_excluded = mla && v >= [0, 8, 0];
    max_len > 32768 && !multimodal && !mla_excluded && !sliding
}

/// Whether vLLM's AWQ/GPTQ linears run the plain (non-Marlin) kernel here, whose forward makes
/// the whole fp16 weight as a temporary, and from how many tokens a step it does. `None`: no
/// such temporary (unquantized, another method, or a Marlin kernel). The method is
/// `--quantization`'s, else the checkpoint's (`quant_method` awq/gptq).
///
/// - The plain kernel runs where `--quantization awq`/`gptq` is named ([`Knobs::marlin`]
///   `Some(false)`), or where the config decides and Marlin cannot run: compute capability
///   below 8.0 (`check_marlin_supported`, `awq_marlin.py`/`gptq_marlin.py`).
/// - AWQ (`AWQLinearMethod.apply`, `awq.py`: lines 174–178 at v0.8.5, 218–222 at v0.11.0; the
///   same `x.shape[:-1].numel() >= 256` rule at 0.6.4 through 0.20.0): from 256 tokens it calls
///   `ops.awq_dequantize` (`torch::empty({in_c, out_c})` in the scales' dtype) and
///   `torch.matmul`; below, `awq_gemm` with no temporary.
/// - GPTQ (`GPTQLinearMethod.apply` calls `ops.gptq_gemm`, `gptq.py` line 270 at v0.8.5, 334 at
///   v0.11.0): `gptq_gemm` (`csrc/quantization/gptq/q_gemm.cu`) allocates its output and then
///   `temp_dq`, `[K, N]` in the activation dtype, on every call whatever the token count (the
///   reconstruct-then-cuBLAS path uses it above 50 rows).
pub(super) fn vllm_dequant_linears(t: &Transformer, k: &Knobs, gpu: &Gpu) -> Option<u64> {
    match plain_awq_gptq(t, k, gpu, Engine::Vllm)? {
        Quantization::Awq => Some(256),
        _ => Some(0),
    }
}

/// SGLang's counterpart of [`vllm_dequant_linears`]: from how many tokens a step its plain
/// AWQ/GPTQ linears make the whole fp16 weight. Through 0.4.4 SGLang takes vLLM's `AWQConfig`
/// and `GPTQConfig` (`layers/quantization/__init__.py` at 0.4.2, 0.4.3.post4, 0.4.4.post1), so
/// vLLM's rules. From 0.4.5 its own `AWQLinearMethod.apply` (`awq.py` at 0.4.5.post3 and 0.5.3)
/// calls `awq_dequantize` and `torch.matmul` on every call, whatever the token count. Marlin
/// is chosen as in vLLM (`AWQMarlinConfig.override_quantization_method`: compatible and the
/// method not forced to `awq`).
pub(super) fn sglang_dequant_linears(t: &Transformer, k: &Knobs, gpu: &Gpu) -> Option<u64> {
    match plain_awq_gptq(t, k, gpu, Engine::Sglang)? {
        Quantization::Awq if Engine::Sglang.version_in_force(k) < [0, 4, 5] => Some(256),
        _ => Some(0),
    }
}

/// The AWQ/GPTQ method whose plain (non-Marlin) kernel runs here: `--quantization`'s, else the
/// checkpoint's, where it is named outright (`Knobs::marlin` `Some(false)`) or compute
/// capability is below 8.0 (`check_marlin_supported`). `None`: unquantized, another method,
/// or a Marlin kernel.
fn plain_awq_gptq(t: &Transformer, k: &Knobs, gpu: &Gpu, engine: Engine) -> Option<Quantization> {
    let method = quantization_in_force(t, k);
    if !matches!(method, Quantization::Awq | Quantization::Gptq) {
        return None;
    }
    (!marlin_runs(t, k, gpu, engine)).then_some(method)
}

/// How the engine fails to load a channel-wise AWQ checkpoint (`group_size: -1`), if it does.
/// Each engine's AWQ methods size a linear's `qzeros` and `scales` rows by dividing by the
/// group size:
///
/// - **Marlin MoE** (`AWQMarlinMoEMethod.create_weights`, `awq_marlin.py`: vLLM 0.6.4, 0.7.2,
///   0.8.5, 0.9.0, 0.10.1, 0.19.0 and 0.22.0; SGLang's own copy at 0.5.3) takes
///   `hidden_size // group_size` with the -1 unnormalized, so `torch.empty` gets a negative
///   dimension for the experts' scales. `check_moe_marlin_supports_layer` accepts -1 (read at
///   0.10.1 and 0.22.0).
/// - **The plain kernel** (`AWQLinearMethod.create_weights`, `awq.py`): vLLM to 0.9.0 (read at
///   0.6.4, 0.7.2, 0.8.5, 0.9.0) and SGLang (its own copy at 0.5.3; through 0.4.4 it takes
///   vLLM 0.6's) divide the rank's input by -1, a negative dimension at the first quantized
///   linear (QKV, `hidden` rows). vLLM from 0.9.1 (read at 0.9.1, 0.9.2, 0.10.1, 0.19.0,
///   0.22.0) takes the group as the whole input, so a row-parallel linear at TP > 1, whose
///   input is split, is refused with "The input size is not aligned with the quantized weight
///   shape".
/// - **The Marlin linear** (`AWQMarlinLinearMethod`) takes the group as the whole input at
///   every version read: it loads ([`super::Quantization::linear_parts`] holds its rows).
pub(super) fn awq_channelwise_refusal(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    k: &Knobs,
) -> Option<String> {
    let q = quantization_in_force(t, k);
    if q != Quantization::Awq
        || q.packed_format(t.blocks.storage.quant) != Some(WeightFormat::Awq { group: 0 })
    {
        return None;
    }
    let name = match engine {
        Engine::Vllm => "vLLM",
        Engine::Sglang => "SGLang",
    };
    let version = super::version_label(engine, k);
    let h = t.hidden();
    let negative = |method: &str, what: &str| {
        format!(
            "{name} {version} fails to load this channel-wise AWQ checkpoint: RuntimeError: Trying to create tensor with negative dimension -{h} ({method}.create_weights divides {what} by the config's group_size, -1); a checkpoint quantized with a group size (128) loads"
        )
    };
    let marlin = marlin_runs(t, k, gpu, engine);
    let moe = t.blocks.kinds.iter().any(|kind| kind.ffn.moe().is_some());
    if marlin && moe {
        return Some(negative("AWQMarlinMoEMethod", "hidden_size"));
    }
    if marlin {
        return None;
    }
    if engine == Engine::Sglang || Engine::Vllm.version_in_force(k) < [0, 9, 1] {
        return Some(negative("AWQLinearMethod", "the input size"));
    }
    let marlin_from = if Engine::Vllm.version_in_force(k) >= [0, 14, 0] {
        "7.5"
    } else {
        "8.0"
    };
    (k.tp > 1).then(|| {
        format!(
            "vLLM {version} refuses this: ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size. (AWQLinearMethod.create_weights: a channel-wise checkpoint's group is a linear's whole input, which a row-parallel linear splits at TP {}; the Marlin kernel, --quantization awq_marlin on compute capability {marlin_from} or newer, loads it)",
            k.tp
        )
    })
}

/// vLLM's refusal of an attention backend the user chose ([`Knobs::attention_backend`]), in its
/// words, or vram's one-line refusal of a choice it does not model. A chosen backend is tried
/// alone: `validate_configuration` (`v1/attention/backend.py`, `attention/backends/abstract.py`
/// at 0.12-0.13; the same checks in that order from 0.12.0 to 0.22.1) lists its reasons, and `CudaPlatform.get_attn_backend_cls`
/// raises `ValueError(f"Selected backend {selected_backend} is not valid for this
/// configuration. Reason: {invalid_reasons}")`, the enum member printing as
/// `AttentionBackendEnum.FLASH_ATTN` and the list as Python's repr. Read here for
/// `FLASH_ATTN`: `head_size not supported` above 256 or off a multiple of 8
/// (`FlashAttentionBackend.supports_head_size` through 0.21; 0.22 takes up to 512 where FA4 is
/// built, which vram does not know, so a wider head there is not judged), and
/// `partial multimodal token full attention not supported` for a model whose image tokens
/// attend both ways (`graphs::vllm_mm_prefix_lm`; no FlashAttention release overrides
/// `supports_mm_prefix`). The refusal is given only where FlashAttention's other checks pass
/// as read (16-bit model dtype, the model's KV dtype, a block size of 16s, compute capability
/// 8.0 or more); a choice outside that is refused by vram as not modelled, and so is the flag
/// before 0.11 (only V1's FlashAttention graph state depends on it here), on V0, and at 0.11
/// where FlashAttention cannot run the heads (its selector not read). Other backends are not
/// checked. `tests/data/attn_select` runs each release's own functions for these cases.
pub(super) fn attention_backend_refusal(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    k: &Knobs,
) -> Option<String> {
    let b = k.attention_backend?;
    let v = engine.version_in_force(k);
    let label = super::version_label(engine, k);
    if engine != Engine::Vllm || v < [0, 11, 0] || k.vllm_v0 || is_rocm(gpu) {
        return Some(format!(
            "--attention-backend {} is read for vLLM V1 on CUDA from 0.11 (VLLM_ATTENTION_BACKEND to 0.14, the flag from 0.13); not for {} {label}{}{}",
            b.name(),
            engine.label(),
            if k.vllm_v0 { " V0" } else { "" },
            if is_rocm(gpu) { " on ROCm" } else { "" }
        ));
    }
    if b != super::AttentionBackend::FlashAttn {
        return None;
    }
    let heads = t
        .blocks
        .kinds
        .iter()
        .filter_map(|b| b.mixer.as_attention().map(|a| a.head_dim))
        .max()
        .unwrap_or(0);
    let mut reasons = Vec::new();
    if heads > 256 || heads % 8 != 0 {
        if v >= [0, 22, 0] {
            return Some(format!(
                "--attention-backend FLASH_ATTN with head size {heads}: vLLM {label} takes it only where FlashAttention 4 is built (FlashAttentionBackend.supports_head_size), which vram does not know"
            ));
        }
        reasons.push("head_size not supported");
    }
    if super::graphs::vllm_mm_prefix_lm(t, k) {
        reasons.push("partial multimodal token full attention not supported");
    }
    if reasons.is_empty() {
        return None;
    }
    if v < [0, 12, 0] {
        return Some(format!(
            "--attention-backend FLASH_ATTN with head size {heads}: how vLLM {label} treats a chosen backend FlashAttention cannot run was not read (its selector is read from 0.12)"
        ));
    }
    let block_ok = k.block_size.is_none_or(|b| b % 16 == 0);
    if k.dtype_bytes != 2 || k.kv_bytes.is_some() || !block_ok || gpu.sm_major < 8 {
        return Some(format!(
            "--attention-backend FLASH_ATTN: vLLM {label} refuses it here ({}), and vram does not model FlashAttention's other checks for this dtype, KV-cache dtype, block size or GPU",
            reasons.join(", ")
        ));
    }
    let list = reasons
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "vLLM {label} refuses this: ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. Reason: [{list}] (CudaPlatform.get_attn_backend_cls tries a chosen backend alone; TRITON_ATTN takes these layers)"
    ))
}

/// How vLLM from 0.22 refuses a GPTQ checkpoint that its Marlin-layout kernels cannot run, if it
/// does. From 0.22.0 `gptq`, `gptq_marlin` and `auto_gptq` all name `AutoGPTQConfig`
/// (`quantization/__init__.py`; `override_quantization_method` takes every `quant_method: gptq`
/// checkpoint, with no capability test), and `AutoGPTQLinearMethod.__init__` (`auto_gptq.py`)
/// calls `verify_marlin_supported`, which raises `_check_marlin_supported`'s message as a
/// `ValueError` (`quantization/utils/marlin_utils.py`; read at 0.22.0, 0.22.1 and 0.23.0, the
/// same text since 0.10.0):
///
/// - below compute capability 7.5 on CUDA `query_marlin_supported_quant_types` returns no type
///   (`device_capability < 75`; ROCm skips the test), so `Marlin does not support weight_bits =
///   uint4b8. Only types = [] are supported (for group_size = G, device_capability = C, zp =
///   False).`, C being `major * 10 + minor`;
/// - a group size outside `MARLIN_SUPPORTED_GROUP_SIZES` (-1, 32, 64, 128): `Marlin does not
///   support group_size = G. Only group_sizes = [-1, 32, 64, 128] are supported.`
///
/// The type is `uint4b8` (`TYPE_MAP[(4, True)]`): vram's GPTQ format is the 4-bit symmetric one.
/// `config/vllm.py`'s minimum capability test (`AutoGPTQConfig.get_min_capability`, 60) comes
/// first but refuses only GPUs older than Pascal, none of them in vram's catalog. Through 0.21
/// vLLM runs such a checkpoint on its plain `GPTQLinearMethod` (`gptq.py`: minimum capability 60,
/// any group size), which [`marlin_runs`] models.
pub(super) fn gptq_marlin_refusal(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    k: &Knobs,
) -> Option<String> {
    let q = quantization_in_force(t, k);
    if engine != Engine::Vllm || q != Quantization::Gptq {
        return None;
    }
    let v = Engine::Vllm.version_in_force(k);
    if v < [0, 22, 0] {
        return None;
    }
    let group: i64 = match q.packed_format(t.blocks.storage.quant) {
        Some(WeightFormat::Gptq { group: 0, .. }) => -1,
        Some(WeightFormat::Gptq { group, .. }) => i64::try_from(group).unwrap_or(i64::MAX),
        _ => return None,
    };
    let capability = gpu.sm_major * 10 + gpu.sm_minor;
    let error = if !gpu.is_rocm() && capability < 75 {
        format!(
            "ValueError: Marlin does not support weight_bits = uint4b8. Only types = [] are supported (for group_size = {group}, device_capability = {capability}, zp = False)."
        )
    } else if ![-1, 32, 64, 128].contains(&group) {
        format!(
            "ValueError: Marlin does not support group_size = {group}. Only group_sizes = [-1, 32, 64, 128] are supported."
        )
    } else {
        return None;
    };
    let why = if capability < 75 && !gpu.is_rocm() {
        format!(
            "its Marlin-layout kernels take compute capability 7.5 or newer and {} is {}.{}",
            gpu.name, gpu.sm_major, gpu.sm_minor
        )
    } else {
        format!("Marlin takes group sizes -1, 32, 64 and 128, not this checkpoint's {group}")
    };
    Some(format!(
        "vLLM {} refuses this GPTQ checkpoint: {error} (AutoGPTQLinearMethod.__init__ calls verify_marlin_supported: from 0.22 every GPTQ checkpoint runs on AutoGPTQConfig (--quantization gptq, gptq_marlin or none), and {why}; vLLM 0.21 runs it on the plain GPTQ kernel)",
        super::version_label(engine, k)
    ))
}

/// The group sizes `MacheteLinearKernel` takes (0 for -1) where vLLM's GPTQ- or AWQ-Marlin
/// linears choose among the mixed-precision kernels on a GPU where it runs; empty elsewhere.
/// `choose_mp_linear_kernel` tries the kernels in order, Machete before Marlin (`_POSSIBLE_KERNELS`:
/// Machete, Marlin at 0.6.2 and 0.6.3; Machete, AllSpark, Marlin, ... at 0.8.5 and 0.9.2; CUTLASS
/// W4A8, which takes fp8 activations only, first from 0.11.0; read at 0.10.0, 0.11.0, 0.12.0,
/// 0.14.1, 0.16.0, 0.17.1, 0.19.1, 0.21.0, 0.22.1 and 0.23.0). `GPTQMarlinLinearMethod` builds
/// its kernel this way from 0.6.2 (before, it calls the Marlin ops itself: read at 0.6.1),
/// `AutoGPTQLinearMethod` from 0.22, and `AWQMarlinLinearMethod` from 0.19.0 (read at 0.19.0,
/// 0.19.1, 0.20.2, 0.21.0, 0.22.1; 0.18.1 calls the Marlin ops itself); SGLang, the plain
/// kernels and the MoE methods do not.
///
/// - **The GPU.** Machete's `get_min_capability` is 90, so through 0.9 any CUDA GPU from 9.0
///   (Blackwell too); from 0.10.0 `can_implement` also asks `is_device_capability(90)`: Hopper
///   (H100, H200, GH200) only.
/// - **Group sizes** (`machete_utils.py`): -1 and 128 through 0.9.1 (`MACHETE_SUPPORTED_GROUP_SIZES`,
///   read at 0.6.2, 0.7.2, 0.8.5, 0.9.0, 0.9.1); -1, 64 and 128 for fp16/bf16 activations from
///   0.9.2 (`query_machete_supported_group_sizes`).
///
/// Which linears Machete takes by shape: [`super::Quantization::linear_parts`].
pub(super) fn machete_groups(
    t: &Transformer,
    k: &Knobs,
    gpu: &Gpu,
    engine: Engine,
) -> &'static [u64] {
    let v = Engine::Vllm.version_in_force(k);
    let gpu_takes = if v >= [0, 10, 0] {
        gpu.capability() == (9, 0)
    } else {
        gpu.sm_major >= 9
    };
    let method_from = match quantization_in_force(t, k) {
        Quantization::Gptq => [0, 6, 2],
        Quantization::Awq => [0, 19, 0],
        _ => return &[],
    };
    if engine != Engine::Vllm
        || gpu.is_rocm()
        || !gpu_takes
        || v < method_from
        || !marlin_runs(t, k, gpu, engine)
    {
        return &[];
    }
    if v >= [0, 9, 2] {
        &[0, 64, 128]
    } else {
        &[0, 128]
    }
}

/// How SGLang fails to build an MoE layer where a plain (non-Marlin) AWQ or GPTQ method is in
/// force (`--quantization awq`/`gptq` named outright, or compute capability below 8.0, where
/// `override_quantization_method` keeps the plain method), if it does. Only the Marlin configs
/// have an MoE method; read in the wheels of 0.4.0, 0.4.2, 0.4.3.post4, 0.4.4, 0.4.5.post3,
/// 0.4.6.post5, 0.4.7, 0.4.9, 0.4.10.post2, 0.5.0rc2, 0.5.1, 0.5.2 and 0.5.3:
///
/// - **AWQ, every release read.** `AWQConfig.get_quant_method` returns a method for a linear only
///   (vLLM 0.6.4.post1's and 0.7.2's, which SGLang takes through 0.4.4; SGLang's own `awq.py` from
///   0.4.5), so `FusedMoE.__init__` stops at `assert self.quant_method is not None`. SGLang's
///   patch (`awq_get_quant_method`, to 0.4.3.post4) reaches only `AWQMarlinConfig`.
/// - **GPTQ from 0.5.0.** SGLang's own `GPTQConfig.get_quant_method` raises
///   `TypeError("GPTQ Method does not support MoE, please use gptq_marlin")`. From 0.4.3 to
///   0.4.10 `monkey_patch_quant_configs` (with vLLM installed) gives `GPTQConfig` the Marlin MoE
///   method, so it loads; at 0.4.0-0.4.2 the patch reaches only `GPTQMarlinConfig` and vLLM
///   0.6.4's `GPTQConfig` has no MoE method: the same assertion as AWQ's.
pub(super) fn sglang_moe_method_refusal(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    k: &Knobs,
) -> Option<String> {
    if engine != Engine::Sglang || !t.blocks.kinds.iter().any(|kind| kind.ffn.moe().is_some()) {
        return None;
    }
    let method = plain_awq_gptq(t, k, gpu, engine)?;
    let v = Engine::Sglang.version_in_force(k);
    let version = super::version_label(engine, k);
    let (name, marlin) = match method {
        Quantization::Awq => ("awq", "awq_marlin"),
        _ => ("gptq", "gptq_marlin"),
    };
    let why = if gpu.sm_major < 8 {
        format!(
            "the {name} method stays in force below compute capability 8.0 (the GPU is {}.{}), where {marlin} does not run",
            gpu.sm_major, gpu.sm_minor
        )
    } else {
        format!("--quantization {marlin}, or none, runs the Marlin MoE method")
    };
    if method == Quantization::Gptq && v >= [0, 5, 0] {
        return Some(format!(
            "SGLang {version} refuses this MoE model: TypeError: GPTQ Method does not support MoE, please use gptq_marlin (GPTQConfig.get_quant_method; {why})"
        ));
    }
    if method == Quantization::Gptq && v >= [0, 4, 3] {
        return None;
    }
    Some(format!(
        "SGLang {version} refuses this MoE model: AssertionError (FusedMoE.__init__: assert self.quant_method is not None; the plain {name} config makes no method for an MoE layer; {why})"
    ))
}

/// How the release's `get_rope` refuses the config's rope parameters, if it does, in its own
/// words (each run on the CPU from the release's source, `tests/data/get_rope`):
///
/// - `ntk`: vLLM to 0.8.5 (`NTKScalingRotaryEmbedding` from 0.9.0) and every SGLang read
///   (0.4.2 to 0.5.23) raise `ValueError: Unknown RoPE scaling type ntk`;
/// - `dynamic` with `alpha` and no `factor`: releases that read `factor` only (vLLM to 0.9.1,
///   SGLang to 0.5.9, [`super::weights::alpha_first`]) raise `KeyError: 'factor'`;
/// - M-RoPE with YaRN: vLLM 0.12.0 to 0.16.0 build an `MRotaryEmbedding` whose YaRN frequencies
///   read a `truncate` attribute only `YaRNScalingRotaryEmbedding` sets (`AttributeError`;
///   0.11.x and 0.17.0 build it; 0.15 not read, taken as 0.14 and 0.16).
///
/// SGLang's Gemma 3 passes `get_rope` no scaling (none before 0.5.10, `rope_type: default` from
/// it), so nothing of its config is refused there.
pub(super) fn rope_refusal(t: &Transformer, engine: Engine, k: &Knobs) -> Option<String> {
    use vram_model::blocks::RopeClass;
    if engine == Engine::Sglang && t.blocks.rope_tables.sglang_per_base_tables > 0 {
        return None;
    }
    let version = engine.version_in_force(k);
    let error = match t.blocks.rope_tables.class {
        RopeClass::Ntk if engine == Engine::Sglang || version < [0, 9, 0] => {
            "ValueError: Unknown RoPE scaling type ntk"
        }
        RopeClass::DynamicAlpha { factor_rows: None }
            if !super::weights::alpha_first(engine, k) =>
        {
            "KeyError: 'factor'"
        }
        RopeClass::Yarn { .. }
            if engine == Engine::Vllm
                && t.blocks.mrope.is_some()
                && ([0, 12, 0]..[0, 17, 0]).contains(&version) =>
        {
            "AttributeError: 'MRotaryEmbedding' object has no attribute 'truncate'"
        }
        _ => return None,
    };
    let name = match engine {
        Engine::Vllm => "vLLM",
        Engine::Sglang => "SGLang",
    };
    Some(format!(
        "{name} {} cannot build this config's rotary embedding: {error} (get_rope with the config's rope_scaling)",
        super::version_label(engine, k)
    ))
}

/// Whether an AWQ/GPTQ linear runs a Marlin kernel: as `--quantization` names it
/// ([`Knobs::marlin`]), else from the engine's lowest Marlin compute capability and a group size
/// Marlin takes (`check_marlin_supported`: `MARLIN_SUPPORTED_GROUP_SIZES` = -1, 32, 64, 128,
/// read at 0.10.1 and 0.22.0; the checkpoint's group, [`Quantization::packed_format`]).
///
/// - **The capability** (`query_marlin_supported_quant_types`, `quantization/utils/
///   marlin_utils.py`): vLLM returns no type below 8.0 through 0.13.0 (read at 0.11.0, 0.11.2,
///   0.12.0, 0.13.0) and below 7.5 from 0.14.0 (read at 0.14.0, 0.14.1, 0.16.0, 0.17.1, 0.18.1,
///   0.19.1, 0.20.2, 0.21.0, 0.22.0), so Turing (T4, RTX 20xx) runs Marlin from 0.14; SGLang's
///   own copy keeps 8.0 (read at 0.4.10, 0.5.3 and 0.5.10; before 0.4.5 it takes vLLM's).
/// - **`--quantization gptq` named** keeps the plain `GPTQLinearMethod` through vLLM 0.21; from
///   0.22.0 `gptq` and `gptq_marlin` both name `AutoGPTQConfig` (`quantization/__init__.py`,
///   `auto_gptq.py` at 0.22.0 and 0.22.1; `gptq.py` is gone), whose linears take a
///   mixed-precision kernel (`choose_mp_linear_kernel`: Machete, AllSpark, Marlin, ..., on the
///   Marlin layout's terms here) on a GPU Marlin supports. Its constructor also calls
///   `verify_marlin_supported`, which raises below 7.5 and for a group size Marlin does not
///   take: [`gptq_marlin_refusal`] refuses those before this is asked. `--quantization awq`
///   keeps the plain kernel at every version read.
pub(super) fn marlin_runs(t: &Transformer, k: &Knobs, gpu: &Gpu, engine: Engine) -> bool {
    let q = quantization_in_force(t, k);
    let group = match q.packed_format(t.blocks.storage.quant) {
        Some(WeightFormat::Awq { group } | WeightFormat::Gptq { group, .. }) => group,
        _ => 128,
    };
    let v = engine.version_in_force(k);
    let capable = match engine {
        Engine::Vllm if v >= [0, 14, 0] => (gpu.sm_major, gpu.sm_minor) >= (7, 5),
        _ => gpu.sm_major >= 8,
    } && matches!(group, 0 | 32 | 64 | 128);
    match k.marlin {
        Some(false) if engine == Engine::Vllm && q == Quantization::Gptq && v >= [0, 22, 0] => {
            capable
        }
        Some(m) => m,
        None => capable,
    }
}
