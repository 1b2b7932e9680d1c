"""The peak of one Qwen2.5-VL vision block's norms and SwiGLU as vLLM 0.10.2 runs them in the
encoder profile, traced on the CPU with `tracker.Peak`: `Qwen2_5_VisionBlock.forward` and
`Qwen2_5_VisionMLP.forward` (`model_executor/models/qwen2_5_vl.py`), `RMSNorm.forward_native`
(`layers/layernorm.py`) and `SiluAndMul.forward_native` (`layers/activation.py`), each taken from
the vLLM source tree given (an unpacked sdist) and run as written; the parallel linears are plain
`nn.Linear`s at TP 1 (returning `(output, None)` as vLLM's do) and the attention is a stand-in
that returns a new `[patches, 1, hidden]` tensor (its own step is read, not traced).
`crates/vram-plan/src/capacity/encoder.rs` `qwen2_5_vl_forward_peak` counts the block's
native live set as the larger of `norm2`'s (four `[patches, h]` tensors in the model dtype, two
in float32 and the float32 variance) and the SwiGLU's (`4h + 4i` or `5h + 3i` elements) a patch,
the block input included; this prints the traced peak without the input (made before tracing)
beside that figure. An optional third argument replaces `intermediate_size` (a small one makes
`norm2` the peak).

    python tests/engines/qwen2_5_vl_block_peak.py /path/to/vllm-0.10.2 \
        crates/vram-model/data/catalog/qwen2.5-vl-7b.json
"""
import ast
import json
import sys
import textwrap
from typing import Optional, Union

import torch
import torch.nn.functional as F

from tracker import Peak


def method(path, cls, name):
    """The source of `cls.name` in the file at `path`, dedented to a plain function."""
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return textwrap.dedent(ast.get_source_segment(open(path).read(), item))
    raise SystemExit(f"{cls}.{name} not found in {path}")


def load(root):
    models = f"{root}/vllm/model_executor/models/qwen2_5_vl.py"
    layers = f"{root}/vllm/model_executor/layers"
    ns = {"torch": torch, "F": F, "Optional": Optional, "Union": Union}
    out = {}
    for key, (path, cls, name) in {
        "block": (models, "Qwen2_5_VisionBlock", "forward"),
        "mlp": (models, "Qwen2_5_VisionMLP", "forward"),
        "rms": (f"{layers}/layernorm.py", "RMSNorm", "forward_native"),
        "silu": (f"{layers}/activation.py", "SiluAndMul", "forward_native"),
    }.items():
        src = method(path, cls, name)
        exec(src, ns)
        out[key] = ns[name]
    return out


class Obj:
    """Attribute bag bound to one of the loaded functions as `__call__`."""

    def __init__(self, fn, **attrs):
        self.fn = fn
        self.__dict__.update(attrs)

    def __call__(self, *a, **kw):
        return self.fn(self, *a, **kw)


def main(root, config, intermediate=None, patches=1024):
    c = json.load(open(config))["vision_config"]
    h, i = c["hidden_size"], int(intermediate or c["intermediate_size"])
    fns = load(root)
    torch.manual_seed(0)
    dt = torch.bfloat16

    def norm():
        return Obj(fns["rms"], hidden_size=h, variance_epsilon=1e-6,
                   variance_size_override=None, has_weight=True,
                   weight=torch.nn.Parameter(torch.ones(h, dtype=dt)))

    def linear(inp, outp):
        lin = torch.nn.Linear(inp, outp, bias=True, dtype=dt)
        return lambda x: (lin(x), None)

    mlp = Obj(fns["mlp"], gate_up_proj=linear(h, 2 * i), down_proj=linear(i, h),
              act_fn=Obj(fns["silu"]))
    attn = lambda x, **kw: torch.ones_like(x) * 0.5  # one new [patches, 1, h] tensor
    block = Obj(fns["block"], norm1=norm(), norm2=norm(), attn=attn, mlp=mlp)
    x = torch.randn(patches, 1, h, dtype=dt)
    with torch.no_grad():
        mode = Peak()
        with mode:
            block(x, cu_seqlens=None, rotary_pos_emb=None)
    d = 2
    norm2 = 4 * h * d + 8 * h + 4  # model-dtype tensors, float32 sum, product and variance
    modelled = patches * (max(norm2, (4 * h + 4 * i) * d, (5 * h + 3 * i) * d) - h * d)
    print(json.dumps({"patches": patches, "traced": mode.peak, "modelled": modelled,
                      "op": mode.op_at_peak, "at_peak": mode.at_peak[:10]}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
