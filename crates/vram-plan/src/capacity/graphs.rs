//! vLLM's CUDA graphs: which batch sizes each version captures, and the memory the captured
//! graphs keep, as `capture_model` measures it ("Graph capturing finished in N secs, took X GiB":
//! free device memory before less after).
//!
//! Read at the tags named:
//! - **Capture sizes.** V0 (`VllmConfig._set_cudagraph_sizes`, 0.8.5's `not VLLM_USE_V1`
//!   branch): 1, 2, 4 and multiples of 8 up to the smallest of them at least `max_num_seqs`.
//!   V1 0.8.x–0.9.x (`config.py` at 0.8.5 and 0.9.2; 0.9's `SchedulerConfig.cuda_graph_sizes`
//!   defaults to `[512]`): 1, 2, 4, 8, …, 512 whatever `max_num_seqs` is, capped at
//!   `max_num_batched_tokens`. V1 from 0.10 (`config/scheduler.py` at 0.10.1 and 0.11.0):
//!   up to `min(2 × max_num_seqs, 512)`, capped at `max_num_batched_tokens`; from 0.14
//!   (`config/vllm.py` at 0.14.1, 0.18.1 and 0.19.0) in steps of 8 below 256 and of 16 above
//!   (51 sizes to 512; 0.12–0.13 not read, 0.11's steps of 8 assumed). A model's own hook may
//!   raise the largest size (gpt-oss: 1024, [`model_capture_max`]).
//! - **Graph modes.** Piecewise graphs (one per piece between attention calls, every size)
//!   before 0.11; from 0.11 `FULL_AND_PIECEWISE` (`config/compilation.py`, "v1 default"): the
//!   same sizes again as whole-forward decode graphs, up to `max_num_seqs`. A user's
//!   `cudagraph_mode` ([`vllm_graph_mode`], read at 0.11.0–0.13.0 and 0.15.0–0.22.0; the
//!   dispatcher's keys the same at 0.11.0, 0.13.0, 0.17.0 and 0.19.0): `PIECEWISE` the piecewise
//!   graphs alone, `FULL_DECODE_ONLY` the decode graphs alone, `FULL` whole-forward graphs at
//!   every size, `NONE` none (`CUDAGraphMode.mixed_mode`/`decode_mode`; the dispatcher captures
//!   one set per mode it keys, `cudagraph_dispatcher.py`).
//! - **What the graphs keep.** All graphs share one private memory pool, captured from the
//!   largest size down so the smaller ones reuse it (`capture_model`). The pool holds the
//!   largest capture's live set, and its warm-up run (`cudagraph_num_of_warmups` = 1) the same
//!   again in the caching allocator; under FULL graphs on Hopper, FlashAttention 3's split-KV
//!   accumulators, `[num_splits, heads, tokens, head_size]` in fp32 with
//!   `VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH` = 32 (`v1/attention/backends/flash_attn.py`,
//!   0.11.0), in a segment of their own on top of the piecewise graphs' live set where those
//!   are captured first (`FULL_AND_PIECEWISE`), else the larger of the two (MLA layers on
//!   `FLASH_ATTN_MLA` keep the same splits over the latent, [`vllm_flash_attn_mla`]); only where
//!   FlashAttention runs
//!   ([`vllm_runs_flash_attention`]: the backend chosen with `--attention-backend`, else not for
//!   a model vLLM runs on Triton attention, [`vllm_runs_triton_attention`]: Gemma 3 from 0.13,
//!   Gemma 4 from 0.20). Every
//!   instantiated graph also holds driver memory for its kernels:
//!   [`DRIVER_BYTES_PER_LAYER_GRAPH`] per decoder layer, per size, per mode.
//! - **The capture stream's cuBLAS workspace.** `graph_capture` runs the captures on a stream of
//!   its own, and PyTorch gives each stream its own cuBLAS workspace, so "took" holds one more
//!   ([`capture_stream_cublas`]).
//! - **NCCL inside the graphs.** Where vLLM's custom all-reduce is off (PCIe, no P2P, across
//!   nodes; [`nccl_in_graphs`]), PyNccl's all-reduces are captured into every graph, each keeping
//!   [`NCCL_CAPTURED_BYTES`], or [`NCCL_CAPTURED_PROXY_BYTES`] over the network.
//! - **The driver's share, by driver branch.** The graphs' memory outside PyTorch's pool is the
//!   CUDA driver's (nodes of the instantiated graphs: torch's `CUDAGraph::capture_end`
//!   instantiates each graph, and vLLM's piecewise mode makes one per piece per size) and, under
//!   NCCL before 2.22 (vLLM 0.8 loads 2.21.5 with torch 2.6), one small device buffer per
//!   captured collective (`uploadWork`: `ncclCudaMalloc(&plan->workHead, nWork)` for persistent
//!   plans, a plain `cudaMalloc` since vLLM's `env_override.py` sets `NCCL_CUMEM_ENABLE=0`; from
//!   2.22 `finishPlan` puts a small collective's work in the kernel's arguments instead). What
//!   those cost on the device is set by the driver and is in no open source: vllm#5517 measured
//!   the same NCCL-in-graph start on A10G and L4 at 3.81 GiB of graphs under the CUDA 12.2 and
//!   12.3 drivers (R535, R545) and 1.14 GiB under 12.4 (R550). Where a paste, a log or
//!   `--driver` names the driver ([`Knobs::driver`]) and it is older than R550, each layer's
//!   graph share is [`DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550`] (fitted on R535 logs that
//!   print both) and the captured all-reduces' shares scale alike; otherwise the figures
//!   measured on the fit hosts, whose driver their logs do not print, priced as R550 or later
//!   and said so in the assumptions ([`driver_line`]). At the R535 figure vllm#17462 (R535, V1 0.8.4, TP 2
//!   over PCIe) is refused, but at the sampler warm-up after the graphs where the engine failed
//!   inside `capture_end`; vllm#17469's host prints no driver (BENCHMARKS.md, "The driver's
//!   share of the graphs, by driver branch").
//! - **Inside or outside the KV budget.** Up to 0.19 the graphs are captured after the KV cache
//!   is sized (`compile_or_warm_up_model` after `initialize_from_config`, `gpu_worker.py` at
//!   0.8.5, 0.10.1, 0.11.0): they must fit in what `gpu_memory_utilization` leaves. 0.19 profiles
//!   them (`profile_cudagraph_memory`) and only logs the estimate; 0.20 subtracts it before
//!   sizing the KV cache (`engine::vllm_graphs_in_budget`).

use super::*;

/// Driver memory of one captured graph per decoder layer (192 KiB): the median over the fit
/// half of `unseen.json`'s vLLM 0.19.0 H100 logs (22 runs) of the per-graph figure vLLM's own
/// profiler logs at DEBUG ("Estimated PIECEWISE/FULL CUDA graph memory: F MiB first-capture +
/// (n-1) × G MiB per-graph", `gpu_model_runner.py::profile_cudagraph_memory`), divided by the
/// decoder layers on the GPU; 0.19 MiB piecewise and 0.19 MiB full. Measured, not derived: the
/// instantiated graph's kernel nodes live in driver memory that no source here sizes.
pub(super) const DRIVER_BYTES_PER_LAYER_GRAPH: u64 = 192 * 1024;

/// Driver memory of one captured graph per decoder layer on NVIDIA drivers before R550 (715
/// KiB, 3.7 × [`DRIVER_BYTES_PER_LAYER_GRAPH`]): the mean over the fit half of the logs that
/// print both the graphs' memory and an R535 driver (MareNostrum 5's H100 64GB, driver
/// 535.86.10, vLLM 0.15.1, `FULL_AND_PIECEWISE` over 51 + 35 sizes: Qwen2.5-1.5B "took 1.76
/// GiB" and Qwen2.5-14B "took 3.06 GiB", 720 and 710 KiB per layer per graph once vram's pool
/// is taken off). Where the branch ends: vllm#5517 measured one NCCL-in-graph start at 3.81 GiB
/// under the CUDA 12.2 and 12.3 drivers (R535, R545) and 1.14 GiB under 12.4 (R550), the
/// toolkit unchanged. What the driver keeps per node of an instantiated graph is in no open
/// source: measured, not derived (BENCHMARKS.md, "The driver's share of the graphs, by driver
/// branch").
pub(super) const DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550: u64 = 715 * 1024;

/// The first driver branch measured at [`DRIVER_BYTES_PER_LAYER_GRAPH`]'s size (vllm#5517).
const FIRST_LEANER_DRIVER: u32 = 550;

/// Whether the knobs name a host whose driver is older than R550.
pub(super) fn driver_before_r550(k: &Knobs) -> bool {
    k.driver.is_some_and(|d| d < FIRST_LEANER_DRIVER)
}

/// Driver memory per decoder layer per graph on the host the knobs describe: the R535 figure
/// where they name a driver before R550, else the one measured on the fit hosts.
pub(super) fn driver_bytes_per_layer_graph(k: &Knobs) -> u64 {
    if driver_before_r550(k) {
        DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550
    } else {
        DRIVER_BYTES_PER_LAYER_GRAPH
    }
}

/// What one captured all-reduce keeps on the host the knobs describe. Both NCCL figures are
/// the driver's share of the nodes a captured collective adds (their own text), so a driver
/// before R550 scales them by the same ratio as the layers' nodes; vllm#5517's R535/R550
/// ratio (3.35 ×) is of a start whose graphs hold NCCL's all-reduces.
fn nccl_captured_bytes(per: u64, k: &Knobs) -> u64 {
    if driver_before_r550(k) {
        per * DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550 / DRIVER_BYTES_PER_LAYER_GRAPH
    } else {
        per
    }
}

/// The assumption line for a host whose driver is older than R550; `None` otherwise.
pub(super) fn driver_assumption(k: &Knobs) -> Option<String> {
    driver_before_r550(k).then(|| {
        format!(
            "CUDA graphs on driver R{} (before R550): {} KiB of driver memory per layer per size per mode instead of {} KiB, and each captured all-reduce's share scaled alike (measured on R535 H100 logs of vLLM 0.15.1; vllm#5517: the same start's graphs 3.35 x larger under R535/R545 than R550)",
            k.driver.unwrap_or_default(),
            DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550 / 1024,
            DRIVER_BYTES_PER_LAYER_GRAPH / 1024,
        )
    })
}

/// The assumption line for the host's driver in a vLLM start whose graphs are `captured`
/// (`false`: `--enforce-eager` or a mode without graphs). Without a driver (`vram capacity`
/// without `--driver`, a paste that prints none) the figures are those of a driver of R550 or
/// later, and the line says so and names `--driver`; a driver before R550 gets
/// [`driver_assumption`]'s line; R550 or later, the figures as they are. Where no graph is
/// captured a given driver moves nothing, and the line says that instead.
pub(super) fn driver_line(k: &Knobs, captured: bool) -> Option<String> {
    match (k.driver, captured) {
        (None, false) => None,
        (Some(d), false) => Some(format!(
            "driver R{d}: no CUDA graph is captured, so the driver moves no figure"
        )),
        (None, true) => Some(format!(
            "NVIDIA driver R{FIRST_LEANER_DRIVER} or later assumed for the CUDA graphs' driver memory, {} KiB per layer per size per mode (give --driver 535.161.08, or the branch 535, for an older one: before R{FIRST_LEANER_DRIVER} vram prices it at {} KiB, as vllm#5517 measured the same start's graphs 3.35 x larger under R535/R545 than R550)",
            DRIVER_BYTES_PER_LAYER_GRAPH / 1024,
            DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550 / 1024,
        )),
        (Some(d), true) if d < FIRST_LEANER_DRIVER => driver_assumption(k),
        (Some(d), true) => Some(format!(
            "CUDA graphs on driver R{d} (R{FIRST_LEANER_DRIVER} or later): {} KiB of driver memory per layer per size per mode",
            DRIVER_BYTES_PER_LAYER_GRAPH / 1024,
        )),
    }
}

/// Device memory one NCCL all-reduce captured into a graph keeps when its transport needs no
/// proxy (P2P or shared memory inside a node): 68 KiB, measured on the fit half of
/// `unseen-round4.json` (vLLM 0.10.1, NCCL 2.26.2, Qwen2-7B at TP 2 on A100s without P2P: 0.25
/// GiB over 67 sizes × 57 all-reduces). NCCL itself keeps no device memory per captured
/// collective there (2.26.2 `finishPlan`: the work fits the kernel arguments; 2.21.5 `uploadWork`
/// `cudaMalloc`s `nChannels × 512` B of work per plan), so this is the driver's share of the
/// kernel node and the event-record nodes NCCL's strong streams add under capture
/// (`misc/strongstream.cc`). Measured, not derived.
pub(super) const NCCL_CAPTURED_BYTES: u64 = 68 * 1024;

/// What a captured all-reduce keeps when its transport needs the proxy thread (the network
/// between nodes): NCCL adds a host node to the graph for each such collective
/// (`ncclLaunchPrepare`, `cudaLaunchHostFunc(hostStream, hostStreamPlanCallback)` for plans with
/// proxy ops, 2.21.5 and 2.26.2) and the host stream's event nodes: 212 KiB in all, measured on
/// the same half (gpt-oss-120b at TP 4 across four nodes: 1.22 GiB over 83 sizes × 73
/// all-reduces). Measured, not derived; one log.
pub(super) const NCCL_CAPTURED_PROXY_BYTES: u64 = 212 * 1024;

/// Whether the TP group's all-reduces inside the graphs are NCCL's (PyNccl) rather than vLLM's
/// custom all-reduce, and whether NCCL's transport needs its proxy: where
/// [`non_torch::vllm_custom_all_reduce`] does not build it, `CudaCommunicator.all_reduce` falls
/// back to PyNccl, captured into every graph. ROCm is left out (its quick and custom
/// all-reduce over xGMI).
fn nccl_in_graphs(gpu: &Gpu, k: &Knobs) -> Option<bool> {
    if k.tp < 2 || engine::is_rocm(gpu) || non_torch::vllm_custom_all_reduce(gpu, k) {
        return None;
    }
    Some(non_torch::interconnect(gpu, k) == Interconnect::Network)
}

/// The cuBLAS workspace the capture's own stream gets. PyTorch keeps one workspace per cuBLAS
/// handle and stream, allocated through its caching allocator at the first GEMM on a stream it
/// has not seen and held for the process (`getCurrentCUDABlasHandle`,
/// `cublas_handle_stream_to_workspace`, `aten/src/ATen/cuda/CublasHandlePool.cpp`; sized by
/// [`sampler::vllm_cublas_workspace`]). vLLM captures inside `graph_capture`, which runs the
/// warm-ups and the captures on a stream it makes there (`torch.cuda.Stream()`,
/// `GroupCoordinator.graph_capture` in `distributed/parallel_state.py`), after `capture_model`
/// has read free memory (read at 0.10.0, 0.10.1.1, 0.11.0, 0.14.1, 0.17.1, 0.19.1 and 0.23.0), so
/// "took" holds a new workspace. vLLM's own profile agrees: on llm-d-planner's 0.19.0 H100 logs
/// the piecewise pool (first capture less one graph's share) of the 16-bit dense models is 24-34
/// MiB above the live set vram gives, and the online-FP8 runs of the same models, whose linears
/// run on CUTLASS, keep 40 MiB less than the 16-bit ones on both hosts that print it (Llama 3 8B
/// on llm-d-planner's, Qwen3-8B on round 10's). Only where the captured forward runs a dense
/// GEMM through PyTorch: 16- or 32-bit linears, bitsandbytes' dequantize-then-matmul, and MXFP4
/// checkpoints (16-bit attention). FP8, INT8 and the Marlin-family 4-bit paths run their own
/// kernels; an unquantized MoE router beside them is not counted. vLLM V1 from 0.10; V0 and V1
/// before 0.10 not read.
fn capture_stream_cublas(gpu: &Gpu, k: &Knobs, v1: bool) -> u64 {
    let torch_gemm = matches!(
        k.quantization,
        Quantization::None | Quantization::Bitsandbytes | Quantization::Mxfp4
    );
    if !v1 || Engine::Vllm.version_in_force(k) < [0, 10, 0] || !torch_gemm {
        return 0;
    }
    sampler::vllm_cublas_workspace(k, gpu, v1)
}

/// The graphs one vLLM start-up captures.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Graphs {
    /// Capture sizes (tokens per step), ascending.
    pub sizes: Vec<u64>,
    /// Whole-forward graphs' sizes (0.11+), ascending; empty before.
    pub full_sizes: Vec<u64>,
    /// Whether piecewise graphs are captured at [`Graphs::sizes`] (every mode but `FULL`,
    /// `FULL_DECODE_ONLY` and `NONE`).
    pub piecewise: bool,
    /// The shared pool: the largest capture's live set and its warm-up's.
    pub pool: u64,
    /// Driver memory of all the instantiated graphs.
    pub driver: u64,
    /// What the NCCL all-reduces captured into the graphs keep (TP without custom all-reduce).
    pub nccl: u64,
    /// PyTorch's cuBLAS workspace for the capture's own stream ([`capture_stream_cublas`]).
    pub cublas: u64,
}

impl Graphs {
    /// What `capture_model` logs as "took".
    pub fn bytes(&self) -> u64 {
        self.pool + self.driver + self.nccl + self.cublas
    }
}

/// The largest capture size a model's own config hook sets in place of the default (vLLM's
/// `MODELS_CONFIG_MAP`, keyed by architecture): `GptOssForCausalLMConfig` raises it "for
/// performance" to 1024 (0.10.1, a list of 83 sizes; 0.14.1–0.20.0,
/// `max_cudagraph_capture_size`) or 992 (0.11.0, 81 sizes), whatever `max_num_seqs` is; the hook
/// exists from gpt-oss's first release (0.10.1). 0.12–0.13 not read, 1024 assumed.
fn model_capture_max(t: &Transformer, k: &Knobs, v1: bool) -> Option<u64> {
    let v = Engine::Vllm.version_in_force(k);
    // The engine keys this rule by architecture; the reader says which architectures have it.
    (v1 && vram_model::hf::vllm_raises_capture_sizes(&t.model_type) && v >= [0, 10, 0]).then_some(
        if ([0, 11, 0]..[0, 12, 0]).contains(&v) {
            992
        } else {
            1024
        },
    )
}

/// vLLM's capture sizes for this version, engine and model (see the module's text).
pub(super) fn vllm_capture_sizes(
    t: &Transformer,
    k: &Knobs,
    v1: bool,
    max_num_seqs: u64,
    mnbt: u64,
) -> Vec<u64> {
    let v = Engine::Vllm.version_in_force(k);
    let mut all = vec![1, 2, 4];
    if !v1 {
        all.extend((1..=1024).map(|i| i * 8));
        let cap = all
            .iter()
            .copied()
            .find(|&s| s >= max_num_seqs)
            .unwrap_or(8192);
        all.retain(|&s| s <= cap);
        return all;
    }
    let own = model_capture_max(t, k, v1);
    let top = match own {
        Some(m) => m,
        None if v >= [0, 10, 0] => (2 * max_num_seqs).min(512),
        None => 512,
    };
    if own.is_some() || v >= [0, 14, 0] {
        // 0.14.1–0.19.0 (`config/vllm.py`), and gpt-oss's own list from 0.10.1: steps of 8
        // below 256, then of 16.
        all.extend((1..32).map(|i| i * 8));
        all.extend((0..=(top.max(256) - 256) / 16).map(|i| 256 + i * 16));
    } else {
        all.extend((1..=64).map(|i| i * 8));
    }
    all.retain(|&s| s <= top && s <= mnbt);
    // 0.21 also captures the step budget itself when it is the largest size and off the
    // stride (`VllmConfig._set_cudagraph_sizes`, read at 0.21.0 and 0.22.0).
    if v >= [0, 21, 0] && mnbt <= top && all.last() != Some(&mnbt) {
        all.push(mnbt);
    }
    all
}

/// The CUDA graphs vLLM captures for `t` with these knobs, and what they keep.
pub(super) fn vllm_graphs(
    t: &Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
    max_num_seqs: u64,
    mnbt: u64,
    cap: Option<u64>,
) -> Graphs {
    let mut sizes = vllm_capture_sizes(t, k, v1, max_num_seqs, mnbt);
    if let Some(c) = cap {
        sizes.retain(|&s| s <= c);
    }
    let mode = vllm_graph_mode(t, k, v1);
    let piecewise = mode.is_none_or(CudagraphMode::has_piecewise);
    let full_sizes: Vec<u64> = match mode {
        Some(CudagraphMode::Full) => sizes.clone(),
        Some(m) if m.has_full() => sizes
            .iter()
            .copied()
            .filter(|&s| s <= max_num_seqs)
            .collect(),
        _ => Vec::new(),
    };
    let largest = if piecewise {
        sizes.last().copied().unwrap_or(0)
    } else {
        full_sizes.last().copied().unwrap_or(0)
    };
    // The largest capture's live set, once in the pool and once from its warm-up run.
    // No eager caller's frame in a captured graph; the version's MoE cache layout and the
    // running piece's inputs (captured through the same split module) carry over. From 0.14
    // the experts' caches are views into the persistent workspace the profile run already
    // grew past any capture size (`activation::Held`'s `moe_workspace`): nothing in the pool.
    let vllm_held = Held::vllm(t, k, gpu);
    let held = Held {
        moe_cache13: vllm_held.moe_cache13,
        piece_inputs: vllm_held.piece_inputs,
        moe_workspace: vllm_held.moe_workspace,
        workspace_kept: true,
        ..Held::default()
    };
    let live = 2 * forward_peak_held(t, largest, k, v1, held);
    // FULL graphs under FlashAttention 3 (Hopper, 16-bit): 32 splits of fp32 partial outputs
    // (and their log-sum-exp) for every query head on the GPU. Not where the model's image
    // tokens attend both ways (FlashAttention is refused for them) or another backend runs
    // (`vllm_runs_flash_attention`).
    let fa3 = gpu.sm_major == 9
        && k.dtype_bytes == 2
        && !engine::is_rocm(gpu)
        && vllm_runs_flash_attention(t, k);
    let latent = layer_caches(t)
        .iter()
        .any(|c| matches!(c, CacheLayout::Latent { .. }));
    let accum = match full_sizes.last() {
        Some(&s) if fa3 && !latent => {
            let (q, _) = t.blocks.typical().attn_widths();
            let heads = t.blocks.typical().heads.div_ceil(k.tp);
            32 * s * (q.div_ceil(k.tp) + heads) * 4
        }
        // The same split accumulators under `FLASH_ATTN_MLA`, over the latent: the decode
        // attends with the latent as V (`q_v`), so each split keeps `kv_lora_rank` fp32 values
        // and one log-sum-exp per query head on the GPU.
        Some(&s) if latent => vllm_flash_attn_mla(t, gpu, k, v1).map_or(0, |m| {
            32 * s * m.heads.div_ceil(k.tp) * (m.kv_lora_rank + 1) * 4
        }),
        _ => 0,
    };
    // Where piecewise graphs come first (`capture_model` captures the mixed-mode sizes before
    // the FULL decode ones at 0.11.0 and 0.13.0; from 0.16 `get_capture_descs` lists PIECEWISE
    // before FULL, read at 0.16.0, 0.18.1, 0.19.1, 0.22.1 and 0.23.0), the pool already
    // holds their live set's segments when the FULL graphs ask for the accumulators: one tensor
    // far larger than any free block there, and PyTorch's caching allocator never joins blocks
    // of different segments (`CUDACachingAllocator.cpp`, no expandable segments by default), so
    // the pool grows by a new segment and keeps both. The warm-up's eager copy is not kept:
    // `torch.cuda.graph.__enter__` empties the cache before each capture. vLLM 0.19's own
    // profile shows it: "FULL ... first-capture" after the PIECEWISE pair is the accumulators
    // plus 2-4 MiB (Llama-3.1-8B 260 MiB for 258.0, Qwen2.5-7B 228 for 225.8). With FULL graphs
    // alone, the live set reuses the accumulators' segment: the larger of the two.
    let layers = t.layers().div_ceil(k.pp);
    let graphs = (if piecewise { sizes.len() } else { 0 } + full_sizes.len()) as u64;
    // Each forward all-reduces twice a layer (attention's and the MLP's or MoE's row-parallel
    // outputs) and once after the vocabulary-parallel embedding.
    let nccl = nccl_in_graphs(gpu, k).map_or(0, |proxy| {
        let per = if proxy {
            NCCL_CAPTURED_PROXY_BYTES
        } else {
            NCCL_CAPTURED_BYTES
        };
        graphs * (2 * layers + 1) * nccl_captured_bytes(per, k)
    });
    Graphs {
        pool: if piecewise {
            live + accum
        } else {
            live.max(accum)
        },
        driver: graphs * layers * driver_bytes_per_layer_graph(k),
        nccl,
        cublas: if graphs > 0 {
            capture_stream_cublas(gpu, k, v1)
        } else {
            0
        },
        sizes,
        full_sizes,
        piecewise,
    }
}

/// The MLA layer whose decode runs on FlashAttention 3 (`FLASH_ATTN_MLA`) with split
/// accumulators under whole-forward graphs, where vLLM picks that backend; `None` elsewhere.
///
/// Read at 0.11.2, 0.14.1, 0.19.1 and 0.23.0 (`v1/attention/backends/mla/flashattn_mla.py`,
/// `platforms/cuda.py`): on compute capability 9 with no backend named, the MLA priority list
/// starts with `FLASH_ATTN_MLA` (from 0.11.2; 0.10.2 and 0.11.0 try FlashMLA first, 0.11.1 not
/// read), which takes 16-bit weights and a 16-bit KV cache only (`supported_dtypes`,
/// `supported_kv_cache_dtypes`: no fp8). Its metadata builder sets `max_num_splits` to
/// `flash_attn_max_num_splits_for_cuda_graph` (32; `VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH`
/// at 0.11.2) when the graph mode has full graphs, and the decode calls FlashAttention 3 with the
/// latent as V, so each captured call allocates `[splits, heads, tokens, kv_lora_rank]` fp32
/// partial outputs and `[splits, heads, tokens]` log-sum-exps in the graph pool. vLLM's own
/// profile shows them: DeepSeek-V2-Lite's first FULL capture is 522 MiB at 512 tokens and 16
/// heads (32 × 512 × 16 × 513 × 4 B = 513 MiB, plus one graph's driver share), and Kimi-VL-A3B's
/// 522 MiB at TP 1 and 264 at TP 2 (llm-d-planner's vLLM 0.19.0 H100 logs, DEBUG lines).
/// DeepSeek's sparse MLA (an indexer) runs the sparse backends instead.
fn vllm_flash_attn_mla<'a>(
    t: &'a Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
) -> Option<&'a vram_model::mech::Mla> {
    let v = Engine::Vllm.version_in_force(k);
    let picked = v1
        && v >= [0, 11, 2]
        && gpu.sm_major == 9
        && !engine::is_rocm(gpu)
        && k.dtype_bytes == 2
        && k.kv_bytes.is_none_or(|b| b == 2)
        && k.attention_backend.is_none();
    t.blocks
        .iter()
        .find_map(|b| b.mixer.as_mla())
        .filter(|m| picked && m.indexer.is_none())
}

/// Whether vLLM's model config says `t`'s image tokens attend both ways (`is_mm_prefix_lm`,
/// which the attention selector passes as `use_mm_prefix`), at the release in force:
/// - before 0.13 no release has it;
/// - from the release the reader names (`gemma4` from 0.20:
///   [`vram_model::hf::vllm_mm_prefix_lm_from_bidirectional_since`]) the text config's
///   `use_bidirectional_attention` being `"vision"` answers alone;
/// - from 0.17 a config with its own `is_mm_prefix_lm` key answers with it (`bool()` of it;
///   `ModelConfig.is_mm_prefix_lm` at 0.17.1-0.19.1, the base convertor from 0.20), either way;
/// - else the release's list of model types ([`vram_model::hf::vllm_mm_prefix_lm_since`]).
pub(super) fn vllm_mm_prefix_lm(t: &Transformer, k: &Knobs) -> bool {
    let v = Engine::Vllm.version_in_force(k);
    if v < [0, 13, 0] {
        return false;
    }
    if vram_model::hf::vllm_mm_prefix_lm_from_bidirectional_since(&t.model_type)
        .is_some_and(|s| v >= s)
    {
        return k.bidirectional_vision;
    }
    if let Some(own) = k.mm_prefix_lm.filter(|_| v >= [0, 17, 0]) {
        return own;
    }
    vram_model::hf::vllm_mm_prefix_lm_since(&t.model_type).is_some_and(|s| v >= s)
}

/// Whether `t`'s attention layers' head sizes differ with the largest above FlashAttention's
/// 256, the case Gemma 4's config hook sends to Triton from 0.20 when the user chose no backend
/// ([`vram_model::hf::vllm_unifies_mixed_head_sizes_since`]), and FlashAttention refuses
/// (`head_size not supported`) when the user chose it.
pub(super) fn mixed_wide_heads(t: &Transformer) -> bool {
    let dims: Vec<u64> = t
        .blocks
        .kinds
        .iter()
        .filter_map(|b| b.mixer.as_attention().map(|a| a.head_dim))
        .collect();
    let max = dims.iter().copied().max().unwrap_or(0);
    max > 256 && dims.iter().any(|&d| d != max)
}

/// Whether vLLM runs every attention layer of `t` on Triton attention on CUDA when the user chose
/// no backend, so that no FlashAttention state is built:
/// - its image tokens attend both ways ([`vllm_mm_prefix_lm`]), and FlashAttention and
///   FlashInfer do not override `supports_mm_prefix` (false in the base `AttentionBackend`) in
///   any release read, 0.13.0 to 0.23.0, while `TritonAttentionBackend` and
///   `FlexAttentionBackend` return true; the CUDA priority list puts Triton before Flex;
/// - or its layers' head sizes differ, the largest above 256, and the release's model hook
///   forces Triton for all of them ([`mixed_wide_heads`]: Gemma 4 from 0.20; before, its wide
///   layers alone leave FlashAttention).
///
/// Triton's own buffers (`TritonAttentionMetadataBuilder`: 16 softmax segments for the 3D
/// kernel's sizes up to 128 / KV heads, a few MiB a KV-cache group) are made with the KV cache,
/// before `capture_model` reads free memory (0.19.1), so they are in no graph figure; not
/// modelled.
pub(super) fn vllm_runs_triton_attention(t: &Transformer, k: &Knobs) -> bool {
    let v = Engine::Vllm.version_in_force(k);
    let mixed_wide = vram_model::hf::vllm_unifies_mixed_head_sizes_since(&t.model_type)
        .is_some_and(|s| v >= s)
        && mixed_wide_heads(t);
    vllm_mm_prefix_lm(t, k) || mixed_wide
}

/// Whether vLLM V1 runs FlashAttention for `t`'s layers, so that its full graphs hold
/// FlashAttention 3's split accumulators on Hopper: the user's backend where one was chosen
/// ([`Knobs::attention_backend`]; one FlashAttention cannot take is refused before this,
/// `engine::attention_backend_refusal`), else the default choice unless
/// [`vllm_runs_triton_attention`].
pub(super) fn vllm_runs_flash_attention(t: &Transformer, k: &Knobs) -> bool {
    match k.attention_backend {
        Some(b) => b == super::AttentionBackend::FlashAttn,
        None => !vllm_runs_triton_attention(t, k),
    }
}

/// The graph mode vLLM V1 runs from 0.11 (`engine::vllm_cudagraph_mode`); `None` where the
/// version keys no mode (V0, V1 before 0.11: piecewise graphs, or V0's full ones).
///
/// A model with chunked local attention (Llama 4's `attention_chunk_size` on its RoPE layers,
/// `ChunkedLocalAttention` in `llama4.py`) keeps no whole-forward graphs: the chunked layers'
/// metadata builder declares `AttentionCGSupport.NEVER` (`chunked_local_attention.py`, read at
/// 0.11.0, 0.11.2, 0.12.0, 0.13.0, 0.14.1, 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0, 0.22.1
/// and 0.23.0), and vLLM then drops a mode with full decode graphs to `PIECEWISE` where attention
/// is compiled piecewise, else to `NONE` ("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with
/// ChunkedLocalAttention_8192_FlashAttentionBackend backend (support: AttentionCGSupport.NEVER);
/// setting cudagraph_mode=PIECEWISE because attention is compiled piecewise", the model runner
/// through 0.19, `config/compilation.py` from 0.20; llm-d-planner's Llama-4-Scout log at 0.19.0
/// prints it and profiles "PIECEWISE=51" alone).
pub(super) fn vllm_graph_mode(t: &Transformer, k: &Knobs, v1: bool) -> Option<CudagraphMode> {
    (v1 && Engine::Vllm.version_in_force(k) >= [0, 11, 0]).then(|| {
        let mode = engine::vllm_cudagraph_mode(k, layers::is_hybrid(t));
        if mode.has_full() && chunked_local_attention(t) {
            if engine::vllm_compiles(k) {
                CudagraphMode::Piecewise
            } else {
                CudagraphMode::None
            }
        } else {
            mode
        }
    })
}

/// Whether some attention layer of `t` attends within chunks (vLLM's `ChunkedLocalAttention`).
pub(super) fn chunked_local_attention(t: &Transformer) -> bool {
    t.blocks.iter().any(|b| {
        b.mixer
            .as_attention()
            .is_some_and(|a| matches!(a.window, vram_model::mech::Window::Chunked(_)))
    })
}
