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
    /// The backend cannot do this (for example host-located mappings on a
    /// driver without them).
    #[error("not supported by this device: {what}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
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

/// Where the physical memory behind a mapped range lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Location {
    /// Device memory (HBM).
    Device,
    /// Host memory mapped into the device's address space (read and written
    /// by kernels over the bus; `cuMemCreate` with a host location).
    Host,
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
    /// Moves the physical memory behind the mapped range `[addr, addr+size)`
    /// to `to`, keeping its addresses and its contents: new backing is
    /// allocated at `to`, the bytes are copied, the old backing is unmapped
    /// and released and the new one mapped at the same addresses. A range
    /// moved to the host comes back with the same `addr` and `size`. On
    /// failure nothing has changed. Unmapping a host-located range returns
    /// its host memory. Backends without host-located mappings answer
    /// [`DeviceError::Unsupported`] (the default).
    fn migrate(&mut self, addr: u64, size: u64, to: Location) -> Result<(), DeviceError> {
        let _ = (addr, size, to);
        Err(DeviceError::Unsupported {
            what: "host-located mappings",
        })
    }
    /// Copies `data` from the host into the device's memory at `addr` (a mapped range,
    /// wherever its pages live), waiting for it to land: for checks that contents survive
    /// (not an allocator path). Backends without it answer [`DeviceError::Unsupported`].
    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        let _ = (addr, data);
        Err(DeviceError::Unsupported {
            what: "reading and writing device memory",
        })
    }
    /// Copies `len` bytes at `addr` back to the host (see [`Device::write_bytes`]).
    fn read_bytes(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let _ = (addr, len);
        Err(DeviceError::Unsupported {
            what: "reading and writing device memory",
        })
    }
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
    host_capacity: u64,
    host_used: u64,
    /// Ranges whose backing is host memory: address -> size.
    host: BTreeMap<u64, u64>,
    /// Contents of written granules, by location (only when carrying bytes).
    bytes: Option<[BTreeMap<u64, Vec<u8>>; 2]>,
}

impl SimDevice {
    /// A device with `capacity` bytes and a 2 MiB mapping granularity (what
    /// `cuMemGetAllocationGranularity` reports on current NVIDIA GPUs).
    pub fn new(capacity: u64) -> Self {
        Self::with_granularity(capacity, 2 << 20)
    }

    /// Changes the device's capacity to `capacity` bytes, as if it had been that size from
    /// the start: refused (and nothing changed) when more than that is in use.
    pub fn set_capacity(&mut self, capacity: u64) -> Result<(), DeviceError> {
        if self.used > capacity {
            return Err(DeviceError::OutOfMemory {
                requested: self.used,
                free: capacity,
            });
        }
        self.capacity = capacity;
        Ok(())
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
            host_capacity: 0,
            host_used: 0,
            host: BTreeMap::new(),
            bytes: None,
        }
    }

    /// Lets up to `bytes` of mapped ranges move to host memory ([`Device::migrate`]).
    pub fn with_host_capacity(mut self, bytes: u64) -> Self {
        self.host_capacity = bytes;
        self
    }

    /// Makes the device carry the bytes written with [`SimDevice::write`]
    /// through migrations (each mapping starts filled with `0xA5`).
    pub fn with_contents(mut self) -> Self {
        self.bytes = Some(Default::default());
        self
    }

    /// Host bytes backing mapped ranges.
    pub fn host_used(&self) -> u64 {
        self.host_used
    }

    /// Where the mapped byte at `addr` lives, or `None` when it is not mapped.
    pub fn location(&self, addr: u64) -> Option<Location> {
        let (&a, &l) = self.mapped.range(..=addr).next_back()?;
        if addr >= a + l {
            return None;
        }
        match self.host.range(..=addr).next_back() {
            Some((&h, &hl)) if addr < h + hl => Some(Location::Host),
            _ => Some(Location::Device),
        }
    }

    fn store(&mut self, addr: u64) -> Option<&mut BTreeMap<u64, Vec<u8>>> {
        let loc = self.location(addr)?;
        self.bytes.as_mut().map(|b| &mut b[loc as usize])
    }

    /// Writes `data` at `addr` (mapped memory only; needs [`SimDevice::with_contents`]).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        let g = self.granularity;
        let bad = DeviceError::InvalidRange {
            addr,
            size: data.len() as u64,
        };
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let page = a / g * g;
            let take = ((page + g - a) as usize).min(data.len() - done);
            let store = self.store(a).ok_or(bad.clone())?;
            let buf = store.entry(page).or_insert_with(|| vec![0xA5; g as usize]);
            let off = (a - page) as usize;
            buf[off..off + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        Ok(())
    }

    /// Reads `len` bytes at `addr` (mapped memory only).
    pub fn read(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let g = self.granularity;
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let a = addr + out.len() as u64;
            let page = a / g * g;
            let take = (page + g - a).min(len - out.len() as u64) as usize;
            let store = self
                .store(a)
                .ok_or(DeviceError::InvalidRange { addr, size: len })?;
            let off = (a - page) as usize;
            match store.get(&page) {
                Some(b) => out.extend_from_slice(&b[off..off + take]),
                None => out.extend(std::iter::repeat_n(0xA5u8, take)),
            }
        }
        Ok(out)
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
        // A host-located range is unmapped whole, or not at all.
        let host_overlap: Vec<(u64, u64)> = self
            .host
            .range(..end)
            .rev()
            .take_while(|(&a, &l)| a + l > addr)
            .map(|(&a, &l)| (a, l))
            .collect();
        let on_host = match host_overlap.as_slice() {
            [] => false,
            [(a, l)] if *a == addr && *l == size => true,
            _ => return Err(bad),
        };
        for (a, l) in pieces {
            self.mapped.remove(&a);
            if a < addr {
                self.mapped.insert(a, addr - a);
            }
            if a + l > end {
                self.mapped.insert(end, a + l - end);
            }
        }
        if let Some(b) = self.bytes.as_mut() {
            let loc = usize::from(on_host);
            let pages: Vec<u64> = b[loc].range(addr..end).map(|(&p, _)| p).collect();
            for p in pages {
                b[loc].remove(&p);
            }
        }
        if on_host {
            self.host.remove(&addr);
            self.host_used -= size;
        } else {
            self.used -= size;
        }
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

    fn migrate(&mut self, addr: u64, size: u64, to: Location) -> Result<(), DeviceError> {
        self.tick()?;
        let g = self.granularity;
        let bad = DeviceError::InvalidRange { addr, size };
        if size == 0 || addr % g != 0 || size % g != 0 {
            return Err(bad);
        }
        // The range must be mapped throughout.
        let mut at = addr;
        while at < addr + size {
            match self.mapped.range(..=at).next_back() {
                Some((&a, &l)) if at < a + l => at = a + l,
                _ => return Err(bad),
            }
        }
        match to {
            Location::Host => {
                let overlaps = self
                    .host
                    .range(..addr + size)
                    .next_back()
                    .is_some_and(|(&a, &l)| a + l > addr);
                if overlaps {
                    return Err(bad);
                }
                if self.host_used + size > self.host_capacity {
                    return Err(DeviceError::OutOfMemory {
                        requested: size,
                        free: self.host_capacity - self.host_used,
                    });
                }
                self.host_used += size;
                self.used -= size;
                self.host.insert(addr, size);
            }
            Location::Device => {
                if self.host.get(&addr) != Some(&size) {
                    return Err(bad);
                }
                self.take(size)?;
                self.host.remove(&addr);
                self.host_used -= size;
            }
        }
        // Copy the bytes to the new backing, then drop the old one.
        if let Some(b) = self.bytes.as_mut() {
            let (from, dst) = match to {
                Location::Host => (0, 1),
                Location::Device => (1, 0),
            };
            let pages: Vec<u64> = b[from].range(addr..addr + size).map(|(&p, _)| p).collect();
            for p in pages {
                if let Some(v) = b[from].remove(&p) {
                    b[dst].insert(p, v);
                }
            }
        }
        self.counts.migrations += 1;
        Ok(())
    }

    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.write(addr, data)
    }

    fn read_bytes(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        self.read(addr, len)
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
