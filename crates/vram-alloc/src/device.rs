//! The device-memory trait and its always-compiled simulated implementation.
//!
//! A [`Device`] hands out physical segments (`cudaMalloc`/`cudaFree`), reserves
//! virtual address ranges and maps/unmaps physical pages into them at a
//! granularity (`cuMemAddressReserve`/`cuMemMap`), orders work with events,
//! and reports free/total memory. [`SimDevice`] implements it with a
//! deterministic address space, a capacity, a granularity and fault injection.

use std::collections::BTreeMap;

/// Identifier of an event recorded on a stream.
pub type EventId = u64;

/// A device failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Not enough physical memory for the request.
    #[error("device out of memory: asked for {requested} bytes, {free} free")]
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Bytes free on the device.
        free: u64,
    },
    /// A fault injected by the simulated device (the Nth fallible call fails).
    #[error("injected fault on call {call}")]
    Injected {
        /// Number of the fallible call that failed (1-based).
        call: u64,
    },
    /// An address or range that the device did not hand out, or that is misaligned.
    #[error("invalid device range {addr:#x}+{size}")]
    InvalidRange {
        /// Start of the range.
        addr: u64,
        /// Length of the range.
        size: u64,
    },
    /// An event id the device does not know.
    #[error("unknown event {0}")]
    UnknownEvent(EventId),
    /// A real device's driver call failed for a reason other than running
    /// out of memory (reported by backends such as `vram-cuda`).
    #[error("{call} failed: {message}")]
    Driver {
        /// The driver function that failed, e.g. `cuMemMap`.
        call: &'static str,
        /// The driver's error name and description.
        message: String,
    },
}

/// Device memory as an allocator sees it.
///
/// Acquiring calls (`allocate`, `reserve`, `map`, `record_event`) may fail;
/// releasing calls are expected to succeed for ranges previously acquired.
pub trait Device: Send {
    /// Allocates a physical segment of `size` bytes; returns its address.
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// Releases a segment returned by [`Device::allocate`].
    fn release(&mut self, addr: u64) -> Result<(), DeviceError>;
    /// Reserves `size` bytes of virtual address space (a multiple of the granularity).
    fn reserve(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// Returns a reservation made by [`Device::reserve`] (all pages must be unmapped).
    fn unreserve(&mut self, addr: u64) -> Result<(), DeviceError>;
    /// Backs `[addr, addr+size)` inside a reservation with physical memory;
    /// both must be multiples of [`Device::granularity`].
    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError>;
    /// Removes physical backing from a mapped range.
    fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError>;
    /// Mapping granularity in bytes (a power of two).
    fn granularity(&self) -> u64;
    /// `(free, total)` physical bytes.
    fn mem_info(&self) -> (u64, u64);
    /// Records an event on `stream` after the work queued so far.
    fn record_event(&mut self, stream: u32) -> Result<EventId, DeviceError>;
    /// Whether the work before `event` has completed.
    fn query_event(&mut self, event: EventId) -> Result<bool, DeviceError>;
    /// Waits for `event` and forgets it.
    fn synchronize_event(&mut self, event: EventId) -> Result<(), DeviceError>;
}

/// How many device calls of each kind a [`SimDevice`] has served (successful
/// calls only), with what they would cost on a real GPU: the CUDA backend
/// creates one physical handle per granule it maps, and `cuMemUnmap`,
/// `cuMemFree` and event synchronisation wait for the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCalls {
    /// `allocate` calls (`cuMemAlloc`).
    pub allocates: u64,
    /// `release` calls (`cuMemFree`, synchronising).
    pub releases: u64,
    /// `reserve` calls (`cuMemAddressReserve`).
    pub reserves: u64,
    /// `unreserve` calls (`cuMemAddressFree`).
    pub unreserves: u64,
    /// `map` calls.
    pub maps: u64,
    /// Granules mapped: the `cuMemCreate` calls a one-handle-per-granule backend makes.
    pub granules_mapped: u64,
    /// `unmap` calls (the CUDA backend synchronises before each).
    pub unmaps: u64,
    /// Granules unmapped (`cuMemUnmap` + `cuMemRelease` pairs).
    pub granules_unmapped: u64,
    /// `synchronize_event` calls.
    pub event_syncs: u64,
    /// Calls that wait for the device: releases, unmaps and event synchronisations.
    pub synchronising: u64,
    /// Host-tier migrations performed by [`Device::migrate`] (either direction).
    pub migrations: u64,
}

impl std::ops::Sub for DeviceCalls {
    type Output = DeviceCalls;
    fn sub(self, o: DeviceCalls) -> DeviceCalls {
        DeviceCalls {
            allocates: self.allocates - o.allocates,
            releases: self.releases - o.releases,
            reserves: self.reserves - o.reserves,
            unreserves: self.unreserves - o.unreserves,
            maps: self.maps - o.maps,
            granules_mapped: self.granules_mapped - o.granules_mapped,
            unmaps: self.unmaps - o.unmaps,
            granules_unmapped: self.granules_unmapped - o.granules_unmapped,
            event_syncs: self.event_syncs - o.event_syncs,
            synchronising: self.synchronising - o.synchronising,
            migrations: self.migrations - o.migrations,
        }
    }
}

const SEGMENT_BASE: u64 = 0x7f00_0000_0000;
const VIRTUAL_BASE: u64 = 0x7e00_0000_0000;
const SEGMENT_ALIGN: u64 = 512;

/// A deterministic simulated GPU.
///
/// Addresses come from bump pointers (segments from `0x7f00_0000_0000`,
/// reservations from `0x7e00_0000_0000`) and are never reused, so a trace is
/// the same on every run. Physical use (segments plus mapped pages) may not
/// exceed the capacity. Streams complete their work immediately unless held
/// with [`SimDevice::hold_stream`]. [`SimDevice::fail_call`] makes the Nth
/// fallible call from now fail with [`DeviceError::Injected`].
#[derive(Debug, Clone)]
pub struct SimDevice {
    capacity: u64,
    granularity: u64,
    used: u64,
    next_segment: u64,
    next_virtual: u64,
    segments: BTreeMap<u64, u64>,
    reservations: BTreeMap<u64, u64>,
    mapped: BTreeMap<u64, u64>,
    held: Vec<u32>,
    events: BTreeMap<EventId, (u32, bool)>,
    next_event: EventId,
    calls: u64,
    fail_at: Option<u64>,
    counts: DeviceCalls,
}

impl SimDevice {
    /// A device with `capacity` bytes and a 2 MiB mapping granularity (what
    /// `cuMemGetAllocationGranularity` reports on current NVIDIA GPUs).
    pub fn new(capacity: u64) -> Self {
        Self::with_granularity(capacity, 2 << 20)
    }

    /// A device with the given capacity and mapping granularity (rounded up
    /// to a power of two, at least 512).
    pub fn with_granularity(capacity: u64, granularity: u64) -> Self {
        SimDevice {
            capacity,
            granularity: granularity.max(512).next_power_of_two(),
            used: 0,
            next_segment: SEGMENT_BASE,
            next_virtual: VIRTUAL_BASE,
            segments: BTreeMap::new(),
            reservations: BTreeMap::new(),
            mapped: BTreeMap::new(),
            held: Vec::new(),
            events: BTreeMap::new(),
            next_event: 1,
            calls: 0,
            fail_at: None,
            counts: DeviceCalls::default(),
        }
    }

    /// Makes the `n`th fallible call from now (1 = the next one) fail once.
    pub fn fail_call(&mut self, n: u64) {
        self.fail_at = Some(self.calls + n.max(1));
    }

    /// Disarms a fault set with [`SimDevice::fail_call`].
    pub fn clear_fault(&mut self) {
        self.fail_at = None;
    }

    /// Number of fallible calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The device calls served so far, by kind.
    pub fn call_counts(&self) -> DeviceCalls {
        self.counts
    }

    /// Physical bytes in use (segments plus mapped pages).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Number of live segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Keeps events recorded on `stream` incomplete until [`SimDevice::complete_stream`].
    pub fn hold_stream(&mut self, stream: u32) {
        if !self.held.contains(&stream) {
            self.held.push(stream);
        }
    }

    /// Completes all work on `stream` and stops holding it.
    pub fn complete_stream(&mut self, stream: u32) {
        self.held.retain(|&s| s != stream);
        for (s, done) in self.events.values_mut() {
            if *s == stream {
                *done = true;
            }
        }
    }

    fn tick(&mut self) -> Result<(), DeviceError> {
        self.calls += 1;
        if self.fail_at == Some(self.calls) {
            self.fail_at = None;
            return Err(DeviceError::Injected { call: self.calls });
        }
        Ok(())
    }

    fn free_bytes(&self) -> u64 {
        self.capacity.saturating_sub(self.used)
    }

    fn take(&mut self, size: u64) -> Result<(), DeviceError> {
        if size > self.free_bytes() {
            return Err(DeviceError::OutOfMemory {
                requested: size,
                free: self.free_bytes(),
            });
        }
        self.used += size;
        Ok(())
    }

    fn reservation_of(&self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let (&base, &len) = self.reservations.range(..=addr).next_back()?;
        (addr.checked_add(size)? <= base + len).then_some((base, len))
    }
}

impl Device for SimDevice {
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.tick()?;
        if size == 0 {
            return Err(DeviceError::InvalidRange { addr: 0, size });
        }
        self.take(size)?;
        let addr = self.next_segment;
        self.next_segment += size.div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        self.segments.insert(addr, size);
        self.counts.allocates += 1;
        Ok(addr)
    }

    fn release(&mut self, addr: u64) -> Result<(), DeviceError> {
        let size = self
            .segments
            .remove(&addr)
            .ok_or(DeviceError::InvalidRange { addr, size: 0 })?;
        self.used -= size;
        self.counts.releases += 1;
        self.counts.synchronising += 1;
        Ok(())
    }

    fn reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.tick()?;
        let g = self.granularity;
        if size == 0 || size % g != 0 {
            return Err(DeviceError::InvalidRange { addr: 0, size });
        }
        let addr = self.next_virtual;
        // Leave a one-granule guard gap between reservations.
        self.next_virtual += size + g;
        self.reservations.insert(addr, size);
        self.counts.reserves += 1;
        Ok(addr)
    }

    fn unreserve(&mut self, addr: u64) -> Result<(), DeviceError> {
        let len = *self
            .reservations
            .get(&addr)
            .ok_or(DeviceError::InvalidRange { addr, size: 0 })?;
        if self.mapped.range(addr..addr + len).next().is_some() {
            return Err(DeviceError::InvalidRange { addr, size: len });
        }
        self.reservations.remove(&addr);
        self.counts.unreserves += 1;
        Ok(())
    }

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        self.tick()?;
        let g = self.granularity;
        let bad = DeviceError::InvalidRange { addr, size };
        if size == 0 || addr % g != 0 || size % g != 0 || self.reservation_of(addr, size).is_none()
        {
            return Err(bad);
        }
        // The range must not overlap an existing mapping.
        if let Some((&a, &l)) = self.mapped.range(..addr + size).next_back() {
            if a + l > addr {
                return Err(bad);
            }
        }
        self.take(size)?;
        self.mapped.insert(addr, size);
        self.counts.maps += 1;
        self.counts.granules_mapped += size / g;
        Ok(())
    }

    fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let bad = DeviceError::InvalidRange { addr, size };
        let end = addr.checked_add(size).ok_or(bad.clone())?;
        // The range must be exactly covered by existing mappings; mappings may
        // be split by an unmap of part of them.
        let pieces: Vec<(u64, u64)> = self
            .mapped
            .range(..end)
            .rev()
            .take_while(|(&a, &l)| a + l > addr)
            .map(|(&a, &l)| (a, l))
            .collect();
        let covered: u64 = pieces
            .iter()
            .map(|&(a, l)| (a + l).min(end) - a.max(addr))
            .sum();
        if covered != size || size % self.granularity != 0 {
            return Err(bad);
        }
        for (a, l) in pieces {
            self.mapped.remove(&a);
            if a < addr {
                self.mapped.insert(a, addr - a);
            }
            if a + l > end {
                self.mapped.insert(end, a + l - end);
            }
        }
        self.used -= size;
        self.counts.unmaps += 1;
        self.counts.granules_unmapped += size / self.granularity;
        self.counts.synchronising += 1;
        Ok(())
    }

    fn granularity(&self) -> u64 {
        self.granularity
    }

    fn mem_info(&self) -> (u64, u64) {
        (self.free_bytes(), self.capacity)
    }

    fn record_event(&mut self, stream: u32) -> Result<EventId, DeviceError> {
        self.tick()?;
        let id = self.next_event;
        self.next_event += 1;
        let done = !self.held.contains(&stream);
        self.events.insert(id, (stream, done));
        Ok(id)
    }

    fn query_event(&mut self, event: EventId) -> Result<bool, DeviceError> {
        let (_, done) = *self
            .events
            .get(&event)
            .ok_or(DeviceError::UnknownEvent(event))?;
        if done {
            self.events.remove(&event);
        }
        Ok(done)
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<(), DeviceError> {
        let (stream, _) = *self
            .events
            .get(&event)
            .ok_or(DeviceError::UnknownEvent(event))?;
        self.complete_stream(stream);
        self.events.remove(&event);
        self.counts.event_syncs += 1;
        self.counts.synchronising += 1;
        Ok(())
    }
}
