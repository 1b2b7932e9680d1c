//! How long one estimate takes. The planner calls `estimate` for every candidate
//! configuration, so the target is at most 5 µs for an 80-layer model.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vram_model::setup::{Mode, Parallel, Recompute, Schedule, Setup, Train};
use vram_model::{catalog, estimate};

fn bench(c: &mut Criterion) {
    let llama70 = catalog::lookup("llama-2-70b").unwrap(); // 80 layers
    let single = Setup::default();
    c.bench_function("estimate llama-2-70b (80 layers), 1 GPU", |b| {
        b.iter(|| estimate(black_box(&llama70), black_box(&single)).unwrap())
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
        |b| b.iter(|| estimate(black_box(&llama70), black_box(&three_d)).unwrap()),
    );
    let accum = Setup {
        mode: Mode::Train(Train {
            grad_accum: 8,
            ..Train::default()
        }),
        ..Setup::default()
    };
    c.bench_function("estimate llama-2-70b, grad-accum 8", |b| {
        b.iter(|| estimate(black_box(&llama70), black_box(&accum)).unwrap())
    });
    let resnet = catalog::lookup("resnet-152").unwrap();
    c.bench_function("estimate resnet-152", |b| {
        b.iter(|| estimate(black_box(&resnet), black_box(&single)).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
