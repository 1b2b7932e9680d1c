//! What vLLM V1's profile run (and, for the cuBLAS workspace, V0's from 0.7) holds beside the
//! dummy sampler's per-row tensors ([`super::activation::sampler_peak`]) and beside the
//! forward's live set, read at the releases named on each function.

use super::*;

/// The rows of hidden states vLLM V1's `_dummy_sampler_run` holds beside the full hidden states
/// `profile_run` keeps (0.9 on; read in `v1/worker/gpu_model_runner.py` at 0.9.2, 0.10.0,
/// 0.10.1.1, 0.11.0, 0.12.0, 0.13.0, 0.14.1, 0.16.0, 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0
/// and 0.22.1): `_dummy_run` returns `hidden_states, hidden_states[logit_indices]`, the second a
/// gathered copy of one row per request, and `_dummy_sampler_run` replaces its argument by
/// `torch.rand_like(hidden_states)` before `compute_logits`, while `profile_run` still holds the
/// copy. Two `[reqs, hidden]` tensors in the model dtype. 0.8.5 returns only the gathered rows
/// and draws no random ones; V1 before 0.9 is left as it was (not counted here).
pub(super) fn vllm_sampler_rows(t: &Transformer, reqs: u64, k: &Knobs, v1: bool) -> u64 {
    if !v1 || Engine::Vllm.version_in_force(k) < [0, 9, 0] {
        return 0;
    }
    2 * reqs * t.hidden() * k.dtype_bytes
}

/// Whether the profile's top-k/top-p runs vLLM's Triton kernel (`apply_top_k_top_p_triton`): V1
/// from 0.17 over 8 rows or more, unless FlashInfer's sampler decides the profile
/// (`--flashinfer-sampler` before 0.21, [`engine::vllm_flashinfer_profiled`]).
fn vllm_triton_top_k_top_p(k: &Knobs, v1: bool, rows: u64) -> bool {
    v1 && Engine::Vllm.version_in_force(k) >= [0, 17, 0]
        && rows >= 8
        && !(k.flashinfer_sampler && engine::vllm_flashinfer_profiled(k))
}

/// The scratch buffer vLLM's Triton top-k/top-p kernel keeps (`v1/sample/ops/topk_topp_triton.py`
/// `apply_top_k_top_p_triton`, read at 0.17.1, 0.18.1, 0.19.1, 0.20.2, 0.21.0 and 0.22.1; the
/// file is absent at 0.16.0): one row of the vocabulary per Triton program,
/// `logits.new_empty((size, vocab_size))` in the logits' fp32, with `NUM_PROGRAMS =
/// min(num_sm, batch)` and `size = min(next_power_of_2(NUM_PROGRAMS), num_sm)`, `num_sm` being
/// the GPU's multiprocessors ([`Gpu::compute_units`]). It is cached in `_TRITON_BUFFER_CACHE`
/// and never freed, so the profile's peak holds it beside the sampler's tensors and the warm-up
/// after the graphs reuses it. The width is the logits' after `LogitsProcessor` slices the padded
/// head to the checkpoint's vocabulary.
pub(super) fn vllm_triton_sampler_buffer(
    t: &Transformer,
    reqs: u64,
    k: &Knobs,
    gpu: &Gpu,
    v1: bool,
) -> u64 {
    if !vllm_triton_top_k_top_p(k, v1, reqs) {
        return 0;
    }
    let sms = gpu.compute_units();
    let programs = sms.min(reqs);
    let rows = programs.next_power_of_two().min(sms);
    rows * t.vocab() * 4
}

/// The cuBLAS workspace PyTorch allocates through its caching allocator for the stream's handle
/// at the first GEMM (`setWorkspaceForHandle`, `aten/src/ATen/cuda/CublasHandlePool.cpp`): 32 MiB
/// on compute capability 9.0 and `:4096:2:16:8` (4096 KiB x 2 + 16 KiB x 8) elsewhere: the default
/// from pytorch#89027 (torch 2.0) in every stored version of the file read, to the current main
/// (which also gives 32 MiB to 10.x and 12.x since pytorch#175344, February 2026, after the
/// torch 2.10.0 that vLLM 0.19.1 pins in `requirements/cuda.txt`; not taken here). The file was
/// not read at the v2.10.0 tag itself. That it sits inside the caching allocator under torch 2.11
/// is the project's own H100/H200 reading
/// ([`vram_model::gpu::workspace_bytes`]). vLLM V1 from 0.9 resets the peak and reads its
/// baseline after the weights are loaded (`memory_profiling`, `utils/mem_utils.py` at 0.19.1,
/// `utils/__init__.py` at 0.9.2), and the dense checkpoints' loading runs no GEMM, so the
/// profile's first matrix product allocates it inside the measured torch peak, where it stays.
/// V0 from 0.7 measures the same way: `determine_num_available_blocks` (`worker/worker.py`,
/// read at 0.10.0; the baseline rule at 0.8.3) empties the cache, resets the peak and runs
/// `profile_run` inside `memory_profiling`, so its printed "PyTorch activation peak memory"
/// holds the workspace too (its T4, RTX 2080 Ti and L40S logs print 0.006-0.017 GiB over vram's
/// V0 peak without it, at two decimals).
/// One handle: the model's linears and the LM head run on the current stream. cuBLASLt's own
/// workspace (1 MiB by default, for GEMMs with a bias epilogue) is not counted, nor a workspace a
/// quantized checkpoint's `process_weights_after_loading` may already have allocated. CUDA only.
pub(super) fn vllm_cublas_workspace(k: &Knobs, gpu: &Gpu, v1: bool) -> u64 {
    let from = if v1 { [0, 9, 0] } else { [0, 7, 0] };
    if Engine::Vllm.version_in_force(k) < from || engine::is_rocm(gpu) {
        return 0;
    }
    if gpu.capability() == (9, 0) {
        32 << 20
    } else {
        2 * 4096 * 1024 + 8 * 16 * 1024
    }
}

/// The profile's peak from the forward's live set and the sampler's (rows included): the cuBLAS
/// workspace is allocated at the forward's first GEMM and held beside both, the Triton buffer
/// only from the sampler on (the forward runs first in `profile_run`).
pub(super) fn vllm_profile_peak(
    forward: u64,
    sampler: u64,
    t: &Transformer,
    reqs: u64,
    k: &Knobs,
    gpu: &Gpu,
    v1: bool,
) -> u64 {
    forward.max(sampler + vllm_triton_sampler_buffer(t, reqs, k, gpu, v1))
        + vllm_cublas_workspace(k, gpu, v1)
}

/// What the profile leaves allocated for good: the Triton sampler's cached buffer and the cuBLAS
/// workspace. The warm-up after the graphs (`compile_or_warm_up_model`) finds both still held
/// through its forward and its sampler, so its need counts them beside the larger live set.
pub(super) fn vllm_profile_kept(t: &Transformer, reqs: u64, k: &Knobs, gpu: &Gpu, v1: bool) -> u64 {
    vllm_triton_sampler_buffer(t, reqs, k, gpu, v1) + vllm_cublas_workspace(k, gpu, v1)
}

/// The assumption line for [`vllm_sampler_rows`] and [`vllm_profile_kept`], where they count.
pub(super) fn vllm_profile_kept_note(
    t: &Transformer,
    reqs: u64,
    k: &Knobs,
    gpu: &Gpu,
    v1: bool,
) -> Option<String> {
    let rows = vllm_sampler_rows(t, reqs, k, v1);
    let buffer = vllm_triton_sampler_buffer(t, reqs, k, gpu, v1);
    let workspace = vllm_cublas_workspace(k, gpu, v1);
    if rows + buffer + workspace == 0 {
        return None;
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut parts = vec![];
    if rows > 0 {
        parts.push(format!(
            "the dummy sampler's gathered last rows and rand_like's copy of them ({:.1} MiB; gpu_model_runner.py _dummy_run / _dummy_sampler_run, read at 0.9.2 to 0.22.1)",
            mib(rows)
        ));
    }
    if buffer > 0 {
        let sms = gpu.compute_units();
        parts.push(format!(
            "the Triton top-k/top-p kernel's cached buffer, {} fp32 rows of the {}-token vocabulary ({:.1} MiB; min(next_power_of_2(min({sms} SMs, {reqs} rows)), {sms} SMs), topk_topp_triton.py, read at 0.17.1 to 0.22.1)",
            buffer / (t.vocab() * 4),
            t.vocab(),
            mib(buffer)
        ));
    }
    if workspace > 0 {
        parts.push(format!(
            "PyTorch's cuBLAS workspace allocated at the profile's first GEMM ({:.3} MiB on compute capability {}.{}; CublasHandlePool.cpp)",
            mib(workspace),
            gpu.sm_major,
            gpu.sm_minor
        ));
    }
    Some(format!("profile peak also holds {}", parts.join(", ")))
}
