//! A model's notes: what reading it found and how a step holds its stored weights. Every report
//! that describes a model carries them in its `notes` field, and every output prints them the
//! same way: the text's `note:` lines ([`lines`]) and the page's Notes list (`html`), both from
//! that field.

use vram_model::arch::{Model, Transformer};
use vram_model::blocks::Quant;
use vram_model::gpu::Gpu;
use vram_model::setup::{Kernels, Precision};

/// What reading `model` found (`Blocks::notes`): a checkpoint's safetensors headers that
/// disagree with its config.json, an unknown `model_type` read as a generic decoder, a wrapper
/// read by its text model whose towers are not counted. Empty for CNNs and bare weights.
pub fn of_model(model: &Model) -> Vec<String> {
    match model {
        Model::Transformer(t) => of_transformer(t),
        _ => Vec::new(),
    }
}

/// [`of_model`] of a transformer.
pub fn of_transformer(t: &Transformer) -> Vec<String> {
    t.blocks.notes.clone()
}

/// How a step holds `model`'s packed weights, with the kernel packages it assumes, as
/// [`crate::request::StepRequest::setup`] decides it: the packages the model's card installs
/// (`Kernels::for_storage`), on `gpu` (`None`: the H100 the setup defaults to). `None` where the
/// weights are stored unpacked.
pub fn of_storage(model: &Model, training: bool, gpu: Option<&Gpu>) -> Option<String> {
    let Model::Transformer(t) = model else {
        return None;
    };
    let s = &t.blocks.storage;
    let format = match s.quant {
        Quant::Mxfp4 => "mxfp4 experts".to_string(),
        Quant::Fp8Block { bn, bk, e8m0, .. } => format!(
            "fp8 {bn}x{bk} blocks + {} scales",
            if e8m0 { "e8m0" } else { "fp32" }
        ),
        Quant::Packed { format, .. } => format!("{} linears", format.name()),
        Quant::None | Quant::Other => return None,
    };
    let kernels = Kernels::for_storage(s);
    let load = s.load(
        training,
        kernels,
        gpu.map_or((9, 0), Gpu::capability),
        false,
    );
    let why = load.why?;
    Some(format!(
        "weights stored as {format}: held {}, {why}; kernels assumed: {} (what the model's card installs; `vram estimate --kernels` sets them)",
        if load.dequantized {
            "dequantized"
        } else {
            "as stored"
        },
        kernels.names()
    ))
}

/// The notes of a step of `model`: [`of_model`], then [`of_storage`].
pub fn of_step(model: &Model, training: bool, gpu: Option<&Gpu>) -> Vec<String> {
    let mut n = of_model(model);
    n.extend(of_storage(model, training, gpu));
    n
}

/// What a plan's stack leaves out of its search, for a job over more than one GPU: the
/// transformers stack plans no pipeline stages ([`vram_plan::Stack::pipeline`]). `None` on
/// Megatron-LM's stack, or on one GPU.
pub fn of_stack(stack: vram_plan::Stack, gpus: u64) -> Option<String> {
    (!stack.pipeline() && gpus > 1).then(|| {
        "the transformers stack plans no pipeline stages: DeepSpeed and accelerate pipeline only a converted model (DeepSpeed's PipelineModule, Megatron-LM), and transformers' own DistributedConfig(pp_size) runs the stages one after another with no micro-batch schedule and no data parallelism beside it, which vram does not plan; --stack megatron plans pipelines".to_string()
    })
}

/// How a tensor-parallel plan of the transformers stack runs, when one is listed (`tps`: the
/// listed plans' tensor-parallel degrees): a Hugging Face model is sharded by DeepSpeed's AutoTP
/// or by transformers' own tensor-parallel plan, and accelerate's config file can write neither
/// ([`vram_plan::emit::check`] holds each route's rules). `None` on Megatron-LM's stack, or with
/// no plan above tp 1.
pub fn of_tensor_parallel(
    stack: vram_plan::Stack,
    tps: impl IntoIterator<Item = u64>,
) -> Option<String> {
    (stack != vram_plan::Stack::Megatron && tps.into_iter().any(|tp| tp > 1)).then(|| {
        "tensor parallelism of a Hugging Face model runs as DeepSpeed's AutoTP (--emit deepspeed) or transformers' DistributedConfig under torchrun (--emit torchrun: ZeRO-0 or ZeRO-3, model types with a tensor-parallel plan); accelerate's config file cannot load a model sharded".to_string()
    })
}

/// What a step's request assumed where a flag was left out and the model makes it matter (the
/// precision of a float32 checkpoint, [`of_default_precision`]), and what it asks that the
/// model will not honour as the user may expect: `--seq`, or an inference's `--context` (or
/// `--prompt` plus `--new-tokens`), beyond the model's configured maximum positions. Every
/// report of a step carries it in `notes`.
pub fn of_request(req: &crate::request::StepRequest, model: &Model) -> Vec<String> {
    let mut notes: Vec<String> = of_default_precision(req, model).into_iter().collect();
    notes.extend(of_request_len(req, model));
    notes
}

/// What a step without `--precision` assumed, and why, where the model's stored dtype makes
/// the workflows' defaults differ: a float32 checkpoint
/// ([`crate::request::stored_fp32`]; [`crate::request::default_precision`] has the sources).
/// `None` where `--precision` was given, and on half checkpoints (both workflows run bf16
/// there; the output's first lines name the precision).
pub fn of_default_precision(req: &crate::request::StepRequest, model: &Model) -> Option<String> {
    if req.precision.is_some() || !crate::request::stored_fp32(model) {
        return None;
    }
    Some(if req.inference {
        "precision fp32 (no --precision): the config's dtype is float32, which transformers 5.24's from_pretrained loads as it is (its default dtype=\"auto\" reads the config), so generate holds the weights and the KV cache in fp32; --precision bf16-amp for a model loaded with dtype=torch.bfloat16".into()
    } else {
        "precision bf16-amp (no --precision): TRL 1.16.0's SFTConfig turns bf16 autocast on (bf16=True unless fp16 is set) over the weights its SFTTrainer loads in float32 (the config's dtype here, and its default for a model given by name); --precision fp32 for transformers' Trainer without bf16 (TrainingArguments' default)".into()
    })
}

/// [`of_default_precision`] for generate under a quantized `--weights` (bitsandbytes, GPTQ, AWQ,
/// FP8) on a float32 checkpoint: `from_pretrained`'s dtype="auto" still reads the config, so the
/// step computes and caches in fp32 while the quantized linears keep their storage. `None` where
/// `--precision` was given or the checkpoint is not float32.
pub fn of_default_precision_quantized(
    req: &crate::request::StepRequest,
    stored: &Model,
) -> Option<String> {
    (req.inference && req.precision.is_none() && crate::request::stored_fp32(stored)).then(|| {
        "precision fp32 (no --precision): the config's dtype is float32, which transformers 5.24's from_pretrained loads as it is (its default dtype=\"auto\" reads the config, beside the quantization config), so generate computes and holds the KV cache in fp32; --precision bf16-amp for a model loaded with dtype=torch.bfloat16".into()
    })
}

/// What a LoRA step without `--weights` assumed for its frozen base, and why, on a float32
/// checkpoint ([`crate::request::FinetuneRequest::fp32_base`]); `None` elsewhere.
/// `amp`: the step runs under autocast (`bf16-amp`/`fp16-amp`, the training default).
pub fn of_default_base(
    ft: &crate::request::FinetuneRequest,
    model: &Model,
    amp: bool,
) -> Option<String> {
    ft.fp32_base(model).then(|| {
        format!(
            "base fp32 (no --weights): the config's dtype is float32, which transformers 5.24's from_pretrained (dtype=\"auto\") and TRL 1.16.0's SFTTrainer (dtype float32 for a model given by name) both load as it is; --weights bf16 for a base loaded with dtype=torch.bfloat16. {}",
            if amp {
                "The frozen base's step runs under SFTConfig's bf16 autocast: its linears' outputs are bf16 over an fp32 residual stream, and each frozen weight is cast to a bf16 copy at every use; --precision fp32 walks it without autocast"
            } else {
                "The frozen base's step is walked in fp32 without autocast, as --precision fp32 asks"
            }
        )
    })
}

/// [`of_seq`] of the request's `--seq`, `--context` or `--prompt` + `--new-tokens`.
fn of_request_len(req: &crate::request::StepRequest, model: &Model) -> Vec<String> {
    let (flag, len) = match (req.inference, req.seq, req.context, req.prompt) {
        (false, Some(seq), _, _) => ("--seq".to_string(), seq),
        (true, _, Some(c), _) => ("--context".to_string(), c),
        (true, _, None, Some(p)) => (
            format!("--prompt {p} + --new-tokens {} =", req.new_tokens),
            p.saturating_add(req.new_tokens),
        ),
        _ => return Vec::new(),
    };
    of_seq(model, &flag, len).into_iter().collect()
}

/// `{flag} {len} exceeds the model's configured maximum of N positions`, where `len` exceeds a
/// transformer's `max_positions`; `None` within them, and for models without positions.
pub fn of_seq(model: &Model, flag: &str, len: u64) -> Option<String> {
    let Model::Transformer(t) = model else {
        return None;
    };
    (len > t.max_positions()).then(|| {
        format!(
            "{flag} {len} exceeds the model's configured maximum of {} positions",
            t.max_positions()
        )
    })
}

/// [`of_seq`] of a training step's `--seq` (`None` for an inference setup).
pub fn of_setup(model: &Model, setup: &vram_model::setup::Setup) -> Option<String> {
    match setup.mode {
        vram_model::setup::Mode::Train(tr) => of_seq(model, "--seq", tr.seq),
        vram_model::setup::Mode::Infer(_) => None,
    }
}

/// What a step in precision `p` on `gpu` would not do as priced: bf16 on a GPU without native
/// bf16 ([`Precision::runs_on`], the one rule `vram plan` and the doctor's plans follow by
/// planning fp16 AMP instead). `None` where the GPU runs `p`.
pub fn of_precision(p: Precision, gpu: &Gpu) -> Option<String> {
    (!p.runs_on(gpu)).then(|| {
        format!(
            "{} has no native bf16 (compute capability {}.{}; bf16 needs 8.0, and torch runs it there only emulated); use --precision fp16-amp or fp32",
            gpu.name, gpu.sm_major, gpu.sm_minor
        )
    })
}

/// Why a plan on `gpu` is in fp16 mixed precision where bf16 is the default elsewhere
/// ([`Precision::on`]): a GPU without native bf16 searched in fp16-amp. `None` elsewhere.
pub fn of_planned_precision(precisions: &[Precision], gpu: &Gpu) -> Option<String> {
    (!Precision::Bf16Amp.runs_on(gpu) && precisions.contains(&Precision::Fp16Amp)).then(|| {
        format!(
            "the plans' mixed precision is fp16-amp (fp16 autocast with a loss scaler; --precision fp16-amp): the {} has no native bf16 (compute capability {}.{}; bf16 needs 8.0)",
            gpu.name, gpu.sm_major, gpu.sm_minor
        )
    })
}

/// The text's lines for `notes`: `note: ...`, one a note.
pub fn lines(notes: &[String]) -> impl Iterator<Item = String> + '_ {
    notes.iter().map(|n| format!("note: {n}"))
}

/// Writes [`lines`] to `out`, one a line.
pub fn write(out: &mut impl std::fmt::Write, notes: &[String]) -> std::fmt::Result {
    for l in lines(notes) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}
