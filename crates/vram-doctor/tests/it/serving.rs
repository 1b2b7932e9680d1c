//! Rule 12: vLLM's and SGLang's start-up memory errors.

use vram_doctor::serving::{explain, parse, CapacityChange, CapacityFigures, ServingError};
use vram_doctor::{read, Reading};

use crate::{fixture, gib};

#[test]
fn vllm_v0_max_seq_len_is_read_and_the_fitting_length_named() {
    let e = parse(&fixture("vllm-v0-max-seq-len.txt")).unwrap();
    assert_eq!(
        e,
        ServingError::VllmMaxSeqLen {
            max_model_len: 131072,
            kv_tokens: 93760
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
        change: None,
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
}

/// The capacity model's change comes second, marked enough, with its figures; a fraction the
/// GPU cannot give (more than all of it) is never offered as a value.
#[test]
fn the_capacity_models_change_is_offered_and_no_fraction_above_one() {
    let cap = CapacityFigures {
        device_bytes: 24 << 30,
        non_kv_bytes: 16 << 30,
        kv_bytes_per_token: 128 << 10,
        change: Some(CapacityChange {
            flags: "--tensor-parallel-size 2".into(),
            max_model_len: 131072,
            kv_cache_tokens: 150_000,
            max_concurrency: 1.14,
        }),
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
