//! The planned host tier: from one recorded step, decide before the next which tensors live
//! in host memory in which phases, when each copy runs, and whether optimizer chunks are
//! better updated on the host; simulate the plan against a timing model of the host link;
//! and bound from below what any plan can reach.
//!
//! - [`Profile`]: a step as phases (compute time each), items (tensors that may leave the
//!   device between two uses: activations, weights, gradients, optimizer states) and the
//!   base (every other byte), built from a trace ([`Profile::from_trace`]: `vram trace
//!   --events`, or a step the plug-in recorded).
//! - [`simulate`]: one compute stream, one copy stream each way at the [`Link`]'s rates,
//!   the host CPU; phases wait for their copies back and for the device to hold no more than
//!   the cap at their start.
//! - [`plan_moves`] and [`decide`]: greedy moves phase by phase, copies back as late as the
//!   link allows; streaming against updating the last optimizer chunks on the host, the
//!   faster that fits.
//! - [`floor`]: the least step time the bytes above the cap allow at the link's rates
//!   ([`floor::METHOD`] says how).
//!
//! Pure: no clock, no file, no device (the timing model is arithmetic).

pub mod floor;
mod greedy;
pub mod profile;
pub mod sim;

pub use floor::{floor, Floor};
pub use greedy::{decide, plan_moves, Decision, Strategy};
pub use profile::{Item, ItemKind, PhaseInfo, PhaseKind, Profile, Trace, TraceEvent};
pub use sim::{simulate, HostCpu, Link, Move, Outcome, Plan};
