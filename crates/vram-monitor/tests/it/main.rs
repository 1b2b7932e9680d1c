//! Integration tests of vram-monitor: one binary, one module per feature.
//! Nothing here needs a GPU; the NVML test accepts both outcomes and says
//! which one it saw.

mod leak;
mod nvml;
mod procinfo;
mod prom;
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
