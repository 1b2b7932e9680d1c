//! Model architectures as vramkit sees them: the shapes that decide parameters and activations.
//!
//! A [`Model`] is built from a Hugging Face `config.json` ([`crate::read`]), from the built-in
//! catalog ([`crate::catalog`]) or from a safetensors header ([`crate::read::safetensors`]).
//! Parameter counts are exact: they equal `sum(p.numel() for p in model.parameters())` of the
//! PyTorch module the config builds (tied weights counted once).

use serde::Serialize;

use crate::describe::{Block, Blocks, Component, ComponentParams, Ffn, Layout, Mixer};

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

/// A transformer as vramkit models it: its name and its layer-by-layer description. All sizes
/// are the model's own (no parallelism applied).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transformer {
    /// Display name.
    pub name: String,
    /// The Hugging Face `model_type` it was read as, for display: nothing downstream of the
    /// reader compares it (family facts are parameters of the description); an engine rule keyed
    /// by architecture asks the reader (e.g. [`crate::hf::vllm_raises_capture_sizes`]).
    pub model_type: String,
    /// The description: embedding, layers (one [`crate::describe::Block`] per distinct kind and
    /// a kind per layer), head, storage. Parameter counts, per-component splits, weight bytes,
    /// caches, activations and FLOPs all come from it.
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
    /// Token, position and type embeddings (and their norm), and a vision tower.
    pub embedding: u64,
    /// One decoder block (or encoder block for encoder-only), the mean over those layers
    /// rounded up, position tables apart.
    pub per_layer: u64,
    /// One encoder block of an encoder-decoder (the mean, rounded up).
    pub per_encoder_layer: u64,
    /// The relative-position tables the first layer of each stack holds (T5).
    pub relative_bias: u64,
    /// Final norms, pooler, an untied output head and instantiated MTP layers.
    pub head: u64,
    /// Of `per_layer`, the parameters tensor parallelism replicates (norms, row-parallel
    /// biases, routers), the mean rounded up.
    pub per_layer_replicated: u64,
    /// The largest expert's feed-forward (MoE only).
    pub per_expert: u64,
}

impl Transformer {
    /// Hidden size.
    pub fn hidden(&self) -> u64 {
        self.blocks.hidden
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> u64 {
        self.blocks.vocab()
    }

    /// How the layers are wired.
    pub fn layout(&self) -> Layout {
        self.blocks.layout
    }

    /// Layers of both stacks.
    pub fn layers(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Longest sequence the model was configured for.
    pub fn max_positions(&self) -> u64 {
        self.blocks.max_positions
    }

    /// The parameter split; see [`ParamSplit`].
    pub fn param_split(&self) -> ParamSplit {
        let b = &self.blocks;
        let p = b.params_by_component();
        let enc = b.encoder_layers() as usize;
        let mean = |from: usize, to: usize, f: &dyn Fn(&Block) -> u64| -> u64 {
            let n = (to - from).max(1) as u64;
            let sum: u64 = b.pattern[from..to]
                .iter()
                .map(|k| f(&b.kinds[*k as usize]))
                .sum();
            sum.div_ceil(n)
        };
        let table = |k: &Block| match k.mixer {
            Mixer::Attention(a) => a.rel_buckets * a.heads,
            _ => 0,
        };
        let own = |k: &Block| k.params(b.hidden).total() - table(k);
        let replicated = |k: &Block| {
            let mut r = 0;
            k.tensors(b.hidden, &mut |t| {
                if !t.tp {
                    r += t.numel();
                }
            });
            r - table(k)
        };
        let mut per_expert = 0;
        for kind in &b.kinds {
            if let Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) = kind.ffn {
                let per = if m.gated { 3 } else { 2 } * b.hidden * m.expert_intermediate;
                per_expert = per_expert.max(per);
            }
        }
        let n = b.len();
        ParamSplit {
            embedding: p.get(Component::Embedding)
                + p.get(Component::Vision)
                + p.get(Component::Audio),
            per_layer: mean(enc, n, &own),
            per_encoder_layer: if enc > 0 { mean(0, enc, &own) } else { 0 },
            relative_bias: b.iter().map(table).sum(),
            head: b.ends.final_norm + b.ends.head + b.ends.other + p.get(Component::Mtp),
            per_layer_replicated: mean(enc, n, &replicated),
            per_expert,
        }
    }

    /// Parameters per component (`params_by_component` of `vram estimate --json`).
    pub fn params_by_component(&self) -> ComponentParams {
        self.blocks.params_by_component()
    }

    /// Exact parameter count, from the layer-by-layer description.
    pub fn param_count(&self) -> u64 {
        self.blocks.param_count()
    }

    /// The parameter tensors by shape, for optimizers whose state depends on shapes (Adafactor):
    /// the embedding's tables, every tensor of the layers (an expert bank counts as `experts`
    /// matrices) and the head's.
    pub fn param_tensors(&self) -> Vec<ParamTensor> {
        let b = &self.blocks;
        let h = b.hidden;
        let mut v = vec![ParamTensor::matrix(b.vocab(), h, 1)];
        let e = b.embedding;
        if e.learned_positions > 0 {
            v.push(ParamTensor::matrix(e.learned_positions, h, 1));
        }
        if e.type_vocab > 0 {
            v.push(ParamTensor::matrix(e.type_vocab, h, 1));
        }
        for (kind, n) in b.kinds.iter().zip(b.kind_counts()) {
            kind.tensors(h, &mut |t| {
                let e = match t.kind {
                    crate::describe::TensorKind::Experts(e) => e,
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
        if b.head.pooler {
            v.push(ParamTensor::matrix(h, h, 1));
            v.push(ParamTensor::vector(h, 1, false));
        }
        if b.ends.head > 0 {
            v.push(ParamTensor::matrix(b.vocab(), h, 1));
        }
        let tables = b.vocab() * h + (e.learned_positions + e.type_vocab) * h;
        let pooler = if b.head.pooler { h * h + h } else { 0 };
        let rest = b.ends.embedding.saturating_sub(tables)
            + b.ends.final_norm
            + b.ends.other.saturating_sub(pooler)
            + b.ends.head.saturating_sub(b.vocab() * h)
            + b.vision.as_ref().map_or(0, |x| x.params)
            + b.audio.as_ref().map_or(0, |x| x.params)
            + b.mtp.filter(|m| m.instantiated).map_or(0, |m| m.params);
        if rest > 0 {
            v.push(ParamTensor::vector(rest, 1, false));
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
