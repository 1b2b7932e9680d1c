use vram_monitor::prom::{escape_label, render};

#[test]
fn metrics_parse_with_a_prometheus_parser() {
    let s = &crate::demo_samples(1)[0];
    let text = render(Some(s), 7);
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition format");
    let value = |name: &str, label: (&str, &str)| {
        scrape
            .samples
            .iter()
            .find(|x| x.metric == name && x.labels.get(label.0) == Some(label.1))
            .map(|x| match x.value {
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(
        value("vram_gpu_memory_total_bytes", ("gpu", "0")),
        Some(80.0 * 1024f64.powi(3))
    );
    assert_eq!(
        value("vram_process_gpu_memory_bytes", ("pid", "5150")).map(|v| v > 30e9),
        Some(true)
    );
    assert!(
        value("vram_gpu_utilization_ratio", ("gpu", "1")).is_some_and(|v| (0.0..=1.0).contains(&v))
    );
    let total = scrape
        .samples
        .iter()
        .find(|x| x.metric == "vram_samples_total")
        .unwrap();
    assert!(matches!(total.value, prometheus_parse::Value::Counter(v) if v == 7.0));
    // Every family is announced once with HELP and TYPE.
    for fam in [
        "vram_gpu_memory_used_bytes",
        "vram_process_gpu_memory_bytes",
    ] {
        assert_eq!(text.matches(&format!("# TYPE {fam} gauge")).count(), 1);
        assert!(scrape.docs.contains_key(fam));
    }
}

#[test]
fn labels_are_escaped_and_no_sample_still_renders() {
    assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    let text = render(None, 0);
    assert!(text.contains("vram_samples_total 0"));
    assert!(!text.contains("vram_gpu_memory_used_bytes{"));
}
