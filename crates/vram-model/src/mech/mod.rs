//! The mechanisms a layer is made of, one module each: softmax attention ([`attention`]:
//! windows, sinks, QK-norm, the output gate, KV sharing), multi-head latent attention with the
//! DSA indexer ([`mla`]), Gated DeltaNet ([`gdn`]), Mamba2 ([`mamba2`]), mixtures of experts
//! ([`moe`]: router, shared experts, dispatch), the dense MLP ([`dense`]), norms ([`norm`]) and
//! the vision tower ([`vision`]).
//!
//! Each answers, in its own module, everything vramkit asks of it:
//! - its parameter tensors, by [`Component`] ([`Mechanism::tensors`]), which give the exact
//!   parameter counts, the weights' bytes, the tensors the allocator replay sees and what
//!   tensor parallelism splits;
//! - its forward FLOPs per token ([`Mechanism::flops_per_token`]);
//! - the linears and parameters a LoRA adapter can target, named as transformers names them
//!   ([`Mechanism::sites`]);
//! - for a token mixer, what its cache holds ([`Mixer::cache_tensors`], summed in
//!   [`CacheSpec`]), which `generate`'s walk, the estimate's cache report and the serving
//!   engines' KV pages read;
//! - the walks' steps: what a training step saves for backward and its high points, and what
//!   `generate`'s prefill makes op by op (crate-internal: `train`, `prefill` in each module).
//!
//! [`Mixer`] and [`Ffn`] are the two slots of a layer ([`crate::describe::Block`]); they
//! dispatch to the mechanism they hold and are the only places that match on it.

pub mod attention;
pub mod cache;
pub mod dense;
pub mod gdn;
pub mod host;
pub mod hybrid;
pub mod mamba;
pub mod mamba2;
pub mod mla;
pub mod moe;
pub mod norm;
pub(crate) mod step;
pub mod vision;

use serde::Serialize;

pub use attention::{attention_kernel, repeats_kv_at, Attention, Kernel, QkNorm, Window};
pub use cache::{CacheKind, CacheLayout, CacheReport, CacheSpec, CacheTensor, KindCache};
pub use dense::{Act, Dense};
pub use gdn::Gdn;
pub use host::{Host, HostCtx};
pub use hybrid::Hybrid;
pub use mamba::Mamba;
pub use mamba2::Mamba2;
pub use mla::{Indexer, Mla};
pub use moe::{Dispatch, Moe};
pub use norm::{Norm, NormKind};
pub use vision::{smart_resize_largest, Images, VideoSize, Vision, VisionInput};

use crate::describe::Names;

/// What every mechanism answers about itself.
pub trait Mechanism {
    /// Its parameter tensors in module order, in a layer of hidden size `h`.
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor));

    /// Matmul weights one token runs through: every linear tensor's elements, unless the
    /// mechanism says otherwise (a mixture of experts runs a token through its top-k experts).
    fn active_params(&self, h: u64) -> u64 {
        let mut n = 0;
        self.tensors(h, &mut |t| {
            if t.kind == TensorKind::Linear {
                n += t.numel();
            }
        });
        n
    }

    /// Forward FLOPs per token of a mixer's token interaction beyond its projections, with
    /// `ctx` earlier tokens: `QKᵀ` and `PV` for attention (within the window), the state update
    /// for a recurrent mixer; none for a feed-forward.
    fn mixing_flops_per_token(&self, _ctx: u64) -> u64 {
        0
    }

    /// Forward FLOPs per token with `ctx` earlier tokens: 2 per matmul weight a token runs
    /// through ([`Mechanism::active_params`]), plus its token interaction
    /// ([`Mechanism::mixing_flops_per_token`]).
    fn flops_per_token(&self, h: u64, ctx: u64) -> u64 {
        2 * self.active_params(h) + self.mixing_flops_per_token(ctx)
    }

    /// The linears and parameters an adapter can target, named with the family's `names`.
    fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site));
}

/// Where a parameter belongs, as `vram estimate --json`'s `params_by_component` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Token, position, type and per-layer-input embeddings, and embedding norms.
    Embedding,
    /// Attention / MLA / linear-attention / Mamba weights, incl. q/k norms, sinks, gates.
    Mixer,
    /// Dense feed-forward weights.
    DenseMlp,
    /// Routed expert banks, incl. expert biases.
    RoutedExperts,
    /// Shared expert(s) and their gate.
    SharedExperts,
    /// Router weights and biases (incl. `e_score_correction_bias`).
    Router,
    /// Per-layer norms outside the mixer/MLP modules, and the final norm.
    Norms,
    /// The LM head when not tied to the embedding.
    Head,
    /// Vision tower and projector/merger.
    Vision,
    /// Audio tower and its projection into the text model (Gemma 4's `audio_tower` and
    /// `embed_audio`).
    Audio,
    /// Instantiated multi-token-prediction layers.
    Mtp,
    /// Anything else (a pooler, per-layer-input gates).
    Other,
}

impl Component {
    /// Every component, in display (and JSON) order.
    pub const ALL: [Component; Component::COUNT] = [
        Component::Embedding,
        Component::Mixer,
        Component::DenseMlp,
        Component::RoutedExperts,
        Component::SharedExperts,
        Component::Router,
        Component::Norms,
        Component::Head,
        Component::Vision,
        Component::Audio,
        Component::Mtp,
        Component::Other,
    ];

    /// How many components there are.
    pub const COUNT: usize = 12;

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Component::Embedding => "embedding",
            Component::Mixer => "mixer",
            Component::DenseMlp => "dense_mlp",
            Component::RoutedExperts => "routed_experts",
            Component::SharedExperts => "shared_experts",
            Component::Router => "router",
            Component::Norms => "norms",
            Component::Head => "head",
            Component::Vision => "vision",
            Component::Audio => "audio",
            Component::Mtp => "mtp",
            Component::Other => "other",
        }
    }
}

/// Parameter elements per [`Component`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ComponentParams(pub [u64; Component::COUNT]);

impl ComponentParams {
    /// Elements of one component.
    pub fn get(&self, c: Component) -> u64 {
        self.0[c as usize]
    }
    /// Adds `n` elements to `c`.
    pub fn add(&mut self, c: Component, n: u64) {
        self.0[c as usize] += n;
    }
    /// Adds every component of `o`, `times` times.
    pub fn add_all(&mut self, o: &ComponentParams, times: u64) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b * times;
        }
    }
    /// Sum over all components.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// How a parameter tensor is used, which decides how quantized storage holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// An `nn.Linear` weight `[rows = out, cols = in]`.
    Linear,
    /// An expert bank: `experts` matrices `[rows, cols]` in one 3-D parameter.
    Experts(u64),
    /// An embedding table `[rows = vocab, cols = dim]`.
    Embedding,
    /// A vector or small tensor (norm weights, biases, sinks, conv kernels, `A_log`, ...).
    Vector,
}

/// One parameter tensor (or `count` equal ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Where it belongs.
    pub component: Component,
    /// How it is used.
    pub kind: TensorKind,
    /// First dimension (output features of a linear).
    pub rows: u64,
    /// Second dimension (input features of a linear; 1 for vectors).
    pub cols: u64,
    /// Kept in fp32 whatever the model's dtype (`_keep_in_fp32_modules_strict`: DeepSeek-style
    /// router weights).
    pub fp32: bool,
    /// Tensor parallelism splits it (Megatron's column- and row-parallel weights, expert banks,
    /// the biases of column-parallel outputs); otherwise every rank keeps a copy (norms, the
    /// biases added after a row-parallel reduction, routers, small per-head vectors). What TP
    /// splits is also what autocast copies to half precision in a training step.
    pub tp: bool,
}

impl Tensor {
    /// Elements of the tensor.
    pub fn numel(&self) -> u64 {
        let e = match self.kind {
            TensorKind::Experts(e) => e,
            _ => 1,
        };
        self.rows * self.cols * e
    }
}

pub(crate) fn lin(c: Component, out: u64, inp: u64) -> Tensor {
    Tensor {
        component: c,
        kind: TensorKind::Linear,
        rows: out,
        cols: inp,
        fp32: false,
        tp: true,
    }
}

/// A vector every tensor-parallel rank keeps whole.
pub(crate) fn vector(c: Component, n: u64) -> Tensor {
    Tensor {
        component: c,
        kind: TensorKind::Vector,
        rows: n,
        cols: 1,
        fp32: false,
        tp: false,
    }
}

/// The bias of a column-parallel projection: split with its weight's output features.
pub(crate) fn col_bias(c: Component, n: u64) -> Tensor {
    Tensor {
        tp: true,
        ..vector(c, n)
    }
}

/// How a linear site is held by the module tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// An `nn.Linear` (or GPT-2's `Conv1D`): quantized by bitsandbytes, matched by `all-linear`.
    Module,
    /// A 2-D parameter of a custom module (transformers 5's routers, `MixtralTopKRouter`):
    /// never quantized by bitsandbytes, reachable by PEFT only through `target_parameters`.
    Param,
    /// A fused 3-D expert bank `[E, out, in]` (`MixtralExperts.gate_up_proj`): left in the load
    /// dtype by 4-bit/8-bit loading, reachable only through `target_parameters`.
    Experts(u64),
}

/// One matrix of a layer (or the head) that an adapter can attach to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    /// Module path inside the layer as transformers names it (`self_attn.q_proj`,
    /// `mlp.experts.gate_up_proj`, `mlp.gate.weight`), or `lm_head`.
    pub path: String,
    /// Output features.
    pub out: u64,
    /// Input features.
    pub inp: u64,
    /// Module, parameter or expert bank.
    pub kind: SiteKind,
    /// Where its parameters belong.
    pub component: Component,
    /// Which tensor it reads, within its layer: sites with the same number read the same
    /// tensor (`q_proj`, `k_proj` and `v_proj` read the normed hidden states).
    pub input: u8,
}

impl Site {
    /// The last name of the path (`q_proj`; `gate.weight` for a router parameter).
    pub fn leaf(&self) -> &str {
        let p = self.path.strip_suffix(".weight").unwrap_or(&self.path);
        p.rsplit('.').next().unwrap_or(p)
    }

    /// The parameter tensor's kind as the storage reads it: a module's weight is a linear, a
    /// fused bank an expert bank; `None` for a custom module's 2-D parameter (a router's), which
    /// no quantizer packs.
    pub fn tensor_kind(&self) -> Option<TensorKind> {
        match self.kind {
            SiteKind::Module => Some(TensorKind::Linear),
            SiteKind::Experts(e) => Some(TensorKind::Experts(e)),
            SiteKind::Param => None,
        }
    }

    /// Elements of the weight.
    pub fn numel(&self) -> u64 {
        let e = match self.kind {
            SiteKind::Experts(e) => e,
            _ => 1,
        };
        e * self.out * self.inp
    }
}

/// The sites of the `nn.Linear` modules under `prefix`, tagged `component`: each call
/// `(leaf, out features, in features, input)` hands `out` the module `prefix.leaf` (see
/// [`Site::input`]).
pub(crate) fn module_sites<'a>(
    prefix: &'a str,
    component: Component,
    out: &'a mut impl FnMut(Site),
) -> impl FnMut(&str, u64, u64, u8) + 'a {
    move |leaf, rows, cols, input| {
        out(Site {
            path: format!("{prefix}.{leaf}"),
            out: rows,
            inp: cols,
            kind: SiteKind::Module,
            component,
            input,
        })
    }
}

/// A block's token mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mixer {
    /// Softmax attention.
    Attention(Attention),
    /// Multi-head latent attention.
    Mla(Mla),
    /// Gated DeltaNet linear attention.
    GatedDeltaNet(Gdn),
    /// Mamba2.
    Mamba2(Mamba2),
    /// Attention and Mamba2 in parallel (Falcon-H1).
    Hybrid(Hybrid),
    /// Mamba (1) (Mamba, FalconMamba).
    Mamba(Mamba),
    /// No mixer (Nemotron-H's MLP-only and MoE-only layers).
    None,
}

/// A block's feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ffn {
    /// One dense MLP.
    Dense(Dense),
    /// Mixture of experts.
    Moe(Moe),
    /// A dense MLP and a mixture of experts side by side (Gemma 4).
    DenseAndMoe(Dense, Moe),
    /// No feed-forward (a mixer-only layer).
    None,
}

impl Mixer {
    /// The mixer's parameter tensors, in module order.
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        match self {
            Mixer::Attention(a) => a.tensors(h, out),
            Mixer::Mla(m) => m.tensors(h, out),
            Mixer::GatedDeltaNet(g) => g.tensors(h, out),
            Mixer::Mamba2(m) => m.tensors(h, out),
            Mixer::Hybrid(x) => x.tensors(h, out),
            Mixer::Mamba(x) => x.tensors(h, out),
            Mixer::None => {}
        }
    }

    /// The linears an adapter can target, named with the family's `names`.
    pub fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site)) {
        match self {
            Mixer::Attention(a) => a.sites(names, h, out),
            Mixer::Mla(m) => m.sites(names, h, out),
            Mixer::GatedDeltaNet(g) => g.sites(names, h, out),
            Mixer::Mamba2(m) => m.sites(names, h, out),
            Mixer::Hybrid(x) => x.sites(names, h, out),
            Mixer::Mamba(x) => x.sites(names, h, out),
            Mixer::None => {}
        }
    }

    /// The softmax attention it is, if it is one.
    pub fn as_attention(&self) -> Option<&Attention> {
        match self {
            Mixer::Attention(a) => Some(a),
            _ => None,
        }
    }

    /// The tensors the layer's cache holds per sequence, as transformers' cache layer makes them
    /// (each one allocation): keys and values; MLA's latent, rotary key and DSA indexer keys;
    /// a recurrent mixer's convolution state and its fp32 recurrent state.
    pub fn cache_tensors(&self, out: &mut impl FnMut(CacheTensor)) {
        match self {
            Mixer::Attention(a) => a.cache_tensors(out),
            Mixer::Mla(m) => m.cache_tensors(out),
            Mixer::GatedDeltaNet(g) => g.cache_tensors(out),
            Mixer::Mamba2(m) => m.cache_tensors(out),
            Mixer::Hybrid(x) => x.cache_tensors(out),
            Mixer::Mamba(x) => x.cache_tensors(out),
            Mixer::None => {}
        }
    }

    /// What the layer caches in the shapes a serving engine pages it, one layout per cache it
    /// keeps (none when it caches nothing; two for attention beside Mamba2).
    pub fn cache_layouts(&self, out: &mut impl FnMut(CacheLayout)) {
        match self {
            Mixer::Attention(a) => {
                if let Some(l) = a.cache_layout() {
                    out(l);
                }
            }
            Mixer::Mla(m) => out(m.cache_layout()),
            Mixer::GatedDeltaNet(g) => out(g.cache_layout()),
            Mixer::Mamba2(m) => out(m.cache_layout()),
            Mixer::Hybrid(x) => x.cache_layouts(out),
            Mixer::Mamba(x) => out(x.cache_layout()),
            Mixer::None => {}
        }
    }

    /// The softmax attention it stands for in the closed forms that price a model by one layer:
    /// itself, or an MLA layer as multi-head attention of its heads and query/key size; `None`
    /// for a recurrent mixer or none.
    pub fn softmax_equivalent(&self) -> Option<Attention> {
        match self {
            Mixer::Attention(a) => Some(*a),
            Mixer::Mla(m) => Some(m.as_multi_head()),
            Mixer::Hybrid(x) => Some(x.attn),
            _ => None,
        }
    }

    /// The Gated DeltaNet it is, if it is one.
    pub fn as_gdn(&self) -> Option<&Gdn> {
        match self {
            Mixer::GatedDeltaNet(g) => Some(g),
            _ => None,
        }
    }

    /// The Mamba2 mixer it is, if it is one.
    pub fn as_mamba2(&self) -> Option<&Mamba2> {
        match self {
            Mixer::Mamba2(m) => Some(m),
            Mixer::Hybrid(x) => Some(&x.mamba),
            _ => None,
        }
    }

    /// The multi-head latent attention it is, if it is one.
    pub fn as_mla(&self) -> Option<&Mla> {
        match self {
            Mixer::Mla(m) => Some(m),
            _ => None,
        }
    }

    /// The class of the layer's cache (transformers 5.24's cache layer types).
    pub fn cache_kind(&self) -> CacheKind {
        match self {
            Mixer::Attention(a) => a.cache_kind(),
            Mixer::Mla(m) => m.cache_kind(),
            Mixer::GatedDeltaNet(_) | Mixer::Mamba2(_) | Mixer::Mamba(_) => CacheKind::Linear,
            // The attention's kind: `LinearAttentionAndFullAttentionLayer` grows like it.
            Mixer::Hybrid(x) => x.attn.cache_kind(),
            Mixer::None => CacheKind::None,
        }
    }

    /// What the layer caches per reported kind: one [`CacheSpec`], or for attention beside
    /// Mamba2 the keys and values under the attention's kind and the states under `Linear`
    /// (how the zoo's reference counts a `LinearAttentionAndFullAttentionLayer`).
    pub fn cache_parts(&self, out: &mut impl FnMut(CacheSpec)) {
        match self {
            Mixer::Hybrid(x) => {
                out(Mixer::Attention(x.attn).cache());
                out(Mixer::Mamba2(x.mamba).cache());
            }
            other => out(other.cache()),
        }
    }

    /// What the layer caches (see [`CacheSpec`]): its [`Mixer::cache_tensors`] summed.
    pub fn cache(&self) -> CacheSpec {
        let mut spec = CacheSpec {
            kind: self.cache_kind(),
            ..CacheSpec::NONE
        };
        self.cache_tensors(&mut |t| {
            spec.per_token += t.per_token;
            spec.window = spec.window.or(t.window);
            if t.fp32 {
                spec.state_f32 += t.fixed;
            } else {
                spec.state += t.fixed;
            }
        });
        spec
    }

    /// What an estimate says of how the mixer is modelled, where that is worth saying.
    pub fn note(&self) -> Option<&'static str> {
        match self {
            Mixer::Attention(a) => a.note(),
            Mixer::Mla(m) => Some(m.note()),
            Mixer::GatedDeltaNet(g) => Some(g.note()),
            Mixer::Mamba2(m) => Some(m.note()),
            Mixer::Hybrid(x) => Some(x.note()),
            Mixer::Mamba(x) => Some(x.note()),
            Mixer::None => None,
        }
    }

    /// Host work of the mixer in one `generate` forward (transformers 5.24): its `nn.Linear`
    /// modules (one per linear tensor) and what its mechanism's module runs beyond them.
    pub fn generate_host(&self, h: u64, c: &HostCtx) -> Host {
        let mut linear = 0.0;
        self.tensors(h, &mut |t| {
            if t.kind == TensorKind::Linear {
                linear += 1.0;
            }
        });
        let mut w = host::linears(linear);
        w.add(match self {
            Mixer::Attention(a) => a.generate_host(c),
            Mixer::Mla(m) => m.generate_host(c),
            Mixer::GatedDeltaNet(g) => g.generate_host(c),
            Mixer::Mamba2(m) => m.generate_host(c),
            Mixer::Hybrid(x) => x.generate_host(c),
            Mixer::Mamba(x) => x.generate_host(c),
            Mixer::None => Host::default(),
        });
        w
    }

    /// Host work a `prompt`-token prefill adds to [`Mixer::generate_host`] (which counts one
    /// 64-token chunk): Gated DeltaNet's Python loop over the further chunks without fla.
    pub fn prefill_loop_host(&self, prompt: f64, c: &HostCtx) -> Host {
        match self {
            Mixer::GatedDeltaNet(g) => g.chunk_loop_host(prompt, c.kernels.fla),
            _ => Host::default(),
        }
    }

    /// A training step of the mixer: what it saves (into `p`) and its other bytes.
    pub(crate) fn train(
        &self,
        b: &crate::describe::Blocks,
        c: &crate::mech::step::Ctx,
        p: &mut crate::mech::step::Parts,
    ) -> crate::mech::step::Extra {
        match self {
            Mixer::Attention(a) => attention::train(a, b, c, p),
            Mixer::Mla(m) => mla::train(m, b, c, p),
            Mixer::GatedDeltaNet(g) => gdn::train(g, b, c, p),
            Mixer::Mamba2(m) => mamba2::train(m, b, c, p),
            Mixer::Hybrid(x) => hybrid::train(x, b, c, p),
            Mixer::Mamba(x) => mamba::train(x, b, c, p),
            Mixer::None => Default::default(),
        }
    }
}

impl Mechanism for Mixer {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        Mixer::tensors(self, h, out)
    }

    fn mixing_flops_per_token(&self, ctx: u64) -> u64 {
        match self {
            Mixer::Attention(a) => a.mixing_flops_per_token(ctx),
            Mixer::Mla(m) => m.mixing_flops_per_token(ctx),
            Mixer::GatedDeltaNet(g) => g.mixing_flops_per_token(ctx),
            Mixer::Mamba2(m) => m.mixing_flops_per_token(ctx),
            Mixer::Hybrid(x) => x.mixing_flops_per_token(ctx),
            Mixer::Mamba(x) => x.mixing_flops_per_token(ctx),
            Mixer::None => 0,
        }
    }

    fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site)) {
        Mixer::sites(self, names, h, out)
    }
}

impl Ffn {
    /// The feed-forward's parameter tensors (a dense MLP's, then the experts').
    pub fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        if let Some(d) = self.dense() {
            d.tensors(h, out);
        }
        if let Some(m) = self.moe() {
            m.tensors(h, out);
        }
    }

    /// The linears and parameters an adapter can target, named with the family's `names`.
    pub fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site)) {
        if let Some(d) = self.dense() {
            d.sites(names, h, out);
        }
        if let Some(m) = self.moe() {
            m.sites(names, h, out);
        }
    }

    /// The mixture of experts it holds, if any.
    pub fn moe(&self) -> Option<&Moe> {
        match self {
            Ffn::Moe(m) | Ffn::DenseAndMoe(_, m) => Some(m),
            Ffn::Dense(_) | Ffn::None => None,
        }
    }

    /// The dense MLP it holds, if any.
    pub fn dense(&self) -> Option<&Dense> {
        match self {
            Ffn::Dense(d) | Ffn::DenseAndMoe(d, _) => Some(d),
            Ffn::Moe(_) | Ffn::None => None,
        }
    }

    /// What an estimate says of how the feed-forward is modelled, where that is worth saying.
    pub fn note(&self) -> Option<&'static str> {
        self.moe().map(Moe::note)
    }

    /// Host work of the feed-forward in one `generate` forward (transformers 5.24): the dense
    /// MLP's and the sparse block's ([`Dense::generate_host`], [`Moe::generate_host`]).
    pub fn generate_host(&self, c: &HostCtx) -> Host {
        let mut w = Host::default();
        if let Some(d) = self.dense() {
            w.add(d.generate_host());
        }
        if let Some(m) = self.moe() {
            w.add(m.generate_host(c));
        }
        w
    }

    /// Host work of a forward over `tokens` tokens beyond [`Ffn::generate_host`]: the experts a
    /// per-expert Python loop runs ([`Moe::loop_host`]).
    pub fn loop_host(&self, tokens: f64) -> Host {
        self.moe()
            .map_or_else(Host::default, |m| m.loop_host(tokens))
    }
}

impl Mechanism for Ffn {
    fn tensors(&self, h: u64, out: &mut impl FnMut(Tensor)) {
        Ffn::tensors(self, h, out)
    }

    /// The dense MLP's and the experts' ([`Moe`]'s top-k).
    fn active_params(&self, h: u64) -> u64 {
        self.dense().map_or(0, |d| d.active_params(h))
            + self.moe().map_or(0, |m| m.active_params(h))
    }

    fn sites(&self, names: &Names, h: u64, out: &mut impl FnMut(Site)) {
        Ffn::sites(self, names, h, out)
    }
}
