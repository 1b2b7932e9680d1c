//! The layer-by-layer description of a transformer: an embedding, a list of blocks
//! ([`super::Block`]) and a head. [`Blocks`] holds the distinct block kinds once and a per-layer
//! index into them, so an 80-layer model costs a few kinds and 80 bytes.
//!
//! The shapes follow the modules that transformers 5.24's `from_config` builds (named per
//! mechanism below); the counts are checked against `sum(p.numel() for p in model.parameters())`
//! of the real module tree on the meta device.

use serde::Serialize;

use super::{Block, Checkpoint, Norms, Quant, Residual, Storage};
use crate::mech::{
    Attention, CacheKind, CacheReport, CacheSpec, Component, ComponentParams, Dense, Ffn,
    KindCache, Mixer, Norm, Site, Tensor, TensorKind, Vision, Window,
};
use crate::read::safetensors::Tally;

/// How the layers are wired into a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Decoder-only causal LM (`*ForCausalLM`), LM head over the vocabulary.
    DecoderOnly,
    /// Encoder-only (`BertModel`/`RobertaModel`: embeddings, encoder and pooler).
    EncoderOnly,
    /// Encoder-decoder (`T5ForConditionalGeneration`): the encoder's layers, then the decoder's,
    /// each of which carries a cross-attention.
    EncoderDecoder,
}

/// Multi-token-prediction layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mtp {
    /// How many the config declares.
    pub layers: u64,
    /// Whether the loading code builds them (MiMo's remote code does; DeepSeek-V3, GLM and
    /// Qwen3.5 in transformers 5.24 ignore their weights at load).
    pub instantiated: bool,
    /// Parameters of all declared layers (counted only when instantiated).
    pub params: u64,
}

/// One layer's shape as [`Blocks::typical`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Typical {
    /// Query heads.
    pub heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Query/key head size.
    pub head_dim: u64,
    /// Feed-forward inner size (one expert's for a mixture of experts).
    pub intermediate: u64,
    /// Gated feed-forward.
    pub gated: bool,
    /// Experts (1 for a dense feed-forward).
    pub experts: u64,
    /// Experts each token is routed to (1 for a dense feed-forward).
    pub top_k: u64,
}

impl Typical {
    /// Query width `heads · head_dim` and key/value width `kv_heads · head_dim`.
    pub fn attn_widths(&self) -> (u64, u64) {
        (self.heads * self.head_dim, self.kv_heads * self.head_dim)
    }
}

/// The model-level parts that are not per-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Ends {
    /// Embedding parameters (token, position, type, per-layer-input tables, embedding norm).
    pub embedding: u64,
    /// Vocabulary rows of the token embedding (for storage: an embedding table).
    pub vocab: u64,
    /// Final norm(s).
    pub final_norm: u64,
    /// Untied output head (0 when tied).
    pub head: u64,
    /// Other model-level parameters (a pooler).
    pub other: u64,
}

/// What the model does around its token embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Embedding {
    /// Rows of a learned position table added to the token embeddings (GPT-2's `wpe`, BERT's
    /// `position_embeddings`); 0 without one.
    pub learned_positions: u64,
    /// Rows of a token-type table (BERT); 0 without one.
    pub type_vocab: u64,
    /// A norm right after the embeddings (BERT's `LayerNorm`).
    pub norm: bool,
    /// The model's forward makes the first layer's input as a new tensor from `inputs_embeds`
    /// and keeps both (Gemma 1/2: `hidden_states = inputs_embeds * normalizer`).
    pub scaled_copy: bool,
}

/// What the model does after its last layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Head {
    /// The LM head shares the token embedding's weight.
    pub tied: bool,
    /// A pooler (`dense h→h` with bias, tanh) on the first token (BERT/RoBERTa).
    pub pooler: bool,
    /// `final_logit_softcapping`: `tanh(logits / c) · c` over the whole logits, whose tanh
    /// output is saved for backward (Gemma 2).
    pub softcap: bool,
    /// A tied head's input is rescaled by `d_model^-0.5` first (T5).
    pub tied_rescale: bool,
    /// A multimodal wrapper whose text model ties otherwise than the wrapper class: the
    /// `tie_word_embeddings` of `text_config` (its class default where absent). transformers
    /// ties by the wrapper's config (`tied`), but vLLM builds the language model from
    /// `text_config` alone (`init_vllm_registered_model(hf_config=config.text_config)` in
    /// `mistral3.py` and `pixtral.py`, which `llama.py` ties by; read at 0.19.0). `None`: as `tied`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_tied: Option<bool>,
}

impl Head {
    /// Whether vLLM's language model shares the token table with its LM head.
    pub fn vllm_tied(&self) -> bool {
        self.text_tied.unwrap_or(self.tied)
    }
}

/// Dropout probabilities of the model's config, active in training.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Dropout {
    /// On the attention probabilities (0: no mask is stored).
    pub attention: f64,
    /// On the residual branches and the embeddings.
    pub hidden: f64,
}

/// The module names transformers gives a family's layers (what LoRA targets match), and how
/// PEFT rewrites its expert targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Names {
    /// The attention module (`self_attn`, GPT-2's `attn`, NeoX's `attention`).
    pub attn: &'static str,
    /// Query, key and value projections.
    pub q: &'static str,
    /// Key projection.
    pub k: &'static str,
    /// Value projection.
    pub v: &'static str,
    /// A fused query/key/value projection (`qkv_proj`, `c_attn`, `query_key_value`).
    pub qkv: &'static str,
    /// The attention's output projection.
    pub o: &'static str,
    /// The feed-forward module.
    pub mlp: &'static str,
    /// Gate projection.
    pub gate: &'static str,
    /// Up projection.
    pub up: &'static str,
    /// A fused gate/up projection.
    pub gate_up: &'static str,
    /// Down projection.
    pub down: &'static str,
    /// transformers' `conversion_mapping._MODEL_TO_CONVERSION_PATTERN` entry PEFT 0.21.2 applies
    /// to this family's expert targets (`_convert_peft_config_moe`), if any.
    pub moe_conversion: Option<MoeConversion>,
}

impl Names {
    /// The names of Llama and of most families since.
    pub const LLAMA: Names = Names {
        attn: "self_attn",
        q: "q_proj",
        k: "k_proj",
        v: "v_proj",
        qkv: "qkv_proj",
        o: "o_proj",
        mlp: "mlp",
        gate: "gate_proj",
        up: "up_proj",
        gate_up: "gate_up_proj",
        down: "down_proj",
        moe_conversion: None,
    };
}

impl Default for Names {
    fn default() -> Self {
        Names::LLAMA
    }
}

/// The base pattern of a PEFT MoE target rewrite: which v4 names become which parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoeConversion {
    /// `w1`/`w3` → `gate_up_proj`, `w2` → `down_proj`, `gate` → `gate.weight`.
    Mixtral,
    /// `gate_proj`/`up_proj` → `gate_up_proj`, `down_proj` → `down_proj`, `gate` →
    /// `gate.weight`.
    Qwen2Moe,
}

impl MoeConversion {
    /// One expert's gate, up and down linears by their transformers v4 names, the names
    /// checkpoints store them under and the pattern's source names (transformers 5.24.0
    /// `conversion_mapping`, as PEFT 0.21.2 `_convert_peft_config_moe` copies it): the one place
    /// both the LoRA target rewrite and the quantization ignore list read them.
    pub const fn expert_names(self) -> [&'static str; 3] {
        match self {
            MoeConversion::Mixtral => ["w1", "w3", "w2"],
            MoeConversion::Qwen2Moe => ["gate_proj", "up_proj", "down_proj"],
        }
    }
}

/// What a family's figures have been checked against, for the estimate's `assumes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Checked {
    /// The 2019–2024 families: steps measured on an H100 under transformers 5.17, their module
    /// trees the same in 5.24.
    H100Steps,
    /// The families read from transformers 5.24: module tree and cache against 5.24 itself
    /// (the zoo), mechanisms read from its source.
    #[default]
    Zoo,
}

/// Multimodal rotary positions ([`Blocks::mrope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MRope {
    /// `mrope_interleaved`: the three sections' frequencies interleave.
    pub interleaved: bool,
}

/// The rotary tables an engine's `get_rope` keeps for a model ([`Blocks::rope_tables`]): vLLM
/// and SGLang keep one `cos_sin_cache` per distinct key (`_ROPE_DICT`, keyed by head size,
/// rotary width, max positions, base, scaling and dtype: vLLM `rotary_embedding/__init__.py`,
/// read at v0.10.2 and v0.19.0; SGLang `layers/rotary_embedding.py`, read at 0.4.2, 0.4.5 and
/// 0.5.3), each as many rows as its class builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct RopeTables {
    /// The class the config's own rope parameters build, with what sizes its table.
    pub class: RopeClass,
    /// Sliding-window layers build their rotary embedding from parameters of their own, a
    /// second key with `max_positions` rows: Gemma 3 (`rope_local_base_freq` and default
    /// scaling, `gemma3.py` at v0.10.2 and v0.19.0) and Gemma 4 (`rope_parameters` per layer
    /// type, `gemma4.py` at v0.19.0).
    pub local: bool,
    /// SGLang's Gemma 3 (`gemma3_causal.py`): the `get_rope` tables its layers build from
    /// 0.5.10, each with `rope_type: default` and `max_position_embeddings` rows whatever the
    /// config's scaling, one per distinct base (the full layers' `rope_theta`, the sliding
    /// layers' `rope_local_base_freq`): 2 where they differ, else 1; 0 for every other model.
    /// Before 0.5.10 its layers keep no table (a transformers-style `Gemma3RotaryEmbedding`
    /// computes cos/sin per step from `inv_freq`; read at 0.4.5 to 0.5.9, and get_rope's
    /// tables at 0.5.10, 0.5.11, 0.5.15 to 0.5.19 and 0.5.23).
    pub sglang_per_base_tables: u8,
}

/// The rotary class `get_rope` builds for a config's rope parameters, by the rows of its
/// `_compute_cos_sin_cache` (`torch.arange` of the class's length: a float length gives its
/// ceiling). Read in vLLM's `rotary_embedding/` at v0.10.2, v0.19.0, v0.21.0 and v0.22.0 (and
/// the single-file module at 0.6.6, 0.8.3 and 0.8.5), and SGLang's at 0.4.2 to 0.5.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RopeClass {
    /// `max_positions` rows: no scaling (`RotaryEmbedding`, M-RoPE's `MRotaryEmbedding` before
    /// the engine's own multiple) and the classes that change only the frequencies:
    /// `Llama3RotaryEmbedding` (`llama3`), Gemma 4's `proportional`.
    #[default]
    Positions,
    /// `NTKScalingRotaryEmbedding` (`ntk`): `max_positions` rows where the release builds it
    /// (vLLM from 0.9.0); vLLM to 0.8.5 and every SGLang read (0.4.2 to 0.5.23) raise
    /// `ValueError: Unknown RoPE scaling type ntk`.
    Ntk,
    /// `dynamic` with `alpha`: `DynamicNTKAlphaRotaryEmbedding`, `max_positions` rows, where
    /// the release checks `alpha` first (vLLM from 0.9.2, SGLang from 0.5.10); earlier releases
    /// read `factor` only, building [`RopeClass::DynamicNtk`]'s table when the dict has one too
    /// and raising `KeyError: 'factor'` when it does not.
    DynamicAlpha {
        /// `ceil(max_positions × factor)` where the dict also has a `factor`.
        factor_rows: Option<u64>,
    },
    /// `LinearScalingRotaryEmbedding` (`linear`): `max_positions × factor` rows.
    Linear {
        /// `ceil(max_positions × factor)`.
        rows: u64,
    },
    /// `DynamicNTKScalingRotaryEmbedding` (`dynamic` with `factor`): `max_positions × factor`
    /// rows in SGLang and in vLLM to 0.21; from vLLM 0.22 `max_positions` (its
    /// `max_trained_positions` change).
    DynamicNtk {
        /// `ceil(max_positions × factor)`.
        rows: u64,
    },
    /// `YaRNScalingRotaryEmbedding` (`yarn`) and DeepSeek's `DeepseekScalingRotaryEmbedding`
    /// (`deepseek_v2.py` turns a `yarn` into `deepseek_yarn`): both are built with
    /// `original_max_position_embeddings`, not `max_positions`, and keep `original × factor`
    /// rows whatever `max_position_embeddings` says.
    Yarn {
        /// `ceil(original_max_position_embeddings × factor)`.
        rows: u64,
        /// The config names `deepseek_yarn` itself (DeepSeek's class whatever the layer;
        /// MLA layers in vLLM's and SGLang's `deepseek_v2.py` build it from any scaling).
        deepseek: bool,
    },
    /// `Phi3LongRoPEScaledRotaryEmbedding` (`longrope`): a short table of
    /// `original_max_position_embeddings` rows and a long one of `max_positions` rows.
    LongRope {
        /// `original_max_position_embeddings`.
        original: u64,
    },
}

/// The whole description of a transformer: its layers, kept once per distinct kind, and what
/// surrounds them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Blocks {
    /// How the layers are wired.
    pub layout: Layout,
    /// Hidden size the blocks read and write.
    pub hidden: u64,
    /// Longest sequence the model was configured for (`max_position_embeddings`).
    pub max_positions: u64,
    /// Multimodal rotary positions (M-RoPE: `mrope_section` in the text config's `rope_scaling`
    /// or `rope_parameters`), with whether its sections interleave (`mrope_interleaved`,
    /// Qwen3-VL and Qwen3.5); `None` for plain rotary positions. Engines size their rotary
    /// tables by it (`vram_plan::capacity`).
    pub mrope: Option<MRope>,
    /// The rotary tables engines keep beside the weights; see [`RopeTables`].
    pub rope_tables: RopeTables,
    /// The distinct block kinds.
    pub kinds: Vec<Block>,
    /// Per layer (encoder layers first for encoder-decoders), its index into `kinds`.
    pub pattern: Vec<u8>,
    /// Embedding, final norm and head parameters.
    pub ends: Ends,
    /// What the model does around its token embedding.
    pub embedding: Embedding,
    /// What it does after its last layer.
    pub head: Head,
    /// The class of the model's norms (final and embedding norms; each block's own in its
    /// [`Norms`]).
    pub norm: Norm,
    /// The config's dropout probabilities.
    pub dropout: Dropout,
    /// Module names, for LoRA targets.
    pub names: Names,
    /// What the figures have been checked against.
    pub checked: Checked,
    /// A vision tower, if the model carries one.
    pub vision: Option<Vision>,
    /// An audio tower, if the model carries one. No step here feeds it audio, so it holds its
    /// weights only: no activations, and in training no gradient or optimizer state.
    pub audio: Option<AudioTower>,
    /// The `nn.Linear`s outside the layers, the towers and the head that a text forward runs
    /// (Gemma 4's `per_layer_model_projection`), once each, as LoRA sites; their parameters are
    /// counted with their component (the embedding's).
    pub linears: Vec<Site>,
    /// Multi-token-prediction layers, if the config declares them.
    pub mtp: Option<Mtp>,
    /// The weights as shipped.
    pub storage: Storage,
    /// What the reader assumed or left out, for the estimate's notes (true text only).
    pub notes: Vec<String>,
    /// The config declares a vision tower this reader does not describe (a wrapper read through
    /// its `text_config`, a generic decoder): images would be taken, but are not counted.
    pub vision_unmodelled: bool,
}

/// An audio encoder and its projection into the text model, described for its weights: its
/// parameters and its `nn.Linear`s as PEFT names them (`all-linear` takes them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AudioTower {
    /// Parameters of the tower and its projection.
    pub params: u64,
    /// Parameters an engine that builds the encoder from tensor-parallel layers splits across
    /// a TP group: every projection of the encoder (the subsampling's input projection, each
    /// conformer layer's feed-forwards, q/k/v/post, relative-position and light-convolution
    /// linears, `output_proj`), its depthwise convolutions and their norms. `embed_audio`'s
    /// projection into the text model and the other norms are not among them.
    pub tp_split_params: u64,
    /// Its linears, in groups of equal count (one group per encoder layer's set).
    pub linears: Vec<(Vec<Site>, u64)>,
}

impl Blocks {
    /// No layers yet (a reader fills them in).
    pub fn empty() -> Blocks {
        Blocks::from_layers(0, &[], Ends::default())
    }

    /// A decoder-only description with one kind repeated `layers` times.
    pub fn uniform(hidden: u64, block: Block, layers: u64, ends: Ends) -> Blocks {
        let mut b = Blocks::from_layers(hidden, &[block], ends);
        b.pattern = vec![0; layers as usize];
        b
    }

    /// Builds a decoder-only description (RMSNorm, no dropout, untied unless the ends say so)
    /// from one block per layer, keeping each distinct block once; the reader sets the rest.
    pub fn from_layers(hidden: u64, layers: &[Block], ends: Ends) -> Blocks {
        let mut b = Blocks {
            layout: Layout::DecoderOnly,
            hidden,
            max_positions: 0,
            mrope: None,
            rope_tables: RopeTables::default(),
            kinds: Vec::new(),
            pattern: Vec::new(),
            ends,
            embedding: Embedding::default(),
            head: Head {
                tied: ends.head == 0,
                ..Head::default()
            },
            norm: Norm::RMS,
            dropout: Dropout::default(),
            names: Names::LLAMA,
            checked: Checked::Zoo,
            vision: None,
            audio: None,
            linears: Vec::new(),
            mtp: None,
            storage: Storage::default(),
            notes: Vec::new(),
            vision_unmodelled: false,
        };
        b.set_layers(layers);
        b
    }

    /// Replaces the layers (one block per layer), keeping each distinct block once.
    pub fn set_layers(&mut self, layers: &[Block]) {
        let mut kinds: Vec<Block> = Vec::new();
        let mut pattern = Vec::with_capacity(layers.len());
        for b in layers {
            let i = match kinds.iter().position(|k| k == b) {
                Some(i) => i,
                None => {
                    kinds.push(*b);
                    kinds.len() - 1
                }
            };
            pattern.push(u8::try_from(i).expect("at most 256 distinct block kinds"));
        }
        self.kinds = kinds;
        self.pattern = pattern;
    }

    /// Whether the layers differ beyond an encoder-decoder's two stacks and the position
    /// tables of their first layers: more than one kind, or a mixer other than softmax
    /// attention, or a layer without (or with two) feed-forwards.
    pub fn varies(&self) -> bool {
        let mut seen: Vec<Block> = Vec::new();
        for k in &self.kinds {
            let mut plain = *k;
            if let Mixer::Attention(a) = &mut plain.mixer {
                a.rel_buckets = 0;
            }
            if self.layout == Layout::EncoderDecoder && plain.cross_attention {
                plain.cross_attention = false;
                plain.norms.count = plain.norms.count.saturating_sub(1);
            }
            if !seen.contains(&plain) {
                seen.push(plain);
            }
        }
        seen.len() > 1
            || self.kinds.iter().any(|k| {
                !matches!(k.mixer, Mixer::Attention(_))
                    || matches!(k.ffn, Ffn::None | Ffn::DenseAndMoe(..))
            })
    }

    /// Vocabulary size (rows of the token embedding).
    pub fn vocab(&self) -> u64 {
        self.ends.vocab
    }

    /// Parameters of the embedding beyond its token, position and type tables and its norm:
    /// Gemma 4's per-layer-input table, `per_layer_model_projection` and its norm, Llama 3.2
    /// Vision's eight extra token rows. Every serving engine holds them on the first pipeline
    /// stage, split like the token table.
    pub fn embedding_beyond_tables(&self) -> u64 {
        let e = self.embedding;
        let tables = (self.vocab() + e.learned_positions + e.type_vocab) * self.hidden;
        let norm = if e.norm {
            self.norm.params(self.hidden)
        } else {
            0
        };
        self.ends.embedding.saturating_sub(tables + norm)
    }

    /// Layers of the encoder stack (encoder-decoders; 0 otherwise): the leading layers without
    /// a cross-attention.
    pub fn encoder_layers(&self) -> u64 {
        if self.layout != Layout::EncoderDecoder {
            return 0;
        }
        self.iter().take_while(|b| !b.cross_attention).count() as u64
    }

    /// Layers of the decoder (or the only) stack.
    pub fn decoder_layers(&self) -> u64 {
        self.len() as u64 - self.encoder_layers()
    }

    /// One layer standing for all of them, for the closed forms that price a whole model by a
    /// single layer (the Megatron cost model, the serving engines' profile run, the time of a
    /// `generate` step): the first attention layer's attention (an MLA layer as multi-head
    /// attention of its heads and query/key size; the window only where every attention layer
    /// has one), and the feed-forward most layers have: the routed experts where more than half
    /// the layers (or all that have a feed-forward) are mixtures of experts, else the first
    /// dense MLP.
    pub fn representative(&self) -> Block {
        let first = self.iter().find_map(|b| b.mixer.softmax_equivalent());
        let all_windowed = self.iter().all(|b| {
            b.mixer
                .as_attention()
                .is_none_or(|a| a.window != Window::Full)
        });
        let mut attn = first.unwrap_or_else(|| Attention::new(1, 1, self.hidden));
        if !all_windowed {
            attn.window = Window::Full;
        }
        let n = self.len();
        let moe_layers = self
            .iter()
            .filter(|b| b.ffn.moe().is_some() && b.ffn.dense().is_none())
            .count();
        let any_dense = self.iter().any(|b| b.ffn.dense().is_some());
        let moe = self.iter().find_map(|b| b.ffn.moe().copied());
        let dense = self.iter().find_map(|b| b.ffn.dense().copied());
        let ffn = match (moe, dense) {
            (Some(m), _) if !any_dense || moe_layers * 2 > n => Ffn::Moe(m),
            (_, Some(d)) => Ffn::Dense(d),
            _ => Ffn::Dense(Dense::new(4 * self.hidden)),
        };
        let first_block = self.kinds.first().copied();
        Block {
            mixer: Mixer::Attention(attn),
            cross_attention: false,
            ffn,
            norms: first_block.map_or(
                Norms {
                    count: 2,
                    width: self.hidden,
                    norm: self.norm,
                },
                |b| b.norms,
            ),
            residual: first_block.map_or(Residual::Sequential, |b| b.residual),
            extra: (Component::Other, 0),
            per_layer_input: 0,
        }
    }

    /// [`Blocks::representative`]'s shape.
    pub fn typical(&self) -> Typical {
        let r = self.representative();
        // The representative layer is always softmax attention.
        let a = r
            .mixer
            .as_attention()
            .copied()
            .unwrap_or_else(|| Attention::new(1, 1, self.hidden));
        let (intermediate, gated, experts, top_k) = match (r.ffn.moe(), r.ffn.dense()) {
            (Some(m), _) => (m.expert_intermediate, m.gated, m.experts, m.top_k),
            (None, Some(d)) => (d.intermediate, d.gated, 1, 1),
            (None, None) => (4 * self.hidden, true, 1, 1),
        };
        Typical {
            heads: a.heads,
            kv_heads: a.kv_heads,
            head_dim: a.head_dim,
            intermediate,
            gated,
            experts,
            top_k,
        }
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.pattern.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.pattern.is_empty()
    }

    /// Layer `i`'s block.
    pub fn layer(&self, i: usize) -> &Block {
        &self.kinds[self.pattern[i] as usize]
    }

    /// Every layer's block, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Block> + '_ {
        self.pattern.iter().map(|&k| &self.kinds[k as usize])
    }

    /// How many layers use each kind.
    pub fn kind_counts(&self) -> Vec<u64> {
        let mut n = vec![0; self.kinds.len()];
        for &k in &self.pattern {
            n[k as usize] += 1;
        }
        n
    }

    /// Parameters of the layers alone, per component.
    pub fn layer_params(&self) -> ComponentParams {
        let mut p = ComponentParams::default();
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            p.add_all(&kind.params(self.hidden), n);
        }
        p
    }

    /// Every parameter of the model per component; sums to the exact count.
    pub fn params_by_component(&self) -> ComponentParams {
        let mut p = self.layer_params();
        p.add(Component::Embedding, self.ends.embedding);
        p.add(Component::Norms, self.ends.final_norm);
        p.add(Component::Head, self.ends.head);
        p.add(Component::Other, self.ends.other);
        if let Some(v) = &self.vision {
            p.add(Component::Vision, v.params);
        }
        if let Some(a) = &self.audio {
            p.add(Component::Audio, a.params);
        }
        if let Some(m) = self.mtp.filter(|m| m.instantiated) {
            p.add(Component::Mtp, m.params);
        }
        p
    }

    /// Exact parameter count (the unquantized module tree `from_config` builds).
    pub fn param_count(&self) -> u64 {
        self.params_by_component().total()
    }

    /// Takes the stored bytes from a checkpoint's safetensors headers ([`Checkpoint`]): each
    /// component holds what its tensors hold there, whatever the config says. The headers
    /// must hold the description's parameters component by component (packed tensors counted
    /// unpacked); where only the total agrees, the bytes are spread over the components by
    /// their parameters, and where the total differs the config's storage stays. Where the
    /// headers' format differs from the config's (`quantization_config`, or its dtype for an
    /// unpacked checkpoint), the headers' is taken. Returns one line for each of these, with
    /// both figures; none where headers and config agree.
    pub fn apply_headers(&mut self, tally: &Tally) -> Vec<String> {
        let mtp = self.mtp.is_some_and(|m| m.instantiated);
        let g = tally.groups(self.pattern.len() as u64, mtp);
        // `scale_fmt` is the config's: how the library holds the block scales, whatever the
        // headers store them in (DeepSeek-V3.2's are F32, held a byte each).
        let quant = match (self.storage.quant, g.quant) {
            (
                Quant::Fp8Block { e8m0: true, .. },
                Quant::Fp8Block {
                    bn, bk, skip_head, ..
                },
            ) => Quant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0: true,
            },
            (_, q) => q,
        };
        let e8m0 = matches!(quant, Quant::Fp8Block { e8m0: true, .. });
        let want = self.params_by_component().0;
        let (have, want_total) = (g.params.iter().sum::<u64>(), want.iter().sum::<u64>());
        let mut notes = Vec::new();
        let config = self.storage;
        let before = self.weights_bytes(false);
        // A packed checkpoint's float tensors are held in the model's dtype whatever they are
        // stored in (DeepSeek-V3.2 stores its norms F32): transformers 5.24's loader casts a
        // float tensor to the empty parameter's dtype (`core_model_loading.py`), the model's
        // but for the fp32-held tensors counted below, and vLLM's weight loaders copy into
        // parameters made in the model dtype. Block-FP8 scales and fp32 buffers stay as held.
        let recast = quant != Quant::None;
        let d = config.dtype.bytes();
        let mut held = g.bytes;
        if recast {
            for (i, b) in held.iter_mut().enumerate() {
                *b = *b - g.float_bytes[i] + g.float_numel[i] * d;
            }
        }
        let mut c = Checkpoint {
            bytes: held,
            numel: want,
            packed: g.packed,
            fp32_numel: [0; Component::COUNT],
            upcast: [0; Component::COUNT],
            scale_upcast: g.scale_upcast,
            scale_narrow: std::array::from_fn(|i| {
                if e8m0 {
                    (g.scale_bytes[i] + g.scale_upcast[i]).saturating_sub(g.scale_numel[i])
                } else {
                    0
                }
            }),
        };
        if have != want_total {
            notes.push(format!(
                "the checkpoint's headers hold {have} parameters where config.json describes {want_total}; the stored bytes are config.json's"
            ));
            return notes;
        }
        if let Some(i) = (0..Component::COUNT).find(|&i| g.params[i] != want[i]) {
            // Names this reader does not place: one ratio for the whole checkpoint.
            let total: u64 = held.iter().sum();
            let packed = g.packed.iter().any(|p| *p);
            let mut spread = [0u64; Component::COUNT];
            for j in 0..Component::COUNT {
                spread[j] = (total as u128 * want[j] as u128 / want_total.max(1) as u128) as u64;
            }
            let big = (0..Component::COUNT).max_by_key(|&j| want[j]).unwrap_or(0);
            spread[big] += total - spread.iter().sum::<u64>();
            c.bytes = spread;
            c.packed = want.map(|w| packed && w > 0);
            notes.push(format!(
                "the checkpoint's tensor names put {} parameters in {}, the description {}; its stored bytes are spread over the model by parameters",
                g.params[i],
                Component::ALL[i].key(),
                want[i]
            ));
        }
        let dtype = if quant == Quant::None {
            g.dtype.unwrap_or(config.dtype)
        } else {
            config.dtype
        };
        let mut storage = Storage {
            dtype: config.dtype,
            quant,
            // The config's ignore list still says which linears stay unquantized where the
            // headers hold its format (the per-linear walks read it; the bytes are the headers').
            ignored: if quant == config.quant {
                config.ignored
            } else {
                Default::default()
            },
            checkpoint: None,
            holder: config.holder,
        };
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            kind.tensors(self.hidden, &mut |t| {
                if storage.holds_fp32(&t) {
                    c.fp32_numel[t.component as usize] += t.numel() * n;
                }
            });
        }
        for i in 0..Component::COUNT {
            c.upcast[i] = if recast {
                c.fp32_numel[i] * (4 - d.min(4))
            } else {
                c.fp32_numel[i].saturating_sub(g.f32_params[i]) * 2
            };
        }
        storage.checkpoint = Some(c);
        self.storage = storage;
        let header_fmt = Storage {
            dtype,
            quant,
            ignored: Default::default(),
            checkpoint: None,
            holder: Default::default(),
        }
        .name();
        let same = match (config.quant, quant) {
            (Quant::None | Quant::Other, Quant::None) => dtype == config.dtype,
            (a, b) => a == b,
        };
        if !same {
            notes.push(format!(
                "the checkpoint's headers hold {header_fmt} ({}) where config.json says {} ({}); the stored bytes are the headers'",
                crate::fmt::bytes(self.weights_bytes(false)),
                config.name(),
                crate::fmt::bytes(before)
            ));
        }
        notes
    }

    /// These blocks as vLLM and SGLang hold them, where that differs from transformers 5.24:
    /// block-FP8 scales fp32 whatever `scale_fmt` says (`Fp8LinearMethod`'s fp32
    /// `weight_scale_inv`), compressed-tensors W4A16, AWQ and GPTQ expert banks packed
    /// ([`crate::describe::storage::Holder`]); itself where nothing changes.
    pub fn as_engines_hold(&self) -> std::borrow::Cow<'_, Blocks> {
        let e8m0 = matches!(self.storage.quant, Quant::Fp8Block { e8m0: true, .. });
        let w4_banks = matches!(
            self.storage.quant,
            Quant::Packed {
                format: crate::finetune::WeightFormat::Wna16 { .. }
                    | crate::finetune::WeightFormat::Awq { .. }
                    | crate::finetune::WeightFormat::Gptq { .. },
                ..
            }
        );
        if !e8m0 && !w4_banks {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut b = self.clone();
        b.storage.holder = crate::describe::storage::Holder::Engine;
        if let Quant::Fp8Block {
            bn, bk, skip_head, ..
        } = self.storage.quant
        {
            b.storage.quant = Quant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0: false,
            };
            if let Some(c) = b.storage.checkpoint.as_mut() {
                c.scale_narrow = [0; Component::COUNT];
            }
        }
        std::borrow::Cow::Owned(b)
    }

    /// Bytes of the weights as the checkpoint stores them (quantization metadata included),
    /// where [`Blocks::weights_bytes`] gives what the library holds: they differ by the
    /// compressed-tensors W4A16 expert banks transformers 5.24 dequantizes at load, and the
    /// AWQ/GPTQ ones it holds as built in the dtype
    /// ([`crate::describe::storage::Holder`]).
    pub fn stored_bytes(&self) -> u64 {
        if self.storage.holder == crate::describe::storage::Holder::Engine {
            return self.weights_bytes(false);
        }
        let mut b = self.clone();
        b.storage.holder = crate::describe::storage::Holder::Engine;
        b.weights_bytes(false)
    }

    /// Bytes of the weights as the library holds them from the checkpoint (packed tensors as
    /// stored, quantization metadata included, except what it dequantizes at load whatever the
    /// step: [`Blocks::stored_bytes`]); `dequantized` for the fallback that holds everything in
    /// the config's dtype. Embedding, norms, vision tower and MTP layers stay in the config's
    /// dtype.
    pub fn weights_bytes(&self, dequantized: bool) -> u64 {
        if let (Some(c), false) = (&self.storage.checkpoint, dequantized) {
            let mut extra = 0;
            for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
                kind.tensors(self.hidden, &mut |t| {
                    extra += n * self.storage.dequantized_extra(&t)
                });
            }
            return c.total() + extra;
        }
        let d = self.storage.dtype.bytes();
        let mut bytes = 0;
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            let mut b = 0;
            kind.tensors(self.hidden, &mut |t| {
                b += self.storage.tensor_bytes(&t, dequantized)
            });
            bytes += b * n;
        }
        let head = Tensor {
            component: Component::Head,
            kind: TensorKind::Linear,
            rows: self.ends.vocab,
            cols: self.ends.head / self.ends.vocab.max(1),
            fp32: false,
            tp: true,
        };
        bytes += if self.ends.head > 0 && head.numel() == self.ends.head {
            self.storage.tensor_bytes(&head, dequantized)
        } else {
            self.ends.head * d
        };
        let rest = self.ends.embedding
            + self.ends.final_norm
            + self.ends.other
            + self.vision.as_ref().map_or(0, |v| v.params)
            + self.audio.as_ref().map_or(0, |a| a.params)
            + self.mtp.filter(|m| m.instantiated).map_or(0, |m| m.params);
        bytes + rest * d
    }

    /// Each layer's cache spec, in layer order (no allocation: an iterator).
    pub fn caches(&self) -> impl Iterator<Item = CacheSpec> + '_ {
        self.iter().map(|b| b.mixer.cache())
    }

    /// Cache bytes for `batch` sequences after a prefill of `t` tokens and `steps` decode
    /// steps, per reported kind (`layers`, bytes), with `dtype` bytes per cached element.
    pub fn cache_by_kind(&self, batch: u64, t: u64, steps: u64, dtype: u64) -> [(u64, u64); 4] {
        let mut out = [(0, 0); 4];
        for (kind, n) in self.kinds.iter().zip(self.kind_counts()) {
            kind.mixer.cache_parts(&mut |spec| {
                if let Some(i) = CacheKind::REPORTED.iter().position(|k| *k == spec.kind) {
                    out[i].0 += n;
                    out[i].1 += n * spec.bytes(batch, t, steps, dtype);
                }
            });
        }
        out
    }

    /// What transformers' `DynamicCache` holds for `batch` sequences of a `prompt`-token
    /// prefill and after one decode step, with `dtype` bytes per cached element (fp32 recurrent
    /// states are 4 bytes whatever `dtype` is).
    pub fn cache_report(&self, batch: u64, prompt: u64, dtype: u64) -> CacheReport {
        let prefill = self.cache_by_kind(batch, prompt, 0, dtype);
        let decode = self.cache_by_kind(batch, prompt, 1, dtype);
        let mut by_kind = [KindCache::default(); 4];
        for (i, k) in by_kind.iter_mut().enumerate() {
            *k = KindCache {
                kind: CacheKind::REPORTED[i],
                layers: prefill[i].0,
                after_prefill_bytes: prefill[i].1,
                after_decode_bytes: decode[i].1,
            };
        }
        let after_prefill: u64 = by_kind.iter().map(|k| k.after_prefill_bytes).sum();
        let after_decode: u64 = by_kind.iter().map(|k| k.after_decode_bytes).sum();
        CacheReport {
            after_prefill_bytes: after_prefill,
            after_decode_bytes: after_decode,
            bytes_per_token: after_decode as i64 - after_prefill as i64,
            by_kind,
        }
    }

    /// Forward FLOPs per token of all layers with `ctx` earlier tokens.
    pub fn flops_per_token(&self, ctx: u64) -> u64 {
        self.kinds
            .iter()
            .zip(self.kind_counts())
            .map(|(k, n)| n * k.flops_per_token(self.hidden, ctx))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use crate::describe::*;

    fn attn(window: Window) -> Attention {
        Attention {
            window,
            ..Attention::new(8, 2, 64)
        }
    }

    #[test]
    fn sliding_cache_keeps_the_prompt_until_the_first_decode_step() {
        let spec = Mixer::Attention(attn(Window::Sliding(128))).cache();
        assert_eq!(spec.kind, CacheKind::Sliding);
        // Long prompt: the whole prompt stays alive after prefill, then w tokens.
        assert_eq!(spec.tokens_held(1000, 0), 1000);
        assert_eq!(spec.tokens_held(1000, 1), 128);
        assert_eq!(spec.tokens_held(1000, 5), 128);
        // Short prompt: grows like a full layer until the window.
        assert_eq!(spec.tokens_held(10, 0), 10);
        assert_eq!(spec.tokens_held(10, 1), 11);
        let full = Mixer::Attention(attn(Window::Full)).cache();
        assert_eq!(full.tokens_held(1000, 1), 1001);
        assert_eq!(full.bytes(2, 10, 0, 2), 2 * 10 * 2 * 2 * 64 * 2);
    }

    #[test]
    fn gdn_state_is_fixed_and_its_recurrent_part_fp32() {
        let g = Mixer::GatedDeltaNet(Gdn {
            num_k_heads: 16,
            num_v_heads: 32,
            k_head_dim: 128,
            v_head_dim: 128,
            conv_kernel: 4,
        });
        let s = g.cache();
        assert_eq!(s.kind, CacheKind::Linear);
        assert_eq!(s.bytes(1, 10, 0, 2), s.bytes(1, 5000, 3, 2));
        assert_eq!(s.state_f32, 32 * 128 * 128);
        assert_eq!(s.state, (2 * 16 * 128 + 32 * 128) * 4);
    }

    #[test]
    fn blocks_group_equal_layers_and_components_sum_to_the_total() {
        let dense = Block {
            mixer: Mixer::Attention(attn(Window::Full)),
            cross_attention: false,
            ffn: Ffn::Dense(Dense::new(1024)),
            norms: Norms {
                count: 2,
                width: 512,
                norm: Norm::RMS,
            },
            residual: Residual::Sequential,
            extra: (Component::Other, 0),
            per_layer_input: 0,
        };
        let moe = Block {
            ffn: Ffn::Moe(Moe {
                experts: 4,
                top_k: 2,
                expert_intermediate: 256,
                gated: true,
                expert_bias: false,
                router_bias: false,
                correction_bias: true,
                router_extra: 0,
                router_weights_fp32: true,
                router_param_fp32: false,
                router_linear: None,
                dispatch: Dispatch::GroupedMm,
                shared: Some(Dense::new(256)),
                shared_gate: false,
                latent: None,
                latent_bias: false,
            }),
            ..dense
        };
        let b = Blocks::from_layers(
            512,
            &[dense, moe, moe, moe],
            Ends {
                embedding: 1000 * 512,
                vocab: 1000,
                final_norm: 512,
                head: 1000 * 512,
                other: 0,
            },
        );
        assert_eq!(b.kinds.len(), 2);
        assert_eq!(b.pattern, vec![0, 1, 1, 1]);
        let p = b.params_by_component();
        assert_eq!(p.get(Component::RoutedExperts), 3 * 4 * 3 * 512 * 256);
        assert_eq!(p.get(Component::SharedExperts), 3 * 3 * 512 * 256);
        assert_eq!(p.get(Component::Router), 3 * (4 * 512 + 4));
        assert_eq!(p.get(Component::DenseMlp), 3 * 512 * 1024);
        assert_eq!(p.get(Component::Norms), 4 * 2 * 512 + 512);
        assert_eq!(p.total(), b.param_count());
        // bf16 unquantized: two bytes per parameter.
        assert_eq!(b.weights_bytes(false), 2 * b.param_count());
    }
}
