use proptest::prelude::*;
use vram_doctor::human_bytes;
use vram_doctor::message::{parse, parse_size, Layout, MessageProcess, SelfProcess};

use crate::{fixture, gib, mib};

#[test]
fn pytorch_2_0_layout_inside_a_traceback() {
    // PyTorch 1.4-2.0: "(GPU d; T total capacity; A already allocated; F free; R reserved in total by PyTorch)".
    let m = parse(&fixture("pytorch-2.0.txt")).unwrap();
    assert_eq!(m.layout, Layout::Legacy);
    assert_eq!(m.requested_bytes, 20 << 20);
    assert_eq!(m.device, 0);
    assert_eq!(m.total_bytes, gib(79.19));
    assert_eq!(m.allocated_bytes, gib(77.65));
    assert_eq!(m.free_bytes, mib(6.75));
    assert_eq!(m.reserved_bytes, gib(78.67));
    assert_eq!(m.reserved_unallocated_bytes(), gib(78.67) - gib(77.65));
    assert_eq!((m.allowed_bytes, m.this_process_bytes), (None, None));
}

#[test]
fn pytorch_2_0_layout_with_a_cap() {
    let m = parse(&fixture("pytorch-2.0-allowed.txt")).unwrap();
    assert_eq!(m.device, 1);
    assert_eq!(m.allowed_bytes, Some(gib(19.69)));
    assert_eq!(m.reserved_bytes, gib(18.50));
    assert_eq!(m.free_bytes, gib(19.02));
}

#[test]
fn pytorch_2_1_layout_with_its_spelling_and_a_process_list() {
    // PyTorch 2.1: "has a total capacty of", Process N lines from NVML.
    let m = parse(&fixture("pytorch-2.1.txt")).unwrap();
    assert_eq!(m.layout, Layout::Current);
    assert_eq!(m.total_bytes, gib(23.65));
    assert_eq!(m.free_bytes, mib(7.06));
    assert_eq!(
        m.other_processes,
        vec![MessageProcess {
            pid: 2435,
            bytes: gib(1.50)
        }]
    );
    assert_eq!(m.this_process_bytes, Some(gib(22.13)));
    assert_eq!(m.allocated_bytes, gib(20.85));
    // Reserved = allocated + "reserved but unallocated".
    assert_eq!(m.reserved_bytes, gib(20.85) + mib(338.96));
    assert_eq!(
        m.non_pytorch_bytes(),
        Some(gib(22.13) - gib(20.85) - mib(338.96))
    );
}

#[test]
fn pytorch_2_5_layout() {
    let m = parse(&fixture("pytorch-2.5.txt")).unwrap();
    assert_eq!(m.requested_bytes, 2 << 30);
    assert_eq!(m.reserved_bytes, 77 << 30);
    assert_eq!(m.reserved_unallocated_bytes(), 42 << 30);
    assert_eq!(m.this_process_bytes, Some(gib(77.68)));
    assert!(m.other_processes.is_empty());
}

#[test]
fn a_container_lists_itself_as_another_process() {
    // vLLM issue, April 2025 (PyTorch 2.6): only "Process 2752205 has 91.82
    // GiB", no "this process" entry, and 91.82 GiB >= the 90.75 GiB reserved:
    // that is this process seen from the host's pid namespace.
    let m = parse(&fixture("pytorch-2.6-container.txt")).unwrap();
    assert_eq!(m.device, 1);
    assert!(m.other_processes.is_empty(), "{:?}", m.other_processes);
    assert_eq!(m.this_process_bytes, Some(gib(91.82)));
    assert_eq!(m.self_process, SelfProcess::Chosen { pid: 2752205 });
    assert_eq!(m.reserved_bytes, gib(90.63) + mib(120.54));
}

#[test]
fn current_layout_with_cap_private_pools_and_another_process() {
    let m = parse(&fixture("pytorch-2.9.txt")).unwrap();
    assert_eq!(m.requested_bytes, 512 << 20);
    assert_eq!(m.allowed_bytes, Some(40 << 30));
    assert_eq!(m.private_pool_bytes, Some(4 << 30));
    assert_eq!(m.this_process_bytes, Some(gib(39.20)));
    assert_eq!(m.other_process_bytes(), gib(39.60));
    assert_eq!(m.allocated_bytes, 38 << 30);
    assert_eq!(m.reserved_bytes, (38 << 30) + (700 << 20));
}

#[test]
fn a_wrapped_prefixed_log_is_read() {
    let m = parse(&fixture("wrapped-log.txt")).unwrap();
    assert_eq!(m.free_bytes, 0, "`0 bytes is free`");
    assert_eq!(m.requested_bytes, 64 << 20);
    assert_eq!(m.reserved_unallocated_bytes(), 520 << 20);
}

#[test]
fn sizes_as_format_size_prints_them() {
    // c10's format_size: "N bytes" up to 1024, then two decimals.
    for (s, v) in [
        ("0 bytes", 0),
        ("1024 bytes", 1024),
        ("1.00 KiB", 1024),
        ("20.00 MiB", 20 << 20),
        ("1.50 GiB", 3 << 29),
        ("130206.04 GiB", gib(130206.04)),
    ] {
        assert_eq!(parse_size(s), Some(v), "{s}");
    }
    for s in ["", "12", "1.0 parsecs", "-1.00 MiB", "NaN GiB", "1e400 GiB"] {
        assert_eq!(parse_size(s), None, "{s}");
    }
}

#[test]
fn what_is_not_a_message_gets_a_specific_error() {
    for (text, says) in [
        ("", "no PyTorch out-of-memory message"),
        ("RuntimeError: shapes cannot be multiplied", "no PyTorch out-of-memory message"),
        ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", "CUDA runtime"),
        ("CUDA out of memory. Tried to allocate lots", "no size after `Tried to allocate`"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which", "free memory"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.19 GiB total capacity; 1.00 GiB already", "already allocated"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB and then", "neither"),
        ("OutOfMemoryError: CUDA out of memory. Tried to allocate 162.00 MiB. GPU 0 has a total capacity of 14.56 GiB of which 29.81 MiB is free. Including non-PyTorch memory, this process has 14.53 GiB memory in use.", "paste it whole"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.19 GiB total capacity; 1.00 GiB already allocated; 2.00 GiB free; 3.00 GiB in use)", "cached)"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text:?}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

proptest! {
    /// What PyTorch prints reads back within its rounding (half a unit of
    /// the last decimal printed).
    #[test]
    fn format_size_round_trips(n in 0u64..(1 << 45)) {
        let s = human_bytes(n);
        let back = parse_size(&s).unwrap();
        let unit = if n <= 1024 { 1.0 } else if n <= 1 << 20 { 1024.0 } else if n <= 1 << 30 { (1u64 << 20) as f64 } else { (1u64 << 30) as f64 };
        prop_assert!((back as f64 - n as f64).abs() <= unit * 0.005 + 1.0, "{n} -> {s} -> {back}");
    }

    /// Arbitrary text never panics the parser.
    #[test]
    fn arbitrary_text_is_an_error_or_a_message(s in ".{0,300}") {
        let _ = parse(&s);
        let _ = parse(&format!("CUDA out of memory. Tried to allocate {s}"));
    }
}

#[test]
fn a_message_pasted_from_tried_to_allocate_is_read() {
    // Posted without its first sentence (FastMRI_challenge#238): the figures follow.
    let m = parse(
        "Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already allocated; 24.56 MiB free; 86.00 MiB reserved in total by PyTorch)",
    )
    .unwrap();
    assert_eq!(m.layout, Layout::Legacy);
    assert_eq!(m.requested_bytes, mib(216.0));
    assert_eq!(m.reserved_bytes, mib(86.0));
    // "Tried to allocate" in prose, with no figures after it, is not a message.
    assert!(parse("we tried to allocate more memory and it failed").is_err());
}

#[test]
fn a_device_printed_without_its_index_is_device_0() {
    // "GPU  has a total capacity" (LlamaFactory#3816 shows it).
    let m = parse(
        "CUDA out of memory. Tried to allocate 1.16 GiB. GPU  has a total capacity of 15.77 GiB of which 1012.69 MiB is free. Process 15788 has 456.00 MiB memory in use. Including non-PyTorch memory, this process has 14.33 GiB memory in use. Of the allocated memory 13.18 GiB is allocated by PyTorch, and 438.51 MiB is reserved by PyTorch but unallocated.",
    )
    .unwrap();
    assert_eq!(m.device, 0);
    assert_eq!(m.this_process_bytes, Some(gib(14.33)));
    assert_eq!(m.other_process_bytes(), mib(456.0));
}

#[test]
fn the_cuda_malloc_async_backend_layout() {
    // c10/cuda/CUDAMallocAsyncAllocator.cpp: no cache of PyTorch's own, so reserved =
    // allocated; 2^64 bytes of "PyTorch limit" is no fraction set. A real message
    // (sd-webui-animatediff#320), flattened by the forum.
    let m = parse(&fixture("async-backend.txt")).unwrap();
    assert_eq!(m.layout, Layout::Async);
    assert_eq!(m.allocated_bytes, gib(12.20));
    assert_eq!(m.reserved_bytes, gib(12.20));
    assert_eq!(m.requested_bytes, gib(1.88));
    assert_eq!(m.total_bytes, 16 << 30);
    assert_eq!(m.free_bytes, 0);
    assert_eq!(m.allowed_bytes, None);
    // Line by line as PyTorch prints it, with a fraction set, on device 1.
    let m = parse(
        "torch.OutOfMemoryError: Allocation on device 1 would exceed allowed memory. (out of memory)\nCurrently allocated     : 21.55 GiB\nRequested               : 952.00 MiB\nDevice limit            : 24.00 GiB\nFree (according to CUDA): 0 bytes\nPyTorch limit (set by user-supplied memory fraction)\n                        : 22.00 GiB",
    )
    .unwrap();
    assert_eq!(m.device, 1);
    assert_eq!(m.allowed_bytes, Some(22 << 30));
    assert_eq!(m.requested_bytes, mib(952.0));
}

#[test]
fn sizes_saturate_only_at_two_to_the_64() {
    assert_eq!(parse_size("17179869184.00 GiB"), Some(u64::MAX));
    assert_eq!(parse_size("16777216.00 TiB"), Some(u64::MAX));
    assert_eq!(parse_size("99999999999999999999.00 GiB"), None);
    assert_eq!(parse_size("17179870000.00 GiB"), None);
}

/// A message names no GPU, only its total: the catalog GPU nearest it is the vendor's (AMD for a
/// ROCm build's message), and the note names it, both totals and the others the total fits. The
/// RTX 4080's "15.99 GiB total capacity" (aigc-apps/sd-webui-EasyPhoto#281) is nearest the V100
/// 16GB's 15.78 GiB, and within `gpu::TOTAL_SPREAD` of the 4080's own 15.67 GiB.
#[test]
fn nearest_gpu_is_the_vendors_and_its_note_says_what_picked_it() {
    let cuda = parse("CUDA out of memory. Tried to allocate 11.39 GiB (GPU 0; 15.99 GiB total capacity; 8.01 GiB already allocated; 5.48 GiB free; 8.14 GiB reserved in total by PyTorch)").unwrap();
    let n = cuda.nearest_gpu();
    assert_eq!(n.gpu.id, "v100-16g");
    let alike: Vec<&str> = n.alike.iter().map(|g| g.id).collect();
    assert_eq!(alike, ["v100-16g", "rtx-4080"]);
    let note = n.note();
    assert!(note.contains("(v100-16g), picked only because its memory as torch reports it (15.78 GiB) is the catalog's nearest to the message's total (15.99 GiB)"), "{note}");
    assert!(
        note.ends_with("v100-16g, rtx-4080. Give --gpu with yours to time the plans on it"),
        "{note}"
    );
    let hip = parse("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 978.00 MiB. GPU 0 has a total capacity of 15.98 GiB of which 630.00 MiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.").unwrap();
    let n = hip.nearest_gpu();
    assert!(
        n.gpu.is_rocm() && n.alike.iter().all(|g| g.is_rocm()),
        "{}",
        n.gpu.id
    );
}
