"""Every allocation of a transformers 5.24 `generate` call, as a memory-snapshot trace (issue 33).

`python gen_trace.py CONFIG BATCH PROMPT NEW OUT.pickle [--attention A] [--build fp32]`
builds the model from a config.json on the meta device (no memory, no compute) the way
`measure2.py` does (`from_config(dtype=bf16)`, or `--build fp32`: `from_config(dtype=fp32)`
then `.to(torch.bfloat16)`), and runs what `generate` runs on a GPU: a warm-up call (prompt 32),
then the measured one: the prefill forward (`use_cache=True`, `logits_to_keep=1`, grouped_mm
experts) and the fp32 copy of the last logits, then `NEW - 1` decode forwards inside
`_optimize_model_for_decode` (grouped_mm experts switched to batched_mm, as on any device but
the CPU), with a `DynamicCache`. A `TorchDispatchMode` follows every storage an operator makes
until Python drops it (`tracker.Trace`); the build's parameters are followed from their creation.

The storages' births and deaths go out as a `torch.cuda.memory._dump_snapshot`-shaped pickle
(`device_traces` of `alloc`/`free_requested`; a `snapshot` entry marks the peak reset before
the measured call), for `vram replay --policy pytorch` to run through the caching allocator.
`scaled_dot_product_attention` allocates only its output, as the fused kernels do.
"""
import argparse
import json
import pickle

import torch
import transformers

from tracker import Trace, meta_config, output_only_sdpa


def one_generate(model, ids, new):
    """`GenerationMixin._sample`'s tensors: prefill, then decode under the experts switch."""
    cache = transformers.DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
    del out
    tok = logits.argmax(-1)[:, None]
    del logits
    impl = model.get_experts_implementation()
    if "grouped_mm" in impl.values():
        model.set_experts_implementation({k: "batched_mm" if v == "grouped_mm" else v
                                          for k, v in impl.items()})
    for _ in range(new - 1):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
        del out
        tok = logits.argmax(-1)[:, None]
        del logits
    model.set_experts_implementation(impl)
    del cache, tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("batch", type=int)
    ap.add_argument("prompt", type=int)
    ap.add_argument("new", type=int)
    ap.add_argument("out")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--build", default="native", choices=["native", "fp32"])
    ap.add_argument("--no-warmup", action="store_true")
    a = ap.parse_args()
    torch.nn.functional.scaled_dot_product_attention = output_only_sdpa
    cfg = meta_config(a.config)
    mode = Trace()
    with torch.no_grad(), mode:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                cfg, attn_implementation=a.attention,
                dtype=torch.float32 if a.build == "fp32" else torch.bfloat16)
        if a.build == "fp32":
            model = model.to(torch.bfloat16)
        model.eval()
        weights = mode.cur
        x = torch.randint(1, 1000, (a.batch, a.prompt), device="meta")
        if not a.no_warmup:
            one_generate(model, x[:, : min(a.prompt, 32)], a.new)
        mode.mark()
        one_generate(model, x, a.new)
    with open(a.out, "wb") as f:
        pickle.dump(mode.snapshot(), f)
    print(json.dumps({"config": a.config, "weights_bytes": weights, "peak_bytes": mode.peak,
                      "events": len(mode.events)}))


if __name__ == "__main__":
    main()
