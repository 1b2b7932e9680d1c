"""Every allocation of a transformers 5.24 training step, as a memory-snapshot trace (issue 33).

`python train_trace.py CONFIG MICRO_BATCH SEQ OUT.pickle [--recompute] [--attention A]`
builds the model on the meta device in bf16 (`from_config(dtype=bf16)`, AdamW on the bf16
parameters, as `measure2.py`'s `bf16` cases) and runs `measure2.py`'s loop: one step
(`model(input_ids=x, labels=x).loss.backward()`, `opt.step()`, `zero_grad(set_to_none=True)`),
the peak reset, two more. `--recompute`: `model.gradient_checkpointing_enable()` with
transformers' defaults. Storages are followed as in `gen_trace.py` and written the same way for
`vram replay --policy pytorch`. The autograd engine sums two gradients of one tensor out of
place under a dispatch mode (`isTensorSubclassLike`), where without one it adds in place: the
trace shows that sum as one extra gradient-sized tensor for a moment.
"""
import argparse
import json
import pickle

import torch
import transformers

from gen_trace import Trace


class TrainTrace(Trace):
    """`Trace`, plus the autograd engine's in-place sum of two gradients of one tensor."""

    backward = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (self.backward and func is torch.ops.aten.add.Tensor and not kwargs
                and isinstance(args[1], torch.Tensor) and args[0].shape == args[1].shape
                and args[0].dtype == args[1].dtype and args[0].is_contiguous()
                and id(args[0].untyped_storage()) in self.live):
            # input_buffer.cpp `accumulate`: `old_var.add_(var)` without a dispatch mode.
            return args[0].add_(args[1])
        return super().__torch_dispatch__(func, types, args, kwargs)


class FusedSdpa(torch.autograd.Function):
    """A fused attention kernel's memory (what SDPA runs on an H200 in bf16): the output, as
    the `[b, h, s, d]` view of a `[b, s, h, d]` tensor, and the fp32 log-sum-exp, saved with q,
    k, v; dq, dk, dv in backward. The meta device would take the math path."""

    @staticmethod
    def forward(ctx, q, k, v):
        b, h, s, _ = q.shape
        out = q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if k.shape[1] != q.shape[1] and enable_gqa:
        pass  # the kernels read the shared heads in place
    return FusedSdpa.apply(q, k, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("mb", type=int)
    ap.add_argument("seq", type=int)
    ap.add_argument("out")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    torch.nn.functional.scaled_dot_product_attention = fused_sdpa
    # The meta device cannot read a value: no packed sequences (one row each, as measured).
    transformers.masking_utils.find_packed_sequence_indices = lambda *a, **k: None
    raw = json.load(open(a.config))
    raw.pop("quantization_config", None)
    cfg = transformers.AutoConfig.for_model(**raw)
    mode = TrainTrace()
    with mode:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                cfg, attn_implementation=a.attention, dtype=torch.bfloat16)
        model.train()
        if a.recompute:
            model.gradient_checkpointing_enable()
        # On a GPU AdamW defaults to its foreach implementation; on the meta device it would not.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        x = torch.randint(1, 1000, (a.mb, a.seq), device="meta")

        def step():
            loss = model(input_ids=x, labels=x).loss
            mode.backward = True
            loss.backward()
            mode.backward = False
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        mode.mark()
        for _ in range(a.steps):
            step()
    trace = [dict(e, stream=0, time_us=i) for i, e in enumerate(mode.events)]
    with open(a.out, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [trace]}, f)
    print(json.dumps({"config": a.config, "peak_bytes": mode.peak, "events": len(trace)}))


if __name__ == "__main__":
    main()
