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
    /// CUDA compute capability major version (7 Volta/Turing, 8 Ampere/Ada, 9 Hopper; 9 for the
    /// MI300X, whose ROCm stack is not modelled separately).
    pub sm_major: u32,
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
        sm_major: 8,
    },
    Gpu {
        id: "a100-80g",
        name: "NVIDIA A100 80GB SXM",
        memory_bytes: 81_920 * MIB,
        half_tflops: 312.0,
        fp32_tflops: 19.5,
        hbm_gb_s: 2039.0,
        bf16: true,
        sm_major: 8,
    },
    Gpu {
        id: "h100-80g",
        name: "NVIDIA H100 80GB SXM",
        memory_bytes: 81_559 * MIB,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 3350.0,
        bf16: true,
        sm_major: 9,
    },
    Gpu {
        id: "h100-pcie",
        name: "NVIDIA H100 80GB PCIe",
        memory_bytes: 81_559 * MIB,
        half_tflops: 756.0,
        fp32_tflops: 51.2,
        hbm_gb_s: 2000.0,
        bf16: true,
        sm_major: 9,
    },
    Gpu {
        id: "h200",
        name: "NVIDIA H200 141GB SXM",
        memory_bytes: 143_771 * MIB,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 4800.0,
        bf16: true,
        sm_major: 9,
    },
    Gpu {
        id: "l4",
        name: "NVIDIA L4 24GB",
        memory_bytes: 23_034 * MIB,
        half_tflops: 121.0,
        fp32_tflops: 30.3,
        hbm_gb_s: 300.0,
        bf16: true,
        sm_major: 8,
    },
    Gpu {
        id: "l40s",
        name: "NVIDIA L40S 48GB",
        memory_bytes: 46_068 * MIB,
        half_tflops: 362.05,
        fp32_tflops: 91.6,
        hbm_gb_s: 864.0,
        bf16: true,
        sm_major: 8,
    },
    Gpu {
        id: "rtx-3090",
        name: "NVIDIA GeForce RTX 3090 24GB",
        memory_bytes: 24_576 * MIB,
        half_tflops: 71.0,
        fp32_tflops: 35.6,
        hbm_gb_s: 936.0,
        bf16: true,
        sm_major: 8,
    },
    Gpu {
        id: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090 24GB",
        memory_bytes: 24_564 * MIB,
        half_tflops: 165.2,
        fp32_tflops: 82.6,
        hbm_gb_s: 1008.0,
        bf16: true,
        sm_major: 8,
    },
    Gpu {
        id: "v100-16g",
        name: "NVIDIA V100 16GB SXM2",
        memory_bytes: 16_384 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
        sm_major: 7,
    },
    Gpu {
        id: "v100-32g",
        name: "NVIDIA V100 32GB SXM2",
        memory_bytes: 32_768 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
        sm_major: 7,
    },
    Gpu {
        id: "t4",
        name: "NVIDIA T4 16GB",
        memory_bytes: 15_360 * MIB,
        half_tflops: 65.0,
        fp32_tflops: 8.1,
        hbm_gb_s: 320.0,
        bf16: false,
        sm_major: 7,
    },
    Gpu {
        id: "mi300x",
        name: "AMD Instinct MI300X 192GB",
        memory_bytes: 196_608 * MIB,
        half_tflops: 1307.4,
        fp32_tflops: 163.4,
        hbm_gb_s: 5300.0,
        bf16: true,
        sm_major: 9,
    },
];

/// What a process holds on the device outside PyTorch's caching allocator (CUDA context, loaded
/// kernels and libraries), and where the figure comes from.
///
/// Measured: 767–779 MiB on an H100 80GB HBM3 with driver 580.159.04, CUDA 13.0 and PyTorch
/// 2.11 after training and `generate` steps (`mem_get_info` total − free, minus
/// `memory_reserved()`; vramkit's shared ground truth, 2026-11-22). The largest reading is
/// used, so a verdict of "fits" keeps to the safe side. Other GPUs have not been measured here;
/// they get the same figure, and [`Gpu::context_source`] says so.
pub const H100_CUDA13_CONTEXT_BYTES: u64 = 779 * MIB;

/// cuBLAS workspaces PyTorch allocates through its caching allocator once matrix products have
/// run: 32 MiB per handle on compute capability 9.x (PyTorch's Hopper default), two handles
/// (cuBLAS and cuBLASLt) measured as 64–66 MiB allocated before the first step on the H100
/// (shared ground truth, 2026-11-22). Before Hopper PyTorch's default per handle is
/// `:4096:2:16:8`, 4096 KiB × 2 + 16 KiB × 8.
pub fn workspace_bytes(sm_major: u32) -> u64 {
    let per_handle = if sm_major >= 9 {
        32 * MIB
    } else {
        2 * 4096 * 1024 + 8 * 16 * 1024
    };
    2 * per_handle
}

impl Gpu {
    /// Bytes outside the caching allocator on this GPU (see [`H100_CUDA13_CONTEXT_BYTES`]).
    pub fn context_bytes(&self) -> u64 {
        H100_CUDA13_CONTEXT_BYTES
    }
    /// Where [`Gpu::context_bytes`] comes from.
    pub fn context_source(&self) -> &'static str {
        if self.id.starts_with("h100") {
            "measured: H100 80GB HBM3, CUDA 13.0, driver 580, PyTorch 2.11"
        } else {
            "not measured on this GPU; the H100/CUDA 13 measurement is used"
        }
    }
    /// cuBLAS workspace bytes inside the caching allocator (see [`workspace_bytes`]).
    pub fn workspace_bytes(&self) -> u64 {
        workspace_bytes(self.sm_major)
    }
}

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
