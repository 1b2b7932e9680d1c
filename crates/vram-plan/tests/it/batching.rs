//! Memory-aware batching: every batch fits, no batch could take the next sequence.

use vram_model::catalog;
use vram_model::setup::{Mode, Setup};
use vram_plan::batching::batch_by_memory;

fn total(model: &vram_model::arch::Model, n: u64, len: u64) -> u64 {
    let mut s = Setup::default();
    if let Mode::Train(t) = &mut s.mode {
        t.micro_batch = n;
        t.seq = len;
    }
    vram_model::estimate(model, &s).unwrap().total_bytes
}

#[test]
fn batches_fit_are_maximal_and_cover_everything() {
    let model = catalog::lookup("gpt2").unwrap();
    // Lengths from a deterministic mix of short and long documents.
    let lengths: Vec<u64> = (0..300u64).map(|i| 32 + (i * 97 % 1000)).collect();
    let capacity = 8u64 << 30;
    let b = batch_by_memory(&model, &Setup::default(), &lengths, capacity, None).unwrap();
    assert!(b.too_long.is_empty());
    let mut seen = vec![false; lengths.len()];
    for (i, batch) in b.batches.iter().enumerate() {
        let longest = batch.indices.iter().map(|&k| lengths[k]).max().unwrap();
        assert_eq!(batch.padded_len, longest);
        let n = batch.indices.len() as u64;
        assert_eq!(batch.total_bytes, total(&model, n, longest));
        assert!(batch.total_bytes <= capacity);
        // Maximal: one more sequence at this length would not fit (unless none were left).
        if i + 1 < b.batches.len() {
            assert!(total(&model, n + 1, longest) > capacity, "batch {i}");
        }
        for &k in &batch.indices {
            assert!(!seen[k]);
            seen[k] = true;
        }
    }
    assert!(seen.iter().all(|&s| s));
    // Sorting by length keeps padding small: over 90 % of tokens are real.
    assert!(b.fill > 0.9, "{}", b.fill);
    // Fewer batches than a fixed batch size that fits the longest sequence (1031 tokens).
    let fixed = (1..)
        .take_while(|&n| total(&model, n, 1031) <= capacity)
        .last()
        .unwrap();
    assert!(b.batches.len() < lengths.len().div_ceil(fixed as usize));
}

#[test]
fn too_long_sequences_are_reported() {
    let model = catalog::lookup("gpt2").unwrap();
    // gpt2's model states take about 2 GB (124M parameters × 16 B under Adam), plus AdamW's
    // 4 B/param step temporary and the 779 MiB CUDA context measured on an H100; 4 GiB leaves
    // room for short sequences, not for 200,000 tokens.
    let capacity = 4u64 << 30;
    let lengths = [128, 200_000, 256];
    let b = batch_by_memory(&model, &Setup::default(), &lengths, capacity, Some(2)).unwrap();
    assert_eq!(b.too_long, vec![1]);
    assert_eq!(b.batches.len(), 1);
    assert_eq!(b.batches[0].indices, vec![2, 0]);
}
