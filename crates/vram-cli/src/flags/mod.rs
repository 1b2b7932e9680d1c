//! The flags, parsed once and resolved once (ripgrep's `LowArgs` → `HiArgs`): [`low`] is what
//! clap parses (every subcommand's argument struct that describes a step, a fine-tuning run, a
//! serving engine or a plan), [`hi`] resolves it into the library's requests. Subcommands take
//! the resolved request; none reads a flag's default itself.

pub mod hi;
pub mod low;

pub use low::{CapacityArgs, EstimateArgs, ListArgs, PlanArgs, StepArgs};
