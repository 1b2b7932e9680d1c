//! What the doctor's answer says about the causes one message cannot tell apart, checked on the
//! public messages it misses (`public.txt`, every batch: all 575 have been reported, so all may be
//! studied). A miss is "named" when one `undecided` entry holds both the doctor's top cause and
//! a cause the thread's label accepts: the answer then says which check would have found the
//! thread's cause. BENCHMARKS.md, "The doctor's misses by mechanism (session 11)", has the table
//! `cargo test -p vram-doctor --test it undecided -- --nocapture` prints.

use vram_doctor::message::SelfProcess;
use vram_doctor::{diagnose, read, CauseKind, Inputs, Reading};

fn kind(k: CauseKind) -> String {
    serde_json::to_value(k)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn undecided_names_the_threads_cause_on_the_misses_it_can() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/messages/public.txt"
    ))
    .unwrap();
    let (mut oom, mut misses, mut named) = (0, 0, 0);
    let mut by_pair = std::collections::BTreeMap::<(String, String), (usize, usize)>::new();
    // How often each entry is named over all the PyTorch messages, right or wrong.
    let mut entries = std::collections::BTreeMap::<String, usize>::new();
    for block in text.split("\n\n").filter(|b| b.starts_with("source: ")) {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        // Batches 1-22, the 575 studied in session 11 (a later batch is counted in its own
        // section when it has been run).
        let batch: u8 = block
            .lines()
            .find_map(|l| l.strip_prefix("batch: "))
            .map_or(1, |b| b.trim().parse().unwrap());
        if batch > 22 {
            continue;
        }
        let message = block.split_once("\nmessage:\n").unwrap().1;
        let Ok(Reading::Oom(m)) = read(message) else {
            continue;
        };
        oom += 1;
        let unlisted = m.self_process == SelfProcess::NoList;
        let d = diagnose(&Inputs::new(m)).unwrap();
        for u in &d.undecided {
            let pair: Vec<String> = u.causes.iter().map(|&k| kind(k)).collect();
            *entries.entry(pair.join(" or ")).or_default() += 1;
        }
        let got = kind(d.causes[0].kind);
        let label = field("label: ");
        let accepts = |k: &str| {
            label
                .split('|')
                .any(|l| l == k || (l == "other-processes" && k == "outside-pytorch" && unlisted))
        };
        if accepts(&got) {
            continue;
        }
        misses += 1;
        let hit = d.undecided.iter().any(|u| {
            let kinds: Vec<String> = u.causes.iter().map(|&k| kind(k)).collect();
            kinds.contains(&got) && kinds.iter().any(|k| accepts(k))
        });
        named += usize::from(hit);
        let e = by_pair.entry((label.clone(), got)).or_default();
        e.0 += 1;
        e.1 += usize::from(hit);
    }
    println!("\n| label (from the thread) | doctor's top cause | misses | named in `undecided` |");
    println!("|---|---|---|---|");
    for ((label, got), (n, hit)) in &by_pair {
        println!("| {} | {got} | {n} | {hit} |", label.replace('|', "\\|"));
    }
    println!("PyTorch messages {oom}, misses {misses}, named {named}");
    for (pair, n) in &entries {
        println!("`undecided` {pair}: {n} of the {oom} messages");
    }
    // Every PyTorch message of the 575 the parser reads (serving errors and refusals are other
    // classes: BENCHMARKS.md's table counts them apart).
    assert_eq!(oom, 444);
    assert_eq!((misses, named), (60, 42), "misses and misses named");
}
