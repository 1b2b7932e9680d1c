//! A `torch.cuda.memory_stats()` dump (`json.dump(torch.cuda.memory_stats(), f)`),
//! or vramkit's own statistics JSON, which uses the same keys.

use serde::Serialize;

use crate::{DoctorError, Result};

/// The figures of one `memory_stats()` dump the doctor uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatsDump {
    /// `allocated_bytes.all.current`: bytes in live tensors.
    pub allocated: u64,
    /// `allocated_bytes.all.peak`.
    pub allocated_peak: u64,
    /// `reserved_bytes.all.current`: bytes the caching allocator holds.
    pub reserved: u64,
    /// `reserved_bytes.all.peak`.
    pub reserved_peak: u64,
    /// `inactive_split_bytes.all.current`: free bytes inside segments that
    /// also hold live blocks (cannot be returned to the driver).
    pub inactive_split: u64,
    /// `num_alloc_retries`: times a `cudaMalloc` failed and the cache was
    /// flushed before retrying (each one a full synchronisation).
    pub alloc_retries: u64,
    /// `num_ooms`: out-of-memory errors raised so far.
    pub ooms: u64,
}

/// Reads a `memory_stats()` dump.
///
/// # Errors
/// [`DoctorError::Json`] when the text is not a JSON object, or when
/// `allocated_bytes.all.current` or `reserved_bytes.all.current` is missing
/// or not a non-negative integer.
pub fn parse(text: &str, name: &str) -> Result<StatsDump> {
    let bad = |reason: String| DoctorError::Json {
        what: name.to_string(),
        reason,
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("not a JSON object of memory_stats() keys".into()))?;
    let get = |key: &str, required: bool| -> Result<u64> {
        match obj.get(key) {
            None if !required => Ok(0),
            None => Err(bad(format!(
                "no `{key}` (is this torch.cuda.memory_stats()?)"
            ))),
            Some(x) => x
                .as_u64()
                .or_else(|| {
                    // A float only where it is a whole count a u64 holds (1e300 saturated).
                    x.as_f64()
                        .filter(|f| {
                            *f >= 0.0 && f.fract() == 0.0 && *f < 18_446_744_073_709_551_616.0
                        })
                        .map(|f| f as u64)
                })
                .ok_or_else(|| bad(format!("`{key}` is not a byte count"))),
        }
    };
    let allocated = get("allocated_bytes.all.current", true)?;
    let reserved = get("reserved_bytes.all.current", true)?;
    // Every allocated block lies in a reserved segment (c10's CUDACachingAllocator counts a
    // block's bytes in both), so PyTorch never writes more allocated than reserved.
    if allocated > reserved {
        return Err(bad(format!(
            "allocated_bytes.all.current ({allocated}) is more than reserved_bytes.all.current ({reserved}), which torch.cuda.memory_stats() never reports: a dump edited by hand?"
        )));
    }
    Ok(StatsDump {
        allocated,
        allocated_peak: get("allocated_bytes.all.peak", false)?.max(allocated),
        reserved,
        reserved_peak: get("reserved_bytes.all.peak", false)?.max(reserved),
        inactive_split: get("inactive_split_bytes.all.current", false)?,
        alloc_retries: get("num_alloc_retries", false)?,
        ooms: get("num_ooms", false)?,
    })
}
