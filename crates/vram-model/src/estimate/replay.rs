//! Reserved bytes from the allocator: the step's individual tensors replayed through a model of
//! the caching allocator (`vram_alloc`, on its simulated device).
//!
//! The run is what a training script does: the weights (one allocation per parameter tensor)
//! before anything, then a first step that creates the optimizer states inside its
//! `optimizer.step()`, then two more steps; `max_memory_reserved()` never goes down without
//! `empty_cache()`, so its peak over the three is what a reset after the warm-up step reads.
//! Inference replays one `generate` call.

use std::collections::HashMap;

use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

use super::{Category, Handle, Phase, Run, Sink, Step};
use crate::setup::{Allocator, Mode};

/// What the allocator model saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Peak of bytes handed out (blocks, after the allocator's rounding).
    pub allocated: u64,
    /// Peak of bytes held from the device.
    pub reserved: u64,
}

struct ReplaySink {
    alloc: CachingAllocator<SimDevice>,
    live: HashMap<u64, Vec<u64>>,
    /// fp32 weight tensors to free as their half copies are made (`model.to(dtype)` converts
    /// one parameter at a time).
    cast_from: Vec<u64>,
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
            // The simulated device is unbounded: the only failure is a size beyond any device,
            // which the peak walk has already refused.
            if let Ok(addr) = self.alloc.malloc(size.max(1), 0) {
                entry.push(addr);
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
            self.alloc.reset_peak_stats();
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

/// Capacity of the simulated device: large enough that nothing fails (2^50 bytes).
const UNBOUNDED: u64 = 1 << 50;

impl Step<'_> {
    /// Replays rank `rank`'s run through `allocator` and returns its peaks.
    pub(crate) fn replay(&self, rank: u64, allocator: Allocator) -> Option<Replayed> {
        let cfg = AllocatorConfig::new(policy(allocator));
        let alloc = CachingAllocator::new(SimDevice::new(UNBOUNDED), cfg).ok()?;
        let mut sink = ReplaySink {
            alloc,
            live: HashMap::new(),
            cast_from: Vec::new(),
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
                if let Ok(a) = sink.alloc.malloc((e * 4).max(1), 0) {
                    sink.cast_from.push(a);
                }
            }
        }
        match self.setup.mode {
            Mode::Train(_) => {
                self.walk(rank, &mut sink, false, Run::First);
                // `reset_peak_memory_stats()` after a warm-up step: the allocated peak restarts
                // from what is live, the reserved one from what is held.
                sink.alloc.reset_peak_stats();
                self.walk(rank, &mut sink, false, Run::Later);
                self.walk(rank, &mut sink, false, Run::Later);
            }
            Mode::Infer(_) => self.walk(rank, &mut sink, true, Run::Whole),
        }
        let st = sink.alloc.memory_stats();
        Some(Replayed {
            allocated: st.allocated_bytes[0].peak.max(0) as u64,
            reserved: st.reserved_bytes[0].peak.max(0) as u64,
        })
    }
}
