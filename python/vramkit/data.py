"""Memory-aware batching for ``torch.utils.data.DataLoader``.

``MemoryAwareBatchSampler`` is the "dynamic batch loader" of the memory guides, backed by the
estimator: it packs sequences of varying length into batches whose estimated training step
fits the GPU (``vram batch``'s packing: longest first, each batch padded to its longest), and
yields them in a fresh order every epoch::

    from torch.utils.data import DataLoader
    from vramkit.data import MemoryAwareBatchSampler

    sampler = MemoryAwareBatchSampler(lengths, "llama-3-8b", gpu="h100-80g",
                                      optimizer="adam8bit", recompute="full", seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_collate)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader: ...

torch is imported when the class is first used, not when ``vramkit`` is imported; without
torch the class still works as a plain iterable of index lists.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from typing import Any, Iterator, Sequence

__all__ = ["MemoryAwareBatchSampler", "pack"]

log = logging.getLogger("vramkit")


def pack(lengths: Sequence[int], model: Any, gpu: str = "h100-80g", **setup: Any) -> dict[str, Any]:
    """Packs ``lengths`` into batches whose estimated step fits ``gpu``: ``vram batch --json``
    (``batches``: each with ``indices``, ``padded_len``, ``total_bytes``; ``too_long``: indices
    that fit not even alone; ``fill``: real over padded tokens). Keywords as
    ``vramkit.estimate`` (``micro_batch`` and ``seq`` are set per batch), plus ``max_batch``."""
    from ._api import _call, _flags, _json, _model_arg
    from ._vramkit import VramError

    values = []
    for i, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, int) and not hasattr(n, "__index__"):
            raise VramError(f"lengths: item {i + 1} `{n!r}` is not a whole number")
        values.append(str(int(n)))
    if not values:
        raise VramError("lengths: no sequence lengths")
    setup.pop("json", None)
    with tempfile.TemporaryDirectory(prefix="vramkit-") as tmp:
        path = os.path.join(tmp, "lengths.txt")
        with open(path, "w", encoding="ascii") as f:
            f.write("\n".join(values))
        with _model_arg(model) as arg:
            out = _call(["batch", arg, "--lengths", path, "--gpu", gpu, "--json", *_flags(setup)])
    return _json(out)


class _MemoryAwareBatchSampler:
    """Yields lists of dataset indices whose estimated training step fits ``gpu``.

    ``lengths[i]`` is the token length of item ``i``. ``model`` and ``setup`` are as in
    ``vramkit.estimate`` (``micro_batch`` and ``seq`` are each batch's size and padded
    length); ``max_batch`` caps the sequences per batch. The packing is computed once; each
    epoch shuffles the order of the batches and the order inside each (``shuffle=False``:
    longest batches first, as packed). The order depends only on ``seed`` and the epoch set by
    ``set_epoch``, so every data-parallel rank and every rerun sees the same batches.
    Sequences that do not fit even alone raise ``VramError``, or are left out with a warning
    when ``drop_too_long=True``.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        model: Any,
        gpu: str = "h100-80g",
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_too_long: bool = False,
        **setup: Any,
    ) -> None:
        from ._vramkit import VramError

        packed = pack(lengths, model, gpu=gpu, **setup)
        too_long = packed.get("too_long") or []
        if too_long and not drop_too_long:
            raise VramError(
                f"{len(too_long)} sequences do not fit on {gpu} even alone (first indices "
                f"{too_long[:5]}); pass drop_too_long=True to leave them out"
            )
        if too_long:
            log.warning("vramkit: leaving out %d sequences that do not fit even alone", len(too_long))
        self.batches: list[list[int]] = [list(b["indices"]) for b in packed["batches"]]
        self.padded_lengths: list[int] = [int(b["padded_len"]) for b in packed["batches"]]
        self.batch_bytes: list[int] = [int(b["total_bytes"]) for b in packed["batches"]]
        self.too_long: list[int] = list(too_long)
        self.fill: float = float(packed.get("fill", 0.0))
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order the next iteration yields."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            for b in self.batches:
                yield list(b)
            return
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        order = list(range(len(self.batches)))
        rng.shuffle(order)
        for i in order:
            b = list(self.batches[i])
            rng.shuffle(b)
            yield b

    def __len__(self) -> int:
        return len(self.batches)

    def __repr__(self) -> str:
        n = sum(len(b) for b in self.batches)
        return (
            f"MemoryAwareBatchSampler({n} sequences in {len(self.batches)} batches, "
            f"fill {self.fill:.1%}, seed {self.seed}, epoch {self.epoch})"
        )


def _make_class() -> type:
    try:
        from torch.utils.data import Sampler
    except ImportError:
        bases: tuple = ()
    else:
        bases = (Sampler,)
    ns = {k: v for k, v in _MemoryAwareBatchSampler.__dict__.items() if k not in ("__dict__", "__weakref__")}
    ns["__module__"] = __name__
    ns["__qualname__"] = "MemoryAwareBatchSampler"
    return type("MemoryAwareBatchSampler", bases or (object,), ns)


def __getattr__(name: str) -> Any:
    if name == "MemoryAwareBatchSampler":
        cls = _make_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'vramkit.data' has no attribute {name!r}")
