//! The step as a timeline: every allocation and free of a training or inference step, in order.
//!
//! [`estimate`] walks the step (setup, forward layer by layer, loss, backward layer by layer,
//! optimizer step; micro-batches and pipeline schedule included) through a [`Sink`] that keeps
//! the live bytes per [`Category`]. The peak is the true maximum of live bytes, and the
//! breakdown is taken at that moment. The same walk drives [`crate::walk::trace`], which turns it
//! into individual tensors.
//!
//! What is stored for backward follows the saved tensors of the reference implementations
//! (Hugging Face `transformers` modelling code under PyTorch, Megatron-LM's fused kernels under
//! the Megatron style); for a GPT layer in half precision it reproduces Korthikanti et al.
//! 2022 exactly (`sbh(34 + 5as/h)` plus layer-norm statistics).

pub(crate) mod generate;
mod layer;
pub(crate) mod parts;

pub use crate::mech::{attention_kernel, repeats_kv_at, Kernel};
pub use replay::set_reference_replay;
pub(crate) mod replay;
mod sinks;
pub mod trace;
mod training;
mod vision;

pub use crate::mech::vision::{default_image_size, image_tokens, sequence_tokens, ImageTokens};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::mech::attention::has_mask;
use crate::mech::norm::train as norm_parts;
use crate::mech::step::{m, Ctx, Parts};
use parts::{optimizer_elems, state_bytes, LayerDesc, Program, Stack, StateBytes, TmpOp};
use sinks::PeakSink;

use crate::describe::{Checked, Ffn, Mixer};
use crate::describe::{Layout, Model, ResNet, Transformer};
use crate::error::{Error, Result};
use crate::setup::{AmpStyle, Mode, Optimizer, Precision, Schedule, Setup};

/// Where bytes go. The first ten are tensors on the step's timeline; the last two are
/// overheads added on top of the timeline's peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights as the forward pass reads them.
    Parameters,
    /// fp32 master copy of half-precision weights.
    MasterWeights,
    /// Parameter gradients.
    Gradients,
    /// Optimizer states (Adam moments, momentum, factored moments).
    OptimizerStates,
    /// Half copies of fp32 weights (autocast) and gathered ZeRO-3 parameters.
    WeightCopies,
    /// Tensors stored for backward, checkpoints and recomputed layers.
    Activations,
    /// Logits and the cross-entropy's tensors.
    Loss,
    /// Short-lived tensors inside a layer's forward or backward and the optimizer step.
    Temporaries,
    /// Gradient buckets of data parallelism.
    CommBuffers,
    /// The KV cache of inference.
    KvCache,
    /// cuBLAS/cuDNN workspaces.
    Workspace,
    /// Reserved but unallocated memory of the caching allocator.
    AllocatorOverhead,
    /// CUDA context and kernels (outside the allocator).
    CudaContext,
}

impl Category {
    /// Every category, in display order.
    pub const ALL: [Category; 13] = [
        Category::Parameters,
        Category::MasterWeights,
        Category::Gradients,
        Category::OptimizerStates,
        Category::WeightCopies,
        Category::Activations,
        Category::Loss,
        Category::Temporaries,
        Category::CommBuffers,
        Category::KvCache,
        Category::Workspace,
        Category::AllocatorOverhead,
        Category::CudaContext,
    ];

    /// The name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::MasterWeights => "master_weights",
            Category::Gradients => "gradients",
            Category::OptimizerStates => "optimizer_states",
            Category::WeightCopies => "weight_copies",
            Category::Activations => "activations",
            Category::Loss => "loss",
            Category::Temporaries => "temporaries",
            Category::CommBuffers => "comm_buffers",
            Category::KvCache => "kv_cache",
            Category::Workspace => "workspace",
            Category::AllocatorOverhead => "allocator_overhead",
            Category::CudaContext => "cuda_context",
        }
    }
}

/// Bytes per [`Category`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breakdown(pub [u64; 13]);

impl Breakdown {
    /// Bytes of one category.
    pub fn get(&self, c: Category) -> u64 {
        self.0[c as usize]
    }
    /// Sum over all categories.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// Parameters, master weights, gradients and optimizer states: ZeRO's "model states".
    pub fn model_states(&self) -> u64 {
        [
            Category::Parameters,
            Category::MasterWeights,
            Category::Gradients,
            Category::OptimizerStates,
        ]
        .iter()
        .map(|c| self.get(*c))
        .sum()
    }
    /// Non-zero categories with their bytes.
    pub fn iter(&self) -> impl Iterator<Item = (Category, u64)> + '_ {
        Category::ALL
            .iter()
            .map(|c| (*c, self.get(*c)))
            .filter(|(_, b)| *b > 0)
    }
}

impl Serialize for Breakdown {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (c, b) in self.iter() {
            m.serialize_entry(c.name(), &b)?;
        }
        m.end()
    }
}

/// A moment of the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Before the first forward: persistent state only.
    Setup,
    /// Forward of one layer of one micro-batch (pipeline unit).
    Forward {
        /// Micro-batch (or pipeline chunk-unit) index.
        micro: u32,
        /// Layer index on this GPU.
        layer: u32,
    },
    /// Logits and loss of one micro-batch.
    Loss {
        /// Micro-batch index.
        micro: u32,
    },
    /// Backward of one layer of one micro-batch.
    Backward {
        /// Micro-batch index.
        micro: u32,
        /// Layer index on this GPU.
        layer: u32,
    },
    /// The optimizer step.
    Optimizer,
    /// Inference prefill of one layer.
    Prefill {
        /// Layer index on this GPU.
        layer: u32,
    },
    /// Inference: the forward that generates new token `token` (1 = the first after the
    /// prefill's).
    Decode {
        /// Index of the generated token.
        token: u32,
    },
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Phase::Setup => write!(f, "before forward"),
            Phase::Forward { micro, layer } => {
                write!(f, "forward, micro-batch {micro}, layer {layer}")
            }
            Phase::Loss { micro } => write!(f, "loss, micro-batch {micro}"),
            Phase::Backward { micro, layer } => {
                write!(f, "backward, micro-batch {micro}, layer {layer}")
            }
            Phase::Optimizer => write!(f, "optimizer step"),
            Phase::Prefill { layer } => write!(f, "prefill, layer {layer}"),
            Phase::Decode { token } => write!(f, "decode, token {token}"),
        }
    }
}

/// A live allocation of the timeline, as the generator hands it back to free it.
///
/// `key` identifies the tensor (group) deterministically, so the generator never stores handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// Category.
    pub cat: Category,
    /// Bytes of the group.
    pub bytes: u64,
    /// Deterministic identity of the group within the step.
    pub key: u64,
}

/// Receives the timeline's events.
pub trait Sink {
    /// Whether [`Sink::alloc`] uses `parts` (building them costs an allocation per layer).
    const WANTS_PARTS: bool = false;
    /// A group of tensors (`parts`, summing to `h.bytes`; empty means one tensor) becomes live.
    fn alloc(&mut self, h: Handle, parts: &[u64]);
    /// A group allocated earlier is freed.
    fn free(&mut self, h: Handle);
    /// The step enters a new phase.
    fn phase(&mut self, p: Phase);
}

/// A sampled point of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// The phase just entered.
    #[serde(flatten)]
    pub phase: Phase,
    /// Live bytes when entering it (after the previous phase's frees).
    pub live_bytes: u64,
    /// Highest live bytes reached during this phase (tensor bytes, as `peak_tensor_bytes`):
    /// the timeline's largest is the step's peak.
    pub high_bytes: u64,
}

/// The library versions whose behaviour an estimate models (read from their source: the
/// modelling code, loss, cache and `generate` of transformers; autocast, SDPA dispatch, the
/// foreach optimizers and the caching allocator of PyTorch), and the versions of the
/// measurements its figures are checked against. Which versions depends on the model
/// ([`assumes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Assumes {
    /// PyTorch version (allocator, autocast, SDPA dispatch, optimizers).
    pub torch: &'static str,
    /// Hugging Face transformers version whose code the model follows (`None` for
    /// torchvision models).
    pub transformers: Option<&'static str>,
    /// What of the model follows [`Assumes::transformers`] (or [`Assumes::torchvision`]).
    pub follows: &'static str,
    /// torchvision version (ResNets).
    pub torchvision: Option<&'static str>,
    /// CUDA version of the context and workspace figures.
    pub cuda: &'static str,
    /// The measurements the overheads and kernels are calibrated on (and, for the 2019–2024
    /// families and ResNets, the steps checked against), with their versions.
    pub calibration: &'static str,
}

impl Assumes {
    /// One line naming every version: `vram estimate`'s `models:` line.
    pub fn line(&self) -> String {
        let lib = match (self.transformers, self.torchvision) {
            (Some(v), _) => format!("transformers {v}"),
            (None, Some(v)) => format!("torchvision {v}"),
            (None, None) => String::new(),
        };
        format!(
            "{lib} ({}), PyTorch {}, CUDA {}; calibrated on {}",
            self.follows, self.torch, self.cuda, self.calibration
        )
    }
}

/// The H100 ground truth (`crates/vram-cli/tests/data/h100`), measured under PyTorch 2.11,
/// transformers 5.17, torchvision 0.26 and CUDA 13.0.
const H100_SAME: &str = "an H100 80GB HBM3 under these versions";

/// The versions an estimate of `model` follows:
/// - the families checked against transformers 5.24 (`Checked::Zoo`: Qwen3, DeepSeek-V3,
///   gpt-oss, ...): their module tree and cache are exact against transformers 5.24 (the zoo,
///   `tests/zoo`), and their mechanisms (`mech/`) are read from 5.24;
/// - the 2019–2024 families (checked against the H100 steps): the step's tensors (`mech/`) are read from
///   transformers 5.17, the version of the H100 ground truth they are checked against; their
///   module trees are the same in 5.24 (parameter counts equal under both);
/// - ResNets: torchvision 0.26's, as measured.
///
/// PyTorch 2.11 (allocator, autocast, SDPA, optimizers) and CUDA 13.0 (context, workspaces)
/// for all: the versions of the H100 measurements.
pub fn assumes(model: &Model) -> Assumes {
    let base = Assumes {
        torch: "2.11",
        transformers: None,
        follows: "",
        torchvision: None,
        cuda: "13.0",
        calibration: H100_SAME,
    };
    match model {
        Model::Transformer(t) if t.blocks.checked == Checked::Zoo && !t.blocks.is_empty() => {
            Assumes {
                transformers: Some("5.24"),
                follows: "module tree, cache, mechanisms",
                calibration: "an H100 80GB HBM3 under PyTorch 2.11, transformers 5.17, CUDA 13.0",
                ..base
            }
        }
        Model::Transformer(_) | Model::Weights(_) => Assumes {
            transformers: Some("5.17"),
            follows: "step tensors; module tree as in 5.24",
            ..base
        },
        Model::ResNet(_) => Assumes {
            torchvision: Some("0.26"),
            follows: "module tree, cuDNN calls",
            ..base
        },
    }
}

/// The result of an estimate, for one GPU (the pipeline rank that needs the most).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Model name.
    pub model: String,
    /// Exact parameter count of the whole model.
    pub params: u64,
    /// Parameters held by the reported GPU before ZeRO partitioning.
    pub params_per_gpu: u64,
    /// Peak bytes of live tensors as `torch.cuda.max_memory_allocated()` reports them: the
    /// allocator's blocks (512-byte rounding, unsplit remainders) from the replay, or the
    /// tensors' own bytes when no replay ran.
    pub peak_bytes: u64,
    /// Peak of the tensors' own bytes (the timeline's maximum, before any rounding); the
    /// breakdown sums to it plus the overheads.
    pub peak_tensor_bytes: u64,
    /// Peak reserved by the caching allocator (`max_memory_reserved()`) on a device with room
    /// for everything it caches: what PyTorch reports on a GPU that is not full.
    pub reserved_bytes: u64,
    /// Peak reserved on the smallest device (to 2 MiB) that runs the step: PyTorch frees its
    /// cached, unused segments and retries when `cudaMalloc` fails, so segments cached but
    /// idle at the peak cost nothing where memory is tight. At most `reserved_bytes`; the
    /// figure that decides whether the step fits.
    pub needed_bytes: u64,
    /// Device memory the step needs: `needed_bytes` plus the CUDA context (`nvidia-smi`'s
    /// figure on the smallest device that runs it).
    pub total_bytes: u64,
    /// Bytes per category at the peak, overheads included; sums to `total_bytes`.
    pub breakdown: Breakdown,
    /// When the peak happens.
    pub peak_phase: Phase,
    /// The pipeline rank reported (0 without pipeline parallelism).
    pub pipeline_rank: u64,
    /// The mixed-precision layout used.
    pub amp_style: AmpStyle,
    /// The caching allocator whose replay gave `reserved_bytes`.
    pub allocator: crate::setup::Allocator,
    /// Whether `reserved_bytes` comes from an allocator replay (or a set fragmentation share);
    /// false for [`estimate_allocated`]'s lower bound and where the replay could not run.
    pub reserved_exact: bool,
    /// Whether an allocator replay ran and gave `reserved_bytes` and `needed_bytes`: false
    /// with a set fragmentation share, for [`estimate_allocated`], and where the replay could
    /// not place the step's allocations (one past the allocator's largest block,
    /// `vram_alloc::MAX_REQUEST`, or more than its 1 PiB device holds), whose figures are
    /// then the walked peak of the tensors' own bytes, a lower bound.
    pub reserved_replayed: bool,
    /// The software whose behaviour the estimate models.
    pub assumes: Assumes,
    /// The sampled timeline (empty unless asked for).
    pub timeline: Vec<TimelinePoint>,
    /// How the layer-by-layer description's mechanisms were modelled (which code path, what
    /// is not counted); empty where no mechanism has a note (softmax attention, dense MLPs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mechanisms: Vec<&'static str>,
    /// The decode steps the allocator replay walked, where it did not walk all of them
    /// ([`crate::setup::DecodeReplay::Sampled`] beyond
    /// [`crate::setup::SAMPLED_DECODE_STEPS`] steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_sampled: Option<DecodeSample>,
}

/// What walking every decode step changes against a sampled decode replay
/// ([`crate::setup::DecodeReplay::Sampled`]), as measured on the grid of
/// `tests/it/generate_replay.rs` (which asserts that these are its extremes): percent,
/// `(sampled − every) / every`, for the needed and the reserved (room to cache) bytes. The
/// allocated peak differs by under 0.1 % (the last step is walked).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeSamplingError {
    /// Lowest and highest error of `needed_bytes`.
    pub needed: (f64, f64),
    /// Lowest and highest error of `reserved_bytes`.
    pub reserved: (f64, f64),
}

/// The bounds [`DecodeSamplingError`] describes.
pub const DECODE_SAMPLING_ERROR: DecodeSamplingError = DecodeSamplingError {
    needed: (0.0, 4.5),
    reserved: (-1.0, 7.0),
};

/// An allocator replay of `generate` that walked some of the decode steps
/// ([`crate::setup::DecodeReplay::Sampled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DecodeSample {
    /// Decode steps of the `generate` call (new tokens less the one the prefill makes).
    pub steps: u64,
    /// Steps replayed through the allocator: the first two, the last two, the others evenly
    /// spaced between.
    pub replayed: u64,
}

impl DecodeSample {
    /// What the sampling means for the figures, from [`DECODE_SAMPLING_ERROR`]: the `note:`
    /// line of `vram estimate` and an entry of its `--json` `notes`.
    pub fn note(&self) -> String {
        let e = DECODE_SAMPLING_ERROR;
        format!(
            "the allocator replay walked {} of the {} decode steps (the first two, the last two, the others evenly spaced; --decode-replay every walks each one, in time that grows with the steps); on the test grid that differed from walking every step by {:+.1} to {:+.1} % in needed and {:+.1} to {:+.1} % in the reserved peak with room, the most under expandable segments",
            crate::fmt::thousands(self.replayed),
            crate::fmt::thousands(self.steps),
            e.needed.0,
            e.needed.1,
            e.reserved.0,
            e.reserved.1
        )
    }
}

impl Estimate {
    /// Whether `total_bytes` fits in `capacity` bytes.
    pub fn fits(&self, capacity: u64) -> bool {
        self.total_bytes <= capacity
    }
}

/// What a walk does with the state that outlives one step; see [`Step::walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// One step on its own: persistent state allocated at its start and freed at its end.
    Whole,
    /// The first step of a run: weights before it, optimizer states in its optimizer step.
    First,
    /// A later step: the persistent state is already there and stays.
    Later,
}

/// Everything derived from (model, setup) once, then walked per pipeline rank.
#[derive(Debug)]
pub(crate) struct Step<'a> {
    model: &'a Model,
    setup: &'a Setup,
    style: AmpStyle,
    bytes: StateBytes,
    ctx: Ctx,
    /// One description per distinct transformer layer kind of the description, built once.
    kinds: Vec<LayerDesc>,
    /// Per layer (encoder layers first), its index into `kinds`.
    pattern: Vec<u8>,
    /// Per kind, the op program of its checkpointed forward in a recomputed training step
    /// (`generate::layer_ops` with no cache), where the walk follows it; empty otherwise.
    checkpointed: Vec<Vec<crate::mech::step::Op>>,
    /// Per kind, its parameter tensors' element counts on this GPU (after TP), one per tensor.
    kind_tensors: Vec<Vec<u64>>,
    /// Per kind, whether each of `kind_tensors` is one of the mixer's tensors whose gradient
    /// its backward makes after its own temporaries: every mixer tensor but the output
    /// projection, whose backward node runs first.
    kind_mixer_late: Vec<Vec<bool>>,
    /// Whether the backward makes those gradients after the mixer's temporaries
    /// (`walks_node_order`); otherwise every gradient of a layer comes before them.
    late_mixer_grads: bool,
    /// Per kind, the tensors its cache holds on this GPU.
    caches: Vec<Vec<generate::CacheBytes>>,
    cnn: Vec<LayerDesc>,
    /// Parameters of the embedding / head on this GPU (after TP); the embedding's include the
    /// vision tower's and projector's, which run before the first layer.
    emb_params: u64,
    head_params: u64,
    /// Elements of the output projection `from_config` builds before `tie_weights` drops it
    /// for the embedding's (a tied head on this GPU), else 0.
    tied_head: u64,
    /// Of `emb_params`, those a training step gives no gradient: the vision tower and
    /// projector in a text-only step. The model's forward calls the tower only for pixel
    /// values, so its parameters never enter the graph, their `grad` stays `None` and torch's
    /// AdamW makes no state for them (`_init_group`), as for the layers a text-only forward
    /// passes over ([`LayerDesc::no_grad`]). TRL 1.16's `SFTTrainer` says the same: a
    /// text-only batch leaves the tower without gradients, so it turns on DDP's
    /// `find_unused_parameters` for vision-language models. An audio tower, which no step
    /// feeds, likewise.
    emb_no_grad: u64,
    /// Saved bytes of the embedding block and of the head (final norm and projection input).
    emb_saved: u64,
    head_saved: u64,
    /// Logits `[tokens, vocab/t]` elements per micro-batch (0 without an LM head).
    logits: u64,
    /// Half copy of the output projection's weight under autocast.
    head_copy: u64,
    /// Optimizer state bytes per parameter element (without master weights), and a flat extra.
    opt_elems: f64,
    /// The vision tower's tensors for the step's images (`vision.rs`; zero without images).
    vision: crate::mech::vision::TowerBytes,
    /// Packed weights held as stored (inference of a packed checkpoint the library does not
    /// dequantize at load); `None`: every weight at the step's bytes per element.
    held: Option<Held>,
}

/// The bytes of packed weights as the library holds them on this GPU
/// ([`crate::describe::Storage::held_bytes`], after TP), for the walk to allocate.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Per layer kind, its tensors' bytes, one per tensor (as `kind_tensors`).
    kinds: Vec<Vec<u64>>,
    /// The embedding's bytes (unpacked) and the head's (packed where the format packs it).
    edges: [u64; 2],
    /// The dequantized weight bitsandbytes' 4-bit matmul makes in the prefill above 1536 rows
    /// (`backends/cuda/ops.py` `gemm_4bit`): the largest packed linear in the compute dtype.
    dequant_tmp: u64,
}

impl<'a> Step<'a> {
    pub(crate) fn new(model: &'a Model, setup: &'a Setup) -> Result<Step<'a>> {
        setup.validate()?;
        let style = setup.amp_style();
        let bytes = state_bytes(setup.precision, style);
        let par = setup.parallel;
        let (b, s, training) = match setup.mode {
            Mode::Train(t) => (t.micro_batch, t.seq, true),
            Mode::Infer(i) => (i.batch, i.prompt(), false),
        };
        let cmp = setup.precision.compute_bytes();
        let res = match (setup.precision, style) {
            (Precision::Fp32, _) => 4,
            (p, AmpStyle::Autocast) if p.is_amp() && training => 4,
            _ => 2,
        };
        let ctx = Ctx {
            tok: m(&[b, s]),
            b,
            s,
            t: par.tp,
            sp: par.sequence_parallel,
            res,
            cmp,
            amp: setup.precision.is_amp(),
            attention: setup.attention,
            style,
            training,
            hf_cache: matches!(setup.mode, Mode::Train(tr) if tr.recompute != crate::setup::Recompute::Full),
        };
        let mut step = Step {
            model,
            setup,
            style,
            bytes,
            ctx,
            kinds: Vec::new(),
            pattern: Vec::new(),
            checkpointed: Vec::new(),
            kind_tensors: Vec::new(),
            kind_mixer_late: Vec::new(),
            late_mixer_grads: false,
            caches: Vec::new(),
            cnn: Vec::new(),
            emb_params: 0,
            head_params: 0,
            tied_head: 0,
            emb_no_grad: 0,
            emb_saved: 0,
            head_saved: 0,
            logits: 0,
            head_copy: 0,
            opt_elems: 0.0,
            vision: crate::mech::vision::TowerBytes::default(),
            held: None,
        };
        match model {
            Model::Transformer(t) => step.init_transformer(t)?,
            Model::ResNet(r) => step.init_resnet(r)?,
            Model::Weights(_) => {
                return Err(Error::Setup(
                    "a safetensors file without config.json gives parameters only; pass the folder with config.json to estimate activations".into(),
                ))
            }
        }
        step.opt_elems = match setup.mode {
            Mode::Train(t) => optimizer_elems(model, t.optimizer),
            Mode::Infer(_) => 0.0,
        };
        Ok(step)
    }

    fn init_transformer(&mut self, t: &Transformer) -> Result<()> {
        let par = self.setup.parallel;
        let tp = par.tp;
        let b = &t.blocks;
        if self.ctx.training && b.kinds.iter().any(|k| matches!(k.mixer, Mixer::Mamba(_))) {
            return Err(Error::Setup(
                "a training step of Mamba (1) layers is not modelled (its torch fallback scans token by token and keeps the residual in fp32); --inference estimates generate".into(),
            ));
        }
        if b.vision.as_ref().is_some_and(|v| v.images.is_some())
            && b.kinds.iter().any(|k| k.skipped_without_images())
        {
            return Err(Error::Setup(
                "--images with Llama 3.2 Vision: its cross-attention layers over the image features (their keys and values cached per image) are not modelled; estimate without --images for text-only steps".into(),
            ));
        }
        for kind in &b.kinds {
            let heads = match kind.mixer {
                Mixer::Attention(a) => Some((a.heads, a.kv_heads)),
                Mixer::Mla(m) => Some((m.heads, m.heads)),
                _ => None,
            };
            if let Some((heads, kv_heads)) = heads {
                if heads % tp != 0 {
                    return Err(Error::NotDivisible {
                        what: "--tp must divide the attention heads".into(),
                        a: heads,
                        b: tp,
                    });
                }
                if kv_heads % tp != 0 && tp % kv_heads != 0 {
                    return Err(Error::NotDivisible {
                        what: "--tp and the key/value heads must divide one another".into(),
                        a: kv_heads,
                        b: tp,
                    });
                }
            }
            let inner = match kind.ffn {
                Ffn::Dense(d) => Some(d.intermediate),
                Ffn::Moe(m) => Some(m.expert_intermediate),
                Ffn::DenseAndMoe(d, _) => Some(d.intermediate),
                Ffn::None => None,
            };
            if let Some(f) = inner.filter(|f| f % tp != 0) {
                return Err(Error::NotDivisible {
                    what: "--tp must divide the feed-forward size".into(),
                    a: f,
                    b: tp,
                });
            }
        }
        let total_layers = b.len() as u64;
        if par.pp > total_layers {
            return Err(Error::Setup(format!(
                "--pp {} exceeds the model's {} layers",
                par.pp, total_layers
            )));
        }
        if let Some(k) = match self.setup.mode {
            Mode::Train(tr) => tr.recompute_layers,
            Mode::Infer(_) => None,
        } {
            let per_stage = total_layers.div_ceil(par.pp);
            if k > per_stage {
                return Err(Error::Setup(format!(
                    "--recompute-layers {k} exceeds the {per_stage} layers of a pipeline stage"
                )));
            }
        }
        if let Schedule::Interleaved(v) = par.schedule {
            if par.pp > 1 && total_layers % (par.pp * v) != 0 {
                return Err(Error::NotDivisible {
                    what: "interleaved schedule: layers by pp × chunks".into(),
                    a: total_layers,
                    b: par.pp * v,
                });
            }
        }
        let c = self.ctx;
        self.init_blocks(t);
        let split = t.param_split();
        let (hidden, vocab) = (b.hidden, b.vocab());
        let vocab_emb = vocab * hidden;
        self.emb_params = split.embedding - vocab_emb + vocab_emb.div_ceil(tp);
        let untied_head = if b.ends.head > 0 { vocab_emb } else { 0 };
        self.head_params = split.head - untied_head + untied_head.div_ceil(tp);
        self.tied_head = if b.head.tied && b.layout != Layout::EncoderOnly {
            vocab_emb.div_ceil(tp)
        } else {
            0
        };
        if let Some(v) = b.vision.as_ref().filter(|v| v.images.is_none()) {
            if self.ctx.training {
                self.emb_no_grad = v.params;
            }
        }
        if let Some(a) = &b.audio {
            // No step feeds the audio tower: like a vision tower without images, it gets no
            // gradient and no optimizer state.
            if self.ctx.training {
                self.emb_no_grad += a.params;
            }
        }
        if par.pp > 1 && b.head.tied && b.layout != Layout::EncoderOnly {
            // The last stage keeps its own copy of a tied embedding (Megatron).
            self.head_params += vocab_emb.div_ceil(tp);
        }
        self.init_held(t);
        let mut emb = Parts::default();
        if b.embedding.norm {
            norm_parts(b, &c, &mut emb);
        }
        if b.dropout.hidden > 0.0 && c.training {
            emb.push(c.rep(hidden, 1), false);
        }
        self.emb_saved = emb.total(false);
        if let Some(v) = b.vision.as_ref().filter(|v| v.images.is_some()) {
            // The vision tower runs before the first layer (pipeline rank 0): in training its
            // saved tensors live as long as the embedding's; in generate, see vision.rs.
            let recompute = match self.setup.mode {
                Mode::Train(tr) => Some(tr.recompute),
                Mode::Infer(_) => None,
            };
            let images = v.images.unwrap_or(crate::describe::Images {
                count: 0,
                width: 0,
                height: 0,
            });
            self.vision = crate::mech::vision::tower_bytes(v, &images, &c, recompute);
            if c.training {
                self.emb_saved = self.emb_saved.saturating_add(self.vision.saved);
                self.vision = crate::mech::vision::TowerBytes::default();
            }
        }
        if b.layout != Layout::EncoderOnly {
            let mut head = Parts::default();
            if b.ends.final_norm > 0 {
                norm_parts(b, &c, &mut head);
            }
            head.push(c.rep(hidden, c.cmp), false);
            self.head_saved = head.total(false);
            self.logits = m(&[c.tok, vocab.div_ceil(tp)]);
            if self.autocast_copies() {
                // The output projection's weight cast to half, kept for its backward.
                self.head_copy = m(&[vocab.div_ceil(tp), hidden, c.cmp]);
            }
        }
        Ok(())
    }

    fn init_resnet(&mut self, r: &ResNet) -> Result<()> {
        let par = self.setup.parallel;
        if par.tp > 1 || par.pp > 1 || par.sequence_parallel {
            return Err(Error::Setup("tensor and pipeline parallelism are modelled for transformers only; use --dp for CNNs".into()));
        }
        let c = self.ctx;
        let b = c.b;
        let convs = r.convs();
        for (i, conv) in convs.iter().enumerate() {
            let out = m(&[b, conv.cout, conv.out_side, conv.out_side, c.cmp]);
            let input = m(&[b, conv.cin, conv.in_side, conv.in_side, c.cmp]);
            // In the order the forward makes them; cuDNN's workspace comes and goes right after
            // the convolution's output.
            let mut p = Parts::default();
            if i == 0 {
                let img = m(&[b, 3, r.image_size, r.image_size]);
                p.push(m(&[img, c.cmp]), false); // the (cast) input image
            }
            p.push(out, false); // the convolution's output, batch norm's input
            let tmp_after = p.n;
            if conv.relu {
                p.push(out, false); // ReLU output (in place on the batch-norm output)
            }
            p.push(m(&[conv.cout, 4]), false); // batch-norm saved mean
            p.push(m(&[conv.cout, 4]), false); // and inverse standard deviation
            if i == 0 {
                let pooled = m(&[b, 64, conv.out_side.div_ceil(2), conv.out_side.div_ceil(2)]);
                p.push(m(&[pooled, c.cmp]), false); // max-pool output (the next conv's input)
                p.push(m(&[pooled, 8]), false); // max-pool indices (int64)
            }
            let weights = conv.cin * conv.cout * conv.k * conv.k;
            let ws = cudnn_workspace(conv, b, c.cmp);
            // Backward, as autograd runs it: the ReLU's gradient (which consumes the gradient
            // handed on by the layer after), batch norm's, the convolution's gradient for its
            // input (handed on; the stem's image needs none) with cuDNN's workspace, then the
            // weight gradient's workspace.
            let bwd_prog = Program::new(&[
                TmpOp::Alloc(0, if conv.relu { out } else { 0 }),
                TmpOp::FreeHanded(2),
                TmpOp::Alloc(1, out),
                TmpOp::Free(0),
                TmpOp::Alloc(2, if i == 0 { 0 } else { input }),
                TmpOp::Alloc(3, if i == 0 { 0 } else { ws }),
                TmpOp::Free(3),
                TmpOp::Alloc(4, ws),
                TmpOp::Free(4),
                TmpOp::Free(1),
            ]);
            self.cnn.push(
                LayerDesc {
                    parts: p,
                    checkpoint: out,
                    // cuDNN's workspace; a downsample's batch-norm output lives until the
                    // residual add.
                    fwd_tmp: if conv.relu { ws } else { ws.max(out) },
                    bwd_tmp: bwd_prog.high(),
                    params: weights + 2 * conv.cout,
                    matmul_params: weights,
                    infer_tmp: m(&[out, 3]).max(out.saturating_add(ws)),
                    bwd_prog,
                    tmp_after,
                    ..LayerDesc::default()
                }
                .with_totals(),
            );
        }
        self.head_params = r.fc_in() * r.classes + r.classes;
        self.head_saved = m(&[b, r.fc_in(), c.cmp]);
        self.logits = m(&[b, r.classes]);
        Ok(())
    }

    /// Element counts of kind `k`'s parameter tensors on this GPU, one per tensor.
    fn tensors_of(&self, k: usize) -> &[u64] {
        &self.kind_tensors[k]
    }

    /// The description of the last layer's kind (a decoder layer for an encoder-decoder).
    fn last_kind(&self) -> LayerDesc {
        self.pattern
            .last()
            .map_or_else(LayerDesc::default, |k| self.kinds[*k as usize])
    }

    /// Whether autocast makes half copies of fp32 weights in forward.
    fn autocast_copies(&self) -> bool {
        self.style == AmpStyle::Autocast
            && self.ctx.cmp != 4
            && self.bytes.weight == 4
            && self.ctx.training
    }

    /// Pipeline geometry of one rank: (first layer, layer count).
    fn stage_layers(&self, rank: u64) -> (u64, u64) {
        let total = match self.model {
            Model::Transformer(_) => self.pattern.len() as u64,
            _ => self.cnn.len() as u64,
        };
        let p = self.setup.parallel.pp;
        let base = total / p;
        let extra = total % p;
        // The first `extra` ranks take one more layer.
        let count = base + u64::from(rank < extra);
        let first = rank * base + rank.min(extra);
        (first, count)
    }

    fn stack(&self, rank: u64) -> Stack<'_> {
        let (first, count) = self.stage_layers(rank);
        match self.model {
            Model::Transformer(_) => Stack::Blocks {
                kinds: &self.kinds,
                pattern: &self.pattern[first as usize..(first + count) as usize],
            },
            _ => Stack::List(&self.cnn[first as usize..(first + count) as usize]),
        }
    }

    /// The packed weights as held ([`Held`]), where the step holds them as stored: inference of
    /// a checkpoint (or `--weights` format) with packed tensors that the library keeps packed
    /// (`Overheads::weights_dequantized` false). Training holds every weight at its precision:
    /// transformers dequantizes MXFP4 to train (`Mxfp4HfQuantizer.is_trainable` is false; the
    /// quantizer's `dequantize=True`), and a QLoRA step is `finetune::step`'s own walk.
    fn init_held(&mut self, t: &Transformer) {
        let b = &t.blocks;
        let s = b.storage;
        let Mode::Infer(_) = self.setup.mode else {
            return;
        };
        if !s.is_packed() || self.setup.overheads.weights_dequantized {
            return;
        }
        let tp = self.setup.parallel.tp;
        let wb = self.bytes.weight.min(self.ctx.cmp);
        let mut held = Held::default();
        let mut largest = 0u64;
        for kind in &b.kinds {
            let mut v = Vec::new();
            kind.tensors(b.hidden, &mut |x| {
                let bytes = s.held_bytes(&x, wb, false);
                if bytes < x.numel() * wb && x.kind == crate::mech::TensorKind::Linear {
                    largest = largest.max(x.numel());
                }
                v.push(if x.tp { bytes.div_ceil(tp) } else { bytes });
            });
            held.kinds.push(v);
        }
        let vocab = b.ends.vocab;
        let head = crate::mech::Tensor {
            component: crate::mech::Component::Head,
            kind: crate::mech::TensorKind::Linear,
            rows: vocab,
            cols: b.ends.head / vocab.max(1),
            fp32: false,
            tp: true,
        };
        let head_bytes = if b.ends.head > 0 && head.numel() == b.ends.head {
            let packed = s.held_bytes(&head, wb, false).div_ceil(tp);
            packed + (self.head_params - b.ends.head.div_ceil(tp)) * wb
        } else {
            self.head_params * wb
        };
        held.edges = [self.emb_params * wb, head_bytes];
        if let crate::describe::Quant::Packed { format, .. } = s.quant {
            if format.is_bnb_4bit() && self.ctx.tok > 1536 {
                held.dequant_tmp = (largest * self.ctx.cmp).div_ceil(tp);
            }
        }
        self.held = Some(held);
    }

    /// Bytes of the weight tensors rank `rank` holds as packed ([`Held`]), one per tensor.
    fn rank_held_bytes(&self, rank: u64, stack: &Stack, held: &Held) -> Vec<u64> {
        let mut v = Vec::new();
        let p = self.setup.parallel.pp;
        if rank == 0 {
            v.push(held.edges[0]);
        }
        if let Stack::Blocks { pattern, .. } = stack {
            for k in pattern.iter() {
                v.extend_from_slice(&held.kinds[*k as usize]);
            }
        }
        if rank == p - 1 {
            v.push(held.edges[1]);
        }
        v.retain(|e| *e > 0);
        v
    }

    /// Parameter elements this rank holds (after TP, before ZeRO).
    fn rank_params(&self, rank: u64, stack: &Stack) -> u64 {
        self.rank_sum(rank, stack, |l| l.params)
    }

    /// Parameter elements on `rank` that get gradients and optimizer states
    /// ([`LayerDesc::grad_params`]).
    fn rank_grad_params(&self, rank: u64, stack: &Stack) -> u64 {
        self.rank_sum(rank, stack, LayerDesc::grad_params)
            - if rank == 0 { self.emb_no_grad } else { 0 }
    }

    fn rank_sum(&self, rank: u64, stack: &Stack, f: impl Fn(&LayerDesc) -> u64) -> u64 {
        let p = self.setup.parallel.pp;
        let layers: u64 = match stack {
            Stack::Blocks { kinds, pattern } => {
                pattern.iter().map(|k| f(&kinds[*k as usize])).sum()
            }
            Stack::List(v) => v.iter().map(&f).sum(),
        };
        layers
            + if rank == 0 { self.emb_params } else { 0 }
            + if rank == p - 1 { self.head_params } else { 0 }
    }
}

/// Bytes of the workspace cuDNN takes for one call of `conv` over `b` images of `bytes`-wide
/// elements (forward, backward-data and backward-filter alike).
///
/// PyTorch (2.11, `cudnn.benchmark` off) asks cuDNN 9's heuristics for an engine and gives it the
/// workspace that engine states, from the caching allocator, for the length of the call. The
/// heuristics' engines for NCHW tensors on tensor-core GPUs work in NHWC: the input, the filter
/// and the output are transposed inside the workspace, which is then their three sizes together
/// (to within 200 bytes for the stem, the 56×56, 28×28 and 7×7 3×3 calls and the first strided
/// 3×3 call of the H100 ResNet-50 snapshot; its other strided and 14×14 calls take 0.67× to
/// 1.8× of it, and its weight-gradient calls a few MiB more). A 1×1 convolution with stride 1
/// is a plain matrix product over the NCHW layout and takes no workspace (400 bytes in the
/// snapshot) for its forward and input gradient.
pub(crate) fn cudnn_workspace(conv: &crate::describe::Conv, b: u64, bytes: u64) -> u64 {
    if conv.k == 1 && conv.stride == 1 {
        return 0;
    }
    let input = m(&[b, conv.cin, conv.in_side, conv.in_side, bytes]);
    let output = m(&[b, conv.cout, conv.out_side, conv.out_side, bytes]);
    let filter = m(&[conv.cin, conv.cout, conv.k, conv.k, bytes]);
    input.saturating_add(output).saturating_add(filter)
}

/// Estimates the step's peak memory on one GPU.
///
/// With pipeline parallelism, the first and last ranks are walked and the larger reported.
///
/// ```
/// use vram_model::{catalog, estimate, setup::Setup};
/// let model = catalog::lookup("gpt2").unwrap();
/// let e = estimate(&model, &Setup::default()).unwrap();
/// assert_eq!(e.params, 124_439_808);
/// assert!(e.peak_bytes > 16 * e.params);
/// ```
pub fn estimate(model: &Model, setup: &Setup) -> Result<Estimate> {
    run(model, setup, false, true)
}

/// The peak walk alone: `reserved_bytes` is the lower bound `peak_bytes` (or the
/// `fragmentation` share when one is set) and `reserved_exact` is false. Microseconds instead
/// of the milliseconds an allocator replay takes; the planner screens candidates with it
/// (reserved ≥ allocated, so a candidate this refuses does not fit).
pub fn estimate_allocated(model: &Model, setup: &Setup) -> Result<Estimate> {
    run(model, setup, false, false)
}

/// Like [`estimate`], also sampling the timeline at every phase.
pub fn estimate_with_timeline(model: &Model, setup: &Setup) -> Result<Estimate> {
    run(model, setup, true, true)
}

/// Whether the step runs on a device of `capacity` bytes (CUDA context included), with the
/// allocator replayed there as PyTorch would run it: what [`Estimate::fits`] says of
/// [`estimate`]'s `total_bytes`, in one replay instead of a bisection (the peak walk refuses
/// what cannot fit whatever the allocator does; otherwise one replay on a device of that size,
/// releasing cached segments and retrying where PyTorch does, decides). The two can differ where
/// the replay's fit is not monotone in the device's size (a device slightly larger than this one
/// first runs out later and fails; see `settle`): the fit searches settle their answers on the
/// estimate's verdict.
pub fn fits(model: &Model, setup: &Setup, capacity: u64) -> Result<bool> {
    Ok(shortfall(model, setup, capacity)?.is_none())
}

/// [`fits`], with what a step that does not fit was short of: `None` when it fits, else the bytes
/// the device lacked where the run first failed (the peak walk's excess, or the failing
/// `cudaMalloc`'s under PyTorch's default policy; 0 where the policy does not make it plain).
fn shortfall(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<u64>> {
    let o = setup.overheads;
    if o.fragmentation.is_some() {
        let total = estimate(model, setup)?.total_bytes;
        return Ok((total > capacity).then(|| total - capacity));
    }
    let step = Step::new(model, setup)?;
    let (rank, sink) = peak_rank(&step, setup, false)?;
    let walked = sink.peak.saturating_add(o.cuda_context_bytes);
    if walked > capacity {
        return Ok(Some(walked - capacity));
    }
    let room = capacity - o.cuda_context_bytes;
    Ok(step.replay_shortfall(rank, o.allocator, room))
}

/// The pipeline rank that needs the most (the first and the last are walked), and its walk.
fn peak_rank(step: &Step, setup: &Setup, timeline: bool) -> Result<(u64, PeakSink)> {
    let p = setup.parallel.pp;
    let ranks: &[u64] = if p == 1 { &[0] } else { &[0, p - 1] };
    let mut best: Option<(u64, PeakSink)> = None;
    for &rank in ranks {
        let mut sink = PeakSink {
            timeline: timeline.then(Vec::new),
            ..PeakSink::default()
        };
        step.walk(rank, &mut sink, timeline, Run::Whole);
        sink.finish();
        if best.as_ref().is_none_or(|(_, b)| sink.peak > b.peak) {
            best = Some((rank, sink));
        }
    }
    let (rank, sink) = best.expect("at least one rank");
    if sink.peak >= 1u64 << 62 {
        return Err(Error::OutOfRange {
            field: "estimate".into(),
            value: format!("{:.3e} bytes", sink.peak as f64),
            why: "beyond any device; check the sizes".into(),
        });
    }
    Ok((rank, sink))
}

fn run(model: &Model, setup: &Setup, timeline: bool, replay: bool) -> Result<Estimate> {
    let step = Step::new(model, setup)?;
    let (rank, sink) = peak_rank(&step, setup, timeline)?;
    let mut breakdown = Breakdown(sink.at_peak);
    let mut peak = sink.peak;
    let o = setup.overheads;
    let (reserved, needed, replayed) = match (o.fragmentation, replay) {
        (Some(f), _) => {
            let r = peak.saturating_add((peak as f64 * f) as u64);
            (r, r, false)
        }
        (None, true) => match step.replay(rank, o.allocator) {
            Some(r) => {
                // The allocator's blocks are rounded (512 B, unsplit remainders): what
                // `max_memory_allocated()` reports. The tensors' own bytes stay in the breakdown.
                peak = peak.max(r.allocated);
                (r.reserved.max(peak), r.needed.max(peak), true)
            }
            // The replay could not place the step (see `Estimate::reserved_replayed`).
            None => (peak, peak, false),
        },
        (None, false) => (peak, peak, false),
    };
    breakdown.0[Category::AllocatorOverhead as usize] = needed.saturating_sub(sink.peak);
    breakdown.0[Category::CudaContext as usize] = o.cuda_context_bytes;
    let stack = step.stack(rank);
    Ok(Estimate {
        model: model.name().to_string(),
        params: model.param_count(),
        params_per_gpu: step.rank_params(rank, &stack),
        peak_bytes: peak,
        peak_tensor_bytes: sink.peak,
        reserved_bytes: reserved,
        needed_bytes: needed,
        total_bytes: needed.saturating_add(o.cuda_context_bytes),
        breakdown,
        peak_phase: sink.peak_phase.unwrap_or(Phase::Setup),
        pipeline_rank: rank,
        amp_style: step.style,
        allocator: o.allocator,
        reserved_exact: replayed || o.fragmentation.is_some(),
        reserved_replayed: replayed,
        assumes: assumes(model),
        timeline: sink.timeline.unwrap_or_default(),
        mechanisms: match model {
            Model::Transformer(t) => layer::notes(&t.blocks),
            _ => Vec::new(),
        },
        decode_sampled: if replayed {
            step.decode_sampled()
        } else {
            None
        },
    })
}

/// Per-layer activation bytes stored for backward, for checks against published formulas.
///
/// Returns the bytes one layer (the decoder kind) stores on one GPU under `setup`.
pub fn layer_activation_bytes(model: &Model, setup: &Setup) -> Result<u64> {
    let step = Step::new(model, setup)?;
    let tr = match setup.mode {
        Mode::Train(t) => t,
        Mode::Infer(_) => {
            return Err(Error::Setup(
                "activations are stored in training only".into(),
            ))
        }
    };
    let l = match model {
        Model::Transformer(_) => step.last_kind(),
        _ => step.cnn[0],
    };
    Ok(step.saved_handle(&tr, 0, 0, &l).bytes)
}

/// What one training micro-batch's chain of layers keeps for backward, on one GPU: the input
/// to checkpoint placement (`vram_plan::checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChainBytes {
    /// Transformer layers in the chain.
    pub layers: u64,
    /// Bytes one layer saves for its backward without recomputation.
    pub layer_saved: u64,
    /// Bytes one layer saves under selective recomputation (no attention scores).
    pub layer_selective: u64,
    /// Bytes of one layer's input: what a checkpoint before it holds.
    pub layer_input: u64,
    /// Bytes the head keeps until its backward: the final norm's and the projection's inputs,
    /// and the fp32 log-softmax of the loss (the logits themselves are freed before backward).
    pub head_saved: u64,
    /// Autocast's half copies of one layer's matmul weights (0 outside autocast): kept from a
    /// layer's forward to its backward, made again by a recomputation.
    pub layer_copies: u64,
    /// Gradient bytes one layer's backward allocates and keeps (autocast creates gradients
    /// lazily on the first micro-batch; 0 where they are allocated before the step).
    pub layer_grad: u64,
    /// Gradient bytes the head's backward allocates and keeps (as `layer_grad`).
    pub head_grad: u64,
    /// Extra bytes live at the high point of one layer's forward (beyond what it saves).
    pub layer_forward_tmp: u64,
    /// Extra bytes live at the high point of one layer's backward (beyond saved and gradients).
    pub layer_backward_tmp: u64,
    /// The feed-forward half of a layer's backward, run first: the gradients flowing in and
    /// out and the feed-forward's own, less its down projection's saved input, which the first
    /// of them replaces (`LayerDesc::ffn_bwd_tmp`).
    pub layer_ffn_backward_tmp: u64,
    /// The mixer half of a layer's backward, after the feed-forward's tensors are freed
    /// (`LayerDesc::mixer_bwd_tmp`).
    pub layer_mixer_backward_tmp: u64,
    /// Of each backward figure above: autocast's half gradient of the layer's largest weight
    /// (0 without autocast), which a frozen layer does not make.
    pub layer_half_grad: u64,
    /// Extra bytes at the high point of the head's forward: the logits and their fp32 upcast.
    pub head_forward_tmp: u64,
    /// Extra bytes at the high point of the head's backward: two fp32 logit gradients.
    pub head_backward_tmp: u64,
}

/// The layer chain of a decoder-only or encoder-only transformer's training micro-batch, with
/// the same tensor sizes the step walk uses (TP and sequence parallelism applied).
///
/// Encoder-decoders (every decoder layer reads the encoder's output, so the layers are not a
/// chain), CNNs, inference and pipeline parallelism (`pp > 1`) are refused with an error.
pub fn chain_bytes(model: &Model, setup: &Setup) -> Result<ChainBytes> {
    let t = match model {
        Model::Transformer(t) => t,
        _ => {
            return Err(Error::Setup(
                "checkpoint placement is modelled for transformers only".into(),
            ))
        }
    };
    if t.layout() == Layout::EncoderDecoder {
        return Err(Error::Setup(
            "an encoder-decoder is not a chain (every decoder layer reads the encoder output); checkpoint placement needs a decoder-only or encoder-only model".into(),
        ));
    }
    if setup.parallel.pp > 1 {
        return Err(Error::Setup(
            "checkpoint placement covers a whole model's chain; use --pp 1".into(),
        ));
    }
    let step = Step::new(model, setup)?;
    if !matches!(setup.mode, Mode::Train(_)) {
        return Err(Error::Setup(
            "activations are stored in training only".into(),
        ));
    }
    let l = step.last_kind();
    let autocast = step.style == AmpStyle::Autocast;
    let copies = autocast && step.ctx.cmp != 4 && step.bytes.weight == 4;
    let g = if autocast { step.bytes.grad } else { 0 };
    Ok(ChainBytes {
        layers: t.layers(),
        layer_saved: l.saved(false),
        layer_selective: l.saved(true),
        layer_input: l.checkpoint,
        head_saved: step.head_saved + m(&[step.logits, 4]),
        layer_copies: if copies {
            m(&[l.matmul_params, step.ctx.cmp])
        } else {
            0
        },
        layer_grad: m(&[l.params, g]),
        head_grad: m(&[step.head_params, g]),
        layer_forward_tmp: l.fwd_tmp,
        layer_backward_tmp: l.bwd_tmp,
        layer_ffn_backward_tmp: l.ffn_bwd_tmp,
        layer_mixer_backward_tmp: l.mixer_bwd_tmp,
        layer_half_grad: l.half_grad,
        head_forward_tmp: m(&[step.logits, step.ctx.cmp])
            + if step.ctx.cmp != 4 {
                m(&[step.logits, 4])
            } else {
                0
            },
        head_backward_tmp: m(&[step.logits, 4, 2]),
    })
}

/// The tensors one layer of the chain (its last kind) saves for backward without
/// recomputation, one entry per allocation, for a step that walks its own tape through the
/// allocator replay (`finetune::step`).
pub(crate) fn chain_saved_parts(model: &Model, setup: &Setup) -> Result<Vec<u64>> {
    let l = Step::new(model, setup)?.last_kind();
    Ok(l.parts.bytes[..l.parts.n as usize].to_vec())
}

/// What a fit search found, and what it checked: the largest size whose estimate fits (or,
/// where not every larger size was tried, one that fits with the next size not fitting), the
/// sizes just below it that were estimated, and those of them that do not fit (whether a step
/// runs is not monotone in its size; see `settle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Largest {
    /// The size found: it fits, and the next size does not.
    pub value: u64,
    /// `None`: every larger size was tried or refused by the peak walk (nothing above its bound
    /// fits), so `value` is the largest that fits. `Some(top)`: more than [`SCAN`] sizes lay
    /// between `value + 1` and the peak walk's bound `top`, and those from `value + 2` to `top`
    /// were not tried.
    pub untried_above: Option<u64>,
    /// Every size from this one to `value - 1` was estimated (at most [`BELOW`] of them; `value`
    /// where there is none below).
    pub checked_below_from: u64,
    /// Those of them whose estimate does not fit, as inclusive ranges, ascending.
    pub not_fitting_below: Vec<(u64, u64)>,
}

/// The largest micro-batch (training) or batch (inference) whose estimate fits `capacity`.
///
/// Returns `Ok(None)` when not even 1 fits. The answer fits per [`estimate`]'s own verdict and
/// the next size does not; every size above it up to the peak walk's bound (nothing above
/// that fits) was tried where they are at most [`SCAN`] (the allocator's fit is not monotone in
/// the size: see `settle`); [`largest_batch`] says whether they were.
pub fn max_batch(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<u64>> {
    Ok(batch_search(model, setup, capacity, false)?.map(|l| l.value))
}

/// [`max_batch`], with what was checked: whether every larger batch was tried, and the (at
/// most [`BELOW`]) batches just below the answer, estimated, with those that do not fit.
pub fn largest_batch(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<Largest>> {
    batch_search(model, setup, capacity, true)
}

fn batch_search(
    model: &Model,
    setup: &Setup,
    capacity: u64,
    check_below: bool,
) -> Result<Option<Largest>> {
    let at = |n: u64| -> Setup {
        let mut s = *setup;
        match &mut s.mode {
            Mode::Train(t) => t.micro_batch = n,
            Mode::Infer(i) => i.batch = n,
        }
        s
    };
    // The peak walk (microseconds) bounds the answer from above: what it refuses does not
    // fit, and its peak grows with the batch. The replays (milliseconds) then only decide the
    // last few sizes below that bound.
    let Some(top) = search_max(|n| walk_fits(model, &at(n), capacity))? else {
        return Ok(None);
    };
    let found = if replay::reference() {
        search_max(|n| fits(model, &at(n), capacity))?
    } else {
        search_down(
            top,
            |n| shortfall(model, &at(n), capacity),
            |n| walk_slope(model, n, &at),
        )?
    };
    settled_largest(found, top, check_below, |n| {
        Ok(estimate(model, &at(n))?.fits(capacity))
    })
}

/// A size search over 1..=`top` settled on a full estimate's verdict `fits` (each size
/// estimated once): the answer fits and the next size does not (see `settle`), every size
/// above it to `top` is tried where they are at most [`SCAN`], and with `check_below` the
/// [`BELOW`] sizes under it are estimated and those that do not fit named. `top` is a bound
/// nothing above fits (the peak walk's: the estimate's device total is at least its peak);
/// `found`, where given, is a size near the answer (a search on a cheaper verdict). `None`:
/// not even 1 fits. The micro-batch of a LoRA/QLoRA step (`finetune::step`) is searched so too.
pub fn settled_largest(
    found: Option<u64>,
    top: u64,
    check_below: bool,
    fits: impl FnMut(u64) -> Result<bool>,
) -> Result<Option<Largest>> {
    let mut ok = Verdicts::new(fits);
    let settled = settle(found, 1, top, |n| ok.get(n))?;
    let found = above(settled, 1, top, |n| ok.get(n))?;
    found
        .map(|l| below(l, 1, check_below, |n| ok.get(n)))
        .transpose()
}

/// The longest context (inference) whose estimate fits `capacity` at the setup's batch (as
/// [`max_batch`] decides it).
pub fn max_context(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<u64>> {
    Ok(context_search(model, setup, capacity, crate::setup::MAX_SIZE, false)?.map(|l| l.value))
}

/// [`max_context`] among contexts of at most `limit` tokens (a model's own longest, say): the
/// longest of them whose estimate fits, with the next one up not fitting or past `limit`, with
/// what was checked (as [`largest_batch`]). The search stops at `limit` where that fits.
pub fn largest_context_to(
    model: &Model,
    setup: &Setup,
    capacity: u64,
    limit: u64,
) -> Result<Option<Largest>> {
    context_search(model, setup, capacity, limit, true)
}

fn context_search(
    model: &Model,
    setup: &Setup,
    capacity: u64,
    limit: u64,
    check_below: bool,
) -> Result<Option<Largest>> {
    // A context holds the new tokens and at least one prompt token: the search starts there
    // (shorter contexts are the same one-token-prompt call).
    let new = match setup.mode {
        Mode::Infer(i) => i.new_tokens,
        Mode::Train(_) => 0,
    };
    let start = match setup.mode {
        Mode::Infer(i) => i.prompt(),
        Mode::Train(_) => 1,
    };
    let at = |n: u64| -> Setup {
        let mut s = *setup;
        if let Mode::Infer(i) = &mut s.mode {
            i.context = n + new;
        }
        s
    };
    // A context past the largest size a setup takes is not tried (a tiny model fits every
    // context up to it).
    let limit = limit.min(crate::setup::MAX_SIZE);
    let within = |n: u64| n + new <= limit;
    let hi = limit.saturating_sub(new);
    let mut ok = Verdicts::new(|n: u64| Ok(within(n) && estimate(model, &at(n))?.fits(capacity)));
    // Where the limit itself fits (the peak walk first: microseconds), that is the answer.
    let at_limit = hi >= 1 && walk_fits(model, &at(hi), capacity)? && ok.get(hi)?;
    let settled = if at_limit {
        Some(hi)
    } else {
        let found = if replay::reference() {
            search_max_from(start, |n| Ok(within(n) && fits(model, &at(n), capacity)?))?
        } else {
            match search_max_from(start, |n| {
                Ok(within(n) && walk_fits(model, &at(n), capacity)?)
            })? {
                Some(top) => search_down(
                    top,
                    |n| shortfall(model, &at(n), capacity),
                    |n| walk_slope(model, n, &at),
                )?,
                None => None,
            }
        };
        settle(found, 1, hi, |n| ok.get(n))?
    };
    // The peak walk's bound, for the sizes above the settled answer.
    let top = match settled {
        Some(a) => search_max_from(a, |n| Ok(within(n) && walk_fits(model, &at(n), capacity)?))?,
        None => None,
    };
    let found = match top {
        Some(top) => above(settled, 1, top.min(hi), |n| ok.get(n))?,
        None => settled.map(|value| Largest {
            value,
            untried_above: None,
            checked_below_from: value,
            not_fitting_below: Vec::new(),
        }),
    };
    let Some(found) = found else {
        return Ok(None);
    };
    let l = below(found, 1, check_below, |n| ok.get(n))?;
    Ok(Some(Largest {
        value: l.value + new,
        untried_above: l.untried_above.map(|n| n + new),
        checked_below_from: l.checked_below_from + new,
        not_fitting_below: l
            .not_fitting_below
            .iter()
            .map(|&(a, b)| (a + new, b + new))
            .collect(),
    }))
}

/// The full estimate's verdict per size, each size estimated once (the settling, the scan
/// above and the check below meet the same sizes).
struct Verdicts<F> {
    f: F,
    seen: std::collections::BTreeMap<u64, bool>,
}

impl<F: FnMut(u64) -> Result<bool>> Verdicts<F> {
    fn new(f: F) -> Self {
        Verdicts {
            f,
            seen: std::collections::BTreeMap::new(),
        }
    }

    fn get(&mut self, n: u64) -> Result<bool> {
        if let Some(&v) = self.seen.get(&n) {
            return Ok(v);
        }
        let v = (self.f)(n)?;
        self.seen.insert(n, v);
        Ok(v)
    }
}

/// The most sizes [`above`] tries with the full estimate (a few hundred milliseconds at most).
pub const SCAN: u64 = 64;

/// The most sizes just below the answer that [`below`] estimates (one full estimate each,
/// those the search already estimated not again).
pub const BELOW: u64 = 16;

/// `found` with the sizes from `value - 1` down to `lo` estimated, at most [`BELOW`] of them
/// (further down to `found.checked_below_from`, the size [`above`] met not fitting, where that is
/// lower: at most [`SCAN`] + 1 then), and those that do not fit gathered into ranges (`check`:
/// false leaves them unchecked).
fn below(
    found: Largest,
    lo: u64,
    check: bool,
    mut ok: impl FnMut(u64) -> Result<bool>,
) -> Result<Largest> {
    if !check || found.value <= lo {
        return Ok(Largest {
            checked_below_from: found.value,
            ..found
        });
    }
    let from = found
        .value
        .saturating_sub(BELOW)
        .min(found.checked_below_from)
        .max(lo);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for n in from..found.value {
        if !ok(n)? {
            match ranges.last_mut() {
                Some((_, b)) if *b + 1 == n => *b = n,
                _ => ranges.push((n, n)),
            }
        }
    }
    Ok(Largest {
        checked_below_from: from,
        not_fitting_below: ranges,
        ..found
    })
}

/// The largest size up to `top` (the peak walk's bound: nothing above it fits) whose estimate
/// fits, where some size above `settled + 1` fits though `settled + 1` does not: every size from
/// `top` down to `settled + 2` is tried, where they are at most [`SCAN`]; else `settled` (which
/// fits, with the next size not fitting, and the sizes above that untried).
fn above(
    settled: Option<u64>,
    lo: u64,
    top: u64,
    mut ok: impl FnMut(u64) -> Result<bool>,
) -> Result<Option<Largest>> {
    let plain = |untried_above| {
        settled.map(|value| Largest {
            value,
            untried_above,
            checked_below_from: value,
            not_fitting_below: Vec::new(),
        })
    };
    // `settled + 1` does not fit (`lo` where nothing settled).
    let floor = settled.map_or(lo + 1, |a| a + 2);
    if top < floor {
        return Ok(plain(None));
    }
    if top - floor >= SCAN {
        return Ok(plain(Some(top)));
    }
    for n in (floor..=top).rev() {
        if ok(n)? {
            // `floor - 1` does not fit: [`below`] checks down to it.
            return Ok(Some(Largest {
                value: n,
                untried_above: None,
                checked_below_from: floor - 1,
                not_fitting_below: Vec::new(),
            }));
        }
    }
    Ok(plain(None))
}

/// The searches' answer made one the full estimate agrees with: the largest `n` (from `lo` to
/// `hi`) such that `ok(n)` (the estimate fits) and `ok(n + 1)` does not (or `n` is `hi`),
/// found near `found`, the answer of a search on [`fits`].
///
/// Whether a step runs is not monotone in its size, nor in the device's: PyTorch's
/// `release_cached_blocks` runs only when a `cudaMalloc` fails, so what is cached, split and
/// freed later depends on where the device first ran out. A replay on the named device (what
/// [`fits`] runs) can then succeed where the bisection for the smallest device (`needed`, hence
/// the estimate's `total_bytes`) met a larger device that fails, or the other way round. The
/// searches probe [`fits`] (one replay each); the answer a user reads beside the estimate's own
/// verdict is settled here on that verdict: from a fitting `n` up while the next fits, from
/// a failing one down (galloping) to one that fits, then bisected between the two, so the
/// answer fits and the next size does not, per the same estimate. A size above the next one may
/// still fit where the replay's path differs; the searches do not claim to have tried them.
fn settle(
    found: Option<u64>,
    lo: u64,
    hi: u64,
    mut ok: impl FnMut(u64) -> Result<bool>,
) -> Result<Option<u64>> {
    if hi < lo {
        return Ok(None);
    }
    let n = found.unwrap_or(lo).clamp(lo, hi);
    let (mut good, mut bad) = if ok(n)? {
        // Up: the next size, then galloping.
        let mut good = n;
        let mut step = 1u64;
        loop {
            let next = good.saturating_add(step).min(hi);
            if next == good {
                return Ok(Some(good)); // `hi` fits
            }
            if ok(next)? {
                good = next;
                step = step.saturating_mul(2);
            } else {
                break (good, next);
            }
        }
    } else {
        let mut bad = n;
        let mut step = 1u64;
        loop {
            if bad == lo {
                return Ok(None);
            }
            let next = bad.saturating_sub(step).max(lo);
            if ok(next)? {
                break (next, bad);
            }
            bad = next;
            step = step.saturating_mul(2);
        }
    };
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(Some(good))
}

/// The peak walk's bytes per unit of `n` just below `n` (the setup `at(n)` gives), over a
/// span of about 1/32 of `n`: how far a shortfall moves the answer.
fn walk_slope(model: &Model, n: u64, at: &impl Fn(u64) -> Setup) -> Result<u64> {
    let span = (n / 32).max(1);
    let below = n.saturating_sub(span).max(1);
    if below == n {
        return Ok(u64::MAX); // nothing below 1: the next probe is 1
    }
    let peak = |k: u64| -> Result<u64> {
        let s = at(k);
        let step = Step::new(model, &s)?;
        Ok(peak_rank(&step, &s, false)?.1.peak)
    };
    Ok(((peak(n)?.saturating_sub(peak(below)?)) / (n - below)).max(1))
}

/// Whether the peak walk alone leaves the step under `capacity` (CUDA context included): what
/// [`fits`] decides before any replay. `fits` implies it, so the largest size it accepts
/// bounds the largest that fits.
fn walk_fits(model: &Model, setup: &Setup, capacity: u64) -> Result<bool> {
    let o = setup.overheads;
    if o.fragmentation.is_some() {
        return fits(model, setup, capacity);
    }
    let step = Step::new(model, setup)?;
    let (_, sink) = peak_rank(&step, setup, false)?;
    Ok(capacity
        .checked_sub(o.cuda_context_bytes)
        .is_some_and(|room| sink.peak <= room))
}

/// The largest `n` in 1..=`top` that fits, for a monotone fit, searched from `top` downward: the
/// answer [`search_max`] gives when nothing above `top` fits. `short(n)` is `None` when `n`
/// fits, else the bytes the device lacked (0 when unknown); `per_unit(n)` is about how many
/// bytes one unit of `n` adds there. A probe short of `s` bytes sends the next one `s /
/// per_unit` units lower (galloping down where `s` is unknown); between the first that fits and
/// the last that failed the search bisects.
fn search_down(
    top: u64,
    mut short: impl FnMut(u64) -> Result<Option<u64>>,
    mut per_unit: impl FnMut(u64) -> Result<u64>,
) -> Result<Option<u64>> {
    let mut hi = top.saturating_add(1); // the smallest size known not to fit
    let mut n = top;
    let mut gallop = 1u64;
    let mut lo = loop {
        let Some(s) = short(n)? else { break n };
        hi = n;
        if n <= 1 {
            return Ok(None);
        }
        let step = if s > 0 {
            s.div_ceil(per_unit(n)?.max(1))
        } else {
            let g = gallop;
            gallop = gallop.saturating_mul(2);
            g
        };
        n = n.saturating_sub(step.max(1)).max(1);
    };
    // `lo` fits, `hi` does not (or is beyond `top`).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if short(mid)?.is_none() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// [`search_max`] galloping from `start` (the setup's own value) instead of from 1: the same
/// answer for a monotone `fits`, without trying the short lengths when the setup fits.
fn search_max_from(start: u64, mut fits: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
    let start = start.clamp(1, crate::setup::MAX_SIZE);
    if start == 1 || !fits(start)? {
        if start == 1 {
            return search_max(fits);
        }
        // Below `start`: bisect 1..start.
        if !fits(1)? {
            return Ok(None);
        }
        let (mut lo, mut hi) = (1u64, start);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        return Ok(Some(lo));
    }
    let mut lo = start;
    let mut hi = start.saturating_mul(2);
    while hi <= crate::setup::MAX_SIZE && fits(hi)? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let mut hi = hi.min(crate::setup::MAX_SIZE + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// Largest `n` in 1..=2^24 with `fits(n)`, assuming `fits` is monotone.
pub(crate) fn search_max(mut fits: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
    if !fits(1)? {
        return Ok(None);
    }
    let mut lo = 1u64; // fits
    let mut hi = 2u64;
    while hi <= crate::setup::MAX_SIZE && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    let mut hi = hi.min(crate::setup::MAX_SIZE + 1); // does not fit (or beyond the range)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::describe::ResNet;

    /// cuDNN's workspaces for ResNet-50 over 64 fp32 images, as the H100 snapshot
    /// `resnet50-fp32-momentum-mb64.pickle` of the shared ground truth recorded them (PyTorch
    /// 2.11, cuDNN 9.19; the odd-sized blocks allocated and freed around each convolution).
    #[test]
    fn cudnn_workspace_is_the_nhwc_transposes() {
        let convs = ResNet::torchvision(50).unwrap().convs();
        let ws = |i: usize| cudnn_workspace(&convs[i], 64, 4);
        // The stem (7×7, stride 2): 36.75 MiB image + 196 MiB output + 36.75 KiB filter.
        // layer1.0.conv2 (3×3, 56×56), layer2.0.conv2 (3×3, stride 2), layer4.1.conv2 (3×3, 7×7).
        for (i, recorded) in [
            (0, 244_093_712u64),
            (2, 102_908_051),
            (12, 129_040_531),
            (48, 22_282_256),
        ] {
            assert!(
                ws(i).abs_diff(recorded) <= 200,
                "conv {i}: {} vs {recorded}",
                ws(i)
            );
        }
        // layer1.0's downsample (1×1, stride 1) recorded a 400-byte workspace.
        assert_eq!((convs[4].k, convs[4].stride), (1, 1));
        assert_eq!(ws(4), 0);
    }
}
