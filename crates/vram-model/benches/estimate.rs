//! How long one estimate takes. The planner calls `estimate` for every candidate
//! configuration, so the target is at most 5 µs for an 80-layer model (the peak walk,
//! `estimate_allocated`). The allocator replay that `estimate` adds for reserved bytes is
//! measured separately.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vram_model::arch::Model;
use vram_model::estimate::{largest_batch, largest_context_to};
use vram_model::setup::{Mode, Parallel, Recompute, Schedule, Setup, Train};
use vram_model::{catalog, estimate, estimate_allocated};

/// DeepSeek-V3 (61 layers: 3 dense then 58 MoE of 256 routed experts, top-8, one shared; MLA)
/// from its real config.json in the catalog, as a user's estimate reads it.
fn deepseek_v3() -> Model {
    catalog::lookup("deepseek-v3").unwrap()
}

fn bench(c: &mut Criterion) {
    let llama70 = catalog::lookup("llama-2-70b").unwrap(); // 80 layers
    let single = Setup::default();
    c.bench_function("estimate llama-2-70b (80 layers), 1 GPU", |b| {
        b.iter(|| estimate_allocated(black_box(&llama70), black_box(&single)).unwrap())
    });
    let three_d = Setup {
        parallel: Parallel {
            dp: 8,
            tp: 8,
            pp: 4,
            sequence_parallel: true,
            zero: 1,
            schedule: Schedule::Interleaved(2),
        },
        mode: Mode::Train(Train {
            micro_batch: 1,
            seq: 4096,
            grad_accum: 32,
            recompute: Recompute::Selective,
            ..Train::default()
        }),
        ..Setup::default()
    };
    c.bench_function(
        "estimate llama-2-70b, dp8 tp8 pp4 interleaved, 32 micro-batches",
        |b| b.iter(|| estimate_allocated(black_box(&llama70), black_box(&three_d)).unwrap()),
    );
    let accum = Setup {
        mode: Mode::Train(Train {
            grad_accum: 8,
            ..Train::default()
        }),
        ..Setup::default()
    };
    c.bench_function("estimate llama-2-70b, grad-accum 8", |b| {
        b.iter(|| estimate_allocated(black_box(&llama70), black_box(&accum)).unwrap())
    });
    let resnet = catalog::lookup("resnet-152").unwrap();
    c.bench_function("estimate resnet-152", |b| {
        b.iter(|| estimate_allocated(black_box(&resnet), black_box(&single)).unwrap())
    });
    let mut r = c.benchmark_group("with allocator replay");
    r.sample_size(10);
    r.bench_function("llama-2-70b (80 layers), 1 GPU", |b| {
        b.iter(|| estimate(black_box(&llama70), black_box(&single)).unwrap())
    });
    r.bench_function(
        "llama-2-70b, dp8 tp8 pp4 interleaved, 32 micro-batches",
        |b| b.iter(|| estimate(black_box(&llama70), black_box(&three_d)).unwrap()),
    );
    r.bench_function("llama-3-8b generate, batch 8, context 4096", |b| {
        let l3 = catalog::lookup("llama-3-8b").unwrap();
        let gen = Setup {
            precision: vram_model::setup::Precision::Bf16,
            mode: Mode::Infer(vram_model::setup::Infer {
                batch: 8,
                context: 4096,
                new_tokens: 16,
                kv_bytes: 2,
                kv_cache: vram_model::setup::KvCache::Dynamic,
            }),
            ..Setup::default()
        };
        b.iter(|| estimate(black_box(&l3), black_box(&gen)).unwrap())
    });
    let ds = deepseek_v3();
    let ds_train = Setup {
        precision: vram_model::setup::Precision::Bf16,
        mode: Mode::Train(Train {
            micro_batch: 1,
            seq: 4096,
            recompute: Recompute::Full,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let ds_gen = Setup {
        precision: vram_model::setup::Precision::Bf16,
        mode: Mode::Infer(vram_model::setup::Infer {
            batch: 8,
            context: 4096,
            new_tokens: 16,
            kv_bytes: 2,
            kv_cache: vram_model::setup::KvCache::Dynamic,
        }),
        ..Setup::default()
    };
    r.bench_function("deepseek-v3 (61 layers, 256 experts) training", |b| {
        b.iter(|| estimate(black_box(&ds), black_box(&ds_train)).unwrap())
    });
    r.bench_function("deepseek-v3 generate, batch 8, context 4096", |b| {
        b.iter(|| estimate(black_box(&ds), black_box(&ds_gen)).unwrap())
    });
    // Issue 23.7: the cost of `generate` must not grow with the new tokens.
    let l31 = catalog::lookup("llama-3.1-8b").unwrap();
    for new in [256u64, 4096, 16384, 65536] {
        let gen = Setup {
            precision: vram_model::setup::Precision::Bf16,
            mode: Mode::Infer(vram_model::setup::Infer {
                batch: 8,
                context: 8192 + new,
                new_tokens: new,
                kv_bytes: 2,
                kv_cache: vram_model::setup::KvCache::Dynamic,
            }),
            ..Setup::default()
        };
        r.bench_function(
            format!("llama-3.1-8b generate, batch 8, prompt 8192, {new} new tokens"),
            |b| b.iter(|| estimate(black_box(&l31), black_box(&gen)).unwrap()),
        );
        // What `vram estimate --inference` adds: the largest batch and the longest context
        // on the GPU (an H100's 79.2 GiB), with the sizes below each answer checked.
        let cap = vram_model::gpu::lookup("h100-80g").unwrap().memory_bytes;
        r.bench_function(
            format!("llama-3.1-8b generate, {new} new tokens, max batch + max context on an H100"),
            |b| {
                b.iter(|| {
                    let s = black_box(&gen);
                    (
                        largest_batch(&l31, s, cap).unwrap(),
                        largest_context_to(&l31, s, cap, u64::MAX).unwrap(),
                    )
                })
            },
        );
    }
    r.finish();
    c.bench_function(
        "estimate deepseek-v3 (61 layers), peak walk, training",
        |b| b.iter(|| estimate_allocated(black_box(&ds), black_box(&ds_train)).unwrap()),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
