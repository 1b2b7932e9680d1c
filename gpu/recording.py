"""A real trace of a training loop for vram-tier-sim (issue 34): the caching allocator's history
(``torch.cuda.memory._record_memory_history``) of two steps after a warm-up, cut into the same
phases the planned tier uses (the outermost forward, each block of the model's ``nn.ModuleList``,
the loss, each block's backward, the optimizer), each phase timed with CUDA events, and every
allocation given the kind vram-tier's profile needs: weights, gradients, optimizer states, saved
activations (from saved-tensor hooks), the rest temporaries.

Phase boundaries are marked in the history itself: a 512-byte allocation on a stream of its own
at each boundary (nothing else allocates there), so the order is exact. Written as the trace
format `vram trace --events` writes (``vram_tier::plan::Trace``); ``to_trace`` is the pure part
(tested in python/tests/test_gpu_recording.py).

Used by gpu/train.py --record-trace DIR (native allocator only).
"""

import json
import os

MARK_BYTES = 512


def to_trace(entries, marker_stream, marks, packs, grads, persistent, phase_names, seconds,
             source):
    """The trace from a snapshot's ``device_traces`` entries.

    ``entries``: dicts with ``action`` (alloc, free_requested, ...), ``addr``, ``size``,
    ``stream``, in order. ``marks``: the phase index of each marker allocation, in order (the
    first of each step is 0). ``packs``: per marker position (its ordinal), the addresses of the
    storages autograd saved in that phase. ``grads``: per marker position, the gradients'
    addresses seen when the optimizer phase began. ``persistent``: ``[(addr, bytes, category)]``
    alive before the recording (weights, optimizer states, the rest as ``workspace``).
    ``phase_names``/``seconds``: one step's phases and their times."""
    events = []
    next_id = [0]

    def new_id():
        next_id[0] += 1
        return next_id[0]

    live = {}  # addr -> id
    kinds = {}
    marker = -1
    first = True

    def label(addrs, kind):
        for a in addrs:
            if a in live and kinds.get(live[a]) == "temporaries":
                kinds[live[a]] = kind

    for e in entries:
        act, addr, size, stream = e["action"], e["addr"], e["size"], e.get("stream")
        if stream == marker_stream:
            if act == "alloc":
                # The phase that ends: what autograd saved in it is alive now.
                if marker >= 0:
                    label(packs.get(marker, ()), "activations")
                marker += 1
                events.append({"phase": marks[marker]})
                if first:
                    # What was alive before the history began.
                    for a, b, cat in persistent:
                        i = new_id()
                        live[a] = i
                        kinds[i] = cat
                        events.append({"alloc": i, "bytes": b, "category": cat})
                    first = False
                # Gradients are noted when the optimizer phase begins.
                label(grads.get(marker, ()), "gradients")
            continue
        if first:
            continue  # before the first marker: the warm-up's tail
        if act == "alloc":
            i = new_id()
            live[addr] = i
            kinds[i] = "temporaries"
            events.append({"alloc": i, "bytes": size, "category": None})
        elif act == "free_requested" and addr in live:
            events.append({"free": live.pop(addr)})
    for ev in events:
        if "alloc" in ev and ev["category"] is None:
            ev["category"] = kinds[ev["alloc"]]
    kind_of = {"start": "other", "loss": "loss"}
    phases = []
    for name, s in zip(phase_names, seconds):
        kind = kind_of.get(name) or name.split(" ")[0]
        phases.append({"name": name, "kind": kind if kind in
                       ("forward", "backward", "loss", "optimizer", "other") else "other",
                       "seconds": s})
    return {"source": source, "phases": phases, "events": events}


class Recorder:
    """Hooks that mark phases and note tensors' kinds while the native allocator records."""

    def __init__(self, folder):
        import torch

        self.torch = torch
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.stream = torch.cuda.Stream()
        self.active = False
        self.marks, self.packs, self.grads = [], {}, {}
        self.names, self.step_names = [], []
        self.events_t = []  # per step: [(phase index, cuda event)]
        self.seen_backward = set()
        self.pack_phase = {}
        self.layer_of = {}
        self.root = None
        self.in_forward = False

    def _mark(self, name):
        if not self.active:
            return
        if self.step_names and self.step_names[-1] == name:
            return
        self.step_names.append(name)
        q = len(self.step_names) - 1
        with self.torch.cuda.stream(self.stream):
            m = self.torch.empty(MARK_BYTES, dtype=self.torch.uint8, device="cuda")
        del m
        self.marks.append(q)
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        self.events_t[-1].append(ev)

    def attach(self, model, opt):
        torch = self.torch
        self.model, self.opt = model, opt
        n = 0
        for m in model.modules():
            if isinstance(m, torch.nn.ModuleList):
                for c in m:
                    self.layer_of[id(c)] = n
                    n += 1
        self.root = model

        def pre(mod, args):
            if mod is model:
                self.in_forward = True
                self._mark("start")
                self.hooks_ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
                self.hooks_ctx.__enter__()
            elif self.in_forward and id(mod) in self.layer_of:
                self._mark(f"forward {self.layer_of[id(mod)]}")

        def post(mod, args, out):
            if mod is model and self.in_forward:
                self.hooks_ctx.__exit__(None, None, None)
                self.in_forward = False
                self._mark("loss")

        self.handles = [model.register_forward_pre_hook(pre)]
        self.handles.append(model.register_forward_hook(post))
        for m in model.modules():
            if id(m) in self.layer_of:
                self.handles.append(m.register_forward_pre_hook(pre))

        def opt_pre(o, args, kwargs):
            if self.active:
                self._mark("optimizer")
                self.grads[len(self.marks) - 1] = [p.grad.untyped_storage().data_ptr()
                                                   for g in o.param_groups for p in g["params"]
                                                   if p.grad is not None]
        self.handles.append(opt.register_step_pre_hook(opt_pre))

    def _pack(self, t):
        if self.active and t.is_cuda:
            q = len(self.marks) - 1
            self.packs.setdefault(q, []).append(t.untyped_storage().data_ptr())
            self.pack_phase[id(t)] = self.step_names[-1]
        return t

    def _unpack(self, t):
        name = self.pack_phase.get(id(t))
        if self.active and name and name not in self.seen_backward:
            self.seen_backward.add(name)
            self._mark("backward " + name.replace("forward ", ""))
        return t

    def step_begins(self, i):
        torch = self.torch
        if i == 1:
            # Recording starts: what is alive now is persistent.
            torch.cuda.synchronize()
            params = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes()
                      for p in self.model.parameters()}
            states = {}
            for st in self.opt.state.values():
                for v in st.values():
                    if torch.is_tensor(v) and v.is_cuda:
                        states[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
            rest = torch.cuda.memory_allocated() - sum(params.values()) - sum(states.values())
            self.persistent = ([(a, b, "parameters") for a, b in params.items()]
                               + [(a, b, "optimizer_states") for a, b in states.items()])
            if rest > 0:
                self.persistent.append((1, rest, "workspace"))
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
            self.active = True
        if self.active:
            self.step_names = []
            self.seen_backward = set()
            self.events_t.append([])

    def step_ends(self, i):
        if not self.active:
            return
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        self.events_t[-1].append(ev)
        if not self.names:
            self.names = list(self.step_names)
        if i == 2:
            self.torch.cuda.synchronize()
            self.snapshot = self.torch.cuda.memory._snapshot()
            self.torch.cuda.memory._record_memory_history(enabled=None)
            self.active = False

    def finish(self, res):
        if getattr(self, "snapshot", None) is None:
            res["record_trace_error"] = "fewer than three steps: nothing recorded"
            return
        torch = self.torch
        dev = torch.cuda.current_device()
        entries = self.snapshot["device_traces"][dev]
        marker_stream = self.stream.cuda_stream
        secs = []
        for evs in self.events_t:
            secs.append([a.elapsed_time(b) / 1e3 for a, b in zip(evs, evs[1:])])
        n = len(self.names)
        seconds = [sorted(s[q] for s in secs if len(s) == n)[0] if all(len(s) == n for s in secs)
                   else secs[-1][q] for q in range(n)]
        trace = to_trace(entries, marker_stream, self.marks, self.packs, self.grads,
                         self.persistent, self.names, seconds,
                         f"recorded on {torch.cuda.get_device_name(dev)} with "
                         f"torch.cuda.memory._record_memory_history (torch {torch.__version__}), "
                         f"gpu/train.py --model {res['model']}, steps 1-2 after a warm-up")
        path = os.path.join(self.folder, f"trace_{res['model']}_real.json")
        with open(path, "w") as f:
            json.dump(trace, f)
        res["record_trace"] = path
