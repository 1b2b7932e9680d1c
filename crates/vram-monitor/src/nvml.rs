//! The real source: NVML, loaded at run time.
//!
//! nvml-wrapper opens `libnvidia-ml.so.1` with `libloading` inside
//! `Nvml::init()` and resolves every symbol as a `Result`, so a machine without
//! the driver gets `Err(LibloadingError)` and a driver missing a newer symbol
//! gets `Err(FailedToLoadSymbol)`: neither panics. Initialisation is still
//! wrapped in `catch_unwind` so that no panic from below can escape.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::procinfo::ProcessNames;
use crate::{GpuSample, MonitorError, ProcessSample, Result, Sample, Source};

/// Reads every GPU through NVML.
pub struct NvmlSource {
    nvml: Nvml,
    devices: Vec<(String, String)>,
    driver: String,
    names: ProcessNames,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("devices", &self.devices)
            .field("driver", &self.driver)
            .finish()
    }
}

fn unavailable(e: NvmlError) -> MonitorError {
    let reason = match e {
        NvmlError::LibloadingError(_) => {
            "libnvidia-ml.so.1 could not be loaded; is the NVIDIA driver installed?".to_string()
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        other => other.to_string(),
    };
    MonitorError::NvmlUnavailable { reason }
}

fn call_err(call: &'static str) -> impl Fn(NvmlError) -> MonitorError {
    move |e| MonitorError::Nvml {
        call,
        message: e.to_string(),
    }
}

impl NvmlSource {
    /// Load NVML and list the GPUs.
    ///
    /// # Errors
    /// [`MonitorError::NvmlUnavailable`] when the library or driver is missing,
    /// or when there are no GPUs.
    pub fn new() -> Result<Self> {
        let nvml = catch_unwind(Nvml::init)
            .map_err(|_| MonitorError::NvmlUnavailable {
                reason: "NVML initialisation panicked".into(),
            })?
            .map_err(unavailable)?;
        let count = nvml.device_count().map_err(unavailable)?;
        if count == 0 {
            return Err(MonitorError::NvmlUnavailable {
                reason: "NVML reports no GPUs".into(),
            });
        }
        let mut devices = Vec::with_capacity(count as usize);
        for i in 0..count {
            let dev = nvml.device_by_index(i).map_err(unavailable)?;
            let name = dev.name().unwrap_or_else(|_| format!("GPU {i}"));
            let uuid = dev.uuid().unwrap_or_else(|_| format!("GPU-index-{i}"));
            devices.push((name, uuid));
        }
        let driver = nvml.sys_driver_version().unwrap_or_else(|_| "?".into());
        Ok(NvmlSource {
            nvml,
            devices,
            driver,
            names: ProcessNames::new(),
        })
    }

    fn sample_inner(&mut self, t_ms: u64) -> Result<Sample> {
        let mut gpus = Vec::with_capacity(self.devices.len());
        for (i, (name, uuid)) in self.devices.iter().enumerate() {
            let index = i as u32;
            let dev = self
                .nvml
                .device_by_index(index)
                .map_err(call_err("nvmlDeviceGetHandleByIndex"))?;
            let mem = dev
                .memory_info()
                .map_err(call_err("nvmlDeviceGetMemoryInfo"))?;
            let utilization_pct = dev.utilization_rates().ok().map(|u| u.gpu);
            // A process may appear in both lists; keep the larger figure.
            let mut by_pid: BTreeMap<u32, Option<u64>> = BTreeMap::new();
            let mut note = None;
            for list in [
                dev.running_compute_processes(),
                dev.running_graphics_processes(),
            ] {
                match list {
                    Ok(procs) => {
                        for p in procs {
                            let bytes = match p.used_gpu_memory {
                                UsedGpuMemory::Used(b) => Some(b),
                                UsedGpuMemory::Unavailable => None,
                            };
                            let e = by_pid.entry(p.pid).or_insert(None);
                            *e = match (*e, bytes) {
                                (Some(a), Some(b)) => Some(a.max(b)),
                                (a, b) => a.or(b),
                            };
                        }
                    }
                    Err(NvmlError::NotSupported) => {}
                    Err(e) => note = Some(format!("process list unavailable: {e}")),
                }
            }
            let processes = by_pid
                .into_iter()
                .map(|(pid, gpu_memory_bytes)| {
                    let (user, command) = self.names.lookup(pid);
                    let command = if command == "?" {
                        self.nvml
                            .sys_process_name(pid, 256)
                            .unwrap_or_else(|_| "?".into())
                    } else {
                        command
                    };
                    ProcessSample {
                        pid,
                        user,
                        command,
                        gpu_memory_bytes,
                    }
                })
                .collect();
            gpus.push(GpuSample {
                index,
                name: name.clone(),
                uuid: uuid.clone(),
                memory_total_bytes: mem.total,
                memory_used_bytes: mem.used,
                utilization_pct,
                processes,
                note,
            });
        }
        Ok(Sample {
            t_ms,
            source: "nvml".into(),
            gpus,
        })
    }
}

impl Source for NvmlSource {
    fn sample(&mut self, t_ms: u64) -> Result<Sample> {
        catch_unwind(AssertUnwindSafe(|| self.sample_inner(t_ms))).unwrap_or_else(|_| {
            Err(MonitorError::Nvml {
                call: "sample",
                message: "panicked inside NVML wrapper".into(),
            })
        })
    }

    fn describe(&self) -> String {
        format!("NVML, driver {} ({} GPUs)", self.driver, self.devices.len())
    }
}
