//! The planner of vramkit: the fastest parallel configuration of a training job that fits in
//! GPU memory, and the launch configuration that runs it.
//!
//! Pure functions of their inputs: no files, no clocks, no terminal, deterministic. Progress is
//! reported through a callback the caller passes in.
//!
//! - [`cluster`] describes the GPUs and how they are connected (presets for DGX A100, DGX H100,
//!   HGX H200, 8 × RTX 4090 over PCIe and a single-GPU workstation).
//! - [`cost`] prices one configuration: FLOPs at a shape-dependent efficiency, tensor-, pipeline-
//!   and data-parallel communication, the pipeline bubble, offload. Compute is priced for the
//!   [`Stack`] that runs the step: Megatron-LM's fused kernels, or [`eager`], Hugging Face
//!   transformers under PyTorch eager (operator by operator, from H100 measurements).
//! - [`generate`] prices transformers' `generate` on one GPU: its host work (kernels, Python
//!   calls, syncs, counted per mechanism) against its GPU work, step by step.
//! - [`search()`] enumerates DP × TP × PP × schedule × sequence parallel × ZeRO × offload ×
//!   recomputation × micro-batch, and checks memory with [`vram_model::estimate()`] best-first.
//! - [`checkpoint`] is optimal activation checkpointing for a chain of heterogeneous layers
//!   under a memory budget (a rotor/Revolve-style dynamic programme).
//! - [`capacity`] is what vLLM or SGLang would log at start-up: weights per GPU, profiling
//!   peak, CUDA graphs, the KV cache in bytes and tokens, concurrency, and whether it starts.
//! - [`batching`] packs variable-length sequences into batches whose estimated peak fits.
//! - [`suggest`] is every "would fit with …": the changes that make a step fit or a serving
//!   engine start, for `vram estimate`, `vram capacity` and `vram doctor` alike.
//! - [`context`] is the longest context an engine derives from a config (rope scaling).
//! - [`lora`] plans LoRA/QLoRA jobs (DDP) and writes their PEFT/TRL configs.
//! - [`emit`] writes a plan as a DeepSpeed config, Megatron-LM arguments, an accelerate YAML or
//!   a torchrun + FSDP2 command.
//!
//! ```
//! use vram_model::catalog;
//! use vram_plan::{cluster::Cluster, search, Request};
//! let model = catalog::lookup("gpt2-medium").unwrap();
//! let cluster = Cluster::for_gpu("a100-80g", 8).unwrap();
//! let req = Request::new(model, cluster, 256, 1024);
//! let out = search(&req, &mut |_| {}).unwrap();
//! let best = &out.plans[0];
//! assert_eq!(best.tp * best.pp * best.dp, 8);
//! assert!(best.peak_bytes_per_gpu <= cluster.gpu.memory_bytes);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod batching;
pub mod capacity;
pub mod checkpoint;
pub mod cluster;
pub mod context;
pub mod cost;
pub mod eager;
pub mod emit;
mod error;
pub mod generate;
pub mod lora;
pub mod search;
pub mod suggest;

pub use eager::Stack;
pub use error::{Error, Result};
pub use search::{search, Bound, Outcome, Pins, Plan, Progress, RecomputeChoice, Request};
