//! `vram capacity`: what vLLM or SGLang would log at start-up for a model on a GPU, whether it
//! starts, and what to change when it does not ([`vram_plan::capacity`]).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::describe::Dtype as StoredDtype;
use vram_model::finetune::WeightFormat;
use vram_model::fmt::{bytes, thousands};
use vram_model::gpu::Gpu;
use vram_model::read::{quantization_config, QuantLookup};
use vram_plan::capacity::{self, Capacity, Engine, Interconnect, Knobs, Quantization};
use vram_plan::suggest::{self, ServingChange};

use crate::check::{Checker, Ranges};
use crate::error::{input, Result};
use crate::estimate::ModelInput;
use crate::parts::GpuRef;
use crate::request::Weights;
use crate::{Kind, SCHEMA_VERSION};

/// `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// The model's dtype.
    Auto,
    /// FP8 (e4m3 by default).
    Fp8,
    /// FP8 e4m3.
    Fp8E4m3,
    /// FP8 e5m2.
    Fp8E5m2,
    /// bfloat16 (vLLM only).
    Bfloat16,
}

impl KvCacheDtype {
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
            KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
            KvCacheDtype::Bfloat16 => "bfloat16",
        }
    }
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// The config's dtype (bf16 for the catalog's models).
    Auto,
    /// bfloat16.
    Bfloat16,
    /// float16.
    Float16,
    /// float32.
    Float32,
}

/// What `vram capacity` was asked: the engine's flags, named as the engine names them.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityRequest {
    /// `--engine`.
    pub engine: Engine,
    /// `--engine-version`.
    pub engine_version: Option<String>,
    /// `--gpu`.
    pub gpu: &'static Gpu,
    /// vLLM `--gpu-memory-utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// `--max-model-len` (SGLang `--context-length`).
    pub max_model_len: Option<u64>,
    /// vLLM `--max-num-seqs`.
    pub max_num_seqs: Option<u64>,
    /// vLLM `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u64>,
    /// `--kv-cache-dtype`.
    pub kv_cache_dtype: KvCacheDtype,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: u64,
    /// `--pipeline-parallel-size`.
    pub pipeline_parallel_size: u64,
    /// `--data-parallel-size` (SGLang `--dp-size`).
    pub data_parallel_size: u64,
    /// vLLM `--enable-expert-parallel`.
    pub enable_expert_parallel: bool,
    /// SGLang `--ep-size`.
    pub ep_size: Option<u64>,
    /// SGLang `--enable-dp-attention`.
    pub enable_dp_attention: bool,
    /// vLLM's `VLLM_USE_V1` (0 or 1; `None`: the version's own choice).
    pub vllm_use_v1: Option<u8>,
    /// vLLM's `VLLM_USE_V2_MODEL_RUNNER` (0 or 1; `None`: the version's own choice).
    pub vllm_use_v2_model_runner: Option<u8>,
    /// vLLM `--flashinfer-sampler`: V1's sampler runs FlashInfer's top-k/top-p kernels.
    pub flashinfer_sampler: bool,
    /// vLLM V1's `cudagraph_mode` (`--compilation-config '{"cudagraph_mode": ...}'`; `None`:
    /// the version's default).
    pub cudagraph_mode: Option<capacity::CudagraphMode>,
    /// vLLM's compilation mode (`-cc.mode`; `TORCH_COMPILE_DISABLE=1` is `NONE`; `None`: the
    /// optimization level's).
    pub compilation_mode: Option<capacity::CompilationMode>,
    /// vLLM's `--optimization-level` (`-O0` to `-O3`; `None`: `-O2`).
    pub optimization_level: Option<u8>,
    /// vLLM's `--attention-backend` (`VLLM_ATTENTION_BACKEND` before 0.13; `None`: vLLM's own
    /// choice).
    pub attention_backend: Option<capacity::AttentionBackend>,
    /// `--interconnect` (`None`: the GPU's board).
    pub interconnect: Option<Interconnect>,
    /// `--enforce-eager` (SGLang `--disable-cuda-graph`).
    pub enforce_eager: bool,
    /// `--driver`: the host's NVIDIA driver branch (535 for `535.161.08`; `None`: R550 or
    /// later assumed), vLLM only.
    pub driver: Option<u32>,
    /// `--block-size` (SGLang `--page-size`).
    pub block_size: Option<u64>,
    /// `--weights` (alias `--quantization`; `None`: the config's `quantization_config`).
    pub weights: Option<Weights>,
    /// `--dtype`.
    pub dtype: Dtype,
    /// SGLang `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// SGLang `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// SGLang `--chunked-prefill-size`.
    pub chunked_prefill_size: Option<u64>,
    /// SGLang `--cuda-graph-max-bs`.
    pub cuda_graph_max_bs: Option<u64>,
}

/// The engine's start-up on one GPU of the job: what it would log, the per-GPU memory, the KV
/// cache, whether it starts, the longest `max_model_len` that would, and the cheapest change
/// that starts it at the asked length. `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `capacity`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// The setup line the text prints first.
    pub description: String,
    /// `--kv-cache-dtype` as the setup line names it.
    pub kv_cache_dtype: String,
    /// The GPU.
    pub gpu: GpuRef,
    /// The engine's figures: the serving model's own result, its fields inline in the JSON.
    #[serde(flatten)]
    pub capacity: Capacity,
    /// When it does not start: the cheapest change that starts it at `max_model_len` (null:
    /// none of those tried).
    pub cheapest_change: Option<ServingChange>,
    /// When it does not start: the changes tried for this job and engine
    /// ([`vram_plan::suggest::serving_tried`]); empty when it starts.
    #[serde(default)]
    pub changes_tried: Vec<String>,
    /// What reading the model found (`Blocks::notes`: a checkpoint's headers that disagree
    /// with config.json, a wrapper read by its text config...), as the text's `note:` lines.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Ranges for CapacityReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.field("gpu", &self.gpu)?;
        // The capacity's fields are inline: its paths are the report's own.
        self.capacity.ranges(c)?;
        match &self.cheapest_change {
            Some(ch) => c.field("cheapest_change", ch),
            None => Ok(()),
        }
    }
}

/// `quant_method` of the model's config.json's quantization settings, found where the engine
/// looks (`lookup`), if any.
fn config_quantization(
    config: &serde_json::Value,
    lookup: QuantLookup,
) -> Result<Option<Quantization>> {
    match vram_model::read::quant_method(config, lookup) {
        None => Ok(None),
        Some(m) => Quantization::parse(m).map(Some).ok_or_else(|| {
            input(format!("the config's quantization_config.quant_method `{m}` is not one vram knows (fp8, int8, awq, gptq, bitsandbytes, mxfp4)"))
        }),
    }
}

/// The knobs the request describes for the model `t` read from `config`; flags of the other
/// engine, and values the engine does not accept, are refused.
pub fn knobs(
    r: &CapacityRequest,
    t: &vram_model::arch::Transformer,
    config: &serde_json::Value,
    config_from_user: bool,
) -> Result<Knobs> {
    let version = r
        .engine_version
        .as_deref()
        .and_then(capacity::parse_engine_version);
    knobs_at(
        r,
        t,
        config,
        config_from_user,
        engine_lookup(r.engine, version.map(|v| v.0)),
    )
}

/// Where `engine` at `version` (`None`: the newest modelled) looks for a config's quantization
/// settings.
fn engine_lookup(engine: Engine, version: Option<[u32; 3]>) -> QuantLookup {
    match engine {
        Engine::Vllm => QuantLookup::Vllm(version),
        Engine::Sglang => QuantLookup::Sglang,
    }
}

/// [`knobs`], the config's quantization settings read by `lookup`.
fn knobs_at(
    r: &CapacityRequest,
    t: &vram_model::arch::Transformer,
    config: &serde_json::Value,
    config_from_user: bool,
    lookup: QuantLookup,
) -> Result<Knobs> {
    let engine = r.engine;
    let vllm_only = [
        (
            "--gpu-memory-utilization",
            r.gpu_memory_utilization.is_some(),
        ),
        (
            "--max-num-batched-tokens",
            r.max_num_batched_tokens.is_some(),
        ),
        ("--enable-expert-parallel", r.enable_expert_parallel),
        ("--vllm-use-v1", r.vllm_use_v1.is_some()),
        (
            "--vllm-use-v2-model-runner",
            r.vllm_use_v2_model_runner.is_some(),
        ),
        ("--flashinfer-sampler", r.flashinfer_sampler),
        ("--cudagraph-mode", r.cudagraph_mode.is_some()),
        ("--compilation-mode", r.compilation_mode.is_some()),
        ("--optimization-level", r.optimization_level.is_some()),
        ("--attention-backend", r.attention_backend.is_some()),
    ];
    let sglang_only = [
        ("--mem-fraction-static", r.mem_fraction_static.is_some()),
        ("--max-total-tokens", r.max_total_tokens.is_some()),
        ("--chunked-prefill-size", r.chunked_prefill_size.is_some()),
        ("--cuda-graph-max-bs", r.cuda_graph_max_bs.is_some()),
        ("--ep-size", r.ep_size.is_some()),
        ("--enable-dp-attention", r.enable_dp_attention),
    ];
    let (other, wrong) = match engine {
        Engine::Vllm => ("an SGLang", &sglang_only[..]),
        Engine::Sglang => ("a vLLM", &vllm_only[..]),
    };
    // The host's driver is no engine flag; it prices vLLM's graphs only (`graphs.rs`).
    if engine == Engine::Sglang && r.driver.is_some() {
        return Err(input(
            "--driver prices vLLM's CUDA graphs by driver branch; vram's SGLang graphs take no driver (not for --engine sglang)",
        ));
    }
    if let Some((flag, _)) = wrong.iter().find(|(_, set)| *set) {
        return Err(input(format!(
            "{flag} is {other} flag; not for --engine {}",
            engine.name()
        )));
    }
    // The values each engine's parser accepts: vLLM 0.11 `vllm/config/cache.py` (`CacheDType`,
    // `BlockSize`), SGLang 0.5.3 `srt/server_args.py` (`--kv-cache-dtype` choices).
    let kv_ok = match engine {
        Engine::Vllm => true,
        Engine::Sglang => matches!(
            r.kv_cache_dtype,
            KvCacheDtype::Auto | KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2
        ),
    };
    if !kv_ok {
        return Err(input(format!(
            "--kv-cache-dtype {} is not one of {}'s choices ({})",
            r.kv_cache_dtype.name(),
            if engine == Engine::Vllm {
                "vLLM 0.11"
            } else {
                "SGLang 0.5"
            },
            if engine == Engine::Vllm {
                "auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2"
            } else {
                "auto, fp8_e4m3, fp8_e5m2"
            }
        )));
    }
    if let (Engine::Vllm, Some(b)) = (engine, r.block_size) {
        if ![1, 8, 16, 32, 64, 128].contains(&b) {
            return Err(input(format!(
                "--block-size {b} is not one of vLLM 0.11's block sizes (1, 8, 16, 32, 64, 128)"
            )));
        }
    }
    let quantization = match r.weights {
        Some(w) => w.serving()?,
        // The checkpoint's storage is the description's (`Storage`, read from the same
        // `quantization_config` for a config file and a catalog id alike); a method it does
        // not lay out tensor by tensor (compressed-tensors, fbgemm FP8, ...) is priced by the
        // engine's bytes per weight.
        None if config_from_user && !t.blocks.storage.is_packed() => {
            config_quantization(config, lookup)?.unwrap_or(Quantization::None)
        }
        None => Quantization::None,
    };
    let dtype_bytes = if r.dtype == Dtype::Float32 { 4 } else { 2 };
    let version = r
        .engine_version
        .as_deref()
        .and_then(capacity::parse_engine_version);
    Ok(Knobs {
        gpu_memory_utilization: r.gpu_memory_utilization,
        max_model_len: r.max_model_len,
        max_num_seqs: r.max_num_seqs,
        max_num_batched_tokens: r.max_num_batched_tokens,
        kv_bytes: match r.kv_cache_dtype {
            KvCacheDtype::Auto => None,
            KvCacheDtype::Fp8 | KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2 => Some(1),
            KvCacheDtype::Bfloat16 => Some(2),
        },
        tp: r.tensor_parallel_size,
        pp: r.pipeline_parallel_size,
        enforce_eager: r.enforce_eager,
        block_size: r.block_size,
        quantization,
        dtype_bytes,
        mem_fraction_static: r.mem_fraction_static,
        max_total_tokens: r.max_total_tokens,
        chunked_prefill_size: r.chunked_prefill_size,
        cuda_graph_max_bs: r.cuda_graph_max_bs,
        mamba_ssm_bytes: None,
        vllm_v0: r.vllm_use_v1 == Some(0),
        vllm_v1: r.vllm_use_v1 == Some(1),
        vllm_v2_runner: r.vllm_use_v2_model_runner.map(|v| v == 1),
        cudagraph_mode: r.cudagraph_mode,
        compilation_mode: r.compilation_mode,
        optimization_level: r.optimization_level,
        attention_backend: r.attention_backend,
        // What decides vLLM's `is_mm_prefix_lm` from the config itself (the release's rule is
        // `vram_plan::capacity`'s).
        mm_prefix_lm: vram_model::read::config_mm_prefix_lm(config),
        bidirectional_vision: vram_model::read::bidirectional_vision(config),
        dp: r.data_parallel_size,
        expert_parallel: r.enable_expert_parallel,
        ep: r.ep_size.unwrap_or(1),
        dp_attention: r.enable_dp_attention,
        flashinfer_sampler: r.flashinfer_sampler,
        interconnect: r.interconnect,
        engine_version: version.map(|v| v.0),
        engine_pin: version.map_or(capacity::Pin::Series, |v| v.1),
        // `--quantization awq`/`gptq` on a config whose `quant_method` already says so is the
        // engine's own flag, which keeps vLLM's plain kernel; on a config without it the flag
        // states the storage, and the engine picks the kernel from the config and the GPU.
        marlin: match r.weights {
            Some(Weights::Marlin(_)) => Some(true),
            Some(Weights::Format(WeightFormat::Awq { .. } | WeightFormat::Gptq { .. }))
                if config_quantization(config, lookup).ok().flatten() == Some(quantization) =>
            {
                Some(false)
            }
            _ => None,
        },
        derived_max_model_len: vram_plan::context::derived_max_model_len(
            config,
            t.max_positions(),
            engine,
        ),
        // `--driver`; without it the graphs are priced for R550 or later, which the
        // assumptions say (`vram_plan::capacity`'s `graphs::driver_line`).
        driver: r.driver,
    })
}

/// The answer of `vram capacity` for `m`: the engine's start-up and, when it does not start,
/// the cheapest change ([`vram_plan::suggest::serving`]).
pub fn capacity(
    m: &ModelInput<'_>,
    config_from_user: bool,
    r: &CapacityRequest,
) -> Result<CapacityReport> {
    if let Some(v) = &r.engine_version {
        if let Some(why) = capacity::parse_version(v).and_then(|n| r.engine.unmodelled(n)) {
            return Err(input(format!("--engine-version {v}: {why}")));
        }
        let known = r.engine.versions();
        // A patch is a number (`0.11.2`, `0.6.3.post1`); `0.11.-1` read as the 0.11 series.
        if !known.iter().any(|k| {
            v == k
                || v.strip_prefix(k)
                    .and_then(|r| r.strip_prefix('.'))
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        }) {
            return Err(input(format!(
                "--engine-version {v}: the {} memory layouts known are {} (read from its source)",
                r.engine.name(),
                known.join(", ")
            )));
        }
    }
    let Model::Transformer(t) = &m.model else {
        return Err(input(format!(
            "`{}` is not a transformer language model; vLLM and SGLang serve those",
            m.model.name()
        )));
    };
    let config: serde_json::Value = m
        .config
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let mut k = knobs(r, t, &config, config_from_user)?;
    // The engine's model registry at the version in force: a pinned release without the
    // config's architecture refuses; the default moves to the nearest release that has it.
    let archs = vram_model::read::architectures(&config);
    let registry = capacity::registry_check(r.engine, &archs, &k)?;
    if r.engine == Engine::Vllm {
        let model_type = config["model_type"].as_str();
        if let Some(why) = capacity::vllm_v2_runner_of(&archs, model_type, t, &k) {
            return Err(input(why));
        }
    }
    if let Some(v) = registry.version {
        if engine_lookup(r.engine, Some(v)) != engine_lookup(r.engine, k.engine_version) {
            k = knobs_at(
                r,
                t,
                &config,
                config_from_user,
                engine_lookup(r.engine, Some(v)),
            )?;
        }
        k.engine_version = Some(v);
    }
    // The weights as the engine at that version loads them.
    let (loaded, lookup_note) = as_engine_loads(t, &config, r, k.engine_version)?;
    let t = loaded.as_ref().unwrap_or(t);
    // vLLM keeps a hybrid model's recurrent state in the config's `mamba_ssm_dtype`.
    k.mamba_ssm_bytes = m.config.and_then(vram_model::read::mamba_ssm_bytes);
    let g = r.gpu;
    let c = capacity::capacity(t, g, r.engine, &k)?;
    let (change, tried) = if c.starts {
        (None, Vec::new())
    } else {
        (
            suggest::serving(t, g, r.engine, &k),
            suggest::serving_tried(t, g, r.engine, &k),
        )
    };
    let kv = kv_dtype_name(r, t.blocks.storage.dtype, g);
    Ok(CapacityReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Capacity,
        model: t.name.clone(),
        description: header(&t.name, g, &c, kv, r.enforce_eager),
        kv_cache_dtype: kv.into(),
        gpu: g.into(),
        capacity: c,
        cheapest_change: change,
        changes_tried: tried,
        notes: crate::notes::of_model(&m.model)
            .into_iter()
            .chain(lookup_note)
            .chain(registry.note)
            .collect(),
    })
}

/// The model as `r.engine` at `version` builds it from `config`'s quantization settings, and
/// what to say of it, where that is not as transformers reads them (the description's
/// storage): a config that keeps its settings only in `text_config` is unquantized to an engine
/// that looks at the top level only (vLLM 0.10.1.1 and earlier, SGLang but for the config
/// classes that copy them up, [`QuantLookup`]). A checkpoint whose stored tensors the
/// unquantized layers cannot take (packed or scaled weights) is refused; any other is counted
/// in the dtype. `--weights` states the storage itself: nothing changes.
fn as_engine_loads(
    t: &vram_model::arch::Transformer,
    config: &serde_json::Value,
    r: &CapacityRequest,
    version: Option<[u32; 3]>,
) -> Result<(Option<vram_model::arch::Transformer>, Option<String>)> {
    let Some(map) = config.as_object() else {
        return Ok((None, None));
    };
    let lookup = engine_lookup(r.engine, version);
    let hf = quantization_config(map, QuantLookup::Transformers);
    let engine = quantization_config(map, lookup);
    let label = match version {
        Some([a, b, c]) => format!("{} {a}.{b}.{c}", r.engine.label()),
        None => r.engine.label().to_string(),
    };
    match (hf, engine) {
        (Some(hf), None) if r.weights.is_none() => {
            let reads = match r.engine {
                Engine::Vllm => "reads only the top level (`quantization_config`, else `compression_config`; vLLM 0.10.2 added the `text_config` fallback)",
                Engine::Sglang => "reads only the top level (`_parse_quant_hf_config`: `quantization_config`, else `compression_config`)",
            };
            if t.blocks.storage.is_packed() {
                return Err(input(format!(
                    "{label} cannot load this: this config keeps its quantization settings in `{}`, and {label} {reads}: it builds unquantized layers, which have no parameters for the checkpoint's quantized tensors ({}); the load stops at the first of them (SGLang 0.5.3's DeepSeek-V2 `load_weights`: a KeyError on the first packed expert tensor) or, in a model that skips unknown names, leaves those layers unloaded",
                    hf.path,
                    t.blocks.storage.name()
                )));
            }
            let mut unquantized = t.clone();
            unquantized.blocks.storage.quant = vram_model::describe::Quant::None;
            unquantized.blocks.storage.ignored = Default::default();
            Ok((
                Some(unquantized),
                Some(format!(
                    "{label} {reads}, and this config keeps its quantization settings in `{}`: the weights are counted unquantized, as it would load them{}",
                    hf.path,
                    if t.blocks.storage.quant == vram_model::describe::Quant::Other {
                        " (a checkpoint that stores quantized tensors would not load into those layers)"
                    } else {
                        ""
                    }
                )),
            ))
        }
        (Some(_), Some(e))
            if !lookup.falls_back_to_text_config()
                && e.path.starts_with("text_config") =>
        {
            Ok((
                None,
                Some(format!(
                    "{label} reads the quantization settings at the top level only; the config class of `{}` copies `text_config.quantization_config` there (`KimiK25Config.__init__`), so it loads them",
                    map.get("model_type").and_then(|m| m.as_str()).unwrap_or("?")
                )),
            ))
        }
        _ => Ok((None, None)),
    }
}

/// `--kv-cache-dtype` as the header line names it. `auto` is the model's dtype as the engine
/// resolves `--dtype` (vLLM `_resolve_auto_dtype`, read at 0.10.0 `config.py`, 0.11.0 and 0.21.0
/// `config/model.py`: a float16 or bfloat16 config is kept where the GPU supports the dtype
/// (`current_platform.supported_dtypes`: bfloat16 from compute capability 8.0), else it serves
/// in float16 with a warning, the same bytes; a float32 config serves in bfloat16 where the GPU
/// has it, else float16). For SGLang a bfloat16 config is named as stored.
fn kv_dtype_name(r: &CapacityRequest, config: StoredDtype, g: &Gpu) -> &'static str {
    let half = if g.bf16 {
        "bf16 (auto)"
    } else {
        "float16 (auto)"
    };
    match r.kv_cache_dtype {
        KvCacheDtype::Auto => match r.dtype {
            Dtype::Float32 => "float32 (auto)",
            Dtype::Float16 => "float16 (auto)",
            Dtype::Bfloat16 => "bf16 (auto)",
            Dtype::Auto => match config {
                StoredDtype::F16 => "float16 (auto)",
                // SGLang's resolution of a bfloat16 config on such a GPU is not read here.
                StoredDtype::Bf16 if r.engine == Engine::Vllm => half,
                StoredDtype::Bf16 => "bf16 (auto)",
                StoredDtype::F32 => half,
            },
        },
        KvCacheDtype::Bfloat16 => "bfloat16",
        KvCacheDtype::Fp8 => "fp8",
        KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
        KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
    }
}

/// The first line of the text, `description` in `--json`. SGLang's batch figure is the largest
/// CUDA graph's: under `--disable-cuda-graph` (`eager`) no graph is captured, so the line says
/// that instead of a batch size nothing uses.
fn header(name: &str, g: &Gpu, c: &Capacity, kv: &str, eager: bool) -> String {
    format!(
        "{name} on {} with {} {}: max_model_len {}, {}, {} {}, KV cache {kv}",
        g.with_memory(),
        c.engine.label(),
        c.engine_version,
        thousands(c.max_model_len),
        if c.engine == Engine::Vllm {
            format!("max_num_seqs {}", c.max_num_seqs)
        } else if eager {
            "no CUDA graphs (--disable-cuda-graph)".to_string()
        } else {
            format!("cuda_graph_max_bs {}", c.max_num_seqs)
        },
        if c.engine == Engine::Vllm {
            "max_num_batched_tokens"
        } else {
            "chunked_prefill_size"
        },
        c.max_num_batched_tokens,
    )
}

/// One row of the per-GPU table: its label, its bytes and what the text prints after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The label.
    pub label: &'static str,
    /// Bytes.
    pub bytes: u64,
    /// What follows the size (`(gpu_memory_utilization 0.9)`, `5,424 tokens, 339 blocks`).
    pub note: String,
}

impl CapacityReport {
    fn vllm(&self) -> bool {
        self.capacity.engine == Engine::Vllm
    }

    /// The engine's name as people write it.
    pub fn engine_name(&self) -> &'static str {
        self.capacity.engine.label()
    }

    /// The per-GPU table, row for row.
    pub fn rows(&self) -> Vec<Row> {
        let c = &self.capacity;
        let vllm = self.vllm();
        vec![
            Row {
                label: "budget",
                bytes: c.budget_bytes,
                note: format!(
                    "({} {})",
                    if vllm {
                        "gpu_memory_utilization"
                    } else {
                        "mem_fraction_static"
                    },
                    capacity::fraction_text(c.memory_fraction)
                ),
            },
            Row {
                label: "weights",
                bytes: c.weights_bytes,
                note: String::new(),
            },
            Row {
                label: "non-torch memory",
                bytes: c.non_torch_bytes,
                note: String::new(),
            },
            Row {
                label: "activation peak (profile)",
                bytes: c.activation_peak_bytes,
                note: if vllm {
                    String::new()
                } else {
                    "(inside the reserve)".into()
                },
            },
            Row {
                label: "KV cache",
                bytes: c.kv_cache_bytes,
                note: format!(
                    "{} tokens, {} {}",
                    thousands(c.kv_cache_tokens),
                    thousands(c.kv_cache_blocks),
                    if vllm { "blocks" } else { "pages" }
                ),
            },
            Row {
                label: "CUDA graphs",
                bytes: c.cuda_graph_bytes,
                note: if !vllm {
                    "(inside the reserve)".into()
                } else if c.cuda_graph_in_budget {
                    "(inside the budget)".into()
                } else {
                    "(beyond the budget)".into()
                },
            },
        ]
    }

    /// The pool per layer kind, for models with more than one kind: (kind, page bytes, detail).
    pub fn kv_group_rows(&self) -> Vec<(String, u64, String)> {
        let g = &self.capacity.kv_groups;
        if g.len() <= 1 {
            return Vec::new();
        }
        g.iter()
            .map(|g| {
                (
                    g.kind.to_string(),
                    g.page_bytes,
                    format!(
                        "a page; {} layers in {} group(s) of {}, {}",
                        g.layers,
                        g.groups,
                        g.layers_per_group,
                        if let Some(n) = g.state_slots {
                            format!("{} request slots", thousands(n))
                        } else if g.kind == "state" {
                            "one block a request".to_string()
                        } else {
                            format!("{}-token blocks", g.block_size)
                        }
                    ),
                )
            })
            .collect()
    }

    /// The verdict lines: whether it starts, the longest length that would, the change.
    pub fn verdict_lines(&self) -> Vec<String> {
        let c = &self.capacity;
        if c.starts {
            return vec![format!(
                "starts: {:.2} requests of {} tokens at once",
                c.max_concurrency,
                thousands(c.max_model_len)
            )];
        }
        let mut v = vec!["does NOT start".to_string()];
        v.push(if c.max_model_len_that_fits == 0 {
            "largest max_model_len that would: none (no KV cache fits beside the weights)".into()
        } else if c.max_model_len_that_fits >= c.max_model_len {
            "largest max_model_len that would: none shorter helps (one request fits the KV cache; what the engine does once it is sized fails, see the log)".into()
        } else {
            format!(
                "largest max_model_len that would: {}",
                thousands(c.max_model_len_that_fits)
            )
        });
        v.push(match &self.cheapest_change {
            Some(f) => format!(
                "cheapest change that starts at max_model_len {}: {} {}",
                thousands(c.max_model_len),
                f.flags,
                f.gives()
            ),
            None if self.changes_tried.is_empty() => {
                "no single change left to try: the job already makes every one modelled (the largest memory share its start-up takes, fp8 KV cache, fp8 weights, TP 2-8, PP 2-4)"
                    .into()
            }
            None => format!(
                "no single change tried ({}) starts it at this length",
                self.changes_tried.join(", ")
            ),
        });
        v
    }

    /// The `assumed:` line.
    pub fn assumed_line(&self) -> String {
        format!("assumed: {}", self.capacity.assumes.join("; "))
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = self.write_text(&mut out);
        out
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "{}", self.description)?;
        writeln!(out)?;
        writeln!(out, "what {} would log at start-up:", self.engine_name())?;
        for l in &self.capacity.log {
            writeln!(out, "  {l}")?;
        }
        writeln!(out)?;
        writeln!(out, "{:<28} {:>12}", "per GPU", "bytes")?;
        for (i, r) in self.rows().iter().enumerate() {
            let line = if r.note.is_empty() {
                format!("{:<28} {:>12}", r.label, bytes(r.bytes))
            } else {
                format!("{:<28} {:>12}   {}", r.label, bytes(r.bytes), r.note)
            };
            writeln!(out, "{line}")?;
            // The pool per kind follows the KV cache's row.
            if i == 4 {
                for (kind, page, detail) in self.kv_group_rows() {
                    writeln!(out, "  {:<26} {:>12}   {detail}", kind, bytes(page))?;
                }
            }
        }
        writeln!(out)?;
        for l in self.verdict_lines() {
            writeln!(out, "{l}")?;
        }
        writeln!(out, "{}", self.assumed_line())?;
        crate::notes::write(out, &self.notes)
    }
}
