//! One LoRA/QLoRA training step as PEFT 0.21.2, bitsandbytes 0.50.2 and TRL 1.16.0's
//! `SFTTrainer` run it: a frozen base, adapters and their optimizer states, gradient
//! checkpointing (TRL's default), the fused LM head, and the quantized matmuls' temporaries.
//!
//! The step is written as a list of allocations and frees (one tensor or a few per event), walked
//! for the peak of live tensor bytes with its breakdown, and replayed through the caching
//! allocator model (`vram_alloc`) for the reserved bytes, over three steps as a training script
//! runs them (the optimizer states appear in the first step; peaks reset after it).

use serde::Serialize;

use super::{lora, weights_bytes_loaded, LoraPlan, LoraSpec, SiteKind, WeightFormat, WeightsBytes};
use crate::describe::Model;
use crate::error::{Error, Result};
use crate::setup::{Allocator, Mode, Optimizer, Precision, Recompute, Setup};
use crate::walk::replay::CallsBuilder;
use crate::walk::{chain_bytes, Breakdown, Category};

/// Full fine-tuning, LoRA on a half-precision base, or QLoRA on a quantized base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Every parameter trains (the ordinary estimate).
    Full,
    /// PEFT LoRA adapters on a frozen bf16/fp16/fp32 base.
    Lora,
    /// PEFT LoRA adapters on a frozen bitsandbytes int8/NF4/FP4 base.
    Qlora,
}

impl Method {
    /// Parses `--finetune`.
    pub fn parse(s: &str) -> Result<Method> {
        match s {
            "full" => Ok(Method::Full),
            "lora" => Ok(Method::Lora),
            "qlora" => Ok(Method::Qlora),
            _ => Err(Error::Setup(format!(
                "--finetune {s}: expected full, lora or qlora"
            ))),
        }
    }
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Method::Full => "full",
            Method::Lora => "lora",
            Method::Qlora => "qlora",
        }
    }
}

/// What a fine-tuning run is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinetuneSpec {
    /// Full, LoRA or QLoRA.
    pub method: Method,
    /// The base's storage.
    pub weights: WeightFormat,
    /// bitsandbytes 4-bit double quantization (`bnb_4bit_use_double_quant`).
    pub double_quant: bool,
    /// The adapters.
    pub lora: LoraSpec,
    /// `llm_int8_skip_modules`.
    pub skip_modules: Vec<String>,
    /// `peft.prepare_model_for_kbit_training` was called on the quantized base (TRL's
    /// `SFTTrainer` does not call it; PEFT's QLoRA examples do).
    pub prepare_kbit: bool,
    /// The checkpoint loads in float32 (a float32 config under transformers 5.24's
    /// `from_pretrained(dtype="auto")`, whose bitsandbytes quantizer keeps the dtype it is
    /// given: `HfQuantizer.update_dtype`): what a quantized base leaves unpacked (embedding,
    /// norms, biases, head, routers, fused experts) is fp32, and so is the residual stream
    /// (`Linear4bit.forward` returns its input's dtype). No effect on an unquantized base.
    pub load_fp32: bool,
    /// Gradient checkpointing (TRL's `SFTConfig` default: on, non-reentrant).
    pub gradient_checkpointing: bool,
}

impl FinetuneSpec {
    /// Checks the combination; one line for each refusal.
    pub fn validate(&self) -> Result<()> {
        match (self.method, self.weights.is_quantized()) {
            (Method::Full, true) => Err(Error::Setup(format!(
                "--weights {} with --finetune full: a quantized base cannot be trained (its packed weights take no gradients); use --finetune qlora, or --weights bf16",
                self.weights.name()
            ))),
            (Method::Lora, true) => Err(Error::Setup(format!(
                "--finetune lora with --weights {}: adapters on a quantized base are QLoRA; use --finetune qlora",
                self.weights.name()
            ))),
            (Method::Qlora, _)
                if !matches!(
                    self.weights,
                    WeightFormat::Int8 | WeightFormat::Nf4 | WeightFormat::Fp4
                ) =>
            {
                Err(Error::Setup(format!(
                    "--finetune qlora trains on a bitsandbytes base: --weights nf4, fp4 or int8 (not {})",
                    self.weights.name()
                )))
            }
            _ if self.double_quant && !self.weights.is_bnb_4bit() => Err(Error::Setup(format!(
                "--double-quant applies to bitsandbytes 4-bit (--weights nf4 or fp4), not {}",
                self.weights.name()
            ))),
            _ => Ok(()),
        }
    }
}

/// The estimate of one LoRA/QLoRA step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinetuneEstimate {
    /// Model name.
    pub model: String,
    /// Parameters of the unquantized model.
    pub params: u64,
    /// The adapters' parameters.
    pub trainable_params: u64,
    /// The base's storage.
    pub weights: WeightsBytes,
    /// Bytes per adapter element (4: PEFT's fp32 default; 2: TRL's bf16 cast on a quantized base).
    pub adapter_bytes: u64,
    /// Peak of live tensor bytes (no allocator rounding).
    pub peak_tensor_bytes: u64,
    /// Peak allocated as `max_memory_allocated()` reports it (allocator blocks, from the replay).
    pub peak_bytes: u64,
    /// Peak reserved (`max_memory_reserved()`), from the replay on a device with room to cache
    /// every segment.
    pub reserved_bytes: u64,
    /// The smallest device (less the CUDA context) the replay runs on: where a `cudaMalloc`
    /// fails, PyTorch releases its idle cached segments and retries, so a step can run in less
    /// than it reserves with room (as [`crate::walk::Estimate::needed_bytes`]).
    pub needed_bytes: u64,
    /// Needed plus the CUDA context: what the device must have.
    pub total_bytes: u64,
    /// Bytes per category at the peak; sums to `total_bytes`.
    #[serde(skip)]
    pub breakdown: Breakdown,
    /// Where the peak happens.
    pub peak_phase: String,
    /// The adapters.
    pub plan: LoraPlan,
    /// What autograd saves for each adapter of the first layer (path, bytes per micro-batch)
    /// when the layer runs with saving on: the adapters' own tensors and, on expert banks, the
    /// W+ΔW the parametrization builds.
    pub adapter_saved: Vec<(String, u64)>,
    /// What the first layer, frozen, does not save that full training's saves (bytes per
    /// micro-batch).
    pub frozen_layer_discount: u64,
    /// What the libraries do that a user would not expect, as the estimate follows it.
    pub notes: Vec<String>,
    /// The library code the estimate follows.
    pub assumes: Vec<&'static str>,
}

impl FinetuneEstimate {
    /// Whether `total_bytes` fits in `capacity`.
    pub fn fits(&self, capacity: u64) -> bool {
        self.total_bytes <= capacity
    }
}

/// The library code this estimate follows (printed under `assumes`).
pub const ASSUMES: [&str; 9] = [
    "peft 0.21.2 get_peft_model(autocast_adapter_dtype=True): fp32 adapters (tuners_utils.py::cast_adapter_dtype)",
    "peft 0.21.2 lora/layer.py::Linear.forward: x cast to the adapter dtype, lora_B(lora_A(dropout(x)))",
    "peft 0.21.2 lora/layer.py::ParamWrapper: W+ΔW of the whole expert bank per forward",
    "peft 0.21.2 utils/other.py::prepare_model_for_kbit_training: non-4-bit half params cast to fp32",
    "bitsandbytes 0.50.2 functional.quantize_4bit (blocksize 64, nested 256) / Int8Params (SCB)",
    "bitsandbytes 0.50.2 backends/cuda/ops.py gemm_4bit: dequantized weight above 1536 tokens; MatMul4Bit backward dequantizes",
    "transformers 5.24 integrations/bitsandbytes.py: nn.Linear/Conv1D only; head, routers, fused experts unquantized",
    "trl 1.16.0 SFTConfig: gradient_checkpointing=True (non-reentrant), bf16=True, adamw_torch_fused; QLoRA adapters cast to bf16",
    "trl 1.16.0 add_fused_lm_head / ChunkedLogProbFunction: 4096-token × 32768-vocab tiles, no full logits",
];

#[derive(Debug, Clone)]
enum Ev {
    Alloc(u64, Category, Vec<u64>),
    Free(u64),
    Phase(String),
}

struct Tape(Vec<Ev>, u64);

impl Tape {
    fn alloc(&mut self, cat: Category, parts: Vec<u64>) -> u64 {
        self.1 += 1;
        let parts: Vec<u64> = parts.into_iter().filter(|&p| p > 0).collect();
        self.0.push(Ev::Alloc(self.1, cat, parts));
        self.1
    }
    fn free(&mut self, k: u64) {
        self.0.push(Ev::Free(k));
    }
    fn phase(&mut self, p: String) {
        self.0.push(Ev::Phase(p));
    }
}

/// One adapted layer's tensors, per micro-batch of `tok` tokens.
#[derive(Debug, Default, Clone)]
struct LayerAdapters {
    /// What autograd saves for the adapters (and expert banks' W+ΔW) when the layer runs with
    /// saving on.
    saved: u64,
    /// The largest transient of one adapted or quantized linear (dequantized weight, input casts).
    tmp_fwd: u64,
    tmp_bwd: u64,
    /// The transient of the layer's last linear (the down projection), alive with
    /// `fwd_locals`.
    tmp_fwd_last: u64,
    /// What a frozen layer's forward still holds, unsaved, when it reaches its last projection,
    /// tensor by tensor (see [`forward_locals`]).
    fwd_locals: Vec<u64>,
    /// Autocast's half copies of the layer's frozen fp32 linear weights, one per linear (an
    /// fp32 base under autocast; empty otherwise): what the layer keeps while it runs with
    /// saving on.
    copies: Vec<u64>,
    /// The layer's intermediate size (dense MLP; 0 otherwise).
    inter: u64,
    /// Adapter parameter tensors of the layer (element counts).
    tensors: Vec<u64>,
    /// What each adapted site adds to `saved`, in module order.
    per_site: Vec<(String, u64)>,
    /// What a frozen layer does not save that full training's layer does (see
    /// [`frozen_discount`]).
    discount: u64,
}

/// Bytes full training's layer saves that a frozen one does not, per micro-batch of `tok`
/// tokens: autograd keeps a matmul's input only for its weight's gradient, and the norm
/// product `weight * x` of transformers' RMSNorm (Llama, Mistral, Qwen2, Phi-3) only for the
/// weight's. So a frozen attention + dense-MLP layer drops the normed input of q/k/v, the normed
/// input of the MLP, the input of the down projection and one normed product per RMSNorm
/// (measured on the CPU: `tests/engines/test_lora_saved.py`). The attention output that the
/// output projection reads is kept (the attention kernel saves it too); other layer kinds get
/// no discount (their saved tensors stay an upper bound).
fn frozen_discount(
    t: &crate::describe::Transformer,
    b: &crate::describe::Block,
    tok: u64,
    cmp: u64,
) -> u64 {
    let (crate::describe::Mixer::Attention(_), crate::describe::Ffn::Dense(dense)) =
        (b.mixer, b.ffn)
    else {
        return 0;
    };
    let h = t.hidden();
    let norm = b.norms.norm;
    let norms = if norm.kind == crate::describe::NormKind::RmsNorm && !norm.fp32_product {
        b.norms.count
    } else {
        0
    };
    tok * cmp * (2 * h + dense.intermediate + norms * h)
}

/// The tensors a frozen layer saves, one per allocation: full training's (`parts`) less the
/// ones [`frozen_discount`] names (one intermediate-sized, the rest hidden-sized), then what the
/// adapters save, one allocation per site. Where the list does not hold the discounted
/// tensors, the base's saved bytes are one block.
fn frozen_parts(
    parts: &[u64],
    layer_saved: u64,
    la: &LayerAdapters,
    hid: u64,
    inter: u64,
) -> Vec<u64> {
    let mut v = parts.to_vec();
    let mut left = la.discount;
    if la.discount > 0 && inter > 0 && (la.discount - inter) % hid == 0 {
        let mut want = vec![inter];
        want.extend(std::iter::repeat_n(
            hid,
            ((la.discount - inter) / hid) as usize,
        ));
        for w in want {
            if let Some(j) = v.iter().position(|&b| b == w) {
                v.remove(j);
                left -= w;
            }
        }
    }
    if left != 0 || v.iter().sum::<u64>() != layer_saved.saturating_sub(la.discount) {
        v = vec![layer_saved.saturating_sub(la.discount)];
    }
    v.extend(la.per_site.iter().map(|(_, b)| *b));
    let extra = la.saved - la.per_site.iter().map(|(_, b)| *b).sum::<u64>();
    v.push(extra);
    v
}

/// The intermediate size of the model's dense MLPs, where its layers have one.
fn typical_intermediate(t: &crate::describe::Transformer) -> Option<u64> {
    t.blocks.kinds.iter().find_map(|k| match k.ffn {
        crate::describe::Ffn::Dense(d) => Some(d.intermediate),
        _ => None,
    })
}

/// What a frozen attention + dense-MLP layer's forward holds, beyond what it saves, when it
/// reaches its down projection (its high point when checkpointing recomputes it, since every
/// saved tensor of the layer exists by then): the residual after attention (the decoder layer's
/// `residual` local), the down projection's base output, and, when the adapters read copies of
/// their inputs rather than the inputs themselves (fp32 adapters: PEFT's `_cast_input_dtype`;
/// dropout), the MLP's normed input and the gate·up product, which nothing saves but the MLP's
/// `forward` still holds. `res`: bytes of an element of the residual stream (and of the norms'
/// outputs); `act`: of what a linear returns (bf16 under autocast over fp32 weights, where the
/// stream is fp32). Measured on the meta device with the real libraries:
/// `tests/engines/qlora_peak.py --lora` (Llama-3.2-1B, 4 × 2048, the peak at the last layer's
/// recomputed down projection, within 0.1 % of the H200's `max_memory_allocated()`).
fn forward_locals(
    t: &crate::describe::Transformer,
    b: &crate::describe::Block,
    tok: u64,
    res: u64,
    act: u64,
    adapters_copy_x: bool,
) -> Vec<u64> {
    let (crate::describe::Mixer::Attention(_), crate::describe::Ffn::Dense(dense)) =
        (b.mixer, b.ffn)
    else {
        return Vec::new();
    };
    let hid = tok * res * t.hidden();
    let mut v = vec![hid, tok * act * t.hidden()];
    if adapters_copy_x {
        v.extend([hid, tok * act * dense.intermediate]);
    }
    v
}

/// Estimates one LoRA/QLoRA step of `model` under `setup` (its micro-batch, sequence,
/// accumulation, optimizer, attention, overheads, allocator).
pub fn estimate(model: &Model, setup: &Setup, spec: &FinetuneSpec) -> Result<FinetuneEstimate> {
    step(model, setup, spec, Replay::Full)
}

/// The largest micro-batch whose step fits `capacity` per [`estimate`]'s own verdict, with
/// what was checked, as `vram estimate`'s micro-batch search
/// ([`crate::walk::settled_largest`]): the next size does not fit, every larger one up to the
/// peak walk's bound is tried where they are at most [`crate::walk::SCAN`], and the
/// [`crate::walk::BELOW`] sizes under the answer are estimated. What the step needs is not
/// monotone in the micro-batch (best fit splits cached segments differently for each size, so
/// a backward transient can find no free block at one size and one at the next; BENCHMARKS.md),
/// so the search does not assume it is. `Ok(None)`: not even 1 fits.
pub fn largest_micro_batch(
    model: &Model,
    setup: &Setup,
    spec: &FinetuneSpec,
    capacity: u64,
) -> Result<Option<crate::walk::Largest>> {
    let at = |n: u64| -> Setup {
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            t.micro_batch = n;
        }
        s
    };
    // The peak of live tensors grows with the micro-batch (every tensor does) and the device
    // total is at least it plus the CUDA context: nothing above the largest size this walk
    // (no replay) accepts fits.
    let context = setup.overheads.cuda_context_bytes;
    let Some(top) = crate::walk::search_max(|n| {
        Ok(step(model, &at(n), spec, Replay::Walk)?
            .peak_tensor_bytes
            .saturating_add(context)
            <= capacity)
    })?
    else {
        return Ok(None);
    };
    crate::walk::settled_largest(Some(top), top, true, |n| {
        Ok(step(model, &at(n), spec, Replay::Verdict(capacity))?.fits(capacity))
    })
}

/// How far [`step`] takes the allocator.
#[derive(Clone, Copy)]
enum Replay {
    /// No replay: the allocator figures are the walk's peak (a lower bound, for the
    /// micro-batch search's bound).
    Walk,
    /// [`estimate`]'s figures: the replay with room and the needed bytes' whole bisection.
    Full,
    /// Only [`FinetuneEstimate::fits`] on a device of this many bytes is asked: the needed
    /// bytes' bisection stops once its bounds settle which side of the device it falls on
    /// ([`replay`]), so the verdict is [`estimate`]'s and the figures are not.
    Verdict(u64),
}

/// The step of [`estimate`], its allocator taken as far as `replay` says.
fn step(
    model: &Model,
    setup: &Setup,
    spec: &FinetuneSpec,
    replay_allocator: Replay,
) -> Result<FinetuneEstimate> {
    spec.validate()?;
    let Model::Transformer(t) = model else {
        return Err(Error::Setup(
            "LoRA/QLoRA is modelled for transformers (config.json or a catalog id)".into(),
        ));
    };
    if spec.method == Method::Full {
        return Err(Error::Setup(
            "full fine-tuning is the ordinary estimate".into(),
        ));
    }
    let Mode::Train(tr) = setup.mode else {
        return Err(Error::Setup(
            "--finetune lora/qlora is a training step; drop --inference".into(),
        ));
    };
    let par = setup.parallel;
    if par.tp > 1 || par.pp > 1 || par.zero > 0 {
        return Err(Error::Setup(
            "--finetune lora/qlora is modelled on one GPU per data-parallel replica (DDP): drop --tp, --pp and --zero".into(),
        ));
    }
    let plan = lora(t, &spec.lora)?;
    let quantized = spec.weights.is_quantized();
    // Bytes of one element of what the base holds unpacked: fp32 where a quantized base's
    // checkpoint loads in float32 (`FinetuneSpec::load_fp32`).
    let d = if quantized && spec.load_fp32 {
        4
    } else {
        spec.weights.dense_bytes()
    };
    let w = weights_bytes_loaded(t, spec.weights, spec.double_quant, &spec.skip_modules, d);
    let storage = super::base_storage(t, spec.weights, spec.double_quant);
    let mut notes = plan.notes.clone();
    // TRL casts the trainable parameters of a quantized model to bf16 after get_peft_model.
    let adapter_bytes = if quantized { 2 } else { 4 };
    if quantized {
        notes.push("TRL's SFTTrainer casts the adapters of a quantized base to bf16 (QLoRA paper's recipe), so their AdamW states are bf16 too; PEFT alone keeps them fp32".into());
    } else if d == 4 {
        notes.push(
            "the adapters are fp32, as their fp32 base: 16 bytes per adapter parameter with AdamW"
                .into(),
        );
    } else {
        notes.push("PEFT keeps the adapters fp32 on a half-precision base (autocast_adapter_dtype=True): 16 bytes per adapter parameter with AdamW".into());
    }
    // The per-layer tensors of the frozen model's forward, as the full-training walk has them
    // (bf16, no recomputation): an upper bound for a frozen base, whose linears save no input.
    // prepare_model_for_kbit_training casts the embedding to fp32, so the residual stream is
    // fp32, and bitsandbytes' Linear4bit.forward casts its output back to its input's dtype
    // (`.to(inp_dtype)`, nn/modules.py): every linear output, norm and MLP intermediate of the
    // frozen base is fp32 (measured on the meta device: `tests/engines/qlora_peak.py
    // --prepare`). Only what autocast casts for SDPA stays bf16.
    let prep = spec.prepare_kbit && quantized;
    // A quantized base whose unpacked parameters are fp32 (prepare_model_for_kbit_training's
    // cast, or a float32 checkpoint): its embedding feeds an fp32 residual stream, and every
    // Linear4bit/Linear8bitLt returns its input's dtype, so the base's activations are fp32.
    let q_stream32 = quantized && (prep || d == 4);
    // An fp32 LoRA base under autocast (TRL's default bf16=True): each frozen nn.Linear casts
    // its fp32 weight to bf16 at every use. torch 2.15's autocast caches a cast only for a leaf
    // that requires grad (aten/src/ATen/autocast_mode.cpp `cached_cast`), which a frozen weight
    // is not, so every use makes a new copy; the matmul saves it for its input's gradient (the
    // layer's input requires grad), so a layer that runs with saving on keeps all its copies,
    // and the linears' outputs are bf16 over an fp32 residual stream (autocast's chain).
    // Checked on the CPU: tests/engines/test_default_precision.py.
    let amp_fp32_base = !quantized && d == 4 && setup.precision.is_amp();
    let frozen = Setup {
        precision: if d == 4 && !quantized && !amp_fp32_base {
            Precision::Fp32
        } else if q_stream32 || amp_fp32_base {
            Precision::Bf16Amp
        } else {
            Precision::Bf16
        },
        mode: Mode::Train(crate::setup::Train {
            recompute: Recompute::None,
            recompute_layers: None,
            grad_accum: 1,
            ..tr
        }),
        ..*setup
    };
    let chain = chain_bytes(model, &frozen)?;
    let mut chain_parts = crate::walk::chain_saved_parts(model, &frozen)?;
    let mut chain = chain;
    let tok = tr.micro_batch * tr.seq;
    if amp_fp32_base {
        // A frozen layer makes no half weight gradient.
        chain.layer_ffn_backward_tmp = chain
            .layer_ffn_backward_tmp
            .saturating_sub(chain.layer_half_grad);
        chain.layer_mixer_backward_tmp = chain
            .layer_mixer_backward_tmp
            .saturating_sub(chain.layer_half_grad);
    }
    if q_stream32 {
        // Autocast's chain has the MLP's intermediates in bf16 (an nn.Linear's output); a
        // bitsandbytes Linear4bit returns the fp32 of its input, so the gate, up, activation
        // and product are fp32 here, and so are their gradients.
        if let Some(inter) = typical_intermediate(t) {
            let f = tok * inter * 2;
            let extra: u64 = chain_parts.iter().filter(|&&b| b == f).map(|_| f).sum();
            for b in chain_parts.iter_mut().filter(|b| **b == f) {
                *b = 2 * f;
            }
            chain.layer_saved += extra;
            let two_hid = 2 * tok * t.hidden() * 4;
            chain.layer_ffn_backward_tmp = two_hid
                + 2 * chain
                    .layer_ffn_backward_tmp
                    .saturating_sub(two_hid + chain.layer_half_grad);
            chain.layer_mixer_backward_tmp = chain
                .layer_mixer_backward_tmp
                .saturating_sub(chain.layer_half_grad);
        }
    }
    let cmp = if d == 4 && !quantized && !amp_fp32_base {
        4
    } else {
        2
    };
    // Bytes of one element of the frozen base's activations (the residual stream's dtype).
    let res = if q_stream32 || d == 4 { 4 } else { cmp };
    // Bytes of one element of what the base's linears return: the compute dtype, but fp32
    // from a bitsandbytes linear fed fp32 (it returns its input's dtype).
    let act = if q_stream32 { 4 } else { cmp };
    // One hidden-sized activation (the residual stream of the frozen base).
    let hid_bytes = tok * t.hidden() * res;
    // Per-layer adapters (every layer kind's sites; the per-kind table gives the count).
    let layers = t.blocks.len() as u64;
    let mut per_kind: Vec<LayerAdapters> = Vec::new();
    let b = &t.blocks;
    for kind in &b.kinds {
        let sites = super::block_sites(&b.names, kind, b.hidden);
        let mut la = LayerAdapters {
            discount: frozen_discount(t, kind, tok, res),
            fwd_locals: forward_locals(
                t,
                kind,
                tok,
                res,
                act,
                adapter_bytes == 4 || spec.lora.dropout > 0.0 || q_stream32,
            ),
            inter: match kind.ffn {
                crate::describe::Ffn::Dense(d) => tok * act * d.intermediate,
                _ => 0,
            },
            ..LayerAdapters::default()
        };
        let mut inputs_seen: Vec<u8> = Vec::new();
        // Whether the attention's output, the output projection's input, is a tensor the
        // attention kernel saves itself (flash/cuDNN/memory-efficient; an eager attention's
        // output is copied by the transpose before the projection).
        let attn_out_saved = match kind.mixer {
            crate::describe::Mixer::Attention(a) => matches!(
                crate::mech::attention::attention_kernel(
                    &a,
                    setup.attention,
                    cmp == 2,
                    true,
                    tr.seq
                ),
                crate::mech::attention::Kernel::Fused
                    | crate::mech::attention::Kernel::MemEfficient
            ),
            _ => false,
        };
        let top_k = match kind.ffn {
            crate::describe::Ffn::Moe(m) | crate::describe::Ffn::DenseAndMoe(_, m) => m.top_k,
            _ => 1,
        };
        for s in &sites {
            let ad = plan
                .adapted
                .iter()
                .find(|a| a.site.path == s.path && a.site.out == s.out && a.site.inp == s.inp);
            let quant_site = quantized && super::packed_site(&storage, s, &spec.skip_modules);
            let e = match s.kind {
                SiteKind::Experts(e) => e,
                _ => 1,
            };
            let mut fwd = 0;
            let mut bwd = 0;
            if amp_fp32_base && s.kind == SiteKind::Module {
                // The bf16 copy of the frozen weight: alive through its matmul where nothing
                // saves it, kept for backward where the layer saves.
                fwd = fwd.max(s.out * s.inp * cmp);
                la.copies.push(s.out * s.inp * cmp);
            }
            if quant_site && spec.weights.is_bnb_4bit() {
                // gemm_4bit's fallback (M > 1536) dequantizes the whole weight in the input's
                // dtype; MatMul4Bit's backward dequantizes again for grad_input.
                let deq = s.out * s.inp * cmp;
                if tok > 1536 {
                    fwd = fwd.max(deq);
                }
                bwd = bwd.max(deq);
            }
            if quant_site && spec.weights == WeightFormat::Int8 {
                // MatMul8bitLt backward: CB.to(dtype) then * SCB / 127: two full weights.
                bwd = bwd.max(2 * s.out * s.inp * 2);
            }
            if let Some(a) = ad {
                let r = a.rank;
                la.tensors.push(r * e * s.inp);
                la.tensors.push(r * e * s.out);
                let before = la.saved;
                match s.kind {
                    SiteKind::Module => {
                        let p = spec.lora.dropout > 0.0;
                        if adapter_bytes == 4 && cmp != 4 {
                            // Under autocast (TRL's bf16=True), fp32 adapters: x is cast to fp32
                            // (a transient where x is half; an fp32 x is its own), dropped out when p > 0 (CUDA native_dropout saves a
                            // bool mask), cast to bf16 for lora_A (saved), lora_A's bf16 output
                            // saved by lora_B, and autocast's bf16 copies of A and B saved by
                            // their matmuls.
                            la.saved += tok * s.inp * cmp
                                + tok * r * cmp
                                + r * (s.inp + s.out) * cmp
                                + if p { tok * s.inp } else { 0 };
                            // Over an fp32 residual stream the norms' outputs are fp32 (the
                            // mixer's and the dense MLP's first inputs, 0 and 4), while what a
                            // linear made under autocast (the attention's output, the MLP's
                            // intermediate) is bf16 and is copied.
                            let copies_x = if res == 4 && matches!(s.input, 0 | 4) {
                                0
                            } else {
                                1
                            };
                            fwd = fwd.max(tok * s.inp * 4 * (copies_x + u64::from(p)));
                        } else {
                            // Adapters in the compute dtype (bf16 on a quantized base, fp32 on
                            // an fp32 base without autocast) read x itself: saved once per input
                            // tensor (q/k/v share theirs); with p > 0 each adapter saves its own
                            // dropout output and mask instead.
                            if p {
                                la.saved += tok * s.inp * (cmp + 1);
                            } else if attn_out_saved && s.input == 1 {
                                // The output projection reads the fused kernel's own output
                                // (laid out [b, s, h, d], so the transpose before it copies
                                // nothing), which the kernel already saves.
                            } else if q_stream32 {
                                // An fp32 input: autocast casts it to bf16 for lora_A, one copy
                                // per adapter (its cast cache keeps only weights' casts).
                                la.saved += tok * s.inp * cmp;
                            } else if !inputs_seen.contains(&s.input) {
                                inputs_seen.push(s.input);
                                la.saved += tok * s.inp * cmp;
                            }
                            la.saved += tok * r * cmp;
                        }
                        if quant_site && spec.weights.is_bnb_4bit() {
                            // lora/bnb.py Linear4bit.forward: result.clone().
                            fwd = fwd.max(
                                tok * s.out * res
                                    + if tok > 1536 { s.out * s.inp * cmp } else { 0 },
                            );
                        }
                    }
                    SiteKind::Param | SiteKind::Experts(_) => {
                        // ParamWrapper's parametrization builds W+ΔW (`baddbmm(W, lhs, rhs)`) in
                        // the base's dtype, and saves its factors (bf16 under autocast); the
                        // matmul that reads W+ΔW saves it and, since it now needs a weight
                        // gradient, its input: the routed rows (tokens × top-k) of an expert
                        // bank, the layer's hidden states for the router (once per input).
                        let wd = if spec.prepare_kbit && quantized { 4 } else { d };
                        la.saved += e * s.out * s.inp * wd + e * r * (s.inp + s.out) * cmp;
                        match s.kind {
                            SiteKind::Experts(_) => la.saved += tok * top_k * s.inp * cmp,
                            _ => {
                                if !inputs_seen.contains(&s.input) {
                                    inputs_seen.push(s.input);
                                    la.saved += tok * s.inp * cmp;
                                }
                            }
                        }
                        fwd = fwd.max(e * s.out * s.inp * wd);
                    }
                }
                la.per_site.push((s.path.clone(), la.saved - before));
            }
            la.tmp_fwd = la.tmp_fwd.max(fwd);
            la.tmp_fwd_last = fwd;
            la.tmp_bwd = la.tmp_bwd.max(bwd);
        }
        per_kind.push(la);
    }
    let head_adapted = plan.adapted.iter().find(|a| a.site.path == "lm_head");
    if quantized && spec.weights.is_bnb_4bit() && tok <= 1536 {
        notes.push(format!(
            "{tok} tokens per micro-batch: bitsandbytes' gemm_4bit may take its fused kernel (up to 1536 rows) in forward and skip the dequantized weight"
        ));
    }
    let has_experts_unquantized = quantized
        && t.blocks.kinds.iter().any(|k| {
            matches!(
                k.ffn,
                crate::describe::Ffn::Moe(_) | crate::describe::Ffn::DenseAndMoe(..)
            )
        });
    if has_experts_unquantized {
        notes.push(format!(
            "bitsandbytes quantizes nn.Linear only: the fused 3-D experts and the routers stay in bf16 ({} of the {} stored weight bytes){}",
            super::fmt_bytes(w.unquantized),
            super::fmt_bytes(w.total),
            if spec.prepare_kbit {
                "; prepare_model_for_kbit_training then casts them to fp32"
            } else {
                ""
            }
        ));
    }
    if quantized && spec.load_fp32 {
        notes.push(format!(
            "the float32 checkpoint loads what bitsandbytes does not pack in fp32 (transformers 5.24 from_pretrained dtype=\"auto\"): {} of embedding, norms, head and biases; Linear4bit returns its fp32 input's dtype, so the base's activations are fp32",
            super::fmt_bytes(w.unquantized)
        ));
    }
    if amp_fp32_base {
        notes.push(format!(
            "autocast casts each frozen fp32 weight to bf16 at every use (it caches casts only of weights that require grad): a layer keeps its copies ({} for the first) while it runs with saving on; the linears' outputs are bf16 over an fp32 residual stream",
            super::fmt_bytes(per_kind.first().map_or(0, |l| l.copies.iter().sum()))
        ));
    }
    let mut tape = Tape(Vec::new(), 0);
    // Persistent state: the workspace, the base, the adapters.
    tape.alloc(Category::Workspace, vec![setup.overheads.workspace_bytes]);
    if quantized {
        // A quantized base is loaded by `from_pretrained`, whose `caching_allocator_warmup`
        // (transformers 5.24 modeling_utils.py) first makes one block of the bytes the device will
        // hold (`get_total_byte_count`: each parameter's elements × the quantizer's
        // `quantized_element_size`, 0.5 for 4-bit and 1 for int8, or its own element size; tied
        // weights once) and frees it, so the weights are carved out of that cached segment. (The
        // 2026-11-28 H200 snapshots show it, shrunk by the leftover's cached bytes as its
        // `unused_memory` rule says: 847,249,408 and 746,586,112 B where a clean start makes
        // 1,012,011,008 B for Llama-3.2-1B.)
        // bitsandbytes' `quantized_element_size` is 0.5 (4-bit) or 1 (int8) per element; the
        // other quantizers (GPTQ, AWQ, compressed-tensors, FP8) build their packed parameters
        // before loading, so each counts at its own element size: the packed bytes as stored.
        let q_elems = t.param_count().saturating_sub(w.unquantized_params);
        let q_bytes = match spec.weights {
            WeightFormat::Nf4 | WeightFormat::Fp4 => q_elems / 2,
            WeightFormat::Int8 => q_elems,
            _ => w.quantized,
        };
        let warm = (w.unquantized + q_bytes) / 2 * 2;
        let k = tape.alloc(Category::Parameters, vec![warm]);
        tape.free(k);
    }
    let mut base_parts = Vec::new();
    // Which of `base_parts` stay in the load dtype (what prepare_model_for_kbit_training casts).
    let mut half = Vec::new();
    for (kind, n) in b.kinds.iter().zip(b.kind_counts()) {
        for s in super::block_sites(&b.names, kind, b.hidden) {
            let e = match s.kind {
                SiteKind::Experts(e) => e,
                _ => 1,
            };
            let q = quantized && super::packed_site(&storage, &s, &spec.skip_modules);
            for _ in 0..n {
                if q {
                    let parts = super::linear_parts(spec.weights, spec.double_quant, s.out, s.inp);
                    half.extend(parts.iter().map(|_| false));
                    base_parts.extend(parts);
                } else {
                    base_parts.push(e * s.out * s.inp * d);
                    half.push(true);
                }
            }
        }
    }
    let placed: u64 = base_parts.iter().sum();
    let rest = w.total.saturating_sub(placed);
    // Embedding, head and the per-layer vectors.
    let emb = (t.vocab() * t.hidden() * d).min(rest);
    let head = (t.blocks.ends.head * d).min(rest - emb);
    base_parts.push(emb);
    base_parts.push(head);
    let vec_rest = rest - emb - head;
    if layers > 0 && vec_rest > 0 {
        for i in 0..layers {
            base_parts.push(vec_rest / layers + u64::from(i < vec_rest % layers));
        }
    }
    half.resize(base_parts.len(), true);
    if prep && d != 4 {
        // PEFT 0.21.2 `prepare_model_for_kbit_training`: for each half parameter that is not a
        // `Params4bit`, `param.data = param.data.to(torch.float32)`: the fp32 copy is made, then
        // the half tensor is dropped (its bytes stay cached where it was loaded). The half
        // tensors are their own allocations here so that each can go.
        let packed: Vec<u64> = (base_parts.iter().zip(&half))
            .filter(|(_, &h)| !h)
            .map(|(&p, _)| p)
            .collect();
        tape.alloc(Category::Parameters, packed);
        let halves: Vec<(u64, u64)> = (base_parts.iter().zip(&half))
            .filter(|(&p, &h)| h && p > 0)
            .map(|(&p, _)| (tape.alloc(Category::Parameters, vec![p]), p))
            .collect();
        for (k, p) in halves {
            tape.alloc(Category::Parameters, vec![p * 2]);
            tape.free(k);
        }
        notes.push(format!(
            "prepare_model_for_kbit_training casts every non-packed half parameter to fp32 (embedding, head, norms{}): +{}",
            if has_experts_unquantized { ", fused experts, routers" } else { "" },
            super::fmt_bytes(w.unquantized_params * 2)
        ));
    } else {
        tape.alloc(Category::Parameters, base_parts);
    }
    let mut adapter_tensors: Vec<u64> = Vec::new();
    for (i, la) in per_kind.iter().enumerate() {
        let n = b.pattern.iter().filter(|&&k| k as usize == i).count();
        for _ in 0..n {
            adapter_tensors.extend(la.tensors.iter().map(|e| e * adapter_bytes));
        }
    }
    if let Some(h) = head_adapted {
        adapter_tensors.push(h.rank * h.site.inp * adapter_bytes);
        adapter_tensors.push(h.rank * h.site.out * adapter_bytes);
    }
    // Adapters on the model-level linears the text forward runs (Gemma 4's
    // per_layer_model_projection): trained like the layers'.
    for a in plan
        .adapted
        .iter()
        .filter(|a| b.linears.iter().any(|s| s.path == a.site.path))
    {
        adapter_tensors.push(a.rank * a.site.inp * adapter_bytes);
        adapter_tensors.push(a.rank * a.site.out * adapter_bytes);
    }
    // Adapters on the vision tower's and projector's linears (`all-linear` takes them; list
    // targets match their names too). The forward calls the tower only for pixel values: in a
    // text-only step they get no gradient and AdamW no state (`_init_group` skips a parameter
    // whose grad is None); with images their gradients come last, when the backward reaches
    // the tower.
    let tower_images = t.blocks.vision.as_ref().is_some_and(|v| v.images.is_some());
    let pair = |a: &super::Adapted| {
        let pair = [
            a.rank * a.site.inp * adapter_bytes,
            a.rank * a.site.out * adapter_bytes,
        ];
        (0..a.count).flat_map(move |_| pair)
    };
    // The audio tower's adapters: no step feeds it audio, so they are held and get neither a
    // gradient nor an optimizer state (DDP's buckets still cover them, below).
    let audio_adapters: Vec<u64> = plan
        .adapted
        .iter()
        .filter(|a| a.site.component == crate::describe::Component::Audio)
        .flat_map(pair)
        .collect();
    let audio_adapters_total: u64 = audio_adapters.iter().sum();
    if !audio_adapters.is_empty() {
        tape.alloc(Category::Parameters, audio_adapters.clone());
        notes.push(format!(
            "the audio tower's adapters ({}) hold no gradient and no optimizer state: the step feeds it no audio",
            super::fmt_bytes(audio_adapters_total)
        ));
    }
    let tower_adapters: Vec<u64> = plan
        .adapted
        .iter()
        .filter(|a| a.site.component == crate::describe::Component::Vision)
        .flat_map(pair)
        .collect();
    let tower_adapters_total: u64 = tower_adapters.iter().sum();
    if !tower_adapters.is_empty() && !tower_images {
        tape.alloc(Category::Parameters, tower_adapters.clone());
        notes.push(format!(
            "the vision tower's adapters ({}) hold no gradient and no optimizer state in a text-only step: the forward calls the tower only for images",
            super::fmt_bytes(tower_adapters.iter().sum())
        ));
    }
    let tower_grads = if tower_images {
        adapter_tensors.extend(tower_adapters.iter().copied());
        tower_adapters
    } else {
        Vec::new()
    };
    let adapter_total: u64 = adapter_tensors.iter().sum();
    tape.alloc(Category::Parameters, adapter_tensors.clone());
    let state_elems: Vec<u64> = match tr.optimizer {
        Optimizer::Sgd => Vec::new(),
        Optimizer::Momentum => adapter_tensors.clone(),
        Optimizer::Adamw => adapter_tensors.iter().flat_map(|&x| [x, x]).collect(),
        // bitsandbytes 8-bit: two uint8 states and fp32 block scales (per 2048) per tensor.
        Optimizer::Adam8bit => adapter_tensors
            .iter()
            .map(|&x| {
                let n = x / adapter_bytes;
                2 * n + 2 * 4 * n.div_ceil(2048)
            })
            .collect(),
        // Adafactor's factored second moment of a [r, n] matrix: r + n fp32.
        Optimizer::Adafactor => Vec::new(),
    };
    if par.dp > 1 {
        // DDP allocates its gradient buckets when it wraps the model (gradient_as_bucket_view
        // is False by default): a copy of every trainable gradient, kept for the run.
        // Its buckets cover every parameter that requires grad, used or not (the tower's
        // adapters in a text-only step too: TRL turns on `find_unused_parameters` for them).
        tape.alloc(
            Category::CommBuffers,
            vec![
                adapter_total
                    + audio_adapters_total
                    + if tower_images {
                        0
                    } else {
                        tower_adapters_total
                    },
            ],
        );
    }
    let steps = 3;
    let mut states: Option<u64> = None;
    let micro = tr.grad_accum.max(1);
    for step in 0..steps {
        // Gradients are created by AccumulateGrad as backward reaches each adapter, kept across
        // micro-batches (accumulated in place) and freed by zero_grad(set_to_none=True).
        let mut grads: Vec<u64> = Vec::new();
        for mb in 0..micro {
            let first = mb == 0;
            tape.phase(format!("step {} micro-batch {} forward", step + 1, mb + 1));
            // Forward: each layer's input stays (checkpoint) or its saved tensors stay.
            let mut kept: Vec<Vec<u64>> = Vec::new();
            for i in 0..layers as usize {
                let la = &per_kind[b.pattern[i] as usize];
                let mut keys = vec![tape.alloc(Category::Activations, vec![chain.layer_input])];
                if !spec.gradient_checkpointing {
                    keys.push(tape.alloc(
                        Category::Activations,
                        frozen_parts(&chain_parts, chain.layer_saved, la, hid_bytes, la.inter),
                    ));
                    keys.push(tape.alloc(Category::WeightCopies, la.copies.clone()));
                }
                let tmp = tape.alloc(
                    Category::Temporaries,
                    vec![chain.layer_forward_tmp.max(la.tmp_fwd)],
                );
                tape.free(tmp);
                kept.push(keys);
            }
            // TRL's fused LM head: the final hidden (compacted), fp32 statistics, one tile.
            let hid = tape.alloc(Category::Loss, vec![hid_bytes, 2 * tok * 4]);
            let mut tile = tok.min(4096) * t.vocab().min(32768) * cmp;
            if (q_stream32 || d == 4) && cmp == 2 {
                // The head is fp32 (prepare_model_for_kbit_training's cast, a float32
                // checkpoint): each vocabulary chunk is cast to the compute dtype (`weight[start:end].to(compute_dtype)`).
                tile += t.vocab().min(32768) * t.hidden() * cmp;
            }
            let fwd_tmp = tape.alloc(Category::Loss, vec![5 * tok * 4, tile]);
            tape.free(fwd_tmp);
            tape.phase(format!("step {} micro-batch {} backward", step + 1, mb + 1));
            let bwd_loss = tape.alloc(Category::Loss, vec![tok * t.hidden() * 4, tile]);
            let gh = tape.alloc(Category::Activations, vec![hid_bytes]);
            tape.free(bwd_loss);
            tape.free(hid);
            if let (Some(h), true) = (head_adapted, first) {
                grads.push(tape.alloc(
                    Category::Gradients,
                    vec![
                        h.rank * h.site.inp * adapter_bytes,
                        h.rank * h.site.out * adapter_bytes,
                    ],
                ));
            }
            let mut g_prev = gh;
            for i in (0..layers as usize).rev() {
                let la = &per_kind[b.pattern[i] as usize];
                // The recomputed forward reaches its last projection with every tensor it saves
                // alive, so its high point sits on top of them.
                let recomputed = spec.gradient_checkpointing.then(|| {
                    let saved = tape.alloc(
                        Category::Activations,
                        frozen_parts(&chain_parts, chain.layer_saved, la, hid_bytes, la.inter),
                    );
                    let copies = tape.alloc(Category::WeightCopies, la.copies.clone());
                    let locals: u64 = la.fwd_locals.iter().sum::<u64>() + la.tmp_fwd_last;
                    let tmp = tape.alloc(
                        Category::Temporaries,
                        if locals >= chain.layer_forward_tmp.max(la.tmp_fwd) {
                            let mut v = la.fwd_locals.clone();
                            v.push(la.tmp_fwd_last);
                            v
                        } else {
                            vec![chain.layer_forward_tmp.max(la.tmp_fwd)]
                        },
                    );
                    tape.free(tmp);
                    (saved, copies)
                });
                // The layer's backward in its two halves, as autograd runs them: the
                // feed-forward's first (its intermediate-sized gradients once the down
                // projection's saved input is gone), then the mixer's, during which the layer's
                // input gradient is made. The halves' figures count the gradients flowing in and
                // out; the tape holds them itself (`g_prev`, `g`). A frozen base's linears make
                // no weight gradients, so nothing else is alive; bitsandbytes' dequantized
                // weight (`MatMul4Bit.backward`) lives while a projection's input gradient is
                // made, counted with the mixer's.
                let ffn = tape.alloc(
                    Category::Temporaries,
                    vec![chain.layer_ffn_backward_tmp.saturating_sub(2 * hid_bytes)],
                );
                tape.free(ffn);
                let tmp = tape.alloc(
                    Category::Temporaries,
                    vec![
                        chain.layer_mixer_backward_tmp.saturating_sub(2 * hid_bytes),
                        la.tmp_bwd,
                    ],
                );
                if first {
                    grads.push(tape.alloc(
                        Category::Gradients,
                        la.tensors.iter().map(|e| e * adapter_bytes).collect(),
                    ));
                }
                let g = tape.alloc(Category::Activations, vec![hid_bytes]);
                tape.free(g_prev);
                g_prev = g;
                tape.free(tmp);
                if let Some((k, c)) = recomputed {
                    tape.free(k);
                    tape.free(c);
                }
                for k in kept.pop().unwrap_or_default() {
                    tape.free(k);
                }
            }
            tape.free(g_prev);
            if first && !tower_grads.is_empty() {
                grads.push(tape.alloc(Category::Gradients, tower_grads.clone()));
            }
        }
        tape.phase(format!("step {} optimizer", step + 1));
        if states.is_none() && !state_elems.is_empty() {
            states = Some(tape.alloc(Category::OptimizerStates, state_elems.clone()));
        }
        for g in grads {
            tape.free(g); // zero_grad(set_to_none=True)
        }
        if step == 0 {
            tape.0.push(Ev::Phase("reset".into()));
        }
    }
    // Walk: the peak of tensor bytes after the warm-up step, and its breakdown.
    let (peak, at_peak, phase) = walk(&tape.0);
    let (allocated, reserved, needed) = match (setup.overheads.fragmentation, replay_allocator) {
        (Some(f), _) => {
            let r = (peak as f64 * (1.0 + f)) as u64;
            (peak, r, r)
        }
        (None, Replay::Full) => replay(&tape.0, setup.overheads.allocator, None),
        (None, Replay::Verdict(capacity)) => replay(
            &tape.0,
            setup.overheads.allocator,
            Some(capacity.saturating_sub(setup.overheads.cuda_context_bytes)),
        ),
        (None, Replay::Walk) => (peak, peak, peak),
    };
    let allocated = allocated.max(peak);
    let reserved = reserved.max(allocated);
    let needed = needed.clamp(allocated, reserved);
    let mut bd = Breakdown(at_peak);
    bd.0[Category::AllocatorOverhead as usize] = needed - peak;
    bd.0[Category::CudaContext as usize] = setup.overheads.cuda_context_bytes;
    if spec.gradient_checkpointing {
        notes.push("gradient checkpointing as TRL turns it on (non-reentrant): one layer's tensors are recomputed at a time in backward".into());
    }
    Ok(FinetuneEstimate {
        model: t.name.clone(),
        params: t.param_count(),
        trainable_params: plan.trainable_params,
        weights: w,
        adapter_bytes,
        peak_tensor_bytes: peak,
        peak_bytes: allocated,
        reserved_bytes: reserved,
        needed_bytes: needed,
        total_bytes: needed + setup.overheads.cuda_context_bytes,
        breakdown: bd,
        peak_phase: phase,
        adapter_saved: per_kind
            .first()
            .map(|k| k.per_site.clone())
            .unwrap_or_default(),
        frozen_layer_discount: per_kind.first().map_or(0, |k| k.discount),
        plan,
        notes,
        assumes: ASSUMES.to_vec(),
    })
}

fn walk(evs: &[Ev]) -> (u64, [u64; 13], String) {
    let mut live = [0u64; 13];
    let mut sizes: std::collections::HashMap<u64, (Category, u64)> = Default::default();
    let (mut total, mut peak, mut at_peak) = (0u64, 0u64, [0u64; 13]);
    let mut phase = String::new();
    let mut peak_phase = String::new();
    let mut measuring = false;
    for e in evs {
        match e {
            Ev::Alloc(k, c, parts) => {
                let b: u64 = parts.iter().sum();
                sizes.insert(*k, (*c, b));
                live[*c as usize] += b;
                total += b;
                if measuring && total > peak {
                    peak = total;
                    at_peak = live;
                    peak_phase = phase.clone();
                }
            }
            Ev::Free(k) => {
                if let Some((c, b)) = sizes.remove(k) {
                    live[c as usize] -= b;
                    total -= b;
                }
            }
            Ev::Phase(p) if p == "reset" => {
                measuring = true;
                peak = total;
                at_peak = live;
                peak_phase = phase.clone();
            }
            Ev::Phase(p) => phase = p.clone(),
        }
    }
    (peak, at_peak, peak_phase)
}

/// The allocator's figures for the tape: the allocated and reserved peaks after the warm-up
/// step on a device with room, and the smallest device the whole run gets through (the walk's
/// replay's search, `walk::replay::smallest_device`, on this tape: each probe replays it on a
/// device of that size, where PyTorch's `malloc` releases idle cached segments and retries
/// before it fails). With room, every segment made stays cached, so the reserved peak is the
/// sum of every segment the run ever needed; on a smaller device the retry path runs instead,
/// and the step can need less than it reserves with room (QLoRA Mistral-7B at micro-batch 8,
/// seq 1024: 10.40 GB reserved with room, 9.97 GB needed; BENCHMARKS.md). With `decide` (a
/// device's bytes less the context: only whether the needed bytes fit it is asked) the search
/// stops once its bounds settle that (exact: see the search).
fn replay(evs: &[Ev], a: Allocator, decide: Option<u64>) -> (u64, u64, u64) {
    // The tape as allocator calls, recorded once; each probe replays them (most from a fork of
    // the first probe's run: `Calls::needed`).
    let mut calls = CallsBuilder::default();
    for e in evs {
        match e {
            Ev::Alloc(k, _, parts) => calls.alloc(*k, parts),
            Ev::Free(k) => calls.free(*k),
            Ev::Phase(p) if p == "reset" => calls.reset_peak(),
            Ev::Phase(_) => {}
        }
    }
    match calls.finish().needed(a, decide) {
        Some(r) => (r.allocated, r.reserved, r.needed),
        None => (0, 0, 0),
    }
}
