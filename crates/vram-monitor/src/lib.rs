//! Live GPU memory per process, with history, a leak test and Prometheus text.
//!
//! This crate is the library behind `vram top`, `vram record` and `vram serve` (`vram report`'s
//! pages, a recording's included, are `vram-report`'s). It never prints; the CLI owns the
//! terminal and exit codes.
//!
//! * [`Source`] is where samples come from: [`NvmlSource`] talks to the NVIDIA
//!   driver through NVML, which is loaded **at run time** (nvml-wrapper uses
//!   `libloading`; nothing links against CUDA or NVML at build time), and
//!   [`SimulatedSource`] replays a scripted scenario (GPUs, processes, one of
//!   them leaking) so every test and `--demo` run works without a GPU.
//! * [`Sample`] is one reading of every GPU and its processes; it serialises to
//!   one JSON object with numbers as numbers (bytes, not "12MiB").
//! * [`History`] keeps the last samples for graphs; [`view`] turns a sample into
//!   sorted, filtered process rows.
//! * [`timeline`] writes and reads the JSON Lines recording format;
//!   [`leak`] tests whether the floor of each process's memory keeps rising
//!   (Mann-Kendall on per-stretch minima, the same test live and at the end).
//! * [`prom`] renders the Prometheus text exposition format; [`web`] is the
//!   live page served by `vram serve`.
//!
//! ```
//! use vram_monitor::{SimulatedSource, Source};
//!
//! let mut source = SimulatedSource::demo();
//! let sample = source.sample(1_000).unwrap();
//! assert_eq!(sample.gpus.len(), 2);
//! assert!(sample.gpus[0].memory_used_bytes <= sample.gpus[0].memory_total_bytes);
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod history;
pub mod leak;
mod nvml;
pub mod procinfo;
pub mod prom;
mod sample;
mod sim;
mod source;
pub mod timeline;
pub mod view;
pub mod web;

pub use error::MonitorError;
pub use history::{ChartGpu, ChartProcess, ChartState, History};
pub use nvml::NvmlSource;
pub use sample::{GpuSample, ProcessSample, Sample};
pub use sim::{Pattern, Scenario, SimGpu, SimProcess, SimulatedSource};
pub use source::Source;

/// Result type of this crate.
pub type Result<T, E = MonitorError> = std::result::Result<T, E>;
