use vram_alloc::{replay, synthetic, AllocatorConfig, Policy};
use vram_doctor::message::parse;
use vram_doctor::{diagnose, stats, CauseKind, Inputs, Job};
use vram_model::setup::{Mode, Offload, Optimizer, Recompute, Setup, Train};
use vram_model::{catalog, gpu};

use crate::{fixture, gib};

fn msg(text: &str) -> vram_doctor::message::OomMessage {
    parse(text).unwrap()
}

#[test]
fn cached_but_unallocated_memory_is_fragmentation() {
    // 2.00 GiB requested with 1.50 GiB free and 42.00 GiB reserved but
    // unallocated: 43.5 GiB could have served it, so fragmentation explains it.
    let d = diagnose(&Inputs::new(msg(&fixture("pytorch-2.5.txt")))).unwrap();
    assert_eq!(d.causes[0].kind, CauseKind::Fragmentation);
    assert!(d.causes[0].sufficient);
    assert_eq!(d.shortfall_bytes, 0);
    // What the request would have left: 1.50 + 42.00 − 2.00 GiB (text and JSON print this one
    // figure).
    assert_eq!(d.left_bytes, Some(gib(1.50) + (42 << 30) - (2 << 30)));
    let r = &d.remedies[0];
    assert!(
        r.action.contains("expandable_segments:True") && r.enough,
        "{r:?}"
    );
    assert_eq!(r.saves_bytes, Some(42 << 30));
    // 77.68 GiB used by this process, 77.00 GiB of it PyTorch's.
    assert_eq!(d.non_pytorch_bytes, Some(gib(77.68) - (77 << 30)));
    // Rule 3: it could hold what it reserved plus what was free.
    assert_eq!(d.usable_bytes, (77 << 30) + gib(1.50));
}

/// The step time vramkit's allocator is said to cost is the shipped policy's, measured on the
/// H200 (`gpu/results/`: 0.94x on GPT-2, 1.01-1.12x on the Llama-style loop); the H100's
/// 1.08-1.82x was the policy of ae4ab64, which unmapped free pages every step, and was printed
/// as today's cost.
#[test]
fn vramkits_step_time_cost_is_the_shipped_policys() {
    let d = diagnose(&Inputs::new(msg(&fixture("pytorch-2.5.txt")))).unwrap();
    let r = d
        .remedies
        .iter()
        .find(|r| r.action.starts_with("vramkit's allocator"))
        .unwrap_or_else(|| panic!("{:?}", d.remedies));
    assert!(
        r.detail.contains(
            "0.94x the default's median step on GPT-2 and 1.01-1.12x on a 1.1 B Llama-style model, measured on an H200"
        ),
        "{}",
        r.detail
    );
    assert!(
        !r.detail.contains("1.08-1.82x the default's step time"),
        "{}",
        r.detail
    );
}

#[test]
fn other_processes_holding_the_missing_memory_come_first() {
    // 4 GiB requested; 1 GiB free and 0.49 GiB cached: 2.51 GiB missing,
    // and pid 777 holds 50 GiB, more than the 28.5 GiB this process could hold.
    let d = diagnose(&Inputs::new(msg(
        "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. Process 777 has 50.00 GiB memory in use. Including non-PyTorch memory, this process has 28.00 GiB memory in use. Of the allocated memory 27.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch but unallocated.",
    )))
    .unwrap();
    assert_eq!(d.shortfall_bytes, (4 << 30) - (1 << 30) - (500 << 20));
    assert_eq!(d.left_bytes, Some(0));
    assert_eq!(d.causes[0].kind, CauseKind::OtherProcesses);
    assert_eq!(d.causes[0].bytes, 50 << 30);
    assert_eq!(d.remedies[0].kind, CauseKind::OtherProcesses);
    assert!(d.remedies[0].enough && d.remedies[0].action.contains("pid 777"));
    // Rule 3: reserved (27 GiB + 500 MiB) plus the 1 GiB free, not the
    // device less the processes listed.
    assert_eq!(d.usable_bytes, (27 << 30) + (500 << 20) + (1 << 30));
    // The same neighbour with 30 GiB against this process's 49.5 GiB: the step leads, the
    // neighbour (enough to serve the request) second.
    let d = diagnose(&Inputs::new(msg(
        "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. Process 777 has 30.00 GiB memory in use. Including non-PyTorch memory, this process has 48.00 GiB memory in use. Of the allocated memory 47.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch but unallocated.",
    )))
    .unwrap();
    assert_eq!(d.causes[0].kind, CauseKind::StepTooLarge, "{:#?}", d.causes);
    assert_eq!(d.causes[1].kind, CauseKind::OtherProcesses);
    assert!(d.causes[1].sufficient);
}

#[test]
fn a_container_process_is_not_another_process() {
    let d = diagnose(&Inputs::new(msg(&fixture("pytorch-2.6-container.txt")))).unwrap();
    assert!(
        d.causes.iter().all(|c| c.kind != CauseKind::OtherProcesses),
        "{:#?}",
        d.causes
    );
    assert!(
        d.notes.iter().any(|n| n.contains("Process 2752205")),
        "{:?}",
        d.notes
    );
    // Rule 3: 90.75 GiB reserved + 1.18 GiB free.
    assert_eq!(d.usable_bytes, gib(90.63) + crate::mib(120.54) + gib(1.18));
    // Rule 9: 1.18 GiB free + 0.12 GiB cached >= 1.25 GiB by 50 MiB, but the
    // 120 MiB of slack is 0.1% of a full GPU: the step fills the device.
    assert_eq!(d.causes[0].kind, CauseKind::StepTooLarge);
    assert!(d.causes.iter().all(|c| c.kind != CauseKind::Fragmentation));
    assert!(d.remedies.iter().all(|r| !r.enough), "{:#?}", d.remedies);
}

#[test]
fn a_cap_not_reached_is_not_a_cause() {
    // 40 GiB allowed, 38.68 GiB reserved + 512 MiB requested = 39.18 GiB:
    // alloc_block's cap check passed; the device (300 MiB free, 39.6 GiB in
    // another process) refused it.
    let d = diagnose(&Inputs::new(msg(&fixture("pytorch-2.9.txt")))).unwrap();
    assert!(
        d.causes.iter().all(|c| c.kind != CauseKind::ProcessCap),
        "{:#?}",
        d.causes
    );
    assert!(
        d.notes.iter().any(|n| n.contains("cap was not reached")),
        "{:?}",
        d.notes
    );
    assert_eq!(d.causes[0].kind, CauseKind::OtherProcesses);
    assert_eq!(d.remedies[0].kind, CauseKind::OtherProcesses);
    // Rule 3 with the cap: min(reserved + free, allowed).
    assert_eq!(d.usable_bytes, (38 << 30) + (700 << 20) + (300 << 20));
}

#[test]
fn one_tensor_larger_than_the_device() {
    // A real message (a diffusion demo, 2026): 130206.04 GiB on a 23.56 GiB GPU.
    let d = diagnose(&Inputs::new(msg(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 130206.04 GiB. GPU 0 has a total capacity of 23.56 GiB of which 16.57 GiB is free. Including non-PyTorch memory, this process has 6.97 GiB memory in use. Of the allocated memory 5.45 GiB is allocated by PyTorch, and 1.17 GiB is reserved by PyTorch but unallocated.",
    )))
    .unwrap();
    assert_eq!(d.causes[0].kind, CauseKind::TensorLargerThanDevice);
    assert!(
        d.remedies.iter().all(|r| !r.enough),
        "no setting makes it fit"
    );
}

#[test]
fn growth_between_two_memory_stats_dumps_is_a_leak() {
    let dump = |alloc: u64| {
        stats::parse(
            &format!(r#"{{"allocated_bytes.all.current": {alloc}, "reserved_bytes.all.current": {}, "num_alloc_retries": 3}}"#, alloc + (1 << 30)),
            "dump",
        )
        .unwrap()
    };
    let mut inp = Inputs::new(msg(&fixture("pytorch-2.5.txt")));
    inp.stats = vec![dump(10 << 30), dump(12 << 30)];
    let d = diagnose(&inp).unwrap();
    let leak = d.causes.iter().find(|c| c.kind == CauseKind::Leak).unwrap();
    assert_eq!(leak.bytes, 2 << 30);
    assert!(d.notes.iter().any(|n| n.contains("3 cudaMalloc retries")));
    // No growth: a note, no cause.
    inp.stats = vec![dump(10 << 30), dump(10 << 30)];
    let d = diagnose(&inp).unwrap();
    assert!(d.causes.iter().all(|c| c.kind != CauseKind::Leak));
    assert!(stats::parse("[1, 2]", "x").is_err());
    assert!(stats::parse(r#"{"reserved_bytes.all.current": 1}"#, "x")
        .unwrap_err()
        .to_string()
        .contains("allocated_bytes.all.current"));
}

#[test]
fn a_snapshot_is_replayed_through_every_policy() {
    let preset = &synthetic::presets()[0];
    let events = synthetic::training_events(preset, 2);
    let mut inp = Inputs::new(msg(&fixture("pytorch-2.5.txt")));
    inp.events = Some(events.clone());
    let d = diagnose(&inp).unwrap();
    assert_eq!(d.replay.len(), 3);
    // Independently: each policy replayed on its own.
    let peak = |p| {
        replay::replay(&events, &AllocatorConfig::new(p), None)
            .unwrap()
            .peak_reserved_bytes
    };
    let (base, exp) = (peak(Policy::PyTorch), peak(Policy::PyTorchExpandable));
    let row = d
        .replay
        .iter()
        .find(|r| r.policy == "pytorch-expandable")
        .unwrap();
    assert_eq!(row.peak_reserved_bytes, exp);
    assert_eq!(row.saves_bytes, base.saturating_sub(exp));
    let r = d
        .remedies
        .iter()
        .find(|r| r.action.contains("expandable"))
        .unwrap();
    assert_eq!(r.saves_bytes, Some(base.saturating_sub(exp)));
    assert!(r.detail.contains("snapshot replayed"));
}

/// Reads `--flag value` pairs of a remedy back into a setup.
fn apply_flags(mut s: Setup, action: &str) -> Setup {
    let w: Vec<&str> = action.split_whitespace().collect();
    let Mode::Train(t) = &mut s.mode else {
        unreachable!()
    };
    for pair in w.windows(2) {
        match pair[0] {
            "--micro-batch" => t.micro_batch = pair[1].parse().unwrap(),
            "--grad-accum" => t.grad_accum = pair[1].parse().unwrap(),
            "--recompute" => {
                t.recompute = if pair[1] == "full" {
                    Recompute::Full
                } else {
                    Recompute::Selective
                }
            }
            "--recompute-layers" => t.recompute_layers = Some(pair[1].parse().unwrap()),
            "--offload" => {
                t.offload = if pair[1] == "optimizer" {
                    Offload::Optimizer
                } else {
                    Offload::Params
                }
            }
            "--zero" => s.parallel.zero = pair[1].parse().unwrap(),
            "--optimizer" => {
                t.optimizer = match pair[1] {
                    "adam8bit" => Optimizer::Adam8bit,
                    "adamw" => Optimizer::Adamw,
                    "sgd" => Optimizer::Sgd,
                    "momentum" => Optimizer::Momentum,
                    "adafactor" => Optimizer::Adafactor,
                    other => panic!("a remedy names optimizer {other}"),
                }
            }
            // A flag this helper does not apply would make the check below meaningless.
            f if f.starts_with("--") => panic!("apply_flags does not know {f}"),
            _ => {}
        }
    }
    s
}

#[test]
fn a_step_too_large_gets_the_fastest_setup_that_fits_and_it_does_fit() {
    // GPT-2 large at micro-batch 32 x 1024 under bf16 AdamW on an H100:
    // the estimate is far above the 76.7 GiB left.
    let model = catalog::lookup("gpt2-large").unwrap();
    let setup = Setup {
        mode: Mode::Train(Train {
            micro_batch: 32,
            seq: 1024,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let text = "CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.20 GiB is free. Process 4211 has 2.00 GiB memory in use. Including non-PyTorch memory, this process has 75.98 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated.";
    let m = msg(text);
    let h100 = gpu::lookup("h100-80g").unwrap();
    let mut inp = Inputs::new(m.clone());
    inp.job = Some(Job {
        model: model.clone(),
        setup,
        gpu: h100,
    });
    let d = diagnose(&inp).unwrap();
    assert_eq!(d.causes[0].kind, CauseKind::StepTooLarge);
    let e = d.estimate.as_ref().unwrap();
    assert!(!e.fits && e.total_bytes > d.usable_bytes);
    let best = &d.remedies[0];
    assert_eq!(best.kind, CauseKind::StepTooLarge);
    assert!(best.enough && best.step_time_s.is_some(), "{best:?}");
    // Issue 25 item 11: what a plan "saves" is the estimate's total less the
    // plan's peak, both in the device's terms, and its detail line prints
    // that same peak (they used to differ by the catalog GPU's extra size).
    for r in d.remedies.iter().filter(|r| r.step_time_s.is_some()) {
        let after = e.total_bytes - r.saves_bytes.unwrap();
        assert!(
            r.detail
                .contains(&format!("{} per GPU", vram_doctor::human_bytes(after))),
            "{} - {:?}: {}",
            e.total_bytes,
            r.saves_bytes,
            r.detail
        );
    }
    // Other processes' 2 GiB do not rescue a step this far over.
    let other = d
        .remedies
        .iter()
        .find(|r| r.kind == CauseKind::OtherProcesses)
        .unwrap();
    assert!(!other.enough);
    // The remedy checked by the estimator itself, with the memory the
    // message shows: what this process holds outside PyTorch and what the
    // other process holds count as context, the global batch stays 32.
    let fixed = apply_flags(setup, &best.action);
    let Mode::Train(t) = fixed.mode else {
        unreachable!()
    };
    assert_eq!(t.micro_batch * t.grad_accum, 32);
    let mut check = fixed;
    check.overheads.cuda_context_bytes =
        d.non_pytorch_bytes.unwrap() + (2 << 30) + h100.memory_bytes.saturating_sub(m.total_bytes);
    let est = vram_model::estimate(&model, &check).unwrap();
    assert!(
        est.fits(h100.memory_bytes),
        "{} > {}",
        est.total_bytes,
        h100.memory_bytes
    );
}

#[test]
fn a_recording_with_a_leaking_process_is_a_leak_cause() {
    use vram_monitor::{SimulatedSource, Source};
    // The demo machine: pid 6001 leaks 24 MiB per one-second sample.
    let mut src = SimulatedSource::demo();
    let samples: Vec<_> = (0..120).map(|k| src.sample(k * 1000).unwrap()).collect();
    // The leaking notebook is on GPU 1: the message is from GPU 1.
    let on_gpu1 = fixture("pytorch-2.5.txt").replace("GPU 0", "GPU 1");
    let mut inp = Inputs::new(msg(&on_gpu1));
    inp.recording = Some(samples[..60].to_vec());
    let d = diagnose(&inp).unwrap();
    assert!(d.causes.iter().all(|c| c.kind != CauseKind::Leak));
    assert!(
        d.notes.iter().any(|n| n.contains("too short")),
        "{:?}",
        d.notes
    );
    inp.recording = Some(samples.clone());
    let d = diagnose(&inp).unwrap();
    let leak = d.causes.iter().find(|c| c.kind == CauseKind::Leak).unwrap();
    assert!(leak.detail.contains("pid 6001"), "{}", leak.detail);
    // Rule 11: the same recording with an error on GPU 0 is no leak cause.
    let mut inp = Inputs::new(msg(&fixture("pytorch-2.5.txt")));
    inp.recording = Some(samples);
    let d = diagnose(&inp).unwrap();
    assert!(
        d.causes.iter().all(|c| c.kind != CauseKind::Leak),
        "{:#?}",
        d.causes
    );
    assert!(
        d.notes.iter().any(|n| n.contains("GPU 1, not GPU 0")),
        "{:?}",
        d.notes
    );
}

/// The second audit: a `memory_stats()` dump PyTorch cannot write is refused, where it was
/// taken: more allocated than reserved (every allocated block lies in a reserved segment), or
/// a float count beyond 2^64 (1e300 saturated to u64::MAX).
#[test]
fn a_stats_dump_pytorch_cannot_write_is_refused() {
    let e = stats::parse(
        r#"{"allocated_bytes.all.current": 18446744073709551615, "reserved_bytes.all.current": 1}"#,
        "d.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("is more than reserved_bytes.all.current (1)"),
        "{e}"
    );
    let e = stats::parse(
        r#"{"allocated_bytes.all.current": 1e300, "reserved_bytes.all.current": 1e300}"#,
        "d.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`allocated_bytes.all.current` is not a byte count"),
        "{e}"
    );
    // Equal is what an allocator with no cached byte reports; floats that are whole counts read.
    let s = stats::parse(
        r#"{"allocated_bytes.all.current": 2.0e9, "reserved_bytes.all.current": 2000000000}"#,
        "d.json",
    )
    .unwrap();
    assert_eq!((s.allocated, s.reserved), (2_000_000_000, 2_000_000_000));
}
