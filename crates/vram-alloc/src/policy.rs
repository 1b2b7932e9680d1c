//! Allocation policies and allocator configuration.
//!
//! The PyTorch constants are those of `c10/cuda/CUDACachingAllocator.cpp`
//! (`kMinBlockSize`, `kSmallSize`, `kSmallBuffer`, `kLargeBuffer`,
//! `kMinLargeAlloc`, `kRoundLarge`).

use crate::error::AllocError;

/// All sizes are rounded up to a multiple of this (PyTorch `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served from the small pool (PyTorch `kSmallSize`, 1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (PyTorch `kSmallBuffer`, 2 MiB).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for large requests below [`MIN_LARGE_ALLOC`] (PyTorch `kLargeBuffer`, 20 MiB).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests from 1 MiB up to this share [`LARGE_BUFFER`] segments (PyTorch `kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Larger requests get a segment rounded up to this (PyTorch `kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The smallest growth of the large pool under [`Policy::Vramkit`] when the
/// device has room for it (20 MiB, as PyTorch's expandable segments): fewer
/// map calls than growing by the 2 MiB granularity, for the same peak on
/// recorded training traces. Pages are still unmapped at the granularity.
pub const VRAMKIT_LARGE_CHUNK: u64 = LARGE_BUFFER;

/// Which placement policy the allocator follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// PyTorch's default `CUDACachingAllocator`: fixed segments (2 MiB small,
    /// 20 MiB or 2 MiB-rounded large), best fit per stream, large blocks split
    /// only when more than 1 MiB would remain.
    PyTorch,
    /// PyTorch with `expandable_segments:True`: one growing virtual range per
    /// stream and pool, mapped in 2 MiB (small) or 20 MiB (large) steps, always
    /// split, new mappings placed at the smallest unmapped range (joined with a
    /// free block just before it), pages unmapped only when an allocation would
    /// otherwise fail.
    PyTorchExpandable,
    /// vramkit's policy: expandable segments at the device granularity, the
    /// large pool grown by at least [`VRAMKIT_LARGE_CHUNK`] when there is room,
    /// placement needing the fewest newly mapped bytes (lowest address on
    /// ties), free pages kept mapped in steady state (no unmap, hence no
    /// device synchronisation, while a loop repeats its steps), and
    /// trim-before-grow under pressure: when new pages would pass the cap or
    /// the device's free memory, the segment's free pages are unmapped first.
    /// [`AllocatorConfig::trim_slack`] set to a finite value asks for memory
    /// first: growth maps only what the request needs and trims whenever cached bytes exceed that fraction of allocated bytes
    /// (the policy before issue 13: less memory, but unmaps, each of which
    /// synchronises the device, during steady state).
    Vramkit,
}

impl Policy {
    /// Every policy, baseline first.
    pub const ALL: [Policy; 3] = [Policy::PyTorch, Policy::PyTorchExpandable, Policy::Vramkit];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Policy::PyTorch => "pytorch",
            Policy::PyTorchExpandable => "pytorch-expandable",
            Policy::Vramkit => "vramkit",
        }
    }

    /// Parses a name produced by [`Policy::name`].
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Whether the policy uses expandable segments.
    pub fn is_expandable(self) -> bool {
        !matches!(self, Policy::PyTorch)
    }
}

/// Allocator settings (the `PYTORCH_CUDA_ALLOC_CONF` knobs that matter here).
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// Placement policy.
    pub policy: Policy,
    /// Blocks at least this large are never split (PyTorch `max_split_size_mb`);
    /// `None` means unlimited. Must exceed 20 MiB, as in PyTorch.
    pub max_split_size: Option<u64>,
    /// Fraction of the cap above which cached, unsplit large segments are
    /// released before growing (PyTorch `garbage_collection_threshold`). Needs a cap.
    pub garbage_collection_threshold: Option<f64>,
    /// Per-process cap as a fraction of device memory
    /// (`torch.cuda.set_per_process_memory_fraction`).
    pub memory_fraction: Option<f64>,
    /// Record up to this many history entries (`_record_memory_history(max_entries=)`).
    pub history: Option<usize>,
    /// [`Policy::Vramkit`] only: cached (reserved minus active) bytes tolerated,
    /// as a fraction of allocated bytes, before growth first unmaps free pages.
    /// Infinite by default: free pages are unmapped only under pressure (cap
    /// or device full), by `empty_cache`, or by the release-and-retry path.
    pub trim_slack: f64,
}

impl AllocatorConfig {
    /// Default settings for `policy`.
    pub fn new(policy: Policy) -> Self {
        AllocatorConfig {
            policy,
            max_split_size: None,
            garbage_collection_threshold: None,
            memory_fraction: None,
            history: None,
            trim_slack: f64::INFINITY,
        }
    }

    /// Turns on history recording with a ring of `max_entries`.
    pub fn with_history(mut self, max_entries: usize) -> Self {
        self.history = Some(max_entries);
        self
    }

    /// Settings from a `PYTORCH_CUDA_ALLOC_CONF` string such as
    /// `"expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6"`.
    /// `backend:native` is accepted; other keys (e.g. `roundup_power2_divisions`,
    /// `backend:cudaMallocAsync`) are errors rather than silently ignored.
    ///
    /// ```
    /// use vram_alloc::{AllocatorConfig, Policy};
    /// let c = AllocatorConfig::from_pytorch_conf("expandable_segments:True,max_split_size_mb:64")?;
    /// assert_eq!(c.policy, Policy::PyTorchExpandable);
    /// assert_eq!(c.max_split_size, Some(64 << 20));
    /// # Ok::<(), vram_alloc::AllocError>(())
    /// ```
    pub fn from_pytorch_conf(conf: &str) -> Result<Self, AllocError> {
        let bad = |reason: String| AllocError::InvalidConfig { reason };
        let mut cfg = AllocatorConfig::new(Policy::PyTorch);
        for item in conf.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once(':')
                .ok_or_else(|| bad(format!("`{}` is not key:value", item.escape_debug())))?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "expandable_segments" => {
                    cfg.policy = match v {
                        "True" | "true" | "1" => Policy::PyTorchExpandable,
                        "False" | "false" | "0" => Policy::PyTorch,
                        _ => {
                            return Err(bad(format!(
                                "expandable_segments:{} is not True/False",
                                v.escape_debug()
                            )))
                        }
                    }
                }
                "max_split_size_mb" => {
                    let mb: u64 = v.parse().map_err(|_| {
                        bad(format!(
                            "max_split_size_mb:{} is not an integer",
                            v.escape_debug()
                        ))
                    })?;
                    cfg.max_split_size = Some(mb.saturating_mul(1 << 20));
                }
                "garbage_collection_threshold" => {
                    let t: f64 = v.parse().map_err(|_| {
                        bad(format!(
                            "garbage_collection_threshold:{} is not a number",
                            v.escape_debug()
                        ))
                    })?;
                    // c10's `parseGarbageCollectionThreshold` (c10/cuda/CUDAAllocatorConfig.cpp,
                    // read at pytorch b944315b) refuses the setting unless 0 < t < 1
                    // ("garbage_collect_threshold too small/too big, set it 0.0~1.0"): such a
                    // job does not start, so it is not replayed.
                    if !(t > 0.0 && t < 1.0) {
                        return Err(bad(format!(
                            "garbage_collection_threshold:{} is outside (0, 1), which PyTorch \
                             refuses (\"set it 0.0~1.0\")",
                            v.escape_debug()
                        )));
                    }
                    cfg.garbage_collection_threshold = Some(t);
                }
                "backend" if v == "native" => {}
                // The key alone: PyTorch's own lists (`roundup_power2_divisions:[256:1,>:0]`)
                // hold commas, so the item cut at one is not what the user wrote.
                _ => {
                    return Err(bad(format!(
                        "unsupported PYTORCH_CUDA_ALLOC_CONF key `{}` (vram replays \
                         expandable_segments, max_split_size_mb, garbage_collection_threshold \
                         and backend:native)",
                        k.escape_debug()
                    )))
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub(crate) fn validate(&self) -> Result<(), AllocError> {
        let bad = |reason: &str| {
            Err(AllocError::InvalidConfig {
                reason: reason.to_string(),
            })
        };
        if let Some(m) = self.max_split_size {
            if m <= LARGE_BUFFER {
                return bad("max_split_size must exceed 20 MiB");
            }
        }
        if let Some(f) = self.memory_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return bad("memory_fraction must be in (0, 1]");
            }
        }
        if let Some(t) = self.garbage_collection_threshold {
            if !(t > 0.0 && t < 1.0) {
                return bad("garbage_collection_threshold must be in (0, 1)");
            }
        }
        if self.trim_slack.is_nan() || self.trim_slack < 0.0 {
            return bad("trim_slack must be a non-negative number or inf");
        }
        Ok(())
    }
}

/// PyTorch's `round_size`: at least 512 bytes, a multiple of 512.
#[inline]
pub fn round_size(size: u64) -> u64 {
    if size < MIN_BLOCK_SIZE {
        MIN_BLOCK_SIZE
    } else {
        size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// PyTorch's `get_allocation_size`: the segment size cudaMalloc'd for a
/// rounded request that found no cached block.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[cfg(test)]
mod tests {
    use super::AllocatorConfig;

    /// A setting vram does not replay is named by its key: PyTorch's bracketed lists hold
    /// commas, and the item cut at one (`roundup_power2_divisions:[256:1`) was what the
    /// message showed.
    #[test]
    fn an_unsupported_setting_is_named_by_its_key() {
        for (conf, key) in [
            (
                "roundup_power2_divisions:[256:1,>:0]",
                "`roundup_power2_divisions`",
            ),
            ("backend:cudaMallocAsync", "`backend`"),
            (
                "max_split_size_mb:64,pinned_use_cuda_host_register:True",
                "`pinned_use_cuda_host_register`",
            ),
        ] {
            let e = AllocatorConfig::from_pytorch_conf(conf)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("unsupported PYTORCH_CUDA_ALLOC_CONF key {key} (")),
                "{conf}: {e}"
            );
            assert!(!e.contains('['), "{e}");
        }
    }

    /// A garbage-collection threshold PyTorch refuses (0 or less, 1 or more, NaN) is refused,
    /// not replayed; one inside (0, 1) is taken.
    #[test]
    fn a_threshold_pytorch_refuses_is_refused() {
        for t in ["0", "-0.5", "1", "1.0", "2", "nan", "inf"] {
            let e =
                AllocatorConfig::from_pytorch_conf(&format!("garbage_collection_threshold:{t}"))
                    .unwrap_err()
                    .to_string();
            assert!(e.contains("is outside (0, 1)"), "{t}: {e}");
        }
        let c = AllocatorConfig::from_pytorch_conf("garbage_collection_threshold:0.8").unwrap();
        assert_eq!(c.garbage_collection_threshold, Some(0.8));
    }
}
