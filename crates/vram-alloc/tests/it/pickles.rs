//! Snapshot pickles: round trips, CPython-written fixtures, hostile input.
//! Fixtures in tests/data were written by CPython 3.11 `pickle.dumps`
//! (protocol 4 and 2) in the shape of `torch.cuda.memory._snapshot()`.

use crate::{new_alloc, MIB};
use vram_alloc::pickle::{self, Value};
use vram_alloc::snapshot::{BlockState, TraceAction};
use vram_alloc::{AllocError, Policy, Snapshot};

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn allocator_snapshot_round_trips_through_pickle() {
    let a = new_alloc(Policy::PyTorch, 1 << 32);
    let x = a.malloc(5 * MIB, 0).unwrap();
    let _y = a.malloc(700, 1).unwrap();
    a.free(x).unwrap();
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 2);
    assert!(snap
        .traces
        .iter()
        .any(|t| t.action == TraceAction::SegmentAlloc));
    let bytes = snap.to_pickle();
    assert_eq!(&bytes[..2], &[0x80, 2], "protocol 2 header");
    let back = Snapshot::from_pickle(&bytes).unwrap();
    assert_eq!(back, snap);
}

/// `to_pickle` writes its bytes entry by entry, without the value tree: they are the bytes of
/// that tree (`to_value`) pickled, byte for byte. Segments of both pools with many blocks,
/// over a thousand history entries (the writer's batches), an `oom` entry, entries with and
/// without a category, and without any.
#[test]
fn pickle_written_entry_by_entry_is_the_value_trees() {
    for policy in [Policy::PyTorch, Policy::PyTorchExpandable] {
        let a = new_alloc(policy, 1 << 33);
        let mut live = Vec::new();
        for i in 0..1500u64 {
            live.push(
                a.malloc(1 + (i * 7919) % (3 * MIB), (i % 2) as u32)
                    .unwrap(),
            );
            if i % 3 == 0 {
                a.free(live.swap_remove((i as usize * 31) % live.len()))
                    .unwrap();
            }
        }
        assert!(a.malloc(1 << 40, 0).is_err());
        let mut snap = a.snapshot();
        assert!(snap.traces.len() > 2000 && snap.segments.len() > 1);
        assert!(snap.traces.iter().any(|t| t.action == TraceAction::Oom));
        let plain = snap.clone();
        for (i, t) in snap.traces.iter_mut().enumerate() {
            t.category = (i % 5 != 0).then(|| format!("category {}", i % 3));
        }
        for s in [&plain, &snap, &Snapshot::default()] {
            assert_eq!(s.to_pickle(), pickle::to_vec(&s.to_value()), "{policy:?}");
        }
    }
}

#[test]
fn reads_cpython_protocol_4_and_2_snapshots() {
    for f in [
        "torch_like_snapshot.pickle",
        "torch_like_snapshot_p2.pickle",
        "ordereddict_snapshot.pickle",
    ] {
        let s = Snapshot::from_pickle(&data(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(s.segments.len(), 1, "{f}");
        assert_eq!(s.segments[0].total_size, 20_971_520);
        assert_eq!(s.segments[0].blocks[0].state, BlockState::ActiveAllocated);
        assert_eq!(s.segments[0].blocks[0].address, 139_900_000_000_000);
        assert_eq!(s.traces.len(), 8, "{f}");
        assert_eq!(s.traces[1].action, TraceAction::Alloc);
        assert_eq!(s.traces[1].size, 4_194_304);
    }
}

fn pickle_err(bytes: &[u8]) -> String {
    match Snapshot::from_pickle(bytes) {
        Err(e @ (AllocError::Pickle { .. } | AllocError::Snapshot { .. })) => {
            assert!(e.is_bad_input());
            e.to_string()
        }
        other => panic!("expected a pickle/snapshot error, got {other:?}"),
    }
}

#[test]
fn refuses_code_execution_payloads() {
    let e = pickle_err(&data("evil_reduce.pickle"));
    assert!(e.contains("global posix.system is not allowed"), "{e}");
    let e = pickle_err(&data("evil_global_p0.pickle"));
    assert!(e.contains("global os.system is not allowed"), "{e}");
    for (op, name) in [(b'b', "BUILD"), (0x81, "NEWOBJ"), (b'i', "INST")] {
        let e = pickle_err(&[0x80, 2, b'}', op, b'.']);
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn wrong_shapes_are_snapshot_errors() {
    assert!(pickle_err(&data("wrong_types.pickle")).contains("'segments' is not a list"));
    assert!(pickle_err(&data("not_a_dict.pickle")).contains("expected a dict"));
}

/// A protocol-2 pickle of `{"segments": [], "device_traces": [[{"action": "alloc", key: v}]]}`
/// (plus `size` 512 when `key` is not `size`): BININT is a signed 32-bit integer.
fn one_alloc(key: &str, v: i32) -> Vec<u8> {
    let str_ = |out: &mut Vec<u8>, s: &str| {
        out.push(b'X');
        out.extend((s.len() as u32).to_le_bytes());
        out.extend(s.as_bytes());
    };
    let int = |out: &mut Vec<u8>, i: i32| {
        out.push(b'J');
        out.extend(i.to_le_bytes());
    };
    let mut b = vec![0x80, 2, b'}', b'('];
    str_(&mut b, "segments");
    b.push(b']');
    str_(&mut b, "device_traces");
    b.extend([b']', b']', b'}', b'(']);
    str_(&mut b, "action");
    str_(&mut b, "alloc");
    str_(&mut b, key);
    int(&mut b, v);
    if key != "size" {
        str_(&mut b, "size");
        int(&mut b, 512);
    }
    b.extend([b'u', b'a', b'a', b'u', b'.']);
    b
}

/// A negative size, address, stream or time was read `as u64`: a -1 size became 16 EiB, which
/// `vram replay` printed as the recorded peak and replayed as nothing, exit 0.
#[test]
fn negative_integers_are_snapshot_errors() {
    let ok = Snapshot::from_pickle(&one_alloc("addr", 4096)).unwrap();
    assert_eq!((ok.traces[0].addr, ok.traces[0].size), (4096, 512));
    for key in ["size", "addr", "stream", "time_us"] {
        let e = pickle_err(&one_alloc(key, -1));
        assert!(
            e.contains(&format!(
                "device_traces[0][0].{key} is -1, expected a non-negative int"
            )),
            "{key}: {e}"
        );
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let full = data("torch_like_snapshot.pickle");
    for n in 0..full.len() {
        let e = pickle_err(&full[..n]);
        assert!(!e.contains('\n'), "one-line error");
    }
}

#[test]
fn deep_nesting_and_memo_bombs_are_bounded() {
    // 100k nested lists: EMPTY_LIST x 100k, then APPEND each into the one below.
    let mut deep = vec![0x80, 2];
    deep.resize(deep.len() + 100_000, b']');
    deep.resize(deep.len() + 99_999, b'a');
    deep.push(b'.');
    assert!(pickle_err(&deep).contains("nesting too deep"));
    // A list memoized and doubled 64 times would need 2^64 nodes:
    // memo[k+1] = [memo[k], memo[k]].
    let mut bomb = vec![0x80, 2, b']', b'K', 1, b'a', 0x94];
    for k in 0..64u8 {
        bomb.extend_from_slice(&[b'(', b'h', k, b'h', k, b'l', 0x94]);
    }
    bomb.push(b'.');
    let e = pickle::from_slice(&bomb).unwrap_err().to_string();
    assert!(e.contains("expand too much"), "{e}");
}

#[test]
fn writer_uses_only_memory_viz_opcodes() {
    // MemoryViz.js understands: PROTO EMPTY_DICT EMPTY_LIST MARK SETITEMS APPENDS
    // BINUNICODE BININT BININT1 BININT2 LONG1 NEWTRUE NEWFALSE NONE BINFLOAT
    // TUPLE1-3 TUPLE EMPTY_TUPLE STOP (torch/utils/viz/MemoryViz.js, unpickle()).
    let v = Value::Dict(vec![
        (Value::Str("a".into()), Value::Int(0x7f00_0000_0000)),
        (Value::Str("b".into()), Value::Int(-5)),
        (
            Value::Str("c".into()),
            Value::Tuple(vec![Value::Int(0), Value::Int(70_000)]),
        ),
        (
            Value::Str("d".into()),
            Value::List(vec![Value::Bool(true), Value::None, Value::Float(1.5)]),
        ),
    ]);
    let bytes = pickle::to_vec(&v);
    assert_eq!(pickle::from_slice(&bytes).unwrap(), v);
    // 0x7f00_0000_0000 as LONG1: 6 little-endian bytes.
    let long1 = [0x8a, 6, 0, 0, 0, 0, 0, 0x7f];
    assert!(bytes.windows(long1.len()).any(|w| w == long1));
}

#[test]
fn categories_round_trip_and_always_include_unknown() {
    use vram_alloc::snapshot::TraceEntry;
    let entry = |action, category: Option<&str>| TraceEntry {
        action,
        addr: 0x7f00_0000_0000,
        size: 512,
        stream: 0,
        time_us: 1,
        category: category.map(str::to_string),
        device_free: 0,
    };
    let snap = Snapshot {
        segments: vec![],
        traces: vec![
            entry(TraceAction::SegmentAlloc, None),
            entry(TraceAction::Alloc, Some("activations")),
        ],
    };
    let v = pickle::from_slice(&snap.to_pickle()).unwrap();
    let traces = v.get("device_traces").unwrap().as_seq().unwrap()[0]
        .as_seq()
        .unwrap();
    // MemoryViz.js (annotate_snapshot) fails when categories exist but
    // 'unknown' is not among them, so uncategorised entries say 'unknown'.
    assert_eq!(
        traces[0].get("category").and_then(Value::as_str),
        Some("unknown")
    );
    assert_eq!(
        traces[1].get("category").and_then(Value::as_str),
        Some("activations")
    );
    let back = Snapshot::from_pickle(&snap.to_pickle()).unwrap();
    assert_eq!(back.traces[1].category.as_deref(), Some("activations"));
    assert_eq!(back.traces[0].category.as_deref(), Some("unknown"));
}

mod fuzz {
    use super::data;
    use proptest::prelude::*;
    use vram_alloc::{pickle, Snapshot};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Arbitrary bytes never panic the reader; they decode or give an error.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            prop_assert!(bad_input_or_ok(Snapshot::from_pickle(&bytes).map(|_| ())));
            let mut with_header = vec![0x80, 2];
            with_header.extend_from_slice(&bytes);
            prop_assert!(bad_input_or_ok(pickle::from_slice(&with_header).map(|_| ())));
        }

        /// A real snapshot with a few bytes overwritten never panics either.
        #[test]
        fn mutated_snapshots_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut bytes = data("torch_like_snapshot.pickle");
            for (at, b) in edits {
                let i = at % bytes.len();
                bytes[i] = b;
            }
            prop_assert!(bad_input_or_ok(Snapshot::from_pickle(&bytes).map(|_| ())));
        }
    }

    /// Decoding either succeeds or fails with a one-line bad-input error.
    fn bad_input_or_ok(r: Result<(), vram_alloc::AllocError>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => e.is_bad_input() && !e.to_string().contains('\n'),
        }
    }
}
