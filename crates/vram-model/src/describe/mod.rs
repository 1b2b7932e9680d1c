//! The description of a model: what vramkit knows of it, built once by the reader
//! ([`crate::read`]) or the catalog and read by every walk and report.
//!
//! - [`model`]: a [`Model`], a transformer ([`Transformer`]: a name and its [`Blocks`]) or a
//!   torchvision ResNet; parameter counts and their split.
//! - [`blocks`]: the layer-by-layer description ([`Blocks`]): distinct layer kinds and a
//!   per-layer index, the embedding and head around them, the model-wide facts the reader sets
//!   (layout, positions, dropout, module names for LoRA, what its figures were checked
//!   against).
//! - [`layer`]: one layer ([`Block`]): a token mixer and a feed-forward, each a mechanism of
//!   [`crate::mech`], with the norms outside them and the residual wiring.
//! - [`storage`]: how the weights are stored ([`Storage`]), and the place where each tensor
//!   group is to carry its own stored format.
//!
//! Family facts are flags and parameters of the mechanisms and of these types, set by the
//! reader; nothing outside the reader and the catalog names a family. Every type is re-exported
//! here (and at the older paths `vram_model::arch` and `vram_model::blocks`), with the
//! mechanisms' types a layer is made of.

pub mod blocks;
pub mod layer;
pub mod model;
pub mod storage;

pub use blocks::*;
pub use layer::*;
pub use model::*;
pub use storage::*;

pub use crate::mech::{
    attention_kernel, repeats_kv_at, smart_resize_largest, Act, Attention, CacheKind, CacheLayout,
    CacheReport, CacheSpec, CacheTensor, Component, ComponentParams, Dense, Dispatch, Ffn, Gdn,
    Hybrid, Images, Indexer, Kernel, KindCache, Mamba, Mamba2, Mechanism, Mixer, Mla, Moe, Norm,
    NormKind, QkNorm, Site, SiteKind, Tensor, TensorKind, VideoSize, Vision, VisionInput, Window,
};
