"""What a transformers 5.24 training step launches per decoder layer, counted on the meta device
(issue 33, item 3).

`python train_ops.py --write` regenerates crates/vram-plan/tests/data/train_ops/counts.json,
which the Rust tests (crates/vram-plan/tests/it/train_ops.rs) hold the step-time model's
per-layer operators to; without `--write` it checks that the committed counts are still what
the pinned libraries run.

Each case is a training case of the shared H200 ground truth (`configs/`, copied from
vramkit's `h200-2026/configs`, full widths), built on the meta device in bf16 as `measure2.py`'s
`bf16` cases build it, and run once: `model(input_ids=x, labels=x).loss.backward()`. A
`TorchDispatchMode` sees every ATen operator. Views (no kernel on a GPU) and allocations
(`empty`, `new_empty`...) are left out; every other operator is one kernel. Its bytes are the
sizes of its tensor inputs and outputs (an in-place operator's output written over its input
counts both; a broadcast input counts its own size; `index_put_`'s values only), GEMMs
(`mm`, `addmm`, `bmm`, `_grouped_mm`) apart with their FLOPs. `sdpa` runs a fused-kernel
stand-in (the meta device would take the math path): one kernel forward and one backward, no
bytes counted (the model prices it by FLOPs). Forward operators are attributed to the decoder
layer whose forward runs them; backward ones to the layer whose output's gradient came last
(tensor hooks on each layer's output), so a layer's backward starts with its output gradient
and ends before the previous layer's.
"""

import collections
import json
import sys
from pathlib import Path

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "vram-plan" / "tests" / "data" / "train_ops"
H200 = ROOT / "crates" / "vram-cli" / "tests" / "data" / "h200" / "configs"

# (name, H200 config, attention, micro-batch, sequence) as measured (measured_steps_h200.csv)
CASES = [
    ("gpt-oss-20b-eager", "gpt-oss-20b-L4", "eager", 1, 2048),
    ("deepseek-v3", "deepseek-v3-L2-e64", "sdpa", 1, 2048),
]
VIEWS = {"view", "_unsafe_view", "t", "transpose", "unsqueeze", "squeeze", "slice", "select", "expand",
         "permute", "alias", "detach", "as_strided", "lift_fresh", "_reshape_alias", "split",
         "split_with_sizes", "chunk", "unbind", "narrow", "diagonal", "unflatten", "expand_as",
         "view_as", "reshape", "flatten", "movedim", "unfold"}
ALLOCATIONS = {"empty", "new_empty", "empty_like", "new_empty_strided", "empty_strided"}
GEMMS = {"mm", "addmm", "bmm", "_grouped_mm"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.phase = "fwd"
        self.where = ["outside"]
        self.ops = collections.defaultdict(lambda: {"kernels": 0, "bytes": 0, "gemm_bytes": 0,
                                                    "gemm_flops": 0})

    def add(self, kernels, nbytes=0, gemm_bytes=0, flops=0):
        e = self.ops[(self.phase, self.where[-1])]
        e["kernels"] += kernels
        e["bytes"] += nbytes
        e["gemm_bytes"] += gemm_bytes
        e["gemm_flops"] += flops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in VIEWS or name in ALLOCATIONS:
            return out
        leaves = torch.utils._pytree.tree_leaves
        ins = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        outs = [a for a in leaves(out) if isinstance(a, torch.Tensor)]
        if name in ("copy_", "fill_", "zero_"):
            ins = ins[1:]
        elif name == "index_put_":
            ins = ins[2:3]
            outs = []
        size = sum(t.numel() * t.element_size() for t in ins + outs)
        if name in GEMMS:
            a, b = args[0], args[1]
            if name == "addmm":
                a, b = args[1], args[2]
            if name == "_grouped_mm" and a.dim() == 2 and b.dim() == 2:
                flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
            else:
                flops = 2 * outs[0].numel() * a.shape[-1]
            self.add(1, 0, size, flops)
        else:
            self.add(1, size)
        return out


class FusedSdpa(torch.autograd.Function):
    """A fused attention kernel: one launch each way, its output as SDPA's."""

    mode = None

    @staticmethod
    def forward(ctx, q, k, v):
        FusedSdpa.mode.add(1)
        ctx.save_for_backward(q, k, v)
        b, h, s, _ = q.shape
        return q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)

    @staticmethod
    def backward(ctx, g):
        FusedSdpa.mode.add(1)
        q, k, v = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return FusedSdpa.apply(q, k, v)


def count(cfg_name, attention, mb, seq):
    torch.nn.functional.scaled_dot_product_attention = fused_sdpa
    # The meta device cannot read a value: no packed sequences (one row each, as measured).
    transformers.masking_utils.find_packed_sequence_indices = lambda *a, **k: None
    raw = json.loads((H200 / f"{cfg_name}.json").read_text())
    raw.pop("quantization_config", None)
    cfg = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention,
                                                              dtype=torch.bfloat16)
    model.train()
    mode = Count()
    FusedSdpa.mode = mode
    layers = model.model.layers
    idx = {id(layer): str(i) for i, layer in enumerate(layers)}

    def pre(m, args, kwargs):
        mode.where.append(idx[id(m)])
        h = args[0] if args else kwargs["hidden_states"]
        if h.requires_grad and idx[id(m)] == "0":
            h.register_hook(lambda g: mode.where.__setitem__(-1, "outside"))

    def post(m, args, kwargs, out):
        mode.where.pop()
        o = out if torch.is_tensor(out) else out[0]
        o.register_hook(lambda g, i=idx[id(m)]: mode.where.__setitem__(-1, i))

    hooks = [h for layer in layers for h in (layer.register_forward_pre_hook(pre, with_kwargs=True),
                                             layer.register_forward_hook(post, with_kwargs=True))]
    x = torch.randint(1, 1000, (mb, seq), device="meta")
    try:
        with mode:
            loss = model(input_ids=x, labels=x).loss
            mode.phase = "bwd"
            loss.backward()
    finally:
        for h in hooks:
            h.remove()
    out = collections.defaultdict(dict)
    for (phase, where), e in sorted(mode.ops.items()):
        out[where][phase] = e
    return dict(out)


def compute():
    return {"cases": {name: {"config": cfg, "attention": att, "micro_batch": mb, "seq": seq,
                             "layers": count(cfg, att, mb, seq)}
                      for name, cfg, att, mb, seq in CASES}}


def main():
    doc = compute()
    path = DATA / "counts.json"
    if "--write" in sys.argv:
        DATA.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        return
    committed = json.loads(path.read_text())
    if committed != doc:
        sys.exit("train_ops: the committed counts differ from what the libraries run (--write)")
    print("train_ops: counts match")


if __name__ == "__main__":
    main()
