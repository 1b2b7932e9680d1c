"""The peak of what a transformers 5.24 forward allocates, on the meta device (issue 33, item 1).

`python live_peak.py CONFIG BATCH PROMPT [ATTENTION]` builds the model from a config.json on the
meta device (no memory, no compute) and runs `generate`'s prefill forward (`use_cache=True`,
`logits_to_keep=1`, no grad) under a `TorchDispatchMode` that follows every storage an operator
creates until Python drops it (`tracker.Peak`), so it prints the peak of the bytes the forward
allocates and the tensors alive at that peak, each with the operator that made it. Views make no
storage.
`scaled_dot_product_attention` is replaced by a stand-in that allocates only its output, as the
fused kernels a GPU runs do (the meta device would take the math path).

Against the H200 ground truth (2026-11-27, `max_memory_allocated()` less the weights and the
64 MiB already allocated): Qwen3-8B slice b8 × 4080 4.013 GB (measured 4.035), Qwen3.5 slice b4 ×
4080 5.739 (5.745), gpt-oss slice eager b4 × 4080 26.659 (26.661), DeepSeek-V3 slice b4 × 4080
12.215 (12.222). vram's estimate of the same figure is the one to hold to it.
"""
import json
import sys

import torch
import transformers

from tracker import Peak, meta_config, output_only_sdpa


def main():
    path, batch, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    attention = sys.argv[4] if len(sys.argv) > 4 else "sdpa"
    torch.nn.functional.scaled_dot_product_attention = output_only_sdpa
    cfg = meta_config(path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, attn_implementation=attention, dtype=torch.bfloat16).eval()
    existing = {id(t.untyped_storage()): (0, "param", (), "") for t in
                list(model.parameters()) + list(model.buffers())}
    x = torch.randint(1, 1000, (batch, prompt), device="meta")
    mode = Peak(existing)
    with torch.no_grad(), mode:
        model(input_ids=x, use_cache=True, logits_to_keep=1)
    print(json.dumps({"config": path, "batch": batch, "prompt": prompt, "attention": attention,
                      "peak_bytes": mode.peak, "at": mode.op_at_peak,
                      "alive_at_peak": [list(v) for v in mode.at_peak[:20]]}, indent=1))


if __name__ == "__main__":
    main()
