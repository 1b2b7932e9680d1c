//! `vram capacity`: what vLLM or SGLang would log at start-up for a model on a GPU, whether it
//! starts, and what to change when it does not ([`vram_plan::capacity`]).

use std::io::Write;
use std::path::Path;

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
    /// bfloat16.
    #[value(alias = "bf16")]
    Bfloat16,
    /// float16.
    Float16,
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
    /// A catalog id, a config.json or a folder holding one.
    model: String,
    /// The serving engine.
    #[arg(long, value_enum, default_value = "vllm")]
    engine: EngineArg,
    /// The engine's version (its memory layout; see --help for the known ones).
    #[arg(long)]
    engine_version: Option<String>,
    /// GPU (see `vram gpus`), or a bare size such as 23.58GiB.
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    /// vLLM: fraction of the device the engine may use [default: 0.9].
    #[arg(long)]
    gpu_memory_utilization: Option<f64>,
    /// Longest request (prompt plus output) [default: the model's max_position_embeddings].
    #[arg(long, alias = "context-length")]
    max_model_len: Option<u64>,
    /// vLLM: most sequences per step [default: 1024 on >= 70 GiB GPUs but the A100, else 256].
    #[arg(long)]
    max_num_seqs: Option<u64>,
    /// vLLM: most tokens per step [default: 8192 on >= 70 GiB GPUs but the A100, else 2048].
    #[arg(long)]
    max_num_batched_tokens: Option<u64>,
    /// KV cache element type.
    #[arg(long, value_enum, default_value = "auto")]
    kv_cache_dtype: KvCacheDtype,
    /// Tensor-parallel GPUs.
    #[arg(long, alias = "tp-size", alias = "tp", default_value_t = 1)]
    tensor_parallel_size: u64,
    /// Pipeline-parallel stages.
    #[arg(long, alias = "pp-size", alias = "pp", default_value_t = 1)]
    pipeline_parallel_size: u64,
    /// No CUDA graphs (SGLang: --disable-cuda-graph).
    #[arg(long, alias = "disable-cuda-graph")]
    enforce_eager: bool,
    /// vLLM block size [16] / SGLang page size [1], tokens.
    #[arg(long, alias = "page-size")]
    block_size: Option<u64>,
    /// Weight storage: fp8, awq, gptq, bitsandbytes, mxfp4 [default: the config's quantization_config, else none].
    #[arg(long)]
    quantization: Option<String>,
    /// Model dtype.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
    /// SGLang: fraction of the device for weights and the KV pool [default: from the GPU's memory].
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    /// SGLang: cap on the KV pool's tokens.
    #[arg(long)]
    max_total_tokens: Option<u64>,
    /// SGLang: prefill chunk [default: from the GPU's memory].
    #[arg(long)]
    chunked_prefill_size: Option<u64>,
    /// SGLang: largest CUDA-graph batch [default: from the GPU's memory].
    #[arg(long)]
    cuda_graph_max_bs: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `quantization_config.quant_method` of the config.json behind `arg` (a path), if any.
fn config_quantization(arg: &str) -> Result<Option<Quantization>> {
    let p = Path::new(arg);
    let cfg = if p.is_dir() {
        p.join("config.json")
    } else if p.is_file() && arg.ends_with(".json") && !arg.ends_with(".index.json") {
        p.to_path_buf()
    } else {
        return Ok(None);
    };
    let Ok(text) = std::fs::read_to_string(&cfg) else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    match v["quantization_config"]["quant_method"].as_str() {
        None => Ok(None),
        Some(m) => Quantization::parse(m).map(Some).ok_or_else(|| {
            bad_input!("{}: quantization_config.quant_method `{m}` is not one vram knows (fp8, awq, gptq, bitsandbytes, mxfp4)", cfg.display())
        }),
    }
}

/// The knobs these flags describe for `engine`; flags of the other engine are refused.
fn knobs(a: &CapacityArgs, engine: Engine) -> Result<Knobs> {
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
    ];
    let sglang_only = [
        ("--mem-fraction-static", a.mem_fraction_static.is_some()),
        ("--max-total-tokens", a.max_total_tokens.is_some()),
        ("--chunked-prefill-size", a.chunked_prefill_size.is_some()),
        ("--cuda-graph-max-bs", a.cuda_graph_max_bs.is_some()),
    ];
    let (other, wrong) = match engine {
        Engine::Vllm => ("SGLang", &sglang_only[..]),
        Engine::Sglang => ("vLLM", &vllm_only[..]),
    };
    if let Some((flag, _)) = wrong.iter().find(|(_, set)| *set) {
        return Err(bad_input!(
            "{flag} is an {other} flag; not for --engine {}",
            engine.name()
        ));
    }
    let quantization = match &a.quantization {
        Some(q) => Quantization::parse(q).ok_or_else(|| {
            bad_input!(
                "--quantization `{q}` is not one of none, fp8, awq, gptq, bitsandbytes, mxfp4"
            )
        })?,
        None => config_quantization(&a.model)?.unwrap_or(Quantization::None),
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
            KvCacheDtype::Bfloat16 | KvCacheDtype::Float16 => Some(2),
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
        vllm_v0: engine == Engine::Vllm
            && a.engine_version.as_deref().is_some_and(|v| {
                ["0.5", "0.6", "0.7"]
                    .iter()
                    .any(|k| v == *k || v.starts_with(&format!("{k}.")))
            }),
        engine_version: a
            .engine_version
            .as_deref()
            .and_then(capacity::parse_version),
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
    let resolved = resolve_model(&a.model)?;
    let Model::Transformer(t) = &resolved.model else {
        return Err(bad_input!(
            "`{}` is not a transformer language model; vLLM and SGLang serve those",
            a.model
        ));
    };
    let mut k = knobs(a, engine)?;
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

pub fn run(a: &CapacityArgs) -> Result<()> {
    let (name, g, c, fix) = compute(a)?;
    let mut out = crate::output::stdout();
    if a.json {
        let mut v = serde_json::to_value(&c)?;
        v["model"] = json!(name);
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
    let engine = match c.engine {
        Engine::Vllm => "vLLM",
        Engine::Sglang => "SGLang",
    };
    writeln!(
        out,
        "{name} on {} ({}) with {engine} {}: max_model_len {}, {} {}, {} {}, KV cache {}",
        g.name,
        fmt::bytes(g.memory_bytes),
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
        match a.kv_cache_dtype {
            KvCacheDtype::Auto if a.dtype == DtypeArg::Float32 => "float32 (auto)",
            KvCacheDtype::Auto => "bf16 (auto)",
            KvCacheDtype::Bfloat16 | KvCacheDtype::Float16 => "16-bit",
            _ => "fp8",
        },
    )?;
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
        "{:<28} {:>12}   {} tokens",
        "KV cache",
        fmt::bytes(c.kv_cache_bytes),
        fmt::thousands(c.kv_cache_tokens)
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
        writeln!(
            out,
            "largest max_model_len that would: {}",
            fmt::thousands(c.max_model_len_that_fits)
        )?;
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
                "no single change tried (fp8 KV cache, fp8 weights, TP 2-8) starts it at this length"
            )?,
        }
    }
    writeln!(out, "assumed: {}", c.assumes.join("; "))?;
    Ok(())
}
