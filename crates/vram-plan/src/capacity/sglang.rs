//! SGLang's start-up: `mem_fraction_static`, `profile_max_num_token` and its pools.

use super::*;

/// What SGLang's `init_torch_distributed` leaves allocated per GPU at TP > 1 on the board it was
/// read on: its own log line "Init torch distributed ends. mem usage=0.13 GB" (GiB; 4 × L4, TP 4,
/// NCCL 2.21.5, custom all-reduce off on PCIe; didier-durand/llms-in-clouds docs/sglang.md). It
/// holds NCCL's one-time state in the process, the TP group's communicator over PCIe, and the
/// warm-up all-reduce's first launch; what differs on other boards is [`sglang_distributed_init`]'s.
pub(super) const SGLANG_DISTRIBUTED_INIT_BYTES: u64 = 133 * MIB;

/// SGLang's custom all-reduce buffers per GPU on CUDA (`custom_all_reduce.py`, the same at 0.4.3.post4
/// and 0.4.9): `create_shared_buffer(meta_size() + max_size)` and `create_shared_buffer(max_size)`
/// (each a `cudaMalloc`, so whole 2 MiB pages: the signal block's few KiB make the first 10 MiB),
/// and `rank_data`, an 8 MiB `torch.empty`; `max_size` is `_MAX_CAR_SIZE`, 8 MiB on CUDA.
/// The peers' buffers are opened by IPC and hold no memory on this GPU.
const SGLANG_CUSTOM_ALL_REDUCE_BYTES: u64 = 26 * MIB;

/// What `init_torch_distributed` allocates per GPU, and how the figure was made.
///
/// Read at 0.4.3.post4 and 0.4.9 (`model_runner.py`, `distributed/parallel_state.py`,
/// `entrypoints/engine.py`, `custom_all_reduce.py`): the TP group's and the PP group's
/// `GroupCoordinator` each build a `PyNcclCommunicator` (`ncclCommInitRank`, then a one-element
/// all-reduce) where they have more than one rank; the TP group also builds `CustomAllreduce`
/// for 2, 4, 6 or 8 ranks on CUDA when the GPUs are two or all NVLink-connected (the P2P check is
/// monkey-patched to true); the world group and DP attention's group (without
/// `SYNC_TOKEN_IDS_ACROSS_TP`) make no communicator. SGLang sets `NCCL_CUMEM_ENABLE=0` and
/// `NCCL_NVLS_ENABLE=0` (`--enable-nccl-nvls` off) in `_set_envs_and_config`, so NCCL has no
/// NVLS buffers and no runtime connection (`comm->runtimeConn = cuMemSupport &&
/// NCCL_RUNTIME_CONNECT`, `src/init.cc` at v2.26.2-1, the NCCL torch 2.7.1 pins; 2.21.5 has no
/// runtime connection at all): `ncclCommInitRank` connects the ring and the tree on every
/// channel, the buffers [`non_torch::nccl_nvswitch_ring_tree_bytes`] sizes over NVSwitch. The
/// L4 reading stands for NCCL's one-time state and the warm-up's first launch everywhere; its own
/// PCIe buffers (none over shared memory, ~0.05 GiB over P2P: g6.12xlarge's P2P is not known) are
/// not taken out, and further PCIe groups are not counted (as in vLLM's: no reading of them).
pub(super) fn sglang_distributed_init(gpu: &Gpu, k: &Knobs) -> (u64, String) {
    if k.tp * k.pp <= 1 {
        return (0, String::new());
    }
    let link = non_torch::interconnect(gpu, k);
    let nvswitch = matches!(link, Interconnect::NvSwitch | Interconnect::NvSwitchNvls);
    let mut bytes = SGLANG_DISTRIBUTED_INIT_BYTES;
    let mut text = "0.13 GiB measured by SGLang on 4 x L4 over PCIe (NCCL's state, the warm-up's first launch, that board's communicator)".to_string();
    if nvswitch {
        let groups = [k.tp, k.pp].into_iter().filter(|&n| n > 1);
        let mut more = 0;
        let mut channels = 0;
        for ranks in groups {
            if let Some((b, c)) = non_torch::nccl_nvswitch_ring_tree_bytes(gpu, ranks) {
                more += b;
                channels = c;
            }
        }
        if more > 0 {
            bytes += more;
            text += &format!(
                ", {:.2} GiB of NCCL ring and tree buffers over NVSwitch ({channels} channels x 12 MiB a send/receive pair; NVLS and cuMem off by SGLang, so every channel connects at init; derived from NCCL's source, not measured)",
                more as f64 / GIB
            );
        }
    }
    let custom = !gpu.is_rocm()
        && matches!(k.tp, 2 | 4 | 6 | 8)
        && (k.tp == 2 || nvswitch)
        && link != Interconnect::Network;
    if custom {
        bytes += SGLANG_CUSTOM_ALL_REDUCE_BYTES;
        text += ", 0.03 GiB of custom all-reduce buffers";
    }
    (bytes, text)
}

/// The CUDA runtime of the PyTorch SGLang installs (`[major, minor]`), which sets the bare CUDA
/// context ([`Gpu::bare_context_bytes`]), and where the pin was read. The `srt` extra's pin in
/// each release's wheel metadata: 0.4.3.post4 and 0.4.4 `torch==2.5.1`, 0.4.5.post3 and
/// 0.4.6.post5 `torch==2.6.0`, 0.4.7 to 0.4.10.post2 `torch==2.7.1`, 0.5.3 `torch==2.8.0`;
/// 0.4.0 to 0.4.2 pin no torch but vLLM (0.4.1: `>=0.6.3.post1,<=0.6.4.post1`; 0.4.2:
/// `==0.6.4.post1`, whose wheel pins `torch==2.5.1`). The PyPI wheels of torch 2.5.1 and 2.6.0
/// require `nvidia-cuda-runtime-cu12==12.4.127`, 2.7.1 `12.6.77`, 2.8.0 `12.8.90` (pip's
/// resolution report of each). A series without a release (`--engine-version 0.4`) spans CUDA
/// 12.4 and 12.6 and takes 12.6, whose context is the larger.
pub(super) fn sglang_cuda(k: &Knobs) -> ([u32; 2], &'static str) {
    let v = Engine::Sglang.version_in_force(k);
    let series_04 = k.engine_version.is_some() && k.engine_pin == Pin::Series && v[..2] == [0, 4];
    if v < [0, 4, 7] && !series_04 {
        ([12, 4], "torch 2.5.1/2.6.0, CUDA 12.4")
    } else if v < [0, 5, 0] {
        ([12, 6], "torch 2.7.1, CUDA 12.6")
    } else {
        ([12, 8], "torch 2.8 or later, CUDA 12.8 or later")
    }
}

/// SGLang's `--swa-full-tokens-ratio` default (`server_args.py`): a sliding-window layer's
/// tokens against a full layer's.
pub(super) const SGLANG_SWA_FULL_TOKENS_RATIO: f64 = 0.8;

/// SGLang's `--mamba-full-memory-ratio` default (`server_args.py`): the Mamba state pool's share
/// of the KV memory against the token pool's.
pub(super) const SGLANG_MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;

/// SGLang's start-up check on its request budget, the counterpart of vLLM's
/// `max_num_batched_tokens >= max_num_seqs` (`SchedulerConfig`). SGLang 0.4.5.post3 and 0.5.3
/// have no check between `--chunked-prefill-size` and `--max-running-requests` in
/// `server_args.py` (a decode step is not bounded by the prefill chunk); what refuses a
/// request budget is `TpModelWorker.__init__` (`managers/tp_worker.py` at both tags):
/// `max_running_requests = min(--max-running-requests // (dp_size with DP attention, else 1),
/// req_to_token_pool.size)`, then `assert self.max_running_requests > 0, "max_running_request
/// is zero"`. With `--enable-dp-attention` and fewer running requests than `--dp-size` the
/// quotient is 0 whatever the memory, so this is refused from the flags alone (after the
/// weights and pools are allocated, so the engine never serves).
pub(super) fn sglang_refuses(k: &Knobs) -> Result<()> {
    if let Some(m) = k.max_num_seqs {
        let per_rank = m / if k.dp_attention { k.dp.max(1) } else { 1 };
        if per_rank == 0 {
            return Err(Error::Capacity(format!(
                "SGLang refuses this: AssertionError: max_running_request is zero (TpModelWorker: --max-running-requests {m} // --dp-size {} with DP attention; raise --max-running-requests to at least --dp-size)",
                k.dp
            )));
        }
    }
    Ok(())
}

pub(super) fn sglang(t: &Transformer, gpu: &Gpu, k: &Knobs) -> Capacity {
    let total = gpu.memory_bytes;
    let gpu_mib = (total / MIB) as f64;
    let v04 = Engine::Sglang.version_in_force(k) < [0, 5, 0];
    // 0.4 (`ServerArgs.__post_init__`): chunked prefill 2048 and CUDA graphs up to 8 (TP < 4)
    // or 80 below 25,000 MiB, else 8192 and 160; `mem_fraction_static` by TP size alone.
    // 0.5 (`_handle_gpu_memory_settings`): the memory bucket's defaults.
    let (cps, gbs) = if v04 {
        if gpu_mib < 25_000.0 {
            (2048, if k.tp < 4 { 8 } else { 80 })
        } else {
            (8192, 160)
        }
    } else if gpu_mib < 20.0 * 1024.0 {
        (2048, 8)
    } else if gpu_mib < 35.0 * 1024.0 {
        (2048, if k.tp < 4 { 24 } else { 80 })
    } else if gpu_mib < 60.0 * 1024.0 {
        (4096, if k.tp < 4 { 32 } else { 160 })
    } else if gpu_mib < 160.0 * 1024.0 {
        (8192, if k.tp < 4 { 256 } else { 512 })
    } else {
        (16384, 512)
    };
    let cps = k.chunked_prefill_size.unwrap_or(cps);
    let gbs = k.cuda_graph_max_bs.unwrap_or(gbs);
    let mfs = k.mem_fraction_static.unwrap_or_else(|| {
        if v04 {
            return match k.tp {
                16.. => 0.79,
                8.. => 0.81,
                4.. => 0.85,
                2.. => 0.87,
                _ => 0.88,
            };
        }
        let mut reserved = 512.0 + (cps.max(2048) as f64) * 1.5 + gbs as f64 * 2.0;
        reserved += (k.tp * k.pp) as f64 / 8.0 * 1024.0;
        if gpu_mib > 60.0 * 1024.0 {
            reserved = reserved.max(10.0 * 1024.0);
        }
        (((gpu_mib - reserved) / gpu_mib) * 1000.0).round() / 1000.0
    });
    let (mfs, vlm_note) = vlm_mem_fraction(t, k, mfs);
    let max_len = k.max_model_len.unwrap_or(model_max_len(t, k));
    let page_size = k.block_size.unwrap_or(1);
    let kv = k.kv_bytes.unwrap_or(k.dtype_bytes);
    // SGLang's "Load weight end ... mem usage" is the drop in free device memory while loading:
    // the weights as the caching allocator reserves them. What runs between the two readings
    // that size the pool ("Load weight begin" after `init_torch_distributed`, and
    // `profile_max_num_token` after `load_model`; `get_available_gpu_memory` = `empty_cache()`
    // then `mem_get_info`), read in `model_runner.py` at 0.4.0, 0.4.2, 0.4.5.post3 and 0.5.3:
    // only `load_model` — the parameters, the rotary table (built on the GPU under the loader's
    // device context; `einsum("i,j -> ij")` is an elementwise `mul`, so no cuBLAS) and the
    // load's copies. `init_cublas` (whose workspace PyTorch's caching allocator holds),
    // `init_attention_backend` (FlashInfer's workspace buffer, 512 MiB where it is raised) and
    // the CUDA graphs all come after `init_memory_pool` at every tag read, so they live in the
    // reserve (1 - mem_fraction_static) and move neither reading. At TP/PP 1 nothing before
    // "Load weight begin" launches a kernel (`init_torch_distributed` makes no communicator for
    // `world_size == 1`), so the free memory read there is the device less the bare context,
    // and the load's first kernel brings the driver's first-launch memory into "mem usage"
    // (both measured by `gpu/first_kernel.py` on an H200: `Gpu::bare_context_bytes`,
    // `Gpu::first_launch_bytes`). At TP/PP > 1 PyNccl's warm-up all-reduce runs first, so the
    // context there is the catalog's (read after kernels ran) plus what
    // `init_torch_distributed` allocated (NCCL communicators, custom all-reduce buffers).
    // CUDA's lazy module loading; a ROCm device is not measured, and keeps the context read
    // after kernels ran.
    // At TP/PP > 1 the same bare context is read at "Init torch distributed begin", and what
    // `init_torch_distributed` adds (its warm-up's first launch and NCCL's kernels and buffers
    // among it) is the 4 x L4 start's own "Init torch distributed ends. mem usage".
    let single = k.tp * k.pp == 1 && !gpu.is_rocm();
    let (cuda, cuda_build) = sglang_cuda(k);
    let weights = weights_per_gpu(t, k, gpu, Engine::Sglang)
        + allocator_rounding(t, k, gpu, Engine::Sglang)
        + if single { gpu.first_launch_bytes() } else { 0 };
    let (distributed, distributed_note) = sglang_distributed_init(gpu, k);
    let context = if gpu.is_rocm() {
        gpu.context_bytes()
    } else {
        gpu.bare_context_bytes(cuda)
    } + distributed;
    let pre = total.saturating_sub(context) as f64 / GIB;
    let post = pre - weights as f64 / GIB;
    let rest = post - pre * (1.0 - mfs);
    let layers = stage_layers(t, k.pp);
    // Mamba2 / Gated DeltaNet states (`MambaPool`, `model_runner` `_handle_max_mamba_cache`,
    // read at a 2026 snapshot): without `--max-mamba-cache-size` or speculative decoding the
    // state pool takes `rest × r / (1 + r)` (`--mamba-full-memory-ratio` r = 0.9) in whole
    // requests of `mamba_cache_per_req` bytes, and the token pool what is left. The states'
    // shapes are vLLM's; conv in bf16 (`CONV_DTYPE`), recurrent state in `--mamba-ssm-dtype`
    // (float32 unless the knob says otherwise).
    let state_knobs = Knobs {
        dtype_bytes: 2,
        mamba_ssm_bytes: Some(k.mamba_ssm_bytes.unwrap_or(4)),
        ..*k
    };
    let per_req: u64 = layers.iter().map(|c| state_bytes(c, &state_knobs)).sum();
    let (rest, mamba_slots) = if per_req > 0 && rest > 0.0 {
        let budget = rest * SGLANG_MAMBA_FULL_MEMORY_RATIO / (1.0 + SGLANG_MAMBA_FULL_MEMORY_RATIO);
        let n = (budget * GIB / per_req as f64) as u64;
        (rest - (n * per_req) as f64 / GIB, Some(n))
    } else {
        (rest, None)
    };
    let cell: u64 = layers
        .iter()
        .map(|c| token_bytes(c, kv, attention_tp(k)))
        .sum();
    let mut tokens = if rest > 0.0 && cell > 0 {
        (rest * GIB / cell as f64) as u64
    } else {
        0
    };
    if let Some(m) = k.max_total_tokens {
        tokens = tokens.min(m);
    }
    tokens = tokens / page_size * page_size;
    let mut kv_bytes = tokens * cell;
    // Sliding-window layers (`SWAKVPool`, `model_runner` `set_num_token_hybrid`): the tokens
    // sized as if every attention layer were full are shared out so that
    // `swa × swa_layers + full × full_layers = tokens × layers` with `swa = full ×
    // --swa-full-tokens-ratio` (0.8), each rounded down to the page; the full layers' count is
    // the pool's `max_total_num_tokens`.
    let attn: Vec<&CacheLayout> = layers
        .iter()
        .filter(|c| !matches!(c, CacheLayout::State { .. }))
        .collect();
    let n_swa = attn
        .iter()
        .filter(|c| matches!(c, CacheLayout::Kv { window: Some(w), .. } if *w < max_len))
        .count() as u64;
    let mut swa_tokens = None;
    if n_swa > 0 && (n_swa as usize) < attn.len() {
        let n_full = attn.len() as u64 - n_swa;
        let total = (tokens * attn.len() as u64) as f64;
        let full = (total / (SGLANG_SWA_FULL_TOKENS_RATIO * n_swa as f64 + n_full as f64)) as u64;
        let swa = (full as f64 * SGLANG_SWA_FULL_TOKENS_RATIO) as u64;
        let (full, swa) = (full / page_size * page_size, swa / page_size * page_size);
        kv_bytes = attn
            .iter()
            .map(|c| {
                let n = match c {
                    CacheLayout::Kv {
                        window: Some(w), ..
                    } if *w < max_len => swa,
                    _ => full,
                };
                n * token_bytes(c, kv, attention_tp(k))
            })
            .sum();
        tokens = full;
        swa_tokens = Some(swa);
    }
    // The request-to-token map (`ReqToTokenPool`, `model_runner.init_memory_pool`, read at
    // 0.4.5.post3 and 0.5.3): int32 rows of `context_len + 4` for `max_num_reqs` requests
    // (`min(max(max_total_num_tokens / context_len × 512, 2048), 4096)`, or
    // `--max-running-requests` as given; one more row in 0.4), allocated after the pool is sized and
    // before the pool itself, from the memory the weights left. It is not in the profile, so a
    // long context can leave no room for it beside the pool (Llama 4 Scout's 10M positions at
    // 2,049 rows: 80.04 GiB, sglang#5755's "Tried to allocate 80.04 GiB").
    let max_num_reqs = k
        .max_num_seqs
        .unwrap_or(((tokens as f64 / max_len as f64 * 512.0) as u64).clamp(2048, 4096));
    let req_to_token = (max_num_reqs + u64::from(v04)) * (max_len + 4) * 4;
    let free_after_load = (post.max(0.0) * GIB) as u64;
    let mamba_bytes = mamba_slots.map_or(0, |n| n * per_req);
    let map_fits = req_to_token + kv_bytes + mamba_bytes <= free_after_load;
    let starts = tokens > 0 && map_fits;
    let max_fit = if map_fits { tokens.min(max_len) } else { 0 };
    // A hybrid model's requests also each hold one state slot.
    let max_concurrency =
        (tokens as f64 / max_len as f64).min(mamba_slots.map_or(f64::INFINITY, |n| n as f64));
    // `fused_experts_impl` shares one buffer between cache1 and cache3 from 0.4.3
    // (`fused_moe_triton/fused_moe.py` at 0.4.3.post4, 0.4.4.post1, 0.4.5.post3 and 0.5.3;
    // 0.4.2 allocates the three caches apart), in chunks of 64K tokens.
    let held = Held {
        moe_cache13: Engine::Sglang.version_in_force(k) >= [0, 4, 3],
        ..Held::default()
    };
    let dequant = engine::sglang_dequant_linears(t, k, gpu);
    let peak = |tokens: u64| match dequant {
        Some(from) if tokens >= from => dequant_forward_peak(t, tokens, k, false, held),
        _ => forward_peak_held(t, tokens, k, false, held),
    };
    let activation = peak(cps);
    let graphs = if k.enforce_eager {
        0
    } else {
        peak(gbs) + gbs.div_ceil(8) * t.layers().div_ceil(8) * MIB
    };
    // SGLang's "GB" is GiB (`GB = 1024 * 1024 * 1024` in mem_cache/memory_pool.py).
    let half = kv_bytes as f64 / 2.0 / GIB;
    let (vlm_log, vlm_assumed) = match vlm_note {
        VlmFraction::Unchanged => (None, None),
        VlmFraction::Logged(l) => (Some(l), None),
        VlmFraction::Silent(a) => (None, Some(a)),
    };
    let mut log: Vec<String> = vlm_log.into_iter().collect();
    log.push(format!(
        "Load weight end. avail mem={:.2} GB, mem usage={:.2} GB.",
        post,
        weights as f64 / GIB
    ));
    if let Some(swa) = swa_tokens {
        log.push(format!(
            "Use sliding window memory pool. full_layer_tokens={tokens}, swa_layer_tokens={swa}"
        ));
    }
    if tokens > 0 && !map_fits {
        let gib = |b: u64| b as f64 / GIB;
        log.push(if req_to_token > free_after_load {
            format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2} GiB (the request-to-token map: {} requests x {} positions, int32; {:.2} GiB free after loading)",
                gib(req_to_token),
                max_num_reqs + u64::from(v04),
                max_len + 4,
                gib(free_after_load)
            )
        } else {
            format!(
                "torch.OutOfMemoryError: CUDA out of memory allocating the KV pool ({:.2} GiB) after the request-to-token map ({:.2} GiB); {:.2} GiB free after loading (estimated)",
                gib(kv_bytes + mamba_bytes),
                gib(req_to_token),
                gib(free_after_load)
            )
        });
    } else if starts {
        log.push(format!(
            "KV Cache is allocated. #tokens: {tokens}, K size: {half:.2} GB, V size: {half:.2} GB"
        ));
        // The scheduler's line (`scheduler.py`, 0.4.x and 0.5.x), less the fields not modelled
        // (`max_prefill_tokens`, `max_running_requests`, `available_gpu_mem`); it prints no
        // `mem_fraction_static`, which the budget row gives.
        log.push(format!(
            "max_total_num_tokens={tokens}, chunked_prefill_size={cps}, context_len={max_len}"
        ));
    } else if rest <= 0.0 && Engine::Sglang.version_in_force(k) >= [0, 5, 14] {
        // From 0.5.14 the budget is checked before the pool is sized (`profile_max_num_token`
        // in `model_runner_kv_cache_mixin.py` at 0.5.14 and 0.5.15, `_profile_available_bytes` in
        // `mem_cache/kv_cache_configurator.py` at 0.5.16 and 0.5.23; absent at 0.5.13, whose
        // pool then has no tokens and `MemoryPoolConfig` raises "Not enough memory"): free after
        // loading less `pre × (1 − mem_fraction_static)` not positive raises this ValueError,
        // with the smallest fraction `1 − post / pre` and that rounded up to 0.001.
        let minimum = 1.0 - post / pre;
        // `{mfs}` as SGLang writes it (`--mem-fraction-static={self.mem_fraction_static}`, the
        // float's repr), the others as its `:.3f` and `:.4f`.
        log.push(format!(
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}. Raise --mem-fraction-static above {:.3} (minimum viable = 1 - available/pre = {minimum:.4}). If using speculative decoding, draft weights are now counted.",
            (minimum * 1000.0).ceil() / 1000.0
        ));
    } else {
        // The fraction is printed from 0.5.3 (`model_runner.py`, `{self.server_args.
        // mem_fraction_static=}`, read at 0.5.3 to 0.5.9), as `mem_fraction_static=V` from 0.5.10
        // (`MemoryPoolConfig.__post_init__`, `model_runner_kv_cache_mixin.py`); not through
        // 0.5.2 (read at 0.4.6.post5, 0.4.7, 0.4.9, 0.4.10.post2, 0.5.0rc2, 0.5.1, 0.5.2).
        let v = Engine::Sglang.version_in_force(k);
        let current = if v >= [0, 5, 10] {
            format!(" Current value: mem_fraction_static={mfs}")
        } else if v >= [0, 5, 3] {
            format!(" Current value: self.server_args.mem_fraction_static={mfs}")
        } else {
            String::new()
        };
        log.push(format!(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.{current}"
        ));
    }
    // Weights beyond what is free before loading never finish loading (no `Load weight end`).
    if post < 0.0 {
        log = vec![super::vllm::load_failure(weights, context, total)];
    }
    Capacity {
        engine: Engine::Sglang,
        engine_version: version_label(Engine::Sglang, k),
        total_bytes: total,
        budget_bytes: (pre * mfs * GIB) as u64,
        memory_fraction: mfs,
        weights_bytes: weights,
        non_torch_bytes: context,
        activation_peak_bytes: activation,
        cuda_graph_bytes: graphs,
        cuda_graph_in_budget: true,
        kv_cache_bytes: kv_bytes,
        kv_cache_tokens: tokens,
        kv_cache_blocks: tokens / page_size,
        kv_groups: sglang_kinds(&layers, kv, &state_knobs, page_size, max_len, mamba_slots),
        max_concurrency,
        max_model_len: max_len,
        max_num_seqs: gbs,
        max_num_batched_tokens: cps,
        starts,
        max_model_len_that_fits: max_fit,
        log,
        assumes: vec![
            if v04 {
                "SGLang 0.4 (server_args.ServerArgs.__post_init__: mem_fraction_static by TP size, chunked prefill and CUDA-graph batch by GPU memory; model_runner.profile_max_num_token)"
            } else {
                "SGLang 0.5 (server_args._handle_gpu_memory_settings, model_runner.profile_max_num_token)"
            },
            "free memory before loading: on a CUDA GPU the device total less the CUDA context before any kernel (lazy module loading; it follows the CUDA build of the torch the SGLang release pins: see the context line), with the first kernel's driver memory in the weights' figure at TP/PP 1 (gpu/first_kernel.py); on ROCm less the CUDA context after kernels ran (the GPU's); at TP/PP > 1 also what init_torch_distributed allocates (see its line)",
            "activation peak and CUDA graphs are inside SGLang's reserve (1 - mem_fraction_static); their figures here are estimates, not part of the pool's size: one layer's live set, MoE caches with cache1 and cache3 in one buffer from 0.4.3 (fused_moe.py), and a plain AWQ/GPTQ linear's whole fp16 weight where no Marlin kernel runs (vLLM's AWQ through 0.4.4, from 256 tokens; SGLang's own awq.py from 0.4.5, on every call)",
            "the request-to-token map (ReqToTokenPool, read at 0.4.5.post3 and 0.5.3): (max_num_reqs + 1 in 0.4) x (context_len + 4) int32, max_num_reqs = min(max(tokens / context_len x 512, 2048), 4096) or --max-running-requests, allocated before the pool from what the weights left; the start fails when it and the pool do not both fit",
        ]
        .into_iter()
        .chain(
            layers
                .iter()
                .any(|c| matches!(c, CacheLayout::Kv { window: Some(_), .. }))
                .then_some("SGLang's sliding-window pool (SWAKVPool, model_runner.set_num_token_hybrid, read at a 2026 snapshot): the all-full token count shared out with swa = 0.8 x full, for every model with sliding layers (SGLang enables it per architecture; --disable-hybrid-swa-memory not modelled)"),
        )
        .chain(mamba_slots.map(|_| "SGLang's Mamba/Gated DeltaNet state pool (model_runner._handle_max_mamba_cache, read at a 2026 snapshot): rest x 0.9 / 1.9 in whole requests of conv (bf16) + recurrent (float32) state, the token pool the remainder; no speculative decoding"))
        .map(String::from)
        .chain((!gpu.is_rocm()).then(|| {
            format!(
                "the CUDA context before any kernel {:.2} GiB under {cuda_build} ({}){}",
                gpu.bare_context_bytes(cuda) as f64 / GIB,
                gpu.bare_context_source(cuda),
                if single {
                    format!(
                        "; the first launch {:.2} GiB ({})",
                        gpu.first_launch_bytes() as f64 / GIB,
                        gpu.first_launch_source()
                    )
                } else {
                    String::new()
                }
            )
        }))
        .chain((distributed > 0).then(|| {
            format!(
                "init_torch_distributed (model_runner.py, parallel_state.py, custom_all_reduce.py, NCCL's init.cc; read at 0.4.3.post4 and 0.4.9): {:.2} GiB per GPU: {distributed_note}",
                distributed as f64 / GIB
            )
        }))
        .chain(vlm_assumed)
        .collect(),
    }
}

/// SGLang's token pool per layer kind: one cell per token of every attention and MLA layer
/// (`MHATokenToKVPool` / `MLATokenToKVPool`), pages of `--page-size` tokens. Sliding layers are
/// priced as full ones and state layers are outside the token pool (SGLang's `SWAKVPool` and
/// `MambaPool` are not modelled; their layers are listed with their state's bytes).
pub(super) fn sglang_kinds(
    layers: &[CacheLayout],
    kv: u64,
    k: &Knobs,
    page_size: u64,
    len: u64,
    mamba_slots: Option<u64>,
) -> Vec<KvGroup> {
    let mut out: Vec<KvGroup> = Vec::new();
    for c in layers {
        let (kind, window) = match *c {
            CacheLayout::Kv { window: None, .. } => ("full", None),
            CacheLayout::Kv { window, .. } => ("sliding", window),
            CacheLayout::Latent { .. } => ("mla", None),
            CacheLayout::State { .. } => ("state", None),
        };
        let page = if kind == "state" {
            state_bytes(c, k)
        } else {
            page_size * token_bytes(c, kv, attention_tp(k))
        };
        match out
            .iter_mut()
            .find(|g| g.kind == kind && g.window == window)
        {
            Some(g) => {
                g.layers += 1;
                g.layers_per_group += 1;
            }
            None => out.push(KvGroup {
                kind,
                layers: 1,
                groups: 1,
                layers_per_group: 1,
                block_size: page_size,
                page_bytes: page,
                spec_page_bytes: page,
                window,
                blocks_per_request: 0,
                state_slots: None,
            }),
        }
    }
    for g in &mut out {
        g.blocks_per_request = if g.kind == "state" {
            g.state_slots = mamba_slots;
            1
        } else {
            len.min(g.window.unwrap_or(u64::MAX)).div_ceil(page_size)
        };
    }
    out
}

/// SGLang's reduction of `mem_fraction_static` for a multimodal model (its vision tower and
/// image processor need room outside the pool). 0.4.0-0.4.3 (`model_runner.py`, read at 0.4.1
/// and 0.4.3.post2): `mem_fraction_static *= 0.95` for any value, given or default ("Automatically
/// reduce --mem-fraction-static to 0.836 because this is a multimodal model"); 0.4.4 to 0.4.x
/// (read at 0.4.6.post1): `*= 0.90`; 0.5 (`server_args.py` `adjust_mem_fraction_for_vlm`, read
/// at 0.5.0rc0): only for the default, `0.95 x clamp(1 - 0.1 x (layers x width^2 / (24 x 1024^2)
/// - 1), 0.8, 1.05)`, the tower's size against a ViT-L/14.
///
/// What the user is told: 0.4's `model_runner` logs "Automatically reduce --mem-fraction-static
/// to {:.3f} because this is a multimodal model." (read at 0.4.1, 0.4.3.post2 and 0.4.6.post1),
/// returned as [`VlmFraction::Logged`]; 0.5's `adjust_mem_fraction_for_vlm` logs nothing (read at
/// 0.5.0rc0 and 0.5.3), so the reduction is said in the report's assumptions instead.
pub(super) fn vlm_mem_fraction(t: &Transformer, k: &Knobs, mfs: f64) -> (f64, VlmFraction) {
    let Some(v) = t.blocks.vision.as_ref() else {
        return (mfs, VlmFraction::Unchanged);
    };
    let ver = Engine::Sglang.version_in_force(k);
    let factor = if ver < [0, 4, 4] {
        0.95
    } else if ver < [0, 5, 0] {
        0.90
    } else if k.mem_fraction_static.is_none() {
        let ratio = (v.depth * v.hidden * v.hidden) as f64 / (24.0 * 1024.0 * 1024.0);
        0.95 * (1.0 - 0.1 * (ratio - 1.0)).clamp(0.8, 1.05)
    } else {
        return (mfs, VlmFraction::Unchanged);
    };
    let reduced = mfs * factor;
    let said = if ver < [0, 5, 0] {
        VlmFraction::Logged(format!(
            "Automatically reduce --mem-fraction-static to {reduced:.3} because this is a multimodal model."
        ))
    } else {
        VlmFraction::Silent(format!(
            "mem_fraction_static {} x {factor:.4} = {} for the vision tower (server_args.adjust_mem_fraction_for_vlm, read at 0.5.0rc0 and 0.5.3: 0.95 x clamp(1 - 0.1 x (depth x width^2 / (24 x 1024^2) - 1), 0.8, 1.05), the default only; SGLang logs no line for it)",
            super::fraction_text(mfs),
            super::fraction_text(reduced)
        ))
    };
    (reduced, said)
}

/// How SGLang tells of its multimodal reduction of `mem_fraction_static`
/// ([`vlm_mem_fraction`]).
pub(super) enum VlmFraction {
    /// No reduction.
    Unchanged,
    /// 0.4: a line of its log.
    Logged(String),
    /// 0.5: no line; this is the report's assumption that says it.
    Silent(String),
}
