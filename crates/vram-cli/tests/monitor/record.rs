use std::process::{Command, Stdio};
use std::time::Duration;

use vram_monitor::timeline;

use crate::{assert_real_source_ok_or_exit_2, scratch, text, vram};

#[test]
fn record_appends_lines_and_the_leak_check_flags_the_notebook() {
    let d = scratch("record");
    let f = d.join("t.jsonl");
    let fs = f.to_str().unwrap();
    let o = vram(&[
        "record",
        "--demo",
        "--interval",
        "10ms",
        "--count",
        "40",
        "--out",
        fs,
        "--leak-check",
        // 40 samples 10 ms apart span 0.39 s: the demo's patterns are in
        // samples, so the span asked for shrinks with the interval.
        "--leak-min-span",
        "0.3s",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let leaks: Vec<&str> = out.lines().filter(|l| l.ends_with("LEAK")).collect();
    assert_eq!(leaks.len(), 1, "{out}");
    assert!(leaks[0].contains("pid 6001"), "{out}");
    assert!(
        out.contains("pid 4242") && out.contains("pid 5150"),
        "every process gets a verdict: {out}"
    );
    let o = vram(&[
        "record",
        "--demo",
        "--interval",
        "10ms",
        "--count",
        "5",
        "--out",
        fs,
    ]);
    assert!(o.status.success());
    let tl = timeline::parse(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(tl.samples.len(), 45, "appended, not truncated");
}

fn run_and_stop(name: &str, signal: &str) -> timeline::Timeline {
    let d = scratch(name);
    let f = d.join("t.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram"))
        .args([
            "record",
            "--demo",
            "--interval",
            "10ms",
            "--out",
            f.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until some lines exist, then stop it mid-stream.
    for _ in 0..200 {
        if std::fs::metadata(&f)
            .map(|m| m.len() > 10_000)
            .unwrap_or(false)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    if signal == "-INT" {
        assert!(status.success(), "Ctrl-C is a clean stop: {status:?}");
    }
    let bytes = std::fs::read_to_string(&f).unwrap();
    assert!(
        bytes.ends_with('\n'),
        "no truncated last line after {signal}"
    );
    let tl = timeline::parse(&bytes).unwrap();
    assert!(!tl.torn_tail);
    assert!(tl.samples.len() > 5, "{}", tl.samples.len());
    tl
}

#[test]
fn ctrl_c_leaves_only_whole_lines() {
    run_and_stop("sigint", "-INT");
}

#[test]
fn a_killed_recorder_leaves_only_whole_lines() {
    run_and_stop("sigkill", "-KILL");
}

#[test]
fn record_without_a_driver_exits_2() {
    let d = scratch("record-nodriver");
    let f = d.join("t.jsonl");
    assert_real_source_ok_or_exit_2(&vram(&[
        "record",
        "--count",
        "1",
        "--out",
        f.to_str().unwrap(),
    ]));
}

#[test]
fn an_unwritable_output_is_bad_input() {
    let o = vram(&[
        "record",
        "--demo",
        "--count",
        "1",
        "--out",
        "/nonexistent-dir/t.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o).1;
    assert!(err.contains("/nonexistent-dir/t.jsonl"), "{err}");
}
