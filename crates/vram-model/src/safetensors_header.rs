//! Parameter counts from safetensors headers, without reading any weights.
//!
//! A safetensors file starts with an 8-byte little-endian header length and a JSON header
//! mapping tensor names to dtype, shape and data offsets. The CLI reads only those bytes and
//! hands them here; sharded checkpoints list their shards in `model.safetensors.index.json`.

use std::collections::BTreeMap;

use crate::arch::Weights;
use crate::error::{Error, Result};

/// Largest header accepted (the format's own limit is 100 MB).
pub const MAX_HEADER: u64 = 100_000_000;

/// Reads the header length from a file's first 8 bytes.
pub fn header_len(first8: &[u8]) -> Result<u64> {
    let Ok(arr) = <[u8; 8]>::try_from(first8) else {
        return Err(Error::Safetensors(format!(
            "file is {} bytes, shorter than the 8-byte header length",
            first8.len()
        )));
    };
    let n = u64::from_le_bytes(arr);
    if n == 0 || n > MAX_HEADER {
        return Err(Error::Safetensors(format!(
            "header length {n} is not between 1 and {MAX_HEADER}; not a safetensors file?"
        )));
    }
    Ok(n)
}

/// One tensor of a checkpoint as its header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The safetensors dtype name (`BF16`, `F8_E4M3`, `I32`, ...).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
}

/// Element count and bytes per dtype, summed over tensors, and every tensor's dtype and shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Elements per dtype name.
    pub elements: BTreeMap<String, u64>,
    /// Bytes per dtype name.
    pub bytes: BTreeMap<String, u64>,
    /// Each tensor by name: its exact dtype and shape.
    pub tensors: BTreeMap<String, TensorInfo>,
}

impl Tally {
    /// Adds the tensors of one file's header.
    ///
    /// `bytes` is the 8-byte length followed by the JSON header; `file_len` is the whole file's
    /// size, checked against the data the header describes (a truncated file is an error).
    pub fn add_header(&mut self, bytes: &[u8], file_len: u64) -> Result<()> {
        let n = header_len(bytes.get(..8).unwrap_or(bytes))?;
        let json = bytes
            .get(8..8 + n as usize)
            .ok_or_else(|| Error::Safetensors("header is shorter than its stated length".into()))?;
        let text = std::str::from_utf8(json)
            .map_err(|_| Error::Safetensors("header is not UTF-8".into()))?;
        let meta: safetensors::tensor::Metadata =
            serde_json::from_str(text).map_err(|e| Error::Json {
                what: "safetensors header".into(),
                reason: e.to_string(),
            })?;
        let mut tensors: Vec<_> = meta.tensors().into_iter().collect();
        tensors.sort_by_key(|(_, info)| info.data_offsets);
        let mut end = 0usize;
        for (name, info) in tensors {
            let numel = info
                .shape
                .iter()
                .try_fold(1u64, |a, d| a.checked_mul(*d as u64))
                .ok_or_else(|| Error::Safetensors(format!("tensor `{name}`: shape overflows")))?;
            let (start, stop) = info.data_offsets;
            let want = numel.checked_mul(info.dtype.size() as u64);
            if start != end || stop < start || want != Some((stop - start) as u64) {
                return Err(Error::Safetensors(format!("tensor `{name}`: data offsets {start}..{stop} do not match its shape and dtype")));
            }
            end = stop;
            let dtype = format!("{:?}", info.dtype);
            *self.elements.entry(dtype.clone()).or_default() += numel;
            *self.bytes.entry(dtype.clone()).or_default() += (stop - start) as u64;
            self.tensors.insert(
                name.to_string(),
                TensorInfo {
                    dtype,
                    shape: info.shape.iter().map(|d| *d as u64).collect(),
                },
            );
        }
        if 8 + n + end as u64 != file_len {
            return Err(Error::Safetensors(format!(
                "header describes {} bytes of data but the file holds {} (truncated or padded?)",
                end,
                file_len.saturating_sub(8 + n)
            )));
        }
        Ok(())
    }

    /// The model as far as weights tell it.
    pub fn into_weights(self, name: &str) -> Weights {
        self.weights(name)
    }

    /// The model as far as weights tell it, keeping the tally.
    pub fn weights(&self, name: &str) -> Weights {
        Weights {
            name: name.to_string(),
            params: self.elements.values().sum(),
            bytes: self.bytes.values().sum(),
            dtypes: self.elements.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }

    /// Where the checkpoint contradicts a config of `vocab` tokens and width `hidden`: its
    /// token embedding (`*embed_tokens.weight`, `*wte.weight`, `*word_embeddings.weight`, a
    /// 2-D tensor in a float dtype, outside a vision tower) has another shape. Both sides are
    /// named. A checkpoint from another model, or a config edited away from its weights, shows
    /// here; packed (quantized) embeddings are not compared.
    pub fn contradiction(&self, vocab: u64, hidden: u64) -> Option<String> {
        let (name, t) = self.tensors.iter().find(|(name, t)| {
            [
                "embed_tokens.weight",
                "wte.weight",
                "word_embeddings.weight",
            ]
            .iter()
            .any(|s| {
                name.ends_with(s)
                    && (name.len() == s.len() || name[..name.len() - s.len()].ends_with('.'))
            }) && !name.contains("vision")
                && !name.contains("visual")
                && t.shape.len() == 2
                && matches!(t.dtype.as_str(), "BF16" | "F16" | "F32")
        })?;
        (t.shape != [vocab, hidden]).then(|| {
            format!(
                "its {name} is {:?} but config.json says vocab_size {vocab} × hidden_size {hidden}",
                t.shape
            )
        })
    }
}

/// The shard file names of a `model.safetensors.index.json`, in sorted order, each once.
pub fn index_shards(text: &str) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::Json {
        what: "safetensors index".into(),
        reason: e.to_string(),
    })?;
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(Error::Safetensors(
            "index has no `weight_map` object".into(),
        ));
    };
    let mut files: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let Some(f) = file.as_str() else {
            return Err(Error::Safetensors(format!(
                "weight_map entry `{tensor}` is not a file name"
            )));
        };
        if f.contains('/') || f.contains('\\') || f.starts_with('.') {
            return Err(Error::Safetensors(format!(
                "weight_map names `{f}`, which is not a file beside the index"
            )));
        }
        files.push(f.to_string());
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Error::Safetensors("index's weight_map is empty".into()));
    }
    Ok(files)
}
