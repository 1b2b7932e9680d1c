//! The flags as clap parses them: every subcommand's argument struct that describes a step, a
//! fine-tuning run, a serving engine or a plan, and the value types of their flags. Nothing here
//! knows a model; [`super::hi`] resolves these into the library's requests.

use clap::{ArgGroup, Args, ValueEnum};
use vram_model::setup::Schedule;

use crate::input::parse_bytes;

/// `--precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// Everything in fp32.
    Fp32,
    /// fp16 compute, fp32 master weights.
    #[value(name = "fp16-amp")]
    Fp16Amp,
    /// bf16 compute, fp32 master weights.
    #[value(name = "bf16-amp")]
    Bf16Amp,
    /// Everything in bf16, no master copy.
    Bf16,
}

/// `--optimizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    /// Plain SGD.
    Sgd,
    /// SGD with momentum.
    Momentum,
    /// AdamW (and Adam).
    #[value(alias = "adam")]
    Adamw,
    /// bitsandbytes 8-bit AdamW.
    Adam8bit,
    /// Adafactor (factored second moments).
    Adafactor,
}

/// `--recompute` of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecomputeArg {
    /// Store every activation.
    None,
    /// Recompute the attention core.
    Selective,
    /// Recompute each layer.
    Full,
}

/// `--attention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionArg {
    /// Explicit softmax(QKᵀ)V: stores the s² scores.
    Eager,
    /// scaled_dot_product_attention (FlashAttention, cuDNN, ...).
    #[value(alias = "flash")]
    Sdpa,
}

/// `--offload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OffloadArg {
    /// Nothing.
    None,
    /// Optimizer states and master weights.
    Optimizer,
    /// Also parameters (ZeRO-3).
    Params,
}

/// `--amp-style`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AmpStyleArg {
    /// PyTorch autocast.
    Autocast,
    /// DeepSpeed's layout.
    Deepspeed,
    /// Megatron-LM's layout.
    Megatron,
}

/// `--kv-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvDtypeArg {
    /// 4 bytes.
    Fp32,
    /// 2 bytes.
    Fp16,
    /// 2 bytes.
    Bf16,
    /// 1 byte.
    Fp8,
    /// 1 byte.
    Int8,
}

/// `--weights-created`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightsCreated {
    /// Built in fp32, then cast to the step's precision.
    Fp32,
    /// Created in the step's precision.
    Native,
}

/// `--kv-cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheArg {
    /// transformers' DynamicCache (the default).
    Dynamic,
    /// StaticCache (cache_implementation="static"), allocated for the whole context up front.
    Static,
}

/// `--decode-replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DecodeReplayArg {
    /// Every decode step up to 64, beyond that 64 of them.
    Sampled,
    /// Every decode step.
    Every,
}

/// `--allocator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AllocatorArg {
    /// PyTorch's CUDACachingAllocator, default settings.
    Pytorch,
    /// PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
    PytorchExpandable,
    /// vramkit's allocator (the plug-in's default policy).
    Vramkit,
}

/// Parses `--schedule`: `1f1b`, `gpipe`, `interleaved:N` (also `interleaved-N`, as `vram plan`
/// prints it, and `interleaved`, two chunks), N from 1 to 64.
pub fn parse_schedule(s: &str) -> Result<Schedule, String> {
    match s.to_ascii_lowercase().as_str() {
        "1f1b" => Ok(Schedule::OneFOneB),
        "gpipe" => Ok(Schedule::Gpipe),
        "interleaved" => Ok(Schedule::Interleaved(2)),
        other => match other
            .strip_prefix("interleaved:")
            .or_else(|| other.strip_prefix("interleaved-"))
            .or_else(|| other.strip_prefix("interleaved="))
        {
            Some(n) => match n.parse::<u64>() {
                Ok(v) if (1..=64).contains(&v) => Ok(Schedule::Interleaved(v)),
                _ => Err(format!("`{s}`: chunks must be a number from 1 to 64")),
            },
            None => Err(format!(
                "`{s}` is not a schedule (1f1b, gpipe, interleaved:N)"
            )),
        },
    }
}

/// Parses `--fragmentation`: `0.05` or `5%`, from 0 to 10.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a fraction (0.05 or 5%)"))?;
    if !(0.0..=10.0).contains(&v) {
        return Err(format!("`{s}` must be between 0 and 10"));
    }
    Ok(v)
}

/// Parses `--image-size`: `WxH`, or one side for a square.
pub fn parse_image_size(s: &str) -> Result<(u64, u64), String> {
    let side = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{s}` is not a size in pixels (1024x768, or 224 for a square)"))
    };
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((side(w)?, side(h)?)),
        None => {
            let n = side(s)?;
            Ok((n, n))
        }
    }
}

/// Parses `--weights` (alias `--quantization`).
pub fn parse_weights(s: &str) -> Result<vram_report::request::Weights, String> {
    vram_report::request::Weights::parse(s).map_err(|e| {
        // clap names the flag and the value before the message.
        let m = e.to_string();
        m.strip_prefix(&format!("--weights `{s}`: "))
            .map_or(m.clone(), str::to_string)
    })
}

/// The knobs of every command that describes a step (`estimate`, `trace`, `batch`,
/// `checkpoint`, `doctor`).
#[derive(Debug, Clone, Args)]
pub struct StepArgs {
    /// Numeric precision [default: fp32 for --inference on a float32 config, which
    /// from_pretrained's dtype="auto" loads as it is (a float --weights gives the dtype instead);
    /// else bf16-amp, TRL's SFTConfig bf16=True].
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Mixed-precision memory layout [default: deepspeed under ZeRO 2-3, else megatron under
    /// TP or PP > 1, else deepspeed under ZeRO 1, else autocast].
    #[arg(long, value_enum)]
    pub amp_style: Option<AmpStyleArg>,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Sequences per micro-batch per data-parallel rank.
    #[arg(long, default_value_t = 1)]
    pub micro_batch: u64,
    /// Sequence length [default: min(2048, the model's maximum)].
    #[arg(long)]
    pub seq: Option<u64>,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1)]
    pub grad_accum: u64,
    /// Activation recomputation.
    #[arg(long, value_enum, default_value = "none")]
    pub recompute: RecomputeArg,
    /// Recompute only this many layers per pipeline stage.
    #[arg(long)]
    pub recompute_layers: Option<u64>,
    /// Attention implementation (eager stores the s² scores; a model with one path, such as
    /// gpt-oss's attention sinks, runs that one, and the output says so).
    #[arg(long, value_enum, default_value = "sdpa")]
    pub attention: AttentionArg,
    /// ZeRO stage (0-3).
    #[arg(long, default_value_t = 0)]
    pub zero: u8,
    /// ZeRO offload to host memory.
    #[arg(long, value_enum, default_value = "none")]
    pub offload: OffloadArg,
    /// Data-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub dp: u64,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub tp: u64,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub pp: u64,
    /// Megatron sequence parallelism (with --tp > 1).
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Pipeline schedule: 1f1b, gpipe or interleaved:N (N chunks, 1 to 64).
    #[arg(long, default_value = "1f1b", value_parser = parse_schedule)]
    pub schedule: Schedule,
    /// Estimate inference (transformers' generate: weights, KV cache, prefill and decode)
    /// instead of training.
    #[arg(long)]
    pub inference: bool,
    /// Inference: concurrent sequences.
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
    /// Inference: tokens per sequence at the end of generation, prompt plus new tokens
    /// [default: min(2048, the model's maximum), or --prompt + --new-tokens].
    #[arg(long)]
    pub context: Option<u64>,
    /// Inference: prompt tokens per sequence (with --new-tokens; instead of --context).
    #[arg(long)]
    pub prompt: Option<u64>,
    /// Inference: tokens `generate` produces after the prompt (max_new_tokens).
    #[arg(long, default_value_t = 16)]
    pub new_tokens: u64,
    /// Inference: the KV cache of `generate` (dynamic: grows by torch.cat at every token).
    #[arg(long, value_enum, default_value = "dynamic")]
    pub kv_cache: KvCacheArg,
    /// Inference: KV-cache element type [default: the compute dtype of --precision, as
    /// transformers' cache holds the key and value states the model makes: fp32 under
    /// --precision fp32, else bf16/fp16].
    #[arg(long, value_enum)]
    pub kv_dtype: Option<KvDtypeArg>,
    /// CUDA context and kernels outside the allocator, e.g. 500MiB [default: the GPU's].
    #[arg(long, value_parser = parse_bytes)]
    pub cuda_context: Option<u64>,
    /// cuBLAS/cuDNN workspace inside the allocator, e.g. 32MiB [default: the GPU's].
    #[arg(long, value_parser = parse_bytes)]
    pub workspace: Option<u64>,
    /// A fixed allocator overhead as a fraction of peak allocated (e.g. 0.05 or 5%, at most 10),
    /// instead of replaying the step through the allocator.
    #[arg(long, value_parser = parse_fraction)]
    pub fragmentation: Option<f64>,
    /// The caching allocator whose replay gives the reserved bytes.
    #[arg(long, value_enum, default_value = "pytorch")]
    pub allocator: AllocatorArg,
    /// How half-precision weights came to be: `native` when loaded in their own dtype
    /// (from_pretrained: transformers 5 loads the checkpoint's dtype, dtype="auto"), `fp32` when
    /// the model was built in fp32 and cast (from_config, then model.to(bfloat16)). Changes the
    /// reserved bytes only.
    #[arg(long, value_enum, default_value = "native")]
    pub weights_created: WeightsCreated,
    /// Inference: which decode steps of `generate` the allocator replay walks. `sampled`: all
    /// of them up to 64, beyond that 64 of them (the first two, the last two, the others evenly
    /// spaced; the cost does not grow with --new-tokens, the output says what that changed);
    /// `every`: each one (the cost grows with the tokens).
    #[arg(long, value_enum, default_value = "sampled")]
    pub decode_replay: DecodeReplayArg,
    /// Inference: estimate the `generate` call made after a warm-up call on the first N prompt
    /// tokens (same batch and new tokens) and `torch.cuda.reset_peak_memory_stats()`, as a
    /// benchmark that warms up measures it: the warm-up's cached segments are reused, so the
    /// reserved peak can differ (MoE `generate`: the decode's expert-weight copies). Without
    /// it the estimate is a first call, how a user's script runs.
    #[arg(long, value_name = "N")]
    pub warmup_prompt: Option<u64>,
    /// Images per sequence fed to a vision-language model (Qwen3-VL, Qwen3.5, Llama 4,
    /// Gemma 3/4): their tokens lengthen the sequence, and the vision tower's tensors count.
    #[arg(long)]
    pub images: Option<u64>,
    /// Image size in pixels: WxH (before the processor resizes it) with --images, or the side
    /// of a CNN's square inputs [default: the processor's size; a CNN's 224].
    #[arg(long, value_parser = parse_image_size)]
    pub image_size: Option<(u64, u64)>,
}

/// Fine-tuning flags (`vram estimate`, `vram plan`).
#[derive(Debug, Clone, Args)]
pub struct FinetuneArgs {
    /// Fine-tuning method: full (every parameter), lora (PEFT adapters on a frozen half base) or
    /// qlora (adapters on a bitsandbytes int8/nf4/fp4 base).
    #[arg(long, default_value = "full", value_parser = ["full", "lora", "qlora"])]
    pub finetune: String,
    /// LoRA rank `r` [default: 16].
    #[arg(long)]
    pub lora_rank: Option<u64>,
    /// LoRA `lora_alpha` (emitted into the config; no memory effect) [default: 2 × rank].
    #[arg(long)]
    pub lora_alpha: Option<u64>,
    /// LoRA targets with PEFT's names: all-linear, or module suffixes such as q_proj,v_proj
    /// [default: all-linear].
    #[arg(long)]
    pub lora_targets: Option<String>,
    /// LoRA dropout probability, in [0, 1) [default: 0].
    #[arg(long)]
    pub lora_dropout: Option<f64>,
    /// Storage of the weights: none (as --precision and the config's quantization_config say),
    /// bf16, fp16, fp32, int8 (8-bit weights, one scale per output row: transformers runs it as
    /// bitsandbytes LLM.int8, the engines as W8A8), nf4, fp4, fp8, gptq[-gN], awq[-gN]
    /// (bitsandbytes = nf4); for --finetune lora/qlora and --inference [default: nf4 for qlora,
    /// else the checkpoint's]. `vram capacity` takes the same flag with the same meaning.
    #[arg(long, alias = "quantization", value_parser = parse_weights)]
    pub weights: Option<vram_report::request::Weights>,
    /// bitsandbytes 4-bit double quantization (bnb_4bit_use_double_quant).
    #[arg(long)]
    pub double_quant: bool,
    /// QLoRA: peft.prepare_model_for_kbit_training was called (casts the unquantized half
    /// parameters to fp32); TRL's SFTTrainer does not call it.
    #[arg(long)]
    pub prepare_kbit: bool,
    /// QLoRA: the dtype the base is loaded with (from_pretrained's dtype=): what bitsandbytes
    /// does not pack (embedding, norms, head) is held in it: auto (the config's, transformers
    /// 5.24's default), bf16, fp16, fp32 [default: auto].
    #[arg(long)]
    pub load_dtype: Option<String>,
    /// LoRA/QLoRA: turn off gradient checkpointing (TRL's SFTConfig turns it on).
    #[arg(long)]
    pub no_gradient_checkpointing: bool,
}

/// Arguments of `vram estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// A local folder with config.json, a config file, a .safetensors file or
    /// model.safetensors.index.json, a catalog id (see `vram models`), or a Hub id
    /// (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    pub model: String,
    #[command(flatten)]
    pub hub: crate::input::HubArgs,
    /// GPU to check the fit against (see `vram gpus`), a bare size such as 23.58GiB, or a GPU
    /// with the total torch reports on your machine (t4:15636037632B).
    #[arg(long, default_value = "h100-80g")]
    pub gpu: String,
    #[command(flatten)]
    pub step: StepArgs,
    #[command(flatten)]
    pub finetune: FinetuneArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Include the step's timeline (live bytes at every phase); a full step only.
    #[arg(long)]
    pub timeline: bool,
    /// Load a packed checkpoint (FP8, MXFP4, bitsandbytes, GPTQ, AWQ) dequantized, as
    /// `quantization_config=...(dequantize=True)` does: the step holds every weight in its
    /// precision, and `weights_bytes` reports them so.
    #[arg(long)]
    pub dequantized: bool,
    /// Kernel packages installed beside transformers, comma-separated: fla
    /// (flash-linear-attention), causal-conv1d, mxfp4 (the `kernels` package with Triton >= 3.4:
    /// MXFP4 experts stay packed), or none [default: what the model's card installs: mxfp4 for
    /// MXFP4 checkpoints (gpt-oss), none otherwise]. Changes the speed figures, and the weights
    /// a packed checkpoint holds.
    #[arg(long, value_parser = vram_plan::generate::Kernels::parse)]
    pub kernels: Option<vram_plan::generate::Kernels>,
}

/// Arguments of the listing commands.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// vLLM (V1 engine).
    Vllm,
    /// SGLang.
    Sglang,
}

/// `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheDtypeArg {
    /// The model's dtype.
    Auto,
    /// FP8 (e4m3 by default).
    Fp8,
    #[value(name = "fp8_e4m3")]
    /// FP8 e4m3.
    Fp8E4m3,
    #[value(name = "fp8_e5m2")]
    /// FP8 e5m2.
    Fp8E5m2,
    /// bfloat16 (vLLM only).
    #[value(alias = "bf16")]
    Bfloat16,
}

/// `--interconnect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InterconnectArg {
    /// NVLink through NVSwitches that reduce in the switch (HGX H100, H200, B200).
    Nvls,
    /// NVLink through NVSwitches without NVLS (HGX A100).
    Nvswitch,
    /// PCIe with peer-to-peer access (the default for PCIe boards other than GeForce RTX).
    Pcie,
    /// One node's GPUs without peer-to-peer access: NCCL over host shared memory (the default
    /// for GeForce RTX boards; also NCCL_P2P_DISABLE=1, or a container without P2P).
    Shm,
    /// A TP group across nodes.
    Network,
}

/// `--cudagraph-mode`: vLLM's `CUDAGraphMode` names, lower case with dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CudagraphModeArg {
    /// NONE: no CUDA graphs.
    None,
    /// PIECEWISE: piecewise graphs between the attention calls.
    Piecewise,
    /// FULL: whole-forward graphs for every batch.
    Full,
    /// FULL_DECODE_ONLY: whole-forward graphs for decode batches only.
    FullDecodeOnly,
    /// FULL_AND_PIECEWISE: full decode graphs and piecewise graphs for the rest (the default).
    FullAndPiecewise,
}

/// `--compilation-mode`: vLLM's `CompilationMode` names, lower case with dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompilationModeArg {
    /// NONE (0): no torch.compile.
    None,
    /// STOCK_TORCH_COMPILE (1).
    StockTorchCompile,
    /// DYNAMO_TRACE_ONCE (2).
    DynamoTraceOnce,
    /// VLLM_COMPILE (3): vLLM's piecewise compilation (the default above -O0).
    VllmCompile,
}

/// `--attention-backend`: vLLM's `AttentionBackendEnum` names, lower case with dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionBackendArg {
    /// FLASH_ATTN: FlashAttention (3 on Hopper).
    #[value(alias = "FLASH_ATTN")]
    FlashAttn,
    /// TRITON_ATTN: vLLM's Triton attention.
    #[value(alias = "TRITON_ATTN")]
    TritonAttn,
    /// FLASHINFER.
    #[value(alias = "FLASHINFER")]
    Flashinfer,
    /// FLEX_ATTENTION: PyTorch's flex attention.
    #[value(alias = "FLEX_ATTENTION")]
    FlexAttention,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// The config's dtype (bf16 for the catalog's models).
    Auto,
    /// bfloat16.
    Bfloat16,
    /// float16.
    #[value(alias = "half")]
    Float16,
    /// float32.
    #[value(alias = "float")]
    Float32,
}

/// Arguments of `vram capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    pub model: String,
    #[command(flatten)]
    pub hub: crate::input::HubArgs,
    /// The serving engine.
    #[arg(long, value_enum, default_value = "vllm")]
    pub engine: EngineArg,
    /// The engine's version whose memory layout applies: vllm 0.5 to 0.26 (V0 to 0.7; from 0.8
    /// to 0.10 V1, falling back to V0 on GPUs older than Ampere, fp32 and an fp8 KV cache off
    /// Hopper), sglang 0.4 to 0.5; a patch release (0.6.5) takes its minor version's rules
    /// [default: vllm 0.11, sglang 0.5].
    #[arg(long)]
    pub engine_version: Option<String>,
    /// GPU (see `vram gpus`), a bare size such as 23.58GiB, or a GPU with the total torch reports
    /// on your machine (t4:15636037632B).
    #[arg(long, default_value = "h100-80g")]
    pub gpu: String,
    /// vLLM: fraction of the device the engine may use, in (0, 1] [default: 0.9, vLLM v0.11.0
    /// `vllm/config/cache.py` `CacheConfig.gpu_memory_utilization`; 0.92 from vLLM 0.20].
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM: longest request, prompt plus output (SGLang's flag is --context-length; each
    /// engine's parser refuses the other's, as here) [default: the model's
    /// max_position_embeddings, stretched by its rope_scaling as vLLM v0.11.0
    /// `_get_and_verify_max_len` / SGLang v0.5.3 `get_context_length` do]. Read as the engine
    /// version's parser reads it: vLLM 0.8.4 on also takes 32k (×1000) and 32K (×1024).
    #[arg(long, allow_hyphen_values = true)]
    pub max_model_len: Option<String>,
    /// SGLang: longest request, vLLM's --max-model-len [default: as there].
    #[arg(long, allow_hyphen_values = true, conflicts_with = "max_model_len")]
    pub context_length: Option<String>,
    /// vLLM: most sequences per step (SGLang's flag is --max-running-requests) [default for
    /// `vllm serve`: 1024 on >= 70 GiB GPUs but the A100, else 256; vLLM v0.11.0
    /// `engine/arg_utils.py` `_set_default_args`].
    #[arg(long)]
    pub max_num_seqs: Option<u64>,
    /// SGLang: most running requests, the request map's rows (SGLang v0.5.3
    /// `init_memory_pool`); vLLM's --max-num-seqs.
    #[arg(long, conflicts_with = "max_num_seqs")]
    pub max_running_requests: Option<u64>,
    /// vLLM: most tokens per step [default for `vllm serve`: 8192 on >= 70 GiB GPUs but the
    /// A100, else 2048; vLLM v0.11.0 `_set_default_args`].
    #[arg(long)]
    pub max_num_batched_tokens: Option<u64>,
    /// KV cache element type (vLLM v0.11.0 `CacheDType`: auto, bfloat16, fp8, fp8_e4m3,
    /// fp8_e5m2; SGLang v0.5.3: auto, fp8_e4m3, fp8_e5m2).
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_cache_dtype: KvCacheDtypeArg,
    /// Tensor-parallel GPUs (1 to 1024, dividing the attention heads): both engines' flag;
    /// --tp is vram's short form (vLLM's is -tp), --tp-size SGLang's alone.
    #[arg(long, alias = "tp", default_value_t = 1)]
    pub tensor_parallel_size: u64,
    /// SGLang: its short name for --tensor-parallel-size, which vLLM refuses.
    #[arg(long, conflicts_with = "tensor_parallel_size")]
    pub tp_size: Option<u64>,
    /// Pipeline-parallel stages (1 to the model's layers; on one node or across nodes: the
    /// same stages): both engines' flag; --pp is vram's short form (vLLM's is -pp).
    #[arg(long, alias = "pp", default_value_t = 1)]
    pub pipeline_parallel_size: u64,
    /// SGLang: its short name for --pipeline-parallel-size, which vLLM refuses.
    #[arg(long, conflicts_with = "pipeline_parallel_size")]
    pub pp_size: Option<u64>,
    /// Data-parallel replicas of the TP group: both engines' flag; --dp is vram's short form
    /// (vLLM's is -dp).
    #[arg(long, alias = "dp", default_value_t = 1)]
    pub data_parallel_size: u64,
    /// SGLang: its short name for --data-parallel-size, which vLLM refuses.
    #[arg(long, conflicts_with = "data_parallel_size")]
    pub dp_size: Option<u64>,
    /// vLLM: spread whole experts over the TP x DP GPUs.
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// SGLang: spread whole experts over this many of the TP GPUs [default: 1].
    #[arg(long)]
    pub ep_size: Option<u64>,
    /// SGLang: run attention TP over tp / dp GPUs (needs --dp-size).
    #[arg(long)]
    pub enable_dp_attention: bool,
    /// vLLM: the VLLM_USE_V1 environment variable (0: V0 where the version has it; 1: V1 on
    /// 0.7 and earlier) [default: the version's own choice].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub vllm_use_v1: Option<u8>,
    /// vLLM: the VLLM_USE_V2_MODEL_RUNNER environment variable (0: the V1 model runner, which
    /// vram models, as vLLM 0.22-0.24 also pick where the start uses a feature the V2 runner
    /// lacks, such as --enable-prompt-embeds; 1: the V2 runner, which vram does not model)
    /// [default: the version's own choice: 0.22 runs a dense, unquantized Qwen3ForCausalLM on
    /// V2, 0.23 also Llama and Mistral, 0.24 these and DeepseekV2, Qwen2-MoE and
    /// Granite-MoE, quantized or not].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub vllm_use_v2_model_runner: Option<u8>,
    /// vLLM V1: the sampler runs FlashInfer's top-k/top-p kernels (the log's "Using FlashInfer
    /// for top-p & top-k sampling": FlashInfer installed, as in the vllm/vllm-openai images,
    /// and VLLM_USE_FLASHINFER_SAMPLER not 0) instead of PyTorch's sort, which V1 before 0.17
    /// profiles [default: not in use].
    #[arg(long)]
    pub flashinfer_sampler: bool,
    /// vLLM V1 (0.11 and later): the CUDA-graph mode set with --compilation-config
    /// '{"cudagraph_mode": "PIECEWISE"}' or -cc.cudagraph_mode=PIECEWISE; --enforce-eager still
    /// makes it none. It decides which graphs are captured and, from 0.20, whether a hybrid
    /// model's max_num_seqs must fit its Mamba cache blocks (full graphs only); full on a
    /// hybrid model becomes full-and-piecewise (read at 0.11-0.13 and 0.15-0.22) [default:
    /// full-and-piecewise, the -O2 level's from 0.12 and V1's own at 0.11].
    #[arg(long, value_enum)]
    pub cudagraph_mode: Option<CudagraphModeArg>,
    /// vLLM V1 (0.12 to 0.22): the compilation mode set with -cc.mode=none or
    /// --compilation-config '{"mode": 0}'; from 0.20 TORCH_COMPILE_DISABLE=1 is none (vLLM:
    /// "equivalent to setting -cc.mode=none"). Any mode but vllm-compile turns a piecewise
    /// CUDA-graph mode (piecewise, full-and-piecewise; at 0.12 every mode) into none; before
    /// 0.17 --enforce-eager leaves a mode set here in force [default: the optimization level's,
    /// vllm-compile above -O0].
    #[arg(long, value_enum)]
    pub compilation_mode: Option<CompilationModeArg>,
    /// vLLM V1 (0.12 to 0.22): the optimization level, -O0 to -O3 (vLLM's own short form, as
    /// here: -O3, -O 3, -O=3). Only what it sets for the graphs is modelled, where not set
    /// otherwise: -O0 no compilation and no CUDA graphs, -O1 piecewise graphs, -O2 and -O3
    /// full-and-piecewise [default: 2].
    #[arg(long, short = 'O', value_parser = clap::value_parser!(u8).range(0..=3))]
    pub optimization_level: Option<u8>,
    /// vLLM V1 (0.11 to 0.22): the attention backend chosen with --attention-backend (from
    /// 0.13) or VLLM_ATTENTION_BACKEND (to 0.14). Only FlashAttention's graph state depends on
    /// it here (FULL graphs on Hopper hold FlashAttention 3's split accumulators, no other
    /// backend's); FLASH_ATTN is refused, as vLLM refuses it, for a model whose image tokens
    /// attend both ways or whose heads are wider than 256 [default: vLLM's choice: Triton for
    /// those models, else FlashAttention].
    #[arg(long, value_enum)]
    pub attention_backend: Option<AttentionBackendArg>,
    /// How the TP group's GPUs talk, for NCCL's buffers: nvls (NVSwitch with NVLS: HGX
    /// H100/H200/B200), nvswitch (HGX A100), pcie (PCIe with GPU P2P), shm (one node without
    /// GPU P2P: NCCL over host memory, as with NCCL_P2P_DISABLE=1), network (a TP group across
    /// nodes) [default: the GPU's board in the catalog; shm for GeForce RTX, whose stock driver
    /// gives no P2P].
    #[arg(long, value_enum)]
    pub interconnect: Option<InterconnectArg>,
    /// vLLM: no CUDA graphs (SGLang's flag is --disable-cuda-graph).
    #[arg(long)]
    pub enforce_eager: bool,
    /// vLLM: the host's NVIDIA driver, as nvidia-smi's `Driver Version:` prints it (535.161.08)
    /// or its branch (535). Before R550 the CUDA graphs' driver memory is priced at the R535
    /// figure, 3.7 x the later one (vllm#5517 measured the step between R545 and R550)
    /// [default: R550 or later].
    #[arg(long, value_parser = vram_plan::capacity::parse_driver)]
    pub driver: Option<u32>,
    /// SGLang: no CUDA graphs, vLLM's --enforce-eager.
    #[arg(long)]
    pub disable_cuda_graph: bool,
    /// vLLM: KV cache block size, tokens [16 on CUDA, `platforms/cuda.py`; one of 1, 8, 16,
    /// 32, 64, 128] (SGLang's flag is --page-size).
    #[arg(long)]
    pub block_size: Option<u64>,
    /// SGLang: KV cache page size, tokens [1, `server_args._handle_page_size`]; vLLM's
    /// --block-size.
    #[arg(long, conflicts_with = "block_size")]
    pub page_size: Option<u64>,
    /// Weight storage, the engine's --quantization: none, fp8, int8 (8-bit weights, one scale
    /// per output row: W8A8), awq, gptq, bitsandbytes (nf4), mxfp4 [default: the checkpoint's
    /// storage, read from its config's quantization_config as `vram estimate` reads it]. vLLM's
    /// AWQ/GPTQ kernel: Marlin from compute capability 8.0 (7.5 from vLLM 0.14; awq_marlin,
    /// gptq_marlin name it), the plain kernel below, or where awq/gptq is named for a checkpoint
    /// that is already so (gptq named runs the Marlin family from vLLM 0.22).
    #[arg(long, alias = "quantization", value_parser = parse_weights)]
    pub weights: Option<vram_report::request::Weights>,
    /// Model dtype.
    #[arg(long, value_enum, default_value = "auto")]
    pub dtype: DtypeArg,
    /// SGLang: fraction of the device for weights and the KV pool, in (0, 1] [default: from
    /// the GPU's memory, SGLang v0.5.3 `server_args._handle_gpu_memory_settings`].
    #[arg(long)]
    pub mem_fraction_static: Option<f64>,
    /// SGLang: cap on the KV pool's tokens.
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// SGLang: prefill chunk [default: 2048 below 35 GiB, 4096 below 60, 8192 below 160, else
    /// 16384; `_handle_gpu_memory_settings`].
    #[arg(long)]
    pub chunked_prefill_size: Option<u64>,
    /// SGLang: largest CUDA-graph batch [default: from the GPU's memory and TP,
    /// `_handle_gpu_memory_settings`].
    #[arg(long)]
    pub cuda_graph_max_bs: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `--recompute` of `vram plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanRecomputeArg {
    /// No recomputation.
    None,
    /// The attention core.
    Selective,
    /// Every layer.
    Full,
    /// The fewest layers per stage recomputed in full that make the plan fit.
    Optimal,
}

/// `--stack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StackArg {
    /// Hugging Face transformers under PyTorch eager (DeepSpeed, accelerate, torchrun).
    Transformers,
    /// Megatron-LM's fused kernels.
    Megatron,
}

/// `--emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmitArg {
    /// A DeepSpeed JSON config (tensor parallelism through AutoTP).
    Deepspeed,
    /// Megatron-LM pretrain_gpt.py arguments.
    Megatron,
    /// A Hugging Face accelerate config YAML.
    Accelerate,
    /// A torchrun command with PyTorch FSDP2.
    Torchrun,
    /// PEFT LoraConfig + TRL SFTConfig (+ BitsAndBytesConfig) as a Python snippet (with
    /// --finetune lora|qlora).
    Peft,
    /// The same as YAML.
    PeftYaml,
}

/// Arguments of `vram plan`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("hardware").args(["gpu", "cluster"]).required(true).multiple(true)))]
pub struct PlanArgs {
    /// A local folder with config.json or a config file, a catalog id (see `vram models`),
    /// or a Hub id (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    pub model: String,
    #[command(flatten)]
    pub hub: crate::input::HubArgs,
    /// GPU (see `vram gpus`); with --cluster, the preset's GPU replaced.
    #[arg(long)]
    pub gpu: Option<String>,
    /// GPUs in the job.
    #[arg(long)]
    pub gpus: u64,
    /// Sequences per optimizer step over the whole job (met exactly: dp x micro-batch x
    /// accumulation).
    #[arg(long)]
    pub global_batch: u64,
    /// Sequence length.
    #[arg(long)]
    pub seq: u64,
    /// Cluster preset: dgx-a100-80g, dgx-h100, hgx-h200, 8x-rtx4090, workstation [without it:
    /// DGX-class nodes of 8 for data-centre GPUs, PCIe nodes of 8 otherwise].
    #[arg(long)]
    pub cluster: Option<String>,
    /// Pin the tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u64>,
    /// Pin the pipeline-parallel degree.
    #[arg(long)]
    pub pp: Option<u64>,
    /// Pin the data-parallel degree.
    #[arg(long)]
    pub dp: Option<u64>,
    /// Pin the micro-batch size.
    #[arg(long)]
    pub micro_batch: Option<u64>,
    /// Pin recomputation.
    #[arg(long, value_enum)]
    pub recompute: Option<PlanRecomputeArg>,
    /// Pin the ZeRO stage (0-3).
    #[arg(long)]
    pub zero: Option<u8>,
    /// Pin offload.
    #[arg(long, value_enum)]
    pub offload: Option<OffloadArg>,
    /// Pin sequence parallelism on.
    #[arg(long, conflicts_with = "no_sequence_parallel")]
    pub sequence_parallel: bool,
    /// Pin sequence parallelism off.
    #[arg(long)]
    pub no_sequence_parallel: bool,
    /// Pin the pipeline schedule: 1f1b, gpipe, interleaved:N (N chunks, 1 to 64).
    #[arg(long, value_parser = parse_schedule)]
    pub schedule: Option<Schedule>,
    /// Precision, or a comma-separated list to search (e.g. `bf16-amp,bf16`) [default: only
    /// bf16-amp (fp16-amp on GPUs without native bf16, compute capability below 8.0, where
    /// bf16 and bf16-amp are refused: torch only emulates them there), since pure bf16 always
    /// wins on memory but changes the numerics].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub precision: Vec<PrecisionArg>,
    /// Attention implementation.
    #[arg(long, value_enum, default_value = "sdpa")]
    pub attention: AttentionArg,
    /// Optimizer (its states count in memory, its step in time).
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// The software that runs the step, which decides the kernels priced [default: megatron
    /// with `--emit megatron`, else transformers].
    #[arg(long, value_enum)]
    pub stack: Option<StackArg>,
    /// Kernel packages installed beside transformers that it runs instead of its torch
    /// fallbacks, comma-separated: fla (flash-linear-attention), causal-conv1d; none by
    /// default, as `pip install transformers` gives (the transformers stack's step time).
    #[arg(long, default_value = "none", value_parser = vram_plan::eager::Kernels::parse)]
    pub kernels: vram_plan::eager::Kernels,
    /// How many plans to list (at least 1).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object (`plans`, best first) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write the best plan the engine runs as its launch config to stdout (a note on stderr
    /// when the best plan is not one it runs).
    #[arg(long, value_enum)]
    pub emit: Option<EmitArg>,
    #[command(flatten)]
    pub finetune: FinetuneArgs,
}
