//! The safetensors header reader: `header_len`, `Tally::add_header` (first 8
//! bytes are the length, then the JSON header; the file length is taken from
//! the input's own length, plus a tail the input's last byte chooses) and
//! `index_shards` on the same bytes as text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_model::safetensors_header::{header_len, index_shards, Tally};

fuzz_target!(|data: &[u8]| {
    let _ = header_len(data.get(..8).unwrap_or(data));
    let extra = u64::from(data.last().copied().unwrap_or(0));
    for file_len in [data.len() as u64, data.len() as u64 + extra, u64::MAX] {
        let mut t = Tally::default();
        if t.add_header(data, file_len).is_ok() {
            let _ = t.into_weights("fuzz");
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = index_shards(text);
    }
});
