//! Memory-aware batching for variable-length data (a "dynamic batch loader").
//!
//! Sequences are sorted longest first and taken greedily: each batch starts with the longest
//! sequence left, is padded to its length, and holds as many of the next sequences as the
//! estimator says fit in the budget at that length. Since every later sequence is no longer,
//! a batch never grows its padded length, and the fit is checked once per distinct length.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::setup::{Mode, Setup};

use crate::error::{Error, Result};

/// One batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Indices into the input lengths.
    pub indices: Vec<usize>,
    /// Length every sequence is padded to (the longest in the batch).
    pub padded_len: u64,
    /// Estimated memory of a step on this batch (total per GPU, overheads included).
    pub total_bytes: u64,
}

/// The batches of a data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batches {
    /// Batches, longest sequences first.
    pub batches: Vec<Batch>,
    /// Indices of sequences that do not fit even alone.
    pub too_long: Vec<usize>,
    /// Real tokens over padded tokens, 0..=1.
    pub fill: f64,
}

/// Packs `lengths` into batches whose estimated step fits `capacity` bytes.
///
/// `setup` must be a training setup; its micro-batch and sequence length are replaced per
/// batch. `max_batch` caps the sequences in a batch (`None`: no cap beyond memory).
pub fn batch_by_memory(
    model: &Model,
    setup: &Setup,
    lengths: &[u64],
    capacity: u64,
    max_batch: Option<u64>,
) -> Result<Batches> {
    if !matches!(setup.mode, Mode::Train(_)) {
        return Err(Error::Request("batching needs a training setup".into()));
    }
    if let Some(&bad) = lengths.iter().find(|&&l| l == 0) {
        return Err(Error::Request(format!(
            "sequence length {bad} must be at least 1"
        )));
    }
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let cap = max_batch.unwrap_or(u64::MAX).max(1);
    // Largest batch that fits at each padded length, and the memory it takes.
    let mut fit: HashMap<u64, Option<u64>> = HashMap::new();
    // Batches of one size at one length are the same step: estimated once.
    let mut totals: HashMap<(u64, u64), u64> = HashMap::new();
    let mut at = |n: u64, len: u64| -> Result<u64> {
        if let Some(&t) = totals.get(&(n, len)) {
            return Ok(t);
        }
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            t.micro_batch = n;
            t.seq = len;
        }
        let t = vram_model::estimate(model, &s)?.total_bytes;
        totals.insert((n, len), t);
        Ok(t)
    };
    let mut batches = Vec::new();
    let mut too_long = Vec::new();
    let (mut real, mut padded) = (0u64, 0u64);
    let mut i = 0;
    while i < order.len() {
        let len = lengths[order[i]];
        let most = match fit.get(&len) {
            Some(v) => *v,
            None => {
                let mut s = *setup;
                if let Mode::Train(t) = &mut s.mode {
                    t.seq = len;
                }
                let v = vram_model::estimate::max_batch(model, &s, capacity)?;
                fit.insert(len, v);
                v
            }
        };
        let Some(most) = most else {
            too_long.push(order[i]);
            i += 1;
            continue;
        };
        let take = (most.min(cap) as usize).min(order.len() - i);
        let indices: Vec<usize> = order[i..i + take].to_vec();
        real += indices.iter().map(|&k| lengths[k]).sum::<u64>();
        padded += len * take as u64;
        batches.push(Batch {
            total_bytes: at(take as u64, len)?,
            indices,
            padded_len: len,
        });
        i += take;
    }
    Ok(Batches {
        batches,
        too_long,
        fill: if padded == 0 {
            1.0
        } else {
            real as f64 / padded as f64
        },
    })
}
