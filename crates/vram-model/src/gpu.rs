//! The GPU catalog: memory sizes and peak rates.
//!
//! Memory is the device total as PyTorch reports it (`torch.cuda.get_device_properties().total_memory`,
//! the total of `torch.cuda.mem_get_info`, which vLLM logs as `total_gpu_memory` and PyTorch's
//! out-of-memory message as "total capacity"), not nvidia-smi's figure (which counts memory the
//! driver keeps: 81559 MiB on an H100 whose torch total is 79.19 GiB) nor the marketing one. Each
//! entry names its source in `memory_source`: `torch:` a public text that prints PyTorch's total
//! (a `_CudaDeviceProperties` repr gives `total_memory` in whole MiB, an out-of-memory message GiB
//! to two decimals), `measured:` the project's own reading, `nvidia-smi:`/`rocm-smi:`/`NVML` a
//! driver reading kept where no torch figure is known or taken yet (a few hundred MiB above
//! torch's; the L4's says why), or why it is unverified. Peak rates are dense (no sparsity) tensor-core
//! rates from each vendor's datasheet: A100 (2020), H100 (SXM and PCIe, 2023), H200 (2024),
//! L4, L40S, GeForce RTX 3090/4090 (fp16 with fp32 accumulate), V100 and T4 (fp16; no bf16),
//! MI300X (AMD CDNA3 datasheet); A10, A40, L40, RTX A6000 (NVIDIA datasheets, dense), GeForce
//! RTX 4060/4070/4080 (twice the fp32 rate, as the 4090's fp16-with-fp32-accumulate), RTX 5090,
//! H20 (148 TFLOP/s bf16, 4.0/4.8 TB/s), B200 (2.25 PFLOP/s dense bf16), MI250 (per GCD: half
//! of the OAM module's 362 TFLOP/s and 3.2 TB/s), MI325X.

use serde::Serialize;

use crate::error::{Error, Result};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A GPU's vendor, and with it the runtime PyTorch and the engines use on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vendor {
    /// NVIDIA: CUDA.
    Nvidia,
    /// AMD Instinct: ROCm (HIP).
    Amd,
}

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gpu {
    /// Catalog id, e.g. `h100-80g`.
    pub id: &'static str,
    /// Marketing name.
    pub name: &'static str,
    /// Whose GPU it is, which decides the software stack it runs (CUDA or ROCm).
    pub vendor: Vendor,
    /// Total device memory in bytes as PyTorch reports it (see the module docs; entries whose
    /// source is a driver reading still carry the driver's larger figure).
    pub memory_bytes: u64,
    /// Dense bf16 (fp16 where the GPU lacks bf16) tensor-core peak, TFLOP/s.
    pub half_tflops: f64,
    /// Plain fp32 (non-tensor-core) peak, TFLOP/s.
    pub fp32_tflops: f64,
    /// Memory bandwidth, GB/s.
    pub hbm_gb_s: f64,
    /// Whether the GPU runs bf16 natively (Ampere and later).
    pub bf16: bool,
    /// CUDA compute capability major version (6 Pascal, 7 Volta/Turing, 8 Ampere/Ada, 9 Hopper,
    /// 10 Blackwell data-centre, 12 Blackwell GeForce; 9 for AMD Instinct GPUs, whose ROCm
    /// stack is not modelled separately).
    pub sm_major: u32,
    /// CUDA compute capability minor version (8.9 for Ada, 7.5 for Turing; ROCm's `gfx` minor
    /// for AMD: 9.4 on MI300). The quantizers compare the pair (`torch.cuda.get_device_capability()`).
    pub sm_minor: u32,
    /// Where [`Gpu::memory_bytes`] comes from: a driver reading (`nvidia-smi` / NVML /
    /// `rocm-smi`) in a named public log, or why the figure is unverified.
    pub memory_source: &'static str,
}

impl Gpu {
    /// The GPU as a sentence names it beside its memory: `NVIDIA H100 80GB SXM (79.2 GiB)`. A GPU
    /// given by its size alone already names that size, so it reads as its name alone (`a 23.58
    /// GiB GPU (rates of the NVIDIA H100 80GB SXM assumed)`), not with a second size in a second
    /// pair of parentheses.
    pub fn with_memory(&self) -> String {
        named_with_memory(self.id, self.name, self.memory_bytes)
    }

    /// How an answer writes the GPU where it names it in a list or a count (and the `gpu` field
    /// of `vram plan`'s, `vram batch`'s and `vram checkpoint`'s JSON): a catalog GPU by its id
    /// (`h100`), one given by its size alone by its name, which names that size (`a 23.58 GiB
    /// GPU (rates of the NVIDIA H100 80GB SXM assumed)`), never by the placeholder id `custom`.
    pub fn label(&self) -> &'static str {
        if self.id == "custom" {
            self.name
        } else {
            self.id
        }
    }

    /// `n` of this GPU, as a plan's first line counts them: `8 x h100`; for a GPU given by its
    /// size alone, `8 x 23.58 GiB GPUs (rates of the NVIDIA H100 80GB SXM assumed)`.
    pub fn times(&self, n: u64) -> String {
        if self.id == "custom" {
            format!(
                "{n} x {} GPU{} ({})",
                bare_size(self.memory_bytes),
                if n == 1 { "" } else { "s" },
                bare_rates()
            )
        } else {
            format!("{n} x {}", self.id)
        }
    }

    /// The compute capability `(major, minor)`, as `torch.cuda.get_device_capability()` gives it.
    pub fn capability(&self) -> (u32, u32) {
        (self.sm_major, self.sm_minor)
    }

    /// An AMD GPU, which runs ROCm (the catalog's `vendor`); NVIDIA's run CUDA.
    pub fn is_rocm(&self) -> bool {
        self.vendor == Vendor::Amd
    }
}

/// Every GPU in the catalog.
pub const GPUS: &[Gpu] = &[
    Gpu {
        id: "a100-40g",
        name: "NVIDIA A100 40GB SXM",
        vendor: Vendor::Nvidia,
        memory_bytes: 42_294_690_447,
        half_tflops: 312.0,
        fp32_tflops: 19.5,
        hbm_gb_s: 1555.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 0,
        memory_source: "torch: vLLM 0.15.1's total_gpu_memory (39.39GiB), the mem_get_info total (ilseokoh/vllm-gce README.md, one A100-SXM4-40GB)",
    },
    Gpu {
        id: "a100-80g",
        name: "NVIDIA A100 80GB SXM",
        vendor: Vendor::Nvidia,
        memory_bytes: 84_986_665_370,
        half_tflops: 312.0,
        fp32_tflops: 19.5,
        hbm_gb_s: 2039.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 0,
        memory_source: "torch: 'GPU 0 has a total capacity of 79.15 GiB' beside nvidia-smi's 81920MiB (an A100 80GB troubleshooting note found by text search, code index id 12686617020)",
    },
    Gpu {
        id: "h100-80g",
        name: "NVIDIA H100 80GB SXM",
        vendor: Vendor::Nvidia,
        memory_bytes: 85_029_615_043,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 3350.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "torch: vLLM 0.19.0's worker snapshot total_memory=79.19GiB and 'GPU 1 has a total capacity of 79.19 GiB' on H100 80GB HBM3 (llm-d-incubation/llm-d-planner#d3121e0 accuracy/results/v0.19.0/logs)",
    },
    Gpu {
        id: "h100-pcie",
        name: "NVIDIA H100 80GB PCIe",
        vendor: Vendor::Nvidia,
        memory_bytes: 81_008 * MIB,
        half_tflops: 756.0,
        fp32_tflops: 51.2,
        hbm_gb_s: 2000.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "torch: \"_CudaDeviceProperties(name='NVIDIA H100 PCIe', major=9, minor=0, total_memory=81008MB, ...)\" (torch.cuda.get_device_properties, whole MiB; a public script's comment found by text search, code index id 33356850601): 82 MiB below the SXM part's 79.19 GiB",
    },
    Gpu {
        id: "h200",
        name: "NVIDIA H200 141GB SXM",
        vendor: Vendor::Nvidia,
        memory_bytes: 150_109_880_320,
        half_tflops: 989.4,
        fp32_tflops: 66.9,
        hbm_gb_s: 4800.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "measured: torch.cuda.get_device_properties().total_memory 150109880320 on an NVIDIA H200 (driver 580.159.04, PyTorch 2.11, shared ground truth 2026-11-27, env.json)",
    },
    Gpu {
        id: "l4",
        name: "NVIDIA L4 24GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 22_700 * MIB,
        half_tflops: 121.0,
        fp32_tflops: 30.3,
        hbm_gb_s: 300.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: 'GPU: NVIDIA L4. Max memory: 22.168 GB' (Unsloth 2024.8's banner prints total_memory / 2^30 to three decimals, PyTorch 2.3; code index id 28301952272), taken as 22,700 MiB (22.16797 GiB; the banner's rounding leaves +-0.5 MiB). nvidia-smi lists the card at 23034 MiB (modal-labs/modal-client#2797)",
    },
    Gpu {
        id: "l40s",
        name: "NVIDIA L40S 48GB",
        vendor: Vendor::Nvidia,
        // 44.39 GiB (47,663,399,567 B to the printed hundredth of a GiB): ECC is on by default on
        // the L40S, so torch sees less than the L20's 47.50 GiB on the same 48 GB of GDDR6.
        memory_bytes: 47_663_399_567,
        half_tflops: 362.05,
        fp32_tflops: 91.6,
        hbm_gb_s: 864.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: vLLM 0.6.6.post1's total_gpu_memory (44.39GiB) on each of an EC2 g6e.48xlarge's eight L40S (InternVL3-78B at TP 8; gnosia93/vlm-distillation's EC2 inference notes, code index id 54553382182; not a capacity case)",
    },
    Gpu {
        id: "l20",
        name: "NVIDIA L20 48GB",
        vendor: Vendor::Nvidia,
        // 47.503 GiB: total_memory / 2^30 as Unsloth's banner prints it ("Max memory").
        memory_bytes: 51_005_957_865,
        half_tflops: 119.5,
        fp32_tflops: 59.8,
        hbm_gb_s: 864.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: Unsloth 2025.9.4's banner 'NVIDIA L20. Num GPUs = 1. Max memory: 47.503 GB' (torch.cuda.get_device_properties(0).total_memory / 2^30) in a fork of Infrasys-AI/AIInfra's Qwen3-4B fine-tuning notebook (04Train/05FineTune/Code01Qwen3SFT, code index id 3746197032)",
    },
    Gpu {
        id: "rtx-3090",
        name: "NVIDIA GeForce RTX 3090 24GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 25_318_832_210,
        half_tflops: 71.0,
        fp32_tflops: 35.6,
        hbm_gb_s: 936.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 6,
        memory_source: "torch: vLLM 0.6.4's total_gpu_memory=23.58GiB on an RTX 3090 (vllm-project/vllm#10517)",
    },
    Gpu {
        id: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090 24GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 25_286_619_955,
        half_tflops: 165.2,
        fp32_tflops: 82.6,
        hbm_gb_s: 1008.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: vLLM 0.7's 'total_gpu_memory x gpu_memory_utilization (0.98) = 23.08GiB' on two RTX 4090 (vllm-project/vllm#13061; 23.08 / 0.98)",
    },
    Gpu {
        id: "v100-16g",
        name: "NVIDIA V100 16GB SXM2",
        vendor: Vendor::Nvidia,
        memory_bytes: 16_160 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
        sm_major: 7,
        sm_minor: 0,
        memory_source: "torch: \"_CudaDeviceProperties(name='Tesla V100-SXM2-16GB', major=7, minor=0, total_memory=16160MB, ...)\" in public READMEs found by text search (code index ids 3846184127, 18215037660); 'GPU 0; 15.78 GiB total capacity' on 16 GB V100s (Jack000/glid-3-xl-stable#21, the doctor's public.txt)",
    },
    Gpu {
        id: "v100-32g",
        name: "NVIDIA V100 32GB SXM2",
        vendor: Vendor::Nvidia,
        memory_bytes: 32_510 * MIB,
        half_tflops: 125.0,
        fp32_tflops: 15.7,
        hbm_gb_s: 900.0,
        bf16: false,
        sm_major: 7,
        sm_minor: 0,
        memory_source: "torch: \"_CudaDeviceProperties(name='Tesla V100-PCIE-32GB', major=7, minor=0, total_memory=32510MB, ...)\" (a public note found by text search, code index id 11514071660; the SXM2 part has the same 32 GB HBM2); '31.75 GiB total capacity' on 8x V100 32G (hiyouga/LlamaFactory#1221, the doctor's public.txt)",
    },
    Gpu {
        id: "t4",
        name: "NVIDIA T4 16GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 15_826_954_486,
        half_tflops: 65.0,
        fp32_tflops: 8.1,
        hbm_gb_s: 320.0,
        bf16: false,
        sm_major: 7,
        sm_minor: 5,
        memory_source: "torch: '(GPU 0; 14.74 GiB total capacity ...)' on a g4dn.2xlarge T4 (a public README found by text search, code index id 39922602093)",
    },
    Gpu {
        id: "mi300x",
        name: "AMD Instinct MI300X 192GB",
        vendor: Vendor::Amd,
        memory_bytes: 206_136_955_372,
        half_tflops: 1307.4,
        fp32_tflops: 163.4,
        hbm_gb_s: 5300.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 4,
        memory_source: "torch (ROCm): vLLM's device_memory 191.98 GiB on an MI300X (vllm-project/vllm#53961)",
    },
    Gpu {
        id: "a10",
        name: "NVIDIA A10 24GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 23_718_956_892,
        half_tflops: 125.0,
        fp32_tflops: 31.2,
        hbm_gb_s: 600.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 6,
        memory_source: "torch: 'GPU 1 has a total capacity of 22.09 GiB' on an A10 (vllm-project/vllm#10034)",
    },
    Gpu {
        id: "a40",
        name: "NVIDIA A40 48GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 45_416 * MIB,
        half_tflops: 149.7,
        fp32_tflops: 37.4,
        hbm_gb_s: 696.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 6,
        memory_source: "torch: \"_CudaDeviceProperties(name='NVIDIA A40', major=8, minor=6, total_memory=45416MB, ...)\" (a public device listing found by text search, code index id 31908259347): 652 MiB below nvidia-smi's 46068 MiB",
    },
    Gpu {
        id: "l40",
        name: "NVIDIA L40 48GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 47_674_136_986,
        half_tflops: 181.05,
        fp32_tflops: 90.5,
        hbm_gb_s: 864.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: 'GPU 0 has a total capacity of 44.40 GiB' on a single L40 (QwenLM/Qwen3-VL#2097); the L40S prints 44.39 GiB",
    },
    Gpu {
        id: "rtx-a6000",
        name: "NVIDIA RTX A6000 48GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 48_676 * MIB,
        half_tflops: 154.8,
        fp32_tflops: 38.7,
        hbm_gb_s: 768.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 6,
        memory_source: "torch: \"_CudaDeviceProperties(name='NVIDIA RTX A6000', major=8, minor=6, total_memory=48676MB, ...)\" (a public README found by text search, code index id 11265254500): 464 MiB below nvidia-smi's 49140 MiB",
    },
    Gpu {
        id: "rtx-4060",
        name: "NVIDIA GeForce RTX 4060 8GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 8_188 * MIB,
        half_tflops: 30.2,
        fp32_tflops: 15.1,
        hbm_gb_s: 272.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "unverified: 8188 MiB (8 GiB less the 4 MiB the Ada GeForce cards reserve, as the 4070's 12282 and 4090's 24564)",
    },
    Gpu {
        id: "rtx-4070",
        name: "NVIDIA GeForce RTX 4070 12GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 12_282 * MIB,
        half_tflops: 58.3,
        fp32_tflops: 29.1,
        hbm_gb_s: 504.0,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "nvidia-smi: 12282MiB, driver 550.40.07 (Frogging-Family/nvidia-all#212)",
    },
    Gpu {
        id: "rtx-4080",
        name: "NVIDIA GeForce RTX 4080 16GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 16_049 * MIB,
        half_tflops: 97.5,
        fp32_tflops: 48.7,
        hbm_gb_s: 716.8,
        bf16: true,
        sm_major: 8,
        sm_minor: 9,
        memory_source: "torch: \"_CudaDeviceProperties(name='NVIDIA GeForce RTX 4080', major=8, minor=9, total_memory=16049MB, ...)\" (a public GPU set-up page found by text search, code index id 22567041692)",
    },
    Gpu {
        id: "rtx-5090",
        name: "NVIDIA GeForce RTX 5090 32GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 33_672_543_601,
        half_tflops: 209.5,
        fp32_tflops: 104.8,
        hbm_gb_s: 1792.0,
        bf16: true,
        sm_major: 12,
        sm_minor: 0,
        memory_source: "torch: 'GPU 0 has a total capacity of 31.36 GiB' in an SGLang log titled 'CUDA OOM on RTX 5090 32GB' (a public note found by text search, code index id 57035389060); nvidia-smi lists 32607 MiB",
    },
    Gpu {
        id: "gtx-1080",
        name: "NVIDIA GeForce GTX 1080 8GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 8_118 * MIB,
        half_tflops: 8.9,
        fp32_tflops: 8.9,
        hbm_gb_s: 320.0,
        bf16: false,
        sm_major: 6,
        sm_minor: 1,
        memory_source: "torch: \"_CudaDeviceProperties(name='GeForce GTX 1080', major=6, minor=1, total_memory=8118MB, ...)\" (a public note found by text search, code index id 48456417285); no tensor cores: half precision priced at the fp32 rate",
    },
    Gpu {
        id: "h20",
        name: "NVIDIA H20 96GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 97_285 * MIB,
        half_tflops: 148.0,
        fp32_tflops: 44.0,
        hbm_gb_s: 4000.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "torch: \"_CudaDeviceProperties(name='NVIDIA H20', major=9, minor=0, total_memory=97285MB, ...)\" (a comment in public Triton attention kernels found by text search, code index id 16063499930): 586 MiB below nvidia-smi's 97871 MiB",
    },
    Gpu {
        id: "h20-141g",
        name: "NVIDIA H20 141GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 150_109_880_320,
        half_tflops: 148.0,
        fp32_tflops: 44.0,
        hbm_gb_s: 4800.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "unverified: the H200's torch total (150109880320 B) for the same 141 GB HBM3e",
    },
    Gpu {
        id: "b200",
        name: "NVIDIA B200 180GB",
        vendor: Vendor::Nvidia,
        memory_bytes: 191_501_854_310,
        half_tflops: 2250.0,
        fp32_tflops: 80.0,
        hbm_gb_s: 8000.0,
        bf16: true,
        sm_major: 10,
        sm_minor: 0,
        memory_source: "torch: unsloth's 'Total VRAM: 178.35 GB' (total_memory / 2^30) on a B200 (unslothai/unsloth#3411)",
    },
    Gpu {
        id: "mi250",
        name: "AMD Instinct MI250 (one GCD, 64GB)",
        vendor: Vendor::Amd,
        memory_bytes: 65_520 * MIB,
        half_tflops: 181.0,
        fp32_tflops: 22.6,
        hbm_gb_s: 1638.4,
        bf16: true,
        sm_major: 9,
        sm_minor: 0,
        memory_source: "torch (ROCm): \"_CudaDeviceProperties(name='AMD Instinct MI250X/MI250', major=9, minor=0, gcnArchName='gfx90a', total_memory=65520MB, ...)\" per GCD (a public note found by text search, code index id 5556608319; rocm-smi's 68702699520 B is the same); each of the two GCDs is a device",
    },
    Gpu {
        id: "mi325x",
        name: "AMD Instinct MI325X 256GB",
        vendor: Vendor::Amd,
        memory_bytes: 262_144 * MIB,
        half_tflops: 1307.4,
        fp32_tflops: 163.4,
        hbm_gb_s: 6000.0,
        bf16: true,
        sm_major: 9,
        sm_minor: 4,
        memory_source: "unverified: 256 GiB nominal",
    },
];

/// What a process holds on the device outside PyTorch's caching allocator (CUDA context, loaded
/// kernels and libraries), and where the figure comes from.
///
/// Measured: 767–779 MiB on an H100 80GB HBM3 with driver 580.159.04, CUDA 13.0 and PyTorch
/// 2.11 after training and `generate` steps (`mem_get_info` total − free, minus
/// `memory_reserved()`; vramkit's shared ground truth, 2026-11-22). The largest reading is
/// used, so a verdict of "fits" keeps to the safe side. GPUs without their own measurement get
/// this figure, and [`Gpu::context_source`] says so.
pub const H100_CUDA13_CONTEXT_BYTES: u64 = 779 * MIB;

/// The same quantity measured on an NVIDIA H200 (driver 580.159.04, CUDA 13.0, PyTorch
/// 2.11.0+cu130, transformers 5.24; vramkit's shared ground truth, 2026-11-27): `mem_get_info`
/// total − free minus `memory_reserved()` after each case, 766.8 MiB after the first training
/// step of a fresh process rising to 780.8 MiB over the plain transformers cases (kernels load as
/// new operators first run), 700.8–706.8 MiB in a process that only ran `generate`. The largest
/// plain-transformers reading is used, as for the H100. (Later cases of that run, after PEFT, TRL
/// and bitsandbytes were imported, read up to 800.8 MiB; the 753,729,536 B the run recorded as
/// `context_used_bytes` is total − free right after cuBLAS initialisation, before any kernel of a
/// model had loaded, and it includes the 32 MiB cuBLAS workspace and a 2 MiB segment that sit
/// inside the caching allocator, which the estimate counts there.)
pub const H200_CUDA13_CONTEXT_BYTES: u64 = 818_741_248;

/// A fresh process's CUDA context before its first kernel has run, under lazy module loading
/// (`CUDA_MODULE_LOADING=LAZY`, CUDA's default since 12.2): `mem_get_info` total − free minus
/// `memory_reserved()` after `torch.cuda.init()` and a 512-byte tensor, measured on an NVIDIA H200
/// (driver 580.159.04, CUDA 13.0, PyTorch 2.11.0+cu130; `gpu/first_kernel.py`, 2026-11-28,
/// `gpu/results/2026-11-28/first_kernel.json`). Under eager loading the same reading was
/// 1,319,960,576 B: every module is loaded with the context.
pub const H200_BARE_CONTEXT_BYTES: u64 = 552_402_944;

/// The bare context (as [`H200_BARE_CONTEXT_BYTES`]) under a PyTorch built with CUDA 12.4 (the
/// PyPI wheels of torch 2.5.1 and 2.6.0, by their `nvidia-cuda-runtime-cu12==12.4.127`
/// requirement): the H100 80GB HBM3's torch total (79.19 GiB, the H100 row) less SGLang's
/// "Load weight begin. avail mem=78.81 GB" at TP 1, where nothing has launched a kernel yet
/// (`model_runner.py`), in the seen SGLang 0.4.2 start of the issue-23 logs (the project's
/// documentation build, torch 2.5.1 through vLLM 0.6.4.post1's pin): 0.38 GiB, +-0.005 GiB from
/// the log's rounding. Round 2's four documentation-build starts (holdout) read the same 78.81. The same build's 4 x L4 start (SGLang 0.4.3.post4, torch 2.5.1,
/// didier-durand/llms-in-clouds) reads 0.41 GiB before `init_torch_distributed`; the H200 under
/// CUDA 13.0 reads 0.51 GiB and an L40S under SGLang 0.5 (torch 2.8.0, CUDA 12.8) 0.51 GiB
/// (44.52 - 44.01): the CUDA build moves the bare context by about 130 MiB, the GPU by about 30.
pub const CU124_BARE_CONTEXT_BYTES: u64 = 85_029_615_043 - 7_881 * GIB / 100;

/// What the process's first kernel launch adds outside the caching allocator under lazy module
/// loading: 96,468,992 B (46 × 2 MiB) on the same H200 run as [`H200_BARE_CONTEXT_BYTES`], and
/// nothing for the four distinct kernels launched after it. It is the lazily loaded module, not
/// local memory: the same probe under `CUDA_MODULE_LOADING=EAGER` (`gpu/results/2026-11-28/
/// first_kernel.json`) adds 0 B at the first launch, with the stack limit at its default 1,024 B
/// on 132 SMs × 2,048 threads both times (the context itself is then 1.32 GB, every module
/// loaded). BENCHMARKS.md's "kernel images and the driver's local memory" study has the sources.
/// It is part of [`Gpu::context_bytes`], which is read after kernels have run.
pub const H200_FIRST_LAUNCH_BYTES: u64 = 96_468_992;

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
    /// The GPU's streaming multiprocessors (NVIDIA) or compute units (AMD), as
    /// `torch.cuda.get_device_properties().multi_processor_count` reports them: vLLM sizes
    /// per-program buffers by it (`current_platform.num_compute_units`). The counts are the
    /// vendors' published configurations of each board (NVIDIA's architecture whitepapers and
    /// datasheets, AMD's CDNA 2/3 datasheets; one MI250 GCD is half the MI250's 208). A GPU the
    /// catalog lacks (`custom`) takes the H100 SXM's, as it takes its other rates.
    pub fn compute_units(&self) -> u64 {
        match self.id {
            "a100-40g" | "a100-80g" => 108,
            "h100-pcie" => 114,
            "l4" => 58,
            "l40s" | "l40" => 142,
            "l20" => 92,
            "rtx-3090" => 82,
            "rtx-4090" => 128,
            "v100-16g" | "v100-32g" => 80,
            "t4" => 40,
            "a10" => 72,
            "a40" | "rtx-a6000" => 84,
            "rtx-4060" => 24,
            "rtx-4070" => 46,
            "rtx-4080" => 76,
            "rtx-5090" => 170,
            "gtx-1080" => 20,
            "h20" | "h20-141g" => 78,
            "b200" => 148,
            "mi300x" | "mi325x" => 304,
            "mi250" => 104,
            // h100-80g, h200 (GH100 with 132 SMs enabled) and `custom`.
            _ => 132,
        }
    }
}

impl Gpu {
    /// Bytes outside the caching allocator on this GPU: measured on the H100 80GB HBM3
    /// ([`H100_CUDA13_CONTEXT_BYTES`], also the figure of the H100 PCIe and every GPU not
    /// measured) and the H200 ([`H200_CUDA13_CONTEXT_BYTES`]).
    pub fn context_bytes(&self) -> u64 {
        match self.id {
            "h200" => H200_CUDA13_CONTEXT_BYTES,
            _ => H100_CUDA13_CONTEXT_BYTES,
        }
    }
    /// The context before the process's first kernel (lazy module loading) under a PyTorch built
    /// with CUDA `cuda` (`[major, minor]`). Before CUDA 12.6 the CUDA 12.4 reading
    /// ([`CU124_BARE_CONTEXT_BYTES`], every GPU). From 12.6: measured on the H200 under CUDA
    /// 13.0 ([`H200_BARE_CONTEXT_BYTES`]); elsewhere [`Gpu::context_bytes`] less what the
    /// H200's kernels added to its bare context (its context less its bare one). CUDA 12.6 is
    /// not measured and takes the later figure, the larger (so a verdict of "fits" keeps to the
    /// safe side). [`Gpu::bare_context_source`] names which.
    pub fn bare_context_bytes(&self, cuda: [u32; 2]) -> u64 {
        if cuda < [12, 6] {
            return CU124_BARE_CONTEXT_BYTES;
        }
        match self.id {
            "h200" => H200_BARE_CONTEXT_BYTES,
            _ => self
                .context_bytes()
                .saturating_sub(H200_CUDA13_CONTEXT_BYTES - H200_BARE_CONTEXT_BYTES),
        }
    }
    /// The device memory the process's first kernel launch takes outside the caching allocator
    /// (lazy module loading): the H200's measurement ([`H200_FIRST_LAUNCH_BYTES`]) for every GPU.
    pub fn first_launch_bytes(&self) -> u64 {
        H200_FIRST_LAUNCH_BYTES
    }
    /// Where [`Gpu::bare_context_bytes`] comes from under CUDA `cuda`.
    pub fn bare_context_source(&self, cuda: [u32; 2]) -> &'static str {
        match (cuda < [12, 4], cuda < [12, 6], self.id) {
            (true, _, _) => "not measured under this CUDA; the CUDA 12.4 reading (H100, SGLang's own log) stands in",
            (_, true, "h100-80g") => "measured: H100 80GB HBM3, CUDA 12.4 (SGLang's own 'avail mem' at TP 1)",
            (_, true, _) => "not measured on this GPU; the H100's under CUDA 12.4 (SGLang's own 'avail mem' at TP 1) stands in",
            (_, _, "h200") if cuda >= [12, 8] => "measured: H200, CUDA 13.0, driver 580, PyTorch 2.11 (gpu/first_kernel.py)",
            (_, _, _) if cuda >= [12, 8] => "not measured on this GPU; the H200's (CUDA 13.0, driver 580) stands in",
            _ => "not measured under CUDA 12.6; the H200's under CUDA 13.0 (the larger, against 12.4's) stands in",
        }
    }
    /// Where [`Gpu::first_launch_bytes`] comes from.
    pub fn first_launch_source(&self) -> &'static str {
        match self.id {
            "h200" => "measured: H200, CUDA 13.0, driver 580, PyTorch 2.11 (gpu/first_kernel.py)",
            _ => "not measured on this GPU; the H200's first launch (CUDA 13.0, driver 580) stands in",
        }
    }
    /// Where [`Gpu::context_bytes`] comes from.
    pub fn context_source(&self) -> &'static str {
        match self.id {
            "h100-80g" => "measured: H100 80GB HBM3, CUDA 13.0, driver 580, PyTorch 2.11",
            "h200" => "measured: H200, CUDA 13.0, driver 580, PyTorch 2.11",
            _ => "not measured on this GPU; the H100/CUDA 13 measurement is used",
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
    ("a6000", "rtx-a6000"),
    ("4060", "rtx-4060"),
    ("4070", "rtx-4070"),
    ("4080", "rtx-4080"),
    ("5090", "rtx-5090"),
    ("rtx5090", "rtx-5090"),
    ("1080", "gtx-1080"),
    ("h20-96g", "h20"),
    ("b200-180g", "b200"),
];

/// A bare size (`23.58GiB`, `24GB`, `81559MiB`, `80G`) as bytes, or `None` when `s` is not one
/// or holds less than a byte or 1 PB or more (see [`size_bytes`] for the spellings).
pub fn parse_size(s: &str) -> Option<u64> {
    let b = size_bytes(s)?;
    (1.0..1e15).contains(&b).then_some(b.round() as u64)
}

/// The bytes a number and a unit spell, unrounded and unchecked for range: every size flag's one
/// spelling. Units, whatever their case: `B` (bytes, as torch prints `total_memory`),
/// `KiB`/`MiB`/`GiB`/`TiB` and `K`/`M`/`G`/`T` (powers of 1024), `KB`/`MB`/`GB`/`TB` (powers of
/// 1000); a space may stand between the number and the unit. `None` for anything else (no unit,
/// a negative or non-finite number).
pub fn size_bytes(s: &str) -> Option<f64> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = t.split_at(split);
    let num = num.trim();
    if !num.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "k" | "kib" => 1024f64,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return None,
    };
    Some(v * mult).filter(|b| b.is_finite())
}

/// [`Gpu::with_memory`] from a GPU's id, name and memory (as an answer's JSON carries them).
pub fn named_with_memory(id: &str, name: &str, memory_bytes: u64) -> String {
    if id == "custom" {
        name.to_string()
    } else {
        format!("{name} ({})", crate::fmt::bytes(memory_bytes))
    }
}

/// [`Gpu::with_memory`] from a GPU's [`Gpu::label`] and memory (as `vram batch`'s JSON carries
/// them): a label that is no catalog id is the name of a GPU given by its size, which already
/// names that size.
pub fn label_with_memory(label: &str, memory_bytes: u64) -> String {
    if GPUS.iter().any(|g| g.id == label) {
        format!("{label} ({})", crate::fmt::bytes(memory_bytes))
    } else {
        label.to_string()
    }
}

/// A bare size as a GPU given by it names it: two decimals of GiB, as torch's messages give a
/// total; below 1 GiB (where that would read 0.00), the unit that shows it.
fn bare_size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        crate::fmt::bytes(bytes)
    }
}

/// What a GPU given by its size alone takes from the catalog, in words.
fn bare_rates() -> String {
    format!("rates of the {} assumed", GPUS[2].name)
}

/// A GPU the catalog lacks, given by its size: the memory as given, every rate (and the
/// context and workspace) of the H100 SXM, which the output names. Leaked once per distinct
/// size, so that it lives as long as the catalog's entries.
fn bare(bytes: u64) -> &'static Gpu {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MADE: OnceLock<Mutex<HashMap<u64, &'static Gpu>>> = OnceLock::new();
    let made = MADE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = made.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(bytes).or_insert_with(|| {
        let h = &GPUS[2];
        let name: &'static str =
            Box::leak(format!("a {} GPU ({})", bare_size(bytes), bare_rates()).into_boxed_str());
        Box::leak(Box::new(Gpu {
            id: "custom",
            name,
            memory_bytes: bytes,
            memory_source: "given on the command line",
            ..*h
        }))
    })
}

/// A catalog GPU with the device total given on the command line (its rates, architecture and
/// context kept). Leaked once per distinct card and size, as [`bare`] does.
fn with_total(g: &'static Gpu, bytes: u64) -> &'static Gpu {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MADE: OnceLock<Mutex<HashMap<(&'static str, u64), &'static Gpu>>> = OnceLock::new();
    let made = MADE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = made.lock().unwrap_or_else(|e| e.into_inner());
    m.entry((g.id, bytes)).or_insert_with(|| {
        Box::leak(Box::new(Gpu {
            memory_bytes: bytes,
            memory_source: "given on the command line (the catalog card's total as torch reports it on that machine)",
            ..*g
        }))
    })
}

/// How far one card's total, as PyTorch prints it ("N GiB total capacity"), has been seen to
/// move across platforms and drivers, relative: an RTX 3080 prints 9.78 GiB in
/// zai-org/CogVideo#34 and 10.00 GiB in victordibia/peacasso#3 (2.25 %), an RTX 4080 16,049
/// MiB (15.67 GiB) under Linux (the catalog's source) and 15.99 GiB in
/// aigc-apps/sd-webui-EasyPhoto#281 (2.0 %); the larger of the two.
pub const TOTAL_SPREAD: f64 = 10.00 / 9.78 - 1.0;

/// The catalog GPUs (AMD ones where `rocm`, NVIDIA ones otherwise) a device whose total
/// PyTorch reports as `total` bytes could be: those whose catalog total is within
/// [`TOTAL_SPREAD`] of it either way, the nearest first. A total names no GPU: a V100 16GB
/// (15.78 GiB) and an RTX 4080 both print 15.99 GiB within the spread.
pub fn by_total(total: u64, rocm: bool) -> Vec<&'static Gpu> {
    let within = |g: &Gpu| {
        let r = total as f64 / g.memory_bytes as f64;
        r <= 1.0 + TOTAL_SPREAD && r * (1.0 + TOTAL_SPREAD) >= 1.0
    };
    let mut v: Vec<&'static Gpu> = GPUS
        .iter()
        .filter(|g| g.is_rocm() == rocm && within(g))
        .collect();
    v.sort_by_key(|g| g.memory_bytes.abs_diff(total));
    v
}

/// The catalog GPU (an AMD one where `rocm`, an NVIDIA one otherwise) whose total, as PyTorch
/// reports it, is nearest `total`: the device `vram doctor` times a message's plans on when the
/// message names none. The nearest total is no evidence of the GPU's kind (see [`by_total`]): an
/// RTX 4080's "15.99 GiB total capacity" (aigc-apps/sd-webui-EasyPhoto#281) is nearer the V100
/// 16GB's 15.78 GiB than the 4080's own 15.67 GiB under Linux.
pub fn nearest(total: u64, rocm: bool) -> &'static Gpu {
    GPUS.iter()
        .filter(|g| g.is_rocm() == rocm)
        .min_by_key(|g| g.memory_bytes.abs_diff(total))
        .expect("the GPU catalog has GPUs of both vendors (tested)")
}

/// Looks up a GPU by id or alias, case-insensitively, or takes a bare size (`23.58GiB`) for a
/// card the catalog lacks (see [`parse_size`]), or a catalog card with the total torch reports on
/// the machine at hand (`t4:15636037632B`).
pub fn lookup(name: &str) -> Result<&'static Gpu> {
    let lower = name.to_ascii_lowercase();
    let id = ALIASES
        .iter()
        .find(|(a, _)| *a == lower)
        .map_or(lower.as_str(), |(_, id)| id);
    if let Some(g) = GPUS.iter().find(|g| g.id == id) {
        return Ok(g);
    }
    if let Some(b) = parse_size(name) {
        return Ok(bare(b));
    }
    if is_size_out_of_range(name) {
        return Err(size_out_of_range(name));
    }
    // `t4:15636037632B`: a catalog card whose total, as torch reports it on this machine (a log's
    // `total_memory`), differs from the catalog's (another driver, ECC on or off).
    if let Some((card, size)) = name.split_once(':') {
        let g = lookup(card)?;
        if g.id == "custom" {
            return Err(Error::Unknown {
                kind: "GPU",
                name: name.into(),
                known: "a catalog GPU before the colon, e.g. t4:15636037632B".into(),
            });
        }
        // `h100:0GiB` is a size, out of range, as a bare `0GiB` is.
        if is_size_out_of_range(size) {
            return Err(size_out_of_range(name));
        }
        let b = parse_size(size).ok_or_else(|| Error::Unknown {
            kind: "GPU size",
            name: size.into(),
            known: "a size such as 15636037632B or 14.56GiB after the colon".into(),
        })?;
        return Ok(with_total(g, b));
    }
    Err(Error::Unknown {
        kind: "GPU",
        name: name.into(),
        known: format!(
            "{}, or a size such as 23.58GiB",
            GPUS.iter().map(|g| g.id).collect::<Vec<_>>().join(", ")
        ),
    })
}

/// Whether `s` is a number and a unit of size that [`parse_size`] refuses for its value:
/// outside what a device holds (0GiB, 1e30GiB).
fn is_size_out_of_range(s: &str) -> bool {
    let t = s.trim();
    let unit = t.trim_start_matches(|c: char| c.is_ascii_digit() || ".eE+-".contains(c));
    unit.len() < t.len() && parse_size(&format!("1{unit}")).is_some() && parse_size(s).is_none()
}

fn size_out_of_range(name: &str) -> Error {
    Error::OutOfRange {
        field: "--gpu".into(),
        value: name.into(),
        why: "a GPU's memory must be more than 0 and less than 1 PB".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::Precision;

    /// The nearest GPU is the vendor's, at the least distance of any, first among `by_total`'s
    /// wherever that has any; a catalog total picks a GPU of that total.
    #[test]
    fn nearest_is_the_vendors_closest_total() {
        let gib = |x: f64| (x * (1u64 << 30) as f64) as u64;
        assert_eq!(nearest(gib(15.99), false).id, "v100-16g");
        for rocm in [false, true] {
            assert!(GPUS.iter().any(|g| g.is_rocm() == rocm));
            for total in [
                1 << 30,
                gib(15.99),
                gib(23.58),
                gib(79.19),
                gib(191.5),
                1 << 50,
            ] {
                let n = nearest(total, rocm);
                assert_eq!(n.is_rocm(), rocm);
                let d = n.memory_bytes.abs_diff(total);
                assert!(GPUS
                    .iter()
                    .filter(|g| g.is_rocm() == rocm)
                    .all(|g| g.memory_bytes.abs_diff(total) >= d));
                if let Some(first) = by_total(total, rocm).first() {
                    assert_eq!(first.memory_bytes.abs_diff(total), d, "{total}");
                }
            }
        }
        for g in GPUS {
            assert_eq!(
                nearest(g.memory_bytes, g.is_rocm()).memory_bytes,
                g.memory_bytes,
                "{}",
                g.id
            );
        }
    }

    /// The catalog's `bf16` is torch's `is_bf16_supported(including_emulation=False)`: every AMD
    /// GPU, and an NVIDIA one of compute capability 8.0 or later. On the others a bf16 ask is
    /// planned in fp16 mixed precision, and nothing else changes.
    #[test]
    fn bf16_is_compute_capability_8_and_the_others_plan_fp16_amp() {
        for g in GPUS {
            assert_eq!(g.bf16, g.is_rocm() || g.sm_major >= 8, "{}", g.id);
        }
        for id in ["v100-16g", "v100-32g", "t4", "gtx-1080"] {
            let g = lookup(id).unwrap();
            for p in [Precision::Bf16Amp, Precision::Bf16] {
                assert!(!p.runs_on(g), "{id}");
                assert_eq!(p.on(g), Precision::Fp16Amp, "{id}");
            }
            for p in [Precision::Fp16Amp, Precision::Fp32] {
                assert!(p.runs_on(g) && p.on(g) == p, "{id}");
            }
        }
        let a100 = lookup("a100-80g").unwrap();
        for p in [
            Precision::Fp32,
            Precision::Fp16Amp,
            Precision::Bf16Amp,
            Precision::Bf16,
        ] {
            assert_eq!(p.on(a100), p);
        }
    }

    /// The runtime comes from the catalog's vendor, never from the id's spelling: every AMD entry
    /// (by its marketing name, from AMD's datasheets) and only those run ROCm.
    #[test]
    fn rocm_is_the_vendors_not_the_ids() {
        for g in GPUS {
            assert_eq!(g.is_rocm(), g.name.starts_with("AMD "), "{}", g.id);
        }
        assert_eq!(GPUS.iter().filter(|g| g.is_rocm()).count(), 3);
        // A card the catalog lacks takes the H100's rates, and its runtime with them.
        assert!(!lookup("23.58GiB").unwrap().is_rocm());
        assert!(lookup("mi300x:191.5GiB").unwrap().is_rocm());
    }

    #[test]
    fn bare_sizes_and_catalog_sources() {
        assert_eq!(
            parse_size("23.58GiB"),
            Some((23.58 * 1073741824.0f64).round() as u64)
        );
        assert_eq!(parse_size("24GB"), Some(24_000_000_000));
        assert_eq!(parse_size("81559MiB"), Some(81559 * MIB));
        assert_eq!(parse_size("h100"), None);
        assert_eq!(parse_size("-3GiB"), None);
        assert_eq!(parse_size("15636037632B"), Some(15_636_037_632));
        let t4 = lookup("t4:15636037632B").unwrap();
        assert_eq!((t4.id, t4.sm_major), ("t4", 7));
        assert_eq!(t4.memory_bytes, 15_636_037_632);
        assert!(lookup("t4:lots").is_err() && lookup("nope:14GiB").is_err());
        assert!(lookup("14GiB:14GiB").is_err());
        // A size after the colon that is one, out of range, says so, as a bare one does.
        for bad in ["t4:0GiB", "t4:1e30GiB", "0GiB"] {
            assert!(
                matches!(lookup(bad), Err(Error::OutOfRange { .. })),
                "{bad}: {:?}",
                lookup(bad).map(|g| g.id)
            );
        }
        let g = lookup("23.58GiB").unwrap();
        assert_eq!(g.memory_bytes, parse_size("23.58GiB").unwrap());
        assert!(g.name.contains("23.58 GiB"), "{}", g.name);
        assert!(std::ptr::eq(g, lookup("23.58gib").unwrap()));
        for id in [
            "a10",
            "a40",
            "l40",
            "rtx-a6000",
            "rtx-4060",
            "rtx-4070",
            "rtx-4080",
            "rtx-5090",
            "gtx-1080",
            "h20",
            "h20-141g",
            "b200",
            "mi250",
            "mi325x",
        ] {
            let g = lookup(id).unwrap();
            assert!(!g.memory_source.is_empty(), "{id}");
        }
        // Every entry names its source: a public log printing torch's total or a driver reading, a measurement, or unverified.
        for g in GPUS {
            assert!(
                g.memory_source.starts_with("unverified")
                    || g.memory_source.starts_with("torch")
                    || g.memory_source.contains('#')
                    || g.memory_source.starts_with("measured")
                    || g.memory_source.contains("text search"),
                "{}: {}",
                g.id,
                g.memory_source
            );
        }
        assert!(lookup("h100-90g").is_err());
        // Torch's totals, as the sources print them (GiB to two decimals, or bytes).
        let gib = |id: &str| {
            (lookup(id).unwrap().memory_bytes as f64 / (1u64 << 30) as f64 * 100.0).round() / 100.0
        };
        for (id, want) in [
            ("h100-80g", 79.19),
            ("a100-80g", 79.15),
            ("a100-40g", 39.39),
            ("rtx-3090", 23.58),
            ("rtx-4090", 23.55),
            ("a10", 22.09),
            ("t4", 14.74),
            ("mi300x", 191.98),
            ("b200", 178.35),
            ("l40s", 44.39),
        ] {
            assert_eq!(gib(id), want, "{id}");
            assert!(
                lookup(id).unwrap().memory_source.starts_with("torch"),
                "{id}"
            );
        }
        assert_eq!(lookup("h200").unwrap().memory_bytes, 150_109_880_320);
        // `torch.cuda.get_device_properties` as its repr prints it: total_memory in whole MiB
        // (issue 35's GPU catalog round: each row changed once, with the text that prints it).
        for (id, mib) in [
            ("h100-pcie", 81_008),
            ("v100-16g", 16_160),
            ("v100-32g", 32_510),
            ("a40", 45_416),
            ("rtx-a6000", 48_676),
            ("rtx-4080", 16_049),
            ("gtx-1080", 8_118),
            ("h20", 97_285),
            ("mi250", 65_520),
        ] {
            let g = lookup(id).unwrap();
            assert_eq!(g.memory_bytes, mib * MIB, "{id}");
            assert!(g.memory_source.starts_with("torch"), "{id}");
            assert!(
                g.memory_source.contains(&format!("total_memory={mib}MB")),
                "{id}"
            );
        }
        // Out-of-memory messages' "total capacity of X GiB" (two decimals).
        for (id, want) in [("l40", 44.40), ("rtx-5090", 31.36)] {
            assert_eq!(gib(id), want, "{id}");
            assert!(
                lookup(id)
                    .unwrap()
                    .memory_source
                    .contains(&format!("{want:.2} GiB")),
                "{id}"
            );
        }
        // What no public text found so far prints as torch's total: the rows still on a
        // driver reading or a stand-in. A row leaves this list only with its source.
        let not_torch: Vec<&str> = GPUS
            .iter()
            .filter(|g| {
                !(g.memory_source.starts_with("torch") || g.memory_source.starts_with("measured"))
            })
            .map(|g| g.id)
            .collect();
        assert_eq!(not_torch, ["rtx-4060", "rtx-4070", "h20-141g", "mi325x"]);
        // The L20 as Unsloth's banner prints torch's total (GiB to three decimals): 3.1 GiB more
        // than the L40S, whose ECC takes its share of the same 48 GB (round 6 of issue 35).
        let l20 = lookup("l20").unwrap();
        assert_eq!(
            (l20.memory_bytes as f64 / (1u64 << 30) as f64 * 1000.0).round() / 1000.0,
            47.503
        );
        assert!(l20.memory_source.starts_with("torch") && (l20.sm_major, l20.sm_minor) == (8, 9));
        // The L4 as Unsloth's banner prints torch's total (GiB to three decimals), adopted with
        // the bare context under CUDA 12.4 that its SGLang start ran on.
        let l4 = lookup("l4").unwrap();
        assert_eq!(
            (l4.memory_bytes as f64 / (1u64 << 30) as f64 * 1000.0).round() / 1000.0,
            22.168
        );
        assert!(l4.memory_source.starts_with("torch") && l4.memory_source.contains("22.168"));
    }

    /// The H200's figures as measured (vramkit's shared ground truth, 2026-11-27): capacity as
    /// `torch.cuda.mem_get_info` reports it, and what the process held outside the allocator
    /// (`device_used_bytes − reserved_now_bytes` of the plain transformers cases: 766.8 to
    /// 780.8 MiB). Unmeasured GPUs name the stand-in.
    #[test]
    fn h200_capacity_and_context_are_measured() {
        let g = lookup("h200").unwrap();
        assert_eq!(g.memory_bytes, 150_109_880_320);
        assert_eq!(
            g.context_bytes(),
            61_189_455_872 - 60_385_394_688 + 14 * MIB
        );
        assert!(g.context_source().starts_with("measured: H200"));
        // gpu/first_kernel.py on the same H200 (2026-11-28): the bare context and the first
        // launch are the run's own readings, and together stay below the context read later.
        assert_eq!(g.bare_context_bytes([13, 0]), 552_402_944); // A_context, lazy loading
        assert_eq!(g.first_launch_bytes(), 648_871_936 - 552_402_944);
        assert!(g.bare_context_bytes([13, 0]) + g.first_launch_bytes() < g.context_bytes());
        let l4 = lookup("l4").unwrap();
        assert_eq!(l4.context_bytes(), H100_CUDA13_CONTEXT_BYTES);
        assert!(l4.first_launch_source().contains("stands in"));
        assert!(l4.context_source().contains("H100"));
        assert!(lookup("h100-pcie")
            .unwrap()
            .context_source()
            .starts_with("not measured"));
    }

    /// The bare context follows the CUDA build: SGLang's own "avail mem" readings before any
    /// kernel (TP 1) on an H100 under torch 2.5.1 (CUDA 12.4) give 0.38 GiB; the H200 under
    /// CUDA 13.0 measured 0.51 GiB. 12.6 is not measured and takes the larger figure.
    #[test]
    fn the_bare_context_follows_the_cuda_build() {
        let h100 = lookup("h100-80g").unwrap();
        let h200 = lookup("h200").unwrap();
        let gib2 = |b: u64| (b as f64 / GIB as f64 * 100.0).round() / 100.0;
        // 79.19 GiB total less 78.81 free.
        assert_eq!(gib2(h100.bare_context_bytes([12, 4])), 0.38);
        assert_eq!(h200.bare_context_bytes([12, 4]), CU124_BARE_CONTEXT_BYTES);
        assert!(h100
            .bare_context_source([12, 4])
            .starts_with("measured: H100"));
        assert!(h200.bare_context_source([12, 4]).contains("stands in"));
        assert_eq!(h200.bare_context_bytes([12, 8]), H200_BARE_CONTEXT_BYTES);
        assert_eq!(
            h200.bare_context_bytes([12, 6]),
            h200.bare_context_bytes([13, 0])
        );
        assert!(h200
            .bare_context_source([12, 6])
            .contains("not measured under CUDA 12.6"));
        assert!(h100.bare_context_source([12, 1]).contains("12.4 reading"));
        for g in GPUS {
            assert!(
                g.bare_context_bytes([12, 4]) < g.bare_context_bytes([12, 8]),
                "{}",
                g.id
            );
        }
    }
}
