"""What transformers' `generate` runs on the host, counted on the CPU (issue 33, item 2).

`python generate_ops.py --write` regenerates crates/vram-plan/tests/data/generate_ops/, which
the Rust tests (crates/vram-plan/tests/it/generate.rs) hold vram's host counts to; without
`--write` it checks that the committed counts are still what the pinned libraries run.

Each model is the shared H200 ground truth's config (`configs/`, copied from vramkit's
`h200-2026/configs`) shrunk to tiny widths (the layer pattern, experts' routing and every module
kept), built in bf16 with random weights, and run through `model.generate(x, max_new_tokens=n,
min_new_tokens=n, do_sample=False, pad_token_id=0)` as the H200 run did. Counted:

- at the dispatcher (a `TorchDispatchMode`), every ATen operator, split into views (no kernel on a
  GPU), host syncs (`_local_scalar_dense`, `nonzero`, ...) and the rest (one kernel launch each);
- every `nn.Module.__call__` (a global forward pre-hook);
- `generate`'s set-up (everything before the model's first forward, the GPU idle there) apart
  from the rest outside the layers;
- in a second run without the dispatch mode, every Python function call (`sys.setprofile`'s
  "call" events; hooks on the decoder layers alone mark where they are; builtin calls such as
  `dict.get` or `isinstance` cost a small fraction of a Python frame and are not counted, and a
  torch operator is counted above), inside the decoder layers and outside them, so that the Python `generate` runs around the model (inputs
  preparation, logits processors, stopping criteria, cache bookkeeping) can be measured in the
  units the layers are counted in.

One decode step is `generate(n + 1)` minus `generate(n)`; the prefill is `generate(1)`.
`_optimize_model_for_decode` switches `grouped_mm` experts to `batched_mm` for the decode loop
on every device but the CPU; the script does the same switch on the CPU, so the counts are
those of a GPU run. Everything else runs the same calls on both devices.
"""

import collections
import contextlib
import json
import sys
from pathlib import Path

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "vram-plan" / "tests" / "data" / "generate_ops"
H200 = ROOT / "crates" / "vram-cli" / "tests" / "data" / "h200" / "configs"

# (name, H200 config, attention, layers) -- layers None keeps the config's own count
CASES = [
    ("llama-3.1-8b", "llama-3.1-8b", "sdpa", 4),
    ("llama-3.1-8b-L8", "llama-3.1-8b", "sdpa", 8),
    ("qwen3-8b", "qwen3-8b-L4", "sdpa", None),
    ("qwen3-30b-a3b", "qwen3-30b-a3b-L4", "sdpa", None),
    ("gpt-oss-20b-eager", "gpt-oss-20b-L4", "eager", None),
    ("deepseek-v3", "deepseek-v3-L2-e64", "sdpa", None),
    ("qwen3.5-27b", "qwen3.5-27b-L4", "sdpa", None),
    ("gemma-3-1b", "gemma-3-1b", "sdpa", 6),
]
SHRINK = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, vocab_size=512, num_experts=8, n_routed_experts=8,
              num_local_experts=8, num_experts_per_tok=2, experts_per_token=2, n_group=2, topk_group=1,
              kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=16, shared_expert_intermediate_size=32, query_pre_attn_scalar=16)
VIEWS = {"view", "_unsafe_view", "t", "transpose", "unsqueeze", "squeeze", "slice", "select", "expand",
         "permute", "alias", "detach", "as_strided", "lift_fresh", "_reshape_alias", "split",
         "split_with_sizes", "chunk", "unbind", "narrow", "diagonal", "unflatten", "expand_as",
         "view_as", "reshape", "flatten", "movedim", "unfold"}
SYNCS = {"_local_scalar_dense", "nonzero", "item", "equal", "is_nonzero"}
BATCH, PROMPT = 2, 40


def tiny_config(cfg_name, layers):
    raw = json.loads((H200 / f"{cfg_name}.json").read_text())
    for k, v in SHRINK.items():
        if k in raw and raw[k] is not None and not (k == "head_dim" and "kv_lora_rank" in raw):
            raw[k] = v
    if "kv_lora_rank" in raw:
        raw["head_dim"] = raw["qk_rope_head_dim"]
        raw["num_key_value_heads"] = raw["num_attention_heads"]
    if raw.get("pad_token_id") is not None:
        raw["pad_token_id"] = 0
    if layers is not None:
        raw["num_hidden_layers"] = layers
        if isinstance(raw.get("layer_types"), list):
            raw["layer_types"] = raw["layer_types"][:layers]
    return raw


class Ops(TorchDispatchMode):
    def __init__(self, where):
        super().__init__()
        self.where = where
        self.ops = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.where[-1]][func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def layers_of(model):
    inner = model.model
    return inner.layers if hasattr(inner, "layers") else inner.language_model.layers


def counted(model, run):
    """Per place ("setup" before the model's first forward, "outside" after it, or the layer's
    index): ATen ops by name and module calls (one run), then Python events (a second run,
    without the dispatch mode, whose own Python would count)."""
    where = ["setup"]
    idx = {id(layer): str(i) for i, layer in enumerate(layers_of(model))}
    modules = collections.Counter()
    events = collections.Counter()

    def pre(m, *a):
        if m is model:
            where[0] = "outside"
        if id(m) in idx:
            where.append(idx[id(m)])
        modules[where[-1]] += 1

    def post(m, *a):
        if id(m) in idx:
            where.pop()

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
             torch.nn.modules.module.register_module_forward_hook(post)]
    mode = Ops(where)
    try:
        with mode:
            run()
    finally:
        for h in hooks:
            h.remove()

    def enter(m, *a):
        where.append(idx[id(m)])

    def leave(m, *a):
        where.pop()

    def first(m, *a):
        where[0] = "outside"

    def prof(frame, event, arg):
        if event == "call":
            events[where[-1]] += 1

    where[:] = ["setup"]
    hooks = [h for layer in layers_of(model)
             for h in (layer.register_forward_pre_hook(enter), layer.register_forward_hook(leave))]
    hooks.append(model.register_forward_pre_hook(first))
    try:
        sys.setprofile(prof)
        run()
    finally:
        sys.setprofile(None)
        for h in hooks:
            h.remove()
    return mode.ops, modules, events


def summary(ops, modules, events):
    out = {}
    for k in set(ops) | set(modules) | set(events):
        c = ops.get(k, collections.Counter())
        views = sum(n for o, n in c.items() if o in VIEWS)
        syncs = sum(n for o, n in c.items() if o in SYNCS)
        out[k] = {"kernels": sum(c.values()) - views - syncs, "views": views, "syncs": syncs,
                  "modules": modules.get(k, 0), "py_calls": events.get(k, 0)}
    return out


def minus(b, a):
    return {k: {f: v - a.get(k, {}).get(f, 0) for f, v in b[k].items()} for k in b}


def measure(name, cfg_name, attention, layers):
    raw = tiny_config(cfg_name, layers)
    cfg = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention,
                                                          dtype=torch.bfloat16).eval()
    impl = model.get_experts_implementation()

    @contextlib.contextmanager
    def as_on_a_gpu():
        switch = "grouped_mm" in impl.values()
        if switch:
            model.set_experts_implementation(
                {k: "batched_mm" if v == "grouped_mm" else v for k, v in impl.items()})
        try:
            yield
        finally:
            if switch:
                model.set_experts_implementation(impl)

    model._optimize_model_for_decode = as_on_a_gpu
    x = torch.randint(1, cfg.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))

    def gen(n):
        with torch.no_grad():
            model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    gen(3)
    four = summary(*counted(model, lambda: gen(4)))
    five = summary(*counted(model, lambda: gen(5)))
    one = summary(*counted(model, lambda: gen(1)))
    return raw, {"attention": attention, "batch": BATCH, "prompt": PROMPT,
                 "layers": len(layers_of(model)), "decode_step": minus(five, four), "generate_1": one}


def compute():
    """The counts document and each case's tiny config, as the pinned libraries give them."""
    doc = {"source": f"tests/engines/generate_ops.py: transformers {transformers.__version__}, "
                     f"torch {torch.__version__.split('+')[0]}, CPU, bf16", "cases": {}}
    configs = {}
    for name, cfg_name, attention, layers in CASES:
        raw, counts = measure(name, cfg_name, attention, layers)
        doc["cases"][name] = counts
        configs[name] = raw
    return doc, configs


def main():
    write = "--write" in sys.argv
    doc, configs = compute()
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if write:
        for name, raw in configs.items():
            (DATA / f"{name}.json").write_text(json.dumps(raw, indent=1) + "\n")
        (DATA / "counts.json").write_text(text)
    else:
        committed = (DATA / "counts.json").read_text()
        assert committed == text, "the committed counts differ from what the libraries run"


if __name__ == "__main__":
    main()
