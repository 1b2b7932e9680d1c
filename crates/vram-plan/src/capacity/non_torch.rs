//! Memory outside PyTorch that vLLM's profile sees grow: the `non_torch_increase` of
//! `memory_profiling` (`vllm/utils/mem_utils.py`), device memory in use (`mem_get_info`) less
//! what the caching allocator reserves (`memory_reserved`), from a baseline snapshot to the end of
//! the profile run. What lands in it depends on where the baseline is taken and on what is
//! allocated outside PyTorch after it:
//!
//! - **Where the baseline is.** V1 (`v1/worker/gpu_worker.py` `init_device`, read at 0.11.0 and
//!   0.18.1) takes `init_snapshot` *after* `init_worker_distributed_environment`: the PyNccl
//!   communicator (its warm-up all-reduce done), the custom all-reduce buffers (26 MiB where
//!   built, [`vllm_custom_all_reduce`]) and the symmetric-memory buffer are already there. V0 from
//!   0.7 (`worker/worker.py` `init_device`, read at 0.8.3) takes `baseline_snapshot` *before* it,
//!   so its communicators count. V0 before 0.7 has three rules (`engine::vllm_context_in_budget`,
//!   read at 0.5.5, 0.6.0, 0.6.3.post1, 0.6.4, 0.6.5, 0.6.6.post1): only 0.6.4 counts the CUDA
//!   context inside the budget; every one counts the communicators, built piece by piece under
//!   the NCCL its pinned torch ships (2.20.5 or 2.21.5), NVLS buffers included
//!   ([`vllm_v0_before_07`]).
//! - **Kernel images and library state** loaded lazily (`CUDA_MODULE_LOADING=LAZY`) by the
//!   first forward: small, and larger once vLLM profiles its CUDA graphs inside the window (from
//!   0.18, `profile_cudagraph_memory` runs inside `memory_profiling`: two captures per graph mode,
//!   then `clear_all_graphs`, leaving the graphs' driver state and the capture stream's handles).
//!   Measured, not derived: 0.05 GiB eager on a T4 (vLLM 0.8.2's own "non_torch_memory takes
//!   0.05GiB", `unseen-round5.json`'s fit half, which the V1 0.18 T4 TP-1 fit logs' residuals
//!   match once `capacity::sampler`'s terms are counted), 0.02 GiB compiled without graph profiling (vLLM 0.10,
//!   `logs.json`), 0.25 GiB compiled with it (vLLM 0.19 on H100, `unseen.json`'s fit half).
//! - **A NCCL communicator connected after the baseline.** vLLM sets `NCCL_CUMEM_ENABLE=0`
//!   (0.7.0 to 0.10.1.1 read), which leaves NCCL without runtime connection or NVLS, so each
//!   `ncclCommInitRank` connects the ring and the tree on every channel ([`communicator`]).
//!   From 0.10.2 it no longer does: with cuMem on NCCL connects at run time, and over PCIe the
//!   figure is [`communicator_cumem`]'s (the ring alone, and 2 MiB device-state granules). At
//!   TP > 1 the profile run's first `torch.distributed` collective (the logits gather,
//!   `base_device_communicator.py` `dist.all_gather_into_tensor(group=self.device_group)`)
//!   creates the process group's own NCCL communicator; V0 also connects PyNccl's after its
//!   baseline. Per connection NCCL gives Simple 4 MiB (`NCCL_BUFFSIZE`), LL 512 KiB and, on
//!   NVLink, LL128 4.69 MiB. On PCIe NCCL uses 2 channels: ~18 MiB, with the communicator's
//!   device state 0.05 GiB. Over NVSwitch without NVLS (A100) the channels are NCCL's ring
//!   search's, 24 on HGX A100 ([`nvswitch_channels`], the rule SGLang's start uses): 12 MiB a
//!   send/receive pair, one per channel at TP 2 and two from TP 3, 0.28 / 0.56 GiB. On an
//!   NVSwitch H100 vLLM 0.19's logs show 1.81 GiB over the TP-1 figure at TP 2 and 4 (the fit
//!   half of `unseen.json`): 1.5 GiB of it is FlashInfer's all-reduce + RMSNorm fusion
//!   workspace (below), the rest (0.31 GiB, [`NVLS_COMMUNICATOR_BYTES`]) is taken as measured.
//! - **FlashInfer's fusion workspace** (vLLM 0.17 to 0.22 at `-O2`, TP > 1, Hopper or
//!   Blackwell with NVSwitch): three `cuMemCreate` buffers made when the profile run first
//!   compiles the model ([`vllm_fi_allreduce_workspace`]).
//! - **Pipeline stages without TP** (0.19 on H100, PP 2): 0.07 GiB in all, measured.
//! - **Beside the budget: the communicators that exist at the baseline.** V1 from 0.9 takes its
//!   baseline after `init_worker_distributed_environment`, so what that set up is neither in the
//!   budget nor in the figure above, but it is on the device when the graphs are captured and the
//!   sampler warmed up after the KV cache ([`vllm_init_communicators`]).
//!   The CUDA context beside the budget is the catalog's ([`Gpu::context_bytes`], 779 MiB on an
//!   H100, measured after training and `generate` steps, so with their kernels and cuBLAS state
//!   loaded). vLLM's baseline comes before the first forward: its own snapshot reads 0.51 GiB at
//!   TP 1 on H100 under 0.19, and the kernels loaded afterwards are in the profile's non-torch
//!   increase, inside the budget (the images figure above, 0.25 GiB there). So the room after
//!   the KV cache is understated by about that much at every TP size; kept, on the safe side,
//!   since no reading of the bare context exists for other GPUs and versions.

use super::*;

const MIB: u64 = 1 << 20;

/// How the GPUs of one TP group talk, as NCCL sees them (`vram capacity --interconnect`; by
/// default the catalog GPU's board, [`interconnect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interconnect {
    /// NVLink through NVSwitches that reduce in the switch (NVLS: HGX H100, H200, H20, B200).
    NvSwitchNvls,
    /// NVLink through NVSwitches without NVLS (HGX/DGX A100).
    NvSwitch,
    /// PCIe with peer-to-peer access (L4, L40, A10, T4, V100 PCIe, H100 PCIe) and AMD Instinct
    /// (RCCL over xGMI, not modelled separately).
    Pcie,
    /// GPUs of one node that NCCL connects through host shared memory, without peer-to-peer
    /// access: by default the GeForce RTX boards, which NVIDIA's stock driver gives none
    /// ([`stock_driver_denies_p2p`]); asked for (`--interconnect shm`) where a user runs with
    /// `NCCL_P2P_DISABLE=1`, where a container hides peer access (vLLM then logs "Custom
    /// allreduce is disabled because your platform lacks GPU P2P capability or P2P test
    /// failed"), or where the host's PCIe path is one NCCL will not use for P2P (its default
    /// level is PXB: PHB and beyond only between two GPUs on an AMD CPU, `ncclTopoCheckP2p`).
    Shm,
    /// A TP group that spans nodes (vLLM over Ray: "Custom allreduce is disabled because this
    /// process group spans across nodes"): NCCL's network transport between them.
    Network,
}

/// The interconnect of a TP group: the asked one, else the catalog GPU's board (SXM boards with
/// NVSwitch; everything else PCIe).
pub(super) fn interconnect(gpu: &Gpu, k: &Knobs) -> Interconnect {
    if let Some(i) = k.interconnect {
        return i;
    }
    match gpu.id {
        "h100-80g" | "h200" | "h20" | "h20-141g" | "b200" => Interconnect::NvSwitchNvls,
        "a100-40g" | "a100-80g" => Interconnect::NvSwitch,
        _ if stock_driver_denies_p2p(gpu) => Interconnect::Shm,
        _ => Interconnect::Pcie,
    }
}

/// GPUs under one board's NVSwitches: the catalog's NVSwitch boards are the eight-GPU HGX ones
/// (HGX A100 8-GPU, HGX H100/H200/H20, HGX B200), so one NVLink domain is one node of eight.
const NVSWITCH_BOARD_GPUS: u64 = 8;

/// The interconnect of the PP group. vLLM lays the ranks out as
/// `torch.arange(world).reshape(-1, dp, pp, tp)` and takes each PP group as
/// `all_ranks.transpose(2, 3).reshape(-1, pp)` (`distributed/parallel_state.py`
/// `initialize_model_parallel`, as the code index's copies of vLLM's file write it; V0's older
/// loop, `range(i, world_size, world_size // pp)`, gives the same groups at DP 1): a PP group's
/// peers are `tp` ranks apart, and with each node's GPUs given ranks in order a TP x PP replica
/// wider than one NVSwitch board puts them on different nodes. That group talks through NCCL's
/// network transport, not the board's NVLink, whatever the TP group does. Boards without
/// NVSwitch keep their own figure (the PCIe one, the same bytes as the network's here).
pub(super) fn pp_interconnect(gpu: &Gpu, k: &Knobs) -> Interconnect {
    match interconnect(gpu, k) {
        Interconnect::NvSwitch | Interconnect::NvSwitchNvls
            if k.tp * k.pp > NVSWITCH_BOARD_GPUS =>
        {
            Interconnect::Network
        }
        link => link,
    }
}

/// NVLink links from one GPU to the NVSwitches and NCCL's bandwidth per link (GB/s,
/// `SM80_NVLINK_BW` 20.0, `SM90_NVLINK_BW` 20.6, `SM100_NVLINK_BW` 40.0 in `src/graph/topo.h`), for
/// the catalog's NVSwitch boards: HGX A100 12 links, HGX H100/H200/H20 and B200 18.
fn nvswitch_links(gpu: &Gpu) -> Option<(u32, f64)> {
    let links = match gpu.id {
        "a100-40g" | "a100-80g" => 12,
        "h100-80g" | "h200" | "h20" | "h20-141g" | "b200" => 18,
        _ => return None,
    };
    let bw = match gpu.sm_major {
        8 => 20.0,
        9 => 20.6,
        _ => 40.0,
    };
    Some((links, bw))
}

/// The collective channels NCCL (2.21.5 to 2.27.3, the same code at each) gives a single-node
/// communicator over NVSwitch without NVLS: the ring search (`src/graph/search.cc`
/// `ncclTopoCompute`) tries the speeds of the GPU's array (sm_80 and earlier `speedArrayIntra`
/// from 40, sm_90 `sm90SpeedArrayIntra` from 60, sm_100 from 90 GB/s), each with as many channels
/// as the GPU's links carry (at most `MAXCHANNELS / 2` = 16), keeps the best channels x speed
/// (`ncclTopoCompareGraphs`), stops once that covers the GPU's total or the next speed is under
/// 0.49 of the kept one; `ncclTopoDupChannels` doubles it (speed >= 25, and not on sm_90+ below
/// 50 with more than 4), and `ncclTopoPostset` (`src/graph/connect.cc`) doubles it again. H100:
/// 6 x 60 -> 24; A100: 6 x 40 -> 24 (HGX A100's log, NVIDIA/nccl-tests#100: "Channel 23/24");
/// H800's 8 links: 4 x 40 -> 16 (its log, NVIDIA/nccl#892: "16 coll channels").
pub(super) fn nvswitch_channels(gpu: &Gpu) -> Option<u32> {
    let (links, bw) = nvswitch_links(gpu)?;
    Some(ring_search_channels(links, bw, gpu.capability()))
}

/// [`nvswitch_channels`]'s search for `links` NVLinks of `bw` GB/s on a GPU of compute
/// capability `cc`.
pub(super) fn ring_search_channels(links: u32, bw: f64, cc: (u32, u32)) -> u32 {
    let speeds: &[f64] = match cc.0 {
        0..=8 => &[
            40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
        ],
        9 => &[
            60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
        ],
        _ => &[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0],
    };
    let total = f64::from(links) * bw;
    let (mut best_n, mut best_bw) = (0u32, 0.0f64);
    for (i, &speed) in speeds.iter().enumerate().skip_while(|(_, &s)| s > total) {
        if best_n > 0 && i > 0 && speed / best_bw <= 0.49 {
            break;
        }
        let n = ((total / speed).floor() as u32).min(16);
        if f64::from(n) * speed > f64::from(best_n) * best_bw {
            (best_n, best_bw) = (n, speed);
        }
        if f64::from(best_n) * best_bw >= total {
            break;
        }
    }
    let dup = best_bw >= 25.0 && !(cc.0 * 10 + cc.1 > 80 && best_bw < 50.0 && best_n > 4);
    let n = if dup { (best_n * 2).min(16) } else { best_n };
    (n * 2).min(32)
}

/// What NCCL's ring and tree, connected over NVSwitch, hold on each GPU of a single-node group
/// of `ranks`, with `NCCL_CUMEM_ENABLE=0` (plain `cudaMalloc`). Per connection (`src/transport/p2p.cc`
/// `p2pSendSetup`/`p2pRecvSetup`, sizes rounded up to `CUDA_IPC_MIN`, 2 MiB): the receiver holds
/// LL (512 KiB) and LL128 (4.69 MiB), and Simple (4 MiB, `NCCL_BUFFSIZE`) unless P2P reads are on
/// (sm_80 only, `ncclTopoCheckP2p`), when the sender holds it: 12 MiB a send/receive pair either
/// way. The ring gives every rank one pair per channel; the tree is a chain in ring order
/// (HGX A100's log: "Trees [0] 1/-1/-1->0->-1"), adding a pair in the other direction to the
/// middle ranks, so from 3 ranks the fullest GPU holds two pairs per channel.
pub(super) fn nccl_nvswitch_ring_tree_bytes(gpu: &Gpu, ranks: u64) -> Option<(u64, u32)> {
    let channels = nvswitch_channels(gpu)?;
    Some((ring_tree_bytes(channels, ranks), channels))
}

/// [`nccl_nvswitch_ring_tree_bytes`] of `channels`: 12 MiB a send/receive pair, one pair per
/// channel, two from 3 ranks.
fn ring_tree_bytes(channels: u32, ranks: u64) -> u64 {
    let pairs = if ranks >= 3 { 2 } else { 1 };
    u64::from(channels) * pairs * 12 * MIB
}

/// [`nccl_nvswitch_ring_tree_bytes`], or for a board outside the catalog's NVSwitch ones
/// (`--interconnect nvswitch`) the search's ceiling, 16 channels doubled by `ncclTopoPostset`.
fn ring_tree_or_ceiling(gpu: &Gpu, ranks: u64) -> (u64, u32) {
    nccl_nvswitch_ring_tree_bytes(gpu, ranks).unwrap_or((ring_tree_bytes(32, ranks), 32))
}

/// What the process group's NCCL communicator, connected by the profile run, leaves outside
/// PyTorch on each GPU of an NVSwitch board with NVLS: measured, not derived. vLLM 0.19's logs
/// on NVSwitch H100s (`unseen.json`'s fit half) show 1.81 GiB (1,853 MiB) over the TP-1 figure
/// at TP 2 and at TP 4; 1.5 GiB of that is FlashInfer's fusion workspace, which 0.19 builds at
/// both sizes ([`vllm_fi_allreduce_workspace`]), so 317 MiB is the rest. NCCL's own arithmetic
/// (24 channels x 12 MiB a send/receive pair, 0.28 GiB at TP 2, twice that from 3 ranks with
/// the tree) is near it at TP 2 but not at TP 4, where the logs show no more; the figure is
/// used at every TP size and release.
const NVLS_COMMUNICATOR_BYTES: u64 = 1853 * MIB - 3 * FI_MULTICAST_GRANULARITY;

/// Kernel images an eager load and profile load lazily, after a baseline taken before any kernel:
/// 0.05 GiB as vLLM 0.8.2 prints it on a T4 ("non_torch_memory takes 0.05GiB", V0 at TP 1,
/// `unseen-round5.json`, fit; V0 from 0.7 reads its baseline before any kernel). The V1 0.18 T4
/// eager TP-1 fit logs (kaggle-vllm's OPT-125m and Phi-4-mini, whose V1 baseline at TP 1 is also
/// before any kernel) leave 52.1 and 50.8 MiB for it once the profile's PyTorch peak counts the
/// cuBLAS workspace, the Triton sampler buffer and the sampler's rows
/// ([`super::sampler`]). The 0.08 GiB used before session 13 was that residual taken while
/// those three sat outside vram's PyTorch peak, so they were counted twice once `sampler` added
/// them. The driver's default local memory is reserved with the context, before any baseline
/// (BENCHMARKS.md's "kernel images and the driver's local memory").
const EAGER_IMAGES_BYTES: u64 = 51 * MIB;

/// vLLM's custom all-reduce buffers on each GPU where [`vllm_custom_all_reduce`] builds them
/// (`CustomAllreduce.__init__`, the same at 0.7.0, 0.8.3, 0.8.5 and 0.10.1.1): two
/// `create_shared_buffer` calls, each a `cudaMalloc` outside PyTorch, of `meta_size() +
/// max_size` (the `Signal` block, 2.4 KiB at `kMaxBlocks` 36, plus 8 MiB: 10 MiB in 2 MiB
/// pages) and `max_size` (8 MiB, the default every caller keeps), and `rank_data`, an 8 MiB
/// `torch.empty` on the device. The peers' buffers are opened by IPC and hold nothing here.
pub(super) const VLLM_CUSTOM_ALL_REDUCE_BYTES: u64 = 26 * MIB;

/// Whether vLLM builds its custom all-reduce for the TP group, as the version's own checks
/// decide (read at 0.7.0, 0.7.3, 0.8.0, 0.8.3, 0.8.5 and 0.10.1.1: `custom_all_reduce.py`,
/// `cuda_communicator.py`, `ParallelConfig.__post_init__`, `platforms/rocm.py`). Only the TP
/// group builds one ("only tp uses custom allreduce"), and `CustomAllreduce.__init__` turns
/// itself off — logging "Custom allreduce is disabled because ..." and allocating nothing —
/// for a group that spans nodes, a world size other than 2, 4, 6 or 8, more than two GPUs that
/// are not all NVLink-connected (`is_fully_connected`/`is_full_nvlink`), and GPUs that fail
/// the P2P check. Over `shm` the GPUs have no P2P, so the check fails. Over `pcie` TP 2 is
/// taken as failing it too (no buffers), as the graphs take it: the PCIe logs read (Kaggle's
/// T4s, `--disable-custom-all-reduce`) run without it, and whether a given host passes is not
/// in vram's input.
/// On ROCm: `ParallelConfig` sets `disable_custom_all_reduce` on every ROCm GPU through 0.8.0;
/// from 0.8.3 (0.8.1-0.8.2 not read) `RocmPlatform.use_custom_allreduce` keeps it for the MI300
/// series only (`gfx94`: MI300X, MI325X; `gfx95` added by 0.10.1), xGMI-connected (fully
/// connected, no P2P check on ROCm). `--disable-custom-all-reduce` is not a vram flag.
pub(super) fn vllm_custom_all_reduce(gpu: &Gpu, k: &Knobs) -> bool {
    if !matches!(k.tp, 2 | 4 | 6 | 8) {
        return false;
    }
    if gpu.is_rocm() {
        return Engine::Vllm.version_in_force(k) >= [0, 8, 3]
            && matches!(gpu.id, "mi300x" | "mi325x");
    }
    matches!(
        interconnect(gpu, k),
        Interconnect::NvSwitch | Interconnect::NvSwitchNvls
    )
}

/// What one NCCL communicator connected after the baseline leaves on each GPU of a group of
/// `ranks`. vLLM sets `NCCL_CUMEM_ENABLE=0` on import (`vllm/__init__.py` at 0.7.0 and 0.8.0,
/// `env_override.py` at 0.8.5 and 0.10.1.1, unless the user set it or multi-node NVLink's IMEX
/// channels exist), so NCCL has no runtime connection (`comm->runtimeConn = cuMemSupport &&
/// NCCL_RUNTIME_CONNECT`, `cuMemSupport = ncclCuMemEnable()`) and no NVLS: every
/// `ncclCommInitRank` — PyNccl's, before its one-element warm-up all-reduce, and the process
/// group's, at the profile's first `torch.distributed` collective — connects the ring and the
/// tree on every channel, the buffers [`nccl_nvswitch_ring_tree_bytes`] sizes over NVSwitch
/// (the rule SGLang's start uses too).
fn communicator(gpu: &Gpu, link: Interconnect, ranks: u64) -> (u64, String) {
    match link {
        Interconnect::NvSwitch => {
            let (bytes, channels) = ring_tree_or_ceiling(gpu, ranks);
            (
                bytes,
                format!(
                    "{:.2} GiB over NVSwitch without NVLS ({channels} channels from NCCL's ring search x 12 MiB a send/receive pair, {} per channel at {ranks} ranks; cuMem off by vLLM, so every channel connects at init; derived from NCCL's source, no A100 log at TP > 1 to check it)",
                    bytes as f64 / GIB,
                    if ranks >= 3 { "ring and tree" } else { "the ring's" }
                ),
            )
        }
        Interconnect::NvSwitchNvls => (
            NVLS_COMMUNICATOR_BYTES,
            "0.31 GiB over NVSwitch (vLLM 0.19's logs on H100 at TP 2 and 4 show 1.81 GiB, of which 1.5 GiB is FlashInfer's fusion workspace; the rest measured, not derived from NCCL)".into(),
        ),
        Interconnect::Pcie => (
            51 * MIB,
            "0.05 GiB over PCIe or without P2P (NCCL 2.21-2.27, whose buffer defaults agree: 2 channels x ring and tree x 4.5 MiB of Simple and LL buffers, and the communicator's device state; the LL128 buffer NCCL also makes is not counted)".into(),
        ),
        Interconnect::Shm => (
            51 * MIB,
            "0.05 GiB without P2P, taken as PCIe's figure (with cuMem off NCCL's SHM transport puts the ring's and tree's buffers in host memory; what it leaves on the device at init is not derived here, so PCIe's 2 channels x ring and tree x 4.5 MiB is kept, on the safe side)".into(),
        ),
        Interconnect::Network => (
            51 * MIB,
            "0.05 GiB across nodes (NCCL's network transport taken as PCIe's 2 channels x ring and tree x 4.5 MiB; not derived from NCCL's net code)".into(),
        ),
    }
}

/// Bytes NCCL's `ncclCuMemAlloc` rounds each device allocation up to with cuMem on:
/// `cuMemGetAllocationGranularity(..., CU_MEM_ALLOC_GRANULARITY_MINIMUM)` (`src/include/alloc.h`,
/// v2.27.3-1 to v2.28.9-1), which the source leaves to the driver; 2 MiB, the same figure as
/// NCCL's own `CUDA_IPC_MIN` (`src/include/comm.h`) and the granule PyTorch's `cuMemCreate`
/// segments are made of. With cuMem off the same small allocations go through `cudaMalloc`,
/// which packs them into one page.
const CUMEM_GRANULE: u64 = 2 * MIB;

/// The first vLLM that leaves `NCCL_CUMEM_ENABLE` alone: `env_override.py` sets it to 0 at
/// 0.10.1.1 and not at 0.10.2 (nor at any release read after it: 0.11.0, 0.11.2, 0.12.0, 0.13.0,
/// 0.14.1, 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0, 0.22.1, 0.23.0; only the P2P-NCCL KV
/// connector sets it, for its own communicator). NCCL's default (`NCCL_CUMEM_ENABLE` -2,
/// `ncclCuMemEnable`, `src/misc/cudawrap.cc`) is then on wherever the driver has VMM support.
const VLLM_CUMEM_ON_SINCE: [u32; 3] = [0, 10, 2];

/// What the process group's NCCL communicator, created by the profile run's first collective
/// (the logits all-gather), leaves on each GPU of a PCIe group with cuMem on: vLLM V1 from 0.10.2
/// ([`VLLM_CUMEM_ON_SINCE`]) under the NCCL its pinned torch ships (torch 2.8.0 pins
/// `nvidia-nccl-cu12` 2.27.3, 2.9.0-2.10.0 2.27.5, 2.11.0 `nvidia-nccl-cu13` 2.28.9; read at
/// v2.27.3-1, v2.27.5-1, v2.28.9-1, where the parts below are the same):
/// - **Runtime connection.** `comm->runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT` (default
///   1, `src/init.cc`), so `ncclCommInitRank` sets the channels up but connects nothing; the
///   all-gather connects the ring alone (`ncclPrepareTasks` → `ncclTransportRingConnect`, every
///   channel), not the tree. A ring gives each rank one send and one receive connection per
///   channel, whatever the group's size. Over P2P (`src/transport/p2p.cc`) the sender holds its
///   `ncclSendMem` (2 MiB once rounded to `CUDA_IPC_MIN`) and the receiver its `ncclRecvMem` and
///   every protocol's buffer, whatever the link (`computeBuffSizes`: LL 512 KiB, LL128 4.69 MiB,
///   Simple 4 MiB), 10 MiB once rounded: 12 MiB a channel.
/// - **Device state, one granule each** ([`CUMEM_GRANULE`]): `devCommAndChans` and
///   `rankToLocalRank` (`devCommSetup`), and per channel `initChannel`'s shared `devPeers`, the
///   channel's `devPeers` and `devRingUserRanks` (`src/channel.cc`).
/// - **Channels** ([`pcie_ring_channels`]): 2 on a Gen3 or Gen4 board, 4 on a Gen5 x16 one.
/// - **Other links keep [`communicator`]'s figure.** NVSwitch without NVLS (A100) would by the
///   same arithmetic hold the ring alone (24 x 12 MiB at every TP size) and 74 granules
///   (148 MiB). No A100 log at TP > 1 from these releases checks that, and the one NVSwitch
///   reading with cuMem on argues against applying it: vLLM 0.19 on H100s at TP 2 (no NVLS at two
///   GPUs, `ncclNvlsInit`) shows 317 MiB beside FlashInfer's workspace. That is what the 24-channel
///   ring alone (288 MiB) leaves room for, not the 74 granules. So the granule count is the weaker
///   half of this figure. The NVLS boards keep [`NVLS_COMMUNICATOR_BYTES`], measured under 0.19
///   with cuMem already on, and across nodes NCCL's network transport is not derived.
/// - **Not here.** NCCL's kernel images: PyNccl's communicator, built before V1's baseline, loads
///   the same `libnccl.so.2` (vLLM's `find_nccl_library` takes the soname torch has loaded) and
///   calls `ncclInitKernelsForDevice` first.
/// - **Without P2P** ([`Interconnect::Shm`]: by default the GeForce RTX boards) NCCL carries the ring
///   over its SHM transport: `ncclTopoCheckP2p` (`src/graph/paths.cc`) clears P2P when NVML's
///   read or write P2P status between the two GPUs is not OK, and `p2pCanConnect` when
///   `cudaDeviceCanAccessPeer` says no, so the ring's connections go to `shmCanConnect`
///   (`src/transport/shm.cc`), whose send and receive buffers are host memory (`ncclShmOpen`, or
///   `ncclCuMemHostAlloc` with cuMem host allocations); it allocates on the device only with
///   `NCCL_SHM_USE_CUDA_MEMCPY`, off by default. The device state stays: 16 MiB on a Gen4 board.
///   Where the GPUs could have P2P but the host's path forbids it (NCCL's default level is PXB,
///   PHB and beyond only between two GPUs on an AMD CPU), vram cannot tell from the GPU and
///   keeps the P2P figure, on the safe side, unless told (`--interconnect shm`).
fn communicator_cumem(gpu: &Gpu, link: Interconnect) -> Option<(u64, String)> {
    let channels = match link {
        Interconnect::Pcie | Interconnect::Shm => pcie_ring_channels(gpu),
        _ => return None,
    };
    let round = |x: u64| x.div_ceil(CUDA_IPC_MIN_BYTES) * CUDA_IPC_MIN_BYTES;
    // `ncclSendMem` and `ncclRecvMem` are each under a page; LL 8 lines x 512 threads x 8 steps x
    // 16 B, LL128 120 x 640 x 8 x 8 B, Simple `1 << 22` (`DEFAULT_*BUFFSIZE`, `src/init.cc`).
    // With P2P reads (sm_80 over NVLink) Simple moves to the sender: 6 + 6 MiB, the same 12.
    let send = round(4096);
    let recv = round(4096 + 512 * 1024 + 4_915_200 + 4 * MIB);
    let state = (2 + 3 * channels) * CUMEM_GRANULE;
    if link == Interconnect::Shm {
        let why = if stock_driver_denies_p2p(gpu) {
            "NVIDIA's stock driver gives GeForce RTX boards no peer access, so "
        } else {
            ""
        };
        return Some((
            state,
            format!(
                "{:.2} GiB without P2P, with cuMem on (vLLM from 0.10.2 no longer sets NCCL_CUMEM_ENABLE=0; NCCL 2.27/2.28 connects the ring at the logits all-gather; {why}NCCL's SHM transport keeps the ring's buffers in host memory and the device holds {} device-state allocations of 2 MiB each, {channels} channels from NCCL's ring search)",
                state as f64 / GIB,
                2 + 3 * channels,
            ),
        ));
    }
    let ring = channels * (send + recv);
    let bytes = ring + state;
    let tail = format!(
        "; without P2P (--interconnect shm) NCCL's SHM transport keeps the ring's buffers in host memory and this is {:.2} GiB",
        state as f64 / GIB
    );
    Some((
        bytes,
        format!(
            "{:.2} GiB over PCIe with cuMem on (vLLM from 0.10.2 no longer sets NCCL_CUMEM_ENABLE=0; NCCL 2.27/2.28 connects at run time, so the logits all-gather connects the ring alone: {channels} channels from NCCL's ring search x 12 MiB of P2P send and receive buffers, LL, LL128 and Simple, and {} device-state allocations of 2 MiB each{tail})",
            bytes as f64 / GIB,
            2 + 3 * channels,
        ),
    ))
}

/// The ring channels NCCL (v2.27.3-1 to v2.28.9-1) gives a single-node group over PCIe. The
/// link's bandwidth is `width x speed / 80` GB/s (`ncclTopoAddPci`, `src/graph/topo.cc`:
/// 60 per lane at 8 GT/s, 120 at 16, 240 at 32), so 12 for a Gen3 x16 board, 12 for a Gen4 x8
/// one, 24 for Gen4 x16 and 48 for Gen5 x16. `ncclTopoCompute` (`src/graph/search.cc`) starts
/// at the fastest speed not above it and stops at once, because one channel at the link's
/// speed covers the GPU's total (`graph->nChannels*graph->bwInter >= system->totalBw`).
/// `ncclTopoDupChannels` doubles that channel only from 25 GB/s, and `ncclTopoPostset` doubles
/// the result (`src/graph/connect.cc`). So the count is 2, or 4 on the catalog's Gen5 x16
/// boards (H100 PCIe, RTX 5090). This assumes a path no slower than the GPUs' own links.
fn pcie_ring_channels(gpu: &Gpu) -> u64 {
    let gen5_x16 = matches!(gpu.id, "h100-pcie" | "rtx-5090");
    if gen5_x16 {
        4
    } else {
        2
    }
}

/// Whether NVIDIA's stock driver refuses peer access between two of these GPUs over PCIe, so
/// that NCCL cannot use its P2P transport between them. The GeForce RTX boards of the catalog
/// (30, 40 and 50 series): `nvidia-smi topo -p2p rw` reads `GNS` ("GPU not supported") between
/// two RTX 5090s on stock drivers (noonghunna/club-3090#1124, #1229, #1130, 2026), the CUDA
/// sample's `p2pBandwidthLatencyTest` reads "CANNOT Access Peer" between eight RTX 3090s
/// (NVIDIA/nccl#1127), and club-3090's `docs/PCIE_P2P.md` (read at 4a29ab57) states
/// that the stock driver refuses P2P on GeForce cards and that granting it takes a patched
/// kernel module (the tinygrad and aikitoria forks of open-gpu-kernel-modules, whose issues show
/// RTX 4090 and 5090 peer access only under them). One commenter in nccl#1127 got 3090 P2P
/// back by going from driver 545 to 535; vram's `--driver` prices only the graphs (one report
/// is no rule for the transport), and in 2026 two 3090s on
/// driver 595.71.05 had P2P only through aikitoria's module (club-3090#158). An NVLink bridge
/// (RTX 3090 pairs) is not a catalog board. The GTX 1080 is left out: no source read.
pub(super) fn stock_driver_denies_p2p(gpu: &Gpu) -> bool {
    matches!(
        gpu.id,
        "rtx-3090" | "rtx-4060" | "rtx-4070" | "rtx-4080" | "rtx-4090" | "rtx-5090"
    )
}

/// NCCL's `CUDA_IPC_MIN` (`src/include/comm.h`): what a P2P connection's buffers are rounded to.
const CUDA_IPC_MIN_BYTES: u64 = 2 * MIB;

/// The NCCL a vLLM V0 release before 0.7 runs, and the NVLS buffer one channel gives one head
/// in one direction. V0 loads PyTorch's own `libnccl.so.2` for PyNccl (`find_nccl_library`,
/// `vllm/utils.py` at 0.5.5: the library "brought by PyTorch"), so the NCCL is the pinned
/// torch's: `requirements-cuda.txt` pins `torch == 2.4.0` at 0.5.5 to 0.6.3.post1 and
/// `torch == 2.5.1` at 0.6.4 to 0.6.6.post1 (the PyPI sdists), and those torch wheels' metadata
/// require `nvidia-nccl-cu12==2.20.5` and `==2.21.5`. Releases before 0.5.5 were not read and
/// take 0.5.5's. The NVLS buffer (`ncclNvlsSetup`, `src/transport/nvls.cc`): `memSize`
/// (`NVLS_MEM_ALIGN_SIZE`, 2 MiB) plus `buffSize`, at v2.20.5-1 `buffSizes[NCCL_PROTO_SIMPLE]`
/// (4 MiB), at v2.21.5-1 `NVLS_CHUNKSIZE` x `NCCL_STEPS` (128 KiB x 8 = 1 MiB).
fn v0_nccl(k: &Knobs) -> (&'static str, u64) {
    if Engine::Vllm.version_in_force(k) >= [0, 6, 4] {
        ("2.21.5", (1 + 2) * MIB)
    } else {
        ("2.20.5", (4 + 2) * MIB)
    }
}

/// What one NCCL communicator of `ranks` GPUs holds on each once `ncclCommInitRank` returns,
/// under the NCCL of a V0 release before 0.7 ([`v0_nccl`]).
///
/// NCCL 2.20.5 and 2.21.5 have no runtime connection (`NCCL_RUNTIME_CONNECT` arrives in 2.22):
/// `initTransportsRank` (`src/init.cc`) connects the ring and the tree on every channel at init,
/// whatever `NCCL_CUMEM_ENABLE` says (vLLM sets it to 0 in `WorkerWrapperBase.init_worker`,
/// `worker/worker_base.py` at 0.5.5, 0.6.0, 0.6.3.post1, 0.6.4, 0.6.5 and 0.6.6.post1, after
/// nccl#1234). Over NVSwitch that is [`nccl_nvswitch_ring_tree_bytes`]: between v2.20.5-1 and
/// v2.21.5-1 the ring search (`src/graph/search.cc`), `ncclTopoPostset` and `p2p.cc`'s buffer
/// sizes change nothing that sizes them (2.20.5's sm_90 speed list lacks 11.0, below the
/// catalog GPUs' first speeds; diffed at both tags).
///
/// On NVSwitch boards with NVLS (H100, H200, H20) a communicator of more than two GPUs also
/// sets NVLS up at init: `ncclNvlsInit` (both tags) checks `NCCL_NVLS_ENABLE`, more than two
/// GPUs, one node and the device's multicast support, not cuMem. `ncclNvlsSetup` binds one
/// unicast buffer (`cuMemCreate`) of `nChannels x 2 x (buffSize + memSize) x nHeads` on each
/// GPU: `nChannels` is the communicator's (the ring's, at least the 16 NVLS channels after
/// `ncclTopoPostset`), and an intra-node NVLS graph has one head per GPU (`ncclTopoCompute`
/// forces `minChannels = maxChannels` = the GPU count). vLLM's own measurement shows 2.20's
/// sizes on 8 x H200: "nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 301989888
/// nvlsTotalSize 2415919104" (vllm#9699, 2024-10-25: 24 channels, 2.25 GiB a GPU). The buffer
/// is rounded up to the driver's recommended multicast granularity
/// (`cuMulticastGetGranularity`), which the source does not fix: that rounding is not counted.
/// Over PCIe and across nodes the figures are [`communicator`]'s (NCCL 2.27's arithmetic, not
/// re-derived at 2.20/2.21).
fn v0_communicator(gpu: &Gpu, k: &Knobs, link: Interconnect, ranks: u64) -> (u64, String) {
    if !matches!(link, Interconnect::NvSwitch | Interconnect::NvSwitchNvls) {
        return communicator(gpu, link, ranks);
    }
    let (ring_tree, channels) = ring_tree_or_ceiling(gpu, ranks);
    let (nccl, per_head) = v0_nccl(k);
    let nvls = if link == Interconnect::NvSwitchNvls && ranks > 2 {
        u64::from(channels) * 2 * per_head * ranks
    } else {
        0
    };
    let gib = |b: u64| b as f64 / GIB;
    let mut text = format!(
        "{:.2} GiB over NVSwitch: the ring{} on {channels} channels from NCCL's ring search x 12 MiB a send/receive pair, every channel connected at init (NCCL {nccl}, no runtime connection)",
        gib(ring_tree + nvls),
        if ranks >= 3 { " and the tree" } else { "" }
    );
    if nvls > 0 {
        text += &format!(
            ", and {:.2} GiB of NVLS buffers ({channels} channels x 2 x {} MiB x {ranks} heads, ncclNvlsSetup; the driver's multicast-granularity rounding not counted)",
            gib(nvls),
            per_head / MIB
        );
    } else if link == Interconnect::NvSwitchNvls {
        text += ", no NVLS at two GPUs";
    }
    (ring_tree + nvls, text)
}

/// vLLM V0 before 0.7: what its budget counts outside PyTorch's allocations, piece by piece,
/// read in `worker/worker.py` (`init_device`, `determine_num_available_blocks`),
/// `distributed/parallel_state.py`, `device_communicators/custom_all_reduce.py` and
/// `pynccl.py` at 0.5.5, 0.6.0, 0.6.3.post1, 0.6.4, 0.6.5 and 0.6.6.post1 (PyPI sdists).
///
/// Every one of these reads `init_gpu_memory` in `init_device` after `set_device` and
/// `mem_get_info` (so once the context exists) and before `init_worker_distributed_environment`
/// and any kernel; what each release counts from there is `engine::vllm_context_in_budget`'s
/// rule (0.6.4 counts the context too). After the reading come:
/// - **kernel images** loaded lazily by the load and the eager profile run (V0 captures its
///   graphs after the KV cache): the figure V0 from 0.7 uses ([`EAGER_IMAGES_BYTES`]), measured
///   after a baseline taken before any kernel (0.05 GiB on a T4, printed by vLLM 0.8.2); not measured
///   under torch 2.4 or 2.5;
/// - at 0.6.4 **the CUDA context**: the bare context under torch 2.5.1's CUDA 12.4 (its wheel
///   requires `nvidia-cuda-runtime-cu12==12.4.127`; [`Gpu::bare_context_bytes`]);
/// - at TP > 1 **two NCCL communicators of the TP group** ([`v0_communicator`]): PyNccl's,
///   which `GroupCoordinator.__init__` builds (`ncclCommInitRank` and a one-element warm-up
///   all-reduce), and the process group's, which the profile run connects with its first
///   `torch.distributed` collective on the device group: the logits gather
///   (`GroupCoordinator.gather`) and every all-reduce custom all-reduce does not take (PyNccl is
///   disabled outside graph capture, so the eager profile falls back to
///   `torch.distributed.all_reduce`);
/// - at PP > 1 **PyNccl's communicator of the PP group** (the profile runs each stage on empty
///   intermediate tensors and sends nothing, so the PP process group connects later);
/// - **custom all-reduce** where [`vllm_custom_all_reduce`] builds it: the same checks at 0.5.5,
///   0.6.3.post1, 0.6.4 and 0.6.6.post1 (TP 2/4/6/8, one node, NVLink beyond two GPUs, P2P), and
///   `ParallelConfig` turns it off on ROCm (`is_hip()` at 0.5.5 and 0.6.3.post1,
///   `current_platform.is_rocm()` at 0.6.6.post1). Before 0.6.4 its two buffers and `rank_data`
///   are `torch` tensors (8 MiB + 2.4 KiB, 8 MiB, 8 MiB: 26 MiB in 2 MiB-rounded segments);
///   from 0.6.4 the two buffers are `cudaMalloc`ed (`create_shared_buffer`). Either way 26 MiB
///   inside the budget, as [`VLLM_CUSTOM_ALL_REDUCE_BYTES`].
///
/// Not counted, for want of a source that sizes them: NCCL's own kernel images and device
/// state, the caching allocator's reserved-but-free bytes (0.5.5 to 0.6.3.post1 count them) and
/// anything another process holds (0.6.4 counts it).
fn vllm_v0_before_07(k: &Knobs, gpu: &Gpu) -> (u64, String) {
    let v = Engine::Vllm.version_in_force(k);
    let context_inside = engine::vllm_context_in_budget(k, false);
    let counted = if context_inside {
        "V0 0.6.4: the device's whole use less PyTorch's allocated bytes, so the CUDA context inside"
    } else if v < [0, 6, 5] {
        "V0 0.5-0.6.3: the fall in free memory since the context existed, the profile's cache still reserved"
    } else {
        "V0 0.6.5-0.6.6: the baseline taken once the context existed, before the communicators"
    };
    let gib = |b: u64| b as f64 / GIB;
    let images = EAGER_IMAGES_BYTES;
    let mut parts = vec![
        "kernel images of the eager load and profile 0.05 GiB (printed by vLLM 0.8.2 on a T4 after a baseline taken before any kernel, as here; not measured under torch 2.4/2.5)".to_string(),
    ];
    let context = match (context_inside, gpu.is_rocm()) {
        (false, _) => 0,
        (true, true) => gpu.context_bytes(),
        (true, false) => gpu.bare_context_bytes([12, 4]),
    };
    if context > 0 {
        parts.push(format!(
            "the CUDA context {:.2} GiB ({})",
            gib(context),
            if gpu.is_rocm() {
                gpu.context_source()
            } else {
                gpu.bare_context_source([12, 4])
            }
        ));
    }
    let (nccl, _) = v0_nccl(k);
    let mut comms = 0;
    if k.tp > 1 {
        let (b, text) = v0_communicator(gpu, k, interconnect(gpu, k), k.tp);
        comms += 2 * b;
        parts.push(format!(
            "2 NCCL {nccl} communicators of the TP group, PyNccl's (built at init) and the process group's (connected by the profile's logits gather), {text} each"
        ));
    }
    if k.pp > 1 {
        let (b, text) = v0_communicator(gpu, k, pp_interconnect(gpu, k), k.pp);
        comms += b;
        parts.push(format!(
            "PyNccl's NCCL {nccl} communicator of the PP group, {text}"
        ));
    }
    let custom_ar = if vllm_custom_all_reduce(gpu, k) {
        parts.push("custom all-reduce 0.03 GiB (two 8 MiB buffers and an 8 MiB rank_data, custom_all_reduce.py at 0.5.5-0.6.6.post1)".into());
        VLLM_CUSTOM_ALL_REDUCE_BYTES
    } else {
        if k.tp > 1 {
            parts.push("no custom all-reduce (vLLM disables it here: PCIe or no P2P, more than two GPUs without NVLink, across nodes, a TP size other than 2/4/6/8, or ROCm)".into());
        }
        0
    };
    let total = images + context + comms + custom_ar;
    (
        total,
        format!(
            "non-torch memory ({counted}): {:.2} GiB: {}",
            gib(total),
            parts.join("; ")
        ),
    )
}

/// vLLM's memory outside PyTorch that the profile sees grow, and the sentence that says where
/// the figure comes from.
pub(super) fn vllm_non_torch(k: &Knobs, v1: bool, gpu: &Gpu) -> (u64, String) {
    let v = Engine::Vllm.version_in_force(k);
    if !v1 && v < [0, 7, 0] {
        return vllm_v0_before_07(k, gpu);
    }
    // `profile_cudagraph_memory` returns before capturing when the mode keys no graphs ("No
    // CUDA graphs will be captured, skipping profiling", 0.20.0-0.22.0); whether graphs are captured
    // does not depend on the model's layers (`engine::vllm_cudagraph_mode`).
    let graphs_profiled = v1
        && v >= [0, 18, 0]
        && !engine::is_rocm(gpu)
        && engine::vllm_cudagraph_mode(k, false) != super::CudagraphMode::None;
    let (images, images_src) = if !v1 || (!engine::vllm_inductor(k) && !graphs_profiled) {
        (
            EAGER_IMAGES_BYTES,
            "kernel images of an eager load and profile 0.05 GiB (printed by vLLM 0.8.2 on a T4)",
        )
    } else if graphs_profiled {
        // The figure is of starts whose compile added nothing inside the profile: on H100 under
        // 0.19.0 a cold compile (llm-d-planner's Llama-3.1-8B log, "Compiling a graph for
        // compile range") printed the same 0.25 GiB as a cache hit (its Qwen2.5-7B, 0.24). Later
        // starts that compiled cold logged smaller pools than the same flags with the cache warm:
        // vLLM 0.23.0 on an RTX 4090 by 0.78 GiB (StellaLee/vllm-experiment, server_dynchunk0
        // against server_dynchunk1), 0.29.0 on an RTX 5090 by 1.74 and 1.71 GiB (0.98 GiB of it
        // non-torch, the rest the torch peak, by vLLM's own breakdown; wrbooth/vllm-serve-bench).
        // What the compile allocates was not traced to torch's source, so no term is added; the
        // sentence says so.
        (
            256 * MIB,
            "kernel images and the CUDA-graph profiling's driver state 0.25 GiB (measured on H100, vLLM 0.19), for a start whose torch.compile cache is warm or whose compile adds nothing; not counted: a first start that compiles inside the profile (its log prints 'Compiling a graph for compile range'), logged with a KV pool 0.78 GiB smaller than a warm start of the same flags (vLLM 0.23.0, RTX 4090) and 1.7 GiB smaller (0.29.0, RTX 5090)",
        )
    } else {
        (
            24 * MIB,
            "kernel images of a compiled forward 0.02 GiB (measured, vLLM 0.10)",
        )
    };
    if k.tp == 1 && k.pp > 1 && v1 {
        return (
            70 * MIB,
            "non-torch memory: 0.07 GiB with pipeline stages and no TP (measured, vLLM 0.19 on H100)"
                .into(),
        );
    }
    // Communicators connected after the baseline: V1 at TP > 1 the process group's (and
    // PyNccl's bulk protocols, inside the same figure); V0 from 0.7 also PyNccl's own and the
    // custom all-reduce buffers (8 MiB + metadata) of the group it set up after the baseline.
    // The group at `ranks` is the TP group where there is one, else the PP group; the PP
    // group's own communicator (V1 before 0.9) is charged at its own link.
    let (ranks, link) = if k.tp > 1 {
        (k.tp, interconnect(gpu, k))
    } else {
        (k.pp, pp_interconnect(gpu, k))
    };
    let cumem = (v1 && v >= VLLM_CUMEM_ON_SINCE)
        .then(|| communicator_cumem(gpu, link))
        .flatten();
    let (comm, comm_src) = cumem.unwrap_or_else(|| communicator(gpu, link, ranks));
    // V1 before 0.9 takes no baseline, so the CUDA context is inside the budget, and so is
    // every PyNccl communicator `init_device` built before the profile.
    let context = if engine::vllm_context_in_budget(k, v1) {
        gpu.context_bytes()
    } else {
        0
    };
    let n_comms = match (v1, k.tp * k.pp > 1) {
        (_, false) => 0,
        (true, true) if context > 0 => 2 * u64::from(k.tp > 1) + u64::from(k.pp > 1),
        (true, true) => u64::from(k.tp > 1),
        (false, true) => 2,
    };
    // V1 before 0.9 with TP and PP: one of the communicators is the PP group's, at its link.
    let pp_apart = v1 && context > 0 && k.tp > 1 && k.pp > 1;
    let (pp_comm, pp_src) = if pp_apart {
        let link = pp_interconnect(gpu, k);
        let (b, text) = communicator(gpu, link, k.pp);
        (Some((b, text)), link != interconnect(gpu, k))
    } else {
        (None, false)
    };
    // The custom all-reduce buffers count where the budget's reference point precedes them:
    // V0 (baseline before the distributed environment) and V1 before 0.9 (no baseline); the
    // `rank_data` tensor among them lands in the profile's PyTorch peak rather than outside
    // PyTorch, but inside the same budget.
    let custom_ar = if (!v1 || context > 0) && vllm_custom_all_reduce(gpu, k) {
        VLLM_CUSTOM_ALL_REDUCE_BYTES
    } else {
        0
    };
    let comms = match &pp_comm {
        Some((pp_b, _)) => (n_comms - 1) * comm + pp_b,
        None => n_comms * comm,
    };
    let total = images + comms + custom_ar + context;
    let baseline = if context > 0 {
        "V1 before 0.9, no baseline: the CUDA context counted"
    } else if v1 {
        "V1 baseline after the communicators exist"
    } else {
        "V0 baseline before the communicators exist"
    };
    (
        total,
        format!(
            "non-torch memory ({baseline}): {images_src}{}{}",
            match (&pp_comm, pp_src) {
                (Some((_, pp_text)), true) => format!(
                    "; {} NCCL communicator(s) of the TP group, {comm_src}; the PP group's, which spans nodes (TP x PP wider than an eight-GPU NVSwitch board), {pp_text}",
                    n_comms - 1
                ),
                _ if n_comms > 0 => format!(
                    "; {n_comms} NCCL communicator(s) connected by the profile run, {comm_src}"
                ),
                _ => String::new(),
            },
            if custom_ar > 0 {
                "; custom all-reduce 0.03 GiB (10 + 8 MiB of IPC buffers by cudaMalloc and an 8 MiB rank_data tensor, custom_all_reduce.py at 0.7.0-0.10.1)"
            } else if (!v1 || context > 0) && k.tp > 1 {
                "; no custom all-reduce (vLLM disables it here: PCIe or no P2P, more than two GPUs without NVLink, across nodes, a TP size other than 2/4/6/8, or ROCm outside its MI300 rule)"
            } else {
                ""
            }
        ),
    )
}

/// What vLLM V1 from 0.9 holds outside PyTorch at its baseline beyond one GPU's CUDA context: the
/// device communicators of the process groups `init_worker_distributed_environment` creates
/// before `init_snapshot` is taken (`v1/worker/gpu_worker.py` `init_device`, read at 0.19.0:
/// "Initialize the distributed environment BEFORE taking memory snapshot"). They sit beside the
/// budget, so the CUDA graphs and the sampler's warm-up after the KV cache have that much less
/// room; `requested_memory` and the KV cache do not see them. `None` where there are none, or
/// where the version has no such baseline (V1 before 0.9 counts everything inside the budget; V0
/// takes its baseline before the distributed environment, so its communicators are in
/// [`vllm_non_torch`]).
///
/// Which groups (`distributed/parallel_state.py` `initialize_model_parallel`, read at 0.9.2,
/// 0.11.0, 0.14.0 and 0.19.0): each `GroupCoordinator` of more than one rank builds a
/// `CudaCommunicator` with its own PyNccl communicator; the TP group's also holds the custom
/// all-reduce and symmetric-memory buffers (`cuda_communicator.py`: "custom allreduce or torch
/// symm mem can be used only by tp"). Groups: TP, PP, DP, and the expert-parallel group of
/// `dp x pcp x tp` ranks — for every model up to 0.13, for MoE models only from 0.14 ("Don't
/// create EP group for dense models", absent at 0.12.0 and 0.13.0). DCP and PCP groups of one
/// rank have no communicator.
///
/// How much each holds is measured, not derived: on an NVSwitch H100 with vLLM 0.19 the
/// engine's own "worker init memory snapshot" reads 0.51 GiB at TP 1, 1.51 GiB at TP 2, 1.53 GiB
/// at TP 4, 1.43 GiB at PP 2 and 1.99 GiB for MoE models at TP 2 (their EP group beside the TP
/// group; the fit half of `unseen.json`): the first group 1.02 GiB, each further one 0.48 GiB.
/// NCCL 2.27's own buffers do not explain it: with `NCCL_RUNTIME_CONNECT` (default, cuMem
/// support) `ncclCommInitRank` sets up channels and NVLS credits only, and the NVLS buffers
/// (`ncclNvlsBufferSetup`: 16 channels x 2 x 8 steps x 128 KiB per rank on sm_90, 64 MiB at
/// TP 2) wait for the first NVLS collective. Why the first group costs twice a further one is
/// in NCCL's init, not its sizes: every `ncclCommInitRank` calls `ncclInitKernelsForDevice`
/// (`src/init.cc` at v2.27.7-1), a `cudaFuncGetAttributes` over every NCCL kernel, which loads
/// their modules under lazy loading once per process; the first collective launch may also grow
/// the context's local memory, should an NCCL kernel need more stack than the context holds.
/// Neither is sized here (the driver's). Over PCIe, SGLang's own "Init torch distributed
/// ends. mem usage=0.13 GB" (4 x L4, TP 4, NCCL 2.21.5, custom all-reduce off) is the one
/// reading of a group's communicator at init, the first in its process; it is used for the
/// first group on boards without NVLS (A100's NVSwitch included: no reading there). Further
/// groups there have no reading and are not counted: 0.13 GiB each would refuse a start that
/// was logged (`unseen-round5.json`'s fit-half DP 2 on two T4s at 0.11: DP and expert-parallel
/// groups, 0.02 GiB short for the sampler's warm-up), so either they hold less than the first
/// (as on NVLS, where the first also carries the process's one-time NCCL state) or the warm-up
/// estimate is high there.
pub(super) fn vllm_init_communicators(
    t: &Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
) -> Option<(u64, String)> {
    let v = Engine::Vllm.version_in_force(k);
    if !v1 || engine::vllm_context_in_budget(k, v1) {
        return None;
    }
    let moe = weights::moe_shape(t).is_some();
    let ep = k.dp.max(1) * k.tp > 1 && (moe || v < [0, 14, 0]);
    let groups = u64::from(k.tp > 1) + u64::from(k.pp > 1) + u64::from(k.dp > 1) + u64::from(ep);
    if groups == 0 {
        return None;
    }
    let nvls = interconnect(gpu, k) == Interconnect::NvSwitchNvls;
    let (first, further, src) = match interconnect(gpu, k) {
        Interconnect::NvSwitchNvls => (
            1044 * MIB,
            492 * MIB,
            "the first 1.02 GiB, each further one 0.48 GiB (vLLM 0.19's init snapshot on NVSwitch H100s)",
        ),
        _ => (
            133 * MIB,
            0,
            "the first 0.13 GiB (SGLang's reading of a TP group's init on 4 x L4), further ones not counted (no reading without NVLS)",
        ),
    };
    // The L4 reading had custom all-reduce off (PCIe); where vLLM builds it, its buffers come
    // on top. The NVLS figure was measured with it on.
    let custom_ar = if nvls {
        0
    } else if vllm_custom_all_reduce(gpu, k) {
        VLLM_CUSTOM_ALL_REDUCE_BYTES
    } else {
        0
    };
    // A PP group that spans nodes beside other groups is not one of the measured NVLS groups:
    // it is charged at the network's communicator figure in place of a further NVLS one. (Alone,
    // it is the process's first communicator, whose one-time NCCL state the first reading holds.)
    let pp_net =
        (nvls && groups > 1 && k.pp > 1 && pp_interconnect(gpu, k) == Interconnect::Network)
            .then(|| communicator(gpu, Interconnect::Network, k.pp));
    let bytes = match &pp_net {
        Some((net, _)) => first + (groups - 2) * further + net + custom_ar,
        None => first + (groups - 1) * further + custom_ar,
    };
    let names = [
        (k.tp > 1, "TP"),
        (k.pp > 1, "PP"),
        (k.dp > 1, "DP"),
        (ep, "expert-parallel"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect::<Vec<_>>()
    .join(", ");
    Some((
        bytes,
        format!(
            "beside the budget, the communicators at the baseline (V1 from 0.9 snapshots after the distributed environment): {groups} group(s) ({names}), {src}{}{}: {:.2} GiB",
            match &pp_net {
                Some((_, text)) => format!("; the PP group spans nodes (TP x PP wider than an eight-GPU NVSwitch board) and counts in place of a further one at {text}"),
                None => String::new(),
            },
            if custom_ar > 0 {
                ", and the TP group's custom all-reduce buffers, 0.03 GiB"
            } else {
                ""
            },
            bytes as f64 / (1u64 << 30) as f64
        ),
    ))
}

/// Bytes a multicast-capable allocation of FlashInfer's `SymmDeviceMemory` is rounded up to on
/// an NVSwitch board: `_get_allocation_prop` (`flashinfer/comm/mnnvl.py`, the same in
/// flashinfer-python 0.6.4, 0.6.6 and 0.6.8.post1) rounds the buffer plus its 2,048-byte signal
/// pad up to the allocation granularity, then to `cuMulticastGetGranularity(...,
/// CU_MULTICAST_GRANULARITY_RECOMMENDED)`, which the source leaves to the driver. 512 MiB is
/// the driver's figure as two public readings show it: the peers' pointers of three
/// workspace buffers of 24, 2 and 68 MiB sit 0x20000000 bytes apart in a TP-2 log of the same
/// allocator (sgl-project/sglang#18341, 2026-02-07: `SymmDeviceMemory` maps peer `i` at
/// `base + i x allocation_size`), and vLLM 0.19's logs on NVSwitch H100s show the same memory
/// outside PyTorch at TP 2 and TP 4 (`unseen.json`'s fit half), where the unrounded
/// workspaces differ ~100-fold (514 vs 6 MiB for a hidden size of 8,192).
const FI_MULTICAST_GRANULARITY: u64 = 512 * MIB;

/// FlashInfer's all-reduce + RMSNorm fusion workspace that vLLM allocates outside PyTorch inside
/// its memory profile, and the sentence that says so; `None` where the release or the start
/// does not build it.
///
/// **When it is on.** `OPTIMIZATION_LEVEL_02` and `_03` set `pass_config.fuse_allreduce_rms`
/// to `enable_allreduce_rms_fusion` from vLLM 0.17 (`config/vllm.py`, read at 0.17.0, 0.17.1,
/// 0.18.1, 0.19.1, 0.20.2, 0.21.0, 0.22.1; `False` at every level through 0.16): TP > 1 on
/// CUDA with FlashInfer installed (`flashinfer-python` is in `requirements/cuda.txt` of every
/// one of these releases, so the wheel brings it) on compute capability 9.0 or the 10.x
/// family, and at 0.17-0.20 only with DP 1 and PP 1 (vllm#34458, #35426; 0.21 and 0.22 drop
/// that gate). The pass (`AllReduceFusionPass`) is an Inductor pass of vLLM's own backend, so
/// only under `VLLM_COMPILE` ([`engine::vllm_compiles`]; `--enforce-eager` is `NONE`), and it
/// gives up for a TP size without a size table entry (`flashinfer_max_size`: 2, 4, 8 only).
/// Its workspace is built only where the device supports multicast (`SymmDeviceMemory` raises
/// otherwise and vLLM disables the pass, vllm#35085: "expected on GPUs without NVSwitch"), so
/// here on the NVSwitch boards with NVLS; a TP group across nodes takes FlashInfer's MNNVL
/// backend from 0.19 (`_resolve_fi_ar_backend`), not modelled.
///
/// **When and whose.** `VllmBackend.__call__` (`compilation/backends.py`) runs
/// `configure_post_pass` when Dynamo first traces the model, which is the profile run's first
/// forward inside `memory_profiling` (`determine_available_memory`, `v1/worker/gpu_worker.py`);
/// the pass's constructor calls `get_fi_ar_workspace`, which builds FlashInfer's
/// `TRTLLMAllReduceFusionWorkspace` (`create_allreduce_fusion_workspace`, backend `trtllm`, the
/// env default at 0.17-0.18 and what `auto` resolves to on one node from 0.19). Its three
/// buffers are the driver's (`cuMemCreate`), not the caching allocator's, so the profile's
/// `non_torch_increase` takes them and the KV pool loses them.
///
/// **How much** (`trtllm_create_ipc_workspace_for_all_reduce_fusion`, `flashinfer/comm/trtllm_ar.py`):
/// with `max_token_num = min(max_size / (hidden x dtype bytes), max_num_batched_tokens)` and the
/// size table of the release (`FI_ALLREDUCE_FUSION_MAX_SIZE_MB`, the same from 0.16.0 to
/// 0.23.0: sm_90 64 / 2 / 0.5 MiB at TP 2 / 4 / 8, sm_100 64 / 32 / 1), the buffers are
/// `tp x tokens x hidden x 2` bytes, `tp x 256 x 4` bytes of flags and three Lamport buffers of
/// `tp x tokens x hidden` elements (fp16, or fp32 for a float32 model). flashinfer-python 0.6.4
/// (pinned by vLLM 0.17.1), 0.6.6 (0.18.1, 0.19.1) and 0.6.8.post1 (0.20.2, 0.21.0) give each
/// its own `SymmDeviceMemory`, rounded to [`FI_MULTICAST_GRANULARITY`]: 1.5 GiB whatever the
/// model at the default sizes. 0.6.11.post2 (vLLM 0.22.1) allocates them through PyTorch's
/// symmetric memory (`torch_symmetric_memory.py`: `symm_mem.empty`, whose
/// `CUDASymmetricMemoryAllocator::alloc` rounds the buffer plus a 2,048-byte signal pad to the
/// allocation granularity only, 2 MiB, also by `cuMemCreate`). 0.17.0, 0.18.0, 0.20.0 and
/// 0.22.0 were not read: each takes its series' read release.
pub(super) fn vllm_fi_allreduce_workspace(
    t: &Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
    mnbt: u64,
) -> Option<(u64, String)> {
    let v = Engine::Vllm.version_in_force(k);
    if !v1 || v < [0, 17, 0] || k.tp < 2 || gpu.is_rocm() {
        return None;
    }
    if k.optimization_level.unwrap_or(2) < 2 || !engine::vllm_compiles(k) {
        return None;
    }
    if v < [0, 21, 0] && (k.dp > 1 || k.pp > 1) {
        return None;
    }
    if interconnect(gpu, k) != Interconnect::NvSwitchNvls {
        return None;
    }
    // `FI_ALLREDUCE_FUSION_MAX_SIZE_MB`, in KiB.
    let max_kib = match (gpu.sm_major, k.tp) {
        (9, 2) | (10, 2) => 64 * 1024,
        (9, 4) => 2 * 1024,
        (9, 8) => 512,
        (10, 4) => 32 * 1024,
        (10, 8) => 1024,
        _ => return None,
    };
    let hidden = t.hidden();
    let elem = k.dtype_bytes;
    let tokens = (max_kib * 1024 / (hidden * elem)).min(mnbt);
    let lamport_elem = if elem == 4 { 4 } else { 2 };
    let sizes = [
        k.tp * tokens * hidden * 2,
        k.tp * 256 * 4,
        3 * k.tp * tokens * hidden * lamport_elem,
    ];
    let round = |x: u64, to: u64| x.div_ceil(to) * to;
    let symm_dev_mem = v < [0, 22, 0];
    let bytes: u64 = sizes
        .iter()
        .map(|&s| {
            if symm_dev_mem {
                round(
                    round(round(s, 2 * MIB) + 2048, 2 * MIB),
                    FI_MULTICAST_GRANULARITY,
                )
            } else {
                round(round(s, 16) + 2048, 2 * MIB)
            }
        })
        .sum();
    let how = if symm_dev_mem {
        "each rounded to the 512 MiB multicast granularity (flashinfer 0.6.4-0.6.8 SymmDeviceMemory)"
    } else {
        "each rounded to 2 MiB (flashinfer 0.6.11 through PyTorch's symmetric memory)"
    };
    Some((
        bytes,
        format!(
            "FlashInfer's all-reduce + RMSNorm fusion workspace {:.2} GiB (on at -O2, the default, and -O3 from vLLM 0.17 at TP > 1 on Hopper/Blackwell, built at TP 2, 4 or 8 where the board has multicast (NVSwitch); made by cuMemCreate when the profile run first compiles the model, config/vllm.py enable_allreduce_rms_fusion, allreduce_rms_fusion.py): three buffers for {tokens} tokens of hidden size {hidden} at TP {} ({:.0}, {:.3} and {:.0} MiB), {how}",
            bytes as f64 / GIB,
            k.tp,
            sizes[0] as f64 / MIB as f64,
            sizes[1] as f64 / MIB as f64,
            sizes[2] as f64 / MIB as f64,
        ),
    ))
}
