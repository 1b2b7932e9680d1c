//! The doctor on real messages it was not written from (`tests/data/messages/public.txt`,
//! labelled from each thread's resolution by `CAUSES.md`'s table, split by a hash of the
//! source URL). The fit half is pinned at its figure; the holdout half is bounded below.
//! `cargo test -p vram-doctor --test it public -- --nocapture` prints the per-message table
//! that BENCHMARKS.md carries.

use vram_doctor::message::SelfProcess;
use vram_doctor::{diagnose, read, CauseKind, Inputs, Reading};

/// One labelled message.
struct Case {
    source: String,
    half: String,
    /// The batch it was collected in (a block without `batch:` is batch 1's); `BATCHES` says when
    /// each was collected and how each half was run.
    batch: u8,
    label: String,
    message: String,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/messages/public.txt"
    ))
    .unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| b.starts_with("source: ")) {
        // A block is one message: a missing blank line between two would silently make the
        // second message part of the first (a merge once did this to batch 22's first block).
        assert_eq!(
            block.lines().filter(|l| l.starts_with("source: ")).count(),
            1,
            "two blocks run together (no blank line between them):\n{block}"
        );
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} missing in {block}"))
                .trim()
                .to_string()
        };
        let message = block
            .split_once("\nmessage:\n")
            .unwrap_or_else(|| panic!("no message in {block}"))
            .1
            .to_string();
        out.push(Case {
            source: field("source: "),
            half: field("half: "),
            batch: block
                .lines()
                .find_map(|l| l.strip_prefix("batch: "))
                .map_or(1, |b| b.trim().parse().unwrap()),
            label: field("label: "),
            message,
        });
    }
    out
}

/// FNV-1a 64 over the URL's bytes: CAUSES.md's split rule.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(14_695_981_039_346_656_037u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(1_099_511_628_211)
    })
}

/// The doctor's top cause for a message, as CAUSES.md names it, and whether the message
/// lists processes (CAUSES.md: without a list, memory held by other processes can only
/// show as memory outside PyTorch).
fn top(message: &str) -> (String, bool) {
    match read(message) {
        Err(_) => ("refuse".into(), false),
        Ok(Reading::Serving(e)) => {
            // As the CLI does: the engine's profiling lines in the paste, when there are any.
            let profile = vram_doctor::profile::read(message);
            let d = vram_doctor::serving::explain_profiled(&e, profile.as_ref(), None);
            let name = serde_json::to_value(d.cause).unwrap();
            (
                format!("serving-{}", name.as_str().unwrap())
                    .replace("serving-other-processes", "other-processes"),
                false,
            )
        }
        Ok(Reading::Oom(m)) => {
            let listed = m.self_process != SelfProcess::NoList;
            let d = diagnose(&Inputs::new(m)).unwrap();
            let name = serde_json::to_value(d.causes[0].kind).unwrap();
            (name.as_str().unwrap().to_string(), listed)
        }
    }
}

/// Whether the doctor's top cause is one the label accepts.
fn right(label: &str, got: &str, listed: bool) -> bool {
    label
        .split('|')
        .any(|l| l == got || (l == "other-processes" && got == "outside-pytorch" && !listed))
}

/// One batch of `public.txt` (the `batch:` field of its blocks) and the figure of each group it is
/// counted in: what the rules may be fitted on, and what was reported once as it came out.
enum Batch {
    /// Its fit half and its holdout counted apart, as `Fit{n}` and `Holdout{n}`.
    Split { n: u8, fit: Figure, holdout: Figure },
    /// Both halves counted as one group, `Batch{n}` (batch 2's).
    Whole { n: u8, both: Figure },
}

/// One group's figure.
#[derive(Clone, Copy)]
enum Figure {
    /// Not run yet: the group's rows are neither printed nor counted. (Every batch below has
    /// been run; the next one starts here.)
    #[allow(dead_code, reason = "a new batch's halves are committed unrun")]
    Unrun,
    /// Run. `right` is how many of its top causes are right today: pinned, so a change that moves
    /// it says so. `reported` is what a holdout was reported at when it was unseen (none for a fit
    /// half): it may never fall below it (where a later rule, made on fit halves, took a message
    /// from it, its row says which and the floor is what that rule left).
    Run {
        right: usize,
        reported: Option<usize>,
    },
}

use Batch::{Split, Whole};
use Figure::{Run, Unrun};

/// A group that has been run, pinned at `right`.
const fn pinned(right: usize) -> Figure {
    Run {
        right,
        reported: None,
    }
}

impl Figure {
    /// A holdout's group, reported at `at` when it was unseen.
    const fn reported(self, at: usize) -> Figure {
        match self {
            Run { right, .. } => Run {
                right,
                reported: Some(at),
            },
            Unrun => self,
        }
    }
}

impl Batch {
    fn n(&self) -> u8 {
        match *self {
            Split { n, .. } | Whole { n, .. } => n,
        }
    }

    /// The group a message of `half` (`fit` or `holdout`) is counted in, and its figure.
    fn group(&self, half: &str) -> (String, Figure) {
        match *self {
            Split { n, fit, .. } if half == "fit" => (format!("Fit{n}"), fit),
            Split { n, holdout, .. } => (format!("Holdout{n}"), holdout),
            Whole { n, both } => (format!("Batch{n}"), both),
        }
    }

    /// The groups this batch is counted in, in the order their lines are printed.
    fn groups(&self) -> Vec<(String, Figure)> {
        match self {
            Split { .. } => vec![self.group("fit"), self.group("holdout")],
            Whole { .. } => vec![self.group("holdout")],
        }
    }
}

/// Every batch, in the order it was collected. A new batch is added as `Split { n, fit: Unrun,
/// holdout: Unrun }` with its labelled messages and committed unrun; its holdout is then run
/// once, first, and pinned at what it came out at (`pinned(r).reported(r)`), then its fit half
/// (`pinned(r)`). Each
/// row's comment says when its messages were collected, on which rules each half was run and what
/// it came out at, and what has moved it since (BENCHMARKS.md has each batch's section).
const BATCHES: &[Batch] = &[
    // Batch 1: the first rules were fitted on its fit half. Its holdout was reported at 16 / 25
    // (BENCHMARKS.md) and has been seen since.
    Split {
        n: 1,
        fit: pinned(19),
        holdout: pinned(20).reported(16),
    },
    // Batch 2: collected after that fitting; both halves were reported at 3 / 6 and have been
    // seen since.
    Whole {
        n: 2,
        both: pinned(5).reported(3),
    },
    // Batch 3: collected after every message of batches 1 and 2 had been seen. The second round's
    // rules were fitted on its fit half and on everything above. Until those rules were final
    // (commit 7feda5d) the holdout's rows were neither printed nor counted; it was then run once,
    // with the rules of 7feda5d, and came out at 28 / 33 (BENCHMARKS.md). The parser's spacing
    // rule, made after that run, reads one more of its messages (detectron2#2457).
    Split {
        n: 3,
        fit: pinned(16),
        holdout: pinned(32).reported(28),
    },
    // Batch 4: collected after every message of 1-3 had been seen (issue 35's third round); the
    // third round's rules may be fitted on its fit half and on everything above. Both halves
    // stayed unrun until the labelled messages were committed (0b9b3d0); the fit half came out at
    // 17 / 21 and is 18 / 21 with the reconstructed-free rule; the holdout was then run once, on
    // the rules of 5c2df9e, and came out at 13 / 15 (BENCHMARKS.md keeps it).
    // vLLM's bare `No available memory for the cache blocks` names no cause: read at the releases
    // it appears in, the weights, the profile's activation peak, memory outside PyTorch and (0.6.4,
    // V1 0.7.2-0.9.0) other processes share one budget and the message prints none of them, so
    // the doctor answers `serving-undetermined` and asks for the log lines that decide. The
    // holdout is 12 after that rule (QwenLM/Qwen3#12).
    Split {
        n: 4,
        fit: pinned(18),
        holdout: pinned(12).reported(12),
    },
    // Batch 5: collected after every message of 1-4 had been seen (issue 35's fourth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (36b6ce4); the holdout was then run first, once, on the
    // rules of main 4888ca0 (the third round's), and came out at 13 / 18 (BENCHMARKS.md), seen
    // since; the fit half was run after that, 23 / 24 at its first run. The fourth round's two
    // rules (listed neighbours lead the step only when they hold more than this process could; a
    // request below free names the step before the unexplained verdict) made them 24 / 24 and
    // 16 / 18 (the holdout stays reported at 13); the thirteenth round's order (`unexplained`
    // before the step for a request below the printed free memory) takes the holdout back to
    // 13 / 18, its reported floor.
    Split {
        n: 5,
        fit: pinned(24),
        holdout: pinned(13).reported(13),
    },
    // Batch 6: collected after every message of 1-5 had been seen (issue 35's fifth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (459d233); the holdout was then run first, once, on the
    // rules of main 89571d2, and came out at 10 / 12 (BENCHMARKS.md); the fit half was run after
    // that.
    Split {
        n: 6,
        fit: pinned(7),
        holdout: pinned(11).reported(10),
    },
    // Batch 7: collected after every message of 1-6 had been seen (issue 35's sixth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (e18b85f); the holdout was then run first, once, on the
    // rules of main 705a644, and came out at 14 / 15 (BENCHMARKS.md keeps it); the fit half was run
    // after that, 15 / 17 at its first run.
    // The holdout's floor is 12 after the thirteenth round's rule: it put `unexplained` before the
    // step for a request below the printed free memory, decided on fit halves 1-13, and that took
    // xTuring#140 and whisper-asr-webservice#166 from it. And 11 after the bare-message rule
    // (vllm#7028). 13 since session 11 read free within the largest measured driver shortfall
    // (33 MiB) of the request as a full device (xTuring#140, whisper-asr-webservice#166).
    Split {
        n: 7,
        fit: pinned(15),
        holdout: pinned(13).reported(11),
    },
    // Batch 8: collected after every message of 1-7 had been seen (issue 35's seventh round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (9c2f13b); the holdout was then run first, once, on the
    // rules of main 7fa280a, and came out at 12 / 19 (BENCHMARKS.md); the fit half was run after
    // that, 10 / 11 at its first run, 11 / 11 with the idle-device rule made on its one miss.
    Split {
        n: 8,
        fit: pinned(10),
        holdout: pinned(12).reported(12),
    },
    // Batch 9: collected after every message of 1-8 had been seen (issue 35's eighth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (ee18e3c); the holdout was then run first, once, on the
    // rules of main 654c129, and came out at 19 / 21 (BENCHMARKS.md); the fit half was run after
    // that, 10 / 11 at its first run.
    Split {
        n: 9,
        fit: pinned(10),
        holdout: pinned(19).reported(19),
    },
    // Batch 10: collected after every message of 1-9 had been seen (issue 35's ninth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (4d9b29f); the holdout was then run first, once, on the
    // rules of main 654c129, and came out at 16 / 18 (BENCHMARKS.md); the fit half was run after
    // that, 6 / 12 at its first run, and no rule was fitted on its misses (BENCHMARKS.md says why).
    Split {
        n: 10,
        fit: pinned(7),
        holdout: pinned(17).reported(16),
    },
    // Batch 11: collected after every message of 1-10 had been seen (issue 35's tenth round); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (e904346); the holdout was then run first, once, on the
    // rules of wt-doctor 885a5c0 (main 50de1d5 with the tenth round's naming of unlisted memory),
    // and came out at 8 / 10 (BENCHMARKS.md); the fit half was run after that, 5 / 10 at its first
    // run, and no rule was fitted on its misses (BENCHMARKS.md says why). SGLang 0.5.23's `Loaded
    // weights leave no GPU memory for the KV cache` layout, read since, makes it 6 / 10.
    Split {
        n: 11,
        fit: pinned(7),
        holdout: pinned(9).reported(8),
    },
    // Batch 12: collected after every message of 1-11 had been seen (issue 35's eleventh round,
    // collected for Windows causes); the rules may be fitted on its fit half and on everything
    // above. Both halves stayed unrun until the labelled messages were committed (44d988d); the
    // holdout was then run first, once, on the rules of wt-doctor 3ae57b6 (main at 3ae57b6's
    // merge), and came out at 13 / 16 (BENCHMARKS.md); the fit half was run after that, 3 / 4 at
    // its first run, and no rule was fitted on its one miss (BENCHMARKS.md says why).
    Split {
        n: 12,
        fit: pinned(4),
        holdout: pinned(14).reported(13),
    },
    // Batch 13: collected after every message of 1-12 had been seen (issue 35's twelfth round,
    // collected for requests below the printed free memory); the rules may be fitted on its fit
    // half and on everything above. Both halves stayed unrun until the labelled messages were
    // committed (46b863d); the holdout was then run first, once, on the rules of 46b863d (main
    // 769b917's), and came out at 1 / 3 (BENCHMARKS.md); the fit half was run after that, 0 / 3 at
    // its first run (all three read as the step first, `unexplained` second). The thirteenth round
    // then reversed that order on the fit halves' evidence (5 / 8 against 2 / 8, the one confirmed
    // fit fix with it): the fit half is 3 / 3, the holdout stays 1 / 3, and the whole set stays
    // 318 / 369 (BENCHMARKS.md lists every group before and after).
    Split {
        n: 13,
        fit: pinned(3),
        holdout: pinned(1).reported(1),
    },
    // Batch 14: collected after every message of 1-13 had been seen (issue 35's thirteenth
    // collection round); the rules may be fitted on its fit half and on everything above. Both
    // halves stayed unrun until the labelled messages were committed (ea3c88e); the holdout was
    // then run first, once, on the rules of ea3c88e (main b83f3c1's), and came out at 13 / 16
    // (BENCHMARKS.md); the fit half was run after that, 12 / 14 at its first run: its two misses
    // are leaks, which one message cannot show, so no rule was fitted on them (BENCHMARKS.md says
    // why).
    Split {
        n: 14,
        fit: pinned(12),
        holdout: pinned(13).reported(13),
    },
    // Batch 15: collected after every message of 1-14 had been seen (issue 35's fourteenth
    // collection round: serving start-up errors and inference-time OOMs); the rules may be fitted
    // on its fit half and on everything above. Both halves stayed unrun until the labelled
    // messages were committed (856904a); the holdout was then run first, once, on the rules of
    // 856904a (main b9a1ec6's), and came out at 5 / 8 (BENCHMARKS.md keeps it); the fit half was
    // run after that, 9 / 12 at its first run, 10 / 12 with torch_npu's layout read
    // (vllm-ascend#5020); its other two misses are a second vLLM instance that the bare `No
    // available memory for the cache blocks` cannot show and a message cut before PyTorch's own
    // figures (BENCHMARKS.md says why no rule follows).
    // The fit half is 9 after the bare-message rule (gensyn-ai/rl-swarm#118); the holdout 3
    // (vllm#10439, pat-jj/s3#10).
    Split {
        n: 15,
        fit: pinned(9),
        holdout: pinned(3).reported(3),
    },
    // Batch 16: collected after every message of 1-15 had been seen (issue 35's fifteenth
    // collection round: project-specific searches, Apple's MPS layout, an XPU CI failure); the
    // rules may be fitted on its fit half and on everything above (the MPS layout was read on it).
    // Both halves stayed unrun until the labelled messages were committed (5f742c7); the holdout
    // was then run first, once, on the rules of 5f742c7 (main a7bd7aa's), and came out at 10 / 17
    // (BENCHMARKS.md); the fit half was run after that, 7 / 13 at its first run: all six misses are
    // Apple MPS messages the parser refused. Reading the MPS layout (`MPSAllocator.mm`), a rule
    // made on the fit half, makes them 12 / 13 (five of its six MPS messages) and 13 / 17
    // (BENCHMARKS.md, "after the rule").
    Split {
        n: 16,
        fit: pinned(12),
        holdout: pinned(13).reported(10),
    },
    // Batch 17: collected after every message of 1-16 had been seen (issue 35's sixteenth
    // collection round: serving start-up errors with the log lines before them, vLLM's Mamba-block
    // check); the rules may be fitted on its fit half and on everything above (the Mamba-blocks
    // layout was read on it). Both halves stayed unrun until the labelled messages were committed
    // (ede8b9d); the holdout was then run first, once, on the rules of c0b668f (main ed004ad's,
    // with report's `vram_doctor::profile`: its profiling lines merged), and came out at 3 / 9
    // (BENCHMARKS.md): four `max_num_seqs ... exceeds available Mamba cache blocks` messages
    // refused, two bare `No available memory for the cache blocks` answered
    // `serving-undetermined`; the rules before them (ede8b9d's) give the same 3, run second. The
    // fit half was run after that, 2 / 4 at its first run: its misses are a Mamba message refused
    // and wtdcode/vllm-backport#15 (a KV cache 0.35 GiB against 1.8 GiB) read as the context; both
    // are the serving parser's (`serving.rs`), so no rule was made then (BENCHMARKS.md says what
    // one would be). Reading the Mamba-blocks layout (`mamba.rs`, vLLM 0.23.0/0.28.0's check),
    // decided on vllm-project/recipes#551, this fit half's, makes them 3 / 4 and 7 / 9 (the
    // holdout's four Mamba messages; "after the rule"; the holdout stays reported at 3 / 9).
    Split {
        n: 17,
        fit: pinned(3),
        holdout: pinned(7).reported(3),
    },
    // Batch 18: collected after every message of 1-17 had been seen (issue 35's seventeenth
    // collection round); the rules may be fitted on its fit half and on everything above. Both
    // halves stayed unrun until the labelled messages were committed (18e0ff1); the holdout was
    // then run first, once, on the rules of 18e0ff1 (main c72f1e1's), and came out at 5 / 9
    // (BENCHMARKS.md); the fit half was run after that, 7 / 7 at its first run.
    Split {
        n: 18,
        fit: pinned(7),
        holdout: pinned(5).reported(5),
    },
    // Batch 19: collected after every message of 1-18 had been seen (issue 35's eighteenth
    // collection round: project-specific and non-English searches); the rules may be fitted on its
    // fit half and on everything above. Both halves stayed unrun until the labelled messages were
    // committed (dd6d2b5); the holdout was then run first, once, on the rules of dd6d2b5 (main
    // 9547c56's), and came out at 14 / 16 (BENCHMARKS.md); the fit half was run after that, 13 / 15
    // at its first run: its misses are dorado#272 (fragmentation by a maintainer's reading, slack
    // smaller than the live tensors) and RVC#1106 (other processes by an answerer's reading,
    // 1.65 GiB of a 4 GiB card outside PyTorch on Windows). The holdout is 15 since session 11
    // read free within the largest measured driver shortfall of the request as a full device
    // (CodeFormer#78).
    Split {
        n: 19,
        fit: pinned(13),
        holdout: pinned(15).reported(14),
    },
    // Batch 20: collected after every message of 1-19 had been seen (issue 35's nineteenth
    // collection round); the rules may be fitted on its fit half and on everything above. Both
    // halves stayed unrun until the labelled messages were committed (8bcc8ba); the holdout was
    // then run first, once, on the rules of 8bcc8ba, and came out at 8 / 10 (BENCHMARKS.md); the
    // fit half was run after that, 13 / 14 at its first run: its miss is mmsegmentation#1021, an
    // 850 MiB request with 863.44 MiB printed free (13.44 MiB over it) named `unexplained`; the
    // poster's smaller crop fixed it (BENCHMARKS.md, "Request below free"). 14 since session 11
    // read free within the largest measured driver shortfall of the request as a full device.
    Split {
        n: 20,
        fit: pinned(14),
        holdout: pinned(8).reported(8),
    },
    // Batch 21: collected after every message of 1-20 had been seen (issue 35's twentieth
    // collection round: Q&A threads and Korean, Japanese and Chinese issue searches); the rules may
    // be fitted on its fit half and on everything above. Both halves stayed unrun until the
    // labelled messages were committed (bb13706); the holdout was then run first, once, on the
    // rules of bb13706 (main 266a635's), and came out at 15 / 18 (BENCHMARKS.md): its misses are a
    // Stack Overflow reading (the CUDA runtime and the desktop), a forum thread's session tensors
    // freed, and KoBART-summarization#5's `workers` fix, all named the step. The fit half was run
    // after that, 9 / 9 at its first run: no miss, so no rule was fitted on it.
    Split {
        n: 21,
        fit: pinned(9),
        holdout: pinned(15).reported(15),
    },
    // Batch 22: collected after every message of 1-20 had been seen, beside batch 21 with every
    // URL claimed once between the two (issue 35's twenty-first collection round: serving start-up
    // errors and out-of-memory errors raised inside frameworks); the rules may be fitted on its fit
    // half and on everything above. Both halves stayed unrun until the labelled messages were
    // committed (fed6130b); the holdout was then run first, once, on the rules of fed6130b (main
    // 266a6353's), and came out at 8 / 8 (BENCHMARKS.md); the fit half was run after that, 7 / 7 at
    // its first run.
    Split {
        n: 22,
        fit: pinned(7),
        holdout: pinned(8).reported(8),
    },
    // Batch 23: collected after every message of 1-22 had been seen (issue 35's twenty-second
    // collection round: domains the earlier batches barely cover, vision, GANs and restoration,
    // speech and audio, graphs and science, PyTorch 1.x's `cached` layout); the rules may be fitted
    // on its fit half and on everything above. Both halves stayed unrun until the labelled
    // messages were committed (dcda38b9); the holdout was then run first, once, on the rules of
    // dcda38b9 (main 284bd675's), and came out at 18 / 19 (BENCHMARKS.md): its miss is
    // stylegan2-ada-pytorch#153, a 9.00 GiB request below the 9.89 GiB printed free, named
    // `unexplained`. The fit half was run after that, 11 / 13 at its first run: its misses are
    // mozilla/TTS#502 (a 2 MiB request with 4.25 MiB free) and InvokeAI#2182 (20 MiB with 6.59 GiB
    // free), both named `unexplained`; no rule was fitted on them (BENCHMARKS.md says why).
    // Session 11's driver-shortfall rule (free within 33 MiB of the request reads as a full
    // device), merged after the batch ran, gains TTS#502: 12.
    Split {
        n: 23,
        fit: pinned(12),
        holdout: pinned(18).reported(18),
    },
    // Batch 24: collected after every message of 1-23 had been seen (issue 35's twenty-third
    // collection round: what users paste today, PyTorch 2.1+'s layout from 2024-2026 threads on
    // CUDA, ROCm and XPU, in diffusion and video UIs, vision-language models, TTS, 3D and science
    // tools); the rules may be fitted on its fit half and on everything above. Both halves stayed
    // unrun until the labelled messages were committed (2c201065); the holdout was then run first,
    // once, on the rules of 2c201065 (main 5641776b's), and came out at 10 / 12 (BENCHMARKS.md):
    // its misses are stable-virtual-camera#59, a message retyped from a screenshot (`Gi8`,
    // `0f the allocated`) that is refused, and stable-diffusion-webui-forge#1984, a leak across
    // generations that one message reads as the step. The fit half was run after that, 15 / 17
    // at its first run: its misses are 3DIS#8 (another process holds 19.04 GiB of the card,
    // named `other-processes`; the maintainer's reading is the step) and Wan2GP#671 (854 MiB
    // with 10.23 GiB printed free, named `unexplained`); no rule was fitted on them.
    Split {
        n: 24,
        fit: pinned(15),
        holdout: pinned(10).reported(10),
    },
    // Batch 25: collected after every message of 1-24 had been seen (issue 35's twenty-fourth
    // collection round: distributed training, DDP ranks sharing GPU 0, FSDP, DeepSpeed ZeRO, vLLM
    // tensor parallelism, and non-CUDA devices, Ascend NPU, Intel XPU, ROCm HIP); the rules may be
    // fitted on its fit half and on everything above. Both halves stayed unrun until the labelled
    // messages were committed (b5fe9925); the holdout was then run first, once, on the rules of
    // b5fe9925 (main 37d51215's, the first run on session 11's driver-shortfall rule and
    // `Diagnosis.undecided`), and came out at 5 / 7 (BENCHMARKS.md): its misses are
    // vllm-ascend#19 (an NPU message with 50.30 GiB neither free nor PyTorch's and no process
    // list, named `outside-pytorch` with the step second and the two marked undecided; the
    // thread's reading is a smaller model or more devices) and ipex-llm#12080 (IPEX's XPU layout,
    // which prints no free figure, refused). The fit half was run after that, 4 / 5 at its first
    // run: its miss is QwenLM/Qwen3#187 (six other processes hold about 49 GiB of GPU 0, named
    // `other-processes`; the thread's reading is tensor parallelism); no rule was fitted on it.
    Split {
        n: 25,
        fit: pinned(4),
        holdout: pinned(5).reported(5),
    },
    // Batch 26: collected after every message of 1-25 had been seen (issue 35's twenty-fifth
    // collection round: projects and angles the earlier batches lack, a repository's own fix note,
    // PyTorch 0.x's `cuda runtime error (2)`, 2025-2026 diffusion and 3D threads, older threads of
    // projects no batch holds); the rules may be fitted on its fit half and on everything above.
    // Both halves stayed unrun until the labelled messages were committed (4bdb042c); the holdout
    // was then run first, once, on the rules of 4bdb042c (main 4f16c346's), and came out at 6 / 10
    // (BENCHMARKS.md): its misses are zzangdol1029/RADAR's fix note and TSGS#6, two messages quoted
    // only up to the free or `this process has` figure that the parser refuses (labelled from their
    // threads' step, where CAUSES.md's truncated-message rule would have made them `refuse`; the
    // labels stay as committed), ViewCrafter#78 (a 39.55 GiB request on a 19.99 GiB card whose
    // printed figures exceed the card, read as Windows' shared memory and named the step, with the
    // one-tensor reading second and undecided; the poster's fix was xFormers) and CatVTON#64 (an
    // 18 GiB request on an 8 GiB card, named one tensor larger than the device; the maintainer's
    // reading is lower precision or a larger GPU). The fit half was run after that, 8 / 8 at its
    // first run; no rule was fitted.
    Split {
        n: 26,
        fit: pinned(8),
        holdout: pinned(6).reported(6),
    },
    // Batch 27: collected after every message of 1-25 had been seen, beside batch 26 with every URL
    // claimed once between the two (issue 35's twenty-sixth collection round: serving engines'
    // start-up errors only, vLLM V0/V1 and SGLang, with two refusals); the rules may be fitted on its
    // fit half and on everything above. Both halves stayed unrun until the labelled messages were
    // committed (181b39d2); the holdout was then run first, once, on the rules of 181b39d2 (main
    // 4f16c346's), and came out at 6 / 9 (BENCHMARKS.md): its misses are praxis-proxy/ai#710 (the
    // CPU backend's `Available memory on node 0 ... less than desired CPU memory utilization`,
    // refused), TokenFlow-Router's note (72B on two A100s, 0.53 GiB of KV cache, named the context
    // where the fix was TP 4) and vllm#1488 (AWQ on a V100, refused). The fit half was run after
    // that, 7 / 8 at its first run: its miss is sglang#36260 (a peer container's load on a CPU CI
    // node, named the weights); no rule was fitted on it. Today 8 / 9 on the holdout: the
    // engines' start-up error texts were then read from their source at every release modelled
    // (vLLM 0.10-0.23, SGLang 0.4.6-0.5.10; `vram_doctor::serving`), and the reader taught the
    // ones it lacked, among them the two layouts this holdout refused (the CPU backend's check,
    // `other-processes` by its figures, and the quantization capability check, not memory); the
    // TokenFlow-Router note stays named the context. Reported 6 stays.
    Split {
        n: 27,
        fit: pinned(7),
        holdout: pinned(8).reported(6),
    },
    // Batch 28: collected after every message of 1-27 had been seen (issue 35's twenty-seventh
    // collection round: Chinese-language threads and other sources the earlier batches lack); the
    // rules may be fitted on its fit half and on everything above. Both halves stayed unrun until
    // the labelled messages were committed (fa09d112, b42f061b, 0dc67776); main was then merged
    // (48eb0c73: main 39cb2b07's rules, after the session-13 fit-half review) and the holdout was
    // run first, once, and came out at 12 / 13 (BENCHMARKS.md): its miss is ice-tong/pytorch-captcha#1
    // (graphs kept by an evaluation without no_grad, the leak row; one message names the step). The
    // fit half was run after that, 18 / 18 at its first run.
    Split {
        n: 28,
        fit: pinned(18),
        holdout: pinned(12).reported(12),
    },
    // Batch 29: collected after every message of 1-28 had been seen (issue 35's twenty-eighth
    // collection round: Chinese-language threads of Chinese LLM, speech and vision repositories and
    // repositories no earlier batch names); the rules may be fitted on its fit half and on
    // everything above. Both halves stayed unrun until the labelled messages were committed
    // (5101adf3, a9c138fe, 7d866285); main was then merged (3303f942: main 96031c09's rules) and
    // the holdout was run first, once, and came out at 13 / 13 (BENCHMARKS.md). The fit half was
    // run after that, 13 / 14 at its first run: its miss is VITS-fast-fine-tuning#464 (a 1.4-2.0
    // message with about 11 GiB neither free nor PyTorch's on a 15.70 GiB card, named memory
    // outside PyTorch; the thread's only reading is a smaller batch). No rule was fitted.
    Split {
        n: 29,
        fit: pinned(13),
        holdout: pinned(13).reported(13),
    },
    // Batch 30: collected after every message of 1-29 had been seen (issue 35's twenty-ninth
    // collection round: threads chosen by their fix, for the causes the doctor misses most: a
    // tensor larger than the card, a per-process cap, other processes; never by the doctor's
    // answer); the rules may be fitted on its fit half and on everything above. Both halves stayed
    // unrun until the labelled messages were committed (b4157fef, c28aa8a9, 4936f418); main was
    // then merged (ca1bb110: main 043407a5's rules) and the holdout was run first, once, and came
    // out at 4 / 4 (BENCHMARKS.md). The fit half was run after that, 2 / 2 at its first run. No
    // rule was fitted.
    Split {
        n: 30,
        fit: pinned(2),
        holdout: pinned(4).reported(4),
    },
    // Batch 31: collected after every message of 1-30 had been seen (issue 35's thirtieth
    // collection round: serving start-up errors from 2025-2026 threads of vLLM, SGLang and the
    // projects that embed them, and non-English pages and forums); the rules may be fitted on its
    // fit half and on everything above. Both halves stayed unrun until the labelled messages were
    // committed (eb66c36b); main was then merged (169c3e5e: main 3966206a's rules) and the holdout
    // was run first, once, and came out at 1 / 1 (BENCHMARKS.md). The fit half was run after that,
    // 3 / 3 at its first run. No rule was fitted.
    Split {
        n: 31,
        fit: pinned(3),
        holdout: pinned(1).reported(1),
    },
];

#[test]
fn public_messages_fit_half_and_holdout() {
    let cases = cases();
    let mut score = std::collections::HashMap::<String, (usize, usize)>::new();
    println!("\n| batch | half | source | label (from the thread) | doctor's top cause | right |");
    println!("|---|---|---|---|---|---|");
    for c in &cases {
        let half = if fnv1a(&c.source) % 2 == 0 {
            "fit"
        } else {
            "holdout"
        };
        assert_eq!(half, c.half, "{}: the half is the hash's", c.source);
        let batch = BATCHES
            .iter()
            .find(|b| b.n() == c.batch)
            .unwrap_or_else(|| panic!("{}: no batch {}", c.source, c.batch));
        let (group, Run { .. }) = batch.group(half) else {
            continue;
        };
        let (got, listed) = top(&c.message);
        let ok = right(&c.label, &got, listed);
        let s = score.entry(group).or_default();
        s.0 += usize::from(ok);
        s.1 += 1;
        println!(
            "| {} | {half} | {} | {} | {got} | {} |",
            c.batch,
            c.source.trim_start_matches("https://github.com/"),
            // A label naming two causes joins them with `|`, which would end the markdown cell.
            c.label.replace('|', "\\|"),
            if ok { "yes" } else { "**no**" }
        );
    }
    for (group, figure) in BATCHES.iter().flat_map(Batch::groups) {
        let (Some(&(r, n)), Run { right, reported }) = (score.get(&group), figure) else {
            continue;
        };
        println!("{group}: {r}/{n} right");
        assert_eq!(r, right, "{group}: {r}/{n} right, pinned at {right}");
        if let Some(floor) = reported {
            assert!(r >= floor, "{group}: {r}/{n}, reported at {floor}");
        }
    }
}

/// `load-negative-dimension` names the channel-wise AWQ load failure; no message of any batch is
/// that failure (none is labelled `serving-quant-layout`), so none may be read as it. Checked on
/// every public message and every message of `real-messages.txt`.
#[test]
fn no_public_message_reads_as_the_awq_negative_dimension_failure() {
    let real = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/real-messages.txt"
    ))
    .unwrap();
    let public = cases();
    assert!(public.len() >= 533, "{} public messages", public.len());
    let misread: Vec<&str> = public
        .iter()
        .map(|c| c.message.as_str())
        .chain(real.split("\n\n"))
        .filter(
            |m| matches!(read(m), Ok(Reading::Serving(e)) if e.kind() == "load-negative-dimension"),
        )
        .collect();
    assert!(misread.is_empty(), "{misread:?}");
}

/// One other order the doctor could give the PyTorch messages' causes: which diagnoses it applies
/// to, and the cause it would name first there.
struct Alternative {
    name: &'static str,
    applies: fn(&vram_doctor::Diagnosis) -> bool,
    first: CauseKind,
}

/// The slack left had the cache served the request perfectly, against the 5 % of what the
/// process could hold that the `tight` rule asks (diagnose.rs's `TIGHT_SHARE`): `None` when the
/// slack and free memory together do not serve the request.
fn slack_left_share(d: &vram_doctor::Diagnosis) -> Option<f64> {
    let f = &d.figures;
    let available = f.free_bytes.saturating_add(f.unallocated_bytes);
    (f.unallocated_bytes > 0 && available >= f.requested_bytes)
        .then(|| (available - f.requested_bytes) as f64 / d.usable_bytes.max(1) as f64)
}

fn first_is(d: &vram_doctor::Diagnosis, k: CauseKind) -> bool {
    d.causes.first().is_some_and(|c| c.kind == k)
}

fn second_is(d: &vram_doctor::Diagnosis, k: CauseKind) -> bool {
    d.causes.get(1).is_some_and(|c| c.kind == k)
}

fn names(d: &vram_doctor::Diagnosis, k: CauseKind) -> bool {
    d.causes.iter().any(|c| c.kind == k)
}

/// Every order the fit halves' misses would ask for (BENCHMARKS.md, "The fit halves' misses by
/// mechanism (session 13)"): each is the rule that names the thread's cause first for at least one
/// fit-half miss.
const ALTERNATIVES: &[Alternative] = &[
    Alternative {
        // kaito#976, MuseTalk#362.
        name: "slack serves the request but leaves under 5 %: fragmentation before the step",
        applies: |d| {
            first_is(d, CauseKind::StepTooLarge) && slack_left_share(d).is_some_and(|s| s < 0.05)
        },
        first: CauseKind::Fragmentation,
    },
    Alternative {
        // dorado#272.
        name: "slack below the live tensors (churn): fragmentation before the step",
        applies: |d| {
            first_is(d, CauseKind::StepTooLarge) && slack_left_share(d).is_some_and(|s| s >= 0.05)
        },
        first: CauseKind::Fragmentation,
    },
    Alternative {
        // 3DIS#8, Qwen3#187.
        name: "listed neighbours holding more than this process could: the step before them",
        applies: |d| first_is(d, CauseKind::OtherProcesses) && names(d, CauseKind::StepTooLarge),
        first: CauseKind::StepTooLarge,
    },
    Alternative {
        // Ultra-Light-Fast-Generic-Face-Detector#241.
        name: "memory outside PyTorch larger than this process could hold: the step before it",
        applies: |d| first_is(d, CauseKind::OutsidePytorch) && names(d, CauseKind::StepTooLarge),
        first: CauseKind::StepTooLarge,
    },
    Alternative {
        // RVC#1106.
        name: "memory outside PyTorch named second: before the step",
        applies: |d| {
            first_is(d, CauseKind::StepTooLarge) && second_is(d, CauseKind::OutsidePytorch)
        },
        first: CauseKind::OutsidePytorch,
    },
    Alternative {
        // pytorch#67971, easydiffusion#851.
        name: "0.5 GiB to a context's size neither free nor PyTorch's: outside PyTorch before the step",
        applies: |d| {
            first_is(d, CauseKind::StepTooLarge)
                && (1 << 29..=vram_doctor::CONTEXT_MAX_BYTES)
                    .contains(&d.figures.unaccounted_bytes)
        },
        first: CauseKind::OutsidePytorch,
    },
    Alternative {
        // legacy-rocm-build#2014, ChatGLM-Finetuning#28, Wan2GP#671.
        name: "a request below the printed free memory: the step before `unexplained`",
        applies: |d| first_is(d, CauseKind::Unexplained) && names(d, CauseKind::StepTooLarge),
        first: CauseKind::StepTooLarge,
    },
    Alternative {
        // Fooocus#980.
        name: "MPS's watermark named second: before the step",
        applies: |d| first_is(d, CauseKind::StepTooLarge) && second_is(d, CauseKind::ProcessCap),
        first: CauseKind::ProcessCap,
    },
];

/// No other order of the causes gains more fit-half messages than it loses: the reason no rule
/// was changed on the fit halves' misses in session 13. Counted on every run group of batches
/// 1-27 apart from batch 2 (neither half), holdouts printed beside the fit halves but never
/// deciding; a batch added later counts once it has been run. Printed by `cargo test -p
/// vram-doctor --test it alternative_orders -- --nocapture`.
#[test]
fn alternative_orders_lose_on_the_fit_halves() {
    let cases = cases();
    println!("\n| alternative order | fit: gained | fit: lost | holdout: gained | holdout: lost |");
    println!("|---|---|---|---|---|");
    let mut judged = 0;
    for alt in ALTERNATIVES {
        // [fit, holdout] × [gained, lost]
        let mut n = [[0usize; 2]; 2];
        for c in &cases {
            let batch = BATCHES.iter().find(|b| b.n() == c.batch).unwrap();
            let (group, figure) = batch.group(&c.half);
            if matches!(figure, Unrun) || group.starts_with("Batch") {
                continue;
            }
            let Ok(Reading::Oom(m)) = read(&c.message) else {
                continue;
            };
            let listed = m.self_process != SelfProcess::NoList;
            let d = diagnose(&Inputs::new(m)).unwrap();
            if !(alt.applies)(&d) {
                continue;
            }
            let name = |k: CauseKind| {
                serde_json::to_value(k)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            };
            let before = right(&c.label, &name(d.causes[0].kind), listed);
            let after = right(&c.label, &name(alt.first), listed);
            let h = usize::from(c.half != "fit");
            if after && !before {
                n[h][0] += 1;
            } else if before && !after {
                n[h][1] += 1;
            }
        }
        println!(
            "| {} | {} | {} | {} | {} |",
            alt.name, n[0][0], n[0][1], n[1][0], n[1][1]
        );
        assert!(
            n[0][0] > 0,
            "{}: names no fit-half message's thread cause first",
            alt.name
        );
        assert!(
            n[0][0] <= n[0][1],
            "{}: gains {} fit-half messages and loses {}: a rule the fit halves ask for",
            alt.name,
            n[0][0],
            n[0][1]
        );
        judged += 1;
    }
    assert_eq!(judged, ALTERNATIVES.len());
}
