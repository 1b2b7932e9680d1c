//! Integration tests for vram-alloc (one binary).

mod alloc;
mod fuzz;
mod pickles;
mod props;
mod replay;
mod stress;
mod tier;

use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

pub const MIB: u64 = 1 << 20;

pub fn new_alloc(policy: Policy, capacity: u64) -> CachingAllocator<SimDevice> {
    CachingAllocator::new(
        SimDevice::new(capacity),
        AllocatorConfig::new(policy).with_history(100_000),
    )
    .expect("valid config")
}

pub fn check(a: &CachingAllocator<SimDevice>) {
    if let Err(e) = a.check_invariants() {
        panic!("invariant violated: {e}");
    }
}
