"""How much host time a Python call of `generate`'s set-up costs against one counted in a decode step
(issue 33, item 2), on this machine's CPU. Not a test: a measurement, run by hand.

vram-plan's `generate` model prices the host as kernels x launch cost + counted Python calls x
`PY_CALL_S`, the per-call cost fitted on the H200's Llama-3.1-8B batch-1 decode. A call inside the
layers is followed by tensor operators whose argument parsing, dispatch and allocation the bare
launch loop does not include, so the fitted per-call cost carries them; the set-up before the
prefill (generation config copied and validated, processors, stopping criteria, the cache's layer
objects) is plain Python. This script measures the two on the CPU with the pinned libraries: the
tiny Llama of `generate_ops.py` at 32 layers, bf16, batch 1, prompt 40, and per `generate` call the
wall time from entry to the model's first forward (the set-up: 1704 + 34 per layer Python calls,
30 kernels and 5 syncs, counted by `generate_ops.py`'s method) and the median decode step (1332
kernels, 4796 counted calls and views). A bare loop of tiny CPU operators stands in for the launch
cost. Printed: the set-up's cost per call over the decode step's residual cost per counted call,
from the minima over 40 calls (the machine is shared: a disturbed call is slower, never faster),
and the per-call ratios' median and quartiles.

usage: python generate_host.py
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate_ops as g  # noqa: E402

LAYERS = 32
SETUP_CALLS = 1704 + 34 * LAYERS
SETUP_OPS = 30 + 5
STEP_OPS, STEP_CALLS = 1333, 4796


def main():
    torch.set_num_threads(1)
    cfg = transformers.AutoConfig.for_model(**g.tiny_config("llama-3.1-8b", LAYERS))
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                      dtype=torch.bfloat16).eval()
    x = torch.randint(1, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    marks = []
    m.model.register_forward_pre_hook(lambda mod, a: marks.append(time.perf_counter()))
    a = torch.ones(64, dtype=torch.bfloat16)

    def bare():
        t = time.perf_counter()
        for _ in range(1000):
            a * a
        return (time.perf_counter() - t) / 1000

    def gen(n):
        with torch.no_grad():
            m.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    gen(4)
    ratios, setups, steps, ops = [], [], [], []
    for _ in range(40):
        marks.clear()
        t0 = time.perf_counter()
        gen(9)
        setup = marks[0] - t0
        step = statistics.median(marks[i + 1] - marks[i] for i in range(1, len(marks) - 1))
        op = bare()
        setup_call = (setup - SETUP_OPS * op) / SETUP_CALLS
        step_call = (step - STEP_OPS * op) / STEP_CALLS
        ratios.append(setup_call / step_call)
        setups.append(setup)
        steps.append(step)
        ops.append(op)
    so, st, op = min(setups), min(steps), min(ops)
    ratio = ((so - SETUP_OPS * op) / SETUP_CALLS) / ((st - STEP_OPS * op) / STEP_CALLS)
    print(json.dumps({"setup_call_over_step_call": round(ratio, 3), "setup_ms_min": round(min(setups) * 1e3, 3), "step_ms_min": round(min(steps) * 1e3, 3),
                      "bare_op_us_min": round(min(ops) * 1e6, 3),
                      "setup_call_over_step_call_median": round(statistics.median(ratios), 3),
                      "quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)],
                      "torch": torch.__version__, "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
