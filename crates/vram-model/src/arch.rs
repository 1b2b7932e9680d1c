//! Model architectures as vramkit sees them: the shapes that decide parameters and activations.
//!
//! A [`Model`] is built from a Hugging Face `config.json` ([`crate::hf`]), from the built-in
//! catalog ([`crate::catalog`]) or from a safetensors header ([`crate::safetensors_header`]).
//! Parameter counts are exact: they equal `sum(p.numel() for p in model.parameters())` of the
//! PyTorch module the config builds (tied weights counted once).

use serde::Serialize;

use crate::blocks::{
    Attention, Block, Blocks, Component, ComponentParams, Dense, Dispatch, Ends, Ffn, Mixer, Moe,
    Norms, QkNorm, Window,
};

/// A model whose memory vramkit can estimate.
// One model per run, passed by reference: the transformer's size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Model {
    /// A transformer (decoder-only, encoder-only or encoder-decoder).
    Transformer(Transformer),
    /// A torchvision ResNet.
    ResNet(ResNet),
    /// Only parameter tensors are known (a safetensors checkpoint without a config).
    Weights(Weights),
}

impl Model {
    /// The model's display name (catalog id, or the `model_type` and size).
    pub fn name(&self) -> &str {
        match self {
            Model::Transformer(t) => &t.name,
            Model::ResNet(r) => &r.name,
            Model::Weights(w) => &w.name,
        }
    }

    /// Exact number of parameters (tied weights once).
    pub fn param_count(&self) -> u64 {
        match self {
            Model::Transformer(t) => t.param_count(),
            Model::ResNet(r) => r.param_count(),
            Model::Weights(w) => w.params,
        }
    }
}

/// How a transformer block is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Decoder-only causal LM (`*ForCausalLM`), LM head over the vocabulary.
    DecoderOnly,
    /// Encoder-only (`BertModel`/`RobertaModel`: embeddings, encoder and pooler).
    EncoderOnly,
    /// Encoder-decoder (`T5ForConditionalGeneration`).
    EncoderDecoder,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mlp {
    /// `fc2(act(fc1(x)))` with a GeLU-like activation (GPT-2, BERT, NeoX, Falcon).
    Plain,
    /// `fc2(relu(fc1(x)))` with dropout between (T5 v1.0).
    Relu,
    /// `down(act(gate(x)) * up(x))` (SwiGLU/GeGLU: Llama, Mistral, Qwen2, Gemma, Phi-3, T5 v1.1).
    Gated,
}

/// The feed-forward activation function, as the reference code computes it.
///
/// What autograd saves differs: fused kernels save their input (or output) only, while the
/// Python-composed tanh approximations save several intermediates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    /// One fused kernel (`F.gelu`, `F.silu`, `F.relu`, `gelu_pytorch_tanh`): one saved tensor.
    Fused,
    /// `gelu_new`/`gelu_fast` written as elementwise ops (GPT-2, T5 v1.1): saves the tanh
    /// output, `1 + tanh` and `0.5·x` besides the input; under autocast `pow` runs in fp32.
    ComposedTanh,
    /// `quick_gelu` (`x·sigmoid(1.702x)`): saves the sigmoid output besides the input.
    QuickGelu,
}

/// The normalisation layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// LayerNorm with weight and bias.
    LayerNorm,
    /// RMSNorm (weight only).
    RmsNorm,
}

/// Where positions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// A learned table of `n` positions (GPT-2, BERT).
    Learned(u64),
    /// Rotary embeddings (no parameters).
    Rotary,
    /// T5 relative attention bias with this many buckets (first layer of each stack).
    RelativeBuckets(u64),
    /// ALiBi or none (no parameters).
    None,
}

/// A transformer as vramkit models it. All sizes are the model's own (no parallelism applied).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transformer {
    /// Display name.
    pub name: String,
    /// The Hugging Face `model_type` it was read as.
    pub model_type: String,
    /// How blocks are wired.
    pub layout: Layout,
    /// Vocabulary size.
    pub vocab: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Decoder layers (encoder layers for encoder-only models).
    pub layers: u64,
    /// Encoder layers of an encoder-decoder model (0 otherwise).
    pub encoder_layers: u64,
    /// Attention heads `a`.
    pub heads: u64,
    /// Key/value heads (GQA/MQA); equals `heads` for multi-head attention.
    pub kv_heads: u64,
    /// Size of one head.
    pub head_dim: u64,
    /// Feed-forward inner size `f`.
    pub intermediate: u64,
    /// Longest sequence the model was configured for.
    pub max_positions: u64,
    /// Feed-forward kind.
    pub mlp: Mlp,
    /// Activation function's implementation.
    pub act: Act,
    /// Query, key and value come from one fused projection (GPT-2, NeoX, Falcon, Phi-3).
    pub fused_qkv: bool,
    /// Gate and up projections are one fused matmul (Phi-3).
    pub fused_gate_up: bool,
    /// Normalisation kind.
    pub norm: Norm,
    /// Whether LayerNorms carry a bias (ignored for RMSNorm).
    pub norm_bias: bool,
    /// Normalisation layers per block (2 usually, 1 for Falcon-7B's shared norm, 4 for Gemma 2).
    pub norms_per_layer: u64,
    /// Biases on the query/key/value projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub out_bias: bool,
    /// Biases on the feed-forward projections.
    pub mlp_bias: bool,
    /// Mixture-of-experts: experts per layer (1 for a dense model).
    pub experts: u64,
    /// Experts each token is routed to.
    pub experts_per_token: u64,
    /// Position scheme.
    pub positions: Positions,
    /// Token-type embeddings (BERT); 0 if none.
    pub type_vocab: u64,
    /// Output head shares the input embedding.
    pub tied_embeddings: bool,
    /// A LayerNorm right after the embeddings (BERT).
    pub embedding_norm: bool,
    /// A pooler (`dense h→h` with bias) on top (BERT/RoBERTa).
    pub pooler: bool,
    /// A final norm after the last block.
    pub final_norm: bool,
    /// Attention and MLP read the same input and add in parallel (GPT-J/NeoX/Falcon style).
    pub parallel_residual: bool,
    /// Dropout probability on attention probabilities (0 means no mask is stored).
    pub attention_dropout: f64,
    /// Dropout probability on residual branches and embeddings.
    pub hidden_dropout: f64,
    /// The reference implementation's eager softmax runs in fp32 and casts back.
    pub softmax_upcast: bool,
    /// Sliding-window attention span (Mistral's `sliding_window`, default 4096 in
    /// transformers 5.x): once the sequence reaches it, transformers builds an explicit mask,
    /// which turns off SDPA's grouped-query path (K/V are repeated to every head) and is saved
    /// by the attention kernel.
    pub sliding_window: Option<u64>,
    /// Gemma 2's `final_logit_softcapping`: `tanh(logits / c) · c` over the whole logits, whose
    /// tanh output is saved for backward.
    pub logit_softcap: bool,
    /// The layer-by-layer description: what each layer's mixer and feed-forward are, the
    /// embedding and head, extras and storage. Parameter counts, per-component splits, weight
    /// bytes and caches come from it. For the 2019–2024 families (`blocks.uniform`) it is
    /// derived from the fields above; for the others the fields above are stand-ins (the first
    /// attention layer's shape, the routed experts' size) that keep the uniform walks running.
    pub blocks: Blocks,
}

/// One kind of parameter tensor: `count` tensors of shape `rows × cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamTensor {
    /// First dimension.
    pub rows: u64,
    /// Second dimension (1 for vectors).
    pub cols: u64,
    /// How many such tensors the model has.
    pub count: u64,
    /// Whether tensor parallelism splits it (projections and vocabulary), or replicates it.
    pub tp_split: bool,
}

impl ParamTensor {
    fn matrix(rows: u64, cols: u64, count: u64) -> Self {
        ParamTensor {
            rows,
            cols,
            count,
            tp_split: true,
        }
    }
    fn vector(n: u64, count: u64, tp_split: bool) -> Self {
        ParamTensor {
            rows: n,
            cols: 1,
            count,
            tp_split,
        }
    }
    /// Elements in all `count` tensors.
    pub fn numel(&self) -> u64 {
        self.rows * self.cols * self.count
    }
}

/// Parameters of a transformer, split where memory planning needs them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ParamSplit {
    /// Token, position and type embeddings (and their norm).
    pub embedding: u64,
    /// One decoder block (or encoder block for encoder-only).
    pub per_layer: u64,
    /// One encoder block of an encoder-decoder model.
    pub per_encoder_layer: u64,
    /// Parameters of the one block that also holds a relative-position table (T5).
    pub relative_bias: u64,
    /// Final norms, pooler and an untied output head.
    pub head: u64,
    /// Of `per_layer`, the parameters tensor parallelism replicates (norms, row-parallel biases).
    pub per_layer_replicated: u64,
    /// Of `per_layer`, the parameters of one expert's feed-forward (MoE only).
    pub per_expert: u64,
}

impl Transformer {
    fn norm_params(&self) -> u64 {
        match self.norm {
            Norm::LayerNorm if self.norm_bias => 2 * self.hidden,
            _ => self.hidden,
        }
    }

    /// Query width `a · head_dim` and key/value width `kv · head_dim`.
    pub fn attn_widths(&self) -> (u64, u64) {
        (self.heads * self.head_dim, self.kv_heads * self.head_dim)
    }

    /// Parameters of one attention block (self-attention, no norm).
    fn attention_params(&self) -> u64 {
        let h = self.hidden;
        let (q, kv) = self.attn_widths();
        let mut p = h * (q + 2 * kv) + q * h;
        if self.qkv_bias {
            p += q + 2 * kv;
        }
        if self.out_bias {
            p += h;
        }
        p
    }

    /// Parameters of one expert's feed-forward.
    fn mlp_params(&self) -> u64 {
        let (h, f) = (self.hidden, self.intermediate);
        match self.mlp {
            Mlp::Plain | Mlp::Relu => 2 * h * f + if self.mlp_bias { f + h } else { 0 },
            Mlp::Gated => 3 * h * f + if self.mlp_bias { 2 * f + h } else { 0 },
        }
    }

    /// The parameter split; see [`ParamSplit`]. From the uniform fields where they describe
    /// every layer, else from the blocks (per-layer figures are then the average over layers,
    /// rounded up; the vision tower counts with the embedding, MTP layers with the head).
    pub fn param_split(&self) -> ParamSplit {
        if self.blocks.uniform {
            self.uniform_param_split()
        } else {
            self.blocks_param_split()
        }
    }

    fn blocks_param_split(&self) -> ParamSplit {
        let b = &self.blocks;
        let p = b.params_by_component();
        let n = b.len().max(1) as u64;
        let layers = b.layer_params();
        let mut replicated = layers.get(Component::Norms);
        let mut per_expert = 0;
        for (kind, count) in b.kinds.iter().zip(b.kind_counts()) {
            if let Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) = kind.ffn {
                let per = if m.gated { 3 } else { 2 } * b.hidden * m.expert_intermediate;
                per_expert = per_expert.max(per);
            }
            kind.tensors(b.hidden, &mut |t| {
                if t.kind == crate::blocks::TensorKind::Vector
                    && t.component != Component::Norms
                    && t.rows == b.hidden
                {
                    replicated += count * t.numel();
                }
            });
        }
        ParamSplit {
            embedding: p.get(Component::Embedding) + p.get(Component::Vision),
            per_layer: layers.total().div_ceil(n),
            per_encoder_layer: 0,
            relative_bias: 0,
            head: b.ends.final_norm + b.ends.head + b.ends.other + p.get(Component::Mtp),
            per_layer_replicated: replicated.div_ceil(n),
            per_expert,
        }
    }

    /// Parameters per component (`params_by_component` of `vram estimate --json`).
    pub fn params_by_component(&self) -> ComponentParams {
        self.blocks.params_by_component()
    }

    /// The layer-by-layer description the uniform fields give: every layer the same block
    /// (T5: the first block of each stack holds the relative-position table; decoder blocks add
    /// cross-attention and its norm).
    pub fn uniform_blocks(&self) -> Blocks {
        let s = self.uniform_param_split();
        let attention = Attention {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            v_head_dim: self.head_dim,
            window: match self.sliding_window {
                Some(w) => Window::Sliding(w),
                None => Window::Full,
            },
            sinks: false,
            qk_norm: QkNorm::None,
            q_gate: false,
            k_eq_v: false,
            v_norm: false,
            qkv_bias: self.qkv_bias,
            out_bias: self.out_bias,
            kv_shared: false,
            fused_qkv: self.fused_qkv,
            rel_buckets: 0,
            rope: self.positions == Positions::Rotary,
        };
        let dense = Dense {
            intermediate: self.intermediate,
            gated: self.mlp == Mlp::Gated,
            bias: self.mlp_bias,
            fused_gate_up: self.fused_gate_up,
        };
        let ffn = if self.experts > 1 {
            Ffn::Moe(Moe {
                experts: self.experts,
                top_k: self.experts_per_token,
                expert_intermediate: self.intermediate,
                gated: dense.gated,
                expert_bias: self.mlp_bias,
                router_bias: false,
                correction_bias: false,
                router_extra: 0,
                // The uniform MoE family is Mixtral: `MixtralTopKRouter.forward` (transformers
                // 5.17 and 5.24) returns the top-k of the fp32 softmax without casting it back.
                router_weights_fp32: true,
                router_param_fp32: false,
                dispatch: Dispatch::GroupedMm,
                shared: None,
                shared_gate: false,
                latent: None,
                latent_bias: false,
            })
        } else {
            Ffn::Dense(dense)
        };
        let block = Block {
            mixer: Mixer::Attention(attention),
            cross_attention: false,
            ffn,
            norms: Norms {
                count: self.norms_per_layer,
                params_each: self.norm_params(),
            },
            extra: (Component::Other, 0),
        };
        let enc_dec = self.layout == Layout::EncoderDecoder;
        let decoder = Block {
            cross_attention: enc_dec,
            norms: Norms {
                count: self.norms_per_layer + u64::from(enc_dec),
                ..block.norms
            },
            ..block
        };
        let with_table = |b: Block| match (b.mixer, self.positions) {
            (Mixer::Attention(a), Positions::RelativeBuckets(n)) => Block {
                mixer: Mixer::Attention(Attention {
                    rel_buckets: n,
                    ..a
                }),
                ..b
            },
            _ => b,
        };
        let mut layers = Vec::with_capacity((self.layers + self.encoder_layers) as usize);
        for i in 0..self.encoder_layers {
            layers.push(if i == 0 { with_table(block) } else { block });
        }
        for i in 0..self.layers {
            layers.push(if i == 0 { with_table(decoder) } else { decoder });
        }
        let stacks = if enc_dec { 2 } else { 1 };
        let final_norm = if self.final_norm {
            stacks * self.norm_params()
        } else {
            0
        };
        let head = if !self.tied_embeddings && self.layout != Layout::EncoderOnly {
            self.vocab * self.hidden
        } else {
            0
        };
        let mut b = Blocks::from_layers(
            self.hidden,
            &layers,
            Ends {
                embedding: s.embedding,
                vocab: self.vocab,
                final_norm,
                head,
                other: if self.pooler {
                    self.hidden * self.hidden + self.hidden
                } else {
                    0
                },
            },
        );
        b.uniform = true;
        b
    }

    /// The split the uniform fields give (exact for the families they describe).
    pub fn uniform_param_split(&self) -> ParamSplit {
        let h = self.hidden;
        let norm = self.norm_params();
        let mut embedding = self.vocab * h;
        if let Positions::Learned(n) = self.positions {
            embedding += n * h;
        }
        embedding += self.type_vocab * h;
        if self.embedding_norm {
            embedding += norm;
        }
        let router = if self.experts > 1 {
            h * self.experts
        } else {
            0
        };
        let mlp = self.experts * self.mlp_params() + router;
        let per_layer_norms = self.norms_per_layer * norm;
        let mut per_layer = self.attention_params() + mlp + per_layer_norms;
        let mut per_encoder_layer = 0;
        if self.layout == Layout::EncoderDecoder {
            // Decoder blocks add cross-attention and its norm; `norms_per_layer` counts the
            // encoder's two norms, so the decoder has one more.
            per_encoder_layer = per_layer;
            per_layer += self.attention_params() + norm;
        }
        let relative_bias = match self.positions {
            Positions::RelativeBuckets(b) => b * self.heads,
            _ => 0,
        };
        let stacks = if self.layout == Layout::EncoderDecoder {
            2
        } else {
            1
        };
        let mut head = if self.final_norm { stacks * norm } else { 0 };
        if self.pooler {
            head += h * h + h;
        }
        if !self.tied_embeddings && self.layout != Layout::EncoderOnly {
            head += self.vocab * h;
        }
        let out_bias = if self.out_bias { h } else { 0 };
        let mlp_out_bias = if self.mlp_bias { h } else { 0 };
        ParamSplit {
            embedding,
            per_layer,
            per_encoder_layer,
            relative_bias: relative_bias * stacks,
            head,
            per_layer_replicated: per_layer_norms + out_bias + mlp_out_bias * self.experts,
            per_expert: self.mlp_params(),
        }
    }

    /// Exact parameter count, from the layer-by-layer description.
    pub fn param_count(&self) -> u64 {
        self.blocks.param_count()
    }

    /// The parameter count the uniform fields give (equal to [`Transformer::param_count`] for
    /// the families they describe; a test holds them together).
    pub fn uniform_param_count(&self) -> u64 {
        let s = self.uniform_param_split();
        s.embedding
            + s.per_layer * self.layers
            + s.per_encoder_layer * self.encoder_layers
            + s.relative_bias
            + s.head
    }

    /// Element counts of one block's parameter tensors, one entry per tensor, in module order
    /// (attention, cross-attention for a decoder block of an encoder-decoder, feed-forward,
    /// norms). Sums to the block's share of [`ParamSplit`]; used where individual tensors matter
    /// (allocator replay: gradients and optimizer states are per tensor).
    ///
    /// For models whose layers differ (not `blocks.uniform`), the tensors of the most common
    /// layer kind as transformers holds them (an expert bank is one 3-D parameter).
    pub fn block_tensor_elems(&self, decoder_of_enc_dec: bool) -> Vec<u64> {
        if !self.blocks.uniform {
            let counts = self.blocks.kind_counts();
            let mut v = Vec::new();
            if let Some((kind, _)) = self.blocks.kinds.iter().zip(counts).max_by_key(|(_, n)| *n) {
                kind.tensors(self.hidden, &mut |t| v.push(t.numel()));
            }
            return v;
        }
        let h = self.hidden;
        let (q, kv) = self.attn_widths();
        let norm = |v: &mut Vec<u64>| {
            v.push(h);
            if self.norm == Norm::LayerNorm && self.norm_bias {
                v.push(h);
            }
        };
        let attention = |v: &mut Vec<u64>| {
            if self.fused_qkv {
                v.push(h * (q + 2 * kv));
                if self.qkv_bias {
                    v.push(q + 2 * kv);
                }
            } else {
                for w in [q, kv, kv] {
                    v.push(h * w);
                    if self.qkv_bias {
                        v.push(w);
                    }
                }
            }
            v.push(q * h);
            if self.out_bias {
                v.push(h);
            }
        };
        let mut v = Vec::new();
        attention(&mut v);
        if decoder_of_enc_dec {
            attention(&mut v);
            norm(&mut v);
        }
        let f = self.intermediate;
        for _ in 0..self.experts {
            let ups = if self.mlp == Mlp::Gated { 2 } else { 1 };
            if self.fused_gate_up && ups == 2 {
                v.push(2 * h * f);
            } else {
                for _ in 0..ups {
                    v.push(h * f);
                }
            }
            if self.mlp_bias {
                for _ in 0..ups {
                    v.push(f);
                }
            }
            v.push(f * h);
            if self.mlp_bias {
                v.push(h);
            }
        }
        if self.experts > 1 {
            v.push(h * self.experts);
        }
        for _ in 0..self.norms_per_layer {
            norm(&mut v);
        }
        v
    }

    /// The parameter tensors by shape, for optimizers whose state depends on shapes (Adafactor).
    ///
    /// For models whose layers differ, every tensor of the blocks (an expert bank counts as
    /// `experts` matrices), the embedding and the head.
    pub fn param_tensors(&self) -> Vec<ParamTensor> {
        if !self.blocks.uniform {
            let b = &self.blocks;
            let mut v = vec![ParamTensor::matrix(self.vocab, self.hidden, 1)];
            for (kind, n) in b.kinds.iter().zip(b.kind_counts()) {
                kind.tensors(b.hidden, &mut |t| {
                    let e = match t.kind {
                        crate::blocks::TensorKind::Experts(e) => e,
                        _ => 1,
                    };
                    v.push(ParamTensor {
                        rows: t.rows,
                        cols: t.cols,
                        count: e * n,
                        tp_split: t.cols > 1,
                    });
                });
            }
            if b.ends.head > 0 {
                v.push(ParamTensor::matrix(self.vocab, self.hidden, 1));
            }
            let rest = b.ends.embedding.saturating_sub(self.vocab * self.hidden)
                + b.ends.final_norm
                + b.vision.map_or(0, |x| x.params)
                + b.mtp.filter(|m| m.instantiated).map_or(0, |m| m.params);
            if rest > 0 {
                v.push(ParamTensor::vector(rest, 1, false));
            }
            return v;
        }
        let h = self.hidden;
        let (q, kv) = self.attn_widths();
        let l = self.layers + self.encoder_layers;
        let cross = if self.layout == Layout::EncoderDecoder {
            self.layers
        } else {
            0
        };
        let attn_blocks = l + cross;
        let mut v = vec![ParamTensor::matrix(self.vocab, h, 1)];
        if let Positions::Learned(n) = self.positions {
            v.push(ParamTensor::matrix(n, h, 1));
        }
        if self.type_vocab > 0 {
            v.push(ParamTensor::matrix(self.type_vocab, h, 1));
        }
        v.push(ParamTensor::matrix(h, q, attn_blocks));
        v.push(ParamTensor::matrix(h, kv, 2 * attn_blocks));
        v.push(ParamTensor::matrix(q, h, attn_blocks));
        if self.qkv_bias {
            v.push(ParamTensor::vector(q + 2 * kv, attn_blocks, true));
        }
        if self.out_bias {
            v.push(ParamTensor::vector(h, attn_blocks, false));
        }
        let mats = if self.mlp == Mlp::Gated { 3 } else { 2 };
        let f = self.intermediate;
        v.push(ParamTensor::matrix(h, f, (mats - 1) * l * self.experts));
        v.push(ParamTensor::matrix(f, h, l * self.experts));
        if self.mlp_bias {
            v.push(ParamTensor::vector(f, (mats - 1) * l * self.experts, true));
            v.push(ParamTensor::vector(h, l * self.experts, false));
        }
        if self.experts > 1 {
            v.push(ParamTensor::matrix(h, self.experts, l));
        }
        let norms = self.norms_per_layer * l
            + cross
            + u64::from(self.embedding_norm)
            + if self.final_norm {
                1 + u64::from(cross > 0)
            } else {
                0
            };
        let per_norm = if self.norm == Norm::LayerNorm && self.norm_bias {
            2
        } else {
            1
        };
        v.push(ParamTensor::vector(h, norms * per_norm, false));
        if let Positions::RelativeBuckets(b) = self.positions {
            v.push(ParamTensor::matrix(b, self.heads, 1 + u64::from(cross > 0)));
        }
        if self.pooler {
            v.push(ParamTensor::matrix(h, h, 1));
            v.push(ParamTensor::vector(h, 1, false));
        }
        if !self.tied_embeddings && self.layout != Layout::EncoderOnly {
            v.push(ParamTensor::matrix(self.vocab, h, 1));
        }
        v
    }
}

/// A torchvision ResNet (`torchvision.models.resnet*`), 1000 classes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResNet {
    /// Display name.
    pub name: String,
    /// Blocks in each of the four stages.
    pub blocks: [u64; 4],
    /// Bottleneck blocks (ResNet-50 and deeper) or basic blocks.
    pub bottleneck: bool,
    /// Output classes of the final fully connected layer.
    pub classes: u64,
    /// Input image side (224 by default), used for activations.
    pub image_size: u64,
}

/// One convolution (followed by batch norm) of a ResNet, with its output geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv {
    /// Input channels.
    pub cin: u64,
    /// Output channels.
    pub cout: u64,
    /// Kernel side.
    pub k: u64,
    /// Stride (1, or 2 where a stage or the stem halves the image).
    pub stride: u64,
    /// Input spatial side.
    pub in_side: u64,
    /// Output spatial side.
    pub out_side: u64,
    /// A ReLU output follows (directly, or after the residual add); false for downsample convs.
    pub relu: bool,
}

impl ResNet {
    /// The ResNet depths torchvision defines: 18, 34, 50, 101 and 152.
    pub fn torchvision(depth: u64) -> Option<ResNet> {
        let (blocks, bottleneck) = match depth {
            18 => ([2, 2, 2, 2], false),
            34 => ([3, 4, 6, 3], false),
            50 => ([3, 4, 6, 3], true),
            101 => ([3, 4, 23, 3], true),
            152 => ([3, 8, 36, 3], true),
            _ => return None,
        };
        Some(ResNet {
            name: format!("resnet-{depth}"),
            blocks,
            bottleneck,
            classes: 1000,
            image_size: 224,
        })
    }

    /// Every convolution in forward order (stem first; downsample convs after their block's convs).
    pub fn convs(&self) -> Vec<Conv> {
        let mut side = self.image_size.div_ceil(2);
        let mut v = vec![Conv {
            cin: 3,
            cout: 64,
            k: 7,
            stride: 2,
            in_side: self.image_size,
            out_side: side,
            relu: true,
        }];
        side = side.div_ceil(2); // max pool
        let expansion = if self.bottleneck { 4 } else { 1 };
        let mut cin = 64;
        for (stage, &n) in self.blocks.iter().enumerate() {
            let width = 64 << stage;
            for block in 0..n {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                let out_side = side.div_ceil(stride);
                let cout = width * expansion;
                if self.bottleneck {
                    v.push(Conv {
                        cin,
                        cout: width,
                        k: 1,
                        stride: 1,
                        in_side: side,
                        out_side: side,
                        relu: true,
                    });
                    v.push(Conv {
                        cin: width,
                        cout: width,
                        k: 3,
                        stride,
                        in_side: side,
                        out_side,
                        relu: true,
                    });
                    v.push(Conv {
                        cin: width,
                        cout,
                        k: 1,
                        stride: 1,
                        in_side: out_side,
                        out_side,
                        relu: true,
                    });
                } else {
                    v.push(Conv {
                        cin,
                        cout: width,
                        k: 3,
                        stride,
                        in_side: side,
                        out_side,
                        relu: true,
                    });
                    v.push(Conv {
                        cin: width,
                        cout,
                        k: 3,
                        stride: 1,
                        in_side: out_side,
                        out_side,
                        relu: true,
                    });
                }
                if stride != 1 || cin != cout {
                    v.push(Conv {
                        cin,
                        cout,
                        k: 1,
                        stride,
                        in_side: side,
                        out_side,
                        relu: false,
                    });
                }
                cin = cout;
                side = out_side;
            }
        }
        v
    }

    /// Channels entering the final fully connected layer.
    pub fn fc_in(&self) -> u64 {
        512 * if self.bottleneck { 4 } else { 1 }
    }

    /// Exact parameter count (convolutions without bias, batch norms' weight and bias, fc).
    pub fn param_count(&self) -> u64 {
        let convs: u64 = self
            .convs()
            .iter()
            .map(|c| c.cin * c.cout * c.k * c.k + 2 * c.cout)
            .sum();
        convs + self.fc_in() * self.classes + self.classes
    }
}

/// A checkpoint known only by its tensors (safetensors without a config.json).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Weights {
    /// Display name (the file name).
    pub name: String,
    /// Total elements over all tensors.
    pub params: u64,
    /// Total bytes the tensors take in the file's dtypes.
    pub bytes: u64,
    /// Elements per dtype name, e.g. `BF16`.
    pub dtypes: Vec<(String, u64)>,
}
