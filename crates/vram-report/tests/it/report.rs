//! `vram report`'s pages: self-contained, recognised by kind, escaped, one-line errors.

use vram_report::html::{detect_kind, render, PageKind};
use vram_report::request::{FinetuneRequest, StepRequest};

fn check(input: &str, kind: PageKind, must_contain: &[&str]) -> String {
    let (k, html) = render(input, "input").unwrap();
    assert_eq!(k, kind);
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: no scripts, no external references of any kind.
    for bad in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!html.contains(bad), "report contains {bad}");
    }
    for m in must_contain {
        assert!(html.contains(m), "missing {m:?}");
    }
    html
}

#[test]
fn estimate_page_shows_breakdown_and_timeline() {
    let r = crate::estimate(
        "llama-2-7b",
        "h100-80g",
        StepRequest::default(),
        FinetuneRequest::default(),
        true,
    );
    let html = check(
        &r.to_json(),
        PageKind::Estimate,
        &[
            "Estimate for llama-2-7b",
            "does NOT fit on NVIDIA H100 80GB SXM",
            "Breakdown at peak",
            "optimizer states",
            "Live memory over the step",
            "6,738,415,616",
            "would fit with <code>",
        ],
    );
    assert!(html.matches("<svg").count() >= 2);
}

#[test]
fn replay_page_renders_the_typed_replay() {
    let text = crate::fixture("replay.json");
    let html = check(
        &text,
        PageKind::Replay,
        &[
            "3 policies",
            "expandable segments",
            "Peak reserved",
            "Reserved but not allocated",
            "10.5 GiB",
            "48,211",
        ],
    );
    // The page's rows are the text's.
    let vram_report::Report::Replay(r) = vram_report::Report::from_json(&text).unwrap() else {
        panic!("not a replay");
    };
    for row in r.rows() {
        for cell in row {
            assert!(html.contains(&format!("<td>{cell}</td>")), "{cell}");
        }
    }
}

#[test]
fn recording_page_plots_gpus_processes_and_leaks() {
    let text: String = crate::demo_samples(120)
        .iter()
        .map(|s| s.to_json_line() + "\n")
        .collect();
    let html = check(
        &text,
        PageKind::Recording,
        &[
            "GPU 0: Simulated H100",
            "GPU 1: Simulated A100",
            "id=\"leaks\"",
            "LEAK",
            "ipykernel",
        ],
    );
    assert_eq!(html.matches(">LEAK<").count(), 1, "only the notebook leaks");
    let one = crate::demo_samples(1)[0].to_json_line();
    check(&one, PageKind::Recording, &["Too few readings"]);
}

#[test]
fn unrecognised_inputs_are_one_line_errors() {
    for bad in [
        "",
        "a,b,c\n1,2,3\n",
        "[1,2]",
        "{\"hello\": 1}",
        "{\"t_ms\": 1}\n{\"t_ms\": 2}\n",
        "not json",
        // An estimate's JSON from before the typed report: no schema_version.
        r#"{"model":"m","peak_bytes":1,"breakdown":{"weights":1}}"#,
        // A report of a version this build does not read, or of no known kind.
        r#"{"schema_version":99,"kind":"estimate"}"#,
        r#"{"schema_version":1,"kind":"nonsense"}"#,
        r#"{"schema_version":1,"kind":"capacity","model":"m"}"#,
        // A replay's JSON from before the typed report, and a trace's events file.
        r#"{"events":3,"policies":[{"name":"pytorch","peak_allocated_bytes":1}]}"#,
        r#"{"schema_version":1,"kind":"trace_events","phases":[],"events":[]}"#,
    ] {
        let e = detect_kind(bad).unwrap_err();
        assert!(
            matches!(e, vram_report::Error::Unrecognised { .. }),
            "{bad:?}: {e}"
        );
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
}

#[test]
fn text_is_escaped() {
    let r = crate::estimate(
        "gpt2",
        "h100-80g",
        StepRequest::default(),
        FinetuneRequest::default(),
        false,
    );
    let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    v["model"] = "<script>x</script>".into();
    v["notes"] = serde_json::json!(["<b>bold</b>"]);
    let (_, html) = render(&v.to_string(), "x").unwrap();
    assert!(!html.contains("<script>x") && !html.contains("<b>bold"));
    assert!(html.contains("&lt;script&gt;") && html.contains("&lt;b&gt;bold"));
}
