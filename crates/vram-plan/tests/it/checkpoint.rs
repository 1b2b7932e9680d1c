//! Optimal checkpointing against √n checkpointing and full recomputation on the same budget.

use vram_plan::checkpoint::{
    full_recompute, optimal, simulate, sqrt_checkpoints, store_all, Stage,
};

/// A deterministic heterogeneous chain (64-bit LCG, Knuth's MMIX constants).
fn chain(n: usize, seed: u64) -> Vec<Stage> {
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
            saved_bytes: 2
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

/// One pipeline stage of Llama-2-7B as a chain: 32 decoder layers and the LM head, sizes from
/// the estimator (`layer_activation_bytes`: what a layer saves without recomputation, and under
/// full recomputation, its input only), times from the FLOP count (`token_flops`, backward twice
/// the forward). The head saves the half logits, their fp32 upcast and the fp32 log-softmax
/// (2 + 4 + 4 bytes per logit, ARCHITECTURE.md "Loss").
fn llama_stage() -> Vec<Stage> {
    use vram_model::setup::{Mode, Recompute, Setup, Train};
    let model = vram_model::catalog::lookup("llama-2-7b").unwrap();
    let t = match &model {
        vram_model::arch::Model::Transformer(t) => t.clone(),
        _ => unreachable!(),
    };
    let (mb, seq) = (1u64, 4096u64);
    let setup = |rc| Setup {
        mode: Mode::Train(Train {
            micro_batch: mb,
            seq,
            recompute: rc,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let saved =
        vram_model::estimate::layer_activation_bytes(&model, &setup(Recompute::None)).unwrap();
    let input =
        vram_model::estimate::layer_activation_bytes(&model, &setup(Recompute::Full)).unwrap();
    let f = vram_plan::cost::token_flops(&t, seq);
    let tokens = (mb * seq) as f64;
    let mut chain: Vec<Stage> = (0..t.layers)
        .map(|_| {
            let fwd = tokens * (f.layer_matmul + f.layer_attention) / 1e12;
            Stage {
                forward: fwd,
                backward: 2.0 * fwd,
                input_bytes: input,
                saved_bytes: saved,
            }
        })
        .collect();
    let fwd = tokens * f.head / 1e12;
    chain.push(Stage {
        forward: fwd,
        backward: 2.0 * fwd,
        input_bytes: input,
        saved_bytes: mb * seq * t.vocab * 10,
    });
    // Sizes rounded up to 16 MiB, so that 16 MiB slots account for memory exactly.
    for s in &mut chain {
        s.input_bytes = s.input_bytes.next_multiple_of(16 << 20);
        s.saved_bytes = s.saved_bytes.next_multiple_of(16 << 20);
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
    // Recomputing the first k layers is already close to optimal on a uniform stack: the
    // programme gains at most a few percent (it can keep the head's logits and pick which
    // layers to recompute, but all layers cost the same).
    eprintln!("gain of the programme over block-k recomputation: {gains:?}");
    assert!(gains.iter().all(|&g| g < 0.05), "{gains:?}");
}
