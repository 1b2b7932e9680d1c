//! Integration tests of vram-monitor: one binary, one module per feature.
//! Nothing here needs a GPU; the NVML test accepts both outcomes and says
//! which one it saw.

mod leak;
mod nvml;
mod procinfo;
mod prom;
mod report;
mod sim;
mod timeline;
mod view;

use vram_monitor::{Sample, SimulatedSource, Source};

/// `n` samples of the demo scenario, one second apart.
pub fn demo_samples(n: u64) -> Vec<Sample> {
    let mut s = SimulatedSource::demo();
    (0..n)
        .map(|k| s.sample(1_700_000_000_000 + k * 1000).unwrap())
        .collect()
}

/// Read a fixture from `tests/data`.
pub fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
