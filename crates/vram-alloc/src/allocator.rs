//! The caching allocator.

use crate::device::{Device, DeviceError, EventId, Location};
use crate::error::{AllocError, OomInfo};
use crate::freeindex::{key_size, mk_key, FreeIndex, Key, SIZE_MASK};
use crate::policy::{
    allocation_size, round_size, AllocatorConfig, Policy, LARGE_BUFFER, MIN_BLOCK_SIZE,
    SMALL_BUFFER, SMALL_SIZE, VRAMKIT_LARGE_CHUNK,
};
use crate::snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot, TraceAction, TraceEntry};
use crate::stats::{bump, Counters, MemoryStats, LARGE, SMALL};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

const NIL: u32 = u32::MAX;

/// A multiplicative hasher for `u64` addresses (addresses are already well spread).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // splitmix64's finalizer: addresses are multiples of 512 and share
        // their high bits, so both ends of the hash need mixing.
        let mut x = n;
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = x ^ (x >> 31);
    }
}

type AddrMap = HashMap<u64, u32, BuildHasherDefault<AddrHasher>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Allocated,
    /// Freed by the caller, waiting for events on the streams that used it.
    Pending,
}

#[derive(Debug, Clone)]
struct Block {
    addr: u64,
    size: u64,
    requested: u64,
    stream: u32,
    seg: u32,
    prev: u32,
    next: u32,
    state: State,
    mapped: bool,
    pool: usize,
    events: u32,
    /// Allocation clock when handed out.
    born: u64,
    /// Step (see `mark_step`) when handed out.
    born_step: u32,
}

#[derive(Debug, Clone)]
struct Segment {
    base: u64,
    len: u64,
    stream: u32,
    pool: usize,
    expandable: bool,
    head: u32,
    alive: bool,
}

/// Largest request the allocator accepts (256 TiB); larger is out of memory.
const MAX_SIZE: u64 = SIZE_MASK;

/// The largest request a [`CachingAllocator`] places (2^48 - 1 bytes: its blocks' sizes are
/// 48-bit keys); a larger one is refused as out of memory whatever the device's size.
pub const MAX_REQUEST: u64 = MAX_SIZE;
/// Streams are identified by 16-bit numbers.
const MAX_STREAM: u32 = u16::MAX as u32;

enum Fail {
    Oom,
    Dev(DeviceError),
}

#[derive(Clone)]
struct Inner<D> {
    dev: D,
    cfg: AllocatorConfig,
    max_split: u64,
    cap: Option<u64>,
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    segs: Vec<Segment>,
    free_segs: Vec<u32>,
    free: [FreeIndex; 3],
    /// Streams other than its own that an allocated block was used on (`record_stream`).
    uses: HashMap<u32, Vec<u32>>,
    active: AddrMap,
    pending: Vec<(EventId, u32)>,
    expandable: Vec<(u32, usize, u32)>,
    stats: Counters,
    history: Option<(usize, VecDeque<TraceEntry>)>,
    clock: u64,
    /// Live blocks whose interior pages live in host memory: block -> `[lo, hi)`.
    /// `(lo, hi, on_host)`: `on_host` false once freed and unmapped, until the
    /// block is free and the hole is cut out of it.
    host: HashMap<u32, (u64, u64, bool)>,
    /// Allocations so far (the age clock).
    mallocs: u64,
    /// Steps marked so far.
    step: u32,
    /// Peak allocated bytes since the last step mark.
    step_peak: i64,
    /// Peak allocated bytes since the last `take_phase_peak`.
    phase_peak: i64,
    /// Allocated bytes at the last step mark.
    step_start: i64,
    /// How far the last complete step rose above its start (its transient need).
    transient: i64,
}

/// A thread-safe caching allocator over a [`Device`].
///
/// ```
/// use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};
/// let alloc = CachingAllocator::new(SimDevice::new(1 << 30), AllocatorConfig::new(Policy::PyTorch))?;
/// let p = alloc.malloc(1000, 0)?;          // rounded to 1024 B, from a 2 MiB small segment
/// alloc.free(p)?;                          // cached, not returned to the device
/// let stats = alloc.memory_stats();
/// assert_eq!(stats.reserved_bytes[0].current, 2 << 20);
/// assert_eq!(stats.allocated_bytes[0].peak, 1024);
/// # Ok::<(), vram_alloc::AllocError>(())
/// ```
pub struct CachingAllocator<D: Device> {
    inner: Mutex<Inner<D>>,
}

impl<D: Device> std::fmt::Debug for CachingAllocator<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator").finish_non_exhaustive()
    }
}

impl<D: Device> CachingAllocator<D> {
    /// An allocator drawing from `dev` under `cfg`.
    pub fn new(dev: D, cfg: AllocatorConfig) -> Result<Self, AllocError> {
        cfg.validate()?;
        let (_, total) = dev.mem_info();
        let cap = cfg.memory_fraction.map(|f| (total as f64 * f) as u64);
        let max_split = cfg.max_split_size.unwrap_or(u64::MAX);
        let stats = Counters {
            max_split_size: i64::try_from(max_split).unwrap_or(i64::MAX),
            ..Counters::default()
        };
        Ok(CachingAllocator {
            inner: Mutex::new(Inner {
                dev,
                history: cfg.history.map(|n| (n, VecDeque::new())),
                cfg,
                max_split,
                cap,
                blocks: Vec::new(),
                free_slots: Vec::new(),
                segs: Vec::new(),
                free_segs: Vec::new(),
                free: Default::default(),
                uses: HashMap::new(),
                active: AddrMap::default(),
                pending: Vec::new(),
                expandable: Vec::new(),
                stats,
                clock: 0,
                host: HashMap::new(),
                mallocs: 0,
                step: 0,
                step_peak: 0,
                phase_peak: 0,
                step_start: 0,
                transient: 0,
            }),
        })
    }

    /// An independent copy of this allocator and its device as they are now: what the same
    /// calls do from here on does not touch the original. Replays that share a prefix run it
    /// once and fork (`vram_model`'s search for the smallest device that runs a step).
    pub fn fork(&self) -> Self
    where
        D: Clone,
    {
        CachingAllocator {
            inner: Mutex::new(self.lock().clone()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<D>> {
        // A panic while holding the lock cannot leave half-updated state
        // visible in a way we could repair; keep serving (state is checked by
        // `check_invariants` in tests).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `size` bytes for use on `stream`; returns the device address.
    /// Out of memory is returned as [`AllocError::OutOfMemory`].
    pub fn malloc(&self, size: u64, stream: u32) -> Result<u64, AllocError> {
        self.lock().malloc(size, stream)
    }

    /// Frees an address returned by [`CachingAllocator::malloc`]. If the block
    /// was used on other streams, it becomes reusable once events recorded on
    /// those streams complete.
    pub fn free(&self, addr: u64) -> Result<(), AllocError> {
        self.lock().free(addr)
    }

    /// Marks the allocation at `addr` as used on `stream` (PyTorch `recordStream`).
    pub fn record_stream(&self, addr: u64, stream: u32) -> Result<(), AllocError> {
        let mut g = self.lock();
        let idx = *g
            .active
            .get(&addr)
            .ok_or(AllocError::InvalidAddress { addr })?;
        if stream != g.blocks[idx as usize].stream {
            let u = g.uses.entry(idx).or_default();
            if !u.contains(&stream) {
                u.push(stream);
            }
        }
        Ok(())
    }

    /// Returns every cached block that can be returned to the device
    /// (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) {
        self.lock().release_cached_blocks();
    }

    /// A copy of the statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.lock().stats.snapshot()
    }

    /// Resets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        self.lock().stats.reset_peak();
    }

    /// `torch.cuda.memory_summary()` text.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        self.lock().stats.snapshot().summary(0, abbreviated)
    }

    /// Fraction of reserved bytes not allocated: `1 - allocated / reserved`
    /// (0 when nothing is reserved).
    pub fn fragmentation(&self) -> f64 {
        let g = self.lock();
        let r = g.stats.reserved_bytes.current_all();
        if r <= 0 {
            0.0
        } else {
            1.0 - g.stats.allocated_bytes.current_all() as f64 / r as f64
        }
    }

    /// Segments, blocks and recorded history, as `torch.cuda.memory._snapshot()`.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot()
    }

    /// Marks the end of a training step (the plug-in's `vram_step()`): blocks
    /// alive across a mark are long-lived, and the step's peak sets the room
    /// [`CachingAllocator::rebalance`] keeps free.
    pub fn mark_step(&self) {
        let mut g = self.lock();
        g.step += 1;
        let now = g.stats.allocated_bytes.current_all();
        g.transient = (g.step_peak - g.step_start).max(0);
        g.step_start = now;
        g.step_peak = now;
    }

    /// The highest allocated bytes since the last call (or since the allocator was made),
    /// and starts the next phase's count at the bytes allocated now: the planned host tier's
    /// hooks call it at each phase boundary of a recorded step.
    pub fn take_phase_peak(&self) -> u64 {
        let mut g = self.lock();
        let now = g.stats.allocated_bytes.current_all();
        let peak = g.phase_peak.max(now);
        g.phase_peak = now;
        peak.max(0) as u64
    }

    /// Moves the whole pages inside the live allocation at `addr` to host
    /// memory at the same addresses ([`Device::migrate`]); returns the bytes
    /// moved (0 when the block has no whole page of its own, is not in an
    /// expandable segment, or already moved). Pages shared with neighbours
    /// stay on the device.
    pub fn migrate_to_host(&self, addr: u64) -> Result<u64, AllocError> {
        let mut g = self.lock();
        let idx = *g
            .active
            .get(&addr)
            .ok_or(AllocError::InvalidAddress { addr })?;
        g.move_to_host(idx).map_err(AllocError::from)
    }

    /// Brings the pages of the allocation at `addr` back from host memory;
    /// returns the bytes moved. Out of device memory is an error and changes
    /// nothing.
    pub fn migrate_to_device(&self, addr: u64) -> Result<u64, AllocError> {
        let mut g = self.lock();
        let idx = *g
            .active
            .get(&addr)
            .ok_or(AllocError::InvalidAddress { addr })?;
        g.move_to_device(idx).map_err(AllocError::from)
    }

    /// Moves cold allocations to host memory until `need` bytes of device
    /// memory were freed, never moving more than `host_room` bytes in all;
    /// returns the bytes moved. Cold means long-lived: allocated before the
    /// last step mark, newest first, largest first on ties: optimizer states
    /// (created by the first optimizer step) before weights (created before
    /// it), and the weights of the last layers before the first layers'.
    /// With no mark yet, blocks from the first half of the allocations so far
    /// qualify, oldest first (the weights before any early activation).
    pub fn evict_cold(&self, need: u64, host_room: u64) -> u64 {
        self.lock().evict_cold(need, host_room)
    }

    /// Brings moved allocations back while the device has room for them plus
    /// the headroom the last complete step needed above its starting point
    /// (its peak allocated bytes minus those live at its start mark); oldest
    /// first. Cached free pages count as room: when they are needed, the
    /// cache is released first (one synchronisation, only when something
    /// comes back). Returns the bytes brought back.
    pub fn rebalance(&self) -> u64 {
        self.lock().rebalance()
    }

    /// Whether the live allocation at `addr` has pages in host memory (moved by
    /// [`CachingAllocator::migrate_to_host`] or [`CachingAllocator::evict_cold`]).
    pub fn is_migrated(&self, addr: u64) -> bool {
        let g = self.lock();
        g.active
            .get(&addr)
            .is_some_and(|i| matches!(g.host.get(i), Some(&(_, _, true))))
    }

    /// `(allocation address, pages start, pages end, on host)` for every live
    /// allocation whose pages were moved to host memory.
    pub fn host_ranges(&self) -> Vec<(u64, u64, u64)> {
        let g = self.lock();
        let mut v: Vec<(u64, u64, u64)> = g
            .host
            .iter()
            .filter(|(_, r)| r.2)
            .map(|(&i, r)| (g.blocks[i as usize].addr, r.0, r.1))
            .collect();
        v.sort_unstable();
        v
    }

    /// Runs `f` on the device (for example to inject a fault or complete a stream).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        f(&mut self.lock().dev)
    }

    /// Verifies the allocator's invariants: blocks tile each segment without
    /// overlap, every byte is accounted for, no two free neighbours are left
    /// uncoalesced, the free sets hold exactly the free mapped blocks, and the
    /// current statistics equal a recount. Returns a description of the first
    /// violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.lock().check()
    }
}

impl<D: Device> Inner<D> {
    #[inline(always)]
    fn trace(&mut self, action: TraceAction, addr: u64, size: u64, stream: u32) {
        if self.history.is_some() {
            self.record(action, addr, size, stream);
        }
    }

    #[cold]
    #[inline(never)]
    fn record(&mut self, action: TraceAction, addr: u64, size: u64, stream: u32) {
        if let Some((max, h)) = &mut self.history {
            self.clock += 1;
            if h.len() >= *max {
                h.pop_front();
            }
            h.push_back(TraceEntry {
                action,
                addr,
                size,
                stream: stream.into(),
                time_us: self.clock,
                category: None,
                device_free: 0,
            });
        }
    }

    fn new_block(&mut self, b: Block) -> u32 {
        if let Some(i) = self.free_slots.pop() {
            self.blocks[i as usize] = b;
            i
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as u32
        }
    }

    fn drop_block(&mut self, i: u32) {
        let b = &mut self.blocks[i as usize];
        b.state = State::Free;
        b.prev = NIL;
        b.next = NIL;
        b.size = 0;
        if !self.uses.is_empty() {
            self.uses.remove(&i);
        }
        self.free_slots.push(i);
    }

    fn new_seg(&mut self, s: Segment) -> u32 {
        if let Some(i) = self.free_segs.pop() {
            self.segs[i as usize] = s;
            i
        } else {
            self.segs.push(s);
            (self.segs.len() - 1) as u32
        }
    }

    #[inline]
    fn key(&self, i: u32) -> Key {
        let b = &self.blocks[i as usize];
        mk_key(b.stream, b.size, b.addr)
    }

    #[inline]
    fn insert_free(&mut self, i: u32) {
        let k = self.key(i);
        let pool = self.blocks[i as usize].pool;
        self.free[pool].insert(k, i);
    }

    #[inline]
    fn remove_free(&mut self, i: u32) {
        let k = self.key(i);
        let pool = self.blocks[i as usize].pool;
        self.free[pool].remove(k);
    }

    fn seg_expandable(&self, i: u32) -> bool {
        self.segs[self.blocks[i as usize].seg as usize].expandable
    }

    fn is_split(&self, i: u32) -> bool {
        let b = &self.blocks[i as usize];
        b.prev != NIL || b.next != NIL
    }

    fn malloc(&mut self, size: u64, stream: u32) -> Result<u64, AllocError> {
        if !self.pending.is_empty() {
            self.process_events();
        }
        if stream > MAX_STREAM {
            return Err(AllocError::InvalidStream { stream });
        }
        let rounded = round_size(size);
        let pool = if rounded <= SMALL_SIZE { SMALL } else { LARGE };
        if rounded > MAX_SIZE {
            return Err(self.oom(size, rounded, stream));
        }
        let idx = match self.get_free_block(pool, stream, rounded) {
            Some(i) => i,
            None => self.alloc_slow(size, rounded, pool, stream)?,
        };
        Ok(self.finish_alloc(idx, rounded, size))
    }

    fn get_free_block(&mut self, pool: usize, stream: u32, size: u64) -> Option<u32> {
        let (k, idx) = self.free[pool].lower_bound(stream, size)?;
        let bsize = key_size(k);
        // Do not return an oversized block for a small request, and round an
        // oversized request up by at most kLargeBuffer (PyTorch get_free_block).
        if size < self.max_split && bsize >= self.max_split {
            return None;
        }
        if size >= self.max_split && bsize >= size.saturating_add(LARGE_BUFFER) {
            return None;
        }
        self.remove_free(idx);
        Some(idx)
    }

    fn should_split(&self, i: u32, size: u64) -> bool {
        let b = &self.blocks[i as usize];
        let remaining = b.size - size;
        if b.pool == SMALL || self.cfg.policy.is_expandable() {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.max_split && remaining > SMALL_SIZE
        }
    }

    fn finish_alloc(&mut self, idx: u32, rounded: u64, requested: u64) -> u64 {
        let expandable = self.seg_expandable(idx);
        let already_split = self.is_split(idx);
        let pool = self.blocks[idx as usize].pool;
        if self.should_split(idx, rounded) {
            let b = &self.blocks[idx as usize];
            let rem = Block {
                addr: b.addr + rounded,
                size: b.size - rounded,
                requested: 0,
                stream: b.stream,
                seg: b.seg,
                prev: idx,
                next: b.next,
                state: State::Free,
                mapped: true,
                pool,
                events: 0,
                born: 0,
                born_step: 0,
            };
            let rem_size = rem.size;
            let next = rem.next;
            let r = self.new_block(rem);
            if next != NIL {
                self.blocks[next as usize].prev = r;
            }
            let b = &mut self.blocks[idx as usize];
            b.next = r;
            b.size = rounded;
            self.insert_free(r);
            if !expandable {
                if already_split {
                    self.stats.inactive_split_bytes.dec(pool, rounded as i64);
                } else {
                    self.stats.inactive_split_bytes.inc(pool, rem_size as i64);
                    self.stats.inactive_split.inc(pool, 1);
                }
            }
        } else if already_split && !expandable {
            let sz = self.blocks[idx as usize].size as i64;
            self.stats.inactive_split_bytes.dec(pool, sz);
            self.stats.inactive_split.dec(pool, 1);
        }
        self.mallocs += 1;
        let (mallocs, step) = (self.mallocs, self.step);
        let b = &mut self.blocks[idx as usize];
        b.state = State::Allocated;
        b.requested = requested;
        b.born = mallocs;
        b.born_step = step;
        let (addr, bsize, stream) = (b.addr, b.size, b.stream);
        self.active.insert(addr, idx);
        let st = &mut self.stats;
        st.allocation.inc(pool, 1);
        st.allocated_bytes.inc(pool, bsize as i64);
        st.active.inc(pool, 1);
        st.active_bytes.inc(pool, bsize as i64);
        st.requested_bytes.inc(pool, requested as i64);
        let now = st.allocated_bytes.current_all();
        self.step_peak = self.step_peak.max(now);
        self.phase_peak = self.phase_peak.max(now);
        if bsize >= self.max_split {
            st.oversize_allocations.add(1);
        }
        self.trace(TraceAction::Alloc, addr, bsize, stream);
        addr
    }

    fn free(&mut self, addr: u64) -> Result<(), AllocError> {
        let idx = self
            .active
            .remove(&addr)
            .ok_or(AllocError::InvalidAddress { addr })?;
        // Record events first so that a failing device leaves the block allocated.
        let mut events = Vec::new();
        if !self.uses.is_empty() {
            if let Some(uses) = self.uses.get(&idx).cloned() {
                for s in uses {
                    match self.dev.record_event(s) {
                        Ok(e) => events.push(e),
                        Err(e) => {
                            self.active.insert(addr, idx);
                            return Err(e.into());
                        }
                    }
                }
                self.uses.remove(&idx);
            }
        }
        // Host memory behind the block goes back (its contents are dead; the
        // CUDA backend waits for the device before unmapping).
        if let Some(&(lo, hi, true)) = self.host.get(&idx) {
            if let Err(e) = self.dev.unmap(lo, hi - lo) {
                self.active.insert(addr, idx);
                return Err(e.into());
            }
            self.host.insert(idx, (lo, hi, false));
            self.stats.migrated_bytes.add(-((hi - lo) as i64));
            self.stats.num_device_free += 1;
            let stream = self.blocks[idx as usize].stream;
            self.trace(TraceAction::SegmentUnmap, lo, hi - lo, stream);
        }
        let b = &mut self.blocks[idx as usize];
        let (pool, size, stream) = (b.pool, b.size, b.stream);
        self.stats.allocation.dec(pool, 1);
        self.stats.allocated_bytes.dec(pool, size as i64);
        if size >= self.max_split {
            self.stats.oversize_allocations.add(-1);
        }
        self.trace(TraceAction::FreeRequested, addr, size, stream);
        if events.is_empty() {
            self.free_block(idx);
        } else {
            let b = &mut self.blocks[idx as usize];
            b.state = State::Pending;
            b.events = events.len() as u32;
            self.pending.extend(events.into_iter().map(|e| (e, idx)));
        }
        Ok(())
    }

    fn free_block(&mut self, idx: u32) {
        let b = &mut self.blocks[idx as usize];
        b.state = State::Free;
        b.events = 0;
        let (addr, orig, requested, pool, prev, next, stream) = (
            b.addr,
            b.size,
            b.requested,
            b.pool,
            b.prev,
            b.next,
            b.stream,
        );
        let expandable = self.seg_expandable(idx);
        let mut net_cnt = 0i64;
        let mut net_bytes = 0i64;
        for cand in [prev, next] {
            let sub = self.try_merge(idx, cand);
            if sub > 0 {
                net_cnt -= 1;
                net_bytes -= sub as i64;
            }
        }
        self.insert_free(idx);
        if self.is_split(idx) {
            net_cnt += 1;
            net_bytes += self.blocks[idx as usize].size as i64;
        }
        let st = &mut self.stats;
        if !expandable {
            st.inactive_split.add(pool, net_cnt);
            st.inactive_split_bytes.add(pool, net_bytes);
        }
        st.active.dec(pool, 1);
        st.active_bytes.dec(pool, orig as i64);
        st.requested_bytes.dec(pool, requested as i64);
        self.trace(TraceAction::FreeCompleted, addr, orig, stream);
        // (`remove` hashes even on an empty map: skip it on the hot path.)
        if let Some((lo, hi, on_host)) = (!self.host.is_empty())
            .then(|| self.host.remove(&idx))
            .flatten()
        {
            debug_assert!(!on_host);
            // Cut the unmapped hole out of the free block.
            self.stats.reserved_bytes.inc(pool, (hi - lo) as i64);
            self.unmap_pages(idx, lo, hi, false);
        }
    }

    /// Merges free neighbour `src` into `dst` (which is not in a free set);
    /// returns the bytes subsumed (0 if no merge).
    fn try_merge(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let s = &self.blocks[src as usize];
        if s.state != State::Free || s.mapped != self.blocks[dst as usize].mapped {
            return 0;
        }
        if s.mapped {
            self.remove_free(src);
        }
        let s = &self.blocks[src as usize];
        let (s_addr, s_size, s_prev, s_next, seg) =
            (s.addr, s.size, s.prev, s.next, s.seg as usize);
        let d = &mut self.blocks[dst as usize];
        if d.prev == src {
            d.addr = s_addr;
            d.prev = s_prev;
            if s_prev != NIL {
                self.blocks[s_prev as usize].next = dst;
            } else {
                self.segs[seg].head = dst;
            }
        } else {
            d.next = s_next;
            if s_next != NIL {
                self.blocks[s_next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s_size;
        self.drop_block(src);
        s_size
    }

    fn process_events(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let (ev, idx) = self.pending[i];
            if self.dev.query_event(ev).unwrap_or(false) {
                self.pending.swap_remove(i);
                self.complete_event(idx);
            } else {
                i += 1;
            }
        }
    }

    fn complete_event(&mut self, idx: u32) {
        let b = &mut self.blocks[idx as usize];
        b.events = b.events.saturating_sub(1);
        if b.events == 0 {
            self.free_block(idx);
        }
    }

    fn synchronize_and_free_events(&mut self) {
        self.stats.num_sync_all_streams += 1;
        for (ev, idx) in std::mem::take(&mut self.pending) {
            // A failed synchronize still ends the wait: the block is freed
            // (the simulated device never fails here; a real backend records it).
            let _ = self.dev.synchronize_event(ev);
            self.complete_event(idx);
        }
    }

    /// Device bytes mapped but not in use in `pool` (host-located pages of
    /// live blocks, which only whole large-pool units can be, excluded).
    fn cached(&self, pool: usize) -> i64 {
        let moved = if pool == LARGE {
            self.stats.migrated_bytes.current
        } else {
            0
        };
        self.stats.reserved_bytes.current(pool) - (self.stats.active_bytes.current(pool) - moved)
    }

    fn reserved(&self) -> u64 {
        self.stats.reserved_bytes.current_all().max(0) as u64
    }

    fn alloc_slow(
        &mut self,
        size: u64,
        rounded: u64,
        pool: usize,
        stream: u32,
    ) -> Result<u32, AllocError> {
        if self.cfg.garbage_collection_threshold.is_some() {
            self.garbage_collect();
        }
        match self.alloc_block(rounded, pool, stream) {
            Ok(i) => return Ok(i),
            Err(Fail::Dev(e)) => return Err(e.into()),
            Err(Fail::Oom) => {}
        }
        if self.max_split != u64::MAX && self.release_available_cached_blocks(rounded, pool, stream)
        {
            match self.alloc_block(rounded, pool, stream) {
                Ok(i) => return Ok(i),
                Err(Fail::Dev(e)) => return Err(e.into()),
                Err(Fail::Oom) => {}
            }
        }
        self.release_cached_blocks();
        // Blocks whose events were just synchronized may fit now.
        if let Some(i) = self.get_free_block(pool, stream, rounded) {
            return Ok(i);
        }
        self.stats.num_alloc_retries += 1;
        match self.alloc_block(rounded, pool, stream) {
            Ok(i) => return Ok(i),
            Err(Fail::Dev(e)) => return Err(e.into()),
            Err(Fail::Oom) => {}
        }
        Err(self.oom(size, rounded, stream))
    }

    fn oom(&mut self, size: u64, rounded: u64, stream: u32) -> AllocError {
        self.stats.num_ooms += 1;
        let (device_free, device_total) = self.dev.mem_info();
        self.trace(TraceAction::Oom, 0, rounded, stream);
        if let Some(e) = self.history.as_mut().and_then(|(_, h)| h.back_mut()) {
            e.device_free = device_free;
        }
        AllocError::OutOfMemory(Box::new(OomInfo {
            requested: size,
            rounded,
            stream,
            device_total,
            device_free,
            allocated: self.stats.allocated_bytes.current_all().max(0) as u64,
            reserved: self.reserved(),
            cap: self.cap,
        }))
    }

    fn over_cap(&self, extra: u64) -> bool {
        self.cap
            .is_some_and(|c| self.reserved().saturating_add(extra) > c)
    }

    fn alloc_block(&mut self, rounded: u64, pool: usize, stream: u32) -> Result<u32, Fail> {
        if self.cfg.policy.is_expandable() {
            return self.alloc_expandable(rounded, pool, stream);
        }
        let size = allocation_size(rounded);
        if self.over_cap(size) {
            return Err(Fail::Oom);
        }
        let addr = match self.dev.allocate(size) {
            Ok(a) => a,
            Err(DeviceError::OutOfMemory { .. }) => return Err(Fail::Oom),
            Err(e) => return Err(Fail::Dev(e)),
        };
        let seg = self.new_seg(Segment {
            base: addr,
            len: size,
            stream,
            pool,
            expandable: false,
            head: NIL,
            alive: true,
        });
        let b = self.new_block(Block {
            addr,
            size,
            requested: 0,
            stream,
            seg,
            prev: NIL,
            next: NIL,
            state: State::Free,
            mapped: true,
            pool,
            events: 0,
            born: 0,
            born_step: 0,
        });
        self.segs[seg as usize].head = b;
        self.stats.segment.inc(pool, 1);
        self.stats.reserved_bytes.inc(pool, size as i64);
        if size >= self.max_split {
            self.stats.oversize_segments.add(1);
        }
        self.stats.num_device_alloc += 1;
        self.trace(TraceAction::SegmentAlloc, addr, size, stream);
        Ok(b)
    }

    /// Releases a whole, free, fixed segment held by block `i` (in its free set).
    fn release_block(&mut self, i: u32) -> bool {
        let b = &self.blocks[i as usize];
        let (addr, size, pool, stream, seg) = (b.addr, b.size, b.pool, b.stream, b.seg);
        if self.dev.release(addr).is_err() {
            return false;
        }
        self.remove_free(i);
        self.drop_block(i);
        self.segs[seg as usize].alive = false;
        self.free_segs.push(seg);
        self.stats.segment.dec(pool, 1);
        self.stats.reserved_bytes.dec(pool, size as i64);
        if size >= self.max_split {
            self.stats.oversize_segments.add(-1);
        }
        self.stats.num_device_free += 1;
        self.trace(TraceAction::SegmentFree, addr, size, stream);
        true
    }

    fn releasable(&self, i: u32) -> bool {
        !self.is_split(i) && !self.seg_expandable(i)
    }

    fn release_available_cached_blocks(&mut self, rounded: u64, pool: usize, stream: u32) -> bool {
        let target = rounded.max(self.max_split);
        let candidates: Vec<u32> = self.free[pool]
            .at_least_desc(stream, self.max_split.min(MAX_SIZE))
            .into_iter()
            .map(|e| e.1)
            .collect();
        // A single oversize block large enough, smallest first; else the largest ones.
        if let Some(&i) = candidates
            .iter()
            .rev()
            .find(|&&i| self.blocks[i as usize].size >= target && self.releasable(i))
        {
            return self.release_block(i);
        }
        let mut released = 0;
        for i in candidates {
            if released >= target {
                break;
            }
            if self.releasable(i) {
                let sz = self.blocks[i as usize].size;
                if self.release_block(i) {
                    released += sz;
                }
            }
        }
        released >= target
    }

    fn release_cached_blocks(&mut self) {
        self.synchronize_and_free_events();
        for pool in [LARGE, SMALL] {
            let idxs: Vec<u32> = self.free[pool].values();
            for i in idxs {
                if self.seg_expandable(i) {
                    self.unmap_block(i);
                } else if !self.is_split(i) {
                    self.release_block(i);
                }
            }
        }
        // Give back reservations that are now entirely unmapped.
        let exp = std::mem::take(&mut self.expandable);
        for (stream, pool, seg) in exp {
            let head = self.segs[seg as usize].head;
            let h = &self.blocks[head as usize];
            let whole = h.next == NIL && !h.mapped;
            if whole && self.dev.unreserve(self.segs[seg as usize].base).is_ok() {
                self.drop_block(head);
                self.segs[seg as usize].alive = false;
                self.free_segs.push(seg);
                self.stats.segment.dec(pool, 1);
            } else {
                self.expandable.push((stream, pool, seg));
            }
        }
    }

    /// PyTorch's garbage collection: when reserved bytes pass the threshold,
    /// release cached unsplit large segments, oldest first, until under it.
    fn garbage_collect(&mut self) {
        let (Some(t), Some(cap)) = (self.cfg.garbage_collection_threshold, self.cap) else {
            return;
        };
        let threshold = (t * cap as f64) as u64;
        if self.reserved() <= threshold {
            return;
        }
        let mut idxs: Vec<u32> = self.free[LARGE]
            .values()
            .into_iter()
            .filter(|&i| self.releasable(i))
            .collect();
        // Segment index order approximates age (lower = allocated earlier).
        idxs.sort_by_key(|&i| self.blocks[i as usize].seg);
        for i in idxs {
            if self.reserved() <= threshold {
                break;
            }
            self.release_block(i);
        }
    }

    // ---- expandable segments ------------------------------------------------

    fn map_granularity(&self, pool: usize) -> u64 {
        let g = self.dev.granularity();
        match self.cfg.policy {
            Policy::PyTorchExpandable => {
                let want = if pool == SMALL {
                    SMALL_BUFFER
                } else {
                    LARGE_BUFFER
                };
                want.div_ceil(g) * g
            }
            _ => g,
        }
    }

    fn expandable_segment(&mut self, stream: u32, pool: usize) -> Result<u32, Fail> {
        if let Some(&(_, _, s)) = self
            .expandable
            .iter()
            .find(|e| e.0 == stream && e.1 == pool)
        {
            return Ok(s);
        }
        let g = self.map_granularity(pool);
        let (_, total) = self.dev.mem_info();
        // Virtual space is cheap: reserve four times the device so that
        // placement holes never exhaust the range before memory runs out
        // (PyTorch reserves 1.125x per expandable segment).
        let len = total.saturating_mul(4).div_ceil(g).max(1).saturating_mul(g);
        let base = match self.dev.reserve(len) {
            Ok(b) => b,
            Err(DeviceError::OutOfMemory { .. }) => return Err(Fail::Oom),
            Err(e) => return Err(Fail::Dev(e)),
        };
        let seg = self.new_seg(Segment {
            base,
            len,
            stream,
            pool,
            expandable: true,
            head: NIL,
            alive: true,
        });
        let b = self.new_block(Block {
            addr: base,
            size: len,
            requested: 0,
            stream,
            seg,
            prev: NIL,
            next: NIL,
            state: State::Free,
            mapped: false,
            pool,
            events: 0,
            born: 0,
            born_step: 0,
        });
        self.segs[seg as usize].head = b;
        self.expandable.push((stream, pool, seg));
        self.stats.segment.inc(pool, 1);
        Ok(seg)
    }

    /// The placement for `rounded` bytes that needs the fewest newly mapped
    /// bytes (lowest address on ties): `(first block, address, bytes to map)`.
    fn find_run(&self, seg: u32, rounded: u64, g: u64) -> Option<(u32, u64, u64)> {
        let mut best: Option<(u32, u64, u64)> = None;
        let mut cur = self.segs[seg as usize].head;
        let mut prev_free = false;
        while cur != NIL {
            let b = &self.blocks[cur as usize];
            let free = b.state == State::Free;
            if free && !prev_free {
                // Evaluate placing the request at the start of this run.
                if let Some(need) = self.run_at(cur, rounded, g) {
                    if !matches!(best, Some((_, _, n)) if n <= need) {
                        best = Some((cur, b.addr, need));
                        if need == 0 {
                            break;
                        }
                    }
                }
            }
            prev_free = free;
            cur = b.next;
        }
        best
    }

    /// Bytes to map and whether `rounded` bytes fit when placed at block `start`.
    fn run_at(&self, start: u32, rounded: u64, g: u64) -> Option<u64> {
        let (mut run, mut need, mut c) = (0u64, 0u64, start);
        while c != NIL && run < rounded {
            let x = &self.blocks[c as usize];
            if x.state != State::Free {
                break;
            }
            let take = x.size.min(rounded - run);
            if !x.mapped {
                need += take.div_ceil(g) * g;
            }
            run += take;
            c = x.next;
        }
        (run >= rounded).then_some(need)
    }

    /// PyTorch's `find_expandable_block`: unmapped blocks smallest first (then
    /// lowest address); start at a free mapped block just before one when
    /// there is one; the first placement with room wins.
    fn find_run_pytorch(&self, seg: u32, rounded: u64, g: u64) -> Option<(u32, u64, u64)> {
        let mut unmapped: Vec<(u64, u64, u32)> = self
            .segment_blocks(seg)
            .into_iter()
            .filter(|&i| {
                let b = &self.blocks[i as usize];
                b.state == State::Free && !b.mapped
            })
            .map(|i| {
                (
                    self.blocks[i as usize].size,
                    self.blocks[i as usize].addr,
                    i,
                )
            })
            .collect();
        unmapped.sort_unstable();
        for (_, _, c) in unmapped {
            let p = self.blocks[c as usize].prev;
            let start = if p != NIL && self.blocks[p as usize].state == State::Free {
                p
            } else {
                c
            };
            if let Some(need) = self.run_at(start, rounded, g) {
                return Some((start, self.blocks[start as usize].addr, need));
            }
        }
        None
    }

    fn alloc_expandable(&mut self, rounded: u64, pool: usize, stream: u32) -> Result<u32, Fail> {
        let seg = self.expandable_segment(stream, pool)?;
        let g = self.map_granularity(pool);
        let found = if self.cfg.policy == Policy::PyTorchExpandable {
            self.find_run_pytorch(seg, rounded, g)
        } else {
            self.find_run(seg, rounded, g)
        };
        let (mut start, run_addr, mut need_map) = found.ok_or(Fail::Oom)?;
        if self.cfg.policy == Policy::Vramkit && need_map > 0 {
            // Free pages stay mapped (cached) by default: unmapping waits for
            // the device, so a loop that repeats its steps must not unmap in
            // steady state. Trim before grow only (a) when cached bytes exceed
            // the slack, if one is set, or (b) when the new pages would not
            // fit under the cap or in the device's free memory: then the free
            // pages of this segment outside the placement go first, before the
            // release-everything-and-retry path.
            let cached = self.cached(pool);
            let budget = self.cfg.trim_slack * self.stats.allocated_bytes.current_all() as f64;
            let pressure =
                cached > 0 && (self.over_cap(need_map) || need_map > self.dev.mem_info().0);
            if pressure || cached as f64 > budget {
                self.trim_segment(seg, run_addr, run_addr + rounded);
                (start, _, need_map) = self.find_run(seg, rounded, g).ok_or(Fail::Oom)?;
            }
        }
        if self.over_cap(need_map) {
            return Err(Fail::Oom);
        }
        // Grow the large pool by at least one chunk when there is room for
        // it: fewer map calls (each creates and maps physical pages) for the
        // same pages, which stay mapped. A finite trim slack asks for memory
        // first and maps only what the request needs.
        let mut target = rounded;
        if self.cfg.policy == Policy::Vramkit
            && pool == LARGE
            && self.cfg.trim_slack.is_infinite()
            && need_map > 0
            && need_map < VRAMKIT_LARGE_CHUNK
        {
            let want = rounded + (VRAMKIT_LARGE_CHUNK - need_map);
            if let Some(n) = self.run_at(start, want, g) {
                if !self.over_cap(n) && n <= self.dev.mem_info().0 {
                    target = want;
                }
            }
        }
        let rounded = target;
        // Map the unmapped parts of the run, front to back.
        let mut covered = 0u64;
        let mut cur = start;
        while covered < rounded {
            let b = &self.blocks[cur as usize];
            if b.mapped {
                covered += b.size;
                cur = b.next;
                continue;
            }
            let len = (rounded - covered)
                .div_ceil(g)
                .saturating_mul(g)
                .min(b.size);
            let (addr, bsize) = (b.addr, b.size);
            if let Err(e) = self.dev.map(addr, len) {
                // Blocks mapped so far are free and may touch free mapped neighbours:
                // coalesce them before failing, so no two free neighbours stay apart.
                self.coalesce_free_run(start);
                return Err(match e {
                    DeviceError::OutOfMemory { .. } => Fail::Oom,
                    e => Fail::Dev(e),
                });
            }
            if len < bsize {
                let nb = Block {
                    addr: addr + len,
                    size: bsize - len,
                    prev: cur,
                    mapped: false,
                    ..self.blocks[cur as usize].clone()
                };
                let next = nb.next;
                let n = self.new_block(nb);
                if next != NIL {
                    self.blocks[next as usize].prev = n;
                }
                self.blocks[cur as usize].next = n;
                self.blocks[cur as usize].size = len;
            }
            self.blocks[cur as usize].mapped = true;
            // Newly mapped free block: put it in the free set so a failure
            // later leaves a consistent state.
            self.insert_free(cur);
            self.stats.reserved_bytes.inc(pool, len as i64);
            self.stats.num_device_alloc += 1;
            self.trace(TraceAction::SegmentMap, addr, len, stream);
            covered += len;
            cur = self.blocks[cur as usize].next;
        }
        // Coalesce the run into one free mapped block and take it out of the free set.
        self.remove_free(start);
        self.merge_following(start);
        Ok(start)
    }

    /// Merges the free mapped blocks that follow free mapped block `start` into it.
    fn coalesce_free_run(&mut self, start: u32) {
        let b = &self.blocks[start as usize];
        if b.state != State::Free || !b.mapped {
            return;
        }
        self.remove_free(start);
        self.merge_following(start);
        self.insert_free(start);
    }

    /// Merges into block `start` (out of the free set) every following free block with the
    /// same mapping state.
    fn merge_following(&mut self, start: u32) {
        loop {
            let n = self.blocks[start as usize].next;
            if n == NIL || self.try_merge(start, n) == 0 {
                break;
            }
        }
    }

    /// Unmaps the whole free pages of an expandable segment, except in
    /// blocks overlapping `[keep_lo, keep_hi)`.
    fn trim_segment(&mut self, seg: u32, keep_lo: u64, keep_hi: u64) {
        // Collect first: unmapping merges (and drops) unmapped neighbours, but
        // never a block that is still free and mapped.
        let victims: Vec<u32> = self
            .segment_blocks(seg)
            .into_iter()
            .filter(|&i| {
                let b = &self.blocks[i as usize];
                let overlaps = b.addr < keep_hi && keep_lo < b.addr + b.size;
                b.state == State::Free && b.mapped && !overlaps
            })
            .collect();
        for i in victims {
            self.unmap_block(i);
        }
    }

    /// Unmaps the whole pages inside free mapped block `i` of an expandable segment.
    fn unmap_block(&mut self, i: u32) {
        let pool = self.blocks[i as usize].pool;
        let g = self.map_granularity(pool);
        let b = &self.blocks[i as usize];
        let (addr, size) = (b.addr, b.size);
        // Pages are aligned relative to the segment base.
        let base = self.segs[b.seg as usize].base;
        let end = addr + size;
        let lo = base + (addr - base).div_ceil(g) * g;
        let hi = base + (end - base) / g * g;
        if hi <= lo {
            return;
        }
        self.unmap_pages(i, lo, hi, true);
    }

    /// Unmaps `[lo, hi)` (whole pages) inside free mapped block `i` and cuts it
    /// out as an unmapped block; `call_device` false when the pages were
    /// already unmapped (host memory of a freed block).
    fn unmap_pages(&mut self, i: u32, lo: u64, hi: u64, call_device: bool) {
        let pool = self.blocks[i as usize].pool;
        let b = &self.blocks[i as usize];
        let (addr, size, stream) = (b.addr, b.size, b.stream);
        let end = addr + size;
        if call_device && self.dev.unmap(lo, hi - lo).is_err() {
            return;
        }
        self.remove_free(i);
        let template = self.blocks[i as usize].clone();
        // head [addr, lo) stays mapped in block i when non-empty.
        let mid = if lo > addr {
            self.blocks[i as usize].size = lo - addr;
            self.insert_free(i);
            let m = self.new_block(Block {
                addr: lo,
                size: hi - lo,
                prev: i,
                mapped: false,
                ..template.clone()
            });
            if template.next != NIL {
                self.blocks[template.next as usize].prev = m;
            }
            self.blocks[i as usize].next = m;
            m
        } else {
            let b = &mut self.blocks[i as usize];
            b.size = hi - lo;
            b.mapped = false;
            i
        };
        if hi < end {
            let next = self.blocks[mid as usize].next;
            let t = self.new_block(Block {
                addr: hi,
                size: end - hi,
                prev: mid,
                next,
                mapped: true,
                ..template
            });
            if next != NIL {
                self.blocks[next as usize].prev = t;
            }
            self.blocks[mid as usize].next = t;
            self.blocks[mid as usize].size = hi - lo;
            self.insert_free(t);
        }
        let (p, n) = (
            self.blocks[mid as usize].prev,
            self.blocks[mid as usize].next,
        );
        self.try_merge(mid, p);
        self.try_merge(mid, n);
        self.stats.reserved_bytes.dec(pool, (hi - lo) as i64);
        if call_device {
            self.stats.num_device_free += 1;
            self.trace(TraceAction::SegmentUnmap, lo, hi - lo, stream);
        }
    }

    // ---- host tier -----------------------------------------------------------

    /// The whole map units inside block `i` (`None` when it has none or is
    /// not in an expandable segment).
    fn interior(&self, i: u32) -> Option<(u64, u64)> {
        let b = &self.blocks[i as usize];
        let seg = &self.segs[b.seg as usize];
        if !seg.expandable || b.pool == SMALL {
            return None;
        }
        let g = self.map_granularity(b.pool);
        let lo = seg.base + (b.addr - seg.base).div_ceil(g) * g;
        let hi = seg.base + (b.addr + b.size - seg.base) / g * g;
        (hi > lo).then_some((lo, hi))
    }

    fn move_to_host(&mut self, idx: u32) -> Result<u64, DeviceError> {
        if self.host.contains_key(&idx) {
            return Ok(0);
        }
        let Some((lo, hi)) = self.interior(idx) else {
            return Ok(0);
        };
        self.dev.migrate(lo, hi - lo, Location::Host)?;
        let b = &self.blocks[idx as usize];
        let (pool, stream) = (b.pool, b.stream);
        self.host.insert(idx, (lo, hi, true));
        self.stats.reserved_bytes.dec(pool, (hi - lo) as i64);
        self.stats.migrated_bytes.add((hi - lo) as i64);
        self.stats.num_migrations_to_host += 1;
        self.trace(TraceAction::SegmentUnmap, lo, hi - lo, stream);
        Ok(hi - lo)
    }

    fn move_to_device(&mut self, idx: u32) -> Result<u64, DeviceError> {
        let Some(&(lo, hi, true)) = self.host.get(&idx) else {
            return Ok(0);
        };
        if self.over_cap(hi - lo) {
            return Err(DeviceError::OutOfMemory {
                requested: hi - lo,
                free: self.cap.unwrap_or(0).saturating_sub(self.reserved()),
            });
        }
        self.dev.migrate(lo, hi - lo, Location::Device)?;
        let b = &self.blocks[idx as usize];
        let (pool, stream) = (b.pool, b.stream);
        self.host.remove(&idx);
        self.stats.reserved_bytes.inc(pool, (hi - lo) as i64);
        self.stats.migrated_bytes.add(-((hi - lo) as i64));
        self.stats.num_migrations_to_device += 1;
        self.trace(TraceAction::SegmentMap, lo, hi - lo, stream);
        Ok(hi - lo)
    }

    fn evict_cold(&mut self, need: u64, host_room: u64) -> u64 {
        let (step, mallocs) = (self.step, self.mallocs);
        let mut victims: Vec<(u64, u64, u32)> = self
            .active
            .values()
            .copied()
            .filter(|&i| {
                let b = &self.blocks[i as usize];
                let old = if step > 0 {
                    b.born_step < step
                } else {
                    b.born <= mallocs / 2
                };
                old && !self.host.contains_key(&i)
            })
            .filter_map(|i| {
                let (lo, hi) = self.interior(i)?;
                Some((self.blocks[i as usize].born, hi - lo, i))
            })
            .collect();
        if step > 0 {
            // Newest long-lived first (optimizer states, created by the first
            // optimizer step, before the weights); largest first on ties.
            victims.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        } else {
            // No step marked yet: only age tells, and the first half of the
            // allocations may hold this step's early activations: oldest
            // (weights) first.
            victims.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        }
        let mut moved = 0u64;
        for (_, bytes, i) in victims {
            if moved >= need {
                break;
            }
            if moved + bytes > host_room {
                continue;
            }
            if let Ok(n) = self.move_to_host(i) {
                moved += n;
            }
        }
        moved
    }

    fn rebalance(&mut self) -> u64 {
        let headroom = self.transient.max(0) as u64;
        let mut back: Vec<(u64, u32)> = self
            .host
            .iter()
            .filter(|(_, r)| r.2)
            .map(|(&i, _)| (self.blocks[i as usize].born, i))
            .collect();
        if back.is_empty() {
            return 0;
        }
        back.sort_unstable();
        let room = |s: &Self| {
            let (free, _) = s.dev.mem_info();
            match s.cap {
                Some(c) => free.min(c.saturating_sub(s.reserved())),
                None => free,
            }
        };
        let cached = (self.cached(SMALL) + self.cached(LARGE)).max(0) as u64;
        let first = back[0].1;
        let (lo, hi, _) = self.host[&first];
        let want = (hi - lo).saturating_add(headroom);
        if room(self) < want && room(self).saturating_add(cached) >= want {
            self.release_cached_blocks();
        }
        let mut moved = 0;
        for (_, i) in back {
            let (lo, hi, _) = self.host[&i];
            if room(self) < (hi - lo).saturating_add(headroom) {
                break;
            }
            match self.move_to_device(i) {
                Ok(n) => moved += n,
                Err(_) => break,
            }
        }
        moved
    }

    // ---- snapshot and checks --------------------------------------------------

    fn segment_blocks(&self, seg: u32) -> Vec<u32> {
        let mut v = Vec::new();
        let mut cur = self.segs[seg as usize].head;
        while cur != NIL {
            v.push(cur);
            cur = self.blocks[cur as usize].next;
        }
        v
    }

    fn snapshot(&self) -> Snapshot {
        let mut segments = Vec::new();
        for (si, s) in self.segs.iter().enumerate() {
            if !s.alive {
                continue;
            }
            let mut cur: Option<SegmentInfo> = None;
            for i in self.segment_blocks(si as u32) {
                let b = &self.blocks[i as usize];
                if !b.mapped {
                    if let Some(c) = cur.take() {
                        segments.push(c);
                    }
                    continue;
                }
                let c = cur.get_or_insert_with(|| SegmentInfo {
                    address: b.addr,
                    total_size: 0,
                    stream: s.stream.into(),
                    is_small: s.pool == SMALL,
                    is_expandable: s.expandable,
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    blocks: Vec::new(),
                });
                let state = match b.state {
                    State::Allocated => BlockState::ActiveAllocated,
                    State::Pending => BlockState::ActivePendingFree,
                    State::Free => BlockState::Inactive,
                };
                c.total_size += b.size;
                if b.state == State::Allocated {
                    c.allocated_size += b.size;
                }
                if b.state != State::Free {
                    c.active_size += b.size;
                    c.requested_size += b.requested;
                }
                c.blocks.push(BlockInfo {
                    address: b.addr,
                    size: b.size,
                    requested_size: if b.state == State::Free {
                        0
                    } else {
                        b.requested
                    },
                    state,
                });
            }
            if let Some(c) = cur {
                segments.push(c);
            }
        }
        segments.sort_by_key(|s| s.address);
        Snapshot {
            segments,
            traces: self
                .history
                .as_ref()
                .map(|(_, h)| h.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    fn check(&self) -> Result<(), String> {
        let mut st = MemoryStats::default();
        let mut free_count = 0usize;
        let mut active_count = 0usize;
        let mut migrated = 0u64;
        let mut host_seen = 0usize;
        for (si, s) in self.segs.iter().enumerate() {
            if !s.alive {
                continue;
            }
            let blocks = self.segment_blocks(si as u32);
            if blocks.is_empty() {
                return Err(format!("segment {si} has no blocks"));
            }
            let mut addr = s.base;
            let mut prev = NIL;
            bump(&mut st.segment, s.pool, 1);
            for &i in &blocks {
                let b = &self.blocks[i as usize];
                if b.prev != prev {
                    return Err(format!("block {i} has a wrong prev link"));
                }
                if b.addr != addr {
                    return Err(format!(
                        "block {i} at {:#x} but expected {addr:#x}: gap or overlap",
                        b.addr
                    ));
                }
                if b.size == 0 || b.seg != si as u32 || b.pool != s.pool || b.stream != s.stream {
                    return Err(format!("block {i} has bad size/segment/pool/stream"));
                }
                if prev != NIL {
                    let p = &self.blocks[prev as usize];
                    if p.state == State::Free && b.state == State::Free && p.mapped == b.mapped {
                        return Err(format!("free neighbours {prev} and {i} not coalesced"));
                    }
                }
                let in_set = self.free[b.pool].get(self.key(i)) == Some(i);
                let want_in_set = b.state == State::Free && b.mapped;
                if in_set != want_in_set {
                    return Err(format!(
                        "block {i} free-set membership is {in_set}, expected {want_in_set}"
                    ));
                }
                if !b.mapped && b.state != State::Free {
                    return Err(format!("block {i} is in use but unmapped"));
                }
                if b.mapped {
                    let moved = match self.host.get(&i) {
                        Some(&(lo, hi, on_host)) => {
                            let ok = match b.state {
                                State::Allocated => on_host,
                                State::Pending => true,
                                State::Free => false,
                            };
                            if !ok || self.interior(i) != Some((lo, hi)) {
                                return Err(format!(
                                    "block {i} has a stale host range {lo:#x}..{hi:#x}"
                                ));
                            }
                            if on_host {
                                migrated += hi - lo;
                            }
                            host_seen += 1;
                            hi - lo
                        }
                        None => 0,
                    };
                    bump(&mut st.reserved_bytes, s.pool, (b.size - moved) as i64);
                }
                match b.state {
                    State::Free => {
                        if b.mapped {
                            free_count += 1;
                        }
                        if b.mapped && !s.expandable && (b.prev != NIL || b.next != NIL) {
                            bump(&mut st.inactive_split, s.pool, 1);
                            bump(&mut st.inactive_split_bytes, s.pool, b.size as i64);
                        }
                    }
                    State::Allocated | State::Pending => {
                        if b.state == State::Allocated {
                            active_count += 1;
                            if self.active.get(&b.addr) != Some(&i) {
                                return Err(format!(
                                    "allocated block {i} missing from the address map"
                                ));
                            }
                            bump(&mut st.allocation, s.pool, 1);
                            bump(&mut st.allocated_bytes, s.pool, b.size as i64);
                        }
                        bump(&mut st.active, s.pool, 1);
                        bump(&mut st.active_bytes, s.pool, b.size as i64);
                        bump(&mut st.requested_bytes, s.pool, b.requested as i64);
                    }
                }
                addr += b.size;
                prev = i;
            }
            if addr != s.base + s.len {
                return Err(format!(
                    "segment {si} blocks cover {} of {} bytes",
                    addr - s.base,
                    s.len
                ));
            }
        }
        let set_len: usize = self.free.iter().map(|s| s.len()).sum();
        if set_len != free_count {
            return Err(format!(
                "free sets hold {set_len} entries, {free_count} free blocks exist"
            ));
        }
        if self.active.len() != active_count {
            return Err("address map holds stale entries".into());
        }
        if host_seen != self.host.len() {
            return Err("host ranges of blocks that are gone".into());
        }
        if self.stats.migrated_bytes.current != migrated as i64 {
            return Err(format!(
                "migrated_bytes is {} but a recount gives {migrated}",
                self.stats.migrated_bytes.current
            ));
        }
        let have = &self.stats.snapshot();
        let pairs = [
            ("allocation", &st.allocation, &have.allocation),
            ("segment", &st.segment, &have.segment),
            ("active", &st.active, &have.active),
            ("inactive_split", &st.inactive_split, &have.inactive_split),
            (
                "allocated_bytes",
                &st.allocated_bytes,
                &have.allocated_bytes,
            ),
            ("reserved_bytes", &st.reserved_bytes, &have.reserved_bytes),
            ("active_bytes", &st.active_bytes, &have.active_bytes),
            (
                "inactive_split_bytes",
                &st.inactive_split_bytes,
                &have.inactive_split_bytes,
            ),
            (
                "requested_bytes",
                &st.requested_bytes,
                &have.requested_bytes,
            ),
        ];
        for (name, want, got) in pairs {
            for k in 0..3 {
                if want[k].current != got[k].current {
                    return Err(format!(
                        "{name}[{k}].current is {} but a recount gives {}",
                        got[k].current, want[k].current
                    ));
                }
            }
        }
        Ok(())
    }
}
