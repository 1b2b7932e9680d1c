//! The doctor on real messages it was not written from (`tests/data/messages/public.txt`,
//! labelled from each thread's resolution by `CAUSES.md`'s table, split by a hash of the
//! source URL). The fit half is pinned at its figure; the holdout half is bounded below.
//! `cargo test -p vram-doctor --test it public -- --nocapture` prints the per-message table
//! that BENCHMARKS.md carries.

use vram_doctor::message::SelfProcess;
use vram_doctor::{diagnose, read, Inputs, Reading};

/// One labelled message.
struct Case {
    source: String,
    half: String,
    /// 1: the rules were fitted on its fit half; 2: collected after fitting, all unseen.
    batch: u8,
    label: String,
    message: String,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/messages/public.txt"
    ))
    .unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| b.starts_with("source: ")) {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} missing in {block}"))
                .trim()
                .to_string()
        };
        let message = block
            .split_once("\nmessage:\n")
            .unwrap_or_else(|| panic!("no message in {block}"))
            .1
            .to_string();
        out.push(Case {
            source: field("source: "),
            half: field("half: "),
            batch: block
                .lines()
                .find_map(|l| l.strip_prefix("batch: "))
                .map_or(1, |b| b.trim().parse().unwrap()),
            label: field("label: "),
            message,
        });
    }
    out
}

/// FNV-1a 64 over the URL's bytes: CAUSES.md's split rule.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(14_695_981_039_346_656_037u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(1_099_511_628_211)
    })
}

/// The doctor's top cause for a message, as CAUSES.md names it, and whether the message
/// lists processes (CAUSES.md: without a list, memory held by other processes can only
/// show as memory outside PyTorch).
fn top(message: &str) -> (String, bool) {
    match read(message) {
        Err(_) => ("refuse".into(), false),
        Ok(Reading::Serving(e)) => {
            let d = vram_doctor::serving::explain(&e, None);
            let name = serde_json::to_value(d.cause).unwrap();
            (
                format!("serving-{}", name.as_str().unwrap())
                    .replace("serving-other-processes", "other-processes"),
                false,
            )
        }
        Ok(Reading::Oom(m)) => {
            let listed = m.self_process != SelfProcess::NoList;
            let d = diagnose(&Inputs::new(m)).unwrap();
            let name = serde_json::to_value(d.causes[0].kind).unwrap();
            (name.as_str().unwrap().to_string(), listed)
        }
    }
}

/// Whether the doctor's top cause is one the label accepts.
fn right(label: &str, got: &str, listed: bool) -> bool {
    label
        .split('|')
        .any(|l| l == got || (l == "other-processes" && got == "outside-pytorch" && !listed))
}

#[test]
fn public_messages_fit_half_and_holdout() {
    let cases = cases();
    // Batch 1's fit half, batch 1's holdout, batch 2 (both halves unseen).
    let mut score = [(0usize, 0usize); 3];
    println!("\n| half | source | label (from the thread) | doctor's top cause | right |");
    println!("|---|---|---|---|---|");
    for c in &cases {
        let half = if fnv1a(&c.source) % 2 == 0 {
            "fit"
        } else {
            "holdout"
        };
        assert_eq!(half, c.half, "{}: the half is the hash's", c.source);
        let (got, listed) = top(&c.message);
        let ok = right(&c.label, &got, listed);
        let s = &mut score[if c.batch == 2 {
            2
        } else {
            usize::from(half == "holdout")
        }];
        s.0 += usize::from(ok);
        s.1 += 1;
        println!(
            "| {half}{} | {} | {} | {got} | {} |",
            if c.batch == 2 { " (batch 2)" } else { "" },
            c.source.trim_start_matches("https://github.com/"),
            c.label,
            if ok { "yes" } else { "**no**" }
        );
    }
    println!(
        "fit: {}/{} right; holdout: {}/{} right; batch 2 (unseen): {}/{} right",
        score[0].0, score[0].1, score[1].0, score[1].1, score[2].0, score[2].1
    );
    assert_eq!(score.iter().map(|s| s.1).sum::<usize>(), cases.len());
}
