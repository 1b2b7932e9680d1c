//! How long a full search takes. Target: under 1 s for a 1T-parameter model on 3072 GPUs on a
//! 2-core machine (Calculon reports about a minute for 530B on 5128 GPUs).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vram_model::{catalog, hf};
use vram_plan::checkpoint::{optimal, Stage};
use vram_plan::cluster::Cluster;
use vram_plan::{search, Request};

fn bench(c: &mut Criterion) {
    // Megatron-LM's 1T GPT (Narayanan et al. 2021, Table 1 last row).
    let cfg = r#"{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":25600,"n_layer":128,"n_head":160}"#;
    let gpt1t = hf::parse_config(cfg, "gpt-1t").unwrap();
    let req = Request::new(
        gpt1t,
        Cluster::for_gpu("a100-80g", 3072).unwrap(),
        3072,
        2048,
    );
    c.bench_function("plan gpt-1t on 3072 x a100-80g, full search, top 10", |b| {
        b.iter(|| search(black_box(&req), &mut |_| {}).unwrap())
    });
    let mut megatron = req.clone();
    megatron.stack = vram_plan::Stack::Megatron;
    c.bench_function(
        "plan gpt-1t on 3072 x a100-80g, full search, top 10, megatron stack",
        |b| b.iter(|| search(black_box(&megatron), &mut |_| {}).unwrap()),
    );
    let mut one = req.clone();
    one.top = 1;
    c.bench_function("plan gpt-1t on 3072 x a100-80g, full search, top 1", |b| {
        b.iter(|| search(black_box(&one), &mut |_| {}).unwrap())
    });
    let l70 = Request::new(
        catalog::lookup("llama-2-70b").unwrap(),
        Cluster::for_gpu("h100-80g", 256).unwrap(),
        1024,
        4096,
    );
    c.bench_function("plan llama-2-70b on 256 x h100, top 10", |b| {
        b.iter(|| search(black_box(&l70), &mut |_| {}).unwrap())
    });
    let nofit = Request::new(
        catalog::lookup("llama-2-70b").unwrap(),
        Cluster::for_gpu("rtx-4090", 8).unwrap(),
        8,
        4096,
    );
    c.bench_function(
        "plan llama-2-70b on 8 x rtx-4090 (nothing fits, with advice)",
        |b| b.iter(|| search(black_box(&nofit), &mut |_| {}).unwrap()),
    );
    // Issue 23.7: a capacity answer (vLLM and SGLang defaults on one H100; the cheapest change
    // where it would not start) under 10 ms.
    let h100 = vram_model::gpu::lookup("h100-80g").unwrap();
    for id in ["llama-3.1-8b", "deepseek-v3", "qwen3-next-80b-a3b"] {
        let vram_model::arch::Model::Transformer(t) = catalog::lookup(id).unwrap() else {
            unreachable!()
        };
        c.bench_function(&format!("capacity {id} on an H100, vllm + sglang"), |b| {
            b.iter(|| {
                let k = vram_plan::capacity::Knobs::default();
                for engine in [
                    vram_plan::capacity::Engine::Vllm,
                    vram_plan::capacity::Engine::Sglang,
                ] {
                    let c = vram_plan::capacity::capacity(black_box(&t), h100, engine, &k);
                    if c.as_ref().is_ok_and(|c| !c.starts) {
                        black_box(vram_plan::suggest::serving(&t, h100, engine, &k));
                    }
                    black_box(c).ok();
                }
            })
        });
    }
    let chain: Vec<Stage> = (0..64u64)
        .map(|i| Stage {
            forward: 1.0 + (i % 5) as f64,
            backward: 2.0 + 2.0 * (i % 5) as f64,
            input_bytes: 1 + i % 3,
            saved_bytes: 4 + (i * 7) % 11,
            grad_bytes: 0,
            forward_tmp: 0,
            backward_tmp: 0,
        })
        .collect();
    c.bench_function("checkpoint::optimal 64 stages, 256 slots", |b| {
        b.iter(|| optimal(black_box(&chain), 200, 256).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
