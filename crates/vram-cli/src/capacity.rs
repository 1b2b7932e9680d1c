//! `vram capacity`: what vLLM or SGLang would log at start-up for a model on a GPU, whether it
//! starts, and what to change when it does not ([`vram_plan::capacity`]).

use std::io::Write;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::json;
use vram_model::arch::Model;
use vram_model::gpu;
use vram_plan::capacity::{self, Capacity, Engine, Knobs, Quantization};

use crate::input::resolve_model;
use crate::{bad_input, fmt};

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// vLLM (V1 engine).
    Vllm,
    /// SGLang.
    Sglang,
}

/// `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheDtype {
    /// The model's dtype.
    Auto,
    /// FP8 (e4m3 by default).
    Fp8,
    #[value(name = "fp8_e4m3")]
    /// FP8 e4m3.
    Fp8E4m3,
    #[value(name = "fp8_e5m2")]
    /// FP8 e5m2.
    Fp8E5m2,
    /// bfloat16 (vLLM only).
    #[value(alias = "bf16")]
    Bfloat16,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// The config's dtype (bf16 for the catalog's models).
    Auto,
    /// bfloat16.
    Bfloat16,
    /// float16.
    #[value(alias = "half")]
    Float16,
    /// float32.
    #[value(alias = "float")]
    Float32,
}

/// Arguments of `vram capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// The serving engine.
    #[arg(long, value_enum, default_value = "vllm")]
    engine: EngineArg,
    /// The engine's version whose memory layout applies: vllm 0.5 to 0.20 (V0 to 0.7; from 0.8
    /// to 0.10 V1, falling back to V0 on GPUs older than Ampere, fp32 and an fp8 KV cache off
    /// Hopper), sglang 0.4 and 0.5 [default: vllm 0.11, sglang 0.5].
    #[arg(long)]
    engine_version: Option<String>,
    /// GPU (see `vram gpus`), or a bare size such as 23.58GiB.
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    /// vLLM: fraction of the device the engine may use [default: 0.9, vLLM v0.11.0
    /// `vllm/config/cache.py` `CacheConfig.gpu_memory_utilization`].
    #[arg(long)]
    gpu_memory_utilization: Option<f64>,
    /// Longest request (prompt plus output; SGLang --context-length) [default: the model's
    /// max_position_embeddings, stretched by its rope_scaling as vLLM v0.11.0
    /// `_get_and_verify_max_len` / SGLang v0.5.3 `get_context_length` do].
    #[arg(long, alias = "context-length")]
    max_model_len: Option<u64>,
    /// vLLM: most sequences per step [default for `vllm serve`: 1024 on >= 70 GiB GPUs but the
    /// A100, else 256; vLLM v0.11.0 `engine/arg_utils.py` `_set_default_args`].
    #[arg(long)]
    max_num_seqs: Option<u64>,
    /// vLLM: most tokens per step [default for `vllm serve`: 8192 on >= 70 GiB GPUs but the
    /// A100, else 2048; vLLM v0.11.0 `_set_default_args`].
    #[arg(long)]
    max_num_batched_tokens: Option<u64>,
    /// KV cache element type (vLLM v0.11.0 `CacheDType`: auto, bfloat16, fp8, fp8_e4m3,
    /// fp8_e5m2; SGLang v0.5.3: auto, fp8_e4m3, fp8_e5m2).
    #[arg(long, value_enum, default_value = "auto")]
    kv_cache_dtype: KvCacheDtype,
    /// Tensor-parallel GPUs.
    #[arg(long, alias = "tp-size", alias = "tp", default_value_t = 1)]
    tensor_parallel_size: u64,
    /// Pipeline-parallel stages (on one node or across nodes: the same stages).
    #[arg(long, alias = "pp-size", alias = "pp", default_value_t = 1)]
    pipeline_parallel_size: u64,
    /// Data-parallel replicas of the TP group (vLLM --data-parallel-size, SGLang --dp-size).
    #[arg(long, alias = "dp-size", alias = "dp", default_value_t = 1)]
    data_parallel_size: u64,
    /// vLLM: spread whole experts over the TP x DP GPUs.
    #[arg(long)]
    enable_expert_parallel: bool,
    /// SGLang: spread whole experts over this many of the TP GPUs [default: 1].
    #[arg(long)]
    ep_size: Option<u64>,
    /// SGLang: run attention TP over tp / dp GPUs (needs --dp-size).
    #[arg(long)]
    enable_dp_attention: bool,
    /// vLLM: the VLLM_USE_V1 environment variable (0: V0 where the version has it; 1: V1 on
    /// 0.7 and earlier) [default: the version's own choice].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    vllm_use_v1: Option<u8>,
    /// No CUDA graphs (SGLang: --disable-cuda-graph).
    #[arg(long, alias = "disable-cuda-graph")]
    enforce_eager: bool,
    /// vLLM block size [16 on CUDA, `platforms/cuda.py`; one of 1, 8, 16, 32, 64, 128] /
    /// SGLang --page-size [1, `server_args._handle_page_size`], tokens.
    #[arg(long, alias = "page-size")]
    block_size: Option<u64>,
    /// Weight storage: fp8, int8, awq, gptq, bitsandbytes, mxfp4 [default: the config's quantization_config, else none].
    #[arg(long)]
    quantization: Option<String>,
    /// Model dtype.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
    /// SGLang: fraction of the device for weights and the KV pool [default: from the GPU's
    /// memory, SGLang v0.5.3 `server_args._handle_gpu_memory_settings`].
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    /// SGLang: cap on the KV pool's tokens.
    #[arg(long)]
    max_total_tokens: Option<u64>,
    /// SGLang: prefill chunk [default: 2048 below 35 GiB, 4096 below 60, 8192 below 160, else
    /// 16384; `_handle_gpu_memory_settings`].
    #[arg(long)]
    chunked_prefill_size: Option<u64>,
    /// SGLang: largest CUDA-graph batch [default: from the GPU's memory and TP,
    /// `_handle_gpu_memory_settings`].
    #[arg(long)]
    cuda_graph_max_bs: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `quantization_config.quant_method` of the model's config.json, if any.
fn config_quantization(config: &serde_json::Value) -> Result<Option<Quantization>> {
    match config["quantization_config"]["quant_method"].as_str() {
        None => Ok(None),
        Some(m) => Quantization::parse(m).map(Some).ok_or_else(|| {
            bad_input!("the config's quantization_config.quant_method `{m}` is not one vram knows (fp8, int8, awq, gptq, bitsandbytes, mxfp4)")
        }),
    }
}

/// The longest `max_model_len` the engine derives from the config when its `rope_scaling` (or
/// transformers 5's `rope_parameters`) stretches `max_position_embeddings`; `None` when it
/// does not. vLLM 0.11 `vllm/config/model.py` `_get_and_verify_max_len`: every rope type but
/// `su`, `longrope` and `llama3` (and not for Gemma 3) multiplies by `factor`, `yarn` from
/// `original_max_position_embeddings`. SGLang 0.5.3 `srt/utils/hf_transformers_utils.py`
/// `get_context_length`: `factor` unless the scaling names `original_max_position_embeddings`
/// or is `llama3`.
fn derived_max_model_len(
    config: &serde_json::Value,
    positions: u64,
    engine: Engine,
) -> Option<u64> {
    let c = if config.get("rope_scaling").is_some() || config.get("rope_parameters").is_some() {
        config
    } else {
        config.get("text_config").unwrap_or(config)
    };
    let rs = c
        .get("rope_scaling")
        .filter(|v| v.is_object())
        .or_else(|| c.get("rope_parameters").filter(|v| v.is_object()))?;
    let rope_type = rs["rope_type"]
        .as_str()
        .or_else(|| rs["type"].as_str())
        .unwrap_or("default");
    let factor = rs["factor"].as_f64().unwrap_or(1.0);
    let original = rs["original_max_position_embeddings"].as_u64();
    let derived = match engine {
        Engine::Vllm => {
            let model_type = c["model_type"]
                .as_str()
                .or_else(|| config["model_type"].as_str())
                .unwrap_or("");
            if ["su", "longrope", "llama3"].contains(&rope_type) || model_type.contains("gemma3") {
                return None;
            }
            let base = if rope_type == "yarn" {
                original.unwrap_or(positions)
            } else {
                positions
            };
            (base as f64 * factor) as u64
        }
        Engine::Sglang => {
            if original.is_some() || rope_type == "llama3" {
                return None;
            }
            (positions as f64 * factor) as u64
        }
    };
    (derived != positions && derived > 0).then_some(derived)
}

/// The knobs these flags describe for `engine` and the model `t` read from `config`; flags of
/// the other engine, and values the engine does not accept, are refused.
fn knobs(
    a: &CapacityArgs,
    engine: Engine,
    t: &vram_model::arch::Transformer,
    config: &serde_json::Value,
    from_catalog: bool,
) -> Result<Knobs> {
    let vllm_only = [
        (
            "--gpu-memory-utilization",
            a.gpu_memory_utilization.is_some(),
        ),
        ("--max-num-seqs", a.max_num_seqs.is_some()),
        (
            "--max-num-batched-tokens",
            a.max_num_batched_tokens.is_some(),
        ),
        ("--enable-expert-parallel", a.enable_expert_parallel),
        ("--vllm-use-v1", a.vllm_use_v1.is_some()),
    ];
    let sglang_only = [
        ("--mem-fraction-static", a.mem_fraction_static.is_some()),
        ("--max-total-tokens", a.max_total_tokens.is_some()),
        ("--chunked-prefill-size", a.chunked_prefill_size.is_some()),
        ("--cuda-graph-max-bs", a.cuda_graph_max_bs.is_some()),
        ("--ep-size", a.ep_size.is_some()),
        ("--enable-dp-attention", a.enable_dp_attention),
    ];
    let (other, wrong) = match engine {
        Engine::Vllm => ("an SGLang", &sglang_only[..]),
        Engine::Sglang => ("a vLLM", &vllm_only[..]),
    };
    if let Some((flag, _)) = wrong.iter().find(|(_, set)| *set) {
        return Err(bad_input!(
            "{flag} is {other} flag; not for --engine {}",
            engine.name()
        ));
    }
    // The values each engine's parser accepts: vLLM 0.11 `vllm/config/cache.py` (`CacheDType`,
    // `BlockSize`), SGLang 0.5.3 `srt/server_args.py` (`--kv-cache-dtype` choices).
    let kv_ok = match engine {
        Engine::Vllm => true,
        Engine::Sglang => matches!(
            a.kv_cache_dtype,
            KvCacheDtype::Auto | KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2
        ),
    };
    if !kv_ok {
        let name = a
            .kv_cache_dtype
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string());
        return Err(bad_input!(
            "--kv-cache-dtype {name} is not one of {}'s choices ({})",
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
        ));
    }
    if let (Engine::Vllm, Some(b)) = (engine, a.block_size) {
        if ![1, 8, 16, 32, 64, 128].contains(&b) {
            return Err(bad_input!(
                "--block-size {b} is not one of vLLM 0.11's block sizes (1, 8, 16, 32, 64, 128)"
            ));
        }
    }
    let quantization = match &a.quantization {
        Some(q) => Quantization::parse(q).ok_or_else(|| {
            bad_input!(
                "--quantization `{q}` is not one of none, fp8, int8, awq, gptq, bitsandbytes, mxfp4"
            )
        })?,
        // A config's `quantization_config`, local or from the Hub (a catalog entry's quantized
        // storage is read by the model description itself).
        None if !from_catalog => config_quantization(config)?.unwrap_or(Quantization::None),
        None => Quantization::None,
    };
    let dtype_bytes = if a.dtype == DtypeArg::Float32 { 4 } else { 2 };
    Ok(Knobs {
        gpu_memory_utilization: a.gpu_memory_utilization,
        max_model_len: a.max_model_len,
        max_num_seqs: a.max_num_seqs,
        max_num_batched_tokens: a.max_num_batched_tokens,
        kv_bytes: match a.kv_cache_dtype {
            KvCacheDtype::Auto => None,
            KvCacheDtype::Fp8 | KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2 => Some(1),
            KvCacheDtype::Bfloat16 => Some(2),
        },
        tp: a.tensor_parallel_size,
        pp: a.pipeline_parallel_size,
        enforce_eager: a.enforce_eager,
        block_size: a.block_size,
        quantization,
        dtype_bytes,
        mem_fraction_static: a.mem_fraction_static,
        max_total_tokens: a.max_total_tokens,
        chunked_prefill_size: a.chunked_prefill_size,
        cuda_graph_max_bs: a.cuda_graph_max_bs,
        mamba_ssm_bytes: None,
        vllm_v0: a.vllm_use_v1 == Some(0),
        vllm_v1: a.vllm_use_v1 == Some(1),
        dp: a.data_parallel_size,
        expert_parallel: a.enable_expert_parallel,
        ep: a.ep_size.unwrap_or(1),
        dp_attention: a.enable_dp_attention,
        engine_version: a
            .engine_version
            .as_deref()
            .and_then(capacity::parse_version),
        derived_max_model_len: derived_max_model_len(config, t.max_positions, engine),
    })
}

/// The model's name, the GPU, the capacity, and the cheapest change when it does not start.
type Answer = (
    String,
    &'static gpu::Gpu,
    Capacity,
    Option<(String, Capacity)>,
);

/// The capacity these flags describe, and the cheapest change when it does not start: the
/// one computation behind the text, `--json` and Python's `vramkit.capacity`.
pub fn compute(a: &CapacityArgs) -> Result<Answer> {
    let engine = match a.engine {
        EngineArg::Vllm => Engine::Vllm,
        EngineArg::Sglang => Engine::Sglang,
    };
    if let Some(v) = &a.engine_version {
        let known = engine.versions();
        if !known
            .iter()
            .any(|k| v == k || v.starts_with(&format!("{k}.")))
        {
            return Err(bad_input!(
                "--engine-version {v}: the {} memory layouts known are {} (read from its source)",
                engine.name(),
                known.join(", ")
            ));
        }
    }
    let g = gpu::lookup(&a.gpu)?;
    let resolved = resolve_model(&a.model, &a.hub)?;
    let Model::Transformer(t) = &resolved.model else {
        return Err(bad_input!(
            "`{}` is not a transformer language model; vLLM and SGLang serve those",
            a.model
        ));
    };
    let config: serde_json::Value = resolved
        .config
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let mut k = knobs(
        a,
        engine,
        t,
        &config,
        resolved.origin == crate::input::Origin::Catalog,
    )?;
    // vLLM keeps a hybrid model's recurrent state in the config's `mamba_ssm_dtype`.
    k.mamba_ssm_bytes = resolved
        .config
        .as_deref()
        .and_then(capacity::config_mamba_ssm_bytes);
    let c = capacity::capacity(t, g, engine, &k)?;
    let fix = if c.starts {
        None
    } else {
        capacity::cheapest_change(t, g, engine, &k)
    };
    Ok((t.name.clone(), g, c, fix))
}

/// `--kv-cache-dtype` as the header line names it.
fn kv_dtype_name(a: &CapacityArgs) -> &'static str {
    match a.kv_cache_dtype {
        KvCacheDtype::Auto if a.dtype == DtypeArg::Float32 => "float32 (auto)",
        KvCacheDtype::Auto => "bf16 (auto)",
        KvCacheDtype::Bfloat16 => "bfloat16",
        KvCacheDtype::Fp8 => "fp8",
        KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
        KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
    }
}

/// The engine's name as people write it.
fn engine_name(e: Engine) -> &'static str {
    match e {
        Engine::Vllm => "vLLM",
        Engine::Sglang => "SGLang",
    }
}

/// The first line of the text, `description` in `--json` (and the HTML report's setup line).
fn header(a: &CapacityArgs, name: &str, g: &gpu::Gpu, c: &Capacity) -> String {
    format!(
        "{name} on {} ({}) with {} {}: max_model_len {}, {} {}, {} {}, KV cache {}",
        g.name,
        fmt::bytes(g.memory_bytes),
        engine_name(c.engine),
        c.engine_version,
        fmt::thousands(c.max_model_len),
        if c.engine == Engine::Vllm {
            "max_num_seqs"
        } else {
            "cuda_graph_max_bs"
        },
        c.max_num_seqs,
        if c.engine == Engine::Vllm {
            "max_num_batched_tokens"
        } else {
            "chunked_prefill_size"
        },
        c.max_num_batched_tokens,
        kv_dtype_name(a),
    )
}

pub fn run(a: &CapacityArgs) -> Result<()> {
    let (name, g, c, fix) = compute(a)?;
    let mut out = crate::output::stdout();
    let description = header(a, &name, g, &c);
    if a.json {
        let mut v = serde_json::to_value(&c)?;
        v["model"] = json!(name);
        v["description"] = json!(description);
        v["kv_cache_dtype"] = json!(kv_dtype_name(a));
        v["gpu"] = json!({"id": g.id, "name": g.name, "memory_bytes": g.memory_bytes});
        v["cheapest_change"] = match &fix {
            Some((flag, f)) => {
                json!({"flags": flag, "kv_cache_tokens": f.kv_cache_tokens, "max_concurrency": f.max_concurrency})
            }
            None => serde_json::Value::Null,
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    let engine = engine_name(c.engine);
    writeln!(out, "{description}")?;
    writeln!(out)?;
    writeln!(out, "what {engine} would log at start-up:")?;
    for l in &c.log {
        writeln!(out, "  {l}")?;
    }
    writeln!(out)?;
    let frac = if c.engine == Engine::Vllm {
        format!("gpu_memory_utilization {}", c.memory_fraction)
    } else {
        format!("mem_fraction_static {}", c.memory_fraction)
    };
    writeln!(out, "{:<28} {:>12}", "per GPU", "bytes")?;
    writeln!(
        out,
        "{:<28} {:>12}   ({frac})",
        "budget",
        fmt::bytes(c.budget_bytes)
    )?;
    writeln!(out, "{:<28} {:>12}", "weights", fmt::bytes(c.weights_bytes))?;
    writeln!(
        out,
        "{:<28} {:>12}",
        "non-torch memory",
        fmt::bytes(c.non_torch_bytes)
    )?;
    writeln!(
        out,
        "{:<28} {:>12}{}",
        "activation peak (profile)",
        fmt::bytes(c.activation_peak_bytes),
        if c.engine == Engine::Sglang {
            "   (inside the reserve)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "{:<28} {:>12}   {} tokens, {} {}",
        "KV cache",
        fmt::bytes(c.kv_cache_bytes),
        fmt::thousands(c.kv_cache_tokens),
        fmt::thousands(c.kv_cache_blocks),
        if c.engine == Engine::Vllm {
            "blocks"
        } else {
            "pages"
        }
    )?;
    // Models with more than one kind of layer cache: the pool per kind.
    if c.kv_groups.len() > 1 {
        for g in &c.kv_groups {
            writeln!(
                out,
                "  {:<26} {:>12}   a page; {} layers in {} group(s) of {}, {}",
                g.kind,
                fmt::bytes(g.page_bytes),
                g.layers,
                g.groups,
                g.layers_per_group,
                if let Some(n) = g.state_slots {
                    format!("{} request slots", fmt::thousands(n))
                } else if g.kind == "state" {
                    "one block a request".to_string()
                } else {
                    format!("{}-token blocks", g.block_size)
                }
            )?;
        }
    }
    writeln!(
        out,
        "{:<28} {:>12}   ({})",
        "CUDA graphs",
        fmt::bytes(c.cuda_graph_bytes),
        if c.engine == Engine::Sglang {
            "inside the reserve"
        } else if c.cuda_graph_in_budget {
            "inside the budget"
        } else {
            "beyond the budget"
        }
    )?;
    writeln!(out)?;
    if c.starts {
        writeln!(
            out,
            "starts: {:.2} requests of {} tokens at once",
            c.max_concurrency,
            fmt::thousands(c.max_model_len)
        )?;
    } else {
        writeln!(out, "does NOT start")?;
        if c.max_model_len_that_fits == 0 {
            writeln!(
                out,
                "largest max_model_len that would: none (no KV cache fits beside the weights)"
            )?;
        } else {
            writeln!(
                out,
                "largest max_model_len that would: {}",
                fmt::thousands(c.max_model_len_that_fits)
            )?;
        }
        match &fix {
            Some((flag, f)) => writeln!(
                out,
                "cheapest change that starts at max_model_len {}: {flag} ({} tokens, {:.2} requests at once)",
                fmt::thousands(c.max_model_len),
                fmt::thousands(f.kv_cache_tokens),
                f.max_concurrency
            )?,
            None => writeln!(
                out,
                "no single change tried (fp8 KV cache, fp8 weights, TP 2-8, PP 2-4) starts it at this length"
            )?,
        }
    }
    writeln!(out, "assumed: {}", c.assumes.join("; "))?;
    Ok(())
}
