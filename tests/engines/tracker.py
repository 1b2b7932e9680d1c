"""One storage tracker for the engine scripts that follow a step's memory on the meta device.

`live_peak.py` (a prefill's peak), `qlora_peak.py` (a LoRA/QLoRA step's peak), `gen_trace.py` and
`train_trace.py` (every allocation of `generate` and of a training step, as a snapshot trace) run
the real transformers 5.24 / PEFT / bitsandbytes modules on the meta device under a
`TorchDispatchMode` that follows every storage an operator makes until Python drops it. The
loop is here once: `Storages` (births, deaths, bytes alive, the autograd engine's in-place
gradient sum), `Peak` (the peak and the tensors alive at it) and `Trace` (births and deaths as
snapshot events). The stand-ins for the kernels a GPU runs, which the meta device would replace
by its math path, are here too.
"""
import json
import weakref

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

# Operators whose outputs are views of their inputs' storages: they make no storage.
VIEWS = frozenset({
    "t", "view", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze", "_unsafe_view",
    "reshape", "permute", "split", "split_with_sizes", "alias", "as_strided", "detach", "unbind",
    "narrow", "chunk", "_to_copy_view", "view_as_real", "view_as_complex", "_reshape_alias",
    "diagonal", "unfold", "movedim", "lift_fresh"})


class Storages(TorchDispatchMode):
    """Follows every storage an operator makes until Python drops it: `live` (by the storage's
    id: its record, bytes first), `cur` (bytes alive) and `peak`. A subclass records what it needs
    (`record`), hears of each birth (`born`) and death (`died`), and says when the autograd
    engine is summing gradients (`engine_sums`)."""

    def __init__(self, existing=None):
        super().__init__()
        self.live = dict(existing or {})
        self.cur = 0
        self.peak = 0

    def record(self, n, name, o):
        """What `live` keeps of a new storage of `n` bytes made by operator `name` as `o`."""
        return (n,)

    def born(self, n, name, o):
        """A storage of `n` bytes was made by operator `name` as `o` (`cur` counts it)."""
        self.peak = max(self.peak, self.cur)

    def died(self, rec):
        """The storage recorded as `rec` was dropped (`cur` no longer counts it)."""

    def engine_sums(self):
        """Whether the autograd engine's backward is running now (no subclass: never)."""
        return False

    def follow(self, o, name):
        st = o.untyped_storage()
        key = id(st)
        n = st.nbytes()
        if n == 0 or key in self.live:
            return
        self.live[key] = self.record(n, name, o)
        self.cur += n
        weakref.finalize(st, self.gone, key)
        self.born(n, name, o)

    def gone(self, key):
        rec = self.live.pop(key, None)
        if rec is not None:
            self.cur -= rec[0]
            self.died(rec)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (self.engine_sums() and func is torch.ops.aten.add.Tensor and not kwargs
                and isinstance(args[1], torch.Tensor) and args[0].shape == args[1].shape
                and args[0].dtype == args[1].dtype and args[0].is_contiguous()
                and id(args[0].untyped_storage()) in self.live):
            # The autograd engine sums two gradients of one input in place into the first
            # (input_buffer.cpp `accumulate`: `old_var.add_(var)`) unless a dispatch mode is on
            # (`isTensorSubclassLike`), as this one is: do what it does without the mode.
            return args[0].add_(args[1])
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in VIEWS:
            return out
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(o, torch.Tensor):
                self.follow(o, name)
        return out


class Peak(Storages):
    """`Storages` with the tensors alive at the peak (bytes, operator, shape, dtype; largest
    first), the operator that made it and the `phase` (a label the caller sets) it fell in."""

    def __init__(self, existing=None):
        super().__init__(existing)
        self.at_peak = []
        self.op_at_peak = None
        self.phase = ""
        self.phase_at_peak = ""

    def record(self, n, name, o):
        return (n, name, tuple(o.shape), str(o.dtype).replace("torch.", ""))

    def born(self, n, name, o):
        self.bump(name)

    def bump(self, name, extra=0, extra_desc=None):
        """A new peak if `cur` and `extra` more bytes (described by `extra_desc`) pass it."""
        if self.cur + extra > self.peak:
            self.peak = self.cur + extra
            self.op_at_peak = name
            self.phase_at_peak = self.phase
            self.at_peak = sorted((v for v in self.live.values() if v[0]), key=lambda v: -v[0])
            if extra_desc:
                self.at_peak = extra_desc + self.at_peak


class Trace(Storages):
    """`Storages` as a `torch.cuda.memory._dump_snapshot`-shaped trace: `events` of `alloc` and
    `free_requested` at made-up addresses, and `snapshot` where `mark` resets the peak."""

    def __init__(self):
        super().__init__()
        self.events = []
        self.next_addr = 1 << 40

    def mark(self):
        self.events.append({"action": "snapshot", "addr": 0, "size": 0})
        self.peak = self.cur

    def record(self, n, name, o):
        addr = self.next_addr
        self.next_addr += (n + 511) // 512 * 512 + 512
        self.events.append({"action": "alloc", "addr": addr, "size": n,
                            "op": "%s %s %s" % (name, tuple(o.shape), str(o.dtype)[6:])})
        return (n, addr)

    def died(self, rec):
        n, addr = rec
        self.events.append({"action": "free_requested", "addr": addr, "size": n})

    def snapshot(self):
        """The trace as `vram replay --policy pytorch` reads it."""
        trace = [dict(e, stream=0, time_us=i) for i, e in enumerate(self.events)]
        return {"segments": [], "device_traces": [trace]}


def meta_config(path):
    """The config of a config.json, without its quantization (the meta model is unquantized)."""
    raw = json.load(open(path))
    raw.pop("quantization_config", None)
    return transformers.AutoConfig.for_model(**raw)


def output_only_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """A fused attention kernel without autograd: it allocates only its output."""
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


class FusedSdpa(torch.autograd.Function):
    """A fused attention kernel's memory (FlashAttention-2 / memory-efficient / cuDNN, what SDPA
    runs on an H200 in bf16): the output, as the `[b, h, s, d]` view of a `[b, s, h, d]` tensor
    (so the `transpose(1, 2).contiguous()` after it is free), and the fp32 log-sum-exp, saved
    with q, k, v; dq, dk, dv in backward. The kernels read shared K/V heads in place."""

    @staticmethod
    def forward(ctx, q, k, v):
        b, h, s, _ = q.shape
        out = q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as a fused kernel in a training step (`FusedSdpa`). Autocast (TRL's `bf16=True`)
    casts fp32 inputs (the residual stream is fp32 after `prepare_model_for_kbit_training`) to
    bf16; the meta device has no autocast, so the cast is made here."""
    if q.dtype == torch.float32:
        q, k, v = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)
    return FusedSdpa.apply(q, k, v)
