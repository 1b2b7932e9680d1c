"""Runs SGLang's own get_rope (its layers/rotary_embedding.py, or from 0.5.10 the
layers/rotary_embedding/ folder) on the CPU and prints the bytes of the cos/sin buffers each class
keeps. argv: cases.json, the file or folder, 'cuda' or 'rocm' (which branch of the module's
platform checks to take; the stubs answer them)."""
import sys, json, types, importlib.abc, importlib.machinery, importlib.util, os, functools
import contextlib, io
import torch, torch.nn as nn

cases_path, src, platform = sys.argv[1], sys.argv[2], sys.argv[3]
cuda = platform == "cuda"

def module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__path__ = []
    sys.modules[name] = m
    return m

class CustomOp(nn.Module):
    def __init__(self, *a, **k):
        super().__init__()
    def forward(self, *a, **k):
        return self.forward_native(*a, **k)

def false(*a, **k):
    return False

class _Utils(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return false
utils = _Utils("sglang.srt.utils")
utils.__path__ = []
utils.is_cuda = lambda: cuda
utils.is_cuda_available = lambda: cuda
utils.is_hip = lambda: not cuda
for name in ["sglang", "sglang.srt", "sglang.srt.layers"]:
    module(name)
sys.modules["sglang.srt.utils"] = utils
module("sglang.srt.custom_op", CustomOp=CustomOp)
module("sglang.srt.layers.custom_op_util", register_custom_op=lambda *a, **k: (lambda c: c))
module("sgl_kernel", apply_rope_with_cos_sin_cache_inplace=None, FusedSetKVBufferArg=None)
for name in ["vllm", "vllm.model_executor"]:
    module(name)
module("vllm.model_executor.custom_op", CustomOp=CustomOp)
module("vllm._custom_ops", rotary_embedding=None)

class _Any:
    """Whatever a stand-in module is asked for: infrastructure the rotary classes import but
    these checks never call (server arguments, kernels, platform ops, ...)."""
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Any()
    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Any()
    def __bool__(self):
        return False
    def __mro_entries__(self, bases):
        return (nn.Module,)

class _AnyModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Any()

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any sglang.* (or sgl_kernel.*) module the release imports and the stubs do not give is an
    empty stand-in, unless it is part of the rotary folder itself."""
    def find_spec(self, name, path, target=None):
        if not (name.startswith("sglang.") or name.startswith("sgl_kernel.")):
            return None
        if name.startswith("sglang.srt.layers.rotary_embedding."):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = _AnyModule(spec.name)
        m.__path__ = []
        return m
    def exec_module(self, m):
        pass
sys.meta_path.append(_Finder())

class _ServerArgs:
    """The default server arguments: every option unset (`rl_on_policy_target` among them)."""
    def __getattr__(self, n):
        return None
module("sglang.srt.server_args", get_global_server_args=lambda: _ServerArgs(),
       get_server_args=lambda: _ServerArgs())
# From 0.5.16 the same option is read through the runtime context; no role is published.
class _Exec:
    deterministic = _ServerArgs()
module("sglang.srt.runtime_context", publish_role=lambda: None, get_exec=lambda: _Exec(),
       get_server_args=lambda: _ServerArgs())

if os.path.isdir(src):
    spec = importlib.util.spec_from_file_location(
        "sglang.srt.layers.rotary_embedding", os.path.join(src, "__init__.py"),
        submodule_search_locations=[src])
else:
    spec = importlib.util.spec_from_file_location("sglang.srt.layers.rotary_embedding", src)
rope = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rope
spec.loader.exec_module(rope)
# DeepSeek's class builds its tables on `device="cuda"` by default: the CPU stands in.
if os.path.isdir(src):  # the folder keeps the class in rope_variant.py (0.5.10 to 0.5.23)
    ds = importlib.import_module(spec.name + ".rope_variant").DeepseekScalingRotaryEmbedding
else:
    ds = rope.DeepseekScalingRotaryEmbedding
if "device" in ds.__init__.__code__.co_varnames:
    ds.__init__ = functools.partialmethod(ds.__init__, device="cpu")

out = []
for c in json.load(open(cases_path)):
    p = dict(c["rope"]) if c["rope"] is not None else None
    head = c["head_size"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            emb = rope.get_rope(head, head, c["max_position"], 10000, is_neox_style=c.get("neox", True),
                                rope_scaling=p, dtype=torch.bfloat16)
    except Exception as e:
        out.append({"name": c["name"], "error": f"{type(e).__name__}: {e}"})
        continue
    bufs = {n: (list(b.shape), str(b.dtype).replace("torch.", ""), b.numel() * b.element_size())
            for n, b in emb.named_buffers()}
    out.append({"name": c["name"], "class": type(emb).__name__, "buffers": bufs,
                "bytes": sum(v[2] for v in bufs.values())})
print(json.dumps(out, indent=1))
