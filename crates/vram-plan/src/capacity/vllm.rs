//! vLLM's start-up: V1's `determine_available_memory` and V0's `determine_num_available_blocks`.

use super::*;

pub(super) fn vllm(t: &Transformer, gpu: &Gpu, k: &Knobs) -> Result<Capacity> {
    let total = gpu.memory_bytes;
    let (v1, fallback) = engine::vllm_v1(k, gpu);
    let v0 = !v1;
    let big = total as f64 >= 70.0 * GIB && !gpu.id.starts_with("a100");
    let max_len = k.max_model_len.unwrap_or(model_max_len(t, k));
    let (seqs_default, tokens_default) = if v0 {
        // V0's EngineArgs: chunked prefill only above 32K tokens (then 2048 a step), and not
        // for multimodal, MLA or sliding-window models (`engine::vllm_v0_chunked_by_default`).
        let caches = layer_caches(t);
        let mla = caches
            .iter()
            .any(|c| matches!(c, CacheLayout::Latent { .. }));
        let sliding = caches.iter().any(|c| {
            matches!(
                c,
                CacheLayout::Kv {
                    window: Some(_),
                    ..
                }
            )
        });
        let multimodal = t.blocks.vision.is_some();
        (
            256,
            if engine::vllm_v0_chunked_by_default(k, max_len, multimodal, mla, sliding) {
                // SchedulerConfig: 512 at 0.6.3, 2048 at 0.6.6 (0.6.4–0.6.5 not read).
                if Engine::Vllm.version_in_force(k) < [0, 6, 6] {
                    512
                } else {
                    2048
                }
            } else {
                max_len.max(2048)
            }
            // SchedulerConfig: a multimodal model's budget is at least
            // _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS (5120; 0.6.3 and 0.8.3).
            .max(if multimodal { 5120 } else { 0 }),
        )
    } else if big {
        (1024, 8192)
    } else {
        (256, 2048)
    };
    let mnbt = k.max_num_batched_tokens.unwrap_or(tokens_default);
    // 0.19's `_set_default_max_num_seqs_and_batched_tokens_args` lowers a defaulted
    // max_num_seqs to the step budget; 0.10.1 does not (0.11-0.18 not read: as 0.10.1).
    let max_num_seqs =
        k.max_num_seqs
            .unwrap_or(if !v0 && Engine::Vllm.version_in_force(k) >= [0, 19, 0] {
                seqs_default.min(mnbt)
            } else {
                seqs_default
            });
    // `CacheConfig.gpu_memory_utilization`'s default by release (V0 ends at 0.10).
    let util = k
        .gpu_memory_utilization
        .unwrap_or_else(|| engine::vllm_default_utilization(Engine::Vllm.version_in_force(k)));
    // `SchedulerConfig._verify_args` refuses a step budget smaller than the number of
    // sequences before anything is loaded: the same ValueError at 0.8.5, 0.9.2, 0.10.1 and
    // 0.19.0 (config.py, then config/scheduler.py). The engine never starts, so this is an
    // invalid input, not a capacity.
    if mnbt < max_num_seqs {
        return Err(Error::Capacity(format!(
            "vLLM refuses this: ValueError: max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({max_num_seqs}) (SchedulerConfig; raise --max-num-batched-tokens or lower --max-num-seqs)"
        )));
    }
    // V1's start-up check from 0.9.1, before anything is loaded: the share asked of the device
    // must be free at start (`vllm_free_at_start`).
    if let Some(start) = vllm_free_at_start(t, gpu, k, v1) {
        let requested = (total as f64 * util).ceil() as u64;
        if start.free < requested {
            return Err(Error::Capacity(format!(
                "vLLM {} refuses this: {} (estimated: {} free of {:.2} GiB on an otherwise idle GPU, {}; the largest --gpu-memory-utilization it takes is {:.2})",
                version_label(Engine::Vllm, k),
                start.message(util, requested),
                start.free_text(),
                total as f64 / GIB,
                start.held,
                start.ceiling()
            )));
        }
    }
    if let Some(q) = engine::vllm_07_mla_disabled_by(t, k) {
        return Err(Error::Capacity(format!(
            "vLLM {} does not run MLA under {q} quantization (ModelConfig.use_mla: \"MLA is not supported with {q} quantization. Disabling MLA.\") and caches full K and V per head instead, which vram does not model; vLLM 0.7.3 keeps MLA (--engine-version 0.7.3)",
            version_label(Engine::Vllm, k)
        )));
    }
    // On CUDA "Model loading took" is `max_memory_allocated` over the load: the tensors and the
    // whole segments the allocator did not split (`allocated_rounding`); on ROCm it is the fall
    // in free device memory (`RocmPlatform.get_current_memory_usage`), so the caching
    // allocator's rounding of each tensor is in it, as in SGLang's measure.
    let weights = weights_per_gpu(t, k, gpu, Engine::Vllm)
        + if engine::is_rocm(gpu) {
            allocator_rounding(t, k, gpu, Engine::Vllm)
        } else {
            allocated_rounding(t, k, gpu)
        }
        + if v1 {
            encoder::deepstack_buffers(t, k, mnbt)
        } else {
            0
        }
        + super::weights::vllm_mla_backend_workspaces(t, k, gpu);
    let reqs = max_num_seqs.min(mnbt);
    // V1 profiles the torch.compile'd model unless --enforce-eager or a compilation mode NONE
    // (`engine::vllm_inductor`); V0 runs it eagerly.
    let compiled = !v0 && engine::vllm_inductor(k);
    let sorts = engine::vllm_sampler_sorts(k, v1, reqs);
    // Plain AWQ/GPTQ kernels make each linear's whole weight as a temporary
    // (`engine::vllm_dequant_linears`); the profile run's largest one is in its peak.
    // Run eagerly, the model's layer loop holds each layer's input and every all-reduce makes
    // its result as a new tensor (`activation::Held`; read from 0.7.2, not before).
    let held = Held::vllm(t, k, gpu);
    let forward = match engine::vllm_dequant_linears(t, k, gpu) {
        Some(from) if mnbt >= from => dequant_forward_peak(t, mnbt, k, compiled, held),
        _ => forward_peak_held(t, mnbt, k, compiled, held),
    };
    // V1 before 0.8 computes the logits of every profiled token and samples nothing.
    let v1_07 = v1 && Engine::Vllm.version_in_force(k) < [0, 8, 0];
    let logits = if v1_07 {
        v1_07_logits_peak(t, mnbt, k)
    } else {
        sampler_peak(t, reqs, mnbt, k, sorts) + sampler::vllm_sampler_rows(t, reqs, k, v1)
    };
    // From 0.14 the experts' caches the forward made stay allocated in vLLM's persistent
    // workspace while the dummy sampler runs (`activation::Held`'s `moe_workspace`).
    let workspace = if held.moe_workspace.is_some() {
        vllm_moe_workspace(t, mnbt, k, gpu)
    } else {
        0
    };
    let logits = logits + workspace;
    // The cuBLAS workspace from the forward's first GEMM on, V1's cached Triton sampler buffer
    // from the sampler on (`sampler::vllm_profile_peak`).
    let mut activation = sampler::vllm_profile_peak(forward, logits, t, reqs, k, gpu, v1);
    // V0's encoder-decoder runner profiles every sequence with a maximal image (Llama 3.2
    // Vision); its vision encoder over all of them is the peak.
    let cross = if v0 {
        cross_vision_peak(t, k, max_num_seqs, mnbt)
    } else {
        None
    };
    if let Some(c) = cross {
        activation = activation.max(c);
    }
    // V1 profiles the multimodal encoder first and holds its outputs and inputs through the
    // language model's dummy run and the sampler (`encoder`: Qwen's dynamic-resolution towers,
    // Mistral's Pixtral, Llama 4's tiles, Gemma 4's frames).
    // Gemma 4 with an audio tower also budgets audio (`processor.audio_seq_length`, not
    // modelled): no profile is priced for it.
    let audio_unmodelled = |v: &vram_model::blocks::Vision| {
        t.blocks.audio.is_some()
            && matches!(v.input, vram_model::blocks::VisionInput::PatchBudget { .. })
    };
    let encoder_profile = t
        .blocks
        .vision
        .as_ref()
        .filter(|v| v1 && !audio_unmodelled(v))
        .and_then(|v| {
            encoder::vllm_encoder_profile(
                v,
                k,
                Engine::Vllm.version_in_force(k),
                max_num_seqs,
                mnbt,
                max_len,
            )
        });
    if let Some(e) = &encoder_profile {
        activation = e.peak(activation);
    }
    // Memory outside PyTorch that appears after the snapshot (kernel images, library handles,
    // NCCL and custom all-reduce buffers at TP/PP > 1), by version (`engine::vllm_non_torch`).
    let (mut non_torch, mut non_torch_source) = non_torch::vllm_non_torch(k, v1, gpu);
    // FlashInfer's all-reduce + RMSNorm fusion workspace, made while the profile run compiles.
    if let Some((ws, text)) = non_torch::vllm_fi_allreduce_workspace(t, gpu, k, v1, mnbt) {
        non_torch += ws;
        non_torch_source = format!("{non_torch_source}; {text}");
    }
    // The CUDA graphs `capture_model` records after the KV cache is allocated
    // (`graphs::vllm_graphs`: the version's capture sizes, the shared pool, driver memory).
    let captured = (!k.enforce_eager
        && graphs::vllm_graph_mode(t, k, v1) != Some(CudagraphMode::None))
    .then(|| vllm_graphs(t, gpu, k, v1, max_num_seqs, mnbt, None));
    let graphs = captured.as_ref().map_or(0, Graphs::bytes);
    // From 0.20 the worker subtracts its CUDA-graph estimate before sizing the KV cache
    // (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` on by default; 0.19 only logs "Estimated CUDA
    // graph memory: X GiB total"); before, graphs come on top of the budget.
    let graphs_in_budget = engine::vllm_graphs_in_budget(k, v1, gpu);
    let budget = (total as f64 * util) as u64;
    let non_kv = weights + activation + non_torch + if graphs_in_budget { graphs } else { 0 };
    let available = budget as i128 - non_kv as i128;
    let layers = stage_layers(t, k.pp);
    let layout = vllm_layout(&layers, k, gpu, max_len, mnbt);
    let page = layout.page;
    let group_size = layout.layers_per_group;
    let (num_blocks, tokens, v1_concurrency) = layout.pool(available.max(0) as u64, max_len, mnbt);
    let kv_bytes = num_blocks * page * group_size;
    // What `check_enough_kv_cache_memory` and `estimate_max_model_len` sum: every layer's
    // `max_memory_usage_bytes`, padding layers apart.
    let layer_bytes_for = |len: u64| -> u64 {
        layout
            .groups
            .iter()
            .map(|g| g.layers * vllm_blocks(g, len, mnbt) * page)
            .sum()
    };
    let max_concurrency = if v0 {
        tokens as f64 / max_len as f64
    } else {
        v1_concurrency
    };
    // Largest length one request of which fits: the bytes needed grow with the length.
    let fits_len = |len: u64| available > 0 && layer_bytes_for(len) <= available as u64;
    let max_fit = if num_blocks == 0 || !fits_len(1) {
        0
    } else if fits_len(max_len) {
        max_len
    } else {
        let (mut lo, mut hi) = (1u64, max_len);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits_len(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let starts = available > 0 && max_fit >= max_len;
    let gib = |b: f64| b / GIB;
    let mut log = vec![format!("Model loading took {:.4} GiB", gib(weights as f64))];
    if let Some(e) = &encoder_profile {
        log.push(e.log_line());
    }
    if let Some(st) = layout.groups.iter().find(|g| g.kind == "state") {
        let attn = layout.groups.iter().find(|g| g.kind != "state");
        if let Some(a) = attn {
            if k.block_size.is_none_or(|b| b < a.block_size) {
                log.insert(
                    0,
                    format!(
                        "Setting attention block size to {} tokens to ensure that attention page size is >= mamba page size.",
                        a.block_size
                    ),
                );
            }
        }
        if st.page_bytes > st.spec_page_bytes && st.spec_page_bytes > 0 {
            log.insert(
                1.min(log.len()),
                format!(
                    "Padding mamba page size by {:.2}% to ensure that mamba page size and attention page size are exactly equal.",
                    100.0 * (st.page_bytes - st.spec_page_bytes) as f64 / st.spec_page_bytes as f64
                ),
            );
        }
    }
    if graphs_in_budget && graphs > 0 {
        log.push(format!(
            "Estimated CUDA graph memory: {:.2} GiB total (estimated)",
            gib(graphs as f64)
        ));
    }
    if available <= 0 {
        log.push(
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
                .into(),
        );
    } else {
        log.push(format!(
            "Available KV cache memory: {:.2} GiB",
            gib(available as f64)
        ));
        if !starts && v0 {
            // V0 (`worker.py` `raise_if_cache_size_invalid`, 0.6.4): the pool's tokens.
            log.push(format!(
                "ValueError: The model's max seq len ({max_len}) is larger than the maximum number of tokens that can be stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
            ));
        } else if !starts {
            let needed = layer_bytes_for(max_len);
            log.push(format!(
                "ValueError: To serve at least one request with the models's max seq len ({max_len}), ({:.2} GiB KV cache is needed, which is larger than the available KV cache memory ({:.2} GiB). Based on the available memory, the estimated maximum model length is {max_fit}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                gib(needed as f64),
                gib(available as f64)
            ));
        } else {
            log.push(format!("GPU KV cache size: {} tokens", thousands(tokens)));
            log.push(format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                thousands(max_len),
                max_concurrency
            ));
            if captured.is_some() && !graphs_in_budget {
                log.push(format!(
                    "Graph capturing finished, took {:.2} GiB (estimated)",
                    gib(graphs as f64)
                ));
            }
        }
    }
    // Up to 0.19 the graphs are captured after the KV cache is allocated: they must fit what
    // the budget and the CUDA context leave of the device, or `capture_model` runs out of memory.
    // The profile run's peak is inside the budget but released before the KV cache is allocated
    // (`torch.cuda.empty_cache()` after `profile_run` in `determine_available_memory`, 0.8.3 and
    // 0.8.5; `memory_profiling`'s exit, 0.10.1 and 0.11.0), so the capture may use it too.
    // V1 before 0.9 and V0 0.6.4 count the context inside the budget
    // (`engine::vllm_context_in_budget`). From 0.9 the communicators that exist at V1's
    // baseline sit beside the budget too (`non_torch::vllm_init_communicators`).
    let init_comms = non_torch::vllm_init_communicators(t, gpu, k, v1);
    let context = if engine::vllm_context_in_budget(k, v1) {
        0
    } else {
        gpu.context_bytes()
    } + init_comms.as_ref().map_or(0, |c| c.0);
    let beyond = if graphs_in_budget { 0 } else { graphs };
    let left = total as i128 - budget as i128 - context as i128;
    let left_for_graphs = left + activation as i128;
    let graphs_fail = starts && beyond > 0 && beyond as i128 > left_for_graphs;
    let context_fail = starts && beyond == 0 && left_for_graphs < 0;
    // V1 from 0.8 warms the sampler up after `capture_model`, on the last PP rank
    // (`compile_or_warm_up_model`, read at 0.8.3, 0.8.5, 0.11.0 to 0.14.0 and 0.19.0:
    // "This is called after `capture_model` on purpose to prevent memory buffers from being
    // cleared"): a dummy forward over `min(max_num_seqs, max_num_batched_tokens)` tokens, then
    // `_dummy_sampler_run` over as many rows, with the KV cache and the graphs' pool held. It
    // needs what the profile's released peak and the device beyond the budget leave once the
    // graphs are captured; out of memory there, `_dummy_sampler_run` re-raises with its own
    // message. PyTorch memory the profile leaves reserved but unallocated is counted by neither
    // vLLM nor this check (see BENCHMARKS.md: the 0.19 gpt-oss-20b runs). Checked at PP 1
    // only: the figures here are a typical stage's, not the last rank's.
    // From 0.20 a hybrid model's pool must hold one state block for each of the `max_num_seqs`
    // sequences the full decode graphs are captured for, or `initialize_kv_cache` refuses before
    // any graph is captured or warmed up (`engine::vllm_mamba_blocks_short`).
    let mamba_fails =
        starts && engine::vllm_mamba_blocks_short(k, is_hybrid(t), max_num_seqs, num_blocks);
    let graphs_fail = graphs_fail && !mamba_fails;
    let context_fail = context_fail && !mamba_fails;
    let warmup_fails = starts
        && !mamba_fails
        && !graphs_fail
        && !context_fail
        && v1
        && Engine::Vllm.version_in_force(k) >= [0, 8, 0]
        && k.pp == 1
        && {
            // The MoE workspace the profile grew is held through both, at its profile size.
            let kept = Held {
                workspace_kept: true,
                ..held
            };
            let warm = forward_peak_held(t, reqs, k, compiled, kept).max(
                sampler_peak(t, reqs, reqs, k, sorts) + sampler::vllm_sampler_rows(t, reqs, k, v1),
            ) + sampler::vllm_profile_kept(t, reqs, k, gpu, v1)
                + workspace;
            warm as i128 > left_for_graphs - beyond as i128
        };
    let starts = starts && !mamba_fails && !graphs_fail && !context_fail && !warmup_fails;
    if mamba_fails {
        // The engine's words (`config/compilation.py`, 0.20.0 to 0.23.0); the pool's lines are
        // printed before it, no graph line after.
        log.retain(|l| !l.starts_with("Graph capturing finished"));
        log.push(format!(
            "ValueError: max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most {num_blocks} or increase gpu_memory_utilization."
        ));
    }
    if warmup_fails {
        log.push(format!(
            "RuntimeError: CUDA out of memory occurred when warming up sampler with {reqs} dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine. (estimated: after the KV cache and {:.2} GiB of CUDA graphs, {:.2} GiB is left for the warm-up's forward and sampler)",
            gib(beyond as f64),
            gib((left_for_graphs - beyond as i128).max(0) as f64)
        ));
    }
    if context_fail {
        log.push(format!(
            "torch.OutOfMemoryError: CUDA out of memory: the budget ({:.2} GiB) and the CUDA context exceed the device (estimated); lower --gpu-memory-utilization",
            gib(budget as f64)
        ));
    }
    if graphs_fail {
        // The graph line is not printed: the capture fails.
        log.retain(|l| !l.starts_with("Graph capturing finished"));
        log.push(graph_capture_failure(
            t,
            gpu,
            k,
            v1,
            captured.as_ref(),
            beyond,
            left_for_graphs,
            activation,
            max_num_seqs,
            mnbt,
        ));
    }
    if let Some(why) = fallback {
        log.insert(
            0,
            format!("{why} is not supported by the V1 Engine. Falling back to V0."),
        );
    }
    let series = Engine::Vllm.version_in_force(k);
    let mut assumes: Vec<String> = vec![if v0 {
        String::from("vLLM V0 (worker.determine_num_available_blocks, ModelRunner.profile_run with top-k/top-p sampling, EngineArgs defaults; V0 runs up to 0.7, and from 0.8 to 0.10 where V1 falls back: compute capability < 8.0, fp32, an fp8 KV cache off Hopper, VLLM_USE_V1=0)")
    } else {
        // The releases whose start-up path was read; a later series adds its own reading
        // (BENCHMARKS.md, "vLLM past 0.20").
        let later = match series[..2] {
            [0, 23] => ", 0.22.1 and 0.23.0",
            [0, 24] => ", 0.22.1, 0.23.0 and 0.24.0",
            [0, 25] => ", 0.22.1, 0.23.0, 0.24.0, 0.25.0 and 0.25.1",
            [0, 26] => ", 0.22.1, 0.23.0, 0.24.0, 0.25.0, 0.25.1 and 0.26.0",
            _ => " and 0.22.1",
        };
        format!("vLLM V1 (gpu_worker.determine_available_memory, kv_cache_utils, arg_utils defaults for `vllm serve`; read at 0.10.1, 0.11.0, 0.14.1, 0.19.0, 0.20.0, 0.21.0{later})")
    }];
    if !v0 && series >= [0, 22, 0] {
        // What `engine::vllm_v2_runner` let through: the V1 runner of 0.22 on.
        let (s0, s1) = (series[0], series[1]);
        assumes.push(match k.vllm_v2_runner {
            Some(false) => format!("the V1 model runner (v1/worker/gpu_model_runner.py), as VLLM_USE_V2_MODEL_RUNNER=0 or a feature the V2 runner lacks makes {s0}.{s1} take it (--vllm-use-v2-model-runner 0)"),
            _ if series >= [0, 25, 0] => format!("the V1 model runner (v1/worker/gpu_model_runner.py), which {s0}.{s1} takes for a hybrid model or one with experts outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (config/vllm.py _is_default_v2_model_runner_model)"),
            _ if series >= [0, 24, 0] => format!("the V1 model runner (v1/worker/gpu_model_runner.py), which {s0}.{s1} takes for a model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (config/vllm.py use_v2_model_runner)"),
            _ => format!("the V1 model runner (v1/worker/gpu_model_runner.py), which {s0}.{s1} takes for a model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, an MoE or a checkpoint with a quantization_config (config/vllm.py use_v2_model_runner)"),
        });
    }
    if !v0 && series >= [0, 25, 0] {
        assumes.push(String::from("no frontend multimodal IPC reserve: 0.25 on carve --mm-ipc-gpu-memory-gb (default 0) and, under a GPU video decoder (PyNvVideoCodec; the default backend is opencv), 128 MiB and a 1.8 GiB CUDA context per API server out of the KV cache (gpu_worker.py _reserve_mm_ipc_gpu_memory); vram takes neither, so a start that sets one has a smaller pool than this"));
    }
    if t.blocks.storage.quant == vram_model::blocks::Quant::Mxfp4
        || k.quantization == Quantization::Mxfp4
    {
        let (kernel, im, hm) = engine::vllm_mxfp4_layout(k, gpu);
        let prepad = super::weights::vllm_mxfp4_value_prepad(k);
        assumes.push(String::from(match (kernel, im, hm) {
            ("Triton", ..) if prepad => "MXFP4 experts in the Triton layout (Hopper from 0.12, whose wheel builds triton_kernels): the intermediate size per GPU padded to 64, the expert biases in fp32, the scales twice: the checkpoint's stay registered beside HopperMXScaleLayout's padded copy (torch 2.9; _swizzle_mxfp4), and each expert tensor's two dims padded to multiples of 64 bytes by HopperMXValueLayout (the triton_kernels vendored in the wheels of 0.17-0.21)",
            ("Marlin", ..) => "MXFP4 experts in the Marlin layout (compute capability < 9, or Hopper before 0.12, whose Triton path needs the optional triton_kernels package that vLLM's wheel does not bring until 0.12): the hidden size padded to 256 and the intermediate size per GPU to 128 (Mxfp4MoEMethod.create_weights)",
            ("Triton", ..) => "MXFP4 experts in the Triton layout (Hopper from 0.12, whose wheel builds triton_kernels): the intermediate size per GPU padded to 64, the expert biases in fp32, and the scales twice: the checkpoint's stay registered beside HopperMXScaleLayout's padded copy (torch 2.9; _swizzle_mxfp4)",
            _ => "MXFP4 experts in the FlashInfer/ROCm layout: the hidden and intermediate sizes padded to 256 (128 for ROCm before 0.11)",
        }));
    }
    if layout.groups.len() > 1 || layout.groups.iter().any(|g| g.kind == "mla") {
        assumes.push(String::from("KV layout per layer kind (kv_groups): layers grouped by spec, one page size for all groups (v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, read at a 2026 main commit; 0.11's rule may differ when two kinds' layer counts are within 1.5x); Mamba2/Gated DeltaNet state in MambaStateShapeCalculator's shapes, the attention block raised to 16 x ceil(state page / 16 tokens' page) and the state padded to it (models/config.py HybridAttentionMambaModelConfig); MLA blocks of 64 tokens on Hopper (FlashMLA) and 128 on Blackwell (CUTLASS MLA), platforms/cuda.py; a hybrid model's CUDA graphs counted as any model's in the mode vLLM resolves (FULL_AND_PIECEWISE by default: MambaModelConfig), its state layers' profile run not modelled (vision encoders: see the encoder profile line)"));
    }
    let asked_any = k.cudagraph_mode.is_some()
        || k.compilation_mode.is_some()
        || k.optimization_level.is_some();
    if let (true, Some(mode)) = (asked_any, graphs::vllm_graph_mode(t, k, v1)) {
        // The user's graph and compilation knobs as vLLM resolves them
        // (`engine::vllm_cudagraph_mode`; the release's sources: `vllm_graph_mode_source`).
        use CudagraphMode as M;
        let compiles = engine::vllm_compiles(k);
        let inductor = engine::vllm_inductor(k);
        let asked = k.cudagraph_mode;
        let src = engine::vllm_graph_mode_source(k);
        let (read, downgrade, file, support) =
            (src.read, src.downgrade, src.file, src.state_support);
        assumes.push(match (asked, mode) {
            (_, M::None) if k.enforce_eager && inductor => "CUDA-graph mode NONE: --enforce-eager turns the graphs off and drops the level to -O0, which leaves the --compilation-mode asked in force, so torch.compile still runs ('Enforce eager set, overriding optimization level to -O0', VllmConfig.__post_init__ at 0.12-0.16; from 0.17 it sets the mode NONE too)".into(),
            (_, M::None) if k.enforce_eager => format!("CUDA-graph mode NONE: --enforce-eager overrides --cudagraph-mode and the compilation mode (VllmConfig.__post_init__, {read})"),
            (Some(a), M::None) if a != M::None && !a.has_piecewise() && !compiles => "CUDA-graph mode NONE: at 0.12 every graph mode but NONE needs vLLM's own compilation, which -O0 or --compilation-mode other than vllm-compile turn off ('Cudagraph mode ... is not compatible with compilation mode ... Overriding to NONE', VllmConfig.__post_init__ at 0.12.0; from 0.13 only piecewise modes do), so no graphs and no Mamba-blocks check".into(),
            (Some(a), M::None) if a.has_piecewise() && !compiles => format!("CUDA-graph mode NONE: a piecewise mode needs vLLM's own compilation, which -O0, --compilation-mode other than vllm-compile or TORCH_COMPILE_DISABLE=1 turn off ('Cudagraph mode ... is not compatible with compilation mode ... Overriding to NONE', VllmConfig.__post_init__, {read}), so no graphs and no Mamba-blocks check"),
            (None, M::None) if k.optimization_level == Some(0) && inductor => format!("CUDA-graph mode NONE: -O0's default (OPTIMIZATION_LEVEL_00); torch.compile still run (the --compilation-mode asked); no graphs captured and no Mamba-blocks check ({read})"),
            (None, M::None) if k.optimization_level == Some(0) => format!("CUDA-graph mode NONE: -O0's default (OPTIMIZATION_LEVEL_00), with no torch.compile; no graphs captured and no Mamba-blocks check ({read})"),
            (None, M::None) if k.optimization_level == Some(1) => format!("CUDA-graph mode NONE: the level's PIECEWISE (-O1) needs vLLM's own compilation, which --compilation-mode other than vllm-compile (or TORCH_COMPILE_DISABLE=1) turns off ('Overriding to NONE', VllmConfig.__post_init__, {read}); no graphs captured and no Mamba-blocks check"),
            (None, M::None) => format!("CUDA-graph mode NONE: the level's FULL_AND_PIECEWISE needs vLLM's own compilation, which --compilation-mode other than vllm-compile (or TORCH_COMPILE_DISABLE=1) turns off ('Overriding to NONE', VllmConfig.__post_init__, {read}); no graphs captured and no Mamba-blocks check"),
            (Some(M::Full), M::FullAndPiecewise) => format!("CUDA-graph mode FULL_AND_PIECEWISE: FULL asked, which {downgrade} downgrades for a hybrid model, its state layers' backends supporting full graphs for uniform batches only ({support}; {file}, {read})"),
            (Some(M::Full), M::FullDecodeOnly) => format!("CUDA-graph mode FULL_DECODE_ONLY: FULL asked on a hybrid model, whose state layers support full graphs for uniform batches only; without vLLM's compilation attention is not a splitting op, so {downgrade} keeps the decode graphs alone ({file}, {read})"),
            (_, M::None) if inductor => "CUDA-graph mode NONE (--cudagraph-mode none): no graphs captured, torch.compile still run".into(),
            (_, M::None) => "CUDA-graph mode NONE (--cudagraph-mode none): no graphs captured, and no torch.compile (the compilation mode is NONE)".into(),
            (None, M::Piecewise) => "CUDA-graph mode PIECEWISE: -O1's default (OPTIMIZATION_LEVEL_01): piecewise graphs at every capture size, no whole-forward graphs, so no Mamba-blocks check at 0.20+".into(),
            (_, M::Piecewise) => "CUDA-graph mode PIECEWISE (--cudagraph-mode piecewise): piecewise graphs at every capture size, no whole-forward graphs, so no Mamba-blocks check at 0.20+".into(),
            (_, M::FullDecodeOnly) => "CUDA-graph mode FULL_DECODE_ONLY (--cudagraph-mode full-decode-only): whole-forward decode graphs up to max_num_seqs, no piecewise graphs".into(),
            (_, M::Full) => format!("CUDA-graph mode FULL (--cudagraph-mode full): whole-forward graphs at every capture size; taken as asked, though an attention backend without full support for mixed batches downgrades it ({downgrade}), which is not modelled"),
            (Some(_), M::FullAndPiecewise) => format!("CUDA-graph mode FULL_AND_PIECEWISE (--cudagraph-mode full-and-piecewise, {})", src.default),
            (None, M::FullAndPiecewise) => "CUDA-graph mode FULL_AND_PIECEWISE, the level's default (-O2 and -O3), with vLLM's own compilation".into(),
        });
    }
    if engine::is_rocm(gpu) {
        assumes.push(format!("ROCm: vLLM's 'model weights' is the device memory in use that loading added (RocmPlatform.get_current_memory_usage: mem_get_info, not max_memory_allocated, and no empty_cache), so the caching allocator's rounding is counted in it (2 MiB segments for tensors of 10 MiB and more); cached temporaries of the load are not; {}", if engine::vllm_graphs_in_budget(k, v1, gpu) { "the CUDA-graph estimate profiled and subtracted before the KV cache as on CUDA (is_cuda_alike, gpu_worker.py 0.26.0)" } else { "no CUDA-graph profiling inside the window on ROCm (gpu_worker.py, 0.18; is_cuda() to 0.25.1)" }));
    }
    if let Some(note) = sampler::vllm_profile_kept_note(t, reqs, k, gpu, v1) {
        assumes.push(note);
    }
    if held.moe_workspace.is_some() {
        let experts = match super::weights::quantization_in_force(t, k) {
            Quantization::Fp8 if gpu.sm_major > 8 || gpu.sm_minor >= 9 => {
                "the FP8 experts' caches (Fp8MoEMethod's modular kernel, TritonExperts.workspace_shapes, read at 0.14.1, 0.17.1, 0.19.1 and 0.22.1)"
            }
            Quantization::Fp8 => {
                "the weight-only FP8 experts' caches (Fp8MoEMethod's modular kernel, MarlinExperts.workspace_shapes, read at 0.14.1 and 0.19.1)"
            }
            Quantization::Mxfp4 => {
                "the MXFP4 experts' caches on Marlin (FusedMoEKernel with MarlinExperts, its padded hidden and intermediate sizes, read at 0.17.1, 0.18.1 and 0.19.1)"
            }
            _ => {
                "the unquantized experts' caches (TritonExperts.workspace_shapes, read at 0.14.1 and 0.19.1)"
            }
        };
        assumes.push(format!(
            "MoE: {experts} are views into vLLM's persistent workspace ({:.1} MiB after the profile's forward over {mnbt} tokens; v1/worker/workspace.py), which stays allocated under the dummy sampler and is already there when the CUDA graphs are captured",
            workspace as f64 / (1u64 << 20) as f64
        ));
    }
    let mla_workspaces = super::weights::vllm_mla_backend_workspaces(t, k, gpu);
    if mla_workspaces > 0 {
        let (modules, files) = if mla_workspaces > 128 << 20 {
            (
                "FlashInfer MLA's and CUTLASS MLA's (compute capability 10.x) modules each make",
                "flashinfer_mla.py, cutlass_mla.py",
            )
        } else {
            ("FlashInfer MLA's module makes", "flashinfer_mla.py")
        };
        assumes.push(format!("MLA: the weights include {} MiB of attention-backend workspace, which vLLM allocates inside the load it measures: its selector imports every MLA backend on its list from 0.11.1, and {modules} a 128 MiB buffer on import ({files}, platforms/cuda.py, read at 0.11.1 to 0.23.0); kv_a_proj_with_mqa and q_a_proj are whole on every TP rank (ReplicatedLinear, deepseek_v2.py)", mla_workspaces >> 20));
    }
    match engine::vllm_dequant_linears(t, k, gpu) {
        Some(from) if mnbt >= from => assumes.push(String::from(if from > 0 {
            "plain AWQ kernel (--quantization awq, or compute capability < 8.0 where AWQ-Marlin cannot run): from 256 tokens a step AWQLinearMethod.apply dequantizes each linear's whole weight to fp16 and runs torch.matmul, so the profile run holds the largest such weight beside its layer's live set (awq.py, 0.6.4 to 0.20.0)"
        } else {
            "plain GPTQ kernel (--quantization gptq, or compute capability < 8.0 where GPTQ-Marlin cannot run): gptq_gemm allocates the whole fp16 weight (temp_dq) on every call, so the profile run holds the largest such weight beside its layer's live set (gptq.py, csrc/quantization/gptq/q_gemm.cu)"
        })),
        _ => {}
    }
    if encoder_profile.is_some() {
        assumes.push(String::from("V1 multimodal encoder profile (gpu_model_runner.py profile_run, v1/worker/utils.py MultiModalBudget; read at 0.8.5, 0.9.2, 0.10.1, 0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.18.0, 0.19.0): the largest item from the processor's longest_edge (a Qwen3-VL video as 12.5 formatted tokens per soft token through 0.12; Qwen2-VL at 0.10.1 and 0.10.2, qwen2_vl.py: the image of the most features within max_pixels, or a video of as many such frames as max_model_len holds, at most 16, when it has more tokens; its tower's native QuickGELU, custom ops being off under Inductor (on, so the CUDA kernels, under --enforce-eager); Qwen2.5-VL's the same items, qwen2_5_vl.py: its windowed tower's RMSNorms and SwiGLU native by default and fused under --enforce-eager, flash-attn's varlen windows keeping no score matrix), the vision tower's eager forward over it with the processor's pixels (cast to the model dtype from 0.11), and its outputs (out_hidden x (1 + deepstack levels) wide, expanded to the budget at 0.11 and to the largest item at 0.12) held with the pixels through the language model's dummy run and the sampler; Qwen3-VL's deepstack buffers (levels x max_num_batched_tokens x hidden) counted in the weights; Mistral-format Pixtral (pixtral.py, read at a September 2025 commit, the same code assumed at the version): ceil(image_size / (patch x merge))^2 tokens per image, the tower's dense block-diagonal mask over all profiled patches in the model dtype from 0.12 on (no xFormers in the default installation, assumed from 0.12) and PyTorch's padded copy of it in every memory-efficient SDPA call; Gemma 4 (gemma4_mm.py at 0.19.0): a video of 32 dummy 224 x 224 frames at 70 soft tokens (2,496 budgeted tokens), each frame padded to 630 patches and run alone through transformers' Gemma4VisionModel, the frames' outputs and pixels held"));
    } else if v1 && t.blocks.vision.is_some() {
        assumes.push(String::from("V1 multimodal encoder profile not counted: vLLM runs this model's vision tower on its largest items before the language model and holds the outputs (gpu_model_runner.py profile_run), but the largest-item rules are modelled for Qwen3-VL's and Qwen3.5's dynamic-resolution towers, Qwen2-VL's and Qwen2.5-VL's at vLLM 0.10.1 and 0.10.2 only, Mistral's Pixtral, Llama 4's tiles and Gemma 4 without an audio tower only, so the KV pool is likely overestimated"));
    }
    if cross.is_some() {
        assumes.push(String::from("V0 encoder-decoder profile run (Llama 3.2 Vision): max_num_seqs dummy requests, each with a maximal image (4 tiles of 560 pixels), the vision encoder over all of them at once: fp32 pixels, the aspect-ratio attention mask, the kept intermediate layers' outputs and one layer's MLP (enc_dec_model_runner.py, mllama.py at 0.6.3)"));
    }
    // Weights that with the CUDA context exceed the device never finish loading: the loader
    // stops on PyTorch's out-of-memory error, with figures only PyTorch knows, and no line after
    // it (not `Model loading took`) is printed.
    if weights.saturating_add(gpu.context_bytes()) > total {
        log = vec![load_failure(weights, gpu.context_bytes(), total)];
    }
    Ok(Capacity {
        engine: Engine::Vllm,
        engine_version: version_label(Engine::Vllm, k),
        total_bytes: total,
        budget_bytes: budget,
        memory_fraction: util,
        weights_bytes: weights,
        non_torch_bytes: non_torch,
        activation_peak_bytes: activation,
        cuda_graph_bytes: graphs,
        cuda_graph_in_budget: graphs_in_budget,
        kv_cache_bytes: kv_bytes,
        kv_cache_tokens: tokens,
        kv_cache_blocks: num_blocks,
        kv_groups: layout.groups,
        max_concurrency,
        max_model_len: max_len,
        max_num_seqs,
        max_num_batched_tokens: mnbt,
        starts,
        max_model_len_that_fits: max_fit,
        log,
        assumes: assumes.into_iter().chain([
            "the device total is the GPU catalog's memory (torch's total_memory, as vLLM's total_gpu_memory; a driver reading where the catalog knows no torch figure)",
            if v1_07 {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens and the logits of every one of those tokens, all-gathered over TP (the GPU's part, the gathered tensor and its contiguous copy), plus the hidden states; V1 before 0.8 runs no sampler in the profile (gpu_model_runner.profile_run, read at 0.7.2)"
            } else if compiled && sorts {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens under torch.compile and the dummy sampler's top-k/top-p sort (V1 before 0.17: logits.sort over min(max_num_seqs, tokens) rows with PyTorch's CUDA sort buffers) plus the hidden states"
            } else if compiled && k.flashinfer_sampler && engine::vllm_flashinfer_profiled(k) {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens under torch.compile (residual and gate_up with the normed input or the activation) and the sampler's logits, fp32 copy, FlashInfer's masked logits and probabilities over min(max_num_seqs, tokens) rows (top_k_top_p_sampling_from_logits, no sort; --flashinfer-sampler) plus the hidden states (read from llama.py and the V1 sampler at 0.10.1; the same layer structure assumed for every model)"
            } else if compiled {
                "activation peak: the profile run's larger of one layer's live set over max_num_batched_tokens under torch.compile (residual and gate_up with the normed input or the activation) and the sampler's logits, fp32 copy, probabilities and noise over min(max_num_seqs, tokens) rows (top-k/top-p by the Triton kernel, 0.17+) plus the hidden states (read from llama.py and the V1 sampler; the same layer structure assumed for every model)"
            } else if v0 || sorts {
                "activation peak: the profile run's larger of one eager layer's live set over max_num_batched_tokens (the layer's input, which the model's layer loop holds, the residual, the normed input, gate_up where the MLP keeps it bound (llama.py's LlamaMLP frees it after the activation; Qwen2MLP and the others keep it), the activation, down_proj's output and at TP > 1 its all-reduce result, a new tensor on every CUDA path) and the top-k/top-p sampler over min(max_num_seqs, tokens) rows with PyTorch's CUDA sort buffers plus the hidden states (read from llama.py and sampler.py; the same layer structure assumed for every model)"
            } else {
                "activation peak: the profile run's larger of one eager layer's live set over max_num_batched_tokens (the layer's input, which the model's layer loop holds, the residual, the normed input, gate_up where the MLP keeps it bound (llama.py's LlamaMLP frees it after the activation; Qwen2MLP and the others keep it), the activation, down_proj's output and at TP > 1 its all-reduce result, a new tensor on every CUDA path) and the sampler's logits, fp32 copy, probabilities and noise over min(max_num_seqs, tokens) rows plus the hidden states (read from llama.py and the V1 sampler; the same layer structure assumed for every model)"
            },
            if graphs_in_budget {
                "CUDA graphs (graphs.rs): the version's capture sizes; the shared pool holds the largest capture's live set twice (the capture and its warm-up) and, for FULL graphs on Hopper, FlashAttention 3's 32-split accumulators in a segment of their own (the larger of the two where FULL graphs are captured alone; not for the models vLLM runs on Triton attention: Gemma 3 and the other bidirectional-image-token models from 0.13, by the release's list or the config's own is_mm_prefix_lm from 0.17 and Gemma 4's use_bidirectional_attention from 0.20, Gemma 4's mixed 256/512 head sizes from 0.20; nor under a backend other than FLASH_ATTN chosen with --attention-backend); 192 KiB of driver memory per layer per size per mode (the median of vLLM 0.19's own per-graph profile on the fit half); where custom all-reduce is off (PCIe, no P2P, across nodes, TP sizes other than 2/4/6/8) PyNccl's all-reduces captured in every graph, 68 KiB each and 212 KiB over the network (measured on vLLM 0.10.1 logs); gpt-oss's own capture sizes (to 1024); subtracted before the KV cache as 0.20+ does (estimated)"
            } else {
                "CUDA graphs (graphs.rs): the version's capture sizes; the shared pool holds the largest capture's live set twice (the capture and its warm-up) and, for FULL graphs on Hopper, FlashAttention 3's 32-split accumulators in a segment of their own (the larger of the two where FULL graphs are captured alone; not for the models vLLM runs on Triton attention: Gemma 3 and the other bidirectional-image-token models from 0.13, by the release's list or the config's own is_mm_prefix_lm from 0.17 and Gemma 4's use_bidirectional_attention from 0.20, Gemma 4's mixed 256/512 head sizes from 0.20; nor under a backend other than FLASH_ATTN chosen with --attention-backend); 192 KiB of driver memory per layer per size per mode (the median of vLLM 0.19's own per-graph profile on the fit half); where custom all-reduce is off (PCIe, no P2P, across nodes, TP sizes other than 2/4/6/8) PyNccl's all-reduces captured in every graph, 68 KiB each and 212 KiB over the network (measured on vLLM 0.10.1 logs); gpt-oss's own capture sizes (to 1024); captured after the KV cache, so they must fit what the budget, the CUDA context and the profile's released peak leave (estimated)"
            },
        ].map(String::from)).chain(graphs::driver_line(k, captured.is_some())).chain([non_torch_source]).chain(init_comms.map(|c| c.1)).collect(),
    })
}

/// The line for a start-up whose CUDA graphs do not fit what the budget leaves: what the engine
/// raises in `capture_model`, and the three changes that fix it, each checked against the model
/// (`--enforce-eager`; the largest `--gpu-memory-utilization` that leaves room for the graphs and
/// still holds one request; the largest capture size whose graphs fit).
#[allow(clippy::too_many_arguments)]
fn graph_capture_failure(
    t: &Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
    captured: Option<&Graphs>,
    need: u64,
    left: i128,
    activation: u64,
    max_num_seqs: u64,
    mnbt: u64,
) -> String {
    let gib = |b: f64| b / GIB;
    let total = gpu.memory_bytes as f64;
    let n = captured.map_or(0, |g| g.sizes.len());
    let modes = match captured.map(|g| (g.piecewise, !g.full_sizes.is_empty())) {
        Some((true, true)) => "piecewise and full",
        Some((false, true)) => "full",
        _ => "piecewise",
    };
    let modes = if v1 { modes } else { "full" };
    let largest = captured
        .and_then(|g| {
            if g.piecewise {
                g.sizes.last()
            } else {
                g.full_sizes.last()
            }
        })
        .copied()
        .unwrap_or(0);
    let mut fixes = vec!["add --enforce-eager".to_string()];
    let context = if engine::vllm_context_in_budget(k, v1) {
        0.0
    } else {
        gpu.context_bytes() as f64
    } + non_torch::vllm_init_communicators(t, gpu, k, v1).map_or(0.0, |c| c.0 as f64);
    let u = ((total - need as f64 - context + activation as f64) / total * 100.0).floor() / 100.0;
    if u > 0.0 {
        let lower = Knobs {
            gpu_memory_utilization: Some(u),
            ..*k
        };
        if vllm(t, gpu, &lower).is_ok_and(|c| c.starts) {
            fixes.push(format!("lower --gpu-memory-utilization to {u:.2}"));
        }
    }
    let sizes = captured.map(|g| g.sizes.clone()).unwrap_or_default();
    if let Some(&cap) =
        sizes.iter().rev().skip(1).find(|&&c| {
            vllm_graphs(t, gpu, k, v1, max_num_seqs, mnbt, Some(c)).bytes() as i128 <= left
        })
    {
        fixes.push(if !v1 {
            format!("capture fewer sizes (--max-num-seqs {cap})")
        } else {
            let list: Vec<String> = sizes
                .iter()
                .filter(|&&s| s <= cap)
                .map(u64::to_string)
                .collect();
            format!(
                "capture fewer sizes ({})",
                vllm_compilation_config_flag(
                    "cudagraph_capture_sizes",
                    &format!("[{}]", list.join(", "))
                )
            )
        });
    }
    format!(
        "torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs: {n} capture sizes ({modes}) up to {largest} tokens need {:.2} GiB beyond the KV cache, and {:.2} GiB is left of the device after the budget{}, with the profile's released peak (estimated); {}",
        gib(need as f64),
        gib(left.max(0) as f64),
        if context > 0.0 {
            " and the CUDA context"
        } else {
            " (which holds the CUDA context before 0.9)"
        },
        match fixes.len() {
            1 => fixes[0].clone(),
            2 => format!("{} or {}", fixes[0], fixes[1]),
            _ => format!("{}, {} or {}", fixes[0], fixes[1], fixes[2]),
        }
    )
}

/// vram's estimate of the engine's failure when a GPU's share of the weights and the CUDA context
/// exceed the device: the loader runs out of memory before the KV cache is sized. Marked
/// `(estimated)`: the engine prints PyTorch's own message there, whose figures vram cannot know.
pub(super) fn load_failure(weights: u64, context: u64, total: u64) -> String {
    format!(
        "torch.OutOfMemoryError: CUDA out of memory while loading the weights: {:.2} GiB of them per GPU and the CUDA context ({:.2} GiB) exceed the {:.2} GiB device (estimated)",
        weights as f64 / GIB,
        context as f64 / GIB,
        total as f64 / GIB
    )
}

/// The device memory free when vLLM V1 takes its start-up snapshot, as vram estimates it on a
/// GPU nothing else uses: what `request_memory` compares `gpu_memory_utilization × total` with.
pub(super) struct FreeAtStart {
    /// The device total (torch's `total_memory`), bytes.
    pub(super) total: u64,
    /// Free at the snapshot, bytes.
    pub(super) free: u64,
    /// What holds the rest, in words.
    pub(super) held: String,
    /// The release's text names the device (`init_snapshot.device_`, `cuda:0`: at 0.14.1, not
    /// at 0.13.0; 0.14.0 not read). Sizes are `round(b / GiB, 2)` as Python writes it at every
    /// release (`format_gib` from 0.14.1).
    names_device: bool,
}

impl FreeAtStart {
    /// The largest utilization, in hundredths, that the check lets through: `ceil(total × u)`
    /// at most the free memory (vLLM's `CacheConfig` takes at most 1).
    pub(super) fn ceiling(&self) -> f64 {
        (1..=100u32)
            .rev()
            .map(|h| f64::from(h) / 100.0)
            .find(|&u| (self.total as f64 * u).ceil() as u64 <= self.free)
            .unwrap_or(0.0)
    }

    /// `78.68 GiB`.
    pub(super) fn free_text(&self) -> String {
        format!("{:.2} GiB", self.free as f64 / GIB)
    }

    /// The engine's ValueError for `util` asking `requested` bytes.
    fn message(&self, util: f64, requested: u64) -> String {
        let g = |b: u64| python_round2(b as f64 / GIB);
        format!(
            "ValueError: Free memory on device{} ({}/{} GiB) on startup is less than desired GPU memory utilization ({util}, {} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            if self.names_device { " cuda:0" } else { "" },
            g(self.free),
            g(self.total),
            g(requested)
        )
    }
}

/// Python's `str(round(x, 2))`: at most two decimals, trailing zeros dropped but one
/// (`78.7`, `79.19`, `78.0`).
fn python_round2(x: f64) -> String {
    let s = format!("{:.2}", (x * 100.0).round() / 100.0);
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

/// vLLM V1's start-up check on the share of the device it asks for, from 0.9.1
/// (`v1/worker/gpu_worker.py` `init_device` at 0.9.1 to 0.13.0, `request_memory` in
/// `v1/worker/utils.py` from 0.14.1, read at every release in 0.9.1-0.23.0 but 0.14.0, 0.17.0,
/// 0.18.0, 0.20.0, 0.22.0; absent at 0.8.5 and 0.9.0, which read `init_gpu_memory` and check
/// nothing, and in V0's `worker.py`): `requested_memory = ceil(total × gpu_memory_utilization)`
/// must not exceed the free memory of the snapshot, or `ValueError: Free memory on device ... on
/// startup is less than desired GPU memory utilization`. The snapshot comes once the context
/// exists and before any kernel (the bare context, [`Gpu::bare_context_bytes`] under the CUDA
/// 12.8 of the releases' torch; vLLM 0.19's own `worker init memory snapshot` reads 0.51 GiB on
/// an H100 at TP 1) and, from 0.11.0, after `init_worker_distributed_environment` ("Initialize
/// the distributed environment BEFORE taking memory snapshot"), so the process groups'
/// communicators are held too ([`non_torch::vllm_init_communicators`]); from 0.9.1 to 0.10.2 it
/// comes before them. `None` where the release makes no such check.
pub(super) fn vllm_free_at_start(
    t: &Transformer,
    gpu: &Gpu,
    k: &Knobs,
    v1: bool,
) -> Option<FreeAtStart> {
    let v = Engine::Vllm.version_in_force(k);
    if !v1 || v < [0, 9, 1] {
        return None;
    }
    let total = gpu.memory_bytes;
    let context = if gpu.is_rocm() {
        gpu.context_bytes()
    } else {
        gpu.bare_context_bytes([12, 8])
    };
    let comms = if v >= [0, 11, 0] {
        non_torch::vllm_init_communicators(t, gpu, k, v1)
    } else {
        None
    };
    let held = match &comms {
        Some((b, _)) => format!(
            "the CUDA context {:.2} GiB and the communicators of the process groups {:.2} GiB",
            context as f64 / GIB,
            *b as f64 / GIB
        ),
        None => format!("the CUDA context {:.2} GiB", context as f64 / GIB),
    };
    Some(FreeAtStart {
        total,
        free: total.saturating_sub(context + comms.map_or(0, |c| c.0)),
        held,
        names_device: v >= [0, 14, 0],
    })
}
