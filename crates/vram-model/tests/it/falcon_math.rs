//! Falcon's `generate` prefill through SDPA's math composite (`walk/generate.rs`), against
//! the real model: transformers 5.24's `FalconForCausalLM.generate` on torch 2.15 (CPU, the
//! math backend forced: what a GPU runs for Falcon's one-head K/V with a mask), whose peak
//! allocated bytes above the weights were read off the torch profiler's memory timeline by
//! `tests/data/mechs/falcon_generate_math_peak.py` (measured 2026-11-25 by the outliers
//! session): 92,018,853 bytes. Before `_safe_softmax` was modelled as PyTorch 2.11 runs it
//! (`where_out` into the softmax's storage, pytorch#139613) the estimate was 125,122,240
//! (+36 %): one fp32 scores tensor too many, Falcon's `generate` outlier.

use vram_model::estimate::{estimate, Category};
use vram_model::hf::parse_config;
use vram_model::setup::{Infer, KvCache, Mode, Precision, Setup};

#[test]
fn falcon_generate_math_sdpa_peak_matches_the_real_model() {
    let model = parse_config(
        r#"{"model_type": "falcon", "vocab_size": 4096, "hidden_size": 1136, "num_hidden_layers": 2, "num_attention_heads": 71, "multi_query": true, "parallel_attn": true, "bias": false, "new_decoder_architecture": false, "alibi": false}"#,
        "falcon-7b-shape",
    )
    .unwrap();
    let setup = Setup {
        precision: Precision::Bf16,
        mode: Mode::Infer(Infer {
            batch: 2,
            context: 256,
            new_tokens: 4,
            kv_bytes: 2,
            kv_cache: KvCache::Dynamic,
        }),
        ..Setup::default()
    };
    let e = estimate(&model, &setup).unwrap();
    let b = &e.breakdown;
    // What the profiler counts: everything allocated above the weights (no cuBLAS workspace
    // on the CPU).
    let ours = (e.peak_bytes - b.get(Category::Parameters) - b.get(Category::Workspace)) as f64;
    let real = 92_018_853f64;
    assert!(
        (ours / real - 1.0).abs() < 0.01,
        "{ours} vs {real} ({:+.2} %)",
        (ours / real - 1.0) * 100.0
    );
}
