//! One storage for every command (issue 31 item 2): for every config of the zoo
//! (`tests/zoo/configs`), the bytes of the weights as stored agree between the description
//! (`Storage`, `Blocks::weights_bytes`), the `generate` walk (`vram estimate --inference`), the
//! serving model (`vram capacity`) and the fine-tuning base (`--finetune`/`--weights`,
//! `finetune::weights_bytes`); and a catalog id reads the same storage as its config file.

use std::path::PathBuf;
use vram_model::arch::{Model, Transformer};
use vram_model::blocks::{Quant, Storage};
use vram_model::finetune::{weights_bytes, WeightFormat};
use vram_model::setup::{Infer, KvCache, Mode, Setup};
use vram_model::Category;
use vram_plan::capacity::{weights_per_gpu, Engine, Knobs};

fn zoo() -> Vec<(String, Transformer)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo/configs");
    let mut v: Vec<(String, Transformer)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&p).unwrap();
            match vram_model::hf::parse_config(&text, &name).unwrap() {
                Model::Transformer(t) => (name, t),
                _ => panic!("{name}: not a transformer"),
            }
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 50, "{} configs", v.len());
    v
}

/// A one-token `generate` (a short prompt) on one GPU: the walk's parameters are its weights.
fn generate(_t: &Transformer) -> Setup {
    Setup {
        mode: Mode::Infer(Infer {
            batch: 1,
            context: 9,
            new_tokens: 1,
            kv_bytes: 2,
            kv_cache: KvCache::Dynamic,
        }),
        ..Setup::default()
    }
}

fn walked_weights(t: &Transformer, setup: &Setup) -> u64 {
    let e = vram_model::estimate::estimate(&Model::Transformer(t.clone()), setup).unwrap();
    e.breakdown.get(Category::Parameters)
}

/// The walk holds a packed checkpoint's weights as stored, byte for byte what the description
/// says; unpacked, every parameter at the step's two bytes.
#[test]
fn the_walk_holds_the_stored_bytes() {
    let mut packed = 0;
    for (name, t) in zoo() {
        let s = generate(&t);
        let walked = walked_weights(&t, &s);
        if t.blocks.storage.is_packed() {
            packed += 1;
            assert_eq!(walked, t.blocks.weights_bytes(false), "{name}");
            let mut d = s;
            d.overheads.weights_dequantized = true;
            assert_eq!(
                walked_weights(&t, &d),
                2 * t.param_count(),
                "{name} dequantized"
            );
        } else {
            assert_eq!(walked, 2 * t.param_count(), "{name}");
        }
    }
    // gpt-oss 20b/120b (MXFP4), DeepSeek-V3/R1/V3.2, GLM-5 ..., Nemotron-3-Super (FP8).
    assert!(packed >= 5, "{packed} packed configs");
}

/// `--weights FORMAT` (and a config's bitsandbytes/GPTQ/AWQ `quantization_config`) packs
/// tensor by tensor in the description (`Storage::tensor_bytes`) exactly as the fine-tuning
/// base packs linear by linear (`finetune::weights_bytes`, held to bitsandbytes 0.50.2 on the
/// CPU by `tests/engines/finetune_reference.py`), and the walk allocates that.
#[test]
fn a_weights_format_is_one_storage_for_every_command() {
    let formats = [
        (WeightFormat::Int8, false),
        (WeightFormat::Nf4, false),
        (WeightFormat::Nf4, true),
        (WeightFormat::Fp4, false),
        (WeightFormat::Fp8, false),
        (
            WeightFormat::Gptq {
                group: 128,
                desc_act: false,
            },
            false,
        ),
        (
            WeightFormat::Gptq {
                group: 0,
                desc_act: false,
            },
            false,
        ),
        (WeightFormat::Awq { group: 64 }, false),
        // compressed-tensors W4A16 packs expert banks too (`Storage::packs`).
        (
            WeightFormat::Wna16 {
                group: 32,
                symmetric: true,
            },
            false,
        ),
        (
            WeightFormat::Wna16 {
                group: 128,
                symmetric: false,
            },
            false,
        ),
    ];
    for (name, t) in zoo() {
        if t.blocks.storage.is_packed() || t.blocks.vision.is_some() {
            continue;
        }
        // The tensors transformers keeps in fp32 whatever it loads (`_keep_in_fp32_modules_strict`:
        // DeepSeek-style routers): the description holds them at 4 bytes, the fine-tuning
        // base's count at the load dtype's 2 (a difference left to reconcile there).
        let mut fp32 = 0;
        for (kind, n) in t.blocks.kinds.iter().zip(t.blocks.kind_counts()) {
            kind.tensors(t.blocks.hidden, &mut |x| {
                if x.fp32 {
                    fp32 += n * x.numel() * 2;
                }
            });
        }
        for (f, dq) in formats {
            let mut p = t.clone();
            p.blocks.storage = Storage::from_flag(f, dq);
            let finetune = weights_bytes(&t, f, dq, &[]).total + fp32;
            assert_eq!(
                p.blocks.weights_bytes(false),
                finetune,
                "{name} {}{}",
                f.name(),
                if dq { " double quant" } else { "" }
            );
            if f == WeightFormat::Nf4 && !dq {
                let walked = walked_weights(&p, &generate(&p));
                assert_eq!(walked, p.blocks.weights_bytes(false), "{name} walk");
            }
        }
    }
}

/// `vram capacity` without `--quantization` starts from the same stored bytes (one GPU,
/// SGLang: no kernel layout on top), plus the rotary `cos_sin_cache` it keeps (in fp32 on
/// CUDA: SGLang 0.5's `RotaryEmbedding` skips the cast to the model dtype there); block-FP8
/// scales fp32 where transformers holds them a byte each (`scale_fmt: ue8m0`).
#[test]
fn capacity_reads_the_same_storage() {
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    for (name, t) in zoo() {
        let k = Knobs::default();
        let rotary = t.max_positions() * rotary_width(&t) * 4;
        let w = weights_per_gpu(&t, &k, h100, Engine::Sglang);
        if t.blocks.storage.is_packed() {
            let stored = t.blocks.as_engines_hold().weights_bytes(false);
            assert_eq!(w, stored + rotary, "{name}");
        }
    }
}

/// The rotary `cos_sin_cache`'s width as vLLM's and SGLang's `get_rope` build it: the widest
/// layer's rotated part (`int(head_size * partial_rotary_factor)`; MLA's `qk_rope_head_dim`).
fn rotary_width(t: &Transformer) -> u64 {
    t.blocks
        .iter()
        .filter_map(|b| match (b.mixer.as_attention(), b.mixer.as_mla()) {
            (Some(a), _) if a.rope => Some(a.head_dim * a.rotary_pct as u64 / 100),
            (None, Some(m)) => Some(m.qk_rope_head_dim),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// A catalog id reads the same storage, and the same stored bytes, as its config file.
#[test]
fn a_catalog_id_and_its_config_agree() {
    let mut matched = 0;
    for (name, t) in zoo() {
        let Ok(Model::Transformer(c)) = vram_model::catalog::lookup(&name) else {
            continue;
        };
        matched += 1;
        assert_eq!(c.blocks.storage, t.blocks.storage, "{name}");
        assert_eq!(
            c.blocks.weights_bytes(false),
            t.blocks.weights_bytes(false),
            "{name}"
        );
    }
    assert!(matched >= 20, "{matched} catalog ids match a zoo config");
    let q = |id: &str| match vram_model::catalog::lookup(id).unwrap() {
        Model::Transformer(t) => t.blocks.storage.quant,
        _ => unreachable!(),
    };
    assert_eq!(q("gpt-oss-120b"), Quant::Mxfp4);
}

fn finetune_config(name: &str) -> Transformer {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../vram-model/tests/data/finetune/configs")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    match vram_model::hf::parse_config(&text, name).unwrap() {
        Model::Transformer(t) => t,
        _ => panic!("{name}: not a transformer"),
    }
}

/// Gemma 4's E-sizes (a real E4B config and the E2B-shaped one): on one GPU `vram capacity`
/// holds every weight the estimate holds (the per-layer-input table and projection, the vision
/// and the audio towers) plus the rotary cache, up to the per-layer mean's rounding (one
/// parameter per layer). Under TP, vLLM holds both towers whole on every GPU (its
/// `gemma4_mm.py` builds them with `AutoModel.from_config` and replicated linears), SGLang
/// splits the audio encoder's projections and depthwise convolutions (its `gemma4_audio.py`).
#[test]
fn capacity_holds_gemma_4s_per_layer_inputs_and_towers() {
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    for name in ["gemma-4-e4b-it", "gemma-4-e2b-shape"] {
        let t = finetune_config(name);
        let audio = t.blocks.audio.clone().unwrap();
        let vision = t.blocks.vision.clone().unwrap();
        let mut bare = t.clone();
        bare.blocks.vision = None;
        bare.blocks.audio = None;
        let at = |tp: u64| Knobs {
            tp,
            ..Knobs::default()
        };
        let one = at(1);
        // Both engines keep a table per rotary width (head_dim 256 beside the full layers'
        // 512: `_ROPE_DICT`, gemma4.py at v0.19.0), vLLM in the model dtype, SGLang 0.5 in fp32
        // on CUDA; the sliding layers' own parameters are read for vLLM.
        assert!(t.blocks.rope_tables.local, "{name}");
        for engine in [Engine::Vllm, Engine::Sglang] {
            let bytes = if engine == Engine::Vllm {
                one.dtype_bytes
            } else {
                4
            };
            let rotary = t.max_positions() * (256 + rotary_width(&t)) * bytes;
            let w = weights_per_gpu(&t, &one, h100, engine);
            let estimate = t.blocks.weights_bytes(false) + rotary;
            assert!(
                w.abs_diff(estimate) <= t.layers() * one.dtype_bytes,
                "{name} {engine:?}: capacity {w}, estimate {estimate}"
            );
        }
        let towers = |engine, tp| {
            weights_per_gpu(&t, &at(tp), h100, engine) as i64
                - weights_per_gpu(&bare, &at(tp), h100, engine) as i64
        };
        let whole = 2 * (vision.params + audio.params) as i64;
        assert!((towers(Engine::Vllm, 1) - whole).abs() <= 1, "{name}");
        assert!((towers(Engine::Vllm, 2) - whole).abs() <= 1, "{name}");
        let sglang_audio = audio.tp_split_params / 2 + (audio.params - audio.tp_split_params);
        assert!(towers(Engine::Sglang, 2) < whole, "{name}");
        assert!(
            towers(Engine::Sglang, 2) > 2 * sglang_audio as i64,
            "{name}"
        );
    }
    // SGLang's Gemma4AudioEncoder at E4B's width 1024, 12 layers, conv kernel 5, channels
    // [128, 32], output 1536: per layer the two feed-forwards (16 h²), qkv (3 h²), post (h²),
    // pos_proj (h²), linear_start (2 h²), linear_end (h²), the depthwise conv (5 h) and its norm
    // (h); then input_proj_linear (h × 32·128/4) and output_proj's weight (1536 h).
    let e4b = finetune_config("gemma-4-e4b-it").blocks.audio.unwrap();
    let h = 1024u64;
    assert_eq!(
        e4b.tp_split_params,
        12 * (24 * h * h + 6 * h) + h * 1024 + 1536 * h
    );
    assert_eq!(e4b.params, 308_756_768);
}

/// What vLLM holds of one quantized linear (read at 0.9.1), as `vram capacity` counts it: a
/// block-wise FP8 checkpoint's fp32 `weight_scale_inv`, one per `bn × bk` block of the rank's
/// partition (`Fp8LinearMethod.create_weights`), where a bf16 checkpoint quantized in flight
/// keeps one scale (one value, left out); GPTQ's `g_idx` and Marlin's `g_idx_sort_indices`
/// (int32 over the input rows) only with `desc_act`, emptied otherwise
/// (`MarlinLinearKernel.process_weights_after_loading`, the same at 0.10.1 and 0.19.0), and on
/// Marlin no `qzeros` after loading (`zero_points=False`: replaced by an empty tensor); with
/// `desc_act` a row-parallel rank keeps the scales of the whole input
/// (`marlin_repeat_scales_on_all_ranks`; `GPTQLinearMethod` alike, with its `qzeros`); an
/// expert bank keeps its `qzeros` (`GPTQMarlinMoEMethod`, read at 0.10.1).
#[test]
fn quantized_linears_hold_what_vllm_keeps() {
    use vram_plan::capacity::{LinearLoad, Quantization};
    let (out, inp) = (4096, 14336);
    let whole = |marlin| LinearLoad {
        marlin,
        full_inp: inp,
        moe_bank: false,
        freed_leaves: true,
        machete_groups: &[],
    };
    let block = Quant::Fp8Block {
        bn: 128,
        bk: 128,
        skip_head: true,
        e8m0: false,
    };
    assert_eq!(
        Quantization::Fp8.linear_parts(2, block, false, out, inp, false, whole(true)),
        vec![out * inp, 4 * 32 * 112]
    );
    // A partition that is not a whole number of blocks: vLLM rounds up (`(n + bn - 1) // bn`).
    assert_eq!(
        Quantization::Fp8.linear_parts(
            2,
            block,
            false,
            1000,
            300,
            false,
            LinearLoad {
                marlin: true,
                full_inp: 300,
                moe_bank: false,
                freed_leaves: true,
                machete_groups: &[],
            }
        ),
        vec![300_000, 4 * 8 * 3]
    );
    assert_eq!(
        Quantization::Fp8.linear_parts(2, Quant::None, false, out, inp, false, whole(true)),
        vec![out * inp]
    );
    let gptq = |desc_act| Quant::Packed {
        format: WeightFormat::Gptq {
            group: 128,
            desc_act,
        },
        double_quant: false,
    };
    // The plain kernel: qweight int32 [in/8, out], qzeros int32 [groups, out/8], scales fp16
    // [groups, out].
    let plain =
        Quantization::Gptq.linear_parts(2, gptq(false), false, out, inp, false, whole(false));
    assert_eq!(
        plain,
        vec![inp / 8 * out * 4, 112 * out / 8 * 4, 112 * out * 2]
    );
    // Marlin drops qzeros.
    let marlin =
        Quantization::Gptq.linear_parts(2, gptq(false), false, out, inp, false, whole(true));
    assert_eq!(marlin, vec![inp / 8 * out * 4, 112 * out * 2]);
    // desc_act on Marlin: g_idx and its sort indices.
    let act = Quantization::Gptq.linear_parts(2, gptq(true), false, out, inp, false, whole(true));
    assert_eq!(
        act,
        vec![inp / 8 * out * 4, 112 * out * 2, 4 * inp, 4 * inp]
    );
    // A row-parallel down projection at TP 4 (in 14336 / 4 = 3584 rows on the rank): without
    // desc_act its scales are the rank's 28 groups, with it all 112; qweight and g_idx are the
    // rank's.
    let rank = |desc_act, marlin| {
        Quantization::Gptq.linear_parts(
            2,
            gptq(desc_act),
            false,
            out,
            inp / 4,
            false,
            LinearLoad {
                marlin,
                full_inp: inp,
                moe_bank: false,
                freed_leaves: true,
                machete_groups: &[],
            },
        )
    };
    // An expert bank on Marlin keeps its qzeros, created in the model dtype
    // (`GPTQMarlinMoEMethod.create_weights`, read at vLLM main 00161ce).
    let bank = Quantization::Gptq.linear_parts(
        2,
        gptq(false),
        false,
        out,
        inp,
        true,
        LinearLoad {
            marlin: true,
            full_inp: inp,
            moe_bank: true,
            freed_leaves: true,
            machete_groups: &[],
        },
    );
    assert_eq!(bank, vec![plain[0], plain[1] / 2, plain[2]]);
    // A measure of free device memory (SGLang, vLLM on ROCm) still sees the freed qzeros,
    // cached by PyTorch's allocator.
    let cached = Quantization::Gptq.linear_parts(
        2,
        gptq(false),
        false,
        out,
        inp,
        false,
        LinearLoad {
            marlin: true,
            full_inp: inp,
            moe_bank: false,
            freed_leaves: false,
            machete_groups: &[],
        },
    );
    assert_eq!(cached, plain);
    assert_eq!(rank(false, true), vec![inp / 4 / 8 * out * 4, 28 * out * 2]);
    assert_eq!(
        rank(true, true),
        vec![inp / 4 / 8 * out * 4, 112 * out * 2, inp, inp]
    );
    assert_eq!(
        rank(true, false),
        vec![inp / 4 / 8 * out * 4, 112 * out / 8 * 4, 112 * out * 2, inp]
    );
}

/// A config's `quantization_config.group_size` is the group vLLM holds, whatever
/// `--quantization` names (read at 0.10.1: `GPTQLinearMethod`, `GPTQMarlinLinearMethod` and
/// `AWQMarlinLinearMethod.create_weights` make scales and zeros `[in/group, ...]` over the rank's
/// input rows, `group_size` -1 normalised to the whole input, so one row whether the linear is
/// split or not: the plain kernel's `scale_and_zero_size = input_size // group_size`, Marlin's
/// `marlin_repeat_scales_on_all_ranks` for a channelwise row-parallel linear). Marlin runs only
/// a group it takes (`MARLIN_SUPPORTED_GROUP_SIZES`: -1, 32, 64, 128); a group-256 checkpoint
/// on an H100 keeps the plain kernel's `qzeros`.
#[test]
fn quantized_linears_take_the_configs_group_size() {
    use serde_json::json;
    use vram_plan::capacity::{LinearLoad, Quantization};
    let config = |qc: serde_json::Value| -> Transformer {
        let mut c: serde_json::Value =
            serde_json::from_str(vram_model::catalog::config_text("llama-3-8b").unwrap()).unwrap();
        c["quantization_config"] = qc;
        match vram_model::hf::parse_config(&c.to_string(), "quantized").unwrap() {
            Model::Transformer(t) => t,
            _ => unreachable!(),
        }
    };
    let gptq = |g: i64| {
        config(json!({"quant_method": "gptq", "bits": 4, "group_size": g, "desc_act": false}))
    };
    let awq = |g: i64| {
        config(
            json!({"quant_method": "awq", "bits": 4, "group_size": g, "zero_point": true,
            "version": "gemm"}),
        )
    };
    let stored = |t: Transformer| t.blocks.storage.quant;
    let (out, inp) = (4096u64, 14336u64);
    let load = |marlin, full_inp| LinearLoad {
        marlin,
        full_inp,
        moe_bank: false,
        freed_leaves: true,
        machete_groups: &[],
    };
    let parts = |q: Quantization, s: Quant, rows: u64, marlin: bool| {
        q.linear_parts(2, s, false, out, rows, false, load(marlin, inp))
    };
    // GPTQ, group 64, the plain kernel: qweight int32 [in/8, out], qzeros int32 [in/64, out/8],
    // scales fp16 [in/64, out] (g_idx emptied: no act-order).
    let g64 = stored(gptq(64));
    assert_eq!(
        parts(Quantization::Gptq, g64, inp, false),
        vec![
            inp / 8 * out * 4,
            inp / 64 * out / 8 * 4,
            inp / 64 * out * 2
        ]
    );
    // On Marlin qzeros are emptied after loading.
    assert_eq!(
        parts(Quantization::Gptq, g64, inp, true),
        vec![inp / 8 * out * 4, inp / 64 * out * 2]
    );
    // group_size -1: a row-parallel down projection at TP 4 (3,584 rows on the rank) holds one
    // row of scales (and, on the plain kernel, of zeros).
    let channel = stored(gptq(-1));
    assert_eq!(
        parts(Quantization::Gptq, channel, inp / 4, false),
        vec![inp / 4 / 8 * out * 4, out / 8 * 4, out * 2]
    );
    assert_eq!(
        parts(Quantization::Gptq, channel, inp / 4, true),
        vec![inp / 4 / 8 * out * 4, out * 2]
    );
    // AWQ, group 64: qweight int32 [in, out/8], qzeros int32 [in/64, out/8], scales fp16
    // [in/64, out]; Marlin repacks them at the same sizes.
    assert_eq!(
        parts(Quantization::Awq, stored(awq(64)), inp, true),
        vec![
            inp * out / 8 * 4,
            inp / 64 * out / 8 * 4,
            inp / 64 * out * 2
        ]
    );
    // `--quantization` over a config that gives no quantization_config: the quantizers' 128.
    assert_eq!(
        Quantization::Gptq.packed_format(Quant::None),
        Some(WeightFormat::Gptq {
            group: 128,
            desc_act: false
        })
    );
    assert_eq!(
        Quantization::Awq.packed_format(Quant::None),
        Some(WeightFormat::Awq { group: 128 })
    );
    // The whole model under vLLM on an A100 (Marlin, qzeros freed): per layer qkv (6144 × 4096),
    // o (4096 × 4096), gate-up (28672 × 4096), down (4096 × 14336); group 64 adds a scale row
    // per 128 inputs over group 128's; group 256 is not Marlin's, so the plain kernel keeps its
    // qzeros (in·out/512 bytes) and a quarter of group 64's scales (in·out/128).
    let gpu = vram_model::gpu::lookup("a100-80g").unwrap();
    let k = Knobs {
        quantization: Quantization::Gptq,
        ..Knobs::default()
    };
    let w = |t: Transformer| weights_per_gpu(&t, &k, gpu, Engine::Vllm) as i64;
    let io: i64 = 4096 * (6144 + 4096 + 28672) + 14336 * 4096;
    let (w64, w128, w256) = (w(gptq(64)), w(gptq(128)), w(gptq(256)));
    assert!((w64 - w128 - 32 * io / 64).abs() <= 2, "{}", w64 - w128);
    assert!(
        (w256 - w128 - 32 * (io / 512 + io / 128 - io / 64)).abs() <= 2,
        "{}",
        w256 - w128
    );
    // On an H100 the linears run Machete (`engine::machete_groups`), which keeps the checkpoint's
    // qzeros (in·out/256 bytes at group 128) and `g_idx` (4 bytes per input row: 4096 × 3 +
    // 14336 per layer) that Marlin empties; group 64's extra scale and zero rows follow.
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    let wh = |t: Transformer| weights_per_gpu(&t, &k, h100, Engine::Vllm) as i64;
    let g_idx: i64 = 4 * (3 * 4096 + 14336);
    assert!(
        (wh(gptq(128)) - w128 - 32 * (io / 256 + g_idx)).abs() <= 2,
        "{}",
        wh(gptq(128)) - w128
    );
    assert!(
        (wh(gptq(64)) - wh(gptq(128)) - 32 * (io / 64 + io / 256)).abs() <= 2,
        "{}",
        wh(gptq(64)) - wh(gptq(128))
    );
}
