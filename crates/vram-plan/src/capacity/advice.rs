//! The cheapest change that makes a job start.

use super::*;

/// The cheapest change that makes a job that does not start start: fp8 KV cache, fp8
/// weights, then more tensor parallelism (dividing the heads), each tried alone at the same
/// `max_model_len`. `None` if none does (a lower `max_model_len` is always
/// [`Capacity::max_model_len_that_fits`]).
/// The cheapest change that makes a job that does not start start, each tried alone at the same
/// `max_model_len` and kept only if its own run starts: an fp8 KV cache (named as the engine
/// names it: vLLM `fp8`, SGLang `fp8_e4m3`), fp8 weights (not for a checkpoint already stored
/// quantized), more tensor parallelism (2, 4, 8, dividing the heads), then pipeline stages (2,
/// 4: another node). Only changes the job has not already made. `None` if none starts it (a lower
/// `max_model_len` is always [`Capacity::max_model_len_that_fits`]).
pub fn cheapest_change(
    t: &Transformer,
    gpu: &Gpu,
    engine: Engine,
    knobs: &Knobs,
) -> Option<(String, Capacity)> {
    let mut tries: Vec<(String, Knobs)> = Vec::new();
    if knobs.kv_bytes.unwrap_or(knobs.dtype_bytes) > 1 {
        let mut k = *knobs;
        k.kv_bytes = Some(1);
        let name = match engine {
            Engine::Vllm => "fp8",
            // SGLang 0.5.3 `server_args.py`: choices auto, fp8_e5m2, fp8_e4m3.
            Engine::Sglang => "fp8_e4m3",
        };
        tries.push((format!("--kv-cache-dtype {name}"), k));
    }
    if knobs.quantization == Quantization::None
        && t.blocks.storage.quant == vram_model::blocks::Quant::None
    {
        let mut k = *knobs;
        k.quantization = Quantization::Fp8;
        tries.push(("--quantization fp8".into(), k));
    }
    for tp in [2, 4, 8] {
        if tp > knobs.tp && t.blocks.typical().heads % tp == 0 {
            let mut k = *knobs;
            k.tp = tp;
            tries.push((format!("--tensor-parallel-size {tp}"), k));
        }
    }
    for pp in [2, 4] {
        if pp > knobs.pp && pp <= t.layers() {
            let mut k = *knobs;
            k.pp = pp;
            tries.push((format!("--pipeline-parallel-size {pp}"), k));
        }
    }
    tries.into_iter().find_map(|(flag, k)| {
        capacity(t, gpu, engine, &k)
            .ok()
            .filter(|c| c.starts)
            .map(|c| (flag, c))
    })
}
