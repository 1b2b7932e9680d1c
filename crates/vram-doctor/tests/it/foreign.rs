//! Memory errors the doctor recognises but cannot diagnose (`vram_doctor::foreign`): the real
//! messages of `public.txt` (labelled `refuse` from their threads before this rule) and the
//! engines' own texts at the tags `foreign.rs` names.

use vram_doctor::foreign::{recognise, Foreign};
use vram_doctor::{read, DoctorError, Reading};

/// `(source, message)` of every block of `public.txt`.
fn public() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/messages/public.txt"
    ))
    .unwrap();
    text.split("\n\n")
        .filter(|b| b.starts_with("source: "))
        .map(|b| {
            let source = b.lines().next().unwrap()["source: ".len()..].to_string();
            let message = b.split_once("\nmessage:\n").unwrap().1.to_string();
            (source, message)
        })
        .collect()
}

/// The real messages each kind was recognised on: every one `public.txt` holds of these engines'
/// figure-less errors (all labelled `refuse` from their threads).
const REAL: [(&str, Foreign); 10] = [
    // 2023's single-file backend: `CUDA error 2 at ggml-cuda.cu:359: out of memory`.
    (
        "https://github.com/ggml-org/llama.cpp/issues/1230",
        Foreign::LlamaCppGpu,
    ),
    // ollama's vendored llama.cpp, 2024: `CUDA error: out of memory current device: 0, in
    // function alloc at ...ggml-cuda.cu:445`; the CUDA runtime's words, ggml's file.
    (
        "https://github.com/ollama/ollama/issues/3460",
        Foreign::LlamaCppGpu,
    ),
    (
        "https://github.com/ggml-org/llama.cpp/issues/7366",
        Foreign::LlamaCppLoad,
    ),
    // TGI 0.9.0-0.9.1's text, 0.9.2+'s in the router's log, and 0.9.2+'s through the launcher.
    (
        "https://github.com/huggingface/text-generation-inference/issues/710",
        Foreign::TgiWarmup,
    ),
    (
        "https://github.com/huggingface/text-generation-inference/issues/1164",
        Foreign::TgiWarmup,
    ),
    (
        "https://github.com/huggingface/text-generation-inference/issues/755",
        Foreign::TgiWarmup,
    ),
    // ComfyUI's error report and its log line.
    (
        "https://github.com/Comfy-Org/ComfyUI/issues/5038",
        Foreign::AsyncCut,
    ),
    (
        "https://github.com/Comfy-Org/ComfyUI/issues/8336",
        Foreign::AsyncCut,
    ),
    // The same bare line from two ComfyUI custom nodes (batch 28).
    (
        "https://github.com/billwuhao/ComfyUI_ACE-Step/issues/14",
        Foreign::AsyncCut,
    ),
    (
        "https://github.com/BoyuanJiang/FitDiT-ComfyUI/issues/2",
        Foreign::AsyncCut,
    ),
];

#[test]
fn the_real_figureless_messages_are_named_and_still_refused() {
    let cases = public();
    for (source, kind) in REAL {
        let (_, message) = cases
            .iter()
            .find(|(s, _)| s == source)
            .unwrap_or_else(|| panic!("{source} is not in public.txt"));
        assert_eq!(recognise(message), Some(kind), "{source}");
        match read(message) {
            Err(DoctorError::Undiagnosable(k)) => assert_eq!(k, kind, "{source}"),
            other => panic!("{source}: {other:?}"),
        }
        // One line: what was found, why no diagnosis, what instead.
        let line = read(message).unwrap_err().to_string();
        assert!(!line.contains('\n'), "{source}: {line}");
        assert_eq!(
            line,
            format!(
                "cannot diagnose {}: {}; {}",
                kind.what(),
                kind.why(),
                kind.instead()
            )
        );
    }
}

/// Each real message with terminal colour codes around every word, as a coloured log holds
/// it, is named as the plain one (PyTorch's and the serving engines' readers drop the codes too).
#[test]
fn a_coloured_message_is_named_as_the_plain_one() {
    let cases = public();
    for (source, kind) in REAL {
        let (_, message) = cases.iter().find(|(s, _)| s == source).unwrap();
        let coloured: String = message
            .split_inclusive(char::is_whitespace)
            .map(|w| format!("\x1b[1;31m{w}\x1b[0m"))
            .collect();
        assert_eq!(recognise(&coloured), Some(kind), "{source}");
    }
}

#[test]
fn no_other_public_message_changes_answer() {
    // Only the messages above are named; every other message of every batch reads as before
    // (the `public` test pins each group's right answers; this pins which refusals are named).
    let mut got: Vec<String> = public()
        .into_iter()
        .filter(|(_, m)| matches!(read(m), Err(DoctorError::Undiagnosable(_))))
        .map(|(s, _)| s)
        .collect();
    let mut want: Vec<String> = REAL.iter().map(|r| r.0.to_string()).collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn each_engine_text_is_recognised_in_its_own_words() {
    // llama.cpp's current text (ggml/src/ggml-cuda/ggml-cuda.cu at 00108827: the buffer type's
    // line, then llama_model_load's): the GPU is named, so the GPU advice follows.
    assert_eq!(
        recognise(
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7605.34 MiB on device 0: \
             cudaMalloc failed: out of memory\n\
             llama_model_load: error loading model: unable to allocate backend buffer\n\
             llama_load_model_from_file: failed to load model"
        ),
        Some(Foreign::LlamaCppGpu)
    );
    // Its `ggml_cuda_error` lines since 2024, and the ROCm build of the same backend.
    assert_eq!(
        recognise(
            "CUDA error: out of memory\n  current device: 1, in function ggml_cuda_pool_alloc at \
             /llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:405\n  cudaMalloc((void **) &ptr, \
             look_ahead_size)"
        ),
        Some(Foreign::LlamaCppGpu)
    );
    assert_eq!(
        recognise(
            "ROCm error: out of memory\n  current device: 0, in function alloc at \
             ggml/src/ggml-cuda/ggml-cuda.cu:420"
        ),
        Some(Foreign::LlamaCppGpu)
    );
    // The loader's text once the buffer type is named (`unable to allocate %s buffer`), and
    // ggml's graph allocator (`%s: failed to allocate %s buffer of size %zu`).
    assert_eq!(
        recognise("llama_model_load: error loading model: unable to allocate CUDA0 buffer"),
        Some(Foreign::LlamaCppGpu)
    );
    for graph in [
        "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2317096960",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 536870912",
    ] {
        assert_eq!(recognise(graph), Some(Foreign::LlamaCppGpu), "{graph}");
    }
    // Pinned host memory and the CPU are not the GPU: no GPU advice.
    for host in [
        "llama_model_load: error loading model: unable to allocate CUDA_Host buffer",
        "llama_model_load: error loading model: unable to allocate CPU buffer",
    ] {
        assert_eq!(recognise(host), None, "{host}");
    }
    // TGI's router check (router/src/server.rs at v2.1.0, backends/v3/src/lib.rs since).
    assert_eq!(
        recognise(
            "Error: NotEnoughMemory(4096)\nNot enough memory to handle `max_total_tokens=4096`"
        ),
        Some(Foreign::TgiMaxTotalTokens)
    );
    // ComfyUI's report (execution.py at a125cd84: the exception, a new line, its tips).
    assert_eq!(
        recognise(
            "Allocation on device \nThis error means you ran out of memory on your GPU.\n\n\
             TIPS: If the workflow worked before you might have accidentally set the batch_size \
             to a large number."
        ),
        Some(Foreign::AsyncCut)
    );
    // The same text quoted as a Python string, or with its `\n` escaped in JSON.
    assert_eq!(
        recognise("torch.OutOfMemoryError('Allocation on device ')"),
        Some(Foreign::AsyncCut)
    );
    assert_eq!(
        recognise(r#""exception_message": "Allocation on device \nThis error means""#),
        Some(Foreign::AsyncCut)
    );
}

#[test]
fn figures_when_present_are_read_not_refused() {
    // A device index after the words: PyTorch's whole cudaMallocAsync message, read as ever
    // (ComfyUI-DynamiCrafter#7's, PyTorch before the index became an `int8_t`).
    let whole = "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. \
                 (out of memory)\nCurrently allocated     : 10.72 GiB\nRequested               : \
                 18.98 GiB\nDevice limit            : 23.68 GiB\nFree (according to CUDA): 10.50 \
                 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        \
                 : 17179869184.00 GiB";
    assert!(matches!(read(whole), Ok(Reading::Oom(_))));
    assert_eq!(recognise("Allocation on device 0 would exceed"), None);
    // TGI's shard log pasted whole: the PyTorch error its warmup replaced is there and is the one
    // diagnosed (TGI 1.1.1+'s chained traceback, its figures from text-generation-inference#1374).
    let log = "ERROR text_generation_launcher: Method Warmup encountered an error.\n\
               torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 222.00 MiB. GPU 0 \
               has a total capacty of 39.39 GiB of which 217.94 MiB is free. Process 862944 has \
               39.17 GiB memory in use. Of the allocated memory 37.10 GiB is allocated by PyTorch, \
               and 1.57 GiB is reserved by PyTorch but unallocated.\n\n\
               The above exception was the direct cause of the following exception:\n\n\
               RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease \
               `--max-batch-prefill-tokens`";
    assert!(matches!(read(log), Ok(Reading::Oom(_))));
    // The CUDA runtime's bare error outside ggml keeps its own refusal.
    let e = read("RuntimeError: CUDA error: out of memory").unwrap_err();
    assert!(matches!(e, DoctorError::Unparseable { .. }), "{e}");
}
