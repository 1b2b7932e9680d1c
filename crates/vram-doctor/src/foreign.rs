//! Out-of-memory errors the doctor recognises but cannot diagnose.
//!
//! The doctor's rules read PyTorch's caching-allocator figures (or vLLM's and SGLang's start-up
//! figures). Some memory errors users paste carry none of them: the engine allocates outside
//! PyTorch's allocator, replaces PyTorch's message with its own, or PyTorch itself cut the text
//! before its figures. [`recognise`] names which one it is from the engine's own words, so the
//! refusal can say what was found, why no diagnosis follows, and the one thing to paste or do
//! that the engine's own code or documentation supports. Each text below was read in the engine's
//! source at the commit or tag its comment names.

use std::fmt;

/// A memory error recognised from its engine's own text, carrying no figures the doctor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// ggml's GPU backend (llama.cpp, and the programs built on it) failed a device allocation:
    /// its `CUDA_CHECK` naming a `ggml-cuda` source file (`CUDA error 2 at ggml-cuda.cu:359: out
    /// of memory` in 2023's single-file backend; `CUDA error: out of memory` / `current device:
    /// N, in function ... at .../ggml-cuda/...:L` since, `ggml_cuda_error` in
    /// ggml/src/ggml-cuda/ggml-cuda.cu at llama.cpp 00108827), the CUDA buffer type's
    /// `ggml_backend_cuda_buffer_type_alloc_buffer: allocating X MiB on device N: cudaMalloc
    /// failed: out of memory` (the same file), or a load or graph-allocator failure naming a
    /// CUDA device buffer (`unable to allocate CUDA0 buffer`, `failed to allocate CUDA0 buffer of
    /// size`).
    LlamaCppGpu,
    /// llama.cpp's model loader could not allocate a weights buffer (`llama_model_load: error
    /// loading model: unable to allocate backend buffer`, its text before the buffer type's name
    /// was added), and the pasted text does not say in which memory.
    LlamaCppLoad,
    /// Text Generation Inference's warmup refusal: `Not enough memory to handle N total tokens
    /// with M prefill tokens. You need to decrease ...` (0.9.0-0.9.1, logged with the error it
    /// caught) or `Not enough memory to handle N prefill tokens. You need to decrease
    /// `--max-batch-prefill-tokens`` (0.9.2 on, raised `from` the error it caught), in
    /// server/text_generation_server/models/flash_causal_lm.py's `warmup`. Until 1.1.0 it
    /// replaces any exception of the warmup's forward pass, from 1.1.1 only
    /// `torch.cuda.OutOfMemoryError` (read at each tag v0.9.0-v3.3.7).
    TgiWarmup,
    /// Text Generation Inference's router check after warmup (2.1.0 on: router/src/server.rs,
    /// then backends/v3/src/lib.rs): `Not enough memory to handle `max_total_tokens=N``, raised
    /// when `--max-total-tokens` exceeds the batch total tokens the warmup found room for.
    TgiMaxTotalTokens,
    /// PyTorch's cudaMallocAsync message cut after `Allocation on device `: the allocator printed
    /// the device index, a `c10::DeviceIndex` (an `int8_t`), as a character, and device 0's is
    /// NUL, which ends the C string before the figures (pytorch#168369, merged 2025-11-23,
    /// before the 2.10 branch cut of pytorch#170119; the index became a `DeviceIndex` there in
    /// pytorch#119545, 2024-02). The whole message (`... would exceed allowed memory. ...`) is
    /// read by [`crate::message::parse`].
    AsyncCut,
}

impl Foreign {
    /// What was recognised, as the refusal names it.
    pub fn what(self) -> &'static str {
        match self {
            Self::LlamaCppGpu => "llama.cpp's (ggml's) GPU allocation error",
            Self::LlamaCppLoad => {
                "llama.cpp's model-load error `unable to allocate backend buffer`"
            }
            Self::TgiWarmup => {
                "Text Generation Inference's warmup refusal (`Not enough memory to handle ... \
                 prefill tokens`)"
            }
            Self::TgiMaxTotalTokens => {
                "Text Generation Inference's router refusal (`Not enough memory to handle \
                 `max_total_tokens=...``)"
            }
            Self::AsyncCut => {
                "PyTorch's cudaMallocAsync out-of-memory message cut at `Allocation on device`"
            }
        }
    }

    /// Why the doctor cannot diagnose it.
    pub fn why(self) -> &'static str {
        match self {
            Self::LlamaCppGpu => {
                "ggml allocates llama.cpp's weights, KV cache and compute buffers itself, outside \
                 PyTorch's allocator, so the message has none of the figures the doctor reads"
            }
            Self::LlamaCppLoad => {
                "ggml allocates the weights outside PyTorch's allocator, so there are none of the \
                 figures the doctor reads, and this line does not say which memory ran out"
            }
            Self::TgiWarmup => {
                "TGI reports it in place of the error its warmup forward pass hit (any error up \
                 to 1.1.0, PyTorch's out-of-memory error from 1.1.1), so it carries none of \
                 PyTorch's figures"
            }
            Self::TgiMaxTotalTokens => {
                "the KV cache TGI's warmup found room for holds fewer tokens than \
                 `--max-total-tokens` lets one request use, and TGI prints none of the memory \
                 figures the doctor reads"
            }
            Self::AsyncCut => {
                "PyTorch wrote device 0's index there as a NUL character, which ends the text \
                 before its figures (pytorch#168369, fixed for PyTorch 2.10)"
            }
        }
    }

    /// The one thing to paste or do instead, as the engine's own code or documentation has it.
    pub fn instead(self) -> &'static str {
        match self {
            // common/arg.cpp (llama.cpp 0017d6fb): `-ngl, --gpu-layers, --n-gpu-layers N`, "max.
            // number of layers to store in VRAM".
            Self::LlamaCppGpu => {
                "keep fewer layers in VRAM with llama.cpp's `-ngl`/`--n-gpu-layers` (or the same \
                 setting of the program built on it)"
            }
            Self::LlamaCppLoad => {
                "the line before it names the buffer that failed: \
                 `ggml_backend_cuda_buffer_type_alloc_buffer: ... cudaMalloc failed` is the GPU's \
                 (keep fewer layers in VRAM with llama.cpp's `-ngl`/`--n-gpu-layers`), a CPU \
                 buffer is host memory"
            }
            // The shard logs every gRPC error with its traceback (interceptor.py's
            // `logger.exception`, every tag), the chained cause included; the doctor reads
            // PyTorch's message out of a whole log.
            Self::TgiWarmup => {
                "paste the shard's log with it: its `Method Warmup encountered an error` traceback \
                 holds the error TGI replaced"
            }
            Self::TgiMaxTotalTokens => "lower `--max-total-tokens`",
            // ComfyUI a125cd84: cuda_malloc.py sets `backend:cudaMallocAsync` for torch 2.x CUDA
            // builds unless `--disable-cuda-malloc` (comfy/cli_args.py) is given.
            Self::AsyncCut => {
                "rerun with PyTorch's native allocator (ComfyUI: `--disable-cuda-malloc`; \
                 elsewhere without `backend:cudaMallocAsync` in PYTORCH_CUDA_ALLOC_CONF) or on \
                 PyTorch 2.10 or later, and paste the message it prints"
            }
        }
    }
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.what(), self.why(), self.instead())
    }
}

/// Which figure-less memory error `text` is, from its engine's own words, if any.
///
/// Called on text in which neither PyTorch's message nor a vLLM or SGLang start-up error was
/// read ([`crate::read`]). Words are matched whatever their case and line breaks.
///
/// ```
/// use vram_doctor::foreign::{recognise, Foreign};
/// assert_eq!(
///     recognise("CUDA error 2 at ggml-cuda.cu:359: out of memory"),
///     Some(Foreign::LlamaCppGpu)
/// );
/// assert_eq!(recognise("torch.OutOfMemoryError: Allocation on device "), Some(Foreign::AsyncCut));
/// assert_eq!(recognise("RuntimeError: CUDA error: out of memory"), None);
/// ```
pub fn recognise(text: &str) -> Option<Foreign> {
    // A coloured log (llama.cpp's `--log-colors`, `docker logs` of a `-t` container) read as the
    // plain one, as PyTorch's and the serving engines' messages are.
    let text = &*crate::message::without_terminal_codes(text);
    let flat = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    let has = |p: &str| flat.contains(p);
    // A device buffer by ggml's CUDA buffer-type name, `CUDA` and the device number (`CUDA0
    // buffer`; `CUDA_Host` is pinned host memory), after the loader's `unable to allocate ` or
    // ggml-alloc's `failed to allocate ` (`ggml_gallocr_reserve_n`, `alloc_tensor_range`).
    let cuda_buffer = |before: &str| {
        flat.match_indices(before).any(|(i, _)| {
            let rest = &flat[i + before.len()..];
            rest.strip_prefix("cuda").is_some_and(|r| {
                let digits = r.len() - r.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                digits > 0 && r[digits..].starts_with(" buffer")
            })
        })
    };
    if (has("ggml-cuda") && has("out of memory"))
        || (has("ggml_backend_cuda_buffer_type_alloc_buffer") && has("cudamalloc failed"))
        || cuda_buffer("unable to allocate ")
        || cuda_buffer("failed to allocate ")
    {
        return Some(Foreign::LlamaCppGpu);
    }
    if has("unable to allocate backend buffer") {
        return Some(Foreign::LlamaCppLoad);
    }
    if has("not enough memory to handle `max_total_tokens=") {
        return Some(Foreign::TgiMaxTotalTokens);
    }
    if has("not enough memory to handle") && has("prefill tokens") {
        return Some(Foreign::TgiWarmup);
    }
    if async_cut(&text.to_ascii_lowercase()) {
        return Some(Foreign::AsyncCut);
    }
    None
}

/// Whether `lower` holds `allocation on device` with no device index after it: the text ends
/// there, or at the end of its line (or of a quoted or escaped string: `'...'`, `\n`).
fn async_cut(lower: &str) -> bool {
    const CUT: &str = "allocation on device";
    lower.match_indices(CUT).any(|(i, _)| {
        let rest = lower[i + CUT.len()..].trim_start_matches([' ', '\t']);
        rest.is_empty() || rest.starts_with(['\n', '\r', '"', '\'', '\\'])
    })
}
