//! The pages of `vram batch`, `vram checkpoint` and `vram replay`: the text's lines and tables
//! from the same report, sizes in the text's format, with charts.

use super::svg::{bar_chart, esc};
use super::{bytes3, p, text_table, unique};
use crate::{BatchReport, CheckpointReport, ReplayReport};

/// The page of memory-aware batches.
pub(super) fn batch(r: &BatchReport) -> String {
    let mut o = format!("<h2>Batches for {}</h2>", esc(&r.model));
    o.push_str(&p("summary", "", &r.summary()));
    if let Some(l) = r.too_long_line() {
        o.push_str(&p("too-long", "bad", &l));
    }
    o.push_str(&text_table("batches", &BatchReport::HEAD, &r.rows()));
    if let Some(l) = r.more_line() {
        o.push_str(&p("more", "muted", &l));
    }
    let items: Vec<(String, f64)> = r
        .batches
        .batches
        .iter()
        .enumerate()
        .take(crate::batch::SHOWN)
        .map(|(i, b)| (format!("batch {i}"), b.total_bytes as f64))
        .collect();
    if !items.is_empty() {
        o.push_str("<h2>Memory per batch</h2>");
        o.push_str(&bar_chart(&items, &bytes3, Some(r.capacity_bytes as f64)));
    }
    o.push_str(&super::notes(&r.notes));
    o
}

/// The page of a checkpoint placement.
pub(super) fn checkpoint(r: &CheckpointReport) -> String {
    let mut o = format!("<h2>Activation checkpoints for {}</h2>", esc(&r.model));
    for (i, l) in r.head_lines().iter().enumerate() {
        o.push_str(&p(&format!("setup-{i}"), "", l));
    }
    o.push_str(&text_table(
        "strategies",
        &CheckpointReport::HEAD,
        &r.rows(),
    ));
    if let Some(l) = r.slots_line() {
        o.push_str(&p("slots", "muted", &l));
    }
    let verdict = r.verdict_lines();
    let class = if r.recommended.is_some() {
        "good"
    } else {
        "bad"
    };
    if let Some((first, rest)) = verdict.split_first() {
        o.push_str(&p("verdict", class, first));
        o.push_str(&super::ul("verdict-detail", rest));
    }
    let labels = unique(r.candidates.iter().map(|c| c.name.clone()).collect());
    let items: Vec<(String, f64)> = labels
        .into_iter()
        .zip(&r.candidates)
        .map(|(l, c)| (l, c.peak_bytes as f64))
        .collect();
    o.push_str("<h2>Activations held at the peak, against the budget</h2>");
    o.push_str(&bar_chart(&items, &bytes3, Some(r.budget_bytes as f64)));
    o.push_str(&super::notes(&r.notes));
    o
}

/// The page of an allocator replay.
pub(super) fn replay(r: &ReplayReport) -> String {
    let mut o = format!("<h2>Allocator replay: {} policies</h2>", r.policies.len());
    o.push_str(&p("setup", "", &r.summary()));
    o.push_str(&p("recorded", "", &r.recorded_line()));
    let head = r.head();
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    let rows: Vec<Vec<String>> = r.rows().into_iter().map(|x| x.to_vec()).collect();
    o.push_str(&text_table("policies", &head, &rows));
    let names = unique(r.policies.iter().map(|x| x.name.clone()).collect());
    for (title, f) in [
        (
            "Peak reserved",
            (|x: &vram_alloc::replay::PolicyResult| x.peak_reserved_bytes) as fn(&_) -> u64,
        ),
        ("Peak allocated", |x| x.peak_allocated_bytes),
        (
            "Reserved but not allocated at peak (fragmentation and cache)",
            |x| x.peak_reserved_bytes.saturating_sub(x.peak_allocated_bytes),
        ),
    ] {
        let items: Vec<(String, f64)> = names
            .iter()
            .zip(&r.policies)
            .map(|(n, x)| (n.clone(), f(x) as f64))
            .collect();
        if !items.is_empty() {
            o.push_str(&format!("<h2>{title}</h2>"));
            o.push_str(&bar_chart(&items, &bytes3, None));
        }
    }
    o
}
