//! Serving engines' start-up memory errors: vLLM's and SGLang's.
//!
//! These are not PyTorch out-of-memory errors: the engine measured the
//! memory left for its KV cache and refused to start. Each names one knob;
//! [`explain`] says what the knob does with the message's own figures.
//!
//! The texts, from the engines' source:
//!
//! * vLLM V0 (`vllm/worker/worker.py`, `raise_if_cache_size_invalid`):
//!   `No available memory for the cache blocks. Try increasing
//!   `gpu_memory_utilization` when initializing the engine.` when
//!   `num_gpu_blocks <= 0`, and `The model's max seq len (L) is larger than
//!   the maximum number of tokens that can be stored in KV cache (K). Try
//!   increasing `gpu_memory_utilization` or decreasing `max_model_len` ...`
//!   when `max_model_len > block_size * num_gpu_blocks`.
//! * vLLM V1 (`vllm/v1/core/kv_cache_utils.py`,
//!   `check_enough_kv_cache_memory`): the same `No available memory for the
//!   cache blocks`, and `To serve at least one request with the model's max
//!   seq len (L), (N GiB KV cache is needed, which is larger than the
//!   available KV cache memory (M GiB). Based on the available memory, the
//!   estimated maximum model length is E. Try increasing ...` (some releases
//!   write `models's`, or no `(` before N, or no estimate). The profiler's log
//!   line `Available KV cache memory: -X GiB` often precedes the error.
//! * vLLM (`vllm/worker/worker.py` / `vllm/v1/worker/gpu_worker.py`):
//!   `Free memory on device (F/T GiB) on startup is less than desired GPU
//!   memory utilization (U, X GiB).`
//! * SGLang (`python/sglang/srt/model_executor/model_runner.py`, later
//!   `pool_configurator.py`'s `MemoryPoolConfig`): `Not enough memory.
//!   Please try to increase --mem-fraction-static.`, from 2025 with ` Current
//!   value: mem_fraction_static=V`, when the profiled `max_total_num_tokens`
//!   is not positive.
//! * SGLang 0.5.23 (`sglang/srt/mem_cache/kv_cache_configurator.py`,
//!   `_profile_available_bytes`, read in the 0.5.23 wheel on PyPI): the KV pool's
//!   budget is what is free after loading less `pre_model_load_memory × (1 −
//!   mem_fraction_static)` (the slack left outside the static pool), and when that
//!   is not positive: `Loaded weights leave no GPU memory for the KV cache under
//!   --mem-fraction-static=F. Raise --mem-fraction-static above S (minimum viable
//!   = 1 - available/pre = M).` The log's `Load weight end. ... avail mem=A GB,
//!   mem usage=U GB.` (`model_runner.py`, `load_model`: free after loading, and
//!   free before less free after; SGLang's GB are GiB) often precedes it.
//! * vLLM V1 from 0.8 (`vllm/v1/worker/gpu_model_runner.py`, `_dummy_sampler_run`, called by
//!   `gpu_worker.py`'s `compile_or_warm_up_model` after the KV cache is allocated and the CUDA
//!   graphs are captured; read at 0.8.3, 0.8.5, 0.11.0 and 0.19.0): `CUDA out of memory occurred
//!   when warming up sampler with N dummy requests. Please try lowering `max_num_seqs` or
//!   `gpu_memory_utilization` when initializing the engine.`, N being `min(max_num_seqs,
//!   max_num_batched_tokens)`. `vram capacity` predicts it with this text (`vram_plan`'s
//!   `capacity/vllm.rs`), and its tests read that prediction back with [`parse`]: one reader of
//!   every engine refusal, here, where the log's prefixes and cut lines are already handled.
//!
//! * Read from the releases' source for the rest (every memory or capability text of vLLM
//!   0.10.0–0.33.0 and SGLang 0.4.6.post5–0.5.10, tabulated per release in
//!   `tests/data/messages/ENGINE-TEXTS.md`): vLLM's CPU backend's start-up and KV-allocation
//!   checks (`v1/worker/cpu_worker.py`, 0.20.2 on), the pooler warm-up OOM, `--max-model-len
//!   auto`'s `Cannot auto-fit max_model_len`, the quantization capability checks of both engines
//!   (`The quantization method Q is not supported for the current GPU. Minimum capability: M.
//!   Current capability: C.`, and the compressed-tensors / Quark scheme's), V1's `Error in
//!   memory profiling` assertion (free memory rose during the profile run), and SGLang's
//!   `The memory capacity is unbalanced` at TP > 1. Each variant names its source.
//!
//! **Where the capacity model plugs in.** [`CapacityFigures`] is the one
//! place the serving capacity model (`vram capacity`, engineer "serving"'s
//! module) hands its figures to the doctor: KV bytes per token, the memory
//! outside the KV cache, the device. [`explain`] uses them when given
//! (`Some`) to turn each knob into a number; without them it explains the
//! knob with the message's figures alone. Nothing else needs to change when
//! that model lands: build a `CapacityFigures` from its output in the CLI.

use serde::Serialize;

use crate::diagnose::human_bytes;
use crate::message::parse_size;
use crate::profile::{Part, ProfileLayout, StartupProfile};

/// A serving engine's start-up memory error, with its figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "error")]
pub enum ServingError {
    /// vLLM V0: `The model's max seq len (L) is larger than the maximum number
    /// of tokens that can be stored in KV cache (K)`.
    VllmMaxSeqLen {
        /// `max_model_len`.
        max_model_len: u64,
        /// Tokens the KV cache holds (`block_size * num_gpu_blocks`).
        kv_tokens: u64,
        /// The message names `VLLM_CPU_KVCACHE_SPACE`, not `gpu_memory_utilization`: vLLM's CPU
        /// backend, whose KV cache is that many GiB of host memory.
        cpu_backend: bool,
    },
    /// vLLM V1: `To serve at least one request with the model's max seq len
    /// (L), (N GiB KV cache is needed, which is larger than the available KV
    /// cache memory (M GiB).`
    VllmKvMemory {
        /// `max_model_len`.
        max_model_len: u64,
        /// KV-cache bytes one request of `max_model_len` needs.
        needed_bytes: u64,
        /// KV-cache bytes available.
        available_bytes: u64,
        /// vLLM's estimate of the longest `max_model_len` that fits, when printed.
        estimated_max_len: Option<u64>,
    },
    /// vLLM: `No available memory for the cache blocks.`
    VllmNoCacheMemory {
        /// The profiler's `Available KV cache memory: X GiB` when the log has
        /// it (negative: that much short), bytes.
        available_bytes: Option<i64>,
    },
    /// vLLM: `Free memory on device (F/T GiB) on startup is less than desired
    /// GPU memory utilization (U, X GiB).`; on its CPU backend (`v1/worker/cpu_worker.py`,
    /// `CPUWorker.__init__`, from 0.20.2 through 0.32.0): `Available memory on node N (F/T GiB) on
    /// startup is less than desired CPU memory utilization (U, X GiB).`, the same check on the
    /// NUMA node's host memory, `gpu_memory_utilization` being the share of it reserved.
    VllmFreeBelowUtilization {
        /// Free bytes at start-up.
        free_bytes: u64,
        /// Device bytes.
        total_bytes: u64,
        /// `gpu_memory_utilization`.
        utilization: f64,
        /// `utilization × total`, bytes.
        desired_bytes: u64,
        /// The CPU backend's wording: host memory of a NUMA node, not a GPU.
        cpu_backend: bool,
    },
    /// vLLM from 0.32 (`v1/worker/utils.py`, `request_memory`, read at 0.33.0), when the model
    /// loader reports weights that another process holds on the device for it
    /// (`get_external_weight_memory`): `Externally held weights on device D (W/T GiB) exceed the
    /// desired GPU memory utilization (U, X GiB).` The share `ceil(U × T)` counts those weights,
    /// and they fill it: nothing is left for the engine's own memory.
    VllmExternalWeightsFillShare {
        /// The weights the other process holds, bytes.
        weights_bytes: u64,
        /// Device bytes.
        total_bytes: u64,
        /// `gpu_memory_utilization`.
        utilization: f64,
        /// `utilization × total`, bytes.
        desired_bytes: u64,
    },
    /// The same check's other failure (vLLM 0.32+, read at 0.33.0): `Free memory on device D
    /// (F/T GiB) on startup is less than the engine's budget after excluding external process's
    /// weights (U, E GiB).`, E being `ceil(U × T)` less the externally held weights W. Those
    /// weights are not free memory and are not asked for, so what is missing is held by other
    /// processes beyond them.
    VllmFreeBelowEngineBudget {
        /// Free bytes at start-up.
        free_bytes: u64,
        /// Device bytes.
        total_bytes: u64,
        /// `gpu_memory_utilization`.
        utilization: f64,
        /// E: the share less the externally held weights, bytes.
        engine_bytes: u64,
    },
    /// vLLM's `Error in memory profiling.` (an `AssertionError`): V1's `Initial free memory F0 GiB,
    /// current free memory F1 GiB.` (`v1/worker/gpu_worker.py`, `determine_available_memory`,
    /// 0.10.0–0.23.0; raw bytes in `v1/worker/xpu_worker.py` to 0.14.1), V0's `Initial used memory
    /// U0, currently used memory U1.` (`worker/worker.py`, bytes, to 0.10.x): the GPU had more
    /// free memory after the profile run than before it, so another process released memory
    /// while vLLM was starting (vLLM assumes the others' usage does not change).
    VllmProfilingMemoryChanged {
        /// What was measured: `free` (V1, XPU) or `used` (V0).
        measure: &'static str,
        /// Before the profile run, bytes.
        before_bytes: u64,
        /// After it, bytes.
        after_bytes: u64,
    },
    /// vLLM's CPU backend (`v1/worker/cpu_worker.py`, `determine_available_memory`, from 0.20.2
    /// through 0.33.0): `Available memory on node N (A/T GiB) on kv cache allocation is less than
    /// requested memory for kv (K/R GiB).`, K being the reserved share R less what the worker
    /// already holds (its resident memory: the weights), or `(K GiB)` when the KV space was set
    /// (`--kv-cache-memory-bytes`, `VLLM_CPU_KVCACHE_SPACE`). Raised when K is not positive or
    /// above what the node has available (from 0.33.0 only above it: a K not positive is
    /// [`Self::VllmCpuWorkerFillsReservation`]).
    VllmCpuKvAllocation {
        /// The node's available host memory, bytes.
        available_bytes: u64,
        /// The node's memory, bytes.
        total_bytes: u64,
        /// K: the KV cache's request, bytes (negative: the worker already holds more than R).
        requested_kv_bytes: i64,
        /// R: the share `gpu_memory_utilization` reserves for the worker, bytes; `None` where
        /// the KV space was set outright.
        reserved_bytes: Option<u64>,
    },
    /// vLLM's CPU backend from 0.33.0 (`v1/worker/cpu_worker.py`, `determine_available_memory`,
    /// line 229): `The worker already uses C GiB (model weights and runtime), more than the R GiB
    /// of CPU memory reserved for it on node N, leaving none for the KV cache. ... To resolve:
    /// increase `--gpu-memory-utilization` to more than M, or set the KV cache size explicitly
    /// ...`, M being `ceil(C / total × 100) / 100`. 0.20.2–0.32.0 raised this case as
    /// [`Self::VllmCpuKvAllocation`] with a request `K = R − C ≤ 0`.
    VllmCpuWorkerFillsReservation {
        /// C: the worker's resident memory (the weights and the runtime), bytes.
        consumed_bytes: u64,
        /// R: the share `gpu_memory_utilization` reserves of the node's memory, bytes.
        reserved_bytes: u64,
        /// M: the share vLLM says the reservation must exceed, when printed.
        minimum_utilization: Option<f64>,
    },
    /// vLLM V1 (0.8 on): `CUDA out of memory occurred when warming up sampler with N dummy
    /// requests.`: the warm-up after the KV cache and the CUDA graphs did not fit what they left.
    VllmSamplerWarmUp {
        /// N: the dummy requests (`min(max_num_seqs, max_num_batched_tokens)`).
        requests: u64,
    },
    /// vLLM V1 (`gpu_model_runner.py`, `_dummy_pooler_run`, the same text from 0.10.0 through
    /// 0.23.0): `CUDA out of memory occurred when warming up pooler (task=T) with N dummy
    /// requests.`: a pooling model's warm-up, the sampler's counterpart, did not fit what the KV
    /// cache and the CUDA graphs left.
    VllmPoolerWarmUp {
        /// The pooling task the warm-up ran (`embed`, `classify`, ...), when printed.
        task: Option<String>,
        /// N: the dummy requests.
        requests: u64,
    },
    /// vLLM, hybrid models (0.23 on): `max_num_seqs (N) exceeds available Mamba cache blocks (M)`
    /// (`mamba.rs`).
    VllmMambaBlocks {
        /// N: `max_num_seqs`, the sequences the decode CUDA graphs are captured for.
        max_num_seqs: u64,
        /// M: the blocks of the pool the KV cache and the Mamba states share, per GPU.
        blocks: u64,
    },
    /// SGLang: `Not enough memory. Please try to increase --mem-fraction-static.`
    SglangNotEnoughMemory {
        /// `mem_fraction_static`, when the message prints it.
        mem_fraction_static: Option<f64>,
    },
    /// SGLang 0.5.23: `Loaded weights leave no GPU memory for the KV cache under
    /// --mem-fraction-static=F. Raise --mem-fraction-static above S (minimum viable = 1 -
    /// available/pre = M).`
    SglangWeightsLeaveNoKv {
        /// `mem_fraction_static`, F.
        mem_fraction_static: f64,
        /// The smallest fraction that leaves the KV pool anything: M as printed, else
        /// `U / (A + U)` from the `Load weight end` line.
        minimum_fraction: Option<f64>,
        /// Free after loading (`avail mem=A GB`), bytes, when the log has the line.
        available_bytes: Option<u64>,
        /// What loading took (`mem usage=U GB`), bytes, when the log has the line.
        weights_bytes: Option<u64>,
    },
    /// SGLang (`model_executor/model_runner.py`, `init_torch_distributed`; read at 0.4.6.post5,
    /// 0.5.3 and 0.5.10): `The memory capacity is unbalanced. Some GPUs may be occupied by other
    /// processes. min_per_gpu_memory=M, local_gpu_memory=L, local_gpu_memory * 0.9=Z`, at tensor
    /// parallelism above 1 when the least free memory of any rank is below 0.9 × this rank's
    /// (both GiB, `get_available_gpu_memory`'s `free / (1 << 30)`). A `ValueError` unless
    /// `SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK` is set (0.4.6.post5, 0.5.3); at 0.5.10
    /// `pre_model_load_memory=M`, a `RuntimeError` only with
    /// `SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK`, else a warning.
    SglangUnbalancedMemory {
        /// M: the least free memory over the ranks, bytes.
        min_free_bytes: u64,
        /// L: this rank's free memory, bytes.
        local_free_bytes: u64,
    },
    /// The quantization method's capability check at start-up: `The quantization method Q is not
    /// supported for the current GPU. Minimum capability: M. Current capability: C.` (vLLM's
    /// `_get_quantization_config`, `config.py` at 0.10, `config/vllm.py` 0.11–0.23; SGLang's
    /// `model_loader/loader.py` at 0.4.6.post5, 0.5.3, 0.5.10; `moe_wna16 + awq` from both
    /// engines' `moe_wna16.py`), or a compressed-tensors / Quark scheme's `Quantization scheme is
    /// not supported for the current GPU. Min capability: M. Current capability: C.` (`Required
    /// capability` in vLLM's compressed-tensors at 0.23). Capabilities are major × 10 + minor.
    LoadQuantCapability {
        /// The engine the paste names (`vllm` unless it names SGLang).
        engine: &'static str,
        /// The method named (`awq`, `moe_wna16 + awq`, ...); `None` for a scheme's refusal.
        method: Option<String>,
        /// M: the method's `get_min_capability()`.
        minimum_capability: u32,
        /// C: the GPU's.
        device_capability: u32,
    },
    /// PyTorch's `Trying to create tensor with negative dimension -N` while an engine creates a
    /// quantized checkpoint's tensors (read only where the paste names vLLM or SGLang and shows
    /// the quantization method's `create_weights` or its `quantization/awq` module): a
    /// size divided by the config's `group_size: -1` (channel-wise AWQ) in vLLM's AWQ-Marlin MoE
    /// method, its plain AWQ method before 0.9.1, or SGLang's copies of them.
    LoadNegativeDimension {
        /// The engine the paste names (`vllm`, `sglang`).
        engine: &'static str,
        /// The negative dimension, when printed.
        dimension: Option<i64>,
    },
    /// vLLM's `The input size is not aligned with the quantized weight shape. This can be caused
    /// by too large tensor parallel size.` (or `output size`): a quantized linear's share of a
    /// split dimension is not a whole number of quantization groups (or packed columns).
    LoadShardNotAligned {
        /// The engine the paste names (`vllm`, or `sglang` in its copies of vLLM's methods).
        engine: &'static str,
        /// `input` (a row-parallel linear's split input) or `output`.
        side: &'static str,
    },
    /// vLLM's `Marlin does not support weight_bits = T. Only types = [...] are supported (for
    /// group_size = G, device_capability = C, zp = Z).` or `Marlin does not support group_size =
    /// G. Only group_sizes = [-1, 32, 64, 128] are supported.` (`_check_marlin_supported`,
    /// `quantization/utils/marlin_utils.py`, the same text from 0.10.0 to 0.23.0), raised by
    /// `verify_marlin_supported` where a Marlin method is built: from 0.22 for every GPTQ
    /// checkpoint (`AutoGPTQLinearMethod.__init__`), so on a GPU below compute capability 7.5
    /// or at a group size Marlin does not take.
    LoadMarlinUnsupported {
        /// The engine the paste names (`vllm` unless it names SGLang).
        engine: &'static str,
        /// The checkpoint's group size, as printed.
        group_size: Option<i64>,
        /// `device_capability` (major × 10 + minor), printed with the weight-type refusal: the
        /// GPU's. `None` for the group-size refusal.
        device_capability: Option<u32>,
        /// `zp`, printed with the weight-type refusal: `true` for a zero-point method (AWQ's),
        /// `false` for GPTQ's. `None` for the group-size refusal.
        zero_points: Option<bool>,
        /// The checkpoint's weight type the weight-type refusal names (`uint4b8`: 4-bit GPTQ;
        /// `uint4`: AWQ's). `None` for the group-size refusal.
        weight_type: Option<String>,
        /// The types Marlin takes on this device, as the weight-type refusal lists them: none on
        /// a CUDA GPU below Marlin's floor (`query_marlin_supported_quant_types`: compute
        /// capability 8.0 through vLLM 0.13, 7.5 from 0.14); others where the device takes some
        /// but not this one (vLLM's CPU backend: `uint4b8` alone). `None` for the group-size
        /// refusal.
        supported_types: Option<Vec<String>>,
    },
}

/// What the serving capacity model knows about the engine's configuration:
/// the single place its figures plug into the doctor (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityFigures {
    /// The GPU's memory, bytes (per GPU under tensor parallelism).
    pub device_bytes: u64,
    /// Everything the engine holds per GPU outside its KV cache: weights,
    /// the profiled activation peak, CUDA graphs, the CUDA context.
    pub non_kv_bytes: u64,
    /// KV-cache bytes per token of context per GPU, all layers.
    pub kv_bytes_per_token: u64,
    /// The `max_model_len` the capacity model ran at: the error's, else the one the paste's
    /// configuration runs, else the model's own (the engine's default).
    pub max_model_len: u64,
    /// Whether the paste shows that length (its error or its configuration); false where it is
    /// the model's own.
    pub max_model_len_shown: bool,
    /// The tensor-parallel size the capacity model ran at: the paste's configuration's, else 1.
    pub tensor_parallel_size: u64,
    /// Whether the paste shows that size; false where 1 is assumed.
    pub tensor_parallel_shown: bool,
    /// The cheapest single change with which the capacity model starts the engine at the
    /// error's `max_model_len` (`vram_plan::suggest::serving`, the change `vram capacity`
    /// offers too), if one does.
    pub change: Option<CapacityChange>,
    /// The share of the GPU the failed start ran at, where the paste shows it (vLLM's
    /// `gpu_memory_utilization`, SGLang's `mem_fraction_static` from its error or its
    /// configuration): a larger share the capacity model works out at or below it is one the
    /// engine already ran, and is not offered as enough.
    pub failed_share: Option<f64>,
}

/// Why [`CapacityFigures::of`] gave no figures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FiguresError {
    /// The capacity model refused the paste's own settings (its `max_model_len`, TP size or
    /// share) on the model given: settings the user did not type as flags.
    #[error(transparent)]
    Settings(#[from] vram_plan::Error),
    /// The model given is not the paste's: its KV need at the paste's length differs from what
    /// the engine printed by more than the print's rounding and one block.
    #[error("{0}")]
    NotThePastesModel(String),
}

impl CapacityFigures {
    /// Why the capacity model's figures would not be the paste's: the paste is of a vLLM release
    /// whose start-up memory `vram capacity` refuses (`Engine::unmodelled`: 0.27 on), which
    /// [`Self::of`] would otherwise price at vram's default release. `None` for SGLang's errors,
    /// a paste that prints no version, and the releases modelled.
    pub fn unmodelled_release(
        e: &ServingError,
        conf: &crate::profile::EngineConfiguration,
    ) -> Option<String> {
        use vram_plan::capacity::Engine;
        if matches!(
            e,
            ServingError::SglangNotEnoughMemory { .. }
                | ServingError::SglangWeightsLeaveNoKv { .. }
                | ServingError::SglangUnbalancedMemory { .. }
        ) {
            return None;
        }
        let v = conf.engine_version?;
        let why = Engine::Vllm.unmodelled(v)?;
        Some(format!(
            "--model is not used: the paste is vLLM {}.{}.{}'s, a release vram's capacity model \
             refuses ({why}); the answer reads the message and the log's own figures alone",
            v[0], v[1], v[2]
        ))
    }

    /// What `vram capacity` says of `t` on `gpu` under the engine that printed `e` (SGLang for
    /// its two errors, vLLM for the others), at the engine's defaults with the `max_model_len`
    /// vLLM's error names or the `mem_fraction_static` SGLang's names: the device, everything
    /// outside the KV cache (weights, memory outside PyTorch, the profiled activation peak, CUDA
    /// graphs), the KV bytes per token, and, where the model agrees it does not start as it is,
    /// `vram_plan::suggest::serving`'s change. The paste's own configuration `conf`
    /// ([`crate::profile::engine_configuration`]) sets the tensor-parallel size (vLLM's
    /// `tensor_parallel_size=`, SGLang's `tp_size=`), an fp8 quantization and the memory share
    /// it shows, so that the change is never one the engine already runs.
    pub fn of(
        t: &vram_model::arch::Transformer,
        gpu: &vram_model::gpu::Gpu,
        e: &ServingError,
        conf: &crate::profile::EngineConfiguration,
    ) -> Result<Self, FiguresError> {
        use vram_plan::capacity::{self, Engine, Knobs, Quantization};
        let engine = e.engine();
        let knobs = Knobs {
            // The error's own length, else the one the paste's configuration runs (the other
            // errors name none: a change sized at the model's whole context is not the paste's).
            max_model_len: match *e {
                ServingError::VllmMaxSeqLen { max_model_len, .. }
                | ServingError::VllmKvMemory { max_model_len, .. } => Some(max_model_len),
                _ => None,
            }
            .or(conf.max_model_len),
            // SGLang's message names the fraction that failed.
            mem_fraction_static: match *e {
                ServingError::SglangNotEnoughMemory {
                    mem_fraction_static,
                } => mem_fraction_static,
                ServingError::SglangWeightsLeaveNoKv {
                    mem_fraction_static,
                    ..
                } => Some(mem_fraction_static),
                _ => None,
            }
            .or(conf.mem_fraction_static),
            // The paste's own utilization, so that a larger one offered is larger than it.
            gpu_memory_utilization: conf.gpu_memory_utilization,
            tp: conf.tensor_parallel_size.filter(|&n| n > 0).unwrap_or(1),
            quantization: match conf.quantization.as_deref() {
                Some("fp8") => Quantization::Fp8,
                _ => Quantization::None,
            },
            enforce_eager: conf.enforce_eager,
            kv_bytes: conf.kv_cache_fp8.then_some(1),
            max_num_seqs: conf.max_num_seqs.filter(|&n| n > 0),
            driver: conf.driver,
            // The paste's own vLLM release, where it prints one (a refused one never gets here:
            // [`Self::unmodelled_release`]); else vram's default release.
            engine_version: match engine {
                Engine::Vllm => conf.engine_version,
                Engine::Sglang => None,
            },
            ..Knobs::default()
        };
        // The paste shows the engine past its start-up check at its own utilization; where
        // vram's estimate of the memory free at start refuses that share, the figures fall back
        // to the release's default share, and no larger share is offered (vram cannot say by
        // how much the paste's could still grow).
        let (c, knobs, own_share) = match capacity::capacity(t, gpu, engine, &knobs) {
            Ok(c) => (c, knobs, true),
            Err(_) if knobs.gpu_memory_utilization.is_some() => {
                let k = Knobs {
                    gpu_memory_utilization: None,
                    ..knobs
                };
                (capacity::capacity(t, gpu, engine, &k)?, k, false)
            }
            Err(e) => return Err(e.into()),
        };
        // vLLM's KV-memory error prints what one request of max_model_len needs; the model
        // given with --model needs what its KV groups take for that length (the sum vLLM's
        // `check_enough_kv_cache_memory` makes, as `vram capacity` prints it). Where the two
        // disagree beyond the printed figure's rounding (0.005 GiB) and one block per layer at
        // the largest block size (128 tokens, for a `--block-size` the paste does not show),
        // the paste is of another model, or of a KV dtype or parallel layout it does not show:
        // its figures and the model's would be mixed in one remedy.
        if let ServingError::VllmKvMemory {
            max_model_len,
            needed_bytes,
            ..
        } = *e
        {
            let model_needed: u64 = c
                .kv_groups
                .iter()
                .map(|g| g.layers * g.blocks_per_request * g.page_bytes)
                .sum();
            const GIB: f64 = (1u64 << 30) as f64;
            let slack = (0.005 * GIB) as u64 + 128 * capacity::kv_bytes_per_token(t, &knobs);
            if model_needed.abs_diff(needed_bytes) > slack {
                return Err(FiguresError::NotThePastesModel(format!(
                    "--model {}: one request of {max_model_len} tokens needs {:.2} GiB of KV cache at tensor-parallel size {} by the capacity model, where the paste's vLLM needed {:.2} GiB: the paste is of another model, or of a KV-cache dtype or pipeline split it does not show; give --model the model it serves",
                    t.name,
                    model_needed as f64 / GIB,
                    knobs.tp,
                    needed_bytes as f64 / GIB
                )));
            }
        }
        // Where the error says others hold the device, a larger share is the wrong way.
        let others = matches!(
            e,
            ServingError::VllmFreeBelowUtilization { .. }
                | ServingError::VllmFreeBelowEngineBudget { .. }
                | ServingError::VllmProfilingMemoryChanged { .. }
                | ServingError::SglangUnbalancedMemory { .. }
        );
        let change = if c.starts {
            None
        } else if own_share && !others {
            vram_plan::suggest::serving(t, gpu, engine, &knobs)
        } else {
            vram_plan::suggest::serving_without_share(t, gpu, engine, &knobs)
        };
        Ok(CapacityFigures {
            device_bytes: c.total_bytes,
            non_kv_bytes: c
                .weights_bytes
                .saturating_add(c.non_torch_bytes)
                .saturating_add(c.activation_peak_bytes)
                .saturating_add(c.cuda_graph_bytes),
            kv_bytes_per_token: capacity::kv_bytes_per_token(t, &knobs),
            max_model_len: c.max_model_len,
            max_model_len_shown: knobs.max_model_len.is_some(),
            tensor_parallel_size: knobs.tp,
            tensor_parallel_shown: conf.tensor_parallel_size.is_some_and(|n| n > 0),
            change,
            failed_share: match engine {
                Engine::Sglang => knobs.mem_fraction_static,
                _ => conf.gpu_memory_utilization,
            },
        })
    }
}

/// A change that starts the engine, by the capacity model, with what it then holds: the one
/// type of every serving suggestion.
pub use vram_plan::suggest::ServingChange as CapacityChange;

/// A remedy for a serving start-up error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServingRemedy {
    /// The flag (or action) to change.
    pub action: String,
    /// True when, by the figures at hand, it makes the engine start.
    pub enough: bool,
    /// One line with the figures.
    pub detail: String,
}

/// Why the engine could not size its KV cache (`tests/data/messages/CAUSES.md`'s serving
/// table): what took the memory the cache needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServingCause {
    /// The cache exists but one request of `max_model_len` does not fit in it: the
    /// configured context is longer than the memory left holds (vLLM's max-seq-len and
    /// KV-memory errors).
    Context,
    /// Nothing was left for the cache at all: the weights, with the profile run's
    /// activation peak, fill the share of the GPU the engine may use (vLLM's "No available
    /// memory for the cache blocks", SGLang's "Not enough memory").
    Weights,
    /// The memory was taken before the engine started: free memory at start-up is below
    /// the share `gpu_memory_utilization` asks for.
    OtherProcesses,
    /// The cache was sized, but a dummy run's activations did not fit what it left: vLLM V1's
    /// sampler warm-up over `max_num_seqs` rows of logits, after the KV cache and the CUDA
    /// graphs; or, for a hybrid model, the pool holds fewer Mamba state blocks than the
    /// `max_num_seqs` sequences the CUDA graphs are captured for (`mamba.rs`).
    Profile,
    /// Not memory: the checkpoint's quantized layout does not load as the engine's kernel
    /// creates it at this tensor-parallel size (a group size that does not divide a GPU's share,
    /// or channel-wise AWQ's `group_size: -1` that a kernel divides by), or the Marlin kernel
    /// the engine builds for it does not take its group size or the GPU (vLLM 0.22+'s GPTQ below
    /// compute capability 7.5), or the GPU is below the quantization method's minimum compute
    /// capability, which both engines check at start-up.
    QuantLayout,
    /// The message cannot show which: vLLM's `No available memory for the cache blocks` says
    /// only that the budget less what was measured before the cache is not positive. The
    /// weights, the profile run's activation peak, memory outside PyTorch and, in some
    /// releases, other processes all count against that one budget (read at 0.5.5, 0.6.0,
    /// 0.6.3, 0.6.4, 0.6.5, 0.6.6, 0.7.2, 0.8.1, 0.8.5, 0.9.0–0.9.2, 0.10.1, 0.11, 0.14, 0.18,
    /// 0.19: `worker/worker.py`'s and `v1/worker/gpu_worker.py`'s
    /// `determine_*`), and no figure of them is in the message.
    Undetermined,
}

impl ServingError {
    /// What the error is, in words (the first line of the doctor's text and page).
    pub fn headline(&self) -> &'static str {
        match self {
            ServingError::VllmSamplerWarmUp { .. } => {
                "not enough memory for the warm-up after the KV cache"
            }
            ServingError::VllmMambaBlocks { .. } => {
                "fewer Mamba state blocks than max_num_seqs for the CUDA graphs"
            }
            ServingError::LoadNegativeDimension { .. }
            | ServingError::LoadShardNotAligned { .. } => {
                "the checkpoint's quantized weights do not load as configured"
            }
            ServingError::LoadMarlinUnsupported { .. } => {
                "the engine's Marlin kernels do not run this checkpoint here"
            }
            ServingError::LoadQuantCapability { .. } => {
                "the GPU is below the quantization method's compute capability"
            }
            ServingError::VllmPoolerWarmUp { .. } => {
                "not enough memory for the pooler's warm-up after the KV cache"
            }
            ServingError::VllmFreeBelowUtilization {
                cpu_backend: true, ..
            } => "less host memory available than the share asked for",
            ServingError::VllmCpuKvAllocation { .. }
            | ServingError::VllmCpuWorkerFillsReservation { .. } => {
                "not enough host memory for the KV cache"
            }
            ServingError::VllmProfilingMemoryChanged { .. } => {
                "another process released GPU memory during the profile run"
            }
            ServingError::VllmExternalWeightsFillShare { .. } => {
                "the weights another process holds fill the share of the GPU asked for"
            }
            ServingError::VllmFreeBelowEngineBudget { .. } => {
                "less GPU memory free than the share asked for, the held weights aside"
            }
            ServingError::SglangUnbalancedMemory { .. } => {
                "unequal free memory across the tensor-parallel GPUs"
            }
            _ => "not enough memory for the KV cache",
        }
    }

    /// Why no engine could have printed this error's figures, when none could: a line edited by
    /// hand, which the doctor refuses rather than explains. vLLM takes `gpu_memory_utilization`
    /// only in (0, 1] (`CacheConfig`: `Field(default=0.9, gt=0, le=1)` in `vllm/config/cache.py`;
    /// before pydantic, `_verify_args` refused it above 1.0), and prints this error only when
    /// its share exceeds what was free, which no share of 0 or below does.
    pub fn impossible(&self) -> Option<String> {
        match self {
            ServingError::VllmFreeBelowUtilization { utilization, .. }
            | ServingError::VllmExternalWeightsFillShare { utilization, .. }
            | ServingError::VllmFreeBelowEngineBudget { utilization, .. }
                if !(*utilization > 0.0 && *utilization <= 1.0) =>
            {
                Some(format!(
                    "vLLM's start-up error prints gpu_memory_utilization {utilization}, which no vLLM starts with (it takes a share in (0, 1]): a line edited by hand; paste the line vLLM printed"
                ))
            }
            _ => None,
        }
    }

    /// The error's kind, as its JSON names it (`vllm-kv-memory`, `sglang-not-enough-memory`,
    /// ...): what a predicted refusal and a logged one are compared by.
    pub fn kind(&self) -> &'static str {
        match self {
            ServingError::VllmMaxSeqLen { .. } => "vllm-max-seq-len",
            ServingError::VllmKvMemory { .. } => "vllm-kv-memory",
            ServingError::VllmNoCacheMemory { .. } => "vllm-no-cache-memory",
            ServingError::VllmFreeBelowUtilization { .. } => "vllm-free-below-utilization",
            ServingError::VllmExternalWeightsFillShare { .. } => "vllm-external-weights-fill-share",
            ServingError::VllmFreeBelowEngineBudget { .. } => "vllm-free-below-engine-budget",
            ServingError::VllmCpuKvAllocation { .. } => "vllm-cpu-kv-allocation",
            ServingError::VllmCpuWorkerFillsReservation { .. } => {
                "vllm-cpu-worker-fills-reservation"
            }
            ServingError::VllmProfilingMemoryChanged { .. } => "vllm-profiling-memory-changed",
            ServingError::VllmSamplerWarmUp { .. } => "vllm-sampler-warm-up",
            ServingError::VllmPoolerWarmUp { .. } => "vllm-pooler-warm-up",
            ServingError::SglangUnbalancedMemory { .. } => "sglang-unbalanced-memory",
            ServingError::LoadQuantCapability { .. } => "load-quant-capability",
            ServingError::VllmMambaBlocks { .. } => "vllm-mamba-blocks",
            ServingError::SglangNotEnoughMemory { .. } => "sglang-not-enough-memory",
            ServingError::SglangWeightsLeaveNoKv { .. } => "sglang-weights-leave-no-kv",
            ServingError::LoadNegativeDimension { .. } => "load-negative-dimension",
            ServingError::LoadShardNotAligned { .. } => "load-shard-not-aligned",
            ServingError::LoadMarlinUnsupported { .. } => "load-marlin-unsupported",
        }
    }

    /// The engine whose error this is: SGLang's three messages, else vLLM.
    pub fn engine(&self) -> vram_plan::capacity::Engine {
        use vram_plan::capacity::Engine;
        match self {
            ServingError::SglangNotEnoughMemory { .. }
            | ServingError::SglangWeightsLeaveNoKv { .. }
            | ServingError::SglangUnbalancedMemory { .. } => Engine::Sglang,
            _ => Engine::Vllm,
        }
    }

    /// Whether the engine refused over its KV cache's memory (every kind but the load
    /// failures, which no memory figure changes).
    pub fn is_memory(&self) -> bool {
        !matches!(
            self,
            ServingError::LoadNegativeDimension { .. }
                | ServingError::LoadShardNotAligned { .. }
                | ServingError::LoadMarlinUnsupported { .. }
                | ServingError::LoadQuantCapability { .. }
        )
    }

    /// Whether the error is about host memory (vLLM's CPU backend), where no GPU is modelled.
    pub fn on_host(&self) -> bool {
        matches!(
            self,
            ServingError::VllmFreeBelowUtilization {
                cpu_backend: true,
                ..
            } | ServingError::VllmMaxSeqLen {
                cpu_backend: true,
                ..
            } | ServingError::VllmCpuKvAllocation { .. }
                | ServingError::VllmCpuWorkerFillsReservation { .. }
        )
    }
}

/// The doctor's answer for a serving start-up error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServingDiagnosis {
    /// The engine (`vllm`, `sglang`).
    pub engine: &'static str,
    /// What the error is, in words ([`ServingError::headline`]).
    pub headline: &'static str,
    /// The error and its figures.
    pub error: ServingError,
    /// What took the memory the KV cache needed.
    pub cause: ServingCause,
    /// The knob the message names.
    pub knob: &'static str,
    /// What that knob does and why the engine refused, with the figures.
    pub explanation: String,
    /// Remedies, the one that fits as is first.
    pub remedies: Vec<ServingRemedy>,
    /// The capacity model's figures, when given.
    pub capacity: Option<CapacityFigures>,
    /// The model's notes, when a model was given (the caller adds them: what reading it found).
    pub notes: Vec<String>,
    /// The engine's own profiling lines, when the paste holds them ([`crate::profile`]).
    pub profile: Option<StartupProfile>,
}

/// The number in the first `(...)` after `pat`.
pub(crate) fn paren_after(s: &str, pat: &str) -> Option<String> {
    let i = s.find(pat)? + pat.len();
    let rest = &s[i..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    Some(rest[open + 1..close].trim().to_string())
}

pub(crate) fn num(s: &str) -> Option<u64> {
    s.trim().replace(',', "").parse().ok()
}

/// The decimal number right after `key` in `s` (a sentence's closing `.` left out).
fn number_after(s: &str, key: &str) -> Option<f64> {
    let r = s[s.find(key)? + key.len()..].trim_start();
    let end = r
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(r.len());
    r[..end].trim_end_matches('.').parse().ok()
}

/// `F/T unit` (F may be negative, as vLLM's `format_gib` prints a shortfall): F and T, bytes.
fn size_pair(s: &str) -> Option<(i64, u64)> {
    let (f, t) = s.split_once('/')?;
    let unit = t.split_whitespace().nth(1)?;
    let first = signed_size(&format!("{} {unit}", f.trim()))?;
    Some((first, parse_size(t.trim())?))
}

/// A size that may be negative, bytes.
fn signed_size(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let b = i64::try_from(parse_size(rest)?).ok()?;
    Some(if neg { -b } else { b })
}

/// Finds a serving engine's start-up memory error in `text`, if there is one.
///
/// The text is read as PyTorch's message is ([`crate::message::parse`]): each line's log prefixes
/// stripped, the engines' words matched whatever their case (a title or a retyped line quotes them
/// lower-case), and, when the lines joined between words read nothing, the lines joined as they
/// are (a log cut at a fixed terminal width, inside a word).
pub fn parse(text: &str) -> Option<ServingError> {
    parse_flat(&crate::message::flatten(text, " ").to_ascii_lowercase())
        .or_else(|| parse_flat(&crate::message::flatten(text, "").to_ascii_lowercase()))
}

/// Which engine's start-up memory error `text` names, when its words are there but [`parse`] could
/// not read its figures (vLLM's; SGLang's is read without figures): a refusal can then say what it
/// found.
pub(crate) fn named_engine(text: &str) -> Option<&'static str> {
    let flat = crate::message::flatten(text, " ").to_ascii_lowercase();
    let vllm = [
        "can be stored in kv cache",
        "kv cache is needed",
        "no available memory for the cache blocks",
        "less than desired gpu memory utilization",
        "exceeds available mamba cache blocks",
        "less than desired cpu memory utilization",
        "less than requested memory for kv",
        "when warming up pooler",
        "cannot auto-fit max_model_len",
        "error in memory profiling.",
        "of cpu memory reserved for it on node",
    ];
    vllm.iter().any(|p| flat.contains(p)).then_some("vLLM")
}

/// Whether `text` is `vram capacity`'s own refusal of what it does not model (vLLM 0.22's V2
/// model runner, releases from 0.23): vram's words, never an engine's error.
pub(crate) fn is_vram_own(text: &str) -> bool {
    let flat = crate::message::flatten(text, " ").to_ascii_lowercase();
    flat.contains("vram does not model") || flat.contains("memory profile vram models")
}

/// The engines' start-up refusals that are neither memory nor a quantized checkpoint, named so
/// that the doctor's refusal says what they are (`tests/data/messages/ENGINE-TEXTS.md`), each
/// one that `vram capacity` also predicts in these words (`capacity/engine.rs`, `registry.rs`):
/// - vLLM's bfloat16 check (`platforms/cuda.py` and `rocm.py`, 0.10.0–0.23.0) and the attention
///   heads' tensor-parallel divisibility check (`config/model.py` at 0.23.0; in every release
///   read);
/// - vLLM's refusal of a chosen attention backend that cannot run the layers
///   (`CudaPlatform.get_attn_backend_cls`: `Selected backend B is not valid for this
///   configuration. Reason: [...]`, 0.11.2–0.23.0; not in 0.11.0);
/// - SGLang's plain GPTQ method under an MoE layer (`GPTQConfig.get_quant_method`'s
///   `TypeError: GPTQ Method does not support MoE, please use gptq_marlin`, 0.4.10, 0.5.3,
///   0.5.10 read) and its FusedMoE assertion that a method exists (`assert self.quant_method is
///   not None`, the plain AWQ or GPTQ config before that TypeError);
/// - `get_rope`'s refusals of a config's rope scaling (`Unknown RoPE scaling type T`, vLLM
///   0.10.0–0.23.0's `rotary_embedding`; vLLM 0.12–0.16's M-RoPE with YaRN, `'MRotaryEmbedding'
///   object has no attribute 'truncate'`);
/// - a model registry without the config's architecture (`Model architectures [...] are not
///   supported for now.`, vLLM's `models/registry.py`), or naming it as removed: `Model
///   architecture A was supported in vLLM until vX, and is not supported anymore.`
///   (`_PREVIOUSLY_SUPPORTED_MODELS`, 0.10.0 on) and `Model architecture A is not supported
///   in-tree anymore. Please install the plugin at URL` (`_OOT_SUPPORTED_MODELS`, 0.19.0 on).
pub(crate) fn named_refusal(text: &str) -> Option<String> {
    let flat = crate::message::flatten(text, " ").to_ascii_lowercase();
    if flat.contains("bfloat16 is only supported on gpus with compute capability") {
        return Some(
            "this is vLLM's refusal of a bfloat16 model on a GPU below compute capability 8.0, not \
             a memory error: start it with --dtype half (float16), which that GPU runs"
                .into(),
        );
    }
    if flat.contains("must be divisible by tensor parallel size") {
        return Some(
            "this is the engine's configuration check that --tensor-parallel-size divides the \
             attention heads, not a memory error: use a tensor-parallel size that divides them \
             (and pipeline parallelism for the other GPUs)"
                .into(),
        );
    }
    if let Some(i) = flat.find("selected backend ") {
        let rest = &flat[i + "selected backend ".len()..];
        if rest.contains("is not valid for this configuration") {
            // `AttentionBackendEnum.FLASH_ATTN` (0.13+) or `_Backend.FLASH_ATTN`: the member.
            let name = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_ascii_uppercase();
            return Some(format!(
                "this is vLLM's refusal of the attention backend chosen with --attention-backend \
                 (VLLM_ATTENTION_BACKEND to 0.14), not a memory error: {name} cannot run this \
                 model's layers for the reasons it lists; leave the backend unset, and vLLM \
                 picks one that runs them"
            ));
        }
    }
    if flat.contains("gptq method does not support moe") {
        return Some(
            "this is SGLang's refusal of an MoE model under the plain GPTQ method, not a memory \
             error: --quantization gptq_marlin, or none, runs the Marlin MoE method (compute \
             capability 8.0 or newer)"
                .into(),
        );
    }
    if flat.contains("assert self.quant_method is not none") && flat.contains("moe") {
        return Some(
            "this is SGLang's FusedMoE assertion that the quantization config made a method for \
             an MoE layer, which the plain AWQ and GPTQ configs do not, not a memory error: \
             --quantization awq_marlin (gptq_marlin), or none, runs the Marlin MoE method \
             (compute capability 8.0 or newer)"
                .into(),
        );
    }
    if flat.contains("unknown rope scaling type")
        || flat.contains("'mrotaryembedding' object has no attribute 'truncate'")
    {
        return Some(
            "this is the engine's rotary-embedding builder (get_rope) refusing the config's \
             rope_scaling, not a memory error: a release whose get_rope builds that scaling \
             type, or the config's rope_scaling in the form this release reads"
                .into(),
        );
    }
    if flat.contains("model architectures") && flat.contains("are not supported for now") {
        return Some(
            "this is the engine's model registry, which lacks the config's architectures in this \
             release, not a memory error: a release whose registry has them (`vram capacity` \
             with the config names the releases it read that do)"
                .into(),
        );
    }
    if flat.contains("was supported in vllm until") && flat.contains("is not supported anymore") {
        return Some(
            "this is vLLM's model registry, which removed the config's architecture in this \
             release, not a memory error: the release the message names or an older one loads it"
                .into(),
        );
    }
    if flat.contains("is not supported in-tree anymore") {
        return Some(
            "this is vLLM's model registry, which moved the config's architecture out of vLLM \
             into a plugin, not a memory error: the plugin the message names loads it"
                .into(),
        );
    }
    None
}

/// vLLM's start-up memory error the doctor finds but does not diagnose, said as what it is, with
/// the message's own figures: the frontend's multimodal GPU decoding reserve
/// (`mm_ipc_gpu_memory_gb`'s raw frames, plus the hardware decoders' surfaces per API server),
/// carved out of the KV cache's budget after the profile: `frontend multimodal GPU decoding
/// reserves R GiB (F GiB raw-frame budget, D GiB decoder cache budget), but only A GiB is
/// available for the KV cache.` (`v1/worker/gpu_worker.py`, `_reserve_mm_ipc_gpu_memory`,
/// 0.25.0-0.26.0; `multimodal/gpu_ipc_memory.py`, `reserve_mm_ipc_gpu_memory`, 0.27.0-0.33.0,
/// which also names `hw_decoders`). No row of CAUSES.md names its fixes (a smaller reserve, a CPU
/// video backend): the nearest, `serving-profile`, is the profile run's peak or CUDA graphs,
/// which this reserve is not. Its remedies are those the message's figures leave open: a smaller
/// `--mm-ipc-gpu-memory-gb` only where the raw-frame budget is not already 0, a CPU video backend
/// only where the decoders reserve something, each said as enough alone only where it is.
pub(crate) fn unread_memory_error(text: &str) -> Option<String> {
    let flat = crate::message::flatten(text, " ").to_ascii_lowercase();
    let i = flat.find("frontend multimodal gpu decoding reserves ")?;
    let r = &flat[i + "frontend multimodal gpu decoding reserves ".len()..];
    let reserved = r.split(" gib").next()?.trim();
    let available = r
        .split_once("but only ")?
        .1
        .split(" gib is available for the kv cache")
        .next()?
        .trim();
    // The two budgets in the parenthesis (0 or absent reads as none).
    let budget = |name: &str| -> f64 {
        r.split_once(name)
            .and_then(|(b, _)| b.rsplit(['(', ',']).next())
            .and_then(|b| b.trim().trim_end_matches("gib").trim().parse().ok())
            .unwrap_or(0.0)
    };
    let (frames, decoders) = (
        budget(" gib raw-frame budget"),
        budget(" gib decoder cache budget"),
    );
    let avail: f64 = available.parse().ok()?;
    let mut ways = Vec::new();
    if frames > 0.0 {
        ways.push(if decoders < avail {
            format!(
                "--mm-ipc-gpu-memory-gb below {:.2} (the decoders' {decoders:.2} GiB kept)",
                avail - decoders
            )
        } else {
            "a smaller --mm-ipc-gpu-memory-gb (not enough alone: the decoders' reserve already \
             takes it all)"
                .to_string()
        });
    }
    if decoders > 0.0 {
        ways.push(if frames < avail {
            "a CPU video backend (no decoder reserve)".to_string()
        } else {
            "a CPU video backend (not enough alone: the raw frames' budget already takes it all)"
                .to_string()
        });
    }
    ways.push("a larger --gpu-memory-utilization".to_string());
    Some(format!(
        "this is vLLM's (0.25 on) reserve for the frontend's multimodal GPU decoding, \
         {reserved} GiB (raw frames under --mm-ipc-gpu-memory-gb, {frames:.2} GiB, and the \
         hardware decoders' memory per API server where a GPU video backend decodes, \
         {decoders:.2} GiB), taken from what the budget left for the KV cache, {available} GiB, \
         after the profile: the doctor does not diagnose it; {} leaves the cache room",
        ways.join(", or ")
    ))
}

/// Whether `text` is `vram capacity`'s own estimate of an out-of-memory failure (CUDA-graph
/// capture, the budget and the CUDA context, SGLang's KV pool after its request map), marked
/// `(estimated)`: where the engine would print PyTorch's message with its own figures, which vram
/// cannot know.
pub(crate) fn is_vram_estimate(text: &str) -> bool {
    let flat = crate::message::flatten(text, " ").to_ascii_lowercase();
    flat.contains("cuda out of memory") && flat.contains("(estimated")
}

/// [`parse`] on the flattened, lower-cased text.
fn parse_flat(flat: &str) -> Option<ServingError> {
    if flat.contains("larger than the maximum number of tokens that can be stored in kv cache") {
        let max_model_len = num(&paren_after(flat, "max seq len")?)?;
        let kv_tokens = num(&paren_after(flat, "can be stored in kv cache")?)?;
        return Some(ServingError::VllmMaxSeqLen {
            max_model_len,
            kv_tokens,
            cpu_backend: flat.contains("vllm_cpu_kvcache_space"),
        });
    }
    if let Some(i) =
        flat.find("kv cache is needed, which is larger than the available kv cache memory")
    {
        let before = &flat[..i];
        let max_model_len = num(&paren_after(before, "max seq len")?)?;
        // `..., (16.00 GiB ` or `..., 16.00 GiB `: the two words before `KV cache is needed`.
        let words: Vec<&str> = before.split_whitespace().collect();
        let n = words.len();
        let needed = parse_size(&format!(
            "{} {}",
            words.get(n.checked_sub(2)?)?.trim_start_matches('('),
            words.get(n - 1)?
        ))?;
        let after = &flat[i..];
        let available = parse_size(&paren_after(after, "available kv cache memory")?)?;
        let estimated_max_len = after
            .find("estimated maximum model length is ")
            .and_then(|j| {
                let r = &after[j + "estimated maximum model length is ".len()..];
                num(r.split(|c: char| !c.is_ascii_digit()).next()?)
            });
        return Some(ServingError::VllmKvMemory {
            max_model_len,
            needed_bytes: needed,
            available_bytes: available,
            estimated_max_len,
        });
    }
    if let Some(e) = crate::mamba::parse(flat) {
        return Some(e);
    }
    // `--max-model-len auto` (vLLM 0.14.1 to 0.23.0, `kv_cache_utils.py`'s auto-fit): the same
    // finding, no room for even one token of KV cache, in other words.
    if flat.contains("no available memory for the cache blocks")
        || flat.contains("cannot auto-fit max_model_len: not enough gpu memory available")
    {
        let available_bytes = flat.rfind("available kv cache memory: ").and_then(|j| {
            let r = &flat[j + "available kv cache memory: ".len()..];
            let mut w = r.split_whitespace();
            let v = w.next()?;
            let unit = w.next()?.trim_end_matches(['.', ',']);
            let neg = v.starts_with('-');
            let b = parse_size(&format!("{} {unit}", v.trim_start_matches('-')))?;
            let b = i64::try_from(b).ok()?;
            Some(if neg { -b } else { b })
        });
        return Some(ServingError::VllmNoCacheMemory { available_bytes });
    }
    if let Some(i) = flat.find("cuda out of memory occurred when warming up sampler with ") {
        let r = &flat[i + "cuda out of memory occurred when warming up sampler with ".len()..];
        let requests = num(r.split(|c: char| !c.is_ascii_digit()).next()?)?;
        return Some(ServingError::VllmSamplerWarmUp { requests });
    }
    if let Some(i) = flat.find("cuda out of memory occurred when warming up pooler") {
        let r = &flat[i + "cuda out of memory occurred when warming up pooler".len()..];
        let task = r
            .trim_start()
            .strip_prefix("(task=")
            .and_then(|t| t.split_once(')'))
            .map(|(t, _)| t.trim().to_string());
        let n = &r[r.find(" with ")? + " with ".len()..];
        let requests = num(n.split(|c: char| !c.is_ascii_digit()).next()?)?;
        return Some(ServingError::VllmPoolerWarmUp { task, requests });
    }
    // vLLM 0.32+'s check with weights held by another process (`request_memory`, 0.33.0):
    // `Externally held weights on device D (W/T GiB) exceed the desired GPU memory utilization
    // (U, X GiB).` and `Free memory on device D (F/T GiB) on startup is less than the engine's
    // budget after excluding external process's weights (U, E GiB).`
    let share_pair = |s: &str| -> Option<(f64, u64)> {
        let (u, x) = s.split_once(',')?;
        Some((u.trim().parse().ok()?, parse_size(x.trim())?))
    };
    if let Some(i) = flat.find("externally held weights on device ") {
        let (weights, total_bytes) = size_pair(&paren_after(&flat[i..], "weights on device")?)?;
        let (utilization, desired_bytes) =
            share_pair(&paren_after(&flat[i..], "desired gpu memory utilization")?)?;
        return Some(ServingError::VllmExternalWeightsFillShare {
            weights_bytes: u64::try_from(weights).ok()?,
            total_bytes,
            utilization,
            desired_bytes,
        });
    }
    if let Some(i) =
        flat.find("is less than the engine's budget after excluding external process's weights")
    {
        let j = flat[..i].rfind("free memory on device")?;
        let (free, total_bytes) = size_pair(&paren_after(&flat[j..], "free memory on device")?)?;
        let (utilization, engine_bytes) =
            share_pair(&paren_after(&flat[i..], "external process's weights")?)?;
        return Some(ServingError::VllmFreeBelowEngineBudget {
            free_bytes: u64::try_from(free).ok()?,
            total_bytes,
            utilization,
            engine_bytes,
        });
    }
    // `Free memory on device [cuda:0 ](F/T GiB) on startup ... (U, X GiB)`, and the CPU
    // backend's `Available memory on node N (F/T GiB) on startup ... CPU memory utilization`.
    for (check, device, cpu_backend) in [
        (
            "on startup is less than desired gpu memory utilization",
            "free memory on device",
            false,
        ),
        (
            "on startup is less than desired cpu memory utilization",
            "available memory on node",
            true,
        ),
    ] {
        if let Some(i) = flat.find(check) {
            let j = flat[..i].rfind(device)?;
            let (free_bytes, total_bytes) = size_pair(&paren_after(&flat[j..], device)?)?;
            let ut = paren_after(&flat[i..], "memory utilization")?;
            let (u, x) = ut.split_once(',')?;
            return Some(ServingError::VllmFreeBelowUtilization {
                free_bytes: u64::try_from(free_bytes).ok()?,
                total_bytes,
                utilization: u.trim().parse().ok()?,
                desired_bytes: parse_size(x.trim())?,
                cpu_backend,
            });
        }
    }
    if let Some(i) = flat.find("error in memory profiling.") {
        let after = &flat[i..];
        // `... 12.5 GiB` (V1) or a raw byte count (XPU, V0).
        let size = |key: &str| -> Option<u64> {
            let r = after[after.find(key)? + key.len()..].trim_start();
            let v = number_after(r, "")?;
            let gib = r
                .split_whitespace()
                .nth(1)
                .is_some_and(|u| u.trim_end_matches([',', '.']) == "gib");
            let b = if gib { v * (1u64 << 30) as f64 } else { v };
            (0.0..1.8e19).contains(&b).then_some(b.round() as u64)
        };
        let (measure, before, after_key) = if after.contains("initial used memory") {
            ("used", "initial used memory", "currently used memory")
        } else {
            ("free", "initial free memory", "current free memory")
        };
        return Some(ServingError::VllmProfilingMemoryChanged {
            measure,
            before_bytes: size(before)?,
            after_bytes: size(after_key)?,
        });
    }
    if let Some(i) = flat.find("the worker already uses ") {
        let after = &flat[i..];
        if after.contains("of cpu memory reserved for it on node") {
            let gib = |key: &str| {
                let v = number_after(after, key)?;
                (v >= 0.0).then(|| (v * (1u64 << 30) as f64).round() as u64)
            };
            return Some(ServingError::VllmCpuWorkerFillsReservation {
                consumed_bytes: gib("the worker already uses ")?,
                reserved_bytes: gib("more than the ")?,
                minimum_utilization: number_after(after, "--gpu-memory-utilization` to more than "),
            });
        }
    }
    if let Some(i) = flat.find("on kv cache allocation is less than requested memory for kv") {
        let j = flat[..i].rfind("available memory on node")?;
        let (available, total_bytes) =
            size_pair(&paren_after(&flat[j..], "available memory on node")?)?;
        let req = paren_after(&flat[i..], "requested memory for kv")?;
        // `(K/R GiB)` where vLLM sized it from the reserved share, `(K GiB)` where it was set.
        let (requested_kv_bytes, reserved_bytes) = if req.contains('/') {
            let (k, r) = size_pair(&req)?;
            (k, Some(r))
        } else {
            (signed_size(&req)?, None)
        };
        return Some(ServingError::VllmCpuKvAllocation {
            available_bytes: u64::try_from(available).ok()?,
            total_bytes,
            requested_kv_bytes,
            reserved_bytes,
        });
    }
    // vLLM's compressed-tensors and Quark checks passed their text to `RuntimeError` as three
    // strings through 0.28.0 (`compressed_tensors.py`'s `_check_scheme_supported`, `quark.py`'s,
    // read at 0.10.0 and 0.23.0-0.28.0; one string from 0.29.0), as SGLang's copies do
    // (0.4.5.post3, 0.4.6.post5, 0.4.10, 0.5.3, 0.5.10), so Python prints the tuple:
    // `RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min
    // capability: 80. ', 'Current capability: 75.')`. Its pieces are joined back here.
    let joined;
    let flat = if flat.contains("quantization scheme is not supported for ', '") {
        joined = flat.replace("', '", "");
        joined.as_str()
    } else {
        flat
    };
    if let Some(i) = flat.find("is not supported for the current gpu.") {
        let before = &flat[..i];
        let method = before.rfind("the quantization method ").map(|j| {
            before[j + "the quantization method ".len()..]
                .trim()
                .to_string()
        });
        let scheme = before.ends_with("quantization scheme ");
        if method.is_some() || scheme {
            let after = &flat[i..];
            let minimum = after
                .find("minimum capability:")
                .or_else(|| after.find("min capability:"))
                .or_else(|| after.find("required capability:"))?;
            let minimum_capability = number_after(&after[minimum..], "capability:")?;
            let device_capability = number_after(after, "current capability:")?;
            let int = |v: f64| (v >= 0.0 && v.fract() == 0.0 && v < 1e6).then_some(v as u32);
            return Some(ServingError::LoadQuantCapability {
                engine: if flat.contains("sglang") {
                    "sglang"
                } else {
                    "vllm"
                },
                method: method.filter(|m| !m.is_empty()),
                minimum_capability: int(minimum_capability)?,
                device_capability: int(device_capability)?,
            });
        }
    }
    if let Some(i) = flat
        .find("loaded weights leave no gpu memory for the kv cache under --mem-fraction-static=")
    {
        let after = &flat[i..];
        let mem_fraction_static = number_after(after, "--mem-fraction-static=")?;
        // `Load weight end. ... avail mem=A GB, mem usage=U GB.`: the last one before the error.
        let load = flat[..i].rfind("load weight end.").map(|j| &flat[j..i]);
        let gib = |key: &str| {
            let v = number_after(load?, key)?;
            (v >= 0.0).then(|| (v * (1u64 << 30) as f64).round() as u64)
        };
        let available_bytes = gib("avail mem=");
        let weights_bytes = gib("mem usage=");
        let minimum_fraction = number_after(after, "1 - available/pre =").or_else(|| {
            let (a, u) = (available_bytes? as f64, weights_bytes? as f64);
            (a + u > 0.0).then(|| u / (a + u))
        });
        return Some(ServingError::SglangWeightsLeaveNoKv {
            mem_fraction_static,
            minimum_fraction,
            available_bytes,
            weights_bytes,
        });
    }
    // The load failures: the engine is the one the paste names (SGLang first: its 0.4 logs
    // run through vLLM's modules and name both).
    let named = || {
        if flat.contains("sglang") {
            Some("sglang")
        } else if flat.contains("vllm") {
            Some("vllm")
        } else {
            None
        }
    };
    if let Some(i) = flat.find("size is not aligned with the quantized weight shape") {
        let side = if flat[..i].ends_with("output ") {
            "output"
        } else {
            "input"
        };
        return Some(ServingError::LoadShardNotAligned {
            engine: named().unwrap_or("vllm"),
            side,
        });
    }
    if let Some(i) = flat.find("marlin does not support ") {
        let r = &flat[i..];
        let int_after = |key: &str| -> Option<i64> {
            let v = &r[r.find(key)? + key.len()..];
            let end = v
                .char_indices()
                .find(|&(j, c)| !(c.is_ascii_digit() || (j == 0 && c == '-')))
                .map_or(v.len(), |(j, _)| j);
            v[..end].parse().ok()
        };
        if r.starts_with("marlin does not support weight_bits") {
            return Some(ServingError::LoadMarlinUnsupported {
                engine: named().unwrap_or("vllm"),
                group_size: int_after("group_size = "),
                device_capability: int_after("device_capability = ")
                    .and_then(|c| u32::try_from(c).ok()),
                zero_points: r.find("zp = ").and_then(|j| {
                    let v = &r[j + "zp = ".len()..];
                    if v.starts_with("true") {
                        Some(true)
                    } else if v.starts_with("false") {
                        Some(false)
                    } else {
                        None
                    }
                }),
                weight_type: r["marlin does not support weight_bits = ".len()..]
                    .split(['.', ' '])
                    .next()
                    .filter(|t| !t.is_empty())
                    .map(String::from),
                supported_types: r.find("only types = [").and_then(|j| {
                    let v = &r[j + "only types = [".len()..];
                    let list = &v[..v.find(']')?];
                    Some(
                        list.split(',')
                            .map(str::trim)
                            .filter(|t| !t.is_empty())
                            .map(String::from)
                            .collect(),
                    )
                }),
            });
        }
        if r.starts_with("marlin does not support group_size") {
            return Some(ServingError::LoadMarlinUnsupported {
                engine: named().unwrap_or("vllm"),
                group_size: int_after("group_size = "),
                device_capability: None,
                zero_points: None,
                weight_type: None,
                supported_types: None,
            });
        }
    }
    // The channel-wise AWQ failure arises while the engine creates the quantized layer's tensors:
    // vLLM's `AWQLinearMethod`/`AWQMoEMethod.create_weights` (`quantization/awq.py`,
    // `awq_marlin.py`) and SGLang's copies (`srt/layers/quantization/awq.py`) divide by the group
    // size there. A negative dimension elsewhere in an engine's run (SGLang's multi-layer MTP
    // metadata, sgl-project/sglang#22666) is not this failure, so the paste must show that path.
    let creating_quantized_weights =
        flat.contains("create_weights") || flat.contains("quantization/awq");
    if let Some(i) = flat
        .find("trying to create tensor with negative dimension ")
        .filter(|_| creating_quantized_weights)
    {
        if let Some(engine) = named() {
            let r = &flat[i + "trying to create tensor with negative dimension ".len()..];
            let end = r
                .char_indices()
                .find(|&(j, c)| !(c.is_ascii_digit() || (j == 0 && c == '-')))
                .map_or(r.len(), |(j, _)| j);
            return Some(ServingError::LoadNegativeDimension {
                engine,
                dimension: r[..end].parse().ok(),
            });
        }
    }
    // Early SGLang spelled it `Not enought memory`.
    if flat.contains("please try to increase --mem-fraction-static") {
        let mem_fraction_static = flat.find("mem_fraction_static=").and_then(|j| {
            let r = &flat[j + "mem_fraction_static=".len()..];
            r.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .next()?
                .trim_end_matches('.')
                .parse()
                .ok()
        });
        return Some(ServingError::SglangNotEnoughMemory {
            mem_fraction_static,
        });
    }
    // Last: SGLang 0.5.10 logs it as a warning unless SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK is
    // set, so an error above it in the same log is the one that stopped the engine.
    if let Some(i) = flat.find("the memory capacity is unbalanced.") {
        // `min_per_gpu_memory=M, local_gpu_memory=L, ...` (0.5.10: `pre_model_load_memory=M`),
        // GiB as floats.
        let after = &flat[i..];
        let gib = |key: &str| {
            let v = number_after(after, key)?;
            (v >= 0.0).then(|| (v * (1u64 << 30) as f64).round() as u64)
        };
        return Some(ServingError::SglangUnbalancedMemory {
            min_free_bytes: gib("min_per_gpu_memory=").or_else(|| gib("pre_model_load_memory="))?,
            local_free_bytes: gib("local_gpu_memory=")?,
        });
    }
    None
}

/// vLLM's KV-cache block: 16 tokens by default (`--block-size`).
const VLLM_BLOCK: u64 = 16;

fn floor_to(v: u64, m: u64) -> u64 {
    v / m * m
}

fn frac_up(x: f64) -> f64 {
    (x * 100.0).ceil() / 100.0
}

/// The largest `--gpu-memory-utilization`, in hundredths, whose share of `total_bytes` fits in
/// `free_bytes`, with what the KV cache shrinks by against the `desired_bytes` the failed share
/// asked for; none below a hundredth, since vLLM takes a share above 0 only (`CacheConfig`:
/// gt=0).
fn utilization_within_free(
    free_bytes: u64,
    total_bytes: u64,
    desired_bytes: u64,
) -> Option<(f64, u64)> {
    let max_u = (free_bytes as f64 / total_bytes.max(1) as f64 * 100.0).floor() / 100.0;
    (max_u >= 0.01).then(|| {
        let shrink = desired_bytes.saturating_sub((max_u * total_bytes as f64) as u64);
        (max_u, shrink)
    })
}

/// Explains a serving start-up error: the knob it names, what it does, and
/// what to set, with the message's figures and, when given, the capacity
/// model's. [`explain_profiled`] also reads the engine's own profiling lines.
pub fn explain(err: &ServingError, cap: Option<&CapacityFigures>) -> ServingDiagnosis {
    explain_profiled(err, None, cap)
}

/// [`explain`], with the engine's profiling lines from the same paste ([`crate::profile::read`]):
/// when they say what filled the budget, the cause is the part that took the most of it, with
/// the figures, and the remedies are sized from the engine's own measurements.
pub fn explain_profiled(
    err: &ServingError,
    profile: Option<&StartupProfile>,
    cap: Option<&CapacityFigures>,
) -> ServingDiagnosis {
    let mut d = explain_message(err, cap);
    // The profiling lines are a GPU's: a host-memory error (vLLM's CPU backend) keeps its own.
    if let Some(p) = profile.filter(|_| err.is_memory() && !err.on_host()) {
        apply_profile(&mut d, err, p);
    }
    d
}

/// Drops from `d` the remedies that the paste's own configuration (`conf`,
/// [`crate::profile::engine_configuration`]) shows the engine already runs, and returns a note
/// for each: no CUDA graphs (`--enforce-eager`, SGLang's `--disable-cuda-graph`), an fp8 KV
/// cache, the quantization method, a tensor-parallel size no larger than the one it runs, a
/// `max_num_seqs` no smaller, and a larger share of the GPU no larger than the one that failed
/// (for every error but free memory below the share, whose remedy is a smaller one).
pub fn drop_already_made(
    d: &mut ServingDiagnosis,
    conf: &crate::profile::EngineConfiguration,
) -> Vec<String> {
    let lower_share = matches!(
        d.error,
        ServingError::VllmFreeBelowUtilization { .. }
            | ServingError::VllmFreeBelowEngineBudget { .. }
    );
    let value = |a: &str, flags: &[&str]| {
        flags.iter().find_map(|f| {
            a.strip_prefix(f)?
                .strip_prefix(' ')?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
    };
    let made = |a: &str| -> Option<String> {
        if conf.enforce_eager
            && (a.starts_with("--enforce-eager") || a.starts_with("--disable-cuda-graph"))
        {
            return Some("runs without CUDA graphs".into());
        }
        if conf.kv_cache_fp8 && a.starts_with("--kv-cache-dtype fp8") {
            return Some("runs an fp8 KV cache".into());
        }
        if let Some(q) = conf.quantization.as_deref() {
            if a.strip_prefix("--quantization ") == Some(q) {
                return Some(format!("runs quantization {q}"));
            }
        }
        if let (Some(n), Some(tp)) = (
            value(a, &["--tensor-parallel-size", "--tp-size"]),
            conf.tensor_parallel_size,
        ) {
            if n <= tp as f64 {
                return Some(format!("runs tensor-parallel size {tp}"));
            }
        }
        if let (Some(n), Some(m)) = (value(a, &["--max-num-seqs"]), conf.max_num_seqs) {
            if n >= m as f64 {
                return Some(format!("runs max_num_seqs {m}"));
            }
        }
        for (flag, share) in [
            ("--gpu-memory-utilization", conf.gpu_memory_utilization),
            ("--mem-fraction-static", conf.mem_fraction_static),
        ] {
            if let (Some(v), Some(u)) = (value(a, &[flag]), share) {
                if !lower_share && v <= u {
                    return Some(format!("ran at {} {u}, and failed", &flag[2..]));
                }
            }
        }
        None
    };
    let mut notes = Vec::new();
    // vLLM makes the Mamba-blocks check only when the graph mode has whole-forward graphs
    // (`resolve_cudagraph_mode_and_sizes`, `config/compilation.py`, 0.20.0-0.23.0), and
    // `enforce_eager` sets the mode to NONE (`VllmConfig.__post_init__`): a run configured as
    // pasted does not raise it, so the graph-mode changes are no remedy for it.
    let graphs_moot = matches!(d.error, ServingError::VllmMambaBlocks { .. })
        && conf.full_cudagraphs() == Some(false);
    if graphs_moot {
        let piecewise = vram_plan::capacity::CudagraphMode::Piecewise.compilation_config_flag();
        let before = d.remedies.len();
        d.remedies
            .retain(|r| r.action != piecewise && !r.action.starts_with("--enforce-eager"));
        if d.remedies.len() < before {
            let mode = if conf.enforce_eager {
                "enforce_eager (vLLM then sets the CUDA-graph mode to NONE)".to_string()
            } else {
                format!(
                    "CUDA-graph mode {}",
                    conf.cudagraph_mode.as_deref().unwrap_or("NONE")
                )
            };
            notes.push(format!(
                "`{piecewise}` and `--enforce-eager` are not offered: the pasted configuration runs {mode}, a mode without whole-forward graphs, and vLLM makes this check only with them; a run configured as pasted does not raise this error, so the configuration and the error come from different runs (a restart with other flags, another engine in the log). For the run that raised it, lower --max-num-seqs or raise the utilization as above"
            ));
        }
    }
    d.remedies.retain(|r| match made(&r.action) {
        Some(why) => {
            notes.push(format!(
                "`{}` is not offered: the pasted configuration {why}",
                r.action
            ));
            false
        }
        None => true,
    });
    notes
}

fn explain_message(err: &ServingError, cap: Option<&CapacityFigures>) -> ServingDiagnosis {
    let hb = human_bytes;
    let mut remedies = Vec::new();
    let (engine, knob, explanation) = match *err {
        ServingError::VllmMaxSeqLen {
            max_model_len,
            kv_tokens,
            cpu_backend,
        } => {
            let fits = floor_to(kv_tokens, VLLM_BLOCK);
            remedies.push(ServingRemedy {
                action: format!("--max-model-len {fits}"),
                enough: fits > 0,
                detail: format!(
                    "the KV cache holds {kv_tokens} tokens, so one request of up to {fits} tokens (a multiple of the 16-token block) fits with the memory as it is"
                ),
            });
            let grow = format!(
                "the cache must grow {:.2}x (from {kv_tokens} to {max_model_len} tokens)",
                max_model_len as f64 / kv_tokens.max(1) as f64
            );
            if cpu_backend {
                // The message names the CPU backend's knob: host memory, no GPU to model.
                remedies.push(ServingRemedy {
                    action: "raise VLLM_CPU_KVCACHE_SPACE".into(),
                    enough: false,
                    detail: format!("{grow}; as long as that host memory is free"),
                });
                (
                    "vllm",
                    "VLLM_CPU_KVCACHE_SPACE / max_model_len",
                    format!(
                        "vLLM's CPU backend gives its KV cache VLLM_CPU_KVCACHE_SPACE GiB of host memory; that holds {kv_tokens} tokens, fewer than the {max_model_len} of one request at max_model_len, so it refuses to start"
                    ),
                )
            } else {
                remedies.push(raise_utilization(cap, max_model_len, grow));
                (
                    "vllm",
                    "gpu_memory_utilization / max_model_len",
                    format!(
                        "vLLM gives its KV cache what is left of gpu_memory_utilization × the GPU's memory after the weights and the profiled activation peak; that holds {kv_tokens} tokens, fewer than the {max_model_len} of one request at max_model_len, so it refuses to start"
                    ),
                )
            }
        }
        ServingError::VllmKvMemory {
            max_model_len,
            needed_bytes,
            available_bytes,
            estimated_max_len,
        } => {
            let per_token = needed_bytes as f64 / max_model_len.max(1) as f64;
            let fits = estimated_max_len.unwrap_or_else(|| {
                floor_to(
                    (available_bytes as f64 / per_token.max(1.0)) as u64,
                    VLLM_BLOCK,
                )
            });
            remedies.push(ServingRemedy {
                action: format!("--max-model-len {fits}"),
                enough: fits > 0,
                detail: format!(
                    "{} of KV cache at {:.0} bytes per token ({} / {max_model_len} tokens) holds {fits} tokens{}",
                    hb(available_bytes),
                    per_token,
                    hb(needed_bytes),
                    if estimated_max_len.is_some() { ", vLLM's own estimate" } else { "" }
                ),
            });
            let mut r = raise_utilization(
                cap,
                max_model_len,
                format!(
                    "the KV cache needs {} more",
                    hb(needed_bytes.saturating_sub(available_bytes))
                ),
            );
            if cap.is_none() {
                r.detail = format!(
                    "raise it by at least {} divided by the GPU's memory, as long as that memory is free",
                    hb(needed_bytes.saturating_sub(available_bytes))
                );
            }
            remedies.push(r);
            (
                "vllm",
                "gpu_memory_utilization / max_model_len",
                format!(
                    "vLLM needs room in its KV cache for one whole request of max_model_len ({max_model_len} tokens: {}), but what is left of gpu_memory_utilization × the GPU's memory after the weights and the profiled activation peak is {}",
                    hb(needed_bytes),
                    hb(available_bytes)
                ),
            )
        }
        ServingError::VllmNoCacheMemory { available_bytes } => {
            let short = available_bytes.filter(|&b| b < 0).map(|b| b.unsigned_abs());
            let r = match cap {
                // Past this error the engine checks that one request of max_model_len fits the
                // cache (V1's `check_enough_kv_cache_memory`, V0's `raise_if_cache_size_invalid`),
                // so a share that leaves one block is not enough to start.
                Some(c) => raise_utilization(
                    cap,
                    c.max_model_len,
                    format!(
                        "the cache must then hold one request of max_model_len{}, as vLLM checks next",
                        if c.max_model_len_shown { "" } else { " (the model's own: the paste shows none)" }
                    ),
                ),
                None => ServingRemedy {
                    action: "raise --gpu-memory-utilization".into(),
                    enough: false,
                    detail: match short {
                        Some(s) => format!(
                            "the profiler found the cache {} short: raise it by at least {} / the GPU's memory, as long as that memory is free",
                            hb(s),
                            hb(s)
                        ),
                        None => "by how much the message cannot show: the log's `Available KV cache memory: -X GiB` (V1 from 0.9.1) or V0's memory-profiling line says how far short".into(),
                    },
                },
            };
            remedies.push(r);
            remedies.push(ServingRemedy {
                action: "shrink what precedes the cache: --max-num-batched-tokens or --max-num-seqs (the profiled activation peak), quantized weights, or --tensor-parallel-size".into(),
                enough: false,
                detail: "each lowers the memory taken before the KV cache is sized".into(),
            });
            remedies.push(ServingRemedy {
                action: "stop what else holds the GPU (another vLLM instance, a trainer) before the start".into(),
                enough: false,
                detail: "vLLM 0.6.4 and V1 0.7.2–0.9.0 measure the device's whole use, so another process's memory counts against gpu_memory_utilization's share; other releases leave it out of the budget (V1 from 0.9.1 refuses with `Free memory on device ...` instead)".into(),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "vLLM gives its KV cache gpu_memory_utilization × the GPU's memory less what it measured before the cache: the weights, the profile run's activation peak and memory outside PyTorch (NCCL buffers, library workspaces); in vLLM 0.6.4 and V1 0.7.2–0.9.0 also what other processes hold on the GPU, and from 0.18 with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 the CUDA graphs' estimate. Nothing was left{}. The message prints none of those figures, so it cannot show which of them took the room. The start-up log lines before it tell them apart: `Model loading took X GiB` (V0 before 0.8: `Loading model weights took X GB`), the weights; in V0 from 0.6.5, `the current vLLM instance can use total_gpu_memory (T) x gpu_memory_utilization (U) = B` and `model weights take W; non_torch_memory takes N; PyTorch activation peak memory takes A`; in 0.6.4, `Memory profiling results: ... initial_memory_usage=... peak_torch_memory=... non_torch_memory=...` (the initial use beyond the weights is other processes'); in V1 from 0.9.1, `Available KV cache memory: -X GiB` says how far short, and VLLM_LOGGING_LEVEL=DEBUG prints the profile's parts; before 0.9.1, `nvidia-smi` before the start shows other processes",
                    match available_bytes {
                        Some(b) if b < 0 => format!(" (the profiler's `Available KV cache memory` was {} short)", hb(b.unsigned_abs())),
                        Some(b) => format!(" (`Available KV cache memory`: {})", hb(b as u64)),
                        None => String::new(),
                    }
                ),
            )
        }
        ServingError::VllmFreeBelowUtilization {
            free_bytes,
            total_bytes,
            utilization,
            desired_bytes,
            cpu_backend: true,
        } => {
            // Below a hundredth free, only freeing the node is left.
            remedies.extend(utilization_within_free(free_bytes, total_bytes, desired_bytes).map(|(max_u, shrink)| ServingRemedy {
                action: format!("--gpu-memory-utilization {max_u:.2}"),
                enough: true,
                detail: format!(
                    "on the CPU backend this flag is the share of the NUMA node's host memory reserved for the worker: {} available of {}, so at most {max_u:.2} can be asked for (the KV cache shrinks by {})",
                    hb(free_bytes),
                    hb(total_bytes),
                    hb(shrink)
                ),
            }));
            remedies.push(ServingRemedy {
                action: "stop what holds the node's memory (other processes, a previous instance of the server)".into(),
                enough: true,
                detail: format!(
                    "{} of the node's memory was in use before vLLM started",
                    hb(total_bytes.saturating_sub(free_bytes))
                ),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "vLLM's CPU backend reserves gpu_memory_utilization of the NUMA node's host memory (despite the flag's name): {utilization} × {} = {}, but only {} was available at start-up",
                    hb(total_bytes),
                    hb(desired_bytes),
                    hb(free_bytes)
                ),
            )
        }
        ServingError::VllmCpuKvAllocation {
            available_bytes,
            total_bytes,
            requested_kv_bytes,
            reserved_bytes,
        } => {
            let asked = hb(requested_kv_bytes.unsigned_abs());
            match reserved_bytes {
                Some(r) if requested_kv_bytes <= 0 => {
                    remedies.push(ServingRemedy {
                        action: "raise --gpu-memory-utilization".into(),
                        enough: false,
                        detail: format!(
                            "the worker already holds {} (its resident memory: the weights and the runtime) of the {} reserved; the reservation must exceed that by the KV cache wanted, within the {} available",
                            hb(r.saturating_add(requested_kv_bytes.unsigned_abs())),
                            hb(r),
                            hb(available_bytes)
                        ),
                    });
                    remedies.push(ServingRemedy {
                        action: "a smaller model or lower-precision weights".into(),
                        enough: false,
                        detail: "less resident memory leaves the reservation room for the KV cache"
                            .into(),
                    });
                }
                Some(r) => {
                    remedies.push(ServingRemedy {
                        action: "stop what holds the node's memory (other processes)".into(),
                        enough: true,
                        detail: format!(
                            "the KV cache asks {asked} (the {} reserved less what the worker holds), and only {} of the node's {} was available",
                            hb(r),
                            hb(available_bytes),
                            hb(total_bytes)
                        ),
                    });
                    remedies.push(ServingRemedy {
                        action: "lower --gpu-memory-utilization".into(),
                        enough: false,
                        detail: format!(
                            "the reservation less the worker's own memory must fit the {} available",
                            hb(available_bytes)
                        ),
                    });
                }
                None => {
                    remedies.push(ServingRemedy {
                        action: format!(
                            "set --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE) to at most {}",
                            hb(available_bytes)
                        ),
                        enough: true,
                        detail: format!(
                            "{asked} was asked and {} was available",
                            hb(available_bytes)
                        ),
                    });
                    remedies.push(ServingRemedy {
                        action: "stop what holds the node's memory (other processes)".into(),
                        enough: false,
                        detail: format!(
                            "{} of the node's {} was in use",
                            hb(total_bytes.saturating_sub(available_bytes)),
                            hb(total_bytes)
                        ),
                    });
                }
            }
            (
                "vllm",
                match reserved_bytes {
                    Some(_) => "gpu_memory_utilization",
                    None => "kv_cache_memory_bytes / VLLM_CPU_KVCACHE_SPACE",
                },
                match reserved_bytes {
                    Some(r) => format!(
                        "vLLM's CPU backend gives its KV cache the {} it reserves (gpu_memory_utilization of the node's host memory) less what the worker already holds: {}{asked}, which {}",
                        hb(r),
                        if requested_kv_bytes < 0 { "-" } else { "" },
                        if requested_kv_bytes <= 0 {
                            "leaves nothing: the worker's own memory (the weights) fills the reservation".to_string()
                        } else {
                            format!("is more than the {} the node had available: other processes hold the rest", hb(available_bytes))
                        }
                    ),
                    None => format!(
                        "vLLM's CPU backend was asked for a {asked} KV cache (--kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE), more than the {} of host memory the node had available",
                        hb(available_bytes)
                    ),
                },
            )
        }
        ServingError::VllmCpuWorkerFillsReservation {
            consumed_bytes,
            reserved_bytes,
            minimum_utilization,
        } => {
            remedies.push(ServingRemedy {
                action: match minimum_utilization {
                    Some(m) => format!("raise --gpu-memory-utilization above {m}"),
                    None => "raise --gpu-memory-utilization".into(),
                },
                enough: false,
                detail: format!(
                    "the reservation must exceed the worker's {} by the KV cache wanted, within what the node has available",
                    hb(consumed_bytes)
                ),
            });
            remedies.push(ServingRemedy {
                action: "set --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE)".into(),
                enough: false,
                detail: "a KV cache of the size set, no longer the reservation less the worker's memory, as long as the node has it available".into(),
            });
            remedies.push(ServingRemedy {
                action: "a smaller model or lower-precision weights".into(),
                enough: false,
                detail: "less resident memory leaves the reservation room for the KV cache".into(),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "vLLM's CPU backend gives its KV cache the {} it reserves (gpu_memory_utilization of the node's host memory) less what the worker already holds, {} (its resident memory: the weights and the runtime), which leaves nothing: the worker's own memory fills the reservation",
                    hb(reserved_bytes),
                    hb(consumed_bytes)
                ),
            )
        }
        ServingError::VllmProfilingMemoryChanged {
            measure,
            before_bytes,
            after_bytes,
        } => {
            let (rose, by) = if measure == "free" {
                (
                    after_bytes > before_bytes,
                    after_bytes.saturating_sub(before_bytes),
                )
            } else {
                (
                    after_bytes < before_bytes,
                    before_bytes.saturating_sub(after_bytes),
                )
            };
            remedies.push(ServingRemedy {
                action: "start vLLM once the GPU's other processes are settled (a previous instance fully exited), or give it a GPU of its own".into(),
                enough: true,
                detail: "vLLM sizes its KV cache from the change in the GPU's memory across its profile run, assuming no other process changes its usage meanwhile".into(),
            });
            (
                "vllm",
                "the GPU's other processes",
                format!(
                    "vLLM measures the GPU's {measure} memory before and after its profile run and refuses when the run appears to have freed memory: {measure} memory went from {} to {}{}. Another process on the GPU released memory while vLLM was starting (a previous instance exiting, a process in the same container)",
                    hb(before_bytes),
                    hb(after_bytes),
                    if rose {
                        format!(" ({} released)", hb(by))
                    } else {
                        String::new()
                    }
                ),
            )
        }
        ServingError::VllmPoolerWarmUp { ref task, requests } => {
            remedies.push(ServingRemedy {
                action: format!("lower --max-num-seqs below {requests}"),
                enough: false,
                detail: format!(
                    "the warm-up runs the pooler over {requests} dummy requests beside the KV cache and the CUDA graphs; fewer need less"
                ),
            });
            remedies.push(ServingRemedy {
                action: "lower --gpu-memory-utilization".into(),
                enough: false,
                detail: "the KV cache is sized inside that share of the GPU; what is left beyond it (less the CUDA graphs) is what the warm-up runs in".into(),
            });
            (
                "vllm",
                "max_num_seqs",
                format!(
                    "vLLM V1 warms a pooling model's pooler up{} after allocating the KV cache and capturing the CUDA graphs: a dummy run over {requests} requests must fit what they left of the device, and did not",
                    task.as_ref().map(|t| format!(" (task {t})")).unwrap_or_default()
                ),
            )
        }
        ServingError::SglangUnbalancedMemory {
            min_free_bytes,
            local_free_bytes,
        } => {
            remedies.push(ServingRemedy {
                action: "stop what holds memory on the GPU with the least free (another process, a previous instance)".into(),
                enough: true,
                detail: format!(
                    "one rank had {} free against this rank's {}: below 0.9 × it, so something outside SGLang holds {} more on that GPU",
                    hb(min_free_bytes),
                    hb(local_free_bytes),
                    hb(local_free_bytes.saturating_sub(min_free_bytes))
                ),
            });
            remedies.push(ServingRemedy {
                action: "CUDA_VISIBLE_DEVICES naming only free GPUs".into(),
                enough: true,
                detail: "the check compares the ranks' free memory before loading; equal free memory passes it".into(),
            });
            (
                "sglang",
                "the GPUs' free memory",
                format!(
                    "SGLang checks at tensor parallelism above 1 that every GPU has at least 0.9 × this rank's free memory before loading; the least free had {} against {}: other processes hold memory on that GPU",
                    hb(min_free_bytes),
                    hb(local_free_bytes)
                ),
            )
        }
        ServingError::LoadQuantCapability {
            engine,
            ref method,
            minimum_capability,
            device_capability,
        } => {
            let cc = |c: u32| format!("{}.{}", c / 10, c % 10);
            let what = method
                .as_ref()
                .map_or("the checkpoint's quantization scheme".to_string(), |m| {
                    format!("the {m} method")
                });
            remedies.push(ServingRemedy {
                action: format!(
                    "a GPU of compute capability {} or newer",
                    cc(minimum_capability)
                ),
                enough: true,
                detail: format!(
                    "{what} asks for {} (get_min_capability() = {minimum_capability}); this GPU is {}",
                    cc(minimum_capability),
                    cc(device_capability)
                ),
            });
            remedies.push(ServingRemedy {
                action: "a checkpoint in a quantization this GPU takes, or the unquantized model".into(),
                enough: false,
                detail: "each method has its own minimum (in vLLM 0.23: GGUF 6.0, bitsandbytes 7.0, AWQ and FP8 7.5); the memory it then needs is another question".into(),
            });
            (
                engine,
                "quantization",
                format!(
                    "not a memory error: the engine checks at start-up that the GPU's compute capability ({}) reaches {what}'s minimum ({}), and it does not",
                    cc(device_capability),
                    cc(minimum_capability)
                ),
            )
        }
        ServingError::VllmFreeBelowUtilization {
            free_bytes,
            total_bytes,
            utilization,
            desired_bytes,
            cpu_backend: false,
        } => {
            // Below a hundredth of the GPU free, no share vLLM takes fits what is free
            // (vllm-omni#276's 0.00).
            remedies.extend(utilization_within_free(free_bytes, total_bytes, desired_bytes).map(|(max_u, shrink)| ServingRemedy {
                action: format!("--gpu-memory-utilization {max_u:.2}"),
                enough: true,
                detail: format!(
                    "{} free of {}: at most {max_u:.2} of the GPU can be asked for (the KV cache shrinks by {})",
                    hb(free_bytes),
                    hb(total_bytes),
                    hb(shrink)
                ),
            }));
            remedies.push(ServingRemedy {
                action: "stop what holds the rest of the GPU (another process, a previous instance of the server)".into(),
                enough: true,
                detail: format!("{} of the GPU was in use before vLLM started", hb(total_bytes.saturating_sub(free_bytes))),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "gpu_memory_utilization is a share of the whole GPU: {utilization} × {} = {}, but only {} was free at start-up",
                    hb(total_bytes),
                    hb(desired_bytes),
                    hb(free_bytes)
                ),
            )
        }
        ServingError::VllmExternalWeightsFillShare {
            weights_bytes,
            total_bytes,
            utilization,
            desired_bytes,
        } => {
            // The share must pass the held weights before anything is left for the engine's
            // own memory; a share above 1 is none vLLM takes.
            let above = share_above(weights_bytes, total_bytes);
            if above <= 1.0 {
                remedies.push(ServingRemedy {
                    action: format!("raise --gpu-memory-utilization above {above:.2}"),
                    enough: false,
                    detail: format!(
                        "the held weights alone are {} of the GPU's {}; the engine's own memory (the profile run's peak, CUDA graphs, the KV cache) needs the share past them",
                        hb(weights_bytes),
                        hb(total_bytes)
                    ),
                });
            }
            remedies.push(ServingRemedy {
                action: "more GPUs (--tensor-parallel-size) or a quantized checkpoint".into(),
                enough: false,
                detail: "each GPU then holds fewer bytes of weights inside the same share".into(),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "from 0.32 vLLM counts the weights another process holds on the GPU for it (the model loader's external weights) inside gpu_memory_utilization × the GPU: {utilization} × {} = {}, and those weights, {}, fill it, leaving nothing for the engine's own memory",
                    hb(total_bytes),
                    hb(desired_bytes),
                    hb(weights_bytes)
                ),
            )
        }
        ServingError::VllmFreeBelowEngineBudget {
            free_bytes,
            total_bytes,
            utilization,
            engine_bytes,
        } => {
            // The held weights W = ceil(U × T) - E; the check passes when ceil(U' × T) - W is
            // at most what is free, so the share may rise to (F + W) / T.
            let desired = (utilization * total_bytes as f64).ceil() as u64;
            let held = desired.saturating_sub(engine_bytes);
            remedies.extend(utilization_within_free(free_bytes + held, total_bytes, desired).map(|(max_u, shrink)| ServingRemedy {
                action: format!("--gpu-memory-utilization {max_u:.2}"),
                enough: true,
                detail: format!(
                    "{} free of {}, besides the {} of held weights the share counts: at most {max_u:.2} of the GPU can be asked for (the engine's own memory shrinks by {})",
                    hb(free_bytes),
                    hb(total_bytes),
                    hb(held),
                    hb(shrink)
                ),
            }));
            remedies.push(ServingRemedy {
                action: "stop what holds the rest of the GPU (another process, a previous instance of the server)".into(),
                enough: true,
                detail: format!(
                    "{} of the GPU was in use before vLLM started beyond the {} of held weights",
                    hb(total_bytes.saturating_sub(free_bytes).saturating_sub(held)),
                    hb(held)
                ),
            });
            (
                "vllm",
                "gpu_memory_utilization",
                format!(
                    "from 0.32, with weights another process holds on the GPU for it, vLLM asks at start-up for gpu_memory_utilization × the GPU less those weights: {utilization} × {} - {} = {}, but only {} was free at start-up",
                    hb(total_bytes),
                    hb(held),
                    hb(engine_bytes),
                    hb(free_bytes)
                ),
            )
        }
        ServingError::SglangNotEnoughMemory {
            mem_fraction_static,
        } => {
            let r = match cap {
                Some(c) => sglang_fraction_by_capacity(c),
                None => ServingRemedy {
                    action: format!(
                        "raise --mem-fraction-static{}",
                        mem_fraction_static
                            .map(|v| format!(" above {v}"))
                            .unwrap_or_default()
                    ),
                    enough: false,
                    detail: "until the static pool holds the weights plus a KV pool; the rest of the GPU is left for activations and CUDA graphs, so going too high moves the failure to run time".into(),
                },
            };
            remedies.push(r);
            remedies.push(sglang_shrink_weights());
            (
                "sglang",
                "mem_fraction_static",
                format!(
                    "mem_fraction_static{} is the share of the GPU memory free at start-up that SGLang's static pool takes, the weights and the KV cache together (its profile: what is free after loading less (1 - mem_fraction_static) of what was free before goes to the KV pool); after the weights, the KV pool got no tokens. The fix is to raise it",
                    mem_fraction_static.map(|v| format!(" ({v})")).unwrap_or_default()
                ),
            )
        }
        ServingError::VllmSamplerWarmUp { requests } => {
            remedies.push(ServingRemedy {
                action: format!("lower --max-num-seqs below {requests}"),
                enough: false,
                detail: format!(
                    "the warm-up runs the sampler over one row of logits (vocabulary wide, fp32) per dummy request, {requests} of them, beside the KV cache and the CUDA graphs; fewer rows need proportionally less"
                ),
            });
            remedies.push(ServingRemedy {
                action: "lower --gpu-memory-utilization".into(),
                enough: false,
                detail: "the KV cache is sized inside that share of the GPU; what is left of the device beyond it (less the CUDA graphs) is what the warm-up runs in, so a smaller share leaves it more and the KV cache less".into(),
            });
            (
                "vllm",
                "max_num_seqs",
                format!(
                    "vLLM V1 warms the sampler up after allocating the KV cache and capturing the CUDA graphs (compile_or_warm_up_model): a dummy forward and sampler over {requests} requests must fit what the budget's KV cache and the graphs left of the device, and did not"
                ),
            )
        }
        ServingError::VllmMambaBlocks {
            max_num_seqs,
            blocks,
        } => {
            let (knob, explanation, r) = crate::mamba::explain(max_num_seqs, blocks);
            remedies = r;
            ("vllm", knob, explanation)
        }
        ServingError::SglangWeightsLeaveNoKv {
            mem_fraction_static,
            minimum_fraction,
            available_bytes,
            weights_bytes,
        } => {
            // What was free before loading: free after it plus what loading took (the
            // `Load weight end` line), else free after it over 1 - the printed minimum.
            let pre = match (available_bytes, weights_bytes, minimum_fraction) {
                (Some(a), Some(u), _) => Some(a.saturating_add(u)),
                (Some(a), None, Some(m)) if m < 1.0 => Some((a as f64 / (1.0 - m)) as u64),
                _ => None,
            };
            match minimum_fraction {
                Some(m) => {
                    // SGLang prints the minimum rounded up to three decimals as the floor.
                    let floor = (m * 1000.0).ceil() / 1000.0;
                    remedies.push(ServingRemedy {
                        action: format!("raise --mem-fraction-static above {floor:.3}"),
                        enough: false,
                        detail: match pre {
                            Some(p) => format!(
                                "at {m:.4} the KV pool is empty; each 0.01 above it adds {} of KV pool, and the {} × (1 − fraction) left outside the static pool is what activations and CUDA graphs run in, so a fraction near 1 moves the failure to run time",
                                hb((p as f64 * 0.01) as u64),
                                hb(p)
                            ),
                            None => "at that fraction the KV pool is empty; the higher the fraction, the less is left outside the static pool for activations and CUDA graphs".into(),
                        },
                    });
                }
                None => remedies.push(ServingRemedy {
                    action: format!("raise --mem-fraction-static above {mem_fraction_static}"),
                    enough: false,
                    detail: "until the static pool holds the weights plus a KV pool; the rest of the GPU is left for activations and CUDA graphs, so going too high moves the failure to run time".into(),
                }),
            }
            if let Some(c) = cap {
                remedies.push(sglang_fraction_by_capacity(c));
            }
            remedies.push(sglang_shrink_weights());
            (
                "sglang",
                "mem_fraction_static",
                format!(
                    "SGLang gives the KV pool what is free after loading the weights less (1 − mem_fraction_static) of what was free before{}; at mem_fraction_static {mem_fraction_static} that is nothing: loading took{} more than {mem_fraction_static} of the memory free before it{}",
                    match pre {
                        Some(p) => format!(" ({})", hb(p)),
                        None => String::new(),
                    },
                    match weights_bytes {
                        Some(u) => format!(" {},", hb(u)),
                        None => String::new(),
                    },
                    match minimum_fraction {
                        Some(m) => format!(" (the smallest fraction that leaves the KV pool anything is {m:.4})"),
                        None => String::new(),
                    }
                ),
            )
        }
        ServingError::LoadNegativeDimension { engine, dimension } => {
            remedies.push(ServingRemedy {
                action: "a checkpoint quantized with a group size (128) instead of channel-wise (group_size: -1)".into(),
                enough: true,
                detail: "every AWQ method of either engine sizes its scales and zeros by whole groups".into(),
            });
            remedies.push(ServingRemedy {
                action: "for a dense (non-MoE) model on compute capability 8.0 or newer: --quantization awq_marlin (vLLM)".into(),
                enough: false,
                detail: "vLLM's AWQ-Marlin linear takes -1 as the whole input; its MoE method divides by it at every version read (0.6.4–0.22), and the plain AWQ kernel from 0.9.1 loads it at TP 1 only".into(),
            });
            (
                engine,
                "quantization_config.group_size",
                format!(
                    "not a memory error: the engine sized a quantized tensor by dividing by the checkpoint's group size and got a negative dimension{}. A channel-wise AWQ checkpoint's group_size -1 does this in vLLM's AWQ-Marlin MoE method (hidden_size // -1, every version read) and its plain AWQ method before 0.9.1, and in SGLang's copies of them; a checkpoint with another group size that does this is not described here",
                    dimension.map(|d| format!(" ({d})")).unwrap_or_default()
                ),
            )
        }
        ServingError::LoadShardNotAligned { engine, side } => {
            remedies.push(ServingRemedy {
                action: "a --tensor-parallel-size that divides the split dimension's groups (e.g. intermediate_size / group_size), or --pipeline-parallel-size for the other GPUs".into(),
                enough: true,
                detail: format!(
                    "each GPU's share of a {} linear's {side} must be a whole number of quantization groups; pipeline parallelism splits layers, not linears",
                    if side == "input" { "row-parallel" } else { "column-parallel" }
                ),
            });
            remedies.push(ServingRemedy {
                action: "a checkpoint with a smaller group size (64), or one padded so that the split is whole".into(),
                enough: false,
                detail: "a channel-wise checkpoint (group_size -1) has one group per input row from vLLM 0.9.1's plain AWQ kernel on, which no TP above 1 splits; the Marlin kernel (--quantization awq_marlin on compute capability 8.0 or newer) loads it".into(),
            });
            (
                engine,
                "--tensor-parallel-size / quantization_config.group_size",
                format!(
                    "not a memory error: the quantized weights' {side} dimension, split over the tensor-parallel GPUs, is not a whole number of quantization groups on each, so the engine's quantized linear refuses to create it (a group size that does not divide the GPU's share, or a channel-wise checkpoint whose group is the whole input)"
                ),
            )
        }
        ServingError::LoadMarlinUnsupported {
            engine,
            group_size,
            device_capability,
            zero_points,
            ref weight_type,
            ref supported_types,
        } => {
            let group = group_size.map_or("its".into(), |g| g.to_string());
            // The weight-type refusal below Marlin's 7.5 floor (vLLM 0.14+; 8.0 before) is the
            // GPU's; with the device taking some types, or at 7.5-7.9 (the 8.0 floor through
            // 0.13), it is what the listed types say, never the group size.
            let no_types = supported_types.as_ref().is_some_and(|t| t.is_empty());
            let below_floor =
                device_capability.filter(|&c| c < 75 && (no_types || supported_types.is_none()));
            let explanation = match below_floor {
                None if weight_type.is_some() => {
                    let ty = weight_type.as_deref().unwrap_or("its type");
                    let on = device_capability.map_or("on this device".to_string(), |c| {
                        format!(
                            "on this GPU (device_capability {c}, i.e. compute capability {}.{})",
                            c / 10,
                            c % 10
                        )
                    });
                    if no_types {
                        remedies.push(ServingRemedy {
                            action: "a GPU of compute capability 8.0 or newer (Ampere and later)".into(),
                            enough: true,
                            detail: "Marlin's weight types are returned from device capability 80 on in every release read (0.10-0.23), from 75 on in vLLM 0.14 and later".into(),
                        });
                        remedies.push(ServingRemedy {
                            action: "vLLM 0.14 or later".into(),
                            enough: false,
                            detail: "its Marlin types start at compute capability 7.5 (8.0 through 0.13); the quantization method's own minimum capability is checked too".into(),
                        });
                        format!(
                            "not a memory error: vLLM's Marlin kernels support no weight type {on} in this release (Marlin's types start at compute capability 8.0 through vLLM 0.13, 7.5 from 0.14), and a Marlin method was built for the checkpoint's {ty}, which checks this at start-up (verify_marlin_supported)"
                        )
                    } else {
                        let listed = supported_types
                            .as_ref()
                            .map_or(String::new(), |t| t.join(", "));
                        remedies.push(ServingRemedy {
                            action: format!("a checkpoint in a weight type Marlin takes {on} ({listed})"),
                            enough: true,
                            detail: "the refusal lists the types query_marlin_supported_quant_types returns for this device; the group size is checked only after the type".into(),
                        });
                        format!(
                            "not a memory error: vLLM's Marlin kernels take the weight types {listed} {on}, not the checkpoint's {ty}; a Marlin method was built for it, which checks this at start-up (verify_marlin_supported)"
                        )
                    }
                }
                // A zero-point (AWQ) Marlin method: not the GPTQ path.
                Some(c) if zero_points == Some(true) => {
                    remedies.push(ServingRemedy {
                        action: "a GPU of compute capability 7.5 or newer (Turing, e.g. a T4, and later)".into(),
                        enough: true,
                        detail: "Marlin's zero-point type (uint4) is returned from device capability 75 on (vLLM 0.14 and later; 80 before)".into(),
                    });
                    format!(
                        "not a memory error: vLLM's Marlin kernels support no weight type on this GPU (device_capability {c}, i.e. compute capability {}.{}, below 7.5), and a zero-point (AWQ) Marlin method was built for the checkpoint, which checks this at start-up (verify_marlin_supported)",
                        c / 10,
                        c % 10
                    )
                }
                Some(c) => {
                    remedies.push(ServingRemedy {
                        action: "vLLM 0.21 or earlier, where a GPTQ checkpoint falls back to the plain GPTQ kernel on this GPU".into(),
                        enough: true,
                        detail: "through 0.21 gptq_marlin is chosen only where check_marlin_supported passes, and GPTQLinearMethod takes compute capability 6.0 or newer at any group size".into(),
                    });
                    remedies.push(ServingRemedy {
                        action: "a GPU of compute capability 7.5 or newer (Turing, e.g. a T4, and later)".into(),
                        enough: true,
                        detail: "Marlin's GPTQ types (uint4b8, uint8b128) are returned from device capability 75 on (vLLM 0.14 and later; 80 before)".into(),
                    });
                    format!(
                        "not a memory error: vLLM's Marlin kernels support no weight type on this GPU (device_capability {c}, i.e. compute capability {}.{}, below 7.5), and a Marlin method was built for the checkpoint; from vLLM 0.22 every GPTQ checkpoint runs on AutoGPTQConfig (--quantization gptq, gptq_marlin or none), whose linear method checks this at start-up (verify_marlin_supported in AutoGPTQLinearMethod.__init__)",
                        c / 10,
                        c % 10
                    )
                }
                None => {
                    remedies.push(ServingRemedy {
                        action: "a checkpoint quantized at group size 128 (or 32, 64, or channel-wise -1)".into(),
                        enough: true,
                        detail: "MARLIN_SUPPORTED_GROUP_SIZES is [-1, 32, 64, 128] in every release read (0.10–0.23)".into(),
                    });
                    remedies.push(ServingRemedy {
                        action: "vLLM 0.21 or earlier for this checkpoint, which runs it on the plain GPTQ kernel".into(),
                        enough: true,
                        detail: "through 0.21 gptq_marlin is chosen only where check_marlin_supported passes; GPTQLinearMethod takes any group size".into(),
                    });
                    format!(
                        "not a memory error: vLLM's Marlin kernels take group sizes -1, 32, 64 and 128, and the checkpoint's is {group}; from vLLM 0.22 every GPTQ checkpoint runs on AutoGPTQConfig (--quantization gptq, gptq_marlin or none), whose linear method checks this at start-up (verify_marlin_supported in AutoGPTQLinearMethod.__init__)"
                    )
                }
            };
            (
                engine,
                "GPU compute capability / quantization_config.group_size",
                explanation,
            )
        }
    };
    // The capacity model's cheapest change, second: after what fits with the memory as it is
    // (a shorter length, a larger fraction), before the generic advice.
    // Where other processes hold the device (the free-memory check at start, the profile's
    // change in free memory, SGLang's unbalanced ranks), the check fails the same whatever the
    // change: it is what the start needs past that check, at the settings the capacity model ran
    // (named), not this error's fix. SGLang's unbalanced check runs only above TP 1, so figures at
    // the TP 1 assumed where the paste shows none are of another start, and none is offered.
    let others = matches!(
        err,
        ServingError::VllmFreeBelowUtilization { .. }
            | ServingError::VllmFreeBelowEngineBudget { .. }
            | ServingError::VllmProfilingMemoryChanged { .. }
            | ServingError::SglangUnbalancedMemory { .. }
    );
    let of_another_start = matches!(err, ServingError::SglangUnbalancedMemory { .. })
        && cap.is_some_and(|c| !c.tensor_parallel_shown);
    if let Some((c, ch)) = cap
        .filter(|_| !of_another_start)
        .and_then(|c| c.change.as_ref().map(|ch| (c, ch)))
    {
        let remedy = ServingRemedy {
            action: ch.flags.clone(),
            enough: !others,
            detail: format!(
                "{} at max_model_len {}: {} tokens of KV cache, {:.2} requests of that length at once{} (vram capacity)",
                if others {
                    format!(
                        "not this error's fix (what other processes hold fails the same check whatever this changes); past that check, at tensor-parallel size {}{}, the capacity model does not start it, and starts it with this change alone",
                        c.tensor_parallel_size,
                        if c.tensor_parallel_shown { "" } else { " (assumed: the paste shows none)" }
                    )
                } else {
                    "the capacity model starts it with this change alone".to_string()
                },
                ch.max_model_len,
                ch.kv_cache_tokens,
                ch.max_concurrency,
                ch.bound
                    .as_ref()
                    .map(|b| format!("; within {b}"))
                    .unwrap_or_default()
            ),
        };
        // A larger share of the device (`--gpu-memory-utilization 0.95`): the capacity model's
        // figure, decided by its whole start and bounded by the engine's start-up check, takes
        // the place of the message's own arithmetic for the same flag rather than stand beside it.
        // Every such remedy for the flag gives way to it (one figure a flag), but for a floor
        // the engine printed (`raise --mem-fraction-static above 0.710`), which it keeps.
        let flag = ch.flags.split(' ').next().unwrap_or_default();
        let floor = format!("raise {flag} above ");
        let same = |r: &ServingRemedy| {
            ch.bound.is_some()
                && !flag.is_empty()
                && r.action.contains(flag)
                && !r.action.starts_with("lower")
                && !r.action.starts_with(&floor)
        };
        match remedies.iter().position(same) {
            Some(i) => {
                remedies[i] = remedy;
                let mut k = 0;
                remedies.retain(|r| {
                    k += 1;
                    k - 1 == i || !same(r)
                });
            }
            None => remedies.insert(1.min(remedies.len()), remedy),
        }
    }
    let cause = match err {
        ServingError::VllmMaxSeqLen { .. } | ServingError::VllmKvMemory { .. } => {
            ServingCause::Context
        }
        ServingError::VllmNoCacheMemory { .. } => ServingCause::Undetermined,
        ServingError::SglangNotEnoughMemory { .. }
        | ServingError::SglangWeightsLeaveNoKv { .. } => ServingCause::Weights,
        ServingError::VllmFreeBelowUtilization { .. }
        | ServingError::VllmFreeBelowEngineBudget { .. }
        | ServingError::VllmProfilingMemoryChanged { .. }
        | ServingError::SglangUnbalancedMemory { .. } => ServingCause::OtherProcesses,
        // The weights, held by another process for this one, fill the share
        // (CAUSES.md's `serving-weights`: the weights leave no room at all).
        ServingError::VllmExternalWeightsFillShare { .. } => ServingCause::Weights,
        // Auto-sized from the reservation: nothing left of it means the worker's own memory
        // filled it; a positive request above what the node had means others hold the rest.
        // Set outright, the message cannot say which.
        ServingError::VllmCpuKvAllocation {
            requested_kv_bytes,
            reserved_bytes,
            ..
        } => match reserved_bytes {
            Some(_) if *requested_kv_bytes <= 0 => ServingCause::Weights,
            Some(_) => ServingCause::OtherProcesses,
            None => ServingCause::Undetermined,
        },
        ServingError::VllmCpuWorkerFillsReservation { .. } => ServingCause::Weights,
        ServingError::VllmSamplerWarmUp { .. }
        | ServingError::VllmPoolerWarmUp { .. }
        | ServingError::VllmMambaBlocks { .. } => ServingCause::Profile,
        ServingError::LoadNegativeDimension { .. }
        | ServingError::LoadShardNotAligned { .. }
        | ServingError::LoadMarlinUnsupported { .. }
        | ServingError::LoadQuantCapability { .. } => ServingCause::QuantLayout,
    };
    ServingDiagnosis {
        engine,
        headline: err.headline(),
        error: err.clone(),
        cause,
        knob,
        explanation,
        remedies,
        capacity: cap.cloned(),
        notes: Vec::new(),
        profile: None,
    }
}

/// SGLang's fraction by the capacity model: the static pool holds the weights and the KV pool,
/// and at least one token's worth of KV must remain.
fn sglang_fraction_by_capacity(c: &CapacityFigures) -> ServingRemedy {
    fraction_by_capacity(
        c,
        c.kv_bytes_per_token,
        "--mem-fraction-static",
        "the weights and what else the static pool holds",
        "fraction",
    )
}

/// The engine's memory fraction (`flag`) that holds what precedes the KV cache (`holds`, the
/// capacity model's `non_kv_bytes`) and `min_kv` bytes of cache (one block or one token), or a
/// remedy that says no `knob` is enough when that exceeds the whole GPU.
fn fraction_by_capacity(
    c: &CapacityFigures,
    min_kv: u64,
    flag: &str,
    holds: &str,
    knob: &str,
) -> ServingRemedy {
    let need = c.non_kv_bytes.saturating_add(min_kv);
    let enough = need <= c.device_bytes;
    let r = ServingRemedy {
        action: if enough {
            format!(
                "{flag} {:.2}",
                frac_up(need as f64 / c.device_bytes.max(1) as f64)
            )
        } else {
            format!("raise {flag}")
        },
        enough,
        detail: format!(
            "the capacity model puts {holds} at {} on a {} GPU{}",
            human_bytes(c.non_kv_bytes),
            human_bytes(c.device_bytes),
            if enough {
                String::new()
            } else {
                format!(": more than the whole GPU, no {knob} is enough")
            }
        ),
    };
    above_failed(r, c, flag)
}

/// `r`, a share `flag` the capacity model works out, unless it is at or below the share the
/// failed start ran at ([`CapacityFigures::failed_share`]): the engine already ran that and it
/// did not start, so the model's estimate of what precedes the cache is short there, and the
/// remedy becomes a larger share than the one that failed, not enough by itself.
fn above_failed(r: ServingRemedy, c: &CapacityFigures, flag: &str) -> ServingRemedy {
    let value = r
        .action
        .strip_prefix(flag)
        .and_then(|v| v.trim().parse::<f64>().ok());
    match (value, c.failed_share) {
        (Some(v), Some(f)) if v <= f => ServingRemedy {
            action: format!("raise {flag} above {f}"),
            enough: false,
            detail: format!(
                "{}, which gives {v:.2}: at or below the {f} this start failed at, so the estimate is short of what the engine used here; how much more it needs, the engine's own profiling lines say",
                r.detail
            ),
        },
        _ => r,
    }
}

/// SGLang's other way out: less weight per GPU.
fn sglang_shrink_weights() -> ServingRemedy {
    ServingRemedy {
        action: "shrink the weights (a quantized checkpoint) or spread them (--tp-size)".into(),
        enough: false,
        detail: "leaves more of the static pool to the KV cache".into(),
    }
}

/// Raising vLLM's `gpu_memory_utilization` for one request of `max_model_len`.
fn raise_utilization(
    cap: Option<&CapacityFigures>,
    max_model_len: u64,
    why: String,
) -> ServingRemedy {
    match cap {
        Some(c) => {
            let need = c
                .non_kv_bytes
                .saturating_add(c.kv_bytes_per_token.saturating_mul(max_model_len));
            let u = frac_up(need as f64 / c.device_bytes.max(1) as f64);
            let r = utilization_remedy(
                u,
                format!(
                    "{why}: {} outside the cache + {max_model_len} tokens × {} per token = {} of the {} GPU (capacity model){}",
                    human_bytes(c.non_kv_bytes),
                    human_bytes(c.kv_bytes_per_token),
                    human_bytes(need),
                    human_bytes(c.device_bytes),
                    if u > 1.0 { ", more than the whole GPU: no utilization is enough" } else { "" }
                ),
            );
            above_failed(r, c, "--gpu-memory-utilization")
        }
        None => ServingRemedy {
            action: "raise --gpu-memory-utilization".into(),
            enough: false,
            detail: format!("{why}; as long as that memory is free on the GPU"),
        },
    }
}

/// The remedy that sets `--gpu-memory-utilization` to `u` (hundredths, rounded up): the figure
/// while it is at most the whole device, enough only up to 0.99 (vLLM keeps the rest for other
/// uses); above the device, "raise" with `detail` saying no utilization is enough.
pub(crate) fn utilization_remedy(u: f64, detail: String) -> ServingRemedy {
    ServingRemedy {
        action: if u <= 1.0 {
            format!("--gpu-memory-utilization {u:.2}")
        } else {
            "raise --gpu-memory-utilization".into()
        },
        enough: u <= 0.99,
        detail,
    }
}

/// The smallest share of the device, in hundredths, strictly above `need / total`: the
/// utilization that leaves the cache something.
fn share_above(need: u64, total: u64) -> f64 {
    let x = need as f64 / total.max(1) as f64;
    let u = frac_up(x);
    if u * total as f64 <= need as f64 {
        u + 0.01
    } else {
        u
    }
}

/// What the profile's parts are called in a sentence.
fn part_words(p: Part) -> &'static str {
    match p {
        Part::Weights => "the weights",
        Part::Activation => "the profile run's activation peak",
        Part::OutsidePytorch => "memory outside PyTorch that grew during the profile (NCCL buffers and library workspaces, or what another process on the GPU took meanwhile: vLLM measures the whole device against its baseline)",
        Part::CudaGraphs => "the CUDA graphs' estimate",
        Part::Others => "memory in use before the profile beyond the weights (other processes and the CUDA context)",
        Part::Rest => "everything but the weights (the activation peak and memory outside PyTorch; in V1 0.7.2–0.9.0 also other processes)",
    }
}

/// The profile's figures in one sentence: the budget, each part, and what was left.
fn profile_sentence(p: &StartupProfile) -> String {
    let hb = human_bytes;
    let opt = |b: Option<u64>| b.map(hb);
    let mut parts = Vec::new();
    let low = p.supplied.as_ref().and_then(|s| s.budget_low_bytes);
    if let (Some(s), Some(t), Some(b)) = (&p.supplied, p.total_bytes, p.budget_bytes) {
        // Which figures are not the log's, said where they are used.
        let total = match &s.catalog_gpu {
            Some(g) => format!(
                "{}, the catalog's {g} as PyTorch reports it (the log prints no total)",
                hb(t)
            ),
            None => hb(t),
        };
        let util = match (p.utilization, s.default_utilization.as_slice()) {
            (Some(u), _) => format!("{u}"),
            (None, [u]) => format!(
                "{u}, vLLM {}'s default (the log prints no utilization)",
                p.engine_version
                    .map(|v| format!("{}.{}.{}", v[0], v[1], v[2]))
                    .unwrap_or_default()
            ),
            (None, d) => format!(
                "{} to {}, vLLM's defaults by release (the log prints neither the utilization nor the version)",
                d.first().copied().unwrap_or(0.0),
                d.last().copied().unwrap_or(0.0)
            ),
        };
        parts.push(match low {
            Some(l) => format!("a budget of {} to {} ({total} × {util})", hb(l), hb(b)),
            None => format!("a budget of {} ({total} × {util})", hb(b)),
        });
    } else if let (Some(t), Some(u), Some(b)) = (p.total_bytes, p.utilization, p.budget_bytes) {
        parts.push(format!("a budget of {} ({} × {u})", hb(b), hb(t)));
    } else if let Some(b) = p.budget_bytes {
        parts.push(format!("a budget of {}", hb(b)));
    }
    if let Some(w) = opt(p.weights_bytes) {
        parts.push(if p.rocm {
            format!("weights {w} (on ROCm vLLM measures loading by the device's whole use: the allocator's reserve and any other process's change during loading count in it)")
        } else {
            format!("weights {w}")
        });
    }
    match (p.activation_bytes, p.non_torch_bytes) {
        (Some(a), Some(n)) => parts.push(format!(
            "activation peak {}, outside PyTorch {}{}",
            hb(a),
            hb(n),
            if p.layout == ProfileLayout::VllmV0Early {
                " (0.6.4's figure: every process's memory outside this one's PyTorch)"
            } else {
                ""
            }
        )),
        (Some(a), None) => parts.push(format!("activation peak {}", hb(a))),
        _ => {
            if let Some(prof) = p
                .parts()
                .and_then(|v| v.into_iter().find(|&(q, _)| q == Part::Rest))
            {
                // At the smallest supplied budget the rest is that much less.
                let from = low
                    .zip(p.budget_bytes)
                    .map(|(l, b)| format!("{} to ", hb(prof.1.saturating_sub(b - l))))
                    .unwrap_or_default();
                parts.push(format!(
                    "the rest before the cache {from}{} (activation peak and memory outside PyTorch; in V1 0.7.2–0.9.0 also other processes)",
                    hb(prof.1)
                ));
            }
        }
    }
    if let Some(o) = p
        .others_bytes
        .filter(|_| p.layout == ProfileLayout::VllmV0Early)
    {
        parts.push(format!(
            "in use before the profile beyond the weights {} (other processes and the CUDA context)",
            hb(o)
        ));
    }
    if let Some(g) = p.cuda_graph_bytes {
        parts.push(format!(
            "CUDA graphs' estimate {}{}",
            hb(g),
            if p.cuda_graphs_counted {
                " (counted: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)"
            } else {
                " (not counted in the budget)"
            }
        ));
    }
    if let Some(k) = p.kv_bytes {
        parts.push(if k < 0 {
            format!("the KV cache {} short", hb(k.unsigned_abs()))
        } else {
            format!("{} left for the KV cache", hb(k as u64))
        });
    }
    format!("The engine's own profile: {}", parts.join("; "))
}

/// Reads the engine's profile into the diagnosis: the figures into the explanation, the cause
/// from the part that took the most of the budget (vLLM's bare "no available memory", whose
/// message alone cannot tell), and remedies sized from the engine's measurements.
fn apply_profile(d: &mut ServingDiagnosis, err: &ServingError, p: &StartupProfile) {
    let hb = human_bytes;
    d.profile = Some(p.clone());
    if p.layout == ProfileLayout::Sglang {
        sglang_profile(d, err, p);
        return;
    }
    let sentence = profile_sentence(p);
    d.explanation = if let ServingError::VllmNoCacheMemory { .. } = err {
        // The message-only text says the message cannot tell the parts apart; these lines can.
        format!("vLLM gives its KV cache gpu_memory_utilization × the GPU's memory less what it measured before the cache, and nothing was left. {sentence}")
    } else {
        format!("{}. {sentence}", d.explanation)
    };
    let total = p.total_bytes;
    let non_kv = p
        .non_kv_bytes()
        .or_else(|| p.parts().map(|v| v.iter().map(|&(_, b)| b).sum()));
    match *err {
        ServingError::VllmNoCacheMemory { .. } => {
            let short = p.kv_bytes.map(|k| if k < 0 { k.unsigned_abs() } else { 0 });
            let mut remedies = Vec::new();
            // Past this error the engine checks that one request of max_model_len fits the cache
            // (V0's `raise_if_cache_size_invalid`, V1's `check_enough_kv_cache_memory`): a remedy
            // that leaves the cache something is enough only where that request is sized, by the
            // capacity model's KV bytes per token at its max_model_len.
            let request = d
                .capacity
                .as_ref()
                .map(|c| c.kv_bytes_per_token.saturating_mul(c.max_model_len));
            let next_check = match request {
                Some(q) => format!(
                    "; one request of max_model_len, which vLLM checks next, needs {} of cache (capacity model)",
                    hb(q)
                ),
                None => "; vLLM then checks that one request of max_model_len fits the cache, which these lines do not size (--model and --gpu size it)".to_string(),
            };
            // A budget from supplied figures yields to the capacity model's own, when given.
            let measured = p.supplied.is_none() || d.capacity.is_none();
            if let (Some(t), Some(x), true, Some(c)) = (total, non_kv, measured, &d.capacity) {
                // With the model, the cache must also hold one request of max_model_len, which
                // the engine checks next: one block of cache is not a start.
                let need = c.kv_bytes_per_token.saturating_mul(c.max_model_len);
                let u = frac_up((x + need) as f64 / t.max(1) as f64);
                remedies.push(utilization_remedy(
                    u,
                    format!(
                        "the engine measured {} before the cache; with {} of cache for one request of max_model_len ({} tokens{}), which vLLM checks next, that is {} of the {} device{}",
                        hb(x),
                        hb(need),
                        c.max_model_len,
                        if c.max_model_len_shown { "" } else { ", the model's own: the paste shows none" },
                        hb(x + need),
                        hb(t),
                        if u > 1.0 { ", more than the whole GPU: no utilization is enough" } else { "" }
                    ),
                ));
            } else if let (Some(t), Some(x), true) = (total, non_kv, measured) {
                let u = share_above(x, t);
                let mut r = utilization_remedy(
                    u,
                    format!(
                        "the budget must hold the {} measured before the cache and a cache: {} / {} = {:.4} of the device; each 0.01 above it adds {} of KV cache, as long as that share of the device is free at start-up{}",
                        hb(x),
                        hb(x),
                        hb(t),
                        x as f64 / t as f64,
                        hb(t / 100),
                        if u > 1.0 { "; more than the whole GPU, no utilization is enough".to_string() } else { next_check.clone() }
                    ),
                );
                r.enough = false;
                remedies.push(r);
            }
            if let Some((part, bytes)) = p.largest() {
                let parts = p.parts().unwrap_or_default();
                let rest: u64 = parts
                    .iter()
                    .filter(|&&(q, _)| q != Part::Weights)
                    .map(|&(_, b)| b)
                    .sum();
                let budget = p.budget_bytes;
                let cause = match part {
                    Part::Weights => Some(ServingCause::Weights),
                    Part::Activation | Part::CudaGraphs => Some(ServingCause::Profile),
                    Part::OutsidePytorch | Part::Others => Some(ServingCause::OtherProcesses),
                    Part::Rest => None,
                };
                if let Some(c) = cause {
                    d.cause = c;
                    // The message-only advice gives way to the measured part's; the capacity
                    // model's change stays.
                    d.remedies.retain(|r| r.detail.contains("(vram capacity)"));
                }
                let short_words = short
                    .filter(|&s| s > 0)
                    .map(|s| format!("; the cache is {} short", hb(s)))
                    .unwrap_or_default();
                match part {
                    Part::Weights => {
                        // The fewest GPUs per copy whose share of the weights, with the rest
                        // as measured, leaves the budget something.
                        let k = budget.and_then(|b| {
                            [2u64, 4, 8].into_iter().find(|k| bytes / k + rest < b)
                        });
                        // Without the log's size, the capacity model's change to a tensor-parallel
                        // size (from the size it assumed) says the same as `×k`, in absolute terms.
                        let capacity_tp = d.remedies.iter().any(|r| {
                            r.detail.contains("(vram capacity)")
                                && r.action.starts_with("--tensor-parallel-size ")
                        });
                        if !(k.is_some() && p.tensor_parallel_size.is_none() && capacity_tp) {
                        remedies.push(ServingRemedy {
                            action: match (k, p.tensor_parallel_size) {
                                (Some(k), Some(tp)) => format!("--tensor-parallel-size {}", tp * k),
                                (Some(k), None) => format!("--tensor-parallel-size ×{k} (the weights over {k} times as many GPUs)"),
                                (None, _) => "--tensor-parallel-size (more GPUs) or a smaller checkpoint".into(),
                            },
                            // The request at the present size bounds the one over more GPUs.
                            enough: k.is_some_and(|k| {
                                request.is_some_and(|q| {
                                    budget.unwrap_or(0).saturating_sub(bytes / k + rest) >= q
                                })
                            }),
                            detail: match k {
                                Some(k) => format!(
                                    "{} of weights per GPU instead of {}, with the rest as measured ({}), leaves {} of the {} budget for the cache{}; NCCL's buffers grow with the GPUs",
                                    hb(bytes / k),
                                    hb(bytes),
                                    hb(rest),
                                    hb(budget.unwrap_or(0).saturating_sub(bytes / k + rest)),
                                    hb(budget.unwrap_or(0)),
                                    match request {
                                        Some(q) => format!("; one request of max_model_len, which vLLM checks next, needs at most {} of it (capacity model, at the present size)", hb(q)),
                                        None => next_check.clone(),
                                    }
                                ),
                                None => format!("the weights take {} of the budget{short_words}", hb(bytes)),
                            },
                        });
                        }
                        remedies.push(ServingRemedy {
                            action: match &p.quantization {
                                Some(q) => format!("a checkpoint with fewer bits per weight than this {q} one, or a smaller model"),
                                None => "a quantized checkpoint (fewer bytes per weight)".into(),
                            },
                            enough: false,
                            detail: format!("the weights take {}{short_words}", hb(bytes)),
                        });
                    }
                    Part::Activation => remedies.push(ServingRemedy {
                        action: "lower --max-num-batched-tokens (and --max-num-seqs; --limit-mm-per-prompt for a multimodal model)".into(),
                        enough: false,
                        detail: format!(
                            "the profile run's {} activation peak scales with the tokens and images one step batches{}",
                            hb(bytes),
                            short.filter(|&s| s > 0).map(|s| format!("; it must shrink by more than the {} the cache is short", hb(s))).unwrap_or_default()
                        ),
                    }),
                    Part::CudaGraphs => remedies.push(ServingRemedy {
                        action: "--enforce-eager (or VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)".into(),
                        enough: short.is_some_and(|s| request.is_some_and(|q| bytes > s + q)),
                        detail: format!("drops the CUDA graphs' {} estimate from the budget{short_words}{next_check}", hb(bytes)),
                    }),
                    Part::OutsidePytorch | Part::Others => remedies.push(ServingRemedy {
                        action: "stop what else holds or takes memory on the GPU (another server, a trainer, co-resident models) before the start".into(),
                        enough: short.is_some_and(|s| request.is_some_and(|q| bytes > s + q)),
                        detail: format!(
                            "{} of it counted against gpu_memory_utilization's share{short_words}{next_check}",
                            hb(bytes)
                        ),
                    }),
                    Part::Rest => {}
                }
                d.explanation = format!(
                    "{}. Of the budget, {} took the most: {}{}",
                    d.explanation,
                    part_words(part),
                    hb(bytes),
                    if part == Part::Rest {
                        "; which of them, the message and these lines cannot show (VLLM_LOGGING_LEVEL=DEBUG prints the profile's parts)"
                    } else {
                        ""
                    }
                );
            }
            if p.largest().is_none() {
                d.explanation = format!(
                    "{}. Which part took the room these lines cannot show: {}",
                    d.explanation,
                    if p.budget_bytes.is_none() {
                        // `--gpu` completes a V1 budget only beside the printed weights and cache
                        // (`StartupProfile::supply_device`), so the sentence names both lines.
                        "the budget is not printed (V1 prints it, and the profile's parts, with VLLM_LOGGING_LEVEL=DEBUG; V0 from 0.6.5 in its `model weights take` line; with V1's `Model loading took` and `Available KV cache memory` lines both pasted, naming the GPU, --gpu, gives its total)"
                    } else if p.supplied.is_some() {
                        "with the supplied figures, the weights and the rest are too close to tell apart, or each default utilization names a different one (VLLM_LOGGING_LEVEL=DEBUG prints the budget and the profile's parts)"
                    } else {
                        "the profile's parts are not printed (V1 prints them with VLLM_LOGGING_LEVEL=DEBUG)"
                    }
                );
            }
            if !remedies.is_empty() {
                // The message-only utilization advice gives way to the measured one; the
                // capacity model's change stays.
                if remedies[0].action.contains("--gpu-memory-utilization") {
                    d.remedies.retain(|r| {
                        !r.action.contains("--gpu-memory-utilization")
                            || r.detail.contains("(vram capacity)")
                    });
                }
                d.remedies.splice(0..0, remedies);
            }
        }
        ServingError::VllmMaxSeqLen {
            max_model_len,
            kv_tokens,
            cpu_backend: false,
        } => {
            let kv = p.kv_bytes.and_then(|k| u64::try_from(k).ok());
            if let (Some(t), Some(x), Some(k)) = (total, non_kv, kv.filter(|_| kv_tokens > 0)) {
                let need = (k as f64 * max_model_len as f64 / kv_tokens as f64) as u64;
                profile_utilization(d, p, x, need, t, max_model_len);
            }
        }
        ServingError::VllmKvMemory {
            max_model_len,
            needed_bytes,
            ..
        } => {
            if let (Some(t), Some(x)) = (total, non_kv) {
                profile_utilization(d, p, x, needed_bytes, t, max_model_len);
            }
        }
        ServingError::VllmSamplerWarmUp { .. } => {
            // The KV cache fills the budget, so the warm-up runs in what the budget leaves of the
            // device, less the CUDA graphs where the budget does not count them.
            if let (Some(t), Some(b)) = (total, p.budget_bytes) {
                let graphs = p.cuda_graph_bytes.filter(|_| !p.cuda_graphs_counted);
                let left = t.saturating_sub(b).saturating_sub(graphs.unwrap_or(0));
                d.explanation = format!(
                    "{}. The warm-up ran in {} ({} device less the {} budget{})",
                    d.explanation,
                    hb(left),
                    hb(t),
                    hb(b),
                    graphs
                        .map(|g| format!(", less the CUDA graphs' {} estimate", hb(g)))
                        .unwrap_or_default()
                );
            }
        }
        ServingError::VllmMambaBlocks {
            max_num_seqs,
            blocks,
        } => crate::mamba::apply_profile(d, max_num_seqs, blocks, p),
        _ => {}
    }
}

/// The utilization that holds what the profile measured before the cache and one request of
/// `max_model_len` (`need` bytes of cache), in place of the message-only remedy and, when the
/// log printed its own figures, of the capacity model's (the engine's measurement of what
/// preceded the cache beats vram's estimate of it: vllm#10517's 18.33 GiB against the capacity
/// model's 16.89 GiB gave a utilization of 0.87, below the 0.90 that failed). A budget completed
/// from supplied figures yields to the capacity model's, when given, as the no-cache error's does.
fn profile_utilization(
    d: &mut ServingDiagnosis,
    p: &StartupProfile,
    non_kv: u64,
    need: u64,
    total: u64,
    len: u64,
) {
    let hb = human_bytes;
    if p.supplied.is_some() && d.capacity.is_some() {
        return;
    }
    let u = frac_up((non_kv + need) as f64 / total.max(1) as f64);
    let r = utilization_remedy(
        u,
        format!(
            "the engine measured {} before the cache; with {} of cache for one request of {len} tokens that is {} of the {} device{}",
            hb(non_kv),
            hb(need),
            hb(non_kv + need),
            hb(total),
            if u > 1.0 { ", more than the whole GPU: no utilization is enough" } else { "" }
        ),
    );
    // The capacity model's whole-start change (`(vram capacity)`) stays: it is a different flag
    // or, for a larger share, bounded by the engine's start-up check.
    let raises = |r: &ServingRemedy| {
        r.action.contains("--gpu-memory-utilization")
            && !r.action.starts_with("lower")
            && !r.detail.contains("(vram capacity)")
    };
    let at = d
        .remedies
        .iter()
        .position(raises)
        .unwrap_or(1.min(d.remedies.len()));
    d.remedies.retain(|x| !raises(x));
    d.remedies.insert(at.min(d.remedies.len()), r);
}

/// SGLang's `Load weight` lines: the fraction below which the KV pool is empty. (0.5.23's
/// `Loaded weights leave no GPU memory` error already reads the same lines in [`parse`].)
fn sglang_profile(d: &mut ServingDiagnosis, err: &ServingError, p: &StartupProfile) {
    let hb = human_bytes;
    let ServingError::SglangNotEnoughMemory { .. } = err else {
        return;
    };
    let (Some(pre), Some(after)) = (p.free_before_load_bytes, p.free_after_load_bytes) else {
        return;
    };
    if pre == 0 {
        return;
    }
    let m = 1.0 - after as f64 / pre as f64;
    let sentence = format!(
        "The log's load lines: {} free before loading, {} after it{}: the KV pool gets {} less (1 − mem_fraction_static) × {}, empty below a fraction of {m:.4}",
        hb(pre),
        hb(after),
        p.weights_bytes.map(|u| format!(" (loading took {})", hb(u))).unwrap_or_default(),
        hb(after),
        hb(pre)
    );
    d.explanation = format!("{}. {sentence}", d.explanation);
    {
        let floor = (m * 1000.0).ceil() / 1000.0;
        let r = ServingRemedy {
            action: format!("raise --mem-fraction-static above {floor:.3}"),
            enough: false,
            detail: format!(
                "at {m:.4} the KV pool is empty; each 0.01 above it adds {} of KV pool, and the (1 − fraction) × {} left outside the static pool is what activations and CUDA graphs run in, so a fraction near 1 moves the failure to run time",
                hb(pre / 100),
                hb(pre)
            ),
        };
        match d
            .remedies
            .iter()
            .position(|r| r.action.starts_with("raise --mem-fraction-static"))
        {
            Some(i) => d.remedies[i] = r,
            None => d.remedies.insert(0, r),
        }
    }
}
