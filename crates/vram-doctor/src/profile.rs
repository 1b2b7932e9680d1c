//! The serving engines' own memory-profiling lines in a pasted start-up log: what each part of
//! the engine's budget took before the KV cache was sized.
//!
//! An engine's start-up error ([`crate::serving`]) often prints no figure of what filled the
//! memory, but the lines the engine logged just before it do. The formats, each read in the
//! engine's code at the tags that print it:
//!
//! * vLLM V0 0.6.4 (`vllm/worker/worker.py`, `determine_num_available_blocks`): `Memory profiling
//!   results: total_gpu_memory=T initial_memory_usage=I peak_torch_memory=P
//!   memory_usage_post_profile=M non_torch_memory=N kv_cache_size=K gpu_memory_utilization=U`.
//!   The cache gets `T × U − P − N`, where P is PyTorch's allocated peak (the weights and the
//!   profile's activations) and N is the device's whole use after the profile less PyTorch's
//!   allocations: memory outside PyTorch in this process **and every other process's memory**.
//!   I is the device's use before the profile run (the weights, the CUDA context, other
//!   processes). The weights come from `Loading model weights took W GB` (`model_runner.py`;
//!   its GB are GiB: `model_memory_usage / 2**30`).
//! * vLLM V0 0.6.5 to 0.10 (`worker.py` with `vllm/utils.py`'s `memory_profiling`, read at
//!   0.6.5, 0.6.6, 0.7.3, 0.8.5, 0.9.1 and 0.10.1): `the current vLLM instance can use
//!   total_gpu_memory (T) x gpu_memory_utilization (U) = B` and `model weights take W;
//!   non_torch_memory takes N; PyTorch activation peak memory takes A; the rest of the memory
//!   reserved for KV Cache is K` with `K = B − W − N − A`. Other processes are the baseline
//!   measured before the instance started, outside all four figures.
//! * vLLM V1 (`vllm/v1/worker/gpu_worker.py`, `determine_available_memory`, read at 0.8.5,
//!   0.9.1, 0.10.1 and 0.19.0): `Model loading took W GiB` (`gpu_model_runner.py`) and
//!   `Available KV cache memory: K GiB` (from 0.9.1); with `VLLM_LOGGING_LEVEL=DEBUG`, `Memory
//!   profiling takes ... Total non KV cache memory: X; torch peak memory increase: A; non-torch
//!   forward increase memory: N; weights memory: W.`, the requested memory (`requested GPU
//!   memory: B GiB` at 0.9.1, `Requested memory: U (util), B GiB` at 0.19) and, at 0.19, `worker
//!   init memory snapshot: ... total_memory=T`. `K = B − X`; from 0.18, `Estimated CUDA graph
//!   memory: G GiB total` is also taken from K when `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`,
//!   which the log then says (`CUDA graph memory profiling is enabled`). V1 0.7.2–0.9.0 print no
//!   breakdown, and their budget counts other processes (the same `T × U − peak − non-torch` as
//!   0.6.4).
//! * SGLang (`python/sglang/srt/model_executor/model_runner.py`, `load_model`, the format the
//!   capacity model reads at 0.4.0–0.5.3): `Load weight begin. avail mem=P GB` and `Load weight
//!   end. ... avail mem=A GB, mem usage=U GB.` (GiB). The KV pool gets `A − P × (1 −
//!   mem_fraction_static)`, so it is empty below the fraction `1 − A / P`.
//!
//! vLLM on ROCm prints the same lines: `vllm/platforms/rocm.py` (read at 0.10.1) picks the same
//! V0 and V1 workers, but its `get_current_memory_usage`, which `DeviceMemoryProfiler` reads around
//! loading, is the device's whole use (`mem_get_info` total − free) where CUDA's is PyTorch's
//! allocated peak: the weights figure there holds the allocator's reserve and any other
//! process's change during loading ([`StartupProfile::rocm`]).
//!
//! Where a paste holds several workers' lines (tensor or pipeline parallelism), the last of each
//! is read: the one nearest the error.

use serde::Serialize;

use crate::message::parse_size;

/// Which engine's profiling lines were read, which decides what each figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileLayout {
    /// vLLM V0 0.6.4's `Memory profiling results: ...` line: its non-torch figure counts
    /// other processes' memory too.
    VllmV0Early,
    /// vLLM V0 0.6.5 to 0.10's `model weights take W; non_torch_memory takes N; ...`: other
    /// processes are outside every figure.
    VllmV0,
    /// vLLM V1's `Model loading took` / `Available KV cache memory` / DEBUG lines.
    VllmV1,
    /// SGLang's `Load weight begin/end ... avail mem` lines.
    Sglang,
}

/// What the engine's own profiling lines say about its budget, bytes (each figure only when a
/// line printed it, or the engine's own arithmetic gives it from printed ones).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartupProfile {
    /// Which lines were read.
    pub layout: ProfileLayout,
    /// The device's memory as the engine measured it.
    pub total_bytes: Option<u64>,
    /// `gpu_memory_utilization` as printed.
    pub utilization: Option<f64>,
    /// The budget: `total × gpu_memory_utilization` (vLLM's requested memory).
    pub budget_bytes: Option<u64>,
    /// The weights, as loading measured them.
    pub weights_bytes: Option<u64>,
    /// The profile run's PyTorch activation peak above the weights.
    pub activation_bytes: Option<u64>,
    /// Memory outside PyTorch counted in the budget (NCCL, library workspaces; in 0.6.4's
    /// layout also other processes, see [`Self::others_bytes`]).
    pub non_torch_bytes: Option<u64>,
    /// vLLM 0.6.4: the device's use before the profile run beyond the weights
    /// (`initial_memory_usage − weights`): other processes and this process's CUDA context,
    /// counted inside its non-torch figure.
    pub others_bytes: Option<u64>,
    /// vLLM from 0.18: the CUDA graphs' estimate, when logged.
    pub cuda_graph_bytes: Option<u64>,
    /// Whether that estimate was taken from the budget (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`).
    pub cuda_graphs_counted: bool,
    /// What the engine left for its KV cache (negative: that much short).
    pub kv_bytes: Option<i64>,
    /// SGLang: free memory before loading (`Load weight begin. avail mem=`), else free after
    /// loading plus what loading took.
    pub free_before_load_bytes: Option<u64>,
    /// SGLang: free memory after loading (`Load weight end ... avail mem=`).
    pub free_after_load_bytes: Option<u64>,
    /// The tensor-parallel size, when the paste shows the engine's configuration
    /// (`tensor_parallel_size=N` in vLLM's `Initializing ... engine` line, or the
    /// `non-default args` dict).
    pub tensor_parallel_size: Option<u64>,
    /// The quantization method the engine runs, likewise (`quantization=awq_marlin`), when not
    /// `None`: a remedy never offers what is already on.
    pub quantization: Option<String>,
    /// vLLM's version, when the paste prints it (`Initializing a V1 LLM engine (v0.10.1) with
    /// config`, `vLLM API server version 0.10.1`).
    pub engine_version: Option<[u32; 3]>,
    /// vLLM on ROCm (the log's `Automatically detected platform rocm.`, or an AMD GPU named with
    /// `--gpu`): the same lines, but `RocmPlatform.get_current_memory_usage` is the device's whole
    /// use (`mem_get_info` total − free, read at 0.10.1) where CUDA's is PyTorch's allocated peak,
    /// so the weights figure (`DeviceMemoryProfiler` around loading) counts the caching
    /// allocator's reserve and any other process's change during loading.
    pub rocm: bool,
    /// The figures the log does not print that were supplied to complete the budget
    /// ([`StartupProfile::supply_device`]); `None` when every figure is the log's.
    pub supplied: Option<Supplied>,
}

/// What completed a V1 budget that the log does not print: the device's total from the GPU
/// catalog (`--gpu`), and vLLM's default `gpu_memory_utilization` where none is logged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Supplied {
    /// The catalog GPU whose memory, as PyTorch reports it, stands for the device's total, when
    /// the log prints no total.
    pub catalog_gpu: Option<String>,
    /// The engine's default utilization(s) taken where the log prints none: the one of the
    /// logged version, or, when the log names no version, each default of the V1 releases
    /// (`vram_plan::capacity::VLLM_DEFAULT_UTILIZATION`). Empty when the log prints it.
    pub default_utilization: Vec<f64>,
    /// The budget at the smallest of those defaults, when they differ (the profile's
    /// `budget_bytes` is the one at the largest): a part is named only where both give it.
    pub budget_low_bytes: Option<u64>,
}

/// One part of the budget that the profile names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// The weights.
    Weights,
    /// The profile run's PyTorch activation peak.
    Activation,
    /// Memory outside PyTorch that grew by the profile's end: NCCL buffers and library
    /// workspaces, or what another process on the same GPU took meanwhile (vLLM measures the
    /// whole device's use against its baseline).
    OutsidePytorch,
    /// The CUDA graphs' estimate, where the budget counts it.
    CudaGraphs,
    /// vLLM 0.6.4: in use before the profile beyond the weights, inside its non-torch figure:
    /// other processes and the CUDA context.
    Others,
    /// Everything but the weights, when only the budget, the weights and the cache are printed:
    /// the activation peak and memory outside PyTorch together (in V1 0.7.2–0.9.0 also other
    /// processes).
    Rest,
}

/// A signed size as vLLM prints it (`-2.14 GiB`, `21.21GiB`, `14.9888 GB`), bytes.
fn signed_size(s: &str) -> Option<i64> {
    let s = s.trim_start();
    let neg = s.starts_with('-');
    let s = s.trim_start_matches('-');
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(end);
    let num = num.trim_end_matches('.');
    let unit: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let b = i64::try_from(parse_size(&format!("{num} {unit}"))?).ok()?;
    Some(if neg { -b } else { b })
}

/// The size right after the last `key` in `text` (lower-cased).
fn last_size(text: &str, key: &str) -> Option<i64> {
    let i = text.rfind(key)? + key.len();
    signed_size(&text[i..])
}

fn last_size_u(text: &str, key: &str) -> Option<u64> {
    last_size(text, key).and_then(|b| u64::try_from(b).ok())
}

/// The decimal number right after the last `key`.
fn last_number(text: &str, key: &str) -> Option<f64> {
    let r = text[text.rfind(key)? + key.len()..].trim_start();
    let end = r
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(r.len());
    r[..end].trim_end_matches('.').parse().ok()
}

/// The `(...)` content right after the last `key`.
fn last_paren<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let r = text[text.rfind(key)? + key.len()..].trim_start();
    let r = r.strip_prefix('(')?;
    Some(&r[..r.find(')')?])
}

/// Reads the engine's profiling lines out of a pasted log, if it has any (see the module docs).
pub fn read(text: &str) -> Option<StartupProfile> {
    let t = crate::message::without_terminal_codes(text).to_ascii_lowercase();
    let mut p = if t.contains("load weight end.") {
        sglang(&t)
    } else if t.contains("model weights take ") {
        vllm_v0(&t)
    } else if t.contains("memory profiling results: total_gpu_memory=") {
        vllm_v0_early(&t)
    } else if t.contains("model loading took ")
        || t.contains("available kv cache memory: ")
        || t.contains("total non kv cache memory: ")
    {
        vllm_v1(&t)
    } else {
        return None;
    };
    configuration(&t, &mut p);
    p.rocm =
        p.layout != ProfileLayout::Sglang && t.contains("automatically detected platform rocm");
    Some(p)
}

/// The engine's configuration as far as a paste shows it, profiling lines or not: the
/// tensor-parallel size and the quantization method of vLLM's `Initializing ... engine` line or
/// its `non-default args` dict (what [`read`] puts in a [`StartupProfile`]), for the capacity
/// model, so that a change it offers is never one the engine already runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineConfiguration {
    /// `tensor_parallel_size=N` (vLLM), `tp_size=N` (SGLang's `ServerArgs(...)`).
    pub tensor_parallel_size: Option<u64>,
    /// `quantization=Q`, when not `None`.
    pub quantization: Option<String>,
    /// vLLM's `gpu_memory_utilization` as the paste sets it (the `non-default args` dict, or
    /// `--gpu-memory-utilization U` on a pasted command line), within (0, 1].
    pub gpu_memory_utilization: Option<f64>,
    /// SGLang's `mem_fraction_static=F` (its `ServerArgs(...)` line, or
    /// `--mem-fraction-static F`), within (0, 1].
    pub mem_fraction_static: Option<f64>,
    /// The engine runs without CUDA graphs: vLLM's `enforce_eager=True` (its configuration line,
    /// `'enforce_eager': True` in the non-default args) or `--enforce-eager`; SGLang's
    /// `disable_cuda_graph=True` or `--disable-cuda-graph`.
    pub enforce_eager: bool,
    /// The KV cache is fp8: `kv_cache_dtype=fp8...` (`fp8`, `fp8_e4m3`, `fp8_e5m2`) in the
    /// configuration line or `--kv-cache-dtype fp8...`.
    pub kv_cache_fp8: bool,
    /// `max_num_seqs=N` (vLLM's `non-default args`, `'max_num_seqs': N`, `--max-num-seqs N`).
    pub max_num_seqs: Option<u64>,
    /// The context the engine runs: vLLM's `max_seq_len=N` (its configuration line),
    /// `'max_model_len': N` or `--max-model-len N`; SGLang's `context_length=N`
    /// (`ServerArgs(...)`) or `--context-length N`.
    pub max_model_len: Option<u64>,
    /// vLLM's CUDA-graph mode as the paste shows it, upper case (`NONE`, `PIECEWISE`, `FULL`,
    /// `FULL_DECODE_ONLY`, `FULL_AND_PIECEWISE`): the configuration line's `compilation_config`
    /// (`'cudagraph_mode': <CUDAGraphMode.X: ...>`, printed after `VllmConfig.__post_init__` has
    /// resolved it), or a command's `--compilation-config '{"cudagraph_mode": "X"}'` /
    /// `-cc.cudagraph_mode=X`.
    pub cudagraph_mode: Option<String>,
    /// The host's NVIDIA driver branch (the major version), where the paste prints the driver:
    /// `collect_env`'s `Nvidia driver version: 535.161.08` or `nvidia-smi`'s `Driver Version:
    /// 535.86.10`. The capacity model prices the graphs' driver memory by it
    /// (`vram_plan::capacity::Knobs::driver`).
    pub driver: Option<u32>,
    /// vLLM's version as the paste prints it (`Initializing a V1 LLM engine (v0.27.0) with
    /// config`, `vLLM API server version 0.27.0`; the same lines at 0.23.0–0.33.0's
    /// `v1/engine/core.py` and `entrypoints/api_server.py`): the capacity model's figures for a
    /// release it refuses (`vram_plan::capacity::Engine::unmodelled`) are not the paste's.
    pub engine_version: Option<[u32; 3]>,
}

impl EngineConfiguration {
    /// Whether the run the paste configures captures whole-forward CUDA graphs (vLLM's
    /// `CUDAGraphMode.has_full_cudagraphs`, `config/compilation.py`): `Some(false)` under
    /// `enforce_eager` (`VllmConfig.__post_init__` then sets the mode to `NONE`; read at 0.10.1.1,
    /// 0.11.0 and 0.20.0-0.23.0) or a mode with no `FULL` part, `Some(true)` for a mode with one, `None` when
    /// the paste shows neither.
    pub fn full_cudagraphs(&self) -> Option<bool> {
        if self.enforce_eager {
            return Some(false);
        }
        let m = self.cudagraph_mode.as_deref()?;
        match m {
            "NONE" | "PIECEWISE" => Some(false),
            _ if m.starts_with("FULL") => Some(true),
            _ => None,
        }
    }
}

/// The CUDA-graph mode's name after `key` (see [`EngineConfiguration::cudagraph_mode`]).
fn cudagraph_mode(t: &str) -> Option<String> {
    [
        "'cudagraph_mode': ",
        "\"cudagraph_mode\": ",
        "cudagraph_mode=",
    ]
    .iter()
    .filter_map(|k| Some((t.rfind(k)?, k.len())))
    .max()
    .and_then(|(i, n)| {
        let r = t[i + n..].trim_start_matches(['<', '\'', '"']);
        let r = r.strip_prefix("cudagraphmode.").unwrap_or(r);
        let name: String = r
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty()).then(|| name.to_ascii_uppercase())
    })
}

/// [`EngineConfiguration`] of `text`.
pub fn engine_configuration(text: &str) -> EngineConfiguration {
    let t = crate::message::without_terminal_codes(text).to_ascii_lowercase();
    let mut p = empty(ProfileLayout::VllmV1);
    configuration(&t, &mut p);
    let share = |v: Option<&str>| {
        v.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .filter(|&u| u > 0.0 && u <= 1.0)
    };
    EngineConfiguration {
        tensor_parallel_size: p.tensor_parallel_size,
        quantization: p.quantization,
        gpu_memory_utilization: share(
            last_key_value(&t, "gpu_memory_utilization=")
                .or_else(|| last_value(&t, "'gpu_memory_utilization': "))
                .or_else(|| last_value(&t, "--gpu-memory-utilization ")),
        ),
        mem_fraction_static: share(
            last_key_value(&t, "mem_fraction_static=")
                .or_else(|| last_value(&t, "--mem-fraction-static ")),
        ),
        enforce_eager: [
            last_key_value(&t, "enforce_eager="),
            last_value(&t, "'enforce_eager': "),
            last_key_value(&t, "disable_cuda_graph="),
        ]
        .into_iter()
        .flatten()
        .any(|v| v == "true")
            || t.contains("--enforce-eager")
            || t.contains("--disable-cuda-graph ")
            || t.ends_with("--disable-cuda-graph"),
        kv_cache_fp8: last_key_value(&t, "kv_cache_dtype=")
            .or_else(|| last_value(&t, "'kv_cache_dtype': "))
            .or_else(|| last_value(&t, "--kv-cache-dtype "))
            .is_some_and(|v| v.starts_with("fp8")),
        max_num_seqs: last_key_value(&t, "max_num_seqs=")
            .or_else(|| last_value(&t, "'max_num_seqs': "))
            .or_else(|| last_value(&t, "--max-num-seqs "))
            .and_then(|v| v.split_whitespace().next()?.parse().ok()),
        max_model_len: last_key_value(&t, "max_seq_len=")
            .or_else(|| last_value(&t, "'max_model_len': "))
            .or_else(|| last_value(&t, "--max-model-len "))
            .or_else(|| last_key_value(&t, "context_length="))
            .or_else(|| last_value(&t, "--context-length "))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .filter(|&n: &u64| n > 0),
        cudagraph_mode: cudagraph_mode(&t),
        driver: driver_branch(&t),
        engine_version: p.engine_version,
    }
}

/// The NVIDIA driver's branch the (lower-cased) paste prints: the major version of
/// `collect_env`'s `nvidia driver version: 535.161.08` or `nvidia-smi`'s `driver version:
/// 535.86.10` (the last one printed), where it reads as a driver (three digits, a dot after).
fn driver_branch(t: &str) -> Option<u32> {
    let v = last_value(t, "nvidia driver version:").or_else(|| last_value(t, "driver version:"))?;
    let (major, rest) = v.split_whitespace().next()?.split_once('.')?;
    (major.len() == 3 && rest.starts_with(|c: char| c.is_ascii_digit()))
        .then(|| major.parse().ok())
        .flatten()
}

fn empty(layout: ProfileLayout) -> StartupProfile {
    StartupProfile {
        layout,
        total_bytes: None,
        utilization: None,
        budget_bytes: None,
        weights_bytes: None,
        activation_bytes: None,
        non_torch_bytes: None,
        others_bytes: None,
        cuda_graph_bytes: None,
        cuda_graphs_counted: false,
        kv_bytes: None,
        free_before_load_bytes: None,
        free_after_load_bytes: None,
        tensor_parallel_size: None,
        quantization: None,
        engine_version: None,
        rocm: false,
        supplied: None,
    }
}

/// The value after the last `key` up to the next `,`, `)` or `}` (quotes dropped).
fn last_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let r = &text[text.rfind(key)? + key.len()..];
    let end = r.find([',', ')', '}', '\n']).unwrap_or(r.len());
    Some(r[..end].trim().trim_matches('\''))
}

/// [`last_value`] of `key` where it starts a name (`tp_size=` but not `moe_dense_tp_size=`).
fn last_key_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let (i, _) = text.rmatch_indices(key).find(|&(i, _)| {
        !text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })?;
    let r = &text[i + key.len()..];
    let end = r.find([',', ')', '}', '\n']).unwrap_or(r.len());
    Some(r[..end].trim().trim_matches('\''))
}

/// The engine's configuration as far as the paste shows it (see [`StartupProfile`]): vLLM's
/// `Initializing ... engine` line and `non-default args` dict, SGLang's `server_args=ServerArgs(
/// ..., tp_size=2, ...)` line (the same field at 0.4.x and 0.5.x, `server_args.py`) and either
/// engine's command line.
fn configuration(t: &str, p: &mut StartupProfile) {
    p.tensor_parallel_size = last_value(t, "tensor_parallel_size=")
        .or_else(|| last_value(t, "'tensor_parallel_size': "))
        .or_else(|| last_value(t, "--tensor-parallel-size "))
        .or_else(|| last_key_value(t, "tp_size="))
        .or_else(|| last_value(t, "--tp-size "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok());
    p.engine_version = t
        .rfind("llm engine (v")
        .map(|i| &t[i + "llm engine (v".len()..])
        .or_else(|| {
            t.rfind("vllm api server version ")
                .map(|i| &t[i + "vllm api server version ".len()..])
        })
        // `vllm serve` from 0.16 (`log_version_and_model`, `entrypoints/utils.py`, later
        // `entrypoints/serve/utils/api_utils.py`, read at 0.16.0-0.23.0): `vLLM server version
        // X, serving model M`, or its logo with `version X` beside the block letters.
        .or_else(|| {
            t.rfind("vllm server version ")
                .map(|i| &t[i + "vllm server version ".len()..])
        })
        .or_else(|| {
            t.rfind("█  version ")
                .map(|i| &t[i + "█  version ".len()..])
        })
        .and_then(|r| {
            let end = r
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(r.len());
            vram_plan::capacity::parse_version(r[..end].trim_end_matches('.'))
        });
    p.quantization = last_value(t, "quantization=")
        .or_else(|| last_value(t, "'quantization': "))
        .filter(|q| !q.is_empty() && *q != "none")
        .map(str::to_string);
}

fn vllm_v0(t: &str) -> StartupProfile {
    let mut p = empty(ProfileLayout::VllmV0);
    p.total_bytes = last_paren(t, "total_gpu_memory")
        .and_then(signed_size)
        .and_then(|b| u64::try_from(b).ok());
    p.utilization = last_paren(t, "x gpu_memory_utilization").and_then(|s| s.trim().parse().ok());
    p.budget_bytes = t
        .rfind("x gpu_memory_utilization")
        .and_then(|i| last_size_u(&t[i..], ") = "));
    p.weights_bytes = last_size_u(t, "model weights take ");
    p.non_torch_bytes = last_size_u(t, "non_torch_memory takes ");
    p.activation_bytes = last_size_u(t, "pytorch activation peak memory takes ");
    p.kv_bytes = last_size(t, "the rest of the memory reserved for kv cache is ");
    p
}

fn vllm_v0_early(t: &str) -> StartupProfile {
    let mut p = empty(ProfileLayout::VllmV0Early);
    let line = &t[t.rfind("memory profiling results:").unwrap_or(0)..];
    p.total_bytes = last_size_u(line, "total_gpu_memory=");
    p.utilization = last_number(line, "gpu_memory_utilization=");
    p.budget_bytes = p
        .total_bytes
        .zip(p.utilization)
        .map(|(b, u)| (b as f64 * u).round() as u64);
    p.kv_bytes = last_size(line, "kv_cache_size=");
    p.non_torch_bytes = last_size_u(line, "non_torch_memory=");
    p.weights_bytes = last_size_u(t, "loading model weights took ");
    if let Some(w) = p.weights_bytes {
        let peak = last_size_u(line, "peak_torch_memory=");
        p.activation_bytes = peak.map(|pk| pk.saturating_sub(w));
        p.others_bytes = last_size_u(line, "initial_memory_usage=").map(|i| i.saturating_sub(w));
    }
    p
}

fn vllm_v1(t: &str) -> StartupProfile {
    let mut p = empty(ProfileLayout::VllmV1);
    p.weights_bytes =
        last_size_u(t, "weights memory: ").or_else(|| last_size_u(t, "model loading took "));
    // From 0.27 (`utils/mem_utils.py`, `memory_profiling`, read at 0.27.0-0.33.0) the budget's
    // non-KV figure is `total_consumed` (the fall in free device memory from before the engine
    // to after the profile) plus the transient peak headroom (`torch_peak − torch_allocated`
    // after it), and the DEBUG line prints `total consumed (from mem_get_info): C` where it
    // printed `non-torch forward increase memory: N`. Its `torch peak memory increase` is no
    // longer a part of the budget, so neither figure is read as one: the parts are the weights
    // and the rest (`B − W − K`).
    if !t.contains("total consumed (from mem_get_info): ") {
        p.activation_bytes = last_size_u(t, "torch peak memory increase: ");
        p.non_torch_bytes = last_size_u(t, "non-torch forward increase memory: ");
    }
    p.kv_bytes = last_size(t, "available kv cache memory: ");
    p.total_bytes = last_size_u(t, "total_memory=");
    p.utilization = last_number(t, "'gpu_memory_utilization': ")
        .or_else(|| last_number(t, "--gpu-memory-utilization "))
        .or_else(|| last_number(t, "--gpu-memory-utilization="))
        .or_else(|| last_number(t, "requested memory: "));
    p.budget_bytes = last_size_u(t, "requested gpu memory: ")
        .or_else(|| {
            let i = t.rfind("requested memory: ")?;
            last_size_u(&t[i..], "(util), ")
        })
        .or_else(|| {
            p.total_bytes
                .zip(p.utilization)
                .map(|(b, u)| (b as f64 * u).round() as u64)
        });
    // The requested memory is `total × gpu_memory_utilization` (`request_memory`): with both
    // printed, the device's total follows.
    if p.total_bytes.is_none() {
        p.total_bytes = p
            .budget_bytes
            .zip(p.utilization.filter(|&u| u > 0.0))
            .map(|(b, u)| (b as f64 / u).round() as u64);
    }
    p.cuda_graph_bytes = last_size_u(t, "estimated cuda graph memory: ");
    // `CUDA graph memory profiling is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).`
    // (0.18.1, 0.19.1) and `... is enabled (default since v0.21.0).` (0.20.0-0.33.0,
    // `gpu_worker.py`, `determine_available_memory`): the estimate is taken from the budget. The
    // disabled branch's lines (`In v0.19, CUDA graph memory profiling will be enabled by default
    // (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), ...` at 0.18-0.19, `... is disabled` from
    // 0.20) do not say it is.
    p.cuda_graphs_counted = t.contains("cuda graph memory profiling is enabled");
    p
}

fn sglang(t: &str) -> StartupProfile {
    let mut p = empty(ProfileLayout::Sglang);
    let end = t.rfind("load weight end.").unwrap_or(0);
    p.free_after_load_bytes = last_size_u(&t[end..], "avail mem=");
    p.weights_bytes = last_size_u(&t[end..], "mem usage=");
    p.free_before_load_bytes = t[..end]
        .rfind("load weight begin.")
        .and_then(|b| last_size_u(&t[b..end], "avail mem="))
        .or_else(|| {
            p.free_after_load_bytes
                .zip(p.weights_bytes)
                .map(|(a, u)| a + u)
        });
    p
}

impl StartupProfile {
    /// Why the profile's figures cannot be a vLLM log's, if they cannot: a printed
    /// `gpu_memory_utilization` outside (0, 1], which vLLM's `CacheConfig` refuses before any
    /// profile runs (the same bound as [`crate::serving::ServingError::impossible`]).
    pub fn impossible(&self) -> Option<String> {
        if self.layout == ProfileLayout::Sglang {
            return None;
        }
        self.utilization
            .filter(|u| !(*u > 0.0 && *u <= 1.0))
            .map(|u| {
                format!(
                    "the pasted vLLM profile prints gpu_memory_utilization {u}, which no vLLM starts with (it takes a share in (0, 1]): a line edited by hand; paste the lines vLLM printed"
                )
            })
    }

    /// The parts of vLLM's budget that the profile gives, bytes. When the activation peak and
    /// memory outside PyTorch are not printed (or one is negative: an other process freed
    /// memory during the profile) but the budget, the weights and the cache are, everything but
    /// the weights is one [`Part::Rest`] (`B − W − K`). `None` without the weights.
    pub fn parts(&self) -> Option<Vec<(Part, u64)>> {
        let w = self.weights_bytes?;
        let mut v = vec![(Part::Weights, w)];
        let others = match self.layout {
            ProfileLayout::VllmV0Early => self.others_bytes,
            _ => None,
        };
        match (self.activation_bytes, self.non_torch_bytes) {
            (Some(a), n) if n.is_some() || self.budget_bytes.is_none() => {
                v.push((Part::Activation, a));
                if let Some(n) = n {
                    // 0.6.4's non-torch figure holds the others; the rest of it is this process's.
                    v.push((Part::OutsidePytorch, n.saturating_sub(others.unwrap_or(0))));
                }
                if let Some(o) = others {
                    v.push((Part::Others, o));
                }
                if self.cuda_graphs_counted {
                    if let Some(g) = self.cuda_graph_bytes {
                        v.push((Part::CudaGraphs, g));
                    }
                }
            }
            _ => {
                if let (Some(b), Some(k)) = (self.budget_bytes, self.kv_bytes) {
                    if let Ok(r) = u64::try_from(b as i64 - w as i64 - k) {
                        v.push((Part::Rest, r));
                    }
                }
            }
        }
        Some(v)
    }

    /// The part that took the most of the budget: what left the KV cache no room. `None` when
    /// the profile names only the weights, or when supplied figures ([`Self::supplied`]) do not
    /// decide: the defaults' budgets name different parts, or the lead is within the printed
    /// figures' rounding (0.01 GiB).
    pub fn largest(&self) -> Option<(Part, u64)> {
        let v = self.parts()?;
        if v.len() < 2 {
            return None;
        }
        let top = v.iter().copied().max_by_key(|&(_, b)| b)?;
        let Some(s) = &self.supplied else {
            return Some(top);
        };
        let second = v
            .iter()
            .filter(|&&(q, _)| q != top.0)
            .map(|&(_, b)| b)
            .max()
            .unwrap_or(0);
        if top.1 < second + (1u64 << 30) / 100 {
            return None;
        }
        if let Some(low) = s.budget_low_bytes {
            let at_low = StartupProfile {
                budget_bytes: Some(low),
                supplied: Some(Supplied {
                    budget_low_bytes: None,
                    ..s.clone()
                }),
                ..self.clone()
            };
            if at_low.largest().map(|(q, _)| q) != Some(top.0) {
                return None;
            }
        }
        Some(top)
    }

    /// Completes a vLLM V1 budget that the log does not print (only `Model loading took` and
    /// `Available KV cache memory`, vllm#23278) from the GPU the user names: the catalog's
    /// total as PyTorch reports it where the log prints none, times the logged utilization, else
    /// the default of the logged version, else each V1 default
    /// ([`vram_plan::capacity::VLLM_DEFAULT_UTILIZATION`]; the budget is then the largest, the
    /// smallest kept in [`Supplied::budget_low_bytes`]). Other layouts print their budget and
    /// are left as they are; so is a budget the log prints, and a log without both the weights
    /// and the cache.
    pub fn supply_device(&mut self, gpu: &vram_model::gpu::Gpu) {
        if self.layout != ProfileLayout::Sglang && gpu.is_rocm() {
            self.rocm = true;
        }
        // Only to split the printed weights from the rest: without both the weights and the
        // cache there is nothing the supplied budget could decide.
        if self.layout != ProfileLayout::VllmV1
            || self.budget_bytes.is_some()
            || self.weights_bytes.is_none()
            || self.kv_bytes.is_none()
        {
            return;
        }
        let mut s = Supplied {
            catalog_gpu: None,
            default_utilization: Vec::new(),
            budget_low_bytes: None,
        };
        let total = match self.total_bytes {
            Some(t) => t,
            None => {
                s.catalog_gpu = Some(gpu.name.to_string());
                gpu.memory_bytes
            }
        };
        let utils = match (self.utilization, self.engine_version) {
            (Some(u), _) => vec![u],
            (None, Some(v)) => vec![vram_plan::capacity::vllm_default_utilization(v)],
            (None, None) => {
                let mut d: Vec<f64> = vram_plan::capacity::VLLM_DEFAULT_UTILIZATION
                    .iter()
                    .map(|&(_, u)| u)
                    .collect();
                d.sort_by(f64::total_cmp);
                d.dedup();
                d
            }
        };
        if self.utilization.is_none() {
            s.default_utilization = utils.clone();
        }
        let budget = |u: f64| (total as f64 * u).round() as u64;
        let (lo, hi) = (utils[0], utils[utils.len() - 1]);
        self.total_bytes = Some(total);
        self.budget_bytes = Some(budget(hi));
        s.budget_low_bytes = (lo != hi).then(|| budget(lo));
        self.supplied = Some(s);
    }

    /// Everything the budget held before the KV cache: the budget less the cache, else the sum
    /// of the parts.
    pub fn non_kv_bytes(&self) -> Option<u64> {
        match (self.budget_bytes, self.kv_bytes) {
            (Some(b), Some(k)) => u64::try_from(b as i64 - k).ok(),
            _ => self
                .parts()
                .filter(|v| v.len() > 1)
                .map(|v| v.iter().map(|&(_, b)| b).sum()),
        }
    }
}
