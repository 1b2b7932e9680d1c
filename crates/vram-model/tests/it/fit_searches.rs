//! The fit searches agree with the estimate a user reads beside them: the largest micro-batch
//! (training), the largest batch and the longest context (`generate`) that `vram estimate`
//! prints each fit per the same full estimate (`Estimate::fits` of its device total), and the
//! next size up does not.
//!
//! Whether a step runs is not monotone in its size, nor in the device's: PyTorch's
//! `release_cached_blocks` runs only where a `cudaMalloc` fails, so where the device first runs
//! out decides which cached segments go back whole and which are later split by smaller
//! tensors and stay pinned. The searches probe one replay on the named device (`fits`); the
//! estimate's total is the smallest device its bisection found, which under that path
//! dependence can be above a device the replay runs on. `mistral-7b` below is the case a user
//! met: "largest micro-batch that fits: 22" beside "micro-batch 22 does NOT fit".

use crate::setups::{finetune, generate};
use vram_model::arch::Model;
use vram_model::estimate::{
    fits, largest_batch, largest_context_to, max_batch, Largest, BELOW, SCAN,
};
use vram_model::setup::{Mode, Optimizer, Recompute, Setup, Train};
use vram_model::{catalog, estimate, gpu};

fn train(mb: u64, seq: u64, optimizer: Optimizer, recompute: Recompute) -> Setup {
    Setup {
        mode: Mode::Train(Train {
            micro_batch: mb,
            seq,
            optimizer,
            recompute,
            ..Train::default()
        }),
        ..Setup::default()
    }
}

fn with_batch(s: &Setup, n: u64) -> Setup {
    let mut t = *s;
    match &mut t.mode {
        Mode::Train(x) => x.micro_batch = n,
        Mode::Infer(x) => x.batch = n,
    }
    t
}

fn with_context(s: &Setup, n: u64) -> Setup {
    let mut t = *s;
    if let Mode::Infer(x) = &mut t.mode {
        x.context = n;
    }
    t
}

/// `answer` fits on `cap` per the full estimate and `answer + 1` does not; `None` only where
/// the smallest size (`lowest`) does not fit.
fn check(
    id: &str,
    what: &str,
    model: &Model,
    answer: Option<u64>,
    lowest: u64,
    at: impl Fn(u64) -> Setup,
    cap: u64,
) {
    let fits_at = |n: u64| estimate(model, &at(n)).unwrap().fits(cap);
    match answer {
        Some(n) => {
            assert!(n >= lowest, "{id}: {what} {n} below {lowest}");
            assert!(
                fits_at(n),
                "{id}: {what} {n} on {cap} B, which its estimate says does not fit"
            );
            assert!(
                !fits_at(n + 1),
                "{id}: {what} {n} on {cap} B, but {} fits too",
                n + 1
            );
        }
        None => assert!(
            !fits_at(lowest),
            "{id}: no {what} on {cap} B, but {lowest} fits"
        ),
    }
}

fn cap(id: &str) -> u64 {
    gpu::lookup(id).unwrap().memory_bytes
}

/// The case a user read: the search said 22, the estimate of 22 said 878 MiB short.
///
/// The replay on the H100 itself runs micro-batch 22: its one release of cached segments
/// (`release_cached_blocks` after a failed `cudaMalloc`) comes at a step's first 2.9 GB fp32
/// logits, with 1.6 GB of split blocks trapped. A device 0.5 GB larger first runs out one
/// logits tensor later, when 13.8 GB sit in segments split by smaller tensors, which a release
/// cannot return; the third step's 2 GiB request then fails with 1.7 GB free and 5.4 GB
/// trapped. So the bisection for the smallest device (the estimate's total) lands above the
/// H100, at the next device size that runs. Per the estimate 13 and 21 to 27 do not fit while
/// 28 does (a path not traced here): the search answers 28 and names 21.
#[test]
fn mistral_7b_adam8bit_on_an_h100() {
    let model = catalog::lookup("mistral-7b").unwrap();
    let s = train(1, 1024, Optimizer::Adam8bit, Recompute::Full);
    let h100 = cap("h100-80g");
    let l = largest_batch(&model, &s, h100).unwrap().unwrap();
    let est = |n| estimate(&model, &with_batch(&s, n)).unwrap().fits(h100);
    assert_eq!((l.value, l.untried_above), (28, None));
    // The 16 sizes below are checked (12 to 27), where the scan's first failure, 21, lies.
    assert_eq!(l.checked_below_from, 12);
    assert_eq!(l.not_fitting_below, vec![(13, 13), (21, 27)]);
    assert!(est(28) && est(20) && !est(21) && !est(27) && !est(29));
    checked_below("mistral-7b seq 1024", &l, 1, est);
    // The non-monotone fit in the device's size the answer steps around.
    assert!(fits(&model, &with_batch(&s, 22), h100).unwrap());
    assert!(!est(22));
}

/// The case a user read: at seq 2048 the answer, 14, has 11 to 13 below it not fitting, which
/// no upward check meets; the check below (down to 1: 14 is within 16 of it) names them.
#[test]
fn mistral_7b_seq_2048_names_the_sizes_below_that_do_not_fit() {
    let model = catalog::lookup("mistral-7b").unwrap();
    let s = train(1, 2048, Optimizer::Adam8bit, Recompute::Full);
    let h100 = cap("h100-80g");
    let l = largest_batch(&model, &s, h100).unwrap().unwrap();
    let est = |n| estimate(&model, &with_batch(&s, n)).unwrap().fits(h100);
    assert_eq!(l.value, 14);
    assert_eq!(l.checked_below_from, 1);
    assert!(l.not_fitting_below.contains(&(11, 13)), "{l:?}");
    checked_below("mistral-7b seq 2048", &l, 1, est);
}

/// Training over a spread of models, GPUs, optimizers, recomputation and sequence lengths.
#[test]
fn the_largest_micro_batch_fits_and_the_next_does_not() {
    let cases: &[(&str, &str, Optimizer, Recompute, u64)] = &[
        (
            "mistral-7b",
            "h100-80g",
            Optimizer::Adam8bit,
            Recompute::Full,
            1024,
        ),
        (
            "mistral-7b",
            "h100-80g",
            Optimizer::Adam8bit,
            Recompute::Full,
            2048,
        ),
        (
            "llama-3-8b",
            "h100-80g",
            Optimizer::Adam8bit,
            Recompute::Full,
            2048,
        ),
        (
            "llama-3-8b",
            "h200",
            Optimizer::Adamw,
            Recompute::Full,
            4096,
        ),
        (
            "llama-3-8b",
            "h200",
            Optimizer::Sgd,
            Recompute::Selective,
            1024,
        ),
        (
            "qwen3-1.7b",
            "a100-40g",
            Optimizer::Adamw,
            Recompute::None,
            512,
        ),
        (
            "qwen3-1.7b",
            "l4",
            Optimizer::Adam8bit,
            Recompute::Full,
            2048,
        ),
        (
            "qwen3-0.6b",
            "rtx-4090",
            Optimizer::Adamw,
            Recompute::Selective,
            4096,
        ),
        ("gpt2", "t4", Optimizer::Adamw, Recompute::None, 1024),
        (
            "gpt2-large",
            "v100-32g",
            Optimizer::Sgd,
            Recompute::None,
            1024,
        ),
        (
            "pythia-1.4b",
            "a10",
            Optimizer::Adam8bit,
            Recompute::Full,
            2048,
        ),
        (
            "phi-3-mini",
            "l40s",
            Optimizer::Adam8bit,
            Recompute::Full,
            1024,
        ),
        (
            "gemma-2-9b",
            "h200",
            Optimizer::Adam8bit,
            Recompute::Full,
            2048,
        ),
        (
            "bert-base-uncased",
            "rtx-4060",
            Optimizer::Adamw,
            Recompute::None,
            512,
        ),
    ];
    for &(name, g, opt, rec, seq) in cases {
        let model = catalog::lookup(name).unwrap();
        let s = train(1, seq, opt, rec);
        let id = format!("{name} {opt:?} {rec:?} seq {seq} on {g}");
        let l = largest_batch(&model, &s, cap(g)).unwrap();
        let answer = l.as_ref().map(|l| l.value);
        check(
            &id,
            "micro-batch",
            &model,
            answer,
            1,
            |n| with_batch(&s, n),
            cap(g),
        );
        let fits_at = |n| estimate(&model, &with_batch(&s, n)).unwrap().fits(cap(g));
        if let Some(l) = l {
            checked_below(&id, &l, 1, fits_at);
            checked_above(&id, &l, fits_at);
        }
    }
}

/// `generate` over a spread: the largest batch at the setup's context, and the longest context
/// at its batch.
#[test]
fn generate_searches_fit_and_the_next_size_does_not() {
    let cases: &[(&str, &str, u64, u64, u64)] = &[
        ("llama-3-8b", "h100-80g", 8, 2048, 256),
        ("mistral-7b", "l40s", 4, 1024, 128),
        ("qwen3-1.7b", "l4", 16, 512, 512),
        ("qwen3-8b", "a100-40g", 1, 4096, 64),
        ("gpt2", "t4", 32, 256, 64),
    ];
    for &(name, g, batch, prompt, new) in cases {
        let model = catalog::lookup(name).unwrap();
        let s = generate(batch, prompt, new);
        let id = format!("{name} generate b{batch} p{prompt}+{new} on {g}");
        let l = largest_batch(&model, &s, cap(g)).unwrap();
        let b = l.as_ref().map(|l| l.value);
        assert_eq!(b, max_batch(&model, &s, cap(g)).unwrap(), "{id}");
        check(&id, "batch", &model, b, 1, |n| with_batch(&s, n), cap(g));
        if let Some(l) = &l {
            let fits_at = |n| estimate(&model, &with_batch(&s, n)).unwrap().fits(cap(g));
            checked_below(&id, l, 1, fits_at);
            checked_above(&id, l, fits_at);
        }
        let c = largest_context_to(&model, &s, cap(g), 1 << 24).unwrap();
        check(
            &id,
            "context",
            &model,
            c.as_ref().map(|l| l.value),
            new + 1,
            |n| with_context(&s, n),
            cap(g),
        );
        if let Some(l) = &c {
            let fits_at = |n| estimate(&model, &with_context(&s, n)).unwrap().fits(cap(g));
            checked_below(&id, l, new + 1, fits_at);
            checked_above(&id, l, fits_at);
        }
    }
}

/// What a search says it checked below its answer is what the full estimate says: the sizes
/// from `checked_below_from` up are each named not fitting exactly where they do not fit, the
/// check reaches `lo` (the smallest size) or the [`BELOW`] sizes under the answer, and past
/// that bound nothing is named.
fn checked_below(id: &str, l: &Largest, lo: u64, fits_at: impl Fn(u64) -> bool) {
    let from = l.checked_below_from;
    assert!(
        from <= l.value,
        "{id}: checked from {from} above {}",
        l.value
    );
    assert!(
        from == lo || l.value - from >= BELOW,
        "{id}: checked only {from}..{} below {} (bound {BELOW}, smallest {lo})",
        l.value - 1,
        l.value
    );
    let named = |n: u64| l.not_fitting_below.iter().any(|&(a, b)| a <= n && n <= b);
    for &(a, b) in &l.not_fitting_below {
        assert!(from <= a && a <= b && b < l.value, "{id}: range {a}-{b}");
    }
    for n in from..l.value {
        assert_eq!(
            named(n),
            !fits_at(n),
            "{id}: size {n} below the answer {}",
            l.value
        );
    }
}

/// Where the search says every larger size was tried, the sizes the scan covers above the
/// answer do not fit; where it says they were not, more than [`SCAN`] lay untried, and the
/// next size does not fit either way.
fn checked_above(id: &str, l: &Largest, fits_at: impl Fn(u64) -> bool) {
    assert!(!fits_at(l.value + 1), "{id}: the next size fits");
    match l.untried_above {
        Some(t) => assert!(
            t - (l.value + 2) >= SCAN,
            "{id}: only {}..={t} untried, within the scan",
            l.value + 2
        ),
        None => {
            for n in l.value + 2..=l.value + 8 {
                assert!(!fits_at(n), "{id}: {n} fits above the answer {}", l.value);
            }
        }
    }
}

fn on(g: &str, seq: u64) -> Setup {
    Setup {
        overheads: vram_model::setup::Overheads::for_gpu(gpu::lookup(g).unwrap()),
        ..train(1, seq, Optimizer::Adamw, Recompute::None)
    }
}

/// The case the old LoRA search (gallop and bisect on the estimate, assuming the fit grows
/// monotonically) got wrong, and why: QLoRA NF4 Mistral-7B at seq 1024 on an H100 reporting
/// 11.1 GB (`--gpu h100-80g:11100000000B`). With room, micro-batch 8 reserves 10.41 GB and 9
/// only 10.09 GB (at 8 best fit leaves no free block for two of step 2's backward transients,
/// which get new segments; BENCHMARKS.md), which made 8 "not fit" and the old bisection answer
/// 7. On an 11.1 GB device PyTorch releases its idle cached segments when that `cudaMalloc`
/// fails and retries, and the step needs 9.98 GB: 8 fits, every size up to 9 does, 10 does not.
/// (Before `from_pretrained`'s warm-up block was modelled the figures were 10.40, 10.10 and
/// 9.97 GB, those of an independent port of `CUDACachingAllocator.cpp` (001074d) replaying the
/// same requests, BENCHMARKS.md; the block moved them by under 0.2 %.)
#[test]
fn qlora_micro_batch_8_runs_where_pytorch_releases_its_cache() {
    use vram_model::finetune::step::{estimate as ft, largest_micro_batch, Method};
    use vram_model::finetune::WeightFormat;
    let model = catalog::lookup("mistral-7b").unwrap();
    let spec = finetune(Method::Qlora, WeightFormat::Nf4);
    let s = on("h100-80g", 1024);
    let cap = 11_100_000_000;
    let e8 = ft(&model, &with_batch(&s, 8), &spec).unwrap();
    let e9 = ft(&model, &with_batch(&s, 9), &spec).unwrap();
    assert_eq!(
        (e8.peak_bytes, e8.reserved_bytes, e8.needed_bytes),
        (8_966_832_128, 10_414_456_832, 9_984_540_672)
    );
    assert_eq!(
        (e9.peak_bytes, e9.reserved_bytes, e9.needed_bytes),
        (9_492_406_272, 10_087_301_120, 10_087_301_120)
    );
    let est = |n| ft(&model, &with_batch(&s, n), &spec).unwrap().fits(cap);
    let l = largest_micro_batch(&model, &s, &spec, cap)
        .unwrap()
        .unwrap();
    assert_eq!((l.value, l.untried_above), (9, None));
    assert_eq!(l.checked_below_from, 1);
    assert!(l.not_fitting_below.is_empty(), "{:?}", l.not_fitting_below);
    assert!(est(8) && est(9) && !est(10));
    checked_below("mistral-7b qlora seq 1024", &l, 1, est);
    checked_above("mistral-7b qlora seq 1024", &l, est);
}

/// What the search steps over where the needed memory is still not monotone: the same step on
/// a 27 GB H100. Micro-batch 32 needs 26.50 GB, 33 needs 25.90 GB, 34 26.50 GB (each with the
/// CUDA context beside): 33 is the answer and 32 is named. (Before `from_pretrained`'s warm-up block was modelled the same kind
/// of step sat at 34 on a 28 GB H100: step 2's 1904 MiB mixer transient found the 1904 MiB block
/// step 1 left split by a 272 MiB tensor and got a new segment; where the block moves the
/// weights, the sizes it happens at moved too.)
#[test]
fn qlora_micro_batch_steps_over_a_size_that_does_not_fit() {
    use vram_model::finetune::step::{estimate as ft, largest_micro_batch, Method};
    use vram_model::finetune::WeightFormat;
    let model = catalog::lookup("mistral-7b").unwrap();
    let spec = finetune(Method::Qlora, WeightFormat::Nf4);
    let s = on("h100-80g", 1024);
    let cap = 27_000_000_000;
    let est = |n| ft(&model, &with_batch(&s, n), &spec).unwrap().fits(cap);
    let l = largest_micro_batch(&model, &s, &spec, cap)
        .unwrap()
        .unwrap();
    assert_eq!((l.value, l.untried_above), (33, None));
    assert_eq!(l.checked_below_from, 17);
    assert_eq!(l.not_fitting_below, vec![(32, 32)]);
    assert!(est(31) && !est(32) && est(33) && !est(34));
    checked_below("mistral-7b qlora seq 1024 on 27 GB", &l, 1, est);
    checked_above("mistral-7b qlora seq 1024 on 27 GB", &l, est);
}

/// LoRA and QLoRA over a spread of models, storages, sequence lengths and GPUs: the answer
/// fits per the step's estimate, the next size does not, and what the search says it checked
/// below and above holds.
#[test]
fn the_largest_lora_micro_batch_fits_and_the_next_does_not() {
    use vram_model::finetune::step::{estimate as ft, largest_micro_batch, Method};
    use vram_model::finetune::WeightFormat;
    let cases: &[(&str, &str, Method, WeightFormat, u64)] = &[
        (
            "llama-3-8b",
            "rtx-4090",
            Method::Qlora,
            WeightFormat::Nf4,
            2048,
        ),
        (
            "llama-3-8b",
            "h100-80g",
            Method::Lora,
            WeightFormat::Bf16,
            2048,
        ),
        ("llama-3-8b", "l4", Method::Qlora, WeightFormat::Int8, 512),
        (
            "mistral-7b",
            "h100-80g",
            Method::Qlora,
            WeightFormat::Nf4,
            1024,
        ),
        (
            "mistral-7b",
            "a100-40g",
            Method::Lora,
            WeightFormat::Bf16,
            4096,
        ),
        (
            "phi-3-mini",
            "rtx-4090",
            Method::Qlora,
            WeightFormat::Int8,
            512,
        ),
        (
            "qwen3-0.6b",
            "h100-80g",
            Method::Lora,
            WeightFormat::Bf16,
            2048,
        ),
        ("qwen3-1.7b", "t4", Method::Qlora, WeightFormat::Nf4, 1024),
    ];
    for &(name, g, method, w, seq) in cases {
        let model = catalog::lookup(name).unwrap();
        let spec = finetune(method, w);
        let s = on(g, seq);
        let cap = cap(g);
        let id = format!("{name} {method:?} {w:?} seq {seq} on {g}");
        let est = |n| ft(&model, &with_batch(&s, n), &spec).unwrap().fits(cap);
        match largest_micro_batch(&model, &s, &spec, cap).unwrap() {
            Some(l) => {
                assert!(est(l.value), "{id}: {} does not fit", l.value);
                checked_below(&id, &l, 1, est);
                checked_above(&id, &l, est);
            }
            None => assert!(!est(1), "{id}: none found, but 1 fits"),
        }
    }
}
