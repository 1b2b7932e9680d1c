//! What a command's flags resolve to, and how each request becomes the model's inputs.
//!
//! The CLI parses its flags once (clap) and resolves them into these requests; every default
//! that depends on the model (the sequence length, the image size, the GPU's overheads) is
//! decided here, once, for every command that describes a step (`estimate`, `trace`, `batch`,
//! `checkpoint`, `doctor`).

use vram_model::arch::{Layout, Model, Transformer};
use vram_model::blocks::{Dtype, Quant};
use vram_model::finetune::step::{FinetuneSpec, Method};
use vram_model::finetune::{LoraSpec, Targets, WeightFormat};
use vram_model::gpu::Gpu;
use vram_model::setup::{
    self, Allocator, AmpStyle, Attention, DecodeReplay, Infer, KvCache, Mode, Offload, Optimizer,
    Overheads, Parallel, Precision, Recompute, Schedule, Setup, Train,
};
use vram_plan::capacity::Quantization;

use crate::error::{input, Result};

/// One training or inference step as the flags describe it. `None` fields take the model's or
/// the GPU's default when the step is resolved ([`StepRequest::setup`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRequest {
    /// `--precision` (`None`: the workflow's default for the model, [`default_precision`]).
    pub precision: Option<Precision>,
    /// `--amp-style` (`None`: chosen from the parallel layout).
    pub amp_style: Option<AmpStyle>,
    /// `--optimizer`.
    pub optimizer: Optimizer,
    /// `--micro-batch`.
    pub micro_batch: u64,
    /// `--seq` (`None`: min(2048, the model's maximum)).
    pub seq: Option<u64>,
    /// `--grad-accum`.
    pub grad_accum: u64,
    /// `--recompute`.
    pub recompute: Recompute,
    /// `--recompute-layers`.
    pub recompute_layers: Option<u64>,
    /// `--attention`.
    pub attention: Attention,
    /// `--zero`.
    pub zero: u8,
    /// `--offload`.
    pub offload: Offload,
    /// `--dp`.
    pub dp: u64,
    /// `--tp`.
    pub tp: u64,
    /// `--pp`.
    pub pp: u64,
    /// `--sequence-parallel`.
    pub sequence_parallel: bool,
    /// `--schedule`.
    pub schedule: Schedule,
    /// `--inference`.
    pub inference: bool,
    /// `--batch`.
    pub batch: u64,
    /// `--context` (`None`: min(2048, the model's maximum), or `--prompt` + `--new-tokens`).
    pub context: Option<u64>,
    /// `--prompt`.
    pub prompt: Option<u64>,
    /// `--new-tokens`.
    pub new_tokens: u64,
    /// `--kv-cache`.
    pub kv_cache: KvCache,
    /// `--kv-dtype`, as bytes per element (`None`: the compute dtype of `precision`, which
    /// transformers 5.24's `DynamicLayer.lazy_initialization` and `StaticLayer` give the cache:
    /// the dtype of the key and value states the model's projections make, fp32 under
    /// `--precision fp32`).
    pub kv_bytes: Option<u64>,
    /// `--cuda-context` (`None`: the GPU's).
    pub cuda_context: Option<u64>,
    /// `--workspace` (`None`: the GPU's).
    pub workspace: Option<u64>,
    /// `--fragmentation`.
    pub fragmentation: Option<f64>,
    /// `--allocator`.
    pub allocator: Allocator,
    /// `--weights-created fp32`.
    pub weights_cast_from_fp32: bool,
    /// `--decode-replay`.
    pub decode_replay: DecodeReplay,
    /// `--warmup-prompt` (`None`: the estimated `generate` is the first call).
    pub warmup_prompt: Option<u64>,
    /// `--images`.
    pub images: Option<u64>,
    /// `--image-size` (`None`: the processor's size, a CNN's 224).
    pub image_size: Option<(u64, u64)>,
}

impl Default for StepRequest {
    /// What `vram estimate MODEL` asks with no flag (the CLI's defaults; a test of the CLI
    /// holds the two equal).
    fn default() -> Self {
        StepRequest {
            precision: None,
            amp_style: None,
            optimizer: Optimizer::Adamw,
            micro_batch: 1,
            seq: None,
            grad_accum: 1,
            recompute: Recompute::None,
            recompute_layers: None,
            attention: Attention::Sdpa,
            zero: 0,
            offload: Offload::None,
            dp: 1,
            tp: 1,
            pp: 1,
            sequence_parallel: false,
            schedule: Schedule::OneFOneB,
            inference: false,
            batch: 1,
            context: None,
            prompt: None,
            new_tokens: 16,
            kv_cache: KvCache::Dynamic,
            kv_bytes: None,
            cuda_context: None,
            workspace: None,
            fragmentation: None,
            allocator: Allocator::Pytorch,
            weights_cast_from_fp32: false,
            decode_replay: DecodeReplay::Sampled,
            warmup_prompt: None,
            images: None,
            image_size: None,
        }
    }
}

impl StepRequest {
    /// The precision the step runs in: `--precision` where given, else the workflow's default
    /// for `model` ([`default_precision`]).
    pub fn precision_for(&self, model: &Model) -> Precision {
        self.precision
            .unwrap_or_else(|| default_precision(model, self.inference))
    }

    /// `model` with what the request says of its input: `--image-size` for a CNN, `--images`
    /// on a vision-language model's tower.
    pub fn attach(&self, mut model: Model) -> Result<Model> {
        if let (Some((w, h)), Model::ResNet(r)) = (self.image_size, &mut model) {
            if w != h {
                return Err(input(format!(
                    "--image-size {w}x{h}: {} takes square images (give one side)",
                    r.name
                )));
            }
            let side = w;
            // Five stride-2 stages take the side to 1/32; below 32 pixels nothing is left.
            if !(32..=16384).contains(&side) {
                return Err(input(format!(
                    "--image-size {side} must be between 32 and 16384 pixels"
                )));
            }
            r.image_size = side;
        }
        if let Model::Transformer(t) = &mut model {
            self.attach_images(t)?;
        }
        Ok(model)
    }

    /// `--images` and `--image-size` on a transformer: the images ride on its vision tower
    /// (`vram_model::estimate::image_tokens` counts them); a model without one refuses them,
    /// unless its config declares a tower the reader does not describe (then a note says the
    /// images are not counted).
    fn attach_images(&self, t: &mut Transformer) -> Result<()> {
        let name = t.name.clone();
        let Some(count) = self.images else {
            if self.image_size.is_some() {
                return Err(input(if t.blocks.vision.is_some() {
                    format!("--image-size needs --images N (images per sequence) for {name}")
                } else {
                    format!("--image-size applies to CNNs and vision-language models; {name} takes sequences (--seq)")
                }));
            }
            return Ok(());
        };
        if !(1..=4096).contains(&count) {
            return Err(input(format!(
                "--images {count} must be between 1 and 4096 images per sequence"
            )));
        }
        let Some(v) = t.blocks.vision.as_mut() else {
            if t.blocks.vision_unmodelled {
                return Ok(()); // estimated without them, with a note
            }
            return Err(input(format!(
                "--images: {name} has no vision tower (its config has no vision_config, or its class builds none)"
            )));
        };
        let Some((width, height)) = self
            .image_size
            .or_else(|| vram_model::estimate::default_image_size(v))
        else {
            return Err(input(format!(
                "--images: {name} resizes each image to its own size (Qwen's smart_resize): give --image-size WxH"
            )));
        };
        // Refuse sizes the processor refuses, in one line.
        vram_model::estimate::image_tokens(v, width, height)?;
        v.images = Some(vram_model::blocks::Images {
            count,
            width,
            height,
        });
        Ok(())
    }

    /// The flags that do not apply to `model`, refused in one line: `--inference` estimates
    /// transformers' `generate` (a KV cache grown token by token), which neither a CNN nor an
    /// encoder-only model runs; a CNN takes images, not sequences.
    fn check_applies(&self, model: &Model) -> Result<()> {
        let name = model.name();
        let refuse = |m: String| Err(input(m));
        match model {
            Model::ResNet(_) if self.inference => refuse(format!(
                "{name} is a CNN: --inference estimates `generate` with its KV cache, which a CNN does not run; estimate its training step instead"
            )),
            Model::ResNet(_) if self.seq.is_some() => refuse(format!(
                "--seq does not apply to {name}, a CNN over images: give --image-size"
            )),
            Model::Transformer(t) if self.inference && t.layout() == Layout::EncoderOnly => {
                refuse(format!(
                    "{name} is an encoder-only model: it has no `generate` and no KV cache, which --inference estimates; estimate its training step instead"
                ))
            }
            Model::ResNet(_) if self.images.is_some() => refuse(format!(
                "--images applies to vision-language models; {name} is a CNN: give --micro-batch and --image-size"
            )),
            Model::Transformer(t)
                if self.images.is_some()
                    && !t.blocks.vision_unmodelled
                    && t.blocks.vision.as_ref().is_none_or(|v| v.images.is_none()) =>
            {
                refuse(
                    "--images is taken by vram estimate, trace and checkpoint (on a vision-language model)"
                        .into(),
                )
            }
            _ => Ok(()),
        }
    }

    /// The flags this request sets away from their defaults, by name (a flag given at its
    /// default value changes nothing, so it is not told apart from one not given).
    pub fn given(&self) -> Vec<&'static str> {
        let d = StepRequest::default();
        [
            ("--precision", self.precision.is_some()),
            ("--amp-style", self.amp_style != d.amp_style),
            ("--optimizer", self.optimizer != d.optimizer),
            ("--micro-batch", self.micro_batch != d.micro_batch),
            ("--seq", self.seq != d.seq),
            ("--grad-accum", self.grad_accum != d.grad_accum),
            ("--recompute", self.recompute != d.recompute),
            (
                "--recompute-layers",
                self.recompute_layers != d.recompute_layers,
            ),
            ("--attention", self.attention != d.attention),
            ("--zero", self.zero != d.zero),
            ("--offload", self.offload != d.offload),
            ("--dp", self.dp != d.dp),
            ("--tp", self.tp != d.tp),
            ("--pp", self.pp != d.pp),
            (
                "--sequence-parallel",
                self.sequence_parallel != d.sequence_parallel,
            ),
            ("--schedule", self.schedule != d.schedule),
            ("--inference", self.inference != d.inference),
            ("--batch", self.batch != d.batch),
            ("--context", self.context != d.context),
            ("--prompt", self.prompt != d.prompt),
            ("--new-tokens", self.new_tokens != d.new_tokens),
            ("--kv-cache", self.kv_cache != d.kv_cache),
            ("--kv-dtype", self.kv_bytes != d.kv_bytes),
            ("--cuda-context", self.cuda_context != d.cuda_context),
            ("--workspace", self.workspace != d.workspace),
            ("--fragmentation", self.fragmentation != d.fragmentation),
            ("--allocator", self.allocator != d.allocator),
            (
                "--weights-created",
                self.weights_cast_from_fp32 != d.weights_cast_from_fp32,
            ),
            ("--decode-replay", self.decode_replay != d.decode_replay),
            ("--warmup-prompt", self.warmup_prompt != d.warmup_prompt),
            ("--images", self.images != d.images),
            ("--image-size", self.image_size != d.image_size),
        ]
        .into_iter()
        .filter_map(|(flag, set)| set.then_some(flag))
        .collect()
    }

    /// The flags of the other mode, refused in one line where they would be ignored: training
    /// reads neither `--batch` nor `--new-tokens`, and `generate` no optimizer or micro-batch.
    /// (`--context`, `--prompt`, `--warmup-prompt`, `--dp` and `--zero` are refused where they
    /// are read.)
    fn check_mode_flags(&self) -> Result<()> {
        const TRAINING: &[&str] = &[
            "--micro-batch",
            "--seq",
            "--grad-accum",
            "--optimizer",
            "--recompute",
            "--recompute-layers",
            "--offload",
            "--amp-style",
        ];
        const INFERENCE: &[&str] = &[
            "--batch",
            "--new-tokens",
            "--kv-cache",
            "--kv-dtype",
            "--decode-replay",
        ];
        let other = if self.inference { TRAINING } else { INFERENCE };
        let given: Vec<&str> = self
            .given()
            .into_iter()
            .filter(|f| other.contains(f))
            .collect();
        if self.pp == 1 && self.schedule != StepRequest::default().schedule {
            // The schedule orders a pipeline's micro-batches; one stage has none to order.
            return Err(input(format!(
                "--schedule {} orders a pipeline's stages: it needs --pp greater than 1",
                schedule_name(self.schedule)
            )));
        }
        if given.is_empty() {
            return Ok(());
        }
        let verb = if given.len() == 1 { "is" } else { "are" };
        Err(input(if self.inference {
            format!(
                "{} {verb} for training; --inference takes --batch and --context (or --prompt and --new-tokens)",
                given.join(", ")
            )
        } else {
            format!(
                "{} {verb} for --inference; training takes --micro-batch and --seq",
                given.join(", ")
            )
        }))
    }

    /// The setup this request describes for `model` (after [`StepRequest::attach`]) on `gpu`
    /// (its CUDA context and workspace; `None`: the H100's), validated.
    pub fn setup(&self, model: &Model, gpu: Option<&Gpu>) -> Result<Setup> {
        self.check_applies(model)?;
        let max_pos = match model {
            Model::Transformer(t) => t.max_positions(),
            _ => 2048,
        };
        let default_len = max_pos.min(2048);
        let d = gpu.map_or_else(Overheads::default, Overheads::for_gpu);
        // What lies outside the allocator cannot exceed the device it lies on.
        let device = gpu.map_or_else(
            || vram_model::gpu::lookup("h100-80g").map_or(u64::MAX, |g| g.memory_bytes),
            |g| g.memory_bytes,
        );
        for (flag, v) in [
            ("--cuda-context", self.cuda_context),
            ("--workspace", self.workspace),
        ] {
            if let Some(v) = v.filter(|&v| v > device) {
                return Err(input(format!(
                    "{flag} {} is more than the GPU's {} in all",
                    vram_model::fmt::bytes(v),
                    vram_model::fmt::bytes(device)
                )));
            }
        }
        let overheads = Overheads {
            cuda_context_bytes: self.cuda_context.unwrap_or(d.cuda_context_bytes),
            workspace_bytes: self.workspace.unwrap_or(d.workspace_bytes),
            fragmentation: self.fragmentation,
            allocator: self.allocator,
            weights_cast_from_fp32: self.weights_cast_from_fp32,
            decode_replay: self.decode_replay,
            warmup_prompt: self.warmup_prompt,
            // Decided below, with the storage and the kernels (`Storage::load`).
            weights_dequantized: false,
        };
        let images = image_positions(model)?;
        self.check_mode_flags()?;
        let precision = self.precision_for(model);
        let mode = if self.inference {
            let context = match (self.context, self.prompt) {
                (Some(_), Some(_)) => {
                    return Err(input(
                        "give --context (prompt plus new tokens) or --prompt, not both",
                    ))
                }
                (Some(c), None) => c,
                // "--new-tokens 16 leaves no prompt in a context of 16 tokens" blamed the
                // flag the user did not give.
                (None, Some(0)) => return Err(input("--prompt must be at least 1 token")),
                (None, Some(p)) => p.saturating_add(self.new_tokens),
                (None, None) => default_len,
            }
            .saturating_add(images);
            if self.new_tokens == 0 {
                // transformers 5.24's GenerationConfig.validate: "`max_new_tokens` must be
                // greater than 0".
                return Err(input(
                    "--new-tokens must be at least 1 (generate refuses max_new_tokens=0)",
                ));
            }
            if self.new_tokens >= context {
                return Err(input(format!(
                    "--new-tokens {} leaves no prompt in a context of {context} tokens",
                    self.new_tokens
                )));
            }
            Mode::Infer(Infer {
                batch: self.batch,
                context,
                new_tokens: self.new_tokens,
                kv_bytes: self.kv_bytes.unwrap_or(precision.compute_bytes()),
                kv_cache: self.kv_cache,
            })
        } else {
            if self.context.is_some() || self.prompt.is_some() {
                return Err(input(
                    "--context and --prompt are for --inference; training takes --seq",
                ));
            }
            Mode::Train(Train {
                micro_batch: self.micro_batch,
                seq: self.seq.unwrap_or(default_len).saturating_add(images),
                grad_accum: self.grad_accum,
                optimizer: self.optimizer,
                recompute: self.recompute,
                recompute_layers: self.recompute_layers,
                offload: self.offload,
                amp_style: self.amp_style,
            })
        };
        let setup = Setup {
            precision,
            attention: self.attention,
            parallel: Parallel {
                dp: self.dp,
                tp: self.tp,
                pp: self.pp,
                sequence_parallel: self.sequence_parallel,
                zero: self.zero,
                schedule: self.schedule,
            },
            overheads,
            mode,
        };
        let mut setup = setup;
        if let Model::Transformer(t) = model {
            // How the library loads a packed checkpoint with what its card installs on this
            // GPU (`vram estimate` applies its own --kernels and --dequantized on top).
            let s = &t.blocks.storage;
            setup.overheads.weights_dequantized = s
                .load(
                    !self.inference,
                    setup::Kernels::for_storage(s),
                    gpu.map_or((9, 0), Gpu::capability),
                    false,
                )
                .dequantized;
        }
        setup.validate()?;
        if self.weights_cast_from_fp32 && !setup.builds_fp32_then_casts() {
            // A flag the run would ignore is refused, as check_mode_flags does.
            return Err(input(
                "--weights-created fp32 is a cast of fp32-built weights to a narrower dtype by plain PyTorch; here there is none (the step holds fp32 weights, or ZeRO, TP or PP builds the model sharded in place) and it changes nothing",
            ));
        }
        Ok(setup)
    }
}

/// Whether `model` is stored in float32 and unquantized: its config's `dtype` (`torch_dtype`)
/// says `float32`, which transformers 5.24's `from_pretrained` loads as it is.
pub fn stored_fp32(model: &Model) -> bool {
    match model {
        Model::Transformer(t) => {
            let s = &t.blocks.storage;
            s.dtype == Dtype::F32 && s.quant == Quant::None
        }
        _ => false,
    }
}

/// The precision of a step when `--precision` is not given, as the libraries a user runs it
/// with decide by their own defaults:
///
/// - **`generate`** (`--inference`) runs in the dtype `from_pretrained` loads: transformers
///   5.24 defaults to `dtype="auto"` (modeling_utils.py `from_pretrained`: `if dtype is None:
///   dtype = "auto"`), which `_get_dtype` resolves to the config's `dtype`. A float32 config is
///   loaded, run and cached in fp32 (`fp32`); a half one in its half dtype (`bf16-amp`'s
///   compute dtype; fp16 holds the same bytes).
/// - **Training** runs as TRL 1.16.0's `SFTTrainer` does by default: `SFTConfig.bf16` is
///   `True` unless `fp16` is set (trainer/base_config.py `__post_init__`), and a model given
///   by name is loaded in float32 whatever its config says (trainer/utils.py
///   `create_model_from_path`: `dtype` defaults to `"float32"`), so bf16 autocast over fp32
///   weights: `bf16-amp`, for every config. (LoRA's frozen base: [`FinetuneRequest::spec_for`].)
///
/// Models without a stored dtype (ResNet, catalog ids' bf16) take `bf16-amp`.
pub fn default_precision(model: &Model, inference: bool) -> Precision {
    if inference && stored_fp32(model) {
        Precision::Fp32
    } else {
        Precision::Bf16Amp
    }
}

/// Positions the images attached to `model` add to each sequence (0 without images).
pub(crate) fn image_positions(model: &Model) -> Result<u64> {
    match model {
        Model::Transformer(t) => match &t.blocks.vision {
            Some(v) => match &v.images {
                Some(i) => Ok(vram_model::estimate::sequence_tokens(v, i)?),
                None => Ok(0),
            },
            None => Ok(0),
        },
        _ => Ok(0),
    }
}

/// `--weights` (alias `--quantization`): how the weights are stored, one vocabulary for every
/// command. `vram estimate` and `vram plan` read it as the base's storage (bitsandbytes, FP8,
/// GPTQ, AWQ or a float dtype), `vram capacity` as the engine's `--quantization`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// `none`: as the model's dtype (`--precision`, `--dtype`).
    None,
    /// A storage the step estimate and the serving model both know.
    Format(WeightFormat),
    /// `bitsandbytes` (vLLM's name): NF4, block 64.
    Bitsandbytes,
    /// `mxfp4`: 4-bit elements with an 8-bit exponent per 32 (serving only; `vram estimate`
    /// reads MXFP4 from the config's `quantization_config`).
    Mxfp4,
    /// `awq_marlin` / `gptq_marlin`: the storage of AWQ/GPTQ at group 128, with vLLM's Marlin
    /// kernel named (where plain `awq`/`gptq` keeps the plain kernel).
    Marlin(WeightFormat),
}

/// The values `--weights` takes.
pub const WEIGHTS_VALUES: &str =
    "none, bf16, fp16, fp32, int8, nf4, fp4, fp8, gptq[-gN], awq[-gN], bitsandbytes, mxfp4";

impl Weights {
    /// Parses `--weights` / `--quantization` (and vLLM's spellings: `bnb`, `fbgemm_fp8`,
    /// `gptq_marlin`, `awq_marlin`, `compressed-tensors-fp8`).
    pub fn parse(s: &str) -> Result<Weights> {
        let l = s.to_ascii_lowercase();
        Ok(match l.as_str() {
            "none" => Weights::None,
            "bitsandbytes" | "bnb" => Weights::Bitsandbytes,
            "mxfp4" => Weights::Mxfp4,
            "fbgemm_fp8" | "compressed-tensors-fp8" => Weights::Format(WeightFormat::Fp8),
            "w8a8" | "compressed-tensors-w8a8" => Weights::Format(WeightFormat::Int8),
            "gptq_marlin" => Weights::Marlin(WeightFormat::Gptq {
                group: 128,
                desc_act: false,
            }),
            "awq_marlin" => Weights::Marlin(WeightFormat::Awq { group: 128 }),
            _ if l.starts_with("gptq") || l.starts_with("awq") => {
                Weights::Format(WeightFormat::parse(&l)?)
            }
            _ => match WeightFormat::parse(&l) {
                Ok(f) => Weights::Format(f),
                Err(_) => {
                    return Err(input(format!(
                        "--weights `{s}`: expected one of {WEIGHTS_VALUES}"
                    )))
                }
            },
        })
    }

    /// The storage of a step's base weights: `None` for `none` (as `--precision` says).
    pub fn format(self) -> Result<Option<WeightFormat>> {
        match self {
            Weights::None => Ok(None),
            Weights::Format(f) | Weights::Marlin(f) => Ok(Some(f)),
            Weights::Bitsandbytes => Ok(Some(WeightFormat::Nf4)),
            Weights::Mxfp4 => Err(input(
                "--weights mxfp4 is modelled by vram capacity; vram estimate reads MXFP4 experts from the config's quantization_config",
            )),
        }
    }

    /// The serving engine's `--quantization`.
    pub fn serving(self) -> Result<Quantization> {
        Ok(match self {
            Weights::None | Weights::Format(WeightFormat::Bf16 | WeightFormat::Fp16) => {
                Quantization::None
            }
            Weights::Format(WeightFormat::Fp8) => Quantization::Fp8,
            Weights::Format(WeightFormat::Int8) => Quantization::Int8,
            Weights::Format(WeightFormat::Gptq { group: 128, desc_act: false }) => Quantization::Gptq,
            Weights::Format(WeightFormat::Awq { group: 128 }) => Quantization::Awq,
            Weights::Format(WeightFormat::Nf4) | Weights::Bitsandbytes => {
                Quantization::Bitsandbytes
            }
            Weights::Mxfp4 => Quantization::Mxfp4,
            Weights::Marlin(f) => return Weights::Format(f).serving(),
            Weights::Format(f) => {
                return Err(input(format!(
                    "--weights {} is not a storage vram capacity models for the engines (none, fp8, int8, awq, gptq, bitsandbytes/nf4, mxfp4; AWQ and GPTQ at group 128; --dtype sets float32)",
                    f.name()
                )))
            }
        })
    }
}

/// Fine-tuning as the flags describe it (`--finetune`, `--lora-*`, `--weights`,
/// `--double-quant`, `--prepare-kbit`, `--no-gradient-checkpointing`).
#[derive(Debug, Clone, PartialEq)]
pub struct FinetuneRequest {
    /// `--finetune`.
    pub method: Method,
    /// `--lora-rank`.
    pub rank: u64,
    /// `--lora-alpha` (`None`: twice the rank).
    pub alpha: Option<u64>,
    /// `--lora-targets`.
    pub targets: String,
    /// `--lora-dropout`.
    pub dropout: f64,
    /// `--weights` (`None`: nf4 for QLoRA, bf16 otherwise).
    pub weights: Option<Weights>,
    /// `--double-quant`.
    pub double_quant: bool,
    /// `--prepare-kbit`.
    pub prepare_kbit: bool,
    /// `--load-dtype` (`None`: `auto`, the config's dtype).
    pub load_dtype: Option<String>,
    /// `--no-gradient-checkpointing`.
    pub no_gradient_checkpointing: bool,
}

impl Default for FinetuneRequest {
    /// Full training, and PEFT's and TRL's defaults for adapters (the CLI's defaults).
    fn default() -> Self {
        FinetuneRequest {
            method: Method::Full,
            rank: 16,
            alpha: None,
            targets: "all-linear".into(),
            dropout: 0.0,
            weights: None,
            double_quant: false,
            prepare_kbit: false,
            load_dtype: None,
            no_gradient_checkpointing: false,
        }
    }
}

impl FinetuneRequest {
    /// Whether it trains adapters (LoRA or QLoRA) rather than every parameter.
    pub fn is_lora(&self) -> bool {
        self.method != Method::Full
    }

    /// The base's storage, with its default (nf4 for QLoRA, bf16 otherwise).
    pub fn weights(&self) -> Result<WeightFormat> {
        Ok(match self.weights {
            Some(w) => w.format()?.unwrap_or(WeightFormat::Bf16),
            None if self.method == Method::Qlora => WeightFormat::Nf4,
            None => WeightFormat::Bf16,
        })
    }

    /// [`FinetuneRequest::spec`] for `model`: without `--weights`, LoRA's frozen base on a
    /// float32 checkpoint ([`stored_fp32`]) is fp32, as both ways of loading it give: transformers
    /// 5.24's `from_pretrained` (`dtype="auto"`, the config's float32) and TRL 1.16.0's
    /// `SFTTrainer` given the model by name (`create_model_from_path`: `dtype` defaults to
    /// `"float32"`). A half checkpoint keeps the bf16 base of [`FinetuneRequest::weights`],
    /// `from_pretrained`'s, for a model passed in; TRL given it by name loads float32 there too
    /// (read at TRL 1.16.0, the newest on PyPI on 2026-11-28), which `--weights fp32` prices
    /// (`tests/engines/test_default_precision.py`).
    pub fn spec_for(&self, model: &Model) -> Result<FinetuneSpec> {
        let mut s = self.spec()?;
        if self.fp32_base(model) {
            s.weights = WeightFormat::Fp32;
        }
        // QLoRA on a float32 checkpoint: both loaders give float32 unless told otherwise, and
        // transformers 5.24's bitsandbytes quantizer keeps that dtype for what it does not pack.
        s.load_fp32 = s.method == Method::Qlora
            && match self.load_dtype.as_deref() {
                None | Some("auto") => stored_fp32(model),
                Some(d) => d == "fp32",
            };
        Ok(s)
    }

    /// Whether [`FinetuneRequest::spec_for`] holds LoRA's base in fp32 by default on `model`.
    pub fn fp32_base(&self, model: &Model) -> bool {
        self.weights.is_none() && self.method == Method::Lora && stored_fp32(model)
    }

    /// The whole spec, validated.
    pub fn spec(&self) -> Result<FinetuneSpec> {
        if self.method != Method::Full && self.rank > vram_model::setup::MAX_SIZE {
            return Err(input(format!(
                "--lora-rank {} must be between 1 and {}",
                self.rank,
                vram_model::setup::MAX_SIZE
            )));
        }
        let targets = Targets::parse(&self.targets)?;
        let s = FinetuneSpec {
            method: self.method,
            weights: self.weights()?,
            double_quant: self.double_quant,
            lora: LoraSpec {
                rank: self.rank,
                alpha: self.alpha.unwrap_or(2 * self.rank),
                dropout: self.dropout,
                targets,
            },
            skip_modules: Vec::new(),
            prepare_kbit: self.prepare_kbit,
            load_fp32: false,
            gradient_checkpointing: !self.no_gradient_checkpointing,
        };
        if s.method == Method::Full {
            if self.weights.is_some_and(|w| w != Weights::None) {
                return Err(input(format!(
                    "--weights {} with --finetune full: full training holds the weights as --precision says (a quantized base trains adapters only: --finetune qlora); --weights is for --finetune lora/qlora and --inference",
                    s.weights.name()
                )));
            }
            if self.double_quant || self.prepare_kbit || self.no_gradient_checkpointing {
                return Err(input(
                    "--double-quant, --prepare-kbit and --no-gradient-checkpointing are for --finetune lora/qlora",
                ));
            }
            if self.load_dtype.is_some() {
                return Err(input("--load-dtype is for --finetune qlora"));
            }
            return Ok(s);
        }
        s.validate()?;
        match self.load_dtype.as_deref() {
            None => {}
            Some(_) if s.method != Method::Qlora => {
                return Err(input(
                    "--load-dtype is for --finetune qlora (LoRA's base dtype is --weights bf16/fp16/fp32)",
                ))
            }
            Some("auto" | "bf16" | "fp16" | "fp32") => {}
            Some(d) => {
                return Err(input(format!(
                    "--load-dtype {d}: expected auto, bf16, fp16 or fp32"
                )))
            }
        }
        if s.lora.rank == 0 {
            return Err(input("--lora-rank must be at least 1"));
        }
        Ok(s)
    }
}

/// The schedule's name as `--schedule` writes it.
pub fn schedule_name(s: Schedule) -> String {
    match s {
        setup::Schedule::OneFOneB => "1f1b".into(),
        setup::Schedule::Gpipe => "gpipe".into(),
        setup::Schedule::Interleaved(v) => format!("interleaved:{v}"),
    }
}

/// `--kv-dtype`'s bytes per element (`fp32` 4, `fp16`/`bf16` 2, `fp8`/`int8` 1).
pub fn kv_dtype_bytes(name: &str) -> Option<u64> {
    match name {
        "fp32" => Some(4),
        "fp16" | "bf16" => Some(2),
        "fp8" | "int8" => Some(1),
        _ => None,
    }
}
