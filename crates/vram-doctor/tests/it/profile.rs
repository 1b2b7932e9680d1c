//! The engines' own profiling lines in real pasted start-up logs (`tests/data/serving-profiles.txt`,
//! each block with its source): what each part of the budget took, read back against the engine's
//! own arithmetic, and the cause and remedies the doctor draws from them.

use vram_doctor::profile::{self, Part, ProfileLayout};
use vram_doctor::serving::{explain_profiled, parse, ServingCause};

use crate::gib;

/// One block of `serving-profiles.txt`.
struct Block {
    source: String,
    label: Option<String>,
    check: Vec<String>,
    expect: Vec<(String, f64)>,
    log: String,
}

fn blocks() -> Vec<Block> {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serving-profiles.txt");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut out = Vec::new();
    for chunk in text.split("\nsource: ").skip(1) {
        let (head, log) = chunk.split_once("\nlog:\n").expect("each block has a log");
        let field = |k: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}: ")))
                .map(str::to_string)
        };
        out.push(Block {
            source: head.lines().next().unwrap().to_string(),
            label: field("label"),
            check: field("check")
                .unwrap()
                .split_whitespace()
                .map(String::from)
                .collect(),
            expect: field("expect")
                .unwrap()
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect(),
            // The block runs to the next blank line.
            log: log.split("\n\n").next().unwrap().to_string(),
        });
    }
    out
}

fn to_gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

#[test]
fn every_logged_profile_is_read_with_its_printed_figures() {
    let all = blocks();
    assert_eq!(all.len(), 11);
    for b in &all {
        let p = profile::read(&b.log).unwrap_or_else(|| panic!("{}: no profile read", b.source));
        for (k, want) in &b.expect {
            let got = match k.as_str() {
                "total" => p.total_bytes.map(to_gib),
                "util" => p.utilization,
                "budget" => p.budget_bytes.map(to_gib),
                "weights" => p.weights_bytes.map(to_gib),
                "activation" => p.activation_bytes.map(to_gib),
                "non_torch" => p.non_torch_bytes.map(to_gib),
                "kv" => p.kv_bytes.map(|k| k as f64 / (1u64 << 30) as f64),
                "free_after" => p.free_after_load_bytes.map(to_gib),
                "free_before" => p.free_before_load_bytes.map(to_gib),
                "min_fraction" => p
                    .free_before_load_bytes
                    .zip(p.free_after_load_bytes)
                    .map(|(pre, a)| 1.0 - a as f64 / pre as f64),
                other => panic!("unknown key {other}"),
            };
            let got = got.unwrap_or_else(|| panic!("{}: no {k}", b.source));
            // Figures printed with two decimals (four for `took`), or derived from them.
            assert!(
                (got - want).abs() < 0.0006,
                "{}: {k} {got} != {want}",
                b.source
            );
        }
    }
}

/// The engine's own arithmetic: what it printed for each part adds up to its budget less the
/// cache it printed, so the reading counts every part once (vLLM 0.6.4's non-torch figure holds
/// the memory in use before the profile, which the reading takes out of it).
#[test]
fn the_parts_read_add_up_to_the_budget_less_the_cache_as_the_engine_printed() {
    let mut n = 0;
    for b in blocks()
        .iter()
        .filter(|b| b.check.iter().any(|c| c == "sum"))
    {
        let p = profile::read(&b.log).unwrap();
        let parts = p.parts().unwrap();
        let sum: u64 = parts.iter().map(|&(_, x)| x).sum();
        let left = p.budget_bytes.unwrap() as i64 - p.kv_bytes.unwrap();
        // Each printed figure is rounded to 0.01 GiB: at most 0.005 GiB each, five figures.
        assert!(
            (sum as i64 - left).unsigned_abs() <= gib(0.025),
            "{}: parts {} GiB, budget less cache {} GiB ({parts:?})",
            b.source,
            to_gib(sum),
            left as f64 / (1u64 << 30) as f64
        );
        n += 1;
    }
    assert_eq!(n, 8);
}

/// Where the thread names the cause, the doctor names it from the profile too.
#[test]
fn the_doctor_names_the_threads_cause_from_the_profile() {
    for b in blocks()
        .iter()
        .filter(|b| b.check.iter().any(|c| c == "cause"))
    {
        let e = parse(&b.log).unwrap_or_else(|| panic!("{}: no error", b.source));
        let p = profile::read(&b.log);
        let d = explain_profiled(&e, p.as_ref(), None);
        let name = serde_json::to_value(d.cause).unwrap();
        let name = format!("serving-{}", name.as_str().unwrap());
        assert_eq!(Some(&name), b.label.as_ref(), "{}", b.source);
        assert!(d.profile.is_some());
    }
}

/// vllm#23278: V1 0.10.1 prints the weights and how far short the cache is, not the budget; which
/// part took the room stays open, and the doctor says so, with both figures.
#[test]
fn v1_without_the_budget_keeps_the_cause_open_and_prints_what_it_read() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/23278"))
        .unwrap();
    let p = profile::read(&b.log).unwrap();
    assert_eq!(p.layout, ProfileLayout::VllmV1);
    assert_eq!(p.largest(), None);
    let d = explain_profiled(&parse(&b.log).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Undetermined);
    assert!(
        d.explanation.contains("weights 65.97 GiB"),
        "{}",
        d.explanation
    );
    assert!(
        d.explanation.contains("2.14 GiB short"),
        "{}",
        d.explanation
    );
    assert!(
        d.explanation.contains("the budget is not printed"),
        "{}",
        d.explanation
    );
}

/// vllm#13882's profile (RTX 4060 8 GB, bnb-4bit Qwen2.5-7B at 0.70, vLLM 0.7.3 V0): the weights
/// take 5.20 of the 5.60 GiB budget. The post is cut in the traceback before the error line; with
/// 0 blocks, 0.7.3's `raise_if_cache_size_invalid` (`vllm/worker/worker.py`, read in the sdist)
/// raises `No available memory for the cache blocks`, which is appended here as that code writes it.
#[test]
fn the_weights_that_take_most_of_the_budget_are_named_with_measured_remedies() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/13882"))
        .unwrap();
    let text = format!(
        "{}\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        b.log
    );
    let p = profile::read(&text).unwrap();
    assert_eq!(p.largest(), Some((Part::Weights, gib(5.20))));
    let d = explain_profiled(&parse(&text).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Weights);
    // (5.60 + 1.05) / 8.00 = 0.83125 of the device holds what preceded the cache: 0.84. It
    // leaves the cache 0.07 GiB, and vLLM then checks that one request of max_model_len fits
    // the cache (0.7.3's `raise_if_cache_size_invalid`), which these lines do not size: not
    // enough alone (it was marked enough; Qwen2.5-7B's 32768 tokens need 1.75 GiB).
    assert_eq!(d.remedies[0].action, "--gpu-memory-utilization 0.84");
    assert!(!d.remedies[0].enough);
    assert!(
        d.remedies[0]
            .detail
            .contains("vLLM then checks that one request of max_model_len fits the cache"),
        "{}",
        d.remedies[0].detail
    );
    assert!(!d.remedies[1].enough, "{:?}", d.remedies[1]);
    // With the model's figures (Qwen2.5-7B: 56 KiB a token, 32768 tokens), the utilization holds
    // what the engine measured and that request: (6.65 + 1.75) / 8.00 is more than the device.
    let cap = vram_doctor::serving::CapacityFigures {
        device_bytes: 8 << 30,
        non_kv_bytes: gib(6.65),
        kv_bytes_per_token: 56 << 10,
        max_model_len: 32768,
        max_model_len_shown: false,
        tensor_parallel_size: 1,
        tensor_parallel_shown: false,
        change: None,
        failed_share: None,
    };
    let with = explain_profiled(&parse(&text).unwrap(), Some(&p), Some(&cap));
    assert_eq!(with.remedies[0].action, "raise --gpu-memory-utilization");
    assert!(!with.remedies[0].enough);
    assert!(
        with.remedies[0]
            .detail
            .contains("1.75 GiB of cache for one request of max_model_len (32768 tokens"),
        "{}",
        with.remedies[0].detail
    );
    // Twice the GPUs leave 1.55 GiB, less than the request at the present size: not shown enough.
    assert!(!with.remedies[1].enough, "{:?}", with.remedies[1]);
    // Half the weights (2.60) and the rest as measured (1.45) leave the 5.60 GiB budget 1.55.
    // The configuration line says TP 1 and bitsandbytes: twice the GPUs, and no "quantize" advice.
    assert_eq!(p.tensor_parallel_size, Some(1));
    assert_eq!(p.quantization.as_deref(), Some("bitsandbytes"));
    assert!(
        d.remedies[1].action == "--tensor-parallel-size 2",
        "{:?}",
        d.remedies
    );
    assert!(
        d.remedies[1].detail.contains("1.55 GiB"),
        "{}",
        d.remedies[1].detail
    );
    assert!(
        d.explanation
            .contains("the weights took the most: 5.20 GiB"),
        "{}",
        d.explanation
    );
    // The message-only text (that the message cannot tell the parts apart) is gone.
    assert!(
        !d.explanation.contains("cannot show which"),
        "{}",
        d.explanation
    );
    assert!(
        d.remedies[2]
            .action
            .contains("fewer bits per weight than this bitsandbytes one"),
        "{}",
        d.remedies[2].action
    );
}

/// vllm#10517: the context error keeps its cause; the profile sizes the utilization that holds
/// one request of 29000 tokens: (21.22 − 2.89) GiB before the cache + 2.89 × 29000 / 23648 GiB of
/// cache = 21.88 GiB of 23.58, 0.928: 0.93.
#[test]
fn a_context_error_gets_its_utilization_from_the_profile() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/10517"))
        .unwrap();
    let p = profile::read(&b.log).unwrap();
    assert_eq!(p.layout, ProfileLayout::VllmV0Early);
    let d = explain_profiled(&parse(&b.log).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Context);
    assert_eq!(d.remedies[0].action, "--max-model-len 23648");
    assert_eq!(d.remedies[1].action, "--gpu-memory-utilization 0.93");
    assert!(d.remedies[1].enough);
}

/// InferenceX#2128: SGLang's load line gives the smallest fraction, 1 − 12.25 / 137.90 = 0.9112,
/// against the 0.9113 SGLang printed (its figures are rounded before we see them).
#[test]
fn sglang_load_lines_give_the_fraction_below_which_the_pool_is_empty() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/2128"))
        .unwrap();
    let d = explain_profiled(
        &parse(&b.log).unwrap(),
        profile::read(&b.log).as_ref(),
        None,
    );
    assert_eq!(d.cause, ServingCause::Weights);
    assert!(d.explanation.contains("0.9112"), "{}", d.explanation);
    // The same line under the older `Not enough memory` error (its text as SGLang's
    // `model_runner.py` raises it) gives that error the same fraction.
    let old = format!(
        "{}\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        b.log.lines().next().unwrap()
    );
    let d = explain_profiled(&parse(&old).unwrap(), profile::read(&old).as_ref(), None);
    assert_eq!(d.cause, ServingCause::Weights);
    assert_eq!(
        d.remedies[0].action,
        "raise --mem-fraction-static above 0.912"
    );
    assert!(
        d.explanation.contains("empty below a fraction of 0.9112"),
        "{}",
        d.explanation
    );
}

#[test]
fn text_without_profiling_lines_has_no_profile() {
    assert_eq!(
        profile::read("ValueError: No available memory for the cache blocks."),
        None
    );
}

/// V1's DEBUG requested-memory line as 0.10.1's `gpu_worker.py` formats it (`Initial free memory:
/// %.2f GiB; Requested memory: %.2f (util), %.2f GiB`) gives the budget the INFO lines lack. Built
/// from vllm#23278's logged weights and cache with the line vLLM's default 0.9 would print on the
/// catalog H100's 79.19 GiB (71.27 GiB): not a posted log, a check of the format's reading. The
/// weights (65.97 GiB) then outweigh the rest (7.44 GiB) and are named.
#[test]
fn v1_debug_requested_memory_gives_the_budget() {
    let text = "gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds\n\
                gpu_worker.py:262] Initial free memory: 78.68 GiB; Requested memory: 0.90 (util), 71.27 GiB\n\
                gpu_worker.py:276] Available KV cache memory: -2.14 GiB\n\
                ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.";
    let p = profile::read(text).unwrap();
    assert_eq!(p.budget_bytes, Some(gib(71.27)));
    assert_eq!(p.utilization, Some(0.90));
    assert_eq!(
        p.parts().unwrap(),
        vec![
            (Part::Weights, gib(65.9651)),
            (Part::Rest, gib(71.27) + gib(2.14) - gib(65.9651))
        ]
    );
    let d = explain_profiled(&parse(text).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Weights);
    // The total is the requested memory over the utilization, 79.19 GiB: (71.27 + 2.14) / 79.19
    // = 0.927 of it holds what preceded the cache; two GPUs' share of the weights fits too.
    assert_eq!(d.remedies[0].action, "--gpu-memory-utilization 0.93");
    assert!(
        d.remedies[1]
            .action
            .starts_with("--tensor-parallel-size ×2"),
        "{:?}",
        d.remedies
    );
}

/// The planner's gpt-oss-20b refusal (vLLM 0.19.0, H100): the KV cache filled the 75.23 GiB
/// budget, so the sampler's warm-up ran in what the budget left of the 79.19 GiB device, less the
/// 1.30 GiB CUDA graphs' estimate the budget did not count: 79.19 − 75.23 − 1.30 = 2.66 GiB.
#[test]
fn the_sampler_warm_up_is_told_how_much_room_the_budget_left_it() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.contains("llm-d-planner"))
        .unwrap();
    let d = explain_profiled(
        &parse(&b.log).unwrap(),
        profile::read(&b.log).as_ref(),
        None,
    );
    assert_eq!(d.cause, ServingCause::Profile);
    assert!(
        d.explanation.contains("The warm-up ran in 2.66 GiB"),
        "{}",
        d.explanation
    );
}

/// vllm#23278 with the GPU named (H100 80GB, as the thread says): the catalog's 79.19 GiB as
/// PyTorch reports it times vLLM's default utilization gives the budget the log omits. The
/// excerpt names no version, so both V1 defaults are tried: 0.9 leaves the rest 71.27 + 2.14 −
/// 65.97 = 7.44 GiB, 0.92 leaves 9.02 GiB; the 65.97 GiB of weights outweigh either, and are
/// named, with the figures that came from the catalog and the defaults said.
#[test]
fn v1_without_the_budget_takes_the_named_gpus_total_and_the_default_utilization() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/23278"))
        .unwrap();
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let mut p = profile::read(&b.log).unwrap();
    assert_eq!(p.engine_version, None);
    p.supply_device(h100);
    let s = p.supplied.clone().unwrap();
    assert_eq!(s.catalog_gpu.as_deref(), Some(h100.name));
    assert_eq!(s.default_utilization, vec![0.9, 0.92]);
    let t = h100.memory_bytes as f64;
    assert_eq!(p.budget_bytes, Some((t * 0.92).round() as u64));
    assert_eq!(s.budget_low_bytes, Some((t * 0.9).round() as u64));
    assert_eq!(p.largest().map(|(q, _)| q), Some(Part::Weights));
    let d = explain_profiled(&parse(&b.log).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Weights);
    for words in [
        &format!("79.19 GiB, the catalog's {}", h100.name),
        "as PyTorch reports it (the log prints no total)",
        "0.9 to 0.92, vLLM's defaults by release",
        "the weights took the most: 65.97 GiB",
    ] {
        let words: &str = words;
        assert!(d.explanation.contains(words), "{words}: {}", d.explanation);
    }
    // With the version printed, that version's default alone: 0.10.1's 0.9.
    let logged = format!(
        "INFO llm_engine.py] Initializing a V1 LLM engine (v0.10.1) with config: model='openai/gpt-oss-120b'\n{}",
        b.log
    );
    let mut p = profile::read(&logged).unwrap();
    assert_eq!(p.engine_version, Some([0, 10, 1]));
    p.supply_device(h100);
    assert_eq!(p.supplied.as_ref().unwrap().default_utilization, vec![0.9]);
    assert_eq!(p.supplied.as_ref().unwrap().budget_low_bytes, None);
    let d = explain_profiled(&parse(&logged).unwrap(), Some(&p), None);
    assert!(
        d.explanation.contains("0.9, vLLM 0.10.1's default"),
        "{}",
        d.explanation
    );
}

/// Supplied figures decide only where they do: the same log on a GPU whose budget leaves the
/// rest about as large as the weights (or larger at one default and smaller at the other) keeps
/// the cause open and says why.
#[test]
fn supplied_figures_that_do_not_decide_keep_the_cause_open() {
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    // Weights W, cache −1 GiB: the rest is T·u − W + 1. At T = 79.19 GiB the rest equals W where
    // W = (T·u + 1) / 2: 36.14 GiB at 0.9, 36.93 at 0.92; between them the defaults disagree.
    let t = gpu.memory_bytes as f64 / (1u64 << 30) as f64;
    let w = (t * 0.91 + 1.0) / 2.0;
    let text = format!(
        "gpu_model_runner.py:2007] Model loading took {w:.4} GiB and 12.8 seconds\n\
         gpu_worker.py:276] Available KV cache memory: -1.00 GiB\n\
         ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    );
    let mut p = profile::read(&text).unwrap();
    p.supply_device(gpu);
    assert_eq!(p.largest(), None, "{:?}", p.parts());
    let d = explain_profiled(&parse(&text).unwrap(), Some(&p), None);
    assert_eq!(d.cause, ServingCause::Undetermined);
    assert!(
        d.explanation.contains("with the supplied figures"),
        "{}",
        d.explanation
    );
    // A logged utilization pins the budget: at 0.95 the rest (t·0.95 − w + 1) outweighs w,
    // which leaves the cause open as every budget-only reading does (Part::Rest).
    let pinned = format!("'gpu_memory_utilization': 0.95\n{text}");
    let mut p = profile::read(&pinned).unwrap();
    p.supply_device(gpu);
    assert_eq!(
        p.supplied.as_ref().unwrap().default_utilization,
        Vec::<f64>::new()
    );
    assert_eq!(p.largest().map(|(q, _)| q), Some(Part::Rest));
}

/// vLLM on ROCm prints the same profile lines (`RocmPlatform` picks the same V0/V1 workers,
/// read at 0.10.1), but its `get_current_memory_usage` is the device's whole use, so the weights
/// figure counts the allocator's reserve and others' changes during loading: the reading says
/// so when the log names the platform or an AMD GPU is named, and not otherwise.
#[test]
fn rocm_logs_are_read_alike_and_their_weights_figure_is_qualified() {
    let b = blocks()
        .into_iter()
        .find(|b| b.source.ends_with("/23278"))
        .unwrap();
    let plain = profile::read(&b.log).unwrap();
    assert!(!plain.rocm);
    let rocm_log = format!(
        "INFO [__init__.py:241] Automatically detected platform rocm.\n{}",
        b.log
    );
    let p = profile::read(&rocm_log).unwrap();
    assert!(p.rocm);
    assert_eq!(p.weights_bytes, plain.weights_bytes);
    assert_eq!(p.kv_bytes, plain.kv_bytes);
    let d = explain_profiled(&parse(&rocm_log).unwrap(), Some(&p), None);
    assert!(
        d.explanation.contains("on ROCm vLLM measures loading"),
        "{}",
        d.explanation
    );
    let mut q = plain.clone();
    q.supply_device(vram_model::gpu::lookup("mi300x").unwrap());
    assert!(q.rocm);
    let d = explain_profiled(&parse(&b.log).unwrap(), Some(&plain), None);
    assert!(!d.explanation.contains("ROCm"), "{}", d.explanation);
}

/// A log saved with the terminal's colour codes reads as the plain one: vLLM's `_add_prefix`
/// (vllm/utils) writes each worker line's `(VllmWorkerProcess pid=N)` between `\x1b[1;36m` and
/// `\x1b[0;0m`, into a redirected file too before NO_COLOR was read there. Every block of
/// `serving-profiles.txt`, its prefixes coloured, gives the same profile and the same error.
#[test]
fn a_log_with_colour_codes_reads_as_the_plain_one() {
    let mut coloured_prefixes = 0;
    for b in blocks() {
        let coloured: String = b
            .log
            .lines()
            .map(
                |l| match l.strip_prefix('(').and_then(|r| r.split_once(") ")) {
                    Some((who, rest)) => {
                        coloured_prefixes += 1;
                        format!("\x1b[1;36m({who})\x1b[0;0m {rest}\n")
                    }
                    None => format!("\x1b[32m{l}\x1b[0m\n"),
                },
            )
            .collect();
        assert_eq!(
            profile::read(&coloured),
            profile::read(&b.log),
            "{}",
            b.source
        );
        assert_eq!(parse(&coloured), parse(&b.log), "{}", b.source);
    }
    assert!(coloured_prefixes > 0, "no block has a worker prefix");
}

/// Whether the budget took the CUDA graphs' estimate is what the log's own line says:
/// `CUDA graph memory profiling is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).` at
/// 0.18.1/0.19.1 and `... is enabled (default since v0.21.0).` at 0.20.0-0.33.0
/// (`v1/worker/gpu_worker.py`, `determine_available_memory`: 0.23.0 line 495, 0.29.0 line 640).
/// The other branch's lines (0.18.1/0.19.1: `In v0.19, CUDA graph memory profiling will be
/// enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which ...`; from 0.20: `...
/// is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)`) say it did not. The reader took
/// the first 0.19 line for the second, and missed the 0.20+ line.
#[test]
fn the_graph_estimate_is_counted_where_the_log_says_its_profiling_is_enabled() {
    // vLLM 0.23.0 at 0.92 on an H100: 72.85 − 16.76 − 1.30 = 54.79 GiB for the cache.
    let log = |line: &str| {
        format!(
            "gpu_worker.py:412] Initial free memory: 78.68 GiB; Requested memory: 0.920000 (util), 72.85 GiB\n\
             gpu_model_runner.py:6518] Estimated CUDA graph memory: 1.30 GiB total\n\
             gpu_worker.py:478] Memory profiling takes 21.74 seconds. Total non KV cache memory: 16.76GiB; torch peak memory increase: 2.87GiB; non-torch forward increase memory: 0.25GiB; weights memory: 13.64GiB.\n\
             gpu_worker.py:481] Available KV cache memory: 54.79 GiB\n\
             {line}\n\
             RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
        )
    };
    let cases = [
        ("gpu_worker.py:495] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9036 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9364. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.", true),
        ("gpu_worker.py:453] CUDA graph memory profiling is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will become the default in v0.19. The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9036 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9364.", true),
        ("gpu_worker.py:471] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.9200 to 0.9364 to maintain the same effective KV cache size.", false),
        ("gpu_worker.py:512] CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9200 to 0.9364.", false),
    ];
    for (line, counted) in cases {
        let p = profile::read(&log(line)).unwrap();
        assert_eq!(p.cuda_graphs_counted, counted, "{line}");
        assert_eq!(p.cuda_graph_bytes, Some(gib(1.30)));
        let parts = p.parts().unwrap();
        assert_eq!(
            parts.iter().any(|&(q, _)| q == Part::CudaGraphs),
            counted,
            "{parts:?}"
        );
    }
    // Counted, the parts add up to the budget less the cache, as the engine's arithmetic does.
    let p = profile::read(&log(cases[0].0)).unwrap();
    let sum: u64 = p.parts().unwrap().iter().map(|&(_, b)| b).sum();
    let want = gib(72.85) - gib(54.79);
    assert!(sum.abs_diff(want) < (1 << 30) / 50, "{sum} vs {want}");
}

/// vLLM 0.27.0-0.33.0's DEBUG profile line (`utils/mem_utils.py`, `MemoryProfilingResult.
/// __repr__`, 0.27.0 line 220): `total consumed (from mem_get_info): C` where 0.26 printed
/// `non-torch forward increase memory: N`, the budget's non-KV figure being `C` plus the
/// transient peak headroom, not the weights, the torch peak increase and N. Its `torch peak
/// memory increase` is not a part of that budget, so it is not named as the activation peak:
/// the parts are the weights and the rest, `B − W − K`.
#[test]
fn vllm_0_27s_profile_line_is_read_as_its_own_budget() {
    // 72.85 − 17.50 − 1.30 (the graphs, counted) = 54.05 GiB for the cache.
    let text = "INFO vLLM API server version 0.27.0\n\
                gpu_worker.py:560] Initial free memory: 78.68 GiB; Requested memory: 0.920000 (util), 72.85 GiB\n\
                gpu_model_runner.py:6900] Estimated CUDA graph memory: 1.30 GiB total\n\
                gpu_worker.py:570] Memory profiling takes 21.74 seconds. Total non KV cache memory: 17.50GiB; torch peak memory increase: 2.87GiB; total consumed (from mem_get_info): 15.10GiB; weights memory: 13.64GiB.\n\
                gpu_worker.py:571] Available KV cache memory: 54.05 GiB\n\
                gpu_worker.py:590] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9036 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9364. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.\n\
                RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.";
    let p = profile::read(text).unwrap();
    assert_eq!(p.engine_version, Some([0, 27, 0]));
    assert_eq!(p.weights_bytes, Some(gib(13.64)));
    assert_eq!(p.activation_bytes, None);
    assert_eq!(p.non_torch_bytes, None);
    assert_eq!(
        p.parts().unwrap(),
        vec![
            (Part::Weights, gib(13.64)),
            (Part::Rest, gib(72.85) - gib(13.64) - gib(54.05))
        ]
    );
    let d = explain_profiled(&parse(text).unwrap(), Some(&p), None);
    assert!(!d.explanation.contains("2.87"), "{}", d.explanation);
    // The 0.26 line is read as before: the activation peak and memory outside PyTorch.
    let old = text.replace("version 0.27.0", "version 0.26.0").replace(
        "total consumed (from mem_get_info): 15.10GiB",
        "non-torch forward increase memory: 0.99GiB",
    );
    let p = profile::read(&old).unwrap();
    assert_eq!(p.activation_bytes, Some(gib(2.87)));
    assert_eq!(p.non_torch_bytes, Some(gib(0.99)));
}

/// The version `vllm serve` prints from 0.16 (`log_version_and_model`: `vLLM server version X,
/// serving model M`, or its logo with `version X`, read at 0.16.0-0.23.0), as well as the engine
/// core's `Initializing a V1 LLM engine (vX)` and the old `vLLM API server version X`.
#[test]
fn the_logged_vllm_version_is_read_from_each_line_that_prints_it() {
    for (line, want) in [
        ("INFO 11-20 10:00:00 [api_utils.py:330] vLLM server version 0.27.0, serving model Qwen/Qwen3-8B", [0, 27, 0]),
        ("INFO 11-20 10:00:00 [api_utils.py:340] \n       \u{1b}[97;1m█     █     █▄   ▄█\u{1b}[0m\n \u{1b}[93m▄▄\u{1b}[0m \u{1b}[94m▄█\u{1b}[0m \u{1b}[97;1m█     █     █ ▀▄▀ █\u{1b}[0m  version \u{1b}[97;1m0.33.0\u{1b}[0m\n  model   Qwen/Qwen3-8B", [0, 33, 0]),
        ("INFO 11-20 10:00:00 [core.py:140] Initializing a V1 LLM engine (v0.29.0) with config: model='m'", [0, 29, 0]),
        ("INFO 05-01 10:00:00 [api_server.py:1839] vLLM API server version 0.11.0", [0, 11, 0]),
    ] {
        let text = format!("{line}\nINFO Model loading took 14.99 GiB memory and 20.1 seconds\nINFO Available KV cache memory: -1.25 GiB\nValueError: No available memory for the cache blocks.");
        assert_eq!(profile::read(&text).unwrap().engine_version, Some(want), "{line}");
        assert_eq!(profile::engine_configuration(&text).engine_version, Some(want));
    }
}
