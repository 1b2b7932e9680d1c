//! The host-memory trait and its simulated implementation.

use std::collections::BTreeMap;
use vram_alloc::DeviceError;

/// Memory outside the device that the device can address: pinned,
/// device-mapped host memory (`cuMemHostAlloc(DEVICEMAP)`) and, optionally,
/// managed memory (`cuMemAllocManaged`).
///
/// Addresses returned are device-visible (usable in kernels).
pub trait HostMemory: Send {
    /// Allocates `size` bytes of pinned, device-mapped host memory.
    fn alloc_pinned(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// Frees memory from [`HostMemory::alloc_pinned`]. The caller guarantees
    /// the device no longer uses it.
    fn free_pinned(&mut self, addr: u64) -> Result<(), DeviceError>;
    /// Allocates `size` bytes of managed memory that prefers to live on the
    /// device. The caller has checked that the device has `size` bytes free.
    fn alloc_managed(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// Frees memory from [`HostMemory::alloc_managed`].
    fn free_managed(&mut self, addr: u64) -> Result<(), DeviceError>;
}

const PINNED_BASE: u64 = 0x7d00_0000_0000;
const MANAGED_BASE: u64 = 0x7c00_0000_0000;

/// A deterministic simulated host tier: bump-pointer addresses (pinned from
/// `0x7d00_0000_0000`, managed from `0x7c00_0000_0000`, never reused), a
/// capacity of host memory, and fault injection ([`SimHost::fail_call`]).
#[derive(Debug, Clone)]
pub struct SimHost {
    capacity: u64,
    used: u64,
    next_pinned: u64,
    next_managed: u64,
    live: BTreeMap<u64, (u64, bool)>,
    calls: u64,
    fail_at: Option<u64>,
}

impl SimHost {
    /// A host with `capacity` bytes of memory that can be pinned.
    pub fn new(capacity: u64) -> Self {
        SimHost {
            capacity,
            used: 0,
            next_pinned: PINNED_BASE,
            next_managed: MANAGED_BASE,
            live: BTreeMap::new(),
            calls: 0,
            fail_at: None,
        }
    }

    /// Makes the `n`th allocating call from now (1 = the next one) fail once.
    pub fn fail_call(&mut self, n: u64) {
        self.fail_at = Some(self.calls + n.max(1));
    }

    /// Bytes currently allocated (pinned plus managed).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    fn alloc(&mut self, size: u64, managed: bool) -> Result<u64, DeviceError> {
        self.calls += 1;
        if self.fail_at == Some(self.calls) {
            self.fail_at = None;
            return Err(DeviceError::Injected { call: self.calls });
        }
        if size == 0 {
            return Err(DeviceError::InvalidRange { addr: 0, size });
        }
        if self.used.saturating_add(size) > self.capacity {
            return Err(DeviceError::OutOfMemory {
                requested: size,
                free: self.capacity - self.used,
            });
        }
        let next = if managed {
            &mut self.next_managed
        } else {
            &mut self.next_pinned
        };
        let addr = *next;
        *next += size.div_ceil(4096) * 4096;
        self.used += size;
        self.live.insert(addr, (size, managed));
        Ok(addr)
    }

    fn free(&mut self, addr: u64, managed: bool) -> Result<(), DeviceError> {
        match self.live.get(&addr) {
            Some(&(size, m)) if m == managed => {
                self.live.remove(&addr);
                self.used -= size;
                Ok(())
            }
            _ => Err(DeviceError::InvalidRange { addr, size: 0 }),
        }
    }
}

impl HostMemory for SimHost {
    fn alloc_pinned(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.alloc(size, false)
    }

    fn free_pinned(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.free(addr, false)
    }

    fn alloc_managed(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.alloc(size, true)
    }

    fn free_managed(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.free(addr, true)
    }
}
