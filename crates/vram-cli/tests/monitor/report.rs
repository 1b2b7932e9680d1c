use std::path::Path;

use crate::{scratch, text, vram};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-monitor/tests/data")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn report_of_a_recording_is_one_offline_html_file() {
    let d = scratch("report-rec");
    let f = d.join("t.jsonl");
    let html = d.join("t.html");
    // 120 demo samples one second apart (the leak check wants 90 s of
    // readings; `vram record --demo` at 10 ms would span 0.4 s).
    let mut src = vram_monitor::SimulatedSource::demo();
    let lines: Vec<String> = (0..120)
        .map(|k| {
            use vram_monitor::Source;
            src.sample(1_700_000_000_000 + k * 1000)
                .unwrap()
                .to_json_line()
                + "\n"
        })
        .collect();
    std::fs::write(&f, lines.concat()).unwrap();
    let o = vram(&[
        "report",
        f.to_str().unwrap(),
        "--out",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).1.contains("(recording)"));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains(">LEAK<"));
    assert!(!page.contains("<script"));
    // The only URL is the SVG namespace name, which is never fetched.
    assert_eq!(
        page.matches("http").count(),
        page.matches("http://www.w3.org/2000/svg").count()
    );
}

#[test]
fn reports_of_estimate_plan_and_replay_json() {
    let d = scratch("report-json");
    for (name, kind, needle) in [
        ("estimate.json", "estimate", "Breakdown at peak"),
        ("plan.json", "plan", "parallelism plans"),
        ("replay.json", "replay", "Peak reserved"),
    ] {
        let out = d.join(format!("{name}.html"));
        let o = vram(&["report", &fixture(name), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{name}: {}", text(&o).1);
        assert!(text(&o).1.contains(&format!("({kind})")));
        assert!(
            std::fs::read_to_string(&out).unwrap().contains(needle),
            "{name}"
        );
    }
}

#[test]
fn unrecognised_or_missing_input_is_a_one_line_error_exit_2() {
    let d = scratch("report-bad");
    let bad = d.join("bad.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    for input in [bad.to_str().unwrap(), "/nonexistent/x.json"] {
        let o = vram(&["report", input, "--out", d.join("o.html").to_str().unwrap()]);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert!(!d.join("o.html").exists());
}

#[test]
fn demo_report_needs_no_input() {
    let d = scratch("report-demo");
    let out = d.join("demo.html");
    let o = vram(&["report", "--demo", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(
        page.contains(">120<") && page.contains(">LEAK<"),
        "120 samples, the notebook flagged"
    );
    assert_eq!(
        vram(&["report"]).status.code(),
        Some(2),
        "INPUT or --demo is required"
    );
}
