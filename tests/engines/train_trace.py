"""Every allocation of a transformers 5.24 training step, as a memory-snapshot trace (issue 33).

`python train_trace.py CONFIG MICRO_BATCH SEQ OUT.pickle [--recompute] [--attention A]`
builds the model on the meta device in bf16 (`from_config(dtype=bf16)`, AdamW on the bf16
parameters, as `measure2.py`'s `bf16` cases) and runs `measure2.py`'s loop: one step
(`model(input_ids=x, labels=x).loss.backward()`, `opt.step()`, `zero_grad(set_to_none=True)`),
the peak reset, two more. `--recompute`: `model.gradient_checkpointing_enable()` with
transformers' defaults. Storages are followed as in `gen_trace.py` (`tracker.Trace`) and written
the same way for `vram replay --policy pytorch`. The autograd engine sums two gradients of one
tensor out of place under a dispatch mode (`isTensorSubclassLike`), where without one it adds in
place: while `loss.backward()` runs, the tracker adds in place as the engine would.
"""
import argparse
import json
import pickle

import torch
import transformers

from tracker import Trace, fused_sdpa, meta_config


class TrainTrace(Trace):
    """`Trace`, with the autograd engine's in-place sum of two gradients of one tensor while
    `backward` is set."""

    backward = False

    def engine_sums(self):
        return self.backward


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
    cfg = meta_config(a.config)
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
    with open(a.out, "wb") as f:
        pickle.dump(mode.snapshot(), f)
    print(json.dumps({"config": a.config, "peak_bytes": mode.peak, "events": len(mode.events)}))


if __name__ == "__main__":
    main()
