//! What would make a job fit: the one place every "would fit with …" comes from.
//!
//! `vram estimate` (a training step, an inference step, a LoRA/QLoRA step), `vram capacity`
//! (a serving engine that does not start) and `vram doctor` (a serving start-up error) all ask
//! this module; the report (`vram-report`) carries what it answers and every output renders it.
//!
//! Each suggestion is a change the job has not made (a try that leaves the setup as the user gave
//! it, or as an earlier try has it, is dropped), named as the flag the user would type, and kept
//! only if the model says it fits (the step's allocator replay, or the engine's start-up
//! arithmetic) with the figure that decided it.

use serde::{Deserialize, Serialize};
use vram_model::arch::{Model, Transformer};
use vram_model::finetune::step::{self, FinetuneSpec, Method};
use vram_model::finetune::{LoraSpec, Targets, WeightFormat};
use vram_model::gpu::Gpu;
use vram_model::setup::{self, Mode, Setup, Train};

use crate::capacity::{self, Capacity, Engine, Knobs, Quantization};

/// One change that makes a step fit the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    /// The flags to add or change, as `vram estimate` takes them (`--recompute full`).
    pub flags: String,
    /// What the change amounts to, where the flags alone do not say it (the adapters a
    /// `--finetune lora` suggestion trains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The device total with the change (what nvidia-smi would show), bytes.
    pub total_bytes: u64,
}

impl Suggestion {
    /// The flags with their detail, as the text prints them: `--finetune lora (r=16 all-linear,
    /// 41,943,040 trainable)`.
    pub fn label(&self) -> String {
        match &self.detail {
            Some(d) => format!("{} ({d})", self.flags),
            None => self.flags.clone(),
        }
    }
}

/// The changes [`step`] tries for `setup`, as the flags it would suggest: those the job has not
/// made, named for the line printed when none fits (for training, LoRA and QLoRA last).
pub fn step_tried(setup: &Setup) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = step_tries(setup).into_iter().map(|(f, _)| f).collect();
    if let Mode::Train(_) = setup.mode {
        v.extend(["--finetune lora", "--finetune qlora"]);
    }
    v
}

/// Changes of one or two knobs that make a full training or inference step of `model` fit in
/// `cap` bytes, with the device total each gives (at most three), followed for training by the
/// LoRA and QLoRA steps that fit ([`lora_alternatives`], LoRA's frozen base in `lora_base`).
///
/// Training tries full recomputation, 8-bit Adam, both, ZeRO-3 (over 8 data-parallel GPUs when
/// fewer are given), ZeRO-3 with recomputation, and optimizer offload under ZeRO; inference
/// bf16 weights where it runs in fp32, an fp8 KV cache and tensor parallelism 2, 4, 8. Each is decided by
/// [`vram_model::estimate::fits`] (at most two allocator replays, none where the peak walk
/// refuses) before its device total is estimated.
pub fn step(model: &Model, setup: &Setup, cap: u64, lora_base: WeightFormat) -> Vec<Suggestion> {
    let mut out = step_changes(model, setup, cap);
    if let Mode::Train(_) = setup.mode {
        out.extend(lora_alternatives(model, setup, cap, lora_base));
    }
    out
}

fn step_changes(model: &Model, setup: &Setup, cap: u64) -> Vec<Suggestion> {
    step_tries(setup)
        .into_iter()
        .filter_map(|(flags, s)| {
            // `fits` decides in at most two allocator replays (none where the peak walk
            // refuses); only a change that fits pays for the search of its device total.
            if !vram_model::estimate::fits(model, &s, cap).unwrap_or(false) {
                return None;
            }
            vram_model::estimate(model, &s)
                .ok()
                .filter(|e| e.fits(cap))
                .map(|e| Suggestion {
                    flags: flags.to_string(),
                    detail: None,
                    total_bytes: e.total_bytes,
                })
        })
        .take(3)
        .collect()
}

/// The setups [`step_changes`] tries, each with its flags: only changes to `setup`.
fn step_tries(setup: &Setup) -> Vec<(&'static str, Setup)> {
    let mut tries: Vec<(&'static str, Setup)> = Vec::new();
    let with_train = |f: &dyn Fn(&mut Train)| {
        let mut s = *setup;
        if let Mode::Train(t) = &mut s.mode {
            f(t);
        }
        s
    };
    match setup.mode {
        Mode::Train(t) => {
            if t.recompute != setup::Recompute::Full {
                tries.push((
                    "--recompute full",
                    with_train(&|t| t.recompute = setup::Recompute::Full),
                ));
            }
            if t.optimizer == setup::Optimizer::Adamw {
                tries.push((
                    "--optimizer adam8bit",
                    with_train(&|t| t.optimizer = setup::Optimizer::Adam8bit),
                ));
                tries.push((
                    "--optimizer adam8bit --recompute full",
                    with_train(&|t| {
                        t.optimizer = setup::Optimizer::Adam8bit;
                        t.recompute = setup::Recompute::Full;
                    }),
                ));
            }
            if setup.parallel.zero < 3 {
                let mut s = with_train(&|t| t.amp_style = None);
                s.parallel.zero = 3;
                let flags = if s.parallel.dp < 8 {
                    s.parallel.dp = 8;
                    "--zero 3 --dp 8"
                } else {
                    "--zero 3"
                };
                tries.push((flags, s));
                if t.recompute != setup::Recompute::Full {
                    let mut r = s;
                    if let Mode::Train(t) = &mut r.mode {
                        t.recompute = setup::Recompute::Full;
                    }
                    tries.push((
                        if s.parallel.dp == setup.parallel.dp {
                            "--zero 3 --recompute full"
                        } else {
                            "--zero 3 --dp 8 --recompute full"
                        },
                        r,
                    ));
                }
            }
            if setup.parallel.zero >= 1 && t.offload == setup::Offload::None {
                tries.push((
                    "--offload optimizer",
                    with_train(&|t| t.offload = setup::Offload::Optimizer),
                ));
            }
        }
        Mode::Infer(i) => {
            // An fp32 `generate` (a float32 config loaded by from_pretrained's dtype="auto"):
            // the same model loaded with dtype=torch.bfloat16 holds half the weights, and its
            // cache the compute dtype's 2 bytes.
            if setup.precision == setup::Precision::Fp32 {
                let mut s = *setup;
                s.precision = setup::Precision::Bf16Amp;
                if let Mode::Infer(i) = &mut s.mode {
                    i.kv_bytes = i.kv_bytes.min(2);
                }
                tries.push(("--precision bf16-amp", s));
            }
            if i.kv_bytes > 1 {
                let mut s = *setup;
                if let Mode::Infer(i) = &mut s.mode {
                    i.kv_bytes = 1;
                }
                tries.push(("--kv-dtype fp8", s));
            }
            for (tp, flags) in [(2, "--tp 2"), (4, "--tp 4"), (8, "--tp 8")] {
                if tp > setup.parallel.tp {
                    let mut s = *setup;
                    s.parallel.tp = tp;
                    tries.push((flags, s));
                }
            }
        }
    }
    // Suggest changes only: a try that leaves the setup as the user gave it, or as an earlier
    // try has it, says nothing new.
    let mut seen = vec![*setup];
    tries.retain(|(_, s)| {
        let new = !seen.contains(s);
        seen.push(*s);
        new
    });
    tries
}

/// The LoRA a suggestion trains: PEFT's r=16 on every linear PEFT accepts for the model
/// (`all-linear`, or the list [`vram_model::finetune::peft_accepted_targets`] gives where PEFT
/// refuses a linear of the model), TRL's defaults otherwise.
fn suggested_lora(model: &Model) -> LoraSpec {
    let targets = match model {
        Model::Transformer(t) => {
            vram_model::finetune::peft_accepted_targets(t).map_or(Targets::AllLinear, Targets::List)
        }
        _ => Targets::AllLinear,
    };
    LoraSpec {
        rank: 16,
        alpha: 32,
        dropout: 0.0,
        targets,
    }
}

/// LoRA and QLoRA steps (PEFT r=16 on every linear PEFT accepts, TRL's `SFTTrainer` defaults:
/// gradient checkpointing, one GPU) that fit where the full training step of `setup` does not.
/// LoRA's frozen base is `lora_base`: the one `--finetune lora` takes on this model without
/// `--weights` (fp32 on a float32 config, `vram_report::request::FinetuneRequest::spec_for`),
/// and QLoRA's unpacked rest is fp32 with it, so that the flags suggested reproduce the figure
/// printed beside them.
pub fn lora_alternatives(
    model: &Model,
    setup: &Setup,
    cap: u64,
    lora_base: WeightFormat,
) -> Vec<Suggestion> {
    let Mode::Train(t) = setup.mode else {
        return Vec::new();
    };
    let mut s = *setup;
    s.parallel = setup::Parallel::default();
    s.mode = Mode::Train(Train {
        recompute: setup::Recompute::None,
        recompute_layers: None,
        amp_style: None,
        offload: setup::Offload::None,
        ..t
    });
    let lora = suggested_lora(model);
    let mut out = Vec::new();
    for (flags, method, weights) in [
        ("--finetune lora", Method::Lora, lora_base),
        ("--finetune qlora", Method::Qlora, WeightFormat::Nf4),
    ] {
        let spec = FinetuneSpec {
            method,
            weights,
            double_quant: false,
            lora: lora.clone(),
            skip_modules: Vec::new(),
            prepare_kbit: false,
            // A float32 checkpoint (LoRA's base fp32) loads QLoRA's unpacked rest in fp32, as
            // `--finetune qlora` alone takes it (`FinetuneRequest::spec_for`).
            load_fp32: method == Method::Qlora && lora_base == WeightFormat::Fp32,
            gradient_checkpointing: true,
        };
        if let Ok(e) = step::estimate(model, &s, &spec) {
            if e.fits(cap) {
                let trainable = vram_model::fmt::thousands(e.trainable_params);
                let (flags, detail) = match &lora.targets {
                    Targets::AllLinear => (
                        flags.to_string(),
                        format!("r=16 all-linear, {trainable} trainable"),
                    ),
                    // The linears PEFT accepts, named in the flags.
                    t => (
                        format!("{flags} --lora-targets {}", t.display()),
                        format!("r=16, {trainable} trainable"),
                    ),
                };
                out.push(Suggestion {
                    flags,
                    detail: Some(detail),
                    total_bytes: e.total_bytes,
                });
            }
        }
    }
    out
}

/// The changes [`finetune`] tries for a job with these settings, as the flags it would suggest:
/// gradient checkpointing where it is off, QLoRA on an nf4 base where the base is half precision
/// (`--finetune lora`), a rank of 8 where it is larger. Named for the line printed when none fits.
pub fn finetune_tried(
    gradient_checkpointing: bool,
    method: Method,
    rank: u64,
) -> Vec<&'static str> {
    let mut v = Vec::new();
    if !gradient_checkpointing {
        v.push(NO_GC_OFF);
    }
    if method == Method::Lora {
        v.push("--finetune qlora");
    }
    if rank > 8 {
        v.push("--lora-rank 8");
    }
    v
}

const NO_GC_OFF: &str = "drop --no-gradient-checkpointing";

/// Changes that make a LoRA/QLoRA step (`spec` on `setup`) fit in `cap` bytes, from those
/// [`finetune_tried`] names; each kept only if its step fits.
pub fn finetune(model: &Model, setup: &Setup, spec: &FinetuneSpec, cap: u64) -> Vec<Suggestion> {
    let tries: Vec<(String, FinetuneSpec)> =
        finetune_tried(spec.gradient_checkpointing, spec.method, spec.lora.rank)
            .into_iter()
            .map(|flags| {
                let changed = match flags {
                    NO_GC_OFF => FinetuneSpec {
                        gradient_checkpointing: true,
                        ..spec.clone()
                    },
                    "--finetune qlora" => FinetuneSpec {
                        method: Method::Qlora,
                        weights: WeightFormat::Nf4,
                        // An fp32 base's checkpoint loads its unquantized rest in fp32.
                        load_fp32: spec.load_fp32 || spec.weights == WeightFormat::Fp32,
                        ..spec.clone()
                    },
                    _ => FinetuneSpec {
                        lora: LoraSpec {
                            rank: 8,
                            ..spec.lora.clone()
                        },
                        ..spec.clone()
                    },
                };
                (flags.to_string(), changed)
            })
            .collect();
    tries
        .into_iter()
        .filter(|(_, s)| s != spec)
        .filter_map(|(flags, s)| {
            let e = step::estimate(model, setup, &s).ok()?;
            e.fits(cap).then_some(Suggestion {
                flags,
                detail: None,
                total_bytes: e.total_bytes,
            })
        })
        .take(3)
        .collect()
}

/// A change that starts a serving engine, with what the pool then holds: what `vram capacity`
/// offers as its cheapest change and what `vram doctor` offers for a start-up error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServingChange {
    /// The flag and its value, as the engine names it (`--kv-cache-dtype fp8`,
    /// `--tensor-parallel-size 2`).
    pub flags: String,
    /// The `max_model_len` it starts at (the asked one).
    pub max_model_len: u64,
    /// Tokens the KV cache then holds.
    pub kv_cache_tokens: u64,
    /// Requests of `max_model_len` held at once.
    pub max_concurrency: f64,
    /// For a larger share of the device (`--gpu-memory-utilization`, `--mem-fraction-static`):
    /// what bounds it at start-up, with its figures ([`capacity::ShareCeiling`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
}

impl ServingChange {
    /// What the change gives, as the text prints it after the flags: `(T tokens, C requests at
    /// once)`, with the bound of a larger share after a semicolon.
    pub fn gives(&self) -> String {
        format!(
            "({} tokens, {:.2} requests at once{})",
            vram_model::fmt::thousands(self.kv_cache_tokens),
            self.max_concurrency,
            self.bound
                .as_ref()
                .map(|b| format!("; within {b}"))
                .unwrap_or_default()
        )
    }
}

/// The cheapest change that makes a job that does not start start, each tried alone at the same
/// `max_model_len` and kept only if its own run starts: `--max-num-seqs M` first where a hybrid
/// model's pool of M blocks is too small for vLLM's `max_num_seqs` (then the piecewise CUDA-graph
/// mode, under which vLLM makes no such check), a larger share of the device (the smallest
/// `--gpu-memory-utilization` or `--mem-fraction-static`, in hundredths, above the one in force
/// whose pool holds one request of `max_model_len` (else the smallest that starts: SGLang
/// starts with any pool), up to what bounds it at start-up: [`capacity::share_ceiling`]; the
/// engines' own KV-cache errors name it first), `--enforce-eager` where one request fits the KV cache but
/// vLLM's CUDA graphs (or that check) do not start it, an fp8 KV cache (named as the engine
/// names it: vLLM `fp8`, SGLang `fp8_e4m3`), fp8 weights (not for a checkpoint already stored
/// quantized), more tensor parallelism (2, 4, 8, dividing the heads), then pipeline stages (2,
/// 4: another node). Only changes the job has not already made. `None` if none starts it (a lower
/// `max_model_len` is always [`capacity::Capacity::max_model_len_that_fits`]).
pub fn serving(t: &Transformer, gpu: &Gpu, engine: Engine, knobs: &Knobs) -> Option<ServingChange> {
    first_start(t, gpu, engine, serving_tries(t, gpu, engine, knobs))
}

/// [`serving`] without a larger share of the device: for a job whose share cannot be known to
/// grow (the doctor's paste where others hold the GPU, or whose own share vram refuses).
pub fn serving_without_share(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    knobs: &Knobs,
) -> Option<ServingChange> {
    let tries = serving_tries(t, gpu, engine, knobs)
        .into_iter()
        .filter(|tr| tr.bound.is_none())
        .collect();
    first_start(t, gpu, engine, tries)
}

/// The first of `tries` whose run starts the job.
fn first_start(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    tries: Vec<Try>,
) -> Option<ServingChange> {
    tries.into_iter().find_map(|tr| {
        let bound = tr.bound;
        let mut starts = tr.steps.into_iter().filter_map(|(flags, k)| {
            capacity::capacity(t, gpu, engine, &k)
                .ok()
                .filter(|c| c.starts)
                .map(|c| ServingChange {
                    flags,
                    max_model_len: c.max_model_len,
                    kv_cache_tokens: c.kv_cache_tokens,
                    max_concurrency: c.max_concurrency,
                    bound: bound.clone(),
                })
        });
        if bound.is_none() {
            return starts.next();
        }
        // A larger share: the smallest whose pool holds one request of `max_model_len` (vLLM
        // starts only then; SGLang starts with any pool, so its first start may hold a few
        // tokens), else the smallest that starts.
        let mut first = None;
        for ch in starts {
            if ch.max_concurrency >= 1.0 {
                return Some(ch);
            }
            first.get_or_insert(ch);
        }
        first
    })
}

/// The changes [`serving`] tries for this job and engine, as the flags it would suggest, named
/// for the line printed when none starts it (`--enforce-eager` only for vLLM where its CUDA
/// graphs are what fails; a larger share as the range tried, `--gpu-memory-utilization
/// 0.91-0.99`).
pub fn serving_tried(t: &Transformer, gpu: &Gpu, engine: Engine, knobs: &Knobs) -> Vec<String> {
    serving_tries(t, gpu, engine, knobs)
        .into_iter()
        .map(|tr| tr.label)
        .collect()
}

/// One change [`serving`] tries: its label, and the settings tried in order (one, or the
/// shares of a larger `--gpu-memory-utilization` from the smallest), each with its flags.
struct Try {
    label: String,
    steps: Vec<(String, Knobs)>,
    bound: Option<String>,
}

impl Try {
    fn one(flags: String, k: Knobs) -> Self {
        Try {
            label: flags.clone(),
            steps: vec![(flags, k)],
            bound: None,
        }
    }
}

/// The shares above the one in force, in hundredths, up to what bounds them at start-up
/// (`None` where there is none to try).
fn share_try(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    knobs: &Knobs,
    now: &Capacity,
) -> Option<Try> {
    let ceiling = capacity::share_ceiling(t, gpu, engine, knobs, now);
    let flag = match engine {
        Engine::Vllm => "--gpu-memory-utilization",
        Engine::Sglang => "--mem-fraction-static",
    };
    let top = (ceiling.max * 100.0).round() as u32;
    let steps: Vec<(String, Knobs)> = (1..=top)
        .map(|h| f64::from(h) / 100.0)
        .filter(|&u| u > now.memory_fraction + 1e-9)
        .map(|u| {
            let mut k = *knobs;
            match engine {
                Engine::Vllm => k.gpu_memory_utilization = Some(u),
                Engine::Sglang => k.mem_fraction_static = Some(u),
            }
            (format!("{flag} {u:.2}"), k)
        })
        .collect();
    let (first, last) = (steps.first()?.0.clone(), steps.last()?.0.clone());
    Some(Try {
        label: if steps.len() == 1 {
            first
        } else {
            format!("{first}-{}", &last[flag.len() + 1..])
        },
        steps,
        bound: Some(ceiling.text),
    })
}

fn serving_tries(t: &Transformer, gpu: &Gpu, engine: Engine, knobs: &Knobs) -> Vec<Try> {
    let mut tries: Vec<Try> = Vec::new();
    // One request fits the KV cache but the job does not start: vLLM's CUDA graphs, captured
    // after the KV cache, do not fit what is left (`capacity::graphs`); no graphs is the change
    // that costs no memory.
    let now = capacity::capacity(t, gpu, engine, knobs).ok();
    // A hybrid model's pool holds fewer state blocks than `max_num_seqs`: vLLM (0.20+) refuses
    // before capturing graphs; the engine's own remedy, at most as many sequences as blocks.
    if let Some(blocks) = now
        .as_ref()
        .and_then(|c| c.vllm_mamba_blocks_short(t, knobs))
        .filter(|&b| b > 0)
    {
        let mut k = *knobs;
        k.max_num_seqs = Some(blocks);
        tries.push(Try::one(format!("--max-num-seqs {blocks}"), k));
        // vLLM makes the check only when the graph mode has whole-forward graphs
        // (`has_full_cudagraphs`); piecewise graphs keep torch.compile and the graphs between
        // the attention calls, and cost less decode speed than no graphs at all (vLLM's CUDA
        // Graphs design document: piecewise graphs give "some speedup", full ones "further
        // reduce the latency"; no figure). Without vLLM's compilation a piecewise mode is
        // NONE (`engine::vllm_cudagraph_mode`), so `NONE` is what is then offered.
        let mut k = *knobs;
        let mode = if capacity::vllm_compiles(knobs) {
            capacity::CudagraphMode::Piecewise
        } else {
            capacity::CudagraphMode::None
        };
        k.cudagraph_mode = Some(mode);
        tries.push(Try::one(mode.compilation_config_flag(), k));
    }
    // A larger share of the device: what vLLM's KV-cache errors and SGLang's "Not enough
    // memory" name first; it changes no model or kernel, only what is left beside the engine.
    if let Some(tr) = now
        .as_ref()
        .and_then(|c| share_try(t, gpu, engine, knobs, c))
    {
        tries.push(tr);
    }
    let graphs_fail = engine == Engine::Vllm
        && !knobs.enforce_eager
        && now
            .as_ref()
            .is_some_and(|c| !c.starts && c.max_model_len_that_fits >= c.max_model_len);
    if graphs_fail {
        let mut k = *knobs;
        k.enforce_eager = true;
        tries.push(Try::one("--enforce-eager".into(), k));
    }
    if knobs.kv_bytes.unwrap_or(knobs.dtype_bytes) > 1 {
        let mut k = *knobs;
        k.kv_bytes = Some(1);
        let name = match engine {
            Engine::Vllm => "fp8",
            // SGLang 0.5.3 `server_args.py`: choices auto, fp8_e5m2, fp8_e4m3.
            Engine::Sglang => "fp8_e4m3",
        };
        tries.push(Try::one(format!("--kv-cache-dtype {name}"), k));
    }
    if knobs.quantization == Quantization::None
        && t.blocks.storage.quant == vram_model::blocks::Quant::None
    {
        let mut k = *knobs;
        k.quantization = Quantization::Fp8;
        tries.push(Try::one("--quantization fp8".into(), k));
    }
    for tp in [2, 4, 8] {
        if tp > knobs.tp && t.blocks.typical().heads % tp == 0 {
            let mut k = *knobs;
            k.tp = tp;
            tries.push(Try::one(format!("--tensor-parallel-size {tp}"), k));
        }
    }
    for pp in [2, 4] {
        if pp > knobs.pp && pp <= t.layers() {
            let mut k = *knobs;
            k.pp = pp;
            tries.push(Try::one(format!("--pipeline-parallel-size {pp}"), k));
        }
    }
    tries
}
