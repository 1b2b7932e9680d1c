//! How the weights are stored: the checkpoint's dtype and quantization, and the bytes each
//! parameter tensor takes as the library holds it ([`Storage::tensor_bytes`]).
//!
//! One [`Storage`] per model ([`crate::describe::Blocks::storage`]) decides each tensor's bytes
//! from its group: the [`Component`] it belongs to and its [`TensorKind`] (an expert bank, a
//! linear, a vector), both of which every mechanism gives its tensors
//! ([`crate::mech::Mechanism::tensors`]). The reader fills it from the config's
//! `quantization_config` (FP8 block-wise, MXFP4, bitsandbytes 4/8-bit, GPTQ and AWQ 4-bit,
//! compressed-tensors W4A16 `pack-quantized`;
//! other methods are [`Quant::Other`], counted in the dtype with a note), `--weights FORMAT`
//! replaces it ([`Storage::from_flag`]). Everything reads it:
//! - the weights' report ([`crate::describe::Blocks::weights_bytes`]) and `vram capacity`
//!   (`vram_plan::capacity::weights_per_gpu`);
//! - the step walk: [`Storage::load`] says how transformers 5.24 loads the checkpoint for a
//!   step (packed, or dequantized: MXFP4 without its kernels, below compute capability 7.5 or
//!   to train; FP8 below 8.9; `--dequantized`), and an inference walk of a packed checkpoint
//!   allocates each tensor at [`Storage::held_bytes`], one allocation per tensor, so the
//!   allocator replay sees the packed tensors;
//! - the fine-tuning base (`finetune::weights_bytes`, linear by linear with the same
//!   [`crate::finetune::linear_parts`]), held equal to this tensor-by-tensor count by
//!   `vram-plan`'s `tests/it/storage.rs` for every zoo config.
//!
//! Where the checkpoint is given (a local folder, a Hub id), its safetensors headers decide the
//! stored bytes of each component ([`Checkpoint`], filled by
//! [`crate::describe::Blocks::apply_headers`]): every tensor's own dtype and shape, so a bf16
//! config whose headers hold MXFP4 blocks, FP8 with `weight_scale_inv`, GPTQ/AWQ words,
//! compressed-tensors' `weight_packed` or fp32 tensors is counted as held, and where the headers' format differs from the config's the
//! headers win, with a note giving both.
//!
//! Not yet here: compressed-tensors' other schemes (FP8, W8A8, act-order; `ignore` is read per
//! role, not per layer)
//! and GPTQ/AWQ at other than 4 bits (`Other`), `modules_to_not_convert` beyond the head, and
//! the packed kernels' own temporaries (the MXFP4 Triton MoE and FP8 block matmuls are walked as
//! the unquantized path's; bitsandbytes 4-bit's dequantized weight in a long prefill is).

use serde::Serialize;

use crate::finetune::{linear_bytes, WeightFormat};
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
        /// `scale_fmt: ue8m0` (DeepSeek-V3.2): transformers 5.24's `FP8Linear` and `FP8Experts`
        /// make `weight_scale_inv` `float8_e8m0fnu`, a byte each (`integrations/finegrained_fp8.py`:
        /// `sf_dtype = _get_ue8m0_dtype() if scale_fmt == "ue8m0" else torch.float32`), and
        /// the loader casts the stored scales to it. vLLM holds them fp32 whatever
        /// ([`crate::describe::Blocks::as_engines_hold`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        e8m0: bool,
    },
    /// MXFP4 experts (gpt-oss, quantizers/quantizer_mxfp4.py): expert banks packed two values a
    /// byte with one uint8 scale per 32 values; everything else in the config's dtype.
    Mxfp4,
    /// Linears packed by a library, each as [`crate::finetune::linear_parts`] holds it:
    /// bitsandbytes LLM.int8/NF4/FP4 (`quant_method: bitsandbytes`), GPTQ (`gptq`), AWQ (`awq`),
    /// or a `--weights` format. bitsandbytes, GPTQ and AWQ replace the `nn.Linear` modules of
    /// the layers only: routers (custom modules in transformers 5), fused 3-D expert banks, the
    /// head, the vision tower and the MTP layers stay in the dtype; FP8 (`--weights fp8`)
    /// packs expert banks too, as `Fp8Block` does.
    Packed {
        /// The packed format.
        format: WeightFormat,
        /// bitsandbytes 4-bit's nested quantization of the absmax
        /// (`bnb_4bit_use_double_quant`, `--double-quant`).
        double_quant: bool,
    },
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
    /// The components whose linears the quantization config's ignore list leaves in the dtype
    /// (compressed-tensors' `ignore`, read by `vram_model::hf`); the one per-linear
    /// role→quantized predicate every count reads ([`Storage::ignores`]).
    #[serde(skip)]
    pub ignored: Ignored,
    /// The checkpoint's own bytes per component, read from its safetensors headers where the
    /// checkpoint is given ([`Checkpoint`]); `None` for a config alone.
    #[serde(skip)]
    pub checkpoint: Option<Checkpoint>,
    /// Which library holds the weights: transformers (the estimate, fine-tuning) or a serving
    /// engine (`vram capacity`, through [`crate::describe::Blocks::as_engines_hold`]).
    #[serde(skip)]
    pub holder: Holder,
}

/// Which library holds a packed checkpoint's weights, where they differ.
///
/// compressed-tensors W4A16 expert banks: transformers 5.24 builds fused 3-D expert banks
/// (`experts.gate_up_proj`, `experts.down_proj`), which compressed-tensors' `Linear` targets do
/// not reach, and loads the checkpoint's per-expert `weight_packed`/`weight_scale`/`weight_shape`
/// into them dequantized: `HfQuantizer.update_weight_conversions` (quantizers/base.py) puts
/// `CompressedTensorsDequantize` before the per-expert merge when the bank has no packed
/// companion parameter. Run on the CPU with transformers 5.24.0 and compressed-tensors 0.20.0
/// (a one-layer Qwen3-MoE stored W4A16, group 32): the banks load bf16
/// (`gate_up_proj` `[4, 128, 64]`), the attention's `nn.Linear`s stay `weight_packed` int32.
/// vLLM's `CompressedTensorsWNA16MoEMethod` and SGLang's port hold the banks packed.
///
/// AWQ and GPTQ MoE checkpoints (read in transformers 5.24.0, not run: gptqmodel, which both
/// quantizers need, is not installed here): `AwqQuantizer` and `GptqHfQuantizer` set no
/// `serialized_names` and no `get_load_operations`, so `update_weight_conversions` leaves the
/// model's per-expert merge as it is. Its sources end in `.weight`, which the checkpoint's
/// per-expert `qweight`/`qzeros`/`scales` do not match, so nothing is dequantized into the
/// banks: they are not loaded from the checkpoint at all (missing keys, left as built, in the
/// dtype) and the per-expert packed tensors are dropped as unexpected keys;
/// `replace_with_awq_linear` and optimum's `convert_model` replace `nn.Linear`s only. The bytes
/// held are the dequantized banks' (as [`Storage::packs`] counts them: GPTQ/AWQ pack linears,
/// never banks); the model's experts then hold no checkpoint weights, which no memory figure
/// shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Holder {
    /// transformers 5.24 (`from_pretrained`).
    #[default]
    Transformers,
    /// vLLM or SGLang.
    Engine,
}

/// A set of [`Component`]s: those a quantization config leaves unquantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ignored([bool; Component::COUNT]);

impl Ignored {
    /// Adds a component.
    pub fn insert(&mut self, c: Component) {
        self.0[c as usize] = true;
    }

    /// Whether the set holds `c`.
    pub fn contains(self, c: Component) -> bool {
        self.0[c as usize]
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        !self.0.iter().any(|x| *x)
    }
}

/// A checkpoint's stored bytes per [`Component`], summed from its safetensors headers (every
/// tensor's dtype and shape, quantization scales and zeros included), beside the elements the
/// description gives the component. The tensors the library holds in fp32 whatever the
/// checkpoint ([`Storage::holds_fp32`]) take 4 bytes an element; the other tensors of a
/// component share the rest of its bytes in proportion to their elements: exact for the
/// totals, and for each tensor where the component's other tensors share one format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Bytes per component from the headers (indexed by `Component as usize`): as stored, but
    /// a packed checkpoint's float tensors (norms, embeddings, the head; block scales and
    /// buffers aside) at the model's dtype, as the libraries cast them when they load.
    pub bytes: [u64; Component::COUNT],
    /// The description's elements per component (the unquantized parameter count).
    pub numel: [u64; Component::COUNT],
    /// Whether the component holds a packed tensor (a dtype other than a float: U8 MXFP4
    /// blocks, F8_E4M3, I32 GPTQ/AWQ words, bitsandbytes' U8/I8).
    pub packed: [bool; Component::COUNT],
    /// Elements per component the library holds in fp32.
    pub fp32_numel: [u64; Component::COUNT],
    /// Bytes per component the library adds by upcasting them: in a packed checkpoint, from
    /// the model's dtype to 4 bytes; in an unpacked one, 2 an element beyond the component's
    /// F32 elements in the headers (those are taken to be the same tensors).
    pub upcast: [u64; Component::COUNT],
    /// Bytes per component the library adds by holding 16-bit block-FP8 scales in fp32
    /// (`weight_scale_inv`, [`crate::safetensors_header::Groups::scale_upcast`]); shared by
    /// the component's tensors with the rest of its bytes.
    pub scale_upcast: [u64; Component::COUNT],
    /// Bytes per component the library saves by holding the block-FP8 scales a byte each
    /// (`scale_fmt: ue8m0`, [`Quant::Fp8Block`]): what the fp32 scales would take less one byte
    /// an element; zero otherwise.
    pub scale_narrow: [u64; Component::COUNT],
}

impl Checkpoint {
    /// Every byte held: the headers' and the fp32 upcasts.
    pub fn total(&self) -> u64 {
        self.bytes.iter().sum::<u64>()
            + self.upcast.iter().sum::<u64>()
            + self.scale_upcast.iter().sum::<u64>()
            - self.scale_narrow.iter().sum::<u64>()
    }

    /// Whether a component holds packed tensors.
    pub fn is_packed(&self) -> bool {
        self.packed.iter().any(|p| *p)
    }

    /// `t`'s bytes: 4 an element where the library holds it in fp32 (`fp32`), else its share
    /// of what the component's other tensors store.
    fn share(&self, t: &Tensor, fp32: bool) -> u64 {
        if fp32 {
            return t.numel() * 4;
        }
        let i = t.component as usize;
        let rest = self.numel[i].saturating_sub(self.fp32_numel[i]);
        let held32 = (self.fp32_numel[i] * 4).saturating_sub(self.upcast[i]);
        let bytes = (self.bytes[i].saturating_sub(held32) + self.scale_upcast[i])
            .saturating_sub(self.scale_narrow[i]);
        if rest == 0 {
            return 0;
        }
        (t.numel() as u128 * bytes as u128 / rest as u128) as u64
    }
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            dtype: Dtype::Bf16,
            quant: Quant::None,
            ignored: Ignored::default(),
            checkpoint: None,
            holder: Holder::Transformers,
        }
    }
}

impl Storage {
    /// Whether some tensors are stored packed (not in a float dtype).
    pub fn is_packed(&self) -> bool {
        if let Some(c) = &self.checkpoint {
            return c.is_packed();
        }
        match self.quant {
            Quant::None | Quant::Other => false,
            Quant::Packed { format, .. } => format.is_quantized(),
            Quant::Fp8Block { .. } | Quant::Mxfp4 => true,
        }
    }

    /// The storage `--weights FORMAT` asks for: a float format is the dtype, a packed one the
    /// layers' linears packed in it (`from_pretrained(..., quantization_config=...)`).
    pub fn from_flag(format: WeightFormat, double_quant: bool) -> Storage {
        match format {
            WeightFormat::Bf16 => Storage::default(),
            WeightFormat::Fp16 => Storage {
                dtype: Dtype::F16,
                quant: Quant::None,
                ignored: Ignored::default(),
                checkpoint: None,
                holder: Holder::Transformers,
            },
            WeightFormat::Fp32 => Storage {
                dtype: Dtype::F32,
                quant: Quant::None,
                ignored: Ignored::default(),
                checkpoint: None,
                holder: Holder::Transformers,
            },
            _ => Storage {
                dtype: Dtype::Bf16,
                quant: Quant::Packed {
                    format,
                    double_quant,
                },
                ignored: Ignored::default(),
                checkpoint: None,
                holder: Holder::Transformers,
            },
        }
    }

    /// The stored format's name as the flag and the report write it (`mxfp4 experts`,
    /// `fp8 blocks 128x128`, `nf4`, `gptq-g128`, or the dtype).
    pub fn name(&self) -> String {
        let dtype = match self.dtype {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        };
        match self.quant {
            Quant::None | Quant::Other => dtype.into(),
            Quant::Fp8Block { bn, bk, .. } => format!("fp8 blocks {bn}x{bk}"),
            Quant::Mxfp4 => "mxfp4 experts".into(),
            Quant::Packed {
                format,
                double_quant,
            } => {
                if double_quant {
                    format!("{} (double quant)", format.name())
                } else {
                    format.name()
                }
            }
        }
    }

    /// Bytes one tensor takes as the library holds it when the dtype's elements take `dense`
    /// bytes (the step's precision: `from_pretrained(dtype=...)`) and packed tensors stay as
    /// stored; `dequantized`: everything at `dense`. A checkpoint with nothing packed holds
    /// every tensor at `dense` (as the walk always has).
    pub fn held_bytes(&self, t: &Tensor, dense: u64, dequantized: bool) -> u64 {
        if dequantized || !self.is_packed() {
            return t.numel() * dense;
        }
        if let Some(c) = &self.checkpoint {
            // Packed components as the headers store them; float ones cast to the step's
            // precision, as from_pretrained(dtype=...) casts them.
            return if c.packed[t.component as usize] && !self.dequantizes_at_load(t) {
                c.share(t, self.holds_fp32(t))
            } else if t.fp32 {
                t.numel() * 4
            } else {
                t.numel() * dense
            };
        }
        self.bytes(t, dense)
    }

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
        if self.dequantizes_at_load(t) {
            return t.numel() * d;
        }
        if let Some(c) = &self.checkpoint {
            return c.share(t, self.holds_fp32(t));
        }
        self.bytes(t, d)
    }

    /// Bytes the library holds of `t` beyond its share of a checkpoint's stored bytes, where it
    /// dequantizes it at load (W4A16 expert banks under transformers, [`Holder`]); 0 otherwise.
    pub(crate) fn dequantized_extra(&self, t: &Tensor) -> u64 {
        match &self.checkpoint {
            Some(c) if self.dequantizes_at_load(t) => {
                (t.numel() * self.dtype.bytes()).saturating_sub(c.share(t, self.holds_fp32(t)))
            }
            _ => 0,
        }
    }

    /// Whether the library loads `t` dequantized from a packed checkpoint: W4A16 expert banks
    /// under transformers ([`Holder`]).
    fn dequantizes_at_load(&self, t: &Tensor) -> bool {
        matches!(t.kind, TensorKind::Experts(_))
            && matches!(
                self.quant,
                Quant::Packed {
                    format: WeightFormat::Wna16 { .. },
                    ..
                }
            )
            && !self.packs(t.component, t.kind, t.rows)
    }

    /// Whether the quantization config leaves the linears of `c` unquantized (its ignore list
    /// names them): the per-linear predicate the tensor count, the fine-tuning base and
    /// `vram capacity`'s linears all read.
    pub fn ignores(&self, c: Component) -> bool {
        self.ignored.contains(c)
    }

    /// Whether the library holds `t` in fp32 whatever the checkpoint stores: routers in
    /// `_keep_in_fp32_modules_strict`, and MXFP4's expert biases (`Mxfp4GptOssExperts` makes
    /// them float32 parameters).
    pub fn holds_fp32(&self, t: &Tensor) -> bool {
        t.fp32
            || (self.quant == Quant::Mxfp4
                && t.kind == TensorKind::Vector
                && t.component == Component::RoutedExperts)
    }

    /// Bytes of `t` as stored, elements of the dtype at `d` bytes.
    fn bytes(&self, t: &Tensor, d: u64) -> u64 {
        if t.fp32 {
            return t.numel() * 4;
        }
        let e = match t.kind {
            TensorKind::Experts(e) => e,
            _ => 1,
        };
        match self.quant {
            Quant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0,
            } => match t.kind {
                TensorKind::Linear | TensorKind::Experts(_)
                    if !(t.component == Component::Router
                        || t.component == Component::Vision
                        || t.component == Component::Audio
                        || (t.component == Component::Head && skip_head)
                        || t.rows == 1) =>
                {
                    // Each expert's matrix as one block-wise FP8 linear.
                    e * crate::finetune::fp8_block_linear_tensors(t.rows, t.cols, bn, bk)
                        .iter()
                        .map(|x| match x.name {
                            "weight_scale_inv" if e8m0 => x.bytes / 4,
                            _ => x.bytes,
                        })
                        .sum::<u64>()
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
            Quant::Packed {
                format,
                double_quant,
            } => {
                if self.packs(t.component, t.kind, t.rows) {
                    match (format, t.kind) {
                        (WeightFormat::Gptq { .. }, TensorKind::Experts(_)) => {
                            e * gptq_marlin_bank_bytes(format, d, t.rows, t.cols)
                        }
                        _ => e * linear_bytes(format, double_quant, t.rows, t.cols),
                    }
                } else {
                    t.numel() * d
                }
            }
            Quant::None | Quant::Other => t.numel() * d,
        }
    }

    /// Whether a [`Quant::Packed`] storage packs a weight of `component`, of `kind` (a linear
    /// or an expert bank) with `rows` output rows: the one rule the tensor count
    /// ([`Storage::tensor_bytes`]) and the fine-tuning base (`finetune::weights_bytes`, its
    /// step's placement and dequantization temporaries) read. `false` for other storages,
    /// whose rules [`Storage::tensor_bytes`] keeps per format.
    ///
    /// - FP8 (`--weights fp8`, transformers' `FineGrainedFP8`): linears and expert banks, as
    ///   [`Quant::Fp8Block`] does.
    /// - compressed-tensors W4A16 targets `Linear`: every expert's linears are stored packed in
    ///   the checkpoint (Kimi-K2.5's `experts.{j}.{gate,up,down}_proj.weight_packed`, held to the
    ///   byte by `tests/it/checkpoints.rs`); vLLM's WNA16 MoE method holds the banks so,
    ///   transformers 5.24 dequantizes them ([`Holder`]).
    /// - GPTQ, AWQ: the layers' `nn.Linear` modules; expert banks only as the engines hold
    ///   them: vLLM's `AWQMoEMethod` (`awq_marlin.py`, read in a 0.11-era copy) creates each
    ///   bank's `w13_qweight`/`w2_qweight` (int32), `scales` (model dtype) and `qzeros`
    ///   (int32) per expert at the checkpoint's group size, the tensors AWQ's per-expert
    ///   `linear_tensors` list, and repacks them at the same sizes; `GPTQMarlinMoEMethod`
    ///   (`gptq_marlin.py`, main 00161ce) as `gptq_marlin_bank_bytes` counts. SGLang's run the
    ///   same tensors: vLLM's own classes through 0.4.9 for AWQ (read at 0.6.4.post1 and 0.7.2), its own
    ///   `AWQMoEMethod` from 0.4.10 (`awq.py`), and its own `GPTQMarlinMoEMethod` from 0.4.9
    ///   (`gptq.py`: scales `torch.half`, `qzeros` in the model dtype), read in the 0.4.9,
    ///   0.4.10.post2 and 0.5.3 wheels; its `MoeWNA16Method` fallback (a layer Marlin MoE does
    ///   not support) packs the same bytes in uint8. transformers 5.24 leaves the banks as
    ///   built ([`Holder`]).
    /// - bitsandbytes: the layers' `nn.Linear` modules only.
    ///
    /// Never the routers, the head, the towers, the MTP layers, a linear of one output row (a
    /// shared-expert gate) under FP8 or W4A16, or a component the ignore list names.
    pub fn packs(&self, component: Component, kind: TensorKind, rows: u64) -> bool {
        let Quant::Packed { format, .. } = self.quant else {
            return false;
        };
        (match (format, kind) {
            (WeightFormat::Fp8, TensorKind::Linear | TensorKind::Experts(_)) => rows > 1,
            (WeightFormat::Wna16 { .. }, TensorKind::Linear) => rows > 1,
            // transformers 5.24 dequantizes W4A16 banks into its fused banks at load, and
            // leaves AWQ/GPTQ banks as built, unloaded ([`Holder`]); the engines' MoE methods
            // hold all three packed.
            (
                WeightFormat::Wna16 { .. } | WeightFormat::Awq { .. } | WeightFormat::Gptq { .. },
                TensorKind::Experts(_),
            ) => rows > 1 && self.holder == Holder::Engine,
            (_, TensorKind::Linear) => format.is_quantized(),
            _ => false,
        }) && !matches!(
            component,
            Component::Router
                | Component::Head
                | Component::Vision
                | Component::Audio
                | Component::Mtp
        ) && !self.ignores(component)
    }
}

/// Bytes one expert's `rows × cols` matrix takes in vLLM's `GPTQMarlinMoEMethod` bank after
/// loading (`gptq_marlin.py`, read at vLLM main 00161ce, 0.6.4.post1 and 0.7.2; SGLang's own port
/// at 0.4.9 and 0.5.3 the same): `qweight` and
/// `scales` as the checkpoint's (`linear_tensors`), `qzeros` created in the model dtype
/// (`dtype` bytes, not the checkpoint's int32), `g_idx` and `g_idx_sort_indices` emptied by
/// `process_weights_after_loading` unless `desc_act`, where both stay (int32 over the input).
fn gptq_marlin_bank_bytes(format: WeightFormat, dtype: u64, rows: u64, cols: u64) -> u64 {
    let desc_act = matches!(format, WeightFormat::Gptq { desc_act: true, .. });
    crate::finetune::linear_tensors(format, false, rows, cols)
        .iter()
        .map(|x| match x.name {
            "qzeros" => x.bytes / 4 * dtype,
            "g_idx" if desc_act => 2 * x.bytes,
            "g_idx" => 0,
            _ => x.bytes,
        })
        .sum()
}

/// How the library loads a packed checkpoint for a step ([`Storage::load`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Load {
    /// Whether it dequantizes the packed weights to the dtype at load.
    pub dequantized: bool,
    /// Why, in a sentence naming the library's rule; `None` where nothing is packed.
    pub why: Option<String>,
}

impl Storage {
    /// How transformers 5.24 loads this storage for a step: `training` (a full training step),
    /// the `kernels` installed, the GPU's compute capability `cc`, and `--dequantized`
    /// (`asked`: `quantization_config=...(dequantize=True)`).
    ///
    /// - MXFP4 (`quantizers/quantizer_mxfp4.py::validate_environment`): kept packed on a CUDA
    ///   GPU of compute capability >= 7.5 with Triton >= 3.4 and the `kernels` package;
    ///   otherwise "We will default to dequantizing the model to bf16". Training dequantizes
    ///   (`is_trainable` is false: the quantizer asks for `Mxfp4Config(dequantize=True)`).
    /// - FP8 block-wise (`quantizer_finegrained_fp8.py::validate_environment`): kept packed at
    ///   compute capability >= 8.9; below, dequantized to bf16.
    /// - bitsandbytes, GPTQ, AWQ (`--weights` or the config): held as packed.
    pub fn load(
        &self,
        training: bool,
        kernels: crate::setup::Kernels,
        cc: (u32, u32),
        asked: bool,
    ) -> Load {
        let packed = |why: &str| Load {
            dequantized: false,
            why: Some(why.into()),
        };
        let deq = |why: String| Load {
            dequantized: true,
            why: Some(why),
        };
        if !self.is_packed() {
            return Load {
                dequantized: false,
                why: None,
            };
        }
        if asked {
            return deq("as --dequantized asks".into());
        }
        match self.quant {
            Quant::Mxfp4 if training => deq("as training needs them (transformers 5.24's Mxfp4HfQuantizer is not trainable: Mxfp4Config(dequantize=True))".into()),
            Quant::Mxfp4 if cc < (7, 5) => deq(format!("as transformers 5.24 does below compute capability 7.5 (this GPU: {}.{})", cc.0, cc.1)),
            Quant::Mxfp4 if !kernels.mxfp4 => deq("as transformers 5.24 does without the `kernels` package and Triton >= 3.4 (--kernels mxfp4)".into()),
            Quant::Mxfp4 => packed("run by the `kernels` package's Triton MoE kernels (--kernels mxfp4; compute capability 7.5 or later)"),
            Quant::Fp8Block { .. } if training => deq("as the training step holds them at its precision".into()),
            Quant::Fp8Block { .. } if cc < (8, 9) => deq(format!("as transformers 5.24 does below compute capability 8.9 (this GPU: {}.{})", cc.0, cc.1)),
            Quant::Fp8Block { .. } => packed("as transformers 5.24 keeps FP8 at compute capability 8.9 or later"),
            _ if training => deq("as the training step holds them at its precision".into()),
            _ => packed("as the library loads them"),
        }
    }
}
