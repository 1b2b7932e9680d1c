"""Builds a minimal `vllm` package around a real `rotary_embedding/` folder so that its
`get_rope` runs on the CPU; the stubs are infrastructure only (op registry, logger, platform).

`eager=True` stands in for `--enforce-eager` on a CUDA machine with FlashInfer: the op registry
answers custom ops on (`VllmConfig` appends "all" to `custom_ops` when the compilation mode is
NONE, which `-O0` from `--enforce-eager` sets; read at 0.14.0, 0.19.0, 0.22.0), the platform
answers `is_cuda()`, and `has_flashinfer()` is true (from 0.19 the wheel requires
`flashinfer-cubin`; before, the Docker image installs it, or `nvcc` on the PATH does)."""
import sys, types, os, shutil, importlib

def make(version_dir, out, eager=False):
    if os.path.exists(out):
        shutil.rmtree(out)
    pkg = os.path.join(out, "vllm")
    src = os.path.join(version_dir, "vllm/model_executor/layers/rotary_embedding")
    single = os.path.join(version_dir, "vllm/model_executor/layers/rotary_embedding.py")
    dst = os.path.join(pkg, "model_executor/layers")
    os.makedirs(dst)
    if os.path.isdir(src):
        shutil.copytree(src, os.path.join(dst, "rotary_embedding"))
    else:
        shutil.copy(single, os.path.join(dst, "rotary_embedding.py"))
    files = {
        "__init__.py": "",
        "model_executor/__init__.py": "",
        "model_executor/layers/__init__.py": "",
        "model_executor/custom_op.py": f'''
EAGER = {eager}
import torch.nn as nn
class CustomOp(nn.Module):
    def __init__(self, *a, **k):
        super().__init__()
    @classmethod
    def enabled(cls):
        return EAGER
    @staticmethod
    def default_on():
        return EAGER
    @classmethod
    def register(cls, name, **kw):
        def deco(c):
            c.name = name
            return c
        return deco
    def forward(self, *a, **k):
        return self.forward_native(*a, **k)
PluggableLayer = CustomOp
''',
        "_aiter_ops.py": '''
class _R:
    def __getattr__(self, n):
        return lambda *a, **k: False
rocm_aiter_ops = _R()
''',
        "logger.py": '''
import logging
class _L(logging.Logger):
    def warning_once(self, *a, **k):
        pass
    def info_once(self, *a, **k):
        pass
    def debug_once(self, *a, **k):
        pass
def init_logger(n):
    return _L(n)
''',
        "utils/__init__.py": "def direct_register_custom_op(*a, **k):\n    pass\n",
        "utils/torch_utils.py": "def direct_register_custom_op(*a, **k):\n    pass\n",
        "utils/flashinfer.py": f"def has_flashinfer():\n    return {eager}\n",
        "platforms/__init__.py": f'''
class _P:
    device_type = "cpu"
    def is_cuda(self):
        return {eager}
    def __getattr__(self, n):
        return lambda *a, **k: False
current_platform = _P()
''',
        "triton_utils/__init__.py": "tl = None\ntriton = None\nHAS_TRITON = False\n",
        "config/__init__.py": '''
class _C:
    def __getattr__(self, n):
        return _C()
    def __call__(self, *a, **k):
        return _C()
    def __bool__(self):
        return False
class _Model:
    max_model_len = 4096
class _Vllm:
    model_config = _Model()
    def __getattr__(self, n):
        return _C()
def get_current_vllm_config():
    return _Vllm()
''',
        "_custom_ops.py": "",
    }
    for f, text in files.items():
        p = os.path.join(pkg, f)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)
