//! The size-to-strategy guidance of the memory guides — data parallel below 1B parameters,
//! tensor parallel at 1–10B, pipeline at 10–100B, 3D parallel plus ZeRO beyond — comes out of
//! the search, not out of rules.
//!
//! The cluster is the one that guidance was written for: DGX A100 40GB nodes (8 GPUs,
//! NVSwitch, 8 × 200 Gb/s InfiniBand; Narayanan et al. 2021 and the ZeRO paper's era), and the
//! engine is Megatron-LM, whose optimizer sharding is ZeRO-1 (`--use-distributed-optimizer`),
//! so each search runs with ZeRO pinned to 0 and to 1 and the faster answer counts; the
//! searches price the Megatron-LM stack (`Stack::Megatron`). (Priced as Hugging Face models
//! under PyTorch eager, 7B on 64 GPUs prefers sharded data parallelism over tensor
//! parallelism, which transformers does not run natively.) On 80 GB
//! GPUs with ZeRO-3 allowed the model prefers sharded data parallelism (FSDP) up to ~100B
//! parameters; see README.

use vram_model::catalog;
use vram_model::hf;
use vram_plan::cluster::Cluster;
use vram_plan::{search, Pins, Plan, Request, Stack};

fn best_on(stack: Stack, model: vram_model::arch::Model, gpus: u64, global_batch: u64) -> Plan {
    let cluster = Cluster::for_gpu("a100-40g", gpus).unwrap();
    let mut plans = Vec::new();
    for zero in [0, 1] {
        let mut req = Request::new(model.clone(), cluster, global_batch, 2048);
        req.stack = stack;
        req.pins = Pins {
            zero: Some(zero),
            ..Pins::default()
        };
        req.top = 1;
        plans.extend(search(&req, &mut |_| {}).unwrap().plans);
    }
    plans
        .into_iter()
        .min_by(|a, b| a.step_time_s.total_cmp(&b.step_time_s))
        .unwrap()
}

fn best(model: vram_model::arch::Model, gpus: u64, global_batch: u64) -> Plan {
    best_on(Stack::Megatron, model, gpus, global_batch)
}

#[test]
fn below_1b_data_parallel() {
    // gpt2-medium: 354,823,168 parameters (HF config), one node.
    let p = best(catalog::lookup("gpt2-medium").unwrap(), 8, 256);
    assert_eq!((p.tp, p.pp, p.dp), (1, 1, 8), "{}", p.label());
}

#[test]
fn from_1b_to_10b_tensor_parallel() {
    // Llama-2-7B (6.74B parameters) on 8 nodes.
    let p = best(catalog::lookup("llama-2-7b").unwrap(), 64, 512);
    assert!(p.tp > 1 && p.pp == 1, "{}", p.label());
}

#[test]
fn from_10b_to_100b_pipeline() {
    // Llama-2-70B on 32 nodes.
    let p = best(catalog::lookup("llama-2-70b").unwrap(), 256, 1024);
    assert!(p.pp > 1, "{}", p.label());
}

#[test]
fn beyond_100b_3d_and_zero() {
    // Megatron-LM's 1T GPT (Table 1 last row's shape) on 384 nodes.
    let cfg = r#"{"model_type":"gpt2","vocab_size":51200,"n_positions":2048,"n_embd":25600,"n_layer":128,"n_head":160}"#;
    let p = best(hf::parse_config(cfg, "gpt-1t").unwrap(), 3072, 3072);
    assert!(
        p.tp > 1 && p.pp > 1 && p.dp > 1 && p.zero_stage >= 1,
        "{}",
        p.label()
    );
}
