//! Snapshot to events (`replay::events_from_snapshot`), then a replay of
//! short event lists under every policy on a small device: the allocator must
//! return values (out of memory included), never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_alloc::{replay, Snapshot};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = Snapshot::from_pickle(data) else {
        return;
    };
    let (events, rec) = replay::events_from_snapshot(&s);
    let _ = rec.peak_reserved_bytes;
    if events.len() <= 512 {
        let _ = replay::replay_all(&events, Some(1 << 30));
    }
});
