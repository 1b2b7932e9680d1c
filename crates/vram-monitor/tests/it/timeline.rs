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
