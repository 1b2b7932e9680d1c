//! Aggregated wall-clock timers of every device call and allocator path.
//!
//! Each [`Timer`] keeps an exact count of calls and the time of the calls it
//! measured (total and maximum, nanoseconds), in relaxed atomics, so any thread
//! may record and [`Timers::snapshot`] reads without a lock. Times come from
//! [`std::time::Instant`] (the vDSO's monotonic clock on Linux; two readings
//! cost about 110 ns on the project's VM, as much as a cached alloc+free pair).
//! So the paths that run for every tensor (a request served from cache, a
//! free, the plug-in's C calls) are measured on one call in
//! [`SAMPLE_EVERY`] per thread and their total is estimated from that sample
//! ([`TimerStat::ns`]); device calls, host calls, step marks and every path
//! that made a driver call are measured on every call (a path that was not
//! sampled is charged the time of the driver calls it made). A sampled path's
//! total is the slow calls' time (all measured) plus the fast calls' sampled
//! mean times the number of fast calls: scaling the slow calls up with the
//! sample, as the 2026-11-28 H200 run's figures did, made a 0.5 µs free read
//! 35 µs once a step's first frees had unmapped. They answer
//! "where does the allocator's time go" on a real GPU: a device call that
//! should not happen in a steady loop shows its count, a slow path its total.
//! `VRAM_TIMERS=0` ([`crate::TierConfig::timers`]) turns them off; counts are
//! still kept.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The per-tensor paths read the clock on one call in this many (per thread).
pub const SAMPLE_EVERY: u32 = 64;

thread_local! {
    static TICK: Cell<u32> = const { Cell::new(0) };
}

/// Everything that is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// `Device::allocate` (`cuMemAlloc`).
    DeviceAllocate,
    /// `Device::release` (`cuMemFree`).
    DeviceRelease,
    /// `Device::reserve` (`cuMemAddressReserve`).
    DeviceReserve,
    /// `Device::unreserve` (`cuMemAddressFree`).
    DeviceUnreserve,
    /// `Device::map` (`cuMemCreate` + `cuMemMap` per handle, one `cuMemSetAccess`).
    DeviceMap,
    /// `Device::unmap` (`cuCtxSynchronize`, then `cuMemUnmap` + `cuMemRelease` per handle).
    DeviceUnmap,
    /// `Device::migrate` (either direction, synchronising).
    DeviceMigrate,
    /// `Device::mem_info` (`cuMemGetInfo`).
    DeviceMemInfo,
    /// `Device::record_event` (`cuEventRecord`).
    DeviceRecordEvent,
    /// `Device::query_event` (`cuEventQuery`).
    DeviceQueryEvent,
    /// `Device::synchronize_event` (`cuEventSynchronize`).
    DeviceSyncEvent,
    /// Pinned or managed host allocations (`cuMemHostAlloc`, `cuMemAllocManaged`).
    HostAlloc,
    /// Their frees (`cuMemFreeHost`, `cuMemFree`).
    HostFree,
    /// A request served from cached device memory (no device call).
    MallocCached,
    /// A request that made device calls (growth, event queries, release-and-retry) and
    /// landed on the device.
    MallocSlow,
    /// A request that landed on the device after cold blocks moved to host memory.
    MallocMigrated,
    /// A request placed in the host or managed tier.
    MallocSpilled,
    /// A request that failed (out of memory in every tier, or an error).
    MallocFailed,
    /// A free of a caching-allocator block.
    FreeDevice,
    /// A free of a host, managed or raw block.
    FreeSide,
    /// A step mark (`vram_step`), with its rebalancing.
    MarkStep,
    /// The plug-in's whole `vram_malloc` (stream lookup and backend included).
    FfiMalloc,
    /// The plug-in's whole `vram_free`.
    FfiFree,
}

impl Timer {
    /// Every timer, in report order.
    pub const ALL: [Timer; 23] = [
        Timer::DeviceAllocate,
        Timer::DeviceRelease,
        Timer::DeviceReserve,
        Timer::DeviceUnreserve,
        Timer::DeviceMap,
        Timer::DeviceUnmap,
        Timer::DeviceMigrate,
        Timer::DeviceMemInfo,
        Timer::DeviceRecordEvent,
        Timer::DeviceQueryEvent,
        Timer::DeviceSyncEvent,
        Timer::HostAlloc,
        Timer::HostFree,
        Timer::MallocCached,
        Timer::MallocSlow,
        Timer::MallocMigrated,
        Timer::MallocSpilled,
        Timer::MallocFailed,
        Timer::FreeDevice,
        Timer::FreeSide,
        Timer::MarkStep,
        Timer::FfiMalloc,
        Timer::FfiFree,
    ];

    /// The name under `timer.` in `memory_stats()`.
    pub fn name(self) -> &'static str {
        match self {
            Timer::DeviceAllocate => "device.allocate",
            Timer::DeviceRelease => "device.release",
            Timer::DeviceReserve => "device.reserve",
            Timer::DeviceUnreserve => "device.unreserve",
            Timer::DeviceMap => "device.map",
            Timer::DeviceUnmap => "device.unmap",
            Timer::DeviceMigrate => "device.migrate",
            Timer::DeviceMemInfo => "device.mem_info",
            Timer::DeviceRecordEvent => "device.record_event",
            Timer::DeviceQueryEvent => "device.query_event",
            Timer::DeviceSyncEvent => "device.synchronize_event",
            Timer::HostAlloc => "host.alloc",
            Timer::HostFree => "host.free",
            Timer::MallocCached => "malloc.cached",
            Timer::MallocSlow => "malloc.slow",
            Timer::MallocMigrated => "malloc.migrated",
            Timer::MallocSpilled => "malloc.spilled",
            Timer::MallocFailed => "malloc.failed",
            Timer::FreeDevice => "free.device",
            Timer::FreeSide => "free.side",
            Timer::MarkStep => "step.mark",
            Timer::FfiMalloc => "ffi.malloc",
            Timer::FfiFree => "ffi.free",
        }
    }

    /// Whether this is a driver call, device or host (counted in [`Timers::driver_calls`]).
    pub fn is_driver_call(self) -> bool {
        (self as usize) <= Timer::HostFree as usize
    }
}

#[derive(Debug, Default)]
struct Slot {
    count: AtomicU64,
    measured: AtomicU64,
    ns: AtomicU64,
    max_ns: AtomicU64,
    /// Calls that made a driver call (measured every time, never scaled by the sample).
    slow: AtomicU64,
    /// Their nanoseconds (part of `ns`).
    slow_ns: AtomicU64,
}

/// The timers of one allocator (shared by its device wrapper and the plug-in).
#[derive(Debug)]
pub struct Timers {
    on: AtomicBool,
    slots: [Slot; Timer::ALL.len()],
    /// Driver calls (device and host) made so far, timed or not: a request that made none
    /// was served from cache.
    driver_calls: AtomicU64,
    /// Nanoseconds of the driver calls measured so far.
    driver_ns: AtomicU64,
}

impl Default for Timers {
    fn default() -> Self {
        Timers::new(true)
    }
}

/// One timer's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TimerStat {
    /// Calls made (exact).
    pub count: u64,
    /// Calls whose time was measured (all of them for device calls and slow paths; about
    /// one in [`SAMPLE_EVERY`] for the per-tensor paths).
    pub measured: u64,
    /// Total time of all `count` calls in nanoseconds: exact when every call was measured,
    /// else the slow calls' time (those that made a driver call, all measured) plus the
    /// sampled fast calls' mean times the number of fast calls.
    pub ns: u64,
    /// The longest measured call, in nanoseconds.
    pub max_ns: u64,
}

fn nanos(start: Instant) -> u64 {
    start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
}

impl Timers {
    /// Timers, on or off.
    pub fn new(on: bool) -> Self {
        Timers {
            on: AtomicBool::new(on),
            slots: Default::default(),
            driver_calls: AtomicU64::new(0),
            driver_ns: AtomicU64::new(0),
        }
    }

    /// Whether timing is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A start time for a call measured every time (device and host calls, step marks).
    #[inline]
    pub fn start(&self) -> Option<Instant> {
        self.enabled().then(Instant::now)
    }

    /// A start time on one call in [`SAMPLE_EVERY`] of this thread (the per-tensor paths).
    #[inline]
    pub fn start_sampled(&self) -> Option<Instant> {
        if !self.enabled() {
            return None;
        }
        let due = TICK.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n % SAMPLE_EVERY == 0
        });
        due.then(Instant::now)
    }

    /// Counts one call of `t` and records its time since `start`, if any.
    #[inline]
    pub fn stop(&self, t: Timer, start: Option<Instant>) {
        self.stop_or(t, start, None);
    }

    /// As [`Timers::stop`], for a path measured on a sample: `fallback_ns` is `Some` (the
    /// driver time it spent, see [`Timers::driver_ns`]) exactly when the call made a driver
    /// call. Such a slow call is measured every time (its own clock when sampled, else the
    /// fallback) and kept apart from the fast calls' sample, so that the estimate of the
    /// total scales only the fast calls.
    #[inline]
    pub fn stop_or(&self, t: Timer, start: Option<Instant>, fallback_ns: Option<u64>) {
        let s = &self.slots[t as usize];
        s.count.fetch_add(1, Ordering::Relaxed);
        if t.is_driver_call() {
            self.driver_calls.fetch_add(1, Ordering::Relaxed);
        }
        let slow = fallback_ns.is_some();
        let ns = match (start, fallback_ns) {
            (Some(st), _) => nanos(st),
            (None, Some(ns)) if self.enabled() => ns,
            _ => return,
        };
        if t.is_driver_call() {
            self.driver_ns.fetch_add(ns, Ordering::Relaxed);
        }
        if slow {
            s.slow.fetch_add(1, Ordering::Relaxed);
            s.slow_ns.fetch_add(ns, Ordering::Relaxed);
        }
        s.measured.fetch_add(1, Ordering::Relaxed);
        s.ns.fetch_add(ns, Ordering::Relaxed);
        s.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Driver calls (device and host) made so far.
    #[inline]
    pub fn driver_calls(&self) -> u64 {
        self.driver_calls.load(Ordering::Relaxed)
    }

    /// Nanoseconds of the driver calls measured so far.
    #[inline]
    pub fn driver_ns(&self) -> u64 {
        self.driver_ns.load(Ordering::Relaxed)
    }

    /// One timer's figures now.
    pub fn get(&self, t: Timer) -> TimerStat {
        let s = &self.slots[t as usize];
        let count = s.count.load(Ordering::Relaxed);
        let measured = s.measured.load(Ordering::Relaxed);
        let ns = s.ns.load(Ordering::Relaxed);
        let (slow, slow_ns) = (
            s.slow.load(Ordering::Relaxed),
            s.slow_ns.load(Ordering::Relaxed),
        );
        // The fast calls: those measured are a sample of all of them.
        let (fast_measured, fast_ns) = (measured.saturating_sub(slow), ns.saturating_sub(slow_ns));
        let fast = count.saturating_sub(slow);
        let total = if fast_measured == 0 || fast_measured >= fast {
            ns
        } else {
            let scaled = fast_ns as u128 * fast as u128 / fast_measured as u128;
            (u128::from(slow_ns) + scaled).min(u128::from(u64::MAX)) as u64
        };
        TimerStat {
            count,
            measured,
            ns: total,
            max_ns: s.max_ns.load(Ordering::Relaxed),
        }
    }

    /// Every timer's figures, by name.
    pub fn snapshot(&self) -> BTreeMap<&'static str, TimerStat> {
        Timer::ALL
            .iter()
            .map(|&t| (t.name(), self.get(t)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_calls_are_the_first_thirteen_timers() {
        let n = Timer::ALL.iter().filter(|t| t.is_driver_call()).count();
        assert_eq!(n, 13);
        assert!(Timer::ALL
            .iter()
            .take(13)
            .all(|t| t.name().starts_with("device.") || t.name().starts_with("host.")));
        for (i, t) in Timer::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i, "{t:?} out of order");
        }
    }

    #[test]
    fn timers_aggregate_sample_and_switch_off() {
        let t = Timers::new(true);
        t.stop_or(Timer::DeviceMap, None, Some(30));
        t.stop_or(Timer::DeviceMap, None, Some(10));
        assert_eq!(
            t.get(Timer::DeviceMap),
            TimerStat {
                count: 2,
                measured: 2,
                ns: 40,
                max_ns: 30
            }
        );
        assert_eq!((t.driver_calls(), t.driver_ns()), (2, 40));
        // A sampled path: every call counted, one in SAMPLE_EVERY measured, the total scaled.
        for _ in 0..10 * SAMPLE_EVERY {
            let s = t.start_sampled();
            t.stop(Timer::MallocCached, s);
        }
        let c = t.get(Timer::MallocCached);
        assert_eq!((c.count, c.measured), (10 * SAMPLE_EVERY as u64, 10));
        let off = Timers::new(false);
        let s = off.start();
        off.stop_or(Timer::DeviceUnmap, s, Some(5));
        assert_eq!(off.get(Timer::DeviceUnmap).measured, 0);
        assert_eq!(
            off.get(Timer::DeviceUnmap).count,
            1,
            "counts are kept when off"
        );
        assert_eq!(off.driver_calls(), 1);
    }

    #[test]
    fn slow_calls_of_a_sampled_path_are_not_scaled_with_the_sample() {
        // The 2026-11-28 H200 run's capped Llama step: ~3,700 frees of 0.5 µs each, after a
        // warm-up whose few frees unmapped (charged their driver time, milliseconds each).
        let t = Timers::new(true);
        for _ in 0..4 {
            t.stop_or(Timer::FreeDevice, None, Some(2_000_000));
        }
        let fast = 64 * SAMPLE_EVERY as u64;
        for _ in 0..fast {
            // A fast call: no driver call, so no fallback; sampled with its own clock.
            let s = t.start_sampled();
            t.stop_or(Timer::FreeDevice, s, None);
        }
        let c = t.get(Timer::FreeDevice);
        assert_eq!(c.count, fast + 4);
        assert!(c.measured >= 4 + 63, "{c:?}");
        // 8 ms of slow calls, plus fast calls that take well under a millisecond in all:
        // scaling the slow calls with the sample would have reported over 200 ms.
        assert!(c.ns >= 8_000_000 && c.ns < 8_000_000 + 50_000_000, "{c:?}");
    }
}
