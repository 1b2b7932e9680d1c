//! A model's notes: what reading it found and how a step holds its stored weights. Every report
//! that describes a model carries them in its `notes` field, and every output prints them the
//! same way: the text's `note:` lines ([`lines`]) and the page's Notes list (`html`), both from
//! that field.

use vram_model::arch::{Model, Transformer};
use vram_model::blocks::Quant;
use vram_model::gpu::Gpu;
use vram_model::setup::Kernels;

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
        Quant::Fp8Block { bn, bk, .. } => format!("fp8 {bn}x{bk} blocks + fp32 scales"),
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
