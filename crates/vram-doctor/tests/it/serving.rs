//! Rule 12: vLLM's and SGLang's start-up memory errors.

use vram_doctor::serving::{
    explain, parse, CapacityChange, CapacityFigures, ServingCause, ServingError,
};
use vram_doctor::{read, Reading};

use crate::{fixture, gib};

#[test]
fn vllm_v0_max_seq_len_is_read_and_the_fitting_length_named() {
    let e = parse(&fixture("vllm-v0-max-seq-len.txt")).unwrap();
    assert_eq!(
        e,
        ServingError::VllmMaxSeqLen {
            max_model_len: 131072,
            kv_tokens: 93760,
            cpu_backend: false,
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.engine, "vllm");
    assert!(d.explanation.contains("93760") && d.explanation.contains("131072"));
    // 93760 tokens is 5860 blocks of 16: that length fits as is.
    assert_eq!(d.remedies[0].action, "--max-model-len 93760");
    assert!(d.remedies[0].enough);
    assert!(d.remedies[1].action.contains("--gpu-memory-utilization"));
    assert!(
        d.remedies[1].detail.contains("1.40x"),
        "{}",
        d.remedies[1].detail
    );
    assert!(
        !d.remedies[1].enough,
        "no figure says by how much without the capacity model"
    );
}

#[test]
fn vllm_v1_kv_memory_uses_its_own_estimate() {
    let e = parse(&fixture("vllm-v1-kv-memory.txt")).unwrap();
    assert_eq!(
        e,
        ServingError::VllmKvMemory {
            max_model_len: 131072,
            needed_bytes: 16 << 30,
            available_bytes: gib(4.21),
            estimated_max_len: Some(34480),
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.remedies[0].action, "--max-model-len 34480");
    // 16 GiB / 131072 tokens = 131072 bytes per token.
    assert!(
        d.remedies[0].detail.contains("131072 bytes per token"),
        "{}",
        d.remedies[0].detail
    );
    assert!(
        d.remedies[1].detail.contains("11.79 GiB"),
        "{}",
        d.remedies[1].detail
    );
    // Without vLLM's estimate, the same figure from bytes per token.
    let plain = "ValueError: To serve at least one request with the model's max seq len (131072), 16.00 GiB KV cache is needed, which is larger than the available KV cache memory (4.00 GiB).";
    let e = parse(plain).unwrap();
    let d = explain(&e, None);
    assert_eq!(d.remedies[0].action, "--max-model-len 32768");
}

#[test]
fn no_cache_blocks_reads_the_profiler_line() {
    let e = parse(&fixture("vllm-no-cache-blocks.txt")).unwrap();
    let ServingError::VllmNoCacheMemory {
        available_bytes: Some(b),
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!(b, -(gib(0.30) as i64));
    let d = explain(&e, None);
    assert_eq!(d.knob, "gpu_memory_utilization");
    assert!(
        d.explanation.contains("307.20 MiB short"),
        "{}",
        d.explanation
    );
}

#[test]
fn bare_no_cache_blocks_names_no_cause_and_asks_for_the_lines_that_decide() {
    // The bare message (vllm#10439's, V0 0.6.4.post1): no figure at all. Read at the releases
    // it appears in, the weights, the profile's activation peak, memory outside PyTorch and (in
    // 0.6.4 and V1 0.7.2-0.9.0) other processes share one budget, so no cause is chosen.
    let bare = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.";
    let e = parse(bare).unwrap();
    assert_eq!(
        e,
        ServingError::VllmNoCacheMemory {
            available_bytes: None
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.cause, ServingCause::Undetermined);
    assert_eq!(
        serde_json::to_value(d.cause).unwrap(),
        serde_json::json!("undetermined")
    );
    // The log lines that tell the causes apart, each in the engine's own words.
    for line in [
        "Model loading took X GiB",
        "Loading model weights took X GB",
        "model weights take W; non_torch_memory takes N; PyTorch activation peak memory takes A",
        "initial_memory_usage=",
        "Available KV cache memory: -X GiB",
        "VLLM_LOGGING_LEVEL=DEBUG",
    ] {
        assert!(d.explanation.contains(line), "{line}: {}", d.explanation);
    }
    assert!(
        d.explanation.contains("cannot show which"),
        "{}",
        d.explanation
    );
    // Nothing is called enough without figures, and the other-process remedy names the
    // releases where other processes count.
    assert!(d.remedies.iter().all(|r| !r.enough), "{:#?}", d.remedies);
    assert!(
        d.remedies
            .iter()
            .any(|r| r.detail.contains("vLLM 0.6.4 and V1 0.7.2–0.9.0")),
        "{:#?}",
        d.remedies
    );
    // The profiler's line, when the log has it, says how far short, still not which part.
    let e = parse(&fixture("vllm-no-cache-blocks.txt")).unwrap();
    assert_eq!(explain(&e, None).cause, ServingCause::Undetermined);
}

#[test]
fn free_below_utilization_names_the_largest_fraction() {
    let e = parse(&fixture("vllm-free-below-utilization.txt")).unwrap();
    let d = explain(&e, None);
    // 104.87 / 121.63 = 0.862 -> 0.86.
    assert_eq!(d.remedies[0].action, "--gpu-memory-utilization 0.86");
    assert!(d.remedies[0].enough);
}

#[test]
fn sglang_not_enough_memory_says_raise_it() {
    let e = parse(&fixture("sglang-not-enough.txt")).unwrap();
    assert_eq!(
        e,
        ServingError::SglangNotEnoughMemory {
            mem_fraction_static: Some(0.6)
        }
    );
    let d = explain(&e, None);
    assert_eq!((d.engine, d.knob), ("sglang", "mem_fraction_static"));
    assert!(d.remedies[0]
        .action
        .contains("raise --mem-fraction-static above 0.6"));
    assert!(parse(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    .is_some());
}

#[test]
fn the_capacity_model_plugs_in_through_capacity_figures() {
    // A made-up capacity: 80 GiB GPU, 20 GiB outside the cache, 128 KiB per
    // token; one request of 131072 tokens needs 16 GiB: (20 + 16) / 80 = 0.45.
    let cap = CapacityFigures {
        device_bytes: 80 << 30,
        non_kv_bytes: 20 << 30,
        kv_bytes_per_token: 128 << 10,
        max_model_len: 131072,
        max_model_len_shown: true,
        tensor_parallel_size: 1,
        tensor_parallel_shown: false,
        change: None,
        failed_share: None,
    };
    let e = parse(&fixture("vllm-v0-max-seq-len.txt")).unwrap();
    let d = explain(&e, Some(&cap));
    assert_eq!(d.remedies[1].action, "--gpu-memory-utilization 0.45");
    assert!(d.remedies[1].enough);
    assert_eq!(d.capacity.as_ref(), Some(&cap));
    let e = parse(&fixture("sglang-not-enough.txt")).unwrap();
    let d = explain(&e, Some(&cap));
    // 20 GiB + one token of KV over 80 GiB: 0.25 (rounded up to 0.26).
    assert_eq!(d.remedies[0].action, "--mem-fraction-static 0.26");
    // The same figures where the paste shows the start failed at a larger share (SGLang's
    // message names 0.6; a vLLM command line 0.5): the model's share is one the engine already
    // ran, so a larger share than the failed one is asked for, not offered as enough.
    let ran = CapacityFigures {
        failed_share: Some(0.6),
        ..cap.clone()
    };
    let d = explain(
        &parse(&fixture("sglang-not-enough.txt")).unwrap(),
        Some(&ran),
    );
    assert_eq!(
        d.remedies[0].action,
        "raise --mem-fraction-static above 0.6"
    );
    assert!(!d.remedies[0].enough);
    assert!(
        d.remedies[0].detail.contains("gives 0.26"),
        "{}",
        d.remedies[0].detail
    );
    let ran = CapacityFigures {
        failed_share: Some(0.5),
        ..cap.clone()
    };
    let d = explain(
        &parse(&fixture("vllm-v0-max-seq-len.txt")).unwrap(),
        Some(&ran),
    );
    assert_eq!(
        d.remedies[1].action,
        "raise --gpu-memory-utilization above 0.5"
    );
    assert!(!d.remedies[1].enough);
}

/// The capacity model's change comes second, marked enough, with its figures; a fraction the
/// GPU cannot give (more than all of it) is never offered as a value.
#[test]
fn the_capacity_models_change_is_offered_and_no_fraction_above_one() {
    let cap = CapacityFigures {
        device_bytes: 24 << 30,
        non_kv_bytes: 16 << 30,
        kv_bytes_per_token: 128 << 10,
        max_model_len: 131072,
        max_model_len_shown: true,
        tensor_parallel_size: 1,
        tensor_parallel_shown: false,
        change: Some(CapacityChange {
            flags: "--tensor-parallel-size 2".into(),
            max_model_len: 131072,
            kv_cache_tokens: 150_000,
            max_concurrency: 1.14,
            bound: None,
        }),
        failed_share: None,
    };
    // 16 GiB + 131072 × 128 KiB = 32 GiB of a 24 GiB GPU.
    let d = explain(
        &parse(&fixture("vllm-v0-max-seq-len.txt")).unwrap(),
        Some(&cap),
    );
    assert_eq!(d.remedies[1].action, "--tensor-parallel-size 2");
    assert!(d.remedies[1].enough);
    assert!(
        d.remedies[1].detail.contains("150000 tokens"),
        "{}",
        d.remedies[1].detail
    );
    let u = &d.remedies[2];
    assert_eq!(u.action, "raise --gpu-memory-utilization");
    assert!(
        !u.enough && u.detail.contains("more than the whole GPU"),
        "{}",
        u.detail
    );
    let big = CapacityFigures {
        non_kv_bytes: 30 << 30,
        ..cap.clone()
    };
    for f in ["vllm-no-cache-blocks.txt", "sglang-not-enough.txt"] {
        let d = explain(&parse(&fixture(f)).unwrap(), Some(&big));
        assert!(
            d.remedies[0].action.starts_with("raise --"),
            "{f}: {:?}",
            d.remedies[0]
        );
        assert!(!d.remedies[0].enough);
        assert_eq!(d.remedies[1].action, "--tensor-parallel-size 2", "{f}");
    }
}

/// vLLM's no-cache error with the model's figures: past it the engine checks that one request
/// of max_model_len fits the cache, so the utilization offered holds what precedes the cache
/// and that request, not one block (0.26 of the made-up 80 GiB GPU left 16 tokens of cache and
/// was marked enough, where one request of 131072 tokens needs 16 GiB: 0.45).
#[test]
fn no_cache_blocks_with_the_model_sizes_one_request_of_max_model_len() {
    let cap = CapacityFigures {
        device_bytes: 80 << 30,
        non_kv_bytes: 20 << 30,
        kv_bytes_per_token: 128 << 10,
        max_model_len: 131072,
        max_model_len_shown: false,
        tensor_parallel_size: 1,
        tensor_parallel_shown: false,
        change: None,
        failed_share: None,
    };
    let d = explain(
        &parse(&fixture("vllm-no-cache-blocks.txt")).unwrap(),
        Some(&cap),
    );
    let u = &d.remedies[0];
    assert_eq!(
        u.action, "--gpu-memory-utilization 0.45",
        "{:?}",
        d.remedies
    );
    assert!(u.enough);
    assert!(
        u.detail
            .contains("one request of max_model_len (the model's own: the paste shows none)")
            && u.detail.contains("131072 tokens"),
        "{}",
        u.detail
    );
    // On a 24 GiB GPU the same request needs 36 GiB: no utilization is enough.
    let small = CapacityFigures {
        device_bytes: 24 << 30,
        ..cap
    };
    let d = explain(
        &parse(&fixture("vllm-no-cache-blocks.txt")).unwrap(),
        Some(&small),
    );
    assert_eq!(d.remedies[0].action, "raise --gpu-memory-utilization");
    assert!(!d.remedies[0].enough, "{:?}", d.remedies[0]);
}

/// Where other processes hold the device (vLLM's free-memory check at start), the capacity
/// model's change (more GPUs, fp8) does not pass that check: each GPU's free memory is compared
/// with the share the same way. It is offered as what the start needs past the check, not as
/// enough (it was "[enough] ... starts it with this change alone").
#[test]
fn the_capacity_change_is_not_enough_for_an_error_other_processes_cause() {
    let cap = CapacityFigures {
        device_bytes: 120 << 30,
        non_kv_bytes: 140 << 30,
        kv_bytes_per_token: 320 << 10,
        max_model_len: 131072,
        max_model_len_shown: false,
        tensor_parallel_size: 1,
        tensor_parallel_shown: false,
        change: Some(CapacityChange {
            flags: "--tensor-parallel-size 2".into(),
            max_model_len: 131072,
            kv_cache_tokens: 150_000,
            max_concurrency: 1.14,
            bound: None,
        }),
        failed_share: None,
    };
    let d = explain(
        &parse(&fixture("vllm-free-below-utilization.txt")).unwrap(),
        Some(&cap),
    );
    let tp = d
        .remedies
        .iter()
        .find(|r| r.action == "--tensor-parallel-size 2")
        .unwrap_or_else(|| panic!("{:?}", d.remedies));
    assert!(!tp.enough, "{tp:?}");
    assert!(
        tp.detail.starts_with("not this error's fix"),
        "{}",
        tp.detail
    );
    assert!(
        tp.detail
            .contains("at tensor-parallel size 1 (assumed: the paste shows none), the capacity model does not start it"),
        "{}",
        tp.detail
    );
    // SGLang's unbalanced-memory check runs only above TP 1: figures at an assumed TP 1 are of
    // another start, and no change is offered from them; at a TP the paste shows, it is, not
    // as enough.
    let unbalanced = ServingError::SglangUnbalancedMemory {
        min_free_bytes: gib(60.5),
        local_free_bytes: gib(78.2),
    };
    let d = explain(&unbalanced, Some(&cap));
    assert!(
        d.remedies
            .iter()
            .all(|r| !r.detail.contains("(vram capacity)")),
        "{:?}",
        d.remedies
    );
    let shown = CapacityFigures {
        tensor_parallel_size: 2,
        tensor_parallel_shown: true,
        change: Some(CapacityChange {
            flags: "--tensor-parallel-size 4".into(),
            max_model_len: 131072,
            kv_cache_tokens: 300_000,
            max_concurrency: 2.28,
            bound: None,
        }),
        ..cap.clone()
    };
    let d = explain(&unbalanced, Some(&shown));
    let r = d
        .remedies
        .iter()
        .find(|r| r.detail.contains("(vram capacity)"))
        .unwrap_or_else(|| panic!("{:?}", d.remedies));
    assert!(
        !r.enough
            && r.detail
                .contains("at tensor-parallel size 2, the capacity model"),
        "{r:?}"
    );
    // The utilization within what was free stays the fix.
    let d = explain(
        &parse(&fixture("vllm-free-below-utilization.txt")).unwrap(),
        Some(&cap),
    );
    assert!(
        d.remedies[0]
            .action
            .starts_with("--gpu-memory-utilization 0.86")
            && d.remedies[0].enough
    );
}

#[test]
fn read_prefers_the_pytorch_message_and_refuses_the_rest() {
    let both = format!(
        "{}\n{}",
        fixture("vllm-no-cache-blocks.txt"),
        fixture("pytorch-2.5.txt")
    );
    assert!(matches!(read(&both).unwrap(), Reading::Oom(_)));
    assert!(matches!(
        read(&fixture("sglang-not-enough.txt")).unwrap(),
        Reading::Serving(_)
    ));
    for t in [
        "",
        "RuntimeError: Expected all tensors to be on the same device",
        "Killed",
        "ValueError: max seq len",
    ] {
        assert!(read(t).is_err(), "{t}");
        assert!(parse(t).is_none(), "{t}");
    }
}

#[test]
fn serving_errors_are_read_like_pytorch_messages() {
    // Quoted lower-case (pytorch/pytorch#175666's title quotes vLLM's error so).
    assert_eq!(
        parse(
            "[release 2.11][vllm] Distributed failures - free memory on device cuda:0 (19.77/22.05 \
             GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB)"
        ),
        Some(ServingError::VllmFreeBelowUtilization {
            free_bytes: gib(19.77),
            total_bytes: gib(22.05),
            utilization: 0.9,
            desired_bytes: gib(19.84),
            cpu_backend: false,
        })
    );
    // A log cut at a fixed terminal width, inside a word, under a `[rank0]:` prefix.
    let cut = "[rank0]: ValueError: To serve at least one request with the model's max seq len \
               (100000), (4.26 GiB KV cach\n[rank0]: e is needed, which is larger than the \
               available KV cache memory (4.25 GiB).";
    assert_eq!(
        parse(cut),
        Some(ServingError::VllmKvMemory {
            max_model_len: 100000,
            needed_bytes: gib(4.26),
            available_bytes: gib(4.25),
            estimated_max_len: None,
        })
    );
    // Lines wrapped between words are still joined with a space.
    let wrapped =
        "ValueError: To serve at least one request with the model's max seq len (1048576),\n\
                   22.5 GiB KV cache is needed, which is larger than the available KV cache memory \
                   (17.39 GiB).\nBased on the available memory, the estimated maximum model length \
                   is 810208.";
    assert_eq!(
        parse(wrapped),
        Some(ServingError::VllmKvMemory {
            max_model_len: 1048576,
            needed_bytes: gib(22.5),
            available_bytes: gib(17.39),
            estimated_max_len: Some(810208),
        })
    );
}

#[test]
fn a_refusal_says_what_it_looked_for_and_what_it_found() {
    let why = |t: &str| read(t).unwrap_err().to_string();
    // (llama.cpp's `CUDA error 2 at ggml-cuda.cu:359: out of memory` is named since
    // `foreign::recognise`: tests/it/foreign.rs.)
    for other in [
        "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32",
        "ValueError: max_num_batched_tokens (4096) is smaller than max_model_len (32768).",
    ] {
        let e = why(other);
        assert!(
            e.contains("neither PyTorch's") && e.contains("vLLM or SGLang"),
            "{other}: {e}"
        );
    }
    // An engine's error without its figures: named, not called missing.
    let e = why(
        "ValueError: The model's max seq len is larger than the maximum number of tokens that can \
         be stored in KV cache",
    );
    assert!(e.contains("vLLM's start-up memory error is there"), "{e}");
    // SGLang's needs no figure, whatever its case.
    assert!(matches!(
        read("RuntimeError: Not enough memory. Please try to increase --MEM-FRACTION-STATIC."),
        Ok(Reading::Serving(ServingError::SglangNotEnoughMemory { .. }))
    ));
    // The CUDA runtime's own error keeps its specific reason.
    assert!(why("RuntimeError: CUDA error: out of memory").contains("CUDA runtime"));
}

#[test]
fn vllms_cpu_backend_is_told_its_own_knob() {
    // opea-project/GenAIExamples#1762: vLLM on the CPU names VLLM_CPU_KVCACHE_SPACE, not a GPU.
    let e = parse(
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens \
         that can be stored in KV cache (21840). Try increasing `VLLM_CPU_KVCACHE_SPACE` or \
         decreasing `max_model_len` when initializing the engine.",
    )
    .unwrap();
    assert_eq!(
        e,
        ServingError::VllmMaxSeqLen {
            max_model_len: 131072,
            kv_tokens: 21840,
            cpu_backend: true,
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.knob, "VLLM_CPU_KVCACHE_SPACE / max_model_len");
    assert_eq!(d.remedies[0].action, "--max-model-len 21840");
    assert_eq!(d.remedies[1].action, "raise VLLM_CPU_KVCACHE_SPACE");
    assert!(
        d.remedies[1].detail.contains("6.00x"),
        "{}",
        d.remedies[1].detail
    );
    assert!(
        d.remedies.iter().all(|r| !r.action.contains("gpu")) && !d.explanation.contains("GPU"),
        "{d:?}"
    );
}

#[test]
fn sglang_0_5_23_weights_leave_no_kv_cache_is_read_with_its_floor() {
    // The whole layout, as SGLang 0.5.23's `_profile_available_bytes` formats it (figures from a
    // 2 × 0.5 split: 0.3198 = 1 - available/pre), after its `Load weight end` line.
    let log = "[2026-11-02 10:00:01] Load weight end. elapsed=41.20 s, type=Qwen3ForCausalLM, \
               avail mem=82.62 GB, mem usage=38.86 GB.\n\
               [2026-11-02 10:00:02] Scheduler hit an exception: Traceback (most recent call last):\n\
               ValueError: Loaded weights leave no GPU memory for the KV cache under \
               --mem-fraction-static=0.3. Raise --mem-fraction-static above 0.320 (minimum viable \
               = 1 - available/pre = 0.3198). If using speculative decoding, draft weights are now \
               counted.";
    let e = parse(log).unwrap();
    let ServingError::SglangWeightsLeaveNoKv {
        mem_fraction_static,
        minimum_fraction,
        available_bytes,
        weights_bytes,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!(mem_fraction_static, 0.3);
    assert_eq!(minimum_fraction, Some(0.3198));
    assert_eq!(available_bytes, Some(gib(82.62)));
    assert_eq!(weights_bytes, Some(gib(38.86)));
    let d = explain(&e, None);
    assert_eq!((d.engine, d.knob), ("sglang", "mem_fraction_static"));
    assert_eq!(
        serde_json::to_value(d.cause).unwrap().as_str(),
        Some("weights")
    );
    assert_eq!(
        d.remedies[0].action,
        "raise --mem-fraction-static above 0.320"
    );
    assert!(!d.remedies[0].enough);
    // Free before loading is 82.62 + 38.86 = 121.48 GiB: 0.01 of it is 1.21 GiB of KV pool.
    assert!(
        d.remedies[0].detail.contains("1.21 GiB"),
        "{}",
        d.remedies[0].detail
    );
    assert!(d.explanation.contains("121.48 GiB"), "{}", d.explanation);
    // Not the older `Not enough memory` layout.
    assert!(!matches!(e, ServingError::SglangNotEnoughMemory { .. }));

    // SemiAnalysisAI/InferenceX#2128 (batch 11, fit half) as posted: the sentence cut after the
    // fraction, the minimum from the `Load weight end` line: 125.65 / (12.25 + 125.65) = 0.9112
    // (the thread quotes SGLang's 0.9113, from unrounded figures).
    let e = parse(
        "Load weight end. quant=fp8, fmt=e4m3, avail mem=12.25 GB, mem usage=125.65 GB.\n\
         ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88.",
    )
    .unwrap();
    let ServingError::SglangWeightsLeaveNoKv {
        mem_fraction_static,
        minimum_fraction: Some(m),
        ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!(mem_fraction_static, 0.88);
    assert!((m - 0.9112).abs() < 5e-5, "{m}");
    let d = explain(&e, None);
    assert_eq!(
        d.remedies[0].action,
        "raise --mem-fraction-static above 0.912"
    );
    // Without the load line or the sentence that names the minimum, the fraction alone.
    let e = parse(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5.",
    )
    .unwrap();
    let d = explain(&e, None);
    assert_eq!(
        d.remedies[0].action,
        "raise --mem-fraction-static above 0.5"
    );
}

/// vLLM V1's sampler warm-up failure, as llm-d-planner's v0.19.0 run logged it
/// (llm-d-incubation/llm-d-planner@d3121e0, accuracy/results/v0.19.0/logs/
/// openai-gpt-oss-20b--h100-80gb--tp1pp1dp1--8192.FAILED.log), is read, with its request count;
/// the cause is the warm-up's activations, and the remedies are the two knobs it names.
#[test]
fn vllm_sampler_warm_up_failure_is_read() {
    let text = "(EngineCore pid=2817) ERROR 04-09 12:01:33 [core.py:1110] RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.";
    let e = parse(text).unwrap();
    assert_eq!(e, ServingError::VllmSamplerWarmUp { requests: 1024 });
    assert_eq!(e.kind(), "vllm-sampler-warm-up");
    assert!(matches!(read(text), Ok(Reading::Serving(_))));
    let d = explain(&e, None);
    assert_eq!((d.engine, d.knob), ("vllm", "max_num_seqs"));
    assert_eq!(d.cause, vram_doctor::serving::ServingCause::Profile);
    assert!(d.remedies[0].action.contains("--max-num-seqs below 1024"));
    assert!(d.remedies[1].action.contains("--gpu-memory-utilization"));
}

/// Every refusal `vram capacity` predicts is written in the engine's words and read back by this
/// parser as the same kind the engine's own message is: the one reader of start-up failures
/// (`vram_plan` writes them and no longer parses them), so a logged refusal and a predicted one
/// compare by kind (vram-cli's `capacity` test does so on the serving rounds).
#[test]
fn every_refusal_the_capacity_model_predicts_is_read_back_as_its_kind() {
    use vram_plan::capacity::{capacity, Engine, Knobs};
    let vram_model::arch::Model::Transformer(t) =
        vram_model::catalog::lookup("llama-3-8b").unwrap()
    else {
        unreachable!()
    };
    let rtx = vram_model::gpu::lookup("rtx-4090").unwrap();
    let a10 = vram_model::gpu::lookup("a10").unwrap();
    let cases = [
        // Weights alone exceed 0.3 × 24 GiB.
        (
            rtx,
            Engine::Vllm,
            Knobs {
                gpu_memory_utilization: Some(0.3),
                ..Knobs::default()
            },
            "vllm-no-cache-memory",
        ),
        // A pool, but one request of 8,192 tokens does not fit it: V1's and V0's texts.
        (
            rtx,
            Engine::Vllm,
            Knobs {
                max_model_len: Some(8192),
                gpu_memory_utilization: Some(0.7),
                ..Knobs::default()
            },
            "vllm-kv-memory",
        ),
        // 0.6.4 counts the CUDA context inside its budget (0.46 GiB outside PyTorch, where 0.7
        // leaves no pool at all): 0.72 leaves 0.31 GiB, short of one 8,192-token request.
        (
            rtx,
            Engine::Vllm,
            Knobs {
                engine_version: Some([0, 6, 4]),
                max_model_len: Some(8192),
                gpu_memory_utilization: Some(0.72),
                ..Knobs::default()
            },
            "vllm-max-seq-len",
        ),
        // The capacity model's own sampler warm-up case (vram-plan's capacity tests).
        (
            a10,
            Engine::Vllm,
            Knobs {
                engine_version: Some([0, 11, 0]),
                max_model_len: Some(4096),
                gpu_memory_utilization: Some(0.95),
                ..Knobs::default()
            },
            "vllm-sampler-warm-up",
        ),
        (
            rtx,
            Engine::Sglang,
            Knobs {
                mem_fraction_static: Some(0.3),
                ..Knobs::default()
            },
            "sglang-not-enough-memory",
        ),
        // From 0.5.14 SGLang checks the budget before sizing the pool, in its own words.
        (
            rtx,
            Engine::Sglang,
            Knobs {
                engine_version: Some([0, 5, 23]),
                mem_fraction_static: Some(0.3),
                ..Knobs::default()
            },
            "sglang-weights-leave-no-kv",
        ),
        (
            rtx,
            Engine::Sglang,
            Knobs {
                engine_version: Some([0, 5, 13]),
                mem_fraction_static: Some(0.3),
                ..Knobs::default()
            },
            "sglang-not-enough-memory",
        ),
    ];
    for (gpu, engine, k, kind) in cases {
        let c = capacity(&t, gpu, engine, &k).unwrap();
        assert!(!c.starts, "{kind}: {:?}", c.log);
        let read: Vec<&str> = c
            .log
            .iter()
            .filter_map(|l| parse(l))
            .map(|e| e.kind())
            .collect();
        assert_eq!(read, [kind], "{:?}", c.log);
    }
}

/// SGLang 0.5.14 on, as `vram capacity` writes it: the fraction asked, and the smallest that
/// leaves the KV pool anything, `1 − free after loading / free before` (the doctor reads M back).
#[test]
fn sglang_weights_leave_no_kv_as_the_capacity_model_writes_it() {
    use vram_plan::capacity::{capacity, Engine, Knobs};
    let vram_model::arch::Model::Transformer(t) =
        vram_model::catalog::lookup("llama-3-8b").unwrap()
    else {
        unreachable!()
    };
    let gpu = vram_model::gpu::lookup("rtx-4090").unwrap();
    let k = Knobs {
        engine_version: Some([0, 5, 14]),
        mem_fraction_static: Some(0.3),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
    let Some(ServingError::SglangWeightsLeaveNoKv {
        mem_fraction_static,
        minimum_fraction: Some(m),
        available_bytes: Some(a),
        weights_bytes: Some(u),
    }) = parse(&c.log.join("\n"))
    else {
        panic!("{:?}", c.log)
    };
    assert_eq!(mem_fraction_static, 0.3);
    // The printed minimum is U / (A + U) of the load line, to its four decimals.
    assert!((m - u as f64 / (a + u) as f64).abs() < 1e-3, "{m} {a} {u}");
    assert!(m > 0.3 && m < 1.0);
}

/// The engines' load failures that `vram capacity` predicts for a channel-wise AWQ checkpoint
/// are read here, the one reader of every refusal, with their kinds: vLLM's `The input size is
/// not aligned ...` (its text as QwenLM/Qwen3-VL#831 posted it, a group-128 checkpoint at TP 2),
/// and PyTorch's negative-dimension error in an engine's log (as PyTorch's `check_size_nonnegative`
/// formats it; vllm#18885's excerpt, a channel-wise AWQ Qwen3-0.6B, is cut before its line).
#[test]
fn the_engines_load_failures_are_read_by_kind_and_are_not_memory() {
    let aligned = "ERROR 02-22 00:01:41 engine.py:400] The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size.\n\
                   ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size.";
    let e = parse(aligned).unwrap();
    assert_eq!(e.kind(), "load-shard-not-aligned");
    assert!(!e.is_memory());
    let d = explain(&e, None);
    assert_eq!(d.cause, ServingCause::QuantLayout);
    assert_eq!(d.engine, "vllm");
    assert!(
        d.explanation.starts_with("not a memory error"),
        "{}",
        d.explanation
    );
    assert!(d.remedies[0].action.contains("--tensor-parallel-size"));
    // The output side is read as such.
    let out = parse("ValueError: The output size is not aligned with the quantized weight shape.")
        .unwrap();
    assert_eq!(
        out,
        ServingError::LoadShardNotAligned {
            engine: "vllm",
            side: "output"
        }
    );

    let negative = "ERROR 05-29 03:02:16 [core.py:500]   File \"/home/u/vllm/./vllm/model_executor/layers/quantization/awq.py\", line 101, in create_weights\n\
                    ERROR 05-29 03:02:16 [core.py:500] RuntimeError: Trying to create tensor with negative dimension -1024: [-1024, 128]";
    let e = parse(negative).unwrap();
    assert_eq!(
        e,
        ServingError::LoadNegativeDimension {
            engine: "vllm",
            dimension: Some(-1024)
        }
    );
    assert_eq!(e.kind(), "load-negative-dimension");
    assert_eq!(explain(&e, None).cause, ServingCause::QuantLayout);
    // SGLang's log names vLLM's modules too; the engine is SGLang.
    let sg = "sglang/srt/layers/quantization/awq.py create_weights\nRuntimeError: Trying to create tensor with negative dimension -2048: [-2048, 256]";
    assert_eq!(explain(&parse(sg).unwrap(), None).engine, "sglang");
    // A negative dimension in an engine's run outside the quantization method's
    // `create_weights` is not the channel-wise AWQ failure (sgl-project/sglang#22666: SGLang's
    // multi-layer MTP metadata at start-up; this paste is built from that PR's description).
    assert_eq!(
        parse("sglang/srt/speculative/eagle_worker.py forward_batch_generation\nRuntimeError: Trying to create tensor with negative dimension -3: [-3]"),
        None
    );
    // Without an engine in the paste the same PyTorch error is nobody's start-up failure
    // (aigc-apps/VideoX-Fun#393's: a video length).
    assert_eq!(
        parse("RuntimeError: Trying to create tensor with negative dimension -97: [-97]"),
        None
    );
}

/// vLLM's Marlin refusals (`verify_marlin_supported`; from 0.22 raised for every GPTQ checkpoint
/// below compute capability 7.5 or at a group size Marlin does not take) are read with their
/// figures, as load failures and not memory. The texts are the releases' own: 0.22.1's and
/// 0.23.0's `_check_marlin_supported` run on the CPU (`vram-plan/tests/data/marlin_verify`),
/// here inside a V1 engine core's log prefix as vLLM prints a traceback's last line.
#[test]
fn vllms_marlin_refusals_are_read_with_their_figures() {
    let cases = include_str!("../../../vram-plan/tests/data/marlin_verify/cases.jsonl");
    let mut read = 0;
    for line in cases.lines() {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let Some(error) = c["error"].as_str() else {
            continue;
        };
        let log = format!(
            "(EngineCore_DP0 pid=4242) ERROR 11-28 11:02:13 [core.py:866]   File \"/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/quantization/auto_gptq.py\", line 304, in __init__\n(EngineCore_DP0 pid=4242) ERROR 11-28 11:02:13 [core.py:866] {error}"
        );
        let e = parse(&log).unwrap_or_else(|| panic!("{log}"));
        let group = c["group_size"].as_i64();
        let capability = match c["gpu"].as_str().unwrap() {
            "v100-16g" => Some(70),
            "gtx-1080" => Some(61),
            _ => None,
        };
        assert_eq!(
            e,
            ServingError::LoadMarlinUnsupported {
                engine: "vllm",
                group_size: group,
                device_capability: capability,
                zero_points: capability.map(|_| false),
                weight_type: capability.map(|_| "uint4b8".to_string()),
                supported_types: capability.map(|_| Vec::new()),
            },
            "{log}"
        );
        assert_eq!(e.kind(), "load-marlin-unsupported");
        assert!(!e.is_memory());
        let d = explain(&e, None);
        assert_eq!(d.cause, ServingCause::QuantLayout);
        assert!(
            d.explanation.starts_with("not a memory error"),
            "{}",
            d.explanation
        );
        match capability {
            Some(cc) => {
                assert!(
                    d.explanation
                        .contains(&format!("compute capability {}.{}", cc / 10, cc % 10)),
                    "{}",
                    d.explanation
                );
                assert!(d.remedies[0].action.starts_with("vLLM 0.21"));
            }
            None => {
                assert!(d
                    .explanation
                    .contains(&format!("the checkpoint's is {}", group.unwrap())));
                assert!(d.remedies[0].action.contains("group size 128"));
            }
        }
        read += 1;
    }
    assert_eq!(read, 18);
    // A zero-point (AWQ) Marlin method's refusal (`zp = True`) is not explained as GPTQ's.
    let awq = parse("ValueError: Marlin does not support weight_bits = uint4. Only types = [] are supported (for group_size = 128, device_capability = 70, zp = True).").unwrap();
    assert_eq!(
        awq,
        ServingError::LoadMarlinUnsupported {
            engine: "vllm",
            group_size: Some(128),
            device_capability: Some(70),
            zero_points: Some(true),
            weight_type: Some("uint4".into()),
            supported_types: Some(Vec::new()),
        }
    );
    let d = explain(&awq, None);
    assert!(!d.explanation.contains("GPTQ"), "{}", d.explanation);
    assert!(d.remedies.iter().all(|r| !r.action.contains("GPTQ")));
    // The weight-type refusal is never explained by the group size: at compute capability 7.5
    // (no types through vLLM 0.13, whose floor is 8.0) and where the device takes other types
    // (vLLM's CPU backend lists `uint4b8` alone and prints capability -1), the answer names the
    // type and the floor or the list, and no remedy asks for group size 128.
    for (text, says) in [
        (
            "ValueError: Marlin does not support weight_bits = uint4b8. Only types = [] are supported (for group_size = 128, device_capability = 75, zp = False).",
            "8.0 through vLLM 0.13",
        ),
        (
            "ValueError: Marlin does not support weight_bits = uint8b128. Only types = [uint4b8] are supported (for group_size = 128, device_capability = -1, zp = False).",
            "take the weight types uint4b8 on this device, not the checkpoint's uint8b128",
        ),
    ] {
        let e = parse(text).unwrap();
        let d = explain(&e, None);
        assert!(d.explanation.contains(says), "{}", d.explanation);
        assert!(!d.explanation.contains("group sizes"), "{}", d.explanation);
        assert!(
            d.remedies.iter().all(|r| !r.action.contains("group size")),
            "{:?}",
            d.remedies
        );
    }
    // Unrelated lines that mention Marlin are not this refusal.
    assert_eq!(
        parse("INFO Using MarlinLinearKernel for AutoGPTQLinearMethod"),
        None
    );
}

/// `vram capacity`'s own refusals of what it does not model (vLLM 0.22's V2 model runner, vLLM
/// from 0.23), pasted to the doctor, are not read as an engine's error: the refusal says whose
/// line it is.
#[test]
fn vrams_own_refusal_is_not_an_engines_error() {
    for own in [
        "vram: vLLM 0.22 runs Qwen3ForCausalLM on its V2 model runner by default (config/vllm.py use_v2_model_runner: a dense Qwen3ForCausalLM checkpoint without a quantization_config), whose memory profile vram does not model; say so with --vllm-use-v2-model-runner 0",
        "vram: --vllm-use-v2-model-runner 1 (VLLM_USE_V2_MODEL_RUNNER=1): vLLM 0.22 would run its V2 model runner, whose memory profile vram does not model; vram models the V1 runner (--vllm-use-v2-model-runner 0)",
        "vram: vLLM 0.23 changed the start-up memory profile vram models: its CUDA-graph estimate also captures the multimodal encoder's graphs; vram models vLLM 0.5 to 0.22",
    ] {
        assert_eq!(parse(own), None, "{own}");
        let err = vram_doctor::read(own).unwrap_err().to_string();
        assert!(err.contains("this is vram's own line"), "{err}");
    }
}

/// The paste's own configuration line sets the capacity model's tensor-parallel size and an
/// fp8 quantization: the change offered is never one the engine already runs (vllm#13882's
/// layout: `Initializing a V1 LLM engine (v0.10.1) with config: ... tensor_parallel_size=2`).
#[test]
fn capacity_change_is_never_what_the_paste_already_runs() {
    use vram_model::arch::Model;
    let Model::Transformer(t) = vram_model::catalog::lookup("llama-3.1-8b").unwrap() else {
        panic!("llama-3.1-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("rtx-4090").unwrap();
    let e = ServingError::VllmMaxSeqLen {
        max_model_len: 131072,
        kv_tokens: 93760,
        cpu_backend: false,
    };
    let alone = CapacityFigures::of(&t, gpu, &e, &Default::default()).unwrap();
    assert_eq!(
        alone.change.map(|c| c.flags).as_deref(),
        Some("--tensor-parallel-size 2")
    );
    for (line, not) in [
        (
            "INFO Initializing a V1 LLM engine (v0.10.1) with config: model='meta-llama/Llama-3.1-8B', tensor_parallel_size=2, quantization=None, enforce_eager=False",
            "--tensor-parallel-size 2",
        ),
        (
            "INFO Initializing a V1 LLM engine (v0.10.1) with config: model='meta-llama/Llama-3.1-8B', tensor_parallel_size=1, quantization=fp8, enforce_eager=False",
            "--quantization fp8",
        ),
    ] {
        let conf = vram_doctor::profile::engine_configuration(line);
        let f = CapacityFigures::of(&t, gpu, &e, &conf).unwrap();
        let flags = f.change.map(|c| c.flags).unwrap_or_default();
        assert_ne!(flags, not, "{line}");
    }
    let conf =
        vram_doctor::profile::engine_configuration("tensor_parallel_size=2, quantization=None");
    assert_eq!(conf.tensor_parallel_size, Some(2));
    assert_eq!(conf.quantization, None);
}

/// SGLang's pasted `server_args=ServerArgs(...)` line (its layout at 0.4.x and 0.5.x, as in
/// `tests/data` here: `..., mem_fraction_static=0.85, ..., tp_size=1, ...`) sets the capacity
/// model's tensor-parallel size and fraction as vLLM's `tensor_parallel_size=` does; a field
/// that only ends in `tp_size` (`moe_dense_tp_size=`) is not it.
#[test]
fn sglang_server_args_set_the_tp_size_and_fraction() {
    use vram_model::arch::Model;
    use vram_plan::capacity::{capacity, Engine, Knobs};
    let line = "[2025-10-02 09:14:11] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tokenizer_path='Qwen/Qwen3-8B', dtype='auto', kv_cache_dtype='auto', quantization=None, mem_fraction_static=0.62, max_running_requests=None, chunked_prefill_size=2048, tp_size=2, pp_size=1, dp_size=1, moe_dense_tp_size=None, attention_backend='flashinfer')";
    let conf = vram_doctor::profile::engine_configuration(line);
    assert_eq!(conf.tensor_parallel_size, Some(2));
    assert_eq!(conf.mem_fraction_static, Some(0.62));
    assert_eq!(conf.quantization, None);
    let only_moe = vram_doctor::profile::engine_configuration(
        "server_args=ServerArgs(model_path='m', moe_dense_tp_size=4, ep_size=1)",
    );
    assert_eq!(only_moe.tensor_parallel_size, None);
    let cli = vram_doctor::profile::engine_configuration(
        "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 4 --mem-fraction-static 0.7",
    );
    assert_eq!(cli.tensor_parallel_size, Some(4));
    assert_eq!(cli.mem_fraction_static, Some(0.7));
    let vllm = vram_doctor::profile::engine_configuration(
        "non-default args: {'model': 'Qwen/Qwen3-8B', 'gpu_memory_utilization': 0.95, 'tensor_parallel_size': 2}",
    );
    assert_eq!(vllm.gpu_memory_utilization, Some(0.95));
    assert_eq!(vllm.tensor_parallel_size, Some(2));
    // The figures are the capacity model's at the paste's TP size.
    let Model::Transformer(t) = vram_model::catalog::lookup("qwen3-8b").unwrap() else {
        panic!("qwen3-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("l4").unwrap();
    let e = ServingError::SglangNotEnoughMemory {
        mem_fraction_static: Some(0.62),
    };
    let f = CapacityFigures::of(&t, gpu, &e, &conf).unwrap();
    let k = Knobs {
        tp: 2,
        mem_fraction_static: Some(0.62),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
    assert_eq!(
        f.non_kv_bytes,
        c.weights_bytes + c.non_torch_bytes + c.activation_peak_bytes + c.cuda_graph_bytes
    );
    assert_eq!(
        f.kv_bytes_per_token,
        vram_plan::capacity::kv_bytes_per_token(&t, &k)
    );
    let alone = CapacityFigures::of(&t, gpu, &e, &Default::default()).unwrap();
    assert_ne!(alone.kv_bytes_per_token, f.kv_bytes_per_token);
}

/// A larger share offered by the capacity model is larger than the paste's own, and takes the
/// place of the message's arithmetic for the same flag, with the engine's start-up bound.
#[test]
fn a_larger_share_offered_to_a_paste_exceeds_its_own() {
    use vram_model::arch::Model;
    let Model::Transformer(t) = vram_model::catalog::lookup("qwen3-8b").unwrap() else {
        panic!("qwen3-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("l4").unwrap();
    let e = ServingError::VllmKvMemory {
        max_model_len: 32768,
        needed_bytes: 4608 << 20,
        available_bytes: gib(1.5),
        estimated_max_len: None,
    };
    for own in [None, Some(0.93), Some(0.95)] {
        let conf = vram_doctor::profile::EngineConfiguration {
            gpu_memory_utilization: own,
            ..Default::default()
        };
        let f = CapacityFigures::of(&t, gpu, &e, &conf).unwrap();
        if let Some(ch) = &f.change {
            if let Some(u) = ch.flags.strip_prefix("--gpu-memory-utilization ") {
                let u: f64 = u.parse().unwrap();
                assert!(u > own.unwrap_or(0.9), "{own:?}: {u}");
                assert!(ch.bound.as_deref().unwrap().contains("start-up check"));
            }
        }
        let d = vram_doctor::serving::explain(&e, Some(&f));
        let shares = d
            .remedies
            .iter()
            .filter(|r| r.action.contains("--gpu-memory-utilization"))
            .count();
        assert!(shares <= 1, "{own:?}: {:?}", d.remedies);
    }
}

/// `CapacityFigures::of` is `vram capacity` at the engine's defaults with the error's own knob:
/// vLLM's `max_model_len`, SGLang's `mem_fraction_static`; everything outside the KV cache is
/// the capacity's four parts beside it, and a change is offered only where the model agrees the
/// engine does not start.
#[test]
fn capacity_figures_are_the_capacity_models_at_the_errors_knob() {
    use vram_model::arch::Model;
    use vram_plan::capacity::{capacity, kv_bytes_per_token, Engine, Knobs};
    let Model::Transformer(t) = vram_model::catalog::lookup("qwen3-8b").unwrap() else {
        panic!("qwen3-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("l4").unwrap();
    let vllm = ServingError::VllmKvMemory {
        max_model_len: 32768,
        needed_bytes: 4608 << 20,
        available_bytes: gib(1.5),
        estimated_max_len: None,
    };
    let sglang = ServingError::SglangNotEnoughMemory {
        mem_fraction_static: Some(0.5),
    };
    let mut starts = Vec::new();
    for (e, engine, knobs) in [
        (
            &vllm,
            Engine::Vllm,
            Knobs {
                max_model_len: Some(32768),
                ..Knobs::default()
            },
        ),
        (
            &sglang,
            Engine::Sglang,
            Knobs {
                mem_fraction_static: Some(0.5),
                ..Knobs::default()
            },
        ),
    ] {
        let f = CapacityFigures::of(&t, gpu, e, &Default::default()).unwrap();
        let c = capacity(&t, gpu, engine, &knobs).unwrap();
        assert_eq!(f.device_bytes, c.total_bytes);
        assert_eq!(
            f.non_kv_bytes,
            c.weights_bytes + c.non_torch_bytes + c.activation_peak_bytes + c.cuda_graph_bytes
        );
        assert_eq!(f.kv_bytes_per_token, kv_bytes_per_token(&t, &knobs));
        let change = if c.starts {
            None
        } else {
            vram_plan::suggest::serving(&t, gpu, engine, &knobs)
        };
        assert_eq!(f.change, change, "{}", e.kind());
        starts.push(c.starts);
    }
    // Qwen3-8B's 16 GB of bf16 weights and 32k tokens of KV cache do not start on an L4 under
    // vLLM's default budget, so the vLLM case's change is the suggestion's.
    assert!(!starts[0]);
}

/// The engines' start-up texts the reader was taught from their source (`serving.rs`'s module
/// docs; the table of every release read is `tests/data/messages/ENGINE-TEXTS.md`), each
/// rendered from its f-string at the release named, read as its kind with its figures and its
/// cause: vLLM's CPU-backend checks (0.20.2–0.23.0 `cpu_worker.py`), the pooler warm-up
/// (0.10.0–0.23.0 `gpu_model_runner.py`), `--max-model-len auto`'s no-room error (0.14.1–0.23.0
/// `kv_cache_utils.py`), the quantization capability checks (vLLM `config/vllm.py`, `moe_wna16.py`,
/// compressed-tensors; SGLang `model_loader/loader.py`) and SGLang's unbalanced-memory check
/// (0.4.6.post5–0.5.10 `model_runner.py`).
#[test]
fn engine_start_up_texts_read_from_source_are_read_as_their_kind() {
    use vram_doctor::serving::ServingCause::{self, *};
    let cases: [(&str, ServingError, ServingCause); 14] = [
        (
            // vLLM 0.23.0, `CPUWorker.__init__`.
            "ValueError: Available memory on node 0 (10.78/15.61 GiB) on startup is less than desired CPU memory utilization (0.7, 10.93 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.",
            ServingError::VllmFreeBelowUtilization {
                free_bytes: gib(10.78),
                total_bytes: gib(15.61),
                utilization: 0.7,
                desired_bytes: gib(10.93),
                cpu_backend: true,
            },
            OtherProcesses,
        ),
        (
            // vLLM 0.23.0, `determine_available_memory`, sized from the reservation.
            "ValueError: Available memory on node 1 (3.1/31.25 GiB) on kv cache allocation is less than requested memory for kv (-1.52/9.38 GiB). Reduce CPU memory used by other processes.",
            ServingError::VllmCpuKvAllocation {
                available_bytes: gib(3.1),
                total_bytes: gib(31.25),
                requested_kv_bytes: -i64::try_from(gib(1.52)).unwrap(),
                reserved_bytes: Some(gib(9.38)),
            },
            Weights,
        ),
        (
            "ValueError: Available memory on node 0 (2.0/31.25 GiB) on kv cache allocation is less than requested memory for kv (6.5/9.38 GiB). Reduce CPU memory used by other processes.",
            ServingError::VllmCpuKvAllocation {
                available_bytes: gib(2.0),
                total_bytes: gib(31.25),
                requested_kv_bytes: i64::try_from(gib(6.5)).unwrap(),
                reserved_bytes: Some(gib(9.38)),
            },
            OtherProcesses,
        ),
        (
            // The KV space set outright (`--kv-cache-memory-bytes`, `VLLM_CPU_KVCACHE_SPACE`).
            "ValueError: Available memory on node 0 (12.0/31.25 GiB) on kv cache allocation is less than requested memory for kv (40.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
            ServingError::VllmCpuKvAllocation {
                available_bytes: gib(12.0),
                total_bytes: gib(31.25),
                requested_kv_bytes: i64::try_from(gib(40.0)).unwrap(),
                reserved_bytes: None,
            },
            Undetermined,
        ),
        (
            // vLLM 0.10.0-0.23.0, `_dummy_pooler_run`.
            "RuntimeError: CUDA out of memory occurred when warming up pooler (task=embed) with 512 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
            ServingError::VllmPoolerWarmUp {
                task: Some("embed".into()),
                requests: 512,
            },
            Profile,
        ),
        (
            // vLLM 0.14.1-0.23.0, `--max-model-len auto`.
            "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.",
            ServingError::VllmNoCacheMemory {
                available_bytes: None,
            },
            Undetermined,
        ),
        (
            // vLLM 0.10.0-0.23.0, `_get_quantization_config` (vllm#1488's text, vLLM 0.2).
            "ValueError: The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: Some("awq".into()),
                minimum_capability: 75,
                device_capability: 70,
            },
            QuantLayout,
        ),
        (
            // `moe_wna16.py` (vLLM 0.10-0.23, SGLang 0.4.6-0.5.10), in an SGLang log.
            "[2025-06-01 10:00:00 TP0] Scheduler hit an exception: File \"/sgl-workspace/sglang/python/sglang/srt/layers/quantization/moe_wna16.py\"\nValueError: The quantization method moe_wna16 + awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.",
            ServingError::LoadQuantCapability {
                engine: "sglang",
                method: Some("moe_wna16 + awq".into()),
                minimum_capability: 75,
                device_capability: 70,
            },
            QuantLayout,
        ),
        (
            // vLLM 0.29.0-0.33.0 compressed-tensors `_check_scheme_supported` (one string; to
            // 0.28.0 a tuple, read in `vllm_0_24_to_0_33_start_up_texts_are_read_as_their_kind`).
            "RuntimeError: Quantization scheme is not supported for the current GPU. Required capability: 89. Current capability: 80.",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: None,
                minimum_capability: 89,
                device_capability: 80,
            },
            QuantLayout,
        ),
        (
            // SGLang 0.5.3 `init_torch_distributed`.
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=20.5, local_gpu_memory=78.9, local_gpu_memory * 0.9=71.01",
            ServingError::SglangUnbalancedMemory {
                min_free_bytes: gib(20.5),
                local_free_bytes: gib(78.9),
            },
            OtherProcesses,
        ),
        (
            // SGLang 0.5.10, raised with SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK.
            "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=20.5, local_gpu_memory=78.9, local_gpu_memory * 0.9=71.01",
            ServingError::SglangUnbalancedMemory {
                min_free_bytes: gib(20.5),
                local_free_bytes: gib(78.9),
            },
            OtherProcesses,
        ),
        (
            // vLLM 0.23.0 `gpu_worker.py`, an AssertionError.
            "AssertionError: Error in memory profiling. Initial free memory 70.12 GiB, current free memory 75.5 GiB. This happens when other processes sharing the same container release GPU memory while vLLM is profiling during initialization.",
            ServingError::VllmProfilingMemoryChanged {
                measure: "free",
                before_bytes: gib(70.12),
                after_bytes: gib(75.5),
            },
            OtherProcesses,
        ),
        (
            // vLLM 0.10.0 `xpu_worker.py`, bytes.
            "AssertionError: Error in memory profiling. Initial free memory 1000000000, current free memory 2000000000. This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.",
            ServingError::VllmProfilingMemoryChanged {
                measure: "free",
                before_bytes: 1_000_000_000,
                after_bytes: 2_000_000_000,
            },
            OtherProcesses,
        ),
        (
            // vLLM 0.10.0 V0 `worker.py`, used memory in bytes.
            "AssertionError: Error in memory profiling. Initial used memory 30000000000, currently used memory 20000000000. This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.",
            ServingError::VllmProfilingMemoryChanged {
                measure: "used",
                before_bytes: 30_000_000_000,
                after_bytes: 20_000_000_000,
            },
            OtherProcesses,
        ),
    ];
    // At 0.5.10 it is a warning by default: an error after it is the one that stopped the engine.
    assert_eq!(
        parse(
            "WARNING The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=20.5, local_gpu_memory=78.9, local_gpu_memory * 0.9=71.01\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.88"
        ),
        Some(ServingError::SglangNotEnoughMemory {
            mem_fraction_static: Some(0.88)
        })
    );
    for (text, want, cause) in cases {
        let e = parse(text).unwrap_or_else(|| panic!("not read: {text}"));
        assert_eq!(e, want, "{text}");
        assert!(matches!(read(text), Ok(Reading::Serving(_))), "{text}");
        let d = explain(&e, None);
        assert_eq!(d.cause, cause, "{text}");
        assert!(
            !d.remedies.is_empty() && !d.explanation.is_empty(),
            "{text}"
        );
        // The capability refusals are not memory; the CPU backend's are host memory.
        assert_eq!(
            e.is_memory(),
            !matches!(e, ServingError::LoadQuantCapability { .. })
        );
        assert_eq!(
            e.on_host(),
            matches!(
                e,
                ServingError::VllmCpuKvAllocation { .. }
                    | ServingError::VllmFreeBelowUtilization {
                        cpu_backend: true,
                        ..
                    }
            )
        );
    }
}

/// The engines' refusals that are neither memory nor a quantized checkpoint stay refused (no
/// kind; CAUSES.md labels the TP check `refuse`), in one line that says what they are: vLLM's
/// bfloat16 check (0.10.0-0.23.0 `platforms/cuda.py`), the heads' TP divisibility check, a
/// chosen attention backend that cannot run the layers (`platforms/cuda.py`, 0.11.2-0.23.0),
/// SGLang's plain GPTQ/AWQ method under an MoE layer, `get_rope`'s unknown scaling type and a
/// registry without the architecture, as each engine raises them.
#[test]
fn non_memory_start_up_refusals_are_refused_by_name() {
    for (text, says) in [
        (
            "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. Reason: ['head_size not supported']",
            "FLASH_ATTN cannot run this model's layers",
        ),
        (
            "ValueError: Selected backend _Backend.FLASHINFER is not valid for this configuration. Reason: ['kv_cache_dtype not supported']",
            "FLASHINFER cannot run this model's layers",
        ),
        (
            "TypeError: GPTQ Method does not support MoE, please use gptq_marlin",
            "--quantization gptq_marlin, or none",
        ),
        (
            "File \"/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/layer.py\", line 310, in __init__\n    assert self.quant_method is not None\nAssertionError",
            "--quantization awq_marlin (gptq_marlin), or none",
        ),
        (
            "ValueError: Unknown RoPE scaling type ntk",
            "rope_scaling",
        ),
        (
            "ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now. Supported architectures: dict_keys(['AquilaModel'])",
            "a release whose registry has them",
        ),
        (
            "ValueError: Model architecture XverseForCausalLM was supported in vLLM until v0.23.0, and is not supported anymore. Please use an older version of vLLM if you want to use this model architecture.",
            "the release the message names or an older one loads it",
        ),
        (
            "ValueError: Model architecture BartForConditionalGeneration is not supported in-tree anymore. Please install the plugin at https://github.com/vllm-project/bart-plugin if you want to use this model architecture.",
            "the plugin the message names loads it",
        ),
        (
            "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
            "--dtype half",
        ),
        (
            "ValueError: Total number of attention heads (12) must be divisible by tensor parallel size (8).",
            "divides the attention heads",
        ),
    ] {
        let err = read(text).err().unwrap_or_else(|| panic!("read: {text}"));
        let msg = err.to_string();
        assert!(msg.contains(says) && msg.contains("not a memory error"), "{msg}");
        assert_eq!(msg.lines().count(), 1, "{msg}");
    }
}

/// A pasted driver line (`collect_env`'s `Nvidia driver version:`, `nvidia-smi`'s `Driver
/// Version:`) names the host's driver branch, and before R550 the capacity model prices the
/// CUDA graphs' driver share at the R535 figure: everything outside the KV cache grows, the KV
/// need per token does not. A CUDA version is not a driver.
#[test]
fn a_pasted_driver_before_r550_prices_the_graphs_at_r535() {
    use vram_model::arch::Model;
    for (text, branch) in [
        ("Nvidia driver version: 535.161.08\ncuDNN version: Could not collect", Some(535)),
        (
            "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |",
            Some(550),
        ),
        ("CUDA Driver Version / Runtime Version          12.2 / 12.1", None),
        ("PyTorch version: 2.6.0+cu124", None),
    ] {
        let conf = vram_doctor::profile::engine_configuration(text);
        assert_eq!(conf.driver, branch, "{text}");
    }
    let Model::Transformer(t) = vram_model::catalog::lookup("llama-3.1-8b").unwrap() else {
        panic!("llama-3.1-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("a100-80g").unwrap();
    let e = ServingError::VllmMaxSeqLen {
        max_model_len: 131072,
        kv_tokens: 93760,
        cpu_backend: false,
    };
    let at = |driver: &str| {
        let conf = vram_doctor::profile::engine_configuration(driver);
        CapacityFigures::of(&t, gpu, &e, &conf).unwrap()
    };
    let (unknown, r535, r550) = (
        at(""),
        at("Nvidia driver version: 535.161.08"),
        at("Nvidia driver version: 550.54.15"),
    );
    assert!(r535.non_kv_bytes > unknown.non_kv_bytes);
    assert_eq!(r535.kv_bytes_per_token, unknown.kv_bytes_per_token);
    assert_eq!(r550, unknown);
}

/// Every memory and capability start-up text the doctor reads, as vLLM 0.24.0-0.33.0 raise it
/// (every `raise` and `assert` of each sdist parsed with Python's `ast`, f-strings rendered;
/// `tests/data/messages/ENGINE-TEXTS.md`): the texts of 0.23.0, most at new lines or files (0.33.0
/// moved the KV-cache checks to `v1/core/kv_cache_planning.py`), and three that drifted:
/// - compressed-tensors' and Quark's scheme check passed three strings to `RuntimeError` through
///   0.28.0, so Python printed a tuple, which was not read; 0.29.0 joined them;
/// - vLLM 0.33.0's CPU backend raises the worker-fills-its-reservation case in words of its own
///   (`cpu_worker.py` line 229), where 0.20.2-0.32.0 raised it as `less than requested memory for
///   kv (-K/R GiB)`; the start-up check `less than desired CPU memory utilization` is gone at
///   0.33.0 (in 0.20.2-0.32.0, read above);
/// - the frontend multimodal reserve (0.25.0 on) is a memory error no cause the doctor reads
///   covers: it is named, with its figures, and refused.
#[test]
fn vllm_0_24_to_0_33_start_up_texts_are_read_as_their_kind() {
    use vram_doctor::serving::ServingCause::{self, *};
    let cases: Vec<(&str, ServingError, ServingCause)> = vec![
        (
            // 0.33.0 `v1/core/kv_cache_planning.py:57` (0.23.0-0.32.0 `kv_cache_utils.py`).
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
            ServingError::VllmNoCacheMemory {
                available_bytes: None,
            },
            Undetermined,
        ),
        (
            // 0.33.0 `kv_cache_planning.py:77`.
            "ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.50 GiB). Based on the available memory, the estimated maximum model length is 77824. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
            ServingError::VllmKvMemory {
                max_model_len: 131072,
                needed_bytes: gib(16.0),
                available_bytes: gib(9.5),
                estimated_max_len: Some(77824),
            },
            Context,
        ),
        (
            // 0.33.0 `kv_cache_planning.py:1381`.
            "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.",
            ServingError::VllmNoCacheMemory {
                available_bytes: None,
            },
            Undetermined,
        ),
        (
            // 0.33.0 `v1/worker/utils.py:762`.
            "ValueError: Free memory on device cuda:0 (20.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            ServingError::VllmFreeBelowUtilization {
                free_bytes: gib(20.5),
                total_bytes: gib(79.19),
                utilization: 0.92,
                desired_bytes: gib(72.85),
                cpu_backend: false,
            },
            OtherProcesses,
        ),
        (
            // 0.33.0 `v1/worker/gpu_worker.py:732` (from 0.29.0 the initial figure is a local).
            "AssertionError: Error in memory profiling. Initial free memory 70.12 GiB, current free memory 75.5 GiB. This happens when other processes sharing the same container release GPU memory while vLLM is profiling during initialization. To fix this, ensure consistent GPU memory allocation or isolate vLLM in its own container.",
            ServingError::VllmProfilingMemoryChanged {
                measure: "free",
                before_bytes: gib(70.12),
                after_bytes: gib(75.5),
            },
            OtherProcesses,
        ),
        (
            // 0.33.0 `v1/worker/gpu_model_runner.py:5929`.
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
            ServingError::VllmSamplerWarmUp { requests: 1024 },
            Profile,
        ),
        (
            // 0.33.0 `v1/worker/gpu/pool/pooling_runner.py:206`: the V2 model runner's pooler
            // (0.27.0 on), the V1 runner's text (`gpu_model_runner.py:6032`).
            "RuntimeError: CUDA out of memory occurred when warming up pooler (task=embed) with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
            ServingError::VllmPoolerWarmUp {
                task: Some("embed".into()),
                requests: 256,
            },
            Profile,
        ),
        (
            // 0.33.0 `config/compilation.py:1525`.
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 856 or increase gpu_memory_utilization.",
            ServingError::VllmMambaBlocks {
                max_num_seqs: 1024,
                blocks: 856,
            },
            Profile,
        ),
        (
            // 0.33.0 `v1/worker/cpu_worker.py:242`: a positive request above what is available.
            "ValueError: Available memory on node 0 (2.0/31.25 GiB) on kv cache allocation is less than requested memory for kv (6.5/9.38 GiB). Reduce CPU memory used by other processes.",
            ServingError::VllmCpuKvAllocation {
                available_bytes: gib(2.0),
                total_bytes: gib(31.25),
                requested_kv_bytes: i64::try_from(gib(6.5)).unwrap(),
                reserved_bytes: Some(gib(9.38)),
            },
            OtherProcesses,
        ),
        (
            // 0.33.0 `v1/worker/cpu_worker.py:229`: new in 0.33.0.
            "ValueError: The worker already uses 10.9 GiB (model weights and runtime), more than the 9.38 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache. On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To resolve: increase `--gpu-memory-utilization` to more than 0.35, or set the KV cache size explicitly with `--kv-cache-memory-bytes` or VLLM_CPU_KVCACHE_SPACE.",
            ServingError::VllmCpuWorkerFillsReservation {
                consumed_bytes: gib(10.9),
                reserved_bytes: gib(9.38),
                minimum_utilization: Some(0.35),
            },
            Weights,
        ),
        (
            // 0.33.0 `config/vllm.py:931`.
            "ValueError: The quantization method awq_marlin is not supported for the current GPU. Minimum capability: 75. Current capability: 70.",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: Some("awq_marlin".into()),
                minimum_capability: 75,
                device_capability: 70,
            },
            QuantLayout,
        ),
        (
            // 0.28.0 `compressed_tensors.py:385`: the three strings as Python prints them.
            "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Required capability: ', '89. Current capability: 80.')",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: None,
                minimum_capability: 89,
                device_capability: 80,
            },
            QuantLayout,
        ),
        (
            // 0.23.0 `quantization/quark/quark.py:233` (and SGLang 0.5.10's copy, `quark.py:188`).
            "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min capability: 89. ', 'Current capability: 86.')",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: None,
                minimum_capability: 89,
                device_capability: 86,
            },
            QuantLayout,
        ),
        (
            // 0.33.0 `quark/quark.py:357`, one string.
            "RuntimeError: Quantization scheme is not supported for the current GPU. Min capability: 89. Current capability: 86.",
            ServingError::LoadQuantCapability {
                engine: "vllm",
                method: None,
                minimum_capability: 89,
                device_capability: 86,
            },
            QuantLayout,
        ),
        (
            // 0.33.0 `quantization/utils/marlin_utils.py:146`.
            "ValueError: Marlin does not support group_size = 256. Only group_sizes = [-1, 32, 64, 128] are supported.",
            ServingError::LoadMarlinUnsupported {
                engine: "vllm",
                group_size: Some(256),
                device_capability: None,
                zero_points: None,
                weight_type: None,
                supported_types: None,
            },
            QuantLayout,
        ),
        (
            // 0.31.0-0.33.0 `quark/schemes/quark_w4a16_int4.py:91`, with its figures.
            "ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size. input_size_per_partition=1760, group_size=128.",
            ServingError::LoadShardNotAligned {
                engine: "vllm",
                side: "input",
            },
            QuantLayout,
        ),
    ];
    for (text, want, cause) in cases {
        let e = parse(text).unwrap_or_else(|| panic!("not read: {text}"));
        assert_eq!(e, want, "{text}");
        assert!(matches!(read(text), Ok(Reading::Serving(_))), "{text}");
        let d = explain(&e, None);
        assert_eq!(d.cause, cause, "{text}");
        assert!(
            !d.remedies.is_empty() && !d.explanation.is_empty(),
            "{text}"
        );
    }
    // The new CPU text's answer: host memory, the reservation and the worker's figures said.
    let e = parse("ValueError: The worker already uses 10.9 GiB (model weights and runtime), more than the 9.38 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache. To resolve: increase `--gpu-memory-utilization` to more than 0.35, or set the KV cache size explicitly with `--kv-cache-memory-bytes` or VLLM_CPU_KVCACHE_SPACE.").unwrap();
    assert!(e.on_host() && e.is_memory());
    let d = explain(&e, None);
    assert_eq!(
        d.remedies[0].action,
        "raise --gpu-memory-utilization above 0.35"
    );
    assert!(
        d.explanation.contains("9.38 GiB") && d.explanation.contains("10.90 GiB"),
        "{}",
        d.explanation
    );
    // The multimodal reserve (0.27.0-0.33.0 `multimodal/gpu_ipc_memory.py:245`; 0.25.0-0.26.0
    // `gpu_worker.py`, without `or hw_decoders`): named with its figures, not read as a kind.
    let mm = "ValueError: frontend multimodal GPU decoding reserves 6.00 GiB (4.00 GiB raw-frame budget, 2.00 GiB decoder cache budget), but only 3.25 GiB is available for the KV cache. Reduce mm_ipc_gpu_memory_gb or hw_decoders, use a different video backend, or increase gpu_memory_utilization.";
    assert_eq!(parse(mm), None);
    let why = read(mm).err().unwrap().to_string();
    assert!(
        why.contains("multimodal") && why.contains("6.00 GiB") && why.contains("3.25 GiB"),
        "{why}"
    );
    assert!(!why.contains("no out-of-memory message found"), "{why}");
    // Only the knobs the figures leave open: with no raw-frame budget, no smaller
    // --mm-ipc-gpu-memory-gb; with no decoder reserve, no CPU video backend.
    let frames_only = "ValueError: frontend multimodal GPU decoding reserves 4.00 GiB (4.00 GiB raw-frame budget, 0.00 GiB decoder cache budget), but only 3.25 GiB is available for the KV cache. Reduce mm_ipc_gpu_memory_gb, use a different video backend, or increase gpu_memory_utilization.";
    let why = read(frames_only).err().unwrap().to_string();
    assert!(why.contains("--mm-ipc-gpu-memory-gb below 3.25"), "{why}");
    assert!(!why.contains("CPU video backend"), "{why}");
    let decoders_only = "ValueError: frontend multimodal GPU decoding reserves 2.00 GiB (0.00 GiB raw-frame budget, 2.00 GiB decoder cache budget), but only 1.50 GiB is available for the KV cache. Reduce mm_ipc_gpu_memory_gb or hw_decoders, use a different video backend, or increase gpu_memory_utilization.";
    let why = read(decoders_only).err().unwrap().to_string();
    assert!(!why.contains("--mm-ipc-gpu-memory-gb below"), "{why}");
    assert!(
        why.contains("a CPU video backend (no decoder reserve)"),
        "{why}"
    );
    // Both: 6.00 of 3.25 GiB, the decoders' 2.00 leaving 1.25 for frames; frames of 4.00 alone
    // take it all, so the CPU backend alone is not enough.
    let why = read(mm).err().unwrap().to_string();
    assert!(why.contains("--mm-ipc-gpu-memory-gb below 1.25"), "{why}");
    assert!(
        why.contains("a CPU video backend (not enough alone"),
        "{why}"
    );
}

/// vLLM 0.32+'s start-up check with weights another process holds (`v1/worker/utils.py`,
/// `request_memory`, read at 0.33.0), mapped by CAUSES.md: weights that fill the share are
/// `serving-weights`; free memory below the share less those weights is `other-processes`,
/// with a share no larger than (F + W) / T.
#[test]
fn vllm_external_weights_checks_are_read_and_mapped() {
    let full = "ValueError: Externally held weights on device cuda:0 (70.00/79.19 GiB) exceed the desired GPU memory utilization (0.8, 63.35 GiB). Increase GPU memory utilization or reduce GPU memory used by other processes.";
    let e = parse(full).unwrap();
    assert_eq!(
        e,
        ServingError::VllmExternalWeightsFillShare {
            weights_bytes: gib(70.0),
            total_bytes: gib(79.19),
            utilization: 0.8,
            desired_bytes: gib(63.35),
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.cause, ServingCause::Weights);
    // 70.00 / 79.19 = 0.884: the share must pass it.
    assert_eq!(
        d.remedies[0].action,
        "raise --gpu-memory-utilization above 0.89"
    );
    assert!(!d.remedies[0].enough);
    assert!(d.explanation.contains("70.00 GiB"), "{}", d.explanation);
    let free = "ValueError: Free memory on device cuda:0 (5.00/79.19 GiB) on startup is less than the engine's budget after excluding external process's weights (0.92, 12.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.";
    let e = parse(free).unwrap();
    assert_eq!(
        e,
        ServingError::VllmFreeBelowEngineBudget {
            free_bytes: gib(5.0),
            total_bytes: gib(79.19),
            utilization: 0.92,
            engine_bytes: gib(12.85),
        }
    );
    let d = explain(&e, None);
    assert_eq!(d.cause, ServingCause::OtherProcesses);
    // W = 0.92 x 79.19 - 12.85 = 60.00 GiB held; (5.00 + 60.00) / 79.19 = 0.8208: at most 0.82,
    // where the free-memory check alone (5.00 / 79.19) would say 0.06.
    assert_eq!(d.remedies[0].action, "--gpu-memory-utilization 0.82");
    assert!(d.remedies[0].enough);
    assert!(
        d.remedies[1]
            .action
            .starts_with("stop what holds the rest of the GPU"),
        "{:?}",
        d.remedies
    );
    // A share outside (0, 1] is no vLLM's: refused as edited by hand.
    let edited = full.replace("(0.8, 63.35 GiB)", "(1.8, 63.35 GiB)");
    assert!(parse(&edited).unwrap().impossible().is_some());
}

/// The capacity figures for a vLLM paste are the capacity model's at the release the paste
/// prints (`Initializing a V1 LLM engine (v0.20.2)`), whose memory outside the KV cache is not
/// 0.11's (vram's default release, which the figures used whatever the paste printed); a paste
/// of a release vram refuses gets none ([`CapacityFigures::unmodelled_release`]).
#[test]
fn capacity_figures_are_at_the_pastes_own_vllm_release() {
    use vram_model::arch::Model;
    use vram_plan::capacity::{capacity, Engine, Knobs};
    let Model::Transformer(t) = vram_model::catalog::lookup("qwen3-8b").unwrap() else {
        panic!("qwen3-8b is a transformer")
    };
    let gpu = vram_model::gpu::lookup("l4").unwrap();
    let e = ServingError::VllmNoCacheMemory {
        available_bytes: None,
    };
    let conf = vram_doctor::profile::engine_configuration(
        "INFO [core.py:93] Initializing a V1 LLM engine (v0.20.2) with config: model='Qwen/Qwen3-8B', max_seq_len=8192",
    );
    assert_eq!(conf.engine_version, Some([0, 20, 2]));
    assert_eq!(CapacityFigures::unmodelled_release(&e, &conf), None);
    let f = CapacityFigures::of(&t, gpu, &e, &conf).unwrap();
    let at = |v: Option<[u32; 3]>| {
        let k = Knobs {
            max_model_len: Some(8192),
            engine_version: v,
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        c.weights_bytes + c.non_torch_bytes + c.activation_peak_bytes + c.cuda_graph_bytes
    };
    assert_eq!(f.non_kv_bytes, at(Some([0, 20, 2])));
    let default = CapacityFigures::of(
        &t,
        gpu,
        &e,
        &vram_doctor::profile::EngineConfiguration {
            max_model_len: Some(8192),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(default.non_kv_bytes, at(None));
    assert_ne!(f.non_kv_bytes, default.non_kv_bytes);
    let later = vram_doctor::profile::engine_configuration(
        "INFO [core.py:140] Initializing a V1 LLM engine (v0.29.0) with config: model='Qwen/Qwen3-8B'",
    );
    let why = CapacityFigures::unmodelled_release(&e, &later).unwrap();
    assert!(
        why.starts_with("--model is not used: the paste is vLLM 0.29.0's"),
        "{why}"
    );
}
