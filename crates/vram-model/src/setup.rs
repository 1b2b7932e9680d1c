//! The knobs of a training or inference step: precision, optimizer, batch, parallelism, overheads.
//!
//! Every field has the default a user gets from the `vram` CLI when the flag is left out.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::gpu::Gpu;

/// Numeric precision of the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// Everything in fp32.
    Fp32,
    /// fp16 compute with fp32 master weights (and a loss scaler).
    Fp16Amp,
    /// bf16 compute with fp32 master weights (the default).
    Bf16Amp,
    /// Everything in bf16: weights, gradients and optimizer states; no master copy.
    Bf16,
}

impl Precision {
    /// Whether this is mixed precision with an fp32 master copy.
    pub fn is_amp(self) -> bool {
        matches!(self, Precision::Fp16Amp | Precision::Bf16Amp)
    }
    /// Its name as the CLI's `--precision` and the JSON spell it.
    pub fn flag(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16Amp => "fp16-amp",
            Precision::Bf16Amp => "bf16-amp",
            Precision::Bf16 => "bf16",
        }
    }
    /// Whether this precision computes in bf16.
    pub fn is_bf16(self) -> bool {
        matches!(self, Precision::Bf16Amp | Precision::Bf16)
    }
    /// Whether `gpu` runs this precision natively: bf16 needs compute capability 8.0 (Ampere)
    /// or later, or an AMD GPU (the catalog's [`Gpu::bf16`]), which is torch 2.15's
    /// `torch.cuda.is_bf16_supported(including_emulation=False)`. On a V100, T4 or GTX 1080
    /// torch still makes bf16 tensors (`is_bf16_supported()` is `True` by emulation, and
    /// transformers 5.24's `TrainingArguments(bf16=True)` accepts it), but without bf16
    /// tensor cores, at a speed vram does not model.
    pub fn runs_on(self, gpu: &Gpu) -> bool {
        gpu.bf16 || !self.is_bf16()
    }
    /// The precision a job that asks for `self` is planned in on `gpu`: `self` where the GPU
    /// runs it ([`Precision::runs_on`]), else fp16 mixed precision, which every GPU without bf16
    /// runs at the catalog's half-precision rate ([`Gpu::half_tflops`]: fp16 tensor cores on a
    /// V100 or T4, the fp32 rate on a GTX 1080). `Bf16Amp.on(gpu)` is the planner's default.
    pub fn on(self, gpu: &Gpu) -> Precision {
        if self.runs_on(gpu) {
            self
        } else {
            Precision::Fp16Amp
        }
    }
    /// Bytes of one element of compute (matmul inputs and outputs).
    pub fn compute_bytes(self) -> u64 {
        if self == Precision::Fp32 {
            4
        } else {
            2
        }
    }
}

/// Which implementation's mixed-precision memory layout applies.
///
/// The three engines hold the same 16 bytes of model state per parameter for Adam differently,
/// and that changes when the bytes are live (see ARCHITECTURE.md, "mixed precision").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AmpStyle {
    /// PyTorch `torch.autocast`: fp32 weights and gradients; half copies of weights made in
    /// forward and kept for backward; fp32 residual stream.
    Autocast,
    /// DeepSpeed: half weights and gradients, fp32 master weights and Adam states in the
    /// optimizer (partitioned by ZeRO).
    #[serde(rename = "deepspeed")]
    DeepSpeed,
    /// Megatron-LM: half weights, fp32 main gradients, fp32 master weights and Adam states
    /// (partitioned by the distributed optimizer when `zero >= 1`).
    Megatron,
}

/// The optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one state.
    Momentum,
    /// AdamW (and Adam): two states.
    Adamw,
    /// bitsandbytes 8-bit AdamW: two 1-byte states plus block-wise scales.
    Adam8bit,
    /// Adafactor with factored second moments and no first moment (its default).
    Adafactor,
}

/// Activation recomputation (checkpointing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recompute {
    /// Store every activation backward needs.
    None,
    /// Recompute only the attention core (the `s²` tensors), as in Korthikanti et al. 2022.
    Selective,
    /// Store each block's input only and recompute the block in backward.
    Full,
}

/// Attention implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attention {
    /// Explicit `softmax(QKᵀ)V`: stores the `s²` scores.
    Eager,
    /// Fused (`scaled_dot_product_attention`, FlashAttention): stores output and log-sum-exp.
    Sdpa,
}

/// What ZeRO moves to host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Offload {
    /// Nothing.
    None,
    /// Optimizer states and master weights (and, from ZeRO-2, gradient partitions).
    Optimizer,
    /// Also parameters (ZeRO-3 only).
    Params,
}

/// Pipeline schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// All micro-batches forward, then all backward.
    Gpipe,
    /// One forward, one backward (PipeDream-Flush); the default.
    OneFOneB,
    /// Interleaved 1F1B with this many model chunks per GPU.
    Interleaved(u64),
}

/// Parallel layout of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parallel {
    /// Data-parallel degree.
    pub dp: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline-parallel degree.
    pub pp: u64,
    /// Megatron sequence parallelism (needs `tp > 1`).
    pub sequence_parallel: bool,
    /// ZeRO stage 0..=3.
    pub zero: u8,
    /// Pipeline schedule (used when `pp > 1`).
    pub schedule: Schedule,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            dp: 1,
            tp: 1,
            pp: 1,
            sequence_parallel: false,
            zero: 0,
            schedule: Schedule::OneFOneB,
        }
    }
}

/// Memory outside the tensors a model allocates. All settable; printed with every estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Overheads {
    /// CUDA context, kernels and library handles, outside the caching allocator (what
    /// `nvidia-smi` shows beyond `torch.cuda.memory_reserved()`).
    pub cuda_context_bytes: u64,
    /// cuBLAS/cuDNN workspaces allocated through the caching allocator.
    pub workspace_bytes: u64,
    /// A fixed reserved-but-unallocated share of the peak allocated bytes, in place of running
    /// the step's tensors through the allocator. `None` (the default) replays them.
    pub fragmentation: Option<f64>,
    /// The caching allocator whose behaviour gives the reserved bytes.
    pub allocator: Allocator,
    /// Whether half-precision weights were first created in fp32 and then cast
    /// (`AutoModel.from_config(cfg)` or `from_pretrained(..., dtype=torch.float32)` followed by
    /// `model.to(torch.bfloat16)`): the fp32 tensors' blocks stay reserved and the half ones are
    /// carved out of them. `false` when the weights are created in their own dtype
    /// (`from_pretrained(...)`: transformers 5.24 loads the checkpoint's own dtype directly,
    /// `dtype=None` becoming `"auto"` in `modeling_utils.PreTrainedModel.from_pretrained`), the
    /// default. Affects reserved bytes only.
    pub weights_cast_from_fp32: bool,
    /// Which of `generate`'s decode steps the allocator replay walks (`--decode-replay`).
    pub decode_replay: DecodeReplay,
    /// Inference: a warm-up `generate` call made before the estimated one (`--warmup-prompt`):
    /// the same batch and new tokens on the first `min(N, prompt)` prompt tokens, everything it
    /// made freed at its end, then `torch.cuda.reset_peak_memory_stats()` (a benchmark's
    /// warm-up, as `measure2.py` runs it). Its cached segments stay with the allocator and the
    /// estimated call reuses them, so the reserved peak can differ from a first call's; the
    /// allocated peak restarts at what is live. `None` (the default): the estimated call is the
    /// process's first.
    #[serde(default)]
    pub warmup_prompt: Option<u64>,
    /// Whether the library dequantizes a packed checkpoint's weights at load
    /// ([`crate::describe::Storage::load`]: MXFP4 without its kernels or on an older GPU, FP8
    /// below compute capability 8.9, `--dequantized`): the walk then holds every weight at the
    /// step's precision. `false`: packed weights as stored in an inference step.
    pub weights_dequantized: bool,
}

/// Which decode steps of `generate` an allocator replay walks (`--decode-replay`).
///
/// A dynamic cache reallocates every layer's keys and values at every token, and where PyTorch's
/// caching allocator puts them depends on every step before: the replay's cost grows with the
/// new tokens, and no shorter walk gives the same figures in general (the growing tensors
/// circulate through the blocks the prefill left free, and how many stay there depends on every
/// step; `tests/it/generate_replay.rs` shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeReplay {
    /// Every decode step up to [`SAMPLED_DECODE_STEPS`] of them; beyond, that many: the first
    /// two, the last two and the others evenly spaced, each reallocating the cache to its
    /// length there. Cost independent of the
    /// new tokens; figures within the bounds `tests/it/generate_replay.rs` measures against
    /// [`DecodeReplay::Every`].
    #[default]
    Sampled,
    /// Every decode step (the replay's cost grows with the new tokens).
    Every,
}

/// The decode steps a [`DecodeReplay::Sampled`] replay walks at most (all of them up to this
/// many new tokens, plus one: the prefill's token needs no decode step).
pub const SAMPLED_DECODE_STEPS: u64 = 64;

/// The caching allocator the step's tensors are replayed through (`--allocator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocator {
    /// PyTorch's `CUDACachingAllocator` with default settings.
    Pytorch,
    /// PyTorch with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    PytorchExpandable,
    /// vramkit's own policy (`vram_alloc`, the plug-in's default).
    Vramkit,
}

impl Allocator {
    /// The `--allocator` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Pytorch => "pytorch",
            Allocator::PytorchExpandable => "pytorch-expandable",
            Allocator::Vramkit => "vramkit",
        }
    }
}

impl Overheads {
    /// The defaults for one GPU: its context and cuBLAS workspace (see [`crate::gpu`]).
    pub fn for_gpu(gpu: &crate::gpu::Gpu) -> Self {
        Overheads {
            cuda_context_bytes: gpu.context_bytes(),
            workspace_bytes: gpu.workspace_bytes(),
            ..Overheads::default()
        }
    }
}

impl Default for Overheads {
    fn default() -> Self {
        // The H100 with CUDA 13 figures (measured; see `gpu::H100_CUDA13_CONTEXT_BYTES` and
        // `gpu::workspace_bytes`), PyTorch's default allocator replayed, weights loaded as
        // `from_pretrained` loads them (in their own dtype).
        Overheads {
            cuda_context_bytes: crate::gpu::H100_CUDA13_CONTEXT_BYTES,
            workspace_bytes: crate::gpu::workspace_bytes(9),
            fragmentation: None,
            allocator: Allocator::Pytorch,
            weights_cast_from_fp32: false,
            decode_replay: DecodeReplay::Sampled,
            warmup_prompt: None,
            weights_dequantized: false,
        }
    }
}

/// A training step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Train {
    /// Sequences (or images) per micro-batch on one data-parallel rank.
    pub micro_batch: u64,
    /// Sequence length.
    pub seq: u64,
    /// Micro-batches per optimizer step (gradient accumulation, or pipeline micro-batches).
    pub grad_accum: u64,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// Recompute only this many layers (the first ones, Megatron's "block" method); all if `None`.
    pub recompute_layers: Option<u64>,
    /// ZeRO offload.
    pub offload: Offload,
    /// Mixed-precision layout; chosen from the parallel layout when `None`.
    pub amp_style: Option<AmpStyle>,
}

impl Default for Train {
    fn default() -> Self {
        Train {
            micro_batch: 1,
            seq: 2048,
            grad_accum: 1,
            optimizer: Optimizer::Adamw,
            recompute: Recompute::None,
            recompute_layers: None,
            offload: Offload::None,
            amp_style: None,
        }
    }
}

/// An inference step: one `generate` call (prefill of the prompt, then one forward per new
/// token) with a KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Infer {
    /// Concurrent sequences.
    pub batch: u64,
    /// Tokens per sequence at the end of generation (prompt plus new tokens); the cache holds
    /// all of them.
    pub context: u64,
    /// Tokens generated after the prompt (`max_new_tokens`); the prompt is `context − new_tokens`.
    pub new_tokens: u64,
    /// Bytes per KV-cache element (2 for fp16/bf16, 1 for fp8/int8).
    pub kv_bytes: u64,
    /// How the cache is held.
    pub kv_cache: KvCache,
}

impl Infer {
    /// Prompt tokens per sequence (at least 1).
    pub fn prompt(&self) -> u64 {
        self.context.saturating_sub(self.new_tokens).max(1)
    }
}

/// The KV cache of `generate` (transformers 5.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvCache {
    /// `DynamicCache`, the default: each layer's keys and values grow by `torch.cat` at every
    /// token, so each new token reallocates them.
    Dynamic,
    /// `StaticCache` (`cache_implementation="static"`): allocated for the whole context before
    /// the prefill and written in place.
    Static,
}

/// Training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One optimizer step.
    Train(Train),
    /// A prefill of `context` tokens into a KV cache sized for `context`.
    Infer(Infer),
}

/// Everything [`crate::estimate()`] needs besides the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Precision.
    pub precision: Precision,
    /// Attention implementation.
    pub attention: Attention,
    /// Parallel layout.
    pub parallel: Parallel,
    /// Memory outside the model's tensors.
    pub overheads: Overheads,
    /// Training or inference.
    pub mode: Mode,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            precision: Precision::Bf16Amp,
            attention: Attention::Sdpa,
            parallel: Parallel::default(),
            overheads: Overheads::default(),
            mode: Mode::Train(Train::default()),
        }
    }
}

/// Largest batch, sequence or degree accepted: beyond it the input is a typo.
pub const MAX_SIZE: u64 = 1 << 24;

/// Most tokens in one micro-batch (or one inference batch): 2^32.
pub const MAX_TOKENS: u64 = 1 << 32;

fn range(field: &str, v: u64, max: u64) -> Result<()> {
    if v == 0 || v > max {
        return Err(Error::OutOfRange {
            field: field.into(),
            value: v.to_string(),
            why: format!("must be between 1 and {max}"),
        });
    }
    Ok(())
}

impl Setup {
    /// The mixed-precision layout in force: the explicit choice, else DeepSpeed under ZeRO,
    /// Megatron under tensor or pipeline parallelism, PyTorch autocast otherwise.
    pub fn amp_style(&self) -> AmpStyle {
        let explicit = match self.mode {
            Mode::Train(t) => t.amp_style,
            Mode::Infer(_) => None,
        };
        explicit.unwrap_or(if self.parallel.zero >= 2 {
            AmpStyle::DeepSpeed
        } else if self.parallel.tp > 1 || self.parallel.pp > 1 {
            AmpStyle::Megatron
        } else if self.parallel.zero == 1 {
            AmpStyle::DeepSpeed
        } else {
            AmpStyle::Autocast
        })
    }

    /// Whether `weights_cast_from_fp32` changes the step: plain PyTorch builds the whole model
    /// (no ZeRO, TP or PP, whose engines build it sharded in place) in fp32 and casts it to a
    /// narrower dtype the step holds. Held in fp32 (fp32, or autocast's fp32 weights in
    /// training), there is no cast.
    pub fn builds_fp32_then_casts(&self) -> bool {
        let p = self.parallel;
        let held = crate::walk::parts::state_bytes(self.precision, self.amp_style()).weight;
        let held = match self.mode {
            Mode::Train(_) => held,
            Mode::Infer(_) => held.min(self.precision.compute_bytes()),
        };
        self.overheads.weights_cast_from_fp32 && p.zero == 0 && p.tp == 1 && p.pp == 1 && held < 4
    }

    /// Checks sizes and combinations that do not depend on the model.
    pub fn validate(&self) -> Result<()> {
        let p = &self.parallel;
        range("--dp", p.dp, MAX_SIZE)?;
        range("--tp", p.tp, 1024)?;
        range("--pp", p.pp, 1024)?;
        if p.zero > 3 {
            return Err(Error::OutOfRange {
                field: "--zero".into(),
                value: p.zero.to_string(),
                why: "must be 0, 1, 2 or 3".into(),
            });
        }
        if p.sequence_parallel && p.tp == 1 {
            return Err(Error::Setup(
                "--sequence-parallel needs --tp greater than 1".into(),
            ));
        }
        if let Schedule::Interleaved(v) = p.schedule {
            range("interleaved chunks", v, 64)?;
        }
        let o = &self.overheads;
        if let Some(w) = o.warmup_prompt {
            if !matches!(self.mode, Mode::Infer(_)) {
                return Err(Error::Setup(
                    "--warmup-prompt is a generate call before the estimated one; it goes with --inference".into(),
                ));
            }
            range("--warmup-prompt", w, MAX_SIZE)?;
            if o.fragmentation.is_some() {
                return Err(Error::Setup(
                    "--warmup-prompt acts through the allocator replay, which --fragmentation replaces; give one of them".into(),
                ));
            }
        }
        if let Some(f) = o
            .fragmentation
            .filter(|f| !(0.0..=10.0).contains(f) || f.is_nan())
        {
            return Err(Error::OutOfRange {
                field: "--fragmentation".into(),
                value: f.to_string(),
                why: "must be a fraction between 0 and 10".into(),
            });
        }
        match self.mode {
            Mode::Train(t) => {
                range("--micro-batch", t.micro_batch, MAX_SIZE)?;
                range("--seq", t.seq, MAX_SIZE)?;
                range("--grad-accum", t.grad_accum, MAX_SIZE)?;
                if t.micro_batch.saturating_mul(t.seq) > MAX_TOKENS {
                    return Err(Error::OutOfRange {
                        field: "--micro-batch x --seq".into(),
                        value: format!("{} tokens", t.micro_batch.saturating_mul(t.seq)),
                        why: format!("at most {MAX_TOKENS} tokens per micro-batch"),
                    });
                }
                if let Some(k) = t.recompute_layers {
                    if t.recompute == Recompute::None {
                        return Err(Error::Setup(
                            "--recompute-layers needs --recompute selective or full".into(),
                        ));
                    }
                    range("--recompute-layers", k, MAX_SIZE)?;
                }
                if t.offload != Offload::None && p.zero == 0 {
                    return Err(Error::Setup(
                        "--offload needs ZeRO (--zero 1, 2 or 3)".into(),
                    ));
                }
                if t.offload == Offload::Params && p.zero != 3 {
                    return Err(Error::Setup("--offload params needs --zero 3".into()));
                }
                if self.amp_style() == AmpStyle::Autocast && p.zero > 0 {
                    return Err(Error::Setup(
                        "ZeRO needs the deepspeed or megatron amp style, not autocast".into(),
                    ));
                }
            }
            Mode::Infer(i) => {
                range("--batch", i.batch, MAX_SIZE)?;
                range("--context", i.context, MAX_SIZE)?;
                range("KV bytes", i.kv_bytes, 8)?;
                if i.batch.saturating_mul(i.context) > MAX_TOKENS {
                    return Err(Error::OutOfRange {
                        field: "--batch x --context".into(),
                        value: format!("{} tokens", i.batch.saturating_mul(i.context)),
                        why: format!("at most {MAX_TOKENS} tokens"),
                    });
                }
                if p.zero > 0 || p.dp > 1 {
                    return Err(Error::Setup(
                        "inference takes --tp and --pp; --dp and --zero are for training".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Optional kernel packages installed beside transformers 5.24 (`--kernels`), one setting for
/// every command: what transformers runs instead of its torch fallbacks, and whether it keeps a
/// packed checkpoint packed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernels {
    /// `flash-linear-attention`: `chunk_gated_delta_rule` and `fused_recurrent_gated_delta_rule`
    /// (Triton) instead of `torch_chunk_gated_delta_rule` / `torch_recurrent_gated_delta_rule`.
    pub fla: bool,
    /// `causal-conv1d`: `causal_conv1d_fn` / `causal_conv1d_update` (CUDA) instead of
    /// `F.conv1d` and the state `cat`.
    pub causal_conv1d: bool,
    /// MXFP4: the `kernels` package (which fetches `kernels-community/gpt-oss-triton-kernels`)
    /// with Triton >= 3.4, what `Mxfp4HfQuantizer.validate_environment` asks before it keeps
    /// MXFP4 experts packed (`quantizers/quantizer_mxfp4.py`).
    pub mxfp4: bool,
}

impl Kernels {
    /// Parses a comma-separated list (`fla,causal-conv1d,mxfp4`; `none` for none).
    pub fn parse(s: &str) -> std::result::Result<Kernels, String> {
        let mut k = Kernels::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "fla" | "flash-linear-attention" => k.fla = true,
                "causal-conv1d" | "causal_conv1d" => k.causal_conv1d = true,
                "mxfp4" | "kernels" | "triton-kernels" => k.mxfp4 = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown kernel package `{other}` (known: fla, causal-conv1d, mxfp4, none)"
                    ))
                }
            }
        }
        Ok(k)
    }

    /// The packages as `--kernels` writes them (`none` for none).
    pub fn names(&self) -> String {
        let v: Vec<&str> = [
            (self.fla, "fla"),
            (self.causal_conv1d, "causal-conv1d"),
            (self.mxfp4, "mxfp4"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }

    /// The packages given that change nothing for `t`, as `--kernels` writes them: `mxfp4` keeps
    /// MXFP4 experts packed, so it acts only on an MXFP4 checkpoint; `fla` and `causal-conv1d`
    /// replace the Gated DeltaNet mixer's torch fallbacks, so they act only where it is.
    pub fn without_effect(&self, t: &crate::describe::Transformer) -> Vec<&'static str> {
        let gdn = t
            .blocks
            .kinds
            .iter()
            .any(|b| matches!(b.mixer, crate::describe::Mixer::GatedDeltaNet(_)));
        [
            (self.fla && !gdn, "fla"),
            (self.causal_conv1d && !gdn, "causal-conv1d"),
            (
                self.mxfp4 && t.blocks.storage.quant != crate::describe::Quant::Mxfp4,
                "mxfp4",
            ),
        ]
        .into_iter()
        .filter_map(|(unused, n)| unused.then_some(n))
        .collect()
    }

    /// What a model's card tells its users to install, the default for that model: for MXFP4
    /// checkpoints the MXFP4 kernels, as gpt-oss's cards say (huggingface.co/openai/gpt-oss-120b
    /// and -20b, "Transformers": `pip install -U transformers kernels torch`; the torch wheel
    /// brings its Triton, 3.4 or later from torch 2.8); nothing for the others (`pip install
    /// transformers`).
    pub fn for_storage(s: &crate::describe::Storage) -> Kernels {
        Kernels {
            mxfp4: s.quant == crate::describe::Quant::Mxfp4,
            ..Kernels::default()
        }
    }
}
