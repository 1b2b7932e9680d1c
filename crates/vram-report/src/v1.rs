//! Reading a report saved in schema version 1 (what `vram` wrote up to main c72f1e1,
//! 2026-11-28) into this version's types.
//!
//! Version 2 changed one thing: an estimate's `weights_load`. Version 1's `WeightsLoad` had
//! `dequantized`, `why`, `stored_bytes` ("the whole model's weights as stored") and
//! `dequantized_bytes`. Its `stored_bytes` was `Blocks::weights_bytes(false)`, which that vram's
//! walk held unless `dequantized` (then it held `dequantized_bytes`): one figure, held and taken
//! for stored. Version 2 tells them apart (`held_bytes`, `stored_bytes`) where transformers 5.24
//! holds a checkpoint otherwise than it stores it, which comes down to expert banks:
//!
//! - AWQ and GPTQ expert banks: c72f1e1 counted them in the dtype (`Storage::tensor_bytes`
//!   packed AWQ/GPTQ `nn.Linear`s only), which is how transformers 5.24 holds them (built, not
//!   loaded) but not how the checkpoint stores them (packed). Version 1's figure is the held
//!   one, and the file has no stored one: such a report is refused, in one line.
//! - compressed-tensors W4A16 expert banks: c72f1e1 counted and held them packed, as stored;
//!   transformers 5.24 dequantizes them at load. The figure is the stored one and the one that
//!   vram held; the report reads with a note saying its weights and peak hold the banks packed.
//! - everything else: the figure is both, then and now.
//!
//! Reading version 1, `held_bytes` is what that vram held (`dequantized_bytes` if
//! `dequantized`, else `stored_bytes`), `stored_bytes` stays, and neither
//! `dequantized_at_load` nor `not_loaded` is set (that vram modelled neither). Every other field
//! and every other kind reads as it is (each field added since is optional or defaults).

use serde::Deserialize;

use crate::estimate::{EstimateReport, StorageQuant, WeightsLoad};

/// Version 1's `weights_load`, field for field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsLoadV1 {
    dequantized: bool,
    why: String,
    stored_bytes: u64,
    dequantized_bytes: u64,
}

/// A version 1 estimate: its `weights_load` in version 1's shape, the rest as version 2 reads
/// it (flattened, so the byte maps keep their order).
#[derive(Deserialize)]
struct EstimateV1 {
    #[serde(default)]
    weights_load: Option<WeightsLoadV1>,
    #[serde(flatten)]
    report: EstimateReport,
}

/// How version 1 counted a checkpoint's expert banks (`WeightFormat::name` at c72f1e1 spells
/// the formats).
enum Banks {
    /// No expert banks, or a format whose banks it counted as now.
    AsNow,
    /// AWQ/GPTQ banks: counted in the dtype, its `stored_bytes` is not the checkpoint's.
    InDtype,
    /// compressed-tensors W4A16 banks: held packed, where transformers 5.24 dequantizes them.
    HeldPacked,
}

fn banks(report: &EstimateReport) -> Banks {
    let Some(StorageQuant::Packed { format, .. }) =
        report.weights_storage.as_ref().map(|s| &s.quant)
    else {
        return Banks::AsNow;
    };
    // Without the per-component parameters, the model may have banks.
    let experts = report
        .params_by_component
        .as_ref()
        .is_none_or(|p| p.get("routed_experts") > 0);
    if !experts {
        Banks::AsNow
    } else if format.starts_with("awq-") || format.starts_with("gptq-") {
        Banks::InDtype
    } else if format.starts_with("compressed-tensors-w4a16-") {
        Banks::HeldPacked
    } else {
        Banks::AsNow
    }
}

/// Reads a version 1 estimate report (`kind: estimate`) as a version 2 one; `Err` with one
/// line where version 1 has no figure version 2 needs.
pub(crate) fn estimate(text: &str) -> Result<EstimateReport, String> {
    let EstimateV1 {
        weights_load,
        mut report,
    } = serde_json::from_str(text)
        .map_err(|e| format!("a schema_version 1 estimate report with bad fields: {e}"))?;
    let Some(old) = weights_load else {
        return Ok(report);
    };
    match banks(&report) {
        Banks::InDtype => return Err(format!(
            "a schema_version 1 estimate whose checkpoint is an MoE in {}: version 1 counted its expert banks in the dtype, so its weights_load.stored_bytes is the bytes held, not the checkpoint's, which it does not give; run vram estimate again for a version {} report",
            report.weights, crate::SCHEMA_VERSION
        )),
        Banks::HeldPacked if !old.dequantized => report.notes.push(
            "read from a schema version 1 report (vram up to c72f1e1): that vram held these compressed-tensors W4A16 expert banks packed, as the checkpoint stores them; transformers 5.24 dequantizes them into its fused banks at load, so the weights and the peak here are below what loading takes: run vram estimate again for the current figures".into(),
        ),
        _ => {}
    }
    report.weights_load = Some(WeightsLoad {
        held_bytes: if old.dequantized {
            old.dequantized_bytes
        } else {
            old.stored_bytes
        },
        dequantized: old.dequantized,
        why: old.why,
        stored_bytes: old.stored_bytes,
        dequantized_bytes: old.dequantized_bytes,
        dequantized_at_load: None,
        not_loaded: None,
    });
    Ok(report)
}
