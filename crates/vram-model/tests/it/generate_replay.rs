//! The allocator replay of `generate` walks only the decode steps where the caching allocator
//! can decide differently (`estimate/inference.rs`, `replay_tokens`); here it must give exactly
//! the peaks of walking every step, on a grid of models, batches, prompt lengths, new tokens,
//! cache kinds and allocators.

use vram_model::arch::Model;
use vram_model::estimate::set_replay_every_token;
use vram_model::setup::{Allocator, Infer, KvCache, Mode, Precision, Setup};
use vram_model::{catalog, estimate};

fn setup(batch: u64, prompt: u64, new: u64, cache: KvCache, alloc: Allocator) -> Setup {
    let mut s = Setup {
        precision: Precision::Bf16,
        mode: Mode::Infer(Infer {
            batch,
            context: prompt + new,
            new_tokens: new,
            kv_bytes: 2,
            kv_cache: cache,
        }),
        ..Setup::default()
    };
    s.overheads.allocator = alloc;
    s
}

fn both(model: &Model, s: &Setup) -> ((u64, u64), (u64, u64)) {
    set_replay_every_token(false);
    let chosen = estimate(model, s).unwrap();
    set_replay_every_token(true);
    let every = estimate(model, s).unwrap();
    set_replay_every_token(false);
    (
        (chosen.peak_bytes, chosen.reserved_bytes),
        (every.peak_bytes, every.reserved_bytes),
    )
}

#[test]
fn generate_replay_of_chosen_steps_equals_every_step() {
    let mut n = 0;
    for (id, batches, prompts, news) in [
        (
            "gpt2",
            &[1u64, 3, 16][..],
            &[7u64, 200, 1000][..],
            &[2u64, 40, 700][..],
        ),
        ("llama-2-7b", &[1, 4][..], &[100, 3000][..], &[3, 300][..]),
        ("mistral-7b", &[1, 2][..], &[500][..], &[600][..]),
        ("phi-3-mini", &[1, 8][..], &[60, 2047][..], &[257][..]),
        // Long prompts at small batches: the cache tensors have segments of their own and the
        // steps between class changes are skipped (2 MiB classes, 64-256 tokens each).
        ("llama-3-8b", &[1, 2][..], &[8000][..], &[1500][..]),
        // Large batches: the logits (>= 2 MiB) keep segments of their own, smaller than any
        // cache block, and are skipped too.
        ("llama-3-8b", &[9, 12][..], &[2000][..], &[500][..]),
        ("gpt2", &[40][..], &[900][..], &[300][..]),
        // Logits between 1 and 2 MiB (batches 4-8 at a 128K vocabulary): eight steps either
        // side of each class change.
        ("llama-3-8b", &[4, 7][..], &[8000][..], &[1200][..]),
        // Caches that start small (shared segments, small pool) and grow past 10 MiB.
        ("gpt2", &[1, 5][..], &[3][..], &[2500][..]),
        ("phi-3-mini", &[2][..], &[100][..], &[1500][..]),
        ("llama-3-8b", &[1][..], &[1][..], &[4095][..]),
    ] {
        let model = catalog::lookup(id).unwrap();
        for &b in batches {
            for &p in prompts {
                for &new in news {
                    for cache in [KvCache::Dynamic, KvCache::Static] {
                        for alloc in [
                            Allocator::Pytorch,
                            Allocator::PytorchExpandable,
                            Allocator::Vramkit,
                        ] {
                            // The expandable and vramkit policies on the largest models only
                            // once per model, to keep the test short.
                            if alloc != Allocator::Pytorch && (b > 4 || new > 300) && id != "gpt2" {
                                continue;
                            }
                            let s = setup(b, p, new, cache, alloc);
                            let (chosen, every) = both(&model, &s);
                            assert_eq!(
                                chosen, every,
                                "{id} batch {b} prompt {p} new {new} {cache:?} {alloc:?}"
                            );
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(n > 60, "{n} cases");
}
