//! `suggest::serving` advises only changes the job has not made, named as the engine
//! names them, that start it; `Knobs::derived_max_model_len` moves the length limit.

use vram_model::arch::{Model, Transformer};
use vram_model::{catalog, gpu};
use vram_plan::capacity::{capacity, Engine, Knobs, Quantization};
use vram_plan::suggest;

fn model(id: &str) -> Transformer {
    match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

#[test]
fn a_checkpoint_stored_in_fp8_is_never_told_to_quantize_to_fp8() {
    // DeepSeek-V3 ships FP8 blocks: 8 H100s cannot hold it, and fp8 weights are no change.
    let t = model("deepseek-v3");
    assert_ne!(t.blocks.storage.quant, vram_model::blocks::Quant::None);
    let g = gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        tp: 8,
        max_model_len: Some(32768),
        ..Knobs::default()
    };
    assert!(!capacity(&t, g, Engine::Vllm, &k).unwrap().starts);
    let c = suggest::serving(&t, g, Engine::Vllm, &k).expect("a change");
    let flags = &c.flags;
    assert!(!flags.contains("--quantization"), "{flags}");
    assert!(
        !flags.contains("--tensor-parallel-size"),
        "TP 8 is the most tried: {flags}"
    );
    assert_eq!(flags, "--pipeline-parallel-size 2");
    assert_eq!(c.max_model_len, 32768);
    let changed = Knobs { pp: 2, ..k };
    let started = capacity(&t, g, Engine::Vllm, &changed).unwrap();
    assert!(started.starts);
    assert_eq!(started.kv_cache_tokens, c.kv_cache_tokens);
}

#[test]
fn changes_already_made_are_not_offered_and_each_offer_starts() {
    let t = model("llama-3-70b");
    let g = gpu::lookup("a100-80g").unwrap();
    // A100 80GB (torch's 79.15 GiB) at 0.865: a KV cache, but not 8,192 tokens of it.
    let base = Knobs {
        tp: 2,
        gpu_memory_utilization: Some(0.865),
        ..Knobs::default()
    };
    let first = suggest::serving(&t, g, Engine::Vllm, &base).unwrap();
    assert_eq!(first.flags, "--kv-cache-dtype fp8");
    let fp8 = Knobs {
        kv_bytes: Some(1),
        ..base
    };
    assert!(capacity(&t, g, Engine::Vllm, &fp8).unwrap().starts);
    // With the KV cache already fp8 and the weights fp8, only more parallelism remains.
    let made = Knobs {
        kv_bytes: Some(1),
        quantization: Quantization::Fp8,
        max_model_len: Some(131072),
        gpu_memory_utilization: Some(0.3),
        ..base
    };
    if let Some(c) = suggest::serving(&t, g, Engine::Vllm, &made) {
        let flags = &c.flags;
        assert!(
            flags.starts_with("--tensor-parallel-size ")
                || flags.starts_with("--pipeline-parallel-size "),
            "{flags}"
        );
        let n: u64 = flags.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n > 2 || flags.starts_with("--pipeline"), "{flags}");
        assert!(c.max_concurrency > 0.0);
    }
}

#[test]
fn a_derived_length_moves_the_limit_and_the_default() {
    let t = model("qwen2-7b");
    let g = gpu::lookup("h100-80g").unwrap();
    let limit = t.max_positions();
    let over = Knobs {
        max_model_len: Some(limit * 2),
        ..Knobs::default()
    };
    let e = capacity(&t, g, Engine::Vllm, &over)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--max-model-len") && e.contains("no rope_scaling"),
        "{e}"
    );
    let stretched = Knobs {
        derived_max_model_len: Some(limit * 2),
        ..Knobs::default()
    };
    assert_eq!(
        capacity(&t, g, Engine::Vllm, &stretched)
            .unwrap()
            .max_model_len,
        limit * 2
    );
    assert!(capacity(
        &t,
        g,
        Engine::Vllm,
        &Knobs {
            max_model_len: Some(limit * 2),
            ..stretched
        }
    )
    .is_ok());
    let e = capacity(
        &t,
        g,
        Engine::Sglang,
        &Knobs {
            max_model_len: Some(limit * 2 + 1),
            ..stretched
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("stretched by its rope_scaling"), "{e}");
}
