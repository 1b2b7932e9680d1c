//! A serving engine's start-up failure read from its log (for `vram doctor`).

use super::*;

/// A serving engine's start-up failure, read from its log for `vram doctor`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StartupError {
    /// vLLM: one request of `max_model_len` does not fit the KV cache (V1's "To serve at least
    /// one request with the models's max seq len (L), (X GiB KV cache is needed, which is larger
    /// than the available KV cache memory (Y GiB) ... estimated maximum model length is M", or
    /// V0's "The model's max seq len (L) is larger than the maximum number of tokens that can be
    /// stored in KV cache (T)").
    VllmMaxSeqLen {
        /// The `max_model_len` asked for.
        max_model_len: u64,
        /// KV cache one request needs, bytes (V1).
        needed_bytes: Option<u64>,
        /// KV cache available, bytes (V1).
        available_bytes: Option<u64>,
        /// The largest length that fits: V1's estimate, or V0's token count.
        max_model_len_that_fits: Option<u64>,
    },
    /// vLLM: "No available memory for the cache blocks": weights and the profile's peak exceed
    /// `total × gpu_memory_utilization`.
    VllmNoCacheMemory,
    /// SGLang: "Not enough memory. Please try to increase --mem-fraction-static."
    SglangNotEnoughMemory,
}

pub(super) fn number_after(text: &str, key: &str) -> Option<f64> {
    let i = text.find(key)? + key.len();
    let rest = text[i..].trim_start_matches([' ', '(', ':']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(rest.len());
    rest[..end].replace(',', "").parse().ok()
}

/// Recognises a vLLM or SGLang start-up failure in `log` (a message or a whole log) and reads
/// its figures; `None` when there is none. Pure: the doctor passes the text in, and then asks
/// [`capacity`] and [`crate::suggest::serving`] for the figures and the change that fixes it.
pub fn startup_error(log: &str) -> Option<StartupError> {
    if log.contains("Not enough memory. Please try to increase --mem-fraction-static") {
        return Some(StartupError::SglangNotEnoughMemory);
    }
    if log.contains("No available memory for the cache blocks") {
        return Some(StartupError::VllmNoCacheMemory);
    }
    let gib = |x: f64| (x * GIB).round() as u64;
    if let Some(i) = log.find("max seq len (") {
        let tail = &log[i..];
        let len = number_after(tail, "max seq len (")? as u64;
        if tail.contains("KV cache is needed") {
            return Some(StartupError::VllmMaxSeqLen {
                max_model_len: len,
                needed_bytes: number_after(tail, "), (").map(gib),
                available_bytes: number_after(tail, "available KV cache memory (").map(gib),
                max_model_len_that_fits: number_after(tail, "maximum model length is")
                    .map(|x| x as u64),
            });
        }
        if tail.contains("stored in KV cache") {
            return Some(StartupError::VllmMaxSeqLen {
                max_model_len: len,
                needed_bytes: None,
                available_bytes: None,
                max_model_len_that_fits: number_after(tail, "stored in KV cache (")
                    .map(|x| x as u64),
            });
        }
    }
    None
}
