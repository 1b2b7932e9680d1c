use vram_monitor::report::{detect_kind, render, Kind};

fn check(input: &str, kind: Kind, must_contain: &[&str]) -> String {
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
fn estimate_report_shows_breakdown_and_timeline() {
    let html = check(
        &crate::fixture("estimate.json"),
        Kind::Estimate,
        &[
            "llama-7b",
            "Fits in GPU memory",
            "Breakdown at peak",
            "optimizer",
            "Live memory over the step",
            "6,738,415,616",
            "56.0 GiB",
        ],
    );
    assert!(html.matches("<svg").count() >= 2);
}

#[test]
fn minimal_estimate_degrades_gracefully() {
    let html = check(
        &crate::fixture("estimate_minimal.json"),
        Kind::Estimate,
        &["tiny", "Breakdown at peak"],
    );
    assert!(!html.contains("Live memory over the step"));
    assert!(!html.contains("id=\"verdict\""));
}

#[test]
fn plan_report_has_table_and_charts_with_optional_columns() {
    let html = check(
        &crate::fixture("plan.json"),
        Kind::Plan,
        &[
            "Parallelism plans for llama-70b",
            "<th>configuration</th>",
            // The label `vram plan` prints, rebuilt from the fields when the JSON has none.
            "tp8 pp2 dp4 mb1x16 zero1",
            "tp8 pp1 dp8 mb1x8 zero3",
            "47.0%",
            "Throughput (tokens/s)",
            "Peak memory per GPU",
        ],
    );
    assert!(html.matches("<tr>").count() >= 4, "header and three plans");
}

#[test]
fn replay_report_handles_missing_reserved() {
    check(
        &crate::fixture("replay.json"),
        Kind::Replay,
        &[
            "3 policies",
            "expandable segments",
            "Peak reserved",
            "Reserved but not allocated",
            "2.0 GiB",
            "48,211",
        ],
    );
}

#[test]
fn recording_report_plots_gpus_processes_and_leaks() {
    let text: String = crate::demo_samples(120)
        .iter()
        .map(|s| s.to_json_line() + "\n")
        .collect();
    let html = check(
        &text,
        Kind::Recording,
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
    check(&one, Kind::Recording, &["Too few readings"]);
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
    ] {
        let e = detect_kind(bad).unwrap_err();
        assert!(e.is_bad_input(), "{bad:?}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
}

#[test]
fn text_is_escaped() {
    let (_, html) = render(
        r#"{"model":"<script>x</script>","peak_bytes":1,"breakdown":{"<b>":1}}"#,
        "x",
    )
    .unwrap();
    assert!(!html.contains("<script>x"));
    assert!(html.contains("&lt;script&gt;"));
}

#[test]
fn breakdown_as_an_array_of_objects_is_accepted() {
    let input = r#"{"model":"m","peak_bytes":3145728,"breakdown":[{"category":"weights","bytes":2097152},{"category":"activations","bytes":1048576}]}"#;
    check(
        input,
        Kind::Estimate,
        &["Breakdown at peak", "weights", "2.0 MiB", "activations"],
    );
}
