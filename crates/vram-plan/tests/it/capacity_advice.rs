//! `suggest::serving` advises only changes the job has not made, named as the engine
//! names them, that start it; `Knobs::derived_max_model_len` moves the length limit.

use vram_model::arch::{Model, Transformer};
use vram_model::{catalog, gpu};
use vram_plan::capacity::{
    capacity, parse_engine_version, share_ceiling, Engine, Knobs, Quantization,
};
use vram_plan::suggest;

fn model(id: &str) -> Transformer {
    match catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    }
}

#[test]
fn a_checkpoint_stored_in_fp8_is_never_told_to_quantize_to_fp8() {
    // DeepSeek-V3 ships FP8 blocks: 8 H100s cannot hold it, and fp8 weights are no change.
    let t = model("deepseek-v3");
    assert_ne!(t.blocks.storage.quant, vram_model::blocks::Quant::None);
    let g = gpu::lookup("h100-80g").unwrap();
    let k = Knobs {
        tp: 8,
        max_model_len: Some(32768),
        ..Knobs::default()
    };
    assert!(!capacity(&t, g, Engine::Vllm, &k).unwrap().starts);
    let c = suggest::serving(&t, g, Engine::Vllm, &k).expect("a change");
    let flags = &c.flags;
    assert!(!flags.contains("--quantization"), "{flags}");
    assert!(
        !flags.contains("--tensor-parallel-size"),
        "TP 8 is the most tried: {flags}"
    );
    assert_eq!(flags, "--pipeline-parallel-size 2");
    assert_eq!(c.max_model_len, 32768);
    let changed = Knobs { pp: 2, ..k };
    let started = capacity(&t, g, Engine::Vllm, &changed).unwrap();
    assert!(started.starts);
    assert_eq!(started.kv_cache_tokens, c.kv_cache_tokens);
}

#[test]
fn changes_already_made_are_not_offered_and_each_offer_starts() {
    let t = model("llama-3-70b");
    let g = gpu::lookup("a100-80g").unwrap();
    // A100 80GB (torch's 79.15 GiB) at 0.865: a KV cache, but not 8,192 tokens of it.
    let base = Knobs {
        tp: 2,
        gpu_memory_utilization: Some(0.865),
        ..Knobs::default()
    };
    // A larger share of the device comes first: the smallest in hundredths that starts it.
    let first = suggest::serving(&t, g, Engine::Vllm, &base).unwrap();
    assert!(
        ["0.87", "0.88"]
            .map(|u| format!("--gpu-memory-utilization {u}"))
            .contains(&first.flags),
        "{}",
        first.flags
    );
    assert!(first.bound.is_some());
    // At the largest share vLLM's start-up check takes, the fp8 KV cache is the next change.
    let now = capacity(&t, g, Engine::Vllm, &base).unwrap();
    let top = share_ceiling(&t, g, Engine::Vllm, &base, &now).max;
    let at_top = Knobs {
        gpu_memory_utilization: Some(top),
        ..base
    };
    assert!(!suggest::serving_tried(&t, g, Engine::Vllm, &at_top)
        .iter()
        .any(|f| f.starts_with("--gpu-memory-utilization")));
    let fp8 = Knobs {
        kv_bytes: Some(1),
        ..base
    };
    assert!(capacity(&t, g, Engine::Vllm, &fp8).unwrap().starts);
    // With the KV cache already fp8, the weights fp8 and the share at its bound, only more
    // parallelism remains.
    let made = Knobs {
        kv_bytes: Some(1),
        quantization: Quantization::Fp8,
        max_model_len: Some(131072),
        gpu_memory_utilization: Some(top),
        ..base
    };
    if let Some(c) = suggest::serving(&t, g, Engine::Vllm, &made) {
        let flags = &c.flags;
        assert!(
            flags.starts_with("--tensor-parallel-size ")
                || flags.starts_with("--pipeline-parallel-size "),
            "{flags}"
        );
        let n: u64 = flags.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n > 2 || flags.starts_with("--pipeline"), "{flags}");
        assert!(c.max_concurrency > 0.0);
    }
}

#[test]
fn a_derived_length_moves_the_limit_and_the_default() {
    let t = model("qwen2-7b");
    let g = gpu::lookup("h100-80g").unwrap();
    let limit = t.max_positions();
    let over = Knobs {
        max_model_len: Some(limit * 2),
        ..Knobs::default()
    };
    let e = capacity(&t, g, Engine::Vllm, &over)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--max-model-len") && e.contains("no rope_scaling"),
        "{e}"
    );
    let stretched = Knobs {
        derived_max_model_len: Some(limit * 2),
        ..Knobs::default()
    };
    assert_eq!(
        capacity(&t, g, Engine::Vllm, &stretched)
            .unwrap()
            .max_model_len,
        limit * 2
    );
    assert!(capacity(
        &t,
        g,
        Engine::Vllm,
        &Knobs {
            max_model_len: Some(limit * 2),
            ..stretched
        }
    )
    .is_ok());
    let e = capacity(
        &t,
        g,
        Engine::Sglang,
        &Knobs {
            max_model_len: Some(limit * 2 + 1),
            ..stretched
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("stretched by its rope_scaling"), "{e}");
}

fn at(version: &str, k: Knobs) -> Knobs {
    let (v, pin) = parse_engine_version(version).unwrap();
    Knobs {
        engine_version: Some(v),
        engine_pin: pin,
        ..k
    }
}

/// vLLM V1's start-up check (`request_memory`, `v1/worker/utils.py` at 0.19.1): `ceil(total ×
/// gpu_memory_utilization)` must be free when the engine starts, or it refuses with its own
/// ValueError before loading anything. From 0.11 the snapshot is taken after the process groups'
/// communicators exist, so TP 2 takes less than TP 1; at 0.10 it is taken before them; 0.9.0
/// checks nothing.
#[test]
fn vllm_refuses_a_share_beyond_what_is_free_at_start() {
    let t = model("qwen3-8b");
    let g = gpu::lookup("h100-80g").unwrap();
    let ceiling = |version: &str, tp: u64| {
        let k = at(
            version,
            Knobs {
                tp,
                ..Knobs::default()
            },
        );
        let now = capacity(&t, g, Engine::Vllm, &k).unwrap();
        (share_ceiling(&t, g, Engine::Vllm, &k, &now), k)
    };
    let (one, k1) = ceiling("0.19.1", 1);
    let (two, k2) = ceiling("0.19.1", 2);
    assert!(two.max < one.max, "{} {}", one.max, two.max);
    assert!(one.max < 1.0 && one.max >= 0.98, "{}", one.max);
    for (c, k) in [(&one, k1), (&two, k2)] {
        assert!(c.text.contains("start-up check"), "{}", c.text);
        let ok = Knobs {
            gpu_memory_utilization: Some(c.max),
            ..k
        };
        assert!(capacity(&t, g, Engine::Vllm, &ok).is_ok());
        let over = Knobs {
            gpu_memory_utilization: Some(c.max + 0.01),
            ..k
        };
        let e = capacity(&t, g, Engine::Vllm, &over)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("refuses this: ValueError: Free memory on device cuda:0 (")
                && e.contains(") on startup is less than desired GPU memory utilization (")
                && e.contains(&format!(
                    "the largest --gpu-memory-utilization it takes is {:.2}",
                    c.max
                )),
            "{e}"
        );
    }
    // 0.10: the snapshot before the communicators, and no device in the text.
    let (ten1, _) = ceiling("0.10.1", 1);
    let (ten2, k) = ceiling("0.10.1", 2);
    assert_eq!(ten1.max, ten2.max);
    let e = capacity(
        &t,
        g,
        Engine::Vllm,
        &Knobs {
            gpu_memory_utilization: Some(1.0),
            ..k
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Free memory on device ("), "{e}");
    // 0.9.0 checks nothing at start: the share is the capacity model's to decide.
    let (nine, k) = ceiling("0.9.0", 1);
    assert_eq!(nine.max, 1.0);
    assert!(
        nine.text.contains("checks no free memory at start"),
        "{}",
        nine.text
    );
    assert!(capacity(
        &t,
        g,
        Engine::Vllm,
        &Knobs {
            gpu_memory_utilization: Some(1.0),
            ..k
        }
    )
    .is_ok());
}

/// The share offered is the smallest, in hundredths, that starts the job, above the one in
/// force and within the bound; none where the job already asks the bound.
#[test]
fn the_smallest_larger_share_that_starts_is_offered_and_never_one_already_asked() {
    let t = model("llama-3.1-70b");
    let g = gpu::lookup("h100-80g").unwrap();
    let base = at(
        "0.19.1",
        Knobs {
            tp: 2,
            ..Knobs::default()
        },
    );
    // A length that starts at 0.95 and not at 0.9.
    let fits = |u: f64| {
        capacity(
            &t,
            g,
            Engine::Vllm,
            &Knobs {
                gpu_memory_utilization: Some(u),
                ..base
            },
        )
        .unwrap()
        .max_model_len_that_fits
    };
    let (l90, l95) = (fits(0.9), fits(0.95));
    assert!(l95 > l90, "{l90} {l95}");
    let job = Knobs {
        max_model_len: Some(l95),
        ..base
    };
    let now = capacity(&t, g, Engine::Vllm, &job).unwrap();
    assert!(!now.starts);
    let c = suggest::serving(&t, g, Engine::Vllm, &job).unwrap();
    let u: f64 = c
        .flags
        .strip_prefix("--gpu-memory-utilization ")
        .unwrap_or_else(|| panic!("{}", c.flags))
        .parse()
        .unwrap();
    assert!(u > 0.9 && u <= 0.95, "{u}");
    let run = |u: f64| {
        capacity(
            &t,
            g,
            Engine::Vllm,
            &Knobs {
                gpu_memory_utilization: Some(u),
                ..job
            },
        )
        .unwrap()
    };
    let started = run(u);
    assert!(started.starts);
    assert_eq!(started.kv_cache_tokens, c.kv_cache_tokens);
    if u - 0.01 > 0.9 + 1e-9 {
        assert!(!run(u - 0.01).starts, "{u} is the smallest");
    }
    let bound = c.bound.as_deref().unwrap();
    let ceiling = share_ceiling(&t, g, Engine::Vllm, &job, &now);
    assert_eq!(bound, ceiling.text);
    assert!(
        bound.contains(&format!("at most {:.2}", ceiling.max)),
        "{bound}"
    );
    assert!(
        c.gives().ends_with(&format!("; within {bound})")),
        "{}",
        c.gives()
    );
    assert!(suggest::serving_tried(&t, g, Engine::Vllm, &job)
        .iter()
        .any(|f| f == &format!("--gpu-memory-utilization 0.91-{:.2}", ceiling.max)));
    // Asked already at the bound: no larger share is tried.
    let asked = Knobs {
        gpu_memory_utilization: Some(ceiling.max),
        max_model_len: Some(l95 * 4),
        ..job
    };
    assert!(!suggest::serving_tried(&t, g, Engine::Vllm, &asked)
        .iter()
        .any(|f| f.starts_with("--gpu-memory-utilization")));
    if let Some(c) = suggest::serving(&t, g, Engine::Vllm, &asked) {
        assert!(c.bound.is_none(), "{}", c.flags);
    }
}

/// SGLang checks no upper bound on `--mem-fraction-static`; what is left of the memory free
/// before loading must hold the activations and the CUDA graphs (SGLang's definition of the
/// fraction), which bounds the fraction offered.
#[test]
fn sglang_offers_a_larger_fraction_within_its_reserve() {
    let t = model("qwen3-8b");
    let g = gpu::lookup("l4").unwrap();
    let k = Knobs {
        mem_fraction_static: Some(0.5),
        ..Knobs::default()
    };
    let now = capacity(&t, g, Engine::Sglang, &k).unwrap();
    assert!(!now.starts);
    let ceiling = share_ceiling(&t, g, Engine::Sglang, &k, &now);
    let pre = now.total_bytes - now.non_torch_bytes;
    let rest = now.activation_peak_bytes + now.cuda_graph_bytes;
    assert!(ceiling.max * pre as f64 <= (pre - rest) as f64 + 1.0);
    assert!((ceiling.max + 0.01) * pre as f64 > (pre - rest) as f64);
    let c = suggest::serving(&t, g, Engine::Sglang, &k).unwrap();
    let f: f64 = c
        .flags
        .strip_prefix("--mem-fraction-static ")
        .unwrap_or_else(|| panic!("{}", c.flags))
        .parse()
        .unwrap();
    assert!(f > 0.5 && f <= ceiling.max, "{f} {}", ceiling.max);
    let run = |f: f64| {
        capacity(
            &t,
            g,
            Engine::Sglang,
            &Knobs {
                mem_fraction_static: Some(f),
                ..k
            },
        )
        .unwrap()
    };
    // SGLang starts with any pool; the fraction offered is the smallest whose pool holds one
    // request of the length.
    let c1 = run(f);
    assert!(c1.starts && c1.max_concurrency >= 1.0, "{f}");
    assert_eq!(c1.kv_cache_tokens, c.kv_cache_tokens);
    if f - 0.01 > 0.5 + 1e-9 {
        let below = run(f - 0.01);
        assert!(!below.starts || below.max_concurrency < 1.0);
    }
    assert_eq!(c.bound.as_deref(), Some(ceiling.text.as_str()));
    assert!(
        ceiling
            .text
            .contains("SGLang leaves beside its static pool: it checks no upper bound"),
        "{}",
        ceiling.text
    );
}

/// A larger share's bound is printed after "within" (`ServingChange::gives`, the doctor's
/// remedy), so every engine's bound text is a noun phrase: vLLM V1's start-up check, what the
/// device holds beside the budget where vLLM checks nothing at start (0.9.0), and what SGLang
/// leaves beside its static pool ("within vLLM 0.9.0 checks no free memory" and "within SGLang
/// checks no upper bound" were printed before).
#[test]
fn a_larger_shares_bound_reads_after_within() {
    let t = model("qwen3-8b");
    for (engine, version, g) in [
        (Engine::Vllm, Some("0.19.1"), "l4"),
        (Engine::Vllm, Some("0.9.0"), "l4"),
        (Engine::Vllm, Some("0.6.4"), "l4"),
        (Engine::Sglang, None, "l4"),
    ] {
        let g = gpu::lookup(g).unwrap();
        let k = Knobs {
            max_model_len: Some(32768),
            ..Knobs::default()
        };
        let k = match version {
            Some(v) => at(v, k),
            None => k,
        };
        let now = capacity(&t, g, engine, &k).unwrap();
        let text = share_ceiling(&t, g, engine, &k, &now).text;
        assert!(
            text.starts_with("the start-up check of vLLM V1")
                || text.starts_with("what the device holds beside the budget")
                || text.starts_with("what SGLang leaves beside its static pool"),
            "{version:?}: within {text}"
        );
        // The figures stay: the rule's own words and the ceiling.
        assert!(
            text.contains("checks no free memory at start")
                || text.contains("checks no upper bound at start")
                || text.contains("must be free at start"),
            "{text}"
        );
    }
}
