//! [`CudaDevice`] and [`CudaHost`]: the traits' CUDA implementations.

// Calls `driver`'s `unsafe fn`s, discharging their one precondition: the device no
// longer uses the memory or handle (events waited for, or the context synchronized).
#![allow(unsafe_code)]

use crate::driver::{self, Context};
use crate::error::CudaError;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vram_alloc::device::EventId;
use vram_alloc::{Device, DeviceError, Location};
use vram_tier::HostMemory;

static DROP_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Driver failures seen while dropping a [`CudaDevice`] or [`CudaHost`] in
/// this process (a drop cannot return them).
pub fn drop_errors() -> u64 {
    DROP_ERRORS.load(Ordering::Relaxed)
}

/// One GPU's memory through the CUDA driver API (see the crate docs).
///
/// Streams are numbered as in [`vram_alloc`]: 0 is the legacy default
/// stream; other ids are bound to a driver stream handle with
/// [`CudaDevice::register_stream`].
#[derive(Debug)]
pub struct CudaDevice {
    ctx: Arc<Context>,
    ordinal: i32,
    granularity: u64,
    total: u64,
    segments: HashMap<u64, u64>,
    reservations: BTreeMap<u64, u64>,
    /// Mapped granules: address -> allocation handle.
    pages: BTreeMap<u64, u64>,
    /// Granules whose handle is host-located (`migrate`).
    host_pages: std::collections::BTreeSet<u64>,
    streams: HashMap<u32, usize>,
    events: HashMap<EventId, usize>,
    spare_events: Vec<usize>,
    next_event: EventId,
    errors: Vec<CudaError>,
}

impl CudaDevice {
    /// Opens device `ordinal` (its primary context, shared with the CUDA
    /// runtime and PyTorch). Fails with [`CudaError::NoDriver`] when no
    /// driver is installed, without calling into cudarc.
    pub fn open(ordinal: i32) -> Result<CudaDevice, CudaError> {
        let ctx = Arc::new(Context::primary(ordinal)?);
        let _g = ctx.bind()?;
        let granularity = driver::granularity(ctx.device())?.max(512);
        let (_, total) = driver::mem_info()?;
        drop(_g);
        Ok(CudaDevice {
            ctx,
            ordinal,
            granularity,
            total,
            segments: HashMap::new(),
            reservations: BTreeMap::new(),
            pages: BTreeMap::new(),
            host_pages: Default::default(),
            streams: HashMap::new(),
            events: HashMap::new(),
            spare_events: Vec::new(),
            next_event: 1,
            errors: Vec::new(),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// A [`CudaHost`] sharing this device's context.
    pub fn host(&self) -> CudaHost {
        CudaHost {
            ctx: self.ctx.clone(),
            pinned: HashMap::new(),
            managed: HashMap::new(),
        }
    }

    /// Binds stream id `id` to the driver stream handle `handle` (a
    /// `CUstream`/`cudaStream_t` as an integer). Id 0 is always the legacy
    /// default stream.
    pub fn register_stream(&mut self, id: u32, handle: usize) {
        if id != 0 {
            self.streams.insert(id, handle);
        }
    }

    /// Errors recorded by calls that cannot return them (`mem_info`).
    pub fn take_errors(&mut self) -> Vec<CudaError> {
        std::mem::take(&mut self.errors)
    }

    fn bind(&self) -> Result<driver::Bound, DeviceError> {
        self.ctx.bind().map_err(|e| e.into_device_error(0, 0))
    }

    fn free_now(&mut self) -> u64 {
        match driver::mem_info() {
            Ok((f, _)) => f,
            Err(e) => {
                self.errors.push(e);
                0
            }
        }
    }

    fn fail(&mut self, e: CudaError, requested: u64) -> DeviceError {
        let free = if matches!(
            e,
            CudaError::Driver {
                out_of_memory: true,
                ..
            }
        ) {
            self.free_now()
        } else {
            0
        };
        e.into_device_error(requested, free)
    }

    fn reservation_of(&self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let (&base, &len) = self.reservations.range(..=addr).next_back()?;
        (addr.checked_add(size)? <= base + len).then_some((base, len))
    }

    /// Returns everything this device holds; the driver errors met on the way.
    fn teardown(&mut self) -> Vec<CudaError> {
        let mut errs = Vec::new();
        let g = match self.ctx.bind() {
            Ok(g) => g,
            Err(e) => return vec![e],
        };
        if let Err(e) = driver::synchronize() {
            errs.push(e);
        }
        for (_, ev) in self.events.drain() {
            // SAFETY: every event in the map came from `event_create` and is
            // not used after this.
            if let Err(e) = unsafe { driver::event_destroy(ev) } {
                errs.push(e);
            }
        }
        for ev in self.spare_events.drain(..) {
            // SAFETY: as above.
            if let Err(e) = unsafe { driver::event_destroy(ev) } {
                errs.push(e);
            }
        }
        let g_size = self.granularity;
        for (addr, h) in std::mem::take(&mut self.pages) {
            // SAFETY: each page was mapped whole with `h`; the context was
            // synchronized, so no device work uses it.
            if let Err(e) = unsafe { driver::unmap_and_release(addr, g_size, h) } {
                errs.push(e);
            }
        }
        for (addr, len) in std::mem::take(&mut self.reservations) {
            // SAFETY: the reservation's pages were all unmapped above.
            if let Err(e) = unsafe { driver::address_free(addr, len) } {
                errs.push(e);
            }
        }
        for (addr, _) in self.segments.drain() {
            // SAFETY: synchronized above; the segment came from `mem_alloc`.
            if let Err(e) = unsafe { driver::mem_free(addr) } {
                errs.push(e);
            }
        }
        drop(g);
        errs
    }

    /// Returns everything this device holds and reports the driver errors
    /// met on the way (dropping does the same but can only count them).
    pub fn close(mut self) -> Vec<CudaError> {
        let mut errs = self.take_errors();
        errs.extend(self.teardown());
        errs
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let n = self.teardown().len() as u64;
        DROP_ERRORS.fetch_add(n, Ordering::Relaxed);
    }
}

impl Device for CudaDevice {
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        if size == 0 {
            return Err(DeviceError::InvalidRange { addr: 0, size });
        }
        let _g = self.bind()?;
        match driver::mem_alloc(size) {
            Ok(a) => {
                self.segments.insert(a, size);
                Ok(a)
            }
            Err(e) => Err(self.fail(e, size)),
        }
    }

    fn release(&mut self, addr: u64) -> Result<(), DeviceError> {
        if !self.segments.contains_key(&addr) {
            return Err(DeviceError::InvalidRange { addr, size: 0 });
        }
        let _g = self.bind()?;
        // SAFETY: the segment came from `mem_alloc`; the allocator releases
        // only blocks whose stream work is complete, and cuMemFree itself
        // synchronizes with outstanding work on the device.
        match unsafe { driver::mem_free(addr) } {
            Ok(()) => {
                self.segments.remove(&addr);
                Ok(())
            }
            Err(e) => Err(self.fail(e, 0)),
        }
    }

    fn reserve(&mut self, size: u64) -> Result<u64, DeviceError> {
        let g = self.granularity;
        if size == 0 || size % g != 0 {
            return Err(DeviceError::InvalidRange { addr: 0, size });
        }
        let _b = self.bind()?;
        match driver::address_reserve(size, g) {
            Ok(a) => {
                self.reservations.insert(a, size);
                Ok(a)
            }
            Err(e) => Err(self.fail(e, size)),
        }
    }

    fn unreserve(&mut self, addr: u64) -> Result<(), DeviceError> {
        let len = *self
            .reservations
            .get(&addr)
            .ok_or(DeviceError::InvalidRange { addr, size: 0 })?;
        if self.pages.range(addr..addr + len).next().is_some() {
            return Err(DeviceError::InvalidRange { addr, size: len });
        }
        let _g = self.bind()?;
        // SAFETY: a whole reservation of ours with no page mapped (checked above).
        match unsafe { driver::address_free(addr, len) } {
            Ok(()) => {
                self.reservations.remove(&addr);
                Ok(())
            }
            Err(e) => Err(self.fail(e, 0)),
        }
    }

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let g = self.granularity;
        let bad = DeviceError::InvalidRange { addr, size };
        if size == 0 || addr % g != 0 || size % g != 0 || self.reservation_of(addr, size).is_none()
        {
            return Err(bad);
        }
        if self.pages.range(addr..addr + size).next().is_some() {
            return Err(bad);
        }
        let _b = self.bind()?;
        let dev = self.ctx.device();
        let mut at = addr;
        let mut failure = None;
        while at < addr + size {
            match driver::create_and_map(dev, at, g) {
                Ok(h) => {
                    self.pages.insert(at, h);
                    at += g;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() {
            failure = driver::set_access(dev, addr, size).err();
        }
        let Some(e) = failure else { return Ok(()) };
        // Roll back the granules mapped by this call.
        let done: Vec<(u64, u64)> = self.pages.range(addr..at).map(|(&a, &h)| (a, h)).collect();
        for (a, h) in done {
            // SAFETY: mapped whole with `h` just now and never handed out
            // (this call has not returned), so no device work uses it.
            if unsafe { driver::unmap_and_release(a, g, h) }.is_ok() {
                self.pages.remove(&a);
            }
        }
        Err(self.fail(e, size))
    }

    fn unmap(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let g = self.granularity;
        let bad = DeviceError::InvalidRange { addr, size };
        let end = addr.checked_add(size).ok_or(bad.clone())?;
        if size == 0 || addr % g != 0 || size % g != 0 {
            return Err(bad);
        }
        let pages: Vec<(u64, u64)> = self.pages.range(addr..end).map(|(&a, &h)| (a, h)).collect();
        if pages.len() as u64 != size / g {
            return Err(bad);
        }
        let _b = self.bind()?;
        // Pending kernels may still touch these pages (stream-ordered reuse);
        // unmapping under them is undefined, so wait first (PyTorch does the same).
        if let Err(e) = driver::synchronize() {
            return Err(self.fail(e, 0));
        }
        for (a, h) in pages {
            // SAFETY: each granule was mapped whole with `h` by `map`; the
            // context was synchronized above.
            match unsafe { driver::unmap_and_release(a, g, h) } {
                Ok(()) => {
                    self.pages.remove(&a);
                    self.host_pages.remove(&a);
                }
                Err(e) => return Err(self.fail(e, 0)),
            }
        }
        Ok(())
    }

    fn migrate(&mut self, addr: u64, size: u64, to: Location) -> Result<(), DeviceError> {
        let g = self.granularity;
        let bad = DeviceError::InvalidRange { addr, size };
        let end = addr.checked_add(size).ok_or(bad.clone())?;
        if size == 0 || addr % g != 0 || size % g != 0 {
            return Err(bad);
        }
        let pages: Vec<(u64, u64)> = self.pages.range(addr..end).map(|(&a, &h)| (a, h)).collect();
        let want_host = to == Location::Host;
        if pages.len() as u64 != size / g
            || pages
                .iter()
                .any(|(a, _)| self.host_pages.contains(a) == want_host)
        {
            return Err(bad);
        }
        let _b = self.bind()?;
        let dev = self.ctx.device();
        // 1. New backing at `to`, mapped at a scratch range; copy the bytes.
        let scratch = driver::address_reserve(size, g).map_err(|e| self.fail(e, size))?;
        let mut fresh: Vec<u64> = Vec::with_capacity(pages.len());
        let mut step = (|| -> Result<(), CudaError> {
            for i in 0..pages.len() as u64 {
                let h = driver::create(dev, g, want_host)?;
                fresh.push(h);
                driver::map(scratch + i * g, g, h)?;
            }
            driver::set_access(dev, scratch, size)?;
            driver::synchronize()?;
            // SAFETY: both ranges are mapped and accessible; the context was
            // synchronized, and the allocator holds the block (no one frees it).
            unsafe { driver::memcpy_dtod(scratch, addr, size) }?;
            driver::synchronize()
        })();
        // 2. Drop the scratch mappings (the new handles stay alive).
        for (i, _) in fresh.iter().enumerate() {
            // SAFETY: mapped just now at the scratch range, unused after the
            // synchronize above (or never used when a step failed).
            let _ = unsafe { driver::unmap(scratch + i as u64 * g, g) };
        }
        // SAFETY: nothing is mapped in the scratch reservation any more.
        let _ = unsafe { driver::address_free(scratch, size) };
        if step.is_ok() {
            // 3. Swap: release the old backing, map the new at the same addresses.
            for (i, &(a, old)) in pages.iter().enumerate() {
                // SAFETY: the context was synchronized; the old handle is mapped
                // whole at `a` and nothing uses it after the copy.
                let r = unsafe { driver::unmap_and_release(a, g, old) }
                    .and_then(|()| driver::map(a, g, fresh[i]));
                if let Err(e) = r {
                    // The range is now partly remapped: record what is where
                    // and report the failure (contents of this granule lost).
                    step = Err(e);
                    for &(b, _) in &pages[i..] {
                        self.pages.remove(&b);
                    }
                    break;
                }
                self.pages.insert(a, fresh[i]);
                if want_host {
                    self.host_pages.insert(a);
                } else {
                    self.host_pages.remove(&a);
                }
            }
            if step.is_ok() {
                step = driver::set_access(dev, addr, size);
            }
            if let Err(e) = step {
                return Err(self.fail(e, size));
            }
            return Ok(());
        }
        for h in fresh {
            // SAFETY: unmapped above.
            let _ = unsafe { driver::release(h) };
        }
        Err(self.fail(step.unwrap_err(), size))
    }

    fn granularity(&self) -> u64 {
        self.granularity
    }

    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        let _g = self.bind()?;
        // SAFETY: the caller asks for a range of its own (the conformance checks write only
        // into ranges they mapped or blocks they hold); the driver validates the range, and
        // the copy is synchronous.
        unsafe { driver::memcpy_htod(addr, data) }.map_err(|e| self.fail(e, 0))
    }

    fn read_bytes(&mut self, addr: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let _g = self.bind()?;
        // SAFETY: as in `write_bytes`.
        unsafe { driver::memcpy_dtoh(addr, len as usize) }.map_err(|e| self.fail(e, 0))
    }

    fn mem_info(&self) -> (u64, u64) {
        let r = self.ctx.bind().and_then(|_g| driver::mem_info());
        r.unwrap_or((0, self.total))
    }

    fn record_event(&mut self, stream: u32) -> Result<EventId, DeviceError> {
        let handle = match stream {
            0 => 0,
            s => *self
                .streams
                .get(&s)
                .ok_or_else(|| CudaError::UnknownStream(s).into_device_error(0, 0))?,
        };
        let _g = self.bind()?;
        let ev = match self.spare_events.pop() {
            Some(e) => e,
            None => driver::event_create().map_err(|e| self.fail(e, 0))?,
        };
        // SAFETY: `ev` is a live event of ours; `handle` is 0 or a stream the
        // caller registered for this device's context.
        if let Err(e) = unsafe { driver::event_record(ev, handle) } {
            self.spare_events.push(ev);
            return Err(self.fail(e, 0));
        }
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, ev);
        Ok(id)
    }

    fn query_event(&mut self, event: EventId) -> Result<bool, DeviceError> {
        let ev = *self
            .events
            .get(&event)
            .ok_or(DeviceError::UnknownEvent(event))?;
        let _g = self.bind()?;
        // SAFETY: a live event of ours.
        match unsafe { driver::event_query(ev) } {
            Ok(true) => {
                self.events.remove(&event);
                self.spare_events.push(ev);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => Err(self.fail(e, 0)),
        }
    }

    fn synchronize_event(&mut self, event: EventId) -> Result<(), DeviceError> {
        let ev = *self
            .events
            .get(&event)
            .ok_or(DeviceError::UnknownEvent(event))?;
        let _g = self.bind()?;
        // SAFETY: a live event of ours.
        match unsafe { driver::event_synchronize(ev) } {
            Ok(()) => {
                self.events.remove(&event);
                self.spare_events.push(ev);
                Ok(())
            }
            Err(e) => Err(self.fail(e, 0)),
        }
    }
}

/// Pinned, device-mapped host memory and managed memory for one device
/// (made with [`CudaDevice::host`]).
#[derive(Debug)]
pub struct CudaHost {
    ctx: Arc<Context>,
    /// Device pointer -> host pointer.
    pinned: HashMap<u64, usize>,
    managed: HashMap<u64, u64>,
}

impl CudaHost {
    fn teardown(&mut self) -> usize {
        let Ok(_g) = self.ctx.bind() else {
            return 1;
        };
        let mut errs = usize::from(driver::synchronize().is_err());
        for (_, h) in self.pinned.drain() {
            // SAFETY: from `host_alloc_mapped`; the context was synchronized.
            errs += usize::from(unsafe { driver::host_free(h) }.is_err());
        }
        for (d, _) in self.managed.drain() {
            // SAFETY: from `managed_alloc` (cuMemFree frees managed memory);
            // the context was synchronized.
            errs += usize::from(unsafe { driver::mem_free(d) }.is_err());
        }
        errs
    }
}

impl Drop for CudaHost {
    fn drop(&mut self) {
        let n = self.teardown() as u64;
        DROP_ERRORS.fetch_add(n, Ordering::Relaxed);
    }
}

fn host_err(e: CudaError, requested: u64) -> DeviceError {
    e.into_device_error(requested, 0)
}

impl HostMemory for CudaHost {
    fn alloc_pinned(&mut self, size: u64) -> Result<u64, DeviceError> {
        let _g = self.ctx.bind().map_err(|e| host_err(e, size))?;
        let (d, h) = driver::host_alloc_mapped(size).map_err(|e| host_err(e, size))?;
        self.pinned.insert(d, h);
        Ok(d)
    }

    fn free_pinned(&mut self, addr: u64) -> Result<(), DeviceError> {
        let h = *self
            .pinned
            .get(&addr)
            .ok_or(DeviceError::InvalidRange { addr, size: 0 })?;
        let _g = self.ctx.bind().map_err(|e| host_err(e, 0))?;
        // SAFETY: from `host_alloc_mapped`; the trait's caller guarantees the
        // device is done with it (vram-tier waits for the block's events).
        unsafe { driver::host_free(h) }.map_err(|e| host_err(e, 0))?;
        self.pinned.remove(&addr);
        Ok(())
    }

    fn alloc_managed(&mut self, size: u64) -> Result<u64, DeviceError> {
        let _g = self.ctx.bind().map_err(|e| host_err(e, size))?;
        let d = driver::managed_alloc(self.ctx.device(), size).map_err(|e| host_err(e, size))?;
        self.managed.insert(d, size);
        Ok(d)
    }

    fn free_managed(&mut self, addr: u64) -> Result<(), DeviceError> {
        if !self.managed.contains_key(&addr) {
            return Err(DeviceError::InvalidRange { addr, size: 0 });
        }
        let _g = self.ctx.bind().map_err(|e| host_err(e, 0))?;
        // SAFETY: from `managed_alloc`; the caller guarantees the device is done with it.
        unsafe { driver::mem_free(addr) }.map_err(|e| host_err(e, 0))?;
        self.managed.remove(&addr);
        Ok(())
    }
}
