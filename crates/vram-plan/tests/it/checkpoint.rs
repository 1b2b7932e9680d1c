//! Optimal checkpointing against √n checkpointing and full recomputation on the same budget.

use vram_plan::checkpoint::{
    full_recompute, optimal, simulate, sqrt_checkpoints, store_all, Stage,
};

/// A deterministic heterogeneous chain (64-bit LCG, Knuth's MMIX constants), no gradients.
fn chain(n: usize, seed: u64) -> Vec<Stage> {
    chain_with_grads(n, seed, 0)
}

/// The same with gradients of 0..=`max_grad` units per stage and temporaries of 0..=3 (when
/// `max_grad > 0`).
fn chain_with_grads(n: usize, seed: u64, max_grad: u64) -> Vec<Stage> {
    let mut x = seed;
    let mut next = |lo: u64, hi: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (x >> 33) % (hi - lo + 1)
    };
    (0..n)
        .map(|_| {
            let f = next(1, 10) as f64;
            Stage {
                forward: f,
                backward: 2.0 * f,
                input_bytes: next(1, 8),
                saved_bytes: next(4, 40),
                grad_bytes: if max_grad > 0 { next(0, max_grad) } else { 0 },
                forward_tmp: if max_grad > 0 { next(0, 3) } else { 0 },
                backward_tmp: if max_grad > 0 { next(0, 3) } else { 0 },
            }
        })
        .collect()
}

#[test]
fn uniform_chain_store_all_when_memory_allows() {
    // 4 stages, input 1, saved 2 each: storing everything holds 4·2 + 3·1 = 11 units, the cost
    // is Σ(f + b) = 4·(1 + 2) = 12.
    let c = vec![
        Stage {
            forward: 1.0,
            backward: 2.0,
            input_bytes: 1,
            saved_bytes: 2,
            grad_bytes: 0,
            forward_tmp: 0,
            backward_tmp: 0,
        };
        4
    ];
    let s = store_all(&c);
    let r = simulate(&c, &s.ops).unwrap();
    assert_eq!((r.cost, r.peak_bytes), (12.0, 11));
    let o = optimal(&c, 11, 11).unwrap().unwrap();
    assert_eq!(o.cost, 12.0);
    // Full recomputation: every input held (3) + one stage's saved (2) = 5; cost 12 + 4 = 16.
    let f = simulate(&c, &full_recompute(&c).ops).unwrap();
    assert_eq!((f.cost, f.peak_bytes), (16.0, 5));
    // Below 2 units (one stage's saved bytes) nothing fits.
    assert!(optimal(&c, 1, 1).unwrap().is_none());
}

#[test]
fn optimal_beats_or_matches_baselines_on_their_budget() {
    let mut strictly_better = 0;
    for seed in 0..20 {
        let c = chain(16, seed);
        for base in [sqrt_checkpoints(&c), full_recompute(&c)] {
            let b = simulate(&c, &base.ops).unwrap();
            // Budget = what the baseline needs; slots = budget so sizes are exact.
            let o = optimal(&c, b.peak_bytes, b.peak_bytes as usize)
                .unwrap()
                .expect("the baseline itself fits");
            let r = simulate(&c, &o.ops).unwrap();
            assert!(r.peak_bytes <= b.peak_bytes, "seed {seed}");
            assert!(
                (r.cost - o.cost).abs() < 1e-9,
                "replayed cost = claimed cost"
            );
            assert!(
                o.cost <= b.cost + 1e-9,
                "seed {seed}: {} > {}",
                o.cost,
                b.cost
            );
            if o.cost < b.cost - 1e-9 {
                strictly_better += 1;
            }
        }
    }
    // Heterogeneous stages leave room the fixed patterns waste.
    assert!(strictly_better >= 20, "{strictly_better}");
}

#[test]
fn gradients_held_to_the_end_shrink_what_earlier_backwards_may_use() {
    // Two stages: f = 1, b = 2, input 1, saved 2, gradient 1 (kept once made).
    let c = vec![
        Stage {
            forward: 1.0,
            backward: 2.0,
            input_bytes: 1,
            saved_bytes: 2,
            grad_bytes: 1,
            forward_tmp: 0,
            backward_tmp: 0,
        };
        2
    ];
    // Store all: a0 + x1 + a1 = 5 after the forwards, + g1 = 6 in stage 1's backward; cost 6.
    let s = simulate(&c, &store_all(&c).ops).unwrap();
    assert_eq!((s.cost, s.peak_bytes), (6.0, 6));
    assert_eq!(optimal(&c, 6, 6).unwrap().unwrap().cost, 6.0);
    // Budget 5 or 4: checkpoint at 1. Forward 0 without saving, hold x1; stage 1 alone needs
    // x1 + a1 + g1 = 4; then stage 0 again next to g1: g1 + a0 + g0 = 4. Cost 1 + 3 + 3 = 7.
    for budget in [5, 4] {
        let o = optimal(&c, budget, budget as usize).unwrap().unwrap();
        assert_eq!(o.cost, 7.0);
        assert_eq!(simulate(&c, &o.ops).unwrap().peak_bytes, 4);
    }
    // Budget 3: stage 1 needs x1 + a1 + g1 = 4 > 3 whichever way. Without gradients the same
    // split fits in 3 (x1 + a1 = 3, then a0 = 2).
    assert!(optimal(&c, 3, 3).unwrap().is_none());
    let no_grads: Vec<Stage> = c
        .iter()
        .map(|s| Stage {
            grad_bytes: 0,
            forward_tmp: 0,
            backward_tmp: 0,
            ..*s
        })
        .collect();
    assert_eq!(optimal(&no_grads, 3, 3).unwrap().unwrap().cost, 7.0);
}

#[test]
fn with_gradients_optimal_still_fits_and_beats_the_baselines() {
    for seed in 0..20 {
        let c = chain_with_grads(14, seed, 6);
        for base in [sqrt_checkpoints(&c), full_recompute(&c), store_all(&c)] {
            let b = simulate(&c, &base.ops).unwrap();
            let o = optimal(&c, b.peak_bytes, b.peak_bytes as usize)
                .unwrap()
                .expect("the baseline itself fits");
            let r = simulate(&c, &o.ops).unwrap();
            assert!(r.peak_bytes <= b.peak_bytes, "seed {seed}");
            assert!((r.cost - o.cost).abs() < 1e-9, "seed {seed}");
            assert!(o.cost <= b.cost + 1e-9, "seed {seed}");
        }
    }
}

#[test]
fn cost_falls_as_the_budget_grows() {
    let c = chain(24, 7);
    let all = simulate(&c, &store_all(&c).ops).unwrap();
    let mut last = f64::INFINITY;
    let lo = simulate(&c, &full_recompute(&c).ops).unwrap().peak_bytes / 2;
    for budget in (lo..=all.peak_bytes).step_by(8) {
        if let Some(o) = optimal(&c, budget, budget as usize).unwrap() {
            assert!(o.cost <= last + 1e-9);
            last = o.cost;
            assert!(simulate(&c, &o.ops).unwrap().peak_bytes <= budget);
        }
    }
    // With the store-all budget, no recomputation at all.
    let o = optimal(&c, all.peak_bytes, all.peak_bytes as usize)
        .unwrap()
        .unwrap();
    assert_eq!(o.cost, all.cost);
}

#[test]
fn coarse_slots_stay_within_budget() {
    // Rounding sizes up to slots keeps the answer feasible (maybe not optimal).
    let c = chain(30, 3);
    let b = simulate(&c, &sqrt_checkpoints(&c).ops).unwrap();
    let budget = b.peak_bytes + b.peak_bytes / 4;
    let o = optimal(&c, budget, 50).unwrap().unwrap();
    assert!(simulate(&c, &o.ops).unwrap().peak_bytes <= budget);
}

#[test]
fn simulate_rejects_broken_schedules() {
    let c = chain(3, 1);
    let mut ops = store_all(&c).ops;
    ops.swap(3, 5); // a backward out of order
    assert!(simulate(&c, &ops).is_err());
}

/// Llama-2-7B at micro-batch 1 × 4096 as a chain: 32 decoder layers and the LM head
/// (`transformer_chain`: sizes from the estimator, times from the FLOP count).
fn llama_stage() -> Vec<Stage> {
    use vram_model::setup::{Mode, Setup, Train};
    let model = vram_model::catalog::lookup("llama-2-7b").unwrap();
    let setup = Setup {
        mode: Mode::Train(Train {
            micro_batch: 1,
            seq: 4096,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let mut chain = vram_plan::checkpoint::transformer_chain(&model, &setup).unwrap();
    // Sizes rounded up to 16 MiB, so that 16 MiB slots account for memory exactly.
    for s in &mut chain {
        s.input_bytes = s.input_bytes.next_multiple_of(16 << 20);
        s.saved_bytes = s.saved_bytes.next_multiple_of(16 << 20);
        s.grad_bytes = s.grad_bytes.next_multiple_of(16 << 20);
        s.forward_tmp = s.forward_tmp.next_multiple_of(16 << 20);
        s.backward_tmp = s.backward_tmp.next_multiple_of(16 << 20);
    }
    chain
}

#[test]
fn optimal_matches_or_beats_the_planners_block_recompute_on_a_real_stage() {
    use vram_plan::checkpoint::first_k_recomputed;
    let c = llama_stage();
    // A layer saves several times its input (Korthikanti et al.: sbh(34 + 5as/h) vs 2sbh).
    assert!(c[0].saved_bytes > 8 * c[0].input_bytes);
    let mut gains = Vec::new();
    for k in [4, 8, 16, 24, 32] {
        let base = first_k_recomputed(&c, k);
        let b = simulate(&c, &base.ops).unwrap();
        // Exact memory accounting: one slot = 16 MiB, which divides every size.
        let slots = (b.peak_bytes >> 24) as usize;
        let o = optimal(&c, b.peak_bytes, slots)
            .unwrap()
            .expect("block-k itself fits");
        let r = simulate(&c, &o.ops).unwrap();
        assert!(r.peak_bytes <= b.peak_bytes);
        assert!(
            o.cost <= b.cost * (1.0 + 1e-12),
            "k = {k}: {} > {}",
            o.cost,
            b.cost
        );
        gains.push(1.0 - o.cost / b.cost);
    }
    // With few layers recomputed, the block method's peak is at the end of the forward pass and
    // it is already optimal on a uniform stack. With many, its peak moves to the end of the
    // backward pass, when every layer's gradient exists; the programme then stores late layers
    // (whose backward runs before the gradients pile up) in memory block-k leaves unused.
    eprintln!("gain of the programme over block-k recomputation: {gains:?}");
    assert!(gains[0] < 1e-9 && gains[1] < 1e-9, "{gains:?}");
    assert!(gains[4] > 0.10, "{gains:?}");
}

/// Llama-2-7B, micro-batch 2 × 4096 tokens, bf16 autocast, 8-bit Adam: a step that needs
/// recomputation on an 80 GB H100.
fn llama_7b_mb2() -> (vram_model::arch::Model, vram_model::setup::Setup) {
    use vram_model::setup::{Mode, Optimizer, Setup, Train};
    let model = vram_model::catalog::lookup("llama-2-7b").unwrap();
    let setup = Setup {
        mode: Mode::Train(Train {
            micro_batch: 2,
            seq: 4096,
            optimizer: Optimizer::Adam8bit,
            ..Train::default()
        }),
        ..Setup::default()
    };
    (model, setup)
}

fn with_block(setup: &vram_model::setup::Setup, k: u64) -> vram_model::setup::Setup {
    use vram_model::setup::{Mode, Recompute};
    let mut s = *setup;
    if let Mode::Train(t) = &mut s.mode {
        t.recompute = Recompute::Full;
        t.recompute_layers = Some(k);
    }
    s
}

#[test]
fn the_chain_and_the_step_walk_agree_on_what_a_recomputed_layer_saves() {
    // Two implementations of the same memory: the estimator's step walk and the chain replayed
    // by `simulate`. Recomputing one more layer with the block method frees, at the end of the
    // forward pass, the layer's saved tensors less its held input: in the chain, saved bytes
    // (autocast's weight copies included) minus input; in the walk the copies stay in
    // autocast's cast cache until the forward ends, so they do not count there:
    //   Δ walk = Δ chain − Δk · layer_copies.
    use vram_plan::checkpoint::{first_k_recomputed, transformer_chain};
    let (model, setup) = llama_7b_mb2();
    let chain = transformer_chain(&model, &setup).unwrap();
    let bytes = vram_model::estimate::chain_bytes(&model, &setup).unwrap();
    assert_eq!(chain.len(), 33, "32 layers and the head");
    let walk = |k: u64| {
        let e = vram_model::estimate(&model, &with_block(&setup, k)).unwrap();
        assert!(
            matches!(e.peak_phase, vram_model::estimate::Phase::Loss { .. }),
            "k = {k}: the peak is at the end of the forward pass, not {:?}",
            e.peak_phase
        );
        e.peak_bytes
    };
    let replay = |k: usize| {
        simulate(&chain, &first_k_recomputed(&chain, k).ops)
            .unwrap()
            .peak_bytes
    };
    // Up to about 20 recomputed layers both peak at the end of the forward pass. Beyond, the
    // chain's peak moves into the backward pass (gradients pile up), while the walk's stays at
    // the loss, raised by the loss gradient's transient fp32 tensors that the chain does not
    // model; `device_budget` anchors the chain to the walk for that reason.
    for (k1, k2) in [(4u64, 8u64), (8, 12), (12, 20), (4, 20)] {
        let d_walk = walk(k1) - walk(k2);
        let d_chain = replay(k1 as usize) - replay(k2 as usize);
        assert_eq!(
            d_walk,
            d_chain - (k2 - k1) * bytes.layer_copies,
            "k {k1} -> {k2}"
        );
        // And by hand: (saved − input) per layer.
        assert_eq!(d_walk, (k2 - k1) * (bytes.layer_saved - bytes.layer_input));
    }
}

#[test]
fn the_device_budget_starts_from_the_fewest_layers_the_estimate_fits() {
    use vram_plan::checkpoint::{compare, device_budget, transformer_chain};
    let (model, setup) = llama_7b_mb2();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let chain = transformer_chain(&model, &setup).unwrap();
    let d = device_budget(&model, &setup, &chain, gpu.memory_bytes).unwrap();
    let k = d.block_layers.expect("fits with some recomputation");
    // Independently: k recomputed layers fit, k − 1 do not, and none recomputed does not.
    let fits = |k: u64| {
        let s = if k == 0 { setup } else { with_block(&setup, k) };
        vram_model::estimate(&model, &s)
            .unwrap()
            .fits(gpu.memory_bytes)
    };
    assert!(!fits(0));
    assert!(fits(k) && !fits(k - 1), "k = {k}");
    assert!(d.block_peak_bytes <= d.allocatable_bytes);
    // Every schedule `compare` calls fitting leaves the step within the device's tensors.
    let cands = compare(
        &chain,
        d.chain_bytes,
        512,
        d.block_layers.map(|k| k as usize),
    )
    .unwrap();
    let block = cands.iter().find(|c| c.name.starts_with("block-")).unwrap();
    assert_eq!(block.name, format!("block-{k}"));
    for c in cands.iter().filter(|c| c.fits) {
        assert!(
            d.others_bytes + c.replay.peak_bytes <= d.allocatable_bytes,
            "{}",
            c.name
        );
    }
    // The optimum never costs more than the block method on the same budget (allowing for
    // the programme's slot rounding: 1%).
    let opt = cands.iter().find(|c| c.name == "optimal").unwrap();
    assert!(opt.replay.cost <= block.replay.cost * 1.01);
}
