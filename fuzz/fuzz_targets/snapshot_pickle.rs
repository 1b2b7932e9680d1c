//! The restricted pickle reader and the snapshot reader on arbitrary bytes;
//! whatever reads must also write and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_alloc::{pickle, Snapshot};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = pickle::from_slice(data) {
        let again = pickle::from_slice(&pickle::to_vec(&v)).expect("our own pickle reads back");
        // Compared as bytes: a NaN float is not equal to itself.
            assert_eq!(pickle::to_vec(&v), pickle::to_vec(&again));
    }
    if let Ok(s) = Snapshot::from_pickle(data) {
        let _ = s.reserved_bytes();
        let _ = Snapshot::from_pickle(&s.to_pickle()).expect("our own snapshot reads back");
    }
});
