//! Serving speed for `vram estimate --inference`: prefill time, decode time per token and
//! tokens/s of the estimate's `generate` call, from the planner's model of transformers'
//! `generate` ([`vram_plan::generate::serving`]).

use vram_model::arch::Model;
use vram_model::gpu::Gpu;
use vram_model::setup::{KvCache, Mode, Setup};
use vram_plan::eager::EagerCalibration;
use vram_plan::generate::{self, Generate, Kernels, Serving};

/// Serving speed of `setup` (inference) on one `gpu`: the prompt's prefill and the mean decode
/// step of the `generate` call the estimate describes (its batch, prompt, new tokens, cache
/// kind, KV dtype, precision and attention), with the user's installed `kernels`. `None` for
/// training setups, parallel setups and models without a decoder-only generate path.
pub fn of(model: &Model, gpu: &Gpu, setup: &Setup, kernels: Kernels) -> Option<Serving> {
    let (Model::Transformer(t), Mode::Infer(i)) = (model, setup.mode) else {
        return None;
    };
    let p = setup.parallel;
    if p.tp * p.pp * p.dp != 1 {
        return None;
    }
    let g = Generate {
        batch: i.batch,
        prompt: i.prompt(),
        new_tokens: i.new_tokens,
        kv_bytes: i.kv_bytes,
        static_cache: i.kv_cache == KvCache::Static,
        precision: setup.precision,
        attention: setup.attention,
        kernels,
    };
    generate::serving(t, gpu, &EagerCalibration::default(), &g)
}

/// One line for the table.
pub fn line(s: &Serving) -> String {
    let (bound, other) = if s.decode_bound == "host" {
        (
            format!(
                "host-bound: {:.0} kernels and {:.0} Python calls",
                s.decode_kernels, s.decode_calls
            ),
            format!(
                "GPU {:.1} ms for {:.2} GB",
                s.decode_gpu_s * 1e3,
                s.decode_bytes / 1e9
            ),
        )
    } else {
        (
            format!("GPU-bound: {:.2} GB read and written", s.decode_bytes / 1e9),
            format!(
                "host {:.1} ms for {:.0} kernels and {:.0} Python calls",
                s.decode_host_s * 1e3,
                s.decode_kernels,
                s.decode_calls
            ),
        )
    };
    format!(
        "serving speed (transformers generate, one GPU; {}): prefill {:.3} s, decode {:.1} ms/token ({bound}; {other}), {:.0} tokens/s",
        s.checks,
        s.prefill_s,
        s.decode_token_s * 1e3,
        s.decode_tokens_per_s
    )
}
