//! Serving speed for `vram estimate --inference`: prefill time, decode time per token and
//! tokens/s at the estimate's batch and context, from the planner's transformers-stack time
//! model ([`vram_plan::eager::serving`]).

use vram_model::arch::Model;
use vram_model::gpu::Gpu;
use vram_model::setup::{Mode, Setup};
use vram_plan::eager::{self, EagerCalibration, Generate, Serving};

/// Serving speed of `setup` (inference) on one `gpu`: a prefill of the whole context and a
/// decode step at that context. `None` for training setups, parallel setups and models
/// without a decoder-only generate path.
pub fn of(model: &Model, gpu: &Gpu, setup: &Setup) -> Option<Serving> {
    let (Model::Transformer(t), Mode::Infer(i)) = (model, setup.mode) else {
        return None;
    };
    let p = setup.parallel;
    if p.tp * p.pp * p.dp != 1 {
        return None;
    }
    let g = Generate {
        batch: i.batch,
        prompt: i.context,
        new_tokens: 1,
        kv_bytes: i.kv_bytes,
        static_cache: false,
    };
    eager::serving(t, gpu, &EagerCalibration::default(), &g)
}

/// One line for the table.
pub fn line(s: &Serving) -> String {
    format!(
        "serving speed (transformers generate, one GPU): prefill {:.3} s, decode {:.1} ms/token ({:.1} GPU + {:.0} generate overhead), {:.0} tokens/s",
        s.prefill_s,
        s.decode_token_s * 1e3,
        s.decode_gpu_s.max(s.decode_launch_s) * 1e3,
        s.generate_overhead_s * 1e3,
        s.decode_tokens_per_s
    )
}
