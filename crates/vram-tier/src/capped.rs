//! A device wrapper that behaves like a smaller GPU.

use crate::timers::{Timer, Timers};
use std::collections::BTreeMap;
use std::sync::Arc;
use vram_alloc::device::EventId;
use vram_alloc::{Device, DeviceError, Location};

/// Wraps a [`Device`] so that its physical use (segments plus mapped pages)
/// never exceeds `limit` bytes, and its reported total is at most `limit`
/// (`VRAM_DEVICE_LIMIT=8GiB` makes an 80 GB GPU behave like an 8 GiB one).
/// Without a limit it forwards every call unchanged. Every call to the
/// wrapped device is timed ([`Timers`], shared with the allocator above it).
#[derive(Debug)]
pub struct CappedDevice<D> {
    inner: D,
    limit: Option<u64>,
    used: u64,
    segments: BTreeMap<u64, u64>,
    /// Ranges moved to host memory (not counted against the cap).
    host: BTreeMap<u64, u64>,
    timers: Arc<Timers>,
}

impl<D: Device> CappedDevice<D> {
    /// `inner` capped at `limit` bytes (`None`: uncapped).
    pub fn new(inner: D, limit: Option<u64>) -> Self {
        Self::with_timers(inner, limit, Arc::new(Timers::default()))
    }

    /// `inner` capped at `limit`, its calls timed into `timers`.
    pub fn with_timers(inner: D, limit: Option<u64>, timers: Arc<Timers>) -> Self {
        CappedDevice {
            inner,
            limit,
            used: 0,
            segments: BTreeMap::new(),
            host: BTreeMap::new(),
            timers,
        }
    }

    /// The timers of the wrapped device's calls.
    pub fn timers(&self) -> &Arc<Timers> {
        &self.timers
    }

    #[inline]
    fn timed<R>(&mut self, t: Timer, f: impl FnOnce(&mut D) -> R) -> R {
        let s = self.timers.start();
        let r = f(&mut self.inner);
        self.timers.stop(t, s);
        r
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
        let addr = self.timed(Timer::DeviceAllocate, |d| d.allocate(size))?;
        self.segments.insert(addr, size);
        self.used += size;
        Ok(addr)
    }

    fn release(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.timed(Timer::DeviceRelease, |d| d.release(addr))?;
        if let Some(size) = self.segments.remove(&addr) {
            self.used -= size;
        }
        Ok(())
    }

    fn reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.timed(Timer::DeviceReserve, |d| d.reserve(size))
    }

    fn unreserve(&mut self, addr: u64) -> Result<(), DeviceError> {
        self.timed(Timer::DeviceUnreserve, |d| d.unreserve(addr))
    }

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.admit(size)?;
        self.timed(Timer::DeviceMap, |d| d.map(addr, size))?;
        self.used += size;
        Ok(())
    }

    fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.timed(Timer::DeviceUnmap, |d| d.unmap(addr, size))?;
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
                self.timed(Timer::DeviceMigrate, |d| d.migrate(addr, size, to))?;
                self.host.insert(addr, size);
                self.used = self.used.saturating_sub(size);
            }
            Location::Device => {
                self.admit(size)?;
                self.timed(Timer::DeviceMigrate, |d| d.migrate(addr, size, to))?;
                self.host.remove(&addr);
                self.used += size;
            }
        }
        Ok(())
    }

    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }

    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.inner.write_bytes(addr, data)
    }

    fn read_bytes(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        self.inner.read_bytes(addr, len)
    }

    fn mem_info(&self) -> (u64, u64) {
        let s = self.timers.start();
        let (free, total) = self.inner.mem_info();
        self.timers.stop(Timer::DeviceMemInfo, s);
        match self.limit {
            Some(l) => (free.min(l.saturating_sub(self.used)), total.min(l)),
            None => (free, total),
        }
    }

    fn record_event(&mut self, stream: u32) -> Result<EventId, DeviceError> {
        self.timed(Timer::DeviceRecordEvent, |d| d.record_event(stream))
    }

    fn query_event(&mut self, event: EventId) -> Result<bool, DeviceError> {
        self.timed(Timer::DeviceQueryEvent, |d| d.query_event(event))
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<(), DeviceError> {
        self.timed(Timer::DeviceSyncEvent, |d| d.synchronize_event(event))
    }
}
