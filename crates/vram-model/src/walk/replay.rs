//! Reserved bytes from the allocator: the step's individual tensors replayed through a model of
//! the caching allocator (`vram_alloc`, on its simulated device).
//!
//! The run is what a training script does: the weights (one allocation per parameter tensor)
//! before anything, then a first step that creates the optimizer states inside its
//! `optimizer.step()`, then two more steps; `max_memory_reserved()` never goes down without
//! `empty_cache()`, so its peak over the three is what a reset after the warm-up step reads.
//! Inference replays one `generate` call.
//!
//! Two figures come out. On a device with room for everything the allocator caches, the peak
//! of `max_memory_reserved()` ([`Replayed::reserved`], what the H100 measurements compare
//! with). And the reserved peak on the smallest device that still runs the step
//! ([`Replayed::needed`]): PyTorch's `DeviceCachingAllocator::malloc` (PyTorch 2.11,
//! `c10/cuda/CUDACachingAllocator.cpp`) answers a failed `cudaMalloc` with
//! `release_available_cached_blocks` (only under `max_split_size_mb`) and then
//! `release_cached_blocks` (every cached segment with no live block goes back to the driver)
//! and tries again, so segments cached but unused at the peak (autocast's forward copies
//! that a short sequence never reuses, say) cost nothing where memory is tight. Whether a
//! step fits is decided on `needed`; the replay on a bounded [`SimDevice`] runs that same
//! release-and-retry path (`vram_alloc`'s `alloc_slow`).

use std::collections::HashMap;

use vram_alloc::{AllocatorConfig, CachingAllocator, Policy, SimDevice};

use super::{Category, Handle, Phase, Run, Sink, Step};
use crate::setup::{Allocator, Mode};

thread_local! {
    static REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes this thread's estimates compute their figures the reference way: every allocator
/// replay walks the step into the allocator at each probe of the search for the smallest
/// device, and that search and the largest-batch and longest-context searches probe as plain
/// bisections. For the tests that prove the fast paths give the same figures. (Which decode
/// steps of `generate` are walked is part of the setup, `DecodeReplay`, not a fast path.)
#[doc(hidden)]
pub fn set_reference_replay(on: bool) {
    REFERENCE.with(|r| r.set(on));
}

/// Whether this thread computes the reference way ([`set_reference_replay`]).
pub(crate) fn reference() -> bool {
    REFERENCE.with(|r| r.get())
}

/// What the allocator model saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Peak of bytes handed out (blocks, after the allocator's rounding).
    pub allocated: u64,
    /// Peak of bytes held from the device where the device has room for all of them.
    pub reserved: u64,
    /// Peak of bytes held from the device on the smallest device (to the 2 MiB segment
    /// granularity) on which no allocation fails; at most `reserved`.
    pub needed: u64,
}

/// One replay's peaks.
struct Peaks {
    allocated: u64,
    reserved: u64,
    /// Reserved peak over the whole run (loading and the warm-up step included): a device of
    /// this size runs it identically, since no `cudaMalloc` on it asked for more.
    run_peak: u64,
}

struct ReplaySink {
    alloc: CachingAllocator<SimDevice>,
    live: HashMap<u64, Vec<u64>>,
    /// fp32 weight tensors to free as their half copies are made (`model.to(dtype)` converts
    /// one parameter at a time).
    cast_from: Vec<u64>,
    /// Whether an allocation failed (the device is bounded); later ones are not attempted.
    failed: bool,
    /// Reserved peak over the whole run, across the peak resets.
    run_peak: u64,
}

impl ReplaySink {
    /// `reset_peak_memory_stats()`, keeping the reserved peak so far in `run_peak`.
    fn reset_peak(&mut self) {
        self.run_peak = self.run_peak.max(self.reserved_peak());
        self.alloc.reset_peak_stats();
    }

    fn reserved_peak(&self) -> u64 {
        self.alloc.memory_stats().reserved_bytes[0].peak.max(0) as u64
    }
}

impl Sink for ReplaySink {
    const WANTS_PARTS: bool = true;

    fn alloc(&mut self, h: Handle, parts: &[u64]) {
        if h.bytes == 0 {
            return;
        }
        let one = [h.bytes];
        let sizes = if parts.is_empty() { &one[..] } else { parts };
        let cast = h.cat == Category::Parameters && !self.cast_from.is_empty();
        let old = if cast {
            std::mem::take(&mut self.cast_from)
        } else {
            Vec::new()
        };
        let entry = self.live.entry(h.key).or_default();
        for (i, &size) in sizes.iter().enumerate() {
            if !self.failed {
                match self.alloc.malloc(size.max(1), 0) {
                    Ok(addr) => entry.push(addr),
                    Err(_) => self.failed = true,
                }
            }
            if let Some(&a) = old.get(i) {
                let _ = self.alloc.free(a);
            }
        }
        for &a in old.iter().skip(sizes.len()) {
            let _ = self.alloc.free(a);
        }
        if cast {
            // Loading is over before the measured steps (peak statistics reset there).
            self.reset_peak();
        }
    }

    fn free(&mut self, h: Handle) {
        if let Some(addrs) = self.live.remove(&h.key) {
            for a in addrs {
                let _ = self.alloc.free(a);
            }
        }
    }

    fn phase(&mut self, _p: Phase) {}
}

/// One allocator call of a recorded run.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// `malloc(bytes)`; the address goes to the next malloc slot (slots count mallocs).
    Malloc(u64),
    /// `free` of the address malloc slot `.0` got.
    Free(u32),
    /// `reset_peak_memory_stats()` (the reserved peak so far is kept as the run's).
    ResetPeak,
}

/// The allocator calls of one run (the fp32 build, the steps), recorded once from the walk
/// and replayed on as many device sizes as the search for the smallest one probes. Replaying
/// the calls is what walking the step into the allocator did, call for call: a probe costs
/// the allocator's work only, not the walk's, and stops at the first failed `cudaMalloc` (a
/// run with a failed allocation counts as not running whatever follows).
pub(crate) struct Calls {
    calls: Vec<Call>,
    mallocs: usize,
}

/// Records a walk's allocator calls as [`ReplaySink`] makes them: one
/// `malloc` per tensor of a group, the fp32 build's tensors freed as their half copies are
/// made (`model.to(dtype)` converts one parameter at a time), the peak reset after loading.
struct Recorder {
    calls: Vec<Call>,
    mallocs: u32,
    /// Each live group's malloc slots: consecutive ones as a range (a group's tensors are
    /// made one after another), a list where one key was allocated twice before its free.
    live: HashMap<u64, Slots, KeyHash>,
    /// Malloc slots of the fp32 weight tensors still to be converted.
    cast_from: Vec<u32>,
}

/// A live group's malloc slots.
enum Slots {
    Range(u32, u32),
    List(Vec<u32>),
}

impl Slots {
    fn push_range(self, start: u32, end: u32) -> Slots {
        match self {
            Slots::Range(a, b) if b == start => Slots::Range(a, end),
            Slots::Range(a, b) => Slots::List((a..b).chain(start..end).collect()),
            Slots::List(mut v) => {
                v.extend(start..end);
                Slots::List(v)
            }
        }
    }
}

/// The walk's keys are structured integers (layer, slot, generation bit fields): one
/// multiply-xorshift round spreads them over the table, at a fraction of SipHash's cost.
#[derive(Default, Clone, Copy)]
struct KeyHash;

impl std::hash::BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl Recorder {
    fn malloc(&mut self, bytes: u64) -> u32 {
        self.calls.push(Call::Malloc(bytes.max(1)));
        self.mallocs += 1;
        self.mallocs - 1
    }
}

impl Sink for Recorder {
    const WANTS_PARTS: bool = true;

    fn alloc(&mut self, h: Handle, parts: &[u64]) {
        if h.bytes == 0 {
            return;
        }
        let one = [h.bytes];
        let sizes = if parts.is_empty() { &one[..] } else { parts };
        let cast = h.cat == Category::Parameters && !self.cast_from.is_empty();
        let old = if cast {
            std::mem::take(&mut self.cast_from)
        } else {
            Vec::new()
        };
        let start = self.mallocs;
        for (i, &size) in sizes.iter().enumerate() {
            self.malloc(size);
            if let Some(&a) = old.get(i) {
                self.calls.push(Call::Free(a));
            }
        }
        for &a in old.iter().skip(sizes.len()) {
            self.calls.push(Call::Free(a));
        }
        let end = self.mallocs;
        let slots = match self.live.remove(&h.key) {
            Some(s) => s.push_range(start, end),
            None => Slots::Range(start, end),
        };
        self.live.insert(h.key, slots);
        if cast {
            // Loading is over before the measured steps (peak statistics reset there).
            self.calls.push(Call::ResetPeak);
        }
    }

    fn free(&mut self, h: Handle) {
        match self.live.remove(&h.key) {
            Some(Slots::Range(a, b)) => self.calls.extend((a..b).map(Call::Free)),
            Some(Slots::List(v)) => self.calls.extend(v.into_iter().map(Call::Free)),
            None => {}
        }
    }

    fn phase(&mut self, _p: Phase) {}
}

/// A replay of [`Calls`] under way: the allocator after the first `done` calls and what the
/// rest of the replay needs from them.
struct Replay {
    alloc: CachingAllocator<SimDevice>,
    /// The address each malloc slot got (slots from `next` on are still to come).
    addrs: Vec<u64>,
    next: usize,
    /// Calls replayed.
    done: usize,
    /// Reserved peak over the run so far, across the peak resets.
    run_peak: u64,
}

impl Replay {
    /// An independent copy (the allocator forked) to go on from here on another device size.
    fn fork(&self) -> Replay {
        Replay {
            alloc: self.alloc.fork(),
            addrs: self.addrs.clone(),
            next: self.next,
            done: self.done,
            run_peak: self.run_peak,
        }
    }

    fn peaks(&self) -> Peaks {
        let st = self.alloc.memory_stats();
        let reserved = st.reserved_bytes[0].peak.max(0) as u64;
        Peaks {
            allocated: st.allocated_bytes[0].peak.max(0) as u64,
            reserved,
            run_peak: self.run_peak.max(reserved),
        }
    }
}

impl Calls {
    /// Replays the calls on a device of `capacity` bytes; `None` when an allocation fails.
    #[cfg(test)]
    fn replay_on(&self, allocator: Allocator, capacity: u64) -> Option<Peaks> {
        self.replay_short(allocator, capacity).ok()
    }

    /// Replays the calls on a device of `capacity` bytes. When an allocation fails: by how many
    /// bytes the device was short for it, where the policy makes that plain (PyTorch's default:
    /// the reservation left after `release_cached_blocks` plus the segment the failing
    /// `cudaMalloc` asked for, beyond the device), else 0.
    fn replay_short(&self, allocator: Allocator, capacity: u64) -> Result<Peaks, u64> {
        let mut r = self.start(allocator, capacity).ok_or(0u64)?;
        self.advance(&mut r, allocator, self.calls.len(), None)?;
        Ok(r.peaks())
    }

    /// A replay on a device of `capacity` bytes, no call made yet.
    fn start(&self, allocator: Allocator, capacity: u64) -> Option<Replay> {
        let cfg = AllocatorConfig::new(policy(allocator));
        Some(Replay {
            alloc: CachingAllocator::new(SimDevice::new(capacity), cfg).ok()?,
            addrs: vec![0u64; self.mallocs],
            next: 0,
            done: 0,
            run_peak: 0,
        })
    }

    /// Replays calls `r.done..until` on `r`. With `rises`, records after which call the device's
    /// bytes in use first passed each new high, and that high. A failed allocation ends it with
    /// the device's shortfall (see [`Calls::replay_short`]).
    fn advance(
        &self,
        r: &mut Replay,
        allocator: Allocator,
        until: usize,
        mut rises: Option<&mut Vec<(usize, u64)>>,
    ) -> Result<(), u64> {
        let reserved_peak =
            |a: &CachingAllocator<SimDevice>| a.memory_stats().reserved_bytes[0].peak.max(0) as u64;
        for (i, &c) in self.calls[r.done..until].iter().enumerate() {
            match c {
                Call::Malloc(bytes) => {
                    r.addrs[r.next] = match r.alloc.malloc(bytes, 0) {
                        Ok(a) => a,
                        Err(vram_alloc::AllocError::OutOfMemory(o))
                            if allocator == Allocator::Pytorch =>
                        {
                            let held = o.device_total.saturating_sub(o.device_free);
                            let seg = vram_alloc::policy::allocation_size(o.rounded);
                            return Err(held.saturating_add(seg).saturating_sub(o.device_total));
                        }
                        Err(_) => return Err(0),
                    };
                    r.next += 1;
                    if let Some(rises) = rises.as_deref_mut() {
                        let used = r.alloc.with_device(|d| d.used());
                        if rises.last().is_none_or(|&(_, high)| used > high) {
                            rises.push((r.done + i, used));
                        }
                    }
                }
                Call::Free(slot) => {
                    let _ = r.alloc.free(r.addrs[slot as usize]);
                }
                Call::ResetPeak => {
                    r.run_peak = r.run_peak.max(reserved_peak(&r.alloc));
                    r.alloc.reset_peak_stats();
                }
            }
        }
        r.done = until;
        Ok(())
    }
}

/// The run with room, forked at a few points, so that a run on a smaller device starts from
/// the last point it shares with it: a device of `d` bytes runs the calls exactly as the one
/// with room until a call takes the bytes in use beyond `d`.
struct Forks {
    /// Per rise of the bytes in use of the run with room: the call that made it and the new
    /// high, in call order.
    rises: Vec<(usize, u64)>,
    /// Replays of the run with room, stopped after their `done` calls, in call order.
    at: Vec<Replay>,
}

impl Forks {
    /// The number of calls a device of `capacity` bytes replays as the run with room does:
    /// up to the first call that takes the bytes in use beyond it.
    fn shared(&self, capacity: u64) -> usize {
        let i = self.rises.partition_point(|&(_, high)| high <= capacity);
        self.rises.get(i).map_or(usize::MAX, |&(call, _)| call)
    }
}

impl Calls {
    /// The run with room on a device with room for everything, with where its bytes in use
    /// rise (for [`Calls::probe_forking`]); `None` when an allocation fails even there.
    fn roomy(&self, allocator: Allocator) -> Option<(Peaks, Vec<(usize, u64)>)> {
        let mut rises = Vec::new();
        let mut r = self.start(allocator, UNBOUNDED)?;
        self.advance(&mut r, allocator, self.calls.len(), Some(&mut rises))
            .ok()?;
        Some((r.peaks(), rises))
    }

    /// [`Calls::replay_on`] on a device of `capacity` bytes that also forks its run on the
    /// way, at up to eight points spread over the calls where the runs on devices between `lo`
    /// and `capacity` bytes leave the run with room (one point where they all leave it at the
    /// same call). Up to the call that takes its bytes in use beyond `capacity`, a run on this
    /// device is the run with room, call for call, so its forks there are forks of the run
    /// with room, made at no cost beyond the copies: the probes that follow (smaller devices)
    /// start from them instead of replaying the calls before them again. (Forks of a second
    /// run with room, made only where more probes were to come, were what they started from
    /// before; where every probe left the run with room at one call, there were none.)
    fn probe_forking(
        &self,
        allocator: Allocator,
        capacity: u64,
        rises: Vec<(usize, u64)>,
        lo: u64,
    ) -> (Option<Peaks>, Forks) {
        const N: usize = 8;
        let mut f = Forks {
            rises,
            at: Vec::new(),
        };
        let Some(mut r) = self.start(allocator, capacity) else {
            return (None, f);
        };
        let (first, last) = (
            f.shared(lo.min(capacity)).min(self.calls.len()),
            f.shared(capacity).min(self.calls.len()),
        );
        if first < self.calls.len() {
            let n = if first < last { N } else { 1 };
            for k in 0..n {
                let at = first + (last - first) * k / N;
                if f.at.last().is_some_and(|p: &Replay| p.done == at) {
                    continue;
                }
                if self.advance(&mut r, allocator, at, None).is_err() {
                    return (None, f);
                }
                f.at.push(r.fork());
            }
        }
        let peaks = self
            .advance(&mut r, allocator, self.calls.len(), None)
            .ok()
            .map(|()| r.peaks());
        (peaks, f)
    }

    /// [`Calls::replay_on`] from the last fork of the run with room a device of `capacity`
    /// bytes shares.
    fn replay_from(&self, forks: &Forks, allocator: Allocator, capacity: u64) -> Option<Peaks> {
        let shared = forks.shared(capacity);
        let from = forks.at.iter().rev().find(|r| r.done <= shared);
        let mut r = match from {
            Some(r) => {
                let r = r.fork();
                r.alloc.with_device(|d| d.set_capacity(capacity)).ok()?;
                r
            }
            None => self.start(allocator, capacity)?,
        };
        self.advance(&mut r, allocator, self.calls.len(), None)
            .ok()?;
        Some(r.peaks())
    }
}

/// Builds [`Calls`] from a tape of tensor groups (the fine-tuning step's): a group's tensors are
/// allocated one after another and freed together.
#[derive(Default)]
pub(crate) struct CallsBuilder {
    calls: Vec<Call>,
    mallocs: u32,
    live: HashMap<u64, Vec<u32>, KeyHash>,
}

impl CallsBuilder {
    /// `malloc` of each of `parts` (bytes) for the group `key`.
    pub(crate) fn alloc(&mut self, key: u64, parts: &[u64]) {
        let slots = self.live.entry(key).or_default();
        for &p in parts {
            self.calls.push(Call::Malloc(p.max(1)));
            slots.push(self.mallocs);
            self.mallocs += 1;
        }
    }

    /// `free` of every tensor of the group `key`.
    pub(crate) fn free(&mut self, key: u64) {
        if let Some(slots) = self.live.remove(&key) {
            self.calls.extend(slots.into_iter().map(Call::Free));
        }
    }

    /// `reset_peak_memory_stats()` (the reserved peak so far is kept as the run's).
    pub(crate) fn reset_peak(&mut self) {
        self.calls.push(Call::ResetPeak);
    }

    pub(crate) fn finish(self) -> Calls {
        Calls {
            calls: self.calls,
            mallocs: self.mallocs as usize,
        }
    }
}

impl Calls {
    /// The allocated and reserved peaks with room, and the reserved peak on the smallest device
    /// that runs the calls ([`smallest_device`], with `decide`). The probes after the first
    /// start from forks of the first's run ([`Calls::probe_forking`]): the same probes and
    /// figures as replaying each from the start. `None` when the calls fail even with room.
    pub(crate) fn needed(&self, allocator: Allocator, decide: Option<u64>) -> Option<Replayed> {
        let (roomy, rises) = self.roomy(allocator)?;
        let mut rises = Some(rises);
        let mut forks: Option<Forks> = None;
        let needed = smallest_device(&roomy, decide, true, |capacity, lo| match &forks {
            Some(f) => self.replay_from(f, allocator, capacity),
            None => {
                let rises = rises.take().unwrap_or_default();
                let (p, f) = self.probe_forking(allocator, capacity, rises, lo);
                forks = Some(f);
                p
            }
        });
        Some(Replayed {
            allocated: roomy.allocated,
            reserved: roomy.reserved,
            needed,
        })
    }
}

/// The search for the smallest device that runs a step, the one both replays run (the walk's,
/// [`Step::replay`], and the fine-tuning tape's, [`Calls::needed`]): the reserved peak on the
/// smallest device, to the [`GRANULE`], on which no allocation fails, given the run with room
/// (`roomy`). `probe(capacity, lo)` replays the run on a device of `capacity` bytes (`lo`: the
/// search's lower bound then, where the probe may fork its run for the probes to come),
/// `None` when an allocation fails.
///
/// Nothing runs below the allocated peak, and the run with room needs at most its own
/// reserved peak: the bounds start there. A probe that runs lowers the upper bound to its own
/// reserved peak (the device's size changes a run only where a `cudaMalloc` would pass it, so
/// a device of that peak runs it identically); one that fails raises the lower bound to its
/// size. The bisection halves the gap in granules until it is one granule. Two probes come
/// first (`shortcuts`; off for the reference computation, [`set_reference_replay`]): one a
/// granule below the reserved peak, since most steps need what they reserve and that one probe
/// settles it; then, where the upper bound is still over twice 1.25 times the allocated peak
/// (a long `generate` under PyTorch's default policy caches a segment per KV tensor at each size
/// class it passes), one probe at 1.25 times the allocated peak, which stands for the
/// bisection's first halvings, all of which would run. For a fit monotone in the device's size
/// both give the bisection's answer. With `decide` (a device's bytes; only which side of it the
/// answer falls on is asked) the search stops once the bounds settle that: the upper bound at or
/// below it (it only falls), or the lower at or above it (a probe that fails at the lower bound
/// and one that runs at a larger size with a peak at or below it cannot both happen, by the
/// same rule), so the answer lies on the side the whole search's would.
fn smallest_device(
    roomy: &Peaks,
    decide: Option<u64>,
    shortcuts: bool,
    mut probe: impl FnMut(u64, u64) -> Option<Peaks>,
) -> u64 {
    let mut lo = (roomy.allocated / GRANULE * GRANULE).saturating_sub(GRANULE);
    let mut hi = roomy.run_peak;
    let open = |lo: u64, hi: u64| {
        hi.saturating_sub(lo) > GRANULE && !decide.is_some_and(|d| hi <= d || lo >= d)
    };
    let mut at = |capacity: u64, lo: &mut u64, hi: &mut u64| match probe(capacity, *lo) {
        Some(p) => *hi = p.run_peak.min(*hi),
        None => *lo = capacity,
    };
    if shortcuts && open(lo, hi) {
        at(hi - GRANULE, &mut lo, &mut hi);
        let quarter = (roomy.allocated + roomy.allocated / 4).div_ceil(GRANULE) * GRANULE;
        if hi > 2 * quarter && quarter > lo && open(lo, hi) {
            at(quarter, &mut lo, &mut hi);
        }
    }
    while open(lo, hi) {
        let mid = ((lo + (hi - lo) / 2) / GRANULE * GRANULE).clamp(lo + 1, hi - 1);
        at(mid, &mut lo, &mut hi);
    }
    hi
}

fn policy(a: Allocator) -> Policy {
    match a {
        Allocator::Pytorch => Policy::PyTorch,
        Allocator::PytorchExpandable => Policy::PyTorchExpandable,
        Allocator::Vramkit => Policy::Vramkit,
    }
}

/// Capacity of the simulated device with room for everything (2^50 bytes).
const UNBOUNDED: u64 = 1 << 50;

/// The segment granularity the search for the smallest device stops at (`kRoundLarge`).
const GRANULE: u64 = vram_alloc::policy::ROUND_LARGE;

impl Step<'_> {
    /// Replays rank `rank`'s run through `allocator` and returns its peaks: on a device with
    /// room, and on the smallest device that runs it ([`smallest_device`]; each probe replays the
    /// calls recorded once, or, for the reference computation, walks the step again).
    pub(crate) fn replay(&self, rank: u64, allocator: Allocator) -> Option<Replayed> {
        if !reference() {
            return self.record(rank).needed(allocator, None);
        }
        let roomy = self.replay_walked_on(rank, allocator, UNBOUNDED)?;
        let needed = smallest_device(&roomy, None, false, |capacity, _| {
            self.replay_walked_on(rank, allocator, capacity)
        });
        Some(Replayed {
            allocated: roomy.allocated,
            reserved: roomy.reserved,
            needed,
        })
    }

    /// Whether rank `rank`'s run gets through a device of `room` bytes under `allocator`:
    /// `None` when it does, else by how many bytes the device was short where the first
    /// allocation failed (0 when the policy does not make it plain; see `replay_short`).
    pub(crate) fn replay_shortfall(
        &self,
        rank: u64,
        allocator: Allocator,
        room: u64,
    ) -> Option<u64> {
        // A run on a device of `room` bytes is the run with room until a `cudaMalloc` would
        // go beyond it: one replay there answers, at no more cost than one with room.
        match reference() {
            false => self.record(rank).replay_short(allocator, room).err(),
            true => self
                .replay_walked_on(rank, allocator, room)
                .is_none()
                .then_some(0),
        }
    }

    /// The elements of the tied output projection `from_config` builds on the last pipeline
    /// rank before tying it (see [`Step::record`]).
    fn built_tied_head(&self, rank: u64) -> Option<u64> {
        (rank == self.setup.parallel.pp - 1 && self.tied_head > 0).then_some(self.tied_head)
    }

    /// Rank `rank`'s run as allocator calls: the model as `from_config` builds it where it is
    /// built whole in fp32 first, then the training steps (a warm-up step, the peak reset,
    /// two more) or one `generate` call.
    pub(crate) fn record(&self, rank: u64) -> Calls {
        let mut rec = Recorder {
            calls: Vec::new(),
            mallocs: 0,
            live: HashMap::with_capacity_and_hasher(256, KeyHash),
            cast_from: Vec::new(),
        };
        // Engines that shard or split the model build it in place (DeepSpeed's zero.Init,
        // Megatron's per-rank layers); plain PyTorch materialises it whole first.
        if self.setup.builds_fp32_then_casts() {
            debug_assert!(self.weight_bytes() < 4);
            // The model as `from_config` builds it: fp32 parameters, one tensor each.
            for e in self.weight_tensor_elems(rank) {
                let slot = rec.malloc(e * 4);
                rec.cast_from.push(slot);
            }
            // A tied head: `from_config` makes the output projection's own weight, then
            // `tie_weights` (in `post_init`) drops it for the embedding's, and its block stays
            // cached (transformers 5.24; `gen_trace.py --build fp32` on Llama-3.2-1B).
            if let Some(e) = self.built_tied_head(rank) {
                let slot = rec.malloc(e * 4);
                rec.calls.push(Call::Free(slot));
            }
        }
        match self.setup.mode {
            Mode::Train(_) => {
                self.walk(rank, &mut rec, false, Run::First);
                // `reset_peak_memory_stats()` after a warm-up step: the allocated peak restarts
                // from what is live, the reserved one from what is held.
                rec.calls.push(Call::ResetPeak);
                self.walk(rank, &mut rec, false, Run::Later);
                self.walk(rank, &mut rec, false, Run::Later);
            }
            Mode::Infer(_) => self.infer_run(rank, &mut rec, |r| r.calls.push(Call::ResetPeak)),
        }
        Calls {
            mallocs: rec.mallocs as usize,
            calls: rec.calls,
        }
    }

    /// The inference run into `sink`: one `generate` call, or, with a warm-up
    /// ([`crate::setup::Overheads::warmup_prompt`]), a call on the first `min(N, prompt)` prompt
    /// tokens (same batch and new tokens) that frees all it made, `reset` (the peak statistics'
    /// reset), then the estimated call on the same weights. The warm-up's cached segments stay
    /// with the allocator, as PyTorch's do (`measure2.py`'s `infer_case`).
    fn infer_run<S: Sink>(&self, rank: u64, sink: &mut S, reset: impl FnOnce(&mut S)) {
        let warm = match (self.setup.mode, self.setup.overheads.warmup_prompt) {
            (Mode::Infer(inf), Some(w)) => {
                let prompt = w.min(inf.prompt());
                let mut setup = *self.setup;
                setup.overheads.warmup_prompt = None;
                setup.mode = Mode::Infer(crate::setup::Infer {
                    context: prompt + inf.new_tokens,
                    ..inf
                });
                Some(setup)
            }
            _ => None,
        };
        // The same model and setup but for the prompt: a setup the estimated call passed.
        let warm = warm.as_ref().and_then(|s| Step::new(self.model, s).ok());
        match warm {
            Some(w) => {
                w.walk(rank, sink, true, Run::First);
                reset(sink);
                self.walk(rank, sink, true, Run::Later);
            }
            None => self.walk(rank, sink, true, Run::Whole),
        }
    }

    /// The reference replay: the walk itself into the allocator, once per probe, every call
    /// made whatever failed before (what [`Calls`] replays call for call, for the test that
    /// proves both give the same figures).
    fn replay_walked_on(&self, rank: u64, allocator: Allocator, capacity: u64) -> Option<Peaks> {
        let cfg = AllocatorConfig::new(policy(allocator));
        let alloc = CachingAllocator::new(SimDevice::new(capacity), cfg).ok()?;
        let mut sink = ReplaySink {
            alloc,
            live: HashMap::new(),
            cast_from: Vec::new(),
            failed: false,
            run_peak: 0,
        };
        // Engines that shard or split the model build it in place (DeepSpeed's zero.Init,
        // Megatron's per-rank layers); plain PyTorch materialises it whole first.
        if self.setup.builds_fp32_then_casts() {
            debug_assert!(self.weight_bytes() < 4);
            // The model as `from_config` builds it: fp32 parameters, one tensor each.
            for e in self.weight_tensor_elems(rank) {
                match sink.alloc.malloc((e * 4).max(1), 0) {
                    Ok(a) => sink.cast_from.push(a),
                    Err(_) => return None,
                }
            }
            if let Some(e) = self.built_tied_head(rank) {
                match sink.alloc.malloc(e * 4, 0) {
                    Ok(a) => {
                        let _ = sink.alloc.free(a);
                    }
                    Err(_) => return None,
                }
            }
        }
        match self.setup.mode {
            Mode::Train(_) => {
                self.walk(rank, &mut sink, false, Run::First);
                // `reset_peak_memory_stats()` after a warm-up step: the allocated peak restarts
                // from what is live, the reserved one from what is held.
                sink.reset_peak();
                self.walk(rank, &mut sink, false, Run::Later);
                self.walk(rank, &mut sink, false, Run::Later);
            }
            Mode::Infer(_) => self.infer_run(rank, &mut sink, ReplaySink::reset_peak),
        }
        if sink.failed {
            return None;
        }
        let st = sink.alloc.memory_stats();
        let reserved = st.reserved_bytes[0].peak.max(0) as u64;
        Some(Peaks {
            allocated: st.allocated_bytes[0].peak.max(0) as u64,
            reserved,
            run_peak: sink.run_peak.max(reserved),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search with every probe replayed from the first call (no forks).
    fn needed_from_scratch(c: &Calls, a: Allocator, decide: Option<u64>) -> Option<Replayed> {
        let roomy = c.replay_on(a, UNBOUNDED)?;
        let needed = smallest_device(&roomy, decide, true, |capacity, _| c.replay_on(a, capacity));
        Some(Replayed {
            allocated: roomy.allocated,
            reserved: roomy.reserved,
            needed,
        })
    }

    /// A training-like tape: weights, then steps whose activations of mixed sizes are made
    /// layer by layer and freed in reverse with some kept across the step, the peak reset
    /// after the first. `big` adds one tensor per step larger than all the rest together (the
    /// case where every smaller device's run leaves the run with room at one call).
    fn tape(seed: u64, layers: u64, big: bool) -> Calls {
        let mut x = seed;
        let mut rnd = |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let mib = 1u64 << 20;
        let mut b = CallsBuilder::default();
        let mut key = 0;
        for _ in 0..layers {
            key += 1;
            b.alloc(key, &[(1 + rnd(64)) * mib, (1 + rnd(8)) * mib]);
        }
        let mut kept = Vec::new();
        for step in 0..3 {
            let mut acts = Vec::new();
            for _ in 0..layers {
                key += 1;
                b.alloc(key, &[(1 + rnd(40)) * mib, 1 + rnd(900_000)]);
                acts.push(key);
            }
            if big {
                key += 1;
                b.alloc(key, &[layers * 160 * mib]);
                b.free(key);
            }
            for (i, &k) in acts.iter().enumerate().rev() {
                if i % 7 == 3 && step == 0 {
                    kept.push(k);
                } else {
                    b.free(k);
                }
            }
            if step == 0 {
                b.reset_peak();
            }
        }
        for k in kept {
            b.free(k);
        }
        b.finish()
    }

    /// The search from the first probe's forks gives what replaying every probe from the first
    /// call gives, figure for figure, with and without a device to decide on.
    #[test]
    fn needed_from_forks_equals_every_probe_from_scratch() {
        for seed in 1..=12 {
            for big in [false, true] {
                let c = tape(seed, 24 + seed * 3, big);
                for a in [
                    Allocator::Pytorch,
                    Allocator::PytorchExpandable,
                    Allocator::Vramkit,
                ] {
                    let full = c.needed(a, None);
                    assert_eq!(full, needed_from_scratch(&c, a, None), "seed {seed} {a:?}");
                    let r = full.unwrap();
                    for d in [r.allocated, r.needed, (r.allocated + r.reserved) / 2] {
                        assert_eq!(
                            c.needed(a, Some(d)),
                            needed_from_scratch(&c, a, Some(d)),
                            "seed {seed} {a:?} decide {d}"
                        );
                    }
                }
            }
        }
    }
}
