//! The tiered allocator: device, then managed (opt-in), then pinned host memory.

use crate::capped::CappedDevice;
use crate::config::{Mode, TierConfig};
use crate::error::TierError;
use crate::host::HostMemory;
use crate::timers::{Timer, TimerStat, Timers};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use vram_alloc::device::EventId;
use vram_alloc::{
    AllocError, CachingAllocator, Device, DeviceError, MemoryStats, OomInfo, Snapshot,
};

/// Where an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Tier {
    /// Device memory (the caching allocator's blocks, or raw segments).
    Device,
    /// Pinned, device-mapped host memory.
    Host,
    /// Managed (unified) memory, preferring the device.
    Managed,
    /// A device allocation whose pages were moved to host memory at the same
    /// addresses (the host tier's migration): its address is a device
    /// address, its bytes are read over the bus until it comes back.
    Migrated,
}

/// Counters of one tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierCounters {
    /// Bytes held now (including blocks freed by the caller whose stream
    /// work has not finished).
    pub current_bytes: u64,
    /// Highest `current_bytes` since the last peak reset.
    pub peak_bytes: u64,
    /// Sum of all bytes ever allocated in this tier.
    pub allocated_bytes: u64,
    /// Sum of all bytes ever returned from this tier.
    pub freed_bytes: u64,
    /// Allocations held now.
    pub current_count: u64,
    /// Highest `current_count` since the last peak reset.
    pub peak_count: u64,
    /// Allocations ever made in this tier.
    pub num_allocs: u64,
}

impl TierCounters {
    fn add(&mut self, bytes: u64) {
        self.current_bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.current_bytes);
        self.allocated_bytes += bytes;
        self.current_count += 1;
        self.peak_count = self.peak_count.max(self.current_count);
        self.num_allocs += 1;
    }

    fn sub(&mut self, bytes: u64) {
        self.current_bytes -= bytes;
        self.freed_bytes += bytes;
        self.current_count -= 1;
    }

    fn reset_peak(&mut self) {
        self.peak_bytes = self.current_bytes;
        self.peak_count = self.current_count;
    }

    fn put(&self, m: &mut BTreeMap<String, i64>, prefix: &str) {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (k, v) in [
            ("bytes.current", self.current_bytes),
            ("bytes.peak", self.peak_bytes),
            ("bytes.allocated", self.allocated_bytes),
            ("bytes.freed", self.freed_bytes),
            ("allocation.current", self.current_count),
            ("allocation.peak", self.peak_count),
            ("allocation.allocated", self.num_allocs),
        ] {
            m.insert(format!("{prefix}.{k}"), i(v));
        }
    }
}

/// Statistics of every tier.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TierStats {
    /// The caching allocator's statistics (PyTorch's keys; all zero in raw mode).
    pub device: MemoryStats,
    /// Raw device segments ([`Mode::Raw`]).
    pub raw: TierCounters,
    /// Pinned host memory.
    pub host: TierCounters,
    /// Managed memory.
    pub managed: TierCounters,
    /// Requests placed in the host or managed tier because the device was full.
    pub num_spills: u64,
    /// Pinned host bytes freed by the caller and kept for the next spill of their size
    /// (not in `host.current_bytes`; `empty_cache` returns them).
    pub host_cached_bytes: u64,
    /// Spills served from those cached blocks, with no host allocation.
    pub num_host_reuses: u64,
    /// Requests that could not spill (below `spill_min`, host tier full or
    /// off, or the host allocation failed) and so failed with out-of-memory.
    pub num_spill_failures: u64,
    /// Host or managed blocks that could not be returned (an event could not
    /// be recorded or the free failed); they are kept, never reused.
    pub num_leaked: u64,
    /// Bytes the device tier holds from the device now (under the cap).
    pub device_used_bytes: u64,
    /// The device cap, if any.
    pub device_limit: Option<u64>,
    /// The host tier's limit (0: off).
    pub host_limit: u64,
    /// Every device call and allocator path, counted and timed
    /// (`timer.<name>.count|measured|ns|max_ns`; see [`crate::timers`]).
    pub timers: BTreeMap<&'static str, TimerStat>,
    /// Step marks so far (`vram_step`).
    pub num_steps: u64,
    /// Driver calls (maps, unmaps, events, host allocations, ...) between the last two step
    /// marks: 0 in a steady loop without a host tier.
    pub last_step_driver_calls: u64,
    /// The planned tier's last decision, if it planned.
    pub plan: Option<PlanStats>,
}

/// What the planned tier decided for the steps after the one it recorded (`tier.plan.*` in
/// `memory_stats()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PlanStats {
    /// Plans made so far.
    pub plans: u64,
    /// 0 nothing moves, 1 stream through the device, 2 update optimizer chunks on the host
    /// (`crate::plan::Strategy::code`); -1 no plan fits.
    pub strategy: i64,
    /// Items the plan moves to host memory and back each step.
    pub moves: u64,
    /// Bytes copied to the host per step (moved items, and gradients of host-updated chunks).
    pub moved_bytes: u64,
    /// Optimizer chunks updated on the host.
    pub host_chunks: u64,
    /// The simulated step of the chosen plan, of the best streaming plan and of the best
    /// host-update plan, and the floor (nanoseconds; 0 when none).
    pub predicted_ns: u64,
    /// See `predicted_ns`.
    pub stream_ns: u64,
    /// See `predicted_ns`.
    pub host_update_ns: u64,
    /// See `predicted_ns`.
    pub floor_ns: u64,
    /// The recorded step's compute time, nanoseconds.
    pub native_ns: u64,
}

impl TierStats {
    /// PyTorch's `memory_stats()` keys for the device tier, plus
    /// `host.*`, `managed.*`, `raw.*` (`bytes.current|peak|allocated|freed`,
    /// `allocation.current|peak|allocated`), `host.cached_bytes`, `num_spills`,
    /// `num_host_reuses`,
    /// `num_spill_failures`, `num_leaked`, `device_used_bytes`, `device_limit`
    /// (-1 when uncapped), `host_limit`, `timer.<name>.count|measured|ns|max_ns` for every
    /// [`Timer`] (`timer.device.map.ns`, `timer.malloc.cached.count`, ...), `num_steps`,
    /// `last_step.driver_calls`, and once the planned tier has planned,
    /// `tier.plan.strategy|plans|moves|moved_bytes|host_chunks|predicted_ns|stream_ns|
    /// host_update_ns|floor_ns|native_ns` ([`PlanStats`]).
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = self.device.to_map();
        self.raw.put(&mut m, "raw");
        self.host.put(&mut m, "host");
        self.managed.put(&mut m, "managed");
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        m.insert("num_spills".into(), i(self.num_spills));
        m.insert("host.cached_bytes".into(), i(self.host_cached_bytes));
        m.insert("num_host_reuses".into(), i(self.num_host_reuses));
        m.insert("num_spill_failures".into(), i(self.num_spill_failures));
        m.insert("num_leaked".into(), i(self.num_leaked));
        m.insert("device_used_bytes".into(), i(self.device_used_bytes));
        m.insert("device_limit".into(), self.device_limit.map_or(-1, i));
        m.insert("host_limit".into(), i(self.host_limit));
        for (name, t) in &self.timers {
            m.insert(format!("timer.{name}.count"), i(t.count));
            m.insert(format!("timer.{name}.measured"), i(t.measured));
            m.insert(format!("timer.{name}.ns"), i(t.ns));
            m.insert(format!("timer.{name}.max_ns"), i(t.max_ns));
        }
        if let Some(p) = &self.plan {
            for (k, v) in [
                ("plans", p.plans),
                ("moves", p.moves),
                ("moved_bytes", p.moved_bytes),
                ("host_chunks", p.host_chunks),
                ("predicted_ns", p.predicted_ns),
                ("stream_ns", p.stream_ns),
                ("host_update_ns", p.host_update_ns),
                ("floor_ns", p.floor_ns),
                ("native_ns", p.native_ns),
            ] {
                m.insert(format!("tier.plan.{k}"), i(v));
            }
            m.insert("tier.plan.strategy".into(), p.strategy);
        }
        m.insert("num_steps".into(), i(self.num_steps));
        m.insert(
            "last_step.driver_calls".into(),
            i(self.last_step_driver_calls),
        );
        m
    }
}

#[derive(Debug, Clone)]
struct SideBlock {
    size: u64,
    tier: Tier,
    streams: Vec<u32>,
}

/// Blocks outside the caching allocator: raw segments, host and managed memory.
struct Side<H> {
    host: H,
    blocks: HashMap<u64, SideBlock>,
    /// Freed host/managed blocks waiting for the events recorded on their streams.
    pending: Vec<(Vec<EventId>, u64, SideBlock)>,
    /// Pinned blocks whose work finished, kept for the next spill of about their size
    /// (address, bytes): pinning a block costs far more than using it (1.65 GB took 577 ms a
    /// step on the 2026-11-28 H200 run, the same logits spilled each step).
    cached: Vec<(u64, u64)>,
    /// Spills served from `cached`.
    num_host_reuses: u64,
    /// The most host and managed bytes held since the last `take_phase_peak`.
    phase_spilled_peak: u64,
    raw: TierCounters,
    host_ctr: TierCounters,
    managed: TierCounters,
    num_spills: u64,
    num_spill_failures: u64,
    num_leaked: u64,
    /// Blocks that could not be returned; still counted as held.
    leaked: Vec<SideBlock>,
}

/// A thread-safe allocator that places requests on the device first and
/// spills to host memory by the [`TierConfig`] policy (see the crate docs).
pub struct TieredAllocator<D: Device, H: HostMemory> {
    cfg: TierConfig,
    device: CachingAllocator<CappedDevice<D>>,
    side: Mutex<Side<H>>,
    /// Number of entries in `side.blocks` plus `side.pending`, so that freeing
    /// a device block needs no second lock when nothing has spilled.
    side_count: AtomicUsize,
    timers: Arc<Timers>,
    /// Step marks so far, device calls at the last mark, and between the last two.
    steps: AtomicU64,
    calls_at_mark: AtomicU64,
    last_step_calls: AtomicU64,
    plan: Mutex<Option<PlanStats>>,
}

impl<D: Device, H: HostMemory> std::fmt::Debug for TieredAllocator<D, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredAllocator")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

const HOST_ROUND: u64 = 4096;

/// Host and managed bytes placed for the caller now.
fn spilled_now<H>(s: &Side<H>) -> u64 {
    s.host_ctr.current_bytes + s.managed.current_bytes
}

fn cached_bytes<H>(s: &Side<H>) -> u64 {
    s.cached.iter().map(|&(_, size)| size).sum()
}

impl<D: Device, H: HostMemory> TieredAllocator<D, H> {
    /// An allocator over `dev` and `host` under `cfg`.
    pub fn new(dev: D, host: H, cfg: TierConfig) -> Result<Self, TierError> {
        let timers = Arc::new(Timers::new(cfg.timers));
        let device = CachingAllocator::new(
            CappedDevice::with_timers(dev, cfg.device_limit, timers.clone()),
            cfg.alloc.clone(),
        )?;
        Ok(TieredAllocator {
            cfg,
            device,
            side: Mutex::new(Side {
                host,
                blocks: HashMap::new(),
                pending: Vec::new(),
                cached: Vec::new(),
                num_host_reuses: 0,
                phase_spilled_peak: 0,
                raw: TierCounters::default(),
                host_ctr: TierCounters::default(),
                managed: TierCounters::default(),
                num_spills: 0,
                num_spill_failures: 0,
                num_leaked: 0,
                leaked: Vec::new(),
            }),
            side_count: AtomicUsize::new(0),
            timers,
            steps: AtomicU64::new(0),
            calls_at_mark: AtomicU64::new(0),
            last_step_calls: AtomicU64::new(0),
            plan: Mutex::new(None),
        })
    }

    /// The highest allocated bytes since the last call, spilled ones included: the device
    /// tier's high point ([`CachingAllocator::take_phase_peak`]) plus the most the host and
    /// managed tiers held since the last call (an upper bound, for the two high points may
    /// fall at different times). The planned tier's hooks read it at each phase boundary of
    /// the step they record; without the spilled bytes, a step recorded under the reactive
    /// tier looked smaller than it is (the 2026-11-28 H200 run's GPT-2 loop: its 1.65 GB
    /// logits spilled every step, out of the recorded peak), and the plan moved too little.
    pub fn take_phase_peak(&self) -> u64 {
        let device = self.device.take_phase_peak();
        let mut s = self.side();
        let spilled = s.phase_spilled_peak.max(spilled_now(&s));
        s.phase_spilled_peak = spilled_now(&s);
        device + spilled
    }

    /// Plans a recorded step ([`crate::plan::answer`]; JSON in, JSON out) and keeps what was
    /// decided for [`TieredAllocator::stats`].
    pub fn plan(&self, request: &str) -> Result<String, TierError> {
        let bad = |reason: String| TierError::Config {
            name: "vram_plan".into(),
            value: String::new(),
            reason,
        };
        let a = crate::plan::answer(request).map_err(bad)?;
        let ns = |s: f64| {
            if s.is_finite() {
                (s * 1e9).round() as u64
            } else {
                0
            }
        };
        let mut g = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        let plans = g.map_or(0, |p| p.plans) + 1;
        *g = Some(match &a.decision {
            Some(d) => PlanStats {
                plans,
                strategy: d.strategy.code(),
                moves: d.plan.moves.len() as u64,
                moved_bytes: 0,
                host_chunks: d.plan.host_chunks.len() as u64,
                predicted_ns: ns(d.outcome.step_s),
                stream_ns: if d.stream.fits {
                    ns(d.stream.step_s)
                } else {
                    0
                },
                host_update_ns: d
                    .host_update
                    .as_ref()
                    .filter(|h| h.fits)
                    .map_or(0, |h| ns(h.step_s)),
                floor_ns: ns(a.floor.step_s),
                native_ns: ns(a.floor.native_s),
            },
            None => PlanStats {
                plans,
                strategy: -1,
                floor_ns: ns(a.floor.step_s),
                native_ns: ns(a.floor.native_s),
                ..PlanStats::default()
            },
        });
        if let (Some(d), Some(p)) = (&a.decision, g.as_mut()) {
            p.moved_bytes = d.outcome.d2h_bytes;
        }
        serde_json::to_string(&a).map_err(|e| bad(e.to_string()))
    }

    /// The timers of this allocator's device calls and paths (the plug-in adds its own
    /// `ffi.*` ones).
    pub fn timers(&self) -> &Timers {
        &self.timers
    }

    /// The policy in force.
    pub fn config(&self) -> &TierConfig {
        &self.cfg
    }

    fn side(&self) -> MutexGuard<'_, Side<H>> {
        // Side state is updated only after each fallible call succeeds, so it
        // stays consistent even if a caller panicked while holding the lock.
        self.side.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sync_count(&self, s: &Side<H>) {
        self.side_count
            .store(s.blocks.len() + s.pending.len(), Ordering::Release);
    }

    /// Allocates `size` bytes for use on `stream`: on the device if it fits,
    /// else in the managed or host tier by the policy; else
    /// [`AllocError::OutOfMemory`] (inside [`TierError::Alloc`]).
    pub fn malloc(&self, size: u64, stream: u32) -> Result<u64, TierError> {
        let start = self.timers.start_sampled();
        let before = self.driver_mark();
        let r = self.place(size, stream, before.0);
        let path = match &r {
            Ok((_, p)) => *p,
            Err(_) => Timer::MallocFailed,
        };
        self.timers
            .stop_or(path, start, self.driver_time_since(before));
        r.map(|(a, _)| a)
    }

    #[inline]
    fn driver_mark(&self) -> (u64, u64) {
        (self.timers.driver_calls(), self.timers.driver_ns())
    }

    /// The driver time spent since `mark`, when a driver call was made (a path that made
    /// one is charged it when it was not sampled).
    #[inline]
    fn driver_time_since(&self, mark: (u64, u64)) -> Option<u64> {
        (self.timers.driver_calls() != mark.0).then(|| self.timers.driver_ns() - mark.1)
    }

    /// Places a request; returns the address and the path it took.
    fn place(&self, size: u64, stream: u32, calls: u64) -> Result<(u64, Timer), TierError> {
        let oom = match self.cfg.mode {
            Mode::Caching => match self.device.malloc(size, stream) {
                Ok(a) if self.timers.driver_calls() == calls => {
                    return Ok((a, Timer::MallocCached))
                }
                Ok(a) => return Ok((a, Timer::MallocSlow)),
                Err(AllocError::OutOfMemory(info)) => match self.migrate_and_retry(size, stream) {
                    Some(Ok(a)) => return Ok((a, Timer::MallocMigrated)),
                    Some(Err(e)) => return Err(e),
                    None => info,
                },
                Err(e) => return Err(e.into()),
            },
            Mode::Raw => {
                let mut s = self.side();
                let size = size.max(1);
                match self.device.with_device(|d| d.allocate(size)) {
                    Ok(a) => {
                        s.raw.add(size);
                        s.blocks.insert(
                            a,
                            SideBlock {
                                size,
                                tier: Tier::Device,
                                streams: vec![stream],
                            },
                        );
                        self.sync_count(&s);
                        return Ok((a, Timer::MallocSlow));
                    }
                    Err(DeviceError::OutOfMemory { .. }) => {
                        let (free, total) = self.device.with_device(|d| d.mem_info());
                        Box::new(OomInfo {
                            requested: size,
                            rounded: size,
                            stream,
                            device_total: total,
                            device_free: free,
                            allocated: s.raw.current_bytes,
                            reserved: s.raw.current_bytes,
                            cap: self.cfg.device_limit,
                        })
                    }
                    Err(e) => return Err(AllocError::Device(e).into()),
                }
            }
        };
        self.spill(size, stream, oom)
            .map(|a| (a, Timer::MallocSpilled))
    }

    /// Host bytes the tier may still use: the limit minus pinned blocks (in use or cached)
    /// and migrated pages.
    fn host_room(&self, s: &Side<H>) -> u64 {
        let migrated = self.device.memory_stats().migrated_bytes.current.max(0) as u64;
        self.cfg
            .host_limit
            .saturating_sub(s.host_ctr.current_bytes + cached_bytes(s) + migrated)
    }

    /// Returns cached pinned blocks to the driver, largest first, until the tier has room
    /// for `need` bytes (all of them when `need` is `u64::MAX`).
    fn release_cached(&self, s: &mut Side<H>, need: u64) {
        s.cached.sort_by_key(|&(_, size)| size);
        while self.host_room(s) < need {
            let Some((addr, size)) = s.cached.pop() else {
                break;
            };
            let t = self.timers.start();
            let r = s.host.free_pinned(addr);
            self.timers.stop(Timer::HostFree, t);
            if r.is_err() {
                s.num_leaked += 1;
                s.leaked.push(SideBlock {
                    size,
                    tier: Tier::Host,
                    streams: Vec::new(),
                });
                s.host_ctr.add(size);
            }
        }
    }

    /// Moves cold allocations to host memory to make room for `size` bytes
    /// and retries; `None` when nothing could move (or migration is off).
    fn migrate_and_retry(&self, size: u64, stream: u32) -> Option<Result<u64, TierError>> {
        if !self.cfg.migrate || self.cfg.host_limit == 0 {
            return None;
        }
        let room = {
            let mut s = self.side();
            self.process_pending(&mut s, false);
            self.host_room(&s)
        };
        // The request plus a page at each end (it need not line up with the
        // pages freed), less what the device has free under its cap.
        let (free, g) = self
            .device
            .with_device(|d| (d.mem_info().0, d.granularity()));
        let need = size.saturating_add(2 * g).saturating_sub(free);
        if self.device.evict_cold(need, room) == 0 {
            return None;
        }
        match self.device.malloc(size, stream) {
            Ok(a) => Some(Ok(a)),
            Err(AllocError::OutOfMemory(_)) => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    /// Marks the end of a training step (`vram_step()`): allocations alive
    /// across marks become candidates for the host, and moved ones come back
    /// when the device has room for them plus the last step's transient need.
    /// Returns the bytes brought back.
    pub fn mark_step(&self) -> u64 {
        let start = self.timers.start();
        self.device.mark_step();
        let back = self.device.rebalance();
        let calls = self.timers.driver_calls();
        let prev = self.calls_at_mark.swap(calls, Ordering::Relaxed);
        self.last_step_calls
            .store(calls.saturating_sub(prev), Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.timers.stop(Timer::MarkStep, start);
        back
    }

    fn spill(&self, size: u64, stream: u32, oom: Box<OomInfo>) -> Result<u64, TierError> {
        let mut s = self.side();
        self.process_pending(&mut s, false);
        let fail = |s: &mut Side<H>| {
            s.num_spill_failures += 1;
            Err(TierError::Alloc(AllocError::OutOfMemory(oom.clone())))
        };
        if size < self.cfg.spill_min || (self.cfg.host_limit == 0 && self.cfg.managed_limit == 0) {
            return fail(&mut s);
        }
        let rounded = size.max(1).div_ceil(HOST_ROUND) * HOST_ROUND;
        // Opt-in managed tier: never ask for more than the device has free.
        if s.managed.current_bytes + rounded <= self.cfg.managed_limit {
            let (free, _) = self.device.with_device(|d| d.inner().mem_info());
            if free >= rounded {
                let t = self.timers.start();
                let r = s.host.alloc_managed(rounded);
                self.timers.stop(Timer::HostAlloc, t);
                if let Ok(a) = r {
                    s.managed.add(rounded);
                    s.num_spills += 1;
                    s.blocks.insert(
                        a,
                        SideBlock {
                            size: rounded,
                            tier: Tier::Managed,
                            streams: vec![stream],
                        },
                    );
                    s.phase_spilled_peak = s.phase_spilled_peak.max(spilled_now(&s));
                    self.sync_count(&s);
                    return Ok(a);
                }
            }
        }
        if self.cfg.host_limit == 0 {
            return fail(&mut s);
        }
        // A cached pinned block of the size (at most an eighth larger): no driver call.
        let fit = (s.cached.iter().enumerate())
            .filter(|(_, &(_, sz))| sz >= rounded && sz - rounded <= rounded / 8)
            .min_by_key(|(_, &(a, sz))| (sz, a))
            .map(|(i, _)| i);
        if let Some(i) = fit {
            let (a, size) = s.cached.swap_remove(i);
            s.host_ctr.add(size);
            s.num_spills += 1;
            s.num_host_reuses += 1;
            s.blocks.insert(
                a,
                SideBlock {
                    size,
                    tier: Tier::Host,
                    streams: vec![stream],
                },
            );
            s.phase_spilled_peak = s.phase_spilled_peak.max(spilled_now(&s));
            self.sync_count(&s);
            return Ok(a);
        }
        if self.host_room(&s) < rounded && !s.pending.is_empty() {
            // Blocks freed but guarded by events still count; wait for them.
            self.process_pending(&mut s, true);
        }
        self.release_cached(&mut s, rounded);
        if self.host_room(&s) < rounded {
            return fail(&mut s);
        }
        let t = self.timers.start();
        let r = s.host.alloc_pinned(rounded);
        self.timers.stop(Timer::HostAlloc, t);
        match r {
            Ok(a) => {
                s.host_ctr.add(rounded);
                s.num_spills += 1;
                s.blocks.insert(
                    a,
                    SideBlock {
                        size: rounded,
                        tier: Tier::Host,
                        streams: vec![stream],
                    },
                );
                s.phase_spilled_peak = s.phase_spilled_peak.max(spilled_now(&s));
                self.sync_count(&s);
                Ok(a)
            }
            Err(_) => fail(&mut s),
        }
    }

    /// Frees an address from [`TieredAllocator::malloc`]. Host and managed
    /// blocks are returned once the work queued on their streams finishes.
    pub fn free(&self, addr: u64) -> Result<(), TierError> {
        let start = self.timers.start_sampled();
        let before = self.driver_mark();
        if self.side_count.load(Ordering::Acquire) == 0 {
            let r = self.device.free(addr);
            self.timers
                .stop_or(Timer::FreeDevice, start, self.driver_time_since(before));
            return Ok(r?);
        }
        let r = self.free_side(addr);
        self.timers
            .stop_or(Timer::FreeSide, start, self.driver_time_since(before));
        r
    }

    fn free_side(&self, addr: u64) -> Result<(), TierError> {
        let mut s = self.side();
        let Some(b) = s.blocks.remove(&addr) else {
            let had_pending = !s.pending.is_empty();
            if had_pending {
                self.process_pending(&mut s, false);
            }
            drop(s);
            return Ok(self.device.free(addr)?);
        };
        let result = match b.tier {
            Tier::Device => {
                let r = self.device.with_device(|d| d.release(addr));
                match r {
                    Ok(()) => {
                        s.raw.sub(b.size);
                        Ok(())
                    }
                    Err(e) => {
                        // Keep it: a segment the device refused to free is not reusable.
                        s.num_leaked += 1;
                        s.leaked.push(b);
                        Err(AllocError::Device(e).into())
                    }
                }
            }
            // (Side blocks are never `Migrated`: that tier is the caching allocator's.)
            Tier::Host | Tier::Managed | Tier::Migrated => {
                let mut events = Vec::with_capacity(b.streams.len());
                let mut ok = true;
                for &st in &b.streams {
                    match self.device.with_device(|d| d.record_event(st)) {
                        Ok(e) => events.push(e),
                        Err(_) => ok = false,
                    }
                }
                if ok {
                    s.pending.push((events, addr, b));
                } else {
                    // Without an event we cannot know when the device is done
                    // with it: never return it (a leak, not a use-after-free).
                    s.num_leaked += 1;
                    s.leaked.push(b);
                }
                self.process_pending(&mut s, false);
                Ok(())
            }
        };
        self.sync_count(&s);
        result
    }

    /// Returns host/managed blocks whose events completed (all of them,
    /// waiting, when `wait`).
    fn process_pending(&self, s: &mut Side<H>, wait: bool) {
        let mut i = 0;
        while i < s.pending.len() {
            let done = {
                let events = &mut s.pending[i].0;
                let mut remaining = Vec::new();
                for &e in events.iter() {
                    let r = self.device.with_device(|d| {
                        if wait {
                            d.synchronize_event(e).map(|()| true)
                        } else {
                            d.query_event(e)
                        }
                    });
                    if !matches!(r, Ok(true)) {
                        remaining.push(e);
                    }
                }
                *events = remaining;
                events.is_empty()
            };
            if !done {
                i += 1;
                continue;
            }
            let (_, addr, b) = s.pending.swap_remove(i);
            if b.tier == Tier::Host {
                // Kept pinned for the next spill of its size (`release_cached` returns it).
                s.host_ctr.sub(b.size);
                s.cached.push((addr, b.size));
                continue;
            }
            let t = self.timers.start();
            let r = match b.tier {
                Tier::Managed => s.host.free_managed(addr),
                _ => s.host.free_pinned(addr),
            };
            self.timers.stop(Timer::HostFree, t);
            match (r, b.tier) {
                (Ok(()), Tier::Managed) => s.managed.sub(b.size),
                (Ok(()), _) => s.host_ctr.sub(b.size),
                (Err(_), _) => {
                    s.num_leaked += 1;
                    s.leaked.push(b);
                }
            }
        }
        self.sync_count(s);
    }

    /// Marks the allocation at `addr` as used on `stream` (PyTorch `recordStream`).
    pub fn record_stream(&self, addr: u64, stream: u32) -> Result<(), TierError> {
        let mut s = self.side();
        if let Some(b) = s.blocks.get_mut(&addr) {
            if !b.streams.contains(&stream) {
                b.streams.push(stream);
            }
            return Ok(());
        }
        drop(s);
        Ok(self.device.record_stream(addr, stream)?)
    }

    /// Which tier holds `addr`: [`Tier::Host`] or [`Tier::Managed`] for
    /// spilled blocks, [`Tier::Migrated`] for a live device allocation whose
    /// pages were moved to host memory, [`Tier::Device`] for raw segments and
    /// any other address in caching mode (the caching allocator does not
    /// tell its own addresses from unknown ones here); `None` for an unknown
    /// address in raw mode.
    pub fn tier_of(&self, addr: u64) -> Option<Tier> {
        if let Some(b) = self.side().blocks.get(&addr) {
            return Some(b.tier);
        }
        match self.cfg.mode {
            Mode::Caching if self.device.is_migrated(addr) => Some(Tier::Migrated),
            Mode::Caching => Some(Tier::Device),
            Mode::Raw => None,
        }
    }

    /// Whether `addr` lives outside device memory.
    pub fn is_spilled(&self, addr: u64) -> bool {
        matches!(self.tier_of(addr), Some(Tier::Host | Tier::Managed))
    }

    /// Returns cached device blocks to the device and waits for freed host
    /// blocks so that they are returned too, with the cached pinned blocks
    /// (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) {
        let mut s = self.side();
        self.process_pending(&mut s, true);
        self.release_cached(&mut s, u64::MAX);
        drop(s);
        self.device.empty_cache();
    }

    /// Statistics of every tier.
    pub fn stats(&self) -> TierStats {
        let s = self.side();
        TierStats {
            device: self.device.memory_stats(),
            raw: s.raw,
            host: s.host_ctr,
            managed: s.managed,
            num_spills: s.num_spills,
            host_cached_bytes: cached_bytes(&s),
            num_host_reuses: s.num_host_reuses,
            num_spill_failures: s.num_spill_failures,
            num_leaked: s.num_leaked,
            device_used_bytes: self.device.with_device(|d| d.used()),
            device_limit: self.cfg.device_limit,
            host_limit: self.cfg.host_limit,
            timers: self.timers.snapshot(),
            num_steps: self.steps.load(Ordering::Relaxed),
            last_step_driver_calls: self.last_step_calls.load(Ordering::Relaxed),
            plan: *self.plan.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Resets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        let mut s = self.side();
        s.raw.reset_peak();
        s.host_ctr.reset_peak();
        s.managed.reset_peak();
        drop(s);
        self.device.reset_peak_stats();
    }

    /// `torch.cuda.memory_summary()` for the device tier, followed by one
    /// line per other tier.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        let st = self.stats();
        let mut out = self.device.memory_summary(abbreviated);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let _ = writeln!(
            out,
            "vramkit tiers: device used {:.1} MiB (limit {}); spills {}, spill failures {}, leaked {}",
            mib(st.device_used_bytes),
            st.device_limit.map_or("none".to_string(), |l| format!("{:.1} MiB", mib(l))),
            st.num_spills,
            st.num_spill_failures,
            st.num_leaked
        );
        let d = &st.device;
        let _ = writeln!(
            out,
            "  migrated current {:>10.1} MiB, peak {:>10.1} MiB; migrations to host {}, back {}",
            mib(d.migrated_bytes.current.max(0) as u64),
            mib(d.migrated_bytes.peak.max(0) as u64),
            d.num_migrations_to_host,
            d.num_migrations_to_device
        );
        for (name, c) in [("raw", st.raw), ("host", st.host), ("managed", st.managed)] {
            let _ = writeln!(
                out,
                "  {name:<8} current {:>10.1} MiB in {:>6} blocks, peak {:>10.1} MiB, allocations {}",
                mib(c.current_bytes),
                c.current_count,
                mib(c.peak_bytes),
                c.num_allocs
            );
        }
        out
    }

    /// The device tier's segments, blocks and history
    /// (`torch.cuda.memory._snapshot()`).
    pub fn snapshot(&self) -> Snapshot {
        self.device.snapshot()
    }

    /// Runs `f` on the device (to register streams, inject faults, ...).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        self.device.with_device(|c| f(c.inner_mut()))
    }

    /// Runs `f` on the host tier's memory.
    pub fn with_host<R>(&self, f: impl FnOnce(&mut H) -> R) -> R {
        f(&mut self.side().host)
    }

    /// Checks the device tier's invariants and that every tier's current
    /// counters equal a recount of its blocks.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.device.check_invariants()?;
        let s = self.side();
        let mut count: HashMap<Tier, (u64, u64)> = HashMap::new();
        let pending = s.pending.iter().map(|(_, _, b)| b);
        for b in s.blocks.values().chain(pending).chain(&s.leaked) {
            let e = count.entry(b.tier).or_default();
            e.0 += b.size;
            e.1 += 1;
        }
        for (tier, c) in [
            (Tier::Device, s.raw),
            (Tier::Host, s.host_ctr),
            (Tier::Managed, s.managed),
        ] {
            let (bytes, n) = count.get(&tier).copied().unwrap_or_default();
            if (bytes, n) != (c.current_bytes, c.current_count) {
                return Err(format!(
                    "{tier:?} tier counts {} bytes in {} blocks, recount {bytes} in {n}",
                    c.current_bytes, c.current_count
                ));
            }
        }
        if self.side_count.load(Ordering::Acquire) != s.blocks.len() + s.pending.len() {
            return Err("side count out of date".into());
        }
        let migrated = self.device.memory_stats().migrated_bytes.current.max(0) as u64;
        let held = s.host_ctr.current_bytes + cached_bytes(&s);
        if (migrated > 0 || !s.cached.is_empty()) && held + migrated > self.cfg.host_limit {
            return Err(format!(
                "host tier holds {held} pinned (cached included) + {migrated} migrated bytes, \
                 over its limit {}",
                self.cfg.host_limit
            ));
        }
        Ok(())
    }
}
