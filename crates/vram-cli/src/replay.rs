//! `vram replay`: run a recorded snapshot's alloc/free history through allocator policies.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use vram_alloc::{AllocError, AllocatorConfig, Policy, Snapshot};
use vram_report::replay::ReplayRequest;
use vram_report::Report;

use crate::bad_input;
use crate::input::parse_bytes;

/// Largest snapshot read (PyTorch's default 100,000-entry history pickles to well under this).
const MAX_SNAPSHOT: u64 = 2 << 30;

/// Arguments of `vram replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A snapshot pickle from `torch.cuda.memory._dump_snapshot()` or `vram trace`.
    snapshot: PathBuf,
    /// Policies to compare (repeatable): pytorch, pytorch-expandable, vramkit [default: all].
    #[arg(long = "policy", value_parser = parse_policy)]
    policies: Vec<Policy>,
    /// Also replay PyTorch under these PYTORCH_CUDA_ALLOC_CONF settings, e.g.
    /// "max_split_size_mb:128,garbage_collection_threshold:0.6" (the GC threshold
    /// applies with --capacity, which becomes the cap).
    #[arg(long)]
    alloc_conf: Option<String>,
    /// Also replay the vramkit policy with this trim slack (cached bytes tolerated, as a
    /// fraction of allocated, before growth unmaps): memory first, e.g. 0.005, at the price
    /// of unmaps (each synchronises the GPU) in steady state. The default policy never
    /// trims in steady state.
    #[arg(long)]
    trim_slack: Option<f64>,
    /// Device capacity for the would-OOM check, e.g. 80GiB.
    #[arg(long, value_parser = parse_bytes)]
    capacity: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_policy(s: &str) -> std::result::Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
        format!("unknown policy `{s}` (one of: {})", names.join(", "))
    })
}

/// Marks the allocator's input errors (bad pickle, bad snapshot, bad trace) as bad input.
pub fn classify(e: AllocError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input!("{e}")
    } else {
        anyhow::Error::new(e)
    }
}

/// Reads and decodes a snapshot file.
pub fn read_snapshot(path: &std::path::Path) -> Result<Snapshot> {
    let bytes = crate::input::read_bounded(path, "snapshot", MAX_SNAPSHOT)?;
    Snapshot::from_pickle(&bytes)
        .map_err(|e| classify(e).context(format!("snapshot {}", path.display())))
}

/// Runs `vram replay`.
pub fn run(a: &ReplayArgs) -> Result<()> {
    if a.capacity == Some(0) {
        return Err(bad_input!("--capacity must be more than 0 bytes"));
    }
    let snap = read_snapshot(&a.snapshot)?;
    let mut policies = if a.policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        a.policies.clone()
    };
    // A policy named twice is one row.
    let mut seen = Vec::new();
    policies.retain(|p| {
        let new = !seen.contains(p);
        seen.push(*p);
        new
    });
    let mut configs: Vec<(AllocatorConfig, Option<String>)> = policies
        .into_iter()
        .map(|p| (AllocatorConfig::new(p), None))
        .collect();
    if let Some(conf) = &a.alloc_conf {
        let mut c = AllocatorConfig::from_pytorch_conf(conf)
            .map_err(|e| bad_input!("--alloc-conf: {e}"))?;
        if a.capacity.is_some() {
            c.memory_fraction = Some(1.0);
        }
        let name = format!("{} [{conf}]", c.policy.name());
        configs.push((c, Some(name)));
    }
    if let Some(slack) = a.trim_slack {
        if slack.is_nan() || slack < 0.0 {
            return Err(bad_input!(
                "--trim-slack {slack}: expected a non-negative fraction"
            ));
        }
        let mut c = AllocatorConfig::new(Policy::Vramkit);
        c.trim_slack = slack;
        // `{:?}`: 1e300 as written, not as 301 digits.
        configs.push((c, Some(format!("vramkit [trim_slack {slack:?}]"))));
    }
    let req = ReplayRequest {
        configs,
        capacity: a.capacity,
    };
    let r = vram_report::replay::replay(&a.snapshot.display().to_string(), &snap, &req)
        .map_err(crate::run_error)?;
    crate::print(&Report::Replay(Box::new(r)), a.json)
}
