//! vLLM's hybrid models (Mamba, linear attention): `max_num_seqs (N) exceeds available Mamba
//! cache blocks (M)`.
//!
//! Read in the vLLM 0.23.0 and 0.28.0 sdists on PyPI (the releases the collected messages name),
//! and in 0.20.0, 0.21.0, 0.22.0 and 0.22.1: the check and its text are the same in all of them.
//! 0.19.0 and 0.19.1 do not raise; they shrink the capture sizes to the blocks and warn
//! (`adjust_cudagraph_sizes_for_mamba_cache`). `vram capacity` predicts it from 0.20
//! (`vram_plan::capacity`'s `vllm_mamba_blocks_short`):
//!
//! * `vllm/config/compilation.py`, `resolve_cudagraph_mode_and_sizes`, called by
//!   `v1/worker/gpu_model_runner.py` once the KV cache is sized (not during the profile run),
//!   raises `max_num_seqs (N) exceeds available Mamba cache blocks (M). Each decode sequence
//!   requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower
//!   max_num_seqs to at most M or increase gpu_memory_utilization.` when the model has Mamba
//!   layers, the CUDA-graph mode has full graphs, and `max_num_reqs > kv_cache_config.num_blocks`.
//! * M is `kv_cache_config.num_blocks`: the whole pool the attention layers' KV blocks and the
//!   Mamba layers' state blocks share (`v1/core/kv_cache_utils.py`, `get_num_blocks`:
//!   `available_memory // page_size // layers per group`, the page size made uniform across
//!   groups, one layer's Mamba state per page). The budget is the KV cache's: what
//!   `gpu_memory_utilization` × the device leaves after the weights and the profile run (the
//!   log's `Available KV cache memory`), per GPU. One sequence's state takes one block whatever
//!   its length, so M grows in proportion to that memory and not with `max_model_len`.
//! * The engine's remedies are the message's two; the condition names two more, cheapest
//!   first: a graph mode without whole-forward graphs (`PIECEWISE`, which keeps torch.compile and
//!   the piecewise graphs; `config/compilation.py`, `has_full_cudagraphs`), and `--enforce-eager`
//!   (the mode `NONE`, no torch.compile either; `config/vllm.py`). vLLM's CUDA Graphs design
//!   document (docs.vllm.ai, design/cuda_graphs) ranks them: piecewise graphs give "some
//!   speedup", full graphs "further reduce the latency"; it gives no figure.
//!   Hybrid models otherwise default to `FULL_AND_PIECEWISE` (`model_executor/models/config.py`,
//!   `MambaModelConfig`), so the default `max_num_seqs` (`engine/arg_utils.py`: 1024 on a GPU of
//!   70 GiB or more that is not an A100, 256 below) meets it whenever the pool is smaller.

use crate::diagnose::human_bytes;
use crate::profile::StartupProfile;
use crate::serving::{num, paren_after, ServingDiagnosis, ServingError, ServingRemedy};
use vram_plan::capacity::CudagraphMode;

/// Reads the message from the flattened, lower-cased text ([`crate::serving::parse`]'s).
pub(crate) fn parse(flat: &str) -> Option<ServingError> {
    const KEY: &str = "exceeds available mamba cache blocks";
    let i = flat.find(KEY)?;
    // The last `max_num_seqs` before the key: a pasted log's configuration line names it too.
    let max_num_seqs = num(&paren_after(
        &flat[flat[..i].rfind("max_num_seqs")?..i],
        "max_num_seqs",
    )?)?;
    let blocks = num(&paren_after(flat, KEY)?)?;
    Some(ServingError::VllmMambaBlocks {
        max_num_seqs,
        blocks,
    })
}

/// The knob, the explanation and the remedies with the message's own figures.
pub(crate) fn explain(
    max_num_seqs: u64,
    blocks: u64,
) -> (&'static str, String, Vec<ServingRemedy>) {
    let grow = max_num_seqs as f64 / blocks.max(1) as f64;
    let remedies = vec![
        ServingRemedy {
            action: format!("--max-num-seqs {blocks}"),
            enough: blocks > 0,
            detail: format!(
                "vLLM refuses when max_num_seqs exceeds the pool's {blocks} blocks; at {blocks} every sequence the decode CUDA graphs are captured for has its state block, and a smaller max_num_seqs takes nothing from the pool (the graphs and the profile run's dummy batch only get smaller)"
            ),
        },
        ServingRemedy {
            action: "raise --gpu-memory-utilization".into(),
            enough: false,
            detail: format!(
                "the pool grows in proportion to the KV cache's memory, the rest of the budget staying as it is: {max_num_seqs} blocks need {grow:.2}x the memory that held {blocks}. That helps when the added share of the GPU is free; when the share is already near the whole GPU the pool cannot grow that much and no utilization is enough. The log's `Available KV cache memory` line, pasted with the error, sizes it"
            ),
        },
        ServingRemedy {
            action: CudagraphMode::Piecewise.compilation_config_flag(),
            enough: true,
            detail: "the check is made only when the CUDA-graph mode captures whole-forward graphs (has_full_cudagraphs); PIECEWISE keeps torch.compile and the graphs between the attention calls and drops the whole-forward decode graphs, and the scheduler then runs at most as many sequences as the pool holds. vLLM's CUDA Graphs design document says piecewise graphs give some speedup and full graphs reduce the latency further; how much decode speed it costs is not measured here. Under -O0, -cc.mode=none or TORCH_COMPILE_DISABLE=1 vLLM turns a piecewise mode into NONE, which also starts".into(),
        },
        ServingRemedy {
            action: "--enforce-eager".into(),
            enough: true,
            detail: "without CUDA graphs or torch.compile vLLM makes no such check and starts, its scheduler running at most as many sequences as the pool holds, at the cost of slower decode steps than either graph mode".into(),
        },
    ];
    let explanation = format!(
        "a hybrid model keeps each running sequence's Mamba (linear-attention) state in one block of the pool it shares with the attention layers' KV cache, whatever the sequence's length; the pool is the KV cache's memory (gpu_memory_utilization × the GPU's memory less the weights and the profile run) over the bytes of one block, {blocks} blocks here. vLLM captures the decode CUDA graphs for up to max_num_seqs ({max_num_seqs}) sequences and, once the pool is sized, refuses when they could not all hold a state block"
    );
    ("max_num_seqs", explanation, remedies)
}

/// With the engine's `Available KV cache memory` (and the device and utilization when the paste
/// prints them): one block's bytes, and the utilization that holds `max_num_seqs` blocks, or why
/// none does.
pub(crate) fn apply_profile(
    d: &mut ServingDiagnosis,
    max_num_seqs: u64,
    blocks: u64,
    p: &StartupProfile,
) {
    let hb = human_bytes;
    let Some(kv) = p.kv_bytes.and_then(|k| u64::try_from(k).ok()) else {
        return;
    };
    if blocks == 0 {
        return;
    }
    let block = kv / blocks;
    let extra = block.saturating_mul(max_num_seqs.saturating_sub(blocks));
    let Some(i) = d
        .remedies
        .iter()
        .position(|r| r.action == "raise --gpu-memory-utilization")
    else {
        return;
    };
    d.remedies[i] = match (p.total_bytes, p.utilization) {
        (Some(t), Some(u)) if t > 0 => {
            let need = ((u + extra as f64 / t as f64) * 100.0).ceil() / 100.0;
            ServingRemedy {
                action: if need <= 0.99 {
                    format!("--gpu-memory-utilization {need:.2}")
                } else {
                    "raise --gpu-memory-utilization".into()
                },
                enough: need <= 0.99,
                detail: format!(
                    "{} of KV cache held {blocks} blocks ({} each); {max_num_seqs} need {} more: {u} + {} / {} = {need:.2} of the device{}",
                    hb(kv),
                    hb(block),
                    hb(extra),
                    hb(extra),
                    hb(t),
                    if need > 0.99 {
                        ", more than the GPU has beyond the weights: no utilization is enough, lower --max-num-seqs"
                    } else {
                        ", as long as that share is free at start-up"
                    }
                ),
            }
        }
        _ => ServingRemedy {
            action: "raise --gpu-memory-utilization".into(),
            enough: false,
            detail: format!(
                "{} of KV cache held {blocks} blocks ({} each); {max_num_seqs} need {} more: raise it by {} divided by the GPU's memory, when that much is free beyond the current share",
                hb(kv),
                hb(block),
                hb(extra),
                hb(extra)
            ),
        },
    };
}
