//! Every start-up failure `vram capacity` predicts, read back by `vram doctor`: the engine's
//! own texts (`vram_plan::capacity`'s vLLM and SGLang failure lines, and the load refusals of
//! `capacity/engine.rs`) must come back as the doctor's matching kind with the figures the
//! capacity answer holds; vram's own estimates of an out-of-memory failure, which no engine
//! prints in those words, must be refused as such, in one line.

mod common;
use common::{vram, vram_stdin};

use serde_json::Value;
use vram_doctor::serving::ServingError;
use vram_doctor::{read, Reading};

/// `vram capacity ARGS --json`: the answer and its failure line (the log's last line naming an
/// error), which it must have.
fn predicted(args: &str) -> (Value, String) {
    let mut a: Vec<&str> = vec!["capacity"];
    a.extend(args.split_whitespace());
    a.push("--json");
    let (code, out, err) = vram(&a);
    assert_eq!(code, 0, "{args}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["starts"], false, "{args}");
    let line = common::log_lines(&v)
        .into_iter()
        .rfind(|l| l.contains("Error:"))
        .unwrap_or_else(|| panic!("{args}: no failure line in {:?}", v["log"]))
        .to_string();
    (v, line)
}

/// The doctor's reading of `line`, through the library and through `vram doctor --json` (the
/// same kind, and the CLI exits 0).
fn serving(line: &str) -> ServingError {
    let Ok(Reading::Serving(e)) = read(line) else {
        panic!("not read as a serving error: {line}");
    };
    let (code, out, err) = vram_stdin(&["doctor", "--json", "-"], line);
    assert_eq!(code, 0, "{line}: {err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["error"]["error"], e.kind(), "{line}");
    e
}

fn gib(v: &Value) -> f64 {
    v.as_u64().unwrap() as f64 / (1u64 << 30) as f64
}

/// vLLM's KV-cache failures: V1's `KV cache is needed` (0.11.0), V0's `max seq len ... stored in
/// KV cache` (0.6.4), and `No available memory for the cache blocks`, each with the answer's
/// figures (the message prints GiB to two decimals).
#[test]
fn vllm_kv_cache_failures_read_back_with_their_figures() {
    let (v, line) = predicted("qwen3-8b --gpu l4 --max-model-len 40960 --engine-version 0.11.0");
    let ServingError::VllmKvMemory {
        max_model_len,
        available_bytes,
        estimated_max_len,
        ..
    } = serving(&line)
    else {
        panic!("{line}")
    };
    assert_eq!(Some(max_model_len), v["max_model_len"].as_u64(), "{line}");
    assert_eq!(estimated_max_len, v["max_model_len_that_fits"].as_u64());
    // The message prints the memory available before vLLM floors it to whole blocks
    // (`kv_cache_utils`: num_blocks = available // page_size // layers); the answer's
    // `kv_cache_bytes` is after the floor, so the two differ by the print's rounding plus up
    // to one block of every layer.
    let avail = available_bytes as f64 / (1u64 << 30) as f64;
    let block = gib(&v["kv_cache_bytes"]) / v["kv_cache_blocks"].as_u64().unwrap() as f64;
    let diff = avail - gib(&v["kv_cache_bytes"]);
    assert!(
        (-0.005 - 1e-9..=0.005 + block + 1e-9).contains(&diff),
        "{avail} GiB read, {} GiB in the answer (one block {block} GiB)",
        gib(&v["kv_cache_bytes"])
    );

    let (v, line) =
        predicted("llama-3.1-8b --gpu l4 --max-model-len 131072 --engine-version 0.6.4");
    assert_eq!(
        serving(&line),
        ServingError::VllmMaxSeqLen {
            max_model_len: v["max_model_len"].as_u64().unwrap(),
            kv_tokens: v["kv_cache_tokens"].as_u64().unwrap(),
            cpu_backend: false,
        }
    );

    let (v, line) = predicted(
        "qwen3-8b --gpu l4 --max-model-len 4096 --engine-version 0.11.0 --gpu-memory-utilization 0.7",
    );
    assert_eq!(
        serving(&line),
        ServingError::VllmNoCacheMemory {
            available_bytes: None
        }
    );
    assert_eq!(v["kv_cache_tokens"], 0);
}

/// vLLM's failures after the KV cache is sized: the hybrid pool's Mamba blocks below
/// `max_num_seqs` (0.22.1) and the sampler warm-up (0.11.0), with the answer's figures.
#[test]
fn vllm_failures_after_the_cache_read_back_with_their_figures() {
    let (v, line) =
        predicted("qwen3.5-27b --gpu h100-80g --max-model-len 16384 --engine-version 0.22.1");
    assert_eq!(
        serving(&line),
        ServingError::VllmMambaBlocks {
            max_num_seqs: v["max_num_seqs"].as_u64().unwrap(),
            blocks: v["kv_cache_blocks"].as_u64().unwrap(),
        }
    );

    let (v, line) = predicted(
        "llama-3-8b --gpu a10 --max-model-len 4096 --engine-version 0.11.0 --gpu-memory-utilization 0.95",
    );
    let seqs = v["max_num_seqs"].as_u64().unwrap();
    let tokens = v["max_num_batched_tokens"].as_u64().unwrap();
    assert_eq!(
        serving(&line),
        ServingError::VllmSamplerWarmUp {
            requests: seqs.min(tokens)
        }
    );
}

/// SGLang's: `Not enough memory` where the pool gets no tokens (0.5.3) and, from 0.5.14,
/// `Loaded weights leave no GPU memory for the KV cache`, with the fraction the answer used.
#[test]
fn sglang_failures_read_back_with_their_figures() {
    let (v, line) = predicted(
        "qwen3-8b --gpu l4 --context-length 4096 --engine sglang --engine-version 0.5.3 --mem-fraction-static 0.7",
    );
    let ServingError::SglangNotEnoughMemory {
        mem_fraction_static,
    } = serving(&line)
    else {
        panic!("{line}")
    };
    // SGLang 0.5.3 prints the fraction (`Current value: ...`).
    assert_eq!(mem_fraction_static, v["memory_fraction"].as_f64(), "{line}");

    let (v, line) = predicted(
        "qwen3-8b --gpu l4 --context-length 4096 --engine sglang --engine-version 0.5.23 --mem-fraction-static 0.7",
    );
    let ServingError::SglangWeightsLeaveNoKv {
        mem_fraction_static,
        minimum_fraction,
        ..
    } = serving(&line)
    else {
        panic!("{line}")
    };
    assert_eq!(Some(mem_fraction_static), v["memory_fraction"].as_f64());
    assert!(
        minimum_fraction.is_some_and(|m| m > mem_fraction_static),
        "{line}"
    );
}

/// The load refusals `vram capacity` prints as its one-line error (exit 2): vLLM 0.22.1's
/// Marlin refusal of a GPTQ checkpoint on a V100, read back with the group size, the V100's
/// device capability and Marlin's empty type list.
#[test]
fn load_refusals_read_back_with_their_figures() {
    let dir = std::env::temp_dir().join(format!("vram-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("gptq.json");
    std::fs::write(
        &cfg,
        r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,"vocab_size":128256,"max_position_embeddings":8192,"rms_norm_eps":1e-5,"rope_theta":500000.0,"torch_dtype":"float16","tie_word_embeddings":false,"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false,"sym":true}}"#,
    )
    .unwrap();
    let cfg = cfg.to_string_lossy().into_owned();
    let (code, _, err) = vram(&[
        "capacity",
        &cfg,
        "--gpu",
        "v100-16g",
        "--engine-version",
        "0.22.1",
        "--max-model-len",
        "2048",
    ]);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    assert_eq!(
        serving(&err),
        ServingError::LoadMarlinUnsupported {
            engine: "vllm",
            group_size: Some(128),
            device_capability: Some(70),
            zero_points: Some(false),
            weight_type: Some("uint4b8".into()),
            supported_types: Some(Vec::new()),
        }
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// vram's own estimate of an out-of-memory failure (here CUDA-graph capture after the KV cache,
/// vLLM 0.11.0 at 0.99 of an L4) has no engine text to match: the engine prints PyTorch's
/// message with its own figures there. The doctor refuses it as vram's estimate, in one line,
/// exit 2.
#[test]
fn vram_estimated_oom_lines_are_refused_as_vram_own() {
    // vLLM 0.9.0: V1 before its start-up check (0.9.1 on refuses a share beyond what is free
    // at start, `the_start_up_check_refusal_reads_back_with_its_figures`), so the whole device
    // is taken and the graphs find no room.
    let (_, line) = predicted(
        "llama-3-8b --gpu l4 --max-model-len 8192 --engine-version 0.9.0 --gpu-memory-utilization 1.0",
    );
    assert!(line.contains("while capturing CUDA graphs"), "{line}");
    assert!(read(&line).is_err(), "{line}");
    let (code, _, err) = vram_stdin(&["doctor", "-"], &line);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    assert!(err.contains("vram's own estimate"), "{err}");
}

/// The engines' refusals `vram capacity` predicts that are not about memory (a chosen attention
/// backend FlashAttention cannot run, a release's registry without the architecture, `get_rope`'s
/// unknown scaling, SGLang's plain AWQ/GPTQ methods under an MoE layer): the doctor names each,
/// not as memory, in one line with exit 2, and never advises the choice the line refuses.
#[test]
fn non_memory_refusals_are_named_by_the_doctor() {
    let dir = std::env::temp_dir().join(format!("vram-roundtrip-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, json: &str| {
        let p = dir.join(name);
        std::fs::write(&p, json).unwrap();
        p.to_string_lossy().into_owned()
    };
    let rope = write(
        "rope.json",
        r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,"vocab_size":128256,"max_position_embeddings":8192,"rms_norm_eps":1e-5,"rope_theta":500000.0,"torch_dtype":"bfloat16","rope_scaling":{"rope_type":"ntk","factor":4.0}}"#,
    );
    let moe = |method: &str| {
        format!(
            r#"{{"architectures":["MixtralForCausalLM"],"model_type":"mixtral","hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,"num_local_experts":8,"num_experts_per_tok":2,"vocab_size":32000,"max_position_embeddings":32768,"rms_norm_eps":1e-5,"rope_theta":1000000.0,"torch_dtype":"float16","quantization_config":{{"quant_method":"{method}","bits":4,"group_size":128,"zero_point":true,"version":"gemm","desc_act":false,"sym":true}}}}"#
        )
    };
    // Xverse's name on a Llama-shaped decoder: vLLM 0.24.0 names it as removed.
    let xverse = write(
        "xverse.json",
        r#"{"architectures":["XverseForCausalLM"],"model_type":"xverse","hidden_act":"silu","hidden_size":4096,"intermediate_size":11008,"max_position_embeddings":8192,"num_attention_heads":32,"num_hidden_layers":32,"rms_norm_eps":1e-6,"vocab_size":100534,"torch_dtype":"bfloat16"}"#,
    );
    let awq = write("awq.json", &moe("awq"));
    let gptq = write("gptq.json", &moe("gptq"));
    for (args, says) in [
        (
            vec![
                "gemma-4-26b-a4b",
                "--engine-version",
                "0.20",
                "--attention-backend",
                "flash-attn",
            ],
            "FLASH_ATTN cannot run this model's layers",
        ),
        (
            vec!["gemma-4-26b-a4b", "--engine-version", "0.11.0"],
            "a release whose registry has them",
        ),
        (
            vec![xverse.as_str(), "--engine-version", "0.24.0"],
            "which removed the config's architecture in this release",
        ),
        (
            vec![rope.as_str(), "--engine-version", "0.8.5"],
            "refusing the config's rope_scaling",
        ),
        (
            vec![
                awq.as_str(),
                "--engine",
                "sglang",
                "--engine-version",
                "0.5.3",
                "--quantization",
                "awq",
            ],
            "--quantization awq_marlin (gptq_marlin), or none",
        ),
        (
            vec![
                gptq.as_str(),
                "--engine",
                "sglang",
                "--engine-version",
                "0.5.3",
                "--quantization",
                "gptq",
            ],
            "--quantization gptq_marlin, or none",
        ),
    ] {
        let mut a = vec!["capacity"];
        a.extend(&args);
        a.extend(["--gpu", "h100-80g"]);
        let (code, _, line) = vram(&a);
        assert_eq!(
            (code, line.trim().lines().count()),
            (2, 1),
            "{args:?}: {line}"
        );
        let (code, out, err) = vram_stdin(&["doctor", "-"], &line);
        assert_eq!(
            (code, err.trim().lines().count()),
            (2, 1),
            "{line}: {out}{err}"
        );
        assert!(
            err.contains("not a memory error") && err.contains(says),
            "{line}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Weights that with the CUDA context exceed the device (Llama-3-70B in bf16 on one H100) never
/// finish loading: `vram capacity` prints no load line (`Model loading took`, SGLang's `Load
/// weight end` with a negative free figure) and no KV-cache error after it, only its estimate
/// of the loader's out-of-memory failure, which the doctor refuses as vram's own.
#[test]
fn weights_beyond_the_device_fail_while_loading() {
    for engine in ["vllm", "sglang"] {
        let (v, line) = predicted(&format!("llama-3-70b --gpu h100-80g --engine {engine}"));
        let log = common::log_lines(&v);
        assert_eq!(log, [line.as_str()], "{engine}");
        assert!(
            line.contains("while loading the weights") && line.contains("(estimated)"),
            "{line}"
        );
        assert!(
            v["weights_bytes"].as_u64().unwrap() > v["total_bytes"].as_u64().unwrap(),
            "{engine}"
        );
        let (code, _, err) = vram_stdin(&["doctor", "-"], &line);
        assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
        assert!(err.contains("vram's own estimate"), "{err}");
    }
}

/// vLLM V1's start-up check (`request_memory`, 0.9.1 on): a share of the device beyond what vram
/// estimates free at start is refused in one line with the engine's own ValueError, which the
/// doctor reads back as the matching kind with the refusal's figures; the largest share the
/// refusal names starts the engine's check.
#[test]
fn the_start_up_check_refusal_reads_back_with_its_figures() {
    let args = |u: &str| {
        vec![
            "capacity",
            "qwen3-8b",
            "--gpu",
            "h100-80g",
            "--tensor-parallel-size",
            "2",
            "--engine-version",
            "0.19.1",
            "--gpu-memory-utilization",
        ]
        .into_iter()
        .map(String::from)
        .chain([u.to_string()])
        .collect::<Vec<_>>()
    };
    let run = |u: &str| {
        let a = args(u);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        vram(&a)
    };
    let (code, _, line) = run("0.99");
    assert_eq!((code, line.trim().lines().count()), (2, 1), "{line}");
    let ServingError::VllmFreeBelowUtilization {
        free_bytes,
        total_bytes,
        utilization,
        desired_bytes,
        cpu_backend,
    } = serving(line.trim())
    else {
        panic!("{line}")
    };
    assert!(!cpu_backend);
    assert_eq!(utilization, 0.99);
    assert!(
        free_bytes < desired_bytes && desired_bytes < total_bytes,
        "{line}"
    );
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    assert!(
        (gib(desired_bytes) - 0.99 * gib(total_bytes)).abs() < 0.01,
        "{line}"
    );
    let largest = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    assert!(largest.parse::<f64>().unwrap() < 0.99, "{line}");
    let (code, _, err) = run(&largest);
    assert_eq!(code, 0, "{largest}: {err}");
}
