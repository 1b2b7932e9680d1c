use vram_monitor::view::{human_bytes, rows, SortKey};
use vram_monitor::History;

#[test]
fn rows_sort_filter_and_share() {
    let s = &crate::demo_samples(30)[29];
    let r = rows(s, "", SortKey::Memory, false);
    assert!(r.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    let rev = rows(s, "", SortKey::Memory, true);
    assert_eq!(rev.first().map(|x| x.pid), r.last().map(|x| x.pid));
    let bob = rows(s, "VLLM", SortKey::Pid, false);
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0].user, "bob");
    // 31 GiB ± 2 MiB of an 80 GiB GPU.
    assert!(
        (bob[0].share - 31.0 / 80.0).abs() < 1e-3,
        "{}",
        bob[0].share
    );
    assert_eq!(rows(s, "6001", SortKey::Memory, false).len(), 1);
    assert!(rows(s, "nobody", SortKey::Memory, false).is_empty());
    assert_eq!(SortKey::parse("user"), Some(SortKey::User));
    assert_eq!(SortKey::Command.next(), SortKey::Memory);
}

#[test]
fn human_bytes_uses_binary_units() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(80 << 30), "80.0 GiB");
}

#[test]
fn history_is_bounded_and_chart_json_aligns_series() {
    let mut h = History::new(10);
    crate::demo_samples(25).into_iter().for_each(|s| h.push(s));
    assert_eq!(h.len(), 10);
    let j = h.to_chart_json();
    assert_eq!(j["t"].as_array().unwrap().len(), 10);
    let g1 = &j["gpus"][1];
    assert_eq!(g1["used"].as_array().unwrap().len(), 10);
    for p in g1["processes"].as_array().unwrap() {
        assert_eq!(p["bytes"].as_array().unwrap().len(), 10, "aligned with t");
    }
    assert!(
        j["gpus"][0]["memory_total_bytes"].is_u64(),
        "numbers stay numbers"
    );
}
