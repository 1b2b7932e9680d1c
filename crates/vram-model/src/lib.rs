//! The memory model of vramkit: where every byte of a training or inference step goes.
//!
//! Pure functions of their inputs: no files, no clocks, no GPU. The CLI reads files and hands
//! their text here. Four parts, one folder each:
//!
//! - [`read`] reads Hugging Face `config.json` text (one adapter per family, the generic
//!   decoder, the structural-key rule) and safetensors headers into the description; [`catalog`]
//!   holds built-in configs.
//! - [`describe`] is the one description of a model: [`describe::Model`], a transformer's
//!   layer-by-layer [`describe::Blocks`], one [`describe::Block`] per layer kind, the weights'
//!   [`describe::Storage`].
//! - [`mech`] holds one module per mechanism a layer is made of (attention, MLA, Gated
//!   DeltaNet, Mamba2, MoE, dense MLP, norms, vision tower), each with its tensors, cache,
//!   FLOPs, walk steps and LoRA sites.
//! - [`walk`] walks a step over the description as a timeline of allocations and frees
//!   (training, `generate`, the allocator replay, the sinks that keep the peak), and reports
//!   the peak and its breakdown ([`estimate()`]); [`walk::trace`] emits the same timeline as
//!   individual tensors.
//!
//! Beside them: [`setup::Setup`] (the knobs), [`finetune`] (LoRA/QLoRA storage and adapters),
//! [`gpu`] (the GPU catalog). The older module paths other crates use stay as aliases:
//! [`arch`] and [`blocks`] are [`describe`], [`hf`] is [`read`], [`safetensors_header`] is
//! [`read::safetensors`], [`estimate`](mod@estimate) is [`walk`], [`trace`] is [`walk::trace`].
//!
//! ```
//! use vram_model::{catalog, estimate, gpu, setup::Setup};
//! let model = catalog::lookup("llama-3-8b").unwrap();
//! assert_eq!(model.param_count(), 8_030_261_248);
//! let e = estimate(&model, &Setup::default()).unwrap();
//! assert!(!e.fits(gpu::lookup("rtx-4090").unwrap().memory_bytes));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod catalog;
pub mod describe;
mod error;
pub mod finetune;
pub mod fmt;
pub mod gpu;
pub mod mech;
pub mod read;
pub mod setup;
pub mod walk;

pub use describe as arch;
pub use describe as blocks;
pub use read as hf;
pub use read::safetensors as safetensors_header;
pub use walk as estimate;
pub use walk::trace;

pub use error::{Error, Result};
pub use walk::{
    estimate, estimate_allocated, estimate_with_timeline, Breakdown, Category, Estimate, Phase,
};
