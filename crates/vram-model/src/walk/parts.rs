//! Layer descriptions: what each layer saves for backward, its transient high points, its
//! parameters; and the bytes of each model state by precision.

use crate::describe::Model;
use crate::mech::step::Parts;
use crate::setup::{AmpStyle, Optimizer, Precision};

/// What one layer stores and needs, on one GPU, for one micro-batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LayerDesc {
    /// Saved tensors (bytes) without recomputation; `s2` marks the attention-score tensors.
    pub(crate) parts: Parts,
    /// `parts` summed: everything, and without the attention scores (selective recompute).
    pub(crate) saved_all: u64,
    pub(crate) saved_selective: u64,
    /// Bytes of the block input kept under full recomputation.
    pub(crate) checkpoint: u64,
    /// Extra bytes live at the layer's forward high point (not kept).
    pub(crate) fwd_tmp: u64,
    /// Extra bytes live at the layer's backward high point.
    pub(crate) bwd_tmp: u64,
    /// Parameter elements on this GPU.
    pub(crate) params: u64,
    /// Of which weights of matmuls/convolutions (copied to half under autocast).
    pub(crate) matmul_params: u64,
    /// The forward passes over the layer (Llama 3.2 Vision's cross-attention layers in a
    /// text-only step): its parameters get no gradient (`p.grad` stays `None`), so torch's
    /// optimizers make no state for them (`_init_group` skips them).
    pub(crate) no_grad: bool,
    /// Live bytes at the high point of an inference forward (nothing kept).
    pub(crate) infer_tmp: u64,
    /// Bytes made in the layer's forward and kept until the model's forward returns, not for
    /// backward (transformers' `DynamicCache` copies of K and V in training).
    pub(crate) fwd_kept: u64,
    /// Saved tensors made before the forward's temporary (`fwd_tmp`) in traces; 0: all of them.
    pub(crate) tmp_after: u8,
    /// The backward's temporaries op by op, where the layer describes them so (CNNs); when
    /// empty, the backward makes one `bwd_tmp` block.
    pub(crate) bwd_prog: Program,
    /// The tensors `fwd_tmp` and `bwd_tmp` are made of, for the allocator replay (each op's
    /// output is its own allocation); all zero where the layer does not say.
    pub(crate) tmp_parts: TmpParts,
    /// Index of the first saved tensor of the feed-forward sub-block in `parts` (0: not
    /// split). Autograd runs the feed-forward's backward first and frees its saved tensors
    /// node by node, before the mixer's backward.
    pub(crate) ffn_from: u8,
    /// Where the backward is walked in two halves: the feed-forward half's temporaries (its
    /// first node's gradient replaces the tensor it consumed), the mixer half's, and the
    /// elements of the feed-forward's last projection, whose gradient comes first.
    pub(crate) ffn_bwd_tmp: u64,
    pub(crate) mixer_bwd_tmp: u64,
    /// Of `bwd_tmp` (and of each half): autocast's half gradient of the largest weight.
    pub(crate) half_grad: u64,
    pub(crate) ffn_first_grad: u64,
    /// A `generate` decode step's temporaries over one new token per sequence: fixed bytes,
    /// and bytes per context token the step reads (re-expanded or repeated K/V, score rows).
    pub(crate) decode: u64,
    pub(crate) decode_per_ctx: u64,
    /// `batched_mm`'s two expert-weight copies per decode step ([`crate::mech::step::Extra`]).
    pub(crate) decode_experts: [u64; 2],
    /// The inference high points of the mixer and of the feed-forward on their own (what
    /// `generate`'s prefill walks for the mechanisms it does not walk op by op).
    pub(crate) infer_mixer: u64,
    pub(crate) infer_ffn: u64,
}

/// The individual tensors of a layer's forward and backward temporaries.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TmpParts {
    /// `fwd_tmp`'s tensors.
    pub(crate) fwd: [u64; 2],
    /// `bwd_tmp`'s tensors: the gradients flowing in and out, the sub-block's high point,
    /// autocast's half gradient last ([`HALF_GRAD`]).
    pub(crate) bwd: [u64; BWD_TMP],
    /// `mixer_bwd_tmp`'s tensors, laid out as `bwd` (a two-half backward's mixer half).
    pub(crate) mixer_bwd: [u64; BWD_TMP],
}

/// Tensors of a layer's backward temporaries: two gradients, a sub-block's high point, the half
/// gradient.
pub(crate) const BWD_TMP: usize = 3 + crate::mech::step::BWD_PARTS;

/// Where `TmpParts::bwd` keeps autocast's half gradient.
pub(crate) const HALF_GRAD: usize = BWD_TMP - 1;

impl TmpParts {
    /// `list`'s non-zero tensors when they make up `total`, else `total` as one tensor.
    pub(crate) fn of(list: &[u64], total: u64) -> Vec<u64> {
        if list.iter().sum::<u64>() == total && total > 0 {
            list.iter().copied().filter(|&b| b > 0).collect()
        } else {
            vec![total]
        }
    }
}

/// One step of a layer's temporaries in order of execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum TmpOp {
    /// The end of the program.
    #[default]
    End,
    /// A temporary of this many bytes in the layer's slot (0–7).
    Alloc(u8, u64),
    /// The temporary in the layer's slot goes.
    Free(u8),
    /// The temporary in this slot of the layer walked just before goes: the gradient it handed
    /// on has been consumed.
    FreeHanded(u8),
}

/// Up to 16 temporaries steps.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Program {
    pub(crate) ops: [TmpOp; 16],
}

impl Program {
    pub(crate) fn new(ops: &[TmpOp]) -> Program {
        let mut p = Program::default();
        let ops: Vec<TmpOp> = ops
            .iter()
            .copied()
            .filter(|op| !matches!(op, TmpOp::Alloc(_, 0)))
            .collect();
        assert!(ops.len() <= p.ops.len(), "a program of at most 16 steps");
        p.ops[..ops.len()].copy_from_slice(&ops);
        p
    }
    /// Bytes live at the program's high point (the gradient handed in from the layer after
    /// not counted).
    pub(crate) fn high(&self) -> u64 {
        let mut slots = [0u64; 8];
        let mut high = 0u64;
        for op in self.steps() {
            match op {
                TmpOp::Alloc(n, bytes) => slots[n as usize] = bytes,
                TmpOp::Free(n) => slots[n as usize] = 0,
                TmpOp::FreeHanded(_) | TmpOp::End => {}
            }
            high = high.max(slots.iter().sum());
        }
        high
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.ops[0] == TmpOp::End
    }
    pub(crate) fn steps(&self) -> impl Iterator<Item = TmpOp> + '_ {
        self.ops.iter().copied().take_while(|op| *op != TmpOp::End)
    }
}

impl LayerDesc {
    /// Parameter elements that get a gradient (and optimizer states) in a training step.
    pub(crate) fn grad_params(&self) -> u64 {
        if self.no_grad {
            0
        } else {
            self.params
        }
    }

    pub(crate) fn with_totals(mut self) -> Self {
        self.saved_all = self.parts.total(false);
        self.saved_selective = self.parts.total(true);
        self
    }
    pub(crate) fn saved(&self, selective: bool) -> u64 {
        if selective {
            self.saved_selective
        } else {
            self.saved_all
        }
    }
}

/// The layers of one pipeline rank, borrowed from the [`Step`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stack<'s> {
    /// Transformer layers: layer `i` is `kinds[pattern[i]]` (encoder then decoder for T5).
    Blocks {
        kinds: &'s [LayerDesc],
        pattern: &'s [u8],
    },
    /// Heterogeneous layers (CNNs).
    List(&'s [LayerDesc]),
}

impl Stack<'_> {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Stack::Blocks { pattern, .. } => pattern.len() as u64,
            Stack::List(v) => v.len() as u64,
        }
    }
    /// Layer `i`'s kind index (transformers only).
    pub(crate) fn kind(&self, i: u64) -> Option<usize> {
        match self {
            Stack::Blocks { pattern, .. } => Some(pattern[i as usize] as usize),
            Stack::List(_) => None,
        }
    }
    pub(crate) fn get(&self, i: u64) -> &LayerDesc {
        match self {
            Stack::Blocks { kinds, pattern } => &kinds[pattern[i as usize] as usize],
            Stack::List(v) => &v[i as usize],
        }
    }
}

/// Bytes per element of each model state, by precision and style.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateBytes {
    pub(crate) weight: u64,
    pub(crate) grad: u64,
    pub(crate) master: u64,
    pub(crate) state: u64,
}

pub(crate) fn state_bytes(precision: Precision, style: AmpStyle) -> StateBytes {
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

/// Optimizer state elements per parameter (excluding master weights).
pub(crate) fn optimizer_elems(model: &Model, opt: Optimizer) -> f64 {
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
