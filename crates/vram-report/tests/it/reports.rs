//! The typed reports: every kind reads back from its JSON unchanged, and the fixes of issue 31
//! item 5 hold (the context search stops at the engines' limit, gpt-oss says what runs).

use vram_model::setup::Attention;
use vram_report::request::{FinetuneRequest, StepRequest};
use vram_report::Report;

fn inference() -> StepRequest {
    StepRequest {
        inference: true,
        ..StepRequest::default()
    }
}

#[test]
fn every_report_reads_back_from_its_json() {
    let mut reports = vec![
        crate::estimate(
            "llama-3-8b",
            "h100-80g",
            StepRequest::default(),
            FinetuneRequest::default(),
            true,
        ),
        crate::estimate(
            "llama-3-8b",
            "rtx-4090",
            inference(),
            FinetuneRequest::default(),
            false,
        ),
        crate::estimate(
            "resnet-50",
            "h100-80g",
            StepRequest::default(),
            FinetuneRequest::default(),
            false,
        ),
        crate::estimate(
            "qwen3-0.6b",
            "rtx-4090",
            StepRequest::default(),
            FinetuneRequest {
                method: vram_model::finetune::step::Method::Qlora,
                ..FinetuneRequest::default()
            },
            false,
        ),
    ];
    let plan = {
        let model = vram_model::catalog::lookup("gpt2").unwrap();
        let cluster = vram_plan::cluster::Cluster::for_gpu("a100-80g", 8).unwrap();
        let req = vram_plan::Request::new(model, cluster, 64, 1024);
        vram_report::plan::plan(&req, &mut |_| {}).unwrap()
    };
    reports.push(Report::Plan(Box::new(plan)));
    // The reports of batch, checkpoint and replay: each holds the library's own result types
    // (`Batches`, `DeviceBudget`, `Stage`, `Op`, `PolicyResult`), which read back as well.
    let model = vram_model::catalog::lookup("gpt2").unwrap();
    let gpu = vram_model::gpu::lookup("h100-80g").unwrap();
    let setup = StepRequest::default().setup(&model, Some(gpu)).unwrap();
    let b = vram_report::batch::batch(&model, &setup, gpu, &[100, 700, 1024, 30], None).unwrap();
    assert_eq!(
        b.batches
            .batches
            .iter()
            .map(|x| x.indices.len())
            .sum::<usize>(),
        4
    );
    reports.push(Report::Batch(Box::new(b)));
    let c = vram_report::checkpoint::checkpoint(&model, &setup, gpu, None, None).unwrap();
    assert!(c.candidates.len() >= 3 && c.recommended_ops.is_some());
    reports.push(Report::Checkpoint(Box::new(c)));
    let snap = vram_alloc::Snapshot::from_pickle(
        &vram_report::trace::snapshot(
            &model,
            &setup,
            &vram_model::trace::training_events_with_phases(&model, &setup, 2)
                .unwrap()
                .0,
            2,
            vram_alloc::Policy::PyTorch,
        )
        .unwrap()
        .pickle,
    )
    .unwrap();
    let req = vram_report::replay::ReplayRequest {
        configs: vram_alloc::Policy::ALL
            .iter()
            .map(|p| (vram_alloc::AllocatorConfig::new(*p), None))
            .collect(),
        capacity: Some(1 << 30),
    };
    let r = vram_report::replay::replay("gpt2.pickle", &snap, &req).unwrap();
    assert_eq!(r.policies.len(), vram_alloc::Policy::ALL.len());
    reports.push(Report::Replay(Box::new(r)));
    for r in reports {
        let json = r.to_json();
        let back = Report::from_json(&json).unwrap();
        assert!(back == r, "{} differs after a round trip", r.kind().name());
        assert_eq!(back.text(), r.text());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema_version"], vram_report::SCHEMA_VERSION);
        assert_eq!(v["kind"], r.kind().name());
    }
}

/// llama-3-8b's config allows 8,192 positions (no rope scaling): the search reported 256,528
/// before it stopped there.
#[test]
fn the_context_search_stops_at_the_models_positions() {
    let Report::Estimate(r) = crate::estimate(
        "llama-3-8b",
        "h100-80g",
        inference(),
        FinetuneRequest::default(),
        false,
    ) else {
        unreachable!()
    };
    assert_eq!(r.max_context, Some(Some(8192)));
    let limit = r.max_context_limit.as_ref().unwrap();
    assert_eq!(limit.tokens, 8192);
    assert!(
        r.fit_lines()
            .iter()
            .any(|l| l.starts_with("longest context at batch 1: 8192 (where the search stops")),
        "{:?}",
        r.fit_lines()
    );
    // Where memory runs out first, the search finds the length below the limit.
    let Report::Estimate(small) = crate::estimate(
        "llama-3-8b",
        "rtx-4090",
        StepRequest {
            batch: 16,
            ..inference()
        },
        FinetuneRequest::default(),
        false,
    ) else {
        unreachable!()
    };
    let c = small.max_context.flatten().unwrap();
    assert!(c < 8192, "{c}");
    assert!(!small
        .fit_lines()
        .iter()
        .any(|l| l.contains("where the search stops")));
}

/// A config whose rope scaling stretches its positions: the estimate's limit is the length
/// `vram capacity` derives from it (vLLM 0.11's rule), the same figure.
#[test]
fn the_context_limit_is_the_length_capacity_derives() {
    let text = vram_model::catalog::config_text("qwen2-7b").unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(text).unwrap();
    cfg["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 4.0});
    let text = cfg.to_string();
    let model = vram_model::hf::parse_config(&text, "qwen2-7b-x4").unwrap();
    let positions = match &model {
        vram_model::arch::Model::Transformer(t) => t.max_positions(),
        _ => unreachable!(),
    };
    let req = vram_report::estimate::EstimateRequest {
        step: StepRequest {
            context: Some(1024),
            ..inference()
        },
        finetune: FinetuneRequest::default(),
        gpu: vram_model::gpu::lookup("h200").unwrap(),
        timeline: false,
        dequantized: false,
        kernels: Default::default(),
    };
    let input = vram_report::estimate::ModelInput {
        model: model.clone(),
        config: Some(&text),
        checkpoint_params: None,
        checkpoint_place: None,
    };
    let Report::Estimate(r) = vram_report::estimate::estimate(&input, &req).unwrap() else {
        unreachable!()
    };
    let limit = r.max_context_limit.unwrap();
    assert_eq!(limit.tokens, positions * 4);
    assert!(limit.source.contains("rope scaling"), "{}", limit.source);
    let cap = vram_report::capacity::capacity(
        &input,
        true,
        &vram_report::capacity::CapacityRequest {
            engine: vram_plan::capacity::Engine::Vllm,
            engine_version: None,
            gpu: vram_model::gpu::lookup("h200").unwrap(),
            gpu_memory_utilization: None,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_cache_dtype: vram_report::capacity::KvCacheDtype::Auto,
            tensor_parallel_size: 1,
            pipeline_parallel_size: 1,
            data_parallel_size: 1,
            enable_expert_parallel: false,
            ep_size: None,
            enable_dp_attention: false,
            vllm_use_v1: None,
            vllm_use_v2_model_runner: None,
            flashinfer_sampler: false,
            cudagraph_mode: None,
            compilation_mode: None,
            optimization_level: None,
            attention_backend: None,
            interconnect: None,
            enforce_eager: false,
            driver: None,
            block_size: None,
            weights: None,
            dtype: vram_report::capacity::Dtype::Auto,
            mem_fraction_static: None,
            max_total_tokens: None,
            chunked_prefill_size: None,
            cuda_graph_max_bs: None,
        },
    )
    .unwrap();
    assert_eq!(cap.capacity.max_model_len, limit.tokens);
    assert!(r.max_context.flatten().unwrap() <= limit.tokens);
}

/// gpt-oss's attention layers have sinks, which transformers 5.24 runs only eagerly: the setup
/// line says eager, and asking for SDPA changes no figure.
#[test]
fn gpt_oss_says_its_attention_runs_eager() {
    let run = |attention| {
        let Report::Estimate(r) = crate::estimate(
            "gpt-oss-20b",
            "h100-80g",
            StepRequest {
                attention,
                context: Some(512),
                ..inference()
            },
            FinetuneRequest::default(),
            false,
        ) else {
            unreachable!()
        };
        r
    };
    let (sdpa, eager) = (run(Attention::Sdpa), run(Attention::Eager));
    for r in [&sdpa, &eager] {
        assert_eq!(r.attention_runs, Some(Attention::Eager));
        assert!(
            r.description.contains("attention eager"),
            "{}",
            r.description
        );
    }
    assert!(sdpa
        .notes
        .iter()
        .any(|n| n.contains("eager_attention_forward")));
    assert!(!eager
        .notes
        .iter()
        .any(|n| n.contains("whatever --attention says")));
    assert_eq!(
        (sdpa.peak_bytes, sdpa.total_bytes),
        (eager.peak_bytes, eager.total_bytes)
    );
    // A model with an SDPA path runs what was asked.
    let Report::Estimate(l) = crate::estimate(
        "qwen3-0.6b",
        "h100-80g",
        inference(),
        FinetuneRequest::default(),
        false,
    ) else {
        unreachable!()
    };
    assert_eq!(l.attention_runs, Some(Attention::Sdpa));
}
