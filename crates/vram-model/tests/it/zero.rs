//! ZeRO Table 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
//! Parameter Models"): per-device model-state memory for mixed-precision Adam (K = 12), by
//! data-parallel degree and stage. Data: `tests/data/zero_table1.csv`, copied from the paper.

use vram_model::setup::{Mode, Parallel, Precision, Setup, Train};
use vram_model::{catalog, estimate};

/// Model-state bytes per parameter on one GPU, as the estimator computes them.
fn bytes_per_param(dp: u64, zero: u8) -> f64 {
    // Any model will do: model states are per-parameter. GPT-2 XL keeps the test fast.
    let model = catalog::lookup("gpt2-xl").unwrap();
    let setup = Setup {
        precision: Precision::Fp16Amp,
        parallel: Parallel {
            dp,
            zero,
            ..Parallel::default()
        },
        mode: Mode::Train(Train {
            seq: 128,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let e = estimate(&model, &setup).unwrap();
    e.breakdown.model_states() as f64 / e.params as f64
}

#[test]
fn zero_table_1_every_cell() {
    let csv = include_str!("../data/zero_table1.csv");
    let mut cells = 0;
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let dp: u64 = f[0].parse().unwrap();
        let psi: f64 = match f[1] {
            "7.5B" => 7.5e9,
            "128B" => 128e9,
            "1T" => 1e12,
            other => panic!("model {other}"),
        };
        for (stage, cell) in [(1u8, f[2]), (2, f[3]), (3, f[4])] {
            let paper_gb: f64 = cell.parse().unwrap();
            let ours_gb = bytes_per_param(dp, stage) * psi / 1e9;
            // The paper rounds (and for 1T truncates) to 3-4 significant digits.
            let tol = (paper_gb * 0.0015).max(0.05);
            let truncated = paper_gb.fract() == 0.0 && ours_gb.floor() == paper_gb;
            assert!(
                (ours_gb - paper_gb).abs() <= tol || truncated,
                "dp {dp} {} stage {stage}: ours {ours_gb:.3} GB, paper {paper_gb} GB",
                f[1]
            );
            cells += 1;
        }
    }
    assert_eq!(cells, 54);
}

#[test]
fn zero_formulas_by_hand() {
    // Baseline (2 + 2 + K)Ψ with K = 12: 16 bytes per parameter at dp = 1, every stage.
    for stage in 1..=3 {
        assert!((bytes_per_param(1, stage) - 16.0).abs() < 1e-6);
    }
    // P_os+g at N = 8: 2 + 14/8 = 3.75 bytes per parameter.
    assert!((bytes_per_param(8, 2) - 3.75).abs() < 1e-6);
}
