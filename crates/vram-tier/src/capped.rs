//! A device wrapper that behaves like a smaller GPU.

use std::collections::BTreeMap;
use vram_alloc::device::EventId;
use vram_alloc::{Device, DeviceError, Location};

/// Wraps a [`Device`] so that its physical use (segments plus mapped pages)
/// never exceeds `limit` bytes, and its reported total is at most `limit`
/// (`VRAM_DEVICE_LIMIT=8GiB` makes an 80 GB GPU behave like an 8 GiB one).
/// Without a limit it forwards every call unchanged.
#[derive(Debug)]
pub struct CappedDevice<D> {
    inner: D,
    limit: Option<u64>,
    used: u64,
    segments: BTreeMap<u64, u64>,
    /// Ranges moved to host memory (not counted against the cap).
    host: BTreeMap<u64, u64>,
}

impl<D: Device> CappedDevice<D> {
    /// `inner` capped at `limit` bytes (`None`: uncapped).
    pub fn new(inner: D, limit: Option<u64>) -> Self {
        CappedDevice {
            inner,
            limit,
            used: 0,
            segments: BTreeMap::new(),
            host: BTreeMap::new(),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably (to register streams, inject faults, ...).
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The cap, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Physical bytes this wrapper has handed out (segments plus mapped pages).
    pub fn used(&self) -> u64 {
        self.used
    }

    fn admit(&self, size: u64) -> Result<(), DeviceError> {
        match self.limit {
            Some(l) if self.used.saturating_add(size) > l => Err(DeviceError::OutOfMemory {
                requested: size,
                free: l.saturating_sub(self.used),
            }),
            _ => Ok(()),
        }
    }
}

impl<D: Device> Device for CappedDevice<D> {
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.admit(size)?;
        let addr = self.inner.allocate(size)?;
        self.segments.insert(addr, size);
        self.used += size;
        Ok(addr)
    }

    fn release(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.inner.release(addr)?;
        if let Some(size) = self.segments.remove(&addr) {
            self.used -= size;
        }
        Ok(())
    }

    fn reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.inner.reserve(size)
    }

    fn unreserve(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.inner.unreserve(addr)
    }

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.admit(size)?;
        self.inner.map(addr, size)?;
        self.used += size;
        Ok(())
    }

    fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.inner.unmap(addr, size)?;
        if self.host.get(&addr) == Some(&size) {
            self.host.remove(&addr);
        } else {
            self.used = self.used.saturating_sub(size);
        }
        Ok(())
    }

    fn migrate(&mut self, addr: u64, size: u64, to: Location) -> Result<(), DeviceError> {
        match to {
            Location::Host => {
                self.inner.migrate(addr, size, to)?;
                self.host.insert(addr, size);
                self.used = self.used.saturating_sub(size);
            }
            Location::Device => {
                self.admit(size)?;
                self.inner.migrate(addr, size, to)?;
                self.host.remove(&addr);
                self.used += size;
            }
        }
        Ok(())
    }

    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }

    fn mem_info(&self) -> (u64, u64) {
        let (free, total) = self.inner.mem_info();
        match self.limit {
            Some(l) => (free.min(l.saturating_sub(self.used)), total.min(l)),
            None => (free, total),
        }
    }

    fn record_event(&mut self, stream: u32) -> Result<EventId, DeviceError> {
        self.inner.record_event(stream)
    }

    fn query_event(&mut self, event: EventId) -> Result<bool, DeviceError> {
        self.inner.query_event(event)
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<(), DeviceError> {
        self.inner.synchronize_event(event)
    }
}
