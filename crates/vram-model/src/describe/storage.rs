//! How the weights are stored: the checkpoint's dtype and quantization, and the bytes each
//! parameter tensor takes as the library holds it ([`Storage::tensor_bytes`]).
//!
//! Today one [`Storage`] per model ([`crate::describe::Blocks::storage`]) decides each tensor's
//! bytes from its group: the [`Component`] it belongs to and its [`TensorKind`] (an expert
//! bank, a linear, a vector), both of which every mechanism gives its tensors
//! ([`crate::mech::Mechanism::tensors`]). This is the place where each tensor group is to carry
//! its own stored format (issue 31, item 2: `quantization_config`, `--weights`/`--quantization`,
//! the safetensors headers): a per-group format beside or instead of the model-wide one, read
//! by `tensor_bytes`, which the weights' report ([`crate::describe::Blocks::weights_bytes`])
//! already calls for every tensor. The walk's weights (`walk::Step::init_blocks`, each kind's
//! tensor elements) and the allocator replay still take the parameters at the setup's
//! precision; item 2 makes them take `tensor_bytes` instead.

use serde::Serialize;

use crate::mech::{Component, Tensor, TensorKind};

/// Element type of stored weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// float32.
    F32,
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

/// How the checkpoint stores its weights (`quantization_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Quant {
    /// Unquantized, in the config's dtype.
    None,
    /// Fine-grained FP8 (`quant_method: fp8`, `weight_block_size` `[bn, bk]`): every linear and
    /// expert bank outside `modules_to_not_convert` as `float8_e4m3fn` plus an fp32
    /// `weight_scale_inv` of `ceil(N/bn) × ceil(K/bk)` (quantizers/quantizer_finegrained_fp8.py).
    Fp8Block {
        /// Block rows.
        bn: u64,
        /// Block columns.
        bk: u64,
        /// The LM head stays unquantized: `get_modules_to_not_convert` (quantizers/base.py)
        /// always adds the output embeddings to the config's `modules_to_not_convert`.
        skip_head: bool,
    },
    /// MXFP4 experts (gpt-oss, quantizers/quantizer_mxfp4.py): expert banks packed two values a
    /// byte with one uint8 scale per 32 values; everything else in the config's dtype.
    Mxfp4,
    /// A `quantization_config` whose method is not modelled (NVFP4 via modelopt, compressed
    /// tensors, ...): counted in the config's dtype, with a note.
    Other,
}

/// The weights as shipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Storage {
    /// The config's `dtype` (`torch_dtype` in older files); bf16 when absent.
    pub dtype: Dtype,
    /// The quantization.
    pub quant: Quant,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            dtype: Dtype::Bf16,
            quant: Quant::None,
        }
    }
}

impl Storage {
    /// Bytes one tensor takes as transformers holds it on an H100 (FP8 and MXFP4 kernels
    /// available); with `dequantized`, as the fallback holds it (everything in `dtype`).
    pub fn tensor_bytes(&self, t: &Tensor, dequantized: bool) -> u64 {
        let d = self.dtype.bytes();
        if t.fp32 {
            return t.numel() * 4;
        }
        if dequantized {
            return t.numel() * d;
        }
        let e = match t.kind {
            TensorKind::Experts(e) => e,
            _ => 1,
        };
        match self.quant {
            Quant::Fp8Block { bn, bk, skip_head } => match t.kind {
                TensorKind::Linear | TensorKind::Experts(_)
                    if !(t.component == Component::Router
                        || t.component == Component::Vision
                        || (t.component == Component::Head && skip_head)
                        || t.rows == 1) =>
                {
                    t.numel() + e * t.rows.div_ceil(bn) * t.cols.div_ceil(bk) * 4
                }
                _ => t.numel() * d,
            },
            Quant::Mxfp4 => match t.kind {
                // Mxfp4GptOssExperts (integrations/mxfp4.py): packed uint8 [E, rows, cols/2] and
                // one uint8 scale per 32 values; its expert biases are fp32.
                TensorKind::Experts(_) => e * t.rows * (t.cols.div_ceil(32) * 17),
                TensorKind::Vector if t.component == Component::RoutedExperts => t.numel() * 4,
                _ => t.numel() * d,
            },
            Quant::None | Quant::Other => t.numel() * d,
        }
    }
}
