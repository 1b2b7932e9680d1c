"""vramkit inside PyTorch: GPU memory first, pinned host memory instead of out-of-memory.

Loads ``libvram_torch.so`` (the ``vram-torch`` crate), which the wheel installs inside this
package (``$VRAMKIT_LIB`` overrides it; in a source checkout, ``target/release`` of the
repository is tried too), and installs it as PyTorch's CUDA allocator::

    import vramkit.torch
    vramkit.torch.install(device_limit="8GiB", host_limit="32GiB")  # before any CUDA tensor
    ...
    print(vramkit.torch.memory_summary())
    vramkit.torch.dump_snapshot("snap.pickle")  # open at https://pytorch.org/memory_viz

PyTorch's pluggable-allocator path keeps no statistics of its own (pytorch issue 133281):
use ``vramkit.torch.memory_stats()`` / ``memory_summary()`` instead of ``torch.cuda.*``.
``vramkit_torch`` (the old import path) is an alias of this module.
Settings are the ``VRAM_*`` environment variables (see ``gpu/README.md``); the keyword
arguments of ``install``/``configure`` override them. torch is imported only by
``install`` and ``mem_pool``, so the statistics functions work without it.
"""

import ctypes
import json
import os
import pathlib

__all__ = [
    "library_path", "configure", "install", "mem_pool", "memory_stats", "memory_summary",
    "dump_snapshot", "empty_cache", "reset_peak_stats", "last_error", "VramkitError",
    "tier_of", "rebalance", "step", "planned", "enable_planned",
]

_LIB = None
_PLANNED = None


class VramkitError(RuntimeError):
    """A call into libvram_torch failed; the message is the library's last error."""


def library_path():
    """Where libvram_torch.so is loaded from."""
    env = os.environ.get("VRAMKIT_LIB")
    if env:
        return env
    here = pathlib.Path(__file__).resolve().parent
    # Inside the installed package (the wheel), then a source checkout's cargo build.
    for cand in (here / "libvram_torch.so", here.parent.parent / "target" / "release" / "libvram_torch.so"):
        if cand.exists():
            return str(cand)
    raise VramkitError(
        "libvram_torch.so not found: reinstall vramkit (`pip install vramkit`), set VRAMKIT_LIB, "
        "or build it with `cargo build --release -p vram-torch`")


def _lib():
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(library_path())
        c_ssize = ctypes.c_ssize_t
        lib.vram_malloc.argtypes = [c_ssize, ctypes.c_int, ctypes.c_void_p]
        lib.vram_malloc.restype = ctypes.c_void_p
        lib.vram_free.argtypes = [ctypes.c_void_p, c_ssize, ctypes.c_int, ctypes.c_void_p]
        lib.vram_free.restype = None
        lib.vram_init.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.vram_init.restype = ctypes.c_int
        for name in ("vram_memory_stats_json", "vram_memory_summary"):
            f = getattr(lib, name)
            f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
            f.restype = c_ssize
        lib.vram_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.vram_last_error.restype = c_ssize
        lib.vram_dump_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.vram_dump_snapshot.restype = ctypes.c_int
        lib.vram_tier_of.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.vram_tier_of.restype = ctypes.c_int
        lib.vram_step.argtypes = [ctypes.c_int]
        lib.vram_step.restype = ctypes.c_int64
        lib.vram_phase_peak.argtypes = [ctypes.c_int]
        lib.vram_phase_peak.restype = ctypes.c_int64
        lib.vram_driver_ns.argtypes = [ctypes.c_int]
        lib.vram_driver_ns.restype = ctypes.c_int64
        lib.vram_plan.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.vram_plan.restype = c_ssize
        for name in ("vram_empty_cache", "vram_reset_peak_stats"):
            f = getattr(lib, name)
            f.argtypes = [ctypes.c_int]
            f.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def _text(fn, *args):
    n = fn(*args, None, 0)
    if n < 0:
        raise VramkitError(last_error())
    buf = ctypes.create_string_buffer(n + 1)
    fn(*args, buf, n + 1)
    return buf.value.decode("utf-8")


def last_error():
    """The library's last error message ('' when none)."""
    lib = _lib()
    n = lib.vram_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.vram_last_error(buf, n + 1)
    return buf.value.decode("utf-8")


_KEYS = {
    "backend": "VRAM_BACKEND", "device_limit": "VRAM_DEVICE_LIMIT", "host_limit": "VRAM_HOST_LIMIT",
    "spill_min": "VRAM_SPILL_MIN", "managed_limit": "VRAM_MANAGED_LIMIT", "expandable": "VRAM_EXPANDABLE",
    "policy": "VRAM_POLICY", "mode": "VRAM_MODE", "history": "VRAM_HISTORY",
    "migrate": "VRAM_MIGRATE", "trim_slack": "VRAM_TRIM_SLACK",
}


def configure(device=0, **settings):
    """Settings for one device before its first allocation, e.g.
    ``configure(0, device_limit="8GiB", host_limit="32GiB")``; they override ``VRAM_*``."""
    parts = []
    for k, v in settings.items():
        if v is None:
            continue
        if k not in _KEYS:
            raise TypeError(f"unknown setting {k!r}; expected one of {sorted(_KEYS)}")
        if isinstance(v, bool):
            v = int(v)
        parts.append(f"{_KEYS[k]}={v}")
    if _lib().vram_init(int(device), ";".join(parts).encode()) != 0:
        raise VramkitError(last_error())


def _pluggable():
    import torch  # imported here: the rest of this module works without torch

    return torch.cuda.memory.CUDAPluggableAllocator(library_path(), "vram_malloc", "vram_free")


def install(devices=None, planned=None, **settings):
    """Makes vramkit PyTorch's CUDA allocator. Call before the first CUDA allocation.
    ``settings`` as in ``configure``, applied to every device in ``devices``
    (default: all visible devices).

    ``planned``: the planned host tier (``enable_planned``) on device 0; by default on when a
    device cap or a host tier is set (``device_limit``/``host_limit``, or ``VRAM_DEVICE_LIMIT``
    /``VRAM_HOST_LIMIT``) and ``VRAM_PLAN`` is not ``0``. It hooks PyTorch (module, saved-tensor
    and optimizer hooks), so the training loop does not change."""
    import torch

    if settings:
        n = torch.cuda.device_count() if devices is None else None
        for d in (range(n) if devices is None else devices):
            configure(d, **settings)
    alloc = _pluggable()
    torch.cuda.memory.change_current_allocator(alloc)
    if planned is None:
        from . import _planned

        asked = any(settings.get(k) not in (None, 0, "0", "") for k in ("device_limit", "host_limit"))
        if (asked and os.environ.get("VRAM_PLAN", "1").strip() != "0") or _planned.enabled_by_env():
            try:
                enable_planned()
            except VramkitError as e:  # e.g. PyTorch older than 2.1: the reactive tier only
                import warnings

                warnings.warn(str(e), RuntimeWarning, stacklevel=2)
    elif planned:
        enable_planned()
    return alloc


def enable_planned(device=0, chunks=None, cap=None, **options):
    """Turns on the planned host tier for ``device`` (see ``vramkit._planned``): hooks that
    record one training step, let vramkit plan which tensors live in host memory in which
    phase (and whether optimizer chunks are cheaper to update on the host), and carry the
    plan out on a copy stream from the next step on. ``cap``: device bytes to plan under
    (default: ``memory_stats()["device_limit"]``, else the device's memory); ``chunks``:
    optimizer chunks (``VRAM_PLAN_CHUNKS``, 8). Needs PyTorch 2.1 or newer; returns the
    planned tier, or raises ``VramkitError`` saying why not."""
    global _PLANNED
    from . import _planned

    ok, why = _planned.supported()
    if not ok:
        raise VramkitError(f"the planned host tier is unavailable: {why}")
    if _PLANNED is not None:
        return _PLANNED
    lib = _lib()
    if cap is None:
        limit = memory_stats(device).get("device_limit", -1)
        if limit and limit > 0:
            cap = limit
        else:
            import torch

            cap = torch.cuda.get_device_properties(device).total_memory if torch.cuda.is_available() else None
    if chunks is None:
        chunks = int(os.environ.get("VRAM_PLAN_CHUNKS", "8"))
    _PLANNED = _planned.Planned(lib, device, cap=cap, chunks=chunks, **options).install()
    return _PLANNED


def planned():
    """The planned host tier, once enabled (its ``stats``, ``answer`` and ``plan``), else None.
    ``memory_stats()["tier.plan.*"]`` shows the decision (strategy: 0 nothing moves, 1 stream
    through the device, 2 update optimizer chunks on the host; -1 no plan fits)."""
    return _PLANNED


def mem_pool(**settings):
    """A ``torch.cuda.MemPool`` whose segments come from vramkit (raw-segment mode), so that
    PyTorch's own caching allocator carves them and keeps ``torch.cuda.memory_stats()``.
    The device must be in raw mode: ``mem_pool()`` configures the current device so.
    Use ``with torch.cuda.use_mem_pool(pool): ...``."""
    import torch

    configure(torch.cuda.current_device(), mode="raw", **settings)
    return torch.cuda.MemPool(_pluggable().allocator())


def memory_stats(device=0):
    """``torch.cuda.memory_stats()``'s keys for vramkit's device tier, plus ``host.*``,
    ``managed.*``, ``raw.*``, ``num_spills``, ``num_spill_failures``, ``device_limit``..."""
    return json.loads(_text(_lib().vram_memory_stats_json, int(device)))


def memory_summary(device=0):
    """``torch.cuda.memory_summary()``'s table for vramkit, with a line per tier."""
    return _text(_lib().vram_memory_summary, int(device))


def dump_snapshot(path, device=0):
    """Writes a snapshot pickle (segments, blocks, and history when ``VRAM_HISTORY`` > 0)
    that https://pytorch.org/memory_viz opens."""
    if _lib().vram_dump_snapshot(int(device), os.fsencode(path)) != 0:
        raise VramkitError(last_error())


def empty_cache(device=0):
    """Returns cached device blocks and freed host blocks to the driver."""
    if _lib().vram_empty_cache(int(device)) != 0:
        raise VramkitError(last_error())


def reset_peak_stats(device=0):
    """Resets every peak statistic."""
    if _lib().vram_reset_peak_stats(int(device)) != 0:
        raise VramkitError(last_error())


def step(device=0):
    """Marks the end of a training step (call it after ``optimizer.step()``/``zero_grad()``).

    With a host tier (``host_limit``) and ``VRAM_MIGRATE=1`` (the default), allocations alive
    across step marks are the ones moved to host memory under pressure, at the same addresses
    (optimizer states first, then weights); at each mark, moved ones come back when the device
    has room for them plus what the last step needed above its start. Returns the bytes brought
    back. Costs nothing when nothing was moved. With the planned tier on, its optimizer hook
    marks the step itself and this call does nothing."""
    if _PLANNED is not None and _PLANNED.marked:
        _PLANNED.marked = False
        return 0
    n = _lib().vram_step(int(device))
    if n < 0:
        raise VramkitError(last_error())
    return n


_TIERS = {0: "device", 1: "host", 2: "managed", 3: "migrated"}


def tier_of(ptr, device=0):
    """Where an address from vramkit lives: 'device', 'host' (pinned, device-mapped),
    'managed', or 'migrated' (a device allocation whose pages the host tier moved to host
    memory at the same address under pressure; it comes back by itself at a ``step()`` mark
    when there is room, ``memory_stats()["host.migrated_bytes.current"]`` counts those
    pages); None when vramkit does not know it. Accepts a tensor (its ``data_ptr()``)."""
    if hasattr(ptr, "data_ptr"):
        device = ptr.device.index if ptr.device.index is not None else device
        ptr = ptr.data_ptr()
    return _TIERS.get(_lib().vram_tier_of(int(device), ptr))


def rebalance(tensors, device=0):
    """Brings spilled tensors back to the device where there is room: a tensor whose storage
    is in host memory gets a fresh copy (``t.data = t.data.clone()``; the new allocation tries
    the device first) and the host copy is freed once the stream's work is done. This is the
    safe way to move memory back — vramkit never moves an allocation behind PyTorch's back.
    ``tensors``: an iterable of tensors, or a module (its parameters, their gradients and the
    buffers). Returns how many tensors moved back to the device."""
    if hasattr(tensors, "parameters"):
        mod = tensors
        tensors = list(mod.parameters()) + [p.grad for p in mod.parameters() if p.grad is not None]
        tensors += list(mod.buffers())
    moved = 0
    for t in tensors:
        if tier_of(t, device) != "host":
            continue
        t.data = t.data.clone()
        if tier_of(t, device) == "device":
            moved += 1
    return moved
