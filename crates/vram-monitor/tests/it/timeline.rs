use std::io::Write;

use vram_monitor::timeline::{parse, TimelineWriter};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vram-monitor-it-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn samples_round_trip_and_appends_never_truncate() {
    let p = tmp("round.jsonl");
    let samples = crate::demo_samples(6);
    let mut w = TimelineWriter::open(&p).unwrap();
    samples[..3].iter().for_each(|s| w.append(s).unwrap());
    drop(w);
    let mut w = TimelineWriter::open(&p).unwrap();
    samples[3..].iter().for_each(|s| w.append(s).unwrap());
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 6);
    assert!(text.ends_with('\n'));
    let tl = parse(&text).unwrap();
    assert_eq!(tl.samples, samples);
    assert!(!tl.torn_tail);
}

#[test]
fn a_torn_tail_is_ignored_by_the_reader_and_cut_by_the_writer() {
    let p = tmp("torn.jsonl");
    let samples = crate::demo_samples(3);
    let mut w = TimelineWriter::open(&p).unwrap();
    samples[..2].iter().for_each(|s| w.append(s).unwrap());
    drop(w);
    // Simulate a crash in the middle of a write.
    let line = samples[2].to_json_line();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(&line.as_bytes()[..40])
        .unwrap();
    let tl = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(tl.samples.len(), 2);
    assert!(tl.torn_tail);
    let mut w = TimelineWriter::open(&p).unwrap();
    w.append(&samples[2]).unwrap();
    let tl = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(tl.samples, samples);
}

#[test]
fn a_bad_line_in_the_middle_is_an_error_with_its_number() {
    let good = crate::demo_samples(1)[0].to_json_line();
    let e = parse(&format!("{good}\n{{\"t_ms\": \"x\"}}\n{good}\n")).unwrap_err();
    assert!(e.is_bad_input());
    assert!(e.to_string().starts_with("line 2:"), "{e}");
}

/// The second audit: `vram record --out` naming a file that is not a recording left it
/// emptied or cut: a config.json without a final newline is one unterminated line, which the
/// torn-tail repair removed whole. Such a file is refused and left byte for byte; a torn first
/// write (one unterminated line that starts as a sample does) is still repaired.
#[test]
fn a_file_that_is_not_a_recording_is_refused_untouched() {
    for (name, bytes) in [
        (
            "config.json",
            &br#"{"model_type": "llama", "hidden_size": 4096}"#[..],
        ),
        ("notes.txt", &b"line one\nline two without a newline"[..]),
        ("empty-first.txt", &b"\n{\"t_ms\":1}\n"[..]),
        ("binary.bin", &[0xff, 0xfe, 0x00, 0x01][..]),
    ] {
        let p = tmp(name);
        std::fs::write(&p, bytes).unwrap();
        let e = TimelineWriter::open(&p).unwrap_err();
        assert!(e.is_bad_input(), "{name}: {e}");
        assert!(
            e.to_string().contains("is not a vram recording"),
            "{name}: {e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name} was changed");
    }
    // A crash during the very first write: the torn line is cut and the samples follow.
    let p = tmp("first-torn.jsonl");
    let samples = crate::demo_samples(1);
    let line = samples[0].to_json_line();
    std::fs::write(&p, &line.as_bytes()[..30]).unwrap();
    let mut w = TimelineWriter::open(&p).unwrap();
    w.append(&samples[0]).unwrap();
    let tl = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(tl.samples, samples);
}

/// A recording longer than the 1 MiB head that is checked, whose cut falls inside a character
/// of a later sample's command line (`é`, two bytes in UTF-8), is still a recording: only its
/// first line is decoded.
#[test]
fn a_recording_cut_inside_a_character_at_one_mib_is_appended_to() {
    let p = tmp("cut-in-char.jsonl");
    let mut s = crate::demo_samples(1).remove(0);
    s.gpus[0].processes[0].command = "é".repeat(40_000);
    let line = s.to_json_line() + "\n";
    let start = line.find('é').unwrap();
    let mut text = String::new();
    // Whole samples until one more would reach 1 MiB, then one whose `é`s straddle it.
    while text.len() + line.len() < 1 << 20 {
        text.push_str(&line);
    }
    assert!(text.len() + start < 1 << 20 && text.len() + line.len() > 1 << 20);
    let mut last = line.clone();
    if (text.clone() + &last).is_char_boundary(1 << 20) {
        // One byte more before the command moves the cut onto the second byte of an `é`.
        s.gpus[0].processes[0].user.push('x');
        last = s.to_json_line() + "\n";
    }
    text.push_str(&last);
    assert!(
        !text.is_char_boundary(1 << 20),
        "the cut falls inside a character"
    );
    std::fs::write(&p, &text).unwrap();
    let mut w = TimelineWriter::open(&p).unwrap();
    w.append(&s).unwrap();
    let tl = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(tl.samples.len(), text.lines().count() + 1);
}
