//! Reserved bytes from the allocator: the step's individual tensors replayed through a model of
//! the caching allocator (`vram_alloc`, on its simulated device).
//!
//! The run is what a training script does: the weights (one allocation per parameter tensor)
//! before anything, then a first step that creates the optimizer states inside its
//! `optimizer.step()`, then two more steps; `max_memory_reserved()` never goes down without
//! `empty_cache()`, so its peak over the three is what a reset after the warm-up step reads.
//! Inference replays one `generate` call.
//!
//! Two figures come out. On a device with room for everything the allocator caches, the peak
//! of `max_memory_reserved()` ([`Replayed::reserved`], what the H100 measurements compare
//! with). And the reserved peak on the smallest device that still runs the step
//! ([`Replayed::needed`]): PyTorch's `DeviceCachingAllocator::malloc` (PyTorch 2.11,
//! `c10/cuda/CUDACachingAllocator.cpp`) answers a failed `cudaMalloc` with
//! `release_available_cached_blocks` (only under `max_split_size_mb`) and then
//! `release_cached_blocks` (every cached segment with no live block goes back to the driver)
//! and tries again, so segments cached but unused at the peak (autocast's forward copies
//! that a short sequence never reuses, say) cost nothing where memory is tight. Whether a
//! step fits is decided on `needed`; the replay on a bounded [`SimDevice`] runs that same
//! release-and-retry path (`vram_alloc`'s `alloc_slow`).

use std::collections::HashMap;

use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

use super::{Category, Handle, Phase, Run, Sink, Step};
use crate::setup::{Allocator, Mode};

/// What the allocator model saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Peak of bytes handed out (blocks, after the allocator's rounding).
    pub allocated: u64,
    /// Peak of bytes held from the device where the device has room for all of them.
    pub reserved: u64,
    /// Peak of bytes held from the device on the smallest device (to the 2 MiB segment
    /// granularity) on which no allocation fails; at most `reserved`.
    pub needed: u64,
}

/// One replay's peaks.
struct Peaks {
    allocated: u64,
    reserved: u64,
    /// Reserved peak over the whole run (loading and the warm-up step included): a device of
    /// this size runs it identically, since no `cudaMalloc` on it asked for more.
    run_peak: u64,
}

struct ReplaySink {
    alloc: CachingAllocator<SimDevice>,
    live: HashMap<u64, Vec<u64>>,
    /// fp32 weight tensors to free as their half copies are made (`model.to(dtype)` converts
    /// one parameter at a time).
    cast_from: Vec<u64>,
    /// Whether an allocation failed (the device is bounded); later ones are not attempted.
    failed: bool,
    /// Reserved peak over the whole run, across the peak resets.
    run_peak: u64,
}

impl ReplaySink {
    /// `reset_peak_memory_stats()`, keeping the reserved peak so far in `run_peak`.
    fn reset_peak(&mut self) {
        self.run_peak = self.run_peak.max(self.reserved_peak());
        self.alloc.reset_peak_stats();
    }

    fn reserved_peak(&self) -> u64 {
        self.alloc.memory_stats().reserved_bytes[0].peak.max(0) as u64
    }
}

impl Sink for ReplaySink {
    const WANTS_PARTS: bool = true;

    fn alloc(&mut self, h: Handle, parts: &[u64]) {
        if h.bytes == 0 {
            return;
        }
        let one = [h.bytes];
        let sizes = if parts.is_empty() { &one[..] } else { parts };
        let cast = h.cat == Category::Parameters && !self.cast_from.is_empty();
        let old = if cast {
            std::mem::take(&mut self.cast_from)
        } else {
            Vec::new()
        };
        let entry = self.live.entry(h.key).or_default();
        for (i, &size) in sizes.iter().enumerate() {
            if !self.failed {
                match self.alloc.malloc(size.max(1), 0) {
                    Ok(addr) => entry.push(addr),
                    Err(_) => self.failed = true,
                }
            }
            if let Some(&a) = old.get(i) {
                let _ = self.alloc.free(a);
            }
        }
        for &a in old.iter().skip(sizes.len()) {
            let _ = self.alloc.free(a);
        }
        if cast {
            // Loading is over before the measured steps (peak statistics reset there).
            self.reset_peak();
        }
    }

    fn free(&mut self, h: Handle) {
        if let Some(addrs) = self.live.remove(&h.key) {
            for a in addrs {
                let _ = self.alloc.free(a);
            }
        }
    }

    fn phase(&mut self, _p: Phase) {}
}

fn policy(a: Allocator) -> Policy {
    match a {
        Allocator::Pytorch => Policy::PyTorch,
        Allocator::PytorchExpandable => Policy::PyTorchExpandable,
        Allocator::Vramkit => Policy::Vramkit,
    }
}

/// Capacity of the simulated device with room for everything (2^50 bytes).
const UNBOUNDED: u64 = 1 << 50;

/// The segment granularity the search for the smallest device stops at (`kRoundLarge`).
const GRANULE: u64 = vram_alloc::policy::ROUND_LARGE;

impl Step<'_> {
    /// Replays rank `rank`'s run through `allocator` and returns its peaks: on a device with
    /// room, and on the smallest device that runs it (bisection on the device's size; each
    /// probe is one replay, and a probe that succeeds lowers the bound to its own peak).
    pub(crate) fn replay(&self, rank: u64, allocator: Allocator) -> Option<Replayed> {
        let roomy = self.replay_on(rank, allocator, UNBOUNDED)?;
        // Below the allocated peak nothing runs.
        let mut lo = (roomy.allocated / GRANULE * GRANULE).saturating_sub(GRANULE);
        let mut hi = roomy.run_peak;
        while hi.saturating_sub(lo) > GRANULE {
            let mid = (lo + (hi - lo) / 2) / GRANULE * GRANULE;
            let mid = mid.clamp(lo + 1, hi - 1);
            match self.replay_on(rank, allocator, mid) {
                Some(p) => hi = p.run_peak.min(hi),
                None => lo = mid,
            }
        }
        Some(Replayed {
            allocated: roomy.allocated,
            reserved: roomy.reserved,
            needed: hi,
        })
    }

    /// Whether rank `rank`'s run gets through a device of `room` bytes under `allocator`.
    pub(crate) fn replay_fits(&self, rank: u64, allocator: Allocator, room: u64) -> bool {
        match self.replay_on(rank, allocator, UNBOUNDED) {
            Some(p) if p.run_peak <= room => true,
            Some(_) => self.replay_on(rank, allocator, room).is_some(),
            // A tensor beyond any device.
            None => false,
        }
    }

    /// One replay on a device of `capacity` bytes; `None` when an allocation fails there.
    fn replay_on(&self, rank: u64, allocator: Allocator, capacity: u64) -> Option<Peaks> {
        let cfg = AllocatorConfig::new(policy(allocator));
        let alloc = CachingAllocator::new(SimDevice::new(capacity), cfg).ok()?;
        let mut sink = ReplaySink {
            alloc,
            live: HashMap::new(),
            cast_from: Vec::new(),
            failed: false,
            run_peak: 0,
        };
        // Engines that shard or split the model build it in place (DeepSpeed's zero.Init,
        // Megatron's per-rank layers); plain PyTorch materialises it whole first.
        let p = self.setup.parallel;
        let whole_model_built = p.zero == 0 && p.tp == 1 && p.pp == 1;
        if self.setup.overheads.weights_cast_from_fp32
            && whole_model_built
            && self.weight_bytes() < 4
        {
            // The model as `from_config` builds it: fp32 parameters, one tensor each.
            for e in self.weight_tensor_elems(rank) {
                match sink.alloc.malloc((e * 4).max(1), 0) {
                    Ok(a) => sink.cast_from.push(a),
                    Err(_) => return None,
                }
            }
        }
        match self.setup.mode {
            Mode::Train(_) => {
                self.walk(rank, &mut sink, false, Run::First);
                // `reset_peak_memory_stats()` after a warm-up step: the allocated peak restarts
                // from what is live, the reserved one from what is held.
                sink.reset_peak();
                self.walk(rank, &mut sink, false, Run::Later);
                self.walk(rank, &mut sink, false, Run::Later);
            }
            Mode::Infer(_) => self.walk(rank, &mut sink, true, Run::Whole),
        }
        if sink.failed {
            return None;
        }
        let st = sink.alloc.memory_stats();
        let reserved = st.reserved_bytes[0].peak.max(0) as u64;
        Some(Peaks {
            allocated: st.allocated_bytes[0].peak.max(0) as u64,
            reserved,
            run_peak: sink.run_peak.max(reserved),
        })
    }
}
