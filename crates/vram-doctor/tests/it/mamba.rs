//! vLLM's hybrid models: `max_num_seqs (N) exceeds available Mamba cache blocks (M)` (vLLM 0.23.0
//! and 0.28.0, `config/compilation.py`). The messages are batch 17's (tests/data/messages/
//! public.txt), with their sources.

use vram_doctor::serving::{explain, explain_profiled, parse, ServingCause, ServingError};
use vram_doctor::{read, Reading};

/// vllm-project/recipes#551 (fit half): the whole message, on one line.
const RECIPES_551: &str = "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 856 or increase gpu_memory_utilization.";

#[test]
fn every_layout_of_the_message_is_read_with_its_figures() {
    let cases = [
        (RECIPES_551, 1024, 856),
        // NVIDIA-AI-Blueprints/retail-shopping-assistant#95: the first sentence alone.
        (
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (524)",
            1024,
            524,
        ),
        // vllm-project/recipes#831: cut across three lines.
        (
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (939).\nEach decode sequence requires one Mamba cache block, so CUDA graph capture cannot\nproceed. Please lower max_num_seqs to at most 939 or increase gpu_memory_utilization.",
            1024,
            939,
        ),
        // vllm-project/vllm#49064 (ROCm, TP 2, the 256 default), behind the engine's log prefix.
        (
            "(EngineCore_DP0 pid=412) ERROR 05-02 10:11:12 [core.py:1021] ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (161).",
            256,
            161,
        ),
    ];
    for (text, n, m) in cases {
        let e = parse(text).unwrap_or_else(|| panic!("not read: {text}"));
        assert_eq!(
            e,
            ServingError::VllmMambaBlocks {
                max_num_seqs: n,
                blocks: m
            },
            "{text}"
        );
        assert_eq!(e.kind(), "vllm-mamba-blocks");
        assert!(matches!(read(text), Ok(Reading::Serving(_))), "{text}");
    }
    // Cut before the block count: no figures to read, a refusal that names vLLM.
    let cut = "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks";
    assert_eq!(parse(cut), None);
    let Err(e) = read(cut) else {
        panic!("read a message without its block count")
    };
    assert!(e.to_string().contains("vLLM"), "{e}");
}

#[test]
fn the_answer_is_max_num_seqs_at_the_printed_block_count_first() {
    let d = explain(&parse(RECIPES_551).unwrap(), None);
    assert_eq!((d.engine, d.knob), ("vllm", "max_num_seqs"));
    // CAUSES.md: a smaller `--max-num-seqs` is `serving-profile`.
    assert_eq!(d.cause, ServingCause::Profile);
    assert_eq!(d.remedies[0].action, "--max-num-seqs 856");
    assert!(d.remedies[0].enough);
    // Without the engine's KV memory, the utilization's size is the pool's ratio alone, and the
    // message cannot show whether the GPU has it.
    assert_eq!(d.remedies[1].action, "raise --gpu-memory-utilization");
    assert!(!d.remedies[1].enough);
    assert!(
        d.remedies[1].detail.contains("1.20x"),
        "{}",
        d.remedies[1].detail
    );
    // The code's condition: no check without full CUDA graphs. The piecewise mode keeps
    // torch.compile and the piecewise graphs, so it comes before --enforce-eager, which keeps
    // neither (`config/compilation.py` `has_full_cudagraphs`, vLLM 0.20.0-0.22.1).
    assert_eq!(
        d.remedies[2].action,
        r#"--compilation-config '{"cudagraph_mode": "PIECEWISE"}'"#
    );
    // One spelling for the doctor and `vram capacity`'s changes tried (vram-plan's).
    assert_eq!(
        d.remedies[2].action,
        vram_plan::capacity::CudagraphMode::Piecewise.compilation_config_flag()
    );
    assert!(d.remedies[2].enough);
    assert!(
        d.remedies[2].detail.contains("has_full_cudagraphs")
            && d.remedies[2].detail.contains("not measured here"),
        "{}",
        d.remedies[2].detail
    );
    assert_eq!(d.remedies[3].action, "--enforce-eager");
    assert!(d.remedies[3].enough);
    assert!(d.explanation.contains("856 blocks"), "{}", d.explanation);
    assert!(d.explanation.contains("(1024)"), "{}", d.explanation);
}

/// With the engine's own lines before the error (V1's DEBUG `total_memory=`, the utilization in
/// the arguments, `Available KV cache memory`), the block's bytes follow (KV memory / M) and so
/// does the utilization that holds N blocks, or that none does. The figures are illustrative in
/// the lines' real format (no collected paste has both the profile and this error): a pool near
/// N on an H100 (vllm#49064's 969 at 0.90) and one far below it at 0.95 (recipes#831's BF16
/// 556, which the PR found no utilization rescues).
#[test]
fn with_the_kv_memory_the_utilization_is_sized_or_ruled_out() {
    let paste = |u: &str, kv: &str, n: u64, m: u64| {
        format!(
            "non-default args: {{'model': 'x', 'gpu_memory_utilization': {u}}}\n\
             worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.68GiB, total_memory=79.19GiB, cuda_memory=0.51GiB\n\
             (EngineCore pid=1) INFO [gpu_worker.py:276] Available KV cache memory: {kv} GiB\n\
             ValueError: max_num_seqs ({n}) exceeds available Mamba cache blocks ({m})."
        )
    };
    // 30 GiB held 969 blocks; 55 more blocks are 1.70 GiB: 0.90 + 1.70 / 79.19 = 0.9215 -> 0.93.
    let text = paste("0.9", "30.0", 1024, 969);
    let e = parse(&text).unwrap();
    let p = vram_doctor::profile::read(&text).expect("the profile lines");
    let d = explain_profiled(&e, Some(&p), None);
    assert_eq!(d.remedies[0].action, "--max-num-seqs 969");
    let r = &d.remedies[1];
    assert_eq!(r.action, "--gpu-memory-utilization 0.93");
    assert!(r.enough, "{}", r.detail);
    assert!(r.detail.contains("969 blocks"), "{}", r.detail);
    // 20 GiB held 556 blocks at 0.95; 468 more are 16.83 GiB, more than the 5 % left.
    let text = paste("0.95", "20.0", 1024, 556);
    let p = vram_doctor::profile::read(&text).unwrap();
    let d = explain_profiled(&parse(&text).unwrap(), Some(&p), None);
    let r = &d.remedies[1];
    assert_eq!(r.action, "raise --gpu-memory-utilization");
    assert!(!r.enough);
    assert!(
        r.detail.contains("no utilization is enough"),
        "{}",
        r.detail
    );
    assert_eq!(d.remedies[0].action, "--max-num-seqs 556");
}
