//! Integration tests of vram-report: one binary, one module per feature. Nothing here needs a
//! GPU or the network.

mod report;
mod reports;
mod v1;

use vram_model::arch::Model;
use vram_monitor::{Sample, SimulatedSource, Source};
use vram_report::estimate::{EstimateRequest, ModelInput};
use vram_report::request::{FinetuneRequest, StepRequest};
use vram_report::Report;

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

/// `vram estimate ID` with `step` and `finetune` on `gpu`, as the CLI builds it.
pub fn estimate(
    id: &str,
    gpu: &str,
    step: StepRequest,
    finetune: FinetuneRequest,
    timeline: bool,
) -> Report {
    let req = EstimateRequest {
        step,
        finetune,
        gpu: vram_model::gpu::lookup(gpu).unwrap(),
        timeline,
        dequantized: false,
        kernels: Default::default(),
    };
    let model: Model = step
        .attach(vram_model::catalog::lookup(id).unwrap())
        .unwrap();
    let input = ModelInput {
        model,
        config: vram_model::catalog::config_text(id),
        checkpoint_params: None,
        checkpoint_place: None,
    };
    vram_report::estimate::estimate(&input, &req).unwrap()
}
