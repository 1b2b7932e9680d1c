//! Statistics under PyTorch's `torch.cuda.memory_stats()` key names, and the
//! `memory_summary()` text in PyTorch's layout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One statistic: current value, peak, and running totals of increases and
/// decreases (PyTorch's `Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest value since the last peak reset.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

impl Stat {
    #[inline(always)]
    pub(crate) fn add(&mut self, amount: i64) {
        // Branch-free: this runs about twenty times per alloc+free pair.
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount.max(0);
        self.freed += (-amount).max(0);
    }
}

/// A statistic split by pool: `[all, small_pool, large_pool]`.
pub type StatArray = [Stat; 3];

/// Index of the small pool in a [`StatArray`].
pub const SMALL: usize = 1;
/// Index of the large pool in a [`StatArray`].
pub const LARGE: usize = 2;

#[inline(always)]
pub(crate) fn bump(arr: &mut StatArray, pool: usize, amount: i64) {
    let [all, small, large] = arr;
    all.add(amount);
    if pool == SMALL {
        small.add(amount);
    } else {
        large.add(amount);
    }
}

/// All counters the allocator keeps (PyTorch's `DeviceStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Allocations handed out (count).
    pub allocation: StatArray,
    /// Segments held from the device (count).
    pub segment: StatArray,
    /// Active blocks: allocated or awaiting stream events (count).
    pub active: StatArray,
    /// Free blocks inside split segments, which cannot be released (count).
    pub inactive_split: StatArray,
    /// Bytes handed out (after rounding).
    pub allocated_bytes: StatArray,
    /// Bytes held from the device.
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks.
    pub active_bytes: StatArray,
    /// Bytes in free blocks inside split segments.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for (before rounding).
    pub requested_bytes: StatArray,
    /// Times the allocator released its cache and retried a device allocation.
    pub num_alloc_retries: i64,
    /// Requests that failed with out-of-memory.
    pub num_ooms: i64,
    /// Times all pending stream events were synchronized.
    pub num_sync_all_streams: i64,
    /// Device allocations and maps.
    pub num_device_alloc: i64,
    /// Device releases and unmaps.
    pub num_device_free: i64,
    /// Allocations at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// The `max_split_size` setting (`u64::MAX` reported as `i64::MAX`).
    pub max_split_size: i64,
    /// Bytes of live allocations whose backing was moved to host memory at
    /// the same addresses (not counted in `reserved_bytes`, which is device
    /// memory only).
    pub migrated_bytes: Stat,
    /// Ranges moved from device to host memory.
    pub num_migrations_to_host: i64,
    /// Ranges moved back from host to device memory.
    pub num_migrations_to_device: i64,
}

impl MemoryStats {
    /// The flat map `torch.cuda.memory_stats()` returns, e.g.
    /// `"allocated_bytes.all.peak"`, `"num_ooms"`.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        let arrays: [(&str, &StatArray); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (name, arr) in arrays {
            for (pool, st) in ["all", "small_pool", "large_pool"].iter().zip(arr.iter()) {
                put_stat(&mut m, &format!("{name}.{pool}"), st);
            }
        }
        put_stat(&mut m, "oversize_allocations", &self.oversize_allocations);
        put_stat(&mut m, "oversize_segments", &self.oversize_segments);
        m.insert("num_alloc_retries".into(), self.num_alloc_retries);
        m.insert("num_ooms".into(), self.num_ooms);
        m.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        m.insert("num_device_alloc".into(), self.num_device_alloc);
        m.insert("num_device_free".into(), self.num_device_free);
        m.insert("max_split_size".into(), self.max_split_size);
        put_stat(&mut m, "host.migrated_bytes", &self.migrated_bytes);
        m.insert("num_migrations_to_host".into(), self.num_migrations_to_host);
        m.insert(
            "num_migrations_to_device".into(),
            self.num_migrations_to_device,
        );
        m
    }

    /// Resets every `peak` to its `current` value.
    pub fn reset_peak(&mut self) {
        for arr in self.arrays_mut() {
            for s in arr.iter_mut() {
                s.peak = s.current;
            }
        }
        self.oversize_allocations.peak = self.oversize_allocations.current;
        self.oversize_segments.peak = self.oversize_segments.current;
        self.migrated_bytes.peak = self.migrated_bytes.current;
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// The text `torch.cuda.memory_summary()` prints, in the same layout:
    /// 75-column table, sizes with the unit chosen from the `all` row.
    pub fn summary(&self, device: u32, abbreviated: bool) -> String {
        let mut lines: Vec<String> = Vec::new();
        let eq = "=".repeat(75);
        let dash = "-".repeat(75);
        lines.push(eq.clone());
        lines.push(format!(
            " {:16} PyTorch CUDA memory summary, device ID {:<17} ",
            "", device
        ));
        lines.push(dash.clone());
        lines.push(format!(
            "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
            "", self.num_ooms, "", self.num_alloc_retries
        ));
        lines.push(eq.clone());
        lines.push(
            "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".into(),
        );
        type Fmt = fn(i64, i64) -> String;
        let metrics: [(&StatArray, &str, Fmt); 9] = [
            (&self.allocated_bytes, "Allocated memory", format_size),
            (&self.active_bytes, "Active memory", format_size),
            (&self.requested_bytes, "Requested memory", format_size),
            (&self.reserved_bytes, "GPU reserved memory", format_size),
            (
                &self.inactive_split_bytes,
                "Non-releasable memory",
                format_size,
            ),
            (&self.allocation, "Allocations", format_count),
            (&self.active, "Active allocs", format_count),
            (&self.segment, "GPU reserved segments", format_count),
            (&self.inactive_split, "Non-releasable allocs", format_count),
        ];
        for (arr, name, f) in metrics {
            lines.push(dash.clone());
            let mut rows = vec![(0usize, name)];
            if !abbreviated {
                rows.push((LARGE, "      from large pool"));
                rows.push((SMALL, "      from small pool"));
            }
            let pref = arr[0];
            for (i, label) in rows {
                let s = arr[i];
                lines.push(format!(
                    " {:<21} | {} | {} | {} | {} ",
                    label,
                    f(s.current, pref.current),
                    f(s.peak, pref.peak),
                    f(s.allocated, pref.allocated),
                    f(s.freed, pref.freed)
                ));
            }
        }
        lines.push(dash.clone());
        let m = self.migrated_bytes;
        lines.push(format!(
            " {:<21} | {} | {} | {} | {} ",
            "Moved to host memory",
            format_size(m.current, m.current),
            format_size(m.peak, m.peak),
            format_size(m.allocated, m.allocated),
            format_size(m.freed, m.freed)
        ));
        lines.push(format!(
            " {:<21} | {:>10} | {:>10} | {:>10} | {:>10} ",
            "Migrations (to host)", "", "", self.num_migrations_to_host, ""
        ));
        lines.push(format!(
            " {:<21} | {:>10} | {:>10} | {:>10} | {:>10} ",
            "Migrations (back)", "", "", self.num_migrations_to_device, ""
        ));
        lines.push(dash.clone());
        for (s, name) in [
            (self.oversize_allocations, "Oversize allocations"),
            (self.oversize_segments, "Oversize GPU segments"),
        ] {
            lines.push(format!(
                " {:<21} | {} | {} | {} | {} ",
                name,
                format_count(s.current, s.current),
                format_count(s.peak, s.peak),
                format_count(s.allocated, s.allocated),
                format_count(s.freed, s.freed)
            ));
        }
        lines.push(eq);
        let mut out = String::new();
        for l in lines {
            let _ = writeln!(out, "|{l}|");
        }
        out
    }
}

fn put_stat(m: &mut BTreeMap<String, i64>, prefix: &str, s: &Stat) {
    m.insert(format!("{prefix}.current"), s.current);
    m.insert(format!("{prefix}.peak"), s.peak);
    m.insert(format!("{prefix}.allocated"), s.allocated);
    m.insert(format!("{prefix}.freed"), s.freed);
}

/// PyTorch's `_format_size`: the unit is chosen from `pref` (the `all` row)
/// so a row's pool breakdown shares its unit; integer division per step.
fn format_size(mut sz: i64, pref: i64) -> String {
    let prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for p in &prefixes[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        prefix = p;
        sz /= 1024;
        pref /= 1024.0;
    }
    format!("{sz:6} {prefix}")
}

/// PyTorch's `_format_count`.
fn format_count(mut cnt: i64, pref: i64) -> String {
    let prefixes = [" ", "K", "M"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for p in &prefixes[1..] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        prefix = p;
        cnt /= 1000;
        pref /= 1000.0;
    }
    format!("{cnt:7} {prefix} ")
}

/// The allocator's internal form of a [`StatArray`]: per-pool current,
/// peak and running increase, plus the all-pools peak. `freed` is derived
/// (`allocated - current`) and the `all` row is the sum of the pools, so an
/// increase costs a handful of instructions and a decrease one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counter {
    cur: [i64; 2],
    inc: [i64; 2],
    peak: [i64; 2],
    peak_all: i64,
}

#[inline(always)]
fn ix(pool: usize) -> usize {
    // SMALL = 1 -> 0, LARGE = 2 -> 1.
    (pool >> 1) & 1
}

impl Counter {
    #[inline(always)]
    pub(crate) fn inc(&mut self, pool: usize, a: i64) {
        let p = ix(pool);
        self.cur[p] += a;
        self.inc[p] += a;
        self.peak[p] = self.peak[p].max(self.cur[p]);
        self.peak_all = self.peak_all.max(self.cur[0] + self.cur[1]);
    }

    #[inline(always)]
    pub(crate) fn dec(&mut self, pool: usize, a: i64) {
        self.cur[ix(pool)] -= a;
    }

    #[inline(always)]
    pub(crate) fn add(&mut self, pool: usize, a: i64) {
        if a >= 0 {
            self.inc(pool, a);
        } else {
            self.dec(pool, -a);
        }
    }

    pub(crate) fn current(&self, pool: usize) -> i64 {
        self.cur[ix(pool)]
    }

    pub(crate) fn current_all(&self) -> i64 {
        self.cur[0] + self.cur[1]
    }

    fn reset_peak(&mut self) {
        self.peak = self.cur;
        self.peak_all = self.current_all();
    }

    fn to_array(self) -> StatArray {
        let row = |p: usize| Stat {
            current: self.cur[p],
            peak: self.peak[p],
            allocated: self.inc[p],
            freed: self.inc[p] - self.cur[p],
        };
        let (s, l) = (row(0), row(1));
        [
            Stat {
                current: s.current + l.current,
                peak: self.peak_all,
                allocated: s.allocated + l.allocated,
                freed: s.freed + l.freed,
            },
            s,
            l,
        ]
    }
}

/// The allocator's counters; [`Counters::snapshot`] gives the public [`MemoryStats`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub(crate) allocation: Counter,
    pub(crate) segment: Counter,
    pub(crate) active: Counter,
    pub(crate) inactive_split: Counter,
    pub(crate) allocated_bytes: Counter,
    pub(crate) reserved_bytes: Counter,
    pub(crate) active_bytes: Counter,
    pub(crate) inactive_split_bytes: Counter,
    pub(crate) requested_bytes: Counter,
    pub(crate) num_alloc_retries: i64,
    pub(crate) num_ooms: i64,
    pub(crate) num_sync_all_streams: i64,
    pub(crate) num_device_alloc: i64,
    pub(crate) num_device_free: i64,
    pub(crate) oversize_allocations: Stat,
    pub(crate) oversize_segments: Stat,
    pub(crate) max_split_size: i64,
    pub(crate) migrated_bytes: Stat,
    pub(crate) num_migrations_to_host: i64,
    pub(crate) num_migrations_to_device: i64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> MemoryStats {
        MemoryStats {
            allocation: self.allocation.to_array(),
            segment: self.segment.to_array(),
            active: self.active.to_array(),
            inactive_split: self.inactive_split.to_array(),
            allocated_bytes: self.allocated_bytes.to_array(),
            reserved_bytes: self.reserved_bytes.to_array(),
            active_bytes: self.active_bytes.to_array(),
            inactive_split_bytes: self.inactive_split_bytes.to_array(),
            requested_bytes: self.requested_bytes.to_array(),
            num_alloc_retries: self.num_alloc_retries,
            num_ooms: self.num_ooms,
            num_sync_all_streams: self.num_sync_all_streams,
            num_device_alloc: self.num_device_alloc,
            num_device_free: self.num_device_free,
            oversize_allocations: self.oversize_allocations,
            oversize_segments: self.oversize_segments,
            max_split_size: self.max_split_size,
            migrated_bytes: self.migrated_bytes,
            num_migrations_to_host: self.num_migrations_to_host,
            num_migrations_to_device: self.num_migrations_to_device,
        }
    }

    pub(crate) fn reset_peak(&mut self) {
        for c in [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ] {
            c.reset_peak();
        }
        self.oversize_allocations.peak = self.oversize_allocations.current;
        self.oversize_segments.peak = self.oversize_segments.current;
        self.migrated_bytes.peak = self.migrated_bytes.current;
    }
}
