//! Allocator speed: a cached alloc+free pair on one thread, scaling with
//! threads sharing one allocator, and replay throughput.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use vram_alloc::{pickle, replay, synthetic, AllocatorConfig, CachingAllocator, Policy, SimDevice};

fn warm(policy: Policy) -> CachingAllocator<SimDevice> {
    let a = CachingAllocator::new(SimDevice::new(1 << 36), AllocatorConfig::new(policy)).unwrap();
    // Some live blocks so the free sets and address map are not trivially small.
    let keep: Vec<u64> = (0..256)
        .map(|i| a.malloc(4096 + i * 512, 0).unwrap())
        .collect();
    for (i, p) in keep.into_iter().enumerate() {
        if i % 2 == 0 {
            a.free(p).unwrap();
        }
    }
    let p = a.malloc(4096, 0).unwrap();
    a.free(p).unwrap();
    let p = a.malloc(8 << 20, 0).unwrap();
    a.free(p).unwrap();
    a
}

fn cached_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("cached_pair");
    for policy in Policy::ALL {
        for (label, size) in [("4KiB", 4096u64), ("8MiB", 8 << 20)] {
            let a = warm(policy);
            g.bench_function(BenchmarkId::new(policy.name(), label), |b| {
                b.iter(|| {
                    let p = a.malloc(black_box(size), 0).unwrap();
                    a.free(black_box(p)).unwrap();
                })
            });
        }
    }
    g.finish();
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("threads");
    for n in [1usize, 2, 4] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("pytorch_4KiB_pairs", n), |b| {
            b.iter_custom(|iters| {
                let a = Arc::new(warm(Policy::PyTorch));
                let barrier = Arc::new(Barrier::new(n + 1));
                let hs: Vec<_> = (0..n)
                    .map(|t| {
                        let (a, barrier) = (Arc::clone(&a), Arc::clone(&barrier));
                        std::thread::spawn(move || {
                            barrier.wait();
                            for _ in 0..iters {
                                let p = a.malloc(4096, t as u32 % 2).unwrap();
                                a.free(p).unwrap();
                            }
                        })
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                for h in hs {
                    h.join().unwrap();
                }
                start.elapsed()
            })
        });
    }
    g.finish();
}

fn replay_trace(c: &mut Criterion) {
    let events = synthetic::training_events(&synthetic::presets()[0], 1);
    let mut g = c.benchmark_group("replay_gpt2_small_step");
    g.throughput(Throughput::Elements(events.len() as u64));
    g.measurement_time(Duration::from_secs(3));
    for policy in Policy::ALL {
        g.bench_function(policy.name(), |b| {
            b.iter(|| {
                replay::replay(black_box(&events), &AllocatorConfig::new(policy), None).unwrap()
            })
        });
    }
    g.finish();
}

/// Writing a snapshot pickle (what `vram trace` writes: every block of every step in the
/// history, each entry with a category): entry by entry (`to_pickle`), and through the value
/// tree it writes the bytes of (`to_value`, then `pickle::to_vec`), which is how `to_pickle`
/// wrote them before session 12.
fn snapshot_pickle(c: &mut Criterion) {
    let events = synthetic::training_events(&synthetic::presets()[0], 20);
    let a = CachingAllocator::new(
        SimDevice::new(1 << 40),
        AllocatorConfig::new(Policy::PyTorch).with_history(usize::MAX),
    )
    .unwrap();
    let mut live = std::collections::HashMap::new();
    for e in &events {
        match *e {
            replay::Event::Alloc { id, size, stream } => {
                live.insert(id, a.malloc(size, stream).unwrap());
            }
            replay::Event::Free { id } => a.free(live.remove(&id).unwrap()).unwrap(),
        }
    }
    let mut snap = a.snapshot();
    for t in &mut snap.traces {
        t.category = Some("activations".to_string());
    }
    assert_eq!(snap.to_pickle(), pickle::to_vec(&snap.to_value()));
    let mut g = c.benchmark_group("snapshot_pickle");
    g.throughput(Throughput::Elements(snap.traces.len() as u64));
    g.measurement_time(Duration::from_secs(8));
    g.sample_size(20);
    g.bench_function("entry_by_entry", |b| {
        b.iter(|| black_box(&snap).to_pickle())
    });
    g.bench_function("value_tree", |b| {
        b.iter(|| pickle::to_vec(&black_box(&snap).to_value()))
    });
    g.finish();
}

criterion_group!(benches, cached_pair, threads, replay_trace, snapshot_pickle);
criterion_main!(benches);
