//! One layer of the description: its token mixer and feed-forward (each a mechanism of
//! [`crate::mech`]), the norms outside them, and how they meet the residual stream.

use serde::Serialize;

use crate::mech::{
    vector, Attention, Component, ComponentParams, Ffn, Host, HostCtx, Mechanism, Mixer, Norm,
    Tensor,
};

/// The norms of a block outside its mixer and feed-forward modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Norms {
    /// How many.
    pub count: u64,
    /// Features each normalises.
    pub width: u64,
    /// Their class.
    pub norm: Norm,
}

impl Norms {
    /// Parameters of one of them.
    pub fn params_each(&self) -> u64 {
        self.norm.params(self.width)
    }
}

/// How a block's mixer and feed-forward meet the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Residual {
    /// `x += mixer(norm(x)); x += ffn(norm(x))`, the mixer's output rebound.
    Sequential,
    /// As `Sequential`, but the block keeps the mixer's output in a local until it returns
    /// (`GPT2Block`: `hidden_states = attn_output + residual`).
    SequentialHeld,
    /// `x + mixer(norm₁(x)) + ffn(norm₂(x))` (GPT-NeoX's `use_parallel_residual`, Falcon's
    /// `parallel_attn`); with one norm per block both read the same normed input (Falcon-7B).
    Parallel,
}

/// One decoder (or encoder) layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Block {
    /// The token mixer.
    pub mixer: Mixer,
    /// A cross-attention of the same shape as the mixer (decoder of an encoder-decoder).
    pub cross_attention: bool,
    /// The feed-forward.
    pub ffn: Ffn,
    /// The norms outside mixer and feed-forward.
    pub norms: Norms,
    /// How mixer and feed-forward meet the residual stream.
    pub residual: Residual,
    /// Further per-layer parameters and where they belong (Gemma 4's per-layer-input gate,
    /// projection and norm; a layer scalar).
    pub extra: (Component, u64),
    /// Gemma 4's per-layer-input width (`hidden_size_per_layer_input`; 0: none): its
    /// `per_layer_input_gate` (hidden → width) and `per_layer_projection` (width → hidden)
    /// are `nn.Linear`s, LoRA sites; their parameters are in `extra`.
    pub per_layer_input: u64,
}

impl Block {
    /// Every parameter tensor of the block, in module order (mixer, cross-attention and its
    /// norm, feed-forward, the other norms, extras).
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        self.mixer.tensors(h, out);
        let mut norms = self.norms.count;
        if let Some(a) = self.cross() {
            Mixer::Attention(a).tensors(h, out);
            if norms > 0 {
                self.norms.norm.tensors(self.norms.width, out);
                norms -= 1;
            }
        }
        self.ffn.tensors(h, out);
        for _ in 0..norms {
            self.norms.norm.tensors(self.norms.width, out);
        }
        if self.extra.1 > 0 {
            out(vector(self.extra.0, self.extra.1));
        }
    }

    /// The cross-attention of a decoder block of an encoder-decoder: the mixer's shape, without
    /// a position table or bias (T5's `EncDecAttention`).
    pub fn cross(&self) -> Option<Attention> {
        match self.mixer {
            Mixer::Attention(a) if self.cross_attention => Some(Attention {
                rel_buckets: 0,
                rel_bias: false,
                rope: false,
                ..a
            }),
            _ => None,
        }
    }

    /// Whether a forward without images skips the block: Llama 3.2 Vision's cross-attention
    /// layers ([`Attention::image_cross`]), which `MllamaTextModel.forward` passes over when it
    /// has neither image features nor cached ones. Their parameters stay; they make nothing.
    pub fn skipped_without_images(&self) -> bool {
        self.mixer.as_attention().is_some_and(|a| a.image_cross)
    }

    /// Host work of the decoder layer in one `generate` forward (transformers 5.24, counted
    /// on the CPU by `tests/engines/generate_ops.py`): the layer module and its two residual
    /// adds, its norms, then its mixer's and feed-forward's ([`Mixer::generate_host`],
    /// [`Ffn::generate_host`]).
    pub fn generate_host(&self, h: u64, c: &HostCtx) -> Host {
        let mut w = Host::module(2.0, 0.0, 0.0);
        w.add(
            self.norms
                .norm
                .generate_host()
                .times(self.norms.count as f64),
        );
        w.add(self.mixer.generate_host(h, c));
        w.add(self.ffn.generate_host(c));
        w
    }

    /// The block's parameters per component.
    pub fn params(&self, h: u64) -> ComponentParams {
        let mut p = ComponentParams::default();
        self.tensors(h, &mut |t| p.add(t.component, t.numel()));
        p
    }

    /// Forward FLOPs per token with `ctx` earlier tokens: its mixer's and feed-forward's
    /// ([`Mechanism::flops_per_token`]), and a cross-attention's projections (the mixer's again).
    /// A block a text-only forward skips ([`Block::skipped_without_images`]) makes none.
    pub fn flops_per_token(&self, h: u64, ctx: u64) -> u64 {
        if self.skipped_without_images() {
            return 0;
        }
        let cross = if self.cross_attention {
            2 * self.mixer.active_params(h)
        } else {
            0
        };
        self.mixer.flops_per_token(h, ctx) + cross + self.ffn.flops_per_token(h, ctx)
    }
}
