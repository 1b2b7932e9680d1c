use serde::{Deserialize, Serialize};

/// One reading of every GPU and its processes at one instant.
///
/// Serialises to one JSON object, numbers as numbers; this is both the
/// `vram top --json` output and one line of a `vram record` timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time of the reading, milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Where the reading came from: `"nvml"` or `"simulated"`.
    pub source: String,
    /// One entry per GPU, in NVML index order.
    pub gpus: Vec<GpuSample>,
}

/// One GPU in a [`Sample`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML index of the device.
    pub index: u32,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Stable device identifier (`GPU-…`).
    pub uuid: String,
    /// Installed framebuffer memory in bytes.
    pub memory_total_bytes: u64,
    /// Framebuffer memory in use, in bytes (all processes plus the driver).
    pub memory_used_bytes: u64,
    /// Percent of the last sample period in which a kernel ran; `None` when the
    /// device does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<u32>,
    /// Processes holding memory on this GPU.
    pub processes: Vec<ProcessSample>,
    /// Why part of the reading is missing (e.g. no permission to list
    /// processes); absent when the reading is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One process on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    /// Process id as the host (or the driver) sees it.
    pub pid: u32,
    /// Login name of the owner, or `?` when unknown (another PID namespace).
    pub user: String,
    /// Command line, or `?` when unknown.
    pub command: String,
    /// GPU memory held by the process in bytes; `None` when the driver does
    /// not report it (e.g. Windows WDDM).
    pub gpu_memory_bytes: Option<u64>,
}

impl GpuSample {
    /// Fraction of the GPU's memory in use, 0.0 to 1.0 (0 when total is 0).
    pub fn used_fraction(&self) -> f64 {
        if self.memory_total_bytes == 0 {
            0.0
        } else {
            self.memory_used_bytes as f64 / self.memory_total_bytes as f64
        }
    }
}

impl Sample {
    /// Serialise to one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain structs with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
