//! The step as a timeline: every allocation and free of a training or inference step, in order.
//!
//! [`estimate`] walks the step (setup, forward layer by layer, loss, backward layer by layer,
//! optimizer step; micro-batches and pipeline schedule included) through a [`Sink`] that keeps
//! the live bytes per [`Category`]. The peak is the true maximum of live bytes, and the
//! breakdown is taken at that moment. The same walk drives [`crate::trace`], which turns it
//! into individual tensors.
//!
//! What is stored for backward follows the saved tensors of the reference implementations
//! (Hugging Face `transformers` modelling code under PyTorch, Megatron-LM's fused kernels under
//! the Megatron style); for a GPT layer in half precision it reproduces Korthikanti et al.
//! 2022 exactly (`sbh(34 + 5as/h)` plus layer-norm statistics).

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::arch::{Act, Layout, Mlp, Model, Norm, ResNet, Transformer};
use crate::error::{Error, Result};
use crate::setup::{
    AmpStyle, Attention, Mode, Offload, Optimizer, Precision, Recompute, Schedule, Setup,
};

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
    /// Highest live bytes reached during the previous phase.
    pub high_bytes: u64,
}

/// The peak-tracking sink.
///
/// The breakdown at the peak is copied lazily: allocations only raise the total, so the state
/// at the end of a rising run (the first free after a new peak) is the state at that peak.
#[derive(Debug, Default)]
struct PeakSink {
    live: [u64; 13],
    total: u64,
    peak: u64,
    rising: bool,
    at_peak: [u64; 13],
    phase: Option<Phase>,
    peak_phase: Option<Phase>,
    phase_high: u64,
    timeline: Option<Vec<TimelinePoint>>,
}

impl PeakSink {
    fn settle(&mut self) {
        if self.rising {
            self.at_peak = self.live;
            self.rising = false;
        }
    }
}

impl Sink for PeakSink {
    #[inline]
    fn alloc(&mut self, h: Handle, _parts: &[u64]) {
        let c = &mut self.live[h.cat as usize];
        *c = c.saturating_add(h.bytes);
        self.total = self.total.saturating_add(h.bytes);
        if self.total > self.phase_high {
            self.phase_high = self.total;
        }
        if self.total > self.peak {
            self.peak = self.total;
            self.rising = true;
            self.peak_phase = self.phase;
        }
    }
    #[inline]
    fn free(&mut self, h: Handle) {
        self.settle();
        let c = &mut self.live[h.cat as usize];
        *c = c.saturating_sub(h.bytes);
        self.total = self.total.saturating_sub(h.bytes);
    }
    #[inline]
    fn phase(&mut self, p: Phase) {
        if let Some(t) = &mut self.timeline {
            t.push(TimelinePoint {
                phase: p,
                live_bytes: self.total,
                high_bytes: self.phase_high,
            });
        }
        self.phase_high = self.total;
        self.phase = Some(p);
    }
}

/// What one layer stores and needs, on one GPU, for one micro-batch.
#[derive(Debug, Clone, Copy, Default)]
struct LayerDesc {
    /// Saved tensors (bytes) without recomputation; `s2` marks the attention-score tensors.
    parts: Parts,
    /// `parts` summed: everything, and without the attention scores (selective recompute).
    saved_all: u64,
    saved_selective: u64,
    /// Bytes of the block input kept under full recomputation.
    checkpoint: u64,
    /// Extra bytes live at the layer's forward high point (not kept).
    fwd_tmp: u64,
    /// Extra bytes live at the layer's backward high point.
    bwd_tmp: u64,
    /// Parameter elements on this GPU.
    params: u64,
    /// Of which weights of matmuls/convolutions (copied to half under autocast).
    matmul_params: u64,
    /// Live bytes at the high point of an inference forward (nothing kept).
    infer_tmp: u64,
}

impl LayerDesc {
    fn with_totals(mut self) -> Self {
        self.saved_all = self.parts.total(false);
        self.saved_selective = self.parts.total(true);
        self
    }
    fn saved(&self, selective: bool) -> u64 {
        if selective {
            self.saved_selective
        } else {
            self.saved_all
        }
    }
}

/// Up to 32 saved tensors of a layer.
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    bytes: [u64; 32],
    s2: u32,
    n: u8,
}

impl Parts {
    fn push(&mut self, bytes: u64, s2: bool) {
        if bytes == 0 || self.n as usize >= self.bytes.len() {
            return;
        }
        if s2 {
            self.s2 |= 1 << self.n;
        }
        self.bytes[self.n as usize] = bytes;
        self.n += 1;
    }
    fn total(&self, selective: bool) -> u64 {
        let mut t = 0u64;
        for i in 0..self.n as usize {
            if !(selective && self.s2 & (1 << i) != 0) {
                t = t.saturating_add(self.bytes[i]);
            }
        }
        t
    }
    /// The tensors kept, as a list (for traces).
    fn list(&self, selective: bool) -> Vec<u64> {
        (0..self.n as usize)
            .filter(|i| !(selective && self.s2 & (1 << i) != 0))
            .map(|i| self.bytes[i])
            .collect()
    }
}

/// Saturating product, so absurd sizes become "does not fit" rather than overflow.
fn m(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |a, b| a.saturating_mul(*b))
}

/// Element sizes and geometry shared by all layers of one step.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    /// Tokens per micro-batch (`b · s`).
    tok: u64,
    b: u64,
    s: u64,
    t: u64,
    sp: bool,
    /// Bytes of the residual stream.
    res: u64,
    /// Bytes of matmul inputs/outputs.
    cmp: u64,
    /// Bytes of the stored eager softmax output.
    sdt: u64,
    attention: Attention,
    style: AmpStyle,
    training: bool,
}

impl Ctx {
    /// Bytes of a `[tokens, hidden]` tensor outside the tensor-parallel region.
    fn rep(&self, h: u64, bytes: u64) -> u64 {
        let v = m(&[self.tok, h, bytes]);
        if self.sp {
            v.div_ceil(self.t)
        } else {
            v
        }
    }
}

fn norm_parts(t: &Transformer, c: &Ctx, p: &mut Parts) {
    let per_token = if c.sp { c.tok.div_ceil(c.t) } else { c.tok };
    if c.style == AmpStyle::Megatron {
        // Fused LayerNorm/RMSNorm kernels keep the input and per-token statistics only.
        p.push(c.rep(t.hidden, c.res), false);
        p.push(m(&[per_token, 8]), false);
        return;
    }
    match t.norm {
        Norm::LayerNorm => {
            p.push(c.rep(t.hidden, c.res), false);
            p.push(m(&[per_token, 8]), false); // mean and rstd, fp32
        }
        Norm::RmsNorm => {
            // HF's RMSNorm: the fp32 view of the input, the normalised tensor, and rstd.
            p.push(c.rep(t.hidden, 4), false);
            p.push(c.rep(t.hidden, c.res), false);
            p.push(m(&[per_token, 4]), false);
        }
    }
}

/// An attention sub-block (norm, projections, core, output projection, dropout).
fn attention_parts(t: &Transformer, c: &Ctx, cross: bool, p: &mut Parts) -> (u64, u64) {
    let tp = c.t;
    let q_w = (t.heads * t.head_dim).div_ceil(tp);
    // HF repeats K/V to all heads (repeat_kv) before attention; Megatron's fused path does not.
    let kv_w = if c.style == AmpStyle::Megatron && c.attention == Attention::Sdpa {
        (t.kv_heads * t.head_dim).div_ceil(tp)
    } else {
        q_w
    };
    norm_parts(t, c, p);
    // Projection inputs. Under autocast each nn.Linear casts its fp32 input separately
    // (autocast caches casts of parameters, not of activations).
    let copies = if c.style == AmpStyle::Autocast && c.res != c.cmp && !t.fused_qkv && !cross {
        3
    } else {
        1
    };
    for _ in 0..copies {
        p.push(c.rep(t.hidden, c.cmp), false);
    }
    if cross {
        p.push(c.rep(t.hidden, c.cmp), false); // encoder output cast for K/V
    }
    p.push(m(&[c.tok, q_w, c.cmp]), false);
    p.push(m(&[c.tok, kv_w, c.cmp]), false);
    p.push(m(&[c.tok, kv_w, c.cmp]), false);
    let heads = t.heads.div_ceil(tp);
    let scores = m(&[c.b, heads, c.s, c.s]);
    let mut fwd_tmp = c.rep(t.hidden, 4);
    let mut bwd_core = 0;
    match c.attention {
        Attention::Eager => {
            p.push(m(&[scores, c.sdt]), true);
            if c.sdt != c.cmp {
                p.push(m(&[scores, c.cmp]), true);
            }
            if t.attention_dropout > 0.0 && c.training {
                p.push(scores, true);
                p.push(m(&[scores, c.cmp]), true);
            }
            fwd_tmp = fwd_tmp.max(m(&[scores, c.cmp, 2]));
            bwd_core = m(&[scores, c.cmp + c.sdt]);
        }
        Attention::Sdpa => {
            p.push(m(&[c.tok, q_w, c.cmp]), false); // output
            p.push(m(&[c.b, heads, c.s, 4]), false); // log-sum-exp
        }
    }
    p.push(m(&[c.tok, q_w, c.cmp]), false); // output projection input
    if t.hidden_dropout > 0.0 && c.training {
        p.push(c.rep(t.hidden, 1), false);
    }
    let bwd = bwd_core.max(m(&[c.tok, q_w + 2 * kv_w, c.cmp]));
    // Inference: input, normed input, q/k/v and the core's output or scores at once.
    let core = match c.attention {
        Attention::Eager => m(&[scores, c.sdt + c.cmp]),
        Attention::Sdpa => m(&[c.tok, q_w, c.cmp]),
    };
    let infer = c
        .rep(t.hidden, c.res + c.cmp)
        .saturating_add(m(&[c.tok, q_w + 2 * kv_w, c.cmp]))
        .saturating_add(core);
    (fwd_tmp.max(bwd), infer)
}

/// A feed-forward sub-block. Returns (backward extra, inference high point).
fn mlp_parts(t: &Transformer, c: &Ctx, shared_norm: bool, p: &mut Parts) -> (u64, u64) {
    if !shared_norm {
        norm_parts(t, c, p);
    }
    let autocast_casts = c.style == AmpStyle::Autocast && c.res != c.cmp;
    if !shared_norm || autocast_casts {
        // As for attention: separate gate and up projections cast their input separately.
        let copies = if autocast_casts && t.mlp == Mlp::Gated && !t.fused_gate_up {
            2
        } else {
            1
        };
        for _ in 0..copies {
            p.push(c.rep(t.hidden, c.cmp), false);
        }
    }
    let f = m(&[c.tok, t.intermediate.div_ceil(c.t), c.cmp]);
    let k = if t.experts > 1 {
        t.experts_per_token
    } else {
        1
    };
    let drop = t.hidden_dropout > 0.0 && c.training;
    // What the activation saves besides its input/output (fused kernels under Megatron).
    let act_extra = match (t.act, c.style) {
        (_, AmpStyle::Megatron) | (Act::Fused, _) => 0,
        (Act::ComposedTanh, _) => {
            // tanh output and 1 + tanh run in fp32 under autocast (pow is an fp32 op), 0.5·x in half.
            let up = if c.style == AmpStyle::Autocast && c.training && c.res == 4 {
                4
            } else {
                c.cmp
            };
            m(&[f / c.cmp, 2 * up + c.cmp])
        }
        (Act::QuickGelu, _) => f,
    };
    for _ in 0..k {
        match t.mlp {
            Mlp::Plain => {
                p.push(f, false); // activation input
                p.push(act_extra, false);
                p.push(f, false); // activation output, the second projection's input
            }
            Mlp::Relu => {
                p.push(f, false);
                if drop {
                    p.push(f / c.cmp, false);
                    p.push(f, false);
                }
            }
            Mlp::Gated => {
                // gate output, activation output, up output, their product
                for _ in 0..4 {
                    p.push(f, false);
                }
                p.push(act_extra, false);
            }
        }
    }
    if t.experts > 1 {
        // Router probabilities (fp32), then per routed copy: the gathered input and the output.
        p.push(m(&[c.tok, t.experts, 4]), false);
        p.push(m(&[c.tok, t.hidden, c.cmp, k]), false);
        p.push(m(&[c.tok, t.hidden, c.cmp, k]), false);
    }
    if drop {
        p.push(c.rep(t.hidden, 1), false);
    }
    let live = if t.mlp == Mlp::Gated { 3 } else { 2 };
    (
        m(&[f, live, k]),
        c.rep(t.hidden, c.res + c.cmp)
            .saturating_add(m(&[f, live, k])),
    )
}

fn transformer_layer(
    t: &Transformer,
    c: &Ctx,
    decoder_of_enc_dec: bool,
    params: u64,
    matmul: u64,
) -> LayerDesc {
    let mut p = Parts::default();
    let (attn_bwd, attn_inf) = attention_parts(t, c, false, &mut p);
    let (mut bwd, mut inf) = (attn_bwd, attn_inf);
    if decoder_of_enc_dec {
        let (b2, i2) = attention_parts(t, c, true, &mut p);
        bwd = bwd.max(b2);
        inf = inf.max(i2);
    }
    let shared = t.parallel_residual && t.norms_per_layer == 1;
    let (mlp_bwd, mlp_inf) = mlp_parts(t, c, shared, &mut p);
    for _ in 2..t.norms_per_layer {
        norm_parts(t, c, &mut p); // Gemma 2's post-norms
    }
    bwd = bwd.max(mlp_bwd);
    inf = inf.max(mlp_inf);
    let grads_in_out = 2 * c.rep(t.hidden, c.res);
    let mut bwd_tmp = grads_in_out.saturating_add(bwd);
    if c.style == AmpStyle::Autocast && c.cmp != 4 {
        // The half gradient of the largest weight before it is added to the fp32 `.grad`.
        let largest = t.hidden * t.intermediate.max(t.heads * t.head_dim).div_ceil(c.t);
        bwd_tmp = bwd_tmp.saturating_add(m(&[largest, c.cmp]));
    }
    LayerDesc {
        parts: p,
        checkpoint: c.rep(t.hidden, c.res),
        fwd_tmp: c
            .rep(t.hidden, c.res)
            .saturating_add(if c.attention == Attention::Eager {
                m(&[c.b, t.heads.div_ceil(c.t), c.s, c.s, c.cmp, 2])
            } else {
                c.rep(t.hidden, 4)
            }),
        bwd_tmp,
        params,
        matmul_params: matmul,
        infer_tmp: inf,
        ..LayerDesc::default()
    }
    .with_totals()
}

/// The layers of one pipeline rank, borrowed from the [`Step`].
#[derive(Debug, Clone, Copy)]
enum Stack<'s> {
    /// `counts[i]` layers of `kinds[i]`, in order (encoder then decoder for T5).
    Uniform {
        kinds: &'s [LayerDesc; 2],
        counts: [u64; 2],
    },
    /// Heterogeneous layers (CNNs).
    List(&'s [LayerDesc]),
}

impl Stack<'_> {
    fn len(&self) -> u64 {
        match self {
            Stack::Uniform { counts, .. } => counts[0] + counts[1],
            Stack::List(v) => v.len() as u64,
        }
    }
    fn get(&self, i: u64) -> &LayerDesc {
        match self {
            Stack::Uniform { kinds, counts } => &kinds[usize::from(i >= counts[0])],
            Stack::List(v) => &v[i as usize],
        }
    }
}

/// Bytes per element of each model state, by precision and style.
#[derive(Debug, Clone, Copy)]
struct StateBytes {
    weight: u64,
    grad: u64,
    master: u64,
    state: u64,
}

fn state_bytes(precision: Precision, style: AmpStyle) -> StateBytes {
    match precision {
        Precision::Fp32 => StateBytes {
            weight: 4,
            grad: 4,
            master: 0,
            state: 4,
        },
        Precision::Bf16 => StateBytes {
            weight: 2,
            grad: 2,
            master: 0,
            state: 2,
        },
        Precision::Fp16Amp | Precision::Bf16Amp => match style {
            AmpStyle::Autocast => StateBytes {
                weight: 4,
                grad: 4,
                master: 0,
                state: 4,
            },
            AmpStyle::DeepSpeed => StateBytes {
                weight: 2,
                grad: 2,
                master: 4,
                state: 4,
            },
            AmpStyle::Megatron => StateBytes {
                weight: 2,
                grad: 4,
                master: 4,
                state: 4,
            },
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
    /// Peak bytes of live tensors (what `torch.cuda.max_memory_allocated()` reports).
    pub peak_bytes: u64,
    /// Peak reserved by the caching allocator (`max_memory_reserved()`): peak plus overhead.
    pub reserved_bytes: u64,
    /// Device memory in use at the peak (reserved plus CUDA context), as `nvidia-smi` shows.
    pub total_bytes: u64,
    /// Bytes per category at the peak, overheads included; sums to `total_bytes`.
    pub breakdown: Breakdown,
    /// When the peak happens.
    pub peak_phase: Phase,
    /// The pipeline rank reported (0 without pipeline parallelism).
    pub pipeline_rank: u64,
    /// The mixed-precision layout used.
    pub amp_style: AmpStyle,
    /// The sampled timeline (empty unless asked for).
    pub timeline: Vec<TimelinePoint>,
}

impl Estimate {
    /// Whether `total_bytes` fits in `capacity` bytes.
    pub fn fits(&self, capacity: u64) -> bool {
        self.total_bytes <= capacity
    }
}

/// Everything derived from (model, setup) once, then walked per pipeline rank.
#[derive(Debug)]
pub(crate) struct Step<'a> {
    model: &'a Model,
    setup: &'a Setup,
    style: AmpStyle,
    bytes: StateBytes,
    ctx: Ctx,
    layer_kinds: [LayerDesc; 2],
    cnn: Vec<LayerDesc>,
    /// Parameters of the embedding / head on this GPU (after TP).
    emb_params: u64,
    head_params: u64,
    /// Saved bytes of the embedding block and of the head (final norm and projection input).
    emb_saved: u64,
    head_saved: u64,
    /// Logits `[tokens, vocab/t]` elements per micro-batch (0 without an LM head).
    logits: u64,
    /// Half copy of the output projection's weight under autocast.
    head_copy: u64,
    /// Optimizer state bytes per parameter element (without master weights), and a flat extra.
    opt_elems: f64,
}

impl<'a> Step<'a> {
    pub(crate) fn new(model: &'a Model, setup: &'a Setup) -> Result<Step<'a>> {
        setup.validate()?;
        let style = setup.amp_style();
        let bytes = state_bytes(setup.precision, style);
        let par = setup.parallel;
        let (b, s, training) = match setup.mode {
            Mode::Train(t) => (t.micro_batch, t.seq, true),
            Mode::Infer(i) => (i.batch, i.context, false),
        };
        let cmp = setup.precision.compute_bytes();
        let res = match (setup.precision, style) {
            (Precision::Fp32, _) => 4,
            (p, AmpStyle::Autocast) if p.is_amp() && training => 4,
            _ => 2,
        };
        let upcast = matches!(model, Model::Transformer(t) if t.softmax_upcast);
        let sdt = if cmp == 4
            || (style == AmpStyle::Autocast && training && setup.precision.is_amp())
            || (upcast && style != AmpStyle::Megatron)
        {
            4
        } else {
            cmp
        };
        let ctx = Ctx {
            tok: m(&[b, s]),
            b,
            s,
            t: par.tp,
            sp: par.sequence_parallel,
            res,
            cmp,
            sdt,
            attention: setup.attention,
            style,
            training,
        };
        let mut step = Step {
            model,
            setup,
            style,
            bytes,
            ctx,
            layer_kinds: [LayerDesc::default(); 2],
            cnn: Vec::new(),
            emb_params: 0,
            head_params: 0,
            emb_saved: 0,
            head_saved: 0,
            logits: 0,
            head_copy: 0,
            opt_elems: 0.0,
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
        if t.heads % tp != 0 {
            return Err(Error::NotDivisible {
                what: "--tp must divide the attention heads".into(),
                a: t.heads,
                b: tp,
            });
        }
        if t.kv_heads % tp != 0 && tp % t.kv_heads != 0 {
            return Err(Error::NotDivisible {
                what: "--tp and the key/value heads must divide one another".into(),
                a: t.kv_heads,
                b: tp,
            });
        }
        if t.intermediate % tp != 0 {
            return Err(Error::NotDivisible {
                what: "--tp must divide the feed-forward size".into(),
                a: t.intermediate,
                b: tp,
            });
        }
        let total_layers = t.layers + t.encoder_layers;
        if par.pp > total_layers {
            return Err(Error::Setup(format!(
                "--pp {} exceeds the model's {} layers",
                par.pp, total_layers
            )));
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
        let split = t.param_split();
        let local = |p: u64, replicated: u64| replicated + (p - replicated).div_ceil(tp);
        let dec_params = local(split.per_layer, split.per_layer_replicated);
        let enc_params = local(
            split.per_encoder_layer,
            split.per_layer_replicated.min(split.per_encoder_layer),
        );
        let c = self.ctx;
        let dec_matmul = dec_params.saturating_sub(split.per_layer_replicated);
        let enc_matmul = enc_params.saturating_sub(split.per_layer_replicated);
        let decoder = transformer_layer(
            t,
            &c,
            t.layout == Layout::EncoderDecoder,
            dec_params,
            dec_matmul,
        );
        let encoder = transformer_layer(t, &c, false, enc_params, enc_matmul);
        self.layer_kinds = [encoder, decoder];
        let vocab_emb = t.vocab * t.hidden;
        self.emb_params =
            split.embedding - vocab_emb + vocab_emb.div_ceil(tp) + split.relative_bias;
        let untied_head = if !t.tied_embeddings && t.layout != Layout::EncoderOnly {
            vocab_emb
        } else {
            0
        };
        self.head_params = split.head - untied_head + untied_head.div_ceil(tp);
        if par.pp > 1 && t.tied_embeddings && t.layout != Layout::EncoderOnly {
            // The last stage keeps its own copy of a tied embedding (Megatron).
            self.head_params += vocab_emb.div_ceil(tp);
        }
        let mut emb = Parts::default();
        if t.embedding_norm {
            norm_parts(t, &c, &mut emb);
        }
        if t.hidden_dropout > 0.0 && c.training {
            emb.push(c.rep(t.hidden, 1), false);
        }
        self.emb_saved = emb.total(false);
        if t.layout != Layout::EncoderOnly {
            let mut head = Parts::default();
            if t.final_norm {
                norm_parts(t, &c, &mut head);
            }
            head.push(c.rep(t.hidden, c.cmp), false);
            self.head_saved = head.total(false);
            self.logits = m(&[c.tok, t.vocab.div_ceil(tp)]);
            if self.autocast_copies() {
                // The output projection's weight cast to half, kept for its backward.
                self.head_copy = m(&[t.vocab.div_ceil(tp), t.hidden, c.cmp]);
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
            let out = m(&[b, conv.cout, conv.out_side, conv.out_side]);
            let mut p = Parts::default();
            if i == 0 {
                let img = m(&[b, 3, r.image_size, r.image_size]);
                p.push(m(&[img, c.cmp]), false); // the (cast) input image
                let pooled = m(&[b, 64, conv.out_side.div_ceil(2), conv.out_side.div_ceil(2)]);
                p.push(m(&[pooled, 8]), false); // max-pool indices (int64)
            }
            p.push(m(&[out, c.cmp]), false); // batch-norm input
            p.push(m(&[conv.cout, 8]), false); // batch-norm saved mean and invstd
            if conv.relu {
                p.push(m(&[out, c.cmp]), false); // ReLU output (next convolution's input)
            }
            let weights = conv.cin * conv.cout * conv.k * conv.k;
            self.cnn.push(
                LayerDesc {
                    parts: p,
                    checkpoint: m(&[out, c.cmp]),
                    fwd_tmp: m(&[out, c.cmp]),
                    bwd_tmp: m(&[out, c.cmp, 2]),
                    params: weights + 2 * conv.cout,
                    matmul_params: weights,
                    infer_tmp: m(&[out, c.cmp, 3]),
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
            Model::Transformer(t) => t.layers + t.encoder_layers,
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
            Model::Transformer(t) => {
                let enc_end = t.encoder_layers;
                let enc = enc_end.saturating_sub(first).min(count);
                Stack::Uniform {
                    kinds: &self.layer_kinds,
                    counts: [enc, count - enc],
                }
            }
            _ => Stack::List(&self.cnn[first as usize..(first + count) as usize]),
        }
    }

    /// Parameter elements this rank holds (after TP, before ZeRO).
    fn rank_params(&self, rank: u64, stack: &Stack) -> u64 {
        let p = self.setup.parallel.pp;
        let layers: u64 = match stack {
            Stack::Uniform { kinds, counts } => {
                kinds[0].params * counts[0] + kinds[1].params * counts[1]
            }
            Stack::List(v) => v.iter().map(|l| l.params).sum(),
        };
        layers
            + if rank == 0 { self.emb_params } else { 0 }
            + if rank == p - 1 { self.head_params } else { 0 }
    }

    /// Walks the step of pipeline rank `rank` through `sink`.
    pub(crate) fn walk<S: Sink>(&self, rank: u64, sink: &mut S, full: bool) {
        let par = self.setup.parallel;
        let stack = self.stack(rank);
        let params = self.rank_params(rank, &stack);
        let o = self.setup.overheads;
        sink.phase(Phase::Setup);
        let mut key = 1u64 << 60;
        let mut hold = |sink: &mut S, cat: Category, bytes: u64| {
            key += 1;
            let h = Handle { cat, bytes, key };
            if bytes > 0 {
                sink.alloc(h, &[]);
            }
            h
        };
        let ws = hold(sink, Category::Workspace, o.workspace_bytes);
        match self.setup.mode {
            Mode::Infer(inf) => {
                let w = hold(
                    sink,
                    Category::Parameters,
                    m(&[params, self.bytes.weight.min(self.ctx.cmp)]),
                );
                self.walk_inference(rank, &stack, inf.kv_bytes, sink);
                sink.free(w);
            }
            Mode::Train(tr) => {
                let n = par.dp;
                let z = par.zero;
                let b = self.bytes;
                let offload = tr.offload;
                let shard = |on: bool, v: u64| if on { v.div_ceil(n) } else { v };
                let w_bytes = if offload == Offload::Params {
                    0
                } else {
                    shard(z >= 3, m(&[params, b.weight]))
                };
                let on_host = offload != Offload::None;
                let master = if on_host {
                    0
                } else {
                    shard(z >= 1, m(&[params, b.master]))
                };
                let states = if on_host {
                    0
                } else {
                    shard(
                        z >= 1,
                        (params as f64 * self.opt_elems * b.state as f64) as u64,
                    )
                };
                let persistent_grads = self.style != AmpStyle::Autocast;
                let grads_full = m(&[params, b.grad]);
                let grads = if !persistent_grads || (on_host && z >= 2) {
                    0
                } else {
                    shard(z >= 2, grads_full)
                };
                let comm = if n > 1 {
                    match (self.style, z) {
                        (AmpStyle::Autocast, _) => grads_full, // DDP buckets, gradient_as_bucket_view=False
                        (AmpStyle::DeepSpeed, _) => m(&[params.min(500_000_000), b.grad]), // reduce bucket
                        (AmpStyle::Megatron, _) => 0,
                    }
                } else {
                    0
                };
                let held = [
                    hold(sink, Category::Parameters, w_bytes),
                    hold(sink, Category::MasterWeights, master),
                    hold(sink, Category::OptimizerStates, states),
                    hold(sink, Category::Gradients, grads),
                    hold(sink, Category::CommBuffers, comm),
                ];
                self.walk_training(rank, &stack, &tr, sink, full);
                sink.phase(Phase::Optimizer);
                let tmp = match (self.style, tr.optimizer) {
                    // torch.optim's foreach AdamW keeps one param-sized state temporary (sqrt of v).
                    (AmpStyle::Autocast, Optimizer::Adamw) => m(&[params, b.state]),
                    _ => 0,
                };
                let t = hold(sink, Category::Temporaries, tmp);
                if tmp > 0 {
                    sink.free(t);
                }
                if !persistent_grads {
                    // zero_grad(set_to_none=True) frees the gradients after the step.
                    self.free_layer_grads(rank, &stack, sink);
                }
                for h in held {
                    if h.bytes > 0 {
                        sink.free(h);
                    }
                }
            }
        }
        if ws.bytes > 0 {
            sink.free(ws);
        }
    }

    fn walk_inference<S: Sink>(&self, rank: u64, stack: &Stack, kv_bytes: u64, sink: &mut S) {
        let c = self.ctx;
        let kv = match self.model {
            Model::Transformer(t) => {
                let kv_local = t.kv_heads.div_ceil(c.t).max(1);
                m(&[2, stack.len(), c.b, c.s, kv_local, t.head_dim, kv_bytes])
            }
            _ => 0,
        };
        let kvh = Handle {
            cat: Category::KvCache,
            bytes: kv,
            key: 1 << 59,
        };
        if kv > 0 {
            sink.alloc(kvh, &[]);
        }
        for i in 0..stack.len() {
            sink.phase(Phase::Prefill { layer: i as u32 });
            let h = Handle {
                cat: Category::Activations,
                bytes: stack.get(i).infer_tmp,
                key: (1 << 59) | (i + 1),
            };
            sink.alloc(h, &[]);
            sink.free(h);
        }
        if rank == self.setup.parallel.pp - 1 && self.logits > 0 {
            // Generation keeps the last position's logits, cast to fp32 for sampling.
            let per_seq = self.logits / c.s.max(1);
            let h = Handle {
                cat: Category::Loss,
                bytes: m(&[per_seq, c.cmp + 4]),
                key: 1 << 57,
            };
            sink.alloc(h, &[]);
            sink.free(h);
        }
        if kv > 0 {
            sink.free(kvh);
        }
    }

    fn recomputed(&self, tr: &crate::setup::Train, i: u64) -> bool {
        tr.recompute == Recompute::Full && tr.recompute_layers.is_none_or(|k| i < k)
    }

    fn selective(&self, tr: &crate::setup::Train, i: u64) -> bool {
        tr.recompute == Recompute::Selective && tr.recompute_layers.is_none_or(|k| i < k)
    }

    /// Key of layer `i`'s gradients.
    fn grad_key(i: u64) -> u64 {
        (1 << 58) | (i << 2)
    }

    /// Key of the embedding's (`j = 0`) or the head's (`j = 1`) gradients.
    fn edge_grad_key(j: u64) -> u64 {
        (1 << 58) | (j + 1)
    }

    fn free_layer_grads<S: Sink>(&self, rank: u64, stack: &Stack, sink: &mut S) {
        let g = self.bytes.grad;
        for i in 0..stack.len() {
            sink.free(Handle {
                cat: Category::Gradients,
                bytes: m(&[stack.get(i).params, g]),
                key: Self::grad_key(i),
            });
        }
        for (j, p) in self.edge_params(rank).into_iter().enumerate() {
            if p > 0 {
                sink.free(Handle {
                    cat: Category::Gradients,
                    bytes: m(&[p, g]),
                    key: Self::edge_grad_key(j as u64),
                });
            }
        }
    }

    /// (embedding params, head params) present on `rank`.
    fn edge_params(&self, rank: u64) -> [u64; 2] {
        let last = self.setup.parallel.pp - 1;
        [
            if rank == 0 { self.emb_params } else { 0 },
            if rank == last { self.head_params } else { 0 },
        ]
    }

    /// The training micro-batches of one rank in schedule order: forwards and backwards.
    fn walk_training<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        sink: &mut S,
        full: bool,
    ) {
        let par = self.setup.parallel;
        let p = par.pp;
        let micro = tr.grad_accum;
        let (chunks, in_flight) = if p == 1 {
            (1, 1)
        } else {
            match par.schedule {
                Schedule::Gpipe => (1, micro),
                Schedule::OneFOneB => (1, (p - rank).min(micro)),
                Schedule::Interleaved(v) => {
                    (v, ((p - rank - 1) * 2 + (v - 1) * p + 1).min(micro * v))
                }
            }
        };
        let units = micro * chunks;
        // After `in_flight + 1` units the live set repeats; a peak-only walk stops there.
        let simulate = if full {
            units
        } else {
            units.min(in_flight + 1)
        };
        let per_chunk = stack.len().div_ceil(chunks);
        let mut grads_live = false;
        let (mut next_fwd, mut next_bwd) = (0u64, 0u64);
        while next_bwd < simulate {
            let can_fwd = next_fwd < simulate && next_fwd - next_bwd < in_flight;
            if can_fwd {
                self.forward_unit(rank, stack, tr, next_fwd, chunks, per_chunk, sink);
                next_fwd += 1;
            } else {
                self.backward_unit(
                    rank,
                    stack,
                    tr,
                    next_bwd,
                    chunks,
                    per_chunk,
                    !grads_live,
                    sink,
                );
                grads_live = true;
                next_bwd += 1;
            }
        }
    }

    fn unit_layers(
        &self,
        stack: &Stack,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
    ) -> (u64, u64, bool, bool) {
        let chunk = unit % chunks;
        let first = chunk * per_chunk;
        let end = (first + per_chunk).min(stack.len());
        (first, end, chunk == 0, chunk == chunks - 1)
    }

    /// Key of tensor group `slot` (< 64) of `layer` (< 2^25) in micro-batch `unit` (< 2^25).
    /// Layer-less groups (embedding, loss) use `layer` 0 and slots from 32 up.
    fn act_key(unit: u64, layer: u64, slot: u64) -> u64 {
        (unit << 32) | (layer << 6) | slot
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_unit<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
        sink: &mut S,
    ) {
        let (first, end, first_chunk, last_chunk) =
            self.unit_layers(stack, unit, chunks, per_chunk);
        let last_rank = rank == self.setup.parallel.pp - 1;
        let c = self.ctx;
        let autocast_copies =
            self.style == AmpStyle::Autocast && c.cmp != 4 && self.bytes.weight == 4;
        let zero3 = self.setup.parallel.zero == 3;
        if rank == 0 && first_chunk && self.emb_saved > 0 {
            sink.phase(Phase::Forward {
                micro: unit as u32,
                layer: 0,
            });
            sink.alloc(
                Handle {
                    cat: Category::Activations,
                    bytes: self.emb_saved,
                    key: Self::act_key(unit, 0, 40),
                },
                &[],
            );
        }
        for i in first..end {
            let l = stack.get(i);
            sink.phase(Phase::Forward {
                micro: unit as u32,
                layer: i as u32,
            });
            if autocast_copies {
                sink.alloc(
                    Handle {
                        cat: Category::WeightCopies,
                        bytes: m(&[l.matmul_params, c.cmp]),
                        key: Self::act_key(unit, i, 1),
                    },
                    &[],
                );
            }
            let gathered = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.params, self.bytes.weight, 2]),
                key: Self::act_key(unit, i, 2),
            };
            if zero3 {
                sink.alloc(gathered, &[]); // this layer and the prefetched next one
            }
            let saved = self.saved_handle(tr, unit, i, l);
            let parts = if S::WANTS_PARTS && !self.recomputed(tr, i) {
                l.parts.list(self.selective(tr, i))
            } else {
                Vec::new()
            };
            sink.alloc(saved, &parts);
            let tmp = Handle {
                cat: Category::Temporaries,
                bytes: if self.recomputed(tr, i) {
                    l.saved_all.saturating_add(l.fwd_tmp)
                } else {
                    l.fwd_tmp
                },
                key: Self::act_key(unit, i, 3),
            };
            sink.alloc(tmp, &[]);
            sink.free(tmp);
            if zero3 {
                sink.free(gathered);
            }
        }
        if last_rank && last_chunk {
            sink.phase(Phase::Loss { micro: unit as u32 });
            self.loss_forward(unit, sink);
            if autocast_copies && self.style == AmpStyle::Autocast {
                // Leaving autocast clears its cast cache: copies of recomputed layers go.
                for i in first..end {
                    if self.recomputed(tr, i) {
                        let l = stack.get(i);
                        sink.free(Handle {
                            cat: Category::WeightCopies,
                            bytes: m(&[l.matmul_params, c.cmp]),
                            key: Self::act_key(unit, i, 1),
                        });
                    }
                }
            }
        }
    }

    fn saved_handle(&self, tr: &crate::setup::Train, unit: u64, i: u64, l: &LayerDesc) -> Handle {
        if self.recomputed(tr, i) {
            Handle {
                cat: Category::Activations,
                bytes: l.checkpoint,
                key: Self::act_key(unit, i, 8),
            }
        } else {
            Handle {
                cat: Category::Activations,
                bytes: l.saved(self.selective(tr, i)),
                key: Self::act_key(unit, i, 4),
            }
        }
    }

    fn loss_keys(unit: u64) -> [u64; 6] {
        std::array::from_fn(|j| Self::act_key(unit, 0, 32 + j as u64))
    }

    fn loss_forward<S: Sink>(&self, unit: u64, sink: &mut S) {
        let k = Self::loss_keys(unit);
        let c = self.ctx;
        sink.alloc(
            Handle {
                cat: Category::Activations,
                bytes: self.head_saved,
                key: k[0],
            },
            &[],
        );
        if self.logits == 0 {
            return;
        }
        let logits = Handle {
            cat: Category::Loss,
            bytes: m(&[self.logits, c.cmp]),
            key: k[1],
        };
        sink.alloc(logits, &[]);
        let upcast = Handle {
            cat: Category::Loss,
            bytes: m(&[self.logits, 4]),
            key: k[2],
        };
        if c.cmp != 4 {
            sink.alloc(upcast, &[]);
        }
        sink.alloc(
            Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, 4]),
                key: k[3],
            },
            &[],
        ); // log-softmax
        if c.cmp != 4 {
            sink.free(upcast);
        }
        sink.free(logits); // the training loop drops the model output before backward
    }

    fn loss_backward<S: Sink>(&self, unit: u64, sink: &mut S) {
        let k = Self::loss_keys(unit);
        let c = self.ctx;
        if self.logits > 0 {
            let f32b = m(&[self.logits, 4]);
            let g1 = Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[4],
            };
            let g2 = Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[5],
            };
            sink.alloc(g1, &[]);
            sink.alloc(g2, &[]);
            sink.free(g1);
            sink.free(Handle {
                cat: Category::Loss,
                bytes: f32b,
                key: k[3],
            });
            let g3 = Handle {
                cat: Category::Loss,
                bytes: m(&[self.logits, c.cmp]),
                key: k[1],
            };
            if c.cmp != 4 {
                sink.alloc(g3, &[]);
            }
            sink.free(g2);
            if c.cmp != 4 {
                sink.free(g3);
            }
        }
        sink.free(Handle {
            cat: Category::Activations,
            bytes: self.head_saved,
            key: k[0],
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn backward_unit<S: Sink>(
        &self,
        rank: u64,
        stack: &Stack,
        tr: &crate::setup::Train,
        unit: u64,
        chunks: u64,
        per_chunk: u64,
        first_time: bool,
        sink: &mut S,
    ) {
        let (first, end, first_chunk, last_chunk) =
            self.unit_layers(stack, unit, chunks, per_chunk);
        let last_rank = rank == self.setup.parallel.pp - 1;
        let c = self.ctx;
        let g = self.bytes.grad;
        let lazy_grads = self.style == AmpStyle::Autocast && (first_time || unit < chunks);
        let autocast_copies =
            self.style == AmpStyle::Autocast && c.cmp != 4 && self.bytes.weight == 4;
        let zero3 = self.setup.parallel.zero == 3;
        let [emb_p, head_p] = self.edge_params(rank);
        if last_rank && last_chunk {
            sink.phase(Phase::Loss { micro: unit as u32 });
            if lazy_grads && head_p > 0 {
                sink.alloc(
                    Handle {
                        cat: Category::Gradients,
                        bytes: m(&[head_p, g]),
                        key: Self::edge_grad_key(1),
                    },
                    &[],
                );
            }
            self.loss_backward(unit, sink);
        }
        for i in (first..end).rev() {
            let l = stack.get(i);
            sink.phase(Phase::Backward {
                micro: unit as u32,
                layer: i as u32,
            });
            let gathered = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.params, self.bytes.weight, 2]),
                key: Self::act_key(unit, i, 2),
            };
            if zero3 {
                sink.alloc(gathered, &[]);
            }
            let recomputed = self.recomputed(tr, i);
            let copies = Handle {
                cat: Category::WeightCopies,
                bytes: m(&[l.matmul_params, c.cmp]),
                key: Self::act_key(unit, i, 1),
            };
            let re = Handle {
                cat: Category::Activations,
                bytes: l.saved_all,
                key: Self::act_key(unit, i, 5),
            };
            if recomputed {
                if autocast_copies {
                    sink.alloc(copies, &[]);
                }
                sink.alloc(
                    re,
                    &if S::WANTS_PARTS {
                        l.parts.list(false)
                    } else {
                        Vec::new()
                    },
                );
            }
            if lazy_grads {
                sink.alloc(
                    Handle {
                        cat: Category::Gradients,
                        bytes: m(&[l.params, g]),
                        key: Self::grad_key(i),
                    },
                    &[],
                );
            }
            let tmp = Handle {
                cat: Category::Temporaries,
                bytes: l.bwd_tmp,
                key: Self::act_key(unit, i, 6),
            };
            sink.alloc(tmp, &[]);
            sink.free(tmp);
            sink.free(self.saved_handle(tr, unit, i, l));
            if recomputed {
                sink.free(re);
            }
            if autocast_copies {
                sink.free(copies);
            }
            if zero3 {
                sink.free(gathered);
            }
        }
        if rank == 0 && first_chunk {
            if lazy_grads && emb_p > 0 {
                sink.alloc(
                    Handle {
                        cat: Category::Gradients,
                        bytes: m(&[emb_p, g]),
                        key: Self::edge_grad_key(0),
                    },
                    &[],
                );
            }
            if self.emb_saved > 0 {
                sink.free(Handle {
                    cat: Category::Activations,
                    bytes: self.emb_saved,
                    key: Self::act_key(unit, 0, 40),
                });
            }
        }
    }
}

/// Optimizer state elements per parameter (excluding master weights).
fn optimizer_elems(model: &Model, opt: Optimizer) -> f64 {
    match opt {
        Optimizer::Sgd => 0.0,
        Optimizer::Momentum => 1.0,
        Optimizer::Adamw => 2.0,
        // Two 1-byte states and one fp32 scale per 2048-element block each (bitsandbytes),
        // expressed in 4-byte state elements.
        Optimizer::Adam8bit => (2.0 + 8.0 / 2048.0) / 4.0,
        Optimizer::Adafactor => match model {
            Model::Transformer(t) => {
                let tensors = t.param_tensors();
                let factored: u64 = tensors
                    .iter()
                    .map(|p| {
                        if p.cols > 1 && p.rows > 1 {
                            (p.rows + p.cols) * p.count
                        } else {
                            p.numel()
                        }
                    })
                    .sum();
                factored as f64 / t.param_count().max(1) as f64
            }
            // Convolution kernels are factored over their first two dimensions; close to zero.
            _ => 0.01,
        },
    }
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
    run(model, setup, false)
}

/// Like [`estimate`], also sampling the timeline at every phase.
pub fn estimate_with_timeline(model: &Model, setup: &Setup) -> Result<Estimate> {
    run(model, setup, true)
}

fn run(model: &Model, setup: &Setup, timeline: bool) -> Result<Estimate> {
    let step = Step::new(model, setup)?;
    let p = setup.parallel.pp;
    let ranks: &[u64] = if p == 1 { &[0] } else { &[0, p - 1] };
    let mut best: Option<(u64, PeakSink)> = None;
    for &rank in ranks {
        let mut sink = PeakSink {
            timeline: timeline.then(Vec::new),
            ..PeakSink::default()
        };
        step.walk(rank, &mut sink, timeline);
        sink.settle();
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
    let mut breakdown = Breakdown(sink.at_peak);
    let peak = sink.peak;
    let o = setup.overheads;
    let overhead = (peak as f64 * o.fragmentation) as u64;
    breakdown.0[Category::AllocatorOverhead as usize] = overhead;
    breakdown.0[Category::CudaContext as usize] = o.cuda_context_bytes;
    let stack = step.stack(rank);
    Ok(Estimate {
        model: model.name().to_string(),
        params: model.param_count(),
        params_per_gpu: step.rank_params(rank, &stack),
        peak_bytes: peak,
        reserved_bytes: peak.saturating_add(overhead),
        total_bytes: peak
            .saturating_add(overhead)
            .saturating_add(o.cuda_context_bytes),
        breakdown,
        peak_phase: sink.peak_phase.unwrap_or(Phase::Setup),
        pipeline_rank: rank,
        amp_style: step.style,
        timeline: sink.timeline.unwrap_or_default(),
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
        Model::Transformer(_) => step.layer_kinds[1],
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
    if t.layout == Layout::EncoderDecoder {
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
    let l = step.layer_kinds[1];
    let autocast = step.style == AmpStyle::Autocast;
    let copies = autocast && step.ctx.cmp != 4 && step.bytes.weight == 4;
    let g = if autocast { step.bytes.grad } else { 0 };
    Ok(ChainBytes {
        layers: t.layers,
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
        head_forward_tmp: m(&[step.logits, step.ctx.cmp])
            + if step.ctx.cmp != 4 {
                m(&[step.logits, 4])
            } else {
                0
            },
        head_backward_tmp: m(&[step.logits, 4, 2]),
    })
}

/// The largest micro-batch (training) or batch (inference) whose estimate fits `capacity`.
///
/// Returns `Ok(None)` when not even 1 fits.
pub fn max_batch(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<u64>> {
    let with = |n: u64| -> Result<bool> {
        let mut s = *setup;
        match &mut s.mode {
            Mode::Train(t) => t.micro_batch = n,
            Mode::Infer(i) => i.batch = n,
        }
        Ok(estimate(model, &s)?.fits(capacity))
    };
    search_max(with)
}

/// The longest context (inference) whose estimate fits `capacity` at the setup's batch.
pub fn max_context(model: &Model, setup: &Setup, capacity: u64) -> Result<Option<u64>> {
    let with = |n: u64| -> Result<bool> {
        let mut s = *setup;
        if let Mode::Infer(i) = &mut s.mode {
            i.context = n;
        }
        Ok(estimate(model, &s)?.fits(capacity))
    };
    search_max(with)
}

/// Largest `n` in 1..=2^24 with `fits(n)`, assuming `fits` is monotone.
fn search_max(mut fits: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
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
