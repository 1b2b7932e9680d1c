//! `vram estimate`, `vram models`, `vram gpus`.

use std::io::Write;

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::json;
use vram_model::arch::Model;
use vram_model::estimate::{max_batch, max_context};
use vram_model::gpu::{self, Gpu};
use vram_model::setup::{self, Infer, Mode, Overheads, Parallel, Setup, Train};
use vram_model::{catalog, estimate_with_timeline, Category, Estimate};

use crate::input::{parse_bytes, resolve_model};
use crate::{bad_input, fmt};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Precision {
    Fp32,
    #[value(name = "fp16-amp")]
    Fp16Amp,
    #[value(name = "bf16-amp")]
    Bf16Amp,
    Bf16,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Optimizer {
    Sgd,
    Momentum,
    #[value(alias = "adam")]
    Adamw,
    Adam8bit,
    Adafactor,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Recompute {
    None,
    Selective,
    Full,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Attention {
    Eager,
    #[value(alias = "flash")]
    Sdpa,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Offload {
    None,
    Optimizer,
    Params,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AmpStyle {
    Autocast,
    Deepspeed,
    Megatron,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KvDtype {
    Fp32,
    Fp16,
    Bf16,
    Fp8,
    Int8,
}

/// Parses `1f1b`, `gpipe` or `interleaved:N`.
fn parse_schedule(s: &str) -> std::result::Result<setup::Schedule, String> {
    match s.to_ascii_lowercase().as_str() {
        "1f1b" => Ok(setup::Schedule::OneFOneB),
        "gpipe" => Ok(setup::Schedule::Gpipe),
        other => match other
            .strip_prefix("interleaved:")
            .or_else(|| other.strip_prefix("interleaved="))
        {
            Some(n) => n
                .parse()
                .map(setup::Schedule::Interleaved)
                .map_err(|_| format!("`{s}`: chunks must be a number")),
            None if other == "interleaved" => Ok(setup::Schedule::Interleaved(2)),
            None => Err(format!(
                "`{s}` is not a schedule (1f1b, gpipe, interleaved:N)"
            )),
        },
    }
}

fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
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

/// Knobs shared by every command that estimates a step (`estimate`, later `plan` and `trace`).
#[derive(Debug, Clone, Args)]
pub struct StepArgs {
    /// Numeric precision.
    #[arg(long, value_enum, default_value = "bf16-amp")]
    precision: Precision,
    /// Mixed-precision memory layout [default: deepspeed under ZeRO, megatron under TP/PP, else autocast].
    #[arg(long, value_enum)]
    amp_style: Option<AmpStyle>,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    optimizer: Optimizer,
    /// Sequences per micro-batch per data-parallel rank.
    #[arg(long, default_value_t = 1)]
    micro_batch: u64,
    /// Sequence length [default: min(2048, the model's maximum)].
    #[arg(long)]
    seq: Option<u64>,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1)]
    grad_accum: u64,
    /// Activation recomputation.
    #[arg(long, value_enum, default_value = "none")]
    recompute: Recompute,
    /// Recompute only this many layers per pipeline stage.
    #[arg(long)]
    recompute_layers: Option<u64>,
    /// Attention implementation (eager stores the s² scores).
    #[arg(long, value_enum, default_value = "sdpa")]
    attention: Attention,
    /// ZeRO stage.
    #[arg(long, default_value_t = 0)]
    zero: u8,
    /// ZeRO offload to host memory.
    #[arg(long, value_enum, default_value = "none")]
    offload: Offload,
    /// Data-parallel degree.
    #[arg(long, default_value_t = 1)]
    dp: u64,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1)]
    tp: u64,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1)]
    pp: u64,
    /// Megatron sequence parallelism (with --tp > 1).
    #[arg(long)]
    sequence_parallel: bool,
    /// Pipeline schedule: 1f1b, gpipe or interleaved:N.
    #[arg(long, default_value = "1f1b", value_parser = parse_schedule)]
    schedule: setup::Schedule,
    /// Estimate inference (weights, KV cache, one forward) instead of training.
    #[arg(long)]
    inference: bool,
    /// Inference: concurrent sequences.
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Inference: tokens per sequence at the end of generation, prompt plus new tokens
    /// [default: min(2048, the model's maximum), or --prompt + --new-tokens].
    #[arg(long)]
    context: Option<u64>,
    /// Inference: prompt tokens per sequence (with --new-tokens; instead of --context).
    #[arg(long)]
    prompt: Option<u64>,
    /// Inference: tokens `generate` produces after the prompt (max_new_tokens).
    #[arg(long, default_value_t = 16)]
    new_tokens: u64,
    /// Inference: the KV cache of `generate` (dynamic: grows by torch.cat at every token).
    #[arg(long, value_enum, default_value = "dynamic")]
    kv_cache: KvCacheArg,
    /// Inference: KV-cache element type.
    #[arg(long, value_enum, default_value = "bf16")]
    kv_dtype: KvDtype,
    /// CUDA context and kernels outside the allocator, e.g. 500MiB.
    #[arg(long, value_parser = parse_bytes)]
    cuda_context: Option<u64>,
    /// cuBLAS/cuDNN workspace inside the allocator, e.g. 32MiB.
    #[arg(long, value_parser = parse_bytes)]
    workspace: Option<u64>,
    /// A fixed allocator overhead as a fraction of peak allocated (e.g. 0.05 or 5%), instead of
    /// replaying the step through the allocator.
    #[arg(long, value_parser = parse_fraction)]
    fragmentation: Option<f64>,
    /// The caching allocator whose replay gives the reserved bytes.
    #[arg(long, value_enum, default_value = "pytorch")]
    allocator: AllocatorArg,
    /// How half-precision weights came to be: `native` when loaded in their own dtype
    /// (from_pretrained: transformers 5 loads the checkpoint's dtype, dtype="auto"), `fp32` when
    /// the model was built in fp32 and cast (from_config, then model.to(bfloat16)). Changes the
    /// reserved bytes only.
    #[arg(long, value_enum, default_value = "native")]
    weights_created: WeightsCreated,
    /// Inference: which decode steps of `generate` the allocator replay walks. `sampled`: all
    /// of them up to 64, beyond that 64 of them (the first two, the last two, the others evenly
    /// spaced; the cost does not grow with --new-tokens, the output says what that changed);
    /// `every`: each one (the cost grows with the tokens).
    #[arg(long, value_enum, default_value = "sampled")]
    decode_replay: DecodeReplayArg,
    /// Images per sequence fed to a vision-language model (Qwen3-VL, Qwen3.5, Llama 4,
    /// Gemma 3/4): their tokens lengthen the sequence, and the vision tower's tensors count.
    #[arg(long)]
    images: Option<u64>,
    /// Image size in pixels: WxH (before the processor resizes it) with --images, or the side
    /// of a CNN's square inputs [default: the processor's size; a CNN's 224].
    #[arg(long, value_parser = parse_image_size)]
    image_size: Option<(u64, u64)>,
}

/// `--image-size`: `WxH`, or one side for a square.
fn parse_image_size(s: &str) -> std::result::Result<(u64, u64), String> {
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

impl StepArgs {
    /// `model` with what the flags say of its input (`--image-size` for a CNN).
    pub fn apply_to(&self, mut model: Model) -> Result<Model> {
        if let (Some((w, h)), Model::ResNet(r)) = (self.image_size, &mut model) {
            if w != h {
                return Err(bad_input!(
                    "--image-size {w}x{h}: {} takes square images (give one side)",
                    r.name
                ));
            }
            let side = w;
            // Five stride-2 stages take the side to 1/32; below 32 pixels nothing is left.
            if !(32..=16384).contains(&side) {
                return Err(bad_input!(
                    "--image-size {side} must be between 32 and 16384 pixels"
                ));
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
    fn attach_images(&self, t: &mut vram_model::arch::Transformer) -> Result<()> {
        let name = t.name.clone();
        let Some(count) = self.images else {
            if self.image_size.is_some() {
                return Err(if t.blocks.vision.is_some() {
                    bad_input!("--image-size needs --images N (images per sequence) for {name}")
                } else {
                    bad_input!("--image-size applies to CNNs and vision-language models; {name} takes sequences (--seq)")
                });
            }
            return Ok(());
        };
        if !(1..=4096).contains(&count) {
            return Err(bad_input!(
                "--images {count} must be between 1 and 4096 images per sequence"
            ));
        }
        let Some(v) = t.blocks.vision.as_mut() else {
            if t.blocks.vision_unmodelled {
                return Ok(()); // estimated without them, with a note (`image_notes`)
            }
            return Err(bad_input!(
                "--images: {name} has no vision tower (its config has no vision_config, or its class builds none)"
            ));
        };
        let (width, height) = match self.image_size.or_else(|| vram_model::estimate::default_image_size(v)) {
            Some(s) => s,
            None => {
                return Err(bad_input!(
                    "--images: {name} resizes each image to its own size (Qwen's smart_resize): give --image-size WxH"
                ))
            }
        };
        let images = vram_model::blocks::Images {
            count,
            width,
            height,
        };
        // Refuse sizes the processor refuses, in one line.
        vram_model::estimate::image_tokens(v, width, height)?;
        v.images = Some(images);
        Ok(())
    }

    /// The flags that do not apply to `model`, refused in one line: `--inference` estimates
    /// transformers' `generate` (a KV cache grown token by token), which neither a CNN nor an
    /// encoder-only model runs; a CNN takes images, not sequences.
    fn check_applies(&self, model: &Model) -> Result<()> {
        let name = model.name();
        match model {
            Model::ResNet(_) if self.inference => Err(bad_input!(
                "{name} is a CNN: --inference estimates `generate` with its KV cache, which a CNN does not run; estimate its training step instead"
            )),
            Model::ResNet(_) if self.seq.is_some() => Err(bad_input!(
                "--seq does not apply to {name}, a CNN over images: give --image-size"
            )),
            Model::Transformer(t)
                if self.inference && t.layout() == vram_model::arch::Layout::EncoderOnly =>
            {
                Err(bad_input!(
                    "{name} is an encoder-only model: it has no `generate` and no KV cache, which --inference estimates; estimate its training step instead"
                ))
            }
            Model::ResNet(_) if self.images.is_some() => Err(bad_input!(
                "--images applies to vision-language models; {name} is a CNN: give --micro-batch and --image-size"
            )),
            Model::Transformer(t)
                if self.images.is_some()
                    && !t.blocks.vision_unmodelled
                    && t.blocks.vision.is_none_or(|v| v.images.is_none()) =>
            {
                Err(bad_input!(
                    "--images is taken by vram estimate, trace and checkpoint (on a vision-language model)"
                ))
            }
            _ => Ok(()),
        }
    }

    /// The setup these flags describe for `model` on the default GPU (H100).
    pub fn setup(&self, model: &Model) -> Result<Setup> {
        self.setup_on(model, None)
    }

    /// The setup these flags describe for `model` on `gpu` (its context and workspace).
    pub fn setup_on(&self, model: &Model, gpu: Option<&vram_model::gpu::Gpu>) -> Result<Setup> {
        self.check_applies(model)?;
        let max_pos = match model {
            Model::Transformer(t) => t.max_positions(),
            _ => 2048,
        };
        let default_len = max_pos.min(2048);
        let d = gpu.map_or_else(Overheads::default, Overheads::for_gpu);
        let overheads = Overheads {
            cuda_context_bytes: self.cuda_context.unwrap_or(d.cuda_context_bytes),
            workspace_bytes: self.workspace.unwrap_or(d.workspace_bytes),
            fragmentation: self.fragmentation,
            allocator: match self.allocator {
                AllocatorArg::Pytorch => setup::Allocator::Pytorch,
                AllocatorArg::PytorchExpandable => setup::Allocator::PytorchExpandable,
                AllocatorArg::Vramkit => setup::Allocator::Vramkit,
            },
            weights_cast_from_fp32: self.weights_created == WeightsCreated::Fp32,
            decode_replay: match self.decode_replay {
                DecodeReplayArg::Sampled => setup::DecodeReplay::Sampled,
                DecodeReplayArg::Every => setup::DecodeReplay::Every,
            },
        };
        let mode = if self.inference {
            let kv_bytes = match self.kv_dtype {
                KvDtype::Fp32 => 4,
                KvDtype::Fp16 | KvDtype::Bf16 => 2,
                KvDtype::Fp8 | KvDtype::Int8 => 1,
            };
            let context = match (self.context, self.prompt) {
                (Some(_), Some(_)) => {
                    return Err(bad_input!(
                        "give --context (prompt plus new tokens) or --prompt, not both"
                    ))
                }
                (Some(c), None) => c,
                (None, Some(p)) => p.saturating_add(self.new_tokens),
                (None, None) => default_len,
            }
            .saturating_add(image_positions(model)?);
            if self.new_tokens >= context {
                return Err(bad_input!(
                    "--new-tokens {} leaves no prompt in a context of {context} tokens",
                    self.new_tokens
                ));
            }
            Mode::Infer(Infer {
                batch: self.batch,
                context,
                new_tokens: self.new_tokens,
                kv_bytes,
                kv_cache: match self.kv_cache {
                    KvCacheArg::Dynamic => setup::KvCache::Dynamic,
                    KvCacheArg::Static => setup::KvCache::Static,
                },
            })
        } else {
            if self.context.is_some() || self.prompt.is_some() {
                return Err(bad_input!(
                    "--context and --prompt are for --inference; training takes --seq"
                ));
            }
            Mode::Train(Train {
                micro_batch: self.micro_batch,
                seq: self
                    .seq
                    .unwrap_or(default_len)
                    .saturating_add(image_positions(model)?),
                grad_accum: self.grad_accum,
                optimizer: match self.optimizer {
                    Optimizer::Sgd => setup::Optimizer::Sgd,
                    Optimizer::Momentum => setup::Optimizer::Momentum,
                    Optimizer::Adamw => setup::Optimizer::Adamw,
                    Optimizer::Adam8bit => setup::Optimizer::Adam8bit,
                    Optimizer::Adafactor => setup::Optimizer::Adafactor,
                },
                recompute: match self.recompute {
                    Recompute::None => setup::Recompute::None,
                    Recompute::Selective => setup::Recompute::Selective,
                    Recompute::Full => setup::Recompute::Full,
                },
                recompute_layers: self.recompute_layers,
                offload: match self.offload {
                    Offload::None => setup::Offload::None,
                    Offload::Optimizer => setup::Offload::Optimizer,
                    Offload::Params => setup::Offload::Params,
                },
                amp_style: self.amp_style.map(|s| match s {
                    AmpStyle::Autocast => setup::AmpStyle::Autocast,
                    AmpStyle::Deepspeed => setup::AmpStyle::DeepSpeed,
                    AmpStyle::Megatron => setup::AmpStyle::Megatron,
                }),
            })
        };
        if let Some(seq) = self.seq {
            if matches!(model, Model::Transformer(_)) && seq > max_pos && !self.inference {
                let _ = writeln!(crate::output::stderr(), "vram: note: --seq {seq} exceeds the model's configured maximum of {max_pos} positions");
            }
        }
        let setup = Setup {
            precision: match self.precision {
                Precision::Fp32 => setup::Precision::Fp32,
                Precision::Fp16Amp => setup::Precision::Fp16Amp,
                Precision::Bf16Amp => setup::Precision::Bf16Amp,
                Precision::Bf16 => setup::Precision::Bf16,
            },
            attention: match self.attention {
                Attention::Eager => setup::Attention::Eager,
                Attention::Sdpa => setup::Attention::Sdpa,
            },
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
        setup.validate()?;
        Ok(setup)
    }
}

/// Positions the images attached to `model` add to each sequence (0 without images).
fn image_positions(model: &Model) -> Result<u64> {
    match model {
        Model::Transformer(t) => match t.blocks.vision {
            Some(v) => match &v.images {
                Some(i) => Ok(vram_model::estimate::sequence_tokens(&v, i)?),
                None => Ok(0),
            },
            None => Ok(0),
        },
        _ => Ok(0),
    }
}

/// `image_tokens` of `--json`: what each image becomes and what the sequence carries, or
/// `None` without images.
fn image_report(model: &Model, setup: &Setup) -> Option<serde_json::Value> {
    let Model::Transformer(t) = model else {
        return None;
    };
    let v = t.blocks.vision?;
    let i = v.images?;
    let it = vram_model::estimate::image_tokens(&v, i.width, i.height).ok()?;
    let seqs = match setup.mode {
        Mode::Train(tr) => tr.micro_batch,
        Mode::Infer(inf) => inf.batch,
    };
    Some(json!({
        "images_per_sequence": i.count,
        "width": i.width,
        "height": i.height,
        "resized": {"width": it.resized.0, "height": it.resized.1},
        "tiles_per_image": it.tiles,
        "patches_per_image": it.patches,
        "per_image": it.tokens,
        "sequence_per_image": it.sequence,
        "total": i.count * it.tokens,
        "sequence_total": i.count * it.sequence,
        "vision_tower_images": seqs * i.count,
        "activations_validated": false,
    }))
}

/// The lines (text) or notes (JSON) about images: what they became, or that they are not
/// counted.
fn image_notes(model: &Model, setup: &Setup, images: Option<u64>) -> Vec<String> {
    let Model::Transformer(t) = model else {
        return Vec::new();
    };
    match (t.blocks.vision.and_then(|v| v.images.map(|i| (v, i))), images) {
        (Some((v, i)), _) => {
            let Ok(it) = vram_model::estimate::image_tokens(&v, i.width, i.height) else {
                return Vec::new();
            };
            let tiles = if it.tiles > 1 {
                format!(" in {} tiles", it.tiles)
            } else {
                String::new()
            };
            vec![
                format!(
                    "images: {} per sequence at {}x{} (resized to {}x{}{tiles}): {} patches each through the vision tower, {} image tokens each ({} positions with their markers), {} positions per sequence",
                    i.count, i.width, i.height, it.resized.0, it.resized.1, it.patches, it.tokens, it.sequence, i.count * it.sequence
                ),
                format!(
                    "note: the vision tower's activations ({}) are counted from its modelling code's tensors, not validated on a GPU; its FLOPs are not in the speed figures",
                    match setup.mode {
                        Mode::Train(_) => "saved for backward: TRL's SFTTrainer leaves the tower trainable",
                        Mode::Infer(_) => "its forward before the prefill, the image features kept through it",
                    }
                ),
            ]
        }
        (None, Some(_)) if t.blocks.vision_unmodelled => vec![
            "note: image tokens are not counted: this config's vision tower is not described by vram (the text model alone is estimated)".into(),
        ],
        _ => Vec::new(),
    }
}

/// Arguments of `vram estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// A local folder with config.json, a config file, a .safetensors file or
    /// model.safetensors.index.json, a catalog id (see `vram models`), or a Hub id
    /// (`Qwen/Qwen3-8B`; `modelscope:org/name`), in that order.
    model: String,
    #[command(flatten)]
    hub: crate::input::HubArgs,
    /// GPU to check the fit against (see `vram gpus`).
    #[arg(long, default_value = "h100-80g")]
    gpu: String,
    #[command(flatten)]
    step: StepArgs,
    #[command(flatten)]
    finetune: crate::finetune::FinetuneArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Include the step's timeline (live bytes at every phase).
    #[arg(long)]
    timeline: bool,
    /// Report stored weights as the dequantized fallback holds them (FP8/MXFP4 checkpoints
    /// without their kernels: everything in the config's dtype).
    #[arg(long)]
    dequantized: bool,
    /// Kernel packages installed beside transformers that it runs instead of its torch
    /// fallbacks, comma-separated: fla (flash-linear-attention), causal-conv1d; none by
    /// default, as `pip install transformers` gives. Changes the speed figures.
    #[arg(long, default_value = "none", value_parser = vram_plan::generate::Kernels::parse)]
    kernels: vram_plan::generate::Kernels,
}

/// Arguments of the listing commands.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &EstimateArgs) -> Result<()> {
    let gpu = gpu::lookup(&a.gpu)?;
    let mut resolved = resolve_model(&a.model, &a.hub)?;
    resolved.model = a.step.apply_to(resolved.model)?;
    let model = &resolved.model;
    if let Model::Weights(w) = model {
        return print_weights(w, a.json);
    }
    let mut setup = a.step.setup_on(model, Some(gpu))?;
    // Issue 22: --weights for inference; --finetune lora/qlora for training.
    let mut inference_weights = None;
    let mut trainable = None;
    if let Mode::Infer(_) = setup.mode {
        if a.finetune.is_lora() {
            return Err(crate::bad_input!(
                "--finetune {} is a training step; drop --inference",
                a.finetune.finetune
            ));
        }
        if a.finetune.weights.is_some() {
            let f = a.finetune.weights()?;
            if f.is_quantized() {
                // from_pretrained(..., quantization_config=...) quantizes while loading: no fp32
                // model is built and cast first.
                setup.overheads.weights_cast_from_fp32 = false;
            }
            inference_weights = Some(f);
        } else if a.finetune.double_quant {
            return Err(crate::bad_input!(
                "--double-quant goes with --weights nf4 or fp4"
            ));
        }
    } else {
        let spec = a.finetune.spec()?;
        if a.finetune.is_lora() {
            return crate::finetune::run_estimate(model, &setup, &spec, gpu, a.json);
        }
        trainable = Some(model.param_count());
    }
    let setup = setup;
    let mut e = estimate_with_timeline(model, &setup)?;
    let cap = gpu.memory_bytes;
    // Quantized inference: the weights as stored replace the half weights; the fit searches
    // run against the capacity the difference leaves.
    let mut fit_cap = cap;
    let mut weights_bytes = e.breakdown.get(Category::Parameters);
    if let Some(f) = inference_weights {
        let (delta, w) = crate::finetune::apply_inference_weights(
            model,
            &setup,
            &mut e,
            f,
            a.finetune.double_quant,
        )?;
        fit_cap = (cap as i128 - delta).max(0) as u64;
        weights_bytes = w;
    }
    let (fit_batch, fit_context) = match setup.mode {
        Mode::Train(_) => (max_batch(model, &setup, cap)?, None),
        Mode::Infer(_) => (
            max_batch(model, &setup, fit_cap)?,
            max_context(model, &setup, fit_cap)?,
        ),
    };
    let mut out = crate::output::stdout();
    if a.json {
        let timeline: Vec<_> = e
            .timeline
            .iter()
            .filter(|_| a.timeline)
            .map(|p| json!({"label": p.phase.to_string(), "phase": p.phase, "live_bytes": p.live_bytes, "high_bytes": p.high_bytes}))
            .collect();
        let mut v = json!({
            "model": e.model,
            "params": e.params,
            "params_per_gpu": e.params_per_gpu,
            "peak_bytes": e.peak_bytes,
            "peak_tensor_bytes": e.peak_tensor_bytes,
            "reserved_bytes": e.reserved_bytes,
            "needed_bytes": e.needed_bytes,
            "total_bytes": e.total_bytes,
            "breakdown": e.breakdown,
            "peak_phase": e.peak_phase.to_string(),
            "pipeline_rank": e.pipeline_rank,
            "amp_style": e.amp_style,
            "allocator": e.allocator,
            "assumes": e.assumes,
            "cuda_context_source": gpu.context_source(),
            "gpu": {"id": gpu.id, "name": gpu.name, "memory_bytes": gpu.memory_bytes},
            "gpu_memory_bytes": gpu.memory_bytes,
            "fits": e.fits(cap),
            "headroom_bytes": cap as i128 - e.total_bytes as i128,
            "setup": setup,
            "description": describe(model, &setup, &e),
            "trainable_params": trainable.unwrap_or(0),
            "weights_bytes": weights_bytes,
            "weights": inference_weights.map_or("as --precision".to_string(), |f| f.name()),
        });
        if !e.fits(cap) {
            // The text's "would fit with" lines.
            v["suggestions"] = suggestions(model, &setup, cap)
                .into_iter()
                .map(|(flags, total)| json!({"flags": flags, "total_bytes": total}))
                .collect();
        }
        if let Model::ResNet(r) = model {
            v["image_size"] = json!(r.image_size);
        }
        if let Some(r) = image_report(model, &setup) {
            v["image_tokens"] = r;
        }
        if !e.mechanisms.is_empty() {
            v["mechanisms"] = json!(e.mechanisms);
        }
        if let Mode::Infer(_) = setup.mode {
            // null where every decode step was walked.
            v["decode_sampled"] = json!(e.decode_sampled);
        }
        if let Mode::Train(_) = setup.mode {
            v["max_micro_batch"] = json!(fit_batch);
        } else {
            v["max_batch"] = json!(fit_batch);
            v["max_context"] = json!(fit_context);
        }
        if a.timeline {
            v["timeline"] = json!(timeline);
        }
        if let Some(s) = crate::speed::of(model, gpu, &setup, a.kernels) {
            v["serving"] = json!(s);
        }
        if let Some(n) = resolved.checkpoint_params() {
            v["checkpoint_params"] = json!(n);
        }
        if let Model::Transformer(t) = model {
            describe_blocks(
                &mut v,
                t,
                &setup,
                a.dequantized,
                inference_weights.is_some(),
            );
            let extra = image_notes(model, &setup, a.step.images);
            if let Some(notes) = v["notes"].as_array_mut() {
                notes.extend(
                    extra
                        .iter()
                        .filter_map(|n| n.strip_prefix("note: "))
                        .map(|n| json!(n)),
                );
            }
        }
        if let Some(d) = e.decode_sampled {
            match v["notes"].as_array_mut() {
                Some(notes) => notes.push(json!(d.note())),
                None => v["notes"] = json!([d.note()]),
            }
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    print_table(
        &mut out,
        model,
        &setup,
        &e,
        gpu,
        fit_batch,
        fit_context,
        a.timeline,
    )?;
    if let Some(s) = crate::speed::of(model, gpu, &setup, a.kernels) {
        writeln!(out, "{}", crate::speed::line(&s))?;
    }
    if let Some(f) = inference_weights {
        writeln!(
            out,
            "weights as stored in {}: {} (packed weights with their scales/zeros/absmax; embedding, head and norms in {}); loaded in place, no fp32 build",
            f.name(),
            fmt::bytes(weights_bytes),
            if f.dense_bytes() == 4 { "fp32" } else { "bf16/fp16" }
        )?;
    }
    if let Model::Transformer(t) = model {
        for line in blocks_lines(t, &setup, a.dequantized, inference_weights.is_some()) {
            writeln!(out, "{line}")?;
        }
    }
    for line in image_notes(model, &setup, a.step.images) {
        writeln!(out, "{line}")?;
    }
    if let Some(params) = resolved.checkpoint_params() {
        let verdict = if params == e.params {
            "matches the config".to_string()
        } else {
            format!("config says {}", fmt::thousands(e.params))
        };
        writeln!(
            out,
            "{}: {} parameters ({verdict})",
            resolved.checkpoint_place(),
            fmt::thousands(params)
        )?;
    }
    Ok(())
}

/// What the layer-by-layer description adds to `--json`: `params_by_component`,
/// `weights_bytes`, the cache after prefill and one decode step (inference), and notes.
fn describe_blocks(
    v: &mut serde_json::Value,
    t: &vram_model::arch::Transformer,
    setup: &Setup,
    dequantized: bool,
    packed_by_flag: bool,
) {
    let p = t.params_by_component();
    let by: serde_json::Map<String, serde_json::Value> = vram_model::blocks::Component::ALL
        .iter()
        .map(|c| (c.key().to_string(), json!(p.get(*c))))
        .collect();
    v["params_by_component"] = json!(by);
    if !packed_by_flag {
        // `--weights` (bitsandbytes, GPTQ, AWQ...) already set the packed bytes.
        v["weights_bytes"] = json!(t.blocks.weights_bytes(dequantized));
    }
    v["weights_storage"] = json!(t.blocks.storage);
    if let Mode::Infer(i) = setup.mode {
        let r = t.blocks.cache_report(i.batch, i.prompt(), i.kv_bytes);
        v["cache_after_prefill_bytes"] = json!(r.after_prefill_bytes);
        v["cache_bytes_per_token"] = json!(r.bytes_per_token);
        let kinds: serde_json::Map<String, serde_json::Value> = r
            .by_kind
            .iter()
            .map(|k| {
                (
                    k.kind.key().to_string(),
                    json!({"layers": k.layers, "after_prefill_bytes": k.after_prefill_bytes, "after_decode_bytes": k.after_decode_bytes}),
                )
            })
            .collect();
        v["cache_by_kind"] = json!(kinds);
    }
    v["notes"] = json!(blocks_notes(t));
}

/// The model's notes: what the reader assumed, and that the walks follow each layer's kind.
fn blocks_notes(t: &vram_model::arch::Transformer) -> Vec<String> {
    let mut notes = t.blocks.notes.clone();
    if t.blocks.varies() {
        // `Step::new` derives one layer description per kind (`walk/layer.rs`
        // `init_blocks`) and both walks index it per layer.
        notes.push("layers differ (mixer, feed-forward or window per layer): parameters, weights, the cache, and the activations and temporaries of the training step and of generate follow each layer's own kind".into());
    }
    notes
}

/// The text lines that match [`describe_blocks`].
/// Printed for the models the uniform fields do not describe, or stored quantized; the
/// 2019–2024 families' tables stay as they were.
fn blocks_lines(
    t: &vram_model::arch::Transformer,
    setup: &Setup,
    dequantized: bool,
    packed_by_flag: bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    let b = &t.blocks;
    if !b.varies() && b.storage.quant == vram_model::blocks::Quant::None && b.notes.is_empty() {
        return lines;
    }
    let stored = b.weights_bytes(dequantized);
    let how = match b.storage.quant {
        vram_model::blocks::Quant::None => format!("{:?}", b.storage.dtype).to_lowercase(),
        vram_model::blocks::Quant::Fp8Block { bn, bk, .. } => {
            format!("fp8 {bn}x{bk} blocks + fp32 scales")
        }
        vram_model::blocks::Quant::Mxfp4 => "mxfp4 experts".into(),
        vram_model::blocks::Quant::Other => format!("{:?}", b.storage.dtype).to_lowercase(),
    };
    let how = if dequantized {
        format!("{how}, dequantized")
    } else {
        how
    };
    if !packed_by_flag {
        // With `--weights`, the packed form's line above says what is stored.
        lines.push(format!("weights as stored: {} ({how})", fmt::bytes(stored)));
    }
    if let Mode::Infer(i) = setup.mode {
        let r = b.cache_report(i.batch, i.prompt(), i.kv_bytes);
        lines.push(format!(
            "cache after the prefill: {}; one decode step adds {}{}",
            fmt::bytes(r.after_prefill_bytes),
            if r.bytes_per_token < 0 { "-" } else { "" },
            fmt::bytes(r.bytes_per_token.unsigned_abs())
        ));
    }
    for n in blocks_notes(t) {
        lines.push(format!("note: {n}"));
    }
    lines
}

fn describe(model: &Model, setup: &Setup, e: &Estimate) -> String {
    let p = setup.parallel;
    let par = format!(
        "dp {} tp {} pp {}{}",
        p.dp,
        p.tp,
        p.pp,
        if p.sequence_parallel { " +sp" } else { "" }
    );
    let prec = serde_json::to_value(setup.precision)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let attn = serde_json::to_value(setup.attention)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    if let (Model::ResNet(r), Mode::Train(t)) = (model, setup.mode) {
        let j = |v: serde_json::Value| v.as_str().map(String::from).unwrap_or_default();
        return format!(
            "training, {prec}, {}, micro-batch {} x {}x{} images, grad-accum {}, {par}, ZeRO {}",
            j(json!(t.optimizer)),
            t.micro_batch,
            r.image_size,
            r.image_size,
            t.grad_accum,
            p.zero,
        );
    }
    let images = image_positions(model).unwrap_or(0);
    let split = |total: u64| {
        if images > 0 {
            format!(
                " ({} text + {images} image positions)",
                total.saturating_sub(images)
            )
        } else {
            String::new()
        }
    };
    match setup.mode {
        Mode::Train(t) => {
            let style = serde_json::to_value(e.amp_style).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            let j = |v: serde_json::Value| v.as_str().map(String::from).unwrap_or_default();
            format!(
                "training, {prec} ({style} layout), {}, micro-batch {} x seq {}{}, grad-accum {}, recompute {}{}, attention {attn}, {par}, ZeRO {}{}",
                j(json!(t.optimizer)),
                t.micro_batch,
                t.seq,
                split(t.seq),
                t.grad_accum,
                j(json!(t.recompute)),
                t.recompute_layers.map(|k| format!(" ({k} layers)")).unwrap_or_default(),
                p.zero,
                if t.offload == setup::Offload::None { String::new() } else { format!(", offload {}", j(json!(t.offload))) },
            )
        }
        Mode::Infer(i) => format!(
            "inference (generate), {prec}, batch {} x (prompt {}{} + {} new tokens), {} KV cache {} B/element, attention {attn}, {par}",
            i.batch,
            i.prompt(),
            split(i.prompt()),
            i.new_tokens,
            if i.kv_cache == setup::KvCache::Static { "static" } else { "dynamic" },
            i.kv_bytes
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn print_table(
    out: &mut impl Write,
    model: &Model,
    setup: &Setup,
    e: &Estimate,
    gpu: &Gpu,
    fit_batch: Option<u64>,
    fit_context: Option<u64>,
    timeline: bool,
) -> Result<()> {
    writeln!(
        out,
        "{} — {} parameters",
        model.name(),
        fmt::thousands(e.params)
    )?;
    writeln!(out, "{}", describe(model, setup, e))?;
    if setup.parallel.pp > 1 {
        writeln!(
            out,
            "pipeline rank {} needs the most; figures are per GPU",
            e.pipeline_rank
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{:<22} {:>12} {:>7}", "category", "bytes", "share")?;
    for (c, b) in e.breakdown.iter() {
        let share = 100.0 * b as f64 / e.total_bytes as f64;
        writeln!(
            out,
            "{:<22} {:>12} {:>6.1}%",
            c.name(),
            fmt::bytes(b),
            share
        )?;
    }
    writeln!(out, "{:-<43}", "")?;
    writeln!(
        out,
        "{:<22} {:>12}   at {}",
        "peak allocated",
        fmt::bytes(e.peak_bytes),
        e.peak_phase
    )?;
    writeln!(
        out,
        "{:<22} {:>12}   (max_memory_reserved{})",
        "peak reserved",
        fmt::bytes(e.reserved_bytes),
        if e.needed_bytes < e.reserved_bytes {
            " on a GPU with room to cache every segment"
        } else {
            ""
        }
    )?;
    if e.needed_bytes < e.reserved_bytes {
        // Segments cached but idle at the peak: PyTorch gives them back when cudaMalloc fails.
        writeln!(
            out,
            "{:<22} {:>12}   (on the smallest device that runs it: idle cached segments released, cudaMalloc retried)",
            "needed",
            fmt::bytes(e.needed_bytes)
        )?;
        writeln!(
            out,
            "{:<22} {:>12}   (needed plus CUDA context)",
            "device total",
            fmt::bytes(e.total_bytes)
        )?;
    } else {
        writeln!(
            out,
            "{:<22} {:>12}   (what nvidia-smi shows)",
            "device total",
            fmt::bytes(e.total_bytes)
        )?;
    }
    writeln!(out)?;
    fit_verdict(out, gpu, e.total_bytes)?;
    let cap = gpu.memory_bytes;
    match (setup.mode, fit_batch) {
        (Mode::Train(_), Some(b)) => writeln!(out, "largest micro-batch that fits: {b}")?,
        (Mode::Train(_), None) => writeln!(out, "no micro-batch fits")?,
        (Mode::Infer(i), Some(b)) => {
            writeln!(out, "largest batch at context {}: {b}", i.context)?;
            if let Some(c) = fit_context {
                writeln!(out, "longest context at batch {}: {c}", i.batch)?;
            }
        }
        (Mode::Infer(_), None) => writeln!(out, "not even batch 1 fits")?,
    }
    if !e.fits(cap) {
        let mut fixes = suggestions(model, setup, cap);
        if let Mode::Train(_) = setup.mode {
            fixes.extend(crate::finetune::suggestions(model, setup, cap));
        }
        if fixes.is_empty() {
            writeln!(out, "no single change tried (recompute, 8-bit Adam, ZeRO-3 over 8 GPUs, offload, TP 2-8) makes it fit")?;
        }
        for (flags, total) in fixes {
            writeln!(
                out,
                "would fit with {flags}: {} on the device",
                fmt::bytes(total)
            )?;
        }
    }
    if !gpu.bf16
        && setup.precision != setup::Precision::Fp32
        && setup.precision != setup::Precision::Fp16Amp
    {
        writeln!(
            out,
            "note: {} has no native bf16; use --precision fp16-amp or fp32",
            gpu.name
        )?;
    }
    let o = setup.overheads;
    let reserved = match o.fragmentation {
        Some(f) => format!(
            "allocator overhead {:.0}% of peak (--fragmentation)",
            f * 100.0
        ),
        None => format!(
            "reserved from a replay of the step through the {} allocator (--allocator){}",
            o.allocator.name(),
            match e.decode_sampled {
                Some(d) => format!(
                    ", {} of the {} decode steps (--decode-replay)",
                    fmt::thousands(d.replayed),
                    fmt::thousands(d.steps)
                ),
                None => String::new(),
            }
        ),
    };
    writeln!(
        out,
        "assumed: CUDA context {} (--cuda-context; {}), library workspace {} (--workspace), {reserved}",
        fmt::bytes(o.cuda_context_bytes),
        gpu.context_source(),
        fmt::bytes(o.workspace_bytes),
    )?;
    writeln!(out, "models: {}", e.assumes.line())?;
    if let Some(d) = e.decode_sampled {
        writeln!(out, "note: {}", d.note())?;
    }
    for m in &e.mechanisms {
        writeln!(out, "mechanism: {m}")?;
    }
    if timeline {
        writeln!(out)?;
        writeln!(
            out,
            "{:<40} {:>12} {:>12}",
            "timeline (phase)", "at entry", "high in it"
        )?;
        for p in &e.timeline {
            writeln!(
                out,
                "{:<40} {:>12} {:>12}",
                p.phase.to_string(),
                fmt::bytes(p.live_bytes),
                fmt::bytes(p.high_bytes)
            )?;
        }
    }
    let _ = Category::ALL;
    Ok(())
}

/// Changes of one or two knobs that make the step fit, with the device total each gives.
fn suggestions(model: &Model, setup: &Setup, cap: u64) -> Vec<(String, u64)> {
    let mut tries: Vec<(&str, Setup)> = Vec::new();
    let with_train = |f: &dyn Fn(&mut Train)| {
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            f(t);
        }
        s
    };
    match setup.mode {
        Mode::Train(t) => {
            if t.recompute != setup::Recompute::Full {
                tries.push((
                    "--recompute full",
                    with_train(&|t| t.recompute = setup::Recompute::Full),
                ));
            }
            if t.optimizer == setup::Optimizer::Adamw {
                tries.push((
                    "--optimizer adam8bit",
                    with_train(&|t| t.optimizer = setup::Optimizer::Adam8bit),
                ));
                tries.push((
                    "--optimizer adam8bit --recompute full",
                    with_train(&|t| {
                        t.optimizer = setup::Optimizer::Adam8bit;
                        t.recompute = setup::Recompute::Full;
                    }),
                ));
            }
            if setup.parallel.zero < 3 {
                let mut s = with_train(&|t| t.amp_style = None);
                s.parallel.zero = 3;
                let flags = if s.parallel.dp < 8 {
                    s.parallel.dp = 8;
                    "--zero 3 --dp 8"
                } else {
                    "--zero 3"
                };
                tries.push((flags, s));
                if t.recompute != setup::Recompute::Full {
                    let mut r = s;
                    if let Mode::Train(t) = &mut r.mode {
                        t.recompute = setup::Recompute::Full;
                    }
                    tries.push((
                        if s.parallel.dp == setup.parallel.dp {
                            "--zero 3 --recompute full"
                        } else {
                            "--zero 3 --dp 8 --recompute full"
                        },
                        r,
                    ));
                }
            }
            if setup.parallel.zero >= 1 && t.offload == setup::Offload::None {
                tries.push((
                    "--offload optimizer",
                    with_train(&|t| t.offload = setup::Offload::Optimizer),
                ));
            }
        }
        Mode::Infer(i) => {
            if i.kv_bytes > 1 {
                let mut s = *setup;
                if let Mode::Infer(i) = &mut s.mode {
                    i.kv_bytes = 1;
                }
                tries.push(("--kv-dtype fp8", s));
            }
            for (tp, flags) in [(2, "--tp 2"), (4, "--tp 4"), (8, "--tp 8")] {
                if tp > setup.parallel.tp {
                    let mut s = *setup;
                    s.parallel.tp = tp;
                    tries.push((flags, s));
                }
            }
        }
    }
    // Suggest changes only: a try that leaves the setup as the user gave it, or as an earlier
    // try has it, says nothing new.
    let mut seen = vec![*setup];
    tries.retain(|(_, s)| {
        let new = !seen.contains(s);
        seen.push(*s);
        new
    });
    tries
        .into_iter()
        .filter_map(|(flags, s)| {
            // `fits` decides in at most two allocator replays (none where the peak walk
            // refuses); only a change that fits pays for the search of its device total.
            if !vram_model::estimate::fits(model, &s, cap).unwrap_or(false) {
                return None;
            }
            vram_model::estimate(model, &s)
                .ok()
                .filter(|e| e.fits(cap))
                .map(|e| (flags.to_string(), e.total_bytes))
        })
        .take(3)
        .collect()
}

fn print_weights(w: &vram_model::arch::Weights, json_out: bool) -> Result<()> {
    let mut out = crate::output::stdout();
    if json_out {
        let dtypes: serde_json::Map<String, serde_json::Value> = w
            .dtypes
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(
                &json!({"model": w.name, "params": w.params, "weights_bytes": w.bytes, "dtypes": dtypes})
            )?
        )?;
    } else {
        writeln!(
            out,
            "{} — {} parameters, {} of weights",
            w.name,
            fmt::thousands(w.params),
            fmt::bytes(w.bytes)
        )?;
        for (d, n) in &w.dtypes {
            writeln!(out, "  {d:<6} {}", fmt::thousands(*n))?;
        }
        writeln!(
            out,
            "(parameters only: give the folder with config.json to estimate a step)"
        )?;
    }
    Ok(())
}

pub fn models(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    let mut rows = Vec::new();
    for id in catalog::ids() {
        let m = catalog::lookup(id)?;
        rows.push(json!({"id": id, "params": m.param_count(), "kind": match &m { Model::Transformer(t) => t.model_type.clone(), _ => "resnet".into() }}));
    }
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        let width = |key: &str| {
            rows.iter()
                .map(|r| r[key].as_str().unwrap_or("").len())
                .max()
                .unwrap_or(0)
        };
        let (wi, wk) = (width("id").max(20), width("kind").max(10));
        for r in &rows {
            writeln!(
                out,
                "{:<wi$} {:<wk$} {:>20}",
                r["id"].as_str().unwrap_or(""),
                r["kind"].as_str().unwrap_or(""),
                fmt::thousands(r["params"].as_u64().unwrap_or(0))
            )?;
        }
    }
    Ok(())
}

pub fn gpus(a: &ListArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(gpu::GPUS)?)?;
    } else {
        writeln!(
            out,
            "{:<11} {:<36} {:>10} {:>10} {:>9} {:>9}",
            "id", "name", "memory", "bf16 TF/s", "fp32 TF/s", "HBM GB/s"
        )?;
        for g in gpu::GPUS {
            writeln!(
                out,
                "{:<11} {:<36} {:>10} {:>10} {:>9} {:>9}",
                g.id,
                g.name,
                fmt::bytes(g.memory_bytes),
                g.half_tflops,
                g.fp32_tflops,
                g.hbm_gb_s
            )?;
        }
    }
    Ok(())
}

/// The verdict line of a step needing `total` bytes on `gpu` (the device total, context
/// included): the room left, or how much is missing.
pub(crate) fn fit_verdict(out: &mut impl Write, gpu: &Gpu, total: u64) -> std::io::Result<()> {
    let cap = gpu.memory_bytes;
    if total <= cap {
        let room = cap - total;
        writeln!(
            out,
            "fits on {} ({}): {} free ({:.0}% headroom)",
            gpu.name,
            fmt::bytes(cap),
            fmt::bytes(room),
            100.0 * room as f64 / cap as f64
        )
    } else {
        writeln!(
            out,
            "does NOT fit on {} ({}): {} short",
            gpu.name,
            fmt::bytes(cap),
            fmt::bytes(total - cap)
        )
    }
}
