//! The GPU catalog: memory sizes and peak rates.
//!
//! Memory is the total the driver reports (`nvidia-smi --query-gpu=memory.total`, MiB; for the
//! MI300X `rocm-smi`), not the marketing figure. Peak rates are dense (no sparsity) tensor-core
//! rates from each vendor's datasheet: A100 (2020), H100 (SXM and PCIe, 2023), H200 (2024),
//! L4, L40S, GeForce RTX 3090/4090 (fp16 with fp32 accumulate), V100 and T4 (fp16; no bf16),
//! MI300X (AMD CDNA3 datasheet).

use serde::Serialize;

use crate::error::{Error, Result};

const MIB: u64 = 1 << 20;

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gpu {
    /// Catalog id, e.g. `h100-80g`.
    pub id: &'static str,
    /// Marketing name.
    pub name: &'static str,
    /// Total device memory in bytes as the driver reports it.
    pub memory_bytes: u64,
    /// Dense bf16 (fp16 where the GPU lacks bf16) tensor-core peak, TFLOP/s.
    pub half_tflops: f64,
    /// Plain fp32 (non-tensor-core) peak, TFLOP/s.
    pub fp32_tflops: f64,
    /// Memory bandwidth, GB/s.
    pub hbm_gb_s: f64,
    /// Whether the GPU runs bf16 natively (Ampere and later).
    pub bf16: bool,
}

/// Every GPU in the catalog.
pub const GPUS: &[Gpu] = &[
    Gpu {
        id: "a100-40g",
        name: "NVIDIA A100 40GB SXM",
        memory_bytes: 40_960 * MIB,
        half_tflops: 312.0,
        fp32_tflops: 19.5,
        hbm_gb_s: 1555.0,
        bf16: true,
    },
    Gpu {
        id: "a100-80g",
        name: "NVIDIA A100 80GB SXM",
        memory_bytes: 81_920 * MIB,
        half_tflops: 312.0,
        fp32_tflops: 19.5,
        hbm_gb_s: 2039.0,
        bf16: true,
    },
    Gpu {
        id: "h100-80g",
        name: "NVIDIA H100 80GB SXM",
        memory_bytes: 81_559 * MIB,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 3350.0,
        bf16: true,
    },
    Gpu {
        id: "h100-pcie",
        name: "NVIDIA H100 80GB PCIe",
        memory_bytes: 81_559 * MIB,
        half_tflops: 756.0,
        fp32_tflops: 51.2,
        hbm_gb_s: 2000.0,
        bf16: true,
    },
    Gpu {
        id: "h200",
        name: "NVIDIA H200 141GB SXM",
        memory_bytes: 143_771 * MIB,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 4800.0,
        bf16: true,
    },
    Gpu {
        id: "l4",
        name: "NVIDIA L4 24GB",
        memory_bytes: 23_034 * MIB,
        half_tflops: 121.0,
        fp32_tflops: 30.3,
        hbm_gb_s: 300.0,
        bf16: true,
    },
    Gpu {
        id: "l40s",
        name: "NVIDIA L40S 48GB",
        memory_bytes: 46_068 * MIB,
        half_tflops: 362.05,
        fp32_tflops: 91.6,
        hbm_gb_s: 864.0,
        bf16: true,
    },
    Gpu {
        id: "rtx-3090",
        name: "NVIDIA GeForce RTX 3090 24GB",
        memory_bytes: 24_576 * MIB,
        half_tflops: 71.0,
        fp32_tflops: 35.6,
        hbm_gb_s: 936.0,
        bf16: true,
    },
    Gpu {
        id: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090 24GB",
        memory_bytes: 24_564 * MIB,
        half_tflops: 165.2,
        fp32_tflops: 82.6,
        hbm_gb_s: 1008.0,
        bf16: true,
    },
    Gpu {
        id: "v100-16g",
        name: "NVIDIA V100 16GB SXM2",
        memory_bytes: 16_384 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
    },
    Gpu {
        id: "v100-32g",
        name: "NVIDIA V100 32GB SXM2",
        memory_bytes: 32_768 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
    },
    Gpu {
        id: "t4",
        name: "NVIDIA T4 16GB",
        memory_bytes: 15_360 * MIB,
        half_tflops: 65.0,
        fp32_tflops: 8.1,
        hbm_gb_s: 320.0,
        bf16: false,
    },
    Gpu {
        id: "mi300x",
        name: "AMD Instinct MI300X 192GB",
        memory_bytes: 196_608 * MIB,
        half_tflops: 1307.4,
        fp32_tflops: 163.4,
        hbm_gb_s: 5300.0,
        bf16: true,
    },
];

/// Other spellings users type for the same GPUs.
const ALIASES: &[(&str, &str)] = &[
    ("a100", "a100-80g"),
    ("a100-40gb", "a100-40g"),
    ("a100-80gb", "a100-80g"),
    ("h100", "h100-80g"),
    ("h100-sxm", "h100-80g"),
    ("h100-80gb", "h100-80g"),
    ("h200-141g", "h200"),
    ("3090", "rtx-3090"),
    ("4090", "rtx-4090"),
    ("rtx3090", "rtx-3090"),
    ("rtx4090", "rtx-4090"),
    ("v100", "v100-32g"),
];

/// Looks up a GPU by id or alias, case-insensitively.
pub fn lookup(name: &str) -> Result<&'static Gpu> {
    let lower = name.to_ascii_lowercase();
    let id = ALIASES
        .iter()
        .find(|(a, _)| *a == lower)
        .map_or(lower.as_str(), |(_, id)| id);
    GPUS.iter()
        .find(|g| g.id == id)
        .ok_or_else(|| Error::Unknown {
            kind: "GPU",
            name: name.into(),
            known: GPUS.iter().map(|g| g.id).collect::<Vec<_>>().join(", "),
        })
}
