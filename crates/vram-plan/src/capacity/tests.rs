use super::*;
use vram_model::arch::Model;
use vram_model::catalog;

fn llama3() -> Transformer {
    match catalog::lookup("llama-3-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

#[test]
fn vllm_llama3_8b_on_h100_by_hand() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(8192),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    // Weights: 8,030,261,248 bf16 parameters plus the rotary cache (8192 x 128 x 2 bytes).
    assert_eq!(c.weights_bytes, 2 * 8_030_261_248 + 8192 * 128 * 2);
    // One block of one layer: 16 tokens x 2 x 8 heads x 128 x 2 bytes = 64 KiB; 32 layers.
    let available = c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes;
    assert_eq!(c.kv_cache_blocks, available / (65536 * 32));
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks * 16);
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / 512.0).abs() < 1e-9);
    assert!(c.starts);
    assert_eq!(c.max_model_len_that_fits, 8192);
}

/// vLLM's `SchedulerConfig._verify_args` refuses max_num_batched_tokens < max_num_seqs (0.8.5,
/// 0.9.2, 0.10.1, 0.19.0); from 0.19 a defaulted max_num_seqs is first lowered to the budget
/// (`_set_default_max_num_seqs_and_batched_tokens_args`), so only an asked one is refused.
#[test]
fn vllm_refuses_a_step_budget_below_the_sequences() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], seqs: Option<u64>| Knobs {
        max_num_batched_tokens: Some(512),
        max_num_seqs: seqs,
        max_model_len: Some(8192),
        engine_version: Some(v),
        ..Knobs::default()
    };
    let refused = |k: &Knobs| match capacity(&t, gpu, Engine::Vllm, k) {
        Err(Error::Capacity(m)) => m.contains("must be greater than or equal to max_num_seqs"),
        _ => false,
    };
    assert!(refused(&at([0, 10, 1], None)));
    assert!(refused(&at([0, 19, 0], Some(1024))));
    let c = capacity(&t, gpu, Engine::Vllm, &at([0, 19, 0], None)).unwrap();
    assert_eq!((c.max_num_seqs, c.max_num_batched_tokens), (512, 512));
    assert!(!refused(&at([0, 10, 1], Some(512))));
}

/// SGLang has no counterpart of vLLM's step-budget check in `server_args.py` (0.4.5.post3,
/// 0.5.3); `TpModelWorker` asserts `max_running_requests > 0` after dividing
/// `--max-running-requests` by `--dp-size` under DP attention. Fewer requests than DP ranks is
/// refused with the engine's message; as many is not. `--max-running-requests` also sets the
/// request map's rows (`init_memory_pool`), which the pool's share is taken beside.
#[test]
fn sglang_refuses_fewer_running_requests_than_dp_ranks() {
    let t = model("deepseek-v3");
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let at = |m: Option<u64>, dp_attention: bool| Knobs {
        max_num_seqs: m,
        tp: 8,
        dp: 8,
        dp_attention,
        max_model_len: Some(4096),
        ..Knobs::default()
    };
    match capacity(&t, gpu, Engine::Sglang, &at(Some(4), true)) {
        Err(Error::Capacity(m)) => {
            assert!(
                m.contains("AssertionError: max_running_request is zero"),
                "{m}"
            );
            assert_eq!(m.lines().count(), 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(capacity(&t, gpu, Engine::Sglang, &at(Some(8), true)).is_ok());
    // Without DP attention the requests are not divided.
    assert!(capacity(&t, gpu, Engine::Sglang, &at(Some(4), false)).is_ok());
    // The map's rows follow --max-running-requests: 64 rows leave more for the pool than the
    // default 2,048 or more, never less.
    let small = capacity(&t, gpu, Engine::Sglang, &at(Some(64), true)).unwrap();
    let default = capacity(&t, gpu, Engine::Sglang, &at(None, true)).unwrap();
    assert_eq!(small.kv_cache_tokens, default.kv_cache_tokens);
    assert!(small.starts && default.starts);
}

#[test]
fn bad_knobs_are_refused() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    for k in [
        Knobs {
            gpu_memory_utilization: Some(1.5),
            ..Knobs::default()
        },
        Knobs {
            gpu_memory_utilization: Some(0.0),
            ..Knobs::default()
        },
        Knobs {
            tp: 3,
            ..Knobs::default()
        },
        Knobs {
            max_model_len: Some(1 << 20),
            ..Knobs::default()
        },
    ] {
        assert!(matches!(
            capacity(&t, gpu, Engine::Vllm, &k),
            Err(Error::Capacity(_))
        ));
    }
}

#[test]
fn too_long_a_context_names_the_length_that_fits() {
    let t = match catalog::lookup("llama-3.1-405b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        tp: 8,
        quantization: Quantization::Fp8,
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    if !c.starts {
        assert!(c.max_model_len_that_fits < c.max_model_len);
    }
    // The fitting length is the largest one: one more token needs a block more than the
    // pool has, or it is the model's maximum.
    let mut k2 = k;
    k2.max_model_len = Some(c.max_model_len_that_fits.max(1));
    let c2 = capacity(&t, gpu, Engine::Vllm, &k2).unwrap();
    assert!(
        c.max_model_len_that_fits == 0 || c2.max_model_len_that_fits == c.max_model_len_that_fits
    );
}

#[test]
fn sglang_defaults_follow_the_memory_buckets() {
    let t = llama3();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let c = capacity(&t, h100, Engine::Sglang, &Knobs::default()).unwrap();
    // The H100's torch total (79.19 GiB, whole MiB): reserve max(512 + 8192 x 1.5 + 256 x 2
    // + 128, 10240) = 13440 MiB.
    let mib = (h100.memory_bytes / MIB) as f64;
    assert!((c.memory_fraction - ((mib - 13440.0) / mib * 1000.0).round() / 1000.0).abs() < 1e-9);
    assert_eq!(c.max_num_batched_tokens, 8192);
    let cell = 32 * 8 * 256 * 2;
    assert_eq!(c.kv_cache_bytes, c.kv_cache_tokens * cell);
    assert!(c.starts);
    // One token pool of 32 full layers, pages of one token (8 heads × 256 × 2 B).
    assert_eq!(c.kv_groups.len(), 1);
    assert_eq!(
        (
            c.kv_groups[0].kind,
            c.kv_groups[0].layers,
            c.kv_groups[0].page_bytes
        ),
        ("full", 32, 8 * 256 * 2)
    );
}

fn qwq32b() -> Transformer {
    // Qwen/QwQ-32B's config.json (March 2025), as in vram-cli's serving test data.
    let text = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu",
        "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 131072,
        "max_window_layers": 64, "model_type": "qwen2", "num_attention_heads": 40,
        "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064}"#;
    match vram_model::hf::parse_config(text, "qwq-32b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

#[test]
fn versions_are_read_with_their_patch_level() {
    assert_eq!(parse_version("0.6.5"), Some([0, 6, 5]));
    assert_eq!(parse_version("0.11"), Some([0, 11, 0]));
    assert_eq!(parse_version("v0.4.3.post4"), Some([0, 4, 3]));
    assert_eq!(parse_version("0.1.dev8168+g475c1a0"), Some([0, 1, 0]));
    assert_eq!(parse_version("0.4.3post4"), Some([0, 4, 3]));
    assert_eq!(parse_version("x"), None);
    // `--engine-version` read once: a series or one release, with its post number.
    assert_eq!(parse_engine_version("0.8"), Some(([0, 8, 0], Pin::Series)));
    assert_eq!(
        parse_engine_version("0.8.0"),
        Some(([0, 8, 0], Pin::Release { post: 0 }))
    );
    assert_eq!(
        parse_engine_version("v0.6.3.post1"),
        Some(([0, 6, 3], Pin::Release { post: 1 }))
    );
    assert_eq!(
        parse_engine_version("0.6.4post1"),
        Some(([0, 6, 4], Pin::Release { post: 1 }))
    );
}

/// V0's profile run by hand (Llama-3.1-8B: h 4096, f 14336, vocabulary 128256): one batch of
/// `max_model_len` tokens through the eager layer, whose peak is the residual, the normed
/// input, gate_up, the activation and down_proj's output; at 8192 tokens the top-k/top-p
/// sampler over 256 rows is larger. The RTX 3090 log (vllm#10517) printed 2.07 and 2.99 GiB
/// for 20000 and 29000 tokens, the H100 one (vllm#10511) 1.26 GiB at 8192.
#[test]
fn v0_profile_peak_is_the_eager_layer_or_the_sort() {
    let t = match catalog::lookup("llama-3.1-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    for (len, want) in [
        (20000u64, 20000 * (3 * 4096 + 3 * 14336) * 2),
        (29000, 29000 * (3 * 4096 + 3 * 14336) * 2),
        (8192, 256 * 128256 * 38 + 8192 * 4096 * 2),
    ] {
        let k = Knobs {
            max_model_len: Some(len),
            engine_version: Some([0, 6, 4]),
            ..Knobs::default()
        };
        let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
        assert_eq!(c.activation_peak_bytes, want, "{len}");
    }
}

/// vLLM's eager forward, per `activation::Held` (read at 0.7.2, 0.8.5, 0.10.1, 0.11.0): the
/// model's layer loop holds each layer's input; at TP > 1 `RowParallelLinear`'s all-reduce
/// makes its result as a new tensor (PyNccl's `torch.empty_like`, custom all-reduce's too);
/// `llama.py`'s `LlamaMLP` rebinds `x` so `gate_up` is freed after the activation, Qwen2MLP
/// (Qwen3's) keeps it. 32,768 tokens a step, 16 sequences (the sampler is far below).
#[test]
fn eager_profile_holds_the_layer_input_and_the_all_reduce_result() {
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |tp: u64, version: [u32; 3], eager: bool| Knobs {
        max_model_len: Some(8192),
        max_num_batched_tokens: Some(32768),
        max_num_seqs: Some(16),
        tp,
        enforce_eager: eager,
        engine_version: Some(version),
        ..Knobs::default()
    };
    let peak = |t: &Transformer, k: &Knobs| {
        capacity(t, gpu, Engine::Vllm, k)
            .unwrap()
            .activation_peak_bytes
    };
    let n = 32768u64;
    // V1 from 0.9 also holds PyTorch's cuBLAS workspace (32 MiB on Hopper) through the profile
    // (`sampler::vllm_cublas_workspace`).
    let ws = 32u64 << 20;
    // Llama-3-8B (h 4096, intermediate 14336): at TP 1 the activation's site, input + residual +
    // normed input + gate_up + activation = 3h + 3f (the 0.6.4 logs' 2.07 and 2.99 GiB).
    let llama = llama3();
    assert_eq!(
        peak(&llama, &at(1, [0, 10, 1], true)),
        n * (3 * 4096 + 3 * 14336) * 2 + ws
    );
    // At TP 4 (f = 3584) down_proj's all-reduce is the peak: input, residual, normed input,
    // activation, output and the new result = 5h + f, above 3h + 3f.
    assert_eq!(
        peak(&llama, &at(4, [0, 10, 1], true)),
        n * (5 * 4096 + 3584) * 2 + ws
    );
    // Before 0.7 (not read) the all-reduce's result is not counted: 3h + 3f.
    assert_eq!(
        peak(&llama, &at(4, [0, 6, 4], true)),
        n * (3 * 4096 + 3 * 3584) * 2
    );
    // Compiled (V1's default), Inductor frees the input and gate_up: h + max(h + 2f, 3f), here
    // residual + normed input + gate_up, beside what the split module holds for the running
    // piece: the attention output (q = 4096 / 4) and the residual it came in with.
    assert_eq!(
        peak(&llama, &at(4, [0, 10, 1], false)),
        n * ((1024 + 4096) + 4096 + 4096 + 2 * 3584) * 2 + ws
    );
    // Qwen3-32B (h 5120, intermediate 25600, f = 6400 at TP 4): Qwen2MLP keeps gate_up, so at
    // down_proj's all-reduce input + residual + normed input + gate_up + activation + output +
    // result = 5h + 3f.
    let qwen = model("qwen3-32b");
    assert_eq!(
        peak(&qwen, &at(4, [0, 10, 1], true)),
        n * (5 * 5120 + 3 * 6400) * 2 + ws
    );
}

/// vLLM's piecewise compilation (`CompilationMode.VLLM_COMPILE`) calls each compiled piece from
/// the split module's generated forward, which drops the piece's arguments only after it
/// returns (`PiecewiseBackend.__call__(*args)`, read at 0.7.3 through 0.23.0): the piece that
/// runs the MLP keeps the attention output (q split by TP) and its incoming residual (h). Only
/// there: not eagerly, not under stock torch.compile, not before 0.7.3 (not read).
#[test]
fn piecewise_compilation_holds_the_running_pieces_inputs() {
    let at = |version: [u32; 3], eager: bool, mode: Option<CompilationMode>| Knobs {
        tp: 4,
        enforce_eager: eager,
        engine_version: Some(version),
        compilation_mode: mode,
        ..Knobs::default()
    };
    let qwen = model("qwen3-32b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    for (k, held) in [
        (at([0, 19, 1], false, None), true),
        (at([0, 7, 3], false, None), true),
        (at([0, 7, 2], false, None), false),
        (at([0, 19, 1], true, None), false),
        (
            at([0, 19, 1], false, Some(CompilationMode::StockTorchCompile)),
            false,
        ),
        // 0.12-0.16: --enforce-eager drops only the level; a mode given still splits.
        (
            at([0, 16, 0], true, Some(CompilationMode::VllmCompile)),
            true,
        ),
    ] {
        assert_eq!(Held::vllm(&qwen, &k, gpu).piece_inputs, held, "{k:?}");
    }
    // Qwen3-32B at TP 4: h 5120, 64 query heads of 128 (q = 8192, 2048 a GPU), f = 6400. The
    // compiled MLP's live set grows by exactly the two inputs, in the model dtype.
    let k = at([0, 19, 1], false, None);
    let n = 8192u64;
    let with = forward_peak_held(&qwen, n, &k, true, Held::vllm(&qwen, &k, gpu));
    let without = forward_peak_held(&qwen, n, &k, true, Held::default());
    assert_eq!(without, n * (5120 + 3 * 6400) * 2);
    assert_eq!(with - without, n * (2048 + 5120) * 2);
    // Eager, the flag changes nothing: the eager loop's own holdings are counted instead.
    let eager = Held {
        piece_inputs: true,
        ..Held::vllm(&qwen, &k, gpu)
    };
    assert_eq!(
        forward_peak_held(&qwen, n, &k, false, eager),
        forward_peak_held(
            &qwen,
            n,
            &k,
            false,
            Held {
                piece_inputs: false,
                ..eager
            }
        )
    );
}

/// `fused_experts_impl` allocates `[M, top_k, 2f]`, `[M·top_k, f]` and `[M, top_k, h]` apart
/// through vLLM 0.7 and from 0.8.0 views cache1 and cache3 into one `M·top_k·max(2f, h)`
/// buffer (`fused_moe.py` 1172-1180 at v0.7.2, 1353 at v0.8.0).
#[test]
fn moe_caches_share_one_buffer_from_vllm_0_8() {
    assert_eq!(moe_cache_width(7168, 4096, false), 3 * 7168 + 4096);
    assert_eq!(moe_cache_width(7168, 4096, true), 2 * 7168 + 7168);
    // DeepSeek-V3 at TP 16 (f = 128, h = 7168): the hidden-wide cache3 is the larger view.
    assert_eq!(moe_cache_width(128, 7168, true), 7168 + 128);
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |version: [u32; 3]| Knobs {
        max_model_len: Some(8192),
        max_num_seqs: Some(16),
        tp: 2,
        enforce_eager: true,
        engine_version: Some(version),
        ..Knobs::default()
    };
    let peak = |k: &Knobs| {
        capacity(&model("mixtral-8x7b"), gpu, Engine::Vllm, k)
            .unwrap()
            .activation_peak_bytes
    };
    // Mixtral-8x7B at TP 2 (h 4096, f 7168, top-2) over V0's 8192 tokens, run eagerly: the
    // layer input, residual, normed input and the experts' output (4h) beside the caches, and
    // V0's cuBLAS workspace from 0.7 (32 MiB on Hopper, `sampler::vllm_cublas_workspace`).
    let n = 8192u64;
    let ws = 32u64 << 20;
    assert_eq!(
        peak(&at([0, 7, 2])),
        n * (4 * 4096 + 2 * (3 * 7168 + 4096)) * 2 + ws
    );
    assert_eq!(
        peak(&at([0, 8, 0])),
        n * (4 * 4096 + 2 * (2 * 7168 + 7168)) * 2
    );
}

/// From vLLM 0.14 unquantized experts run through `FusedMoEModularKernel` with `TritonExperts`,
/// whose caches are views into the worker's persistent workspace (`v1/worker/workspace.py`):
/// `workspace13` `[M, top_k, max(f, h)]` with the output folded in, `workspace2` `[M, top_k,
/// max(2f, h)]`, never freed, so it sits under the dummy sampler too. Not at 0.13 (still
/// `fused_experts`), nor with expert parallelism (other paths, not read). `--quantization fp8`
/// takes the same kernel off Blackwell; AWQ's experts call `fused_marlin_moe` directly.
#[test]
fn vllm_moe_workspace_persists_from_0_14() {
    let t = model("mixtral-8x7b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |version: [u32; 3]| Knobs {
        max_model_len: Some(8192),
        tp: 2,
        engine_version: Some(version),
        ..Knobs::default()
    };
    let n = 8192u64;
    // Mixtral-8x7B at TP 2: h 4096, f 7168, top-2, bf16.
    let mixtral = n * 2 * (7168 + 2 * 7168) * 2;
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 19, 0]), gpu), mixtral);
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 14, 1]), gpu), mixtral);
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 13, 0]), gpu), 0);
    let ep = Knobs {
        expert_parallel: true,
        ..at([0, 19, 0])
    };
    assert_eq!(vllm_moe_workspace(&t, n, &ep, gpu), 0);
    // `--quantization fp8` runs the same modular kernel: TritonExperts from compute capability
    // 8.9 (the 0.22.1 H100 log's "Using TRITON Fp8 MoE backend"), MarlinExperts below, whose
    // workspace is the same bytes; not on Blackwell (FlashInfer, not read).
    let fp8 = Knobs {
        quantization: Quantization::Fp8,
        ..at([0, 19, 0])
    };
    assert_eq!(vllm_moe_workspace(&t, n, &fp8, gpu), mixtral);
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    assert_eq!(vllm_moe_workspace(&t, n, &fp8, a100), mixtral);
    let b200 = vram_model::gpu::lookup("b200").unwrap();
    assert_eq!(vllm_moe_workspace(&t, n, &fp8, b200), 0);
    // AWQ experts call `fused_marlin_moe` directly through 0.21: freed temporaries.
    let awq = Knobs {
        quantization: Quantization::Awq,
        ..at([0, 19, 0])
    };
    assert_eq!(vllm_moe_workspace(&t, n, &awq, a100), 0);
    // A fine-grained MoE (Qwen3-30B-A3B: h 2048, f 768, top-8): both views are hidden-wide, not
    // `max(2f, h) + f` as `fused_experts_impl`'s caches.
    let qwen = model("qwen3-30b-a3b");
    assert_eq!(
        vllm_moe_workspace(
            &qwen,
            n,
            &Knobs {
                tp: 1,
                ..at([0, 19, 0])
            },
            gpu
        ),
        n * 8 * (2048 + 2048) * 2
    );
    // Through 0.17 the chunk is at most 16384 tokens, the whole output then a buffer apart.
    let m = 32768u64;
    assert_eq!(
        vllm_moe_workspace(&t, m, &at([0, 17, 1]), gpu),
        16384 * 2 * (7168 + 2 * 7168) * 2 + m * 4096 * 2
    );
    // The profile's peak: the sampler's phase now holds the workspace (1,024 rows of Mixtral's
    // 32,000-token vocabulary) and passes the forward's, as the llm-d-planner log's 1.21 GiB.
    let k = at([0, 19, 0]);
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    let held = Held::vllm(&t, &k, gpu);
    let forward = forward_peak_held(&t, n, &k, true, held);
    assert!(c.activation_peak_bytes > forward, "{c:?}");
    assert!(c.activation_peak_bytes >= mixtral + 1024 * 32000 * (2 + 3 * 4));
}

/// MXFP4 experts keep their caches in the persistent workspace only on Marlin (compute
/// capability below 9) and only from 0.17, where `Mxfp4MoEMethod` builds `FusedMoEKernel` with
/// `MarlinExperts` (0.16 calls `fused_marlin_moe` directly; Hopper runs triton_kernels' own
/// temporaries), at the padded widths Marlin's layout holds.
#[test]
fn vllm_moe_workspace_for_mxfp4_follows_the_marlin_kernel() {
    let t = model("gpt-oss-20b");
    let at = |version: [u32; 3]| Knobs {
        max_model_len: Some(8192),
        engine_version: Some(version),
        ..Knobs::default()
    };
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let n = 2048u64;
    // gpt-oss-20b: h 2880 padded to 3072, f 2880 padded to 2944, top-4, bf16: workspace13
    // `[M·4, max(f, h)]` and workspace2 `M·4·max(2f, h)`.
    let marlin = n * 4 * (3072 + 2 * 2944) * 2;
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 19, 0]), a100), marlin);
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 17, 1]), a100), marlin);
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 16, 0]), a100), 0);
    assert_eq!(vllm_moe_workspace(&t, n, &at([0, 19, 0]), h100), 0);
}

/// V1 compiles the model (Inductor frees each buffer after its last use) unless
/// --enforce-eager; its dummy sampler's top-k/top-p runs as a Triton kernel from 0.17 and as
/// a sort before.
#[test]
fn v1_profile_peak_follows_compilation() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("a100-40g").unwrap();
    let eager = Knobs {
        max_model_len: Some(8192),
        max_num_batched_tokens: Some(8192),
        enforce_eager: true,
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &eager).unwrap();
    // PyTorch's cuBLAS workspace off Hopper (4096 KiB x 2 + 16 KiB x 8) is held from the
    // forward's first GEMM on; from 0.17 the sampler adds the Triton kernel's cached buffer, one
    // fp32 vocabulary row per program: min(next_power_of_2(min(108 SMs, 256 rows)), 108) = 108
    // rows on an A100, which the eager forward's live set still exceeds.
    let ws = 2 * 4096 * 1024 + 8 * 16 * 1024;
    let triton = 108 * 128256 * 4;
    assert_eq!(
        c.activation_peak_bytes,
        8192 * (3 * 4096 + 3 * 14336) * 2 + ws
    );
    let compiled = Knobs {
        enforce_eager: false,
        ..eager
    };
    let c = capacity(&t, gpu, Engine::Vllm, &compiled).unwrap();
    // The piece's inputs (attention output, incoming residual), the new residual, gate_up and
    // the activation.
    let forward = 8192 * (4096 + 2 * 4096 + 3 * 14336) * 2;
    // The sampler's rows, the profile's hidden states, and (0.9 on) the gathered last rows and
    // `rand_like`'s copy of them that `_dummy_sampler_run` computes the logits from.
    let sampler = 256 * 128256 * (2 + 12) + 8192 * 4096 * 2 + 2 * 256 * 4096 * 2;
    assert_eq!(c.activation_peak_bytes, forward.max(sampler + triton) + ws);
    // 0.15 sorts: the fp32 row, its values and int64 indices and cub's buffers (38 B).
    let sorted = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            engine_version: Some([0, 15, 1]),
            ..compiled
        },
    )
    .unwrap();
    let sort = 256 * 128256 * 38 + 8192 * 4096 * 2 + 2 * 256 * 4096 * 2;
    assert_eq!(sorted.activation_peak_bytes, forward.max(sort) + ws);
}

/// From 0.20 the CUDA graphs are subtracted before the KV cache is sized
/// (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 1 in 0.20.0's envs.py, 0 in 0.19.0's).
#[test]
fn vllm_0_20_puts_the_graphs_inside_the_budget() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(8192),
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    let before = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    let after = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            engine_version: Some([0, 20, 0]),
            ..k
        },
    )
    .unwrap();
    assert!(!before.cuda_graph_in_budget && after.cuda_graph_in_budget);
    assert!(after.cuda_graph_bytes > 0);
    // One block of all 32 layers: 16 tokens x 2 x 8 heads x 128 x 2 bytes x 32 = 2 MiB.
    let page = 2 * MIB;
    let rest = |c: &Capacity| {
        c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes
    };
    assert_eq!(before.kv_cache_blocks, rest(&before) / page);
    assert_eq!(
        after.kv_cache_blocks,
        (rest(&after) - after.cuda_graph_bytes) / page
    );
    assert_eq!(after.engine_version, "0.20");
}

/// SGLang 0.4's defaults come from the TP size (4 x L4: 0.85, chunked prefill 2048, CUDA
/// graphs up to 80), and its weights are what the caching allocator reserves: QwQ-32B at TP
/// 4 rounds QKV (17.5 MiB), o_proj (12.5), gate_up (135) and down (67.5) up to 2 MiB, 3.5 MiB
/// a layer, and each vocabulary table (185.625 MiB) by 0.75 MiB.
#[test]
fn sglang_0_4_defaults_and_reserved_weights() {
    let t = qwq32b();
    let l4 = vram_model::gpu::lookup("l4").unwrap();
    let k = Knobs {
        tp: 4,
        engine_version: Some([0, 4, 3]),
        ..Knobs::default()
    };
    let c = capacity(&t, l4, Engine::Sglang, &k).unwrap();
    assert_eq!(c.memory_fraction, 0.85);
    assert_eq!(c.max_num_batched_tokens, 2048);
    assert_eq!(c.max_num_seqs, 80);
    assert_eq!(
        allocator_rounding(&t, &k, l4, Engine::Sglang),
        64 * 7 * MIB / 2 + 3 * MIB / 2
    );
    assert_eq!(
        c.weights_bytes,
        weights_per_gpu(&t, &k, l4, Engine::Sglang) + 64 * 7 * MIB / 2 + 3 * MIB / 2
    );
    // 0.5's rule for the same job reserves by the memory bucket instead.
    let c5 = capacity(
        &t,
        l4,
        Engine::Sglang,
        &Knobs {
            engine_version: None,
            ..k
        },
    )
    .unwrap();
    assert_ne!(c5.memory_fraction, 0.85);
}

fn model(id: &str) -> Transformer {
    match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

fn kinds(c: &Capacity) -> Vec<(&'static str, u64, u64, u64, u64, u64)> {
    c.kv_groups
        .iter()
        .map(|g| {
            (
                g.kind,
                g.layers,
                g.groups,
                g.block_size,
                g.page_bytes,
                g.spec_page_bytes,
            )
        })
        .collect()
}

/// The pool's blocks from what vLLM had available, by hand: `available // page // layers
/// per group` (`get_num_blocks`).
fn available(c: &Capacity) -> u64 {
    c.budget_bytes - c.weights_bytes - c.activation_peak_bytes - c.non_torch_bytes
}

/// Qwen3-Next-80B (Gated DeltaNet hybrid, 12 full + 36 linear layers) by hand from
/// vLLM's source: the GDN state (`gated_delta_net_state_shape`) is conv `(3, 2·16·128 +
/// 32·128 = 8192)` plus temporal `(32, 128, 128)`, 548,864 bf16 elements = 1,097,728 B; one
/// token of attention is 2 × 2 kv heads × 256 × 2 B = 2048 B, so the attention block is
/// 16 × ⌈1,097,728 / 32,768⌉ = 544 tokens and the page 1,114,112 B, the state padded by
/// 1.49 %. Groups of 12 layers: 1 full + 3 state; tokens are `num_blocks // 4 × 544`; a
/// request of 32,768 tokens takes ⌈32768 / 544⌉ = 61 blocks plus one per state group.
#[test]
fn vllm_qwen3_next_gdn_hybrid_by_hand() {
    let t = model("qwen3-next-80b-a3b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        tp: 4,
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    // TP 4: attention max(1, 2 / 4) = 1 kv head: 1024 B a token; state conv (3, 2048),
    // temporal (8, 128, 128): 137,216 elements = 274,432 B; block 16 × ⌈274432 / 16384⌉
    // = 272 tokens, page 278,528 B.
    assert_eq!(
        kinds(&c),
        vec![
            ("state", 36, 3, 32768, 278_528, 274_432),
            ("full", 12, 1, 272, 278_528, 278_528),
        ]
    );
    assert_eq!(c.kv_cache_blocks, available(&c) / 278_528 / 12);
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 4 * 272);
    let need = 32768u64.div_ceil(272) + 3;
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
    assert!(c.log[0].contains("Setting attention block size to 272 tokens"));
    assert!(
        c.log[1].contains("Padding mamba page size by 1.49%"),
        "{:?}",
        c.log
    );
    // TP 1 as the docstring computes it.
    let c1 = capacity(
        &t,
        vram_model::gpu::lookup("h200").unwrap(),
        Engine::Vllm,
        &Knobs { tp: 1, ..k },
    )
    .unwrap();
    assert_eq!(
        kinds(&c1),
        vec![
            ("state", 36, 3, 32768, 1_114_112, 1_097_728),
            ("full", 12, 1, 544, 1_114_112, 1_114_112),
        ]
    );
    assert_eq!(c1.kv_cache_tokens, c1.kv_cache_blocks / 4 * 544);
    assert_eq!(c1.kv_groups[1].blocks_per_request, 61);
}

/// Nemotron-H-56B (Mamba2 hybrid: 10 attention and 54 Mamba2 layers of 118) by hand:
/// `mamba2_state_shape` conv `(3, 256·64 + 2·8·256 = 20480)`, temporal `(256, 64, 256)`:
/// 4,255,744 elements = 8,511,488 B; attention 2 × 8 × 128 × 2 = 4096 B a token, block
/// 16 × ⌈8,511,488 / 65,536⌉ = 2080, page 8,519,680 B. Groups of 10: 1 attention + 6 state
/// (60 slots for 54 layers).
#[test]
fn vllm_nemotron_h_mamba2_hybrid_by_hand() {
    let t = model("nemotron-h-56b");
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let k = Knobs {
        max_model_len: Some(8192),
        tp: 2,
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    // TP 2: groups 8 divide; conv (3, 10240), temporal (128, 64, 256): 2,127,872 elements,
    // 4,255,744 B; attention 4 heads: 2048 B a token; block 16 × ⌈4,255,744 / 32,768⌉ =
    // 16 × 130 = 2080; page 4,259,840 B.
    let attn = c.kv_groups.iter().find(|g| g.kind == "full").unwrap();
    let state = c.kv_groups.iter().find(|g| g.kind == "state").unwrap();
    assert_eq!((attn.layers, attn.groups, attn.block_size), (10, 1, 2080));
    assert_eq!((state.layers, state.groups), (54, 6));
    assert_eq!(state.spec_page_bytes, 4_255_744);
    assert_eq!(state.page_bytes, 4_259_840);
    assert_eq!(c.kv_cache_blocks, available(&c) / 4_259_840 / 10);
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 7 * 2080);
    let need = 8192u64.div_ceil(2080) + 6;
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
    // TP 16 does not divide the 8 groups: vLLM replicates them to 16.
    let st = vram_model::blocks::CacheLayout::State {
        conv_dim: 256 * 64,
        groups: 8,
        group_dim: 512,
        conv_kernel: 4,
        heads: 256,
        head_state: 64 * 256,
    };
    assert_eq!(
        st.state_elements(16),
        ((16384 + 16 * 512) / 16 * 3, 16 * 64 * 256)
    );
    assert_eq!(st.state_elements(1), (20480 * 3, 256 * 64 * 256));
}

/// gpt-oss-20b: 12 sliding (window 128) and 12 full layers, 8 kv heads × 64: page 16 ×
/// 2 × 8 × 64 × 2 = 32,768 B, two groups of 12; a request of 8192 tokens with 8192 batched
/// tokens takes 512 blocks in the full group and ⌈min(127 + 8192, 8192) / 16⌉ + 1 = 513 in
/// the sliding one; at 131,072 tokens the sliding group's share stays 521.
#[test]
fn vllm_gpt_oss_sliding_and_full_by_hand() {
    let t = model("gpt-oss-20b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(131072),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(
        kinds(&c),
        vec![
            ("sliding", 12, 1, 16, 32768, 32768),
            ("full", 12, 1, 16, 32768, 32768)
        ]
    );
    assert_eq!(c.kv_groups[0].window, Some(128));
    assert_eq!(c.kv_groups[0].blocks_per_request, 521);
    assert_eq!(c.kv_groups[1].blocks_per_request, 8192);
    assert_eq!(c.kv_cache_blocks, available(&c) / 32768 / 12);
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 2 * 16);
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / (8192.0 + 521.0)).abs() < 1e-9);
}

/// Gemma 3 1B: 26 layers, every sixth full (4) and 22 sliding (window 512), 1 kv head ×
/// 256: page 16 × 2 × 256 × 2 = 16,384 B; groups of 4: 1 full + 6 sliding (2 padding
/// slots); tokens `num_blocks // 7 × 16`. A window of at least `max_model_len` is full
/// attention: one group of 26.
#[test]
fn vllm_gemma3_sliding_groups_by_hand() {
    let t = model("gemma-3-1b");
    let gpu = vram_model::gpu::lookup("l4").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(
        kinds(&c),
        vec![
            ("sliding", 22, 6, 16, 16384, 16384),
            ("full", 4, 1, 16, 16384, 16384)
        ]
    );
    assert_eq!(c.kv_cache_blocks, available(&c) / 16384 / 4);
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 7 * 16);
    // L4 (< 70 GiB): 2048 batched tokens; sliding ⌈min(511 + 2048, 32768) / 16⌉ + 1 = 161.
    let need = 2048 + 6 * 161;
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / need as f64).abs() < 1e-9);
    let short = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            max_model_len: Some(512),
            ..k
        },
    )
    .unwrap();
    assert_eq!(kinds(&short), vec![("full", 26, 1, 16, 16384, 16384)]);
}

/// DeepSeek-V3 (MLA, 61 layers): one latent of 512 + 64 per token, one head whatever the
/// TP; FlashMLA's 64-token blocks on Hopper (73,728 B a page), 16 on Ampere (18,432 B).
#[test]
fn vllm_deepseek_v3_mla_pages_by_hand() {
    let t = model("deepseek-v3");
    let h200 = vram_model::gpu::lookup("h200").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        tp: 8,
        quantization: Quantization::Fp8,
        ..Knobs::default()
    };
    let c = capacity(&t, h200, Engine::Vllm, &k).unwrap();
    assert_eq!(kinds(&c), vec![("mla", 61, 1, 64, 73_728, 73_728)]);
    assert_eq!(c.kv_cache_blocks, available(&c) / 73_728 / 61);
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks * 64);
    assert!((c.max_concurrency - c.kv_cache_blocks as f64 / 512.0).abs() < 1e-9);
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let c = capacity(&t, a100, Engine::Vllm, &k).unwrap();
    assert_eq!(kinds(&c), vec![("mla", 61, 1, 16, 18_432, 18_432)]);
}

/// SGLang's state pool for Qwen3-Next at TP 4: per layer conv (2048 × 3) in bf16 and
/// temporal (8, 128, 128) in float32, 12,288 + 524,288 = 536,576 B, 36 layers a request;
/// the pool takes 0.9 / 1.9 of what is left, the token pool (12 full layers × 1 kv head ×
/// 2 × 256 × 2 B = 12,288 B a token) the rest; concurrency is capped by the slots too.
#[test]
fn sglang_mamba_pool_by_hand() {
    let t = model("qwen3-next-80b-a3b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        tp: 4,
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
    let state = c.kv_groups.iter().find(|g| g.kind == "state").unwrap();
    assert_eq!((state.layers, state.page_bytes), (36, 536_576));
    let slots = state.state_slots.unwrap();
    let states = (slots * 36 * 536_576) as f64;
    let cell = 12 * 2 * 256 * 2;
    assert_eq!(c.kv_cache_bytes, c.kv_cache_tokens * cell);
    // Whole requests: the state pool is at most one request short of its share.
    let total = states + c.kv_cache_bytes as f64;
    let share = states / total;
    let one = (36 * 536_576) as f64 / total;
    assert!(
        share <= 0.9 / 1.9 && share > 0.9 / 1.9 - one - 1e-6,
        "{share}"
    );
    assert!(
        (c.max_concurrency - (c.kv_cache_tokens as f64 / 32768.0).min(slots as f64)).abs() < 1e-9
    );
    // Without states (a Llama) there is no slot count.
    let l = capacity(&llama3(), gpu, Engine::Sglang, &Knobs::default()).unwrap();
    assert!(l.kv_groups.iter().all(|g| g.state_slots.is_none()));
}

/// SGLang's sliding-window pool for gpt-oss-20b (12 sliding + 12 full layers, 8 kv heads ×
/// 64, 2048 B a token a layer): the all-full count T becomes full = ⌊24T / (0.8 × 12 +
/// 12)⌋ and swa = ⌊0.8 × full⌋; the pool holds both.
#[test]
fn sglang_swa_pool_by_hand() {
    let t = model("gpt-oss-20b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Sglang, &k).unwrap();
    let line = c
        .log
        .iter()
        .find(|l| l.starts_with("Use sliding window memory pool"))
        .unwrap();
    let full = c.kv_cache_tokens;
    let swa = (full as f64 * 0.8) as u64;
    assert_eq!(
        line,
        &format!(
            "Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
        )
    );
    assert_eq!(c.kv_cache_bytes, 12 * 2048 * (full + swa));
    // The all-full count T it came from: a context no longer than the window makes every
    // layer full (the pool's memory does not depend on the context).
    let short = capacity(
        &t,
        gpu,
        Engine::Sglang,
        &Knobs {
            max_model_len: Some(128),
            ..k
        },
    )
    .unwrap();
    assert!(short.log.iter().all(|l| !l.contains("sliding window")));
    let all_full = short.kv_cache_tokens;
    assert_eq!(full, (all_full as f64 * 24.0 / (0.8 * 12.0 + 12.0)) as u64);
    assert!(c.kv_cache_bytes <= short.kv_cache_bytes + 24 * 2048);
    assert!((c.max_concurrency - full as f64 / 32768.0).abs() < 1e-9);
}

/// Qwen3.5's config ships `mamba_ssm_dtype: float32`; vLLM keeps the recurrent state in it:
/// conv 10240 × 3 × 2 + 48 × 128 × 128 × 4 = 3,207,168 B; block 16 × ⌈3,207,168 / 65,536⌉
/// = 784 tokens, page 3,211,264 B. vllm#40691 (vLLM 0.19.0, `--max-model-len 32768`,
/// `--max-num-batched-token 16384`) logged "GPU KV cache size: 290,864 tokens" and
/// "Maximum concurrency for 32,768 tokens per request: 33.04x": both follow from this layout
/// with 1487 blocks (1487 // 4 × 784 and 1487 / (42 + 3)), and from no other block size.
#[test]
fn vllm_qwen3_5_fp32_state_matches_a_real_log() {
    let t = model("qwen3.5-27b");
    let cfg = catalog::config_text("qwen3.5-27b").unwrap();
    assert_eq!(vram_model::read::mamba_ssm_bytes(cfg), Some(4));
    assert_eq!(
        vram_model::read::mamba_ssm_bytes(r#"{"model_type": "llama"}"#),
        None
    );
    let gpu = vram_model::gpu::lookup("h20-141g").unwrap();
    let k = Knobs {
        max_model_len: Some(32768),
        max_num_seqs: Some(16),
        max_num_batched_tokens: Some(16384),
        mamba_ssm_bytes: Some(4),
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(
        kinds(&c),
        vec![
            ("state", 48, 3, 32768, 3_211_264, 3_207_168),
            ("full", 16, 1, 784, 3_211_264, 3_211_264)
        ]
    );
    let layers = stage_layers(&t, 1);
    let layout = vllm_layout(&layers, &k, gpu, 32768, 16384);
    let (blocks, tokens, conc) = layout.pool(1487 * 3_211_264 * 16, 32768, 16384);
    assert_eq!((blocks, tokens), (1487, 290_864));
    assert_eq!(format!("{conc:.2}"), "33.04");
    // In bf16 (no config dtype) the block would be 400 tokens and the log impossible.
    let bf16 = vllm_layout(
        &layers,
        &Knobs {
            mamba_ssm_bytes: None,
            ..k
        },
        gpu,
        32768,
        16384,
    );
    assert_eq!(bf16.min_block(), 400);
    assert_ne!(290_864 % 400, 0);
}

/// Qwen3.5-27B (48 GDN + 16 full layers, 4 kv heads × 256, GDN 16 key and 48 value heads):
/// state conv (3, 2·16·128 + 48·128 = 10240), temporal (48, 128, 128): 817,152 elements,
/// 1,634,304 B; attention 4096 B a token; block 16 × ⌈1,634,304 / 65,536⌉ = 400; page
/// 1,638,400 B. Groups of 16: 1 full + 3 state.
#[test]
fn vllm_qwen3_5_gdn_hybrid_by_hand() {
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(16384),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(
        kinds(&c),
        vec![
            ("state", 48, 3, 16384, 1_638_400, 1_634_304),
            ("full", 16, 1, 400, 1_638_400, 1_638_400)
        ]
    );
    assert_eq!(c.kv_cache_tokens, c.kv_cache_blocks / 4 * 400);
    // A --block-size above the aligned one is kept, the state padded to it.
    let c = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            block_size: Some(512),
            ..k
        },
    )
    .unwrap();
    assert_eq!(c.kv_groups[1].block_size, 512);
    assert_eq!(c.kv_groups[0].page_bytes, 512 * 4096);
    assert!(!c.log[0].contains("Setting attention block size"));
}

/// vLLM's `--enable-expert-parallel` spreads whole experts over TP × DP GPUs: Qwen3-30B-A3B
/// (48 layers of 128 experts, each 3 × 2048 × 768 bf16) at TP 4, DP 2 holds 1/8 of them per
/// GPU instead of 1/4, everything else unchanged.
#[test]
fn expert_parallel_spreads_the_experts_over_tp_times_dp() {
    let t = model("qwen3-30b-a3b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let tp4 = Knobs {
        tp: 4,
        dp: 2,
        ..Knobs::default()
    };
    let ep = Knobs {
        expert_parallel: true,
        ..tp4
    };
    let w = |k: &Knobs| weights_per_gpu(&t, k, gpu, Engine::Vllm) as i64;
    let experts = 48 * 128 * 3 * 2048 * 768 * 2i64;
    assert!(
        (w(&tp4) - w(&ep) - (experts / 4 - experts / 8)).abs() <= 1,
        "{}",
        w(&tp4) - w(&ep)
    );
    // DP alone replicates the TP group: the same bytes per GPU as TP 4.
    assert_eq!(w(&tp4), w(&Knobs { dp: 1, ..tp4 }));
}

/// An expert-parallel group that does not divide the experts: vLLM's `determine_expert_map`
/// gives the first `experts % ways` ranks one more (from 0.10.1), or at 0.10.0 the last rank
/// the rest. Mixtral's 8 experts over TP 2 × DP 3 = 6 GPUs: the most loaded holds 2 (as over TP 2 × DP 2 =
/// 4 GPUs), not 8/6; over 16 GPUs 1 (as over 8), not half of one; at 0.10.0 over 16 GPUs the
/// last rank holds all 8.
#[test]
fn expert_parallel_that_does_not_divide_the_experts_prices_the_most_loaded_gpu() {
    let t = model("mixtral-8x7b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let ep = |tp: u64, dp: u64, v: Option<[u32; 3]>| Knobs {
        tp,
        dp,
        expert_parallel: true,
        engine_version: v,
        ..Knobs::default()
    };
    let w = |k: &Knobs| weights_per_gpu(&t, k, gpu, Engine::Vllm);
    assert_eq!(w(&ep(2, 3, None)), w(&ep(2, 2, None)));
    // Over 16 GPUs one whole expert each (32 layers of 3 × 4096 × 14336 bf16), with attention
    // and the rest split 16 ways: more than the expert, less than over 8 GPUs (the same expert,
    // the rest split 8 ways).
    let one_expert = 32 * 3 * 4096 * 14336 * 2u64;
    assert!(w(&ep(16, 1, None)) > one_expert, "{}", w(&ep(16, 1, None)));
    assert!(w(&ep(16, 1, None)) < w(&ep(8, 1, None)));
    let all_eight = w(&ep(16, 1, Some([0, 10, 0])));
    assert!(all_eight > 8 * one_expert, "{all_eight}");
    // Where the GPUs divide the experts the split is unchanged (8 over 8: one each).
    assert!(w(&ep(8, 1, None)) > one_expert && w(&ep(8, 1, None)) < 2 * one_expert);
}

/// SGLang's DP attention runs attention TP over tp / dp GPUs: at TP 8, DP 4 each GPU keeps
/// 2 of Qwen3-30B-A3B's 4 KV heads instead of one (replicated) head.
#[test]
fn dp_attention_splits_the_kv_heads_tp_over_dp_ways() {
    let t = model("qwen3-30b-a3b");
    let tp8 = Knobs {
        tp: 8,
        ..Knobs::default()
    };
    let dpa = Knobs {
        dp: 4,
        dp_attention: true,
        ..tp8
    };
    assert_eq!(kv_bytes_per_token(&t, &tp8), 48 * 2 * 128 * 2);
    assert_eq!(kv_bytes_per_token(&t, &dpa), 48 * 2 * 2 * 128 * 2);
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    assert!(capacity(&t, gpu, Engine::Sglang, &dpa).is_ok());
    for bad in [
        Knobs { dp: 3, ..dpa },
        Knobs { ep: 3, ..tp8 },
        Knobs { dp: 1, ..dpa },
    ] {
        assert!(capacity(&t, gpu, Engine::Sglang, &bad).is_err(), "{bad:?}");
    }
    let dense = llama3();
    assert!(capacity(
        &dense,
        gpu,
        Engine::Vllm,
        &Knobs {
            expert_parallel: true,
            ..Knobs::default()
        }
    )
    .is_err());
}

/// vLLM 0.8-0.10 falls back to V0 on a GPU of compute capability below 8.0
/// (`_is_v1_supported_oracle`): a V100 runs V0's profile (one batch of max_model_len tokens,
/// the sampler's sort) and says so; from 0.11 there is no V0.
#[test]
fn vllm_0_8_on_a_v100_falls_back_to_v0() {
    let t = llama3();
    let v100 = vram_model::gpu::lookup("v100-32g").unwrap();
    let k = Knobs {
        max_model_len: Some(4096),
        engine_version: Some([0, 8, 5]),
        ..Knobs::default()
    };
    let c = capacity(&t, v100, Engine::Vllm, &k).unwrap();
    assert_eq!(
        c.log[0],
        "Compute Capability < 8.0 is not supported by the V1 Engine. Falling back to V0."
    );
    assert_eq!((c.max_num_seqs, c.max_num_batched_tokens), (256, 4096));
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let v1 = capacity(&t, h100, Engine::Vllm, &k).unwrap();
    assert!(!v1.log[0].contains("Falling back"));
    let late = capacity(
        &t,
        v100,
        Engine::Vllm,
        &Knobs {
            engine_version: Some([0, 11, 0]),
            ..k
        },
    )
    .unwrap();
    assert!(late.log.iter().all(|l| !l.contains("Falling back")));
}

/// vLLM 0.10.1 lays gpt-oss-120b's MXFP4 experts out for Marlin on an H100 (torch 2.7):
/// hidden 2880 padded to 3072, intermediate 2880 to 2944; 36 layers × 128 experts × 3
/// matrices at 0.5 + 1/32 bytes an element. The Triton layout (Hopper from 0.12, whose wheel
/// brings its own triton_kernels) pads nothing here; 0.11 still runs Marlin by default.
#[test]
fn mxfp4_marlin_layout_pads_the_experts() {
    let t = model("gpt-oss-120b");
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        engine_version: Some([0, 10, 1]),
        ..Knobs::default()
    };
    let marlin = weights_per_gpu(&t, &k, h100, Engine::Vllm);
    // 0.11.2 without the optional triton_kernels package (not a requirement of its wheel).
    assert_eq!(
        weights_per_gpu(
            &t,
            &Knobs {
                engine_version: Some([0, 11, 2]),
                ..k
            },
            h100,
            Engine::Vllm
        ),
        marlin
    );
    let triton = weights_per_gpu(
        &t,
        &Knobs {
            engine_version: Some([0, 14, 1]),
            ..k
        },
        h100,
        Engine::Vllm,
    );
    let per_layer = (128 * 3 * (3072 * 2944 - 2880 * 2880)) as f64 * (0.5 + 1.0 / 32.0);
    let triton_extras = mxfp4_triton_extras(
        &t,
        &Knobs {
            engine_version: Some([0, 14, 1]),
            ..k
        },
        h100,
    );
    assert_eq!(marlin + triton_extras - triton, per_layer as u64 * 36);
    // SGLang is not vLLM: no vLLM layout; its rotary table (YaRN: 4,096 × 32 rows, 64 wide)
    // is kept in fp32, two bytes an element more.
    assert_eq!(
        weights_per_gpu(&t, &k, h100, Engine::Sglang),
        triton - triton_extras + 131_072 * 64 * 2
    );
}

/// vLLM's Triton MXFP4 path on Hopper (read at v0.11.0 and v0.14.1): the expert biases become
/// fp32 (one more bf16 copy of `[E, 2I]` + `[E, H]`), and with torch 2.9 (triton_kernels'
/// `HopperMXScaleLayout`) the scales are held twice, the copy padded to 256 rows and an even
/// number of columns. gpt-oss-120b: 36 layers x 128 experts; w13 scales 5760 -> 5888 rows x 90,
/// w2 2880 -> 3072 rows x 90; biases (5760 + 2880) x 2 bytes. Hopper runs this path by default
/// from 0.12 (the wheel's own triton_kernels); 0.11 runs Marlin, which holds neither.
#[test]
fn mxfp4_triton_holds_fp32_biases_and_a_padded_scale_copy() {
    let t = model("gpt-oss-120b");
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], tp: u64| {
        let k = Knobs {
            engine_version: Some(v),
            tp,
            ..Knobs::default()
        };
        mxfp4_triton_extras(&t, &k, h100)
    };
    let bias = (5760 + 2880) * 2;
    let scales = 5888 * 90 + 3072 * 90;
    assert_eq!(at([0, 14, 1], 1), 36 * 128 * (bias + scales));
    assert_eq!(at([0, 12, 0], 1), 36 * 128 * (bias + scales));
    assert_eq!(at([0, 11, 2], 1), 0);
    assert_eq!(at([0, 11, 0], 1), 0);
    // TP 2: intermediate 1440 per GPU, padded to 1472 (64); w13 2944 -> 3072 rows x 90, w2
    // 2880 -> 3072 rows x 46; biases (2944 + 2880) x 2 bytes.
    assert_eq!(
        at([0, 19, 0], 2),
        36 * 128 * ((2944 + 2880) * 2 + 3072 * 90 + 3072 * 46)
    );
    // Marlin (Hopper before 0.12, Ampere) and FlashInfer hold neither.
    assert_eq!(at([0, 10, 1], 1), 0);
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let k = Knobs {
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    assert_eq!(mxfp4_triton_extras(&t, &k, a100), 0);
    // A model without MXFP4 experts' biases or experts: nothing.
    assert_eq!(mxfp4_triton_extras(&llama3(), &k, h100), 0);
}

/// The triton_kernels vendored in vLLM 0.17.0-0.21.0 pads each MXFP4 expert tensor to
/// multiples of 64 in both dims as it swizzles it for Hopper (`HopperMXValueLayout`): gpt-oss-20b
/// (24 layers x 32 experts, H 2880) holds `w13` as `[H/2, 2I]` bytes, 1440 -> 1472 rows, and
/// `w2` as `[I/2, H]`, `I/2` 1440 (TP 1) or 736 (TP 2, I padded to 1472) -> 1472 / 768 rows, and
/// 384 at TP 4 (I padded to 768) unchanged. 0.14.1 and 0.22.0 vendor the copy without the
/// pre-pad; Ampere runs Marlin.
#[test]
fn mxfp4_hopper_values_prepadded_to_64_in_vendored_triton_kernels() {
    let t = model("gpt-oss-20b");
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], tp: u64, gpu: &vram_model::gpu::Gpu| {
        let k = Knobs {
            engine_version: Some(v),
            tp,
            ..Knobs::default()
        };
        mxfp4_hopper_value_padding(&t, &k, gpu)
    };
    let tp1 = 24 * 32 * ((1472 - 1440) * 5760 + (1472 - 1440) * 2880);
    assert_eq!(at([0, 19, 0], 1, h100), tp1);
    assert_eq!(at([0, 17, 0], 1, h100), tp1);
    assert_eq!(at([0, 21, 0], 1, h100), tp1);
    assert_eq!(
        at([0, 19, 0], 2, h100),
        24 * 32 * ((1472 - 1440) * 2944 + (768 - 736) * 2880)
    );
    assert_eq!(at([0, 19, 0], 4, h100), 24 * 32 * (1472 - 1440) * 1536);
    assert_eq!(at([0, 14, 1], 1, h100), 0);
    assert_eq!(at([0, 16, 0], 1, h100), 0);
    assert_eq!(at([0, 22, 0], 1, h100), 0);
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    assert_eq!(at([0, 19, 0], 1, a100), 0);
    // It is part of what vLLM's weights take.
    let k = Knobs {
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    let old = Knobs {
        engine_version: Some([0, 16, 0]),
        ..k
    };
    assert_eq!(
        weights_per_gpu(&t, &k, h100, Engine::Vllm) - weights_per_gpu(&t, &old, h100, Engine::Vllm),
        tp1
    );
}

#[test]
fn non_torch_memory_follows_the_baseline_and_the_interconnect() {
    let t = llama3();
    let mib = 1u64 << 20;
    let at = |gpu: &str, version: &str, tp: u64, eager: bool| {
        let g = vram_model::gpu::lookup(gpu).unwrap();
        let k = Knobs {
            tp,
            max_model_len: Some(4096),
            enforce_eager: eager,
            engine_version: parse_version(version),
            vllm_v0: version.starts_with("0.8"),
            ..Knobs::default()
        };
        capacity(&t, g, Engine::Vllm, &k).unwrap().non_torch_bytes
    };
    // V1 on PCIe, eager: the kernel images (the T4's printed 0.05 GiB), and at TP 2 one
    // communicator the profile connects: with cuMem off (vLLM through 0.10.1) every channel's
    // ring and tree at init, 0.05 GiB; with cuMem on (from 0.10.2) the ring alone, connected by
    // the logits all-gather (2 channels x (2 + 10) MiB), and 8 device-state allocations of one
    // 2 MiB granule each.
    let images = 51 * mib;
    assert_eq!(at("l4", "0.18.1", 1, true), images);
    assert_eq!(at("l4", "0.10.1", 2, true), images + 51 * mib);
    assert_eq!(at("l4", "0.10.2", 2, true), images + (24 + 16) * mib);
    assert_eq!(at("l4", "0.18.1", 2, true), images + (24 + 16) * mib);
    assert_eq!(at("l4", "0.18.1", 4, true), images + (24 + 16) * mib);
    // A Gen5 x16 board's 48 GB/s link makes NCCL duplicate its one channel before
    // `ncclTopoPostset` doubles it: 4 channels x 12 MiB, and 2 + 3 x 4 granules.
    assert_eq!(at("h100-pcie", "0.18.1", 2, true), images + (48 + 28) * mib);
    assert_eq!(at("h100-pcie", "0.10.1", 2, true), images + 51 * mib);
    // GeForce RTX boards: the stock driver gives no peer access, so NCCL's SHM transport keeps
    // the ring's buffers in host memory and the device holds the state granules alone (8 on a
    // Gen4 board, 14 on the Gen5 x16 RTX 5090). A datacenter PCIe board keeps the P2P figure.
    assert_eq!(at("rtx-3090", "0.19.0", 4, true), images + 16 * mib);
    assert_eq!(at("rtx-4090", "0.18.1", 2, true), images + 16 * mib);
    assert_eq!(at("rtx-5090", "0.18.1", 2, true), images + 28 * mib);
    assert_eq!(at("t4", "0.18.1", 2, true), images + (24 + 16) * mib);
    // With cuMem off (through 0.10.1) the figure is not derived per transport: unchanged.
    assert_eq!(at("rtx-4090", "0.10.1", 2, true), images + 51 * mib);
    // Told: a datacenter board without P2P (NCCL_P2P_DISABLE=1, or a host path NCCL will not
    // use for it) takes the SHM figure, and a GeForce board with a patched driver the P2P one.
    let told = |gpu: &str, link: Interconnect| {
        let g = vram_model::gpu::lookup(gpu).unwrap();
        let k = Knobs {
            tp: 2,
            max_model_len: Some(4096),
            enforce_eager: true,
            engine_version: parse_version("0.18.1"),
            interconnect: Some(link),
            ..Knobs::default()
        };
        capacity(&t, g, Engine::Vllm, &k).unwrap().non_torch_bytes
    };
    assert_eq!(told("t4", Interconnect::Shm), images + 16 * mib);
    assert_eq!(
        told("rtx-4090", Interconnect::Pcie),
        images + (24 + 16) * mib
    );
    // Compiled 0.18+ profiles its graphs inside the window; NVLS boards' communicator measured
    // (0.31 GiB) and, at -O2 from 0.17, FlashInfer's fusion workspace (3 x 512 MiB): together
    // the 1.81 GiB 0.19's logs show at TP 2.
    assert_eq!(at("h100-80g", "0.19.0", 2, false), 256 * mib + 1853 * mib);
    // Eager: no compile, so no fusion pass and no workspace.
    assert_eq!(at("h100-80g", "0.19.0", 2, true), images + 317 * mib);
    // A100 NVSwitch without NVLS: NCCL's buffer arithmetic, 24 channels x one 12 MiB pair, two
    // pairs a channel from 3 ranks for the tree (kept from 0.10.2 too: `communicator_cumem`
    // covers PCIe only).
    assert_eq!(at("a100-80g", "0.10.1", 2, false), 24 * mib + 288 * mib);
    assert_eq!(at("a100-80g", "0.10.1", 4, false), 24 * mib + 576 * mib);
    assert_eq!(at("a100-80g", "0.19.0", 2, false), 256 * mib + 288 * mib);
    // V0 from 0.7 takes its baseline before the communicators: PyNccl's and the group's; two
    // PCIe GPUs are taken as failing custom all-reduce's P2P check, so no buffers of its own.
    assert_eq!(at("l4", "0.8.3", 2, true), images + 2 * 51 * mib);
    // V1 before 0.18 compiled: no graph profiling inside the window.
    assert_eq!(at("h100-80g", "0.11.0", 1, false), 24 * mib);
}

/// vLLM V1's baseline after the distributed environment: the groups it created hold memory
/// beside the budget. The engine's own "worker init memory snapshot" on NVSwitch H100s (vLLM
/// 0.19, llm-d-planner's logs, `unseen.json`; the fit half gave the figures): 0.51 GiB at TP 1,
/// 1.51 at TP 2, 1.53 at TP 4, 1.43 at PP 2, 1.99 for Mixtral-8x7B and gpt-oss-20b at TP 2;
/// the holdout: 1.48 at PP 4, 2.05 for Llama 4 Scout at TP 4 (MoE).
#[test]
fn vllm_v1_baseline_holds_its_groups_communicators() {
    let mib = 1u64 << 20;
    let gib = (1u64 << 30) as f64;
    let at = |t: &Transformer, gpu: &str, version: [u32; 3], tp: u64, pp: u64, dp: u64| {
        let g = vram_model::gpu::lookup(gpu).unwrap();
        let k = Knobs {
            tp,
            pp,
            dp,
            engine_version: Some(version),
            ..Knobs::default()
        };
        let (v1, _) = engine::vllm_v1(&k, g);
        non_torch::vllm_init_communicators(t, g, &k, v1).map(|c| c.0)
    };
    let (dense, moe) = (llama3(), model("mixtral-8x7b"));
    let v19 = [0, 19, 0];
    assert_eq!(at(&dense, "h100-80g", v19, 1, 1, 1), None);
    // One group (TP or PP) for a dense model; MoE models add the expert-parallel group (0.14+).
    assert_eq!(at(&dense, "h100-80g", v19, 2, 1, 1), Some(1044 * mib));
    assert_eq!(at(&dense, "h100-80g", v19, 1, 2, 1), Some(1044 * mib));
    assert_eq!(at(&moe, "h100-80g", v19, 2, 1, 1), Some((1044 + 492) * mib));
    // Against the logged snapshots less the TP-1 one, within 0.1 GiB (PP 2 and 4 read 0.92 and
    // 0.97 GiB: the TP group's custom all-reduce and symmetric-memory buffers are not theirs).
    for (t, tp, pp, logged) in [
        (&dense, 2, 1, 1.51),
        (&dense, 4, 1, 1.53),
        (&dense, 1, 2, 1.43),
        (&dense, 1, 4, 1.48),
        (&moe, 2, 1, 1.99),
        (&moe, 4, 1, 2.05),
    ] {
        let est = at(t, "h100-80g", v19, tp, pp, 1).unwrap() as f64 / gib;
        assert!(
            (est - (logged - 0.51)).abs() <= 0.1,
            "tp {tp} pp {pp}: {est:.2}"
        );
    }
    // Up to 0.13 every model has the expert-parallel group.
    assert_eq!(
        at(&dense, "h100-80g", [0, 11, 0], 2, 1, 1),
        Some((1044 + 492) * mib)
    );
    // V1 before 0.9 has no baseline: everything is inside the budget.
    assert_eq!(at(&dense, "h100-80g", [0, 8, 5], 2, 1, 1), None);
    // Without NVLS: the first group as SGLang read it on L4s; further groups have no reading.
    assert_eq!(at(&dense, "l4", v19, 2, 1, 1), Some(133 * mib));
    assert_eq!(at(&dense, "t4", [0, 11, 0], 1, 1, 2), Some(133 * mib));
    // HGX A100 at TP 2 builds the custom all-reduce, which the L4 reading lacked: 26 MiB more.
    assert_eq!(
        at(&dense, "a100-80g", [0, 10, 1], 2, 1, 1),
        Some((133 + 26) * mib)
    );
}

#[test]
fn v0_chunks_by_default_only_long_text_models_without_mla() {
    let g = vram_model::gpu::lookup("h100-80g").unwrap();
    let mnbt = |t: &Transformer, version: &str, len: u64| {
        let k = Knobs {
            max_model_len: Some(len),
            engine_version: parse_version(version),
            vllm_v0: true,
            ..Knobs::default()
        };
        capacity(t, g, Engine::Vllm, &k)
            .unwrap()
            .max_num_batched_tokens
    };
    let llama = match catalog::lookup("llama-3.1-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    assert_eq!(mnbt(&llama, "0.8.3", 65536), 2048);
    assert_eq!(mnbt(&llama, "0.6.3", 65536), 512);
    assert_eq!(mnbt(&llama, "0.8.3", 8192), 8192);
    let dsv3 = match catalog::lookup("deepseek-v3").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    // MLA: 0.7.2 still chunks it; 0.8.3's _set_default_args_v0 does not.
    assert_eq!(mnbt(&dsv3, "0.7.2", 65536), 2048);
    assert_eq!(mnbt(&dsv3, "0.8.3", 65536), 65536);
}

/// A vision tower under TP: the encoder layers' linears split, the rest replicated. Llama 3.2
/// Vision's tower and projector (895,028,755 parameters as transformers counts them, 32 local +
/// 8 global layers of width 1280 and MLP 5120) at TP 2 keeps 108.6 M parameters whole on each
/// GPU: vLLM 0.6.3's tile position table and `nn.Linear` projector. vllm#10034 logged 10.0714
/// GiB per GPU at TP 2 (`unseen-round2.json`), 0.1 GiB above the all-split count.
#[test]
fn a_vision_towers_embeddings_and_projector_stay_whole_under_tp() {
    use vram_model::mech::{Vision, VisionInput};
    let v = Vision {
        depth: 40,
        hidden: 1280,
        intermediate: 5120,
        heads: 16,
        patch: 14,
        params: 895_028_755,
        input: VisionInput::CrossTiles {
            image: 560,
            tiles: 4,
            intermediate_layers: 5,
        },
        patch_elems: 588,
        out: 4096,
        gated: false,
        deepstack: 0,
        tp_split: true,
        projector_split: 0,
        images: None,
        linears: Vec::new(),
    };
    let split = 40 * (4 * 1280 * 1280 + 2 * 1280 * 5120) as u64;
    assert_eq!(weights::vision_tower_per_gpu(&v, 1, true), 895_028_755.0);
    let tp2 = weights::vision_tower_per_gpu(&v, 2, true);
    assert_eq!(tp2, split as f64 / 2.0 + (895_028_755 - split) as f64);
    assert!((895_028_755.0 - split as f64 - 108_596_755.0).abs() < 1.0);
}

/// vLLM builds Qwen's patch mergers (and Qwen3-VL's deepstack mergers) from
/// `ColumnParallelLinear` / `RowParallelLinear` (`Qwen3_VisionPatchMerger`, `qwen3_vl.py` at
/// 0.11.0 to 0.23.0), so they split across the TP group with the encoder layers; so does SGLang
/// (`Qwen2VisionPatchMerger`, `Qwen2_5_VisionPatchMerger` at 0.4.6.post5, 0.5.10 and 0.5.13,
/// `Qwen3VLMoeVisionPatchMerger` at 0.5.10 and 0.5.13, which Qwen3.5 inherits). Qwen3.5-27B's
/// tower: width 1152, 27 layers of MLP 4304, one merger of `4608 -> 4608 -> 5120`;
/// Qwen3-VL-30B-A3B's: four mergers into 2048.
#[test]
fn qwen_patch_mergers_split_across_tp() {
    let layers = 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304u64);
    let merger = |out: u64| 4608 * 4608 + 4608 + out * 4608;
    for (id, split_mergers) in [
        ("qwen3.5-27b", merger(5120)),
        ("qwen3-vl-30b-a3b", 4 * merger(2048)),
    ] {
        let t = model(id);
        let all = weights::towers_per_gpu(&t, 1, Engine::Vllm);
        let split = (layers + split_mergers) as f64;
        assert_eq!(
            weights::towers_per_gpu(&t, 4, Engine::Vllm),
            split / 4.0 + (all - split),
            "{id}"
        );
        assert_eq!(
            weights::towers_per_gpu(&t, 4, Engine::Sglang),
            split / 4.0 + (all - split),
            "{id}"
        );
    }
}

/// Kimi-K2.5's MoonViT per GPU at TP 8: vLLM splits the layers' attention and MLP
/// (`kimi_k25_vit.py`: QKVParallelLinear, Column/RowParallelLinear); SGLang 0.5.9 splits the
/// attention (`VisionAttention`, `use_qkv_parallel`) but builds the MLP from plain `nn.Linear`s
/// (`kimi_vl_moonvit.py` `MLP2`), whole on every GPU. Both keep the embeddings, norms, biases
/// and the projector whole.
#[test]
fn kimi_k25_tower_splits_as_each_engine_builds_it() {
    let text = include_str!("../../../../tests/zoo/nearmiss/kimi-k2.5.json");
    let Model::Transformer(t) = vram_model::hf::parse_config(text, "kimi-k2.5").unwrap() else {
        unreachable!()
    };
    let all = 416_866_032u64 + 54_277_888;
    let (attn, mlp) = (27 * 4 * 1152 * 1152u64, 27 * 2 * 1152 * 4304u64);
    assert_eq!(
        weights::towers_per_gpu(&t, 8, Engine::Vllm),
        ((attn + mlp) / 8 + (all - attn - mlp)) as f64
    );
    assert_eq!(
        weights::towers_per_gpu(&t, 8, Engine::Sglang),
        (attn / 8 + (all - attn)) as f64
    );
}

/// Mistral-Small-3.1-24B-Instruct-2503 (the release's config.json, whose `text_config` sets no
/// `tie_word_embeddings`): transformers 5.24 ties the head by the wrapper's config (Mistral3Config's
/// default, true), but vLLM 0.19 builds the language model from `text_config` alone
/// (`pixtral.py` and `mistral3.py`: `init_vllm_registered_model(hf_config=config.text_config)`;
/// `llama.py` ties by that config; MistralConfig's default false; Mistral-format `params.json`
/// read with `tied_embeddings` default false), so its head is a second 131,072 x 5,120 table.
/// SGLang (not re-read) is left as transformers ties it.
#[test]
fn vllm_ties_a_wrappers_head_as_its_text_config_says() {
    let text = include_str!(
        "../../../vram-cli/tests/data/serving/configs/mistral-small-3.1-24b-instruct-2503.json"
    );
    let Model::Transformer(t) = vram_model::hf::parse_config(text, "mistral-small").unwrap() else {
        unreachable!()
    };
    assert!(t.blocks.head.tied);
    assert!(!t.blocks.head.vllm_tied());
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs::default();
    let mut as_transformers = t.clone();
    as_transformers.blocks.head.text_tied = None;
    let table = 131_072 * 5_120 * 2;
    assert_eq!(
        weights_per_gpu(&t, &k, h100, Engine::Vllm),
        weights_per_gpu(&as_transformers, &k, h100, Engine::Vllm) + table
    );
    assert_eq!(
        weights_per_gpu(&t, &k, h100, Engine::Sglang),
        weights_per_gpu(&as_transformers, &k, h100, Engine::Sglang)
    );
}

/// vLLM on ROCm logs "Model loading took" as the fall in free device memory
/// (`RocmPlatform.get_current_memory_usage`), so the caching allocator's rounding is in it; on
/// CUDA it is `max_memory_allocated`: the tensors, plus each large tensor's whole segment where
/// the allocator leaves 1 MiB or less unsplit. QwQ-32B at TP 4 per layer: QKV 17.5 MiB (a
/// 18 MiB segment, 0.5 left: counted), the output 12.5 MiB (14, 1.5 left: split off), gate-up
/// 135 MiB (136, 1 left: counted), down 67.5 MiB (68: counted); the two 371.25 MiB tables
/// (372: counted).
#[test]
fn model_loading_counts_what_the_allocator_hands_out() {
    let t = qwq32b();
    let k = Knobs {
        tp: 4,
        engine_version: Some([0, 17, 0]),
        ..Knobs::default()
    };
    let mi = vram_model::gpu::lookup("mi300x").unwrap();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let rocm = capacity(&t, mi, Engine::Vllm, &k).unwrap();
    let cuda = capacity(&t, h100, Engine::Vllm, &k).unwrap();
    assert_eq!(
        rocm.weights_bytes,
        weights_per_gpu(&t, &k, mi, Engine::Vllm) + 64 * 7 * MIB / 2 + 3 * MIB / 2
    );
    assert_eq!(allocated_rounding(&t, &k, h100), 64 * 2 * MIB + 3 * MIB / 2);
    assert_eq!(
        cuda.weights_bytes,
        weights_per_gpu(&t, &k, h100, Engine::Vllm) + 64 * 2 * MIB + 3 * MIB / 2
    );
}

/// facebook/opt-125m's shapes (transformers 5.24's `OPTConfig()` defaults) in float16: vLLM
/// 0.18.1 logs "Model loading took 0.24 GiB" at TP 1 and 0.12 at TP 2 on T4s (kaggle-vllm's
/// milestone-1 runs, round 9's fit half). The tensors are 250,527,744 bytes at TP 1 (the padded
/// token table, the 2,050-row learned position table, no rotary cache); the allocator hands the
/// twelve layers' 3.375, 1.125 and 4.5 MiB linears out of shared 20 MiB segments and a tensor
/// that leaves 1 MiB or less of one gets the rest of it (and the 73.7 MiB token table its whole
/// 74 MiB segment): 5,960,704 bytes more, 0.2389 GiB in all.
#[test]
fn model_loading_replays_the_allocator_over_shared_segments() {
    let text = r#"{"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768,
        "num_attention_heads": 12, "num_hidden_layers": 12, "ffn_dim": 3072,
        "max_position_embeddings": 2048, "vocab_size": 50272, "word_embed_proj_dim": 768,
        "do_layer_norm_before": true, "enable_bias": true, "activation_function": "relu",
        "tie_word_embeddings": true, "torch_dtype": "float16"}"#;
    let t = match vram_model::hf::parse_config(text, "opt-125m").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let k = Knobs {
        dtype_bytes: 2,
        engine_version: Some([0, 18, 1]),
        ..Knobs::default()
    };
    let t4 = vram_model::gpu::lookup("t4").unwrap();
    assert_eq!(
        weights::rotary_cache_bytes(&t, &Knobs::default(), Engine::Vllm, t4),
        0
    );
    let stored = weights_per_gpu(&t, &k, t4, Engine::Vllm);
    // Tensors, biases and norms (the small ones in the 512-byte-rounded small pool).
    assert_eq!(stored, 250_527_744);
    assert_eq!(allocated_rounding(&t, &k, t4), 5_960_704);
    let tp2 = Knobs { tp: 2, ..k };
    let loaded = weights_per_gpu(&t, &tp2, t4, Engine::Vllm) + allocated_rounding(&t, &tp2, t4);
    assert!(
        (loaded as f64 / (1u64 << 30) as f64 - 0.12).abs() < 0.005,
        "{loaded}"
    );
}

/// Capture sizes by version, read at the tags: V1 0.8.5 and 0.9.2 capture 1..512 whatever
/// `max_num_seqs` is (capped at `max_num_batched_tokens`), 0.10.1+ up to `2 × max_num_seqs`,
/// V0 up to the first size at least `max_num_seqs`.
#[test]
fn capture_sizes_follow_the_version() {
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 8, 5]), true, 1, 2048).len(),
        67
    );
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 9, 2]), true, 1, 256).last(),
        Some(&256)
    );
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 10, 1]), true, 1, 2048),
        vec![1, 2]
    );
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 11, 0]), true, 256, 8192).last(),
        Some(&512)
    );
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 6, 3]), false, 20, 8192).last(),
        Some(&24)
    );
    // 0.21 also captures an off-stride step budget no larger than the largest size
    // (`_set_cudagraph_sizes`, 0.21.0): 300 tokens with 256 sequences.
    let sizes = |v| vllm_capture_sizes(&llama3(), &at(v), true, 256, 300);
    assert_eq!(sizes([0, 20, 0]).last(), Some(&288));
    assert_eq!(sizes([0, 21, 0]).last(), Some(&300));
    assert_eq!(sizes([0, 21, 0]).len(), sizes([0, 20, 0]).len() + 1);
}

/// Graphs captured after the KV cache (before 0.20) that do not fit what the budget (with the
/// CUDA context beside it from 0.9, inside it before) and the profile's released peak leave are
/// a start-up failure whose line names the changes; `--enforce-eager` and the utilization it
/// names each start the engine.
#[test]
fn graphs_beyond_what_the_budget_leaves_fail_the_start() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("a10").unwrap();
    let k = Knobs {
        engine_version: Some([0, 8, 5]),
        max_model_len: Some(4096),
        max_num_seqs: Some(1),
        gpu_memory_utilization: Some(0.99),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert!(!c.starts && c.cuda_graph_bytes > 0 && !c.cuda_graph_in_budget);
    let line = c.log.last().unwrap();
    assert!(
        line.contains("while capturing CUDA graphs") && line.contains("--enforce-eager"),
        "{line}"
    );
    let eager = Knobs {
        enforce_eager: true,
        ..k
    };
    assert!(capacity(&t, gpu, Engine::Vllm, &eager).unwrap().starts);
    let u: f64 = line
        .split("--gpu-memory-utilization to ")
        .nth(1)
        .and_then(|s| s.get(..4))
        .and_then(|s| s.parse().ok())
        .expect(line);
    let lower = Knobs {
        gpu_memory_utilization: Some(u),
        ..k
    };
    assert!(capacity(&t, gpu, Engine::Vllm, &lower).unwrap().starts);
    // From 0.20 the graphs are inside the budget: the job starts with a smaller pool (at 0.96:
    // from 0.9 the CUDA context sits beside the budget, and 0.99 leaves it no room).
    let v20 = Knobs {
        engine_version: Some([0, 20, 0]),
        gpu_memory_utilization: Some(0.96),
        ..k
    };
    assert!(capacity(&t, gpu, Engine::Vllm, &v20).unwrap().starts);
}

/// V1 warms the sampler up after capturing the graphs (`compile_or_warm_up_model`, 0.8 on):
/// on an A10 at 0.95 the graphs take the room beyond the budget and the profile's released peak,
/// the warm-up over 256 rows does not fit, and the line is the engine's own; 64 sequences (the
/// change the message names) start it.
#[test]
fn the_sampler_warm_up_after_the_graphs_can_fail_the_start() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("a10").unwrap();
    let k = Knobs {
        engine_version: Some([0, 11, 0]),
        max_model_len: Some(4096),
        gpu_memory_utilization: Some(0.95),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert!(!c.starts && c.cuda_graph_bytes > 0 && c.kv_cache_bytes > 0);
    let line = c.log.last().unwrap();
    assert!(
        line.starts_with("RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization`"),
        "{line}"
    );
    let fewer = Knobs {
        max_num_seqs: Some(64),
        ..k
    };
    assert!(capacity(&t, gpu, Engine::Vllm, &fewer).unwrap().starts);
    let eager = Knobs {
        enforce_eager: true,
        ..k
    };
    assert!(capacity(&t, gpu, Engine::Vllm, &eager).unwrap().starts);
}

/// Where the CUDA context sits, by version: V1 before 0.9 and V0 0.6.4 count it inside the
/// budget (no baseline), V0 0.5.5 to 0.6.3 and 0.6.5 to 0.6.6 and V1 from 0.9 take a reading once
/// it exists (`engine::vllm_context_in_budget`); the non-torch line says which.
#[test]
fn the_cuda_context_sits_where_each_version_counts_it() {
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    for (v, v1, inside) in [
        ([0, 5, 5], false, false),
        ([0, 6, 3], false, false),
        ([0, 6, 4], false, true),
        ([0, 6, 5], false, false),
        ([0, 6, 6], false, false),
        ([0, 8, 5], true, true),
        ([0, 9, 2], true, false),
        ([0, 19, 0], true, false),
    ] {
        assert_eq!(engine::vllm_context_in_budget(&at(v), v1), inside, "{v:?}");
    }
    let gpu = vram_model::gpu::lookup("rtx-3090").unwrap();
    let (_, src) = non_torch::vllm_non_torch(&at([0, 6, 4]), false, gpu);
    assert!(src.contains("CUDA context inside"), "{src}");
    let (_, src) = non_torch::vllm_non_torch(&at([0, 6, 6]), false, gpu);
    assert!(src.contains("once the context existed"), "{src}");
}

/// V0 before 0.7 builds its memory outside PyTorch from the pieces its releases allocate after
/// `init_gpu_memory` is read (`non_torch::vllm_v0_before_07`): the kernel images, at 0.6.4 the
/// bare CUDA 12.4 context, the TP group's two NCCL communicators and the PP group's PyNccl one
/// under the NCCL the pinned torch ships, NVLS buffers on NVLS boards beyond two GPUs, and
/// custom all-reduce where built. The NVLS figure is the one vLLM's own NCCL log printed on
/// 8 x H200 under NCCL 2.20 (vllm#9699: `nvlsTotalSize 2415919104`).
#[test]
fn vllm_v0_before_07_counts_its_pieces() {
    let mib = 1u64 << 20;
    let at = |g: &str, tp: u64, pp: u64, version: [u32; 3]| {
        let g = vram_model::gpu::lookup(g).unwrap();
        let k = Knobs {
            tp,
            pp,
            engine_version: Some(version),
            ..Knobs::default()
        };
        let (v1, _) = engine::vllm_v1(&k, g);
        assert!(!v1, "{version:?}");
        non_torch::vllm_non_torch(&k, v1, g)
    };
    let images = 51 * mib;
    // TP 1, context beside the budget: the images alone.
    let (b, text) = at("l40s", 1, 1, [0, 6, 6]);
    assert_eq!(b, images, "{text}");
    assert!(text.contains("once the context existed"), "{text}");
    // 0.6.4 counts the context: the bare one under torch 2.5.1's CUDA 12.4.
    let g3090 = vram_model::gpu::lookup("rtx-3090").unwrap();
    let (b, text) = at("rtx-3090", 1, 1, [0, 6, 4]);
    assert_eq!(b, images + g3090.bare_context_bytes([12, 4]), "{text}");
    assert!(text.contains("CUDA context inside"), "{text}");
    // Two A10s (PCIe): two communicators of 51 MiB, no custom all-reduce.
    let (b, text) = at("a10", 2, 1, [0, 6, 3]);
    assert_eq!(b, images + 2 * 51 * mib, "{text}");
    assert!(text.contains("no custom all-reduce"), "{text}");
    // HGX A100 at TP 4: ring and tree on 24 channels in each of the two, custom all-reduce.
    let (b, text) = at("a100-80g", 4, 1, [0, 6, 5]);
    assert_eq!(b, images + 2 * 24 * 2 * 12 * mib + 26 * mib, "{text}");
    assert!(text.contains("NCCL 2.21.5"), "{text}");
    // H100 at TP 2: no NVLS at two GPUs.
    let (b, text) = at("h100-80g", 2, 1, [0, 6, 5]);
    assert_eq!(b, images + 2 * 24 * 12 * mib + 26 * mib, "{text}");
    assert!(text.contains("no NVLS at two GPUs"), "{text}");
    // 8 x H200 under NCCL 2.20.5 (0.6.3): NVLS 24 channels x 2 x (4 + 2) MiB x 8 heads a
    // communicator, the figure vllm#9699's NCCL log printed.
    let nvls_220 = 24 * 2 * 6 * mib * 8;
    assert_eq!(nvls_220, 2_415_919_104);
    let (b, text) = at("h200", 8, 1, [0, 6, 3]);
    assert_eq!(
        b,
        images + 2 * (24 * 2 * 12 * mib + nvls_220) + 26 * mib,
        "{text}"
    );
    assert!(text.contains("NVLS buffers"), "{text}");
    // NCCL 2.21.5 (0.6.4 on) cuts the NVLS buffer to 1 MiB + 2 MiB.
    let (b, _) = at("h200", 8, 1, [0, 6, 6]);
    assert_eq!(
        b,
        images + 2 * (24 * 2 * 12 * mib + 24 * 2 * 3 * mib * 8) + 26 * mib
    );
    // PP 2 alone: PyNccl's communicator of the PP group, one ring pair per channel.
    let (b, text) = at("a100-80g", 1, 2, [0, 6, 3]);
    assert_eq!(b, images + 24 * 12 * mib, "{text}");
    assert!(text.contains("PP group"), "{text}");
}

#[test]
fn interconnect_can_be_told() {
    let t = llama3();
    let mib = 1u64 << 20;
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let at = |i: Option<Interconnect>| {
        let k = Knobs {
            tp: 2,
            max_model_len: Some(4096),
            engine_version: parse_version("0.10.1"),
            interconnect: i,
            ..Knobs::default()
        };
        capacity(&t, a100, Engine::Vllm, &k)
            .unwrap()
            .non_torch_bytes
    };
    // The board's NVSwitch by default; without P2P (PCIe or host memory) and across nodes,
    // NCCL's two channels.
    assert_eq!(at(None), 24 * mib + 288 * mib);
    assert_eq!(at(Some(Interconnect::Pcie)), 24 * mib + 51 * mib);
    assert_eq!(at(Some(Interconnect::Network)), 24 * mib + 51 * mib);
    // 0.10 builds no FlashInfer fusion workspace: the NVLS communicator alone.
    assert_eq!(at(Some(Interconnect::NvSwitchNvls)), 24 * mib + 317 * mib);
}

/// vLLM V1 before 0.17 profiles the dummy sampler's PyTorch sort unless FlashInfer samples
/// (dennislee22/vLLM-benchmarking's 0.10.1 logs, round 4's fit half: the same Qwen2-7B TP-2 set-up
/// leaves 0.65 GiB outside the pool with FlashInfer and 1.55 GiB without it).
#[test]
fn flashinfer_sampler_needs_no_sort() {
    let t = llama3();
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let peak = |fi: bool, version: &str| {
        let k = Knobs {
            max_model_len: Some(8192),
            engine_version: parse_version(version),
            flashinfer_sampler: fi,
            ..Knobs::default()
        };
        capacity(&t, a100, Engine::Vllm, &k)
            .unwrap()
            .activation_peak_bytes
    };
    // 256 rows (max_num_seqs on an A100) of the padded vocabulary, plus the hidden states of
    // the 2048-token profile batch: the sort's 2 + 4 + 4 + 8 + 8 + 4 + 8 bytes an element
    // against FlashInfer's logits, fp32 copy, masked logits and probabilities (2 + 3 x 4).
    // (0.9 on: the gathered last rows and their random copy, and the cuBLAS workspace.)
    let rows_vocab = 256 * 128_256u64.div_ceil(64) * 64;
    let hidden = 2048 * 4096 * 2 + 2 * 256 * 4096 * 2;
    let ws = 2 * 4096 * 1024 + 8 * 16 * 1024;
    assert_eq!(peak(false, "0.10.1"), rows_vocab * 38 + hidden + ws);
    assert_eq!(peak(true, "0.10.1"), rows_vocab * 14 + hidden + ws);
    // From 0.17 the Triton kernel needs no sort either way; it keeps a cached buffer of one fp32
    // vocabulary row per program (108 on an A100's 108 SMs), which FlashInfer's sampler, deciding
    // the profile before 0.21, never allocates.
    assert_eq!(
        peak(false, "0.19.0"),
        peak(true, "0.19.0") + 108 * t.vocab() * 4
    );
}

/// vLLM 0.19's profile on an H100 (`_dummy_sampler_run`, `topk_topp_triton.py`,
/// `CublasHandlePool.cpp`): beside the sampler's per-row tensors it holds the gathered last rows
/// and `rand_like`'s copy, the Triton kernel's cached buffer of `min(next_power_of_2(min(SMs,
/// rows)), SMs)` fp32 vocabulary rows and the 32 MiB cuBLAS workspace. With the H100's defaults
/// (1,024 sequences, 8,192 tokens) Llama 3 8B's peak is 1.885 GiB, where llm-d-planner's 0.19.0
/// H100 logs of Llama-3.1-8B print "torch peak memory increase: 1.89GiB" at TP 1, 2 and 4.
#[test]
fn vllm_0_19_profile_holds_the_triton_buffer_and_the_cublas_workspace() {
    let t = llama3();
    let v = t.vocab();
    let peak = |gpu: &str, seqs: Option<u64>| {
        let k = Knobs {
            max_model_len: Some(8192),
            max_num_seqs: seqs,
            engine_version: Some([0, 19, 0]),
            ..Knobs::default()
        };
        let gpu = vram_model::gpu::lookup(gpu).unwrap();
        capacity(&t, gpu, Engine::Vllm, &k)
            .unwrap()
            .activation_peak_bytes
    };
    let padded = v.div_ceil(64) * 64;
    let sampler =
        |rows: u64, tokens: u64| rows * padded * 14 + tokens * 4096 * 2 + 2 * rows * 4096 * 2;
    let h100 = peak("h100-80g", None);
    assert_eq!(h100, sampler(1024, 8192) + 132 * v * 4 + (32 << 20));
    assert!((h100 as f64 / (1u64 << 30) as f64 - 1.885).abs() < 0.001);
    // 64 rows: 64 programs, a power of two already, below the 132 SMs; the compiled forward's
    // live set (the piece's attention output and incoming residual, the new residual, gate_up,
    // the activation) is then the larger, and the buffer (allocated after it) is not beside it.
    assert_eq!(
        peak("h100-80g", Some(64)),
        (8192 * (4096 + 2 * 4096 + 3 * 14336) * 2).max(sampler(64, 8192) + 64 * v * 4) + (32 << 20)
    );
    // An A100's 108 SMs cap the buffer, and PyTorch's workspace off Hopper is 8.125 MiB (the
    // A100's default step is 2,048 tokens).
    assert_eq!(
        peak("a100-80g", Some(1024)),
        sampler(1024, 2048) + 108 * v * 4 + 2 * 4096 * 1024 + 8 * 16 * 1024
    );
}

/// Below 8 rows the PyTorch path sorts; FlashInfer spares the sort before 0.21, but from 0.21
/// `_dummy_sampler_run` samples again with a seeded generator, which sends the profile through
/// the PyTorch path whatever the sampler (`gpu_model_runner.py`, `topk_topp_sampler.py` at 0.21.0).
#[test]
fn vllm_0_21_profiles_the_pytorch_sampler_even_with_flashinfer() {
    let t = llama3();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let peak = |fi: bool, v: [u32; 3]| {
        let k = Knobs {
            max_model_len: Some(8192),
            max_num_seqs: Some(4),
            // A step of 8 tokens, so the sampler's 4 rows outweigh one layer's live set.
            max_num_batched_tokens: Some(8),
            engine_version: Some(v),
            flashinfer_sampler: fi,
            ..Knobs::default()
        };
        capacity(&t, h100, Engine::Vllm, &k)
            .unwrap()
            .activation_peak_bytes
    };
    assert!(peak(true, [0, 20, 0]) < peak(false, [0, 20, 0]));
    assert_eq!(peak(true, [0, 21, 0]), peak(false, [0, 21, 0]));
    assert_eq!(peak(false, [0, 21, 0]), peak(false, [0, 20, 0]));
}

/// `CacheConfig.gpu_memory_utilization` defaults to 0.92 from vLLM 0.20.0 (0.9 at 0.19.1;
/// `vllm/config/cache.py`, still 0.92 at 0.33.0); a value the user gives is kept.
#[test]
fn vllm_0_20_defaults_to_0_92_of_the_device() {
    let t = llama3();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], util: Option<f64>| {
        let k = Knobs {
            max_model_len: Some(8192),
            engine_version: Some(v),
            gpu_memory_utilization: util,
            ..Knobs::default()
        };
        capacity(&t, h100, Engine::Vllm, &k)
            .unwrap()
            .memory_fraction
    };
    assert_eq!(at([0, 19, 1], None), 0.9);
    assert_eq!(at([0, 20, 0], None), 0.92);
    assert_eq!(at([0, 22, 1], None), 0.92);
    assert_eq!(at([0, 21, 0], Some(0.8)), 0.8);
}

/// vLLM 0.27.0 and later are refused with what changed; 0.22 to 0.26 refuse only what their V2
/// model runner takes by default (`DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` and, from 0.25, any
/// model without experts; 0.22.0-0.26.0).
#[test]
fn versions_past_0_26_and_the_v2_runner_are_not_modelled() {
    for v in [
        [0, 22, 1],
        [0, 23, 0],
        [0, 24, 0],
        [0, 25, 0],
        [0, 25, 1],
        [0, 26, 0],
    ] {
        assert!(Engine::Vllm.unmodelled(v).is_none(), "{v:?}");
    }
    let why = Engine::Vllm.unmodelled([0, 29, 0]).unwrap();
    assert!(
        why.starts_with("vLLM 0.27 changed") && why.contains("0.5 to 0.26"),
        "{why}"
    );
    assert!(Engine::Vllm.unmodelled([0, 27, 0]).is_some());
    assert!(Engine::Sglang.unmodelled([0, 29, 0]).is_none());
    let qwen3 = match catalog::lookup("qwen3-8b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let archs = vec!["Qwen3ForCausalLM".to_string()];
    let at = |v: [u32; 3], q: Quantization| Knobs {
        engine_version: Some(v),
        quantization: q,
        ..Knobs::default()
    };
    let why = vllm_v2_runner(&archs, &qwen3, &at([0, 22, 0], Quantization::None)).unwrap();
    assert!(
        why.starts_with("vLLM 0.22 runs Qwen3ForCausalLM on its V2 model runner")
            && why.contains("--engine-version 0.21 is the newest"),
        "{why}"
    );
    assert!(vllm_v2_runner(&archs, &qwen3, &at([0, 21, 0], Quantization::None)).is_none());
    // `is_quantized` is the checkpoint's `quantization_config`, not `--quantization`: an
    // in-flight FP8 start of a bf16 Qwen3 still runs on V2 (config/vllm.py, 0.22.0).
    assert!(vllm_v2_runner(&archs, &qwen3, &at([0, 22, 1], Quantization::Fp8)).is_some());
    let mut fp8_checkpoint = qwen3.clone();
    fp8_checkpoint.blocks.storage.quant = vram_model::blocks::Quant::Fp8Block {
        bn: 128,
        bk: 128,
        skip_head: true,
        e8m0: false,
    };
    assert!(vllm_v2_runner(&archs, &fp8_checkpoint, &at([0, 22, 1], Quantization::None)).is_none());
    assert!(vllm_v2_runner(&archs, &fp8_checkpoint, &at([0, 23, 0], Quantization::None)).is_none());
    // 0.24 drops the dense, unquantized condition: the FP8 checkpoint runs on V2.
    assert!(vllm_v2_runner(&archs, &fp8_checkpoint, &at([0, 24, 0], Quantization::None)).is_some());
    // Llama joins the list at 0.23: V1 at 0.22, V2 from 0.23, and 0.22 is named as the newest
    // release that runs it on V1.
    let llama = vec!["LlamaForCausalLM".to_string()];
    assert!(vllm_v2_runner(&llama, &llama3(), &at([0, 22, 0], Quantization::None)).is_none());
    let why = vllm_v2_runner(&llama, &llama3(), &at([0, 23, 0], Quantization::None)).unwrap();
    assert!(
        why.starts_with("vLLM 0.23 runs LlamaForCausalLM on its V2 model runner")
            && why.contains("--engine-version 0.22 is the newest")
            && !why.contains("--reasoning-parser"),
        "{why}"
    );
    // An MoE model (`is_moe`) stays on V1 at 0.22 and 0.23 whatever its architecture; at
    // 0.24 a Qwen2-MoE checkpoint runs on V2, a Qwen3-MoE one (not in the list) on V1.
    let moe = match catalog::lookup("qwen3-30b-a3b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    assert!(vllm_v2_runner(&archs, &moe, &at([0, 22, 0], Quantization::None)).is_none());
    assert!(vllm_v2_runner(&archs, &moe, &at([0, 23, 0], Quantization::None)).is_none());
    let qwen2_moe = vec!["Qwen2MoeForCausalLM".to_string()];
    assert!(vllm_v2_runner(&qwen2_moe, &moe, &at([0, 24, 0], Quantization::None)).is_some());
    let qwen3_moe = vec!["Qwen3MoeForCausalLM".to_string()];
    assert!(vllm_v2_runner(&qwen3_moe, &moe, &at([0, 24, 0], Quantization::None)).is_none());
    // VLLM_USE_V2_MODEL_RUNNER decides when given: 0 keeps V1 (what vram models), 1 asks
    // for V2 at any version.
    let env = |v: [u32; 3], on: bool| Knobs {
        vllm_v2_runner: Some(on),
        ..at(v, Quantization::None)
    };
    assert!(vllm_v2_runner(&archs, &qwen3, &env([0, 22, 1], false)).is_none());
    assert!(vllm_v2_runner(&llama, &llama3(), &env([0, 24, 0], false)).is_none());
    let why = vllm_v2_runner(&llama, &llama3(), &env([0, 21, 0], true)).unwrap();
    assert!(why.starts_with("--vllm-use-v2-model-runner 1"), "{why}");
    // The refusal names what sends the model back to V1, from the list read at that release.
    let why = vllm_v2_runner(&archs, &qwen3, &at([0, 22, 1], Quantization::None)).unwrap();
    assert!(
        why.contains("--reasoning-parser") && why.contains("--vllm-use-v2-model-runner 0"),
        "{why}"
    );
    let why = vllm_v2_runner(&archs, &qwen3, &at([0, 24, 0], Quantization::None)).unwrap();
    assert!(why.contains("--enable-elastic-ep"), "{why}");
    // No architecture named (no config.json): the runner cannot be told at 0.22-0.24, so the
    // start is refused unless the user says V1; 0.21 has no V2 default.
    let why = vllm_v2_runner(&[], &llama3(), &at([0, 23, 0], Quantization::None)).unwrap();
    assert!(
        why.contains("names neither its architectures nor its model_type"),
        "{why}"
    );
    // A catalog config names its model_type: llama is transformers' LlamaForCausalLM (V2 at
    // 0.23), gpt2 is in no V2 list (V1).
    let why = vllm_v2_runner_of(
        &[],
        Some("llama"),
        &llama3(),
        &at([0, 23, 0], Quantization::None),
    );
    assert!(why.unwrap().starts_with("vLLM 0.23 runs LlamaForCausalLM"));
    assert!(vllm_v2_runner_of(
        &[],
        Some("gpt2"),
        &llama3(),
        &at([0, 24, 0], Quantization::None)
    )
    .is_none());
    assert!(vllm_v2_runner(&[], &llama3(), &env([0, 23, 0], false)).is_none());
    assert!(vllm_v2_runner(&[], &llama3(), &at([0, 21, 0], Quantization::None)).is_none());
    let series: Vec<[u32; 2]> = VLLM_V2_RUNNER_DEFAULTS.iter().map(|(s, _)| *s).collect();
    assert_eq!(series, [[0, 22], [0, 23], [0, 24], [0, 25], [0, 26]]);
    let lacks: Vec<[u32; 2]> = VLLM_V2_RUNNER_LACKS.iter().map(|(s, _)| *s).collect();
    assert_eq!(lacks, series);
    assert_eq!(VLLM_V2_RUNNER_DEFAULTS[0].1, &["Qwen3ForCausalLM"][..]);
    assert_eq!(VLLM_V2_RUNNER_DEFAULTS[2].1.len(), 6);
    assert_eq!(VLLM_V2_RUNNER_DEFAULTS[3].1.len(), 3);
    assert_eq!(VLLM_V2_RUNNER_DEFAULTS[4].1.len(), 6);
    // From 0.25 any model without experts runs on V2 whatever its architecture (gpt2 and
    // Qwen2 are in no list), named or not; 0.24 is the newest that runs such a model on V1.
    for v in [[0, 25, 0], [0, 26, 0]] {
        let why =
            vllm_v2_runner_of(&[], Some("gpt2"), &llama3(), &at(v, Quantization::None)).unwrap();
        assert!(
            why.contains("a generating model without experts")
                && why.contains("0.24 is the newest"),
            "{why}"
        );
        let qwen2 = vec!["Qwen2ForCausalLM".to_string()];
        assert!(vllm_v2_runner(&qwen2, &llama3(), &at(v, Quantization::None)).is_some());
        // Llama was listed from 0.23: that stays the newest V1 release named.
        let why = vllm_v2_runner(&llama, &llama3(), &at(v, Quantization::None)).unwrap();
        assert!(why.contains("--engine-version 0.22 is the newest"), "{why}");
        assert!(vllm_v2_runner(&[], &llama3(), &at(v, Quantization::None)).is_some());
        // An MoE outside the list (Qwen3-MoE, round 19's 0.26 start) runs on V1; Qwen2-MoE,
        // listed, on V2; VLLM_USE_V2_MODEL_RUNNER=0 keeps any of them on V1.
        assert!(vllm_v2_runner(&qwen3_moe, &moe, &at(v, Quantization::None)).is_none());
        assert!(vllm_v2_runner(&qwen2_moe, &moe, &at(v, Quantization::None)).is_some());
        assert!(vllm_v2_runner(&qwen2, &llama3(), &env(v, false)).is_none());
    }
    // A hybrid model is no default of V2 from 0.25 (`is_hybrid`), whatever its experts.
    let hybrid = match catalog::lookup("nemotron-h-56b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    assert!(layers::is_hybrid(&hybrid));
    let arch = vec!["SomeHybridForCausalLM".to_string()];
    assert!(vllm_v2_runner(&arch, &hybrid, &at([0, 26, 0], Quantization::None)).is_none());
    let why = vllm_v2_runner(&qwen2_moe, &moe, &at([0, 26, 0], Quantization::None)).unwrap();
    assert!(
        !why.contains("--logprobs-mode") && why.contains("without MLA"),
        "{why}"
    );
}

/// SGLang's request-to-token map is allocated outside the profile: Llama 4 Scout's 10M-position
/// default context asks 80.04 GiB for it (sglang#5755, round 4's fit half), which no H100 has.
#[test]
fn sglang_request_map_can_refuse_a_long_context() {
    let t = match catalog::lookup("llama-4-scout").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let run = |len: Option<u64>| {
        let k = Knobs {
            tp: 8,
            max_model_len: len,
            enforce_eager: true,
            engine_version: parse_version("0.4.5"),
            ..Knobs::default()
        };
        capacity(&t, h100, Engine::Sglang, &k).unwrap()
    };
    let c = run(None);
    assert!(!c.starts);
    assert!(
        c.log
            .iter()
            .any(|l| l.contains("Tried to allocate 80.04 GiB")),
        "{:?}",
        c.log
    );
    // 131,072 positions: 2,049 x 131,076 x 4 bytes (1.0 GiB) fits beside the pool.
    assert!(run(Some(131_072)).starts);
}

/// gpt-oss's own config hook raises the largest capture size (`GptOssForCausalLMConfig`, read
/// at 0.10.1, 0.11.0, 0.14.1 and 0.19.0): 83 sizes to 1024 whatever `max_num_seqs` is, 81 to
/// 992 at 0.11; other models keep `min(2 × max_num_seqs, 512)`. From 0.14 the default steps
/// are 16 above 256 (0.14.1's `_set_cudagraph_sizes`).
#[test]
fn gpt_oss_captures_its_own_sizes() {
    let oss = model("gpt-oss-20b");
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let sizes = vllm_capture_sizes(&oss, &at([0, 10, 1]), true, 1, 2048);
    assert_eq!((sizes.len(), sizes.last()), (83, Some(&1024)));
    let sizes = vllm_capture_sizes(&oss, &at([0, 11, 0]), true, 256, 8192);
    assert_eq!((sizes.len(), sizes.last()), (81, Some(&992)));
    assert_eq!(
        vllm_capture_sizes(&oss, &at([0, 19, 0]), true, 1024, 8192).len(),
        83
    );
    // Capped by the batch budget as the defaults are; V0 has no hook.
    assert_eq!(
        vllm_capture_sizes(&oss, &at([0, 19, 0]), true, 1024, 512).last(),
        Some(&512)
    );
    assert_eq!(
        vllm_capture_sizes(&llama3(), &at([0, 14, 1]), true, 256, 8192).len(),
        51
    );
}

/// Without vLLM's custom all-reduce (PCIe, no P2P, across nodes, or a TP size it does not
/// support) every graph captures PyNccl's all-reduces: twice a layer and once after the
/// embedding, each keeping `NCCL_CAPTURED_BYTES`, or `NCCL_CAPTURED_PROXY_BYTES` where the
/// network's proxy adds a host node. NVSwitch boards at TP 2–8 and TP 1 capture none.
#[test]
fn nccl_all_reduces_captured_without_custom_all_reduce() {
    let t = llama3();
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let graphs = |tp: u64, i: Option<Interconnect>| {
        let k = Knobs {
            tp,
            engine_version: parse_version("0.10.1"),
            interconnect: i,
            ..Knobs::default()
        };
        vllm_graphs(&t, a100, &k, true, 256, 2048, None)
    };
    let n = 67 * (2 * 32 + 1);
    assert_eq!(graphs(2, None).nccl, 0);
    assert_eq!(graphs(1, Some(Interconnect::Pcie)).nccl, 0);
    assert_eq!(
        graphs(2, Some(Interconnect::Pcie)).nccl,
        n * NCCL_CAPTURED_BYTES
    );
    assert_eq!(
        graphs(4, Some(Interconnect::Network)).nccl,
        n * NCCL_CAPTURED_PROXY_BYTES
    );
    assert_eq!(graphs(3, None).nccl, n * NCCL_CAPTURED_BYTES);
    let g = graphs(2, Some(Interconnect::Pcie));
    assert_eq!(g.bytes(), g.pool + g.driver + g.nccl + g.cublas);
}

/// Gemma 3's image tokens attend both ways from vLLM 0.13 (`is_mm_prefix_lm`), so FlashAttention
/// is refused and its Hopper FULL-graph split accumulators are not held: the graph pool is the
/// largest capture's live set alone. At 0.12 (no such list) and for Gemma 3's text-only
/// `gemma3_text` the accumulators stay. A Hopper log pair (llm-d-planner d3121e05, vLLM 0.19.0,
/// "Using TRITON_ATTN attention backend") moved from +13.5 % / +23.7 % to +4.3 % / +13.3 %.
#[test]
fn mm_prefix_models_hold_no_flash_attention_accumulators() {
    let parse = |json: &str| match vram_model::hf::parse_config(json, "m").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gemma3_4b = r#"{"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 34, "sliding_window": 1024}}"#;
    let vlm = parse(gemma3_4b);
    let mut text = vlm.clone();
    text.model_type = "gemma3_text".into();
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let on = |gpu, t: &Transformer, v| vllm_graphs(t, gpu, &at(v), true, 1024, 8192, None).pool;
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let (q, _) = vlm.blocks.typical().attn_widths();
    let heads = vlm.blocks.typical().heads;
    // vLLM's H100 defaults: 1,024 sequences, so FULL decode graphs up to 512 tokens.
    let accum = 32 * 512 * (q + heads) * 4;
    assert!(vllm_runs_triton_attention(&vlm, &at([0, 13, 0])));
    assert!(!vllm_runs_triton_attention(&vlm, &at([0, 12, 0])));
    assert!(!vllm_runs_triton_attention(&text, &at([0, 19, 0])));
    // The live set does not depend on the board; on an A100 (FlashAttention 2) no accumulators.
    let live = on(a100, &vlm, [0, 19, 0]);
    assert!(accum > live);
    assert_eq!(on(h100(), &vlm, [0, 19, 0]), live);
    // FULL_AND_PIECEWISE: the accumulators' own segment on top of the piecewise live set.
    assert_eq!(on(h100(), &text, [0, 19, 0]), live + accum);
    assert_eq!(
        on(h100(), &vlm, [0, 12, 0]),
        on(a100, &vlm, [0, 12, 0]) + accum
    );
}

/// Gemma 4 26B-A4B: sliding layers of head size 256, full layers of 512. From vLLM 0.20 its
/// config hook (`Gemma4Config`) puts every layer on Triton attention, so its Hopper FULL graphs
/// hold no FlashAttention accumulators; at 0.19 its sliding layers still run FlashAttention.
#[test]
fn gemma4_mixed_head_sizes_run_on_triton_from_0_20() {
    let t = model("gemma-4-26b-a4b");
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    assert!(!vllm_runs_triton_attention(&t, &at([0, 19, 0])));
    assert!(vllm_runs_triton_attention(&t, &at([0, 20, 0])));
    // A model with one head size is not touched by the hook.
    assert!(!vllm_runs_triton_attention(&llama3(), &at([0, 22, 0])));
}

/// `--interconnect` on one GPU with no TP, PP or DP group changes nothing: refused in one line,
/// as every flag the run would ignore; with a group it is taken.
#[test]
fn interconnect_without_a_group_is_refused() {
    let t = llama3();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |tp: u64, pp: u64, dp: u64| Knobs {
        tp,
        pp,
        dp,
        interconnect: Some(Interconnect::Pcie),
        ..Knobs::default()
    };
    let e = capacity(&t, h100, Engine::Vllm, &at(1, 1, 1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("changes nothing") && !e.contains('\n'), "{e}");
    for engine in [Engine::Vllm, Engine::Sglang] {
        assert!(capacity(&t, h100, engine, &at(1, 1, 1)).is_err());
        assert!(capacity(&t, h100, engine, &at(2, 1, 1)).is_ok());
        assert!(capacity(&t, h100, engine, &at(1, 2, 1)).is_ok());
    }
    // DP alone: vLLM's DP group talks over it; SGLang's builds no communicator.
    assert!(capacity(&t, h100, Engine::Vllm, &at(1, 1, 2)).is_ok());
    let e = capacity(&t, h100, Engine::Sglang, &at(1, 1, 2))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SGLang's TP or PP group") && !e.contains('\n'),
        "{e}"
    );
}

/// vLLM's plain AWQ/GPTQ kernels (`engine::vllm_dequant_linears`): which kernel runs, by the
/// method named and the GPU (`override_quantization_method`, `check_marlin_supported`), and from
/// how many tokens the whole weight is dequantized (`awq.py`: 256; `gptq_gemm`: every call).
#[test]
fn vllm_plain_awq_and_gptq_kernels_by_method_and_gpu() {
    let t = model("qwen3-32b");
    let t4 = vram_model::gpu::lookup("t4").unwrap();
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let k = |quantization, marlin| Knobs {
        quantization,
        marlin,
        ..Knobs::default()
    };
    use Quantization::{Awq, Fp8, Gptq};
    // The config decides: Marlin from compute capability 8.0.
    assert_eq!(
        engine::vllm_dequant_linears(&t, &k(Awq, None), t4),
        Some(256)
    );
    assert_eq!(engine::vllm_dequant_linears(&t, &k(Awq, None), a100), None);
    assert_eq!(
        engine::vllm_dequant_linears(&t, &k(Gptq, None), t4),
        Some(0)
    );
    assert_eq!(engine::vllm_dequant_linears(&t, &k(Gptq, None), a100), None);
    // `--quantization awq` / `gptq` named: the plain kernel even where Marlin runs.
    assert_eq!(
        engine::vllm_dequant_linears(&t, &k(Awq, Some(false)), a100),
        Some(256)
    );
    assert_eq!(
        engine::vllm_dequant_linears(&t, &k(Gptq, Some(false)), a100),
        Some(0)
    );
    // `awq_marlin` named, or another method: no dequantized temporary.
    assert_eq!(
        engine::vllm_dequant_linears(&t, &k(Awq, Some(true)), a100),
        None
    );
    assert_eq!(engine::vllm_dequant_linears(&t, &k(Fp8, None), t4), None);
    // By version: Marlin from 7.5 at vLLM 0.14 (`query_marlin_supported_quant_types`), so a T4
    // runs it and a V100 (7.0) does not; SGLang keeps 8.0.
    let at = |quantization, marlin, v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..k(quantization, marlin)
    };
    let v100 = vram_model::gpu::lookup("v100-32g").unwrap();
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Awq, None, [0, 13, 0]), t4),
        Some(256)
    );
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Awq, None, [0, 14, 0]), t4),
        None
    );
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Gptq, None, [0, 19, 0]), v100),
        Some(0)
    );
    assert_eq!(
        engine::sglang_dequant_linears(&t, &at(Awq, None, [0, 5, 3]), t4),
        Some(0)
    );
    // From 0.22 `gptq` named is `AutoGPTQConfig`, the Marlin family; `awq` named stays plain.
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Gptq, Some(false), [0, 21, 0]), a100),
        Some(0)
    );
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Gptq, Some(false), [0, 22, 0]), a100),
        None
    );
    assert_eq!(
        engine::vllm_dequant_linears(&t, &at(Awq, Some(false), [0, 22, 0]), a100),
        Some(256)
    );
}

/// The profile run under plain AWQ holds the largest linear's fp16 weight at its matmul: for
/// Qwen3-32B at TP 1 over 32,768 eager tokens that is `down_proj` (`[25600, 5120]`, beside the
/// MLP's live set and the layer input the model's loop holds), so the activation peak is
/// exactly that weight above AWQ-Marlin's. At TP 4 the weight (`[6400, 5120]`) is freed before
/// `down_proj`'s all-reduce, whose new result (`tokens × h`) is the larger: no difference.
/// Below 256 tokens AWQ runs `awq_gemm` (no temporary) while GPTQ's `gptq_gemm` still makes one.
/// One sequence a step keeps the sampler's dummy run below the layer's live set.
#[test]
fn vllm_plain_awq_profile_holds_the_dequantized_down_proj() {
    let t = model("qwen3-32b");
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let on = |tp, quantization, marlin, tokens| {
        let k = Knobs {
            quantization,
            marlin,
            tp,
            vllm_v0: true,
            engine_version: Some([0, 8, 5]),
            max_model_len: Some(32768),
            max_num_batched_tokens: Some(tokens),
            max_num_seqs: Some(1),
            ..Knobs::default()
        };
        capacity(&t, a100, Engine::Vllm, &k)
            .unwrap()
            .activation_peak_bytes
    };
    let at = |quantization, marlin, tokens| on(1, quantization, marlin, tokens);
    let down = 25600 * 5120 * 2;
    let plain = at(Quantization::Awq, Some(false), 32768);
    let marlin = at(Quantization::Awq, Some(true), 32768);
    assert_eq!(plain - marlin, down);
    // V0 from 0.7 holds PyTorch's cuBLAS workspace too (`sampler::vllm_cublas_workspace`:
    // 8.125 MiB off Hopper).
    let ws = 2 * 4096 * 1024 + 8 * 16 * 1024;
    assert_eq!(plain, 32768 * (4 * 5120 + 3 * 25600) * 2 + down + ws);
    assert_eq!(
        on(4, Quantization::Awq, Some(false), 32768),
        on(4, Quantization::Awq, Some(true), 32768)
    );
    // 255 tokens: AWQ's awq_gemm path has no temporary; GPTQ's gptq_gemm does.
    assert_eq!(
        at(Quantization::Awq, Some(false), 255),
        at(Quantization::Awq, Some(true), 255)
    );
    assert!(at(Quantization::Gptq, Some(false), 255) > at(Quantization::Gptq, Some(true), 255));
}

/// V1 before 0.8 profiles the logits of every token of the step and no sampler (0.7.2's
/// `profile_run`), all-gathered over TP; before 0.9 its budget holds the CUDA context
/// (`determine_available_memory` takes no baseline at 0.7.2 and 0.8.5; 0.9.2 does).
#[test]
fn vllm_v1_before_0_8_profiles_every_tokens_logits_and_before_0_9_counts_the_context() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], tp: u64| Knobs {
        engine_version: Some(v),
        vllm_v1: true,
        max_model_len: Some(2048),
        max_num_batched_tokens: Some(8192),
        tp,
        ..Knobs::default()
    };
    // 128,256 rows of the head padded to 64: 128,256; bf16.
    let tp1 = 8192 * (4096 + 128_256) * 2;
    assert_eq!(v1_07_logits_peak(&t, 8192, &at([0, 7, 2], 1)), tp1);
    assert_eq!(
        v1_07_logits_peak(&t, 8192, &at([0, 7, 2], 2)),
        8192 * (4096 + 64_128 + 2 * 128_256) * 2
    );
    let c = capacity(&t, gpu, Engine::Vllm, &at([0, 7, 2], 1)).unwrap();
    assert!(c.activation_peak_bytes >= tp1);
    let ctx = gpu.context_bytes();
    let non_torch = |v: [u32; 3]| {
        capacity(&t, gpu, Engine::Vllm, &at(v, 1))
            .unwrap()
            .non_torch_bytes
    };
    assert_eq!(non_torch([0, 8, 5]), non_torch([0, 9, 2]) + ctx);
    assert_eq!(non_torch([0, 7, 2]), non_torch([0, 9, 2]) + ctx);
}

/// The model registry read from each release's sources (`data/engine-archs.tsv`): Qwen3 came
/// to vLLM in 0.8.4 and to SGLang in 0.4.5.post2, Gemma 4 to vLLM in 0.19.0, and vLLM dropped
/// Mllama after 0.10.2 (`_PREVIOUSLY_SUPPORTED_MODELS`).
#[test]
fn the_registry_refuses_a_pinned_release_without_the_architecture() {
    let qwen3 = vec!["Qwen3ForCausalLM".to_string()];
    let pinned = |v: &str| {
        let (version, pin) = parse_engine_version(v).unwrap();
        Knobs {
            engine_version: Some(version),
            engine_pin: pin,
            ..Knobs::default()
        }
    };
    // A release that has it loads, silently.
    let ok = registry_check(Engine::Vllm, &qwen3, &pinned("0.8.4")).unwrap();
    assert_eq!(ok, RegistryCheck::default());
    // The release before refuses with 0.8.3's own words and names the first that has it.
    let Err(Error::Capacity(e)) = registry_check(Engine::Vllm, &qwen3, &pinned("0.8.3")) else {
        panic!("vLLM 0.8.3 has no Qwen3ForCausalLM")
    };
    assert!(
        e.starts_with("vLLM 0.8.3 refuses this: ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now."),
        "{e}"
    );
    assert!(e.contains("from 0.8.4"), "{e}");
    assert!(!e.contains('\n'));
    // `0.8` names the series: 0.8.4 is in it, so it runs with a note.
    let series = registry_check(Engine::Vllm, &qwen3, &pinned("0.8")).unwrap();
    assert_eq!(series.version, Some([0, 8, 4]));
    assert!(series
        .note
        .unwrap()
        .contains("0.8.4 is the first vLLM 0.8 release"));
    // SGLang's tags: the post release that added it.
    let Err(Error::Capacity(e)) = registry_check(Engine::Sglang, &qwen3, &pinned("0.4.5")) else {
        panic!("SGLang 0.4.5 has no Qwen3ForCausalLM")
    };
    assert!(e.contains("from 0.4.5.post2"), "{e}");
    // A dropped architecture gets vLLM's own "was supported until" refusal.
    let mllama = vec!["MllamaForConditionalGeneration".to_string()];
    let Err(Error::Capacity(e)) = registry_check(Engine::Vllm, &mllama, &pinned("0.11.0")) else {
        panic!("vLLM 0.11 dropped Mllama")
    };
    assert!(
        e.contains("Model architecture MllamaForConditionalGeneration was supported in vLLM until v0.10.2, and is not supported anymore."),
        "{e}"
    );
    // Any one of the config's architectures is enough, as in the engine.
    let two = vec!["Nope".to_string(), "LlamaForCausalLM".to_string()];
    assert_eq!(
        registry_check(Engine::Vllm, &two, &pinned("0.5.0")).unwrap(),
        RegistryCheck::default()
    );
}

#[test]
fn the_default_moves_to_the_nearest_release_with_the_architecture() {
    let gemma4 = vec!["Gemma4ForConditionalGeneration".to_string()];
    let c = registry_check(Engine::Vllm, &gemma4, &Knobs::default()).unwrap();
    assert_eq!(c.version, Some([0, 19, 0]));
    let note = c.note.unwrap();
    assert!(
        note.starts_with("vLLM 0.11 (the default) has no Gemma4ForConditionalGeneration"),
        "{note}"
    );
    assert!(
        note.contains("vLLM 0.19.0's, the first release that has it"),
        "{note}"
    );
    // A dropped one moves back to the last release that had it.
    let mllama = vec!["MllamaForConditionalGeneration".to_string()];
    let c = registry_check(Engine::Vllm, &mllama, &Knobs::default()).unwrap();
    assert_eq!(c.version, Some([0, 10, 2]));
    assert!(c.note.unwrap().contains("the last release that has it"));
    // The default that has it: nothing to say.
    let llama = vec!["LlamaForCausalLM".to_string()];
    assert_eq!(
        registry_check(Engine::Sglang, &llama, &Knobs::default()).unwrap(),
        RegistryCheck::default()
    );
}

/// The registry read through vLLM 0.26.0: 0.24.0 names fourteen architectures 0.23.0 loads in
/// `_PREVIOUSLY_SUPPORTED_MODELS` (its `registry.py`), so a 0.24 start of one refuses with
/// 0.24's own words and a 0.23 start runs; a release's own wording is the one quoted (Phi-3
/// Small's changed at 0.10.1; Bart moved to `_OOT_SUPPORTED_MODELS`, a plugin, at 0.19.0).
#[test]
fn the_registry_quotes_each_release_s_own_refusal_through_0_26() {
    let pinned = |v: &str| {
        let (version, pin) = parse_engine_version(v).unwrap();
        Knobs {
            engine_version: Some(version),
            engine_pin: pin,
            ..Knobs::default()
        }
    };
    let refusal = |arch: &str, v: &str| {
        let archs = vec![arch.to_string()];
        match registry_check(Engine::Vllm, &archs, &pinned(v)) {
            Err(Error::Capacity(e)) => e,
            other => panic!("vLLM {v} should refuse {arch}: {other:?}"),
        }
    };
    let minimax = vec!["MiniMaxText01ForCausalLM".to_string()];
    assert_eq!(
        registry_check(Engine::Vllm, &minimax, &pinned("0.23.0")).unwrap(),
        RegistryCheck::default()
    );
    for v in ["0.24.0", "0.24"] {
        let e = refusal("MiniMaxText01ForCausalLM", v);
        assert!(
            e.starts_with("vLLM 0.24.0 refuses this: ValueError: Model architecture MiniMaxText01ForCausalLM was supported in vLLM until v0.23.0, and is not supported anymore."),
            "{e}"
        );
        assert!(e.contains("from 0.8.3 to 0.23.0"), "{e}");
        assert!(!e.contains('\n'));
    }
    // Dropped at 0.23.0, one release earlier.
    assert!(refusal("JAISLMHeadModel", "0.23.0").contains("until v0.22.0"));
    // Each release's wording: "version 0.9.2" at 0.10.0, "v0.9.2" from 0.10.1.
    assert!(refusal("Phi3SmallForCausalLM", "0.10.0").contains("until version 0.9.2,"));
    assert!(refusal("Phi3SmallForCausalLM", "0.24.0").contains("until v0.9.2,"));
    assert!(refusal("BartForConditionalGeneration", "0.18.1").contains("until v0.10.2,"));
    assert!(refusal("BartForConditionalGeneration", "0.24.0").contains(
        "Model architecture BartForConditionalGeneration is not supported in-tree anymore. Please install the plugin at https://github.com/vllm-project/bart-plugin"
    ));
    // Mllama, dropped at 0.11.0, still refused at 0.24.
    assert!(refusal("MllamaForConditionalGeneration", "0.24.0").contains("until v0.10.2,"));
    // An architecture 0.24.0 added loads there and not at 0.23.0.
    let hrm = vec!["HrmTextForCausalLM".to_string()];
    assert_eq!(
        registry_check(Engine::Vllm, &hrm, &pinned("0.24.0")).unwrap(),
        RegistryCheck::default()
    );
    assert!(refusal("HrmTextForCausalLM", "0.23.0").contains("from 0.24.0"));
}

/// The table reads releases vram does not model (0.25.0-0.26.0): the default moves only to a
/// modelled release, and says so where the first that has the architecture is not one.
#[test]
fn the_default_moves_only_to_a_modelled_release() {
    let inkling = vec!["LlavaOnevision2ForConditionalGeneration".to_string()];
    let c = registry_check(Engine::Vllm, &inkling, &Knobs::default()).unwrap();
    if Engine::Vllm.unmodelled([0, 25, 0]).is_some() {
        assert_eq!(c.version, None);
        let note = c.note.unwrap();
        assert!(
            note.starts_with("LlavaOnevision2ForConditionalGeneration is in vLLM's model registry only from 0.25.0, a release vram does not model; vLLM 0.11 (the default) loads it only through its Transformers backend"),
            "{note}"
        );
    } else {
        assert_eq!(c.version, Some([0, 25, 0]));
    }
}

/// vLLM 0.7.0-0.7.2 turns MLA off for an MLA model under AWQ/GPTQ/bitsandbytes/int8
/// (`ModelConfig.use_mla` at 0.7.2) and caches full K and V, which is not modelled: one line,
/// naming the engine's warning; FP8 keeps MLA, and 0.7.3 (no such gate) is modelled.
#[test]
fn vllm_072_disables_mla_under_awq_and_vram_says_so() {
    let dsv3 = match catalog::lookup("deepseek-v3").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let at = |v: [u32; 3], q: Quantization| Knobs {
        engine_version: Some(v),
        quantization: q,
        tp: 8,
        max_model_len: Some(8192),
        ..Knobs::default()
    };
    let e = capacity(&dsv3, gpu, Engine::Vllm, &at([0, 7, 2], Quantization::Awq))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MLA is not supported with awq quantization. Disabling MLA.")
            && !e.contains('\n'),
        "{e}"
    );
    assert!(capacity(&dsv3, gpu, Engine::Vllm, &at([0, 7, 2], Quantization::Gptq)).is_err());
    assert!(capacity(&dsv3, gpu, Engine::Vllm, &at([0, 7, 2], Quantization::Fp8)).is_ok());
    assert!(capacity(&dsv3, gpu, Engine::Vllm, &at([0, 7, 3], Quantization::Awq)).is_ok());
    assert!(capacity(&dsv3, gpu, Engine::Vllm, &at([0, 8, 5], Quantization::Awq)).is_ok());
    // A model without MLA is not affected.
    assert!(capacity(
        &llama3(),
        gpu,
        Engine::Vllm,
        &at([0, 7, 2], Quantization::Awq)
    )
    .is_ok());
}

fn h100() -> &'static vram_model::gpu::Gpu {
    vram_model::gpu::lookup("h100").unwrap()
}

/// vLLM's M-RoPE cache (`MRotaryEmbedding`, from 0.7.2 to 0.22.0) covers four times
/// `max_position_embeddings`, interleaved sections (Qwen3.5's
/// `mrope_interleaved`) included: `get_rope` builds `MRotaryEmbeddingInterleaved` (one) only for
/// `rope_type: openpangu` (0.18.0, 0.19.0); SGLang and plain rotary positions keep one.
#[test]
fn vllm_mrope_cache_positions() {
    let qwen2_vl = match catalog::lookup("qwen2-vl-2b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let qwen35 = match catalog::lookup("qwen3.5-27b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    assert_eq!(
        rotary_positions(&qwen2_vl, &at([0, 10, 2]), Engine::Vllm),
        4 * 32_768
    );
    // Before 0.7.2 one.
    assert_eq!(
        rotary_positions(&qwen2_vl, &at([0, 7, 1]), Engine::Vllm),
        32_768
    );
    assert_eq!(
        rotary_positions(&qwen2_vl, &Knobs::default(), Engine::Sglang),
        32_768
    );
    // Interleaved sections (Qwen3.5's `mrope_interleaved`): the same class, four times.
    assert_eq!(
        rotary_positions(&qwen35, &at([0, 19, 0]), Engine::Vllm),
        4 * 262_144
    );
    assert_eq!(
        rotary_positions(&llama3(), &at([0, 10, 2]), Engine::Vllm),
        8192
    );
}

/// A compressed-tensors W4A16 checkpoint of Qwen3-30B-A3B-2507 (the `Linear` group: int4,
/// group 128) under vLLM: `CompressedTensorsWNA16` packs the attention linears and
/// `CompressedTensorsWNA16MarlinMoEMethod` every expert (read at 0.10.0), each a packed int32
/// weight and a 16-bit scale per 128 inputs; the embedding, head, routers and norms stay bf16.
/// Symmetric (the only kind the MoE method accepts) holds no zero points; an asymmetric
/// checkpoint adds exactly one int32 word per 8 output rows per group of every packed linear.
#[test]
fn vllm_compressed_tensors_w4a16_packs_the_experts_and_zero_points_only_when_asymmetric() {
    let config = |symmetric: bool| {
        let mut c: serde_json::Value =
            serde_json::from_str(catalog::config_text("qwen3-30b-a3b-2507").unwrap()).unwrap();
        c["quantization_config"] = serde_json::json!({
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
                "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                    "group_size": 128, "symmetric": symmetric, "actorder": null}}},
            "ignore": ["lm_head", "re:.*mlp.gate$"]});
        match vram_model::hf::parse_config(&c.to_string(), "w4a16").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    };
    let gpu = vram_model::gpu::lookup("rtx-3090").unwrap();
    let k = Knobs::default();
    let w = |t: &Transformer| weights_per_gpu(t, &k, gpu, Engine::Vllm);
    let (sym, asym) = (config(true), config(false));
    // Per layer: q 4096, k 512, v 512, o 2048 rows (in 2048, 2048, 2048, 4096) and 128 experts
    // of gate-up 1536 (in 2048, one fused `w13` as vLLM holds it) and down 2048 (in 768): int4
    // weights, a bf16 scale per 128 inputs and an int64 `weight_shape` each.
    let packed = |out: u64, inp: u64| out * inp / 2 + out * (inp / 128) * 2 + 16;
    let layer = packed(4096, 2048)
        + 2 * packed(512, 2048)
        + packed(2048, 4096)
        + 128 * (packed(1536, 2048) + packed(2048, 768));
    // bf16: the embedding and head (151,936 × 2048 each), per layer the router (128 × 2048),
    // four norms of 2048 / 128 (input, post-attention, q, k); the final norm; the rotary cache
    // (262,144 positions × 128).
    let rest = 2 * 151_936 * 2048 + 48 * (128 * 2048 + 2 * 2048 + 2 * 128) + 2048;
    let rotary = 262_144 * 128 * 2;
    assert_eq!(w(&sym), 48 * layer + 2 * rest + rotary);
    let zeros = |out: u64, inp: u64| (out / 8) * (inp / 128) * 4;
    let layer_zeros = zeros(4096, 2048)
        + 2 * zeros(512, 2048)
        + zeros(2048, 4096)
        + 128 * (zeros(1536, 2048) + zeros(2048, 768));
    assert_eq!(w(&asym) - w(&sym), 48 * layer_zeros);
}

/// An AWQ or GPTQ MoE checkpoint read from its config (`quantization_config`, no
/// `--quantization`) is held as vLLM holds it: `AWQMoEMethod`/`GPTQMarlinMoEMethod` pack every
/// expert bank, so its weights are those of `--quantization awq`/`gptq` over the bf16 config,
/// not the bf16 experts (Qwen3-30B-A3B AWQ g128: 55.6 GiB before, 15.7 after). Per expert,
/// AWQ holds an int4 `qweight`, an int32 `qzeros` word per 8 outputs per group and a 16-bit
/// scale per output per group, exactly; GPTQ's bank makes `qzeros` in the model dtype.
#[test]
fn vllm_awq_and_gptq_moe_checkpoints_pack_their_expert_banks() {
    let base: serde_json::Value =
        serde_json::from_str(catalog::config_text("qwen3-30b-a3b-2507").unwrap()).unwrap();
    let parse =
        |c: &serde_json::Value| match vram_model::hf::parse_config(&c.to_string(), "q").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
    let with = |q: serde_json::Value| {
        let mut c = base.clone();
        c["quantization_config"] = q;
        parse(&c)
    };
    let awq = with(
        serde_json::json!({"quant_method": "awq", "bits": 4, "group_size": 128,
        "zero_point": true, "version": "gemm"}),
    );
    let gptq = |desc_act: bool| {
        with(
            serde_json::json!({"quant_method": "gptq", "bits": 4, "group_size": 128,
            "desc_act": desc_act, "sym": true}),
        )
    };
    let bf16 = parse(&base);
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs::default();
    let w = |t: &Transformer, q: Quantization| {
        weights_per_gpu(
            t,
            &Knobs {
                quantization: q,
                ..k
            },
            gpu,
            Engine::Vllm,
        )
    };
    // The config's AWQ is --quantization awq, to the byte.
    assert_eq!(w(&awq, Quantization::None), w(&bf16, Quantization::Awq));
    // AWQ banks: 48 layers of 128 experts, the fused gate-up 1536 × 2048 and down 2048 × 768.
    let bank =
        |out: u64, inp: u64| out * inp / 2 + (inp / 128) * (out / 8) * 4 + (inp / 128) * out * 2;
    let experts = 48 * 128 * (bank(1536, 2048) + bank(2048, 768));
    let stored = awq.blocks.as_engines_hold().weights_bytes(false);
    let dense_experts = 48 * 128 * (1536 * 2048 + 2048 * 768) * 2;
    assert_eq!(
        awq.blocks.weights_bytes(false) - stored,
        dense_experts - experts
    );
    // GPTQ (act-order off): the banks' qzeros in bf16, g_idx emptied after loading; the config's
    // GPTQ agrees with --quantization gptq on the banks, the attention linears as each counts.
    let g = gptq(false);
    let engine = |t: &Transformer| t.blocks.as_engines_hold().weights_bytes(false);
    let gbank =
        |out: u64, inp: u64| out * inp / 2 + (inp / 128) * (out / 8) * 2 + (inp / 128) * out * 2;
    let gexperts = 48 * 128 * (gbank(1536, 2048) + gbank(2048, 768));
    assert_eq!(
        g.blocks.weights_bytes(false) - engine(&g),
        dense_experts - gexperts
    );
    let (cfg, flag) = (w(&g, Quantization::None), w(&bf16, Quantization::Gptq));
    assert!(cfg.abs_diff(flag) * 1000 < flag, "{cfg} against {flag}");
    // act-order keeps each bank's g_idx and its sort indices: two int32 words per input row
    // of the fused gate-up (`w13_g_idx` `[E, hidden]`) and of the down projection.
    let rows = 48 * 128 * (2048 + 768);
    assert_eq!(engine(&gptq(true)) - engine(&g), 2 * 4 * rows);
}

/// The rotary `cos_sin_cache` is `[positions, rotary_dim]`, `rotary_dim` the part of each head
/// the rotary embedding turns, as vLLM's `get_rope` builds it (`rotary_dim =
/// int(head_size * partial_rotary_factor)`; MLA passes `qk_rope_head_dim`; GPT-J and MiniMax-M2
/// name `rotary_dim`). The widths are the ones transformers 5.24 builds on the meta device for
/// these configs (`rotary_emb.inv_freq` is `rotary_dim / 2` long: Qwen3.5-27B, Qwen3-Next,
/// MiniMax-M2.5, DeepSeek-V3 and DeepSeek-V2-Lite 32, Phi-4-mini 48, Llama 3.1 64).
#[test]
fn rotary_cache_is_as_wide_as_the_rotary_dimension() {
    let vllm = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let catalogued = |id: &str| match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    // (model, positions vLLM keeps at 0.19.0, rotary width)
    for (id, positions, width) in [
        // partial_rotary_factor 0.25 of head_dim 256; M-RoPE (interleaved) keeps four times
        // the positions.
        ("qwen3.5-27b", 4 * 262_144, 64),
        ("qwen3-next-80b-a3b", 262_144, 64),
        // rotary_dim 64 of head_dim 128.
        ("minimax-m2.5", 196_608, 64),
        // MLA: qk_rope_head_dim 64 (the head is 192 wide).
        ("deepseek-v3", 163_840, 64),
        ("llama-3.1-8b", 131_072, 128),
    ] {
        let t = catalogued(id);
        assert_eq!(
            weights::rotary_cache_bytes(&t, &vllm([0, 19, 0]), Engine::Vllm, h100()),
            positions * width * 2,
            "{id}"
        );
    }
    // Phi-4-mini (`Phi3ForCausalLM`, partial_rotary_factor 0.75 of head_dim 128), its
    // config.json's shape keys; SGLang's `get_rope` takes the same factor.
    let phi4_mini = r#"{"model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
        "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
        "partial_rotary_factor": 0.75, "vocab_size": 200064, "tie_word_embeddings": true}"#;
    let Model::Transformer(t) = vram_model::hf::parse_config(phi4_mini, "phi-4-mini").unwrap()
    else {
        unreachable!()
    };
    assert_eq!(
        t.blocks
            .representative()
            .mixer
            .as_attention()
            .unwrap()
            .rotary_dim(),
        96
    );
    // SGLang (0.5 by default) keeps its table in fp32 on CUDA.
    assert_eq!(
        weights::rotary_cache_bytes(&t, &Knobs::default(), Engine::Sglang, h100()),
        131_072 * 96 * 4
    );
    // The same factor inside `rope_parameters` (transformers 5's name) and a `rotary_dim`
    // that is no whole percent of the head, refused in one line.
    let nested = phi4_mini.replace(
        r#""partial_rotary_factor": 0.75"#,
        r#""rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}"#,
    );
    let Model::Transformer(t) = vram_model::hf::parse_config(&nested, "phi").unwrap() else {
        unreachable!()
    };
    assert_eq!(
        t.blocks
            .representative()
            .mixer
            .as_attention()
            .unwrap()
            .rotary_dim(),
        64
    );
    let odd = phi4_mini.replace(r#""partial_rotary_factor": 0.75"#, r#""rotary_dim": 33"#);
    let e = vram_model::hf::parse_config(&odd, "phi")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rotary_dim"), "{e}");
}

/// vLLM keeps one rotary table per distinct `get_rope` key, each of the rows its class builds
/// (`rotary_embedding/__init__.py`, `linear_scaling_rope.py`, `phi3_long_rope_scaled_rope.py`,
/// `gemma3.py`, read at v0.10.2 and v0.19.0). Gemma 3 4B (`gemma-3-4b-it`'s text_config: 34
/// layers, head_dim 256, `rope_scaling` linear ×8 over 131,072 positions) builds a global table
/// of 1,048,576 rows and a local one of 131,072 (`rope_local_base_freq`, default scaling): the
/// vLLM 0.19.0 start-up log of llm-d-planner's gemma-3-4b-it H100 run lists two
/// `rotary_embedding` ops and "Model loading took 8.58 GiB" (8.01 GiB of bf16 parameters plus
/// these 0.56 GiB). Phi-4-mini's LongRoPE stacks its short (4,096) and long (131,072) tables.
#[test]
fn rotary_tables_are_one_per_rope_key_of_the_rows_vllm_builds() {
    let vllm = Knobs {
        engine_version: Some([0, 19, 0]),
        ..Knobs::default()
    };
    let parse = |json: &str| match vram_model::hf::parse_config(json, "m").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gemma3_4b = r#"{"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 34, "sliding_window": 1024,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}}"#;
    let t = parse(gemma3_4b);
    assert_eq!(
        weights::rotary_cache_bytes(&t, &vllm, Engine::Vllm, h100()),
        (1_048_576 + 131_072) * 256 * 2
    );
    // Without scaling and with one base for both layer types, one key: one table.
    let one_key = gemma3_4b.replace(
        r#""rope_scaling": {"factor": 8.0, "rope_type": "linear"}"#,
        r#""rope_theta": 10000.0, "rope_local_base_freq": 10000.0"#,
    );
    assert_eq!(
        weights::rotary_cache_bytes(&parse(&one_key), &vllm, Engine::Vllm, h100()),
        131_072 * 256 * 2
    );
    // Phi-4-mini: LongRoPE (`original_max_position_embeddings` at the top level, as its
    // config.json has it), rotary width 96.
    let phi4_mini = r#"{"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
        "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "partial_rotary_factor": 0.75, "vocab_size": 200064, "tie_word_embeddings": true,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}"#;
    let t = parse(phi4_mini);
    assert_eq!(
        weights::rotary_cache_bytes(&t, &vllm, Engine::Vllm, h100()),
        (4_096 + 131_072) * 96 * 2
    );
    // Gemma 4 26B-A4B (catalogued): a sliding table of head_dim 256 and a full-layer table of
    // the full head 512 (`Gemma4RotaryEmbedding` builds its cache `head_size` wide).
    let Model::Transformer(g4) = catalog::lookup("gemma-4-26b-a4b").unwrap() else {
        unreachable!()
    };
    assert_eq!(
        weights::rotary_cache_bytes(&g4, &vllm, Engine::Vllm, h100()),
        g4.max_positions() * (256 + 512) * 2
    );
}

/// The rotary tables are the engines' own: for each rope configuration of
/// `tests/data/get_rope/cases.json` (no scaling, `llama3`, `ntk`, `linear`, dynamic NTK by
/// factor and by alpha, YaRN, DeepSeek's YaRN, M-RoPE plain, interleaved and with YaRN,
/// LongRoPE), the bytes of the buffers that the own `get_rope` of 22 vLLM releases (0.6.6 to
/// 0.22.0; six of them again as `--enforce-eager` with FlashInfer) and 22 SGLang releases
/// (0.4.2 to 0.5.23) build, run on the CPU from each release's source (CUDA's and ROCm's branch of
/// SGLang's platform check), equal `vram capacity`'s rotary bytes for a Qwen3-shaped config with
/// those parameters; what a release refuses (`ntk` in vLLM to 0.8.5 and in SGLang, an
/// alpha-only `dynamic` in vLLM to 0.9.1 and SGLang to 0.5.9, M-RoPE with YaRN at vLLM 0.12 to
/// 0.16) `vram capacity` refuses with the release's error, and nothing it builds.
#[test]
fn rotary_tables_are_the_engines_own() {
    let cases: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/data/get_rope/cases.json")).unwrap();
    let runs: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/data/get_rope/tables.json")).unwrap();
    let h100 = h100();
    let mi300x = vram_model::gpu::lookup("mi300x").unwrap();
    let (mut checked, mut refused) = (0, 0);
    for run in runs["runs"].as_array().unwrap() {
        let engine = match run["engine"].as_str().unwrap() {
            "vllm" => Engine::Vllm,
            _ => Engine::Sglang,
        };
        let (version, pin) = parse_engine_version(run["version"].as_str().unwrap()).unwrap();
        let gpu = if run["platform"] == "cuda" {
            h100
        } else {
            mi300x
        };
        let k = Knobs {
            engine_version: Some(version),
            engine_pin: pin,
            dtype_bytes: 2,
            enforce_eager: run["eager"] == true,
            ..Knobs::default()
        };
        let label = format!("{} {} {}", run["engine"], run["version"], run["platform"]);
        for case in cases.as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let head = case["head_size"].as_u64().unwrap();
            let mut config = serde_json::json!({
                "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                "hidden_size": head * 8, "num_attention_heads": 8, "num_key_value_heads": 8,
                "head_dim": head, "intermediate_size": 1024, "num_hidden_layers": 2,
                "vocab_size": 1000, "max_position_embeddings": case["max_position"],
            });
            if !case["rope"].is_null() {
                config["rope_scaling"] = case["rope"].clone();
            }
            let Model::Transformer(t) =
                vram_model::hf::parse_config(&config.to_string(), name).unwrap()
            else {
                unreachable!()
            };
            let refusal = engine::rope_refusal(&t, engine, &k);
            let Some(built) = run["built"].get(name) else {
                let error = run["refused"][name].as_str().unwrap();
                let why = refusal.unwrap_or_else(|| panic!("{name}: {label} builds nothing"));
                assert!(why.contains(error), "{name}: {label}: {why}");
                refused += 1;
                continue;
            };
            assert_eq!(refusal, None, "{name}: {label}");
            assert_eq!(
                weights::rotary_cache_bytes(&t, &k, engine, gpu),
                built["bytes"].as_u64().unwrap(),
                "{name}: {label}"
            );
            checked += 1;
        }
    }
    assert!(checked > 600 && refused > 50, "{checked} {refused}");
}

/// A channel-wise AWQ checkpoint (`group_size: -1`) as vLLM's and SGLang's AWQ methods create
/// it: the Marlin linear keeps one row of zeros and scales where the linear's input is whole
/// and none where TP splits it; Marlin MoE and the unnormalized plain kernels make a negative
/// dimension; vLLM's plain kernel from 0.9.1 refuses a split input.
#[test]
fn channel_wise_awq_as_the_engines_create_it() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::WeightFormat;
    let channel = |mut t: Transformer| {
        t.blocks.storage.quant = Quant::Packed {
            format: WeightFormat::Awq { group: 0 },
            double_quant: false,
        };
        t
    };
    let (out, inp) = (4096, 14336);
    let load = |full_inp| LinearLoad {
        marlin: true,
        full_inp,
        moe_bank: false,
        freed_leaves: false,
        machete_groups: &[],
    };
    let stored = Quant::Packed {
        format: WeightFormat::Awq { group: 0 },
        double_quant: false,
    };
    let parts =
        |inp, full| Quantization::Awq.linear_parts(2, stored, false, out, inp, false, load(full));
    // qweight int32 [in, out/8], qzeros int32 [rows, out/8], scales fp16 [rows, out].
    assert_eq!(parts(inp, inp), vec![inp * out / 2, out / 2, 2 * out]);
    assert_eq!(parts(inp / 2, inp), vec![inp / 2 * out / 2, 0, 0]);

    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |v: [u32; 3], tp: u64, marlin: Option<bool>| Knobs {
        engine_version: Some(v),
        tp,
        marlin,
        ..Knobs::default()
    };
    let dense = channel(llama3());
    // Marlin (compute capability 8.0 and -1 among its group sizes) loads it at any TP.
    assert!(capacity(&dense, h100, Engine::Vllm, &at([0, 19, 0], 2, None)).is_ok());
    assert!(capacity(&dense, h100, Engine::Sglang, &at([0, 5, 3], 2, None)).is_ok());
    // The plain kernel (`--quantization awq`): vLLM 0.9.1 and later take the whole input as
    // the group, so TP 1 loads and a split input is refused; earlier, and SGLang, divide by -1.
    assert!(capacity(&dense, h100, Engine::Vllm, &at([0, 19, 0], 1, Some(false))).is_ok());
    let refused = |t: &Transformer, e, k: &Knobs| match capacity(t, h100, e, k) {
        Err(Error::Capacity(why)) => why,
        other => panic!("{other:?}"),
    };
    let why = refused(&dense, Engine::Vllm, &at([0, 19, 0], 2, Some(false)));
    assert!(
        why.starts_with("vLLM 0.19 refuses this: ValueError: The input size is not aligned"),
        "{why}"
    );
    let why = refused(&dense, Engine::Vllm, &at([0, 9, 0], 1, Some(false)));
    assert!(why.contains("negative dimension -4096"), "{why}");
    let why = refused(&dense, Engine::Sglang, &at([0, 5, 3], 1, Some(false)));
    assert!(why.starts_with("SGLang 0.5.3 fails to load"), "{why}");
    // Marlin MoE sizes the experts' scales by hidden_size // -1 at every version read.
    let moe = channel(match catalog::lookup("qwen3-30b-a3b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    });
    let why = refused(&moe, Engine::Vllm, &at([0, 22, 1], 1, None));
    assert!(
        why.contains("AWQMarlinMoEMethod") && why.contains("-2048"),
        "{why}"
    );
    // A grouped checkpoint is untouched.
    let mut grouped = dense.clone();
    grouped.blocks.storage.quant = Quant::Packed {
        format: WeightFormat::Awq { group: 128 },
        double_quant: false,
    };
    assert!(capacity(
        &grouped,
        h100,
        Engine::Vllm,
        &at([0, 19, 0], 2, Some(false))
    )
    .is_ok());
}

/// SGLang builds an MoE layer only under a Marlin AWQ/GPTQ config (`engine::sglang_moe_method_refusal`,
/// read in its wheels 0.4.0-0.5.3): a plain `awq` config stops at `FusedMoE`'s assertion at every
/// release, a plain `gptq` one raises its own TypeError from 0.5.0 and loads through the Marlin MoE
/// method at 0.4.3-0.4.10. Below compute capability 8.0 the plain method is what the config gets.
#[test]
fn sglang_refuses_a_plain_awq_or_gptq_moe_in_its_words() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::WeightFormat;
    let stored = |format| {
        let mut t = match catalog::lookup("qwen3-30b-a3b").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        };
        t.blocks.storage.quant = Quant::Packed {
            format,
            double_quant: false,
        };
        t
    };
    let awq = stored(WeightFormat::Awq { group: 128 });
    let gptq = stored(WeightFormat::Gptq {
        group: 128,
        desc_act: false,
    });
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let t4 = vram_model::gpu::lookup("t4").unwrap();
    let at = |v: [u32; 3], marlin: Option<bool>| Knobs {
        engine_version: Some(v),
        engine_pin: Pin::Release { post: 0 },
        marlin,
        ..Knobs::default()
    };
    let why = |t: &Transformer, gpu, e, k: &Knobs| match capacity(t, gpu, e, k) {
        Err(Error::Capacity(why)) => Some(why),
        Ok(_) => None,
        Err(other) => panic!("{other:?}"),
    };
    let plain = Some(false);
    for v in [[0, 4, 5], [0, 4, 9], [0, 5, 3]] {
        let w = why(&awq, h100, Engine::Sglang, &at(v, plain)).unwrap();
        assert!(
            w.contains("refuses this MoE model: AssertionError (FusedMoE.__init__"),
            "{w}"
        );
        assert!(w.contains("--quantization awq_marlin, or none,"), "{w}");
    }
    let w = why(&gptq, h100, Engine::Sglang, &at([0, 5, 3], plain)).unwrap();
    assert!(
        w.starts_with("SGLang 0.5.3 refuses this MoE model: TypeError: GPTQ Method does not support MoE, please use gptq_marlin"),
        "{w}"
    );
    assert_eq!(
        why(&gptq, h100, Engine::Sglang, &at([0, 4, 9], plain)),
        None
    );
    let w = why(&gptq, h100, Engine::Sglang, &at([0, 4, 2], plain)).unwrap();
    assert!(w.contains("AssertionError"), "{w}");
    // The Marlin configs load; below 8.0 the config's own method is the plain one.
    for t in [&awq, &gptq] {
        assert_eq!(why(t, h100, Engine::Sglang, &at([0, 5, 3], None)), None);
        let w = why(t, t4, Engine::Sglang, &at([0, 5, 3], None)).unwrap();
        assert!(
            w.contains("below compute capability 8.0 (the GPU is 7.5)"),
            "{w}"
        );
    }
    // vLLM's own methods are its rules, not these; a dense model is untouched.
    assert_eq!(why(&awq, h100, Engine::Vllm, &at([0, 19, 0], plain)), None);
    let mut dense = llama3();
    dense.blocks.storage.quant = awq.blocks.storage.quant;
    assert_eq!(
        why(&dense, h100, Engine::Sglang, &at([0, 5, 3], plain)),
        None
    );
}

/// A compressed-tensors W4A16 checkpoint whose `ignore` list names the attention
/// (`re:.*self_attn.*`): vLLM 0.10.0's `CompressedTensorsConfig.get_quant_method` gives those
/// linears `UnquantizedLinearMethod`, so each layer's QKV and output projections are held in
/// bf16 and the MLP packed; `--quantization` naming another format leaves the list unread.
#[test]
fn compressed_tensors_ignore_keeps_the_named_linears_unquantized() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::{linear_bytes, WeightFormat};
    use vram_model::mech::Component;
    let format = WeightFormat::Wna16 {
        group: 128,
        symmetric: true,
    };
    let mut packed = llama3();
    packed.blocks.storage.quant = Quant::Packed {
        format,
        double_quant: false,
    };
    let mut ignoring = packed.clone();
    ignoring.blocks.storage.ignored.insert(Component::Mixer);
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs::default();
    let w = |t: &Transformer, k: &Knobs| weights_per_gpu(t, k, h100, Engine::Vllm);
    // Llama-3-8B as stored: 32 layers of q 4096 x 4096, k and v 1024 x 4096, o 4096 x 4096
    // (without `--quantization` the stored bytes decide: `weights_per_gpu`).
    let attention = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096)];
    let bf16: u64 = attention.iter().map(|(o, i)| o * i * 2).sum();
    let w4: u64 = attention
        .iter()
        .map(|&(o, i)| linear_bytes(format, false, o, i))
        .sum();
    assert_eq!(w(&ignoring, &k) - w(&packed, &k), 32 * (bf16 - w4));
    let awq = Knobs {
        quantization: Quantization::Awq,
        ..k
    };
    assert_eq!(w(&ignoring, &awq), w(&packed, &awq));
}

/// DeepSeek-V3.2's `scale_fmt: ue8m0`: transformers 5.24 holds its block scales a byte each
/// (the estimate's count, 122,665,488 B under fp32 over the checkpoint's 40,888,496 scales),
/// while vLLM's `Fp8LinearMethod` holds them fp32: capacity's weights are the fp32 figure.
#[test]
fn vllm_holds_ue8m0_scales_fp32() {
    use vram_model::blocks::Quant;
    let text = include_str!("../../../../tests/zoo/configs/deepseek-v3.2.json");
    let Model::Transformer(t) = vram_model::hf::parse_config(text, "deepseek-v3.2").unwrap() else {
        unreachable!()
    };
    let mut fp32 = t.clone();
    let Quant::Fp8Block {
        bn,
        bk,
        skip_head,
        e8m0: true,
    } = t.blocks.storage.quant
    else {
        panic!("{:?}", t.blocks.storage.quant)
    };
    fp32.blocks.storage.quant = Quant::Fp8Block {
        bn,
        bk,
        skip_head,
        e8m0: false,
    };
    assert_eq!(
        fp32.blocks.weights_bytes(false) - t.blocks.weights_bytes(false),
        122_665_488
    );
    let h200 = vram_model::gpu::lookup("h200").unwrap();
    let k = Knobs {
        tp: 8,
        ..Knobs::default()
    };
    assert_eq!(
        weights_per_gpu(&t, &k, h200, Engine::Vllm),
        weights_per_gpu(&fp32, &k, h200, Engine::Vllm)
    );
}

/// Qwen2.5-VL-7B under vLLM V1 0.10.2 on an H100 at 4,096 tokens: the encoder profile is
/// counted (one 16,384-token image, the budget line in the log, the tower's forward under the
/// activation peak) and the report no longer says it is not; 0.11 (not read for this tower)
/// still says so.
#[test]
fn vllm_qwen2_5_vl_encoder_profile_is_counted_at_0_10() {
    let t = match catalog::lookup("qwen2.5-vl-7b").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gpu = vram_model::gpu::lookup("h100").unwrap();
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        max_model_len: Some(4096),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &at([0, 10, 2])).unwrap();
    assert!(
        c.log.iter().any(|l| l
            == "Encoder cache will be initialized with a budget of 16384 tokens, and profiled with 1 image items of the maximum feature size."),
        "{:?}",
        c.log
    );
    assert!(c.activation_peak_bytes >= 2_793_668_608);
    assert!(!c.assumes.iter().any(|a| a.contains("profile not counted")));
    let later = capacity(&t, gpu, Engine::Vllm, &at([0, 11, 0])).unwrap();
    assert!(later
        .assumes
        .iter()
        .any(|a| a.contains("profile not counted")));
    assert!(later.activation_peak_bytes < c.activation_peak_bytes);
}

/// vLLM 0.20 to 0.22 refuse a hybrid model whose pool holds fewer state blocks than
/// `max_num_seqs` when the decode graphs are captured in full (`config/compilation.py`
/// `resolve_cudagraph_mode_and_sizes`, read in the 0.20.0, 0.21.0, 0.22.0 and 0.22.1 sdists);
/// 0.19 only caps the capture sizes. Qwen3.5-27B on one H100 at 16K: the pool is a few hundred
/// blocks of 16 layers × 1.6 MB, below the default 1024 sequences of a GPU of 70 GiB or more.
/// The message is the engine's (the doctor reads it back: vram-cli's `tests/capacity.rs`); the
/// change offered is
/// the engine's own, `--max-num-seqs` at the pool's blocks, and it starts.
#[test]
fn vllm_hybrid_pool_below_max_num_seqs_is_refused_from_0_20() {
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(16384),
        engine_version: Some([0, 22, 1]),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(c.max_num_seqs, 1024);
    assert!(
        c.kv_cache_blocks > 0 && c.kv_cache_blocks < 1024,
        "{}",
        c.kv_cache_blocks
    );
    assert!(!c.starts);
    assert_eq!(c.max_model_len_that_fits, 16384);
    let last = c.log.last().unwrap();
    assert_eq!(
        *last,
        format!(
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks ({0}). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most {0} or increase gpu_memory_utilization.",
            c.kv_cache_blocks
        )
    );
    // The pool's own lines come before it.
    assert!(c.log.iter().any(|l| l.starts_with("GPU KV cache size")));
    assert_eq!(c.vllm_mamba_blocks_short(&t, &k), Some(c.kv_cache_blocks));

    // The change offered: at most as many sequences as blocks, and it starts.
    let change = crate::suggest::serving(&t, gpu, Engine::Vllm, &k).unwrap();
    assert_eq!(
        change.flags,
        format!("--max-num-seqs {}", c.kv_cache_blocks)
    );
    let fixed = Knobs {
        max_num_seqs: Some(c.kv_cache_blocks),
        ..k
    };
    let f = capacity(&t, gpu, Engine::Vllm, &fixed).unwrap();
    assert!(
        f.starts && f.kv_cache_blocks >= c.kv_cache_blocks,
        "{:?}",
        f.log
    );
    // --enforce-eager starts it too (no full graphs, no check).
    let eager = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            enforce_eager: true,
            ..k
        },
    )
    .unwrap();
    assert!(eager.starts, "{:?}", eager.log);
    // 0.19 caps the graphs' sizes with a warning and starts.
    let v19 = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            engine_version: Some([0, 19, 0]),
            ..k
        },
    )
    .unwrap();
    assert!(v19.log.iter().all(|l| !l.contains("Mamba cache blocks")));
    assert_eq!(v19.vllm_mamba_blocks_short(&t, &k), None);
}

/// The user's CUDA-graph mode (vLLM 0.20.0–0.22.0 `config/compilation.py`): the Mamba-blocks
/// check runs only where the resolved mode has full graphs. The same refused Qwen3.5-27B start
/// as above: `PIECEWISE` and `NONE` start (no full decode graphs), `FULL_DECODE_ONLY` is refused,
/// and `FULL` is refused too, downgraded to `FULL_AND_PIECEWISE` because the Gated DeltaNet
/// backend supports full graphs for uniform batches only (`gdn_attn.py`: `UNIFORM_BATCH`). The
/// graphs captured follow the mode: none under `NONE`, piecewise only under `PIECEWISE` (less
/// than the default's piecewise and full), and `--enforce-eager` wins over any mode.
#[test]
fn vllm_cudagraph_mode_decides_the_mamba_check_and_the_graphs() {
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let at = |mode: Option<CudagraphMode>, eager: bool| {
        let k = Knobs {
            max_model_len: Some(16384),
            engine_version: Some([0, 22, 1]),
            cudagraph_mode: mode,
            enforce_eager: eager,
            ..Knobs::default()
        };
        (capacity(&t, gpu, Engine::Vllm, &k).unwrap(), k)
    };
    let refused = |c: &Capacity| {
        c.log
            .last()
            .is_some_and(|l| l.contains("exceeds available Mamba cache blocks"))
    };
    let (default, _) = at(None, false);
    assert!(refused(&default));
    for m in [
        CudagraphMode::Full,
        CudagraphMode::FullDecodeOnly,
        CudagraphMode::FullAndPiecewise,
    ] {
        let (c, k) = at(Some(m), false);
        assert!(refused(&c) && !c.starts, "{m:?}: {:?}", c.log);
        assert_eq!(
            c.vllm_mamba_blocks_short(&t, &k),
            Some(c.kv_cache_blocks),
            "{m:?}"
        );
    }
    let (piecewise, k) = at(Some(CudagraphMode::Piecewise), false);
    assert!(piecewise.starts, "{:?}", piecewise.log);
    assert_eq!(piecewise.vllm_mamba_blocks_short(&t, &k), None);
    assert!(piecewise.cuda_graph_bytes > 0);
    assert!(piecewise.cuda_graph_bytes < default.cuda_graph_bytes);
    assert!(piecewise
        .assumes
        .iter()
        .any(|a| a.starts_with("CUDA-graph mode PIECEWISE")));
    let (none, _) = at(Some(CudagraphMode::None), false);
    assert!(none.starts, "{:?}", none.log);
    assert_eq!(none.cuda_graph_bytes, 0);
    let (full, _) = at(Some(CudagraphMode::Full), false);
    assert!(full
        .assumes
        .iter()
        .any(|a| a.starts_with("CUDA-graph mode FULL_AND_PIECEWISE: FULL asked")));
    let (eager, _) = at(Some(CudagraphMode::FullDecodeOnly), true);
    assert!(
        eager.starts && eager.cuda_graph_bytes == 0,
        "{:?}",
        eager.log
    );
    // A dense model under FULL_DECODE_ONLY keeps only the decode graphs: fewer graphs than the
    // default's, and no piecewise ones.
    let llama = llama3();
    let dense = |mode: Option<CudagraphMode>| {
        capacity(
            &llama,
            gpu,
            Engine::Vllm,
            &Knobs {
                max_model_len: Some(8192),
                engine_version: Some([0, 22, 1]),
                cudagraph_mode: mode,
                ..Knobs::default()
            },
        )
        .unwrap()
        .cuda_graph_bytes
    };
    assert!(dense(Some(CudagraphMode::FullDecodeOnly)) < dense(None));
    assert!(dense(Some(CudagraphMode::Piecewise)) < dense(None));
}

/// The compilation knobs that turn a piecewise graph mode into `NONE` (`VllmConfig.__post_init__`,
/// read in the 0.20.0, 0.21.0 and 0.22.0 sdists): `-O0` (compilation `NONE`, graphs `NONE`),
/// `-cc.mode=none` or `TORCH_COMPILE_DISABLE=1` (compilation `NONE`: the default
/// `FULL_AND_PIECEWISE` and a user's `PIECEWISE` become `NONE`, "Overriding to NONE"), while
/// `FULL_DECODE_ONLY` needs no compilation and stays, so the Mamba-blocks check still runs. `-O1`
/// defaults to `PIECEWISE`. `FULL` on a hybrid model without compilation has no attention
/// splitting op, so it is downgraded to `FULL_DECODE_ONLY` (`set_splitting_ops_for_v1`,
/// `resolve_cudagraph_mode_and_sizes`). The same refused Qwen3.5-27B start as above.
#[test]
fn vllm_compilation_mode_and_level_decide_the_graph_mode() {
    use crate::capacity::engine::vllm_cudagraph_mode;
    use CompilationMode as C;
    use CudagraphMode as M;
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = |g: Option<M>, c: Option<C>, o: Option<u8>| Knobs {
        max_model_len: Some(16384),
        engine_version: Some([0, 22, 1]),
        cudagraph_mode: g,
        compilation_mode: c,
        optimization_level: o,
        ..Knobs::default()
    };
    // The resolution itself, hybrid and dense.
    for (g, c, o, hybrid, want) in [
        (None, None, None, true, M::FullAndPiecewise),
        (None, None, Some(0), true, M::None),
        (None, None, Some(1), true, M::Piecewise),
        (None, None, Some(3), true, M::FullAndPiecewise),
        (None, Some(C::None), None, true, M::None),
        (None, Some(C::StockTorchCompile), None, false, M::None),
        (Some(M::Piecewise), Some(C::None), None, false, M::None),
        (Some(M::Piecewise), None, Some(0), false, M::None),
        (
            Some(M::FullDecodeOnly),
            Some(C::None),
            None,
            true,
            M::FullDecodeOnly,
        ),
        (Some(M::Full), Some(C::None), None, true, M::FullDecodeOnly),
        (Some(M::Full), None, None, true, M::FullAndPiecewise),
        (Some(M::Full), Some(C::None), None, false, M::Full),
        (None, Some(C::VllmCompile), Some(0), true, M::None),
        (
            Some(M::FullAndPiecewise),
            Some(C::VllmCompile),
            Some(0),
            true,
            M::FullAndPiecewise,
        ),
    ] {
        assert_eq!(
            vllm_cudagraph_mode(&k(g, c, o), hybrid),
            want,
            "{g:?} {c:?} -O{o:?} hybrid {hybrid}"
        );
    }
    let starts = |g, c, o| {
        let kk = k(g, c, o);
        let cap = capacity(&t, gpu, Engine::Vllm, &kk).unwrap();
        (cap.starts, cap.vllm_mamba_blocks_short(&t, &kk), cap)
    };
    let (s, short, _) = starts(None, None, None);
    assert!(!s && short.is_some());
    for (g, c, o) in [
        (None, None, Some(0)),
        (None, None, Some(1)),
        (None, Some(C::None), None),
        (Some(M::Piecewise), Some(C::None), None),
    ] {
        let (s, short, cap) = starts(g, c, o);
        assert!(s && short.is_none(), "{g:?} {c:?} {o:?}: {:?}", cap.log);
        assert!(
            cap.assumes.iter().any(|a| a.starts_with("CUDA-graph mode")),
            "{:?}",
            cap.assumes
        );
    }
    let (_, _, off) = starts(None, Some(C::None), None);
    assert_eq!(off.cuda_graph_bytes, 0);
    // No Inductor and no graphs: the profile run and the pool are --enforce-eager's.
    let eager = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            enforce_eager: true,
            ..k(None, None, None)
        },
    )
    .unwrap();
    assert_eq!(off.activation_peak_bytes, eager.activation_peak_bytes);
    assert_eq!(off.kv_cache_blocks, eager.kv_cache_blocks);
    // On Llama 3 8B (`v1_profile_peak_follows_compilation`'s figures) the profile run without
    // Inductor holds the eager layer loop's tensors, whatever the graph mode.
    let llama = llama3();
    let peak = |c: Option<C>, g: Option<M>| {
        let kk = Knobs {
            max_model_len: Some(8192),
            max_num_batched_tokens: Some(8192),
            max_num_seqs: Some(16),
            engine_version: Some([0, 22, 0]),
            compilation_mode: c,
            cudagraph_mode: g,
            ..Knobs::default()
        };
        capacity(&llama, gpu, Engine::Vllm, &kk)
            .unwrap()
            .activation_peak_bytes
    };
    // Beside the live set: the cuBLAS workspace (32 MiB on Hopper); the Triton sampler's buffer
    // comes after the forward.
    let eager_loop = 8192 * (3 * 4096 + 3 * 14336) * 2 + (32 << 20);
    assert_eq!(peak(Some(C::None), None), eager_loop);
    assert_eq!(peak(Some(C::None), Some(M::FullDecodeOnly)), eager_loop);
    // Compiled by stock torch.compile (one graph, no split), Inductor frees what it no longer
    // needs: the new residual, gate_up and the activation. vLLM's own mode splits the graph at
    // the attention ops and the split module holds the running piece's inputs (the attention
    // output and the residual it came in with): at TP 1 on Llama 3 that is the eager loop's
    // 3h + 3f again, by other tensors.
    let inductor = 8192 * (4096 + 3 * 14336) * 2 + (32 << 20);
    assert_eq!(peak(Some(C::StockTorchCompile), None), inductor);
    assert_eq!(peak(None, None), inductor + 8192 * (4096 + 4096) * 2);
    assert_eq!(peak(None, None), eager_loop);
    assert!(off
        .assumes
        .iter()
        .any(|a| a.contains("needs vLLM's own compilation")));
    let (s, short, _) = starts(Some(M::FullDecodeOnly), Some(C::None), None);
    assert!(!s && short.is_some());
    // From 0.12 only: an older release (0.11's `-O<n>` is the compilation level), V0 or SGLang
    // is refused in one line, and so is a level vLLM does not have.
    let old = Knobs {
        engine_version: Some([0, 11, 0]),
        ..k(None, Some(C::None), None)
    };
    let err = capacity(&t, gpu, Engine::Vllm, &old)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--compilation-mode none is vLLM V1's from 0.12")
            && err.ends_with("not vLLM 0.11.0"),
        "{err}"
    );
    let err = capacity(&t, gpu, Engine::Vllm, &k(None, None, Some(4)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--optimization-level 4 is not one of vLLM's levels"),
        "{err}"
    );
}

/// `-O` and `--compilation-mode` from 0.12, with the meaning each release gives them
/// (`VllmConfig.__post_init__` in `config/vllm.py`, read at every minor `.0` from 0.12.0 to
/// 0.20.0): the levels' graph modes are 0.20's throughout; at 0.12.0 any graph mode but NONE
/// without vLLM's compilation is overridden to NONE (`cudagraph_mode != NONE`), from 0.13.0
/// only a piecewise one (`requires_piecewise_compilation()`); before 0.17.0 `--enforce-eager`
/// only drops the level to -O0 ("overriding optimization level to -O0"), so a compilation mode
/// the user gave stays and Inductor still runs the profile, with no graphs.
#[test]
fn vllm_compilation_knobs_take_each_release_meaning_from_0_12() {
    use crate::capacity::engine::{vllm_cudagraph_mode, vllm_inductor};
    use CompilationMode as C;
    use CudagraphMode as M;
    let k = |v: [u32; 3], g: Option<M>, c: Option<C>, o: Option<u8>, eager: bool| Knobs {
        engine_version: Some(v),
        cudagraph_mode: g,
        compilation_mode: c,
        optimization_level: o,
        enforce_eager: eager,
        ..Knobs::default()
    };
    for minor in 12..=19 {
        let v = [0, minor, 0];
        assert_eq!(
            vllm_cudagraph_mode(&k(v, None, None, Some(0), false), false),
            M::None
        );
        assert_eq!(
            vllm_cudagraph_mode(&k(v, None, None, Some(1), false), false),
            M::Piecewise
        );
        assert_eq!(
            vllm_cudagraph_mode(&k(v, None, None, Some(3), false), false),
            M::FullAndPiecewise
        );
        assert_eq!(
            vllm_cudagraph_mode(&k(v, Some(M::Piecewise), Some(C::None), None, false), false),
            M::None
        );
        // FULL_DECODE_ONLY needs no compilation from 0.13; 0.12 overrides it to NONE.
        let fdo = vllm_cudagraph_mode(
            &k(v, Some(M::FullDecodeOnly), Some(C::None), None, false),
            false,
        );
        assert_eq!(
            fdo,
            if minor == 12 {
                M::None
            } else {
                M::FullDecodeOnly
            },
            "0.{minor}"
        );
        let full = vllm_cudagraph_mode(&k(v, Some(M::Full), Some(C::None), None, false), true);
        assert_eq!(
            full,
            if minor == 12 {
                M::None
            } else {
                M::FullDecodeOnly
            },
            "0.{minor}"
        );
        // --enforce-eager with a mode given: Inductor still runs before 0.17.
        let eager_compiled = k(v, None, Some(C::VllmCompile), None, true);
        assert_eq!(vllm_inductor(&eager_compiled), minor < 17, "0.{minor}");
        assert_eq!(vllm_cudagraph_mode(&eager_compiled, false), M::None);
        assert!(
            !vllm_inductor(&k(v, None, None, Some(3), true)),
            "0.{minor}"
        );
    }
    // Through `capacity`: accepted from 0.12, and at 0.16 `--enforce-eager --compilation-mode
    // vllm-compile` profiles as compiled (Inductor's peak) with no graphs, where 0.17 runs eager.
    let llama = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let run = |v: [u32; 3], c: Option<C>, eager: bool| {
        let kk = Knobs {
            max_model_len: Some(8192),
            max_num_batched_tokens: Some(8192),
            max_num_seqs: Some(16),
            ..k(v, None, c, None, eager)
        };
        capacity(&llama, gpu, Engine::Vllm, &kk).unwrap()
    };
    let compiled = run([0, 16, 0], None, false);
    let eager_compiled = run([0, 16, 0], Some(C::VllmCompile), true);
    let eager = run([0, 16, 0], None, true);
    assert_eq!(
        eager_compiled.activation_peak_bytes,
        compiled.activation_peak_bytes
    );
    // At TP 1 on Llama 3 the compiled pieces' held inputs make the eager loop's 3h + 3f.
    assert_eq!(eager.activation_peak_bytes, compiled.activation_peak_bytes);
    assert_eq!(eager_compiled.cuda_graph_bytes, 0);
    assert!(
        eager_compiled
            .assumes
            .iter()
            .any(|a| a.contains("leaves the --compilation-mode asked in force")),
        "{:?}",
        eager_compiled.assumes
    );
    let later = run([0, 17, 0], Some(C::VllmCompile), true);
    assert_eq!(
        later.activation_peak_bytes,
        run([0, 17, 0], None, true).activation_peak_bytes
    );
    let at12 = run([0, 12, 0], Some(C::None), false);
    assert_eq!(at12.cuda_graph_bytes, 0);
}

/// What `vram capacity` tries for the refused hybrid start, cheapest first: the engine's own
/// `--max-num-seqs` at the pool's blocks (the pool runs no more sequences than that anyway), then
/// the piecewise graph mode (no whole-forward graphs, no check), then `--enforce-eager` (no
/// graphs, no compilation); each starts. A user who already asked for no compilation is offered
/// `NONE`, which is what a piecewise mode becomes there, and nothing the user already set.
#[test]
fn the_mamba_refusal_offers_piecewise_before_eager() {
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        max_model_len: Some(16384),
        engine_version: Some([0, 22, 1]),
        ..Knobs::default()
    };
    let tried = crate::suggest::serving_tried(&t, gpu, Engine::Vllm, &k);
    let at = |f: &str| tried.iter().position(|x| x.starts_with(f)).unwrap();
    let piecewise = r#"--compilation-config '{"cudagraph_mode": "PIECEWISE"}'"#;
    assert!(at("--max-num-seqs ") < at(piecewise), "{tried:?}");
    assert!(at(piecewise) < at("--enforce-eager"), "{tried:?}");
    let pw = capacity(
        &t,
        gpu,
        Engine::Vllm,
        &Knobs {
            cudagraph_mode: Some(CudagraphMode::Piecewise),
            ..k
        },
    )
    .unwrap();
    assert!(pw.starts);
    // FULL_DECODE_ONLY without compilation: NONE is offered, and it starts.
    let no_compile = Knobs {
        cudagraph_mode: Some(CudagraphMode::FullDecodeOnly),
        compilation_mode: Some(CompilationMode::None),
        ..k
    };
    let tried = crate::suggest::serving_tried(&t, gpu, Engine::Vllm, &no_compile);
    assert!(
        tried
            .iter()
            .any(|x| x == r#"--compilation-config '{"cudagraph_mode": "NONE"}'"#)
            && !tried.iter().any(|x| x.contains("PIECEWISE")),
        "{tried:?}"
    );
    // A start that is not refused is offered nothing about graphs.
    let fine = Knobs {
        max_num_seqs: Some(64),
        ..k
    };
    assert!(crate::suggest::serving_tried(&t, gpu, Engine::Vllm, &fine)
        .iter()
        .all(|x| !x.contains("cudagraph_mode")));
}

/// `--cudagraph-mode` is vLLM V1's from 0.11: asked of an older version, of V0 or of SGLang, a
/// one-line refusal.
#[test]
fn cudagraph_mode_before_0_11_is_refused() {
    let t = llama3();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let k = |v: [u32; 3], v0: bool| Knobs {
        engine_version: Some(v),
        vllm_v0: v0,
        cudagraph_mode: Some(CudagraphMode::Piecewise),
        ..Knobs::default()
    };
    let err = capacity(&t, gpu, Engine::Vllm, &k([0, 10, 1], false))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--cudagraph-mode piecewise is vLLM V1's from 0.11")
            && err.contains("vLLM 0.10.1"),
        "{err}"
    );
    assert!(capacity(&t, gpu, Engine::Vllm, &k([0, 11, 0], false)).is_ok());
    assert!(capacity(&t, gpu, Engine::Sglang, &k([0, 5, 3], false)).is_err());
}

/// The same model on an H200 at 256 sequences: the pool holds more blocks than sequences, and
/// vLLM 0.22.1 starts.
#[test]
fn vllm_hybrid_pool_above_max_num_seqs_starts() {
    let t = model("qwen3.5-27b");
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let k = Knobs {
        max_model_len: Some(16384),
        max_num_seqs: Some(256),
        engine_version: Some([0, 22, 1]),
        ..Knobs::default()
    };
    let c = capacity(&t, gpu, Engine::Vllm, &k).unwrap();
    assert!(c.kv_cache_blocks > 256, "{}", c.kv_cache_blocks);
    assert!(c.starts, "{:?}", c.log);
    assert!(c.log.iter().all(|l| !l.contains("Mamba cache blocks")));
    assert_eq!(c.vllm_mamba_blocks_short(&t, &k), None);
}

/// SGLang's Gemma 3 (`gemma3_causal.py`): no rotary table before 0.5.10 (its layers compute
/// cos/sin per step from a transformers-style `inv_freq`, read at 0.4.5 to 0.5.9); from 0.5.10
/// every layer calls `get_rope` with `rope_type: default`, the sliding layers at
/// `rope_local_base_freq` and the full ones at `rope_theta`: two fp32 tables (on CUDA) of
/// `max_position_embeddings` rows whatever the config's linear scaling (Gemma 3 4B: 131,072 ×
/// 256 × 4 B each), one where the two bases agree; on ROCm in bf16 to 0.5.21.
#[test]
fn sglang_per_base_tables_by_release() {
    let parse = |json: &str| match vram_model::hf::parse_config(json, "m").unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let gemma3_4b = r#"{"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 34, "sliding_window": 1024,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}}"#;
    let t = parse(gemma3_4b);
    let sglang = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let table = 131_072 * 256;
    for v in [[0, 4, 5], [0, 5, 0], [0, 5, 9]] {
        assert_eq!(
            weights::rotary_cache_bytes(&t, &sglang(v), Engine::Sglang, h100()),
            0
        );
    }
    assert_eq!(
        weights::rotary_cache_bytes(&t, &sglang([0, 5, 10]), Engine::Sglang, h100()),
        2 * table * 4
    );
    let mi300x = vram_model::gpu::lookup("mi300x").unwrap();
    assert_eq!(
        weights::rotary_cache_bytes(&t, &sglang([0, 5, 21]), Engine::Sglang, mi300x),
        2 * table * 2
    );
    let one_base = gemma3_4b.replace(
        r#""rope_scaling": {"factor": 8.0, "rope_type": "linear"}"#,
        r#""rope_theta": 10000.0, "rope_local_base_freq": 10000.0"#,
    );
    assert_eq!(
        weights::rotary_cache_bytes(
            &parse(&one_base),
            &sglang([0, 5, 23]),
            Engine::Sglang,
            h100()
        ),
        table * 4
    );
    // Its scaling is not passed to get_rope, so nothing is refused; vLLM still counts the
    // scaled table and the sliding layers' own.
    assert_eq!(
        engine::rope_refusal(&t, Engine::Sglang, &sglang([0, 5, 23])),
        None
    );
}

/// vLLM's DeepSeek YaRN table under `--enforce-eager` (`deepseek_scaling_rope.py`'s
/// `use_flashinfer`, run on the CPU at 0.12.0 to 0.22.0): DeepSeek-V3's MLA rope
/// (`qk_rope_head_dim` 64, 4,096 × 40 rows) is fp32 from 0.19 with the wheel's FlashInfer
/// cubins, in the model dtype under the default compilation, at 0.13, and on ROCm.
#[test]
fn vllm_deepseek_rope_is_fp32_under_eager() {
    let t = model("deepseek-v3");
    let k = |v: [u32; 3], eager: bool| Knobs {
        engine_version: Some(v),
        enforce_eager: eager,
        ..Knobs::default()
    };
    let bf16 = 163_840 * 64 * 2;
    let rotary = |v, eager, gpu| weights::rotary_cache_bytes(&t, &k(v, eager), Engine::Vllm, gpu);
    assert_eq!(rotary([0, 19, 0], false, h100()), bf16);
    assert_eq!(rotary([0, 19, 0], true, h100()), 2 * bf16);
    assert_eq!(rotary([0, 22, 0], true, h100()), 2 * bf16);
    assert_eq!(rotary([0, 13, 0], true, h100()), bf16);
    let mi300x = vram_model::gpu::lookup("mi300x").unwrap();
    assert_eq!(rotary([0, 22, 0], true, mi300x), bf16);
}

/// Rope parameters a release's `get_rope` cannot build are refused in its words before any
/// memory is counted: `ntk` at vLLM 0.8 (built from 0.9.0) and in SGLang, an alpha-only
/// `dynamic` at vLLM 0.9.1 (built from 0.9.2; with a `factor` too, that factor's table),
/// M-RoPE with YaRN at vLLM 0.14 (built at 0.11 and from 0.17), on a Qwen3-8B-shaped config.
#[test]
fn get_rope_refusals_in_the_engines_words() {
    let parse = |rope: &str, mrope: bool| {
        let section = if mrope {
            r#", "mrope_section": [24, 20, 20]"#
        } else {
            ""
        };
        let json = format!(
            r#"{{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
            "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "num_hidden_layers": 36, "vocab_size": 151936,
            "max_position_embeddings": 32768, "rope_scaling": {{{rope}{section}}}}}"#
        );
        match vram_model::hf::parse_config(&json, "m").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    };
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let ntk = parse(r#""rope_type": "ntk", "factor": 4.0"#, false);
    let why = engine::rope_refusal(&ntk, Engine::Vllm, &at([0, 8, 5])).unwrap();
    assert_eq!(
        why,
        "vLLM 0.8.5 cannot build this config's rotary embedding: ValueError: Unknown RoPE scaling type ntk (get_rope with the config's rope_scaling)"
    );
    assert_eq!(
        engine::rope_refusal(&ntk, Engine::Vllm, &at([0, 9, 0])),
        None
    );
    assert!(engine::rope_refusal(&ntk, Engine::Sglang, &at([0, 5, 23])).is_some());
    let err = capacity(&ntk, h100(), Engine::Vllm, &at([0, 8, 5])).unwrap_err();
    assert!(
        err.to_string().contains("Unknown RoPE scaling type ntk"),
        "{err}"
    );

    let alpha = parse(r#""rope_type": "dynamic", "alpha": 1000.0"#, false);
    assert!(engine::rope_refusal(&alpha, Engine::Vllm, &at([0, 9, 1]))
        .unwrap()
        .contains("KeyError: 'factor'"));
    assert_eq!(
        engine::rope_refusal(&alpha, Engine::Vllm, &at([0, 9, 2])),
        None
    );
    assert_eq!(
        engine::rope_refusal(&alpha, Engine::Sglang, &at([0, 5, 10])),
        None
    );
    // With a factor beside the alpha, releases that read the factor build its table.
    let both = parse(
        r#""rope_type": "dynamic", "alpha": 1000.0, "factor": 2.0"#,
        false,
    );
    assert_eq!(
        engine::rope_refusal(&both, Engine::Vllm, &at([0, 9, 1])),
        None
    );
    let k = at([0, 9, 1]);
    assert_eq!(weights::rope_rows(&both, &k, Engine::Vllm), 65_536);
    assert_eq!(
        weights::rope_rows(&both, &at([0, 9, 2]), Engine::Vllm),
        32_768
    );

    let yarn = parse(
        r#""rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768"#,
        true,
    );
    for v in [[0, 12, 0], [0, 14, 0], [0, 16, 0]] {
        assert!(engine::rope_refusal(&yarn, Engine::Vllm, &at(v))
            .unwrap()
            .contains("'MRotaryEmbedding' object has no attribute 'truncate'"));
    }
    for v in [[0, 11, 0], [0, 17, 0], [0, 22, 0]] {
        assert_eq!(engine::rope_refusal(&yarn, Engine::Vllm, &at(v)), None);
    }
    assert_eq!(
        engine::rope_refusal(&yarn, Engine::Sglang, &at([0, 5, 3])),
        None
    );
}

/// One predicate says whether a model is hybrid (`layers::is_hybrid`), and it agrees with the
/// pool vLLM builds: a catalog model is hybrid exactly when its KV layout has a state group.
/// The graph mode (a hybrid's FULL downgraded) and the 0.20+ Mamba-blocks refusal both read it.
#[test]
fn hybrid_is_one_predicate_that_matches_the_pool() {
    let gpu = vram_model::gpu::lookup("h200").unwrap();
    let mut hybrids = Vec::new();
    let mut chunked_ids = Vec::new();
    for id in catalog::ids() {
        let Ok(Model::Transformer(t)) = catalog::lookup(id) else {
            continue;
        };
        let k = Knobs {
            max_model_len: Some(4096),
            engine_version: Some([0, 22, 1]),
            ..Knobs::default()
        };
        let Ok(c) = capacity(&t, gpu, Engine::Vllm, &k) else {
            continue;
        };
        let pool_has_state = c.kv_groups.iter().any(|g| g.kind == "state");
        assert_eq!(layers::is_hybrid(&t), pool_has_state, "{id}");
        let full = Knobs {
            cudagraph_mode: Some(CudagraphMode::Full),
            ..k
        };
        // Chunked local attention (Llama 4) supports no full graphs: piecewise alone.
        let chunked = graphs::chunked_local_attention(&t);
        let want = if pool_has_state {
            CudagraphMode::FullAndPiecewise
        } else if chunked {
            CudagraphMode::Piecewise
        } else {
            CudagraphMode::Full
        };
        assert_eq!(graphs::vllm_graph_mode(&t, &full, true), Some(want), "{id}");
        if pool_has_state {
            hybrids.push(id);
        }
        if chunked {
            chunked_ids.push(id);
        }
    }
    // Llama 4 Scout and Maverick.
    assert_eq!(chunked_ids, ["llama-4-scout", "llama-4-maverick"]);
    // qwen3.5 (Gated DeltaNet), qwen3-next, Nemotron-H (Mamba2) and the Nemotron 3 hybrids.
    assert!(hybrids.len() >= 5, "{hybrids:?}");
    assert!(hybrids.contains(&"nemotron-h-56b") && hybrids.contains(&"qwen3.5-27b"));
}

/// The `--compilation-config` spelling every remedy uses (`vllm_compilation_config_flag`), as a
/// user types it in a shell: one JSON object in single quotes.
#[test]
fn compilation_config_flags_are_spelled_once() {
    assert_eq!(
        CudagraphMode::Piecewise.compilation_config_flag(),
        r#"--compilation-config '{"cudagraph_mode": "PIECEWISE"}'"#
    );
    assert_eq!(
        CudagraphMode::None.compilation_config_flag(),
        r#"--compilation-config '{"cudagraph_mode": "NONE"}'"#
    );
    assert_eq!(
        vllm_compilation_config_flag("cudagraph_capture_sizes", "[1, 2, 4]"),
        r#"--compilation-config '{"cudagraph_capture_sizes": [1, 2, 4]}'"#
    );
}

/// `--cudagraph-mode` at the releases before 0.20, whose rules were read at 0.11.0, 0.12.0,
/// 0.13.0, 0.15.0, 0.16.0, 0.17.0, 0.18.0 and 0.19.0 (sdists from PyPI; 0.15.0 from its wheel):
/// with what those releases let vram model (`--cudagraph-mode`, `--enforce-eager`), the mode
/// comes out as at 0.20-0.22. Unset is `FULL_AND_PIECEWISE` (0.11: `VllmConfig.__post_init__`
/// "default to full and piecewise", `config/__init__.py`; 0.12+: `OPTIMIZATION_LEVEL_02`);
/// `--enforce-eager` is `NONE`; a hybrid's `FULL` is `FULL_AND_PIECEWISE` (the model runner's
/// mixed-batch check: `min_cg_support` below `ALWAYS` and attention among the splitting ops,
/// `initialize_cudagraph_capture` at 0.11, `_check_and_update_cudagraph_mode` at 0.12-0.19); the
/// assumption line names the release's function.
#[test]
fn cudagraph_modes_before_0_20_follow_each_release_read() {
    use CudagraphMode as M;
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let hybrid = model("qwen3.5-27b");
    let dense = model("qwen3-8b");
    for v in [
        [0, 11, 0],
        [0, 12, 0],
        [0, 13, 0],
        [0, 15, 0],
        [0, 16, 0],
        [0, 17, 0],
        [0, 18, 0],
        [0, 19, 0],
    ] {
        for (t, is_hybrid) in [(&hybrid, true), (&dense, false)] {
            for asked in [
                None,
                Some(M::None),
                Some(M::Piecewise),
                Some(M::Full),
                Some(M::FullDecodeOnly),
                Some(M::FullAndPiecewise),
            ] {
                for eager in [false, true] {
                    let k = Knobs {
                        max_model_len: Some(8192),
                        engine_version: Some(v),
                        cudagraph_mode: asked,
                        enforce_eager: eager,
                        ..Knobs::default()
                    };
                    let want = match asked {
                        _ if eager => M::None,
                        None => M::FullAndPiecewise,
                        Some(M::Full) if is_hybrid => M::FullAndPiecewise,
                        Some(m) => m,
                    };
                    assert_eq!(
                        graphs::vllm_graph_mode(t, &k, true),
                        Some(want),
                        "{v:?} {} {asked:?} eager {eager}",
                        t.name
                    );
                    let c = capacity(t, gpu, Engine::Vllm, &k).unwrap();
                    let line = c.assumes.iter().find(|a| a.starts_with("CUDA-graph mode"));
                    assert_eq!(line.is_some(), asked.is_some(), "{v:?} {asked:?}");
                    let Some(line) = line else { continue };
                    // 0.11 has no optimization levels; 0.12-0.19 have them (refused by vram).
                    assert!(
                        !line.contains("0.20.0-0.22.0")
                            && (v >= [0, 12, 0] || !line.contains("-O2")),
                        "{v:?}: {line}"
                    );
                    if asked == Some(M::Full) && is_hybrid && !eager {
                        let f = if v < [0, 12, 0] {
                            "initialize_cudagraph_capture"
                        } else {
                            "_check_and_update_cudagraph_mode"
                        };
                        assert!(line.contains(f), "{v:?}: {line}");
                        assert_eq!(
                            line.contains("mamba_attn.py UNIFORM_SINGLE_TOKEN_DECODE"),
                            v < [0, 17, 0],
                            "{v:?}: {line}"
                        );
                    }
                }
            }
        }
    }
}

/// SGLang's `init_torch_distributed` per board: the L4 reading where it was taken (TP 4 over
/// PCIe, custom all-reduce off), NCCL's ring and tree over NVSwitch on top (SGLang turns NVLS and
/// cuMem off), the custom all-reduce buffers where SGLang builds them (2 ranks, or NVLink to all),
/// one communicator per group of more than one rank, nothing at TP/PP 1.
#[test]
fn sglang_distributed_init_follows_the_board() {
    let mib = 1u64 << 20;
    let at = |gpu: &str, tp: u64, pp: u64| {
        let k = Knobs {
            tp,
            pp,
            engine_version: parse_version("0.4.9"),
            ..Knobs::default()
        };
        sglang::sglang_distributed_init(vram_model::gpu::lookup(gpu).unwrap(), &k).0
    };
    assert_eq!(at("l4", 4, 1), 133 * mib);
    assert_eq!(at("l4", 1, 1), 0);
    assert_eq!(at("h100-80g", 1, 1), 0);
    // Two PCIe GPUs get the custom all-reduce (its P2P check is patched to true).
    assert_eq!(at("l4", 2, 1), (133 + 26) * mib);
    // Over NVSwitch: NCCL's 24 channels of ring and tree, two 12 MiB pairs each from 3 ranks
    // (one at 2), and the custom all-reduce.
    assert_eq!(at("h100-80g", 4, 1), (133 + 24 * 2 * 12 + 26) * mib);
    assert_eq!(at("a100-80g", 8, 1), (133 + 24 * 2 * 12 + 26) * mib);
    assert_eq!(at("h100-80g", 2, 1), (133 + 24 * 12 + 26) * mib);
    // A PP group of its own connects too, without a custom all-reduce.
    assert_eq!(at("h100-80g", 1, 2), (133 + 24 * 12) * mib);
    assert_eq!(
        at("h100-80g", 4, 2),
        (133 + 24 * 2 * 12 + 24 * 12 + 26) * mib
    );
    // Across nodes: neither NVSwitch buffers nor the custom all-reduce.
    let k = Knobs {
        tp: 4,
        interconnect: Some(Interconnect::Network),
        ..Knobs::default()
    };
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    assert_eq!(sglang::sglang_distributed_init(h100, &k).0, 133 * mib);
    // The report says where the figure comes from.
    let t = llama3();
    let k = Knobs {
        tp: 4,
        engine_version: parse_version("0.4.9"),
        ..Knobs::default()
    };
    let r = capacity(&t, h100, Engine::Sglang, &k).unwrap();
    let line = r
        .assumes
        .iter()
        .find(|a| a.starts_with("init_torch_distributed"))
        .expect("the distributed init's line");
    assert!(line.contains("0.72 GiB per GPU"), "{line}");
    assert!(line.contains("custom all-reduce"), "{line}");
}

/// ROCm has its own custom all-reduce path (`allocate_meta_buffer`, 16 MiB `max_size`) and RCCL,
/// neither read: an MI300X at TP 8 keeps the L4 reading alone.
#[test]
fn sglang_distributed_init_on_rocm_keeps_the_reading() {
    let k = Knobs {
        tp: 8,
        ..Knobs::default()
    };
    let mi300x = vram_model::gpu::lookup("mi300x").unwrap();
    assert_eq!(sglang::sglang_distributed_init(mi300x, &k).0, 133 << 20);
}

/// NCCL's channel count over NVSwitch, by its ring search: HGX A100 and H100 24 (A100's logged
/// "Channel 23/24", NVIDIA/nccl-tests#100), B200 32.
#[test]
fn nccl_channels_follow_the_nvlinks() {
    let ch = |g: &str| non_torch::nvswitch_channels(vram_model::gpu::lookup(g).unwrap());
    assert_eq!(ch("a100-80g"), Some(24));
    assert_eq!(ch("h100-80g"), Some(24));
    assert_eq!(ch("h200"), Some(24));
    assert_eq!(ch("b200"), Some(32));
    assert_eq!(ch("l4"), None);
    // H800, NVLink cut to 8 links: its log's "16 coll channels" (NVIDIA/nccl#892).
    assert_eq!(non_torch::ring_search_channels(8, 20.6, (9, 0)), 16);
}

/// vLLM builds its custom all-reduce where `CustomAllreduce.__init__` and the version's platform
/// let it (0.7.0-0.10.1.1): the TP group of 2, 4, 6 or 8 GPUs, NVLink-connected (two PCIe GPUs
/// taken as failing the P2P check), in one node; on ROCm only the MI300 series and from 0.8.3.
#[test]
fn vllm_custom_all_reduce_is_built_where_the_version_builds_it() {
    let on = |g: &str, tp: u64, version: [u32; 3], link: Option<Interconnect>| {
        let k = Knobs {
            tp,
            engine_version: Some(version),
            interconnect: link,
            ..Knobs::default()
        };
        non_torch::vllm_custom_all_reduce(vram_model::gpu::lookup(g).unwrap(), &k)
    };
    let v = [0, 8, 5];
    for tp in [2, 4, 6, 8] {
        assert!(on("a100-80g", tp, v, None), "tp {tp}");
        assert!(on("h100-80g", tp, v, None), "tp {tp}");
    }
    assert!(!on("a100-80g", 1, v, None));
    // "unsupported world size: 16" (round 2's 16 x RTX 3090 V0 start), and 3.
    assert!(!on("a100-80g", 16, v, None));
    assert!(!on("a100-80g", 3, v, None));
    // "not supported on more than two PCIe-only GPUs" (round 6's 4 x RTX 2080 Ti V0 starts).
    assert!(!on("rtx-3090", 4, v, None));
    assert!(!on("t4", 4, v, None));
    // Two PCIe GPUs: the P2P check, taken as failing (vram's `pcie` also stands for no P2P).
    assert!(!on("l4", 2, v, None));
    // "this process group spans across nodes".
    assert!(!on("a100-80g", 2, v, Some(Interconnect::Network)));
    // ROCm: `disable_custom_all_reduce` on every ROCm GPU at 0.8.0; MI300 only from 0.8.3.
    assert!(!on("mi300x", 8, [0, 8, 0], None));
    assert!(on("mi300x", 8, [0, 8, 3], None));
    assert!(on("mi325x", 4, [0, 10, 1], None));
    assert!(!on("mi250", 4, [0, 10, 1], None));
}

/// V0 (0.7+) counts custom all-reduce's 26 MiB (10 + 8 MiB by `cudaMalloc`, an 8 MiB
/// `rank_data` tensor) inside its budget only where it is built; over NVSwitch without NVLS each
/// NCCL communicator holds the ring search's 24 channels of 12 MiB send/receive pairs on A100,
/// one pair per channel at TP 2 and two from TP 3.
#[test]
fn vllm_non_torch_counts_custom_all_reduce_where_built_and_nccls_channels() {
    let mib = 1u64 << 20;
    let at = |g: &str, tp: u64, version: [u32; 3], v0: bool| {
        let g = vram_model::gpu::lookup(g).unwrap();
        let k = Knobs {
            tp,
            engine_version: Some(version),
            vllm_v0: v0,
            enforce_eager: true,
            ..Knobs::default()
        };
        let (v1, _) = engine::vllm_v1(&k, g);
        non_torch::vllm_non_torch(&k, v1, g)
    };
    let images = 51 * mib;
    // V0 0.8.5 on four PCIe GPUs: two communicators of 51 MiB, no custom all-reduce.
    let (b, text) = at("t4", 4, [0, 8, 5], true);
    assert_eq!(b, images + 2 * 51 * mib);
    assert!(text.contains("no custom all-reduce"), "{text}");
    // V0 0.8.5 on HGX A100 at TP 4: two fully connected communicators and the 26 MiB.
    let (b, text) = at("a100-80g", 4, [0, 8, 5], true);
    assert_eq!(b, images + 2 * 24 * 2 * 12 * mib + 26 * mib);
    assert!(text.contains("24 channels"), "{text}");
    assert!(text.contains("custom all-reduce 0.03 GiB"), "{text}");
    // V1 0.10 at TP 2 on A100: the process group's communicator after the baseline, the ring's
    // pair per channel only (the tree's connections at two ranks are the ring's).
    let (b, _) = at("a100-80g", 2, [0, 10, 1], false);
    assert_eq!(b, images + 24 * 12 * mib);
    // V1 before 0.9 has no baseline: PyNccl's communicator and the custom all-reduce count too.
    let (b, _) = at("a100-80g", 2, [0, 8, 5], false);
    let context = vram_model::gpu::lookup("a100-80g").unwrap().context_bytes();
    assert_eq!(b, images + 2 * 24 * 12 * mib + 26 * mib + context);
}

/// A PP group whose peers sit on different nodes (TP x PP wider than one eight-GPU NVSwitch
/// board, vLLM's `reshape(-1, dp, pp, tp)` layout) is charged the network's communicator, not
/// the board's NVLink figure; the TP group keeps the board's.
#[test]
fn a_pp_group_across_nodes_is_charged_the_network_communicator() {
    let mib = 1u64 << 20;
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let knobs = |tp: u64, pp: u64, version: [u32; 3]| Knobs {
        tp,
        pp,
        engine_version: Some(version),
        enforce_eager: true,
        ..Knobs::default()
    };
    // The rule: wider than eight GPUs on an NVSwitch board; PCIe boards keep their own link.
    assert_eq!(
        non_torch::pp_interconnect(h100, &knobs(8, 2, [0, 8, 5])),
        Interconnect::Network
    );
    assert_eq!(
        non_torch::pp_interconnect(h100, &knobs(4, 2, [0, 8, 5])),
        Interconnect::NvSwitchNvls
    );
    let l4 = vram_model::gpu::lookup("l4").unwrap();
    assert_eq!(
        non_torch::pp_interconnect(l4, &knobs(8, 2, [0, 8, 5])),
        Interconnect::Pcie
    );
    // V1 before 0.9 (no baseline) at TP 8 x PP 2 on two H100 nodes: two TP communicators at the
    // NVSwitch reading and the PP group's at the network's 51 MiB; within one node (TP 4 x PP 2)
    // all three at the NVSwitch reading.
    let nv = 317 * mib;
    let at = |tp: u64, pp: u64| {
        let k = knobs(tp, pp, [0, 8, 5]);
        let (v1, _) = engine::vllm_v1(&k, h100);
        assert!(v1);
        non_torch::vllm_non_torch(&k, v1, h100)
    };
    let (across, text) = at(8, 2);
    let (within, _) = at(4, 2);
    assert_eq!(within - across, nv - 51 * mib);
    assert!(text.contains("spans nodes"), "{text}");
    // V0 before 0.7: PyNccl's PP communicator across nodes at the network's figure.
    let v0 = |tp: u64, pp: u64| {
        let k = Knobs {
            vllm_v0: true,
            ..knobs(tp, pp, [0, 6, 6])
        };
        non_torch::vllm_non_torch(&k, false, h100)
    };
    let (b, text) = v0(8, 2);
    assert!(text.contains("PP group, 0.05 GiB across nodes"), "{text}");
    assert!(b > 0);
    // V1 from 0.9 (the baseline's measured groups): the PP group across nodes replaces a further
    // NVLS group's 0.48 GiB by 51 MiB.
    let t = llama3();
    let init = |tp: u64, pp: u64| {
        non_torch::vllm_init_communicators(&t, h100, &knobs(tp, pp, [0, 19, 0]), true).unwrap()
    };
    let (a, text) = init(8, 2);
    let (w, _) = init(4, 2);
    assert_eq!(w - a, 492 * mib - 51 * mib);
    assert!(text.contains("spans nodes"), "{text}");
}

/// vLLM from 0.22 runs every GPTQ checkpoint on `AutoGPTQConfig`, whose linear method calls
/// `verify_marlin_supported` (`engine::gptq_marlin_refusal`): below compute capability 7.5 on
/// CUDA, or at a group size Marlin does not take, start-up stops with the release's own
/// `ValueError`. `tests/data/marlin_verify/cases.jsonl` holds that text as the release's
/// `_check_marlin_supported` returns it, run on the CPU by `verify_marlin.py` from 0.22.1's and
/// 0.23.0's sources (0.22.0's `marlin_utils.py` and `auto_gptq.py` are 0.22.1's, byte for byte):
/// vram's refusal quotes it exactly, and starts where it is `null`. vLLM 0.21 runs the same
/// checkpoints on its plain GPTQ kernel.
#[test]
fn vllm_0_22_refuses_gptq_where_marlin_cannot_run_in_its_own_words() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::WeightFormat;
    let gptq = |group: i64| {
        let mut t = llama3();
        t.blocks.storage.quant = Quant::Packed {
            format: WeightFormat::Gptq {
                group: u64::try_from(group).unwrap_or(0),
                desc_act: false,
            },
            double_quant: false,
        };
        t
    };
    let cases = include_str!("../../tests/data/marlin_verify/cases.jsonl");
    let mut checked = 0;
    for line in cases.lines() {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let gpu = vram_model::gpu::lookup(c["gpu"].as_str().unwrap()).unwrap();
        let t = gptq(c["group_size"].as_i64().unwrap());
        let versions: &[[u32; 3]] = match c["version"].as_str().unwrap() {
            "0.22.1" => &[[0, 22, 0], [0, 22, 1]],
            _ => &[[0, 23, 0]],
        };
        for &v in versions {
            // Enough memory for the weights everywhere (a 16 GiB card): a short context.
            let k = Knobs {
                engine_version: Some(v),
                max_model_len: Some(1024),
                ..Knobs::default()
            };
            let got = engine::gptq_marlin_refusal(&t, gpu, Engine::Vllm, &k);
            match c["error"].as_str() {
                Some(error) => {
                    let why = got.unwrap_or_else(|| panic!("{c}: not refused"));
                    assert!(why.contains(error), "{c}: {why}");
                    assert!(matches!(
                        capacity(&t, gpu, Engine::Vllm, &k),
                        Err(Error::Capacity(w)) if w == why
                    ));
                }
                None => assert_eq!(got, None, "{c}"),
            }
            checked += 1;
        }
        // 0.21 keeps the plain kernel where Marlin cannot run: nothing refused.
        let k = Knobs {
            engine_version: Some([0, 21, 0]),
            ..Knobs::default()
        };
        assert_eq!(engine::gptq_marlin_refusal(&t, gpu, Engine::Vllm, &k), None);
    }
    assert_eq!(checked, 45);
    // `--quantization gptq` named at 0.22 is AutoGPTQConfig too; AWQ is not touched.
    let v100 = vram_model::gpu::lookup("v100-16g").unwrap();
    let k = Knobs {
        engine_version: Some([0, 22, 1]),
        marlin: Some(false),
        ..Knobs::default()
    };
    assert!(engine::gptq_marlin_refusal(&gptq(128), v100, Engine::Vllm, &k).is_some());
    let mut awq = llama3();
    awq.blocks.storage.quant = Quant::Packed {
        format: WeightFormat::Awq { group: 128 },
        double_quant: false,
    };
    assert_eq!(
        engine::gptq_marlin_refusal(&awq, v100, Engine::Vllm, &k),
        None
    );
    assert_eq!(
        engine::gptq_marlin_refusal(&gptq(128), v100, Engine::Sglang, &Knobs::default()),
        None
    );
}

/// Machete (`engine::machete_groups`, `Quantization::linear_parts`): which GPUs, releases, group
/// sizes and linears vLLM's GPTQ-Marlin method runs on it, and what it keeps after loading that
/// Marlin does not: the checkpoint's `qzeros` and `g_idx`; with act-order its `perm` in place of
/// Marlin's `g_idx_sort_indices`.
#[test]
fn machete_takes_hopper_gptq_linears_and_keeps_their_zeros_and_g_idx() {
    use vram_model::blocks::Quant;
    use vram_model::finetune::WeightFormat;
    let gptq = |group: u64, desc_act: bool| {
        let mut t = llama3();
        t.blocks.storage.quant = Quant::Packed {
            format: WeightFormat::Gptq { group, desc_act },
            double_quant: false,
        };
        t
    };
    let gpu = |id| vram_model::gpu::lookup(id).unwrap();
    let at = |v: [u32; 3]| Knobs {
        engine_version: Some(v),
        ..Knobs::default()
    };
    let groups = |t: &Transformer, g, v| engine::machete_groups(t, &at(v), gpu(g), Engine::Vllm);
    let t = gptq(128, false);
    assert_eq!(groups(&t, "h100-80g", [0, 19, 0]), &[0, 64, 128]);
    assert_eq!(groups(&t, "h100-80g", [0, 9, 1]), &[0, 128]);
    assert!(groups(&t, "h100-80g", [0, 6, 1]).is_empty());
    assert!(groups(&t, "a100-80g", [0, 19, 0]).is_empty());
    // Blackwell: Machete's minimum capability (90) only, through 0.9; Hopper only from 0.10.
    assert!(groups(&t, "b200", [0, 19, 0]).is_empty());
    assert_eq!(groups(&t, "b200", [0, 9, 2]), &[0, 64, 128]);
    assert!(engine::machete_groups(&t, &at([0, 5, 3]), gpu("h100-80g"), Engine::Sglang).is_empty());
    // The plain kernel named (`--quantization gptq` on a GPTQ config) before 0.22: no Machete.
    let plain = Knobs {
        marlin: Some(false),
        ..at([0, 19, 0])
    };
    assert!(engine::machete_groups(&t, &plain, gpu("h100-80g"), Engine::Vllm).is_empty());

    let stored = |group, desc_act| Quant::Packed {
        format: WeightFormat::Gptq { group, desc_act },
        double_quant: false,
    };
    let parts = |group, desc_act, out, inp, full_inp, machete: &'static [u64]| {
        Quantization::Gptq.linear_parts(
            2,
            stored(group, desc_act),
            false,
            out,
            inp,
            false,
            LinearLoad {
                marlin: true,
                full_inp,
                moe_bank: false,
                freed_leaves: true,
                machete_groups: machete,
            },
        )
    };
    let hopper: &'static [u64] = &[0, 64, 128];
    let (out, inp) = (4096, 14336);
    // Marlin: qweight and scales (qzeros and g_idx emptied).
    assert_eq!(
        parts(128, false, out, inp, inp, &[]),
        vec![inp / 8 * out * 4, inp / 128 * out * 2]
    );
    // Machete: qweight, qzeros int32 [in/128, out/8], scales, g_idx int32 [in].
    assert_eq!(
        parts(128, false, out, inp, inp, hopper),
        vec![
            inp / 8 * out * 4,
            inp / 128 * out / 8 * 4,
            inp / 128 * out * 2,
            4 * inp
        ]
    );
    // Act-order: Machete's perm is Marlin's sort indices' size; its qzeros and g_idx stay.
    assert_eq!(
        parts(128, true, out, inp, inp, hopper),
        vec![
            inp / 8 * out * 4,
            inp / 128 * out / 8 * 4,
            inp / 128 * out * 2,
            4 * inp,
            4 * inp
        ]
    );
    // Act-order on a split input, a group size Machete does not take, an output that is not a
    // multiple of 128: Marlin's tensors.
    assert_eq!(
        parts(128, true, out, inp / 2, inp, hopper),
        parts(128, true, out, inp / 2, inp, &[])
    );
    assert_eq!(
        parts(32, false, out, inp, inp, hopper),
        parts(32, false, out, inp, inp, &[])
    );
    assert_eq!(
        parts(128, false, 4160, inp, inp, hopper),
        parts(128, false, 4160, inp, inp, &[])
    );

    // AWQ-Marlin reaches Machete from 0.19.0, whose zero points become `-scales × zeros` in the
    // model dtype: `[in/128, out]` × 2 bytes for the packed `[in/128, out/8]` int32.
    let mut awq = llama3();
    awq.blocks.storage.quant = Quant::Packed {
        format: WeightFormat::Awq { group: 128 },
        double_quant: false,
    };
    assert_eq!(groups(&awq, "h100-80g", [0, 19, 0]), &[0, 64, 128]);
    assert!(groups(&awq, "h100-80g", [0, 18, 1]).is_empty());
    let awq_parts = |machete: &'static [u64]| {
        Quantization::Awq.linear_parts(
            2,
            awq.blocks.storage.quant,
            false,
            out,
            inp,
            false,
            LinearLoad {
                marlin: true,
                full_inp: inp,
                moe_bank: false,
                freed_leaves: true,
                machete_groups: machete,
            },
        )
    };
    assert_eq!(
        awq_parts(&[]),
        vec![
            inp * out / 8 * 4,
            inp / 128 * out / 8 * 4,
            inp / 128 * out * 2
        ]
    );
    assert_eq!(
        awq_parts(hopper),
        vec![inp * out / 8 * 4, inp / 128 * out * 2, inp / 128 * out * 2]
    );
}

/// FlashInfer's all-reduce + RMSNorm fusion workspace (vLLM 0.17-0.22 at -O2): where the
/// release's `enable_allreduce_rms_fusion` and `AllReduceFusionPass` build it, and its size by
/// the allocator of the pinned flashinfer-python (0.6.4-0.6.8.post1: `SymmDeviceMemory`, each
/// buffer rounded to the 512 MiB multicast granularity; 0.6.11.post2 at vLLM 0.22.1: PyTorch's
/// symmetric memory, rounded to 2 MiB).
#[test]
fn flashinfer_fusion_workspace_follows_the_release_and_the_start() {
    let t = llama3();
    let mib = 1u64 << 20;
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let ws = |gpu: &Gpu, version: &str, f: &dyn Fn(&mut Knobs)| {
        let mut k = Knobs {
            tp: 2,
            max_model_len: Some(4096),
            engine_version: parse_version(version),
            ..Knobs::default()
        };
        f(&mut k);
        non_torch::vllm_fi_allreduce_workspace(&t, gpu, &k, true, 8192).map(|w| w.0)
    };
    let none = |_: &mut Knobs| {};
    // Off at every level through 0.16; on at -O2 from 0.17: three buffers (128 MiB, 2 KiB of
    // flags, 384 MiB of Lamport buffers for 8,192 tokens of 4,096) each taking 512 MiB.
    assert_eq!(ws(h100, "0.16.0", &none), None);
    assert_eq!(ws(h100, "0.17.1", &none), Some(1536 * mib));
    assert_eq!(ws(h100, "0.19.0", &none), Some(1536 * mib));
    // TP 4 (2 MiB of input at most on sm_90): tiny buffers, the same 1.5 GiB once rounded.
    assert_eq!(ws(h100, "0.19.0", &|k| k.tp = 4), Some(1536 * mib));
    // No size-table entry for TP 3; TP 1 has nothing to reduce.
    assert_eq!(ws(h100, "0.19.0", &|k| k.tp = 3), None);
    assert_eq!(ws(h100, "0.19.0", &|k| k.tp = 1), None);
    // -O3 sets the pass as -O2 does (`OPTIMIZATION_LEVEL_03`, config/vllm.py at 0.19.1).
    assert_eq!(
        ws(h100, "0.19.0", &|k| k.optimization_level = Some(3)),
        Some(1536 * mib)
    );
    // -O1, --enforce-eager and -cc.mode=none: no fusion pass.
    assert_eq!(
        ws(h100, "0.19.0", &|k| k.optimization_level = Some(1)),
        None
    );
    assert_eq!(ws(h100, "0.19.0", &|k| k.enforce_eager = true), None);
    assert_eq!(
        ws(h100, "0.19.0", &|k| k.compilation_mode =
            Some(CompilationMode::None)),
        None
    );
    // DP or PP beside TP: gated off at 0.17-0.20, not at 0.21.
    assert_eq!(ws(h100, "0.19.0", &|k| k.dp = 2), None);
    assert_eq!(ws(h100, "0.19.0", &|k| k.pp = 2), None);
    assert_eq!(ws(h100, "0.21.0", &|k| k.dp = 2), Some(1536 * mib));
    // Without multicast (PCIe, or across nodes) SymmDeviceMemory refuses and vLLM drops the pass.
    assert_eq!(
        ws(h100, "0.19.0", &|k| k.interconnect =
            Some(Interconnect::Pcie)),
        None
    );
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    assert_eq!(ws(a100, "0.19.0", &none), None);
    // 0.22 (flashinfer 0.6.11.post2): PyTorch's symmetric memory, each buffer plus its 2 KiB
    // signal pad rounded to 2 MiB: 130 + 2 + 386 MiB.
    assert_eq!(ws(h100, "0.22.1", &none), Some(518 * mib));
    // A smaller scheduler budget caps the tokens: 2,048 tokens give 32 + 96 MiB, 34 + 2 + 98.
    let k = Knobs {
        tp: 2,
        engine_version: parse_version("0.22.1"),
        ..Knobs::default()
    };
    let (b, text) = non_torch::vllm_fi_allreduce_workspace(&t, h100, &k, true, 2048).unwrap();
    assert_eq!(b, 134 * mib);
    assert!(
        text.contains("2048 tokens of hidden size 4096 at TP 2"),
        "{text}"
    );
}

/// vLLM's own `is_mm_prefix_lm` and its refusal of a chosen FLASH_ATTN, run on the CPU from each
/// release's source (`tests/data/attn_select/attn_select.py` over 0.12.0, 0.13.0, 0.14.1,
/// 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0 and 0.22.1, written to `cases.jsonl`):
/// vram's rule (`graphs::vllm_mm_prefix_lm`, fed by the config readers
/// `read::config_mm_prefix_lm` and `read::bidirectional_vision`) gives the engine's answer for
/// every config, and its refusal carries the engine's text word for word.
#[test]
fn attention_selection_follows_each_releases_own_code() {
    let cases = include_str!("../../tests/data/attn_select/cases.jsonl");
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let (mut mm_checked, mut refusals_checked) = (0, 0);
    for line in cases.lines() {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let version = parse_version(c["version"].as_str().unwrap());
        if let Some(name) = c.get("case").and_then(|n| n.as_str()) {
            let mut config = c["config"].clone();
            if !c["text_config"].is_null() {
                config["text_config"] = c["text_config"].clone();
            }
            let mut t = llama3();
            t.model_type = config["model_type"].as_str().unwrap().into();
            let k = Knobs {
                engine_version: version,
                mm_prefix_lm: vram_model::read::config_mm_prefix_lm(&config),
                bidirectional_vision: vram_model::read::bidirectional_vision(&config),
                ..Knobs::default()
            };
            assert_eq!(
                graphs::vllm_mm_prefix_lm(&t, &k),
                c["mm_prefix"].as_bool().unwrap(),
                "{name} at {}",
                c["version"]
            );
            mm_checked += 1;
            continue;
        }
        // A refusal case: a model of that head size whose image tokens attend both ways or not
        // (Gemma 3's model type, listed from 0.13; none before).
        let head = c["head_size"].as_u64().unwrap();
        let mm = c["mm_prefix"].as_bool().unwrap();
        let mut t = llama3();
        t.model_type = if mm { "gemma3" } else { "llama" }.into();
        for kind in t.blocks.kinds.iter_mut() {
            if let vram_model::mech::Mixer::Attention(a) = &mut kind.mixer {
                a.head_dim = head;
            }
        }
        let k = Knobs {
            engine_version: version,
            attention_backend: Some(AttentionBackend::FlashAttn),
            ..Knobs::default()
        };
        let ours = engine::attention_backend_refusal(&t, h100, Engine::Vllm, &k);
        let v = version.unwrap();
        let engine_mm = mm && v >= [0, 13, 0];
        match c["error"].as_str() {
            // 0.22 takes heads to 512 where FlashAttention 4 is built: vram says it cannot tell
            // (the script's stand-in has no FA4).
            Some(_) if v >= [0, 22, 0] && head > 256 => {
                assert!(
                    ours.as_deref().unwrap().contains("FlashAttention 4"),
                    "{ours:?}"
                );
            }
            // The script passes the case's flag whatever the release; vram asks the release.
            Some(e) if engine_mm == mm => {
                let ours = ours.unwrap_or_else(|| panic!("{line}: vram does not refuse"));
                assert!(ours.contains(e), "{line}\nvram: {ours}");
                refusals_checked += 1;
            }
            Some(_) => {}
            None => assert_eq!(ours, None, "{line}"),
        }
    }
    assert_eq!(mm_checked, 130);
    assert!(refusals_checked >= 20, "{refusals_checked}");
}

/// A chosen attention backend decides whether FULL graphs on Hopper hold FlashAttention 3's
/// split accumulators: only FLASH_ATTN's do; Triton for Gemma 3 by default (its image tokens
/// attend both ways from 0.13) and FlashAttention otherwise. A config's own `is_mm_prefix_lm`
/// moves Gemma 3 back to FlashAttention from 0.17.
#[test]
fn a_chosen_attention_backend_decides_flashattention_graph_state() {
    let t = llama3();
    let mib = 1u64 << 20;
    let at = |b: Option<AttentionBackend>| Knobs {
        engine_version: parse_version("0.19.0"),
        attention_backend: b,
        ..Knobs::default()
    };
    let pool = |k: &Knobs| vllm_graphs(&t, h100(), k, true, 1024, 8192, None).pool;
    let fa = pool(&at(None));
    assert_eq!(pool(&at(Some(AttentionBackend::FlashAttn))), fa);
    let triton = pool(&at(Some(AttentionBackend::TritonAttn)));
    assert!(triton < fa, "{triton} {fa}");
    assert_eq!(pool(&at(Some(AttentionBackend::Flashinfer))), triton);
    assert_eq!(pool(&at(Some(AttentionBackend::FlexAttention))), triton);
    // The accumulators themselves: 32 splits x 512 tokens x (4,096 query + 32 heads) x fp32,
    // in a segment of their own on top of the piecewise graphs' live set (the default
    // FULL_AND_PIECEWISE captures those first).
    assert_eq!(fa, triton + 32 * 512 * (4096 + 32) * 4);
    assert!(fa > 200 * mib);
    // Gemma 3 (listed): Triton by default; FLASH_ATTN refused in vLLM's words.
    let mut g = t.clone();
    g.model_type = "gemma3".into();
    assert!(!graphs::vllm_runs_flash_attention(&g, &at(None)));
    let why = capacity(
        &g,
        h100(),
        Engine::Vllm,
        &at(Some(AttentionBackend::FlashAttn)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        why.contains("vLLM 0.19 refuses this: ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. Reason: ['partial multimodal token full attention not supported']"),
        "{why}"
    );
    // Its config saying `is_mm_prefix_lm: false` is taken from 0.17, not at 0.16.
    let own = |v: &str| Knobs {
        engine_version: parse_version(v),
        mm_prefix_lm: Some(false),
        ..Knobs::default()
    };
    assert!(graphs::vllm_runs_flash_attention(&g, &own("0.17.1")));
    assert!(!graphs::vllm_runs_flash_attention(&g, &own("0.16.0")));
    // The flag before 0.11, on V0 and for SGLang: refused in one line.
    let old = Knobs {
        engine_version: parse_version("0.10.1"),
        attention_backend: Some(AttentionBackend::TritonAttn),
        ..Knobs::default()
    };
    let why = capacity(&t, h100(), Engine::Vllm, &old)
        .unwrap_err()
        .to_string();
    assert!(why.contains("from 0.11"), "{why}");
    assert!(!why.contains('\n'));
}

/// FlashAttention 3's split accumulators sit in the graph pool on top of the piecewise graphs'
/// live set when both modes are captured (PyTorch's caching allocator keeps the piecewise
/// segments and adds one for the accumulators), and share it under FULL graphs alone (vLLM
/// 0.19.1 `capture_model`'s mode order; vLLM's own profile of Llama-3.1-8B on an H100: "FULL
/// ... 260.00 MiB first-capture" after the PIECEWISE pair, the accumulators' 258.0 MiB plus
/// driver memory).
#[test]
fn flash_attention_accumulators_add_to_the_piecewise_pool() {
    let t = llama3();
    let at = |mode: Option<CudagraphMode>| Knobs {
        engine_version: parse_version("0.19.0"),
        cudagraph_mode: mode,
        ..Knobs::default()
    };
    let g = |k: &Knobs| vllm_graphs(&t, h100(), k, true, 1024, 8192, None);
    let accum = 32 * 512 * (4096 + 32) * 4;
    let piecewise = g(&at(Some(CudagraphMode::Piecewise)));
    assert!(piecewise.full_sizes.is_empty() && piecewise.pool > 0);
    let both = g(&at(None));
    assert!(both.piecewise && both.full_sizes.last() == Some(&512));
    assert_eq!(both.pool, piecewise.pool + accum);
    let full = g(&at(Some(CudagraphMode::Full)));
    assert!(!full.piecewise);
    assert_eq!(full.pool, accum);
    assert!(full.pool < both.pool);
}

/// A paste or log that names a driver before R550 prices each layer's graph share at the R535
/// figure and each captured all-reduce's share by the same ratio; R550 and later, and an
/// unknown driver, keep the figures measured on the fit hosts. The pool does not move.
#[test]
fn graphs_on_a_driver_before_r550_keep_the_r535_share() {
    let t = llama3();
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let graphs = |tp: u64, driver: Option<u32>| {
        let k = Knobs {
            tp,
            engine_version: parse_version("0.15.1"),
            interconnect: (tp > 1).then_some(Interconnect::Pcie),
            driver,
            ..Knobs::default()
        };
        vllm_graphs(&t, a100, &k, true, 256, 2048, None)
    };
    let known = graphs(1, None);
    // 51 piecewise sizes to 512 and 35 FULL decode sizes to max_num_seqs, 32 layers.
    assert_eq!(known.driver, 86 * 32 * DRIVER_BYTES_PER_LAYER_GRAPH);
    for newer in [550, 570, 580] {
        assert_eq!(graphs(1, Some(newer)), known, "R{newer}");
    }
    for older in [470, 535, 545] {
        let g = graphs(1, Some(older));
        assert_eq!(g.pool, known.pool, "R{older}");
        assert_eq!(g.driver, 86 * 32 * DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550);
    }
    let pcie = graphs(2, None);
    let pcie535 = graphs(2, Some(535));
    assert!(pcie.nccl > 0);
    assert_eq!(
        pcie535.nccl,
        86 * 65
            * (NCCL_CAPTURED_BYTES * DRIVER_BYTES_PER_LAYER_GRAPH_BEFORE_R550
                / DRIVER_BYTES_PER_LAYER_GRAPH)
    );
    assert_eq!(pcie535.pool, pcie.pool);
}

/// The graphs' memory on hosts that print both it and an R535 driver, against what vLLM logged
/// ("Graph capturing finished ... took X GiB"), split as the logs already are (`SPLIT.md`): the
/// R535 share was fitted on the fit half (MareNostrum 5's H100 64GB, 535.86.10, vLLM 0.15.1), the
/// holdout half is printed as it comes out and bounded loosely (BENCHMARKS.md, "The driver's
/// share of the graphs, by driver branch").
#[test]
fn r535_graph_memory_against_logs() {
    let parse = |text: &str, name: &str| match vram_model::read::parse_config(text, name).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let mut h100 = *vram_model::gpu::lookup("h100-80g").unwrap();
    h100.memory_bytes = 65247 << 20;
    let mut a100 = *vram_model::gpu::lookup("a100-40g").unwrap();
    a100.memory_bytes = (39.39 * (1u64 << 30) as f64) as u64;
    let mn = |len: u64| Knobs {
        engine_version: parse_version("0.15.1"),
        max_model_len: Some(len),
        max_num_seqs: Some(256),
        ..Knobs::default()
    };
    let tk = |v: &str, mnbt: u64| Knobs {
        engine_version: parse_version(v),
        max_num_batched_tokens: Some(mnbt),
        ..Knobs::default()
    };
    let qwen3 = model("qwen3-8b");
    let rows: Vec<(&str, &str, Transformer, Gpu, Knobs, f64)> = vec![
        (
            "fit",
            "MareNostrum 5, Qwen2.5-1.5B, 0.15.1",
            parse(
                include_str!("../../../vram-cli/tests/data/serving/configs/qwen2-1.5b.json"),
                "qwen2-1.5b",
            ),
            h100,
            mn(4096),
            1.76,
        ),
        (
            "fit",
            "MareNostrum 5, Qwen2.5-14B, 0.15.1",
            parse(
                include_str!(
                    "../../../vram-cli/tests/data/serving/configs/qwen2.5-14b-instruct.json"
                ),
                "qwen2.5-14b",
            ),
            h100,
            mn(4096),
            3.06,
        ),
        (
            "holdout",
            "MareNostrum 5, Qwen2.5-7B, 0.15.1",
            parse(
                include_str!("../../../vram-cli/tests/data/serving/configs/qwen2-7b.json"),
                "qwen2-7b",
            ),
            h100,
            mn(4096),
            1.96,
        ),
        (
            "holdout",
            "tokenkaki, Qwen3-8B, 0.19.1 serve",
            qwen3.clone(),
            a100,
            tk("0.19.1", 2048),
            2.44,
        ),
        (
            "holdout",
            "tokenkaki, Qwen3-8B, 0.19.1 latency",
            qwen3.clone(),
            a100,
            tk("0.19.1", 8192),
            2.44,
        ),
        (
            "holdout",
            "tokenkaki, Qwen3-8B, 0.9.2 latency",
            qwen3.clone(),
            a100,
            tk("0.9.2", 8192),
            2.24,
        ),
        (
            "holdout",
            "tokenkaki, Qwen3-8B, 0.9.2 serve",
            qwen3,
            a100,
            tk("0.9.2", 2048),
            2.24,
        ),
    ];
    let gib = (1u64 << 30) as f64;
    for half in ["fit", "holdout"] {
        let mut errs = vec![];
        for (_, name, t, gpu, k, logged) in rows.iter().filter(|r| r.0 == half) {
            let graphs = |driver| {
                let k = Knobs { driver, ..*k };
                capacity(t, gpu, Engine::Vllm, &k).unwrap().cuda_graph_bytes as f64 / gib
            };
            let (today, r535) = (graphs(None), graphs(Some(535)));
            let e = r535 / logged - 1.0;
            eprintln!(
                "{half:<8} {name:<40} logged {logged:.2}  unknown driver {today:.2} ({:+.1}%)  R535 {r535:.2} ({:+.1}%)",
                (today / logged - 1.0) * 100.0,
                e * 100.0
            );
            errs.push(e.abs());
        }
        errs.sort_by(f64::total_cmp);
        let median = errs[errs.len() / 2];
        let bound = if half == "fit" { 0.05 } else { 0.30 };
        assert!(median < bound, "{half}: median |error| {median}");
    }
    // vllm#17462 (holdout refusal; collect_env prints driver 535.161.08): Qwen3-32B at TP 2 on
    // two L20s, vLLM 0.8.4, failed in `capture_end`. Its graphs hold NCCL's all-reduces; what
    // comes out is printed (BENCHMARKS.md says whether it starts).
    let k = Knobs {
        tp: 2,
        max_model_len: Some(16384),
        engine_version: parse_version("0.8.4"),
        ..Knobs::default()
    };
    let l20 = vram_model::gpu::lookup("l20").unwrap();
    let qwen32 = model("qwen3-32b");
    let at = |driver| capacity(&qwen32, l20, Engine::Vllm, &Knobs { driver, ..k }).unwrap();
    let (today, r535) = (at(None), at(Some(535)));
    eprintln!(
        "vllm#17462: graphs {:.2} GiB (unknown driver, starts {}), {:.2} GiB at R535 (starts {})",
        today.cuda_graph_bytes as f64 / gib,
        today.starts,
        r535.cuda_graph_bytes as f64 / gib,
        r535.starts
    );
    eprintln!("{}", r535.log.last().map_or("", String::as_str));
    assert!(r535.cuda_graph_bytes > 3 * today.cuda_graph_bytes);
}

/// FlashAttention 3's MLA decode (`FLASH_ATTN_MLA`, vLLM's first MLA backend on Hopper from
/// 0.11.2) keeps 32 splits of fp32 partial outputs over the latent, plus their log-sum-exps, in
/// the pool of whole-forward graphs: DeepSeek-V3 at TP 8 has 16 heads a GPU and a 512-wide
/// latent. Not with an fp8 KV cache (the backend takes 16-bit caches only), before 0.11.2
/// (FlashMLA first), off Hopper, or for sparse MLA (DeepSeek-V3.2's indexer).
#[test]
fn flash_attention_mla_accumulators_follow_the_latent() {
    let t = model("deepseek-v3");
    let at = |v: &str, mode: Option<CudagraphMode>, kv_bytes: Option<u64>| Knobs {
        engine_version: parse_version(v),
        cudagraph_mode: mode,
        kv_bytes,
        tp: 8,
        ..Knobs::default()
    };
    let g = |gpu, k: &Knobs| vllm_graphs(&t, gpu, k, true, 1024, 8192, None);
    let accum = 32 * 512 * 16 * (512 + 1) * 4;
    let piecewise = g(h100(), &at("0.19.0", Some(CudagraphMode::Piecewise), None));
    let both = g(h100(), &at("0.19.0", None, None));
    assert_eq!(both.full_sizes.last(), Some(&512));
    assert_eq!(both.pool, piecewise.pool + accum);
    let fp8 = g(h100(), &at("0.19.0", None, Some(1)));
    assert_eq!(fp8.pool, piecewise.pool);
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    let off_hopper = g(a100, &at("0.19.0", None, None));
    let off_hopper_pw = g(a100, &at("0.19.0", Some(CudagraphMode::Piecewise), None));
    assert_eq!(off_hopper.pool, off_hopper_pw.pool);
    let early = g(h100(), &at("0.11.0", None, None));
    let early_pw = g(h100(), &at("0.11.0", Some(CudagraphMode::Piecewise), None));
    assert_eq!(early.pool, early_pw.pool);
    let sparse = model("deepseek-v3.2");
    let gs = |k: &Knobs| vllm_graphs(&sparse, h100(), k, true, 1024, 8192, None);
    assert_eq!(
        gs(&at("0.19.0", None, None)).pool,
        gs(&at("0.19.0", Some(CudagraphMode::Piecewise), None)).pool
    );
}

/// The capture's own stream gets a cuBLAS workspace of its own (PyTorch keys them by handle and
/// stream; vLLM's `graph_capture` makes the stream): 32 MiB on Hopper, 8.1 MiB elsewhere, only
/// where the captured linears run through PyTorch's GEMMs, from vLLM 0.10, and not without graphs.
#[test]
fn the_capture_stream_gets_its_own_cublas_workspace() {
    let t = llama3();
    let at = |v: &str, quantization: Quantization| Knobs {
        engine_version: parse_version(v),
        quantization,
        ..Knobs::default()
    };
    let g = |gpu, k: &Knobs| vllm_graphs(&t, gpu, k, true, 1024, 8192, None);
    let hopper = g(h100(), &at("0.19.0", Quantization::None));
    assert_eq!(hopper.cublas, 32 << 20);
    assert_eq!(
        hopper.bytes(),
        hopper.pool + hopper.driver + hopper.nccl + (32 << 20)
    );
    let a100 = vram_model::gpu::lookup("a100-80g").unwrap();
    assert_eq!(
        g(a100, &at("0.19.0", Quantization::None)).cublas,
        2 * 4096 * 1024 + 8 * 16 * 1024
    );
    assert_eq!(g(h100(), &at("0.19.0", Quantization::Fp8)).cublas, 0);
    assert_eq!(g(h100(), &at("0.19.0", Quantization::Int8)).cublas, 0);
    assert_eq!(g(h100(), &at("0.9.2", Quantization::None)).cublas, 0);
    let none = Knobs {
        cudagraph_mode: Some(CudagraphMode::None),
        ..at("0.19.0", Quantization::None)
    };
    assert_eq!(g(h100(), &none).bytes(), 0);
}

/// `--driver` takes nvidia-smi's driver version or its branch; a CUDA version, a number that is
/// no driver branch and a branch older than CUDA graphs are refused.
#[test]
fn a_driver_is_read_as_its_branch() {
    for (s, branch) in [
        ("535.161.08", 535),
        ("535", 535),
        ("R535", 535),
        ("r550", 550),
        ("550.54.15", 550),
        (" 580.159.04 ", 580),
        ("470.256.02", 470),
    ] {
        assert_eq!(parse_driver(s), Ok(branch), "{s}");
    }
    for s in [
        "12.4",
        "12",
        "5350",
        "535.x",
        "535..08",
        "",
        "R",
        "410.48.1.2",
        "-535",
        "300",
    ] {
        assert!(parse_driver(s).is_err(), "{s}");
    }
    assert!(parse_driver("12.4").unwrap_err().contains("CUDA version"));
    assert!(parse_driver("384.81")
        .unwrap_err()
        .contains("older than R410"));
}

/// A compiled V1 start that profiles its CUDA graphs charges the measured 0.25 GiB outside
/// PyTorch and says that a cold torch.compile inside the profile is not in it (round 19's RTX
/// 4090 holdout: the same server with its compile cache warm logged 0.78 GiB more pool); an
/// eager start, which compiles nothing, carries no such caveat.
#[test]
fn vllm_non_torch_names_a_cold_compile_as_not_counted() {
    let gpu = vram_model::gpu::lookup("rtx-4090").unwrap();
    let at = |eager: bool| {
        let k = Knobs {
            max_model_len: Some(32768),
            max_num_seqs: Some(32),
            max_num_batched_tokens: Some(2048),
            enforce_eager: eager,
            engine_version: Some([0, 23, 0]),
            ..Knobs::default()
        };
        let (v1, _) = engine::vllm_v1(&k, gpu);
        assert!(v1);
        non_torch::vllm_non_torch(&k, v1, gpu)
    };
    let (bytes, text) = at(false);
    assert_eq!(bytes, 256 << 20, "{text}");
    assert!(
        text.contains("not counted: a first start that compiles inside the profile"),
        "{text}"
    );
    assert!(text.contains("0.78 GiB smaller"), "{text}");
    let (bytes, text) = at(true);
    assert!(bytes < 256 << 20, "{text}");
    assert!(!text.contains("compiles inside the profile"), "{text}");
}

/// vLLM 0.26 profiles the CUDA-graph estimate where `is_cuda_alike()` (`gpu_worker.py`
/// `determine_available_memory`; 0.20.0 to 0.25.1 only on CUDA), so on ROCm the graphs come out
/// of the budget before the KV cache from 0.26, as they do on CUDA from 0.20.
#[test]
fn vllm_0_26_subtracts_the_graph_estimate_on_rocm_too() {
    let t = qwq32b();
    let mi = vram_model::gpu::lookup("mi300x").unwrap();
    let at = |v: [u32; 3]| {
        let k = Knobs {
            engine_version: Some(v),
            // Qwen2 has no experts: from 0.25 it runs on V2 unless told otherwise.
            vllm_v2_runner: Some(false),
            ..Knobs::default()
        };
        capacity(&t, mi, Engine::Vllm, &k).unwrap()
    };
    let (before, after) = (at([0, 25, 1]), at([0, 26, 0]));
    assert!(!before.cuda_graph_in_budget && after.cuda_graph_in_budget);
    assert!(after.cuda_graph_bytes > 0);
    assert_eq!(
        before.kv_cache_bytes / before.kv_cache_blocks.max(1),
        after.kv_cache_bytes / after.kv_cache_blocks.max(1)
    );
    // The pool is smaller by the graphs, to within one block.
    let page = after.kv_cache_bytes / after.kv_cache_blocks;
    let fall = before.kv_cache_bytes - after.kv_cache_bytes;
    assert!(fall + page > after.cuda_graph_bytes && fall < after.cuda_graph_bytes + page);
    assert!(after.assumes.iter().any(|a| a.contains("is_cuda_alike")));
}
