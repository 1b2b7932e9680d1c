//! Properties of the step timeline: consistency between the peak walk and the tensor trace,
//! monotonicity in the knobs, and hand-computed figures.

use proptest::prelude::*;
use vram_model::arch::Model;
use vram_model::setup::{
    Attention, Mode, Offload, Optimizer, Parallel, Precision, Recompute, Setup, Train,
};
use vram_model::trace::{training_events, TraceEvent};
use vram_model::{catalog, estimate, estimate_with_timeline, hf, Category};

fn train(micro_batch: u64, seq: u64) -> Setup {
    Setup {
        mode: Mode::Train(Train {
            micro_batch,
            seq,
            ..Train::default()
        }),
        ..Setup::default()
    }
}

fn with_train(mut s: Setup, f: impl FnOnce(&mut Train)) -> Setup {
    if let Mode::Train(t) = &mut s.mode {
        f(t);
    }
    s
}

/// Peak live bytes of a trace, replayed by hand.
fn trace_peak(events: &[TraceEvent]) -> (u64, u64) {
    let mut sizes = std::collections::HashMap::new();
    let (mut live, mut peak) = (0u64, 0u64);
    for e in events {
        match *e {
            TraceEvent::Alloc { id, bytes, .. } => {
                assert!(sizes.insert(id, bytes).is_none(), "id {id} allocated twice");
                live += bytes;
                peak = peak.max(live);
            }
            TraceEvent::Free { id } => live -= sizes.remove(&id).expect("free of a live tensor"),
        }
    }
    (peak, live)
}

#[test]
fn trace_agrees_with_estimate() {
    for (id, setup) in [
        ("gpt2", train(4, 1024)),
        (
            "llama-2-7b",
            with_train(train(1, 2048), |t| t.recompute = Recompute::Full),
        ),
        ("t5-base", with_train(train(8, 512), |t| t.grad_accum = 3)),
        ("resnet-50", train(32, 1)),
        (
            "mixtral-8x7b",
            Setup {
                parallel: Parallel {
                    dp: 8,
                    zero: 3,
                    ..Parallel::default()
                },
                ..train(1, 4096)
            },
        ),
    ] {
        let model = catalog::lookup(id).unwrap();
        let e = estimate(&model, &setup).unwrap();
        let events = training_events(&model, &setup, 2).unwrap();
        let (peak, end) = trace_peak(&events);
        assert_eq!(end, 0, "{id}: every tensor is freed");
        assert_eq!(
            peak, e.peak_tensor_bytes,
            "{id}: trace peak equals the estimate's peak"
        );
        // The allocator rounds each block up (512 B, unsplit remainders) and never below.
        assert!(e.peak_bytes >= e.peak_tensor_bytes);
    }
}

/// A trace is one sequence of events for one request: what is still live after the last step
/// (weights, optimizer states) is freed in the order it was made, not in a map's order (which
/// changes per map, so two traces in one process differed in their last events, and one
/// `vram trace` command wrote different snapshot bytes run to run).
#[test]
fn trace_events_are_the_same_every_time_and_end_in_creation_order() {
    let model = catalog::lookup("qwen3-0.6b").unwrap();
    let setup = train(1, 512);
    let first = training_events(&model, &setup, 2).unwrap();
    // The weights are live to the end: their frees come in the order they were made.
    let weights: std::collections::HashSet<u64> = first
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc { id, category, .. } if *category == Category::Parameters => {
                Some(*id)
            }
            _ => None,
        })
        .collect();
    let freed: Vec<u64> = first
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Free { id } if weights.contains(id) => Some(*id),
            _ => None,
        })
        .collect();
    assert!(
        freed.len() > 100 && freed.len() == weights.len(),
        "{}",
        freed.len()
    );
    assert!(
        freed.windows(2).all(|w| w[0] < w[1]),
        "freed in creation order"
    );
    for _ in 0..4 {
        assert_eq!(training_events(&model, &setup, 2).unwrap(), first);
    }
}

#[test]
fn timeline_peak_is_the_max_of_its_points() {
    let model = catalog::lookup("llama-2-7b").unwrap();
    let e =
        estimate_with_timeline(&model, &with_train(train(2, 2048), |t| t.grad_accum = 2)).unwrap();
    let max_high = e.timeline.iter().map(|p| p.high_bytes).max().unwrap();
    // Each point carries its own phase's high, the last one included: the chart reaches the
    // peak the page states, at the phase it names.
    assert_eq!(max_high, e.peak_tensor_bytes);
    let at_peak = e
        .timeline
        .iter()
        .find(|p| p.high_bytes == max_high)
        .unwrap();
    assert_eq!(at_peak.phase, e.peak_phase);
    let last_phase_high = e.peak_tensor_bytes;
    // `peak_bytes` is the allocator's view of the same moment: blocks rounded to 512 B.
    assert!(e.peak_bytes >= e.peak_tensor_bytes);
    assert!(e.peak_bytes - e.peak_tensor_bytes < e.peak_tensor_bytes / 1000);
    assert!(
        e.timeline.len() > 4 * 32,
        "forward and backward of each layer, twice"
    );
    assert_eq!(
        last_phase_high,
        e.breakdown.total()
            - e.breakdown.get(Category::AllocatorOverhead)
            - e.breakdown.get(Category::CudaContext)
    );
}

/// The README's headline estimate peaks in the optimizer step (AdamW's foreach temporary),
/// the last phase of the step: its point carries that high too (issue 25, item 3: the
/// timeline's largest high was 120.7 GiB against a stated peak of 149.6 GiB).
#[test]
fn timeline_reaches_an_optimizer_step_peak() {
    let model = catalog::lookup("llama-3-8b").unwrap();
    let e = estimate_with_timeline(&model, &train(1, 2048)).unwrap();
    assert_eq!(e.peak_phase, vram_model::Phase::Optimizer);
    let last = e.timeline.last().unwrap();
    assert_eq!(last.phase, vram_model::Phase::Optimizer);
    assert_eq!(last.high_bytes, e.peak_tensor_bytes);
    let max_high = e.timeline.iter().map(|p| p.high_bytes).max().unwrap();
    assert_eq!(max_high, e.peak_bytes);
}

#[test]
fn knobs_move_the_peak_the_right_way() {
    let model = catalog::lookup("llama-2-7b").unwrap();
    let peak = |s: &Setup| estimate(&model, s).unwrap().peak_bytes;
    let base = with_train(train(4, 2048), |t| t.optimizer = Optimizer::Sgd);
    let full = with_train(base, |t| t.recompute = Recompute::Full);
    let sel = Setup {
        attention: Attention::Eager,
        ..with_train(base, |t| t.recompute = Recompute::Selective)
    };
    let eager = Setup {
        attention: Attention::Eager,
        ..base
    };
    assert!(peak(&full) < peak(&base));
    assert!(
        peak(&sel) < peak(&eager),
        "selective recompute drops the s² scores"
    );
    assert!(
        peak(&base) < peak(&eager),
        "eager attention stores the s² scores"
    );
    assert!(peak(&base) < peak(&with_train(base, |t| t.micro_batch = 8)));
    let adam = train(1, 2048);
    let adam8 = with_train(adam, |t| t.optimizer = Optimizer::Adam8bit);
    assert!(peak(&adam8) < peak(&adam));
    let accum = with_train(train(4, 2048), |t| t.grad_accum = 4);
    assert!(
        peak(&accum) >= peak(&train(4, 2048)),
        "gradients stay live across micro-batches"
    );
    let z = |zero: u8, offload: Offload| {
        let s = Setup {
            parallel: Parallel {
                dp: 8,
                zero,
                ..Parallel::default()
            },
            ..train(1, 2048)
        };
        estimate(&model, &with_train(s, |t| t.offload = offload))
            .unwrap()
            .breakdown
            .model_states()
    };
    assert!(z(3, Offload::None) < z(2, Offload::None));
    assert!(z(2, Offload::None) < z(1, Offload::None));
    assert!(z(3, Offload::Params) < z(3, Offload::Optimizer));
    assert!(z(3, Offload::Optimizer) < z(3, Offload::None));
}

#[test]
fn inference_by_hand() {
    // Llama-2-7B in bf16: weights 2 bytes x 6,738,415,616; a static KV cache of 2 x 32 layers
    // x 1 x 4096 tokens x 4096 x 2 bytes = 2 GiB. `generate` sizes it for prompt + new tokens
    // - 1 (transformers 5.17 `max_cache_len = max_length - 1`): 4081 + 16 - 1 = 4096.
    let model = catalog::lookup("llama-2-7b").unwrap();
    let s = Setup {
        mode: Mode::Infer(vram_model::setup::Infer {
            batch: 1,
            context: 4097,
            new_tokens: 16,
            kv_bytes: 2,
            kv_cache: vram_model::setup::KvCache::Static,
        }),
        ..Setup::default()
    };
    let e = estimate(&model, &s).unwrap();
    assert_eq!(e.breakdown.get(Category::Parameters), 2 * 6_738_415_616);
    assert_eq!(e.breakdown.get(Category::KvCache), 2 << 30);
    // With GQA (Llama-3-8B: 8 KV heads of 128) the cache is 4x smaller per token.
    let l3 = catalog::lookup("llama-3-8b").unwrap();
    assert_eq!(
        estimate(&l3, &s).unwrap().breakdown.get(Category::KvCache),
        (2 << 30) / 4
    );
}

#[test]
fn autocast_model_states_by_hand() {
    // PyTorch autocast + AdamW, one GPU: fp32 weights (4), fp32 grads (4), two fp32 moments (8),
    // and foreach AdamW's param-sized temporary (4) at the optimizer step: 20 bytes/param peak
    // when activations are small (GPT-2, one 8-token sequence).
    let model = catalog::lookup("gpt2").unwrap();
    let e = estimate(&model, &train(1, 8)).unwrap();
    let p = e.params;
    assert_eq!(e.breakdown.get(Category::Parameters), 4 * p);
    assert_eq!(e.breakdown.get(Category::OptimizerStates), 8 * p);
    assert_eq!(e.breakdown.get(Category::Gradients), 4 * p);
    assert_eq!(e.breakdown.get(Category::Temporaries), 4 * p);
    assert_eq!(e.peak_phase.to_string(), "optimizer step");
}

fn small_llama(h: u64, layers: u64, heads: u64, kv: u64, f: u64, vocab: u64) -> Model {
    let cfg = format!(
        r#"{{"model_type":"llama","vocab_size":{vocab},"hidden_size":{h},"intermediate_size":{f},"num_hidden_layers":{layers},"num_attention_heads":{heads},"num_key_value_heads":{kv}}}"#
    );
    hf::parse_config(&cfg, "p").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any valid setup gives a breakdown that sums to the total and a trace that matches the peak.
    #[test]
    fn random_setups_are_consistent(
        h_mult in 1u64..8, layers in 1u64..6, kv_div in 0usize..3, mb in 1u64..4, seq in 1u64..300,
        accum in 1u64..3, prec in 0usize..4, rec in 0usize..3, eager in any::<bool>(), zero in 0u8..4, dp in 1u64..5,
    ) {
        let heads = 8;
        let kv = [8, 4, 1][kv_div];
        let model = small_llama(64 * h_mult, layers, heads, kv, 96 * h_mult, 1000);
        let precision = [Precision::Fp32, Precision::Fp16Amp, Precision::Bf16Amp, Precision::Bf16][prec];
        let recompute = [Recompute::None, Recompute::Selective, Recompute::Full][rec];
        let zero = if dp == 1 { 0 } else { zero };
        let setup = Setup {
            precision,
            attention: if eager { Attention::Eager } else { Attention::Sdpa },
            parallel: Parallel { dp, zero, ..Parallel::default() },
            mode: Mode::Train(Train { micro_batch: mb, seq, grad_accum: accum, recompute, ..Train::default() }),
            ..Setup::default()
        };
        let e = estimate(&model, &setup).unwrap();
        prop_assert_eq!(e.breakdown.total(), e.total_bytes);
        prop_assert!(e.peak_bytes >= e.breakdown.model_states());
        // Two steps: the first creates the optimizer states in its optimizer step, the second
        // runs with them from the start, as every step the estimate describes.
        let (peak, end) = trace_peak(&training_events(&model, &setup, 2).unwrap());
        prop_assert_eq!(end, 0);
        prop_assert_eq!(peak, e.peak_tensor_bytes);
        prop_assert!(e.reserved_bytes >= e.peak_bytes && e.peak_bytes >= e.peak_tensor_bytes);
    }

    /// Arbitrary bytes as config.json never panic.
    #[test]
    fn arbitrary_config_text_never_panics(text in ".{0,200}") {
        let _ = hf::parse_config(&text, "x");
    }

    /// Arbitrary field values in a well-formed config never panic, and errors are one line.
    #[test]
    fn arbitrary_field_values(h in any::<i64>(), l in any::<i32>(), a in -3i64..100, kv in -3i64..100) {
        let cfg = format!(r#"{{"model_type":"mistral","vocab_size":32000,"hidden_size":{h},"intermediate_size":128,"num_hidden_layers":{l},"num_attention_heads":{a},"num_key_value_heads":{kv}}}"#);
        match hf::parse_config(&cfg, "x") {
            Ok(m) => { let _ = estimate(&m, &train(1, 16)); }
            Err(e) => prop_assert!(!e.to_string().contains('\n')),
        }
    }
}
