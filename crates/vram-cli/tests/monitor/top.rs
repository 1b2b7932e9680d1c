use crate::{assert_real_source_ok_or_exit_2, text, vram};

#[test]
fn once_prints_a_table_of_gpus_and_processes() {
    let o = vram(&["top", "--demo", "--once"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("GPU NAME"), "{out}");
    assert!(out.contains("Simulated H100 80GB HBM3") && out.contains("Simulated A100-SXM4-40GB"));
    for pid in ["4242", "5150", "6001"] {
        assert!(out.contains(pid), "{out}");
    }
    let filtered = text(&vram(&["top", "--demo", "--once", "--filter", "carol"])).0;
    assert!(
        filtered.contains("6001") && !filtered.contains("4242"),
        "{filtered}"
    );
}

#[test]
fn json_is_one_object_per_sample_with_numbers_as_numbers() {
    let o = vram(&[
        "top",
        "--demo",
        "--json",
        "--count",
        "3",
        "--interval",
        "10ms",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let t: Vec<u64> = lines.iter().map(|v| v["t_ms"].as_u64().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]));
    let g = &lines[0]["gpus"][0];
    assert_eq!(g["memory_total_bytes"].as_u64(), Some(80 << 30));
    assert!(g["memory_used_bytes"].is_u64() && g["utilization_pct"].is_u64());
    assert!(g["processes"][0]["gpu_memory_bytes"].is_u64());
    let one = text(&vram(&["top", "--demo", "--json", "--once"])).0;
    assert_eq!(one.lines().count(), 1);
}

#[test]
fn bad_input_exits_2() {
    let o = vram(&["top", "--demo", "--interval", "1ms", "--once"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("10ms"));
    // Not a terminal (the test captures stdout): a clear message, exit 2.
    let o = vram(&["top", "--demo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--once or --json"), "{}", text(&o).1);
    // A count of nothing printed nothing and exited 0; a chart of no samples served empty.
    let out = crate::scratch("count0").join("t.jsonl");
    for args in [
        &["top", "--demo", "--json", "--count", "0"][..],
        &[
            "record",
            "--demo",
            "--count",
            "0",
            "--out",
            out.to_str().unwrap(),
        ][..],
        &["serve", "--demo", "--history", "0", "--max-seconds", "1"][..],
    ] {
        let o = vram(args);
        let (stdout, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("must be at least 1"), "{args:?}: {err}");
    }
    assert!(!out.exists());
}

#[test]
fn without_a_driver_top_says_so_and_exits_2() {
    assert_real_source_ok_or_exit_2(&vram(&["top", "--once"]));
}
