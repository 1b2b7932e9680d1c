//! What a mechanism's step tells a walk, the vocabulary every module of [`crate::mech`] and the
//! walks ([`crate::walk`]) share: the step's shape ([`Ctx`]), the tensors a training step saves
//! for backward ([`Parts`]) and its other bytes ([`Extra`]), and the op program of a `generate`
//! prefill ([`Prog`]: tensors made and freed by slot).

use crate::setup::{AmpStyle, Attention};

/// Saturating product, so absurd sizes become "does not fit" rather than overflow.
pub(crate) fn m(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |a, b| a.saturating_mul(*b))
}

/// Element sizes and geometry shared by all layers of one step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// Tokens per micro-batch (`b · s`).
    pub(crate) tok: u64,
    pub(crate) b: u64,
    pub(crate) s: u64,
    pub(crate) t: u64,
    pub(crate) sp: bool,
    /// Bytes of the residual stream.
    pub(crate) res: u64,
    /// Bytes of matmul inputs/outputs.
    pub(crate) cmp: u64,
    /// The step runs in a mixed precision (autocast's fp32 softmax in training).
    pub(crate) amp: bool,
    pub(crate) attention: Attention,
    pub(crate) style: AmpStyle,
    pub(crate) training: bool,
    /// Whether transformers builds its `DynamicCache` in this training forward.
    pub(crate) hf_cache: bool,
}

impl Ctx {
    /// Bytes of an eager softmax's stored output: fp32 in fp32 steps, in autocast training
    /// (softmax is an fp32 op), and where the attention's code upcasts (`upcast`) outside
    /// Megatron's fused kernels; else the compute dtype.
    pub(crate) fn sdt(&self, upcast: bool) -> u64 {
        if self.cmp == 4
            || (self.style == AmpStyle::Autocast && self.training && self.amp)
            || (upcast && self.style != AmpStyle::Megatron)
        {
            4
        } else {
            self.cmp
        }
    }

    /// Bytes of a `[tokens, hidden]` tensor outside the tensor-parallel region.
    pub(crate) fn rep(&self, h: u64, bytes: u64) -> u64 {
        let v = m(&[self.tok, h, bytes]);
        if self.sp {
            v.div_ceil(self.t)
        } else {
            v
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts {
    pub(crate) bytes: [u64; 48],
    pub(crate) s2: u64,
    pub(crate) n: u8,
}

impl Default for Parts {
    fn default() -> Self {
        Parts {
            bytes: [0; 48],
            s2: 0,
            n: 0,
        }
    }
}

impl Parts {
    pub(crate) fn push(&mut self, bytes: u64, s2: bool) {
        if bytes == 0 {
            return;
        }
        if self.n as usize >= self.bytes.len() {
            // Full: the bytes still count, in the last tensor.
            let last = self.bytes.len() - 1;
            self.bytes[last] = self.bytes[last].saturating_add(bytes);
            return;
        }
        if s2 {
            self.s2 |= 1 << self.n;
        }
        self.bytes[self.n as usize] = bytes;
        self.n += 1;
    }
    pub(crate) fn total(&self, selective: bool) -> u64 {
        let mut t = 0u64;
        for i in 0..self.n as usize {
            if !(selective && self.s2 & (1 << i) != 0) {
                t = t.saturating_add(self.bytes[i]);
            }
        }
        t
    }
    /// The tensors kept, as a list (for traces).
    pub(crate) fn list(&self, selective: bool) -> Vec<u64> {
        (0..self.n as usize)
            .filter(|i| !(selective && self.s2 & (1 << i) != 0))
            .map(|i| self.bytes[i])
            .collect()
    }
}

/// Up to 48 saved tensors of a layer (an MLA + MoE layer with a shared expert saves ~36).
/// What one mixer or feed-forward adds to a layer besides its saved tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    /// Extra bytes at the sub-block's backward high point.
    pub(crate) bwd: u64,
    /// The tensors `bwd` is made of, each its own allocation for the allocator replay, where
    /// the mechanism says (zeros after them; all zero: one block).
    pub(crate) bwd_parts: [u64; BWD_PARTS],
    /// Extra bytes at its forward high point (not kept).
    pub(crate) fwd: u64,
    /// Live bytes at its inference high point over the step's tokens.
    pub(crate) infer: u64,
    /// Bytes kept only until the model's forward returns (the training forward's cache).
    pub(crate) kept: u64,
    /// A decode step's temporaries over one new token per sequence: fixed bytes, and bytes per
    /// context token the step reads (re-expanded or repeated K/V, score rows).
    pub(crate) decode: u64,
    pub(crate) decode_per_ctx: u64,
    /// A decode step's copies of the routed experts' weights (`batched_mm`: the up bank's
    /// rows, then the down bank's while the first is alive), each its own allocation.
    pub(crate) decode_experts: [u64; 2],
}

/// How many tensors a sub-block's backward high point may name ([`Extra::bwd_parts`]).
pub(crate) const BWD_PARTS: usize = 10;

/// One step of a layer's op program: a tensor in slot `.0` is created with `.1` bytes, or the
/// tensor in slot `.0` is released (`.1 == FREE`).
pub(crate) type Op = (u8, u64);

pub(crate) const FREE: u64 = u64::MAX;

/// Slots with a fixed meaning across layers.
pub(crate) const X: u8 = 0; // the residual stream entering the layer (then leaving it)

/// The layer's cache tensors, in [`crate::describe::Mixer::cache_tensors`] order: slots 1..=4.
pub(crate) const CACHE: u8 = 1;

/// A layer's op program as it is built.
pub(crate) struct Prog {
    pub(crate) ops: Vec<Op>,
    pub(crate) next: u8,
}

impl Prog {
    /// A new tensor of `bytes`; its slot.
    pub(crate) fn make(&mut self, bytes: u64) -> u8 {
        let s = self.next;
        self.next += 1;
        self.ops.push((s, bytes));
        s
    }

    pub(crate) fn free(&mut self, s: u8) {
        self.ops.push((s, FREE));
    }
}
