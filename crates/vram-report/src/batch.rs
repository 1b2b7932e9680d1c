//! `vram batch`: memory-aware batches for variable-length sequences
//! ([`vram_plan::batching::batch_by_memory`]).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vram_model::arch::Model;
use vram_model::fmt::bytes;
use vram_model::gpu::Gpu;
use vram_model::setup::Setup;
use vram_plan::batching::{batch_by_memory, Batches};

use crate::check::{Checker, Ranges};
use crate::error::{input, Result};
use crate::{Kind, SCHEMA_VERSION};

/// Batches whose estimated step fits the GPU, longest sequences first. `--json` is this object
/// (`schema_version`: [`crate::SCHEMA_VERSION`]): `model`, `gpu` (its catalog id, or the name of a GPU given by its size), `capacity_bytes`, `sequences`,
/// `batches` (each `indices`, `padded_len`, `total_bytes`), `too_long`, `fill`, `notes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `batch`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// The GPU's catalog id, or the name of one given by its size ([`vram_model::gpu::Gpu::label`]).
    pub gpu: String,
    /// Its memory: the budget of every batch's step.
    pub capacity_bytes: u64,
    /// Sequences given.
    pub sequences: u64,
    /// The planner's batches, inline: `batches`, `too_long` (indices of sequences that do not
    /// fit even alone), `fill` (real tokens over padded tokens).
    #[serde(flatten)]
    pub batches: Batches,
    /// The model's notes ([`crate::notes::of_step`]).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Ranges for BatchReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        // `Batches` is inline (flattened).
        self.batches.ranges(c)?;
        // The batches and the sequences too long for any split the input's sequences: each
        // index names one of them, once (`vram_plan::batching::batch_by_memory`), and each
        // batch holds at least one and fits the capacity it was packed for.
        let n = self.sequences;
        let mut seen = std::collections::HashSet::new();
        let mut place = |c: &mut Checker, name: &str, k: usize| -> Result<()> {
            c.agree(name, k, (k as u64) < n, || {
                format!("sequences {n}: indices are 0 to sequences - 1")
            })?;
            c.agree(name, k, seen.insert(k), || {
                "another index of the same sequence: each is in one place".into()
            })
        };
        c.each("batches", &self.batches.batches, |c, b| {
            c.agree("indices", "[]", !b.indices.is_empty(), || {
                "a batch, which holds at least one sequence".into()
            })?;
            for (i, &k) in b.indices.iter().enumerate() {
                place(c, &format!("indices[{i}]"), k)?;
            }
            c.agree(
                "total_bytes",
                b.total_bytes,
                b.total_bytes <= self.capacity_bytes,
                || {
                    format!(
                        "capacity_bytes {}: a batch is one that fits",
                        self.capacity_bytes
                    )
                },
            )
        })?;
        for (i, &k) in self.batches.too_long.iter().enumerate() {
            place(c, &format!("too_long[{i}]"), k)?;
        }
        let placed = self
            .batches
            .batches
            .iter()
            .map(|b| b.indices.len())
            .sum::<usize>()
            + self.batches.too_long.len();
        c.agree("sequences", n, placed as u64 == n, || {
            format!("the {placed} sequences the batches and too_long hold")
        })
    }
}

/// Batches of `lengths` for `model`'s training `setup` (its micro-batch and sequence replaced
/// by each batch's) on `gpu`, at most `max_batch` sequences each.
pub fn batch(
    model: &Model,
    setup: &Setup,
    gpu: &Gpu,
    lengths: &[u64],
    max_batch: Option<u64>,
) -> Result<BatchReport> {
    if max_batch == Some(0) {
        return Err(input("--max-batch must be at least 1"));
    }
    let b = batch_by_memory(model, setup, lengths, gpu.memory_bytes, max_batch)?;
    Ok(BatchReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Batch,
        model: model.name().to_string(),
        gpu: gpu.label().to_string(),
        capacity_bytes: gpu.memory_bytes,
        sequences: lengths.len() as u64,
        batches: b,
        notes: crate::notes::of_step(model, true, Some(gpu))
            .into_iter()
            .chain(crate::notes::of_seq(
                model,
                "--lengths: the longest sequence,",
                lengths.iter().copied().max().unwrap_or(0),
            ))
            .chain(crate::notes::of_precision(setup.precision, gpu))
            .collect(),
    })
}

/// Batches the text's table lists; `--json` lists all.
pub const SHOWN: usize = 20;

impl BatchReport {
    /// The first line: sequences, batches, the GPU and the fill.
    pub fn summary(&self) -> String {
        let n = self.batches.batches.len();
        let head = format!(
            "{} sequence{} -> {n} batch{} on {}",
            self.sequences,
            if self.sequences == 1 { "" } else { "s" },
            if n == 1 { "" } else { "es" },
            vram_model::gpu::label_with_memory(&self.gpu, self.capacity_bytes),
        );
        if self.batches.batches.is_empty() {
            // No padded token at all: no share of them to speak of.
            return head;
        }
        format!(
            "{head}; {:.1}% of padded tokens are real",
            self.batches.fill * 100.0
        )
    }

    /// The sequences that fit in no batch, when there are some.
    pub fn too_long_line(&self) -> Option<String> {
        let t = &self.batches.too_long;
        (!t.is_empty()).then(|| {
            format!(
                "{} sequences do not fit even alone (indices {:?})",
                t.len(),
                &t[..t.len().min(10)]
            )
        })
    }

    /// The table's header.
    pub const HEAD: [&'static str; 4] = ["batch", "sequences", "padded to", "memory"];

    /// The table's rows (the first [`SHOWN`] batches).
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.batches
            .batches
            .iter()
            .enumerate()
            .take(SHOWN)
            .map(|(i, b)| {
                vec![
                    i.to_string(),
                    b.indices.len().to_string(),
                    b.padded_len.to_string(),
                    bytes(b.total_bytes),
                ]
            })
            .collect()
    }

    /// What the table leaves out, when it does.
    pub fn more_line(&self) -> Option<String> {
        let n = self.batches.batches.len();
        (n > SHOWN).then(|| format!("... {} more (--json lists all)", n - SHOWN))
    }

    /// The text output.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = self.write_text(&mut o);
        o
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "{}", self.summary())?;
        if let Some(l) = self.too_long_line() {
            writeln!(out, "{l}")?;
        }
        if self.batches.batches.is_empty() {
            return crate::notes::write(out, &self.notes);
        }
        let h = Self::HEAD;
        writeln!(out, "{:>6}  {:>10}  {:>9}  {:>10}", h[0], h[1], h[2], h[3])?;
        for r in self.rows() {
            writeln!(out, "{:>6}  {:>10}  {:>9}  {:>10}", r[0], r[1], r[2], r[3])?;
        }
        if let Some(l) = self.more_line() {
            writeln!(out, "{l}")?;
        }
        crate::notes::write(out, &self.notes)
    }
}
