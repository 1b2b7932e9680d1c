//! Cost of one monitoring sample on the simulated source, and of the work
//! around it (`vram record`, `vram serve`, the leak check). Figures and the
//! machine are in BENCHMARKS.md under `## vram-monitor`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vram_monitor::leak::{LeakConfig, LeakDetector};
use vram_monitor::procinfo::ProcessNames;
use vram_monitor::{prom, History, SimulatedSource, Source};

fn bench(c: &mut Criterion) {
    let mut src = SimulatedSource::demo();
    let mut t = 0u64;
    c.bench_function("sample (simulated, 2 GPUs, 4 processes)", |b| {
        b.iter(|| {
            t += 1000;
            black_box(src.sample(t).unwrap())
        })
    });

    // What `vram record` does per sample besides writing: sample + one JSON line.
    let mut src = SimulatedSource::demo();
    c.bench_function("record step: sample + JSON line", |b| {
        b.iter(|| {
            t += 1000;
            black_box(src.sample(t).unwrap().to_json_line())
        })
    });

    // What `vram serve`'s sampler does per sample, plus one /metrics scrape.
    let mut src = SimulatedSource::demo();
    let mut h = History::new(300);
    c.bench_function("serve step: sample + history push + /metrics text", |b| {
        b.iter(|| {
            t += 1000;
            h.push(src.sample(t).unwrap());
            black_box(prom::render(h.latest(), 1))
        })
    });

    // One /api/state answer with a full 300-sample window.
    c.bench_function("/api/state JSON of 300 samples", |b| {
        b.iter(|| black_box(h.to_chart_json().to_string()))
    });

    // The leak check over 4 processes at its 256-point cap; `vram record
    // --leak-check` runs it at most every 5 s.
    let mut det = LeakDetector::new(LeakConfig::default());
    let mut src = SimulatedSource::demo();
    for k in 0..256 {
        det.observe(&src.sample(k * 1000).unwrap());
    }
    c.bench_function("leak check: 4 processes x 256 points", |b| {
        b.iter(|| black_box(det.assess()))
    });

    // The /proc lookups the NVML source does once per process per sample.
    let mut names = ProcessNames::new();
    let pid = std::process::id();
    c.bench_function("owner + command of one process from /proc", |b| {
        b.iter(|| black_box(names.lookup(pid)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
