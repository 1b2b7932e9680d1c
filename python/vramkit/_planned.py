"""The planned host tier inside PyTorch (issue 34): hooks that tell vramkit where a training
step is, record one step, ask vramkit's planner (``vram_tier::plan``, through ``vram_plan``)
which tensors live in host memory in which phase, and carry the plan out on two copy streams
(one each way) with events ordering the compute stream, before each tensor is needed and after
its last use.

Installed by ``vramkit.torch.install()`` when a device cap or a host tier is set (``VRAM_PLAN=0``
turns it off); the training loop does not change. What it hooks (all public PyTorch API):

- global module forward pre- and post-hooks (``torch.nn.modules.module.
  register_module_forward_pre_hook``): the outermost module's forward is the step's forward,
  the blocks of its ``nn.ModuleList`` s are the layers, one phase each;
- saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``, pushed for the outermost
  forward): the tensors autograd keeps for backward (as ``torch.autograd.graph.save_on_cpu``
  and torchtune's ``OffloadActivations`` do); the first use of a layer's saved tensors in the
  backward marks that layer's backward phase;
- optimizer step pre- and post-hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook``):
  the optimizer phase, and the end of the step (``vramkit.torch.step()`` is called there).

Module backward hooks are not used: a full backward hook wraps the module's inputs and outputs
in an extra autograd function (and refuses some in-place uses); the first unpack of a layer's
saved tensors marks where its backward begins at no cost. Single device (device 0); the first
module run after ``install`` is taken for the model.

Steps: the first after ``install`` warms up (the optimizer creates its states); the second is
recorded (phases with their GPU time from CUDA events less the allocator's driver calls in
each (``vram_driver_ns``), the allocated bytes at each phase's high point from vramkit's
allocator, spilled ones included, the saved tensors, weights, gradients and optimizer states);
then vramkit plans, and from the third step on the plan runs:

- saved tensors the plan moves are copied to pinned host memory on the device-to-host copy
  stream as autograd saves them, and copied back to the device at the phase the plan says, ahead of the backward
  that uses them (the compute stream waits for the copy's event);
- the optimizer step runs in chunks (its parameter groups split by parameter, so each chunk's
  temporaries are a chunk's size); a chunk's states the plan moves come back before it and
  leave after it;
- chunks the plan updates on the host (CPU AdamW with torch's own ``AdamW`` on the CPU, as
  ZeRO-Offload does): their states live in host memory, their gradients are copied down when
  the step begins, the CPU updates fp32 copies of their weights, and the weights are copied
  back before the next forward.

Nothing is lost: every copy is ordered by events, and a device tensor is released only after
the copy reading it has finished (pluggable allocators get no ``record_stream``, so references
are held until the event completes). A step whose phases differ from the recorded one (another
shape) runs without the plan's moves.
"""

import os
import time
import types
import weakref

MIN_ITEM = 1 << 20  # smaller tensors stay (their copies would cost more than they free)


def _torch():
    import torch

    return torch


def _optim():
    import importlib

    return importlib.import_module("torch.optim.optimizer")


def supported():
    """Whether this torch has the hooks the planned tier needs (PyTorch 2.1+), and why not."""
    torch = _torch()
    need = [
        (_optim(), "register_optimizer_step_pre_hook"),
        (torch.nn.modules.module, "register_module_forward_pre_hook"),
        (torch.Tensor, "register_post_accumulate_grad_hook"),
    ]
    for mod, name in need:
        if not hasattr(mod, name):
            return False, f"torch {torch.__version__} lacks {name} (needs PyTorch 2.1 or newer)"
    return True, ""


class _Handle:
    """A saved tensor as the planned tier keeps it."""

    __slots__ = ("k", "dev", "cpu", "ev", "phase", "users")

    def __init__(self, k, dev, phase):
        self.k, self.dev, self.cpu, self.ev, self.phase, self.users = k, dev, None, None, phase, 1


class Planned:
    """The hooks and the state of the planned tier for one device. ``lib`` is vramkit's
    library (``vramkit.torch._lib()``); ``cap``: the device bytes to plan under; ``chunks``:
    optimizer chunks; ``live``: a function returning the allocated bytes' high point since its
    last call (vramkit's ``vram_phase_peak`` by default; tests on the CPU pass their own);
    ``stall``: a function returning the nanoseconds the allocator has spent in driver calls so
    far (``vram_driver_ns``), taken out of each recorded phase's time."""

    def __init__(self, lib, device=0, cap=None, chunks=8, margin=0.02, live=None, link=None,
                 cpu_adamw=None, min_item=MIN_ITEM, stall=None):
        torch = _torch()
        self.torch = torch
        self.lib, self.device = lib, device
        self.cuda = torch.cuda.is_available()
        self.dev = torch.device("cuda", device) if self.cuda else torch.device("cpu")
        self.cap = cap
        self.chunks = max(1, int(chunks))
        self.margin = margin
        self.live = live or _reading(lib, "vram_phase_peak", device)
        self.stall = stall or (_reading(lib, "vram_driver_ns", device)
                               if lib is not None and hasattr(lib, "vram_driver_ns")
                               else (lambda: 0))
        self.error = None  # why no step was recorded, where the allocator could not say
        self.link, self.cpu_adamw = link, cpu_adamw
        self.min_item = min_item
        self.watched = False
        # One copy stream each way, as the planner's link model has them (full duplex): on one
        # stream the 2026-11-28 H200 run's states-out Llama step queued every prefetch behind
        # the evictions (0.37 s a step, against 0.19 s simulated with the two overlapping).
        self.copy_out = torch.cuda.Stream(device) if self.cuda else None
        self.copy_in = torch.cuda.Stream(device) if self.cuda else None
        self.state_out_ev = {}  # a streamed state's last eviction, which its fetch waits for
        self.steps = 0  # optimizer steps seen
        self.root = None
        self.in_forward = False
        self.layer_of = {}
        self.hooks = []
        self.marked = False  # vram_step called by the hook this step
        self._reset_step()
        self.record = None  # the recorded step, while recording
        self.answer = None  # the planner's answer
        self.request_json = None  # what was sent to the planner
        self.plan = None  # the plan in runtime terms
        self.opt = None
        self.saved_hooks = None
        self.pending = []  # (event, references to keep until it completes)
        self.stats = {"steps_planned": 0, "steps_unplanned": 0, "offloaded": 0,
                      "offloaded_bytes": 0, "prefetched": 0, "fetched_late": 0,
                      "states_moved_bytes": 0, "host_updates": 0}

    # ---- devices, streams, events -------------------------------------------------------

    def _event(self, stream=None):
        if not self.cuda:
            return None
        ev = self.torch.cuda.Event()
        ev.record(stream or self.torch.cuda.current_stream(self.device))
        return ev

    def _wait(self, ev):
        if ev is not None:
            self.torch.cuda.current_stream(self.device).wait_event(ev)

    def _copy_ctx(self, stream, after=None):
        """Runs copies on `stream` (``copy_out`` or ``copy_in``) after the compute stream's
        work so far and after the copy behind the event `after`, if any (a fetch after the
        eviction that wrote its source)."""
        if not self.cuda:
            return _Null()
        stream.wait_stream(self.torch.cuda.current_stream(self.device))
        if after is not None:
            stream.wait_event(after)
        return self.torch.cuda.stream(stream)

    def _host_empty_like(self, t):
        return self.torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=self.cuda)

    def _keep(self, ev, *refs):
        """Holds `refs` until the copy behind `ev` has finished (no record_stream here)."""
        self.pending.append((ev, refs))

    def _release_done(self, wait=False):
        keep = []
        for ev, refs in self.pending:
            if ev is None or (ev.synchronize() if wait else ev.query()) or wait:
                continue
            keep.append((ev, refs))
        self.pending = keep

    # ---- install ---------------------------------------------------------------------------

    def install(self):
        torch = self.torch
        mm = torch.nn.modules.module
        self.hooks = [
            mm.register_module_forward_pre_hook(self._fwd_pre),
            mm.register_module_forward_hook(self._fwd_post),
            _optim().register_optimizer_step_pre_hook(self._opt_pre),
            _optim().register_optimizer_step_post_hook(self._opt_post),
        ]
        return self

    def remove(self):
        for h in self.hooks:
            h.remove()
        self.hooks = []
        self._release_done(wait=True)

    # ---- phases ---------------------------------------------------------------------------

    def _reset_step(self):
        self.phase_names = []
        self.phase = None
        self.pack_count = 0
        self.by_tensor = {}
        self.handles = {}
        self.backward_seen = set()

    def _in_backward(self):
        f = getattr(self.torch._C, "_current_graph_task_id", None)
        return f is not None and f() != -1

    def _record_reading(self, live):
        """Appends a phase boundary's reading (the live peak where `live`, the allocator's mark,
        the stall) to the recording; False when the allocator gave no answer, which drops the
        recording."""
        try:
            peak = self.live()
            mark = self._mark()
            stall = self.stall()
        except _NoAnswer as e:
            self._drop_record(e)
            return False
        if live:
            self.record["live"].append(int(peak))
        self.record["events"].append(mark)
        self.record["stall"].append(stall)
        return True

    def _begin(self, name):
        """A phase begins."""
        if self.phase_names and self.phase_names[-1] == name:
            return
        self.phase_names.append(name)
        q = len(self.phase_names) - 1
        self.phase = q
        if self.record is not None:
            self._record_reading(live=q > 0)
        elif self.plan is not None and self.plan_ok:
            expect = self.plan["names"]
            if q >= len(expect) or expect[q] != name:
                self.plan_ok = False  # another shape of step: no moves this step
            else:
                self._issue(q)
        self._release_done()

    def _mark(self):
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record(self.torch.cuda.current_stream(self.device))
            return ev
        return time.perf_counter()

    def _fwd_pre(self, module, args):
        if self._in_backward():
            return None  # a recomputed forward (checkpointing)
        if not self.in_forward:
            if self.root is None:
                self._adopt(module)
            if module is not self.root:
                return None
            self.in_forward = True
            self._step_begins()
            self._begin("start")
            self.saved_hooks = self.torch.autograd.graph.saved_tensors_hooks(
                self._pack, self._unpack)
            self.saved_hooks.__enter__()
            return None
        i = self.layer_of.get(id(module))
        if i is not None:
            self._begin(f"forward {i}")
        return None

    def _fwd_post(self, module, args, output):
        if module is self.root and self.in_forward and not self._in_backward():
            self.saved_hooks.__exit__(None, None, None)
            self.saved_hooks = None
            self.in_forward = False
            self._begin("loss")
        return None

    def _adopt(self, root):
        """The first module run outside any forward is the model; its ModuleLists' blocks are
        the layers."""
        torch = self.torch
        self.root = root
        n = 0
        for m in root.modules():
            if isinstance(m, torch.nn.ModuleList):
                for child in m:
                    if id(child) not in self.layer_of:
                        self.layer_of[id(child)] = n
                        n += 1

    def _step_begins(self):
        """The first forward of a step."""
        self._reset_step()
        self.marked = False
        self.plan_ok = self.plan is not None
        if self.plan is not None and self.plan.get("upload_ev") is not None:
            # Weights updated on the host must be back before the forward reads them.
            self._wait(self.plan.pop("upload_ev"))
        if (self.steps == 1 and self.cap and self.record is None and self.answer is None
                and self.error is None):
            self.record = {"events": [], "stall": [], "live": [], "packs": [], "grads": {}}
            try:
                self.live()  # start the first phase's count here
            except _NoAnswer as e:
                self._drop_record(e)

    def _drop_record(self, e):
        """The allocator could not answer while the step was recorded (a reading of -1: no
        allocator for the device, or one that could not start; the library's last error says
        which): neither the step's phase times less the driver's nor its live bytes are known,
        so no plan is made from it and the step and those after run unplanned. Said once, as
        a warning, and kept in ``error`` and ``stats["not_planned"]``."""
        import warnings

        self.record = None
        self.error = str(e)
        self.stats["not_planned"] = self.error
        warnings.warn(f"vramkit's planned tier makes no plan: {self.error}", RuntimeWarning,
                      stacklevel=2)

    # ---- saved tensors --------------------------------------------------------------------

    def _pack(self, t):
        torch = self.torch
        if (isinstance(t, torch.nn.Parameter) or t.device != self.dev
                or t.untyped_storage().nbytes() < self.min_item or self._in_backward()):
            return t
        # The same tensor saved twice (by two operations) is kept once. (Not by address: a
        # freed tensor's memory is reused within the step.)
        seen = self.by_tensor.get(id(t))
        if seen is not None and seen[0]() is t:
            seen[1].users += 1
            return seen[1]
        k = self.pack_count
        self.pack_count += 1
        h = _Handle(k, t, self.phase)
        self.by_tensor[id(t)] = (weakref.ref(t), h)
        self.handles[k] = h
        if self.record is not None:
            self.record["packs"].append({"k": k, "bytes": t.untyped_storage().nbytes(),
                                         "pack": self.phase, "unpack": None})
        elif self.plan_ok and k in self.plan["offload"]:
            with self._copy_ctx(self.copy_out):
                h.cpu = self._host_empty_like(t)
                h.cpu.copy_(t, non_blocking=self.cuda)
            ev = self._event(self.copy_out)
            self._keep(ev, t)  # the device tensor lives until the copy has read it
            h.dev = None
            h.ev = ev
            self.stats["offloaded"] += 1
            self.stats["offloaded_bytes"] += t.untyped_storage().nbytes()
        return h

    def _unpack(self, h):
        if not isinstance(h, _Handle):
            return h
        if h.phase is not None and h.phase not in self.backward_seen:
            self.backward_seen.add(h.phase)
            name = self.phase_names[h.phase]
            self._begin("backward " + name.removeprefix("forward "))
        if self.record is not None:
            rec = self.record["packs"][h.k]
            if rec["unpack"] is None:
                rec["unpack"] = self.phase
        if h.dev is None:
            # Not prefetched (the plan's phase did not come, or the plan is off): fetch now.
            self._fetch(h)
            self.stats["fetched_late"] += 1
        self._wait(h.ev)
        t = h.dev
        h.users -= 1
        if h.users <= 0:
            h.dev = None
            self.handles.pop(h.k, None)
        return t

    def _fetch(self, h):
        """Copies an offloaded saved tensor back (into memory of the compute stream)."""
        torch = self.torch
        dev = torch.empty(h.cpu.shape, dtype=h.cpu.dtype, device=self.dev)
        with self._copy_ctx(self.copy_in, after=h.ev):  # h.ev: the offload's copy
            dev.copy_(h.cpu, non_blocking=self.cuda)
        h.ev = self._event(self.copy_in)
        self._keep(h.ev, h.cpu)
        h.dev = dev

    # ---- the plan's copies at each phase ----------------------------------------------------

    def _issue(self, q):
        for kind, key in self.plan["issue"].get(q, ()):
            if kind == "activation":
                h = self.handles.get(key)
                if h is not None and h.dev is None and h.cpu is not None:
                    self._fetch(h)
                    self.stats["prefetched"] += 1
            else:
                self._fetch_state(key)

    # ---- the optimizer --------------------------------------------------------------------

    def _opt_pre(self, opt, args, kwargs):
        if getattr(self, "_inner", False):
            return None
        self.opt = opt
        if not self.watched:
            self.watch_grads([p for g in opt.param_groups for p in g["params"]])
            self.watched = True
        if self.plan is None:
            self._begin("optimizer")
        if self.record is not None:
            self.record["opt_start_allocated"] = self._allocated()
        return None

    def _opt_post(self, opt, args, kwargs):
        if getattr(self, "_inner", False):
            return None
        self.steps += 1
        if self.record is not None:
            if self._record_reading(live=True):
                self._plan_from_record(opt)
                self.record = None
        elif self.plan is not None:
            self.stats["steps_planned" if self.plan_ok else "steps_unplanned"] += 1
        self._mark_step()
        return None

    def _mark_step(self):
        if self.lib is not None:
            self.lib.vram_step(self.device)
        self.marked = True

    def _allocated(self):
        if self.lib is None or not self.cuda:
            return 0
        from . import torch as vt

        return vt.memory_stats(self.device).get("allocated_bytes.all.current", 0)

    # ---- planning --------------------------------------------------------------------------

    def _seconds(self, marks):
        if self.cuda:
            marks[-1].synchronize()
            return [max(0.0, a.elapsed_time(b) / 1e3) for a, b in zip(marks, marks[1:])]
        return [max(0.0, b - a) for a, b in zip(marks, marks[1:])]

    def _chunking(self, opt):
        """Parameters in order, dealt to chunks by bytes."""
        params = [p for g in opt.param_groups for p in g["params"]]
        total = sum(p.numel() * p.element_size() for p in params) or 1
        acc, chunk_of = 0, {}
        for p in params:
            chunk_of[id(p)] = min(self.chunks - 1, acc * self.chunks // total)
            acc += p.numel() * p.element_size()
        return params, chunk_of

    def request(self, opt):
        """The recorded step as the planner's request (phases, items, live bytes)."""
        rec = self.record
        names = list(self.phase_names)
        seconds = self._seconds(rec["events"])
        # A phase's compute is its time less the allocator's driver calls in it: under the
        # reactive tier the device waits while the allocator maps, migrates, pins and syncs.
        # (The 2026-11-28 H200 run planned from the recorded steps' own times, 1.78 s and
        # 2.81 s for steps of 0.066 s and 0.127 s natively.) Where the device had queued work
        # the subtraction takes too much; it never goes below zero.
        stall = rec.get("stall") or []
        if len(stall) == len(seconds) + 1:
            seconds = [max(0.0, s - (b - a) / 1e9)
                       for s, a, b in zip(seconds, stall, stall[1:])]
        live = list(rec["live"])
        n = len(names)
        if len(seconds) != n or len(live) != n or names[-1] != "optimizer":
            raise RuntimeError(f"recorded step is inconsistent: {n} phases, {len(seconds)} "
                               f"times, {len(live)} live figures")
        # The optimizer phase becomes `chunks` phases; its temporaries shrink to a chunk's.
        k = self.chunks
        opt_live = live[-1]
        start = rec.get("opt_start_allocated") or opt_live
        rise = max(0, opt_live - start)
        chunk_live = start + rise // k if start else opt_live
        phases = [{"name": nm, "kind": _kind(nm), "seconds": s} for nm, s in zip(names, seconds)]
        opt_s = phases[-1]["seconds"]
        phases = phases[:-1] + [{"name": f"optimizer chunk {c}", "kind": "optimizer",
                                 "seconds": opt_s / k} for c in range(k)]
        live = live[:-1] + [chunk_live] * k
        opt_q = n - 1
        last = opt_q + k - 1
        forwards = [q for q, nm in enumerate(names) if nm.startswith("forward ")]
        items, keys = [], []
        for rec_p in rec["packs"]:
            if rec_p["unpack"] is None or rec_p["unpack"] <= rec_p["pack"]:
                continue
            items.append({"bytes": rec_p["bytes"], "kind": "activation", "persistent": False,
                          "alloc": rec_p["pack"], "free": rec_p["unpack"],
                          "uses": [rec_p["pack"], rec_p["unpack"]], "chunk": None,
                          "movable": True})
            keys.append(("activation", rec_p["k"]))
        params, chunk_of = self._chunking(opt)
        for pi, p in enumerate(params):
            c = chunk_of[id(p)]
            oq = opt_q + c
            b = p.numel() * p.element_size()
            if b >= self.min_item and p.device == self.dev:
                items.append({"bytes": b, "kind": "parameter", "persistent": True, "alloc": 0,
                              "free": last, "uses": sorted(set(forwards + [oq])), "chunk": c,
                              "movable": False})
                keys.append(("parameter", pi))
            g = rec["grads"].get(id(p))
            if g is not None and b >= self.min_item:
                a = min(g, oq)
                items.append({"bytes": b, "kind": "gradient", "persistent": False, "alloc": a,
                              "free": last, "uses": sorted({a, oq}), "chunk": c,
                              "movable": False})
                keys.append(("gradient", pi))
            for name, v in opt.state.get(p, {}).items():
                if (self.torch.is_tensor(v) and v.device == self.dev
                        and v.numel() * v.element_size() >= self.min_item):
                    items.append({"bytes": v.numel() * v.element_size(),
                                  "kind": "optimizer_state", "persistent": True, "alloc": 0,
                                  "free": last, "uses": [oq], "chunk": c, "movable": True})
                    keys.append(("state", (pi, name)))
        req = {"phases": phases, "items": items, "live": live, "chunks": k,
               "cap": int(self.cap * (1 - self.margin))}
        # The link and the host's AdamW rate, measured on this machine unless given: the
        # planner's defaults are an H100's link and the project's 2-core VM (0.78e9 params/s),
        # where the 2026-11-28 H200 host ran fused CPU AdamW at 3.87e9.
        link = self.link or self._measured_link()
        if link:
            req["link"] = link
        cpu = self.cpu_adamw or self._measured_cpu_adamw()
        if cpu:
            req["cpu"] = {"adamw_params_per_s": cpu}
        return req, keys, [ph["name"] for ph in phases]

    def _measured_link(self, nbytes=32 << 20, small=4 << 10):
        """The host link here, each way on its copy stream: pinned copies of `small` and of
        `nbytes` bytes, the best of five and of three, fitted to the planner's model of one
        copy, ``latency + bytes / rate`` (``_fit_link``). The link's one latency is the larger
        direction's. None on the CPU, or when the device has no room for the buffer."""
        if not self.cuda:
            return None
        torch = self.torch
        try:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
        except RuntimeError:
            return None
        if self.lib is not None:
            from . import torch as vt

            if vt.tier_of(dev) != "device":  # spilled or moved under the cap: not the link
                return None

        def best(stream, dst, src, n, tries):
            times = []
            for _ in range(tries):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    a.record(stream)
                    dst[:n].copy_(src[:n], non_blocking=True)
                    b.record(stream)
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            return min(times)

        link = {}
        for key, stream, dst, src in (("d2h_bytes_per_s", self.copy_out, host, dev),
                                      ("h2d_bytes_per_s", self.copy_in, dev, host)):
            fit = _fit_link(small, best(stream, dst, src, small, 5),
                            nbytes, best(stream, dst, src, nbytes, 3))
            if fit is None:
                return None
            link[key] = fit[0]
            link["latency_s"] = max(link.get("latency_s", 0.0), fit[1])
        del dev
        return link

    def _measured_cpu_adamw(self, n=1 << 22):
        """Parameters a second torch's CPU AdamW updates here (fused when this torch has it,
        as the host chunks use), best of three steps of `n` fp32 parameters."""
        torch = self.torch
        p = torch.zeros(n, requires_grad=True)
        p.grad = torch.zeros(n)
        opt = _host_adamw(torch, [{"params": [p]}])
        opt.step()  # makes the states
        best = None
        for _ in range(3):
            t = time.perf_counter()
            opt.step()
            t = time.perf_counter() - t
            best = t if best is None else min(best, t)
        return n / best if best and best > 0 else None

    def _plan_from_record(self, opt):
        import json

        req, keys, names = self.request(opt)
        self.request_json = json.dumps(req)  # `vram-tier-sim --request` replans it
        text = _call_plan(self.lib, self.device, self.request_json)
        self.answer = json.loads(text)
        d = self.answer.get("decision")
        if not d or d["strategy"] == "none":
            self.plan = None
            return
        issue, offload, state_moves = {}, set(), {}
        for mv in d["plan"]["moves"]:
            kind, key = keys[mv["item"]]
            if kind == "activation":
                offload.add(key)
                issue.setdefault(mv["issue"], []).append(("activation", key))
            elif kind == "state":
                state_moves[key] = mv
                issue.setdefault(mv["issue"], []).append(("state", key))
        self.plan = {"names": names, "issue": issue, "offload": offload,
                     "host_chunks": set(d["plan"]["host_chunks"]), "strategy": d["strategy"],
                     "upload_ev": None}
        self._setup_optimizer(opt, state_moves)

    # ---- chunked optimizer step, streamed states, host updates --------------------------

    def _setup_optimizer(self, opt, state_moves):
        torch = self.torch
        params, chunk_of = self._chunking(opt)
        self.params, self.chunk_of = params, chunk_of
        host = self.plan["host_chunks"]
        # States the plan streams: their home is pinned host memory from now on.
        self.state_home, self.state_dev = {}, {}
        for (pi, name) in state_moves:
            p = params[pi]
            v = opt.state[p][name]
            home = self._host_empty_like(v)
            home.copy_(v)
            self.state_home[(pi, name)] = home
            opt.state[p][name] = home
            self.stats["states_moved_bytes"] += v.numel() * v.element_size()
        # Chunks updated on the host: fp32 copies of their weights and their states on the
        # host, torch's AdamW there.
        self.host_params = [p for p in params if chunk_of[id(p)] in host]
        self.host_cpu = None
        if self.host_params:
            groups = []
            self.host_pairs = []
            for g in opt.param_groups:
                mine = [p for p in g["params"] if chunk_of[id(p)] in host]
                if not mine:
                    continue
                cpus = []
                for p in mine:
                    # Pinned: the weights go back up with asynchronous copies.
                    c = self._host_empty_like(p.detach().float())
                    c.copy_(p.detach())
                    c.grad = self._host_empty_like(c)
                    cpus.append(c)
                    self.host_pairs.append((p, c, g))
                opts = {k: v for k, v in g.items() if k != "params"}
                groups.append({"params": cpus, **opts})
            self.host_cpu = _host_adamw(torch, groups)
            # Carry the device states over, then drop them from the device.
            for p, c, _ in self.host_pairs:
                st = opt.state.pop(p, {})
                self.host_cpu.state[c] = {k: (v.detach().to("cpu", copy=True)
                                              if torch.is_tensor(v) else v)
                                          for k, v in st.items()}
        self._wrap_step(opt)

    def _fetch_state(self, key):
        home = self.state_home.get(key)
        if home is None or key in self.state_dev:
            return
        dev = self.torch.empty(home.shape, dtype=home.dtype, device=self.dev)
        with self._copy_ctx(self.copy_in, after=self.state_out_ev.pop(key, None)):
            dev.copy_(home, non_blocking=self.cuda)
        ev = self._event(self.copy_in)
        self._keep(ev, home)
        self.state_dev[key] = (dev, ev)

    def _wrap_step(self, opt):
        planned = self
        orig = type(opt).step

        def step(self_opt, closure=None):
            return planned._chunked_step(self_opt, orig, closure)

        opt.step = types.MethodType(step, opt)
        orig_sd = opt.state_dict

        def state_dict(self_opt):
            planned.synchronize()
            return orig_sd()

        opt.state_dict = types.MethodType(state_dict, opt)

    def synchronize(self):
        """Waits for every copy in flight (the optimizer's state_dict does this first)."""
        if self.cuda:
            self.copy_out.synchronize()
            self.copy_in.synchronize()
        self._release_done(wait=True)

    def _chunked_step(self, opt, orig, closure):
        torch = self.torch
        self._opt_pre(opt, (), {})
        params, chunk_of, host = self.params, self.chunk_of, self.plan["host_chunks"]
        loss = closure() if closure is not None else None
        groups = opt.param_groups
        grads_ev = None
        # Host chunks: gradients down first (they are final now: any clipping is done).
        if self.host_params:
            with self._copy_ctx(self.copy_out):
                for p, c, _ in self.host_pairs:
                    if p.grad is not None:
                        c.grad.copy_(p.grad.detach(), non_blocking=self.cuda)
            grads_ev = self._event(self.copy_out)
            self._keep(grads_ev, *[p.grad for p, _, _ in self.host_pairs if p.grad is not None])
        self._inner = True
        try:
            for c in range(self.chunks):
                self._begin(f"optimizer chunk {c}")
                if c in host:
                    continue
                mine = [[p for p in g["params"] if chunk_of.get(id(p)) == c] for g in groups]
                if not any(mine):
                    continue
                moved = []
                for (pi, name), home in self.state_home.items():
                    if chunk_of[id(params[pi])] != c:
                        continue
                    if (pi, name) not in self.state_dev:
                        self._fetch_state((pi, name))
                    dev, ev = self.state_dev.pop((pi, name))
                    self._wait(ev)
                    opt.state[params[pi]][name] = dev
                    moved.append((pi, name, dev))
                sub = [dict(g, params=m) for g, m in zip(groups, mine) if m]
                opt.param_groups = sub
                try:
                    orig(opt)
                finally:
                    for g, s in zip([g for g, m in zip(groups, mine) if m], sub):
                        for k, v in s.items():
                            if k != "params":
                                g[k] = v
                    opt.param_groups = groups
                # This chunk's moved states leave after it.
                for pi, name, dev in moved:
                    home = self.state_home[(pi, name)]
                    with self._copy_ctx(self.copy_out):
                        home.copy_(dev, non_blocking=self.cuda)
                    ev = self._event(self.copy_out)
                    self.state_out_ev[(pi, name)] = ev
                    self._keep(ev, dev)
                    opt.state[params[pi]][name] = home
        finally:
            self._inner = False
        if self.host_params:
            if grads_ev is not None:
                grads_ev.synchronize()
            for p, c, g in self.host_pairs:
                for k, v in g.items():  # follow schedulers' changes (lr, ...), not the kernel
                    if k != "params" and k not in _KERNEL_KEYS:
                        for hg in self.host_cpu.param_groups:
                            if any(x is c for x in hg["params"]):
                                hg[k] = v
            self.host_cpu.step()
            # (The upload reads `c` after the CPU step; the next step's gradients come down
            # only after the compute stream waited for this upload, so one order holds.)
            with self._copy_ctx(self.copy_in):
                for p, c, _ in self.host_pairs:
                    p.data.copy_(c.detach().to(p.dtype), non_blocking=self.cuda)
            self.plan["upload_ev"] = self._event(self.copy_in)
            self._keep(self.plan["upload_ev"], *[c for _, c, _ in self.host_pairs])
            self.stats["host_updates"] += 1
        self._opt_post(opt, (), {})
        return loss

    # ---- recording gradients' phases ------------------------------------------------------

    def watch_grads(self, params):
        """Notes, in the recorded step, the phase in which each weight's gradient is made."""
        for p in params:
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _grad_ready(self, p):
        if self.record is not None and id(p) not in self.record["grads"]:
            self.record["grads"][id(p)] = self.phase


class _NoAnswer(Exception):
    """A library reading came back -1: the device has no allocator vramkit could reach."""


def _reading(lib, name, device):
    """``lib.<name>(device)`` as a reading that raises ``_NoAnswer`` with the library's last
    error where it returns -1 (the plug-in's error value: no backend for the device, one that
    could not start, or a device outside 0..64; ``crates/vram-torch/src/ffi.rs``)."""
    def read():
        v = getattr(lib, name)(device)
        if v < 0:
            from . import torch as vt

            raise _NoAnswer(f"{name}({device}) returned {v}: {vt.last_error() or 'no reason given'}")
        return v

    return read


def _fit_link(small, t_small, big, t_big):
    """(rate, latency) of the copy model ``t = latency + bytes / rate`` through two timed
    copies, `small` and `big` bytes; None where the times do not grow with the bytes."""
    if not (big > small >= 0 and t_big > t_small > 0):
        return None
    rate = (big - small) / (t_big - t_small)
    return rate, max(0.0, t_small - small / rate)


# What picks AdamW's kernel rather than its arithmetic: a host group must not carry the device
# optimizer's (a group's own ``fused: None`` overrides the constructor's ``fused=True``).
_KERNEL_KEYS = ("fused", "foreach", "capturable")


def _host_adamw(torch, groups):
    """torch's AdamW over CPU tensors as the host chunks and the rate measurement use it: the
    fused kernel where this torch has it for the CPU (2.4 and later), else torch's default
    one. The groups' kernel choices are dropped so that the constructor's stands: on the
    project's VM (torch 2.15, 2 cores) fused CPU AdamW ran 2.4e9 parameters/s and a group left
    at ``fused: None`` 5.6e7."""
    groups = [{k: v for k, v in g.items() if k not in _KERNEL_KEYS} for g in groups]
    try:
        return torch.optim.AdamW(groups, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups)


def _kind(name):
    for prefix, kind in (("forward", "forward"), ("backward", "backward"), ("loss", "loss"),
                         ("optimizer", "optimizer")):
        if name.startswith(prefix):
            return kind
    return "other"


def _call_plan(lib, device, request):
    import ctypes

    from . import torch as vt

    n = lib.vram_plan(device, request.encode(), None, 0)
    if n < 0:
        raise vt.VramkitError(vt.last_error())
    buf = ctypes.create_string_buffer(n + 1)
    lib.vram_plan(device, None, buf, n + 1)
    return buf.value.decode()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def enabled_by_env():
    """Whether the environment asks for the planned tier (a cap or a host tier, and not
    ``VRAM_PLAN=0``)."""
    if os.environ.get("VRAM_PLAN", "1").strip() == "0":
        return False
    return bool(os.environ.get("VRAM_DEVICE_LIMIT", "").strip()) or (
        os.environ.get("VRAM_HOST_LIMIT", "0").strip() not in ("", "0"))
