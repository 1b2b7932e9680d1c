//! Serving capacity before launch: what vLLM or SGLang would log at start-up for a model on a
//! GPU — weights per GPU, memory outside PyTorch, the profiling run's activation peak, CUDA
//! graphs, the KV cache in bytes and tokens, the concurrency at `max_model_len` — and whether
//! it starts.
//!
//! Each engine's rule is read from its source at a pinned version:
//!
//! - **vLLM 0.11 (V1 engine)**, `vllm/v1/worker/gpu_worker.py` `Worker.determine_available_memory`:
//!   `available = total × gpu_memory_utilization − (weights + torch peak increase of the profile
//!   run + non-torch increase)`, measured from a snapshot taken after the CUDA context exists
//!   (so the context is outside the budget's terms but inside `total`). CUDA graphs are
//!   captured after the KV cache is allocated (`compile_or_warm_up_model`) and so are not
//!   subtracted: they come on top of the budget. The KV cache's layout per layer kind (full,
//!   sliding, MLA latent, Mamba2 / Gated DeltaNet state, hybrid models' shared pages) is
//!   `vllm_layout` (`vllm/v1/kv_cache_interface.py` page sizes, `vllm/v1/core/kv_cache_utils.py`
//!   grouping, `vllm/model_executor/models/config.py` hybrid block alignment; reported as
//!   [`Capacity::kv_groups`]): `num_blocks = available // page // layers per group`, the
//!   logged token count is `num_blocks // groups × smallest block size`, and the concurrency at
//!   `max_model_len` is `num_blocks` over the blocks one request needs in every group (full
//!   and MLA `⌈max_model_len / block⌉`, sliding `⌈min(window − 1 + max_num_batched_tokens,
//!   max_model_len) / block⌉ + 1`, a state one). `check_enough_kv_cache_memory` refuses to
//!   start when one request of `max_model_len` does not fit (every layer's blocks times the
//!   page), and names the largest length that would.
//!   `vllm/engine/arg_utils.py` `_set_default_args`: `vllm serve` defaults to
//!   `max_num_batched_tokens` 8192 and `max_num_seqs` 1024 on GPUs of at least 70 GiB other than
//!   the A100, else 2048 and 256. The profile run (`GPUModelRunner.profile_run`) is a forward of
//!   `max_num_batched_tokens` tokens and a sampler run over `min(max_num_seqs, tokens)` logits.
//!   From 0.20 (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` on by default) the CUDA graphs'
//!   estimated memory is subtracted before the KV cache is sized; before, they are captured
//!   after it and must fit what the budget, the CUDA context and the profile's released peak
//!   leave (`graphs`). From 0.20 a hybrid model (Mamba2 / Gated DeltaNet state) whose pool has
//!   fewer blocks than `max_num_seqs` is refused before the graphs are captured
//!   (`engine::vllm_mamba_blocks_short`).
//! - **vLLM V0** (0.5–0.7, `worker.py` `determine_num_available_blocks`): the same budget less
//!   the profile's peak and the memory outside PyTorch; the profile run is one batch of
//!   `max(max_model_len, 2048)` tokens (no chunked prefill up to 32K) over `max_num_seqs` = 256
//!   sequences, sampled with top-k and top-p; the logged concurrency is tokens over
//!   `max_model_len`.
//! - **SGLang 0.5** (`python/sglang/srt/server_args.py` `_handle_gpu_memory_settings`,
//!   `model_executor/model_runner.py` `profile_max_num_token`): `chunked_prefill_size` and
//!   `cuda_graph_max_bs` from the GPU's memory bucket (< 20, 35, 60, 90, 160 GiB),
//!   `mem_fraction_static = (gpu_mem − reserved) / gpu_mem` with `reserved = 512 +
//!   max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 + tp × pp / 8 × 1024` MiB (at
//!   least 10 GiB above 60 GiB), then `rest = free after loading − free before loading × (1 −
//!   mem_fraction_static)` and `max_total_num_tokens = rest // cell_size`, `cell_size = kv_heads
//!   × (head_dim + v_head_dim) × layers × dtype` (MLA: `(kv_lora_rank + qk_rope_head_dim) ×
//!   layers × dtype`); zero or less is "Not enough memory. Please try to increase
//!   --mem-fraction-static." A Mamba2 / Gated DeltaNet model's states take `rest × 0.9 / 1.9`
//!   first (`MambaPool`, `--mamba-full-memory-ratio`, [`KvGroup::state_slots`]); a model with
//!   sliding layers shares the all-full token count out with `swa = 0.8 × full` (`SWAKVPool`,
//!   `set_num_token_hybrid`).
//! - **SGLang 0.4** (`ServerArgs.__post_init__`): `mem_fraction_static` 0.88/0.87/0.85/0.81/0.79
//!   by TP size (1, 2, 4, 8, 16), chunked prefill 2048 and CUDA graphs up to 8 (TP < 4) or 80
//!   below 25,000 MiB, else 8192 and 160; `profile_max_num_token` as in 0.5.
//!
//! The profile run's peak is computed from the live set the engines' modules hold (see
//! `forward_peak` and `sampler_peak`), for the Llama-style decoder layer whatever the model.
//! What is estimated rather than read: CUDA-graph memory, the memory outside PyTorch, and
//! SGLang's distributed-init memory on GPUs other than the one measured (each named in
//! [`Capacity::assumes`]). Checked against eleven real logs by `crates/vram-cli/tests/capacity.rs`.

use serde::{Deserialize, Serialize};
use vram_model::arch::Transformer;
use vram_model::blocks::CacheLayout;
use vram_model::fmt::thousands;
use vram_model::gpu::Gpu;

use crate::error::{Error, Result};

mod activation;
mod encoder;
mod engine;
mod graphs;
mod kv_layout;
mod layers;
mod lengths;
mod non_torch;
mod registry;
mod sampler;
mod sglang;
mod vllm;
mod weights;

pub use engine::{
    vllm_compiles, vllm_default_utilization, vllm_v2_runner, vllm_v2_runner_of,
    VLLM_DEFAULT_UTILIZATION, VLLM_V2_RUNNER_DEFAULTS, VLLM_V2_RUNNER_LACKS,
};
pub use kv_layout::{KvGroup, KvKind, KV_KINDS};
pub use layers::{kv_bytes_per_token, layer_caches};
pub use lengths::parse_max_model_len;
pub use non_torch::Interconnect;
pub use registry::{registry_check, RegistryCheck};
pub use weights::{allocated_rounding, allocator_rounding, weights_per_gpu};

use activation::*;
use graphs::*;
use kv_layout::*;
use layers::*;
use sglang::*;
use vllm::*;
use weights::*;

const GIB: f64 = (1u64 << 30) as f64;

const MIB: u64 = 1 << 20;

/// The serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// vLLM (V1 engine).
    Vllm,
    /// SGLang.
    Sglang,
}

impl Engine {
    /// The engine's own flag for the longest request: vLLM `--max-model-len`, SGLang
    /// `--context-length` (each parser lacks the other's: vLLM v0.22.1 `engine/arg_utils.py`,
    /// SGLang v0.5.3 `srt/server_args.py`).
    pub fn len_flag(self) -> &'static str {
        match self {
            Engine::Vllm => "--max-model-len",
            Engine::Sglang => "--context-length",
        }
    }
    /// The engine's own flag for [`Knobs::max_num_seqs`]: vLLM `--max-num-seqs`, SGLang
    /// `--max-running-requests`.
    pub fn seqs_flag(self) -> &'static str {
        match self {
            Engine::Vllm => "--max-num-seqs",
            Engine::Sglang => "--max-running-requests",
        }
    }
    /// The engine's own flag for [`Knobs::block_size`]: vLLM `--block-size`, SGLang
    /// `--page-size`.
    pub fn block_flag(self) -> &'static str {
        match self {
            Engine::Vllm => "--block-size",
            Engine::Sglang => "--page-size",
        }
    }
    /// `vllm` or `sglang`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }
    /// `vLLM` or `SGLang`: the name as people write it.
    pub fn label(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
        }
    }
    /// The version whose source the rules were read from.
    pub fn pinned_version(self) -> &'static str {
        match self {
            Engine::Vllm => "0.11",
            Engine::Sglang => "0.5",
        }
    }
    /// Versions whose rules are modelled (`--engine-version`; a patch release such as `0.6.5`
    /// takes its minor version's rules and the patch-level changes named in [`Knobs::engine_version`]).
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &[
                "0.5", "0.6", "0.7", "0.8", "0.9", "0.10", "0.11", "0.12", "0.13", "0.14", "0.15",
                "0.16", "0.17", "0.18", "0.19", "0.20", "0.21", "0.22", "0.23", "0.24", "0.25",
                "0.26",
            ],
            Engine::Sglang => &["0.4", "0.5"],
        }
    }
}

/// What the graphs assume of a host whose NVIDIA driver branch is `driver` (the line the
/// capacity model's assumptions carry for it), where it changes a figure: before R550
/// (`graphs.rs`). `None` for later branches and an unknown driver.
pub fn driver_graph_assumption(driver: Option<u32>) -> Option<String> {
    graphs::driver_assumption(&Knobs {
        driver,
        ..Knobs::default()
    })
}

/// The NVIDIA driver's branch (its major version) from `--driver`: the version as `nvidia-smi`'s
/// `Driver Version:` or `collect_env`'s `Nvidia driver version:` prints it (`535.161.08`,
/// `550.54.15`), or the branch alone (`535`, `R535`). A CUDA version (`12.4`, what `nvidia-smi`
/// prints beside the driver) is refused by name, as is a branch before R410, the first driver of
/// CUDA 10.0 (CUDA 10.0.130 release notes: >= 410.48), which CUDA graphs need.
pub fn parse_driver(s: &str) -> std::result::Result<u32, String> {
    let form = "expected the NVIDIA driver's version as nvidia-smi prints it (535.161.08) or its branch (535)";
    let v = s.trim();
    let v = v.strip_prefix(['R', 'r']).unwrap_or(v);
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || rest.len() > 2 || !rest.iter().all(|p| digits(p)) {
        return Err(form.to_string());
    }
    if major.len() <= 2 && !rest.is_empty() {
        return Err(format!(
            "{v} reads as a CUDA version (nvidia-smi's `CUDA Version:`), not the driver's; {form}"
        ));
    }
    let branch: u32 = match (major.len(), major.parse()) {
        (3, Ok(n)) => n,
        _ => return Err(form.to_string()),
    };
    if branch < 410 {
        return Err(format!(
            "R{branch} is older than R410, the first driver of CUDA 10.0, which CUDA graphs need; {form}"
        ));
    }
    Ok(branch)
}

/// `major.minor[.patch]` as numbers (`0.6.5` → `[0, 6, 5]`); `None` if it is not of that form.
pub fn parse_version(v: &str) -> Option<[u32; 3]> {
    let mut out = [0u32; 3];
    let mut n = 0;
    // "0.6.4", "v0.11", "0.4.3.post4", "0.6.4post1": the leading numbers, at most three.
    for p in v.trim_start_matches('v').split('.').take(3) {
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(x) = digits.parse() else { break };
        out[n] = x;
        n += 1;
        if digits.len() < p.len() {
            break;
        }
    }
    (n >= 2).then_some(out)
}

/// How much of a release `--engine-version` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pin {
    /// No patch (`0.8`), or no version at all: any release of the series.
    Series,
    /// One release: its `major.minor.patch` and its post-release number (`0.6.3.post1` → 1).
    Release {
        /// The post-release number, 0 for none.
        post: u32,
    },
}

/// `--engine-version` read once: its `major.minor.patch` ([`parse_version`]) and how much of a
/// release it names (`0.8`: the series; `0.8.4`, `0.6.3.post1`: that release).
pub fn parse_engine_version(v: &str) -> Option<([u32; 3], Pin)> {
    let numbers = parse_version(v)?;
    let parts = v
        .trim_start_matches('v')
        .split('.')
        .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    let pin = if parts < 3 {
        Pin::Series
    } else {
        let post = v
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .nth(3)
            .map_or(0, |p| p.parse().unwrap_or(0));
        Pin::Release { post }
    };
    Some((numbers, pin))
}

impl Engine {
    /// Why vram does not model this release (the first change past the newest version it
    /// models, read from the engine's source at that release); `None` when it is modelled or
    /// older. vLLM 0.21.0–0.33.0 were read release by release; 0.23 to 0.26 move no byte vram
    /// counts on the V1 runner with their defaults but 0.26's CUDA-graph estimate on ROCm
    /// (BENCHMARKS.md, "vLLM past 0.20").
    pub fn unmodelled(self, v: [u32; 3]) -> Option<&'static str> {
        match self {
            Engine::Vllm if v >= [0, 27, 0] => Some(
                "vLLM 0.27 changed the start-up memory profile vram models: memory_profiling counts the fall in free device memory since before the engine was created plus the profile's transient peak (utils/mem_utils.py total_consumed) in place of the weights, the non-torch increase and the torch peak increase; vram models vLLM 0.5 to 0.26",
            ),
            _ => None,
        }
    }
    /// The version in force: the asked one, or the pinned one.
    fn version_in_force(self, k: &Knobs) -> [u32; 3] {
        k.engine_version
            .or_else(|| parse_version(self.pinned_version()))
            .unwrap_or([0, 0, 0])
    }
}

/// Weight storage (`--quantization`, or the config's `quantization_config.quant_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// The model's dtype.
    None,
    /// FP8 weights (one byte, per-tensor or per-channel scales).
    Fp8,
    /// INT8 weights (W8A8, one byte with per-channel scales: compressed-tensors' `w8a8`).
    Int8,
    /// AWQ 4-bit: fp16 scale and 4-bit zero per group of the checkpoint's `group_size`
    /// (128 where no config gives it; [`Quantization::packed_format`]).
    Awq,
    /// GPTQ 4-bit: fp16 scale and 4-bit zero per group of the checkpoint's `group_size` (-1: one
    /// group per input row; 128 where no config gives it; [`Quantization::packed_format`]).
    Gptq,
    /// compressed-tensors W4A16 (`pack-quantized` int4, from the checkpoint's config): a scale
    /// per group, zero points only when asymmetric (`vram_model::finetune::WeightFormat::Wna16`).
    Wna16,
    /// bitsandbytes NF4 as the engines quantize it in flight: block 64, with the block absmax
    /// itself quantized (a uint8 per block and an fp32 absmax per 256 blocks). vLLM's loader
    /// calls `quantize_4bit(..., compress_statistics=True, quant_type="nf4")` (`loader.py` at
    /// 0.6.6.post1, 0.7.2 and 0.8.5, `bitsandbytes_loader.py` at 0.10.1, 0.11.0 and 0.19.0), and
    /// SGLang's copy of it does the same (0.4.2). A checkpoint shipped in bitsandbytes keeps its
    /// own statistics (`QuantState.from_dict`), read from its `quantization_config`.
    Bitsandbytes,
    /// MXFP4: 4-bit elements, an 8-bit shared exponent per 32.
    Mxfp4,
}

/// How the engine loads one linear beyond its shape on this GPU: whether its AWQ/GPTQ kernel
/// is Marlin (`engine::marlin_runs`), and the input size before the TP split (a row-parallel
/// linear's rank holds `in/TP` of it; a column-parallel one all of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearLoad {
    /// A Marlin kernel runs the linear.
    pub marlin: bool,
    /// The linear's input size before the TP split.
    pub full_inp: u64,
    /// One of an MoE layer's expert banks (`GPTQMarlinMoEMethod` keeps its `qzeros`).
    pub moe_bank: bool,
    /// Whether what the engine frees after loading leaves its weights figure: vLLM on CUDA
    /// measures `memory_allocated`; a measure of free device memory (SGLang, vLLM on ROCm)
    /// still sees the freed blocks, cached by PyTorch's allocator.
    pub freed_leaves: bool,
    /// The group sizes `MacheteLinearKernel` takes (0 for -1) where vLLM's GPTQ- or AWQ-Marlin
    /// method picks its kernel by `choose_mp_linear_kernel` on a GPU where Machete, listed before
    /// Marlin, can run (`engine::machete_groups`); empty elsewhere. Whether this linear's shape
    /// lets it is decided in [`Quantization::linear_parts`].
    pub machete_groups: &'static [u64],
}

impl Quantization {
    /// The tensors' bytes of one `out × in` linear stored under `self`, as
    /// [`vram_model::finetune::linear_tensors`] describes each format (`dtype`: bytes of the
    /// model dtype; `stored`: the checkpoint's own storage, `vram_model::blocks::Quant`;
    /// `in_flight_dq`: whether bitsandbytes' statistics are the engines' in-flight ones rather
    /// than the checkpoint's; `expert`: an expert bank, the only linears MXFP4 packs). AWQ,
    /// GPTQ and compressed-tensors W4A16 in [`Quantization::packed_format`]'s format (vLLM
    /// `AWQLinearMethod`/`GPTQLinearMethod.create_weights`, their Marlin methods and
    /// `CompressedTensorsWNA16`); INT8 W8A8
    /// as an int8 weight with an fp32 scale per output row; FP8 one byte a weight, with a
    /// block-wise checkpoint's fp32 `weight_scale_inv` per block, else its per-tensor scale
    /// (one value, left out).
    #[allow(clippy::too_many_arguments)]
    pub fn linear_parts(
        self,
        dtype: u64,
        stored: vram_model::blocks::Quant,
        in_flight_dq: bool,
        out: u64,
        inp: u64,
        expert: bool,
        load: LinearLoad,
    ) -> Vec<u64> {
        use vram_model::blocks::Quant;
        use vram_model::finetune::{
            fp8_block_linear_tensors, linear_parts, linear_tensors, mxfp4_linear_tensors,
            WeightFormat,
        };
        let plain = if dtype == 4 {
            WeightFormat::Fp32
        } else {
            WeightFormat::Bf16
        };
        let bytes = |v: Vec<vram_model::finetune::LinearTensor>| -> Vec<u64> {
            v.iter().map(|t| t.bytes).collect()
        };
        match self {
            Quantization::None => linear_parts(plain, false, out, inp),
            Quantization::Mxfp4 if !expert => linear_parts(plain, false, out, inp),
            Quantization::Mxfp4 => bytes(mxfp4_linear_tensors(out, inp)),
            // A block-wise FP8 checkpoint (`weight_block_size`): vLLM's `Fp8LinearMethod`
            // (block quant, read at 0.9.1) creates `weight_scale_inv` fp32
            // `[ceil(out/bn), ceil(in/bk)]` on the rank's partition and keeps it. A bf16
            // checkpoint quantized in flight (or a per-tensor FP8 one) keeps one fp32 scale.
            Quantization::Fp8 => match stored {
                Quant::Fp8Block { bn, bk, .. } => bytes(fp8_block_linear_tensors(out, inp, bn, bk)),
                _ => vec![out * inp],
            },
            Quantization::Int8 => linear_parts(WeightFormat::Int8, false, out, inp),
            // The checkpoint's group size and symmetry (vLLM's `CompressedTensorsWNA16` and its
            // Marlin MoE method hold the checkpoint's tensors, repacked at the same sizes).
            // Channel-wise AWQ (`group_size: -1`): `AWQLinearMethod` and
            // `AWQMarlinLinearMethod.create_weights` take the group as the linear's whole input
            // (`input_size`, before the TP split) and make `input_size_per_partition // group`
            // rows of `qzeros` and `scales` (read at 0.6.4, 0.10.1, 0.19.0 and 0.22.0): one on
            // a column-parallel linear, none on a row-parallel one at TP > 1 (where only
            // Marlin loads it: `engine::vllm_awq_refusal`).
            //
            // On Hopper vLLM's AWQ-Marlin linears run Machete where it takes them (from 0.19.0,
            // `engine::machete_groups`; the same shape rules as GPTQ's below). AWQ has zero
            // points, so Machete's `transform_w_zp` replaces the packed int32 `qzeros`
            // `[groups, out/8]` with `-scales × zeros` in the scales' dtype, `[groups, out]`.
            Quantization::Awq | Quantization::Wna16 => {
                let format = self
                    .packed_format(stored)
                    .expect("AWQ and W4A16 are packed formats");
                let machete = match format {
                    WeightFormat::Awq { group } => {
                        load.marlin
                            && !load.moe_bank
                            && load.machete_groups.contains(&group)
                            && inp % 64 == 0
                            && out % 128 == 0
                    }
                    _ => false,
                };
                let rows = if format == (WeightFormat::Awq { group: 0 }) {
                    inp / load.full_inp.max(inp)
                } else {
                    1
                };
                linear_tensors(format, false, out, inp)
                    .iter()
                    .zip(linear_parts(format, false, out, inp))
                    .map(|(t, b)| match t.name {
                        "qzeros" if machete => b * rows * 2 * dtype,
                        "qzeros" | "scales" => b * rows,
                        _ => b,
                    })
                    .collect()
            }
            // The checkpoint's `g_idx` is loaded, then emptied unless `desc_act` (act-order)
            // is set: vLLM's `GPTQLinearMethod.process_weights_after_loading` sets it to
            // `torch.empty((0,))` and the Marlin path (`MarlinLinearKernel`, read at 0.9.1,
            // 0.10.1, 0.19.0) to `marlin_make_empty_g_idx`. With `desc_act`, Marlin keeps
            // `g_idx` sorted and adds `g_idx_sort_indices`, both int32 over the rank's input
            // rows. Marlin runs GPTQ without zero points (`GPTQMarlinLinearMethod`:
            // `zero_points=False`), so after loading it replaces `qzeros` with an empty tensor
            // too; an expert bank's `w13_qzeros`/`w2_qzeros` stay (`GPTQMarlinMoEMethod.
            // process_weights_after_loading` replaces its weights, scales and `g_idx` only). With `desc_act`, every rank holds the scales (and `qzeros`) of the whole
            // input (`marlin_repeat_scales_on_all_ranks`; the plain `GPTQLinearMethod` does
            // the same for a row-parallel linear): a row-parallel linear at TP > 1 keeps
            // `in/group` rows of scales, not `in/TP/group`.
            //
            // On Hopper vLLM's GPTQ-Marlin linears run `MacheteLinearKernel` where it can
            // implement them (`can_implement` in `machete.py`: a group size it takes, the rank's
            // input a multiple of 64 and output of 128, and no act-order on a split input; read
            // at 0.6.2, 0.6.3, 0.7.2, 0.8.5, 0.9.2 and 0.10.0 to 0.23.0). Its
            // `process_weights_after_loading` repacks `qweight` at the same size and keeps the
            // scales, but leaves `qzeros` as loaded (it rewrites them only with zero points, which
            // GPTQ has not) and leaves `g_idx` as loaded whatever `desc_act` (nothing empties it);
            // with act-order it keeps `perm = argsort(g_idx).to(int)`, int32 over the rank's
            // input, in its `act_perm`, the size of Marlin's `g_idx_sort_indices`.
            Quantization::Gptq => {
                let format = self.packed_format(stored).expect("GPTQ is a packed format");
                let desc_act = matches!(format, WeightFormat::Gptq { desc_act: true, .. });
                let group = match format {
                    WeightFormat::Gptq { group, .. } => group,
                    _ => 128,
                };
                let rows_inp = if desc_act {
                    load.full_inp.max(inp)
                } else {
                    inp
                };
                let whole = linear_tensors(format, false, out, rows_inp);
                // Scales and zeros over the whole input where act-order keeps them whole.
                let rows = |t: &vram_model::finetune::LinearTensor| match t.name {
                    "scales" | "qzeros" => whole
                        .iter()
                        .find(|w| w.name == t.name)
                        .map_or(t.bytes, |w| w.bytes),
                    _ => t.bytes,
                };
                let machete = load.marlin
                    && !load.moe_bank
                    && load.machete_groups.contains(&group)
                    && inp % 64 == 0
                    && out % 128 == 0
                    && !(desc_act && inp != load.full_inp.max(inp));
                if machete {
                    let mut v: Vec<u64> = linear_tensors(format, false, out, inp)
                        .iter()
                        .map(rows)
                        .collect();
                    if desc_act {
                        v.push(4 * inp); // act_perm's `perm`
                    }
                    return v;
                }
                let mut v: Vec<u64> = linear_tensors(format, false, out, inp)
                    .iter()
                    .filter(|t| desc_act || t.name != "g_idx")
                    .filter(|t| {
                        !(load.marlin && !load.moe_bank && load.freed_leaves && t.name == "qzeros")
                    })
                    .map(|t| {
                        let b = rows(t);
                        // `GPTQMarlinMoEMethod.create_weights` makes a bank's `w13_qzeros`/
                        // `w2_qzeros` in the model dtype, not the checkpoint's int32 (read at
                        // vLLM main 00161ce), as `vram_model`'s engine storage counts them.
                        if t.name == "qzeros" && load.marlin && load.moe_bank {
                            b / 4 * dtype
                        } else {
                            b
                        }
                    })
                    .collect();
                if desc_act && load.marlin {
                    v.push(4 * inp); // g_idx_sort_indices
                }
                v
            }
            Quantization::Bitsandbytes => {
                let dq = match stored {
                    Quant::Packed { double_quant, .. } if !in_flight_dq => double_quant,
                    _ => true,
                };
                linear_parts(WeightFormat::Nf4, dq, out, inp)
            }
        }
    }
    /// The packed format AWQ, GPTQ and compressed-tensors W4A16 hold their linears in: the
    /// checkpoint's own where its config is of this kind (`quantization_config.group_size`, -1
    /// one group per input row, read by `vram_model::read`; GPTQ's `desc_act`; W4A16's
    /// symmetry), as vLLM's `AWQConfig`/`GPTQConfig`/`CompressedTensorsConfig.from_config` read
    /// it; else, `--quantization` over a config that gives none, the quantizers' default group
    /// of 128 (`GPTQConfig`/`AwqConfig`; act-order off, symmetric). `None` for the other kinds.
    pub fn packed_format(
        self,
        stored: vram_model::blocks::Quant,
    ) -> Option<vram_model::finetune::WeightFormat> {
        use vram_model::blocks::Quant;
        use vram_model::finetune::WeightFormat;
        let own = match stored {
            Quant::Packed { format, .. } => Some(format),
            _ => None,
        };
        Some(match (self, own) {
            (Quantization::Awq, Some(f @ WeightFormat::Awq { .. }))
            | (Quantization::Gptq, Some(f @ WeightFormat::Gptq { .. }))
            | (Quantization::Wna16, Some(f @ WeightFormat::Wna16 { .. })) => f,
            (Quantization::Awq, _) => WeightFormat::Awq { group: 128 },
            (Quantization::Gptq, _) => WeightFormat::Gptq {
                group: 128,
                desc_act: false,
            },
            (Quantization::Wna16, _) => WeightFormat::Wna16 {
                group: 128,
                symmetric: true,
            },
            _ => return None,
        })
    }

    /// Parses a `--quantization` value or a `quant_method`.
    pub fn parse(s: &str) -> Option<Quantization> {
        Some(match s.to_ascii_lowercase().as_str() {
            "none" => Quantization::None,
            "fp8" | "fbgemm_fp8" | "compressed-tensors-fp8" => Quantization::Fp8,
            "int8" | "w8a8" | "compressed-tensors-w8a8" => Quantization::Int8,
            "awq" | "awq_marlin" => Quantization::Awq,
            "gptq" | "gptq_marlin" => Quantization::Gptq,
            "bitsandbytes" | "bnb" => Quantization::Bitsandbytes,
            "mxfp4" => Quantization::Mxfp4,
            _ => return None,
        })
    }
}

/// vLLM V1's CUDA-graph mode (`CompilationConfig.cudagraph_mode`, set with `--compilation-config
/// '{"cudagraph_mode": "PIECEWISE"}'` or `-cc.cudagraph_mode=PIECEWISE`), as
/// `config/compilation.py` names them (`CUDAGraphMode`, read at 0.11.0-0.13.0, 0.15.0-0.22.0).
/// Unset, the optimization level's default applies (`OPTIMIZATION_LEVEL_TO_CONFIG` from 0.12:
/// `-O2`, the default level, and `-O3` take `FULL_AND_PIECEWISE`; 0.11's V1 default is the
/// same), and `--enforce-eager` makes it `NONE` whatever was asked (`VllmConfig.__post_init__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CudagraphMode {
    /// No CUDA graphs (torch.compile may still run).
    None,
    /// Piecewise graphs between the attention calls, at every capture size.
    Piecewise,
    /// Whole-forward graphs for every batch, at every capture size.
    Full,
    /// Whole-forward graphs for uniform decode batches only, up to `max_num_seqs`.
    FullDecodeOnly,
    /// Whole-forward decode graphs up to `max_num_seqs` and piecewise graphs for the rest.
    FullAndPiecewise,
}

impl CudagraphMode {
    /// vLLM's name for the mode (`CUDAGraphMode.name`).
    pub fn name(self) -> &'static str {
        match self {
            CudagraphMode::None => "NONE",
            CudagraphMode::Piecewise => "PIECEWISE",
            CudagraphMode::Full => "FULL",
            CudagraphMode::FullDecodeOnly => "FULL_DECODE_ONLY",
            CudagraphMode::FullAndPiecewise => "FULL_AND_PIECEWISE",
        }
    }
    /// `CUDAGraphMode.has_full_cudagraphs()`: the mode captures whole-forward graphs.
    pub fn has_full(self) -> bool {
        matches!(
            self,
            CudagraphMode::Full | CudagraphMode::FullDecodeOnly | CudagraphMode::FullAndPiecewise
        )
    }
    /// Whether mixed batches run piecewise graphs (`mixed_mode() == PIECEWISE`).
    pub fn has_piecewise(self) -> bool {
        matches!(
            self,
            CudagraphMode::Piecewise | CudagraphMode::FullAndPiecewise
        )
    }
    /// The `vllm serve` flag that sets this mode, as the remedies of `vram capacity` and
    /// `vram doctor` offer it: `--compilation-config '{"cudagraph_mode": "PIECEWISE"}'`.
    pub fn compilation_config_flag(self) -> String {
        vllm_compilation_config_flag("cudagraph_mode", &format!("\"{}\"", self.name()))
    }
}

/// vLLM's `--compilation-config` flag setting one `CompilationConfig` field to `value` (a JSON
/// value: `"PIECEWISE"` with its quotes, `[1, 2, 4]`), shell-quoted as a user types it; the one
/// spelling every remedy that changes the compilation config uses.
pub fn vllm_compilation_config_flag(field: &str, value: &str) -> String {
    format!("--compilation-config '{{\"{field}\": {value}}}'")
}

/// vLLM's compilation mode (`CompilationConfig.mode`, `CompilationMode` in
/// `config/compilation.py`, from 0.12, whose `level` it replaces; read at 0.12.0-0.22.0), set
/// with `-cc.mode=none` or `--compilation-config '{"mode": 0}'`; from 0.20
/// `TORCH_COMPILE_DISABLE=1` sets `NONE` ("This is equivalent to setting -cc.mode=none",
/// `VllmConfig.__post_init__`). Unset, the optimization level decides: `VLLM_COMPILE` above
/// `-O0`, `NONE` at `-O0`. Only `VLLM_COMPILE` splits the graph for piecewise CUDA graphs, so
/// under any other mode a piecewise graph mode becomes `NONE` ("Cudagraph mode ... is not
/// compatible with compilation mode ... Overriding to NONE"; at 0.12 every graph mode but
/// `NONE` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompilationMode {
    /// No torch.compile (`0`).
    None,
    /// Stock `torch.compile` (`1`).
    StockTorchCompile,
    /// Dynamo traced once (`2`).
    DynamoTraceOnce,
    /// vLLM's own piecewise compilation (`3`).
    VllmCompile,
}

impl CompilationMode {
    /// vLLM's name for the mode (`CompilationMode.name`).
    pub fn name(self) -> &'static str {
        match self {
            CompilationMode::None => "NONE",
            CompilationMode::StockTorchCompile => "STOCK_TORCH_COMPILE",
            CompilationMode::DynamoTraceOnce => "DYNAMO_TRACE_ONCE",
            CompilationMode::VllmCompile => "VLLM_COMPILE",
        }
    }
}

/// An attention backend the user chose for vLLM V1: `--attention-backend` (from 0.13) or the
/// `VLLM_ATTENTION_BACKEND` environment variable (read at 0.10.2 to 0.14.1, gone at 0.16.0; at
/// 0.13-0.14 `AttentionConfig` takes either). A chosen backend is tried alone: where its
/// `validate_configuration` finds reasons, `CudaPlatform.get_attn_backend_cls` raises rather
/// than fall back (`platforms/cuda.py`, read at 0.13.0, 0.17.1, 0.19.1, 0.20.2, 0.22.1), and
/// Gemma 4's config hook leaves a chosen backend alone (`Gemma4Config.verify_and_update_config`,
/// 0.20.2). What vram models of the choice: whether FlashAttention's graph-capture state
/// exists (`graphs::vllm_runs_flash_attention`) and the refusals [`engine::attention_backend_refusal`]
/// reads. Each backend's own buffers (FlashInfer's workspace, Triton's softmax segments) are
/// not modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttentionBackend {
    /// `FLASH_ATTN` (FlashAttention 2, or 3 on Hopper).
    FlashAttn,
    /// `TRITON_ATTN`.
    TritonAttn,
    /// `FLASHINFER`.
    Flashinfer,
    /// `FLEX_ATTENTION`.
    FlexAttention,
}

impl AttentionBackend {
    /// vLLM's name for the backend (`AttentionBackendEnum`).
    pub fn name(self) -> &'static str {
        match self {
            AttentionBackend::FlashAttn => "FLASH_ATTN",
            AttentionBackend::TritonAttn => "TRITON_ATTN",
            AttentionBackend::Flashinfer => "FLASHINFER",
            AttentionBackend::FlexAttention => "FLEX_ATTENTION",
        }
    }
}

/// A memory fraction (`--gpu-memory-utilization`, `--mem-fraction-static`) as people read it: a
/// value of at most four decimals (one typed, SGLang's defaults, which it rounds to three,
/// `round((gpu_mem - reserved) / gpu_mem, 3)`) as it is spelled, and one computed beyond that
/// (SGLang's multimodal reduction, `mem_fraction_static × factor`, 0.7587200976562499) to three
/// decimals, as SGLang itself writes it ("Automatically reduce --mem-fraction-static to
/// {:.3f}", `model_runner.py` at 0.4.x). The reports' `--json` keeps the exact value the
/// budget was computed from.
pub fn fraction_text(f: f64) -> String {
    if (f * 1e4).round() / 1e4 == f {
        format!("{f}")
    } else {
        format!("{f:.3}")
    }
}

/// The engine's knobs, named as the engine names them. `None`: the engine's default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Knobs {
    /// vLLM `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: Option<f64>,
    /// `--max-model-len` (SGLang `--context-length`); default the model's positions.
    pub max_model_len: Option<u64>,
    /// vLLM `--max-num-seqs`; SGLang `--max-running-requests`.
    pub max_num_seqs: Option<u64>,
    /// vLLM `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u64>,
    /// Bytes per KV element (`--kv-cache-dtype`: auto = the model dtype, fp8 = 1).
    pub kv_bytes: Option<u64>,
    /// `--tensor-parallel-size`.
    pub tp: u64,
    /// `--pipeline-parallel-size`.
    pub pp: u64,
    /// vLLM `--enforce-eager` (no CUDA graphs; SGLang `--disable-cuda-graph`).
    pub enforce_eager: bool,
    /// vLLM `--block-size` (16); SGLang `--page-size` (1).
    pub block_size: Option<u64>,
    /// `--quantization`.
    pub quantization: Quantization,
    /// Bytes of the model dtype (`--dtype`: 2 for auto/bfloat16/float16, 4 for float32).
    pub dtype_bytes: u64,
    /// SGLang `--mem-fraction-static`.
    pub mem_fraction_static: Option<f64>,
    /// SGLang `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// SGLang `--chunked-prefill-size`.
    pub chunked_prefill_size: Option<u64>,
    /// SGLang `--cuda-graph-max-bs`.
    pub cuda_graph_max_bs: Option<u64>,
    /// `VLLM_USE_V1=0`: vLLM's V0 engine where the version still has it (to 0.10). V0
    /// (`vllm/worker/worker.py` `determine_num_available_blocks`) has no chunked prefill up to
    /// 32K tokens, so the profile run is one batch of `max(max_model_len, 2048)` tokens;
    /// `max_num_seqs` 256; the concurrency logged is the pool's tokens over `max_model_len`.
    /// Without it the version decides (see `engine`: V0 to 0.7, V1 from 0.8 with V0 fallbacks).
    pub vllm_v0: bool,
    /// `VLLM_USE_V1=1`: vLLM's V1 engine on 0.7 and earlier, where V0 is the default.
    pub vllm_v1: bool,
    /// `--data-parallel-size` (vLLM) / `--dp-size` (SGLang): replicas of the TP group.
    pub dp: u64,
    /// vLLM `--enable-expert-parallel`: experts spread whole over the TP × DP GPUs instead of
    /// each expert's matrices split by TP.
    pub expert_parallel: bool,
    /// SGLang `--ep-size`: experts spread whole over this many of the TP GPUs.
    pub ep: u64,
    /// SGLang `--enable-dp-attention`: attention runs TP over `tp / dp` GPUs (its weights and KV
    /// heads split `tp / dp` ways), the MoE over all `tp`.
    pub dp_attention: bool,
    /// vLLM V1's sampler runs FlashInfer's top-k/top-p kernels (the log's "Using FlashInfer for
    /// top-p & top-k sampling"): FlashInfer installed (the vllm/vllm-openai images; not a
    /// dependency of the 0.10 wheel) and `VLLM_USE_FLASHINFER_SAMPLER` not 0 (0.9.2 and 0.10.1
    /// `v1/sample/ops/topk_topp_sampler.py`; 0.19 makes it opt-in). Without it, V1 before 0.17
    /// sorts the dummy sampler's logits in PyTorch.
    pub flashinfer_sampler: bool,
    /// How the TP group's GPUs talk (`--interconnect`); `None`: the catalog GPU's board.
    pub interconnect: Option<Interconnect>,
    /// Bytes of a Mamba2 / Gated DeltaNet recurrent-state element (vLLM
    /// `--mamba-ssm-cache-dtype`); `None`: the model dtype. The CLI sets it from the config's
    /// `mamba_ssm_dtype` ([`vram_model::read::mamba_ssm_bytes`]) as vLLM does.
    pub mamba_ssm_bytes: Option<u64>,
    /// `--engine-version` as numbers (`None`: the pinned version). What depends on it: SGLang
    /// 0.4's `mem_fraction_static` by TP size and its chunked-prefill and CUDA-graph defaults
    /// (`server_args.py` `__post_init__`), and which engine (`vllm_v0`) vLLM runs.
    pub engine_version: Option<[u32; 3]>,
    /// What `--engine-version` names beyond [`Knobs::engine_version`], read with it by
    /// [`parse_engine_version`]: a series (`0.8`, any of its releases) or one release.
    pub engine_pin: Pin,
    /// The longest `max_model_len` the engine accepts and its default, when the config's
    /// `rope_scaling` stretches it beyond `max_position_embeddings` (the caller reads the config
    /// by the engine's rule: vLLM 0.11 `vllm/config/model.py` `_get_and_verify_max_len`, SGLang
    /// 0.5.3 `srt/utils/hf_transformers_utils.py` `get_context_length`). `None`: the model's
    /// positions.
    pub derived_max_model_len: Option<u64>,
    /// Which AWQ/GPTQ linear kernel `--quantization` names: `Some(false)` for `awq` or `gptq`,
    /// which vLLM keeps even where Marlin could run (`AWQMarlinConfig` and `GPTQMarlinConfig`
    /// `override_quantization_method` switch only when no method or `awq_marlin`/`gptq_marlin`
    /// is named, the same at 0.6.4 through 0.20.0); `Some(true)` for `awq_marlin`/`gptq_marlin`;
    /// `None` where the config's `quant_method` decides: Marlin from compute capability 8.0
    /// (7.5 from vLLM 0.14; `check_marlin_supported`), the plain kernel below. From vLLM 0.22 a
    /// named `gptq` is `AutoGPTQConfig`, the Marlin family where it can run
    /// (`engine::marlin_runs`). See `engine::vllm_dequant_linears`.
    pub marlin: Option<bool>,
    /// vLLM's `VLLM_USE_V2_MODEL_RUNNER` (`Some(false)`: the V1 model runner, which vram
    /// models; `Some(true)`: the V2 runner, which it does not). `None`: the version's own choice
    /// ([`vllm_v2_runner`]), which takes no account of the features that send a model
    /// back to the V1 runner ([`VLLM_V2_RUNNER_LACKS`]).
    pub vllm_v2_runner: Option<bool>,
    /// vLLM V1's `cudagraph_mode` as the user set it (`None`: the version's default; see
    /// [`CudagraphMode`] and `engine::vllm_cudagraph_mode`). Read from 0.11, where V1 takes
    /// the mode; its rules read at 0.11.0, 0.12.0, 0.13.0, 0.15.0-0.19.0 and 0.20.0-0.22.0.
    pub cudagraph_mode: Option<CudagraphMode>,
    /// vLLM's compilation mode as the user set it (`-cc.mode`, or `TORCH_COMPILE_DISABLE=1`
    /// for `NONE`; `None`: the optimization level's). From 0.12; read at 0.12.0-0.22.0
    /// (`engine::vllm_compilation_mode` says where releases differ).
    pub compilation_mode: Option<CompilationMode>,
    /// vLLM's `--optimization-level` (`-O0` to `-O3`; `None`: `-O2`, the default). Only what
    /// it sets for the graphs is modelled: the compilation mode (`NONE` at 0, else
    /// `VLLM_COMPILE`) and the CUDA-graph mode (`NONE`, `PIECEWISE`, then `FULL_AND_PIECEWISE`;
    /// `OPTIMIZATION_LEVEL_00` to `_03`), each where the user left it unset. From 0.12 (`-O<n>`
    /// before is the compilation level); read at 0.12.0-0.22.0.
    pub optimization_level: Option<u8>,
    /// vLLM's attention backend as the user chose it ([`AttentionBackend`]; `None`: vLLM's own
    /// choice).
    pub attention_backend: Option<AttentionBackend>,
    /// The config's own `is_mm_prefix_lm`, where it has one (truthy as Python's `bool()` reads
    /// it; [`vram_model::read::config_mm_prefix_lm`]): from 0.17 vLLM takes it before its list
    /// of model types (`ModelConfig.is_mm_prefix_lm`). `None`: the config has no such key.
    pub mm_prefix_lm: Option<bool>,
    /// The text config's `use_bidirectional_attention` is `"vision"`
    /// ([`vram_model::read::bidirectional_vision`]): what decides `is_mm_prefix_lm` for a
    /// `gemma4` config from vLLM 0.20 (`Gemma4ModelArchConfigConvertor`).
    pub bidirectional_vision: bool,
    /// The host's NVIDIA driver branch (the major version: 535 for `535.161.08`) where a paste
    /// or log prints it (`collect_env`'s `Nvidia driver version:`, `nvidia-smi`'s `Driver
    /// Version:`) or `vram capacity --driver` gives it ([`parse_driver`]). `None`: not known,
    /// and the graphs' driver memory is priced for a driver of R550 or later, which the
    /// assumptions say (`graphs::driver_line`). Only branches before R550 change a figure
    /// (`graphs::driver_bytes_per_layer_graph`).
    pub driver: Option<u32>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            gpu_memory_utilization: None,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_bytes: None,
            tp: 1,
            pp: 1,
            enforce_eager: false,
            block_size: None,
            quantization: Quantization::None,
            dtype_bytes: 2,
            mem_fraction_static: None,
            max_total_tokens: None,
            chunked_prefill_size: None,
            cuda_graph_max_bs: None,
            vllm_v0: false,
            vllm_v1: false,
            dp: 1,
            expert_parallel: false,
            ep: 1,
            dp_attention: false,
            flashinfer_sampler: false,
            interconnect: None,
            mamba_ssm_bytes: None,
            engine_version: None,
            engine_pin: Pin::Series,
            derived_max_model_len: None,
            marlin: None,
            vllm_v2_runner: None,
            cudagraph_mode: None,
            compilation_mode: None,
            optimization_level: None,
            attention_backend: None,
            mm_prefix_lm: None,
            bidirectional_vision: false,
            driver: None,
        }
    }
}

/// The longest `max_model_len` the engine accepts without an override, and its default.
pub fn model_max_len(t: &Transformer, k: &Knobs) -> u64 {
    k.derived_max_model_len.unwrap_or(t.max_positions())
}

/// What the engine would do at start-up on one GPU of the job (the worst pipeline stage).
/// `vram capacity --json` carries these fields as they are (`vram_report::CapacityReport`
/// flattens this type), so a field added here is a field of the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// The engine.
    pub engine: Engine,
    /// The version whose rules apply (the asked one, or the pinned one).
    pub engine_version: String,
    /// The device total the engine sees (bytes).
    pub total_bytes: u64,
    /// The budget: vLLM `total × gpu_memory_utilization`; SGLang the static part,
    /// `free before loading × mem_fraction_static`.
    pub budget_bytes: u64,
    /// vLLM `gpu_memory_utilization` or SGLang `mem_fraction_static` in force.
    pub memory_fraction: f64,
    /// Weights on one GPU, quantization metadata included.
    pub weights_bytes: u64,
    /// Memory outside PyTorch that the engine's budget sees grow (vLLM: cuBLAS handles, NCCL
    /// and custom all-reduce buffers at TP > 1; SGLang: the CUDA context before loading).
    pub non_torch_bytes: u64,
    /// Peak of the profiling run above the weights (vLLM; SGLang reserves for it instead).
    pub activation_peak_bytes: u64,
    /// CUDA-graph memory (beyond the budget in vLLM before 0.20; inside SGLang's reserve).
    pub cuda_graph_bytes: u64,
    /// Whether the CUDA graphs are inside the budget (vLLM 0.20+ subtracts them before sizing the
    /// KV cache; SGLang's reserve holds them) rather than on top of it (vLLM before 0.20).
    pub cuda_graph_in_budget: bool,
    /// The KV cache pool.
    pub kv_cache_bytes: u64,
    /// Tokens the pool holds, as the engine logs them.
    pub kv_cache_tokens: u64,
    /// Blocks (vLLM) or pages (SGLang) of the pool.
    pub kv_cache_blocks: u64,
    /// The pool per layer kind: vLLM's KV-cache groups (one page size for all), SGLang's
    /// token pool per kind.
    pub kv_groups: Vec<KvGroup>,
    /// Requests of `max_model_len` tokens the pool holds at once.
    pub max_concurrency: f64,
    /// `max_model_len` in force.
    pub max_model_len: u64,
    /// vLLM `max_num_seqs` / SGLang `cuda_graph_max_bs` in force.
    pub max_num_seqs: u64,
    /// vLLM `max_num_batched_tokens` / SGLang `chunked_prefill_size` in force.
    pub max_num_batched_tokens: u64,
    /// Whether the engine starts.
    pub starts: bool,
    /// The largest `max_model_len` one request of which fits the pool (capped at the model's).
    pub max_model_len_that_fits: u64,
    /// The lines the engine would log at start-up (or its error).
    pub log: Vec<String>,
    /// What is estimated rather than read from the engine's source.
    pub assumes: Vec<String>,
}

/// Validates the knobs against the model; one-line errors.
impl Capacity {
    /// The pool's blocks when vLLM refuses this start for them: a hybrid model's `max_num_seqs`
    /// exceeds the blocks while one request of `max_model_len` fits
    /// (`engine::vllm_mamba_blocks_short`, with the model `t` and the `knobs` this answer was
    /// computed for).
    pub fn vllm_mamba_blocks_short(&self, t: &Transformer, knobs: &Knobs) -> Option<u64> {
        (self.engine == Engine::Vllm
            && !self.starts
            && self.max_model_len_that_fits >= self.max_model_len
            && engine::vllm_mamba_blocks_short(
                knobs,
                layers::is_hybrid(t),
                self.max_num_seqs,
                self.kv_cache_blocks,
            ))
        .then_some(self.kv_cache_blocks)
    }
}

fn validate(t: &Transformer, engine: Engine, k: &Knobs) -> Result<()> {
    if let Some(u) = k.gpu_memory_utilization {
        if !(u > 0.0 && u <= 1.0) {
            return Err(Error::Capacity(format!(
                "--gpu-memory-utilization {u} is outside (0, 1]"
            )));
        }
    }
    if let Some(u) = k.mem_fraction_static {
        if !(u > 0.0 && u <= 1.0) {
            return Err(Error::Capacity(format!(
                "--mem-fraction-static {u} is outside (0, 1]"
            )));
        }
    }
    if k.tp == 0 || k.pp == 0 || k.tp > 1024 || k.pp > 1024 {
        return Err(Error::Capacity(
            "--tensor-parallel-size and --pipeline-parallel-size must be between 1 and 1024".into(),
        ));
    }
    if k.dp == 0 || k.dp > 1024 || k.ep == 0 || k.ep > 1024 {
        return Err(Error::Capacity(
            "--data-parallel-size and --ep-size must be between 1 and 1024".into(),
        ));
    }
    // The interconnect sizes NCCL's communicators and decides whether the graphs capture NCCL's
    // all-reduces; one GPU with no TP, PP or DP group (EP needs one of them) has neither, and the
    // flag would change nothing.
    if k.interconnect.is_some() && k.tp == 1 && k.pp == 1 && k.dp == 1 {
        return Err(Error::Capacity(
            "--interconnect is how a TP, PP or DP group's GPUs talk; at --tensor-parallel-size, --pipeline-parallel-size and --data-parallel-size 1 there is no group and it changes nothing".into(),
        ));
    }
    if k.ep > 1 && k.tp % k.ep != 0 {
        return Err(Error::Capacity(format!(
            "--ep-size {} does not divide --tp-size {} (SGLang spreads the experts over the TP GPUs)",
            k.ep, k.tp
        )));
    }
    if k.dp_attention && (k.dp < 2 || k.tp % k.dp != 0) {
        return Err(Error::Capacity(format!(
            "--enable-dp-attention needs a --dp-size of at least 2 that divides --tp-size {} (attention runs TP over tp / dp GPUs)",
            k.tp
        )));
    }
    if (k.expert_parallel || k.ep > 1) && t.blocks.typical().experts < 2 {
        return Err(Error::Capacity(format!(
            "`{}` has no experts to spread (expert parallelism is for MoE models)",
            t.name
        )));
    }
    if t.blocks.typical().heads % k.tp != 0 {
        return Err(Error::Capacity(format!(
            "--tensor-parallel-size {} does not divide the model's {} attention heads",
            k.tp,
            t.blocks.typical().heads
        )));
    }
    if k.pp > t.layers() {
        return Err(Error::Capacity(format!(
            "--pipeline-parallel-size {} exceeds the model's {} layers",
            k.pp,
            t.layers()
        )));
    }
    if let Some(l) = k.max_model_len {
        if l == 0 {
            return Err(Error::Capacity(format!(
                "{} must be at least 1",
                engine.len_flag()
            )));
        }
        let limit = model_max_len(t, k);
        if l > limit {
            return Err(Error::Capacity(match k.derived_max_model_len {
                None => format!(
                    "{} {l} is larger than the model's max_position_embeddings {limit} and its config has no rope_scaling that stretches it (vLLM: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, SGLang: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 to override)",
                    engine.len_flag()
                ),
                Some(_) => format!(
                    "{} {l} is larger than the model's {limit} positions (max_position_embeddings {} stretched by its rope_scaling)",
                    engine.len_flag(),
                    t.max_positions()
                ),
            }));
        }
    }
    for (name, v) in [
        (engine.seqs_flag(), k.max_num_seqs),
        ("--max-num-batched-tokens", k.max_num_batched_tokens),
        (engine.block_flag(), k.block_size),
        ("--max-total-tokens", k.max_total_tokens),
        ("--chunked-prefill-size", k.chunked_prefill_size),
        ("--cuda-graph-max-bs", k.cuda_graph_max_bs),
    ] {
        if v == Some(0) || v.is_some_and(|v| v > 1 << 32) {
            return Err(Error::Capacity(format!(
                "{name} must be between 1 and 2^32"
            )));
        }
    }
    if t.layout() != vram_model::arch::Layout::DecoderOnly {
        return Err(Error::Capacity(format!(
            "`{}` is not a decoder-only model; vLLM and SGLang serve it only as a pooling model, which has no KV cache to size",
            t.name
        )));
    }
    Ok(())
}

/// The capacity of `t` served by `engine` on `gpu` with `knobs`, as the engine computes it at
/// start-up (the CUDA context is the GPU's, [`vram_model::gpu::Gpu::context_bytes`]).
pub fn capacity(t: &Transformer, gpu: &Gpu, engine: Engine, knobs: &Knobs) -> Result<Capacity> {
    validate(t, engine, knobs)?;
    // SGLang's DP and DP-attention groups build no NCCL communicator at start-up
    // (`sglang::sglang_distributed_init`): only a TP or PP group of more than one GPU uses it.
    if engine == Engine::Sglang && knobs.interconnect.is_some() && knobs.tp * knobs.pp == 1 {
        return Err(Error::Capacity(
            "--interconnect is how SGLang's TP or PP group talks (its DP groups build no NCCL communicator at start-up); at --tensor-parallel-size and --pipeline-parallel-size 1 it changes nothing".into(),
        ));
    }
    if let Some(m) = knobs.cudagraph_mode {
        let v = engine.version_in_force(knobs);
        if engine != Engine::Vllm || v < [0, 11, 0] || knobs.vllm_v0 {
            return Err(Error::Capacity(format!(
                "--cudagraph-mode {} is vLLM V1's from 0.11 (config/compilation.py CUDAGraphMode), not {} {}{}",
                m.name().to_lowercase().replace('_', "-"),
                engine.label(),
                v.map(|n| n.to_string()).join("."),
                if knobs.vllm_v0 { " V0" } else { "" }
            )));
        }
    }
    // The compilation knobs exist from 0.12 (`OptimizationLevel` and `CompilationConfig.mode` in
    // `config/vllm.py` and `config/compilation.py`, read at 0.11.0-0.20.0, each minor's `.0`):
    // 0.11 has neither, its `-O<n>` being `--compilation-config`'s `level`, and vram's
    // `--optimization-level` and `--compilation-mode` spell 0.12's. How each release resolves
    // them: `engine::vllm_compilation_mode` and `engine::vllm_cudagraph_mode`.
    let compile_knob = match (knobs.compilation_mode, knobs.optimization_level) {
        (Some(m), _) => Some(format!(
            "--compilation-mode {}",
            m.name().to_lowercase().replace('_', "-")
        )),
        (None, Some(o)) => Some(format!("--optimization-level {o}")),
        (None, None) => None,
    };
    if let Some(flag) = compile_knob {
        let v = engine.version_in_force(knobs);
        if engine != Engine::Vllm || v < [0, 12, 0] || knobs.vllm_v0 {
            return Err(Error::Capacity(format!(
                "{flag} is vLLM V1's from 0.12 (config/vllm.py OptimizationLevel, CompilationConfig.mode; 0.11's -O<n> is the compilation level), not {} {}{}",
                engine.label(),
                v.map(|n| n.to_string()).join("."),
                if knobs.vllm_v0 { " V0" } else { "" }
            )));
        }
    }
    if let Some(o) = knobs.optimization_level.filter(|&o| o > 3) {
        return Err(Error::Capacity(format!(
            "--optimization-level {o} is not one of vLLM's levels (0, 1, 2, 3: OptimizationLevel, config/vllm.py)"
        )));
    }
    if let Some(why) = engine::attention_backend_refusal(t, gpu, engine, knobs) {
        return Err(Error::Capacity(why));
    }
    if let Some(why) = engine::rope_refusal(t, engine, knobs) {
        return Err(Error::Capacity(why));
    }
    if let Some(why) = engine::awq_channelwise_refusal(t, gpu, engine, knobs) {
        return Err(Error::Capacity(why));
    }
    if let Some(why) = engine::gptq_marlin_refusal(t, gpu, engine, knobs) {
        return Err(Error::Capacity(why));
    }
    if let Some(why) = engine::sglang_moe_method_refusal(t, gpu, engine, knobs) {
        return Err(Error::Capacity(why));
    }
    match engine {
        Engine::Vllm => vllm(t, gpu, knobs),
        Engine::Sglang => {
            sglang_refuses(knobs)?;
            Ok(sglang(t, gpu, knobs))
        }
    }
}

/// How far the engine's share of the device (vLLM `--gpu-memory-utilization`, SGLang
/// `--mem-fraction-static`) can be raised at start-up, and what bounds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareCeiling {
    /// The largest share, in hundredths, within the bound.
    pub max: f64,
    /// The bound in words, with its figures: a noun phrase, printed after "within" (`ServingChange::gives`).
    pub text: String,
}

/// [`ShareCeiling`] of the job `k` whose capacity is `now`.
///
/// - vLLM V1 from 0.9.1: the start-up check (`vllm::vllm_free_at_start`): `ceil(total × u)`
///   must be free when the engine starts.
/// - vLLM V0 and V1 before 0.9.1 check nothing at start (`CacheConfig` takes up to 1); what the
///   budget leaves of the device for the CUDA context and the graphs is the capacity model's own
///   start, which every share tried runs.
/// - SGLang checks no upper bound (`server_args.py`, `model_runner.py` at 0.5.3: only "Not
///   enough memory" below); by its own definition of the fraction (`server_args.py`
///   `_handle_gpu_memory_settings`: "mem_fraction_static = (GPU memory capacity - activations -
///   cuda graph buffers) / GPU memory capacity") the rest of what is free before loading holds the
///   activations and the CUDA graphs: the fraction at most `1 - (activation peak + graphs) /
///   free before loading`, by the capacity model's estimates of both.
pub fn share_ceiling(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    k: &Knobs,
    now: &Capacity,
) -> ShareCeiling {
    let gib = |b: u64| b as f64 / GIB;
    match engine {
        Engine::Vllm => {
            let (v1, _) = engine::vllm_v1(k, gpu);
            match vllm::vllm_free_at_start(t, gpu, k, v1) {
                Some(s) => {
                    let max = s.ceiling();
                    ShareCeiling {
                        max,
                        text: format!(
                            "the start-up check of vLLM V1 (request_memory): gpu_memory_utilization × {:.2} GiB must be free at start, {} on an otherwise idle GPU ({}, estimated): at most {max:.2}",
                            gib(s.total),
                            s.free_text(),
                            s.held
                        ),
                    }
                }
                None => ShareCeiling {
                    max: 1.0,
                    text: format!(
                        "what the device holds beside the budget: vLLM {} checks no free memory at start (V1 does from 0.9.1), so the budget and, beside it, the CUDA context and graphs must fit the {:.2} GiB device, as the capacity model checks",
                        version_label(Engine::Vllm, k),
                        gib(now.total_bytes)
                    ),
                },
            }
        }
        Engine::Sglang => {
            let pre = now.total_bytes.saturating_sub(now.non_torch_bytes);
            let rest = now.activation_peak_bytes + now.cuda_graph_bytes;
            let max = ((1.0 - rest as f64 / pre.max(1) as f64) * 100.0).floor() / 100.0;
            ShareCeiling {
                max: max.clamp(0.0, 1.0),
                text: format!(
                    "what SGLang leaves beside its static pool: it checks no upper bound at start, and the rest of the {:.2} GiB free before loading holds the activations and CUDA graphs (the fraction as server_args.py defines it), {:.2} GiB by the estimate of vram: at most {:.2}",
                    gib(pre),
                    gib(rest),
                    max.clamp(0.0, 1.0)
                ),
            }
        }
    }
}

/// `0.6.5`, `0.11` (no patch asked or pinned: `major.minor`).
fn version_label(e: Engine, k: &Knobs) -> String {
    match k.engine_version {
        Some([a, b, 0]) => format!("{a}.{b}"),
        Some([a, b, c]) => format!("{a}.{b}.{c}"),
        None if e == Engine::Vllm && k.vllm_v0 => "0.6".into(),
        None => e.pinned_version().into(),
    }
}

#[cfg(test)]
mod tests;
