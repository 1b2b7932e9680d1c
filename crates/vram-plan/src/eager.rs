//! The transformers stack: what PyTorch eager launches when Hugging Face transformers 5.x
//! runs a training step, and what that costs on the GPU and on the CPU that launches it.
//!
//! Megatron-LM fuses its element-wise work and runs large GEMMs back to back; the
//! [`crate::cost`] model prices that. A Hugging Face model under plain PyTorch (what
//! DeepSpeed, accelerate and torchrun + FSDP2 launch) runs one kernel per operator of its
//! Python code: casts, norms written as five operators, rotary embeddings as five more, the
//! loss upcast to fp32. This module walks one layer's operators, prices each, and adds them
//! up; [`crate::cost::step_time`] uses it for compute and optimizer time under
//! [`Stack::Transformers`] and keeps its own communication, bubble and offload terms.
//!
//! # What a layer launches (forward; read from the transformers 5.x modelling code)
//!
//! Per decoder layer of `LlamaDecoderLayer` / `MistralDecoderLayer` / `Gemma2DecoderLayer`,
//! `GPT2Block`, `GPTNeoXLayer`, `BertLayer` / `RobertaLayer`, `T5Block`, under autocast:
//! - **norms**: `nn.LayerNorm` is one kernel (fp32 out under autocast); `LlamaRMSNorm`,
//!   `T5LayerNorm`, `Gemma2RMSNorm` are `to(fp32)`, `pow(2)`, `mean`, `+ eps`, `rsqrt`, `*`,
//!   (`to(dtype)`), `weight *`: six kernels, four over the whole tensor.
//! - **projections**: each `nn.Linear` / GPT-2 `Conv1D` under autocast casts its fp32 input to
//!   bf16 (one kernel, `R + A` bytes an element) and its weight (once per forward: autocast
//!   caches leaf casts), then one GEMM (bias fused in `addmm`). Fused QKV (GPT-2, NeoX) casts
//!   once; Llama-style separate `q_proj`, `k_proj`, `v_proj` cast three times.
//! - **QK-norm** (Qwen3, Gemma 3, OLMo 2): `q_norm`/`k_norm`, an RMSNorm of the projected
//!   queries and keys as above (8 kernels each, from the projection's half-precision output).
//! - **rotary** (`apply_rotary_pos_emb`): `q·cos`, `rotate_half` (slice, `neg`, `cat`),
//!   `·sin`, `+`, the same for `k`: ten kernels; `cos`/`sin` are fp32 under autocast, so `q`
//!   and `k` are promoted to fp32 and `sdpa` casts them back (two more).
//! - **attention**: see [`attention_kernel`]: one fused kernel, the model's eager code (two
//!   batched GEMMs and scale, mask, softmax (fp32 under autocast, cast back), dropout over
//!   `b·a·s²` scores), or `sdpa`'s math composite (inputs upcast to fp32, fp32 score GEMMs).
//! - **the rest**: the head transpose copy before `o_proj`, dropout where the config has it
//!   (GPT-2, BERT, T5: 0.1), residual adds (fp32 + bf16 → fp32), the activation (one kernel for
//!   `F.gelu`/`F.silu`/`gelu_pytorch_tanh`; nine for GPT-2's `gelu_new`, written as
//!   `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` with `pow` in fp32 under autocast), the gate
//!   product of gated MLPs, T5's cast of the `wo` input to the weight's dtype.
//! - **MoE**: router GEMM, softmax/sigmoid, top-k, normalisation, then the experts as
//!   transformers 5.24 runs them (`grouped_mm_experts_forward`, integrations/moe.py:
//!   `sort`, `histc`, `cumsum`, a gather of the `tokens · top_k` rows (the sentinel
//!   `masked_fill`s only under expert parallelism), one `torch._grouped_mm` for gate/up and one for down, the routing
//!   weights' product (fp32 where the router keeps them), the inverse permutation and the sum
//!   over top-k), Llama 4's every-token-through-every-expert `bmm`s, or, for a
//!   [`Dispatch::Loop`] description, the old Python loop over the experts hit after `nonzero`
//!   (launches and GPU time add). `grouped_mm` is not an autocast operator: it runs in the
//!   expert weights' dtype, so under autocast (fp32 master weights) the experts run fp32 and
//!   their banks are never cast. PyTorch 2.11 runs bf16 grouped GEMMs on Hopper/Blackwell as
//!   one CUTLASS kernel (tile-padded per expert), everything else through
//!   `_grouped_mm_fallback`: a host sync and one GEMM per expert at that expert's rows
//!   (`Rates::grouped_mm`). Layers of the layer-by-layer description are priced per block
//!   kind ([`block_layer`]), each with its own parameters' autocast casts.
//! - **head and loss**: final norm, LM-head GEMM, Gemma 2's final logit soft-capping (divide,
//!   `tanh`, multiply), `ForCausalLMLoss` upcasting the logits to fp32 and `cross_entropy`
//!   (log-softmax + NLL). Encoder classifiers (BERT) have only a pooler and a 2-way head.
//!
//! Backward launches about 1.5 kernels per forward kernel (two GEMMs per GEMM, one or two
//! kernels per element-wise op, gradient sums where a tensor has several users, the fp32 cast
//! of each weight gradient) and moves [`EagerCalibration::bwd_bytes`] times the forward's
//! element-wise bytes (it reads the saved inputs and the incoming gradient and writes the
//! outgoing one). GEMMs cost twice the forward (data and weight gradients); fused attention
//! 2.5× (FlashAttention-2's backward does 2.5× the forward's matmul work, Dao 2023).
//!
//! # Pricing
//! - GEMM time: FLOPs over the throughput measured on an H100 for the nearest shapes
//!   (`data/h100-calibration.json`: bf16 and fp32 with TF32 off, `m` = 512–32768 rows, eight
//!   `k × n` shapes; bilinear interpolation in `log m`, `log(k·n)`, clamped at the edges).
//!   Other GPUs scale by their dense peak against the H100's (989.4 / 66.9 TFLOP/s).
//! - Element-wise time: bytes over the measured large-tensor bandwidth (2925 GB/s, a 1 GiB
//!   copy; the 64 MiB point gives 2877) times [`EagerCalibration::elementwise_eta`]; other GPUs
//!   scale by HBM bandwidth (3350 GB/s for the H100 SXM). Below a few MiB the measured
//!   per-call time is flat at ~15 µs: the launch floor, priced by the CPU term below.
//! - CPU time: every kernel is launched by Python in forward
//!   ([`EagerCalibration::fwd_cpu_s`] each) and by the C++ autograd engine in backward
//!   ([`EagerCalibration::bwd_cpu_s`]). Launches are asynchronous, so a layer takes the larger
//!   of its CPU time and its GPU time (small models at small batches are launch-bound).
//! - No `torch.compile`: nothing is fused beyond what the operators themselves fuse.
//! - Optimizer: `torch.optim` on CUDA defaults to `foreach` kernels that stream the states;
//!   bytes per parameter are counted in [`optimizer_elements`], priced at the element-wise
//!   bandwidth. Adafactor has no `foreach` path and reads a norm back to the host per tensor.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use vram_model::arch::{Act, Layout, Transformer};
use vram_model::blocks::{
    self, Block, Blocks, Component, Dense, Dispatch, Ffn, Mechanism, NormKind, QkNorm, TensorKind,
};
use vram_model::gpu::Gpu;
use vram_model::setup::{AmpStyle, Attention, Optimizer, Precision};

/// Which software runs the step, and so which kernels the time model prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// Hugging Face transformers 5.x under PyTorch eager (DeepSpeed, accelerate, torchrun +
    /// FSDP2): one kernel per operator, no `torch.compile`, `foreach` optimizers. H100-measured.
    Transformers,
    /// Megatron-LM: fused element-wise kernels, large GEMMs; calibrated on A100s against
    /// Megatron-LM's own published throughput ([`crate::cost`]).
    Megatron,
}

impl Stack {
    /// Whether the stack can recompute some layers and not others, or only the attention
    /// core, and split activations along the sequence (Megatron-LM's
    /// `--recompute-method block`, `--recompute-granularity selective`, `--sequence-parallel`).
    /// A Hugging Face model recomputes only through `gradient_checkpointing_enable()`, which
    /// checkpoints every `GradientCheckpointingLayer` (transformers 5.24); DeepSpeed 0.19.8's
    /// `number_checkpoints` only sizes contiguous buffers
    /// (`activation_checkpointing/checkpointing.py`) and selects no layers.
    pub fn partial_recompute(self) -> bool {
        self == Stack::Megatron
    }

    /// Whether the stack can split the model into pipeline stages. A Hugging Face model runs
    /// whole on every rank under DeepSpeed and accelerate: DeepSpeed 0.19.8 pipelines only a `PipelineModule`
    /// (`deepspeed.initialize` builds a `PipelineEngine` only for one, and a plain module's
    /// `DeepSpeedEngine` never uses the `pipeline` section), a list of `LayerSpec`s the user
    /// writes; accelerate 1.15 pipelines only through its `MEGATRON_LM` type, which builds
    /// Megatron-LM's own model (`utils/megatron_lm.py` `model_provider_func`) from converted
    /// weights; torchrun + FSDP2 shards a whole model, and `torch.distributed.pipelining` needs
    /// it cut into stage modules first; transformers 5.24's `DistributedConfig(pp_size)`
    /// (`distributed/pipeline_parallel.py`) gives each rank a contiguous run of layers and runs
    /// them one stage after another, with no micro-batch schedule and never beside FSDP
    /// (`configuration_utils.py` refuses dp > 1 with pp > 1): not planned. Megatron-LM
    /// pipelines its own model.
    pub fn pipeline(self) -> bool {
        self == Stack::Megatron
    }

    /// `transformers` or `megatron`.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Transformers => "transformers",
            Stack::Megatron => "megatron",
        }
    }
}

/// Kernels the user installed that transformers 5.24 picks up in place of its torch fallbacks
/// (`use_kernel_func_from_hub_with_fallback`): the one setting of `vram_model::setup`.
pub use vram_model::setup::Kernels;

/// The constants of the transformers-stack model that were not measured directly, with why
/// each has its value. Everything else comes from `data/h100-calibration.json`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EagerCalibration {
    /// CPU time per counted forward kernel: the Python module calls, autograd recording,
    /// autocast dispatch and the views, allocations and bookkeeping between the operators
    /// this model counts. The measured bare loop of tiny ops costs 9.6 µs a kernel without
    /// any of these; 60 µs is fitted to the `fit` half of the measured training steps
    /// (`tests/data/measured_steps.csv`; the small models' steps there are launch-bound), with
    /// `bwd_bytes` and `elementwise_eta`, on a grid (`tests/it/measured.rs` refits them). The
    /// same cost is used
    /// for the first, `no_grad`, forward of checkpointed layers (module and autocast overhead
    /// remain there).
    pub fwd_cpu_s: f64,
    /// CPU time per backward kernel: the C++ autograd engine, no Python: 20 µs, about twice
    /// the bare launch (node dispatch, gradient buffers); an assumption that the measured
    /// steps do not constrain (their backward passes are GPU-bound).
    pub bwd_cpu_s: f64,
    /// CPU time per kernel with no autograd (inference): the measured 9.6 µs.
    pub launch_s: f64,
    /// Backward kernels per forward kernel (see the module docs).
    pub bwd_kernels: f64,
    /// Backward element-wise bytes per forward element-wise byte: 2.0 (fitted on the `fit`
    /// cases with `fwd_cpu_s`; a hand count of `native_layer_norm_backward`,
    /// `native_dropout_backward`, `gelu_backward` and the gradient sums at branch points
    /// gives 2–3).
    pub bwd_bytes: f64,
    /// Backward bytes per forward byte over materialised attention scores: 1.0 by hand count
    /// (`_softmax_backward_data` reads the fp32 output and gradient and writes one: 12 bytes
    /// against the forward's scale, mask, upcast-softmax and cast-back 28; the casts' and the
    /// scale's backwards mirror the forward; the mask add has none).
    pub score_bwd_bytes: f64,
    /// Fraction of the measured copy bandwidth real element-wise kernels reach (reductions in
    /// norms and softmax, Philox in dropout): 0.8, fitted on the `fit` cases with
    /// `fwd_cpu_s`.
    pub elementwise_eta: f64,
    /// Fraction of the dense peak FlashAttention-2 (`sdpa`'s flash backend, forward) reaches
    /// on an H100: 0.35 (≈ 350 TFLOP/s at head size 128, Dao 2023, FlashAttention-2 §4).
    pub flash_eta: f64,
    /// fp32 `sdpa` runs the memory-efficient (xFormers/cutlass) kernel on CUDA cores:
    /// 0.3 of the fp32 peak (an assumption: it reaches about a third of cuBLAS's fp32 rate).
    pub mem_efficient_fp32_eta: f64,
    /// Fraction of the measured copy bandwidth a `torch.cat` reaches when it cannot take
    /// PyTorch's 16-byte vectorized kernel: `cat_out_cuda` (PyTorch 2.11,
    /// aten/src/ATen/native/cuda/Shape.cu) runs `CatArrayBatchedCopy_vectorized` only when
    /// every input's slice along the cat dimension is a multiple of 16 bytes, else
    /// `CatArrayBatchedCopy`, one 2-byte element per thread with a 4-D offset computed for
    /// each. gpt-oss's sinks column (`torch.cat([attn_weights, sinks], dim=-1)`: one bf16
    /// element a row) forces it onto every score matrix. 0.17, measured: the H200's gpt-oss
    /// slice training step (2026-11-28, `gpu/results3/2026-11-28/results3.jsonl`,
    /// `gptoss-L4-bf16-mb1-s2048-eager-profile`) ran its 20 such cats a step (4 sinks cats of
    /// `[1, 64, 2048, 2049]`, 16 rotary cats of its q and k halves forward and backward) in
    /// 6.648 ms for 4.63 GB read and written: 0.70 TB/s, 0.166 of the H200's copy bandwidth
    /// as scaled here (4.19 TB/s). That case's step time is therefore not a check of it; the
    /// `generate` prefills of gpt-oss are.
    pub unaligned_cat_eta: f64,
    /// The kernel packages installed beside transformers (an environment's property, like
    /// the rates above): none unless the user says so.
    pub kernels: Kernels,
}

impl Default for EagerCalibration {
    fn default() -> Self {
        EagerCalibration {
            fwd_cpu_s: 60e-6,
            bwd_cpu_s: 20e-6,
            launch_s: 9.6e-6,
            bwd_kernels: 1.5,
            bwd_bytes: 2.0,
            score_bwd_bytes: 1.0,
            elementwise_eta: 0.8,
            flash_eta: 0.35,
            mem_efficient_fp32_eta: 0.3,
            unaligned_cat_eta: 0.17,
            kernels: Kernels::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// H100 measurements
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct RawGemm {
    dtype: String,
    m: f64,
    k: f64,
    n: f64,
    tflops: f64,
}

#[derive(Deserialize)]
struct RawEw {
    bytes_moved: f64,
    #[serde(rename = "GBps")]
    gbps: f64,
}

#[derive(Deserialize)]
struct RawLaunch {
    tiny_kernel_us_python_loop: f64,
}

#[derive(Deserialize)]
struct RawCal {
    gemm: Vec<RawGemm>,
    elementwise: Vec<RawEw>,
    launch: RawLaunch,
}

/// GEMM throughput measured on the H100, by rows and by `k·n`.
#[derive(Debug, Clone)]
struct Grid {
    /// `ln m` of the measured rows.
    ms: Vec<f64>,
    /// `ln(k·n)` of the measured shapes.
    kns: Vec<f64>,
    /// `ln TFLOP/s`, `[kn][m]`.
    ln_tflops: Vec<Vec<f64>>,
}

impl Grid {
    fn from(points: &[&RawGemm]) -> Grid {
        let mut ms: Vec<f64> = points.iter().map(|p| p.m).collect();
        ms.sort_by(f64::total_cmp);
        ms.dedup();
        let mut kns: Vec<f64> = points.iter().map(|p| p.k * p.n).collect();
        kns.sort_by(f64::total_cmp);
        kns.dedup();
        let mut ln_tflops = Vec::new();
        for &kn in &kns {
            let mut row = Vec::new();
            for &m in &ms {
                // Shapes with the same k·n (2048×8192 and 4096×4096) are averaged; a missing
                // point (fp32 at m = 32768, k·n = 8192×28672) takes the largest m measured.
                let same: Vec<f64> = points
                    .iter()
                    .filter(|p| p.k * p.n == kn && p.m == m)
                    .map(|p| p.tflops)
                    .collect();
                let v = if same.is_empty() {
                    points
                        .iter()
                        .filter(|p| p.k * p.n == kn)
                        .max_by(|a, b| a.m.total_cmp(&b.m))
                        .map_or(1.0, |p| p.tflops)
                } else {
                    same.iter().sum::<f64>() / same.len() as f64
                };
                row.push(v.ln());
            }
            ln_tflops.push(row);
        }
        Grid {
            ms: ms.iter().map(|m| m.ln()).collect(),
            kns: kns.iter().map(|x| x.ln()).collect(),
            ln_tflops,
        }
    }

    /// TFLOP/s of an `m × k × n` GEMM.
    fn tflops(&self, m: f64, kn: f64) -> f64 {
        let (a, b, t) = bracket(&self.ms, m.max(1.0).ln());
        let (c, d, u) = bracket(&self.kns, kn.max(1.0).ln());
        let at = |i: usize| (1.0 - t) * self.ln_tflops[i][a] + t * self.ln_tflops[i][b];
        ((1.0 - u) * at(c) + u * at(d)).exp()
    }
}

/// Indices around `x` in sorted `xs` and the fraction between them (clamped at the ends).
fn bracket(xs: &[f64], x: f64) -> (usize, usize, f64) {
    let last = xs.len() - 1;
    if x <= xs[0] {
        return (0, 0, 0.0);
    }
    if x >= xs[last] {
        return (last, last, 0.0);
    }
    let i = xs.partition_point(|&v| v <= x) - 1;
    (i, i + 1, (x - xs[i]) / (xs[i + 1] - xs[i]))
}

/// What was measured on the H100 (`data/h100-calibration.json`).
#[derive(Debug, Clone)]
pub struct H100 {
    bf16: Grid,
    fp32: Grid,
    /// Element-wise bandwidth of the largest measured copy, bytes/s.
    pub bandwidth: f64,
    /// Per-kernel cost of a Python loop of tiny ops, seconds.
    pub launch_s: f64,
}

/// Dense peaks and HBM bandwidth of the H100 SXM the calibration was measured on (NVIDIA
/// H100 datasheet; the catalog's `h100-80g`), used to scale to other GPUs.
const H100_BF16_TFLOPS: f64 = 989.4;
const H100_FP32_TFLOPS: f64 = 66.9;
const H100_HBM_GB_S: f64 = 3350.0;

/// The H100 measurements, parsed once.
pub fn h100() -> &'static H100 {
    static CAL: OnceLock<H100> = OnceLock::new();
    CAL.get_or_init(|| {
        let raw: RawCal = serde_json::from_str(include_str!("../data/h100-calibration.json"))
            .expect("data/h100-calibration.json is valid (checked by a test)");
        let pick =
            |dt: &str| -> Vec<&RawGemm> { raw.gemm.iter().filter(|g| g.dtype == dt).collect() };
        let big = raw
            .elementwise
            .iter()
            .max_by(|a, b| a.bytes_moved.total_cmp(&b.bytes_moved))
            .expect("elementwise points");
        H100 {
            bf16: Grid::from(&pick("bfloat16")),
            fp32: Grid::from(&pick("float32")),
            bandwidth: big.gbps * 1e9,
            launch_s: raw.launch.tiny_kernel_us_python_loop * 1e-6,
        }
    })
}

/// GPU-specific rates: the H100 measurements scaled to `gpu`.
#[derive(Debug, Clone, Copy)]
pub struct Rates<'a> {
    h: &'a H100,
    half_scale: f64,
    fp32_scale: f64,
    /// Element-wise bytes per second reached by real kernels.
    pub bytes_per_s: f64,
    /// FLOP/s of the flash kernel (forward).
    flash_flops: f64,
    /// FLOP/s of the fp32 memory-efficient kernel (forward).
    mem_efficient_flops: f64,
    /// CPU seconds per kernel launched after a host sync (forward, autograd on).
    loop_cpu_s: f64,
    /// HBM bytes per second at the measured copy bandwidth (no element-wise efficiency):
    /// the floor of a GEMM that reads more than it computes.
    hbm_bytes_per_s: f64,
    /// Bytes per second of a `torch.cat` off the vectorized kernel
    /// ([`EagerCalibration::unaligned_cat_eta`]).
    unaligned_cat_bytes_per_s: f64,
    /// `torch._grouped_mm` takes its CUTLASS kernel (`bf16bf16_grouped_mm`): PyTorch 2.11's
    /// `_grouped_mm_cuda` (aten/src/ATen/native/cuda/GroupedBlas.cpp) allows it on compute
    /// capability 9.x and 10.x only (`_scaled_mm_allowed_device(sm90_only, sm100_only)`), and
    /// only for bf16 operands.
    grouped_mm_kernel: bool,
    /// The installed kernel packages ([`EagerCalibration::kernels`]).
    pub kernels: Kernels,
}

impl<'a> Rates<'a> {
    /// Rates for `gpu` under `cal`.
    pub fn new(gpu: &Gpu, cal: &EagerCalibration) -> Rates<'static> {
        let h = h100();
        Rates {
            h,
            half_scale: gpu.half_tflops / H100_BF16_TFLOPS,
            fp32_scale: gpu.fp32_tflops / H100_FP32_TFLOPS,
            bytes_per_s: h.bandwidth * (gpu.hbm_gb_s / H100_HBM_GB_S) * cal.elementwise_eta,
            flash_flops: gpu.half_tflops * 1e12 * cal.flash_eta,
            mem_efficient_flops: gpu.fp32_tflops * 1e12 * cal.mem_efficient_fp32_eta,
            loop_cpu_s: cal.fwd_cpu_s,
            hbm_bytes_per_s: h.bandwidth * (gpu.hbm_gb_s / H100_HBM_GB_S),
            unaligned_cat_bytes_per_s: h.bandwidth
                * (gpu.hbm_gb_s / H100_HBM_GB_S)
                * cal.unaligned_cat_eta,
            grouped_mm_kernel: matches!(gpu.sm_major, 9 | 10),
            kernels: cal.kernels,
        }
    }

    /// Seconds of `batch` GEMMs of `m × k × n` (`2mkn` FLOPs each).
    pub fn gemm_s(&self, m: f64, k: f64, n: f64, batch: f64, fp32: bool) -> f64 {
        if m <= 0.0 || k <= 0.0 || n <= 0.0 {
            return 0.0;
        }
        // A batched GEMM is one kernel over `batch·m` rows.
        let rows = m * batch.max(1.0);
        let tflops = if fp32 {
            self.h.fp32.tflops(rows, k * n) * self.fp32_scale
        } else {
            self.h.bf16.tflops(rows, k * n) * self.half_scale
        };
        2.0 * rows * k * n / (tflops * 1e12)
    }

    /// Seconds to move `bytes` through an element-wise kernel.
    pub fn bytes_s(&self, bytes: f64) -> f64 {
        bytes / self.bytes_per_s
    }

    /// Seconds to stream `bytes` through HBM at the measured copy bandwidth, without the
    /// element-wise efficiency: whole multi-MB contiguous rows copied by a vectorized gather, or
    /// read once by a GEMV-shaped `bmm` (`batched_mm`'s expert copies in decode). On the H200
    /// (2026-11-28 profiles, `gpu/results3/2026-11-28/results3.jsonl`), Qwen3-30B-A3B's and
    /// gpt-oss-20b's batch-16 decode ran those kernels (`vectorized_gather_kernel<16>` and
    /// `bmm`) in 39.1 and 49.1 ms a step for 174 and 230 GB: 4.4 and 4.7 TB/s against this
    /// rate's 4.19.
    pub fn copy_s(&self, bytes: f64) -> f64 {
        bytes / self.hbm_bytes_per_s
    }

    /// Seconds of a `torch.cat` that moves `bytes` off the vectorized kernel
    /// ([`EagerCalibration::unaligned_cat_eta`]).
    pub fn unaligned_cat_s(&self, bytes: f64) -> f64 {
        bytes / self.unaligned_cat_bytes_per_s
    }

    /// One `torch._grouped_mm` (PyTorch 2.11, `_grouped_mm_cuda` in
    /// aten/src/ATen/native/cuda/GroupedBlas.cpp) over `rows` rows sorted into `groups`
    /// experts, each `k → n`, with operands of `dtype`.
    ///
    /// Rows are spread over the experts as a router that picks uniformly at random spreads
    /// them (a model built by `from_config` routes so; a trained router is less even, which
    /// this does not price): `groups · (1 − (1 − 1/groups)^rows)` experts receive rows.
    /// - bf16 operands on compute capability 9.x/10.x: `bf16bf16_grouped_mm`
    ///   (aten/src/ATen/native/cuda/GroupMM.cu), `prepare_grouped_gemm_data` and one CUTLASS
    ///   kernel over every group's tiles, no host sync. Its tiles are 128 rows, or 64 when the
    ///   mean group (`rows / groups`, as `dispatch_bf16_grouped_kernel_on_tile_size` computes
    ///   it) or `n` is at most 128; each expert's rows are padded to whole tiles (its last tile
    ///   half empty on average). The padded rows are priced as one GEMM at the measured bf16
    ///   throughput.
    /// - anything else (fp32 and fp16 operands; bf16 before Hopper): `_grouped_mm_fallback`
    ///   (aten/src/ATen/native/GroupedMMUtils.h): `offs.cpu()` (a host sync), then one
    ///   `at::mm_out` per expert launched from C++: each expert's small GEMM at the measured
    ///   throughput of its own rows (fp32 with TF32 off, PyTorch's default), no faster than
    ///   reading its weight and rows from HBM.
    fn grouped_mm(&self, rows: f64, groups: f64, k: f64, n: f64, dtype: ExpertDtype) -> Work {
        let mut w = Work {
            kernels: 1.0,
            ..Work::default()
        };
        if rows <= 0.0 || groups <= 0.0 {
            return w;
        }
        let occupied = (groups * (1.0 - (1.0 - 1.0 / groups).powf(rows))).max(1.0);
        let per = rows / occupied;
        let bytes = if dtype == ExpertDtype::Fp32 { 4.0 } else { 2.0 };
        // Weights of `mats` experts and `m` rows in and out, over HBM.
        let floor = |m: f64, mats: f64| (mats * k * n + m * (k + n)) * bytes / self.hbm_bytes_per_s;
        if self.grouped_mm_kernel && dtype == ExpertDtype::Bf16 {
            let tile = if rows / groups <= 128.0 || n <= 128.0 {
                64.0
            } else {
                128.0
            };
            let tiles = if per >= tile { per / tile + 0.5 } else { 1.0 };
            let padded = occupied * tiles * tile;
            w.cxx_kernels = 1.0;
            w.gemm_s = self
                .gemm_s(padded, k, n, 1.0, false)
                .max(floor(rows, occupied));
        } else {
            w.cxx_kernels = groups;
            w.syncs = 1.0;
            let fp32 = dtype == ExpertDtype::Fp32;
            w.gemm_s = occupied * self.gemm_s(per, k, n, 1.0, fp32).max(floor(per, 1.0));
        }
        w
    }
}

/// The dtype the experts' grouped GEMMs run in: their weights' (`grouped_mm` is not an
/// autocast operator; transformers' `_grouped_mm` casts the input to the weight's dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpertDtype {
    Bf16,
    Fp16,
    Fp32,
}

// ---------------------------------------------------------------------------------------
// Attention kernel
// ---------------------------------------------------------------------------------------

/// The attention kernel PyTorch runs for a model and setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttnKernel {
    /// `sdpa`'s fused kernels (cuDNN / FlashAttention-2) in half precision.
    Flash,
    /// `sdpa`'s memory-efficient kernel (fp32 multi-head attention).
    MemEfficient,
    /// The model's own eager attention: scores materialised in the compute dtype.
    Eager,
    /// `sdpa`'s math composite (`_scaled_dot_product_attention_math`): no fused kernel takes
    /// the call; half inputs are upcast to fp32, so the score GEMMs run in fp32 and the
    /// scores are fp32.
    Composite,
}

/// Which attention kernel runs for the attention `a` (a layer's self-attention or its
/// cross-attention) at sequence length `seq`: the estimator's rule
/// ([`vram_model::estimate::attention_kernel`], from PyTorch 2.11's SDPA dispatch and the calls
/// transformers 5.17 makes), so memory and time agree on the kernel.
pub fn attention_kernel(
    a: &blocks::Attention,
    attention: Attention,
    precision: Precision,
    training: bool,
    seq: u64,
) -> AttnKernel {
    // One rule for memory and time: vram-model's, read from PyTorch 2.11's dispatch.
    use vram_model::estimate::Kernel;
    let half = precision != Precision::Fp32;
    match vram_model::estimate::attention_kernel(a, attention, half, training, seq) {
        Kernel::Fused => AttnKernel::Flash,
        Kernel::MemEfficient => AttnKernel::MemEfficient,
        Kernel::Math => AttnKernel::Composite,
        Kernel::Eager => AttnKernel::Eager,
    }
}

// ---------------------------------------------------------------------------------------
// Operators
// ---------------------------------------------------------------------------------------

/// Work of a stretch of operators: kernels launched and GPU time by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Work {
    /// Kernels launched.
    pub kernels: f64,
    /// GEMM seconds (the forward's; backward doubles them).
    pub gemm_s: f64,
    /// Fused-attention seconds.
    pub attn_s: f64,
    /// Element-wise seconds.
    pub ew_s: f64,
    /// Element-wise seconds over materialised attention scores (math path).
    pub score_s: f64,
    /// Forward GPU seconds beyond the element-wise rate of copies that run off PyTorch's
    /// vectorized kernel (gpt-oss's sinks `cat`, [`EagerCalibration::unaligned_cat_eta`]);
    /// their bytes are in [`Work::score_s`]. Their backward is a slice, priced with
    /// [`Work::bwd_extra_s`].
    pub slow_copy_s: f64,
    /// Work after a host sync: CPU and GPU time add instead of overlapping (MoE loops).
    pub serial_s: f64,
    /// Kernels of that serialised work (its backward overlaps like any other: autograd
    /// replays it without the sync).
    pub serial_kernels: f64,
    /// GPU seconds of that serialised work.
    pub serial_gpu_s: f64,
    /// Kernels launched from inside one operator's C++ code, with no Python or autograd
    /// between them (`_grouped_mm_fallback`'s `mm_out` per expert): the measured bare launch
    /// cost ([`EagerCalibration::launch_s`]) each, in forward and in each of the operator's two
    /// backward calls.
    pub cxx_kernels: f64,
    /// Host syncs inside an operator (`_grouped_mm_fallback`'s `offs.cpu()`): the host waits
    /// for the GPU and copies a few bytes back, one bare launch's cost (a floor: the overlap
    /// lost around the sync is not priced); the backward's two calls sync twice.
    pub syncs: f64,
    /// Backward kernels beyond [`EagerCalibration::bwd_kernels`] per forward kernel (a Python
    /// loop's autograd: `select_backward`, gradient accumulation).
    pub bwd_extra_kernels: f64,
    /// Backward GPU seconds beyond the forward's scaled ones (the same loop's materialised
    /// gradients).
    pub bwd_extra_s: f64,
}

impl Work {
    fn gpu(&self) -> f64 {
        self.gemm_s + self.attn_s + self.ew_s + self.score_s + self.slow_copy_s
    }

    /// Adds `w`'s work to this.
    pub fn add(&mut self, w: &Work) {
        self.kernels += w.kernels;
        self.gemm_s += w.gemm_s;
        self.attn_s += w.attn_s;
        self.ew_s += w.ew_s;
        self.score_s += w.score_s;
        self.slow_copy_s += w.slow_copy_s;
        self.serial_s += w.serial_s;
        self.serial_kernels += w.serial_kernels;
        self.serial_gpu_s += w.serial_gpu_s;
        self.cxx_kernels += w.cxx_kernels;
        self.syncs += w.syncs;
        self.bwd_extra_kernels += w.bwd_extra_kernels;
        self.bwd_extra_s += w.bwd_extra_s;
    }

    /// Forward seconds: launches overlap the GPU.
    pub fn forward_s(&self, cal: &EagerCalibration) -> f64 {
        (self.kernels * cal.fwd_cpu_s + self.cxx_kernels * cal.launch_s).max(self.gpu())
            + self.syncs * cal.launch_s
            + self.serial_s
    }

    /// Backward seconds.
    pub fn backward_s(&self, cal: &EagerCalibration) -> f64 {
        let gpu = 2.0 * self.gemm_s
            + 2.5 * self.attn_s
            + cal.bwd_bytes * self.ew_s
            + cal.score_bwd_bytes * self.score_s;
        let kernels =
            (self.kernels + self.serial_kernels) * cal.bwd_kernels + self.bwd_extra_kernels;
        (kernels * cal.bwd_cpu_s + 2.0 * self.cxx_kernels * cal.launch_s)
            .max(gpu + 2.0 * self.serial_gpu_s + self.bwd_extra_s)
            + 2.0 * self.syncs * cal.launch_s
    }

    /// Forward seconds with no autograd (inference).
    pub fn inference_s(&self, cal: &EagerCalibration) -> f64 {
        ((self.kernels + self.cxx_kernels) * cal.launch_s).max(self.gpu())
            + self.syncs * cal.launch_s
            + self.serial_s
    }
}

/// Shapes and dtypes of one layer's forward on one GPU.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Tokens of the micro-batch on this GPU.
    pub tokens: f64,
    /// Sequence length (keys per query).
    pub seq: f64,
    /// Tensor-parallel degree.
    pub tp: f64,
    /// Sequence parallelism (element-wise work on `h`-wide tensors split by `tp`).
    pub sp: bool,
    /// Compute dtype bytes (`A`).
    pub act: f64,
    /// Residual-stream / weight dtype bytes (`R`): 4 under autocast (fp32 weights), else `A`.
    pub resid: f64,
    /// fp32 GEMMs.
    pub fp32: bool,
    /// Training (dropout active).
    pub train: bool,
}

impl Shape {
    /// The shape of a step in `precision` under `amp`.
    pub fn new(tokens: f64, seq: f64, precision: Precision, amp: AmpStyle, train: bool) -> Shape {
        let act = precision.compute_bytes() as f64;
        let resid = match precision {
            Precision::Fp32 => 4.0,
            Precision::Bf16 => 2.0,
            // Autocast keeps fp32 weights and an fp32 residual stream; DeepSpeed and
            // Megatron run the model in half precision.
            Precision::Bf16Amp | Precision::Fp16Amp => {
                if amp == AmpStyle::Autocast {
                    4.0
                } else {
                    2.0
                }
            }
        };
        Shape {
            tokens,
            seq,
            tp: 1.0,
            sp: false,
            act,
            resid,
            fp32: precision == Precision::Fp32,
            train,
        }
    }
}

struct Ops<'r, 'a> {
    r: &'r Rates<'a>,
    w: Work,
}

impl Ops<'_, '_> {
    fn ew(&mut self, elems: f64, bytes_per: f64, kernels: f64) {
        self.w.kernels += kernels;
        self.w.ew_s += self.r.bytes_s(elems * bytes_per);
    }
    fn gemm(&mut self, m: f64, k: f64, n: f64, batch: f64, fp32: bool) {
        self.w.kernels += 1.0;
        self.w.gemm_s += self.r.gemm_s(m, k, n, batch, fp32);
    }
    /// A batched GEMM over materialised attention scores (`q·kᵀ` writes them, `p·v` reads
    /// them): at a head size of 64–128 it moves more than it computes, so it takes no less
    /// than its operands and output over HBM (`elem` bytes each). Its backward's two GEMMs
    /// move the same matrix once each (`dQ`/`dK` read `dS`; `dP` is written and `p` read
    /// for `dV`), so the backward's doubling holds for the floor too.
    fn score_gemm(&mut self, m: f64, k: f64, n: f64, batch: f64, fp32: bool, elem: f64) {
        self.w.kernels += 1.0;
        let io = batch * (m * k + k * n + m * n) * elem / self.r.hbm_bytes_per_s;
        self.w.gemm_s += self.r.gemm_s(m, k, n, batch, fp32).max(io);
    }
}

/// Fraction of each head the rotary embedding turns (GPT-NeoX's `rotary_pct`, 0.25; the
/// whole head by default), as the reader set it from the config.
pub fn rotary_fraction(a: &blocks::Attention) -> f64 {
    a.rotary_pct as f64 / 100.0
}

/// Forward work of one layer `blk` of `b` with softmax attention and a dense MLP or experts
/// (`cross`: a decoder layer with cross-attention over `cross` encoder tokens).
pub fn layer(
    b: &Blocks,
    blk: &Block,
    s: &Shape,
    r: &Rates<'_>,
    attention: Attention,
    precision: Precision,
    cross: Option<f64>,
) -> Work {
    walk_layer(b, blk, s, r, attention, precision, cross, true)
}

/// [`layer`], with its self-attention's own operators (projections, QK-norm, rotary, the
/// attention, the output projection) left out when `self_attention` is false: what a layer
/// whose mixer is not softmax attention (MLA, Gated DeltaNet, Mamba2) keeps of the walk, its
/// norms, residual adds and MLP, before [`block_layer`] adds the mixer's own operators.
#[allow(clippy::too_many_arguments)]
fn walk_layer(
    b: &Blocks,
    blk: &Block,
    s: &Shape,
    r: &Rates<'_>,
    attention: Attention,
    precision: Precision,
    cross: Option<f64>,
    self_attention: bool,
) -> Work {
    let mut o = Ops {
        r,
        w: Work::default(),
    };
    let Some(&at) = blk.mixer.as_attention() else {
        return o.w;
    };
    let cross_at = blk.cross().unwrap_or(at);
    let (dense, moe) = match blk.ffn {
        Ffn::Dense(d) => (d, None),
        Ffn::Moe(m) => (
            Dense {
                intermediate: m.expert_intermediate,
                gated: m.gated,
                ..Dense::new(0)
            },
            Some(m),
        ),
        _ => (Dense::new(0), None),
    };
    let n = s.tokens;
    let (a, rb) = (s.act, s.resid);
    let h = b.hidden as f64;
    let (q, kv) = at.widths();
    let (q, kv) = (
        q as f64 / s.tp,
        kv as f64 / s.tp.min(at.kv_heads as f64).max(1.0),
    );
    let f = dense.intermediate as f64 / s.tp;
    let hs = if s.sp { h / s.tp } else { h };
    let cast = rb != a;
    let p_hidden = if s.train { b.dropout.hidden } else { 0.0 };
    let p_attn = if s.train { b.dropout.attention } else { 0.0 };
    let layout = b.layout;

    let norm = |o: &mut Ops<'_, '_>| match b.norm.kind {
        NormKind::LayerNorm => o.ew(n * hs, 2.0 * rb, 1.0),
        NormKind::RmsNorm => {
            // to(fp32) (if not fp32), pow, mean (reads), ·rsqrt, (to(dtype)), weight·:
            // rsqrt and +eps are on (N, 1).
            let up = if rb == 4.0 { 0.0 } else { rb + 4.0 };
            let down = if rb == 4.0 { 0.0 } else { 4.0 + rb };
            let k = if rb == 4.0 { 6.0 } else { 8.0 };
            o.ew(n * hs, up + 8.0 + 4.0 + 8.0 + down + 2.0 * rb, k);
        }
    };
    let cast_in = |o: &mut Ops<'_, '_>| {
        if cast {
            o.ew(n * hs, rb + a, 1.0);
        }
    };
    let dropout = |o: &mut Ops<'_, '_>, elems: f64, p: f64| {
        if p > 0.0 {
            // native_dropout: read, write, 1-byte mask.
            o.ew(elems, 2.0 * a + 1.0, 1.0);
        }
    };
    let attn = |o: &mut Ops<'_, '_>, kv_tokens: f64, is_self: bool| {
        let t = if is_self { &at } else { &cross_at };
        let kernel = attention_kernel(t, attention, precision, s.train, s.seq as u64);
        if t.fused_qkv && is_self {
            cast_in(o);
            o.gemm(n, h, q + 2.0 * kv, 1.0, s.fp32);
        } else {
            cast_in(o);
            o.gemm(n, h, q, 1.0, s.fp32);
            for _ in 0..2 {
                // Cross-attention projects the encoder's output (already in `R`).
                if cast {
                    o.ew(kv_tokens * h, rb + a, 1.0);
                }
                o.gemm(kv_tokens, h, kv, 1.0, s.fp32);
            }
        }
        if is_self {
            // `q_norm`/`k_norm` (Qwen3, Qwen3-MoE, Qwen3.5's attention, Gemma 3, OLMo 2): an
            // RMSNorm over each head (or the whole width) of the projected queries and keys,
            // as the layer's norms run it from the projection's half-precision output:
            // `to(fp32)`, `pow`, `mean`, `+ eps`, `rsqrt`, `*`, `to(dtype)`, `weight *` (8
            // kernels, counted on the CPU: tests/data/generate_ops/counts.json); the product
            // with an fp32 master weight under autocast is fp32.
            let normed = match t.qk_norm {
                QkNorm::PerHead | QkNorm::FullWidth => {
                    n * q + if t.kv_shared { 0.0 } else { n * kv }
                }
                QkNorm::None | QkNorm::L2 => 0.0,
            };
            if normed > 0.0 {
                let norms = if t.kv_shared { 1.0 } else { 2.0 };
                let out = if rb == 4.0 { 4.0 } else { a };
                o.ew(
                    normed,
                    (a + 4.0) + 8.0 + 4.0 + 8.0 + (4.0 + a) + (a + out),
                    8.0 * norms,
                );
            }
        }
        if t.rope && is_self {
            let frac = rotary_fraction(t);
            // mul cos, neg (half), cat, mul sin, add; promoted to fp32 under autocast.
            let promoted = cast;
            let per = if promoted {
                (a + 4.0) + a + 2.0 * a + (a + 4.0) + 12.0
            } else {
                5.0 * 2.0 * a
            };
            o.ew(frac * n * (q + kv), per, 10.0);
            if frac < 1.0 {
                // split into rotated and passed-through parts, cat back
                o.ew(n * (q + kv), 2.0 * a + if promoted { 4.0 } else { a }, 2.0);
            }
            if promoted {
                o.ew(n * (q + kv), 4.0 + a, 2.0);
            }
        }
        let heads = t.heads as f64 / s.tp;
        let b = (n / s.seq).max(1.0);
        let kv_len = kv_tokens / b;
        if kernel == AttnKernel::Eager && t.kv_heads < t.heads {
            // `eager_attention_forward`'s `repeat_kv`: the keys and values expanded to every
            // head and copied (`reshape` of an `expand`), two kernels reading the K/V width and
            // writing the query width (counted on the meta device: gpt-oss's two `clone`s a
            // layer). SDPA's own `repeat_kv` (with a mask, `use_gqa_in_sdpa`) is not priced:
            // the meta-device count of Gemma 3's sliding layers shows none.
            o.ew(kv_tokens, 2.0 * (kv + q) * a, 2.0);
        }
        match kernel {
            AttnKernel::Flash | AttnKernel::MemEfficient => {
                // Causal self-attention skips the masked half of the tiles.
                let causal = if layout == Layout::EncoderOnly || !is_self {
                    1.0
                } else {
                    0.5
                };
                let flops = 4.0 * n * kv_len * q * causal;
                let rate = if kernel == AttnKernel::Flash {
                    r.flash_flops
                } else {
                    r.mem_efficient_flops
                };
                o.w.kernels += 1.0;
                o.w.attn_s += flops / rate;
            }
            AttnKernel::Eager => {
                let hd = t.head_dim as f64;
                let scores = n * heads * kv_len;
                o.score_gemm(s.seq, hd, kv_len, b * heads, s.fp32, a);
                // scale, mask add, softmax, dropout over the scores
                let mut per = 2.0 * a + 2.0 * a;
                let mut k = 2.0;
                if cast {
                    // autocast's fp32 softmax: cast, softmax, cast back
                    per += (a + 4.0) + 8.0 + (4.0 + a);
                    k += 3.0;
                } else if t.softmax_upcast && a < 4.0 && !t.sinks {
                    // softmax(dtype=float32).to(dtype); gpt-oss's sinks softmax keeps the
                    // scores' dtype (`F.softmax(combined_logits, dtype=combined_logits.dtype)`:
                    // 4 bytes a score element read and written in bf16, counted on the meta
                    // device), below.
                    per += (a + 4.0) + (4.0 + a);
                    k += 2.0;
                } else {
                    per += 2.0 * a;
                    k += 1.0;
                }
                if p_attn > 0.0 {
                    per += 2.0 * a + 1.0;
                    k += 1.0;
                }
                o.w.kernels += k;
                o.w.score_s += r.bytes_s(scores * per);
                o.score_gemm(s.seq, kv_len, hd, b * heads, s.fp32, a);
            }
            AttnKernel::Composite => {
                let hd = t.head_dim as f64;
                let scores = n * heads * kv_len;
                if a < 4.0 {
                    // q, k, v upcast to fp32, the output cast back
                    o.ew(n * q + 2.0 * kv_tokens * kv, a + 4.0, 3.0);
                    o.ew(n * q, 4.0 + a, 1.0);
                }
                // q and k scaled by sqrt(scale), fp32 score GEMMs
                o.ew(n * q + kv_tokens * kv, 8.0, 2.0);
                o.score_gemm(s.seq, hd, kv_len, b * heads, true, 4.0);
                // bias or mask add (fp32), softmax, dropout: fp32 scores
                let per = 12.0 + 8.0 + if p_attn > 0.0 { 9.0 } else { 0.0 };
                o.w.kernels += if p_attn > 0.0 { 3.0 } else { 2.0 };
                o.w.score_s += r.bytes_s(scores * per);
                o.score_gemm(s.seq, kv_len, hd, b * heads, true, 4.0);
            }
        }
        // transpose(1, 2).reshape: a copy of the attention output, then o_proj.
        o.ew(n * q, 2.0 * a, 1.0);
        o.gemm(n, q, h, 1.0, s.fp32);
    };
    let residual = |o: &mut Ops<'_, '_>| {
        dropout(o, n * hs, p_hidden);
        o.ew(n * hs, 2.0 * rb + a, 1.0); // residual add
    };
    let mlp = |o: &mut Ops<'_, '_>, tokens: f64| {
        let one = |o: &mut Ops<'_, '_>, m: f64| {
            match dense.gated {
                true => {
                    if dense.fused_gate_up {
                        o.gemm(m, h, 2.0 * f, 1.0, s.fp32);
                    } else {
                        o.gemm(m, h, f, 1.0, s.fp32);
                        if cast {
                            o.ew(m * hs, rb + a, 1.0);
                        }
                        o.gemm(m, h, f, 1.0, s.fp32);
                    }
                    o.ew(m * f, 2.0 * a, 1.0); // act
                    o.ew(m * f, 3.0 * a, 1.0); // gate · up
                }
                false => {
                    o.gemm(m, h, f, 1.0, s.fp32);
                    match dense.act {
                        Act::ComposedTanh => {
                            if cast {
                                // pow in fp32 (cast + pow), ·c, +x, ·√(2/π), tanh, +1, 0.5·x,
                                // product (fp32), then the cast before c_proj.
                                o.ew(
                                    m * f,
                                    6.0 + 8.0 + 10.0 + 8.0 + 8.0 + 8.0 + 2.0 * a + 10.0,
                                    9.0,
                                );
                                o.ew(m * f, 4.0 + a, 1.0);
                            } else {
                                o.ew(m * f, 8.0 * 2.0 * a + a, 8.0);
                            }
                        }
                        Act::QuickGelu => o.ew(m * f, 2.0 * a + 3.0 * a + 2.0 * a, 3.0),
                        Act::Fused | Act::Relu => o.ew(m * f, 2.0 * a, 1.0),
                    }
                    if dense.inner_dropout {
                        dropout(o, m * f, p_hidden);
                        if cast {
                            // T5DenseActDense casts to the fp32 weight's dtype; autocast
                            // casts back for the GEMM.
                            o.ew(m * f, 2.0 * (a + 4.0), 2.0);
                        }
                    }
                }
            }
            o.gemm(m, f, h, 1.0, s.fp32);
        };
        if let Some(m) = moe.filter(|m| m.experts > 1) {
            experts(
                o,
                s,
                tokens,
                m.latent.map_or(h, |l| l as f64),
                ExpertsShape {
                    experts: m.experts as f64,
                    top_k: m.top_k.max(1) as f64,
                    inner: f,
                    gated: m.gated,
                    dispatch: m.dispatch,
                    fp32_weights: m.router_weights_fp32,
                    dtype: expert_dtype(s, precision),
                    bias: m.expert_bias,
                    router_kernels: m.router_kernels(),
                    fp32_router_input: m.fp32_router_input(),
                },
            );
        } else {
            one(o, tokens);
        }
        dropout(o, tokens * hs, p_hidden);
        o.ew(tokens * hs, 2.0 * rb + a, 1.0);
    };

    norm(&mut o);
    if self_attention {
        attn(&mut o, n, true);
    }
    residual(&mut o);
    if let Some(enc) = cross {
        norm(&mut o);
        attn(&mut o, enc, false);
        residual(&mut o);
    }
    // Sequential blocks norm the attention block's output; GPT-NeoX's parallel residual
    // norms the layer input twice (x + attn(ln1(x)) + mlp(ln2(x))): the same work.
    norm(&mut o);
    cast_in(&mut o);
    mlp(&mut o, n);
    for _ in 2 + u64::from(blk.cross_attention)..blk.norms.count {
        norm(&mut o);
    }
    o.w
}

/// One mixture-of-experts feed-forward's routed part, as transformers 5.x runs it.
#[derive(Debug, Clone, Copy)]
struct ExpertsShape {
    experts: f64,
    top_k: f64,
    /// One expert's inner size on this GPU.
    inner: f64,
    gated: bool,
    dispatch: Dispatch,
    /// The routing weights multiply the expert outputs in fp32.
    fp32_weights: bool,
    /// The dtype of the expert weights (and so of their grouped GEMMs).
    dtype: ExpertDtype,
    /// Biases on the expert projections, with gpt-oss's clamped SwiGLU (`GptOssExperts._apply_gate`).
    bias: bool,
    /// Kernels of the router, its GEMM included (`Moe::router_kernels`).
    router_kernels: f64,
    /// The router casts its input to fp32 and multiplies in fp32.
    fp32_router_input: bool,
}

/// The experts' weight dtype in `precision` with `s`'s residual/weight bytes: fp32 under
/// autocast (fp32 master weights, which `grouped_mm` takes as they are) and in fp32; the half
/// type when the model itself is half (pure bf16, DeepSpeed/Megatron layouts, inference).
fn expert_dtype(s: &Shape, precision: Precision) -> ExpertDtype {
    if s.resid >= 4.0 {
        ExpertDtype::Fp32
    } else if matches!(precision, Precision::Bf16 | Precision::Bf16Amp) {
        ExpertDtype::Bf16
    } else {
        ExpertDtype::Fp16
    }
}

/// The router and the experts over `tokens` rows of width `h`.
///
/// `grouped_mm_experts_forward` (transformers integrations/moe.py, the default
/// `experts_implementation` of every `@use_experts_implementation` class: Mixtral, Qwen3-MoE,
/// DeepSeek-V3, gpt-oss...; read at 5.17.0, the version the H100 steps were measured with):
/// `sort` of the `S = tokens · top_k` expert ids, `perm // top_k`, the gather
/// `hidden_states[perm // top_k]` and `sample_weights[perm]`, `histc`/`cumsum` for the offsets,
/// the gate/up [`Rates::grouped_mm`], the activation and gate product, the down grouped GEMM,
/// the routing weights' product (promoted to fp32 where the router keeps them), `inv_perm`
/// (`arange` and an index put), `weighted_out[inv_perm]`, the sum over top-k and the cast back.
/// 5.17 also masked the sentinel rows (`clamp_`, a `masked_fill_` of the gathered rows and one
/// of each grouped GEMM's output); 5.24, what is priced, does so only under expert
/// parallelism. `grouped_mm` is not an autocast operator and `_grouped_mm` casts its input to
/// the weight's dtype, so under autocast (fp32 weights) the whole expert path runs in fp32,
/// and on `_grouped_mm_fallback` ([`Rates::grouped_mm`]).
///
/// Llama 4's `Llama4TextMoe`: every token through every expert (`repeat`, the scores' product,
/// two `bmm`s over `E · tokens` rows, the sum over experts).
fn experts(o: &mut Ops<'_, '_>, s: &Shape, tokens: f64, h: f64, m: ExpertsShape) {
    let a = s.act;
    let e = m.experts;
    let up = if m.gated { 2.0 * m.inner } else { m.inner };
    // The router (`Moe::router_kernels`): its GEMM (fp32 where it casts its input), the
    // input's cast, and its scoring, top-k and normalisation over `[tokens, E]` in fp32.
    o.gemm(tokens, h, e, 1.0, s.fp32 || m.fp32_router_input);
    let mut routing = m.router_kernels - 1.0;
    if m.fp32_router_input {
        o.ew(tokens * h, a + 4.0, 1.0);
        routing -= 1.0;
    }
    o.ew(tokens * e, 4.0 * 4.0, routing);
    let act = |o: &mut Ops<'_, '_>, rows: f64, b: f64| {
        if m.gated {
            o.ew(rows * m.inner, 2.0 * b + 3.0 * b, 2.0); // act(gate), · up
        } else {
            o.ew(rows * m.inner, 2.0 * b, 1.0);
        }
    };
    match m.dispatch {
        Dispatch::AllExperts => {
            let rows = tokens * e;
            o.ew(rows * h, 2.0 * a + 3.0 * a, 2.0); // repeat, · scores
            o.gemm(tokens, h, up, e, s.fp32);
            act(o, rows, a);
            o.gemm(tokens, m.inner, h, e, s.fp32);
            o.ew(rows * h, a, 1.0); // sum over experts
            o.ew(tokens * h, 3.0 * a, 1.0); // add_ to the shared expert's output
        }
        Dispatch::Loop => {
            // A Python loop over the experts hit after `nonzero` (a host sync): `where`,
            // index, gate/up GEMM, act, product, down GEMM, weight, `index_add_`; its launches
            // do not overlap the GPU.
            let rows = tokens * m.top_k / e;
            let mut inner = Ops {
                r: o.r,
                w: Work::default(),
            };
            for _ in 0..(e as u64) {
                inner.ew(rows * h, 2.0 * s.resid, 2.0);
                inner.gemm(rows, h, up, 1.0, s.fp32);
                act(&mut inner, rows, a);
                inner.gemm(rows, m.inner, h, 1.0, s.fp32);
                inner.ew(rows * h, 2.0 * a + 2.0 * s.resid, 3.0);
            }
            let w = inner.w;
            o.w.serial_s += w.kernels * o.r.loop_cpu_s + w.gpu();
            o.w.serial_kernels += w.kernels;
            o.w.serial_gpu_s += w.gpu();
        }
        Dispatch::GroupedMm => {
            let rows = tokens * m.top_k;
            // The hidden states and the expert path are in the weights' dtype.
            let b = if m.dtype == ExpertDtype::Fp32 {
                4.0
            } else {
                2.0
            };
            let wb: f64 = if m.fp32_weights { 4.0 } else { b };
            // sort, perm // top_k, sample_weights[perm], int(), histc, cumsum, arange,
            // inv_perm[perm] = ...: int64 index vectors of `S`. transformers 5.24 masks the
            // sentinel rows (`masked_fill_` of the gathered rows and of both grouped GEMMs'
            // outputs, `clamp_` of the ids) only under expert parallelism, which one GPU's
            // step never is (`_is_expert_parallel`; counted on the meta device).
            o.ew(rows, 6.0 * 8.0, 8.0);
            o.ew(rows * h, 2.0 * b, 1.0); // gather
            let gate_up = o.r.grouped_mm(rows, e, h, up, m.dtype);
            o.w.add(&gate_up);
            act(o, rows, b);
            if m.bias {
                // gpt-oss: each row's bias gathered and added to both projections' outputs
                // (`gate_up_proj_bias[expert_ids_g]`, `add_`), and `_apply_gate`'s clamps of
                // gate and up, `gate * alpha`, `sigmoid`, the products and `up + 1` over the
                // strided halves: 16 bytes-per-element passes of the inner width against the
                // plain gate's 5.
                o.ew(rows * (up + h), 5.0 * b, 4.0);
                o.ew(rows * m.inner, 11.0 * b, 5.0);
            }
            let down = o.r.grouped_mm(rows, e, m.inner, h, m.dtype);
            o.w.add(&down);
            o.ew(rows * h, b + wb, 1.0); // · routing weights
            o.ew(rows * h, 2.0 * wb, 1.0); // [inv_perm]
            o.ew(rows * h + tokens * h, wb, 1.0); // sum over top-k
            if wb != b {
                o.ew(tokens * h, wb + b, 1.0); // to(hidden_states.dtype)
            }
        }
    }
}

/// Forward work of one layer of the description: softmax-attention layers by [`layer`] (dense
/// MLP, experts priced by [`experts`], Gemma 4's dense MLP beside them), the mixers without
/// softmax attention (MLA, Gated DeltaNet, Mamba2) by their projections' GEMMs plus their token
/// mixing at the fused-attention rate, in place of a representative attention
/// ([`Blocks::representative`]).
pub fn block_layer(
    b: &Blocks,
    blk: &Block,
    s: &Shape,
    r: &Rates<'_>,
    attention: Attention,
    precision: Precision,
    cross: Option<f64>,
) -> Work {
    let h = b.hidden as f64;
    let rep = b.representative();
    let shaped = Block {
        mixer: if blk.mixer.as_attention().is_some() {
            blk.mixer
        } else {
            rep.mixer
        },
        ffn: match blk.ffn {
            Ffn::DenseAndMoe(d, _) => Ffn::Dense(d),
            Ffn::None => Ffn::Dense(Dense::new(0)),
            f => f,
        },
        ..*blk
    };
    // A mixer that is not softmax attention keeps the layer's norms, residual adds and MLP
    // as the walk prices them and replaces only the attention's own operators.
    let mut w = walk_layer(
        b,
        &shaped,
        s,
        r,
        attention,
        precision,
        cross,
        blk.mixer.as_attention().is_some(),
    );
    let mut o = Ops {
        r,
        w: Work::default(),
    };
    let n = s.tokens;
    if blk.mixer.as_attention().is_none() {
        let other = blk.mixer;
        if other.as_mla().is_some() {
            mla(&mut o, s, &other, h);
        } else {
            let proj = other.active_params(b.hidden) as f64;
            o.gemm(n, proj / s.tp, 1.0, 1.0, s.fp32);
            if let Some(&g) = other.as_gdn() {
                gated_delta_net(&mut o, s, g, r.kernels);
            } else {
                let mix = other.mixing_flops_per_token((s.seq / 2.0) as u64) as f64;
                o.w.kernels += 12.0;
                o.w.attn_s += n * mix / s.tp / r.flash_flops;
            }
            o.ew(n * h, 8.0 * s.act, 8.0); // norms, gates, casts around the mixer
        }
    }
    if let Some(a) = blk.mixer.as_attention() {
        let kernel = attention_kernel(a, attention, precision, s.train, s.seq as u64);
        if a.sinks && kernel == AttnKernel::Eager {
            // gpt-oss's `eager_attention_forward` with sinks: the sinks `cat` onto the scores
            // (read, write), the row `max` (read) and its subtraction (read, write), in the
            // scores' dtype; backward, the slice's `slice_backward` into zeros, the max's
            // `scatter` into zeros and the subtraction's `neg` (counted on the meta device
            // from transformers 5.24's code: 1.1 GB of `cat`, 1.1 of `sub`, 0.5 of `max` a
            // layer forward at 64 heads × 2048² bf16 scores; backward `slice_backward` 1.4,
            // `neg` 1.1, `scatter` 1.1 GB).
            // The `cat` appends one element a row, so it runs off the vectorized kernel
            // (`Rates::unaligned_cat_s`): its time beyond the element-wise rate.
            let heads = a.heads as f64 / s.tp;
            let scores = n * heads * s.seq.min(n);
            o.w.kernels += 4.0;
            o.w.score_s += r.bytes_s(scores * 5.0 * s.act);
            let cat = scores * 2.0 * s.act;
            o.w.slow_copy_s += r.unaligned_cat_s(cat) - r.bytes_s(cat);
            o.w.bwd_extra_s += r.bytes_s(scores * 4.0 * s.act);
            o.w.bwd_extra_kernels += 4.0;
        }
    }
    if let Some(m) = blk.ffn.moe() {
        if blk.ffn.dense().is_some() {
            experts(
                &mut o,
                s,
                n,
                m.latent.map_or(h, |l| l as f64),
                ExpertsShape {
                    experts: m.experts as f64,
                    top_k: m.top_k as f64,
                    inner: m.expert_intermediate as f64 / s.tp,
                    gated: m.gated,
                    dispatch: m.dispatch,
                    fp32_weights: m.router_weights_fp32,
                    dtype: expert_dtype(s, precision),
                    bias: m.expert_bias,
                    router_kernels: m.router_kernels(),
                    fp32_router_input: m.fp32_router_input(),
                },
            );
        }
        if let Some(l) = m.latent {
            o.gemm(n, h, l as f64, 1.0, s.fp32);
            o.gemm(n, l as f64, h, 1.0, s.fp32);
        }
        if let Some(sh) = m.shared {
            let f = sh.intermediate as f64 / s.tp;
            let ups = if sh.gated { 2.0 } else { 1.0 };
            o.gemm(n, h, ups * f, 1.0, s.fp32);
            o.ew(n * f, 5.0 * s.act, 2.0);
            o.gemm(n, f, h, 1.0, s.fp32);
            o.ew(n * h, 3.0 * s.act, 1.0);
        }
    }
    w.add(&o.w);
    w
}

/// Multi-head latent attention as transformers 5.24 runs it (`DeepseekV3Attention`, with
/// `sdpa`), counted operator by operator on the meta device (every ATen operator of the
/// module's forward and backward; bf16, DeepSeek-V3's dimensions at 2048 tokens):
/// - forward: the five projections (`q_a_proj`, `q_b_proj`, or one `q_proj` without a query
///   rank; `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`), the `q_a`/`kv_a` RMSNorms (8 kernels
///   each), the rotary embedding of the queries' and the shared key's rotary halves (7 kernels
///   each: four products, a difference and a sum over the half-width halves, then their
///   `cat`), the latent `cat`s (2), the queries' `cat` of their plain and rotary parts, and the
///   keys assembled per head (`new_empty`, `copy_` of the plain part, `copy_` of the broadcast
///   rotary part): 35 kernels and the GEMMs around one fused attention. Over every head, per
///   token, `2·qk + 2·nope + 9·rope` elements move (`qk = nope + rope`).
/// - backward: the gradients of those views and copies are materialised (`clone`s of the
///   queries' and keys' gradients before the projections' GEMMs, the `copy_` into the keys'
///   slices, the `cat` of the key and value gradients, the rotary half's `slice_backward`s and
///   sums): `8·qk + 16·rope + 2·nope + 4·(nope + v)` elements a head and token, about three
///   times the forward's, where the planner's backward takes twice.
fn mla(o: &mut Ops<'_, '_>, s: &Shape, mixer: &blocks::Mixer, h: f64) {
    let Some(m) = mixer.as_mla() else {
        return;
    };
    let linear = mixer.active_params(h as u64) as f64;
    let n = s.tokens;
    let heads = m.heads as f64 / s.tp;
    let (nope, rope, v) = (
        m.qk_nope_head_dim as f64,
        m.qk_rope_head_dim as f64,
        m.v_head_dim as f64,
    );
    let qk = nope + rope;
    let kl = m.kv_lora_rank as f64;
    let a = s.act;
    let mut counted = 0.0;
    let mut proj = |o: &mut Ops<'_, '_>, k: f64, out: f64| {
        counted += k * out;
        o.gemm(n, k, out, 1.0, s.fp32);
    };
    match m.q_lora_rank {
        Some(ql) => {
            let ql = ql as f64;
            proj(o, h, ql);
            proj(o, ql, heads * qk);
        }
        None => proj(o, h, heads * qk),
    }
    proj(o, h, kl + rope);
    proj(o, kl, heads * (nope + v));
    proj(o, heads * v, h);
    // Anything else the mixer multiplies by (DeepSeek sparse attention's indexer).
    let rest = (linear / s.tp - counted).max(0.0);
    if rest > 0.0 {
        o.gemm(n, rest, 1.0, 1.0, s.fp32);
    }
    // q_a/kv_a RMSNorms in the half type: to(fp32), pow, mean, + eps, rsqrt, ·, to(dtype),
    // weight ·.
    let normed = m.q_lora_rank.map_or(0.0, |q| q as f64) + kl;
    let norms = if m.q_lora_rank.is_some() { 2.0 } else { 1.0 };
    o.ew(
        n * normed,
        (a + 4.0) + 8.0 + 4.0 + 8.0 + (4.0 + a) + 2.0 * a,
        8.0 * norms,
    );
    o.ew(n * heads, (2.0 * qk + 2.0 * nope + 9.0 * rope) * a, 19.0);
    let mix = mixer.mixing_flops_per_token((s.seq / 2.0) as u64) as f64;
    o.w.kernels += 1.0;
    o.w.attn_s += n * mix / s.tp / o.r.flash_flops;
    let fwd = n * heads * (2.0 * qk + 2.0 * nope + 9.0 * rope) * a;
    let bwd = n * heads * (8.0 * qk + 16.0 * rope + 2.0 * nope + 4.0 * (nope + v)) * a;
    // The planner's backward takes twice the forward's bytes; the rest is the copies' autograd.
    o.w.bwd_extra_s += o.r.bytes_s((bwd - 2.0 * fwd).max(0.0));
}

/// Gated DeltaNet's token mixing as transformers 5.24 runs it (`Qwen3_5GatedDeltaNet`), beyond
/// its projections.
///
/// Without flash-linear-attention (what `pip install transformers` gives),
/// `torch_chunk_gated_delta_rule`: q, k, v, β and the decay cast to fp32 and padded to 64-token
/// chunks, the chunk-local products and two `solve_triangular`s, then a Python loop over the
/// `C` chunks (two `matmul`s for the new values, the state read, the intra-chunk product, the
/// output slice written, the state's decay and update: nine kernels a chunk). Its autograd
/// makes the backward quadratic in the chunks: every chunk's `tensor[:, :, i]` select has a
/// `select_backward` that writes a zero tensor of the whole chunked shape, and the gradients
/// accumulate over them. Counted on the meta device from transformers 5.24 (Qwen3.5-27B's
/// dimensions, 48 value heads of 128, at 1024, 2048 and 4096 tokens): the mixer's forward
/// launches 75 + 9 C kernels and moves about 140 fp32 rows of `heads × v_head_dim` a token;
/// its backward launches 122 + 32 C kernels and moves (250 + 23 C) such rows a token. Its fp32
/// GEMMs (TF32 off) are small: about `2 · v_head_dim · (3 · 64 + 4 · k_head_dim)` FLOPs per token
/// and value head forward.
///
/// With flash-linear-attention its Triton `chunk_gated_delta_rule` (fla's
/// `ops/gated_delta_rule/chunk.py`, called by transformers 5.24 with `use_qk_l2norm_in_kernel`
/// and q, k at the key heads: fla's kernels take fewer key heads than value heads), pass by
/// pass: forward the two `l2norm_fwd`s, `chunk_local_cumsum`, `chunk_scaled_dot_kkt_fwd` (A in
/// fp32), `solve_tril` (A to bf16), `recompute_w_u_fwd` (w, u), `chunk_gated_delta_rule_fwd_h`
/// (the bf16 state of every 64-token chunk, `[NT, H, K, V]`, and the new values) and
/// `chunk_fwd_o`; backward w, u and the states recomputed, `chunk_bwd_dv_local`,
/// `chunk_gated_delta_rule_bwd_dhu` (the states' gradients), `chunk_bwd_dqkwg`,
/// `prepare_wy_repr_bwd`, the two `add_`s, the reverse cumsum and the two `l2norm_bwd`s: 10
/// kernels forward and 13 backward. Their bytes per token in key rows `kr` (key heads × key
/// size, bf16), value rows `vr`, `w` rows `wr` (value heads × key size), A rows `a` (value
/// heads × 64) and states `st` (value heads × key × value size, bf16, per 64 tokens): forward
/// 9 kr + 6 vr + 12 a + 2 wr + 2 st, backward 21 kr + 15 vr + 4 a + 6 wr + 4 st (gradients
/// written in the inputs' dtype). Its GEMMs are those of the chunked algebra above, in bf16.
fn gated_delta_net(o: &mut Ops<'_, '_>, s: &Shape, g: vram_model::blocks::Gdn, k: Kernels) {
    let n = s.tokens;
    let hv = g.num_v_heads as f64 / s.tp;
    let (dk, dv) = (g.k_head_dim as f64, g.v_head_dim as f64);
    let chunks = (s.seq / 64.0).ceil().max(1.0);
    // One fp32 row of every value head's state width, for every token.
    let rows = n * hv * dv * 4.0;
    if k.fla {
        let hk = g.num_k_heads as f64 / s.tp;
        let (kr, vr, wr) = (n * hk * dk * 2.0, n * hv * dv * 2.0, n * hv * dk * 2.0);
        let (a, st) = (n * hv * 64.0, n * hv * dk * dv * 2.0 / 64.0);
        let fwd = 9.0 * kr + 6.0 * vr + 12.0 * a + 2.0 * wr + 2.0 * st;
        let bwd = 21.0 * kr + 15.0 * vr + 4.0 * a + 6.0 * wr + 4.0 * st;
        o.w.kernels += 10.0;
        o.w.ew_s += o.r.bytes_s(fwd);
        // The planner's backward is 1.5 kernels and `bwd_bytes` times the forward's: 15 and
        // twice the bytes against fla's 13 kernels and its backward passes.
        o.w.bwd_extra_s += o.r.bytes_s((bwd - 2.0 * fwd).max(0.0));
        o.gemm(n * hv, dk, 3.0 * 64.0 + 4.0 * dv, 1.0, false);
    } else {
        o.w.kernels += 75.0 + 9.0 * chunks;
        o.w.ew_s += o.r.bytes_s(rows * 140.0);
        // The planner's backward is 1.5 kernels and `bwd_bytes` times the forward's; the rest
        // is the loop's autograd.
        o.w.bwd_extra_kernels += (122.0 + 32.0 * chunks - 1.5 * (75.0 + 9.0 * chunks)).max(0.0);
        o.w.bwd_extra_s +=
            o.r.bytes_s(rows * (250.0 + 23.0 * chunks - 2.0 * 140.0).max(0.0));
        o.gemm(n * hv, dk, 3.0 * 64.0 + 4.0 * dv, 1.0, true);
    }
    if !k.causal_conv1d {
        // `causal_conv1d_fn`'s fallback: `F.conv1d` (depthwise), the slice, SiLU, the cast.
        o.w.kernels += 3.0;
    }
}

/// Forward work of the weight casts under autocast for `params` parameters in `tensors`
/// tensors: one kernel per tensor, fp32 read + bf16 written (the backward casts each weight
/// gradient back to fp32: the same again).
fn weight_casts(o: &mut Ops<'_, '_>, s: &Shape, params: f64, tensors: f64) {
    if s.resid != s.act {
        o.ew(params, s.resid + s.act, tensors);
    }
}

/// Parameters and tensors of `b`'s expert banks that autocast never casts: those that
/// `grouped_mm_experts_forward` passes to `torch._grouped_mm` (not an autocast operator) or
/// gathers (the expert biases), which run in their stored dtype.
fn grouped_banks(b: &Block, h: u64) -> (f64, f64) {
    let Some(m) = b.ffn.moe() else {
        return (0.0, 0.0);
    };
    if m.dispatch != Dispatch::GroupedMm {
        return (0.0, 0.0);
    }
    let (mut params, mut tensors) = (0.0, 0.0);
    Mechanism::tensors(m, h, &mut |x| {
        if x.component == Component::RoutedExperts && x.kind != TensorKind::Linear {
            params += x.numel() as f64;
            tensors += 1.0;
        }
    });
    (params, tensors)
}

/// One micro-batch's compute on one GPU, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MicroBatch {
    /// Forward of one layer (mean over encoder and decoder layers).
    pub layer_fwd_s: f64,
    /// Backward of one layer.
    pub layer_bwd_s: f64,
    /// The attention core of one layer's forward (what selective recomputation redoes).
    pub layer_attn_s: f64,
    /// Embedding, head and loss, forward and backward.
    pub head_s: f64,
    /// Kernels one layer's forward launches.
    pub layer_kernels: f64,
    /// Parameter tensors per parameter (for the optimizer's per-tensor launches).
    pub tensors_per_param: f64,
}

/// Prices one micro-batch of `tokens` tokens (sequences of `seq`) on one GPU.
#[allow(clippy::too_many_arguments)]
pub fn micro_batch(
    t: &Transformer,
    gpu: &Gpu,
    cal: &EagerCalibration,
    attention: Attention,
    precision: Precision,
    amp: AmpStyle,
    tokens: f64,
    seq: f64,
    tp: f64,
    sp: bool,
) -> MicroBatch {
    let r = Rates::new(gpu, cal);
    let mut s = Shape::new(tokens, seq, precision, amp, true);
    s.tp = tp;
    s.sp = sp;
    let with_casts = |mut w: Work, params: f64, tensors: f64| {
        let mut o = Ops { r: &r, w };
        weight_casts(&mut o, &s, params, tensors);
        w = o.w;
        w
    };
    // Each kind of layer priced with its own operators, weighted by how many layers use it. A
    // kind casts its own parameters, less the expert banks `grouped_mm` takes as they are; its
    // tensors are counted from the description, a norm's weight and bias as one.
    let desc = &t.blocks;
    let hidden = desc.hidden;
    let kinds: Vec<(f64, Work)> = desc
        .kinds
        .iter()
        .zip(desc.kind_counts())
        .map(|(k, n)| {
            let (banks, bank_tensors) = grouped_banks(k, hidden);
            let mut tensors = 0.0;
            k.tensors(hidden, &mut |_| tensors += 1.0);
            if k.norms.norm.bias {
                tensors -= k.norms.count as f64;
            }
            if let Some(cross) = k.cross() {
                // A decoder layer's cast kernels are counted as its self-attention's, MLP's and
                // norms' (how `EagerCalibration` was fitted, T5 in the fitting set): counting
                // the cross-attention's too moves the fitted `elementwise_eta` from 0.80 to
                // 0.85.
                cross.tensors(hidden, &mut |_| tensors -= 1.0);
                tensors -= 1.0;
            }
            let params = (k.params(hidden).total() as f64 - banks) / tp;
            let cross = k.cross_attention.then_some(tokens);
            (
                n as f64,
                with_casts(
                    block_layer(desc, k, &s, &r, attention, precision, cross),
                    params,
                    tensors - bank_tensors,
                ),
            )
        })
        .collect();
    let mean = |f: &dyn Fn(&Work) -> f64| {
        let total: f64 = kinds.iter().map(|(n, _)| n).sum();
        kinds.iter().map(|(n, w)| n * f(w)).sum::<f64>() / total.max(1.0)
    };
    let layer_fwd_s = mean(&|w| w.forward_s(cal));
    let layer_bwd_s = mean(&|w| w.backward_s(cal));
    let layer_attn_s = mean(&|w| w.attn_s);
    let layer_kernels = mean(&|w| w.kernels);

    // --- embedding, head, loss ---
    let h = desc.hidden as f64;
    let v = desc.vocab() as f64 / tp;
    let (a, rb) = (s.act, s.resid);
    let mut f = Ops {
        r: &r,
        w: Work::default(),
    };
    // gathers (word, positions, token types), adds, embedding norm, dropout
    let gathers = 1.0
        + f64::from(desc.embedding.learned_positions > 0)
        + f64::from(desc.embedding.type_vocab > 0);
    f.ew(
        tokens * h,
        gathers * 2.0 * rb + (gathers - 1.0) * 3.0 * rb,
        2.0 * gathers - 1.0,
    );
    if desc.embedding.norm {
        f.ew(tokens * h, 2.0 * rb, 1.0);
    }
    if desc.dropout.hidden > 0.0 {
        f.ew(tokens * h, 2.0 * rb + 1.0, 1.0);
    }
    let mut b = Ops {
        r: &r,
        w: Work::default(),
    };
    // embedding_dense_backward: a zeroed fp32 table gradient and an index add
    b.ew(desc.vocab() as f64 * h / tp, 4.0, 2.0);
    b.ew(tokens * h, 2.0 * 4.0, 1.0);
    if desc.layout == Layout::EncoderOnly {
        // pooler (first token), tanh, dropout, 2-way classifier, loss
        let rows = tokens / seq;
        f.gemm(rows, h, h, 1.0, s.fp32);
        f.ew(rows * h, 4.0 * a, 6.0);
        b.gemm(rows, h, h, 2.0, s.fp32);
        b.ew(rows * h, 6.0 * a, 6.0);
    } else {
        // final norm (RMS: six kernels), T5's tied rescale, cast, LM head
        let rms = desc.norm.kind == NormKind::RmsNorm;
        f.ew(
            tokens * h,
            if rms { 28.0 } else { 2.0 * rb },
            if rms { 6.0 } else { 1.0 },
        );
        if desc.head.tied_rescale {
            f.ew(tokens * h, 2.0 * rb, 1.0);
        }
        if rb != a {
            f.ew(tokens * h, rb + a, 1.0);
        }
        f.gemm(tokens, h, v, 1.0, s.fp32);
        b.gemm(tokens, h, v, 2.0, s.fp32);
        let logits = tokens * v;
        let upcast = if a < 4.0 { a + 4.0 } else { 0.0 };
        // `final_logit_softcapping` (Gemma 2's default 30): divide, tanh, multiply.
        if desc.head.softcap {
            f.ew(logits, 3.0 * 2.0 * a, 3.0);
            b.ew(logits, 3.0 * 3.0 * a, 3.0);
        }
        // ForCausalLMLoss: logits.float(), label pad/shift, cross_entropy (log_softmax, nll)
        f.ew(logits, upcast + 8.0, 5.0);
        // nll backward (zeroed fp32 gradient), log_softmax backward, the cast back
        b.ew(logits, 4.0 + 12.0 + upcast, 4.0);
    }
    let head_s = f.w.forward_s(cal) + (b.w.kernels * cal.bwd_cpu_s).max(b.w.gpu());
    MicroBatch {
        layer_fwd_s,
        layer_bwd_s,
        layer_attn_s,
        head_s,
        layer_kernels,
        tensors_per_param: t.param_tensors().iter().map(|p| p.count).sum::<u64>() as f64
            / t.param_count().max(1) as f64,
    }
}

/// Elements moved per parameter by one optimizer step (`torch.optim`, `foreach` on CUDA),
/// each of the parameter's dtype; and kernels launched per parameter tensor.
///
/// - AdamW (`_multi_tensor_adam`, decoupled weight decay 0.01 by default): `mul_` (p: 2),
///   `lerp_` (m, g → m: 3), `mul_` (v: 2), `addcmul_` (v, g, g → v: 4), `sqrt` (v → d: 2),
///   `div_` (d: 2), `add_` (d: 2), `addcdiv_` (p, m, d → p: 4) = 21.
/// - SGD: `add_` (p, g → p) = 3. With momentum: `mul_` (b: 2), `add_` (b, g: 3), `add_`
///   (p, b: 3) = 8.
/// - Adafactor (`torch.optim.Adafactor`, single-tensor): two norms of the gradient (2), the
///   `row_var @ col_var` estimate written (1), `div_` (2), `clamp_` and `rsqrt_` (4), `mul_` by
///   the gradient (3), the update's norm (1), `add_` to the parameter (3) = 16, about 15 kernels
///   per tensor and a `.item()` per tensor (the update clipping), which syncs the host.
/// - 8-bit Adam (bitsandbytes): one fused kernel reading p, g and two 1-byte states and
///   writing them: about 4 fp32-sized elements.
pub fn optimizer_elements(opt: Optimizer) -> (f64, f64) {
    match opt {
        Optimizer::Adamw => (21.0, 8.0 / 48.0),
        Optimizer::Sgd => (3.0, 1.0 / 48.0),
        Optimizer::Momentum => (8.0, 3.0 / 48.0),
        Optimizer::Adafactor => (16.0, 15.0),
        Optimizer::Adam8bit => (4.0, 1.0),
    }
}

/// Seconds of one optimizer step over `params` parameters in `tensors` tensors whose
/// states have `state_bytes` bytes an element; `scaler`: fp16 loss scaling (unscale and
/// inf check over the gradients, one `.item()`).
pub fn optimizer_s(
    gpu: &Gpu,
    cal: &EagerCalibration,
    opt: Optimizer,
    params: f64,
    tensors: f64,
    state_bytes: f64,
    scaler: bool,
) -> f64 {
    let r = Rates::new(gpu, cal);
    let (elems, kernels_per_tensor) = optimizer_elements(opt);
    let gpu_s = r.bytes_s(params * elems * state_bytes);
    let kernels = tensors * kernels_per_tensor;
    let mut t = if opt == Optimizer::Adafactor {
        // A host sync per tensor: launches and GPU work do not overlap.
        kernels * cal.launch_s + gpu_s
    } else {
        (kernels * cal.launch_s).max(gpu_s)
    };
    if scaler {
        t += r.bytes_s(params * 2.0 * 4.0);
    }
    t
}

/// Seconds to add one more micro-batch's gradients into `.grad` (gradient accumulation):
/// read both, write the sum, of the gradient's dtype.
pub fn accumulate_s(gpu: &Gpu, cal: &EagerCalibration, params: f64, grad_bytes: f64) -> f64 {
    Rates::new(gpu, cal).bytes_s(params * 3.0 * grad_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One MoE feed-forward of `tokens` tokens (Mixtral's shapes, `experts` experts) in
    /// `precision` under autocast on `gpu`.
    fn moe_work(
        dispatch: Dispatch,
        n_experts: f64,
        tokens: f64,
        precision: Precision,
        gpu: &str,
    ) -> Work {
        let gpu = vram_model::gpu::lookup(gpu).unwrap();
        let cal = EagerCalibration::default();
        let r = Rates::new(gpu, &cal);
        let s = Shape::new(tokens, 2048.0, precision, AmpStyle::Autocast, true);
        let mut o = Ops {
            r: &r,
            w: Work::default(),
        };
        experts(
            &mut o,
            &s,
            tokens,
            4096.0,
            ExpertsShape {
                experts: n_experts,
                top_k: 2.0,
                inner: 14336.0,
                gated: true,
                dispatch,
                fp32_weights: false,
                dtype: expert_dtype(&s, precision),
                bias: false,
                router_kernels: 7.0,
                fp32_router_input: false,
            },
        );
        o.w
    }

    /// Pure bf16 on an H100: `grouped_mm_experts_forward` reaches `_grouped_mm`'s CUTLASS
    /// kernel and launches a fixed set of kernels whatever the expert count, with no host
    /// sync; the per-expert loop launches nine per expert after a sync.
    #[test]
    fn grouped_mm_experts_in_bf16_have_no_host_sync_and_a_fixed_kernel_count() {
        let bf16 = |e| moe_work(Dispatch::GroupedMm, e, 4096.0, Precision::Bf16, "h100-80g");
        let (g8, g64) = (bf16(8.0), bf16(64.0));
        assert_eq!((g8.serial_s, g8.syncs), (0.0, 0.0));
        assert_eq!(g8.kernels, g64.kernels);
        // router GEMM, 6 routing kernels, 8 index kernels, gather, 2 grouped GEMMs, 2 for
        // the gate, weights, inverse permutation, sum (no cast back: all bf16; no sentinel
        // masks on one GPU).
        assert_eq!(g8.kernels, 1.0 + 6.0 + 8.0 + 1.0 + 2.0 + 2.0 + 3.0);
        // Each grouped GEMM's `prepare_grouped_gemm_data` launch.
        assert_eq!(g8.cxx_kernels, 2.0);
        let l8 = moe_work(Dispatch::Loop, 8.0, 4096.0, Precision::Bf16, "h100-80g");
        assert_eq!(l8.serial_kernels, 8.0 * 9.0);
        let cal = EagerCalibration::default();
        assert!(l8.forward_s(&cal) > g8.forward_s(&cal));
        // Llama 4 runs every token through every expert: E/top-k times the expert GEMM work.
        let all = moe_work(
            Dispatch::AllExperts,
            8.0,
            4096.0,
            Precision::Bf16,
            "h100-80g",
        );
        assert!(all.gemm_s > 3.0 * g8.gemm_s);
    }

    /// Under autocast the experts' weights are the fp32 master weights, which `grouped_mm`
    /// (no autocast rule) takes as they are: `_grouped_mm_fallback`, a host sync and one fp32
    /// GEMM per expert for each of the two grouped calls. Mixtral's expert GEMMs then cost at
    /// least their FLOPs at the best fp32 rate measured on the H100 (51.9 TFLOP/s, TF32 off),
    /// more than ten times the bf16 kernel's time.
    #[test]
    fn grouped_mm_under_autocast_runs_fp32_gemms_per_expert_after_a_sync() {
        let tokens = 8192.0;
        let amp = moe_work(
            Dispatch::GroupedMm,
            8.0,
            tokens,
            Precision::Bf16Amp,
            "h100-80g",
        );
        let bf16 = moe_work(
            Dispatch::GroupedMm,
            8.0,
            tokens,
            Precision::Bf16,
            "h100-80g",
        );
        assert_eq!(amp.syncs, 2.0);
        assert_eq!(amp.cxx_kernels, 2.0 * 8.0);
        let expert_flops = 2.0 * tokens * 2.0 * 4096.0 * 3.0 * 14336.0;
        let router_flops = 2.0 * tokens * 4096.0 * 8.0;
        assert!(amp.gemm_s >= expert_flops / 51.95e12, "{}", amp.gemm_s);
        assert!(amp.gemm_s > 10.0 * bf16.gemm_s);
        // fp32 work in fp32: the pure-fp32 step prices the same expert GEMMs (its router GEMM
        // is fp32 too).
        let fp32 = moe_work(
            Dispatch::GroupedMm,
            8.0,
            tokens,
            Precision::Fp32,
            "h100-80g",
        );
        assert!(fp32.gemm_s >= amp.gemm_s);
        assert!(fp32.gemm_s - amp.gemm_s < router_flops / 10e12);
        // Before Hopper the bf16 kernel is not built: bf16 falls back too, and so does fp16.
        let a100 = moe_work(
            Dispatch::GroupedMm,
            8.0,
            tokens,
            Precision::Bf16,
            "a100-80g",
        );
        assert_eq!((a100.syncs, a100.cxx_kernels), (2.0, 16.0));
    }

    /// Few rows per expert: the grouped GEMM reads every receiving expert's weights, and each
    /// expert's rows fill whole 64-row tiles, so it is far from the dense rate.
    #[test]
    fn grouped_mm_with_few_rows_per_expert_pays_its_tiles_and_weight_reads() {
        let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
        let r = Rates::new(gpu, &EagerCalibration::default());
        // 512 rows over 128 experts (a 256-token batch at top-8 of Qwen3-30B-A3B's shapes).
        let (rows, e, k, n) = (512.0, 128.0, 2048.0, 1536.0);
        let w = r.grouped_mm(rows, e, k, n, ExpertDtype::Bf16);
        let occupied: f64 = e * (1.0 - (1.0_f64 - 1.0 / e).powf(rows));
        assert!(occupied > 124.0 && occupied < 128.0, "{occupied}");
        assert!(w.gemm_s >= occupied * k * n * 2.0 / r.hbm_bytes_per_s);
        assert!(w.gemm_s >= r.gemm_s(occupied * 64.0, k, n, 1.0, false));
        // The same rows through one dense weight take far less.
        assert!(w.gemm_s > 10.0 * r.gemm_s(rows, k, n, 1.0, false));
    }

    #[test]
    fn calibration_parses_and_interpolates_the_measured_points() {
        let h = h100();
        // bf16 at m = 8192: 4096 x 4096 measured at 694.0 TFLOP/s and 2048 x 8192 (the same
        // k·n) at 642.4; the grid point is their mean, 668.2.
        let r = h.bf16.tflops(8192.0, 4096.0 * 4096.0);
        assert!((r / 668.2 - 1.0).abs() < 0.001, "{r}");
        // m = 32768, 8192 x 28672 measured at 680.7.
        let r = h.bf16.tflops(32768.0, 8192.0 * 28672.0);
        assert!((r / 680.67 - 1.0).abs() < 0.001, "{r}");
        // fp32 2048 x 768 x 3072 measured at 38.9 TFLOP/s.
        let r = h.fp32.tflops(2048.0, 768.0 * 3072.0);
        assert!((r / 38.86 - 1.0).abs() < 0.01, "{r}");
        // 1 GiB copy: 2925 GB/s; the bare Python loop: 9.64 µs a kernel.
        assert!((h.bandwidth / 2.9249e12 - 1.0).abs() < 1e-3);
        assert!((h.launch_s - 9.64e-6).abs() < 0.01e-6);
        // Between grid points throughput is monotone in the rows for a fixed shape.
        let a = h.bf16.tflops(1024.0, 4096.0 * 4096.0);
        let b = h.bf16.tflops(4096.0, 4096.0 * 4096.0);
        assert!(453.0 < a && a < b && b < 668.3, "{a} {b}");
    }

    #[test]
    fn optimizer_bytes_by_hand() {
        // foreach AdamW streams 21 fp32 elements a parameter: 84 bytes; SGD 12.
        assert_eq!(optimizer_elements(Optimizer::Adamw).0 * 4.0, 84.0);
        assert_eq!(optimizer_elements(Optimizer::Sgd).0 * 4.0, 12.0);
    }
}
