//! A `generate` call after a warm-up call (`Overheads::warmup_prompt`, `--warmup-prompt`): the
//! warm-up (same batch and new tokens, the first `min(N, prompt)` prompt tokens) frees all it
//! made, the peak statistics are reset, and the estimated call runs on the allocator the
//! warm-up left, as `measure2.py`'s `infer_case` measures `generate`.

use vram_model::setup::{Mode, Setup, Train};
use vram_model::{catalog, estimate, Estimate};

fn generate(batch: u64, prompt: u64, new: u64, warmup: Option<u64>) -> Setup {
    let mut s = crate::setups::generate(batch, prompt, new);
    s.overheads.warmup_prompt = warmup;
    s
}

fn peaks(e: &Estimate) -> (u64, u64) {
    (e.peak_bytes, e.reserved_bytes)
}

#[test]
fn a_warm_up_of_the_same_call_maps_nothing_new() {
    // The same requests again find every segment they need cached: the reserved peak after the
    // reset is what the first call left (the decode-speed rows of the H200 cases), and a
    // warm-up longer than the prompt is the prompt (`x[:, :min(prompt, N)]`).
    let llama = catalog::lookup("llama-3.1-8b").unwrap();
    let first = estimate(&llama, &generate(16, 1024, 16, None)).unwrap();
    for w in [1024, 100_000] {
        let warm = estimate(&llama, &generate(16, 1024, 16, Some(w))).unwrap();
        assert_eq!(peaks(&warm), peaks(&first), "warm-up of {w} prompt tokens");
    }
}

#[test]
fn a_short_warm_up_changes_what_the_measured_call_reserves() {
    // MoE at batch 16: the warm-up's decode leaves `batched_mm`'s expert-weight copies cached
    // (1.15 GB a layer for Qwen3-30B-A3B) and the measured prefill's tensors go into them
    // (`gen_trace.py` on the 4-layer slice: vram one call +7.4 % against the warmed-up trace,
    // -0.0 % with the warm-up).
    let moe = catalog::lookup("qwen3-30b-a3b").unwrap();
    let first = estimate(&moe, &generate(16, 1024, 16, None)).unwrap();
    let warm = estimate(&moe, &generate(16, 1024, 16, Some(32))).unwrap();
    assert!(
        warm.reserved_bytes < first.reserved_bytes,
        "warm {} first {}",
        warm.reserved_bytes,
        first.reserved_bytes
    );
    // The allocated peak restarts at what is live (the weights): the same call's peak, up to
    // the allocator's rounding of the blocks it splits from other segments.
    let d = warm.peak_bytes.abs_diff(first.peak_bytes);
    assert!(d < first.peak_bytes / 1000, "allocated moved by {d} B");
}

#[test]
fn a_warm_up_is_a_generate_call() {
    let llama = catalog::lookup("llama-3.1-8b").unwrap();
    let mut train = Setup {
        mode: Mode::Train(Train::default()),
        ..Setup::default()
    };
    train.overheads.warmup_prompt = Some(32);
    let e = estimate(&llama, &train).unwrap_err().to_string();
    assert!(
        e.contains("--warmup-prompt") && e.contains("--inference"),
        "{e}"
    );
    let e = estimate(&llama, &generate(1, 64, 4, Some(0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--warmup-prompt"), "{e}");
}
