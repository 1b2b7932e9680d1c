"""Runs vLLM's own get_rope (a real rotary_embedding/ folder) on the CPU for a set of rope
parameters and prints the bytes of the cos/sin buffers each builds (bf16 model dtype)."""
import sys, json, importlib, os, contextlib, io
sys.path.insert(0, sys.argv[2])
import torch
import importlib.abc, importlib.machinery, types

class _AnyModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Any()

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any vllm.* module missing from the stub tree is an empty stand-in (infrastructure the
    rotary classes import but these checks never call: distributed groups, ...)."""
    def find_spec(self, name, path, target=None):
        if not name.startswith("vllm."):
            return None
        for f in sys.meta_path:
            if f is self:
                continue
            spec = f.find_spec(name, path, target) if hasattr(f, "find_spec") else None
            if spec is not None:
                return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = _AnyModule(spec.name)
        m.__path__ = []
        return m
    def exec_module(self, m):
        pass
sys.meta_path.append(_Finder())

class _Any:
    def __getattr__(self, n):
        return _Any()
    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Any()
import vllm.triton_utils as tu
tu.tl = _Any()
tu.triton = _Any()

# Some releases build a class's tables on `device="cuda"` (DeepSeek's at 0.6.6): the CPU stands in.
_arange = torch.arange
def _cpu_arange(*a, **k):
    if str(k.get("device", "")).startswith("cuda"):
        k["device"] = "cpu"
    return _arange(*a, **k)
torch.arange = _cpu_arange

from vllm.model_executor.layers.rotary_embedding import get_rope
import inspect
signature = inspect.signature(get_rope).parameters
new_api = "rope_parameters" in signature
# 0.12 and 0.13 take `rope_parameters` but still a positional `rotary_dim`.
takes_rotary_dim = "rotary_dim" in signature

cases = json.load(open(sys.argv[1]))
out = []
for c in cases:
    p = dict(c["rope"]) if c["rope"] is not None else None
    head = c["head_size"]
    params = dict(p or {})
    params.setdefault("rope_theta", 10000.0)
    params.setdefault("rope_type", "default")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a release prints from get_rope
            if new_api:
                emb = get_rope(head, max_position=c["max_position"],
                               is_neox_style=c.get("neox", True), rope_parameters=params,
                               dtype=torch.bfloat16, **({"rotary_dim": head} if takes_rotary_dim else {}))
            else:
                emb = get_rope(head, head, c["max_position"], 10000.0,
                               is_neox_style=c.get("neox", True), rope_scaling=p,
                               dtype=torch.bfloat16)
    except Exception as e:  # a version that does not build this class
        out.append({"name": c["name"], "error": f"{type(e).__name__}: {e}"})
        continue
    bufs = {n: (list(b.shape), str(b.dtype).replace("torch.", ""), b.numel() * b.element_size())
            for n, b in emb.named_buffers()}
    out.append({"name": c["name"], "class": type(emb).__name__, "buffers": bufs,
                "bytes": sum(v[2] for v in bufs.values())})
print(json.dumps(out, indent=1))
