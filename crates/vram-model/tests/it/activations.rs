//! Activation memory against Korthikanti et al. 2022, "Reducing Activation Recomputation in
//! Large Transformer Models": per-layer bytes (Section 4, Table 2) for their Table 3 models,
//! and the 175B worked check of the pipeline's first stage.
//!
//! Their formulas assume 2-byte activations, 1-byte dropout masks, and ignore layer-norm
//! statistics; vramkit stores those statistics (two fp32 values per token per LayerNorm), so
//! each expectation below adds `2 norms × 8 bytes × s·b` (divided by t under sequence parallel).

use vram_model::arch::Model;
use vram_model::estimate::{layer_activation_bytes, Category};
use vram_model::setup::{Attention, Mode, Parallel, Precision, Recompute, Schedule, Setup, Train};
use vram_model::{estimate, hf};

/// A GPT model of Table 3 (vocabulary 51200, sequence 2048, dropout everywhere).
fn gpt(heads: u64, hidden: u64, layers: u64) -> Model {
    let cfg = format!(
        r#"{{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":{hidden},"n_layer":{layers},"n_head":{heads}}}"#
    );
    hf::parse_config(&cfg, "gpt").unwrap()
}

fn setup(tp: u64, sp: bool, recompute: Recompute) -> Setup {
    Setup {
        precision: Precision::Bf16Amp,
        attention: Attention::Eager,
        parallel: Parallel {
            tp,
            sequence_parallel: sp,
            ..Parallel::default()
        },
        mode: Mode::Train(Train {
            micro_batch: 1,
            seq: 2048,
            recompute,
            ..Train::default()
        }),
        ..Setup::default()
    }
}

const TABLE_3: &[(u64, u64, u64)] = &[
    (64, 6144, 48),
    (96, 12288, 96),
    (128, 20480, 105),
    (160, 25600, 128),
];

#[test]
fn per_layer_formulas_table_2() {
    let (s, b, t) = (2048.0, 1.0, 8.0);
    for &(a, h, l) in TABLE_3 {
        let model = gpt(a, h, l);
        let (a, h) = (a as f64, h as f64);
        let sbh = s * b * h;
        let stats = 2.0 * 8.0 * s * b;
        let rows: [(&str, Setup, f64); 5] = [
            (
                "tensor parallel",
                setup(8, false, Recompute::None),
                sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)) + stats,
            ),
            (
                "tensor + sequence parallel",
                setup(8, true, Recompute::None),
                sbh * (34.0 / t + 5.0 * a * s / (h * t)) + stats / t,
            ),
            (
                "tensor parallel + selective",
                setup(8, false, Recompute::Selective),
                sbh * (10.0 + 24.0 / t) + stats,
            ),
            (
                "tensor + sequence parallel + selective",
                setup(8, true, Recompute::Selective),
                sbh * 34.0 / t + stats / t,
            ),
            (
                "full recompute",
                setup(8, false, Recompute::Full),
                2.0 * sbh,
            ),
        ];
        for (name, st, expected) in rows {
            let got = layer_activation_bytes(&model, &st).unwrap() as f64;
            assert!(
                (got - expected).abs() < 1.0,
                "h = {h}: {name}: {got} vs {expected}"
            );
        }
    }
}

#[test]
fn no_parallelism_formula() {
    // sbh(34 + 5as/h) in pure half precision on one GPU (Megatron layout forced).
    let model = gpt(64, 6144, 48);
    let mut st = setup(1, false, Recompute::None);
    st.precision = Precision::Bf16;
    if let Mode::Train(t) = &mut st.mode {
        t.amp_style = Some(vram_model::setup::AmpStyle::Megatron);
    }
    let (s, h, a) = (2048.0, 6144.0, 64.0);
    let expected = s * h * (34.0 + 5.0 * a * s / h) + 2.0 * 8.0 * s;
    assert!((layer_activation_bytes(&model, &st).unwrap() as f64 - expected).abs() < 1.0);
}

#[test]
fn worked_check_175b_first_stage() {
    // 175B, t = 8, p = 8, interleaved with m = 3 chunks, no recomputation, no sequence
    // parallelism: sbhL(10 + 24/t + 5as/(ht)) · (1 + (p-1)/(p·m)) ≈ 66.8 GiB on the first stage.
    let model = gpt(96, 12288, 96);
    let mut st = setup(8, false, Recompute::None);
    st.parallel.pp = 8;
    st.parallel.schedule = Schedule::Interleaved(3);
    if let Mode::Train(t) = &mut st.mode {
        t.grad_accum = 64; // global batch 64, micro-batch 1, dp 1
    }
    let e = estimate(&model, &st).unwrap();
    assert_eq!(e.pipeline_rank, 0);
    let paper = 25_165_824.0 * 96.0 * 23.0 * (1.0 + 7.0 / 24.0);
    assert!((paper / (1u64 << 30) as f64 - 66.84).abs() < 0.01);
    // Activations live at the first stage's peak: the 31 in-flight chunk-forwards of 4 layers,
    // plus their layer-norm statistics and embedding dropout masks, less what backward has freed.
    let act = e.breakdown.get(Category::Activations) as f64;
    let rel = (act - paper) / paper;
    assert!(
        rel.abs() < 0.01,
        "activations {:.2} GiB vs paper {:.2} GiB",
        act / (1u64 << 30) as f64,
        paper / (1u64 << 30) as f64
    );
}

/// Per-layer bytes of Hugging Face models under `torch.autocast(bf16)` with SDPA, summed by hand
/// from the tensors autograd saves in their modelling code (transformers 5.17, PyTorch 2.11:
/// cuDNN/flash attention, whose output is already laid out for `o_proj`).
#[test]
fn hf_layers_under_autocast_by_hand() {
    let setup = |mb, seq| Setup {
        precision: Precision::Bf16Amp,
        attention: Attention::Sdpa,
        mode: Mode::Train(Train {
            micro_batch: mb,
            seq,
            ..Train::default()
        }),
        ..Setup::default()
    };
    let (b, s) = (2u64, 256u64);
    let tok = b * s;

    // GPT-2 small (h 768, f 3072, 12 heads, dropout 0.1, gelu_new composed of elementwise ops):
    //   ln_1 input fp32 4h + mean/rstd 8 | c_attn input cast 2h | c_attn output (q, k, v views;
    //   SDPA saves q) 3·2h | the training forward's DynamicCache copies of K and V, which SDPA
    //   reads and saves, 2·2h | SDPA output 2h + log-sum-exp 4 per head | dropout mask h
    //   | ln_2 input 4h + 8 | c_fc input cast 2h | gelu_new: 0.5x 2f, pow's fp32 copy of x 4f,
    //   tanh 4f, 1 + tanh 4f | c_proj input cast 2f | dropout mask h
    let (h, f, a) = (768, 3072, 12);
    let gpt2 = tok * h * (4 + 2 + 6 + 4 + 2 + 1 + 4 + 2 + 1)
        + 16 * tok
        + 4 * b * a * s
        + tok * f * (2 + 4 + 4 + 4 + 2);
    let model = vram_model::catalog::lookup("gpt2").unwrap();
    assert_eq!(layer_activation_bytes(&model, &setup(b, s)).unwrap(), gpt2);

    // Llama-2-7B (h 4096, f 11008, 32 heads, no dropout, RMSNorm in fp32, separate q/k/v and
    // gate/up projections that each cast the fp32 input):
    //   norm: input 4h + normalised 4h + rstd 4 (twice) | q,k,v input casts 3·2h | SDPA's half
    //   casts of the fp32 rotary q and k and of v 3·2h | SDPA output 2h + lse 4 per head
    //   | gate/up input casts 2·2h | gate out, SiLU out, up out, product 4·2f
    // (The fp32 DynamicCache copies of K and V live until the forward returns but are not saved.)
    let (h, f, a) = (4096, 11008, 32);
    let llama = tok * h * (8 + 6 + 6 + 2 + 8 + 4) + 8 * tok + 4 * b * a * s + tok * f * 8;
    let model = vram_model::catalog::lookup("llama-2-7b").unwrap();
    assert_eq!(layer_activation_bytes(&model, &setup(b, s)).unwrap(), llama);
}
