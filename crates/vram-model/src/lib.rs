//! The memory model of vramkit: where every byte of a training or inference step goes.
//!
//! Pure functions of their inputs: no files, no clocks, no GPU. The CLI reads files and hands
//! their text here.
//!
//! - [`hf`] reads Hugging Face `config.json` text into an [`arch::Model`]; [`catalog`] holds
//!   built-in ones; [`safetensors_header`] counts parameters from checkpoint headers.
//! - [`setup::Setup`] holds the knobs (precision, optimizer, batch, parallelism, overheads).
//! - [`estimate()`] walks the step as a timeline and reports the peak and its breakdown;
//!   [`trace`] emits the same timeline as individual tensor allocations.
//! - [`gpu`] is the GPU catalog.
//!
//! ```
//! use vram_model::{catalog, estimate, gpu, setup::Setup};
//! let model = catalog::lookup("llama-3-8b").unwrap();
//! assert_eq!(model.param_count(), 8_030_261_248);
//! let e = estimate(&model, &Setup::default()).unwrap();
//! assert!(!e.fits(gpu::lookup("rtx-4090").unwrap().memory_bytes));
//! ```
#![deny(missing_docs)]

pub mod arch;
pub mod blocks;
pub mod catalog;
mod error;
pub mod estimate;
pub mod finetune;
pub mod fmt;
pub mod gpu;
pub mod hf;
pub mod mech;
pub mod safetensors_header;
pub mod setup;
pub mod trace;

pub use error::{Error, Result};
pub use estimate::{
    estimate, estimate_allocated, estimate_with_timeline, Breakdown, Category, Estimate, Phase,
};
