//! PyTorch's CUDA out-of-memory message, parsed.
//!
//! The caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! `DeviceCachingAllocator::malloc`) raises the error after it has tried its
//! cache, `cudaMalloc`, and `cudaMalloc` again after freeing every unsplit
//! cached block. Its text has had three layouts:
//!
//! * **PyTorch 1.0–1.3** (`THCCachingAllocator`): `CUDA out of memory. Tried
//!   to allocate S (GPU d; T total capacity; A already allocated; F free; C
//!   cached)`, where C is `amount_cached - amount_allocated`: the cached bytes
//!   **not** in live tensors. Reserved is therefore A + C ([`Layout::Cached`]).
//!   (Read in Huawei's torch_npu copy of that allocator,
//!   `NPUCachingAllocator.cpp`, which keeps the 1.x text and its comment "the
//!   sum of allocated + free + cached may be less than the total capacity".)
//! * **PyTorch 1.4–2.0**: `(GPU d; T total capacity; A already allocated; F
//!   free; [L allowed; ]R reserved in total by PyTorch)` with R
//!   `reserved_bytes.all.current`; `L allowed;` from 1.8
//!   (`set_per_process_memory_fraction`); the `max_split_size_mb` hint from
//!   1.10 ([`Layout::Legacy`]). Ascend's torch_npu (vLLM-Ascend's PyTorch) keeps this layout
//!   with `NPU out of memory`, `(NPU d;` and one more field, `C current active;`
//!   (`stats.active_bytes`), between the allocated and the free figures
//!   (`torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`, `DeviceCachingAllocator::malloc`, read
//!   in Ascend/pytorch through the code index): it is read as the same layout, the active figure
//!   left out ([`Backend::Npu`]).
//! * **PyTorch 2.1 and later**: `CUDA out of memory. Tried to allocate S. GPU d
//!   has a total capacity of T of which F is free. ` then `reportProcessMemoryInfo`'s
//!   NVML lines in NVML's order, `Process P has X memory in use. ` for others and
//!   `Including non-PyTorch memory, this process has X memory in use. ` for
//!   this one (none at all without NVML: ROCm builds, containers without it),
//!   then `[L allowed; ]Of the allocated memory A is allocated by PyTorch,
//!   [with G allocated in private pools (e.g., CUDA Graphs), ]and U is reserved
//!   by PyTorch but unallocated.` and a hint. A includes G (the free blocks of
//!   CUDA-graph pools) and U excludes it, so reserved = A + U. 2.1 spelled it
//!   `total capacty`; ROCm builds say `HIP out of memory` ([`Layout::Current`]).
//!
//! * **Apple's MPS backend** (`aten/src/ATen/mps/MPSAllocator.mm`,
//!   `MPSHeapAllocatorImpl::alloc_buffer_block`): `MPS backend out of memory (MPS allocated: A,
//!   other allocations: O[, max allowed: L]). Tried to allocate S on private|shared pool.` A is
//!   the Metal heaps PyTorch's allocator holds (`m_total_allocated_memory`), O is Metal's
//!   `currentAllocatedSize` less A (the backend's implicit allocations and anything else on
//!   the Metal device), L the high watermark, `PYTORCH_MPS_HIGH_WATERMARK_RATIO` (1.7 by
//!   default, 0 disables it and drops `max allowed` from the text) times Metal's
//!   `recommendedMaxWorkingSetSize`. It prints no device size and no free memory; older builds
//!   print `GB`/`MB` for the same binary units ([`Layout::Mps`]).
//!
//! Sizes are `format_size`'s: `N bytes` up to 1 KiB, else two decimals of
//! KiB, MiB or GiB (binary units). [`parse`] finds the message anywhere in
//! its input: a whole traceback, a log with timestamps, `[rank0]:` or
//! `grep -n` prefixes, comment (`# `) or quote (`> `) markers, lines wrapped,
//! the message repeated (chained exceptions, several ranks: the first whole
//! one is read), or embedded in a Python dict or JSON string (`\n` escapes). PyTorch's words
//! are matched in any case and with any spacing (R's torch prints `Pytorch`; a retyped message
//! reads `50MiB(GPU 0; 1.96GiB totalcapacity;`).

use serde::Serialize;

use crate::{DoctorError, Result};

/// Another process on the device, as the message lists it (from NVML).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageProcess {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds, bytes.
    pub bytes: u64,
}

/// Which layout the message had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// PyTorch 1.0–1.3: `(GPU 0; ... already allocated; ... free; C cached)`,
    /// C being cached but not allocated.
    Cached,
    /// PyTorch 1.4–2.0: `(GPU 0; ... already allocated; ... free; ... reserved in total by PyTorch)`.
    Legacy,
    /// PyTorch 2.1 and later: `GPU 0 has a total capacity of ... of which ... is free.`
    Current,
    /// The cudaMallocAsync backend: `Allocation on device 0 would exceed allowed memory.
    /// (out of memory)` with `Currently allocated`, `Requested`, `Device limit`, `Free
    /// (according to CUDA)` and `PyTorch limit`. Freed memory goes back to the driver's
    /// pool, so PyTorch holds no cache of its own: reserved = allocated. The pool keeps it
    /// (`lazy_init_device` sets its release threshold to UINT64_MAX; only `empty_cache` trims
    /// it), so the pool's cached blocks print as memory neither free nor PyTorch's.
    Async,
    /// Apple's MPS backend: `MPS backend out of memory (MPS allocated: A, other allocations:
    /// O, max allowed: L). Tried to allocate S on private pool.` A is the Metal heaps PyTorch
    /// holds (read as both allocated and reserved: the failure path has already released its
    /// cached buffers), O the Metal memory outside them (`this_process_bytes` = A + O), L the
    /// high watermark (`allowed_bytes`). No device size and no free memory are printed: those
    /// read 0.
    Mps,
}

/// Which device runtime's PyTorch build raised the message: it names the allocator's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `CUDA out of memory` (settings in `PYTORCH_CUDA_ALLOC_CONF`).
    Cuda,
    /// A ROCm build's `HIP out of memory` (`PYTORCH_HIP_ALLOC_CONF`).
    Hip,
    /// Ascend's torch_npu, `NPU out of memory` (`PYTORCH_NPU_ALLOC_CONF`).
    Npu,
    /// Apple's MPS backend (Metal), `MPS backend out of memory`: its only allocator limit is
    /// `PYTORCH_MPS_HIGH_WATERMARK_RATIO`.
    Mps,
    /// Intel GPUs through torch's XPU backend, `XPU out of memory` (the 2.x layout, with an
    /// `empty_cache` hint). The allocator's settings are not named: no release-tagged copy of
    /// torch's `c10/xpu/XPUCachingAllocator.cpp` was reachable here (the stored one is an
    /// untagged main-branch commit, 00d512ae), so which variable a given torch release reads,
    /// and whether it takes expandable segments, is not known ([`Backend::alloc_conf`]).
    Xpu,
}

impl Backend {
    /// The environment variable that holds the caching allocator's settings; `None` where
    /// vramkit has not read it at a release ([`Backend::Xpu`]), so no setting is advised.
    pub fn alloc_conf(self) -> Option<&'static str> {
        match self {
            Backend::Cuda => Some("PYTORCH_CUDA_ALLOC_CONF"),
            Backend::Hip => Some("PYTORCH_HIP_ALLOC_CONF"),
            Backend::Npu => Some("PYTORCH_NPU_ALLOC_CONF"),
            Backend::Mps => Some("PYTORCH_MPS_HIGH_WATERMARK_RATIO"),
            Backend::Xpu => None,
        }
    }

    /// What the message calls the device (`(GPU 0;` or `(NPU 0;`).
    pub fn device_word(self) -> &'static str {
        match self {
            Backend::Cuda | Backend::Hip | Backend::Xpu => "GPU",
            Backend::Npu => "NPU",
            Backend::Mps => "MPS",
        }
    }

    /// The estimate's breakdown category for [`Backend::context`]: `vram estimate` names it
    /// `cuda_context` ([`vram_model::Category::CudaContext`]); the doctor names it for the
    /// message's runtime.
    pub fn context_category(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda_context",
            Backend::Hip => "hip_context",
            Backend::Npu => "npu_context",
            Backend::Mps => "mps_context",
            Backend::Xpu => "xpu_context",
        }
    }

    /// The runtime's per-process state outside the caching allocator.
    pub fn context(self) -> &'static str {
        match self {
            Backend::Cuda => "CUDA context",
            Backend::Hip => "HIP context",
            Backend::Npu => "NPU (CANN) context",
            Backend::Mps => "Metal device state",
            Backend::Xpu => "XPU runtime context (SYCL, Level Zero)",
        }
    }

    /// What the context is taken to hold at most, said honestly per runtime:
    /// [`crate::diagnose::CONTEXT_MAX_BYTES`] was measured on NVIDIA GPUs only.
    pub fn context_size(self) -> &'static str {
        match self {
            Backend::Cuda => "a CUDA context is 0.5–1.5 GiB",
            Backend::Hip => {
                "a HIP context is taken as at most 1.5 GiB (the CUDA figure; vramkit has not measured one on ROCm)"
            }
            Backend::Npu => {
                "an NPU context is taken as at most 1.5 GiB (the CUDA figure; vramkit has not measured one on Ascend)"
            }
            Backend::Mps => "vramkit has not measured the Metal runtime's own memory",
            Backend::Xpu => {
                "an XPU context is taken as at most 1.5 GiB (the CUDA figure; vramkit has not measured one on an Intel GPU)"
            }
        }
    }

    /// The device allocation call the caching allocator makes.
    pub fn malloc(self) -> &'static str {
        match self {
            Backend::Cuda => "cudaMalloc",
            Backend::Hip => "hipMalloc",
            Backend::Npu => "aclrtMalloc",
            Backend::Mps => "newHeapWithDescriptor",
            // `allocPrimitive` in c10/xpu/XPUCachingAllocator.cpp (main, 00d512ae).
            Backend::Xpu => "sycl::aligned_alloc_device",
        }
    }

    /// The libraries that allocate beside PyTorch's cache in this process.
    pub fn libraries(self) -> &'static str {
        match self {
            Backend::Cuda => "NCCL buffers, cuBLAS/cuDNN workspaces",
            Backend::Hip => "RCCL buffers, rocBLAS/hipBLASLt/MIOpen workspaces",
            Backend::Npu => "HCCL buffers, CANN operator workspaces",
            Backend::Mps => "the MPS backend's implicit allocations (MPSGraph, MPSNDArray)",
            Backend::Xpu => "oneCCL buffers, oneDNN/oneMKL workspaces",
        }
    }

    /// The vendor's tool that lists each process's device memory on the host.
    pub fn smi(self) -> &'static str {
        match self {
            Backend::Cuda => "nvidia-smi",
            Backend::Hip => "rocm-smi",
            Backend::Npu => "npu-smi info",
            Backend::Mps => "Activity Monitor",
            Backend::Xpu => "xpu-smi",
        }
    }

    /// The command that lists each process's device memory on the host.
    pub fn smi_processes(self) -> &'static str {
        match self {
            Backend::Cuda => "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
            Backend::Hip => "rocm-smi --showpids",
            Backend::Npu => "npu-smi info",
            Backend::Mps => "Activity Monitor (GPU and memory columns)",
            // Intel XPU Manager 2.0's `xpu-smi ps`: each process's device memory (Linux).
            Backend::Xpu => "xpu-smi ps",
        }
    }

    /// The collective library's buffers and the knob that sizes them.
    pub fn collective_buffers(self) -> &'static str {
        match self {
            Backend::Cuda => "NCCL's buffers (NCCL_BUFFSIZE, fewer communicators)",
            Backend::Hip => "RCCL's buffers (RCCL reads NCCL_BUFFSIZE; fewer communicators)",
            Backend::Npu => "HCCL's buffers (HCCL_BUFFSIZE, fewer communicators)",
            Backend::Mps => "no collective library (MPS runs on one device)",
            Backend::Xpu => "oneCCL's buffers (fewer communicators)",
        }
    }

    /// The graphs whose private pools the allocator keeps.
    pub fn graphs(self) -> &'static str {
        match self {
            Backend::Cuda => "CUDA graphs",
            Backend::Hip => "HIP graphs (torch.cuda.CUDAGraph on ROCm)",
            Backend::Npu => "NPU graphs (ACL graphs)",
            Backend::Mps => "MPS graphs",
            Backend::Xpu => "XPU graphs",
        }
    }

    /// The Python module of the device (`torch.cuda` on ROCm builds too).
    pub fn torch_module(self) -> &'static str {
        match self {
            Backend::Cuda | Backend::Hip => "torch.cuda",
            Backend::Npu => "torch.npu",
            Backend::Mps => "torch.mps",
            Backend::Xpu => "torch.xpu",
        }
    }
}

/// How the message's `this process` figure was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "how")]
pub enum SelfProcess {
    /// The message has an `Including non-PyTorch memory, this process has ...` line.
    Named,
    /// No such line, but the message lists processes: the smallest listed
    /// process holding at least what PyTorch reserved (and at most
    /// [`SELF_EXTRA_BYTES`] or a tenth more) is taken as this one (a
    /// container: NVML's pids are the host's, so PyTorch does not recognise
    /// itself).
    Chosen {
        /// Its pid as the message lists it.
        pid: u32,
    },
    /// No listed process holds about what PyTorch reserved, yet the listed
    /// processes and PyTorch's reservation add up to more than the device
    /// had in use (total − free) beyond the figures' rounding: NVML's figures
    /// already count this process, so it is among them, under a pid from
    /// another namespace. The smallest listed process holding at least the
    /// reservation is taken as this one, and what it holds beyond the
    /// reservation is this process's memory outside PyTorch.
    Accounted {
        /// Its pid as the message lists it.
        pid: u32,
    },
    /// Processes are listed but none holds about what PyTorch reserved, and
    /// they fit beside the reservation in what the device had in use: this
    /// process is not among them, and every listed one is another process.
    NotListed,
    /// The message lists no process at all (1.x/2.0 layouts, ROCm, no NVML).
    NoList,
}

/// Every figure of an out-of-memory message, in bytes. Figures are exact to
/// the message's rounding (two decimals of the unit printed); a figure too
/// large for 64 bits (an underflowed counter) reads as `u64::MAX`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomMessage {
    /// The layout the figures were read from.
    pub layout: Layout,
    /// The request that failed (after PyTorch's rounding).
    pub requested_bytes: u64,
    /// CUDA device index.
    pub device: u32,
    /// Device memory as `cudaMemGetInfo` reports it (0 for MPS, which prints none).
    pub total_bytes: u64,
    /// Free device memory when the request failed (0 for MPS, which prints none).
    pub free_bytes: u64,
    /// Bytes in live tensors (`memory_allocated()`), CUDA-graph pools included.
    pub allocated_bytes: u64,
    /// Bytes the caching allocator holds (`memory_reserved()`).
    pub reserved_bytes: u64,
    /// How this process's line was found.
    pub self_process: SelfProcess,
    /// Of `allocated_bytes`, what private pools (CUDA graphs) hold (2.x messages that say).
    pub private_pool_bytes: Option<u64>,
    /// The per-process cap from `set_per_process_memory_fraction`, when set (MPS: the high
    /// watermark, unless disabled).
    pub allowed_bytes: Option<u64>,
    /// This process's device memory as NVML reports it (PyTorch plus the CUDA
    /// context and libraries; MPS: Metal's `currentAllocatedSize`); `None` when the message
    /// does not say.
    pub this_process_bytes: Option<u64>,
    /// The other processes on the device (2.1+ messages, when NVML works).
    pub other_processes: Vec<MessageProcess>,
    /// The runtime whose PyTorch build raised the message.
    pub backend: Backend,
    /// The paste itself sets the allocator's expandable segments ([`sets_expandable_segments`]):
    /// a remedy that sets them is one the job already runs.
    pub expandable_segments: bool,
}

impl OomMessage {
    /// Reserved by PyTorch but not in any live tensor nor private pool: free
    /// blocks in its cache.
    pub fn reserved_unallocated_bytes(&self) -> u64 {
        self.reserved_bytes.saturating_sub(self.allocated_bytes)
    }

    /// What this process holds outside PyTorch's allocator (CUDA context,
    /// cuBLAS/cuDNN, NCCL, other allocators), when the message says.
    pub fn non_pytorch_bytes(&self) -> Option<u64> {
        self.this_process_bytes
            .map(|p| p.saturating_sub(self.reserved_bytes))
    }

    /// Bytes the other processes listed hold.
    pub fn other_process_bytes(&self) -> u64 {
        self.other_processes
            .iter()
            .fold(0u64, |a, p| a.saturating_add(p.bytes))
    }
}

/// The catalog GPU a message that names none is timed on, and the others its total fits as well.
#[derive(Debug, Clone)]
pub struct NearestGpu {
    /// The catalog GPU whose memory, as torch reports it, is nearest the message's total
    /// ([`vram_model::gpu::nearest`]): an AMD one for a ROCm build's message, an NVIDIA one for
    /// the others (the catalog has no Ascend NPU or Apple GPU).
    pub gpu: &'static vram_model::gpu::Gpu,
    /// The catalog GPUs of the same vendor the total could be ([`vram_model::gpu::by_total`]),
    /// the nearest first.
    pub alike: Vec<&'static vram_model::gpu::Gpu>,
    /// The message's total.
    pub total_bytes: u64,
}

impl OomMessage {
    /// The catalog GPU nearest this message's total, with the others it could be.
    pub fn nearest_gpu(&self) -> NearestGpu {
        let rocm = self.backend == Backend::Hip;
        NearestGpu {
            gpu: vram_model::gpu::nearest(self.total_bytes, rocm),
            alike: vram_model::gpu::by_total(self.total_bytes, rocm),
            total_bytes: self.total_bytes,
        }
    }
}

impl NearestGpu {
    /// The note that says how the GPU was picked, and which others the total fits as well.
    pub fn note(&self) -> String {
        use vram_model::gpu::TOTAL_SPREAD;
        let g = self.gpu;
        let ids: Vec<&str> = self.alike.iter().map(|g| g.id).collect();
        let spread = format!("{:.1} %", TOTAL_SPREAD * 100.0);
        let alike = if ids.is_empty() {
            format!("no catalog GPU's total is within {spread} of the message's, so its GPU is likely one the catalog lacks")
        } else {
            format!(
                "the catalog GPUs whose total is within {spread} of the message's (the most one card's total has been seen to move across platforms and drivers): {}",
                ids.join(", ")
            )
        };
        format!(
            "the plans are searched and their step times predicted on the {} ({}), picked only because its memory as torch reports it ({}) is the catalog's nearest to the message's total ({}): the message does not name its GPU, and the total does not tell GPUs apart; {alike}. Give --gpu with yours to time the plans on it",
            g.name,
            g.id,
            crate::human_bytes(g.memory_bytes),
            crate::human_bytes(self.total_bytes),
        )
    }
}

/// One size as `format_size` prints it: `123 bytes`, `1.50 KiB`, `20.00 MiB`,
/// `79.19 GiB` (also `TiB`, and `B`/`KB`-style units for tolerance). A size
/// of 2^64 bytes, as printed, saturates to `u64::MAX` (PyTorch has printed
/// `17179869184.00 GiB`, 2^64 bytes, for an underflowed counter); a larger
/// one is no figure a 64-bit counter holds: `None` (see `beyond_64_bits`).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_once(' ')?;
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "bytes" | "byte" | "b" => 1.0,
        "kib" | "kb" => 1024.0,
        "mib" | "mb" => 1024.0 * 1024.0,
        "gib" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let b = (v * mult).round();
    if !b.is_finite() || b > TWO_POW_64 * (1.0 + 1e-9) {
        return None;
    }
    Some(if b >= u64::MAX as f64 {
        u64::MAX
    } else {
        b as u64
    })
}

/// 2^64, the first size a 64-bit byte counter cannot hold.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// Whether `s` starts with a size (number, unit) larger than 2^64 bytes, which
/// [`parse_size`] refuses: a message edited by hand, not one PyTorch printed.
fn beyond_64_bits(s: &str) -> bool {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let unit = s[end..].trim_start();
    let unit = &unit[..unit
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(unit.len())];
    s[..end].parse::<f64>().is_ok_and(|v| v.is_finite())
        && parse_size(&format!("{} {unit}", &s[..end])).is_none()
        && parse_size(&format!("1 {unit}")).is_some()
}

/// Reads a size at the start of `s` (number, space, unit); returns it and the rest.
fn size_prefix(s: &str) -> Option<(u64, &str)> {
    let s = s.trim_start();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|&i| i > 0)?;
    // `format_size` puts a space before the unit; a message retyped by hand may not.
    let rest = s[num_end..].strip_prefix(' ').unwrap_or(&s[num_end..]);
    let unit_end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let size = parse_size(&format!("{} {}", &s[..num_end], &rest[..unit_end]))?;
    Some((size, &rest[unit_end..]))
}

/// `s` past `phrase` at its start, the phrase's words matched with any spacing, none
/// included (`total capacity;` also reads `totalcapacity;` and ` total  capacity ;`): what a
/// message retyped by hand, or re-wrapped, does to PyTorch's fixed words.
fn strip_phrase<'a>(s: &'a str, phrase: &str) -> Option<&'a str> {
    let mut rest = s;
    for c in phrase.chars().filter(|c| !c.is_whitespace()) {
        rest = rest.trim_start().strip_prefix(c)?;
    }
    Some(rest)
}

/// A figure, then the words PyTorch prints after it (any spacing): the figure and what follows.
fn figure<'a>(s: &'a str, words: &str) -> Option<(u64, &'a str)> {
    let (v, rest) = size_prefix(s)?;
    Some((v, strip_phrase(rest, words)?))
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

fn field(s: &str, pat: &str, what: &str) -> Result<u64> {
    after(s, pat)
        .and_then(size_prefix)
        .map(|(v, _)| v)
        .ok_or_else(|| unparseable(format!("no size after `{}` ({what})", pat.trim())))
}

fn unparseable(reason: String) -> DoctorError {
    DoctorError::Unparseable { reason }
}

const START: &str = "out of memory. tried to allocate ";

/// A message pasted from its second sentence (`Tried to allocate 216.00 MiB (GPU 0; ...`):
/// read when the text has no [`START`] and the figures follow.
const BARE_START: &str = "tried to allocate ";

/// Apple's MPS backend's message (`aten/src/ATen/mps/MPSAllocator.mm`, `alloc_buffer_block`).
const MPS_START: &str = "mps backend out of memory (";

/// The cudaMallocAsync backend's message (`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`,
/// `c10/cuda/CUDAMallocAsyncAllocator.cpp`, `mallocAsync`).
const ASYNC_START: &str = "would exceed allowed memory. (out of memory)";

/// The most a process holds beyond PyTorch's reservation for a listed
/// process to be taken as this one when the message has no `this process`
/// line (or a tenth of the reservation, when larger): a CUDA context
/// (0.5–1.5 GiB) and NCCL's buffers. A process far larger than what PyTorch
/// reserved is a neighbour, not this process.
pub const SELF_EXTRA_BYTES: u64 = 3 << 30;

/// A token that is a log timestamp: digits with `-`, `:`, `T`, `.`, `,`,
/// `Z`, `+` or `/`, with two separators (`2021-12-08T01:25:15.387Z`,
/// `12:50:58,411`) or a month-day (`08-14`). Sizes hold neither, and a
/// `grep -n` number glued to a figure (`123:1.50`) has one separator.
fn is_stamp(tok: &str) -> bool {
    let seps = tok.chars().filter(|c| matches!(c, '-' | ':')).count();
    let month_day = tok.split_once('-').is_some_and(|(a, b)| {
        (1..=4).contains(&a.len()) && (1..=2).contains(&b.len()) && !b.contains(':')
    });
    tok.starts_with(|c: char| c.is_ascii_digit())
        && tok
            .chars()
            .all(|c| c.is_ascii_digit() || "-:T.,Z+/".contains(c))
        && (seps >= 2 || month_day)
}

/// Strips what logs, quoting and tools put before each line: comment and
/// quote markers, `[...]` groups (`[rank0]:`, `[2024-01-01 12:00:00]`),
/// timestamps, `grep -n`'s `N:` / `file:N:`.
fn strip_line_prefix(mut l: &str) -> &str {
    loop {
        let before = l.len();
        l = l.trim_start();
        for p in [">", "#", "//", "|", "*"] {
            if let Some(r) = l.strip_prefix(p) {
                l = r;
            }
        }
        l = l.trim_start();
        if l.starts_with('[') {
            if let Some(i) = l.find(']').filter(|&i| i < 100) {
                l = l[i + 1..].trim_start_matches(':');
            }
        }
        // vLLM's `(VllmWorker rank=1 pid=254) ` / `(EngineCore_DP0 pid=7) `.
        if l.starts_with('(') {
            if let Some(i) = l.find(')').filter(|&i| i < 80 && l[..i].contains('=')) {
                l = &l[i + 1..];
            }
        }
        for level in [
            "INFO ",
            "WARNING ",
            "WARN ",
            "ERROR ",
            "DEBUG ",
            "CRITICAL ",
        ] {
            if let Some(r) = l.strip_prefix(level) {
                l = r;
            }
        }
        let tok_end = l.find(char::is_whitespace).unwrap_or(l.len());
        let tok = &l[..tok_end];
        if is_stamp(tok) || (tok.ends_with(']') && tok.contains(".py:")) {
            // A timestamp, or old vLLM's `multiproc_worker_utils.py:233]`.
            l = &l[tok_end..];
        } else if let Some(i) = l[..tok_end].find(':') {
            // grep -n: `1234:rest` or `train.log:1234:rest`.
            let (a, b) = (&l[..i], &l[i + 1..]);
            let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
            if digits(a) {
                l = b;
            } else if let Some(j) = b[..tok_end - i - 1].find([':', '-']) {
                if !a.contains(' ') && a.contains('.') && digits(&b[..j]) {
                    l = &b[j + 1..];
                }
            }
        }
        if l.len() == before {
            return l;
        }
    }
}

/// The input as one line: escapes of a Python or JSON string undone, each
/// line's prefixes stripped, lines joined with `sep` (a space for lines
/// wrapped between words; nothing for lines cut at a fixed width, inside a
/// word or a figure), runs of spaces made one space.
pub(crate) fn flatten(text: &str, sep: &str) -> String {
    let text = without_terminal_codes(text)
        .replace("\\r\\n", "\n")
        .replace("\\n", "\n")
        .replace("\\'", "'")
        .replace("\\\"", "\"");
    text.lines()
        .map(|l| {
            let st = strip_line_prefix(l);
            // Cut at a fixed width, a line's leading space is the text's.
            if sep.is_empty() && st.len() == l.trim_start().len() {
                l
            } else {
                st
            }
        })
        .collect::<Vec<_>>()
        .join(sep)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` without the terminal's control sequences: ECMA-48 CSI (`ESC [` parameters, then one
/// final byte from `@` to `~`: colours, cursor moves) and OSC (`ESC ]` up to BEL or `ESC \\`:
/// titles, links). Logs carry them: vLLM's `_add_prefix` (vllm/utils) writes each worker
/// line's `(VllmWorkerProcess pid=N)` prefix between `\x1b[1;36m` and `\x1b[0;0m`, into a file
/// too until NO_COLOR and VLLM_LOGGING_COLOR were read there; `script`, `docker logs` of a `-t`
/// container and CI logs keep colour codes. One around a figure (`\x1b[1m20.00 MiB\x1b[0m`)
/// would hide it, one before a line would hide the prefix the line's reader strips.
pub(crate) fn without_terminal_codes(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\x1b') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // Parameter and intermediate bytes, then the final byte.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            // A lone ESC (or another escape's first byte) is dropped.
            _ => {}
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The reason [`parse`] gives when `text` holds no PyTorch out-of-memory message at all.
pub(crate) const NO_MESSAGE: &str =
    "no PyTorch out-of-memory message (`CUDA out of memory. Tried to allocate ...`) found";

/// The reason [`parse`] gives for the CUDA runtime's own `CUDA error: out of memory`.
pub(crate) const CUDA_RUNTIME: &str = "this is the CUDA runtime's `CUDA error: out of memory` (a \
     kernel, library or context allocation outside PyTorch's allocator): it carries no figures; \
     paste the `CUDA out of memory. Tried to allocate ...` message instead";

/// Finds and parses the out-of-memory message in `text`.
///
/// # Errors
/// [`DoctorError::Unparseable`] naming what is missing: no message at all
/// (with a word on the CUDA runtime's own `CUDA error: out of memory`, which
/// carries no figures), or a message whose figures cannot be read.
///
/// ```
/// let m = vram_doctor::message::parse(
///     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a \
///      total capacity of 79.19 GiB of which 6.75 MiB is free. Including non-PyTorch memory, \
///      this process has 79.17 GiB memory in use. Of the allocated memory 77.65 GiB is \
///      allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.",
/// ).unwrap();
/// assert_eq!(m.requested_bytes, 20 << 20);
/// assert_eq!(m.reserved_unallocated_bytes(), 1_095_216_660);
/// ```
pub fn parse(text: &str) -> Result<OomMessage> {
    // The message's words are matched whatever their case: other bindings reprint it (R's
    // torch writes `reserved in total by Pytorch`), and people retype it.
    let mut m = match parse_flat(&flatten(text, " ").to_ascii_lowercase()) {
        Ok(m) => m,
        // Lines cut at a fixed width, inside a figure: join them as they are.
        Err(e) => parse_flat(&flatten(text, "").to_ascii_lowercase()).map_err(|_| e)?,
    };
    m.expandable_segments = sets_expandable_segments(text);
    Ok(m)
}

/// Whether `text` sets the caching allocator's expandable segments itself: `expandable_segments:
/// True` in an allocator setting (`PYTORCH_CUDA_ALLOC_CONF`, ROCm's `PYTORCH_HIP_ALLOC_CONF`,
/// 2.9's `PYTORCH_ALLOC_CONF`; an `export`, an `os.environ[...] =` line, a launcher's env), but
/// not the hint PyTorch 2.2+ appends to its own message (`If reserved but unallocated memory is
/// large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation`).
/// The value is matched as PyTorch's option parser takes it, `True` (`parseExpandableSegments`
/// accepts `True` or `False` alone: `c10/cuda/CUDAAllocatorConfig.cpp` at v2.1.0-v2.8.0,
/// `c10/core/AllocatorConfig.cpp` at v2.9.0).
pub fn sets_expandable_segments(text: &str) -> bool {
    const SETTING: &str = "expandable_segments:True";
    // Read as the message is (line prefixes stripped), and without whitespace: PyTorch's hint
    // wrapped between words or cut at a fixed width inside one is still its hint.
    let text: String = flatten(text, " ")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    text.match_indices(SETTING).any(|(i, _)| {
        let before = text[..i].to_ascii_lowercase();
        let before = before.trim_end_matches(['"', '\'', '=']);
        let hint = [
            "pytorch_cuda_alloc_conf",
            "pytorch_hip_alloc_conf",
            "pytorch_alloc_conf",
        ]
        .iter()
        .any(|v| {
            before
                .strip_suffix(v)
                .is_some_and(|b| b.ends_with("trysetting"))
        });
        !hint
    })
}

fn parse_flat(flat: &str) -> Result<OomMessage> {
    let mut start = START;
    let mut starts: Vec<usize> = flat.match_indices(START).map(|(i, _)| i).collect();
    if starts.is_empty() {
        if let Some(i) = flat.find(MPS_START) {
            return mps_layout(&flat[i + MPS_START.len()..]);
        }
        if let Some(i) = flat.find(ASYNC_START) {
            let mut m = async_layout(&flat[i + ASYNC_START.len()..])?;
            m.device = flat[..i]
                .trim_end()
                .rsplit(' ')
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            return Ok(m);
        }
        // Pasted from `Tried to allocate`: read only where the figures follow.
        start = BARE_START;
        starts = flat
            .match_indices(BARE_START)
            .map(|(i, _)| i)
            .filter(|&i| {
                size_prefix(&flat[i + BARE_START.len()..]).is_some_and(|(_, r)| {
                    strip_phrase(r, "(gpu").is_some()
                        || strip_phrase(r, "(npu").is_some()
                        || strip_phrase(r, ". gpu").is_some()
                })
            })
            .collect();
    }
    if starts.is_empty() {
        let reason = if flat.contains("cuda error: out of memory")
            || flat.contains("hip error: out of memory")
        {
            CUDA_RUNTIME.to_string()
        } else {
            NO_MESSAGE.to_string()
        };
        return Err(unparseable(reason));
    }
    // Each occurrence up to the next one; the first that reads whole wins.
    let mut first_err = None;
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(flat.len());
        match parse_one(&flat[s + start.len()..end]) {
            Ok(mut m) => {
                let before = &flat[..s];
                m.backend = if before.ends_with("hip ") {
                    Backend::Hip
                } else if before.ends_with("npu ") {
                    Backend::Npu
                } else if before.ends_with("xpu ") {
                    Backend::Xpu
                } else {
                    Backend::Cuda
                };
                return Ok(m);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.expect("at least one occurrence"))
}

fn parse_one(msg: &str) -> Result<OomMessage> {
    let (requested_bytes, rest) = size_prefix(msg).ok_or_else(|| {
        unparseable(if beyond_64_bits(msg) {
            "the size after `Tried to allocate` is more than 2^64 bytes (16 EiB), beyond any figure PyTorch's 64-bit counters print".into()
        } else {
            "no size after `Tried to allocate`".into()
        })
    })?;
    if let Some(r) = strip_phrase(rest, "(gpu").or_else(|| strip_phrase(rest, "(npu")) {
        return legacy(requested_bytes, r.trim_start());
    }
    let r = rest.strip_prefix(". gpu ").ok_or_else(|| {
        unparseable(
            "neither `. GPU n has a total capacity` (2.1+) nor `(GPU n;` (1.x/2.0) after the request"
                .into(),
        )
    })?;
    // Some builds print no index (`GPU  has a total capacity`): device 0 is assumed.
    let device = leading_u32(r)
        .or_else(|| r.trim_start().starts_with("has ").then_some(0))
        .ok_or_else(|| unparseable("no GPU index".into()))?;
    let total_bytes = match after(r, "has a total capacity of ") {
        Some(_) => field(r, "has a total capacity of ", "device total")?,
        None => field(r, "has a total capacty of ", "device total")?,
    };
    let free_bytes = field(r, " of which ", "free memory")?;
    let mut other_processes = Vec::new();
    let mut this_process_bytes = None;
    let mut cursor = after(r, " is free. ").unwrap_or("");
    loop {
        if let Some(p) = cursor.strip_prefix("including non-pytorch memory, this process has ") {
            let (v, rest) =
                size_prefix(p).ok_or_else(|| unparseable("no size for this process".into()))?;
            this_process_bytes = Some(this_process_bytes.unwrap_or(0u64).saturating_add(v));
            cursor = rest.strip_prefix(" memory in use. ").unwrap_or(rest);
        } else if let Some(p) = cursor.strip_prefix("process ") {
            let pid = leading_u32(p).ok_or_else(|| unparseable("no pid after `Process`".into()))?;
            let (v, rest) = after(p, " has ")
                .and_then(size_prefix)
                .ok_or_else(|| unparseable(format!("no size for process {pid}")))?;
            other_processes.push(MessageProcess { pid, bytes: v });
            cursor = rest.strip_prefix(" memory in use. ").unwrap_or(rest);
        } else {
            break;
        }
    }
    let allowed_bytes = size_prefix(cursor)
        .filter(|(_, rest)| rest.starts_with(" allowed;"))
        .map(|(v, _)| v);
    if after(r, "of the allocated memory ").is_none() {
        return Err(unparseable(
            "the message stops before `Of the allocated memory ...` (PyTorch's own figures): paste it whole"
                .into(),
        ));
    }
    let allocated_bytes = field(r, "of the allocated memory ", "allocated by PyTorch")?;
    let private_pool_bytes = after(r, " is allocated by pytorch, with ")
        .and_then(size_prefix)
        .filter(|(_, rest)| rest.starts_with(" allocated in private pools"))
        .map(|(v, _)| v);
    let unallocated = after(r, " is allocated by pytorch, ")
        .and_then(|s| after(s, "and "))
        .and_then(size_prefix)
        .filter(|(_, rest)| rest.starts_with(" is reserved by pytorch but unallocated"))
        .map(|(v, _)| v)
        .ok_or_else(|| unparseable("no `... is reserved by PyTorch but unallocated`".into()))?;
    // PyTorch prints allocated + private and reserved - allocated - private:
    // they sum to reserved.
    let reserved_bytes = allocated_bytes.saturating_add(unallocated);
    let self_process = if this_process_bytes.is_some() {
        SelfProcess::Named
    } else if other_processes.is_empty() {
        SelfProcess::NoList
    } else {
        // No `this process` line: the smallest listed process holding at
        // least PyTorch's reservation, and not more than a CUDA context and
        // communication buffers beyond it, is this one seen from another pid
        // namespace; if none does, this process is not listed.
        let most = reserved_bytes.saturating_add(SELF_EXTRA_BYTES.max(reserved_bytes / 10));
        match other_processes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.bytes >= reserved_bytes && p.bytes <= most)
            .min_by_key(|(_, p)| p.bytes)
            .map(|(i, _)| i)
        {
            Some(i) => {
                let me = other_processes.remove(i);
                this_process_bytes = Some(me.bytes);
                SelfProcess::Chosen { pid: me.pid }
            }
            // Every process NVML lists holds device memory, and so does this one (its
            // reservation at least): if the listed ones and the reservation add up to more
            // than the device has in use, one of the listed ones is this process.
            None => match counts_this_process(
                total_bytes,
                free_bytes,
                reserved_bytes,
                reserved_rounding(allocated_bytes, unallocated),
                &other_processes,
            ) {
                Some(i) => {
                    let me = other_processes.remove(i);
                    this_process_bytes = Some(me.bytes);
                    SelfProcess::Accounted { pid: me.pid }
                }
                None => SelfProcess::NotListed,
            },
        }
    };
    Ok(OomMessage {
        layout: Layout::Current,
        requested_bytes,
        device,
        total_bytes,
        free_bytes,
        allocated_bytes,
        reserved_bytes,
        self_process,
        private_pool_bytes,
        allowed_bytes,
        this_process_bytes,
        other_processes,
        backend: Backend::Cuda,
        expandable_segments: false,
    })
}

/// The cudaMallocAsync backend's figures (`c10/cuda/CUDAMallocAsyncAllocator.cpp`,
/// `mallocAsync`: `Currently allocated : A`, `Requested : S`, `Device limit : T`, `Free
/// (according to CUDA): F`, `PyTorch limit (set by user-supplied memory fraction) : L`, L
/// printing as 2^64 bytes when no fraction is set). `text` follows `(out of memory)`; the
/// device index precedes it (`Allocation on device N would ...`) and is not needed here.
/// Half a unit of the last digit `format_size` prints for `b` (two decimals of KiB, MiB or
/// GiB; bytes exact): how far the exact figure may be from the printed one.
pub(crate) fn rounding(b: u64) -> u64 {
    const K: u64 = 1024;
    if b <= K {
        0
    } else if b <= K * K {
        K / 200
    } else if b <= K * K * K {
        K * K / 200
    } else {
        K * K * K / 200
    }
}

/// The rounding of a 2.1+ reservation, printed as two figures (allocated and unallocated).
fn reserved_rounding(allocated: u64, unallocated: u64) -> u64 {
    rounding(allocated).saturating_add(rounding(unallocated))
}

/// Which listed process, if any, must be this one by the message's own accounting: NVML
/// lists processes by the memory they hold on the device, this process holds at least what
/// PyTorch reserved, and together they cannot hold more than the device has in use
/// (total − free). When the listed processes plus the reservation exceed it beyond every
/// printed figure's rounding, this process is among the listed ones: the smallest one
/// holding at least the reservation (its pid is from another namespace, a container's).
/// `None` when the figures leave room for this process beside the listed ones, or no listed
/// process could be it.
fn counts_this_process(
    total: u64,
    free: u64,
    reserved: u64,
    reserved_rounding: u64,
    listed: &[MessageProcess],
) -> Option<usize> {
    let in_use = total.saturating_sub(free);
    let slack = listed.iter().fold(
        rounding(total)
            .saturating_add(rounding(free))
            .saturating_add(reserved_rounding),
        |a, p| a.saturating_add(rounding(p.bytes)),
    );
    let listed_bytes = listed.iter().fold(0u64, |a, p| a.saturating_add(p.bytes));
    if listed_bytes.saturating_add(reserved) <= in_use.saturating_add(slack) {
        return None;
    }
    listed
        .iter()
        .enumerate()
        .filter(|(_, p)| p.bytes.saturating_add(reserved_rounding) >= reserved)
        .min_by_key(|(_, p)| p.bytes)
        .map(|(i, _)| i)
}

fn async_layout(text: &str) -> Result<OomMessage> {
    let value = |label: &str, what: &str| -> Result<u64> {
        after(text, label)
            .map(|r| r.trim_start_matches([' ', ':']))
            .and_then(size_prefix)
            .map(|(v, _)| v)
            .ok_or_else(|| unparseable(format!("no size after `{}` ({what})", label.trim())))
    };
    let allocated_bytes = value("currently allocated", "allocated")?;
    let requested_bytes = value("requested", "the request")?;
    let total_bytes = value("device limit", "device total")?;
    let free_bytes = value("free (according to cuda)", "free memory")?;
    let limit = value("memory fraction)", "PyTorch limit").ok();
    Ok(OomMessage {
        layout: Layout::Async,
        requested_bytes,
        device: 0,
        total_bytes,
        free_bytes,
        allocated_bytes,
        reserved_bytes: allocated_bytes,
        self_process: SelfProcess::NoList,
        private_pool_bytes: None,
        // 2^64 bytes (`17179869184.00 GiB`) is "no fraction set".
        allowed_bytes: limit.filter(|&l| l < u64::MAX),
        this_process_bytes: None,
        other_processes: Vec::new(),
        backend: Backend::Cuda,
        expandable_segments: false,
    })
}

/// `MPS allocated: A, other allocations: O[, max allowed: L]). Tried to allocate S on P pool.`
/// (lower-cased, from after `MPS backend out of memory (`).
fn mps_layout(text: &str) -> Result<OomMessage> {
    let (heaps, rest) = strip_phrase(text, "mps allocated:")
        .and_then(size_prefix)
        .ok_or_else(|| unparseable("no size after `MPS allocated:`".into()))?;
    let (other, rest) = strip_phrase(rest, ", other allocations:")
        .and_then(size_prefix)
        .ok_or_else(|| unparseable("no size after `other allocations:`".into()))?;
    let (allowed_bytes, rest) = match strip_phrase(rest, ", max allowed:").and_then(size_prefix) {
        Some((l, r)) => (Some(l), r),
        None => (None, rest),
    };
    let (requested_bytes, _) = strip_phrase(rest, "). tried to allocate")
        .and_then(size_prefix)
        .ok_or_else(|| {
            unparseable(
                "the MPS message stops before `Tried to allocate S on ... pool`: paste it whole"
                    .into(),
            )
        })?;
    Ok(OomMessage {
        layout: Layout::Mps,
        requested_bytes,
        device: 0,
        total_bytes: 0,
        free_bytes: 0,
        allocated_bytes: heaps,
        reserved_bytes: heaps,
        self_process: SelfProcess::NoList,
        private_pool_bytes: None,
        allowed_bytes,
        this_process_bytes: Some(heaps.saturating_add(other)),
        other_processes: Vec::new(),
        backend: Backend::Mps,
        expandable_segments: false,
    })
}

fn leading_u32(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

fn legacy(requested_bytes: u64, r: &str) -> Result<OomMessage> {
    let device = leading_u32(r).ok_or_else(|| unparseable("no GPU index".into()))?;
    let r = after(r, ";").ok_or_else(|| unparseable("no `;` after the GPU index".into()))?;
    let (total_bytes, rest) = figure(r, "total capacity;")
        .ok_or_else(|| unparseable("no `... total capacity;`".into()))?;
    let (allocated_bytes, mut rest) = figure(rest, "already allocated;")
        .ok_or_else(|| unparseable("no `... already allocated;`".into()))?;
    // torch_npu prints the bytes in active blocks here (`stats.active_bytes`); the diagnosis
    // does not use them.
    if let Some((_, r2)) = figure(rest, "current active;") {
        rest = r2;
    }
    let (free_bytes, mut rest) =
        figure(rest, "free;").ok_or_else(|| unparseable("no `... free;`".into()))?;
    let mut allowed_bytes = None;
    if let Some((v, r2)) = figure(rest, "allowed;") {
        allowed_bytes = Some(v);
        rest = r2;
    }
    let (last, tail) = size_prefix(rest).ok_or_else(|| {
        unparseable(
            "no `... reserved in total by PyTorch)` (1.4–2.0) nor `... cached)` (1.0–1.3)".into(),
        )
    })?;
    let (layout, reserved_bytes) = if strip_phrase(tail, "reserved in total by pytorch").is_some() {
        (Layout::Legacy, last)
    } else if strip_phrase(tail, "cached").is_some() {
        // 1.0-1.3: `format_size(amount_cached - amount_allocated) " cached)"`.
        (Layout::Cached, allocated_bytes.saturating_add(last))
    } else {
        return Err(unparseable(
            "no `... reserved in total by PyTorch)` (1.4–2.0) nor `... cached)` (1.0–1.3)".into(),
        ));
    };
    Ok(OomMessage {
        layout,
        requested_bytes,
        device,
        total_bytes,
        free_bytes,
        allocated_bytes,
        reserved_bytes,
        self_process: SelfProcess::NoList,
        private_pool_bytes: None,
        allowed_bytes,
        this_process_bytes: None,
        other_processes: Vec::new(),
        backend: Backend::Cuda,
        expandable_segments: false,
    })
}
