//! What the user reads is true (issue 25): usage errors name what is missing, suggestions
//! name only changes, refusals where a figure would be nonsense, `vram batch` on realistic
//! lengths.

use std::process::Command;

fn vram(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args(args)
        .output()
        .expect("run vram");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Item 5: clap's own messages name the missing arguments and the accepted values; the
/// one-line rewrap used to keep only clap's first line, which names none of them.
#[test]
fn usage_errors_name_what_is_missing() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["plan", "llama-3-8b", "--gpus", "8"],
            &["--seq <SEQ>", "--gpu <GPU>", "--global-batch"],
        ),
        (&["trace", "llama-3-8b"], &["--out <OUT>"]),
        (&["estimate"], &["<MODEL>"]),
        (
            &["estimate", "gpt2", "--precision", "fp8"],
            &["'fp8'", "possible values: fp32, fp16-amp, bf16-amp, bf16"],
        ),
    ];
    for (args, wanted) in cases {
        let (code, out, err) = vram(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        for w in *wanted {
            assert!(err.contains(w), "{args:?}: {err} lacks {w}");
        }
    }
}

fn would_fit_lines(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("would fit with "))
        .map(|l| {
            let (flags, rest) = l.split_once(": ").unwrap();
            (flags.to_string(), rest.to_string())
        })
        .collect()
}

/// Item 7: with `--recompute full` given, no suggestion repeats it, and no two suggestions
/// are the same setup (they printed "--zero 3 --dp 8" and "--zero 3 --dp 8 --recompute full"
/// with the same figure).
#[test]
fn suggestions_name_only_changes() {
    let (code, out, err) = vram(&[
        "estimate",
        "llama-3-8b",
        "--gpu",
        "h100-80g",
        "--recompute",
        "full",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines = would_fit_lines(&out);
    assert!(!lines.is_empty(), "{out}");
    for (flags, _) in &lines {
        assert!(!flags.contains("--recompute full"), "{out}");
    }
    let mut flags: Vec<&String> = lines.iter().map(|(f, _)| f).collect();
    flags.dedup();
    assert_eq!(flags.len(), lines.len(), "{out}");
    // With data parallelism already at 8, the ZeRO suggestion does not claim to set it.
    let (_, out, _) = vram(&["estimate", "llama-3-8b", "--gpu", "h100-80g", "--dp", "8"]);
    assert!(out.contains("would fit with --zero 3: "), "{out}");
    for (flags, _) in would_fit_lines(&out) {
        assert!(!flags.contains("--dp 8"), "{out}");
    }
}
