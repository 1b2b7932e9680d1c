//! Megatron-LM 2021, Table 1: predicted TFLOP/s per GPU against the paper's.
//!
//! Source of `tests/data/megatron_2021.csv`: Narayanan et al., "Efficient Large-Scale Language
//! Model Training on GPU Clusters Using Megatron-LM" (SC'21), Table 1 (some rows): GPT models
//! on DGX A100 80GB nodes (8 GPUs, NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node), vocabulary
//! 51200, sequence 2048, full activation recomputation, mixed precision; TFLOP/s per GPU count
//! recomputation. A100 bf16/fp16 dense peak: 312 TFLOP/s.

use vram_model::arch::Model;
use vram_model::hf;
use vram_model::setup::Attention;
use vram_plan::cluster::Cluster;
use vram_plan::cost::Calibration;
use vram_plan::{search, Pins, RecomputeChoice, Request, Stack};

pub struct Row {
    pub params_billion: f64,
    pub heads: u64,
    pub hidden: u64,
    pub layers: u64,
    pub tp: u64,
    pub pp: u64,
    pub gpus: u64,
    pub global_batch: u64,
    pub tflops_per_gpu: f64,
}

pub fn rows() -> Vec<Row> {
    let text = include_str!("../data/megatron_2021.csv");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].trim().parse::<u64>().unwrap();
            Row {
                params_billion: f[0].parse().unwrap(),
                heads: n(1),
                hidden: n(2),
                layers: n(3),
                tp: n(4),
                pp: n(5),
                gpus: n(6),
                global_batch: n(7),
                tflops_per_gpu: f[8].parse().unwrap(),
            }
        })
        .collect()
}

/// GPT as Megatron-LM builds it: learned positions (2048), vocabulary 51200, 4h MLP.
pub fn gpt(r: &Row) -> Model {
    let cfg = format!(
        r#"{{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":{},"n_layer":{},"n_head":{}}}"#,
        r.hidden, r.layers, r.heads
    );
    hf::parse_config(&cfg, &format!("gpt-{}b", r.params_billion)).unwrap()
}

/// The 2021 code: eager attention (materialised scores, fused softmax), and the data-parallel
/// all-reduce after the backward pass, not overlapped.
pub fn request(r: &Row) -> Request {
    let cluster = Cluster::for_gpu("a100-80g", r.gpus).unwrap();
    let mut req = Request::new(gpt(r), cluster, r.global_batch, 2048);
    req.stack = Stack::Megatron;
    req.attention = Attention::Eager;
    req.calibration = Calibration {
        overlap_grad_reduce: false,
        ..Calibration::default()
    };
    req
}

#[test]
fn parameter_counts_match_the_table() {
    // Table 1's "Number of parameters (billion)" column.
    // The table rounds to one decimal (1.65 -> 1.7).
    for r in rows() {
        let p = gpt(&r).param_count() as f64 / 1e9;
        assert!(
            (p - r.params_billion).abs() <= 0.05 + 1e-3 * p,
            "{p} vs {}",
            r.params_billion
        );
    }
}

#[test]
fn pinned_paper_configuration_within_ten_percent() {
    let mut errors = Vec::new();
    for r in rows() {
        let mut req = request(&r);
        req.pins = Pins {
            tp: Some(r.tp),
            pp: Some(r.pp),
            dp: Some(r.gpus / r.tp / r.pp),
            recompute: Some(RecomputeChoice::Full),
            zero: Some(0),
            // Sequence parallelism came in 2022 (Korthikanti et al.).
            sequence_parallel: Some(false),
            ..Pins::default()
        };
        req.top = 1;
        let out = search(&req, &mut |_| {}).unwrap();
        let best = &out.plans[0];
        let err = best.tflops_per_gpu / r.tflops_per_gpu - 1.0;
        eprintln!(
            "{}B: predicted {:.1} TFLOP/s per GPU ({}), paper {} ({:+.1}%)",
            r.params_billion,
            best.tflops_per_gpu,
            best.label(),
            r.tflops_per_gpu,
            err * 100.0
        );
        eprintln!("    {:?}", best.time);
        errors.push((r.params_billion, err));
    }
    for (b, err) in errors {
        assert!(err.abs() <= 0.10, "{b}B: {err:+.3}");
    }
}

#[test]
fn unpinned_best_is_at_least_as_fast_and_fits() {
    for r in rows() {
        let mut pinned = request(&r);
        pinned.pins = Pins {
            tp: Some(r.tp),
            pp: Some(r.pp),
            dp: Some(r.gpus / r.tp / r.pp),
            recompute: Some(RecomputeChoice::Full),
            zero: Some(0),
            // Sequence parallelism came in 2022 (Korthikanti et al.).
            sequence_parallel: Some(false),
            ..Pins::default()
        };
        pinned.top = 1;
        let paper = search(&pinned, &mut |_| {}).unwrap().plans[0].clone();
        let mut free = request(&r);
        free.top = 1;
        let out = search(&free, &mut |_| {}).unwrap();
        let best = &out.plans[0];
        eprintln!(
            "{}B: best {} {:.3} s/step, {:.1} GiB; paper's config {:.3} s/step",
            r.params_billion,
            best.label(),
            best.step_time_s,
            best.peak_bytes_per_gpu as f64 / (1u64 << 30) as f64,
            paper.step_time_s
        );
        assert!(best.step_time_s <= paper.step_time_s);
        // 80 GB: the A100 80GB's 81920 MiB as the driver reports it.
        assert!(best.peak_bytes_per_gpu <= 81_920 << 20);
    }
}

/// Korthikanti et al. 2022, Table 5 (`tests/data/korthikanti_2022_table5.csv`, source in its
/// header): iteration times with full recomputation and with sequence parallelism plus
/// selective recomputation, under `--stack megatron`, within 15 %.
#[test]
fn korthikanti_table5_iteration_times_within_fifteen_percent() {
    let text = include_str!("../data/korthikanti_2022_table5.csv");
    let mut checked = 0;
    for l in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        let (heads, hidden, layers, tp, pp, gpus, batch, mb, chunks) =
            (n(1), n(2), n(3), n(4), n(5), n(6), n(7), n(8), n(9));
        let cfg = format!(
            r#"{{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":{hidden},"n_layer":{layers},"n_head":{heads}}}"#
        );
        let model = hf::parse_config(&cfg, f[0]).unwrap();
        for (sel, paper) in [(false, f[10]), (true, f[11])] {
            let cluster = Cluster::for_gpu("a100-80g", gpus).unwrap();
            let mut req = Request::new(model.clone(), cluster, batch, 2048);
            req.stack = Stack::Megatron;
            req.attention = Attention::Eager;
            req.calibration = Calibration {
                overlap_grad_reduce: false,
                ..Calibration::default()
            };
            req.pins = Pins {
                tp: Some(tp),
                pp: Some(pp),
                dp: Some(1),
                micro_batch: Some(mb),
                zero: Some(0),
                recompute: Some(if sel {
                    RecomputeChoice::Selective
                } else {
                    RecomputeChoice::Full
                }),
                sequence_parallel: Some(sel),
                schedule: Some(if chunks > 1 {
                    vram_model::setup::Schedule::Interleaved(chunks)
                } else {
                    vram_model::setup::Schedule::OneFOneB
                }),
                ..Pins::default()
            };
            req.top = 1;
            let out = search(&req, &mut |_| {}).unwrap();
            // Timing is what is checked; the paper ran these, so a plan the memory model puts
            // over 80 GB is priced all the same.
            let p = out.plans.first().or(out.closest.as_ref()).unwrap();
            let paper: f64 = paper.parse().unwrap();
            let err = p.step_time_s / paper - 1.0;
            eprintln!(
                "{} {}: predicted {:.2} s ({}), paper {paper} s ({:+.1} %)",
                f[0],
                if sel {
                    "SP + selective"
                } else {
                    "full recompute"
                },
                p.step_time_s,
                p.label(),
                err * 100.0
            );
            assert!(err.abs() <= 0.15, "{} {sel}: {err:+.3}", f[0]);
            checked += 1;
        }
    }
    assert_eq!(checked, 8);
}
