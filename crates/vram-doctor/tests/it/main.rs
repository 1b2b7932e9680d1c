//! Tests of vram-doctor: one binary. Messages are in `tests/data/messages`
//! (README there names the PyTorch version of each layout).

mod diagnose;
mod foreign;
mod mamba;
mod message;
mod profile;
mod props;
mod public;
mod rules;
mod serving;
mod totals;

/// A fixture's text.
pub fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/messages")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `v` of `unit` as PyTorch's `format_size` prints it with two decimals, in
/// bytes: `gib(79.19)` is round(79.19 × 2³⁰).
pub fn gib(v: f64) -> u64 {
    (v * (1u64 << 30) as f64).round() as u64
}

/// As [`gib`], for MiB.
pub fn mib(v: f64) -> u64 {
    (v * (1u64 << 20) as f64).round() as u64
}
mod undecided;
