//! Fine-tuning as people run it: the base's storage (bitsandbytes int8/NF4/FP4, FP8, GPTQ/AWQ
//! 4-bit) and LoRA adapters attached to the linears of the layer description ([`crate::describe`]).
//!
//! Everything here is read from the libraries' source at pinned versions (PEFT 0.21.2,
//! bitsandbytes 0.50.2, transformers 5.24.0, TRL 1.16.0) and held to them by tests that run
//! the real libraries (`tests/engines/finetune_reference.py`):
//!
//! - [`linear_bytes`] is the storage of one packed linear, byte for byte as the library holds it
//!   (the quantization state included, which `get_memory_footprint()` leaves out);
//! - [`weights_bytes`] is a whole model's base weights in a [`WeightFormat`];
//! - [`sites`] names the linears and parameters of each layer as transformers names them, and
//!   [`lora`] resolves a PEFT `LoraConfig`'s targets on them (`all-linear`, suffix lists, the
//!   MoE rewrite to `target_parameters`) and counts the adapter parameters.

use serde::Serialize;

pub mod step;

use crate::describe::{Block, Component, Names};
use crate::describe::{Layout, Storage, Transformer};
use crate::error::{Error, Result};
pub use crate::mech::{Site, SiteKind};

/// How the frozen base's weights are stored (`--weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "format")]
pub enum WeightFormat {
    /// bfloat16.
    Bf16,
    /// float16.
    Fp16,
    /// float32.
    Fp32,
    /// bitsandbytes LLM.int8 (`load_in_8bit`).
    Int8,
    /// bitsandbytes 4-bit NormalFloat (`load_in_4bit`, `bnb_4bit_quant_type="nf4"`).
    Nf4,
    /// bitsandbytes 4-bit float (`bnb_4bit_quant_type="fp4"`).
    Fp4,
    /// transformers' fine-grained FP8 (`FineGrainedFP8Config`, 128×128 blocks).
    Fp8,
    /// GPTQ 4-bit with this group size (0: one group per input row, `group_size=-1`).
    Gptq {
        /// Input features per scale/zero group.
        group: u64,
        /// `desc_act` (act-order): the quantizer visited the input columns by decreasing
        /// activation, so `g_idx` maps each input row to its group out of order. The library
        /// holds `g_idx` either way; vLLM keeps it (and Marlin its sort indices) only with it.
        desc_act: bool,
    },
    /// AWQ 4-bit GEMM layout with this group size.
    Awq {
        /// Input features per scale/zero group.
        group: u64,
    },
    /// compressed-tensors' `pack-quantized` int4 weights with 16-bit activations (W4A16,
    /// `quant_method: compressed-tensors`, the `Linear` target's `config_groups` weights:
    /// `num_bits: 4`, `type: int`), as vLLM's `CompressedTensorsWNA16` and
    /// `CompressedTensorsWNA16MarlinMoEMethod` hold it. Read from a config only; no `--weights`
    /// spelling.
    Wna16 {
        /// Input features per scale group (0: `strategy: channel`, one group per input row).
        group: u64,
        /// `symmetric`: no zero points.
        symmetric: bool,
    },
}

impl WeightFormat {
    /// Parses `--weights` (`bf16`, `fp16`, `fp32`, `int8`, `nf4`, `fp4`, `fp8`, `gptq`,
    /// `gptq-g64`, `awq`, `awq-g64`; GPTQ and AWQ default to group size 128).
    pub fn parse(s: &str) -> Result<WeightFormat> {
        let group = |rest: &str, what: &str| -> Result<u64> {
            if rest.is_empty() {
                return Ok(128);
            }
            let g = rest
                .strip_prefix("-g")
                .and_then(|g| g.parse::<u64>().ok())
                .ok_or_else(|| {
                    Error::Setup(format!(
                        "--weights {s}: write {what} or {what}-gN with a group size N (e.g. {what}-g128)"
                    ))
                })?;
            if g == 0 || g % 8 != 0 {
                return Err(Error::Setup(format!(
                    "--weights {s}: the group size must be a positive multiple of 8"
                )));
            }
            Ok(g)
        };
        Ok(match s {
            "bf16" => WeightFormat::Bf16,
            "fp16" => WeightFormat::Fp16,
            "fp32" => WeightFormat::Fp32,
            "int8" => WeightFormat::Int8,
            "nf4" => WeightFormat::Nf4,
            "fp4" => WeightFormat::Fp4,
            "fp8" => WeightFormat::Fp8,
            _ if s.starts_with("gptq") => WeightFormat::Gptq {
                group: group(&s[4..], "gptq")?,
                desc_act: false,
            },
            _ if s.starts_with("awq") => WeightFormat::Awq {
                group: group(&s[3..], "awq")?,
            },
            _ => {
                return Err(Error::Setup(format!(
                    "--weights {s}: expected bf16, fp16, fp32, int8, nf4, fp4, fp8, gptq[-gN] or awq[-gN]"
                )))
            }
        })
    }

    /// The flag's spelling.
    pub fn name(self) -> String {
        match self {
            WeightFormat::Bf16 => "bf16".into(),
            WeightFormat::Fp16 => "fp16".into(),
            WeightFormat::Fp32 => "fp32".into(),
            WeightFormat::Int8 => "int8".into(),
            WeightFormat::Nf4 => "nf4".into(),
            WeightFormat::Fp4 => "fp4".into(),
            WeightFormat::Fp8 => "fp8".into(),
            WeightFormat::Gptq { group, .. } => format!("gptq-g{group}"),
            WeightFormat::Awq { group } => format!("awq-g{group}"),
            WeightFormat::Wna16 { group, symmetric } => format!(
                "compressed-tensors-w4a16-g{group}{}",
                if symmetric { "" } else { "-asym" }
            ),
        }
    }

    /// bitsandbytes 4-bit (NF4 or FP4).
    pub fn is_bnb_4bit(self) -> bool {
        matches!(self, WeightFormat::Nf4 | WeightFormat::Fp4)
    }

    /// Packed (quantized) rather than a plain float dtype.
    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            WeightFormat::Bf16 | WeightFormat::Fp16 | WeightFormat::Fp32
        )
    }

    /// Bytes per element of what stays unquantized (embedding, norms, biases, head, router,
    /// fused experts under bitsandbytes): the load dtype, bf16 for the quantized formats (fp16
    /// for GPTQ/AWQ, whose kernels run in fp16 and whose checkpoints store fp16).
    pub fn dense_bytes(self) -> u64 {
        match self {
            WeightFormat::Fp32 => 4,
            _ => 2,
        }
    }
}

/// bitsandbytes' 4-bit block size (`functional.quantize_4bit`, `blocksize=None` → 64).
pub const BNB_4BIT_BLOCK: u64 = 64;
/// The block size of the nested quantization of the 4-bit absmax (`quantize_blockwise(...,
/// blocksize=256)` in `functional.quantize_4bit` with `compress_statistics=True`).
pub const BNB_NESTED_BLOCK: u64 = 256;

/// Bytes one `out × in` linear weight (no bias) takes in `format`, exactly as the library holds
/// it after loading, quantization state included. `double_quant` applies to bitsandbytes 4-bit.
///
/// - int8 (`bitsandbytes/nn/modules.py::Int8Params._quantize`): the int8 weight (`CB`, one
///   storage with `data`) plus `SCB`, one fp32 absmax per output row.
/// - NF4/FP4 (`functional.quantize_4bit`, `Params4bit._quantize`): the packed uint8 weight,
///   two values a byte (⌈n/2⌉); the `QuantState`: fp32 absmax per 64 values and its own copy of
///   the 16-entry fp32 code (`get_4bit_type`). With double quant (`compress_statistics`), the
///   absmax minus its mean (`offset`, a 0-d fp32) goes through `quantize_blockwise` with block
///   256: uint8 absmax (one byte per 64 values), `state2.absmax` fp32 per 256 of those, and a
///   copy of the 256-entry fp32 dynamic code (`code.to(A.device, copy=True)`, per linear).
/// - FP8 (`quantizers/quantizer_finegrained_fp8.py`): `float8_e4m3fn` plus an fp32
///   `weight_scale_inv` per 128×128 block (the zoo's [`crate::describe::Storage::tensor_bytes`]).
/// - GPTQ (gptqmodel/auto-gptq `QuantLinear`, 4 bits): `qweight` int32 `[in/8, out]`,
///   `qzeros` int32 `[groups, out/8]`, `scales` fp16 `[groups, out]`, `g_idx` int32 `[in]`.
/// - AWQ (autoawq `WQLinear_GEMM`, 4 bits): `qweight` int32 `[in, out/8]`, `qzeros` int32
///   `[groups, out/8]`, `scales` fp16 `[groups, out]`; no `g_idx`.
/// - compressed-tensors W4A16 (`pack-quantized`), as vLLM's `CompressedTensorsWNA16.create_weights`
///   makes it (`compressed_tensors_wNa16.py`, read at 0.10.0): `weight_packed` int32
///   `[out, in/8]`, `weight_scale` in the model dtype `[out, groups]`, `weight_shape` int64 `[2]`,
///   and `weight_zero_point` int32 `[out/8, groups]` only when not `symmetric`. The Marlin MoE
///   method (`CompressedTensorsWNA16MarlinMoEMethod`, `compressed_tensors_moe.py` at 0.10.0) holds
///   each expert the same way (it asserts symmetric: no zero points); the `g_idx` placeholders it
///   creates are emptied after loading without act-order, and Marlin's repack keeps the sizes.
pub fn linear_bytes(format: WeightFormat, double_quant: bool, out: u64, inp: u64) -> u64 {
    linear_parts(format, double_quant, out, inp).iter().sum()
}

/// One tensor a packed linear stores: its name, shape and element dtype as the library holds
/// them, and its bytes (the shape's elements times the dtype's width).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearTensor {
    /// The name the library gives it (bitsandbytes' `QuantState.as_dict` keys for the state).
    pub name: &'static str,
    /// Its shape (`[]`: a 0-d tensor).
    pub shape: Vec<u64>,
    /// Its element dtype, as torch names it.
    pub dtype: &'static str,
    /// Its bytes.
    pub bytes: u64,
}

fn tensor(name: &'static str, shape: &[u64], dtype: &'static str) -> LinearTensor {
    let width = match dtype {
        "int64" => 8,
        "float32" | "int32" => 4,
        "float16" | "bfloat16" => 2,
        _ => 1,
    };
    LinearTensor {
        name,
        shape: shape.to_vec(),
        dtype,
        bytes: width * shape.iter().product::<u64>(),
    }
}

/// The tensors one packed `out × in` linear stores in `format` (the one description of a
/// packed linear's layout: [`linear_bytes`], [`linear_parts`] and the serving capacity's
/// weight tensors read it). bitsandbytes 0.50.2's `quantize_4bit` on the CPU of a 256 × 512
/// bf16 weight gives exactly these: a `uint8 [65536, 1]`, and with `compress_statistics`
/// `absmax uint8 [2048]`, `nested_absmax float32 [8]`, `nested_quant_map float32 [256]`, the
/// `quant_map float32 [16]` and a 0-d `offset`; without it `absmax float32 [2048]`;
/// `int8_vectorwise_quant` a `CB int8 [256, 512]` and `SCB float32 [256]`.
pub fn linear_tensors(
    format: WeightFormat,
    double_quant: bool,
    out: u64,
    inp: u64,
) -> Vec<LinearTensor> {
    let n = out * inp;
    let groups = |group: u64| if group == 0 { 1 } else { inp.div_ceil(group) };
    match format {
        WeightFormat::Bf16 => vec![tensor("weight", &[out, inp], "bfloat16")],
        WeightFormat::Fp16 => vec![tensor("weight", &[out, inp], "float16")],
        WeightFormat::Fp32 => vec![tensor("weight", &[out, inp], "float32")],
        WeightFormat::Int8 => vec![
            tensor("CB", &[out, inp], "int8"),
            tensor("SCB", &[out], "float32"),
        ],
        WeightFormat::Nf4 | WeightFormat::Fp4 => {
            let blocks = n.div_ceil(BNB_4BIT_BLOCK);
            let packed = tensor("weight", &[n.div_ceil(2), 1], "uint8");
            let code = tensor("quant_map", &[16], "float32");
            if double_quant {
                vec![
                    packed,
                    tensor("absmax", &[blocks], "uint8"),
                    tensor(
                        "nested_absmax",
                        &[blocks.div_ceil(BNB_NESTED_BLOCK)],
                        "float32",
                    ),
                    code,
                    tensor("offset", &[], "float32"),
                    tensor("nested_quant_map", &[256], "float32"),
                ]
            } else {
                vec![packed, tensor("absmax", &[blocks], "float32"), code]
            }
        }
        WeightFormat::Fp8 => fp8_block_linear_tensors(out, inp, FP8_BLOCK, FP8_BLOCK),
        WeightFormat::Gptq { group, .. } => vec![
            tensor("qweight", &[inp / 8, out], "int32"),
            tensor("qzeros", &[groups(group), out / 8], "int32"),
            tensor("scales", &[groups(group), out], "float16"),
            tensor("g_idx", &[inp], "int32"),
        ],
        WeightFormat::Awq { group } => vec![
            tensor("qweight", &[inp, out / 8], "int32"),
            tensor("qzeros", &[groups(group), out / 8], "int32"),
            tensor("scales", &[groups(group), out], "float16"),
        ],
        WeightFormat::Wna16 { group, symmetric } => {
            let mut v = vec![
                tensor("weight_packed", &[out, inp / 8], "int32"),
                tensor("weight_scale", &[out, groups(group)], "bfloat16"),
                tensor("weight_shape", &[2], "int64"),
            ];
            if !symmetric {
                v.push(tensor(
                    "weight_zero_point",
                    &[out / 8, groups(group)],
                    "int32",
                ));
            }
            v
        }
    }
}

/// The block side of transformers' `FineGrainedFP8Config` default (`weight_block_size`
/// `[128, 128]`), which DeepSeek-V3/R1's and Qwen3's FP8 checkpoints ship.
pub const FP8_BLOCK: u64 = 128;

/// Block-wise FP8's tensors for one `out × in` linear with `bn × bk` blocks: the
/// `float8_e4m3fn` weight and one fp32 `weight_scale_inv` per block,
/// `[ceil(out/bn), ceil(in/bk)]`. transformers 5.24's `FP8Linear` and vLLM's
/// `Fp8LinearMethod.create_weights` (block quant, read at 0.9.1: `BlockQuantScaleParameter` of
/// `torch.float32`, on the rank's partition sizes) both hold the scales fp32, whatever dtype
/// the checkpoint stores them in.
pub fn fp8_block_linear_tensors(out: u64, inp: u64, bn: u64, bk: u64) -> Vec<LinearTensor> {
    vec![
        tensor("weight", &[out, inp], "float8_e4m3fn"),
        tensor(
            "weight_scale_inv",
            &[out.div_ceil(bn.max(1)), inp.div_ceil(bk.max(1))],
            "float32",
        ),
    ]
}

/// MXFP4's tensors for one `out × in` linear as vLLM's `Mxfp4MoEMethod.create_weights` and
/// transformers' `quantizer_mxfp4` store an expert's: `weight` uint8 `[out, in/2]` (two values a
/// byte) and `weight_scale` uint8 `[out, in/32]` (one E8M0 exponent per 32 values).
pub fn mxfp4_linear_tensors(out: u64, inp: u64) -> Vec<LinearTensor> {
    vec![
        tensor("weight", &[out, inp / 2], "uint8"),
        tensor("weight_scale", &[out, inp / 32], "uint8"),
    ]
}

/// The bytes of each tensor of one packed `out × in` linear ([`linear_tensors`]; the allocator
/// sees each one; the small quantization-state tensors round up to 512 B blocks).
pub fn linear_parts(format: WeightFormat, double_quant: bool, out: u64, inp: u64) -> Vec<u64> {
    linear_tensors(format, double_quant, out, inp)
        .iter()
        .map(|t| t.bytes)
        .collect()
}

/// Bytes as `12.3 GiB`.
pub(crate) fn fmt_bytes(b: u64) -> String {
    let g = b as f64 / (1u64 << 30) as f64;
    if g >= 1.0 {
        format!("{g:.1} GiB")
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// The sites of one block, in module order, with transformers' names for its family (`n`, the
/// description's [`Names`]): its mixer's, then its feed-forward's (each mechanism names its own,
/// [`crate::mech::Mechanism::sites`]).
pub fn block_sites(n: &Names, b: &Block, h: u64) -> Vec<Site> {
    let mut v = Vec::new();
    b.mixer.sites(n, h, &mut |s| v.push(s));
    b.ffn.sites(n, h, &mut |s| v.push(s));
    if b.per_layer_input > 0 {
        // Gemma4TextDecoderLayer: `per_layer_input_gate` reads the layer's output hidden
        // states, `per_layer_projection` the gated per-layer input (two nn.Linear, no bias).
        let w = b.per_layer_input;
        for (path, out, inp, input) in [
            ("per_layer_input_gate", w, h, 20),
            ("per_layer_projection", h, w, 21),
        ] {
            v.push(Site {
                path: path.into(),
                out,
                inp,
                kind: SiteKind::Module,
                component: Component::Embedding,
                input,
            });
        }
    }
    v
}

/// Every site of the model: per distinct block kind, its sites and how many layers use it;
/// the model-level linears of the text forward ([`crate::blocks::Blocks::linears`]); the
/// vision tower's and projector's linears ([`crate::mech::Vision::linears`]: PEFT 0.21.2's
/// `_maybe_include_all_linear_layers` takes every `nn.Linear` of the model but the output
/// layer, the towers' included) and the audio tower's; then the LM head (`lm_head`, counted
/// once) when the model has one.
pub fn sites(t: &Transformer) -> Vec<(Vec<Site>, u64)> {
    let b = &t.blocks;
    let mut out: Vec<(Vec<Site>, u64)> = b
        .kinds
        .iter()
        .zip(b.kind_counts())
        .map(|(k, n)| (block_sites(&b.names, k, b.hidden), n))
        .collect();
    out.extend(b.linears.iter().map(|s| (vec![s.clone()], 1)));
    if let Some(v) = &b.vision {
        out.extend(v.linears.iter().filter(|(_, n)| *n > 0).cloned());
    }
    if let Some(a) = &b.audio {
        out.extend(a.linears.iter().filter(|(_, n)| *n > 0).cloned());
    }
    if t.layout() == Layout::DecoderOnly {
        out.push((
            vec![Site {
                path: "lm_head".into(),
                out: t.vocab(),
                inp: t.hidden(),
                kind: SiteKind::Module,
                component: Component::Head,
                input: 0,
            }],
            1,
        ));
    }
    out
}

/// The module names PEFT refuses as LoRA targets on `t`: PEFT 0.21.2
/// `tuners/tuners_utils.py::_check_lora_target_modules_mamba` raises for `out_proj` and `conv1d`
/// on the model classes it knows as Mamba-based, which the reader marks on their Mamba2 mixers
/// ([`crate::blocks::Mamba2::peft_refuses_out_proj`]). `None` where PEFT refuses nothing.
pub fn peft_refused(t: &Transformer) -> Option<[&'static str; 2]> {
    t.blocks
        .kinds
        .iter()
        .any(|k| k.mixer.as_mamba2().is_some_and(|m| m.peft_refuses_out_proj))
        .then_some(["out_proj", "conv1d"])
}

/// Where PEFT refuses some of `t`'s linears ([`peft_refused`]): the linears of `all-linear` it
/// accepts, by name, in the model's order; `None` where `all-linear` is accepted as it is.
pub fn peft_accepted_targets(t: &Transformer) -> Option<Vec<String>> {
    let refused = peft_refused(t)?;
    let mut v: Vec<String> = Vec::new();
    for (ss, _) in sites(t) {
        for s in ss {
            let leaf = s.leaf().to_string();
            if s.kind == SiteKind::Module
                && s.component != Component::Head
                && !refused.contains(&leaf.as_str())
                && !v.contains(&leaf)
            {
                v.push(leaf);
            }
        }
    }
    Some(v)
}

/// Whether `path` matches one of PEFT's list targets or `llm_int8_skip_modules`: the whole name,
/// or a suffix after a dot (`tuners_utils.py::check_target_module_exists`).
fn matches(path: &str, target: &str) -> bool {
    path == target || path.ends_with(&format!(".{target}"))
}

/// The base weights' storage and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct WeightsBytes {
    /// Every byte of the base weights as the library holds them (quantization state included;
    /// what transformers 5.24 dequantizes at load in the dtype: [`crate::describe::Storage::packs`]).
    pub total: u64,
    /// Of which packed (quantized) linears with their quantization state.
    pub quantized: u64,
    /// Of which kept in the load dtype (embedding, norms, biases, head, routers, fused experts
    /// under bitsandbytes, skipped modules).
    pub unquantized: u64,
    /// Parameters kept in the load dtype (what `prepare_model_for_kbit_training` upcasts to
    /// fp32 under bitsandbytes).
    pub unquantized_params: u64,
    /// The largest packed linear's element count (the dequantized-weight temporary).
    pub largest_quantized: u64,
}

/// The whole base's weight bytes in `format` (`skip`: `llm_int8_skip_modules`, matched as
/// suffixes). What each format leaves unquantized:
///
/// - bitsandbytes (`integrations/bitsandbytes.py::replace_with_bnb_linear`): only modules whose
///   type is exactly `nn.Linear` (or `Conv1D`) are replaced, minus `modules_to_not_convert`
///   (`quantizers/base.py::get_keys_to_not_convert`: the output embedding, tied weights, the
///   last parameter) and `llm_int8_skip_modules`. Routers (custom modules in 5.x) and fused
///   3-D experts stay in the load dtype. Biases stay in the load dtype.
/// - FP8: linears and expert banks, routers and the head excluded (zoo's `Storage`).
/// - GPTQ/AWQ: every linear of the layers; the head, embedding and routers unquantized.
/// - compressed-tensors W4A16 (a checkpoint's own format): linears and expert banks but for the
///   components its `ignore` list names.
///
/// Each linear site is decided by the storage's one rule ([`Storage::packs`], through
/// [`packed_site`]), so this count and the tensor count agree format by format.
///
/// The vision tower and MTP layers are counted in the load dtype (their module tree is not
/// described linear by linear).
pub fn weights_bytes(
    t: &Transformer,
    format: WeightFormat,
    double_quant: bool,
    skip: &[String],
) -> WeightsBytes {
    weights_bytes_loaded(t, format, double_quant, skip, format.dense_bytes())
}

/// [`weights_bytes`] with what stays unpacked held at `d` bytes an element (4 where a
/// quantized base's checkpoint loads in float32: `FinetuneSpec::load_fp32`).
pub fn weights_bytes_loaded(
    t: &Transformer,
    format: WeightFormat,
    double_quant: bool,
    skip: &[String],
    d: u64,
) -> WeightsBytes {
    let mut w = WeightsBytes::default();
    let mut site_params = 0;
    let b = &t.blocks;
    let storage = base_storage(t, format, double_quant);
    for (kind, n) in b.kinds.iter().zip(b.kind_counts()) {
        for s in block_sites(&b.names, kind, b.hidden) {
            let numel = s.numel();
            site_params += n * numel;
            if packed_site(&storage, &s, skip) {
                let e = match s.kind {
                    SiteKind::Experts(e) => e,
                    _ => 1,
                };
                w.quantized += n * e * linear_bytes(format, double_quant, s.out, s.inp);
                w.largest_quantized = w.largest_quantized.max(s.out * s.inp);
            } else {
                w.unquantized += n * numel * d;
                w.unquantized_params += n * numel;
            }
        }
    }
    // Everything else (embedding, norms, biases, head, vision tower, MTP) in the load dtype;
    // the head is in `modules_to_not_convert` of every quantizer here.
    let rest = t.param_count().saturating_sub(site_params);
    w.unquantized += rest * d;
    w.unquantized_params += rest;
    w.total = w.quantized + w.unquantized;
    w
}

/// The storage of a base loaded in `format`: the checkpoint's own (its compressed-tensors
/// `ignore` list included) where `format` is the format it is stored in, else the storage
/// `--weights FORMAT` asks for ([`crate::describe::Storage::from_flag`]).
pub fn base_storage(t: &Transformer, format: WeightFormat, double_quant: bool) -> Storage {
    match t.blocks.storage.quant {
        crate::describe::Quant::Packed { format: f, .. } if f == format => t.blocks.storage,
        _ => Storage::from_flag(format, double_quant),
    }
}

/// Whether the linear site `s` is stored packed in `storage` ([`Storage::packs`], the one rule
/// the tensor count reads) and is not in `skip` (`llm_int8_skip_modules`, matched as suffixes).
/// A router is never packed (`Llama4Router` is an `nn.Linear` subclass, which bitsandbytes'
/// `type(module) is nn.Linear` test leaves alone; the others are custom modules).
pub fn packed_site(storage: &Storage, s: &Site, skip: &[String]) -> bool {
    !skip.iter().any(|k| matches(&s.path, k))
        && s.tensor_kind()
            .is_some_and(|k| storage.packs(s.component, k, s.out))
}

/// PEFT's `target_modules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Targets {
    /// `"all-linear"`: every `nn.Linear`/`Conv1D` but the output layer
    /// (`tuners_utils.py::_maybe_include_all_linear_layers`).
    AllLinear,
    /// Module names, matched as the whole name or a dotted suffix.
    List(Vec<String>),
}

impl Targets {
    /// Parses `--lora-targets` (`all-linear`, or a comma-separated list).
    pub fn parse(s: &str) -> Result<Targets> {
        if s.eq_ignore_ascii_case("all-linear") {
            return Ok(Targets::AllLinear);
        }
        let v: Vec<String> = s
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect();
        if v.is_empty() {
            return Err(Error::Setup(
                "--lora-targets: give all-linear or module names such as q_proj,v_proj".into(),
            ));
        }
        Ok(Targets::List(v))
    }

    /// As a `LoraConfig` argument would read.
    pub fn display(&self) -> String {
        match self {
            Targets::AllLinear => "all-linear".into(),
            Targets::List(v) => v.join(","),
        }
    }
}

/// A PEFT `LoraConfig`'s memory-relevant fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoraSpec {
    /// `r`.
    pub rank: u64,
    /// `lora_alpha` (no memory effect; emitted).
    pub alpha: u64,
    /// `lora_dropout`.
    pub dropout: f64,
    /// `target_modules`.
    pub targets: Targets,
}

/// One adapted site: its rank and how many layers carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Adapted {
    /// The site.
    pub site: Site,
    /// Rank after PEFT's `rank_pattern` (twice `r` on a fused `gate_up_proj`).
    pub rank: u64,
    /// Layers that carry it (1 for the head).
    pub count: u64,
}

impl Adapted {
    /// Adapter parameters: `lora_A [r, in] + lora_B [out, r]` on a module or 2-D parameter;
    /// `ParamWrapper`'s `lora_A = Linear(in, r·E)`, `lora_B = Linear(r·E, out)` on an expert
    /// bank (peft/tuners/lora/layer.py).
    pub fn params(&self) -> u64 {
        let e = match self.site.kind {
            SiteKind::Experts(e) => e,
            _ => 1,
        };
        self.count * self.rank * e * (self.site.inp + self.site.out)
    }
}

/// What `get_peft_model` builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoraPlan {
    /// The adapted sites.
    pub adapted: Vec<Adapted>,
    /// Adapter parameters (`get_nb_trainable_parameters()[0]`).
    pub trainable_params: u64,
    /// The `target_parameters` PEFT's MoE rewrite produced (empty if none).
    pub target_parameters: Vec<String>,
    /// What the libraries do that a user may not expect.
    pub notes: Vec<String>,
}

/// Resolves `spec` on `t` as `get_peft_model` does and counts the adapters.
///
/// PEFT 0.21.2 with transformers 5:
/// - `"all-linear"` becomes the leaf names of every `nn.Linear`/`Conv1D` except the output
///   layer (`_maybe_include_all_linear_layers`);
/// - on model types mapped to `mixtral`/`qwen2_moe` (`_convert_peft_config_moe`), the v4
///   expert and router names (`w1`/`w3`/`w2`/`gate`, or `gate_proj`/`up_proj`/`down_proj`/
///   `gate`) move from `target_modules` to `target_parameters` (`gate_up_proj` at rank 2r when
///   both halves are named, `down_proj`, `gate.weight`); `all-linear` adds all of them. Those
///   names then no longer match any module, so dense MLPs and shared experts of such models are
///   never adapted;
/// - a target naming no module fails (`ValueError: Target modules ... not found`);
/// - `lora_dropout ≠ 0` on a `target_parameters` site fails (`ParamWrapper`).
pub fn lora(t: &Transformer, spec: &LoraSpec) -> Result<LoraPlan> {
    if spec.rank == 0 {
        return Err(Error::Setup("--lora-rank must be at least 1".into()));
    }
    if spec.rank > crate::setup::MAX_SIZE {
        return Err(Error::OutOfRange {
            field: "--lora-rank".into(),
            value: spec.rank.to_string(),
            why: format!("must be between 1 and {}", crate::setup::MAX_SIZE),
        });
    }
    if !(0.0..1.0).contains(&spec.dropout) {
        return Err(Error::Setup(format!(
            "--lora-dropout {} must be in [0, 1)",
            spec.dropout
        )));
    }
    if t.layout() != Layout::DecoderOnly {
        return Err(Error::Setup(format!(
            "LoRA is modelled for decoder-only causal LMs (AutoModelForCausalLM); {} is {}",
            t.name,
            if t.layout() == Layout::EncoderOnly {
                "encoder-only"
            } else {
                "an encoder-decoder"
            }
        )));
    }
    let all = sites(t);
    let mut notes = Vec::new();
    // The list of module targets after resolution.
    let mut modules: Vec<String> = match &spec.targets {
        Targets::AllLinear => {
            let mut v: Vec<String> = Vec::new();
            for (ss, _) in &all {
                for s in ss {
                    if s.kind == SiteKind::Module && s.component != Component::Head {
                        let leaf = s.leaf().to_string();
                        if !v.contains(&leaf) {
                            v.push(leaf);
                        }
                    }
                }
            }
            v
        }
        Targets::List(v) => v.clone(),
    };
    // target_parameters with their rank
    let mut params: Vec<(String, u64)> = Vec::new();
    // transformers' `conversion_mapping._MODEL_TO_CONVERSION_PATTERN` (5.24.0), as PEFT 0.21.2
    // copies it: the reader sets the family's pattern, whose v4 expert names are
    // `MoeConversion::expert_names`.
    if let Some(pattern) = t.blocks.names.moe_conversion {
        let [gate, up, down] = pattern.expert_names();
        let mapping: [(&str, &str); 4] = [
            ("gate", "gate.weight"),
            (gate, "gate_up_proj"),
            (up, "gate_up_proj"),
            (down, "down_proj"),
        ];
        let fused = [gate, up];
        if spec.targets == Targets::AllLinear {
            for (old, _) in mapping {
                if !modules.iter().any(|m| m == old) {
                    modules.push(old.to_string());
                }
            }
        }
        let mut remaining = Vec::new();
        let mut fused_seen = Vec::new();
        for target in &modules {
            match mapping.iter().find(|(old, _)| matches(target, old)) {
                Some((old, new)) => {
                    if !params.iter().any(|(p, _)| p == new) {
                        params.push((new.to_string(), spec.rank));
                    }
                    if fused.contains(old) && !fused_seen.contains(old) {
                        fused_seen.push(*old);
                    }
                }
                None => remaining.push(target.clone()),
            }
        }
        if fused_seen.len() == 1 {
            let missing = fused
                .iter()
                .find(|f| !fused_seen.contains(f))
                .unwrap_or(&fused[1]);
            return Err(Error::Setup(format!(
                "--lora-targets: PEFT cannot convert target {} without also targeting {missing} because they are fused into gate_up_proj",
                fused_seen[0]
            )));
        }
        if fused_seen.len() == 2 {
            for p in params.iter_mut().filter(|(p, _)| p == "gate_up_proj") {
                p.1 = 2 * spec.rank;
            }
        }
        if !params.is_empty() {
            notes.push(format!(
                "PEFT 0.21.2 rewrites the targets of {} (transformers 5 fused its experts): {} become target_parameters{}; \
                 the experts' adapters build W+ΔW for the whole bank on every forward",
                t.model_type,
                params.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(", "),
                if fused_seen.len() == 2 {
                    " (gate_up_proj at rank 2r)"
                } else {
                    ""
                }
            ));
            if spec.targets == Targets::AllLinear || remaining.len() < modules.len() {
                let has_dense = t.blocks.kinds.iter().any(|k| {
                    k.ffn.dense().is_some() || k.ffn.moe().is_some_and(|m| m.shared.is_some())
                });
                if has_dense {
                    notes.push(
                        "dense MLPs and shared experts are not adapted: their names moved to target_parameters, which match only the expert banks (PEFT's MoE rewrite)".into(),
                    );
                }
            }
        }
        modules = remaining;
    }
    let mut adapted = Vec::new();
    let mut found = vec![false; modules.len()];
    for (ss, n) in &all {
        for s in ss {
            let rank = match s.kind {
                SiteKind::Module => {
                    let mut hit = false;
                    for (i, m) in modules.iter().enumerate() {
                        if matches(&s.path, m) {
                            found[i] = true;
                            hit = true;
                        }
                    }
                    hit.then_some(spec.rank)
                }
                SiteKind::Param | SiteKind::Experts(_) => {
                    let mut r = None;
                    for (p, pr) in &params {
                        if matches(&s.path, p) {
                            r = Some(*pr);
                        }
                    }
                    r
                }
            };
            if let Some(rank) = rank {
                adapted.push(Adapted {
                    site: s.clone(),
                    rank,
                    count: *n,
                });
            }
        }
    }
    if let Targets::List(_) = spec.targets {
        // A module that holds its nn.Linear as a child named `linear` (Gemma 4's vision and
        // audio `Gemma4ClippableLinear`, Llama 4's `Llama4UnfoldConvolution`) is not a layer type
        // PEFT can adapt: a target naming the wrapper fails in `_create_new_module`.
        for (ss, _) in &all {
            for s in ss {
                let Some(wrapper) = s.path.strip_suffix(".linear") else {
                    continue;
                };
                if let Some(m) = modules.iter().find(|m| matches(wrapper, m)) {
                    return Err(Error::Setup(format!(
                        "--lora-targets {}: PEFT 0.21.2 refuses `{m}` on {}: it also names the {} tower's `{wrapper}`, a module wrapping an nn.Linear (\"Target module ... is not supported\"); all-linear adapts the nn.Linear inside it",
                        spec.targets.display(),
                        t.model_type,
                        if s.component == Component::Audio { "audio" } else { "vision" },
                    )));
                }
            }
        }
        let missing: Vec<&str> = modules
            .iter()
            .zip(&found)
            .filter(|(_, f)| !**f)
            .map(|(m, _)| m.as_str())
            .collect();
        if adapted.is_empty() || (!missing.is_empty() && missing.len() == modules.len()) {
            let mut names: Vec<String> = Vec::new();
            for (ss, _) in &all {
                for s in ss {
                    let l = s.leaf().to_string();
                    if s.kind == SiteKind::Module && !names.contains(&l) {
                        names.push(l);
                    }
                }
            }
            return Err(Error::Setup(format!(
                "--lora-targets {}: no module of {} matches (its linears: {})",
                spec.targets.display(),
                t.name,
                names.join(", ")
            )));
        }
    }
    if adapted.is_empty() {
        return Err(Error::Setup(format!(
            "--lora-targets {}: no module of {} matches",
            spec.targets.display(),
            t.name
        )));
    }
    if let Some(refused) = peft_refused(t) {
        if let Some(a) = adapted.iter().find(|a| refused.contains(&a.site.leaf())) {
            let leaf = a.site.leaf();
            let accepted = peft_accepted_targets(t).unwrap_or_default();
            return Err(Error::Setup(format!(
                "--lora-targets {}: PEFT 0.21.2 refuses `{leaf}` on {} (tuners_utils.py::_check_lora_target_modules_mamba: \"Module '{leaf}' is incompatible with Mamba-based models\", incompatible: {}); the linears it accepts: --lora-targets {}",
                spec.targets.display(),
                t.model_type,
                refused.join(", "),
                accepted.join(",")
            )));
        }
    }
    if spec.dropout > 0.0 && adapted.iter().any(|a| a.site.kind != SiteKind::Module) {
        return Err(Error::Setup(format!(
            "--lora-dropout {}: PEFT's ParamWrapper (LoRA on {}'s fused experts/router via target_parameters) does not work with lora_dropout != 0",
            spec.dropout, t.model_type
        )));
    }
    let trainable_params = adapted.iter().map(Adapted::params).sum();
    Ok(LoraPlan {
        adapted,
        trainable_params,
        target_parameters: params.into_iter().map(|(p, _)| p).collect(),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM 0.10.0's `CompressedTensorsWNA16.create_weights` for a 2048 → 5120 linear (Qwen3's
    /// fused QKV), group 128, bf16: `weight_packed` int32 `[5120, 256]`, `weight_scale`
    /// `[5120, 16]`, `weight_shape` int64 `[2]`; `weight_zero_point` int32 `[640, 16]` only
    /// when asymmetric; channel-wise, one scale per row.
    #[test]
    fn compressed_tensors_w4a16_holds_zero_points_only_when_asymmetric() {
        let names = |t: &[LinearTensor]| -> Vec<(&str, Vec<u64>, &str)> {
            t.iter()
                .map(|x| (x.name, x.shape.clone(), x.dtype))
                .collect()
        };
        let sym = linear_tensors(
            WeightFormat::Wna16 {
                group: 128,
                symmetric: true,
            },
            false,
            5120,
            2048,
        );
        assert_eq!(
            names(&sym),
            vec![
                ("weight_packed", vec![5120, 256], "int32"),
                ("weight_scale", vec![5120, 16], "bfloat16"),
                ("weight_shape", vec![2], "int64"),
            ]
        );
        assert_eq!(
            sym.iter().map(|t| t.bytes).sum::<u64>(),
            5120 * 256 * 4 + 5120 * 16 * 2 + 16
        );
        let asym = linear_tensors(
            WeightFormat::Wna16 {
                group: 128,
                symmetric: false,
            },
            false,
            5120,
            2048,
        );
        assert_eq!(
            names(&asym[3..]),
            vec![("weight_zero_point", vec![640, 16], "int32")]
        );
        let channel = linear_tensors(
            WeightFormat::Wna16 {
                group: 0,
                symmetric: true,
            },
            false,
            5120,
            2048,
        );
        assert_eq!(channel[1].shape, vec![5120, 1]);
        // Channel-wise AWQ (`group_size: -1`): AutoAWQ's `WQLinear_GEMM` takes the whole input
        // row as the group, one row of zeros and scales.
        let awq = linear_tensors(WeightFormat::Awq { group: 0 }, false, 5120, 2048);
        assert_eq!(
            names(&awq),
            vec![
                ("qweight", vec![2048, 640], "int32"),
                ("qzeros", vec![1, 640], "int32"),
                ("scales", vec![1, 5120], "float16"),
            ]
        );
    }

    #[test]
    fn gptq_and_awq_hold_their_packed_tensors() {
        // A 4096 → 11008 linear, group 128: 32 groups.
        let (out, inp) = (11008, 4096);
        // GPTQ QuantLinear: qweight int32 [in/8, out], qzeros int32 [32, out/8],
        // scales fp16 [32, out], g_idx int32 [in].
        let gptq = (inp / 8 * out) * 4 + (32 * out / 8) * 4 + 32 * out * 2 + inp * 4;
        assert_eq!(
            linear_bytes(
                WeightFormat::Gptq {
                    group: 128,
                    desc_act: false
                },
                false,
                out,
                inp
            ),
            gptq
        );
        // AWQ WQLinear_GEMM: qweight int32 [in, out/8], qzeros int32 [32, out/8],
        // scales fp16 [32, out].
        let awq = (inp * out / 8) * 4 + (32 * out / 8) * 4 + 32 * out * 2;
        assert_eq!(
            linear_bytes(WeightFormat::Awq { group: 128 }, false, out, inp),
            awq
        );
        // Both are a little over half a byte per weight.
        assert!(gptq as f64 / (out * inp) as f64 > 0.5 && (gptq as f64 / (out * inp) as f64) < 0.6);
    }

    #[test]
    fn weights_flag_parses_and_refuses() {
        assert_eq!(
            WeightFormat::parse("gptq").unwrap(),
            WeightFormat::Gptq {
                group: 128,
                desc_act: false
            }
        );
        assert_eq!(
            WeightFormat::parse("awq-g64").unwrap(),
            WeightFormat::Awq { group: 64 }
        );
        for bad in ["int4", "gptq-g0", "awq-64", "gptq-g12"] {
            assert!(WeightFormat::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(WeightFormat::parse("nf4").unwrap().name(), "nf4");
    }

    #[test]
    fn nf4_double_quant_saves_about_three_bits_per_block() {
        let n = 4096 * 4096;
        let plain = linear_bytes(WeightFormat::Nf4, false, 4096, 4096);
        let dq = linear_bytes(WeightFormat::Nf4, true, 4096, 4096);
        assert_eq!(plain, n / 2 + 4 * n / 64 + 64);
        // fp32 absmax (32 bits per 64 values) becomes uint8 plus fp32 per 256 blocks.
        assert!(dq < plain);
        assert_eq!(plain - dq, 3 * n / 64 - 4 * (n / 64 / 256) - 4 - 1024);
    }
}
