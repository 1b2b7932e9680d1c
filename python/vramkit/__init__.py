"""vramkit: where your GPU memory goes, before you run out of it.

The estimator, the planner and the allocator replay of the ``vram`` command, from Python::

    import vramkit
    e = vramkit.estimate("llama-3-8b", gpu="h100-80g", micro_batch=2, recompute="full")
    e.peak_bytes, e.fits, e.max_micro_batch, e.breakdown
    plans = vramkit.plan("llama-2-70b", gpu="h100", gpus=64, global_batch=512, seq=4096)
    c = vramkit.capacity("llama-3-8b", engine="vllm", gpu="rtx-4090", max_model_len=8192)
    print(plans[0].emit("deepspeed"))

Setup keywords are the ``vram`` command's flags with underscores (``micro_batch=4`` is
``--micro-batch 4``; ``True`` is a bare flag), so every flag works here as it does there.
Bad input raises :class:`VramError` (a ``ValueError``) with the command's one-line message.

Training-loop helpers: :func:`fit_batch_size`, :func:`oom_guard` and
``vramkit.data.MemoryAwareBatchSampler``. The allocator for PyTorch is :mod:`vramkit.torch`.
Importing vramkit imports neither torch nor transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "VramError",
    "Estimate",
    "Plan",
    "Replay",
    "Capacity",
    "estimate",
    "capacity",
    "plan",
    "plan_outcome",
    "replay",
    "fit_batch_size",
    "oom_guard",
    "models",
    "gpus",
    "cli",
    "SCHEMA_VERSION",
    "__version__",
]

# The names that need the compiled extension load on first use, so that `vramkit.torch`
# (ctypes over libvram_torch.so) also works from a source checkout that has no extension.
_LAZY = {
    "VramError": "._vramkit",
    "__version__": "._vramkit",
    "Estimate": "._api",
    "Plan": "._api",
    "Replay": "._api",
    "Capacity": "._api",
    "estimate": "._api",
    "capacity": "._api",
    "plan": "._api",
    "plan_outcome": "._api",
    "replay": "._api",
    "fit_batch_size": "._api",
    "models": "._api",
    "gpus": "._api",
    "cli": "._api",
    "SCHEMA_VERSION": "._api",
    "oom_guard": "._guard",
}

if TYPE_CHECKING:
    from ._api import (
        SCHEMA_VERSION,
        Capacity,
        Estimate,
        Plan,
        Replay,
        capacity,
        cli,
        estimate,
        fit_batch_size,
        gpus,
        models,
        plan,
        plan_outcome,
        replay,
    )
    from ._guard import oom_guard
    from ._vramkit import VramError, __version__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vramkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
