"""``oom_guard``: run a training function at the largest batch size the estimate allows, and
on a real out-of-memory error free the cache and retry smaller."""

from __future__ import annotations

import functools
import gc
import logging
import sys
from typing import Any, Callable, TypeVar

__all__ = ["oom_guard"]

log = logging.getLogger("vramkit")

F = TypeVar("F", bound=Callable[..., Any])


def _is_oom(e: BaseException) -> bool:
    """Whether ``e`` is PyTorch's out-of-memory error (``torch.OutOfMemoryError``, named
    ``torch.cuda.OutOfMemoryError`` before torch 2.5). torch is not imported here: if it was
    never imported, nothing raised its error."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    classes = tuple(
        c
        for c in (getattr(torch, "OutOfMemoryError", None), getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None))
        if isinstance(c, type)
    )
    return bool(classes) and isinstance(e, classes)


def _free_cache() -> str:
    """Frees what can be freed: Python garbage, then the CUDA caching allocator's cache
    (vramkit's, when it is installed as PyTorch's allocator). Returns what it did."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return "collected garbage (no CUDA device initialised)"
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_reserved()
    return f"emptied the CUDA cache (reserved {before / 2**30:.2f} -> {after / 2**30:.2f} GiB)"


def oom_guard(
    function: Callable[..., Any] | None = None,
    *,
    model: Any = None,
    starting_batch_size: int | None = None,
    min_batch_size: int = 1,
    factor: float = 0.5,
    **setup: Any,
) -> Any:
    """Decorator in the spirit of accelerate's ``find_executable_batch_size``, starting from
    the estimate instead of a guess.

    The decorated function takes the batch size as its first argument, which the guard
    supplies::

        @vramkit.oom_guard(model="gpt2", gpu="rtx-4090", seq=1024)
        def train(batch_size, loader_args):
            ...

        train(loader_args)

    The first batch size is ``vramkit.fit_batch_size(model, **setup)`` (capped by
    ``starting_batch_size`` when both are given; ``starting_batch_size`` alone works without
    a model). When the function raises ``torch.OutOfMemoryError``, the guard collects
    garbage, empties the CUDA cache, logs (``logging.getLogger("vramkit")``) the error and
    what it freed, and calls it again with ``int(batch_size * factor)``; other exceptions pass
    through. Below ``min_batch_size`` the last out-of-memory error is raised.
    ``wrapper.batch_size`` holds the size of the last call.
    """
    from ._vramkit import VramError

    if not 0 < factor < 1:
        raise VramError(f"factor {factor} must be between 0 and 1")
    if min_batch_size < 1:
        raise VramError(f"min_batch_size {min_batch_size} must be at least 1")
    if model is None and starting_batch_size is None:
        raise VramError("oom_guard needs model= (to start from the estimate) or starting_batch_size=")
    if starting_batch_size is not None and starting_batch_size < 1:
        raise VramError(f"starting_batch_size {starting_batch_size} must be at least 1")

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = starting_batch_size
            if model is not None:
                from ._api import fit_batch_size

                fitted = fit_batch_size(model, **setup)
                if fitted < 1:
                    raise VramError(
                        "the estimate fits not even micro-batch 1; see vramkit.estimate() "
                        "for what would make it fit"
                    )
                log.info("vramkit.oom_guard: the estimate allows batch size %d", fitted)
                start = fitted if start is None else min(start, fitted)
            batch_size = int(start)  # type: ignore[arg-type]
            while True:
                wrapper.batch_size = batch_size  # type: ignore[attr-defined]
                try:
                    return fn(batch_size, *args, **kwargs)
                except Exception as e:  # noqa: BLE001 - only out-of-memory is retried
                    if not _is_oom(e):
                        raise
                    smaller = int(batch_size * factor)
                    text = str(e).strip()
                    first = text.splitlines()[0] if text else type(e).__name__
                    if smaller < min_batch_size:
                        log.error(
                            "vramkit.oom_guard: out of memory at batch size %d (%s); "
                            "not retrying below %d",
                            batch_size, first, min_batch_size,
                        )
                        raise
                # Out of the except block, the error's traceback (and the tensors its frames
                # held) is gone, so emptying the cache can return their memory.
                freed = _free_cache()
                log.warning(
                    "vramkit.oom_guard: out of memory at batch size %d (%s); %s; "
                    "retrying with batch size %d",
                    batch_size, first, freed, smaller,
                )
                batch_size = smaller

        wrapper.batch_size = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    if function is not None:
        return decorate(function)
    return decorate
