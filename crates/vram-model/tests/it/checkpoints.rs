//! Stored weights against real checkpoints' own tensors (`tests/data/checkpoints`, sources in
//! its README): every tensor's name, shape and dtype as `safe_open` read it from the
//! checkpoint's safetensors files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vram_model::arch::{Model, Transformer};
use vram_model::safetensors_header::{Tally, TensorInfo};

/// One checkpoint's tensor list and what its report says of it.
struct Checkpoint {
    name: String,
    meta: BTreeMap<String, String>,
    /// Every tensor: name, shape, torch dtype.
    tensors: Vec<(String, Vec<u64>, String)>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoints")
}

/// torch dtype → (safetensors name, bytes an element).
fn dtype(torch: &str) -> (&'static str, u64) {
    match torch {
        "bfloat16" => ("BF16", 2),
        "float16" => ("F16", 2),
        "float32" => ("F32", 4),
        "float8_e4m3fn" => ("F8_E4M3", 1),
        "uint8" => ("U8", 1),
        "int32" => ("I32", 4),
        other => panic!("dtype {other} not in the data"),
    }
}

/// Every name a compressed row stands for: each `a-b` segment is the indices a..=b.
fn expand(pattern: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for (i, seg) in pattern.split('.').enumerate() {
        let range = seg
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
        let parts: Vec<String> = match range {
            Some((a, b)) => (a..=b).map(|k| k.to_string()).collect(),
            None => vec![seg.to_string()],
        };
        out = out
            .iter()
            .flat_map(|p| {
                parts.iter().map(move |s| {
                    if i == 0 {
                        s.clone()
                    } else {
                        format!("{p}.{s}")
                    }
                })
            })
            .collect();
    }
    out
}

fn load(name: &str) -> Checkpoint {
    let text = std::fs::read_to_string(dir().join(format!("{name}.tsv"))).unwrap();
    let mut meta = BTreeMap::new();
    let mut tensors = Vec::new();
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("# ") {
            let (k, v) = m.split_once('\t').unwrap();
            meta.insert(k.to_string(), v.to_string());
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let shape: Vec<u64> = f[1].split(',').map(|d| d.parse().unwrap()).collect();
        let names = expand(f[0]);
        // The report's own count of the row (its "×N layers, ×M experts").
        assert_eq!(
            names.len() as u64,
            f[3].parse::<u64>().unwrap(),
            "{name}: {}",
            f[0]
        );
        for n in names {
            tensors.push((n, shape.clone(), f[2].to_string()));
        }
    }
    Checkpoint {
        name: name.to_string(),
        meta,
        tensors,
    }
}

impl Checkpoint {
    fn numel(shape: &[u64]) -> u64 {
        shape.iter().product()
    }

    /// Every byte of every tensor (the index's `metadata.total_size`).
    fn total(&self) -> u64 {
        self.tensors
            .iter()
            .map(|(_, s, d)| Self::numel(s) * dtype(d).1)
            .sum()
    }

    /// The headers as vram's reader tallies them.
    fn tally(&self) -> Tally {
        let mut t = Tally::default();
        for (n, s, d) in &self.tensors {
            let (st, w) = dtype(d);
            let bytes = Self::numel(s) * w;
            *t.elements.entry(st.to_string()).or_default() += Self::numel(s);
            *t.bytes.entry(st.to_string()).or_default() += bytes;
            t.tensors.insert(
                n.clone(),
                TensorInfo {
                    dtype: st.to_string(),
                    shape: s.clone(),
                    bytes,
                },
            );
        }
        t
    }

    fn transformer(&self) -> Transformer {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(&self.meta["config"]);
        let text = std::fs::read_to_string(&path).unwrap();
        match vram_model::hf::parse_config(&text, &self.name).unwrap() {
            Model::Transformer(t) => t,
            _ => panic!("{}: not a transformer", self.name),
        }
    }
}

const ALL: [&str; 9] = [
    "qwen3-30b-a3b-instruct-2507",
    "deepseek-v3.2",
    "kimi-k2-instruct",
    "minimax-m2.7",
    "qwen3-235b-a22b-instruct-2507-fp8",
    "deepseek-v3",
    "gpt-oss-20b",
    "qwen3-30b-a3b-thinking-2507-fp8",
    "qwen3-32b-awq",
];

/// The transcription holds what its report says: the tensor count and the parameter total
/// (`safe_open`'s `numel` summed over every tensor).
#[test]
fn the_data_holds_the_reports_figures() {
    for name in ALL {
        let c = load(name);
        assert_eq!(c.tensors.len().to_string(), c.meta["tensors"], "{name}");
        let params: u64 = c.tensors.iter().map(|(_, s, _)| Checkpoint::numel(s)).sum();
        assert_eq!(params.to_string(), c.meta["params"], "{name}");
    }
}

/// The layer index of a decoder tensor (`model.layers.<i>.`), if any.
fn layer_of(name: &str) -> Option<u64> {
    let rest = name.split("layers.").nth(1)?;
    rest.split('.').next()?.parse().ok()
}

/// How one checkpoint's bytes divide as the library loads it, from the tensor list alone and
/// the libraries' rules (not vram's code):
/// - `model.layers.<i>` past `num_hidden_layers` (DeepSeek-V3's MTP layer 61) are not loaded:
///   `DeepseekV3ForCausalLM._keys_to_ignore_on_load_unexpected = [r"model\.layers\.61.*"]`
///   (transformers 5.24);
/// - a stored rotary `inv_freq` (Kimi-K2's per-layer copies) is not loaded: transformers
///   5.24 computes the model's own (`persistent=False`);
/// - `e_score_correction_bias` is an fp32 buffer of the router (`nn.Buffer` in
///   `DeepseekV3TopkRouter`), held but no parameter;
/// - block-FP8 `weight_scale_inv` stored in 16 bits is held in fp32 (`FP8Linear` creates it
///   fp32 and the loader casts a float tensor to the empty parameter's dtype:
///   `core_model_loading.py`, `quantizers/base.py::get_new_dtype`), and a byte each where
///   the config's `scale_fmt` is `ue8m0` (`FP8Linear`/`FP8Experts` then create it
///   `float8_e8m0fnu`: `integrations/finegrained_fp8.py`; DeepSeek-V3.2);
/// - the tensors the data's `fp32` line names are held in fp32 (DeepSeek-V3's
///   `_keep_in_fp32_modules_strict` `gate.weight`; gpt-oss's `Mxfp4GptOssExperts` biases,
///   `integrations/mxfp4.py`);
/// - every other float tensor is held in the model's dtype (`dense` bytes), whatever it is
///   stored in: the loader casts it to the empty parameter's dtype (DeepSeek-V3.2 stores its
///   norms F32 and holds them bf16).
struct Load {
    /// Bytes held, buffers included.
    held: u64,
    /// Bytes of the layers not loaded.
    dropped: u64,
    /// Bytes of the buffers (held, not parameters).
    buffers: u64,
    /// Bytes the library adds to what is stored (the fp32 holds; less where it narrows a
    /// float).
    added: i64,
}

impl Checkpoint {
    fn load(&self, layers: u64, dense: u64) -> Load {
        let fp32: Vec<&str> = self.meta["fp32"]
            .split(',')
            .filter(|s| !s.is_empty())
            .collect();
        let config: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../..")
                    .join(&self.meta["config"]),
            )
            .unwrap(),
        )
        .unwrap();
        let scale = if config["quantization_config"]["scale_fmt"] == "ue8m0" {
            1
        } else {
            4
        };
        let mut l = Load {
            held: 0,
            dropped: 0,
            buffers: 0,
            added: 0,
        };
        for (n, s, d) in &self.tensors {
            let numel = Self::numel(s);
            let stored = numel * dtype(d).1;
            if layer_of(n).is_some_and(|i| i >= layers) || n.ends_with("rotary_emb.inv_freq") {
                l.dropped += stored;
                continue;
            }
            let float = matches!(d.as_str(), "bfloat16" | "float16" | "float32");
            let held = if n.ends_with(".weight_scale_inv") {
                numel * scale
            } else if n.ends_with(".e_score_correction_bias") || fp32.iter().any(|f| n.ends_with(f))
            {
                numel * 4
            } else if float {
                numel * dense
            } else {
                stored
            };
            if n.ends_with(".e_score_correction_bias") {
                l.buffers += held;
            }
            l.added += held as i64 - stored as i64;
            l.held += held;
        }
        l
    }
}

/// Given the checkpoint's headers (every tensor's name, shape and dtype), vram holds its
/// weights to the byte as the library loads them, and accounts for every byte of the index's
/// `total_size`: what it holds, less what loading adds, plus the layers it does not load.
#[test]
fn the_headers_are_held_to_the_byte() {
    for name in ALL {
        let c = load(name);
        let mut t = c.transformer();
        let layers = t.blocks.pattern.len() as u64;
        let l = c.load(layers, t.blocks.storage.dtype.bytes());
        let tally = c.tally();
        let notes = t.blocks.apply_headers(&tally);
        assert!(notes.is_empty(), "{name}: {notes:?}");
        assert_eq!(t.blocks.weights_bytes(false), l.held, "{name}");
        let g = tally.groups(layers, false);
        assert_eq!(g.dropped, l.dropped, "{name}");
        assert_eq!(
            (l.held as i64 - l.added) as u64 + l.dropped,
            c.total(),
            "{name}"
        );
    }
}

/// From config.json alone, vram holds what the headers hold, but for the routers' fp32
/// `e_score_correction_bias` buffers (DeepSeek-V3: 58 MoE layers x 256 x 4 B), which the
/// description, a list of parameters, leaves out.
#[test]
fn the_config_alone_holds_what_the_headers_do() {
    for name in ALL {
        let c = load(name);
        let t = c.transformer();
        let l = c.load(
            t.blocks.pattern.len() as u64,
            t.blocks.storage.dtype.bytes(),
        );
        assert_eq!(t.blocks.weights_bytes(false), l.held - l.buffers, "{name}");
    }
    let c = load("deepseek-v3");
    assert_eq!(c.load(61, 2).buffers, 58 * 256 * 4);
}

/// Each block-FP8 `weight_scale_inv` has the shape the one description of a packed linear
/// gives its weight (`fp8_block_linear_tensors`, 128 x 128 blocks), held in fp32. DeepSeek-V3
/// stores them F32 as held; Qwen3's FP8 checkpoints store them BF16.
#[test]
fn fp8_scales_have_the_described_shapes() {
    let mut seen = BTreeMap::<&str, (u64, String)>::new();
    for name in ["deepseek-v3", "qwen3-30b-a3b-thinking-2507-fp8"] {
        let c = load(name);
        let by_name: BTreeMap<&str, (&Vec<u64>, &str)> = c
            .tensors
            .iter()
            .map(|(n, s, d)| (n.as_str(), (s, d.as_str())))
            .collect();
        let mut scales = 0;
        for (n, (s, d)) in &by_name {
            let Some(base) = n.strip_suffix(".weight_scale_inv") else {
                continue;
            };
            let (w, wd) = by_name[format!("{base}.weight").as_str()];
            assert_eq!(wd, "float8_e4m3fn", "{n}");
            let desc = vram_model::finetune::fp8_block_linear_tensors(w[0], w[1], 128, 128);
            assert_eq!(
                (desc[0].shape.as_slice(), desc[0].dtype),
                (w.as_slice(), wd)
            );
            assert_eq!(desc[1].shape, **s, "{n}");
            assert_eq!(desc[1].dtype, "float32");
            scales += 1;
            seen.insert(name, (scales, d.to_string()));
        }
    }
    // Every FP8 weight has its scale: DeepSeek-V3's 45,808 (3 dense MLPs x 3, 62 attentions x
    // 5, 59 MoE layers x (256 experts + 1 shared) x 3, the MTP layer 61 included),
    // Qwen3-30B-A3B's 18,624 (48 x (128 experts x 3 + 4 attention projections)).
    assert_eq!(seen["deepseek-v3"], (45_808, "float32".into()));
    assert_eq!(
        seen["qwen3-30b-a3b-thinking-2507-fp8"],
        (18_624, "bfloat16".into())
    );
}

/// MXFP4 expert banks (gpt-oss-20b) and AWQ linears (Qwen3-32B-AWQ) have the shapes and
/// bytes the one description of a packed linear gives them.
#[test]
fn mxfp4_and_awq_tensors_have_the_described_shapes() {
    use vram_model::finetune::{linear_tensors, mxfp4_linear_tensors, WeightFormat};
    let c = load("gpt-oss-20b");
    let get = |c: &Checkpoint, n: &str| -> (Vec<u64>, String) {
        let (_, s, d) = c.tensors.iter().find(|(m, _, _)| m == n).unwrap();
        (s.clone(), d.clone())
    };
    for (proj, out, inp) in [("gate_up_proj", 5760, 2880), ("down_proj", 2880, 2880)] {
        let (blocks, bd) = get(&c, &format!("model.layers.0.mlp.experts.{proj}_blocks"));
        let (scales, sd) = get(&c, &format!("model.layers.0.mlp.experts.{proj}_scales"));
        let desc = mxfp4_linear_tensors(out, inp);
        // [E, out, in/32, 16] packed values and [E, out, in/32] E8M0 exponents, uint8 both.
        assert_eq!((bd.as_str(), sd.as_str()), ("uint8", "uint8"));
        assert_eq!(blocks[1..3], [out, inp / 32]);
        assert_eq!(blocks[1] * blocks[2] * blocks[3], desc[0].bytes, "{proj}");
        assert_eq!(scales[1..], desc[1].shape[..], "{proj}");
    }
    let c = load("qwen3-32b-awq");
    for (proj, out, inp) in [
        ("self_attn.q_proj", 8192, 5120),
        ("self_attn.k_proj", 1024, 5120),
        ("self_attn.o_proj", 5120, 8192),
        ("mlp.gate_proj", 25600, 5120),
        ("mlp.down_proj", 5120, 25600),
    ] {
        let desc = linear_tensors(WeightFormat::Awq { group: 128 }, false, out, inp);
        let names: Vec<&str> = desc.iter().map(|t| t.name).collect();
        assert_eq!(names, ["qweight", "qzeros", "scales"]);
        for t in desc {
            let (s, d) = get(&c, &format!("model.layers.0.{proj}.{}", t.name));
            assert_eq!(s, t.shape, "{proj}.{}", t.name);
            // The checkpoint's scales are BF16 where autoawq's `WQLinear_GEMM` makes fp16:
            // the same two bytes.
            assert_eq!(
                Checkpoint::numel(&s) * dtype(&d).1,
                t.bytes,
                "{proj}.{}",
                t.name
            );
        }
    }
}

/// Kimi-K2.5's language model, a compressed-tensors W4A16 checkpoint (group 32, symmetric):
/// each routed expert's `weight_packed`/`weight_scale` have the shapes the one description of a
/// packed linear gives them, and its headers are held to the byte. The tensors are renamed as
/// the text model's (`language_model.model.` → `model.`); the vision tower and projector,
/// which the text config does not describe, are left out.
#[test]
fn compressed_tensors_w4a16_is_read_from_the_headers() {
    use vram_model::finetune::{linear_tensors, WeightFormat};
    let c = kimi_k25_text();
    let format = WeightFormat::Wna16 {
        group: 32,
        symmetric: true,
    };
    for (proj, out, inp) in [("gate_proj", 2048, 7168), ("down_proj", 7168, 2048)] {
        let desc = linear_tensors(format, false, out, inp);
        let names: Vec<&str> = desc.iter().map(|t| t.name).collect();
        assert_eq!(names, ["weight_packed", "weight_scale", "weight_shape"]);
        for t in &desc {
            let n = format!("model.layers.1.mlp.experts.0.{proj}.{}", t.name);
            let (_, s, d) = c.tensors.iter().find(|(m, _, _)| *m == n).unwrap();
            assert_eq!(*s, t.shape, "{n}");
            // The checkpoint stores `weight_shape` int32; vLLM's `CompressedTensorsWNA16`
            // holds it int64, as the description does (8 bytes a linear).
            let want = if t.name == "weight_shape" {
                "int32"
            } else {
                t.dtype
            };
            assert_eq!(d, want, "{n}");
        }
    }
    let mut t = c.transformer();
    let tally = c.tally();
    assert_eq!(
        tally.quant(),
        vram_model::blocks::Quant::Packed {
            format,
            double_quant: false
        }
    );
    let l = c.load(t.blocks.pattern.len() as u64, 2);
    // From config.json alone: its `ignore` list (`lm_head`, `re:.*self_attn.*`,
    // `re:.*shared_experts.*`, `re:.*mlp\.(gate|up|gate_up|down)_proj.*`) leaves the attention,
    // the shared experts and the first layer's dense MLP in bf16, so the config holds what the
    // headers do, but for the routers' fp32 `e_score_correction_bias` buffers (60 x 384 x 4 B)
    // and 8 B an expert: the description's fused gate-up bank holds two `weight_shape`s
    // int64 (as vLLM's `CompressedTensorsWNA16` does) where the checkpoint stores three int32.
    use vram_model::mech::Component;
    let s = t.blocks.storage;
    for (c, ignored) in [
        (Component::Mixer, true),
        (Component::SharedExperts, true),
        (Component::DenseMlp, true),
        (Component::RoutedExperts, false),
    ] {
        assert_eq!(s.ignores(c), ignored, "{c:?}");
    }
    assert_eq!(l.buffers, 60 * 384 * 4);
    let shapes = 60 * 384 * (2 * 16 - 3 * 8);
    // vLLM and SGLang hold the expert banks packed; transformers 5.24 dequantizes them into
    // its fused bf16 banks (`Holder`).
    let (stored_experts, bf16_experts) = kimi_k25_experts(&c);
    let dequantized = bf16_experts - stored_experts;
    assert_eq!(
        t.blocks.as_engines_hold().weights_bytes(false),
        l.held - l.buffers + shapes
    );
    assert_eq!(
        t.blocks.weights_bytes(false),
        l.held - l.buffers + dequantized
    );

    let notes = t.blocks.apply_headers(&tally);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(t.blocks.as_engines_hold().weights_bytes(false), l.held);
    assert_eq!(t.blocks.weights_bytes(false), l.held + dequantized);
    assert_eq!((l.held as i64 - l.added) as u64 + l.dropped, c.total());
}

/// Kimi-K2.5's language model's tensors, renamed as the text model's (`language_model.model.`
/// → `model.`); the vision tower and projector, which the text config does not describe, left
/// out.
fn kimi_k25_text() -> Checkpoint {
    let mut c = load("kimi-k2.5");
    c.tensors = c
        .tensors
        .into_iter()
        .filter_map(|(n, s, d)| {
            let n = n.strip_prefix("language_model.")?.to_string();
            Some((n, s, d))
        })
        .collect();
    c
}

/// Kimi-K2.5's routed experts' stored bytes (every `weight_packed`/`weight_scale`/
/// `weight_shape`) and what they take dequantized in bf16 (each linear's `weight_packed`
/// `[out, in / 8]` int32 as `out x in` two-byte values).
fn kimi_k25_experts(c: &Checkpoint) -> (u64, u64) {
    let experts = || {
        c.tensors
            .iter()
            .filter(|(n, _, _)| n.contains(".mlp.experts."))
    };
    let stored = experts()
        .map(|(_, s, d)| Checkpoint::numel(s) * dtype(d).1)
        .sum();
    let bf16 = experts()
        .filter(|(n, _, _)| n.ends_with(".weight_packed"))
        .map(|(_, s, _)| s[0] * s[1] * 8 * 2)
        .sum();
    (stored, bf16)
}

/// The fine-tuning base's count (`finetune::weights_bytes`, linear site by linear site) decides
/// each linear by the storage's one rule (`Storage::packs`), so it holds Kimi-K2.5's W4A16
/// expert banks as the tensor count does for each holder: transformers 5.24 dequantized into its
/// fused banks (nothing packed is left, the ignore list naming every other linear), a serving
/// engine packed, as the checkpoint stores them (with `weight_shape` held int64 on a fused
/// gate-up bank, 8 B an expert more, as vLLM holds it). Its whole is the tensor count's but for
/// the routers, which it counts in the load dtype where transformers holds them fp32
/// (`_keep_in_fp32_modules_strict`).
#[test]
fn the_finetune_base_holds_w4a16_expert_banks_as_the_storage_does() {
    use vram_model::finetune::{weights_bytes, WeightFormat};
    let c = kimi_k25_text();
    let t = c.transformer();
    let format = WeightFormat::Wna16 {
        group: 32,
        symmetric: true,
    };
    let (stored_experts, bf16_experts) = kimi_k25_experts(&c);
    // 60 MoE layers x 384 experts x 3 linears of 2048 x 7168, each packed 8 values an int32
    // with a bf16 scale per 32 (the report's 157.50 + 19.69 GB per projection).
    assert_eq!(bf16_experts, 60 * 384 * 3 * 2048 * 7168 * 2);
    assert!(stored_experts > 500_000_000_000, "{stored_experts}");
    let shapes = 60 * 384 * (2 * 16 - 3 * 8);
    let l = c.load(t.blocks.pattern.len() as u64, 2);
    let routers = 60 * 384 * 7168;
    // transformers 5.24.
    let w = weights_bytes(&t, format, false, &[]);
    assert_eq!(w.quantized, 0);
    let held = l.held - l.buffers - stored_experts + bf16_experts;
    assert_eq!(w.total + routers * 2, held);
    assert_eq!(w.total + routers * 2, t.blocks.weights_bytes(false));
    // vLLM and SGLang.
    let mut engine = t.clone();
    engine.blocks = engine.blocks.as_engines_hold().into_owned();
    let w = weights_bytes(&engine, format, false, &[]);
    assert_eq!(w.quantized, stored_experts + shapes);
    assert_eq!(w.total + routers * 2, l.held - l.buffers + shapes);
    assert_eq!(w.total + routers * 2, engine.blocks.weights_bytes(false));
    // The largest packed matrix: one expert's fused gate-up projection (2 x 2048 x 7168); the
    // attention and the dense MLP, which the ignore list leaves in bf16, are larger.
    assert_eq!(w.largest_quantized, 2 * 2048 * 7168);
}

/// Kimi-K2.5's real `ignore` list (`lm_head`, `re:.*self_attn.*`, `re:.*shared_experts.*`,
/// `re:.*mlp\.(gate|up|gate_up|down)_proj.*`) against every linear of its layers as the
/// checkpoint stores it: the list names exactly the linears stored in bf16 (`.weight`), never
/// one stored packed (`.weight_packed`); vram's names for each layer's linears
/// (`read::ignore::linear_names`, a fused expert bank split into its experts' linears) are the
/// checkpoint's own, every one; and each role vram leaves unquantized is one whose every linear
/// the checkpoint stores in bf16.
#[test]
fn every_linear_of_every_role_meets_kimi_k25s_ignore_list() {
    use std::collections::{BTreeMap, BTreeSet};
    use vram_model::hf::ignore::{linear_names, IgnoreList};
    use vram_model::mech::Component;
    let c = load("kimi-k2.5");
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(&c.meta["config"]),
        )
        .unwrap(),
    )
    .unwrap();
    let list = IgnoreList::parse(config["quantization_config"].as_object().unwrap()).unwrap();
    // Every linear module of the layers, as stored: packed or bf16. The router's `gate.weight`
    // (a custom module's parameter, not an `nn.Linear`) and the norms are no linears.
    let prefix = "language_model.model.layers.";
    let mut stored = BTreeMap::<String, bool>::new();
    for (n, s, _) in &c.tensors {
        if !n.starts_with(prefix) || s.len() != 2 || n.ends_with(".mlp.gate.weight") {
            continue;
        }
        if let Some(m) = n.strip_suffix(".weight_packed") {
            stored.insert(m.to_string(), true);
        } else if let Some(m) = n.strip_suffix(".weight") {
            stored.insert(m.to_string(), false);
        }
    }
    // 61 attentions x 5, the dense MLP's 3, 60 x (3 shared + 384 x 3 routed).
    assert_eq!(stored.len(), 61 * 5 + 3 + 60 * (3 + 384 * 3));
    for (m, packed) in &stored {
        assert_eq!(list.matches(m), !packed, "{m}");
    }
    let t = c.transformer();
    let b = &t.blocks;
    let mut ours = BTreeSet::new();
    let mut roles = BTreeMap::<Component, (u64, u64)>::new();
    for (i, &k) in b.pattern.iter().enumerate() {
        for (role, name) in linear_names(b, &b.kinds[k as usize]) {
            let full = format!("{prefix}{i}.{name}");
            let packed = stored[&full];
            let r = roles.entry(role).or_default();
            r.0 += 1;
            r.1 += u64::from(!packed);
            ours.insert(full);
        }
    }
    assert_eq!(ours, stored.keys().cloned().collect());
    assert_eq!(roles.len(), 4, "{roles:?}");
    for (role, (linears, bf16)) in roles {
        assert!(
            bf16 == 0 || bf16 == linears,
            "{role:?}: {bf16} of {linears}"
        );
        assert_eq!(b.storage.ignores(role), bf16 == linears, "{role:?}");
    }
}

/// compressed-tensors' `ignore` entries match as compressed-tensors 0.10.2 and vLLM 0.10.0
/// match them: `re:` as Python's `re.match` (anchored at the start only), anything else as the
/// whole module name. A role named in some of its layers only is counted quantized with a
/// note; a pattern that is not a regular expression is a one-line error.
#[test]
fn compressed_tensors_ignore_matches_as_the_libraries_do() {
    use vram_model::mech::Component;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/zoo/configs/qwen3-30b-a3b.json");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let layers = base["num_hidden_layers"].as_u64().unwrap();
    let with = |ignore: serde_json::Value| {
        let mut c = base.clone();
        c["quantization_config"] = serde_json::json!({
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                    "symmetric": true, "actorder": null}}},
            "ignore": ignore,
        });
        vram_model::hf::parse_config(&c.to_string(), "q")
    };
    let t = |ignore| match with(ignore).unwrap() {
        Model::Transformer(t) => t,
        _ => unreachable!(),
    };
    let attn = t(serde_json::json!(["lm_head", "re:.*self_attn.*"]));
    assert!(attn.blocks.storage.ignores(Component::Mixer));
    assert!(!attn.blocks.storage.ignores(Component::RoutedExperts));
    // Anchored at the start: `self_attn` alone matches no module name.
    let unanchored = t(serde_json::json!(["re:self_attn"]));
    assert!(!unanchored.blocks.storage.ignores(Component::Mixer));
    // Whole names: every expert's linears in every layer, in some layers (a note), or some of
    // each layer's experts (a note: one expert's `down_proj` leaves the other 127 packed).
    let experts = base["num_experts"].as_u64().unwrap();
    let names = |n: u64, e: u64, projs: &[&str]| {
        let mut v = Vec::new();
        for i in 0..n {
            for j in 0..e {
                for p in projs {
                    v.push(format!("model.layers.{i}.mlp.experts.{j}.{p}"));
                }
            }
        }
        serde_json::Value::from(v)
    };
    let all = ["gate_proj", "up_proj", "down_proj"];
    assert!(t(names(layers, experts, &all))
        .blocks
        .storage
        .ignores(Component::RoutedExperts));
    for (ignore, note) in [
        (
            names(2, experts, &all),
            format!("routed_experts of 2 of {layers} layers"),
        ),
        (
            names(layers, 1, &["down_proj"]),
            format!("some of the routed_experts's linears in {layers} of {layers} layers"),
        ),
        (
            names(layers, experts, &["down_proj"]),
            format!("some of the routed_experts's linears in {layers} of {layers} layers"),
        ),
    ] {
        let some = t(ignore);
        assert!(!some.blocks.storage.ignores(Component::RoutedExperts));
        assert!(
            some.blocks.notes.iter().any(|n| n.contains(&note)),
            "{note}: {:?}",
            some.blocks.notes
        );
    }
    assert!(attn.blocks.weights_bytes(false) > unanchored.blocks.weights_bytes(false));
    let err = with(serde_json::json!(["re:(unclosed"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("quantization_config.ignore") && !err.contains('\n'),
        "{err}"
    );
}

/// A safetensors header (8-byte length and JSON) of `tensors` (name, dtype, shape), laid end
/// to end, and the file length it describes.
fn header_of(tensors: &[(String, String, Vec<u64>)]) -> (Vec<u8>, u64) {
    let bits = |d: &str| match d {
        "F32" | "I32" => 32,
        "BF16" | "F16" => 16,
        "I8" | "U8" | "F8_E4M3" | "F8_E8M0" => 8,
        "I64" => 64,
        other => panic!("dtype {other} not in the layout"),
    };
    let mut map = serde_json::Map::new();
    let mut end = 0u64;
    for (name, dtype, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * bits(dtype) / 8;
        map.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [end, end + bytes]}),
        );
        end += bytes;
    }
    let json = serde_json::to_vec(&map).unwrap();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    let len = 8 + json.len() as u64 + end;
    out.extend(json);
    (out, len)
}

/// DeepSeek-V4-Flash's checkpoint layout (`tests/data/deepseek-v4-flash-header.json`, written
/// by `tests/zoo/deepseek_v4_header.py` from transformers 5.24's `DeepseekV4ForCausalLM` on the
/// meta device, in the checkpoint's names and dtypes): FP4 experts packed two to an `I8` byte
/// with `F8_E8M0` `.scale`s, FP8 linears with block `.scale`s, the hash layers' `tid2eid`
/// table and the gates' score-correction `bias`. The headers' parameters are exactly the
/// 284,325,869,015 transformers counts for the model (`tests/zoo/causal_lm_expected.json`),
/// where summing the stored elements gave the scales as parameters and the FP4 bytes as one.
#[test]
fn deepseek_v4_fp4_layout_counts_as_transformers_does() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let layout: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("deepseek-v4-flash-header.json")).unwrap(),
    )
    .unwrap();
    let mut tensors = Vec::new();
    for t in layout["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let dtype = t["dtype"].as_str().unwrap().to_string();
        let shape: Vec<u64> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        match t["experts"].as_u64() {
            Some(n) => tensors.extend((0..n).map(|e| {
                (
                    name.replace("{e}", &e.to_string()),
                    dtype.clone(),
                    shape.clone(),
                )
            })),
            None => tensors.push((name.to_string(), dtype, shape)),
        }
    }
    let zoo: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/zoo/causal_lm_expected.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let want = zoo["models"]["deepseek_v4"]["params"].as_u64().unwrap();
    assert_eq!(layout["transformers_params"].as_u64(), Some(want));
    assert_eq!(want, 284_325_869_015);

    let (header, len) = header_of(&tensors);
    let mut tally = Tally::default();
    tally.add_header(&header, len).unwrap();
    assert_eq!(tally.params(), want);
    let w = tally.weights("DeepSeek-V4-Flash");
    assert_eq!(w.params, want);
    // The stored elements are what the bytes hold: the scales are there, the FP4 bytes count
    // one element each.
    let stored: u64 = tally.elements.values().sum();
    assert!(stored < want, "{stored}");
    assert_eq!(w.bytes, tally.bytes.values().sum::<u64>());
}

/// The rules one at a time, on the shapes the published DeepSeek-V4-Flash checkpoint has (as
/// public readers of it spell them): an `I8` expert weight with its group-32 `F8_E8M0` scale
/// is two parameters a byte and the scale none; an FP8 linear's block scale is none; the
/// `hc_*_scale` mixing tensors (no `.weight` beside them) are parameters; the hash router's
/// `I64` table and the gate's score-correction bias are buffers.
#[test]
fn deepseek_v4_scales_are_not_parameters() {
    let t = |n: &str, d: &str, s: &[u64]| (n.to_string(), d.to_string(), s.to_vec());
    let count = |ts: &[(String, String, Vec<u64>)]| {
        let (h, len) = header_of(ts);
        let mut tally = Tally::default();
        tally.add_header(&h, len).unwrap();
        tally.params()
    };
    let expert = [
        t("layers.0.ffn.experts.0.w1.weight", "I8", &[2048, 2048]),
        t("layers.0.ffn.experts.0.w1.scale", "F8_E8M0", &[2048, 128]),
    ];
    assert_eq!(count(&expert), 2048 * 4096);
    let fp8 = [
        t("layers.0.attn.wq_a.weight", "F8_E4M3", &[1024, 4096]),
        t("layers.0.attn.wq_a.scale", "F8_E8M0", &[8, 32]),
    ];
    assert_eq!(count(&fp8), 1024 * 4096);
    let mixing = [
        t("layers.0.hc_attn_scale", "F32", &[3]),
        t("hc_head_scale", "F32", &[1]),
        t("layers.0.hc_attn_fn", "F32", &[24, 16384]),
    ];
    assert_eq!(count(&mixing), 3 + 1 + 24 * 16384);
    let buffers = [
        t("layers.0.ffn.gate.tid2eid", "I64", &[129280, 6]),
        t("layers.3.ffn.gate.bias", "F32", &[256]),
        t("layers.3.ffn.gate.weight", "BF16", &[256, 4096]),
    ];
    assert_eq!(count(&buffers), 256 * 4096);
    // An I8 weight without a group-32 exponent scale beside it is not read as FP4.
    let int8 = [t("w.weight", "I8", &[4, 8]), t("w.scale", "F32", &[4])];
    assert_eq!(count(&int8), 32);
}
