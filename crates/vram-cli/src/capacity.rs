//! `vram capacity`: the answer comes from `vram_report::capacity`; this module prints it.

use std::io::Write;

use anyhow::Result;
use vram_report::estimate::ModelInput;
use vram_report::CapacityReport;

pub use crate::flags::CapacityArgs;
use crate::input::resolve_model;

/// The report these flags describe: the one computation behind the text, `--json` and
/// Python's `vramkit.capacity`.
pub fn compute(a: &CapacityArgs) -> Result<CapacityReport> {
    let req = a.request()?;
    let resolved = resolve_model(&a.model, &a.hub)?;
    // A config's `quantization_config`, local or from the Hub (a catalog entry's quantized
    // storage is read by the model description itself).
    let from_user = resolved.origin != crate::input::Origin::Catalog;
    let input = ModelInput {
        model: resolved.model,
        config: resolved.config.as_deref(),
        checkpoint_params: None,
        checkpoint_place: None,
    };
    Ok(vram_report::capacity::capacity(&input, from_user, &req)?)
}

pub fn run(a: &CapacityArgs) -> Result<()> {
    let r = vram_report::Report::Capacity(Box::new(compute(a)?));
    let mut out = crate::output::stdout();
    if a.json {
        out.write_all(r.to_json().as_bytes())?;
    } else {
        out.write_all(r.text().as_bytes())?;
    }
    Ok(())
}
