//! `generate`'s decode steps in the allocator replay (`walk/generate.rs`, `decode_steps`).
//!
//! A dynamic cache reallocates every layer's keys and values at each token, and PyTorch's
//! caching allocator places each new tensor by best fit among the blocks the step before left
//! free: the grown tensors circulate through the blocks the prefill's temporaries left, and how
//! many of them stay there (rather than in segments of their own) depends on every step before.
//! No shorter walk gives the figures of walking every step in general; the default
//! (`DecodeReplay::Sampled`) walks every step up to `SAMPLED_DECODE_STEPS` of them and that many
//! evenly spaced ones beyond, and these tests measure what that changes against walking every
//! step (`DecodeReplay::Every`):
//! - up to the sample size, the figures are the same;
//! - beyond it, on a grid of models (uniform and layer-by-layer walks), batches, prompts, new
//!   tokens and allocators, the errors stay within the bounds the estimate's note states
//!   (`vram_model::estimate::DECODE_SAMPLING_ERROR`), and the grid reaches those bounds.

use vram_model::arch::Model;
use vram_model::estimate::DECODE_SAMPLING_ERROR;
use vram_model::setup::{
    Allocator, DecodeReplay, Infer, KvCache, Mode, Precision, Setup, SAMPLED_DECODE_STEPS,
};
use vram_model::{catalog, estimate, Estimate};

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

/// The estimate with the decode sampled (the default) and with every step walked.
fn both(model: &Model, s: &Setup) -> (Estimate, Estimate) {
    let mut every = *s;
    every.overheads.decode_replay = DecodeReplay::Every;
    (
        estimate(model, s).unwrap(),
        estimate(model, &every).unwrap(),
    )
}

fn figures(e: &Estimate) -> (u64, u64, u64) {
    (e.peak_bytes, e.reserved_bytes, e.needed_bytes)
}

#[test]
fn up_to_the_sample_size_every_step_is_walked() {
    let mut n = 0;
    let last = SAMPLED_DECODE_STEPS + 1; // new tokens whose decode steps all fit the sample
    for (id, batches, prompts, news) in [
        (
            "gpt2",
            &[1u64, 16][..],
            &[7u64, 900][..],
            &[2u64, 17, last][..],
        ),
        (
            "llama-3.1-8b",
            &[1, 8][..],
            &[100, 8192][..],
            &[16, last][..],
        ),
        ("mistral-7b", &[2][..], &[5000][..], &[last][..]),
        // Layer-by-layer walks: sliding + full with sinks, Gated DeltaNet hybrid, MLA.
        ("gpt-oss-20b", &[4][..], &[300][..], &[last][..]),
        ("qwen3-next-80b-a3b", &[2][..], &[1000][..], &[last][..]),
        ("deepseek-v3", &[1][..], &[500][..], &[last][..]),
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
                            let s = setup(b, p, new, cache, alloc);
                            let (sampled, every) = both(&model, &s);
                            assert_eq!(
                                figures(&sampled),
                                figures(&every),
                                "{id} batch {b} prompt {p} new {new} {cache:?} {alloc:?}"
                            );
                            assert_eq!(sampled.decode_sampled, None);
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(n > 60, "{n} cases");
}

/// `(sampled − every) / every`, in percent.
fn err(sampled: u64, every: u64) -> f64 {
    (sampled as f64 - every as f64) / every as f64 * 100.0
}

#[test]
fn beyond_it_the_sampled_figures_stay_within_the_stated_bounds() {
    // (model, batch, prompt, new tokens, allocator, cache). The first rows are the regime where
    // the cache outgrows the blocks the prefill left free (long prompts at large batches, long
    // decodes, beyond 4,096 steps: the walks' keys once packed the step below the layer and
    // collided there, which made every-step replays of these rows reserve up to twice as much).
    use Allocator::{Pytorch, PytorchExpandable, Vramkit};
    use KvCache::{Dynamic, Static};
    let cases: &[(&str, u64, u64, u64, Allocator, KvCache)] = &[
        ("llama-3.1-8b", 8, 8192, 8000, Pytorch, Dynamic),
        ("llama-3.1-8b", 8, 8192, 4096, Pytorch, Dynamic),
        ("llama-3.1-8b", 4, 8192, 8192, Pytorch, Dynamic),
        ("mistral-7b", 8, 4096, 6000, Pytorch, Dynamic),
        ("llama-3.1-8b", 4, 4096, 8192, Pytorch, Dynamic),
        ("llama-3.1-8b", 8, 4096, 4096, Pytorch, Dynamic),
        ("llama-3.1-8b", 4, 2000, 2000, Pytorch, Dynamic),
        ("llama-3.1-8b", 8, 1000, 4000, Pytorch, Dynamic),
        ("llama-3.1-8b", 16, 512, 2000, Pytorch, Dynamic),
        ("llama-3.1-8b", 1, 8192, 4096, Pytorch, Dynamic),
        ("llama-2-7b", 4, 500, 3000, Pytorch, Dynamic),
        ("gpt2", 16, 512, 500, Pytorch, Dynamic),
        ("gpt2", 32, 100, 900, Pytorch, Dynamic),
        ("qwen3-8b", 8, 2048, 1000, Pytorch, Dynamic),
        ("gpt-oss-20b", 4, 2000, 1000, Pytorch, Dynamic),
        ("llama-3.1-8b", 4, 2000, 2000, PytorchExpandable, Dynamic),
        ("gpt2", 16, 512, 500, PytorchExpandable, Dynamic),
        ("llama-3.1-8b", 4, 2000, 2000, Vramkit, Dynamic),
        ("gpt2", 16, 512, 500, Vramkit, Dynamic),
        // A static cache under the layer-by-layer walk: the cache stays, MLA's re-expansion
        // of the whole latent grows with the context at every step.
        ("deepseek-v3", 1, 500, 300, Pytorch, Static),
    ];
    let bounds = DECODE_SAMPLING_ERROR;
    let (mut lo, mut hi) = ((0.0f64, 0.0f64), (0.0f64, 0.0f64)); // (needed, reserved)
    let mut rows = Vec::new();
    for &(id, b, p, new, alloc, cache) in cases {
        let model = catalog::lookup(id).unwrap();
        let s = setup(b, p, new, cache, alloc);
        let (sampled, every) = both(&model, &s);
        let d = sampled
            .decode_sampled
            .expect("sampled beyond the sample size");
        assert_eq!(d.steps, new - 1);
        assert!(d.replayed <= SAMPLED_DECODE_STEPS + 2, "{d:?}");
        let (ea, er, en) = (
            err(sampled.peak_bytes, every.peak_bytes),
            err(sampled.reserved_bytes, every.reserved_bytes),
            err(sampled.needed_bytes, every.needed_bytes),
        );
        lo = (lo.0.min(en), lo.1.min(er));
        hi = (hi.0.max(en), hi.1.max(er));
        rows.push(format!(
            "{id:<14} b{b:<3} p{p:<5} n{new:<5} {:<19} {:<8} peak {ea:+7.3}%  needed {en:+6.2}%  reserved {er:+7.2}%",
            alloc.name(),
            format!("{cache:?}")
        ));
        // The allocated peak: the last step is walked; only the allocator's rounding of the
        // blocks it lands in can differ.
        assert!(ea.abs() < 0.1, "{}", rows.last().unwrap());
    }
    eprintln!("sampled decode against every step:\n{}", rows.join("\n"));
    assert!(
        bounds.needed.0 <= lo.0
            && hi.0 <= bounds.needed.1
            && bounds.reserved.0 <= lo.1
            && hi.1 <= bounds.reserved.1,
        "(needed, reserved) errors from {lo:?} to {hi:?}, outside the stated bounds {bounds:?}"
    );
    // The stated bounds are the grid's extremes, rounded outward to the next 0.5 %.
    let outward = |x: f64| {
        if x < 0.0 {
            (x * 2.0).floor() / 2.0
        } else {
            (x * 2.0).ceil() / 2.0
        }
    };
    assert_eq!(
        (outward(lo.0), outward(hi.0), outward(lo.1), outward(hi.1)),
        (
            bounds.needed.0,
            bounds.needed.1,
            bounds.reserved.0,
            bounds.reserved.1
        ),
        "the note's bounds must be what this grid measures"
    );
}
