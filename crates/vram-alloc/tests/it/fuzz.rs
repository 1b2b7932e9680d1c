//! Inputs that crashed the snapshot fuzz targets (`fuzz/`, cargo-fuzz:
//! `snapshot_pickle` and `snapshot_events`), run here without the fuzzer.
//! Each file in `tests/data/fuzz/snapshots/` (README there says who found it
//! and what it did) must now give a value or a one-line error under both.

use std::path::PathBuf;

use vram_alloc::{pickle, replay, Snapshot};

fn inputs() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/snapshots");
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "md"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

fn one_line(e: impl std::fmt::Display) {
    let s = e.to_string();
    assert!(!s.is_empty() && !s.contains('\n'), "{s:?}");
}

/// The `snapshot_pickle` target's body.
fn snapshot_pickle(data: &[u8]) {
    match pickle::from_slice(data) {
        Ok(v) => {
            let again = pickle::from_slice(&pickle::to_vec(&v)).expect("our own pickle reads back");
            // Compared as bytes: a NaN float is not equal to itself.
            assert_eq!(pickle::to_vec(&v), pickle::to_vec(&again));
        }
        Err(e) => one_line(e),
    }
    match Snapshot::from_pickle(data) {
        Ok(s) => {
            let _ = s.reserved_bytes();
            Snapshot::from_pickle(&s.to_pickle()).expect("our own snapshot reads back");
        }
        Err(e) => one_line(e),
    }
}

/// The `snapshot_events` target's body.
fn snapshot_events(data: &[u8]) {
    let Ok(s) = Snapshot::from_pickle(data) else {
        return;
    };
    let (events, _) = replay::events_from_snapshot(&s);
    if events.len() <= 512 {
        if let Err(e) = replay::replay_all(&events, Some(1 << 30)) {
            one_line(e);
        }
    }
}

#[test]
fn snapshot_pickle_crashes_stay_fixed() {
    let v = inputs();
    assert!(!v.is_empty());
    for (p, b) in v {
        eprintln!("{}", p.display());
        snapshot_pickle(&b);
    }
}

#[test]
fn snapshot_events_crashes_stay_fixed() {
    let v = inputs();
    assert!(!v.is_empty());
    for (p, b) in v {
        eprintln!("{}", p.display());
        snapshot_events(&b);
    }
}
