//! The tier policy and its environment variables.

use crate::error::TierError;
use vram_alloc::{AllocatorConfig, Policy};

/// How device memory is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Through vramkit's caching allocator (for
    /// `torch.cuda.memory.CUDAPluggableAllocator`): our statistics are the
    /// truth, PyTorch keeps none.
    Caching,
    /// Every request is one device segment, no caching (for
    /// `torch.cuda.MemPool`, whose caching allocator carves the segments and
    /// keeps PyTorch's own statistics).
    Raw,
}

/// The placement policy: caps, which requests spill, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct TierConfig {
    /// Caching or raw segments.
    pub mode: Mode,
    /// The caching allocator's settings (policy, history, ...).
    pub alloc: AllocatorConfig,
    /// Behave like a device with this many bytes (`VRAM_DEVICE_LIMIT`);
    /// `None`: the whole device.
    pub device_limit: Option<u64>,
    /// Most bytes of pinned host memory the host tier may hold
    /// (`VRAM_HOST_LIMIT`); 0 turns the host tier off.
    pub host_limit: u64,
    /// Requests smaller than this never spill (`VRAM_SPILL_MIN`); they fail
    /// with out-of-memory when the device is full.
    pub spill_min: u64,
    /// Most bytes of managed memory (`VRAM_MANAGED_LIMIT`); 0, the default,
    /// turns the opt-in managed tier off.
    pub managed_limit: u64,
    /// Under pressure, move cold allocations to host memory at the same
    /// addresses before spilling a new request (`VRAM_MIGRATE`, on by
    /// default; needs `host_limit`, which migrated bytes share with spills).
    pub migrate: bool,
    /// Time every device call and allocator path ([`crate::Timers`];
    /// `VRAM_TIMERS`, on by default).
    pub timers: bool,
}

impl Default for TierConfig {
    /// Caching mode under [`Policy::Vramkit`], no caps, host and managed tiers off.
    fn default() -> Self {
        TierConfig {
            mode: Mode::Caching,
            alloc: AllocatorConfig::new(Policy::Vramkit),
            device_limit: None,
            host_limit: 0,
            spill_min: 0,
            managed_limit: 0,
            migrate: true,
            timers: true,
        }
    }
}

impl TierConfig {
    /// Reads the documented `VRAM_*` variables through `var` (pass
    /// `|k| std::env::var(k).ok()`), starting from [`TierConfig::default`]:
    ///
    /// | variable | meaning | default |
    /// |---|---|---|
    /// | `VRAM_DEVICE_LIMIT` | device cap, e.g. `8GiB` | whole device |
    /// | `VRAM_HOST_LIMIT` | pinned host tier size, e.g. `32GiB` | `0` (off) |
    /// | `VRAM_SPILL_MIN` | smallest request that may spill | `0` (all) |
    /// | `VRAM_MANAGED_LIMIT` | opt-in managed tier size | `0` (off) |
    /// | `VRAM_EXPANDABLE` | `1`: expandable segments (vramkit policy); `0`: PyTorch's fixed segments | `1` |
    /// | `VRAM_POLICY` | `pytorch`, `pytorch-expandable` or `vramkit` (overrides `VRAM_EXPANDABLE`) | |
    /// | `VRAM_MODE` | `caching` or `raw` (for `torch.cuda.MemPool`) | `caching` |
    /// | `VRAM_MIGRATE` | `1`: under pressure move cold allocations (long-lived, newest first: optimizer states, then weights) to host memory at the same addresses, and back at `vram_step()` marks when room returns; `0`: only spill new requests | `1` |
    /// | `VRAM_HISTORY` | history entries kept for snapshots | `0` |
    /// | `VRAM_TIMERS` | `1`: time every device call and allocator path (`timer.*` keys of the statistics); `0`: off | `1` |
    /// | `VRAM_TRIM_SLACK` | vramkit policy: cached bytes tolerated, as a fraction of allocated, before growth unmaps free pages first (`inf`: only under pressure; a finite value saves memory but unmaps, and so synchronises, during steady state) | `inf` |
    ///
    /// Sizes take `B`, `KiB`/`K`, `MiB`/`M`, `GiB`/`G`, `TiB`/`T` (powers of
    /// 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<TierConfig, TierError> {
        let mut c = TierConfig::default();
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let size = |name: &str| -> Result<Option<u64>, TierError> {
            get(name)
                .map(|v| parse_size(&v).map_err(|reason| bad(name, &v, &reason)))
                .transpose()
        };
        c.device_limit = size("VRAM_DEVICE_LIMIT")?;
        if c.device_limit == Some(0) {
            return Err(bad("VRAM_DEVICE_LIMIT", "0", "must be positive"));
        }
        c.host_limit = size("VRAM_HOST_LIMIT")?.unwrap_or(0);
        c.spill_min = size("VRAM_SPILL_MIN")?.unwrap_or(0);
        c.managed_limit = size("VRAM_MANAGED_LIMIT")?.unwrap_or(0);
        if let Some(v) = get("VRAM_EXPANDABLE") {
            c.alloc.policy = match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Policy::Vramkit,
                "0" | "false" | "no" | "off" => Policy::PyTorch,
                _ => return Err(bad("VRAM_EXPANDABLE", &v, "expected 1 or 0")),
            };
        }
        if let Some(v) = get("VRAM_POLICY") {
            c.alloc.policy = Policy::parse(&v).ok_or_else(|| {
                bad(
                    "VRAM_POLICY",
                    &v,
                    "expected pytorch, pytorch-expandable or vramkit",
                )
            })?;
        }
        if let Some(v) = get("VRAM_MODE") {
            c.mode = match v.as_str() {
                "caching" => Mode::Caching,
                "raw" => Mode::Raw,
                _ => return Err(bad("VRAM_MODE", &v, "expected caching or raw")),
            };
        }
        if let Some(v) = get("VRAM_HISTORY") {
            let n: usize = v
                .parse()
                .map_err(|_| bad("VRAM_HISTORY", &v, "expected a number of entries"))?;
            c.alloc.history = (n > 0).then_some(n);
        }
        if let Some(v) = get("VRAM_MIGRATE") {
            c.migrate = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(bad("VRAM_MIGRATE", &v, "expected 1 or 0")),
            };
        }
        if let Some(v) = get("VRAM_TIMERS") {
            c.timers = match v.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(bad("VRAM_TIMERS", &v, "expected 1 or 0")),
            };
        }
        if let Some(v) = get("VRAM_TRIM_SLACK") {
            c.alloc.trim_slack = v.parse::<f64>().ok().filter(|f| *f >= 0.0).ok_or_else(|| {
                bad(
                    "VRAM_TRIM_SLACK",
                    &v,
                    "expected a non-negative fraction or inf",
                )
            })?;
        }
        Ok(c)
    }
}

fn bad(name: &str, value: &str, reason: &str) -> TierError {
    TierError::Config {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Parses a byte size such as `8GiB`, `512M`, `1.5 GiB`, `4096` or `2GB`.
///
/// ```
/// assert_eq!(vram_tier::parse_size("8GiB"), Ok(8 << 30));
/// assert_eq!(vram_tier::parse_size("1.5G"), Ok(3 << 29));
/// assert_eq!(vram_tier::parse_size("2GB"), Ok(2_000_000_000));
/// assert!(vram_tier::parse_size("lots").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        u => return Err(format!("unknown unit {u:?}")),
    };
    if num.is_empty() {
        return Err("expected a number, e.g. 8GiB".to_string());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| "too large".to_string());
    }
    let f: f64 = num.parse().map_err(|_| format!("bad number {num:?}"))?;
    let v = f * mult as f64;
    if !(v.is_finite() && v >= 0.0 && v < u64::MAX as f64) {
        return Err("too large".to_string());
    }
    Ok(v.round() as u64)
}
