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

/// A step the runtime recorded, and what to plan it for (the plug-in's `vram_plan` input).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Request {
    /// The phases, in order, with their measured compute time.
    pub phases: Vec<PhaseInfo>,
    /// The tensors that may move (and, for a host update, weights and gradients).
    pub items: Vec<Item>,
    /// Allocated bytes at each phase's high point.
    pub live: Vec<u64>,
    /// Optimizer chunks the runtime runs the step in.
    pub chunks: usize,
    /// Device bytes the plan must stay under (the runtime passes its cap less a margin
    /// for fragmentation).
    pub cap: u64,
    /// The link; [`Link::H100_PROBE`] when absent.
    #[serde(default)]
    pub link: Option<Link>,
    /// The host's AdamW rate; [`HostCpu::VM_FUSED_ADAMW`] when absent.
    #[serde(default)]
    pub cpu: Option<HostCpu>,
}

/// The planner's answer: the decision (none when no plan fits) and the floor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Answer {
    /// What to do.
    pub decision: Option<Decision>,
    /// The least step time the link allows under the cap.
    pub floor: Floor,
}

/// Plans a recorded step (JSON in the shape of [`Request`]).
pub fn answer(request: &str) -> Result<Answer, String> {
    let r: Request = serde_json::from_str(request).map_err(|e| format!("plan request: {e}"))?;
    let p = Profile::from_recorded(r.phases, r.items, &r.live, r.chunks)?;
    let link = r.link.unwrap_or(Link::H100_PROBE);
    let cpu = r.cpu.unwrap_or(HostCpu::VM_FUSED_ADAMW);
    Ok(Answer {
        decision: decide(&p, r.cap, &link, &cpu),
        floor: floor(&p, r.cap, &link, &cpu),
    })
}
