//! `vram estimate`: one step's memory with its fit searches, suggestions, speed and notes.

use serde::{Deserialize, Serialize};
use vram_model::arch::{Model, Transformer};
use vram_model::blocks::{Component, Load, Quant, Storage};
use vram_model::estimate::{largest_batch, largest_context_to, Largest};
use vram_model::finetune::WeightFormat;
use vram_model::gpu::Gpu;
use vram_model::setup::{self, Allocator, AmpStyle, Attention, Kernels, Mode, Setup};
use vram_model::{estimate_with_timeline, Category};
use vram_plan::capacity::Engine;
use vram_plan::suggest::{self, Suggestion};

use crate::check::{Checker, Ranges, Totals};
use crate::error::{input, Result};
use crate::parts::{double_option, name_of as name, Assumes, Bytes, GpuRef, Speed, TimelinePoint};
use crate::request::{image_positions, FinetuneRequest, StepRequest};
use crate::{finetune, Kind, Report, SCHEMA_VERSION};

/// A model and what came with it, as the CLI read it.
#[derive(Debug, Clone)]
pub struct ModelInput<'a> {
    /// The model, with what the request attached to it ([`StepRequest::attach`]).
    pub model: Model,
    /// The config.json text it was read from (the catalog's embedded one for an id).
    pub config: Option<&'a str>,
    /// Parameters counted from the checkpoint's headers (beside the config, or on the Hub).
    pub checkpoint_params: Option<u64>,
    /// Where that checkpoint is, as the cross-check line names it (`checkpoint beside the
    /// config`, `checkpoint on the Hub (org/name@commit)`).
    pub checkpoint_place: Option<String>,
}

/// What `vram estimate` was asked.
#[derive(Debug, Clone)]
pub struct EstimateRequest {
    /// The step.
    pub step: StepRequest,
    /// Fine-tuning and the weights' storage.
    pub finetune: FinetuneRequest,
    /// The GPU to fit.
    pub gpu: &'static Gpu,
    /// Keep the step's timeline (`--timeline`).
    pub timeline: bool,
    /// Stored weights as the dequantized fallback holds them (`--dequantized`).
    pub dequantized: bool,
    /// Kernel packages installed beside transformers (`--kernels`): the speed figures, and
    /// whether a packed checkpoint stays packed (`None`: what the model's card installs,
    /// [`vram_model::setup::Kernels::for_storage`]).
    pub kernels: Option<vram_plan::generate::Kernels>,
}

/// `reserved_replayed` of a report saved before the field: every such report without
/// `--fragmentation` had its figures from a replay (a step the replay could not place was
/// reported as replayed then too; the field says it now).
fn replayed_before_the_field() -> bool {
    true
}

/// A full training step or a `generate` call: where its memory goes, whether it fits, the
/// largest batch and context that fit, what would make it fit, and how fast it serves.
///
/// `--json` is this object (`schema_version`: [`crate::SCHEMA_VERSION`]). Sizes are bytes (`*_bytes`), times seconds
/// (`*_s`). A training estimate has `max_micro_batch` (null: none fits); an inference estimate
/// has `max_batch`, `max_context` (stopped at `max_context_limit`), `decode_sampled`, the
/// cache figures and `serving`. `suggestions` is present when the step does not fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateReport {
    /// The version of this format (see [`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `estimate`.
    pub kind: Kind,
    /// The model's name.
    pub model: String,
    /// Parameters of the whole model.
    pub params: u64,
    /// Parameters held by the reported GPU before ZeRO partitioning.
    pub params_per_gpu: u64,
    /// Parameters that train (all of them in full training, none in inference).
    pub trainable_params: u64,
    /// The setup line the text prints first.
    pub description: String,
    /// The attention implementation the step runs (differs from `setup.attention` where the
    /// model has one path only: gpt-oss's sinks run eager); absent for CNNs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_runs: Option<Attention>,
    /// The setup, as resolved from the flags.
    pub setup: Setup,
    /// The GPU.
    pub gpu: GpuRef,
    /// The GPU's memory (as `gpu.memory_bytes`).
    pub gpu_memory_bytes: u64,
    /// Where the CUDA context figure comes from.
    pub cuda_context_source: String,
    /// Peak allocated (`torch.cuda.max_memory_allocated()`).
    pub peak_bytes: u64,
    /// Peak of the tensors' own bytes.
    pub peak_tensor_bytes: u64,
    /// Peak reserved on a GPU with room to cache every segment (`max_memory_reserved()`).
    pub reserved_bytes: u64,
    /// Peak reserved on the smallest device that runs the step.
    pub needed_bytes: u64,
    /// Device memory the step needs (needed plus the CUDA context): what nvidia-smi shows.
    pub total_bytes: u64,
    /// Bytes per category at the peak; sums to `total_bytes`.
    pub breakdown: Bytes,
    /// When the peak happens.
    pub peak_phase: String,
    /// The pipeline rank reported (the one that needs the most).
    pub pipeline_rank: u64,
    /// The mixed-precision memory layout.
    pub amp_style: AmpStyle,
    /// The caching allocator replayed.
    pub allocator: Allocator,
    /// Whether the allocator replay ran and gave `reserved_bytes` and `needed_bytes`: false
    /// with `--fragmentation`, and where the replay could not place the step's allocations
    /// (one past the allocator's largest block), whose figures are then the walked peak of the
    /// tensors' own bytes, a lower bound. Reports saved before this field read as true.
    #[serde(default = "replayed_before_the_field")]
    pub reserved_replayed: bool,
    /// The library versions the estimate follows.
    pub assumes: Assumes,
    /// Whether `total_bytes` fits the GPU.
    pub fits: bool,
    /// GPU memory less `total_bytes` (negative: short).
    pub headroom_bytes: i64,
    /// Training: the largest micro-batch that fits (null: not even 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub max_micro_batch: Option<Option<u64>>,
    /// Inference: the largest batch at the setup's context (null: not even 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub max_batch: Option<Option<u64>>,
    /// Inference: the longest context at the setup's batch, at most `max_context_limit` (null:
    /// not even the setup's prompt plus one token).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub max_context: Option<Option<u64>>,
    /// The largest size below the answer whose estimate does not fit, of those `batch_search`
    /// checked (kept from the first form of these fields; `batch_search` has them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smaller_batch_not_fitting: Option<u64>,
    /// Inference: as `smaller_batch_not_fitting`, for the context (`context_search`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shorter_context_not_fitting: Option<u64>,
    /// What the micro-batch (training) or batch (inference) search checked besides its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_search: Option<SearchChecked>,
    /// Inference: what the context search checked besides its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_search: Option<SearchChecked>,
    /// Inference: where the context search stops, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_limit: Option<ContextLimit>,
    /// When the step does not fit: the changes that make it fit (empty: none of those tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestions: Option<Vec<Suggestion>>,
    /// The weights' storage: the `--weights` format, a packed checkpoint's own
    /// (`mxfp4 experts`, `fp8 blocks 128x128`, `nf4`, ...), or `as --precision`.
    pub weights: String,
    /// The weights as the library loads them from the checkpoint, bytes: packed tensors as
    /// stored (quantization state included) except what it dequantizes at load whatever the
    /// step (`weights_load.dequantized_at_load`); all in the dtype with `--dequantized`.
    pub weights_bytes: u64,
    /// Inference with `--weights`: the packed weights the estimate holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_weights: Option<PackedWeights>,
    /// How the checkpoint stores its weights (transformers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_storage: Option<WeightsStorage>,
    /// `weights_bytes` as the dequantized fallback holds them (`--dequantized`).
    #[serde(default)]
    pub weights_dequantized: bool,
    /// How this step holds a packed checkpoint (as stored, or dequantized at load) and why:
    /// present where some weights are stored packed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_load: Option<WeightsLoad>,
    /// The kernel packages assumed installed (`--kernels`), and where that came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelsAssumed>,
    /// Whether the layers differ (mixer, feed-forward or window per layer).
    #[serde(default)]
    pub layers_differ: bool,
    /// Parameters per component (transformers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_by_component: Option<Bytes>,
    /// Inference: the cache after the prefill, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_after_prefill_bytes: Option<u64>,
    /// Inference: what one decode step adds to the cache (negative where sliding layers drop
    /// the prompt's storage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_bytes_per_token: Option<i64>,
    /// Inference: the cache per kind of layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_by_kind: Option<std::collections::BTreeMap<String, CacheKind>>,
    /// Inference: the decode steps the allocator replay walked, where it sampled them (null:
    /// every step walked).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub decode_sampled: Option<Option<DecodeSample>>,
    /// Inference: serving speed of the `generate` call (one GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<Speed>,
    /// How the layer-by-layer description's mechanisms were modelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mechanisms: Vec<String>,
    /// What the reader assumed, what the libraries do that a user would not expect.
    #[serde(default)]
    pub notes: Vec<String>,
    /// CNNs: the side of the square input images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<u64>,
    /// Vision-language models with `--images`: what each image becomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tokens: Option<ImageTokens>,
    /// Parameters counted from the checkpoint's headers (beside the config, or on the Hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_params: Option<u64>,
    /// Where that checkpoint is (`checkpoint beside the config`, `checkpoint on the Hub
    /// (org/name@commit)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_place: Option<String>,
    /// `--timeline`: live bytes at every phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<TimelinePoint>>,
}

impl Ranges for EstimateReport {
    fn ranges(&self, c: &mut Checker) -> Result<()> {
        c.field("gpu", &self.gpu)?;
        // A fit search's answer is a size that fits: at least 1 (null where none does).
        for (name, n) in [
            ("max_micro_batch", self.max_micro_batch),
            ("max_batch", self.max_batch),
            ("max_context", self.max_context),
        ] {
            if let Some(n) = n.flatten() {
                c.at_least_1(name, n)?;
            }
        }
        c.field("setup", &self.setup)?;
        let pp = self.setup.parallel.pp;
        c.agree(
            "pipeline_rank",
            self.pipeline_rank,
            self.pipeline_rank < pp,
            || format!("setup.parallel.pp {pp}: ranks are 0 to pp - 1"),
        )?;
        for (name, v) in [
            ("params_per_gpu", self.params_per_gpu),
            ("trainable_params", self.trainable_params),
        ] {
            c.agree(name, v, v <= self.params, || {
                format!("params {}, the whole model's", self.params)
            })?;
        }
        Totals {
            breakdown: &self.breakdown,
            peak_tensor_bytes: self.peak_tensor_bytes,
            peak_bytes: self.peak_bytes,
            reserved_bytes: self.reserved_bytes,
            needed_bytes: self.needed_bytes,
            total_bytes: self.total_bytes,
            cuda_context_bytes: self.setup.overheads.cuda_context_bytes,
            gpu: &self.gpu,
            gpu_memory_bytes: self.gpu_memory_bytes,
            fits: self.fits,
            headroom_bytes: self.headroom_bytes,
        }
        .ranges(c)?;
        match &self.serving {
            Some(s) => c.field("serving", s),
            None => Ok(()),
        }
    }
}

/// Where the context search stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextLimit {
    /// Tokens.
    pub tokens: u64,
    /// Why there: the config's positions (rope-scaled as vLLM 0.11 derives `max_model_len`,
    /// the figure `vram capacity` uses), or the setup's own longer context.
    pub source: String,
}

/// Quantized weights given by `--weights` for an inference estimate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackedWeights {
    /// The format (`nf4`, `gptq-g128`, ...).
    pub format: String,
    /// Every byte of the weights as stored, quantization state included.
    pub bytes: u64,
    /// The dtype of what stays unquantized (embedding, head, norms).
    pub unquantized_dtype: String,
}

/// How a step holds a packed checkpoint: the layout the walk allocates, with the three figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsLoad {
    /// Whether the step holds every packed weight dequantized (training, `--dequantized`, or
    /// the library's rule for this GPU and kernels).
    pub dequantized: bool,
    /// Why (the library's rule for this mode, GPU and kernels).
    pub why: String,
    /// The whole model's weights as this step holds them, bytes (the walk's layout).
    pub held_bytes: u64,
    /// The whole model's weights as the checkpoint stores them (quantization state included),
    /// bytes.
    pub stored_bytes: u64,
    /// The whole model's weights dequantized to the config's dtype, bytes.
    pub dequantized_bytes: u64,
    /// What the library dequantizes at load whatever the step, where the rest stays packed
    /// (transformers 5.24: compressed-tensors W4A16 expert banks); `None`: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dequantized_at_load: Option<String>,
    /// What the library builds in the dtype and loads nothing of from the checkpoint, where
    /// the rest stays packed (transformers 5.24: AWQ and GPTQ expert banks); `None`: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_loaded: Option<String>,
}

/// The optional kernel packages an estimate assumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelsAssumed {
    /// As `--kernels` writes them (`none`, `mxfp4`, `fla,causal-conv1d`).
    pub packages: String,
    /// `--kernels`, or the model's default (what its card installs).
    pub source: String,
}

/// How a checkpoint stores its weights (`quantization_config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsStorage {
    /// `f32`, `f16` or `bf16`.
    pub dtype: String,
    /// The quantization.
    pub quant: StorageQuant,
}

/// The quantization of [`WeightsStorage`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum StorageQuant {
    /// None: the config's dtype.
    None,
    /// Fine-grained FP8 with `bn × bk` blocks and fp32 scales (a byte each with `e8m0`).
    Fp8Block {
        /// Block rows.
        bn: u64,
        /// Block columns.
        bk: u64,
        /// The LM head stays unquantized.
        skip_head: bool,
        /// `scale_fmt: ue8m0`: the scales held as `float8_e8m0fnu`, a byte each.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        e8m0: bool,
    },
    /// MXFP4 experts.
    Mxfp4,
    /// Linears packed by bitsandbytes, GPTQ or AWQ (or a `--weights` format).
    Packed {
        /// The format as `--weights` writes it (`nf4`, `int8`, `gptq-g128`, ...).
        format: String,
        /// bitsandbytes 4-bit's nested quantization.
        double_quant: bool,
    },
    /// A method not modelled (counted in the config's dtype).
    Other,
}

impl StorageQuant {
    fn of(q: Quant) -> StorageQuant {
        match q {
            Quant::None => StorageQuant::None,
            Quant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0,
            } => StorageQuant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0,
            },
            Quant::Mxfp4 => StorageQuant::Mxfp4,
            Quant::Packed {
                format,
                double_quant,
            } => StorageQuant::Packed {
                format: format.name(),
                double_quant,
            },
            Quant::Other => StorageQuant::Other,
        }
    }
}

/// The cache of one kind of layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKind {
    /// Layers of this kind.
    pub layers: u64,
    /// Its storage after the prefill.
    pub after_prefill_bytes: u64,
    /// After one decode step.
    pub after_decode_bytes: u64,
}

/// The decode steps a sampled allocator replay walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeSample {
    /// Decode steps of the call.
    pub steps: u64,
    /// Steps replayed.
    pub replayed: u64,
}

impl DecodeSample {
    /// What the sampling means for the figures (`vram_model::estimate::DecodeSample::note`).
    pub fn note(&self) -> String {
        vram_model::estimate::DecodeSample {
            steps: self.steps,
            replayed: self.replayed,
        }
        .note()
    }
}

/// What the images of a vision-language estimate become.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageTokens {
    /// Images per sequence.
    pub images_per_sequence: u64,
    /// Width as given.
    pub width: u64,
    /// Height as given.
    pub height: u64,
    /// The size the processor resizes to.
    pub resized: Size,
    /// Tiles per image (Llama 4), else 1.
    pub tiles_per_image: u64,
    /// Positions through the vision tower per image.
    pub patches_per_image: u64,
    /// Image tokens per image.
    pub per_image: u64,
    /// Positions per image in the sequence, markers included.
    pub sequence_per_image: u64,
    /// Image tokens per sequence.
    pub total: u64,
    /// Image positions per sequence.
    pub sequence_total: u64,
    /// Images through the tower per step.
    pub vision_tower_images: u64,
    /// Whether the tower's activations were checked on a GPU (`false`).
    pub activations_validated: bool,
}

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Pixels.
    pub width: u64,
    /// Pixels.
    pub height: u64,
}

/// Parameters and weights of a checkpoint without a config (`vram estimate FILE.safetensors`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsReport {
    /// The version of this format.
    pub schema_version: u32,
    /// `weights`.
    pub kind: Kind,
    /// The checkpoint's name.
    pub model: String,
    /// Parameters.
    pub params: u64,
    /// Bytes of the weights as stored.
    pub weights_bytes: u64,
    /// Parameters per dtype.
    pub dtypes: Bytes,
}

/// Builds the answer of `vram estimate` for `m`: a full step ([`EstimateReport`]), a LoRA/QLoRA
/// step ([`finetune::FinetuneReport`]) or a checkpoint's parameters ([`WeightsReport`]).
pub fn estimate(m: &ModelInput<'_>, req: &EstimateRequest) -> Result<Report> {
    let model = &m.model;
    let gpu = req.gpu;
    if let Model::Weights(w) = model {
        return Ok(Report::Weights(WeightsReport {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Weights,
            model: w.name.clone(),
            params: w.params,
            weights_bytes: w.bytes,
            dtypes: Bytes(w.dtypes.iter().map(|(k, v)| (k.clone(), *v)).collect()),
        }));
    }
    if let Model::Transformer(t) = model {
        // On a checkpoint of float tensors the flag changed nothing, and the output said
        // "(bf16, dequantized)".
        if req.dequantized && !t.blocks.storage.is_packed() {
            return Err(input(format!(
                "--dequantized loads a packed checkpoint (FP8, MXFP4, bitsandbytes, GPTQ, AWQ) dequantized; {}'s weights are stored as {}, not packed",
                t.name,
                t.blocks.storage.name()
            )));
        }
    }
    // Without --precision, generate runs in the dtype `from_pretrained` is given: a float
    // `--weights` (dtype=torch.bfloat16, float16 or float32) decides it, as the config's dtype
    // does without one (`default_precision`). On a float32 config, `--weights bf16` priced
    // 30.4 GiB of "bf16" weights in an fp32 step (granite-3.1-8b-instruct).
    let mut step = req.step;
    if step.inference && step.precision.is_none() {
        step.precision = match req
            .finetune
            .weights
            .map(|w| w.format())
            .transpose()?
            .flatten()
        {
            Some(WeightFormat::Fp32) => Some(setup::Precision::Fp32),
            Some(WeightFormat::Fp16) => Some(setup::Precision::Fp16Amp),
            Some(WeightFormat::Bf16) => Some(setup::Precision::Bf16Amp),
            _ => None,
        };
    }
    let mut setup = step.setup(model, Some(gpu))?;
    // Issue 22: --weights for inference; --finetune lora/qlora for training.
    let mut inference_weights = None;
    let mut trainable = 0;
    if let Mode::Infer(_) = setup.mode {
        if req.finetune.is_lora() {
            return Err(input(format!(
                "--finetune {} is a training step; drop --inference",
                req.finetune.method.name()
            )));
        }
        match req
            .finetune
            .weights
            .map(|w| w.format())
            .transpose()?
            .flatten()
        {
            Some(f) => {
                if f.is_quantized() && setup.overheads.weights_cast_from_fp32 {
                    // from_pretrained(..., quantization_config=...) quantizes while loading: no
                    // fp32 model is built and cast first, and the flag would change nothing.
                    return Err(input(
                        "--weights-created fp32 is a cast of fp32-built weights; a quantized --weights is quantized while loading, with no fp32 model built, and it changes nothing",
                    ));
                }
                if req.finetune.double_quant && !f.is_bnb_4bit() {
                    return Err(input(
                        "--double-quant applies to bitsandbytes 4-bit (--weights nf4 or fp4)",
                    ));
                }
                inference_weights = Some(f);
            }
            None if req.finetune.double_quant => {
                return Err(input("--double-quant goes with --weights nf4 or fp4"))
            }
            None => {}
        }
    } else {
        let mut spec = req.finetune.spec_for(model)?;
        // A checkpoint shipped in bitsandbytes (its quantization_config) loads packed: without
        // --weights, that is QLoRA's base (not a fresh NF4).
        if let (None, Model::Transformer(t)) = (req.finetune.weights, model) {
            if let Quant::Packed {
                format,
                double_quant,
            } = t.blocks.storage.quant
            {
                if req.finetune.method == vram_model::finetune::step::Method::Qlora
                    && (format.is_bnb_4bit() || format == vram_model::finetune::WeightFormat::Int8)
                {
                    spec.weights = format;
                    spec.double_quant = double_quant;
                }
            }
        }
        if req.finetune.is_lora() {
            if setup.overheads.weights_cast_from_fp32 {
                return Err(input(format!(
                    "--weights-created fp32 is not modelled for --finetune {}: its step loads the base with from_pretrained and would ignore it",
                    spec.method.name()
                )));
            }
            if req.timeline {
                return Err(input(format!(
                    "--timeline is not available for --finetune {}: its step is walked as one list of allocations without the full step's phases; drop --timeline",
                    spec.method.name()
                )));
            }
            let mut r = finetune::build(model, &setup, &spec, gpu)?;
            r.notes.extend(crate::notes::of_default_base(
                &req.finetune,
                model,
                setup.precision.is_amp(),
            ));
            return Ok(Report::Finetune(Box::new(r)));
        }
        trainable = model.param_count();
    }
    // `--weights FORMAT` is the base's storage: the description carries it, the walk allocates
    // it (one packed tensor per linear, as the library holds it).
    let flagged;
    let model: &Model = match (inference_weights, model) {
        (Some(f), Model::Transformer(t)) => {
            let mut t = t.clone();
            t.blocks.storage = Storage::from_flag(f, req.finetune.double_quant);
            flagged = Model::Transformer(t);
            &flagged
        }
        (Some(_), _) => return Err(input("--weights is modelled for transformers")),
        (None, m) => m,
    };
    // The kernels installed (the model card's by default) and how the library then loads a
    // packed checkpoint: the walk holds the weights that way.
    let kernels = match (req.kernels, model) {
        (Some(k), Model::Transformer(t)) if !k.without_effect(t).is_empty() => {
            // A package the run would not use changes nothing: refused, as every ignored flag.
            let unused = k.without_effect(t);
            let why = unused
                .iter()
                .map(|&p| match p {
                    "mxfp4" => format!(
                        "mxfp4 keeps MXFP4 experts packed and its weights are stored as {}",
                        t.blocks.storage.name()
                    ),
                    p => format!("{p} runs Gated DeltaNet layers and it has none"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(input(format!(
                "--kernels {} changes nothing for {}: {why}",
                unused.join(","),
                t.name
            )));
        }
        (Some(k), _) => Some((k, "--kernels".to_string())),
        (None, Model::Transformer(t)) => Some((
            Kernels::for_storage(&t.blocks.storage),
            if t.blocks.storage.quant == Quant::Mxfp4 {
                "the default for MXFP4 checkpoints: gpt-oss's card installs `kernels` (pip install -U transformers kernels torch); --kernels none for without".to_string()
            } else {
                "the default: what `pip install transformers` gives".to_string()
            },
        )),
        (None, _) => None,
    };
    let load = match model {
        Model::Transformer(t) => Some(t.blocks.storage.load(
            matches!(setup.mode, Mode::Train(_)),
            kernels.as_ref().map(|k| k.0).unwrap_or_default(),
            gpu.capability(),
            req.dequantized,
        )),
        _ => None,
    };
    if let Some(l) = &load {
        setup.overheads.weights_dequantized = l.dequantized;
    }
    let e = estimate_with_timeline(model, &setup)?;
    let cap = gpu.memory_bytes;
    let weights_bytes = e.breakdown.get(Category::Parameters);
    let packed = inference_weights.map(|f| PackedWeights {
        format: f.name(),
        bytes: weights_bytes,
        unquantized_dtype: if f.dense_bytes() == 4 {
            "fp32"
        } else {
            "bf16/fp16"
        }
        .into(),
    });
    let t = match model {
        Model::Transformer(t) => Some(t),
        _ => None,
    };
    let mut r = EstimateReport {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Estimate,
        model: e.model.clone(),
        params: e.params,
        params_per_gpu: e.params_per_gpu,
        trainable_params: trainable,
        description: String::new(),
        attention_runs: t.map(|t| attention_runs(t, setup.attention)),
        setup,
        gpu: gpu.into(),
        gpu_memory_bytes: gpu.memory_bytes,
        cuda_context_source: gpu.context_source().to_string(),
        peak_bytes: e.peak_bytes,
        peak_tensor_bytes: e.peak_tensor_bytes,
        reserved_bytes: e.reserved_bytes,
        needed_bytes: e.needed_bytes,
        total_bytes: e.total_bytes,
        breakdown: (&e.breakdown).into(),
        peak_phase: e.peak_phase.to_string(),
        pipeline_rank: e.pipeline_rank,
        amp_style: e.amp_style,
        allocator: e.allocator,
        reserved_replayed: e.reserved_replayed,
        assumes: (&e.assumes).into(),
        fits: e.fits(cap),
        headroom_bytes: cap as i64 - e.total_bytes as i64,
        max_micro_batch: None,
        max_batch: None,
        max_context: None,
        max_context_limit: None,
        batch_search: None,
        context_search: None,
        smaller_batch_not_fitting: None,
        shorter_context_not_fitting: None,
        suggestions: None,
        weights: match (inference_weights, model) {
            (Some(f), _) => f.name(),
            (None, Model::Transformer(t)) if t.blocks.storage.is_packed() => {
                t.blocks.storage.name()
            }
            _ => "as --precision".to_string(),
        },
        weights_bytes,
        packed_weights: packed,
        weights_storage: None,
        weights_dequantized: req.dequantized,
        weights_load: None,
        kernels: kernels.as_ref().map(|(k, source)| KernelsAssumed {
            packages: k.names(),
            source: source.clone(),
        }),
        layers_differ: false,
        params_by_component: None,
        cache_after_prefill_bytes: None,
        cache_bytes_per_token: None,
        cache_by_kind: None,
        decode_sampled: None,
        serving: None,
        mechanisms: e.mechanisms.iter().map(|s| s.to_string()).collect(),
        notes: Vec::new(),
        image_size: match model {
            Model::ResNet(r) => Some(r.image_size),
            _ => None,
        },
        image_tokens: image_report(model, &setup),
        checkpoint_params: m.checkpoint_params,
        checkpoint_place: m.checkpoint_place.clone(),
        timeline: req.timeline.then(|| {
            e.timeline
                .iter()
                .map(|p| TimelinePoint {
                    label: p.phase.to_string(),
                    phase: p.phase.into(),
                    live_bytes: p.live_bytes,
                    high_bytes: p.high_bytes,
                })
                .collect()
        }),
    };
    r.description = describe(model, &r);
    // The fit searches.
    let batch = largest_batch(model, &setup, cap)?;
    r.batch_search = batch.as_ref().map(SearchChecked::from);
    r.smaller_batch_not_fitting = batch
        .as_ref()
        .and_then(|l| l.not_fitting_below.last().map(|r| r.1));
    let batch = batch.map(|l| l.value);
    match setup.mode {
        Mode::Train(_) => r.max_micro_batch = Some(batch),
        Mode::Infer(i) => {
            r.max_batch = Some(batch);
            let limit = context_limit(model, m.config, i.context);
            let context = longest_context(model, &setup, cap, limit.tokens)?;
            r.context_search = context.as_ref().map(SearchChecked::from);
            r.shorter_context_not_fitting = context
                .as_ref()
                .and_then(|l| l.not_fitting_below.last().map(|r| r.1));
            r.max_context = Some(context.map(|l| l.value));
            r.max_context_limit = Some(limit);
            r.decode_sampled = Some(e.decode_sampled.map(|d| DecodeSample {
                steps: d.steps,
                replayed: d.replayed,
            }));
        }
    }
    if !r.fits {
        // `--finetune lora`'s base as that flag alone would take it on this model
        // (`FinetuneRequest::spec_for`: fp32 on a float32 config), so the suggestion's figure is
        // the one its flags print.
        let lora_base = if crate::request::stored_fp32(model) {
            WeightFormat::Fp32
        } else {
            WeightFormat::Bf16
        };
        r.suggestions = Some(suggest::step(model, &setup, cap, lora_base));
    }
    r.serving = speed(
        model,
        gpu,
        &setup,
        r.attention_runs,
        kernels.as_ref().map(|k| k.0).unwrap_or_default(),
    )
    .as_ref()
    .map(Speed::from);
    if let Some(t) = t {
        describe_blocks(
            &mut r,
            t,
            &setup,
            req.dequantized,
            inference_weights.is_some(),
        );
        if let Some(Load {
            dequantized,
            why: Some(why),
        }) = load
        {
            if !dequantized
                && matches!(
                    t.blocks.storage.quant,
                    Quant::Mxfp4 | Quant::Fp8Block { .. }
                )
            {
                r.notes.push(if t.blocks.storage.quant == Quant::Mxfp4 {
                    "the MXFP4 experts' Triton kernels (matmul_ogs with its routing data) are walked with the temporaries of transformers' grouped_mm path; their own are not modelled".into()
                } else {
                    "the FP8 block matmuls are walked with the temporaries of the bf16 path; their activation quantization (fp8 copies of each input with fp32 scales) is not modelled".into()
                });
            }
            let held = t.blocks.weights_bytes(false);
            let engines = t.blocks.as_engines_hold().weights_bytes(false);
            // AWQ/GPTQ expert banks: transformers 5.24 holds them as built, loads nothing into
            // them (`vram_model::blocks::Holder`); compressed-tensors W4A16 ones it dequantizes.
            let built = matches!(
                t.blocks.storage.quant,
                Quant::Packed {
                    format: WeightFormat::Awq { .. } | WeightFormat::Gptq { .. },
                    ..
                }
            );
            if engines != held && built {
                r.notes.push(format!(
                    "transformers 5.24 builds each layer's experts as fused 3-D banks in the dtype, which AWQ's and GPTQ's `nn.Linear` replacement does not reach, and loads none of the checkpoint's per-expert packed tensors into them (its experts hold no trained weights): loaded for inference the weights take {}; vLLM and SGLang keep the experts packed, {} in all (vram capacity)",
                    vram_model::fmt::bytes(held),
                    vram_model::fmt::bytes(engines)
                ));
            } else if engines != held && matches!(t.blocks.storage.quant, Quant::Packed { .. }) {
                r.notes.push(format!(
                    "transformers 5.24 loads compressed-tensors' expert weights dequantized into its fused expert banks (its `Linear` targets do not reach a 3-D bank): loaded for inference the weights take {}; vLLM and SGLang keep the experts packed, {} in all (vram capacity)",
                    vram_model::fmt::bytes(held),
                    vram_model::fmt::bytes(engines)
                ));
            }
            let stored = t.blocks.stored_bytes();
            let all = t.blocks.weights_bytes(true);
            r.weights_load = Some(WeightsLoad {
                dequantized,
                why,
                held_bytes: if dequantized { all } else { held },
                stored_bytes: stored,
                dequantized_bytes: all,
                not_loaded: (!dequantized && held != stored && built).then(|| {
                    "the expert banks (transformers 5.24 builds each layer's experts as fused 3-D banks, which AWQ's and GPTQ's `nn.Linear` replacement does not reach; the checkpoint's per-expert packed tensors match none of them)".to_string()
                }),
                dequantized_at_load: (!dequantized && held != stored && !built).then(|| {
                    "the expert banks (transformers 5.24 fuses each layer's experts into 3-D banks, which compressed-tensors' `Linear` targets do not reach, and dequantizes them into the banks as it loads them)".to_string()
                }),
            });
        }
    }
    // The default precision's note reads the checkpoint as stored: a quantized `--weights` on
    // a float32 config leaves `from_pretrained`'s dtype="auto" at float32 for what it computes.
    match inference_weights {
        Some(f) if f.is_quantized() => {
            r.notes.extend(crate::notes::of_default_precision_quantized(
                &step, &m.model,
            ));
            r.notes.extend(crate::notes::of_request(&step, model));
        }
        _ => r.notes.extend(crate::notes::of_request(&step, model)),
    }
    r.notes.extend(image_notes(model, &setup, req.step.images));
    r.notes
        .extend(crate::notes::of_precision(setup.precision, gpu));
    if let Some(d) = e.decode_sampled {
        r.notes.push(d.note());
    }
    Ok(Report::Estimate(Box::new(r)))
}

/// The attention a model's step runs when `asked` is asked for: eager where every attention
/// layer has sinks (gpt-oss: transformers 5.24's `GptOssPreTrainedModel._supports_sdpa` is
/// `False`, so `from_pretrained` runs `eager_attention_forward`, and the walk follows it).
pub fn attention_runs(t: &Transformer, asked: Attention) -> Attention {
    let mut attention = t
        .blocks
        .iter()
        .filter_map(|b| b.mixer.as_attention().map(|a| a.sinks));
    let first = attention.next();
    if first == Some(true) && attention.all(|s| s) {
        Attention::Eager
    } else {
        asked
    }
}

/// Where the context search stops for `model`: the longest context vLLM 0.11 derives from its
/// config (`max_position_embeddings`, rope-scaled by `_get_and_verify_max_len`'s rule: the
/// figure `vram capacity` uses), or the setup's own `context` where that is longer.
fn context_limit(model: &Model, config: Option<&str>, context: u64) -> ContextLimit {
    let Model::Transformer(t) = model else {
        return ContextLimit {
            tokens: context,
            source: "the setup's context".into(),
        };
    };
    // Image positions ride in the same sequence as the text's.
    let positions = t.max_positions();
    let derived = vram_plan::context::engine_max_len(config, positions, Engine::Vllm);
    if context > derived {
        return ContextLimit {
            tokens: context,
            source: format!(
                "the setup's context, beyond the {} positions the model's config allows",
                vram_model::fmt::thousands(derived)
            ),
        };
    }
    ContextLimit {
        tokens: derived,
        source: if derived == positions {
            "the model's max_position_embeddings".into()
        } else {
            format!(
                "max_position_embeddings {} stretched by the config's rope scaling, as vLLM derives max_model_len",
                vram_model::fmt::thousands(positions)
            )
        },
    }
}

/// The longest context at the setup's batch that fits `cap`, at most `limit` (or the setup's new
/// tokens plus one, where that is more): the limit when it fits there, else the search below it.
fn longest_context(model: &Model, setup: &Setup, cap: u64, limit: u64) -> Result<Option<Largest>> {
    let Mode::Infer(i) = setup.mode else {
        return Ok(None);
    };
    Ok(largest_context_to(
        model,
        setup,
        cap,
        limit.max(i.new_tokens + 1),
    )?)
}

/// What a fit search checked besides its answer: the allocator's fit is not monotone in the
/// size (where the device first runs out decides which cached segments PyTorch releases
/// whole), so a smaller size can fail where a larger one fits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchChecked {
    /// Where more than 64 sizes lay above the answer's next size and below the peak walk's
    /// bound (nothing above it fits), the bound: the sizes from the answer plus 2 to it were
    /// not tried, so the answer fits and the next size does not, but a larger one may fit.
    /// Absent: every larger size was tried or ruled out, and the answer is the largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untried_above_to: Option<u64>,
    /// Every size from this one to the answer minus one was estimated (the 16 just below the
    /// answer, or down to 1; further where the search met one not fitting).
    pub checked_below_from: u64,
    /// Those of them whose estimate does not fit, as inclusive `[first, last]` ranges.
    pub not_fitting_below: Vec<[u64; 2]>,
}

impl From<&Largest> for SearchChecked {
    fn from(l: &Largest) -> Self {
        SearchChecked {
            untried_above_to: l.untried_above,
            checked_below_from: l.checked_below_from,
            not_fitting_below: l.not_fitting_below.iter().map(|&(a, b)| [a, b]).collect(),
        }
    }
}

/// Serving speed of `setup` (inference) on one `gpu`: the prompt's prefill and the mean decode
/// step of the `generate` call the estimate describes (its batch, prompt, new tokens, cache
/// kind, KV dtype, precision and the attention that runs), with the user's installed
/// `kernels`, from the planner's model of transformers' `generate`
/// ([`vram_plan::generate::serving`]). `None` for training setups, parallel setups and models
/// without a decoder-only generate path.
fn speed(
    model: &Model,
    gpu: &Gpu,
    setup: &Setup,
    attention: Option<Attention>,
    kernels: vram_plan::generate::Kernels,
) -> Option<vram_plan::generate::Serving> {
    let (Model::Transformer(t), Mode::Infer(i)) = (model, setup.mode) else {
        return None;
    };
    let p = setup.parallel;
    if p.tp * p.pp * p.dp != 1 {
        return None;
    }
    let g = vram_plan::generate::Generate {
        batch: i.batch,
        prompt: i.prompt(),
        new_tokens: i.new_tokens,
        kv_bytes: i.kv_bytes,
        static_cache: i.kv_cache == setup::KvCache::Static,
        precision: setup.precision,
        attention: attention.unwrap_or(setup.attention),
        kernels,
        weights_dequantized: setup.overheads.weights_dequantized,
    };
    vram_plan::generate::serving(t, gpu, &vram_plan::eager::EagerCalibration::default(), &g)
}

/// `image_tokens`: what each image becomes and what the sequence carries, or `None` without
/// images.
fn image_report(model: &Model, setup: &Setup) -> Option<ImageTokens> {
    let Model::Transformer(t) = model else {
        return None;
    };
    let v = t.blocks.vision.as_ref()?;
    let i = v.images?;
    let it = vram_model::estimate::image_tokens(v, i.width, i.height).ok()?;
    let seqs = match setup.mode {
        Mode::Train(tr) => tr.micro_batch,
        Mode::Infer(inf) => inf.batch,
    };
    Some(ImageTokens {
        images_per_sequence: i.count,
        width: i.width,
        height: i.height,
        resized: Size {
            width: it.resized.0,
            height: it.resized.1,
        },
        tiles_per_image: it.tiles,
        patches_per_image: it.patches,
        per_image: it.tokens,
        sequence_per_image: it.sequence,
        total: i.count * it.tokens,
        sequence_total: i.count * it.sequence,
        vision_tower_images: seqs * i.count,
        activations_validated: false,
    })
}

/// The notes about images: that the tower's activations are not validated, or that images are
/// not counted.
fn image_notes(model: &Model, setup: &Setup, images: Option<u64>) -> Vec<String> {
    let Model::Transformer(t) = model else {
        return Vec::new();
    };
    match (t.blocks.vision.as_ref().and_then(|v| v.images), images) {
        (Some(_), _) => vec![format!(
            "the vision tower's activations ({}) are counted from its modelling code's tensors, not validated on a GPU; its FLOPs are not in the speed figures",
            match setup.mode {
                Mode::Train(_) => "saved for backward: TRL's SFTTrainer leaves the tower trainable",
                Mode::Infer(_) => "its forward before the prefill, the image features kept through it",
            }
        )],
        (None, Some(_)) if t.blocks.vision_unmodelled => vec![
            "image tokens are not counted: this config's vision tower is not described by vram (the text model alone is estimated)".into(),
        ],
        _ => Vec::new(),
    }
}

/// What the layer-by-layer description adds: parameters by component, the stored weights, the
/// cache after prefill and one decode step (inference), and the model's notes.
fn describe_blocks(
    r: &mut EstimateReport,
    t: &Transformer,
    setup: &Setup,
    dequantized: bool,
    packed_by_flag: bool,
) {
    let p = t.params_by_component();
    r.params_by_component = Some(Bytes(
        Component::ALL
            .iter()
            .map(|c| (c.key().to_string(), p.get(*c)))
            .collect(),
    ));
    if !packed_by_flag {
        // `--weights` (bitsandbytes, GPTQ, AWQ...) already set the packed bytes.
        r.weights_bytes = t.blocks.weights_bytes(dequantized);
    }
    let s = t.blocks.storage;
    r.weights_storage = Some(WeightsStorage {
        dtype: match s.dtype {
            vram_model::blocks::Dtype::F32 => "f32",
            vram_model::blocks::Dtype::F16 => "f16",
            vram_model::blocks::Dtype::Bf16 => "bf16",
        }
        .into(),
        quant: StorageQuant::of(s.quant),
    });
    r.layers_differ = t.blocks.varies();
    if let Mode::Infer(i) = setup.mode {
        let c = t.blocks.cache_report(i.batch, i.prompt(), i.kv_bytes);
        r.cache_after_prefill_bytes = Some(c.after_prefill_bytes);
        r.cache_bytes_per_token = Some(c.bytes_per_token);
        r.cache_by_kind = Some(
            c.by_kind
                .iter()
                .map(|k| {
                    (
                        k.kind.key().to_string(),
                        CacheKind {
                            layers: k.layers,
                            after_prefill_bytes: k.after_prefill_bytes,
                            after_decode_bytes: k.after_decode_bytes,
                        },
                    )
                })
                .collect(),
        );
    }
    r.notes.extend(crate::notes::of_transformer(t));
    if r.layers_differ {
        // `Step::new` derives one layer description per kind and both walks index it per layer.
        r.notes.push("layers differ (mixer, feed-forward or window per layer): parameters, weights, the cache, and the activations and temporaries of the training step and of generate follow each layer's own kind".into());
    }
    if r.attention_runs != Some(setup.attention) {
        r.notes.push(format!(
            "{}'s attention has sinks, which transformers 5.24 runs only in eager_attention_forward (GptOssPreTrainedModel._supports_sdpa = False, so from_pretrained picks eager): the step runs eager attention whatever --attention says",
            t.name
        ));
    }
}

/// The setup line: what is estimated, in the flags' words.
fn describe(model: &Model, r: &EstimateReport) -> String {
    let setup = &r.setup;
    let p = setup.parallel;
    // The schedule only where there is a pipeline to order (the JSON's `setup` always has it).
    let schedule = if p.pp > 1 {
        format!(" ({})", crate::request::schedule_name(p.schedule))
    } else {
        String::new()
    };
    let par = format!(
        "dp {} tp {} pp {}{schedule}{}",
        p.dp,
        p.tp,
        p.pp,
        if p.sequence_parallel { " +sp" } else { "" }
    );
    let prec = name(setup.precision);
    let attn = name(r.attention_runs.unwrap_or(setup.attention));
    if let (Model::ResNet(net), Mode::Train(t)) = (model, setup.mode) {
        return format!(
            "training, {prec}, {}, micro-batch {} x {}x{} images, grad-accum {}, {par}, ZeRO {}",
            name(t.optimizer),
            t.micro_batch,
            net.image_size,
            net.image_size,
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
        Mode::Train(t) => format!(
            "training, {prec} ({} layout), {}, micro-batch {} x seq {}{}, grad-accum {}, recompute {}{}, attention {attn}, {par}, ZeRO {}{}",
            name(r.amp_style),
            name(t.optimizer),
            t.micro_batch,
            t.seq,
            split(t.seq),
            t.grad_accum,
            name(t.recompute),
            t.recompute_layers.map(|k| format!(" ({k} layers)")).unwrap_or_default(),
            p.zero,
            if t.offload == setup::Offload::None {
                String::new()
            } else {
                format!(", offload {}", name(t.offload))
            },
        ),
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
