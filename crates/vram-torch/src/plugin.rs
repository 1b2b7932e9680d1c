//! Per-device allocators behind the C functions (no unsafe code here).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use vram_alloc::SimDevice;
use vram_cuda::{CudaDevice, CudaHost};
use vram_tier::{parse_size, SimHost, TierConfig, TierError, TieredAllocator};

/// Everything that can go wrong in the plug-in.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// An allocator error (out of memory included).
    #[error(transparent)]
    Tier(#[from] TierError),
    /// The CUDA backend could not start (no driver, no such device, ...).
    #[error(transparent)]
    Cuda(#[from] vram_cuda::CudaError),
    /// A setting is malformed.
    #[error("invalid setting {0}")]
    Setting(String),
    /// The device ordinal is outside `0..64`.
    #[error("device {0} is out of range (0..64)")]
    BadDevice(i32),
    /// The device's allocator could not be created (the first error is kept).
    #[error("device {device} is unusable: {reason}")]
    Unusable {
        /// The device ordinal.
        device: i32,
        /// Why, e.g. "no NVIDIA driver: libcuda.so.1 not found".
        reason: String,
    },
    /// `vram_init` came after the device's allocator was created.
    #[error("device {0} is already initialized")]
    AlreadyInitialized(i32),
    /// Writing a snapshot failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// One device's allocator.
#[derive(Debug)]
pub enum Backend {
    /// A simulated device (`VRAM_BACKEND=sim`), for tests without a GPU.
    Sim(TieredAllocator<SimDevice, SimHost>),
    /// A real GPU.
    Cuda(TieredAllocator<CudaDevice, CudaHost>),
}

macro_rules! each {
    ($self:expr, $t:ident => $e:expr) => {
        match $self {
            Backend::Sim($t) => $e,
            Backend::Cuda($t) => $e,
        }
    };
}

impl Backend {
    /// Allocates; out of memory is an error.
    pub fn malloc(&self, size: u64, stream: u32) -> Result<u64, TierError> {
        each!(self, t => t.malloc(size, stream))
    }
    /// Frees.
    pub fn free(&self, addr: u64) -> Result<(), TierError> {
        each!(self, t => t.free(addr))
    }
    /// Statistics of every tier.
    pub fn stats(&self) -> vram_tier::TierStats {
        each!(self, t => t.stats())
    }
    /// The summary text.
    pub fn summary(&self) -> String {
        each!(self, t => t.memory_summary(false))
    }
    /// The snapshot pickle.
    pub fn snapshot_pickle(&self) -> Vec<u8> {
        each!(self, t => t.snapshot().to_pickle())
    }
    /// Returns cached memory.
    pub fn empty_cache(&self) {
        each!(self, t => t.empty_cache())
    }
    /// Marks the end of a training step; returns the bytes brought back
    /// from host memory.
    pub fn mark_step(&self) -> u64 {
        each!(self, t => t.mark_step())
    }
    /// Resets peaks.
    pub fn reset_peak_stats(&self) {
        each!(self, t => t.reset_peak_stats())
    }
    /// Which tier holds `addr`: 0 device, 1 host, 2 managed, 3 device
    /// address with its pages moved to host memory, -1 unknown.
    pub fn tier_code(&self, addr: u64) -> i32 {
        use vram_tier::Tier;
        match each!(self, t => t.tier_of(addr)) {
            Some(Tier::Device) => 0,
            Some(Tier::Host) => 1,
            Some(Tier::Managed) => 2,
            Some(Tier::Migrated) => 3,
            None => -1,
        }
    }
    /// The highest allocated bytes since the last call (a phase boundary of the planned
    /// tier's recorded step).
    pub fn take_phase_peak(&self) -> u64 {
        each!(self, t => t.take_phase_peak())
    }
    /// Plans a recorded step (JSON in, JSON out; see `vram_tier::plan::answer`).
    pub fn plan(&self, request: &str) -> Result<String, TierError> {
        each!(self, t => t.plan(request))
    }
    /// The allocator's timers.
    pub fn timers(&self) -> &vram_tier::Timers {
        each!(self, t => t.timers())
    }
    /// Checks invariants (tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        each!(self, t => t.check_invariants())
    }
    fn register_stream(&self, id: u32, raw: usize) {
        if let Backend::Cuda(t) = self {
            t.with_device(|d| d.register_stream(id, raw));
        }
    }
}

/// Parses a settings string `KEY=VALUE;KEY=VALUE` (also `,` or newlines as
/// separators) into a lookup that falls back to the process environment.
pub fn settings_from(s: &str) -> Result<HashMap<String, String>, PluginError> {
    let mut m = HashMap::new();
    for part in s
        .split([';', ',', '\n'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| PluginError::Setting(format!("{part:?}: expected KEY=VALUE")))?;
        let k = k.trim();
        if !k.starts_with("VRAM_") {
            return Err(PluginError::Setting(format!("{k:?}: not a VRAM_ variable")));
        }
        m.insert(k.to_string(), v.trim().to_string());
    }
    Ok(m)
}

pub(crate) const MAX_DEVICES: usize = 64;

pub(crate) struct Slot {
    settings: Mutex<Option<HashMap<String, String>>>,
    backend: OnceLock<Result<Backend, String>>,
    streams: Mutex<HashMap<usize, u32>>,
    /// The last plan's answer (JSON), kept for a caller whose buffer was too small.
    pub(crate) answer: Mutex<String>,
}

pub(crate) struct Plugin {
    slots: Vec<Slot>,
    pub(crate) last_error: Mutex<String>,
}

pub(crate) fn plugin() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| Plugin {
        slots: (0..MAX_DEVICES)
            .map(|_| Slot {
                settings: Mutex::new(None),
                backend: OnceLock::new(),
                streams: Mutex::new(HashMap::new()),
                answer: Mutex::new(String::new()),
            })
            .collect(),
        last_error: Mutex::new(String::new()),
    })
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Plugin {
    pub(crate) fn set_error(&self, e: impl std::fmt::Display) {
        *lock(&self.last_error) = e.to_string();
    }

    pub(crate) fn slot(&self, device: i32) -> Result<&Slot, PluginError> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.slots.get(d))
            .ok_or(PluginError::BadDevice(device))
    }

    /// Sets a device's settings before its first use.
    pub(crate) fn init(&self, device: i32, settings: &str) -> Result<(), PluginError> {
        let slot = self.slot(device)?;
        if slot.backend.get().is_some() {
            return Err(PluginError::AlreadyInitialized(device));
        }
        let m = settings_from(settings)?;
        // Validate now, so a bad setting is reported here and not at the first malloc.
        {
            let var = lookup(Some(&m));
            TierConfig::from_vars(&var)?;
            if let Some(b) =
                var("VRAM_BACKEND").filter(|b| !["", "cuda", "sim"].contains(&b.trim()))
            {
                return Err(PluginError::Setting(format!(
                    "VRAM_BACKEND={b:?}: expected cuda or sim"
                )));
            }
        }
        *lock(&slot.settings) = Some(m);
        Ok(())
    }

    /// The device's allocator, created on first use.
    pub(crate) fn backend(&self, device: i32) -> Result<&Backend, PluginError> {
        let slot = self.slot(device)?;
        let b = slot.backend.get_or_init(|| {
            let settings = lock(&slot.settings).clone();
            create(device, settings.as_ref()).map_err(|e| e.to_string())
        });
        b.as_ref()
            .map_err(|e| PluginError::Setting(format!("(device {device} unusable) {e}")))
    }

    /// The stream id for a raw `cudaStream_t`, registering it on first sight.
    pub(crate) fn stream_id(&self, device: i32, backend: &Backend, raw: usize) -> u32 {
        if raw == 0 {
            return 0;
        }
        let Ok(slot) = self.slot(device) else {
            return 0;
        };
        let mut s = lock(&slot.streams);
        if let Some(&id) = s.get(&raw) {
            return id;
        }
        // The allocator numbers streams 1..=65535. A program that creates
        // more distinct streams than that gets id 0 for the rest (their
        // blocks then share the default stream's pool: a known limitation).
        let id = u32::try_from(s.len() + 1)
            .ok()
            .filter(|&i| i <= 65535)
            .unwrap_or(0);
        s.insert(raw, id);
        backend.register_stream(id, raw);
        id
    }
}

fn lookup(settings: Option<&HashMap<String, String>>) -> impl Fn(&str) -> Option<String> + '_ {
    move |k: &str| {
        settings
            .and_then(|m| m.get(k).cloned())
            .or_else(|| std::env::var(k).ok())
    }
}

fn create(device: i32, settings: Option<&HashMap<String, String>>) -> Result<Backend, PluginError> {
    let var = lookup(settings);
    let cfg = TierConfig::from_vars(&var)?;
    match var("VRAM_BACKEND").as_deref().map(str::trim) {
        None | Some("") | Some("cuda") => {
            let dev = CudaDevice::open(device)?;
            let host = dev.host();
            Ok(Backend::Cuda(TieredAllocator::new(dev, host, cfg)?))
        }
        Some("sim") => {
            let size = |k: &str, default: u64| -> Result<u64, PluginError> {
                var(k).map_or(Ok(default), |v| {
                    parse_size(&v).map_err(|e| PluginError::Setting(format!("{k}={v:?}: {e}")))
                })
            };
            let host_capacity = size("VRAM_SIM_HOST_CAPACITY", 64 << 30)?;
            // The simulated device can back ranges with host memory too
            // (migration), from the same simulated host.
            let dev = SimDevice::new(size("VRAM_SIM_CAPACITY", 16 << 30)?)
                .with_host_capacity(host_capacity);
            let host = SimHost::new(host_capacity);
            Ok(Backend::Sim(TieredAllocator::new(dev, host, cfg)?))
        }
        Some(other) => Err(PluginError::Setting(format!(
            "VRAM_BACKEND={other:?}: expected cuda or sim"
        ))),
    }
}
