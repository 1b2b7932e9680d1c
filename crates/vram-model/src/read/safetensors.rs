//! Parameter counts from safetensors headers, without reading any weights.
//!
//! A safetensors file starts with an 8-byte little-endian header length and a JSON header
//! mapping tensor names to dtype, shape and data offsets. The CLI reads only those bytes and
//! hands them here; sharded checkpoints list their shards in `model.safetensors.index.json`.
//! [`Tally::groups`] places every tensor in the description's components by its name and
//! reads the stored format from the dtypes and names ([`Tally::quant`]), for
//! [`crate::describe::Blocks::apply_headers`].

use std::collections::{BTreeMap, BTreeSet};

use crate::describe::{Dtype, Quant, Weights};
use crate::error::{Error, Result};
use crate::finetune::WeightFormat;
use crate::mech::Component;

/// Largest header accepted (the format's own limit is 100 MB).
pub const MAX_HEADER: u64 = 100_000_000;

/// Reads the header length from a file's first 8 bytes.
pub fn header_len(first8: &[u8]) -> Result<u64> {
    let Ok(arr) = <[u8; 8]>::try_from(first8) else {
        return Err(Error::Safetensors(format!(
            "file is {} bytes, shorter than the 8-byte header length",
            first8.len()
        )));
    };
    let n = u64::from_le_bytes(arr);
    if n == 0 || n > MAX_HEADER {
        return Err(Error::Safetensors(format!(
            "header length {n} is not between 1 and {MAX_HEADER}; not a safetensors file?"
        )));
    }
    Ok(n)
}

/// One tensor of a checkpoint as its header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The safetensors dtype name (`BF16`, `F8_E4M3`, `I32`, ...).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// Bytes of its data.
    pub bytes: u64,
}

/// Element count and bytes per dtype, summed over tensors, and every tensor's dtype and shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Elements per dtype name.
    pub elements: BTreeMap<String, u64>,
    /// Bytes per dtype name.
    pub bytes: BTreeMap<String, u64>,
    /// Each tensor by name: its exact dtype and shape.
    pub tensors: BTreeMap<String, TensorInfo>,
}

impl Tally {
    /// Adds the tensors of one file's header.
    ///
    /// `bytes` is the 8-byte length followed by the JSON header; `file_len` is the whole file's
    /// size, checked against the data the header describes (a truncated file is an error).
    pub fn add_header(&mut self, bytes: &[u8], file_len: u64) -> Result<()> {
        let n = header_len(bytes.get(..8).unwrap_or(bytes))?;
        let json = bytes
            .get(8..8 + n as usize)
            .ok_or_else(|| Error::Safetensors("header is shorter than its stated length".into()))?;
        let text = std::str::from_utf8(json)
            .map_err(|_| Error::Safetensors("header is not UTF-8".into()))?;
        // Each entry is read on its own, not through the crate's `Metadata`: its checks (offsets,
        // sub-byte tensors ending mid-byte) come back as serde errors, which would read as "not
        // valid JSON"; they are made below, each with its own message.
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| Error::Json {
                what: "safetensors header".into(),
                reason: e.to_string(),
            })?;
        let mut tensors = Vec::with_capacity(map.len());
        for (name, value) in map {
            if name == "__metadata__" {
                continue;
            }
            let info: safetensors::tensor::TensorInfo =
                serde_json::from_value(value).map_err(|e| {
                    let reason = e.to_string();
                    // A dtype the safetensors crate (0.8.0) does not name, one the format may
                    // add later.
                    if reason.starts_with("unknown variant") {
                        Error::Safetensors(format!(
                            "tensor `{name}`: its dtype is not one vram reads ({reason})"
                        ))
                    } else {
                        Error::Safetensors(format!("tensor `{name}`: {reason}"))
                    }
                })?;
            tensors.push((name, info));
        }
        tensors.sort_by_key(|(_, info)| info.data_offsets);
        let mut end = 0usize;
        for (name, info) in tensors {
            let numel = info
                .shape
                .iter()
                .try_fold(1u64, |a, d| a.checked_mul(*d as u64))
                .ok_or_else(|| Error::Safetensors(format!("tensor `{name}`: shape overflows")))?;
            let (start, stop) = info.data_offsets;
            // Bytes from bits: the format packs sub-byte dtypes (F4 two to a byte, F6_E2M3 and
            // F6_E3M2 four to three bytes) and requires a tensor to end on a byte boundary
            // (huggingface/safetensors 0.8.0, `Dtype::bitsize` and `SafeTensorError::
            // MisalignedSlice` in safetensors/src/tensor.rs).
            let bits = numel.checked_mul(info.dtype.bitsize() as u64);
            if bits.is_some_and(|b| b % 8 != 0) {
                return Err(Error::Safetensors(format!(
                    "tensor `{name}`: {numel} elements of {} ({} bits each) do not fill whole bytes",
                    info.dtype,
                    info.dtype.bitsize()
                )));
            }
            let want = bits.map(|b| b / 8);
            if start != end || stop < start || want != Some((stop - start) as u64) {
                return Err(Error::Safetensors(format!("tensor `{name}`: data offsets {start}..{stop} do not match its shape and dtype")));
            }
            end = stop;
            if self.tensors.contains_key(&name) {
                // An index maps each name to one shard; a second copy would be counted once
                // by name and twice by dtype.
                return Err(Error::Safetensors(format!(
                    "tensor `{name}` is stored in two shards"
                )));
            }
            let dtype = format!("{:?}", info.dtype);
            *self.elements.entry(dtype.clone()).or_default() += numel;
            *self.bytes.entry(dtype.clone()).or_default() += (stop - start) as u64;
            self.tensors.insert(
                name.to_string(),
                TensorInfo {
                    dtype,
                    shape: info.shape.iter().map(|d| *d as u64).collect(),
                    bytes: (stop - start) as u64,
                },
            );
        }
        if 8 + n + end as u64 != file_len {
            return Err(Error::Safetensors(format!(
                "header describes {} bytes of data but the file holds {} (truncated or padded?)",
                end,
                file_len.saturating_sub(8 + n)
            )));
        }
        Ok(())
    }

    /// The model as far as weights tell it.
    pub fn into_weights(self, name: &str) -> Weights {
        self.weights(name)
    }

    /// The model as far as weights tell it, keeping the tally.
    pub fn weights(&self, name: &str) -> Weights {
        Weights {
            name: name.to_string(),
            params: self.params(),
            bytes: self.bytes.values().sum(),
            dtypes: self.elements.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }

    /// Where the checkpoint contradicts a config of `vocab` tokens and width `hidden`: its
    /// token embedding (`*embed_tokens.weight`, `*wte.weight`, `*word_embeddings.weight`, a
    /// 2-D tensor in a float dtype, outside a vision tower) has another shape. Both sides are
    /// named. A checkpoint from another model, or a config edited away from its weights, shows
    /// here; packed (quantized) embeddings are not compared.
    pub fn contradiction(&self, vocab: u64, hidden: u64) -> Option<String> {
        let (name, t) = self.tensors.iter().find(|(name, t)| {
            [
                "embed_tokens.weight",
                "wte.weight",
                "word_embeddings.weight",
            ]
            .iter()
            .any(|s| {
                name.ends_with(s)
                    && (name.len() == s.len() || name[..name.len() - s.len()].ends_with('.'))
            }) && !name.contains("vision")
                && !name.contains("visual")
                && t.shape.len() == 2
                && matches!(t.dtype.as_str(), "BF16" | "F16" | "F32")
        })?;
        (t.shape != [vocab, hidden]).then(|| {
            format!(
                "its {name} is {:?} but config.json says vocab_size {vocab} × hidden_size {hidden}",
                t.shape
            )
        })
    }
}

/// The shard file names of a `model.safetensors.index.json`, in sorted order, each once.
pub fn index_shards(text: &str) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::Json {
        what: "safetensors index".into(),
        reason: e.to_string(),
    })?;
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(Error::Safetensors(
            "index has no `weight_map` object".into(),
        ));
    };
    let mut files: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let Some(f) = file.as_str() else {
            return Err(Error::Safetensors(format!(
                "weight_map entry `{tensor}` is not a file name"
            )));
        };
        if f.contains('/') || f.contains('\\') || f.starts_with('.') {
            return Err(Error::Safetensors(format!(
                "weight_map names `{f}`, which is not a file beside the index"
            )));
        }
        files.push(f.to_string());
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Error::Safetensors("index's weight_map is empty".into()));
    }
    Ok(files)
}

/// A checkpoint's tensors grouped as the description groups parameters ([`Tally::groups`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// Stored bytes per component (`Component as usize`).
    pub bytes: [u64; Component::COUNT],
    /// Parameters per component, unpacked: a packed tensor counts the values it holds (two
    /// per U8 MXFP4/NF4 byte, eight per I32 GPTQ/AWQ word); scales, zeros, `g_idx` and
    /// bitsandbytes' quantization state count none.
    pub params: [u64; Component::COUNT],
    /// Whether the component holds a tensor in a dtype other than a float.
    pub packed: [bool; Component::COUNT],
    /// Elements per component stored as F32 (buffers aside).
    pub f32_params: [u64; Component::COUNT],
    /// Elements per component stored in a float dtype, buffers and block-FP8 scales aside:
    /// what a packed checkpoint's loader casts to the model's dtype.
    pub float_numel: [u64; Component::COUNT],
    /// Their stored bytes.
    pub float_bytes: [u64; Component::COUNT],
    /// Bytes of tensors the model does not load (DeepSeek-style MTP layers past
    /// `num_hidden_layers` where the loading code builds none, stored rotary `inv_freq`).
    pub dropped: u64,
    /// Bytes per component the library adds by holding block-FP8 `weight_scale_inv` stored
    /// in a 16-bit float (Qwen3's FP8 checkpoints store them BF16; DeepSeek's F32) in fp32:
    /// transformers 5.24's `FP8Linear` makes them fp32 parameters and its loader casts a
    /// float checkpoint tensor to the empty parameter's dtype (`core_model_loading.py`,
    /// `quantizers/base.py::get_new_dtype`), and vLLM's `Fp8LinearMethod` copies them into
    /// fp32 `BlockQuantScaleParameter`s (read at 0.9.1).
    pub scale_upcast: [u64; Component::COUNT],
    /// Elements and stored bytes of the block-FP8 `weight_scale_inv` tensors per component.
    pub scale_numel: [u64; Component::COUNT],
    /// Their stored bytes.
    pub scale_bytes: [u64; Component::COUNT],
    /// The stored format the headers show.
    pub quant: Quant,
    /// The float dtype holding the most bytes, if any.
    pub dtype: Option<Dtype>,
}

const VISION_PARTS: [&str; 6] = [
    "visual",
    "vision_tower",
    "vision_model",
    "multi_modal_projector",
    "embed_vision",
    "vision_embed_tokens",
];
const EMBED_PARTS: [&str; 10] = [
    "embed_tokens",
    "embed_positions",
    "word_embeddings",
    "word_embeddings_layernorm",
    "embed_tokens_per_layer",
    "embeddings",
    "wte",
    "wpe",
    "per_layer_model_projection",
    "per_layer_projection_norm",
];
const PER_LAYER_INPUT: [&str; 3] = [
    "per_layer_input_gate",
    "per_layer_projection",
    "post_per_layer_input_norm",
];
const MIXER_CHILDREN: [&str; 6] = [
    "self_attn",
    "linear_attn",
    "mamba",
    "attention",
    "self_attention",
    "attn",
];
const FFN_CHILDREN: [&str; 5] = ["mlp", "feed_forward", "block_sparse_moe", "moe", "mixer"];

/// Index of `layers`/`h` in `...layers.<i>.<child>...`.
fn layer_split(parts: &[&str]) -> Option<usize> {
    (0..parts.len().saturating_sub(2)).find(|&i| {
        matches!(parts[i], "layers" | "h") && parts[i + 1].bytes().all(|b| b.is_ascii_digit())
    })
}

/// The component of a checkpoint tensor, by its name: the rules `tests/zoo/reference.py`
/// applies to the module tree transformers builds, on names alone (a layer's child is an MoE
/// block when some tensor sits under its `experts`); a layer past the decoder's `layers` is
/// an MTP layer (DeepSeek-V3's `model.layers.61`). An audio tower's tensors (Gemma 4's
/// `audio_tower`, `embed_audio`; no zoo config has one) are the audio component's.
fn component_of(name: &str, layers: u64, moe: &BTreeSet<String>) -> Component {
    let parts: Vec<&str> = name.split('.').collect();
    let has = |set: &[&str]| parts.iter().any(|p| set.contains(p));
    if has(&VISION_PARTS) {
        return Component::Vision;
    }
    if has(&["audio_tower", "embed_audio"]) {
        return Component::Audio;
    }
    if parts.iter().any(|p| p.starts_with("mtp")) {
        return Component::Mtp;
    }
    let layer = layer_split(&parts);
    // A layer past the decoder's is an MTP layer whatever it holds: DeepSeek-V3's
    // `model.layers.61` keeps its own copies of `embed_tokens` and `shared_head.head`.
    if let Some(i) = layer {
        if parts[i + 1].parse::<u64>().is_ok_and(|l| l >= layers) {
            return Component::Mtp;
        }
    }
    if parts.contains(&"lm_head") {
        return Component::Head;
    }
    if has(&EMBED_PARTS) {
        return Component::Embedding;
    }
    if let Some(i) = layer {
        let child = parts[i + 2];
        let rest = parts.get(i + 3).copied().unwrap_or("");
        let block = parts[..i + 3].join(".");
        let layer = parts[..i + 2].join(".");
        let moe_block = moe.contains(&block);
        if PER_LAYER_INPUT.contains(&child) {
            return Component::Embedding;
        }
        if MIXER_CHILDREN.contains(&child) {
            return Component::Mixer;
        }
        if child == "mixer" && !moe_block && !matches!(rest, "up_proj" | "down_proj") {
            return Component::Mixer;
        }
        if FFN_CHILDREN.contains(&child) && moe_block {
            return match rest {
                "experts" | "fc1_latent_proj" | "fc2_latent_proj" => Component::RoutedExperts,
                "gate" | "router" => Component::Router,
                r if r.starts_with("shared") => Component::SharedExperts,
                _ => Component::Other,
            };
        }
        if child == "experts" {
            return Component::RoutedExperts;
        }
        if child == "router" {
            return Component::Router;
        }
        if child.starts_with("shared") {
            let routed = moe.iter().any(|b| b.starts_with(&format!("{layer}.")));
            return if routed {
                Component::SharedExperts
            } else {
                Component::DenseMlp
            };
        }
        if FFN_CHILDREN.contains(&child) {
            return Component::DenseMlp;
        }
        if child.contains("norm") || child.starts_with("ln_") {
            return Component::Norms;
        }
        return Component::Other;
    }
    if parts.len() >= 2
        && (parts[parts.len() - 2].contains("norm") || parts[parts.len() - 2] == "ln_f")
    {
        return Component::Norms;
    }
    Component::Other
}

/// Whether the library holds this checkpoint tensor as a buffer, not a parameter. Every router
/// of transformers 5.24 with an `e_score_correction_bias` registers it as an fp32 buffer
/// (`nn.Buffer`: DeepSeek-V3/V3.2, GLM-4 MoE, MiniMax-M2, Nemotron-H, ...), except ERNIE 4.5's
/// `Ernie4_5_MoeStatics` (`gate.moe_statics`), whose is an `nn.Parameter`. A buffer's bytes are
/// held all the same; it counts no parameter.
fn is_buffer(name: &str) -> bool {
    (name.ends_with(".e_score_correction_bias") && !name.contains(".moe_statics."))
        // The same bias in DeepSeek's own naming (DeepSeek-V4's checkpoints: `layers.N.ffn.gate.
        // bias`), which transformers 5.24's conversion for `deepseek_v4` renames to the router's
        // `e_score_correction_bias` buffer (conversion_mapping.py, `DeepseekV4TopKRouter`).
        || name.ends_with(".ffn.gate.bias")
}

fn is_float(dtype: &str) -> bool {
    matches!(dtype, "BF16" | "F16" | "F32" | "F64")
}

impl Tally {
    /// The parameters the checkpoint's tensors stand for, as the library counts them
    /// (`sum(p.numel() for p in model.parameters())`): packed weights unpacked, and no
    /// quantization state nor buffer counted ([`Tally::unpacked`]). The elements per dtype
    /// ([`Tally::elements`]) are the stored ones. Every tensor is counted, an MTP block's too
    /// (which transformers 5.24 leaves unloaded for most model types): the headers alone do not
    /// say which model class reads them.
    pub fn params(&self) -> u64 {
        self.tensors
            .iter()
            .map(|(name, t)| self.unpacked(name, t))
            .sum()
    }

    /// Whether a tensor of this name is in the checkpoint.
    fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Values a tensor holds for the unquantized model (see [`Groups::params`]).
    fn unpacked(&self, name: &str, t: &TensorInfo) -> u64 {
        let numel: u64 = t.shape.iter().product();
        let sibling = |suffix: &str, with: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|base| self.has(&format!("{base}{with}")))
        };
        let integer = matches!(
            t.dtype.as_str(),
            "I8" | "U8" | "I16" | "U16" | "I32" | "U32" | "I64" | "U64" | "BOOL"
        );
        // DeepSeek's own layout (DeepSeek-V4's checkpoints): a linear's `X.weight` stored in
        // FP8 (`F8_E4M3`) or FP4 (`I8`, below) beside an `F8_E8M0` `X.scale` of exponents. The
        // scale is quantization state: transformers 5.24 folds it into the weight it loads
        // (conversion_mapping.py "deepseek_v4"), so it is no parameter. Mixing tensors named
        // `..._scale` (`hc_attn_scale`) have no `.weight` sibling and stay parameters.
        let packed_weight_of_scale = name.strip_suffix(".scale").is_some_and(|base| {
            self.tensors
                .get(&format!("{base}.weight"))
                .is_some_and(|w| !is_float(&w.dtype))
        });
        // ... and FP4 (e2m1) weights packed two to an `I8` byte, `[out, in/2]`, whose scale
        // holds one exponent per 32 inputs, `[out, in/32]` (the routed experts of
        // DeepSeek-V4-Flash: `experts.0.w1.weight` I8 [2048, 2048], `w1.scale` [2048, 128]):
        // each byte is two parameters.
        let fp4_pair = t.dtype == "I8"
            && name.strip_suffix(".weight").is_some_and(|base| {
                self.tensors.get(&format!("{base}.scale")).is_some_and(|s| {
                    s.dtype == "F8_E8M0"
                        && t.shape.len() == 2
                        && s.shape.len() == 2
                        && s.shape[0] == t.shape[0]
                        && s.shape[1] * 32 == t.shape[1] * 2
                })
            });
        if fp4_pair {
            return numel * 2;
        }
        let state = [
            ".absmax",
            ".quant_map",
            ".nested_absmax",
            ".nested_quant_map",
            ".SCB",
            ".weight_format",
            ".weight_scale_inv",
            ".weight_scale",
            ".input_scale",
            ".qzeros",
            ".g_idx",
            ".weight_shape",
            ".weight_zero_point",
        ];
        // An integer tensor that is not a packed or 8-bit weight is a buffer or an index table
        // (DeepSeek-V4's hash-routing `gate.tid2eid`, old checkpoints' `position_ids`): PyTorch
        // makes no integer `nn.Parameter` that trains (`requires_grad` needs a float dtype), and
        // the weights that are integers are matched by name below.
        let integer_state = integer
            && !(name.ends_with(".weight")
                || name.ends_with(".qweight")
                || name.ends_with(".weight_packed")
                || name.ends_with("_blocks"));
        if is_buffer(name)
            || packed_weight_of_scale
            || integer_state
            || state.iter().any(|s| name.ends_with(s))
            || name.contains(".quant_state.")
            || (t.dtype == "U8" && name.ends_with("_scales"))
            || sibling(".scales", ".qweight")
            || sibling(".weight_scale", ".weight_packed")
        {
            return 0;
        }
        match t.dtype.as_str() {
            "I32" if name.ends_with(".qweight") || name.ends_with(".weight_packed") => numel * 8,
            "U8" if name.ends_with("_blocks") || sibling(".weight", ".weight.absmax") => numel * 2,
            _ => numel,
        }
    }

    /// The stored format the headers show: MXFP4 (`*_blocks`/`*_scales` in U8), FP8
    /// (`F8_E4M3` weights with a `weight_scale_inv`, block size from one weight and its
    /// scale), compressed-tensors int4 (`weight_packed`, group size from its `weight_scale`),
    /// GPTQ (`qweight` with `g_idx`) or AWQ (`qweight` without), bitsandbytes 4-bit
    /// (`absmax`, `quant_state.bitsandbytes__nf4|fp4`) or LLM.int8 (`SCB`); else unpacked.
    pub fn quant(&self) -> Quant {
        let names = || self.tensors.keys();
        if self
            .tensors
            .iter()
            .any(|(n, t)| t.dtype == "U8" && n.ends_with("_blocks"))
        {
            return Quant::Mxfp4;
        }
        if self.tensors.values().any(|t| t.dtype.starts_with("F8_")) {
            // Each weight's scale has ceil(N/bn) x ceil(K/bk) blocks, so ceil(N/rows) is at
            // most bn, and equals it for any weight at least a block tall; likewise bk.
            let (mut bn, mut bk) = (0, 0);
            for (n, s) in &self.tensors {
                let Some(base) = n.strip_suffix(".weight_scale_inv") else {
                    continue;
                };
                let Some(w) = self.tensors.get(&format!("{base}.weight")) else {
                    continue;
                };
                if let ([r, c], [sr, sc]) = (w.shape.as_slice(), s.shape.as_slice()) {
                    if *sr > 0 && *sc > 0 {
                        bn = bn.max(r.div_ceil(*sr));
                        bk = bk.max(c.div_ceil(*sc));
                    }
                }
            }
            if bn == 0 || bk == 0 {
                (bn, bk) = (128, 128);
            }
            let skip_head = self
                .tensors
                .get("lm_head.weight")
                .is_none_or(|t| !t.dtype.starts_with("F8_"));
            // Scales stored as E8M0 bytes say `scale_fmt: ue8m0`; F32/BF16 ones leave it to
            // the config.
            let e8m0 = self
                .tensors
                .iter()
                .any(|(n, t)| n.ends_with(".weight_scale_inv") && t.dtype == "F8_E8M0");
            return Quant::Fp8Block {
                bn,
                bk,
                skip_head,
                e8m0,
            };
        }
        // compressed-tensors `pack-quantized` int4: `weight_packed` I32 `[out, in/8]`,
        // `weight_scale` `[out, groups]`, zero points only when asymmetric.
        if let Some(q) = names().find(|n| n.ends_with(".weight_packed")) {
            let base = &q[..q.len() - ".weight_packed".len()];
            let cols = |n: &str| self.tensors.get(n).and_then(|t| t.shape.get(1).copied());
            let group = match (cols(q), cols(&format!("{base}.weight_scale"))) {
                (Some(k8), Some(g)) if g > 1 && (k8 * 8) % g == 0 => k8 * 8 / g,
                _ => 0,
            };
            return Quant::Packed {
                format: WeightFormat::Wna16 {
                    group,
                    symmetric: !names().any(|n| n.ends_with(".weight_zero_point")),
                },
                double_quant: false,
            };
        }
        if let Some(q) = names().find(|n| n.ends_with(".qweight")) {
            let base = &q[..q.len() - ".qweight".len()];
            let gptq = self.has(&format!("{base}.g_idx"));
            let rows = |n: &str| self.tensors.get(n).and_then(|t| t.shape.first().copied());
            let k = rows(q).map(|r| if gptq { r * 8 } else { r });
            let groups = rows(&format!("{base}.scales"));
            let group = match (k, groups) {
                (Some(k), Some(g)) if g > 1 && k % g == 0 => k / g,
                _ => 0,
            };
            let format = if gptq {
                WeightFormat::Gptq {
                    group,
                    desc_act: false,
                }
            } else {
                WeightFormat::Awq { group }
            };
            return Quant::Packed {
                format,
                double_quant: false,
            };
        }
        if names().any(|n| n.ends_with(".absmax")) {
            let fp4 = names().any(|n| n.ends_with("quant_state.bitsandbytes__fp4"));
            return Quant::Packed {
                format: if fp4 {
                    WeightFormat::Fp4
                } else {
                    WeightFormat::Nf4
                },
                double_quant: names().any(|n| n.ends_with(".nested_absmax")),
            };
        }
        if names().any(|n| n.ends_with(".SCB")) {
            return Quant::Packed {
                format: WeightFormat::Int8,
                double_quant: false,
            };
        }
        Quant::None
    }

    /// The checkpoint's tensors per component, for a decoder of `layers` layers whose loading
    /// code builds its MTP layers or not (`mtp_loaded`).
    pub fn groups(&self, layers: u64, mtp_loaded: bool) -> Groups {
        let mut moe = BTreeSet::new();
        for n in self.tensors.keys() {
            if let Some(i) = n.find(".experts.") {
                moe.insert(n[..i].to_string());
            }
        }
        let mut g = Groups {
            bytes: [0; Component::COUNT],
            params: [0; Component::COUNT],
            packed: [false; Component::COUNT],
            f32_params: [0; Component::COUNT],
            float_numel: [0; Component::COUNT],
            float_bytes: [0; Component::COUNT],
            dropped: 0,
            scale_upcast: [0; Component::COUNT],
            scale_numel: [0; Component::COUNT],
            scale_bytes: [0; Component::COUNT],
            quant: self.quant(),
            dtype: None,
        };
        let mut float = BTreeMap::<&str, u64>::new();
        for (name, t) in &self.tensors {
            let bytes = t.bytes;
            let c = component_of(name, layers, &moe);
            // Older checkpoints store each layer's rotary `inv_freq` (Kimi-K2's
            // `self_attn.rotary_emb.inv_freq`); transformers 5.24 computes its own at the
            // model level (`nn.Buffer(inv_freq, persistent=False)`), so the
            // stored copies are unexpected keys it does not load.
            let stale_rotary = name.ends_with("rotary_emb.inv_freq");
            if stale_rotary || (c == Component::Mtp && !mtp_loaded) {
                g.dropped += bytes;
                continue;
            }
            let i = c as usize;
            g.bytes[i] += bytes;
            g.params[i] += self.unpacked(name, t);
            if t.dtype == "F32" && !is_buffer(name) {
                g.f32_params[i] += t.shape.iter().product::<u64>();
            }
            let scale = name.ends_with(".weight_scale_inv");
            if scale {
                g.scale_numel[i] += t.shape.iter().product::<u64>();
                g.scale_bytes[i] += bytes;
            }
            if scale && matches!(t.dtype.as_str(), "BF16" | "F16") {
                g.scale_upcast[i] += 2 * t.shape.iter().product::<u64>();
            }
            if is_float(&t.dtype) && !scale && !is_buffer(name) {
                g.float_numel[i] += t.shape.iter().product::<u64>();
                g.float_bytes[i] += bytes;
            }
            if is_float(&t.dtype) {
                *float.entry(t.dtype.as_str()).or_default() += bytes;
            } else {
                g.packed[i] = true;
            }
        }
        g.dtype = float
            .into_iter()
            .max_by_key(|(_, b)| *b)
            .and_then(|(d, _)| match d {
                "BF16" => Some(Dtype::Bf16),
                "F16" => Some(Dtype::F16),
                "F32" => Some(Dtype::F32),
                _ => None,
            });
        g
    }
}

#[cfg(test)]
mod tests {
    use super::{component_of, Tally, TensorInfo};
    use crate::describe::Quant;
    use crate::finetune::WeightFormat;
    use crate::mech::Component;
    use std::collections::BTreeSet;

    fn tally(ts: &[(&str, &str, &[u64])]) -> Tally {
        let mut t = Tally::default();
        for (name, dtype, shape) in ts {
            let size = match *dtype {
                "F32" | "I32" => 4,
                "F16" | "BF16" => 2,
                _ => 1,
            };
            t.tensors.insert(
                name.to_string(),
                TensorInfo {
                    dtype: dtype.to_string(),
                    shape: shape.to_vec(),
                    bytes: shape.iter().product::<u64>() * size,
                },
            );
        }
        t
    }

    /// GPTQ (gptqmodel's QuantLinear: qweight [K/8, N], qzeros [K/g, N/8], scales [K/g, N],
    /// g_idx [K]) and AWQ (qweight [K, N/8]): the format, the group, and K x N parameters.
    #[test]
    fn gptq_awq_and_bitsandbytes_are_read_from_names_and_shapes() {
        let (k, n) = (256u64, 512u64);
        let p = "model.layers.0.mlp.up_proj";
        let gptq = tally(&[
            (&format!("{p}.qweight"), "I32", &[k / 8, n]),
            (&format!("{p}.qzeros"), "I32", &[k / 64, n / 8]),
            (&format!("{p}.scales"), "F16", &[k / 64, n]),
            (&format!("{p}.g_idx"), "I32", &[k]),
        ]);
        let q = gptq.quant();
        assert_eq!(
            q,
            Quant::Packed {
                format: WeightFormat::Gptq {
                    group: 64,
                    desc_act: false
                },
                double_quant: false
            }
        );
        let g = gptq.groups(1, false);
        assert_eq!(g.params[Component::DenseMlp as usize], k * n);
        assert!(g.packed[Component::DenseMlp as usize]);
        let stored: u64 = gptq.tensors.values().map(|t| t.bytes).sum();
        assert_eq!(g.bytes.iter().sum::<u64>(), stored);
        let awq = tally(&[
            (&format!("{p}.qweight"), "I32", &[k, n / 8]),
            (&format!("{p}.qzeros"), "I32", &[k / 128, n / 8]),
            (&format!("{p}.scales"), "F16", &[k / 128, n]),
        ]);
        assert_eq!(
            awq.quant(),
            Quant::Packed {
                format: WeightFormat::Awq { group: 128 },
                double_quant: false
            }
        );
        assert_eq!(awq.groups(1, false).params.iter().sum::<u64>(), k * n);
        // bitsandbytes NF4 with nested quantization: two values a byte, state counts none.
        let nf4 = tally(&[
            (&format!("{p}.weight"), "U8", &[k * n / 2, 1]),
            (&format!("{p}.weight.absmax"), "U8", &[k * n / 64]),
            (
                &format!("{p}.weight.nested_absmax"),
                "F32",
                &[k * n / 64 / 256],
            ),
            (&format!("{p}.weight.quant_map"), "F32", &[16]),
            (
                &format!("{p}.weight.quant_state.bitsandbytes__nf4"),
                "U8",
                &[100],
            ),
        ]);
        assert_eq!(
            nf4.quant(),
            Quant::Packed {
                format: WeightFormat::Nf4,
                double_quant: true
            }
        );
        assert_eq!(nf4.groups(1, false).params.iter().sum::<u64>(), k * n);
    }

    /// Names are placed as `tests/zoo/reference.py` places the module tree's parameters.
    #[test]
    fn names_are_placed_in_components() {
        let moe: BTreeSet<String> = ["model.layers.3.mlp".to_string()].into();
        for (name, c) in [
            ("model.layers.3.mlp.gate.weight", Component::Router),
            (
                "model.layers.3.mlp.gate.e_score_correction_bias",
                Component::Router,
            ),
            (
                "model.layers.3.mlp.experts.7.up_proj.weight",
                Component::RoutedExperts,
            ),
            (
                "model.layers.3.mlp.shared_experts.up_proj.weight",
                Component::SharedExperts,
            ),
            (
                "model.layers.0.mlp.up_proj.weight_scale_inv",
                Component::DenseMlp,
            ),
            (
                "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                Component::Mixer,
            ),
            ("model.layers.0.input_layernorm.weight", Component::Norms),
            ("model.layers.61.eh_proj.weight", Component::Mtp),
            ("model.layers.61.embed_tokens.weight", Component::Mtp),
            ("model.layers.61.shared_head.head.weight", Component::Mtp),
            ("model.norm.weight", Component::Norms),
            ("model.embed_tokens.weight", Component::Embedding),
            ("lm_head.weight", Component::Head),
            ("model.visual.blocks.0.attn.qkv.weight", Component::Vision),
            (
                "model.audio_tower.layers.3.self_attn.q_proj.linear.weight",
                Component::Audio,
            ),
            (
                "model.embed_audio.embedding_projection.weight",
                Component::Audio,
            ),
        ] {
            assert_eq!(component_of(name, 61, &moe), c, "{name}");
        }
    }
}
