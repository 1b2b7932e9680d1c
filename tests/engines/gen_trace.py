"""Every allocation of a transformers 5.24 `generate` call, as a memory-snapshot trace (issue 33).

`python gen_trace.py CONFIG BATCH PROMPT NEW OUT.pickle [--attention A] [--build fp32]`
builds the model from a config.json on the meta device (no memory, no compute) the way
`measure2.py` does (`from_config(dtype=bf16)`, or `--build fp32`: `from_config(dtype=fp32)`
then `.to(torch.bfloat16)`), and runs what `generate` runs on a GPU: a warm-up call (prompt 32),
then the measured one: the prefill forward (`use_cache=True`, `logits_to_keep=1`, grouped_mm
experts) and the fp32 copy of the last logits, then `NEW - 1` decode forwards inside
`_optimize_model_for_decode` (grouped_mm experts switched to batched_mm, as on any device but
the CPU), with a `DynamicCache`. A `TorchDispatchMode` follows every storage an operator makes
until Python drops it; the build's parameters are followed from their creation.

The storages' births and deaths go out as a `torch.cuda.memory._dump_snapshot`-shaped pickle
(`device_traces` of `alloc`/`free_requested`; a `snapshot` entry marks the peak reset before
the measured call), for `vram replay --policy pytorch` to run through the caching allocator.
`scaled_dot_product_attention` allocates only its output, as the fused kernels do.
"""
import argparse
import json
import pickle
import weakref

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

NO_STORAGE = {"t", "view", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze",
              "_unsafe_view", "reshape", "permute", "split", "split_with_sizes", "alias",
              "as_strided", "detach", "unbind", "narrow", "chunk", "view_as_real", "view_as_complex",
              "_reshape_alias", "diagonal", "unfold", "movedim", "lift_fresh"}


class Trace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.events = []
        self.next_addr = 1 << 40
        self.live = {}
        self.cur = 0
        self.peak = 0

    def mark(self):
        self.events.append({"action": "snapshot", "addr": 0, "size": 0})
        self.peak = self.cur

    def follow(self, st, what=""):
        key = id(st)
        n = st.nbytes()
        if n == 0 or key in self.live:
            return
        addr = self.next_addr
        self.next_addr += (n + 511) // 512 * 512 + 512
        self.live[key] = (addr, n)
        self.cur += n
        self.peak = max(self.peak, self.cur)
        self.events.append({"action": "alloc", "addr": addr, "size": n, "op": what})

        def gone(key=key):
            a, m = self.live.pop(key)
            self.cur -= m
            self.events.append({"action": "free_requested", "addr": a, "size": m})

        weakref.finalize(st, gone)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in NO_STORAGE:
            return out
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(o, torch.Tensor):
                self.follow(o.untyped_storage(), "%s %s %s" % (
                    func.overloadpacket.__name__, tuple(o.shape), str(o.dtype)[6:]))
        return out


def fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


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
    torch.nn.functional.scaled_dot_product_attention = fused_sdpa
    raw = json.load(open(a.config))
    raw.pop("quantization_config", None)
    cfg = transformers.AutoConfig.for_model(**raw)
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
    trace = [dict(e, stream=0, time_us=i) for i, e in enumerate(mode.events)]
    with open(a.out, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [trace]}, f)
    print(json.dumps({"config": a.config, "weights_bytes": weights, "peak_bytes": mode.peak,
                      "events": len(trace)}))


if __name__ == "__main__":
    main()
