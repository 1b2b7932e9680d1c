"""The planned host tier (vramkit._planned) on the CPU: the hooks, the recorded step, vramkit's
planner through ``vram_plan``, and the plan carried out, with CPU tensors standing in for the
device (copies are synchronous there; the CUDA streams and events are the GPU run's to check).

Needs PyTorch 2.1 or newer (optimizer step hooks, post-accumulate-grad hooks): skipped, saying
so, on older builds (Debian's 1.13); `.ci/planned-tier-tests` runs it with the engines' venv's
torch.
"""

import os

import pytest

torch = pytest.importorskip("torch")

import vramkit.torch as vt  # noqa: E402
from vramkit import _planned  # noqa: E402

ok, why = _planned.supported()
pytestmark = pytest.mark.skipif(not ok, reason=why)

MIB = 1 << 20
WIDTH, BATCH = 512, 512  # each saved activation 1 MiB in fp32


class Net(torch.nn.Module):
    """Four blocks in a ModuleList (the layers the hooks find), a loss inside."""

    def __init__(self, checkpoint=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()) for _ in range(4))
        self.head = torch.nn.Linear(WIDTH, 8)
        self.checkpoint = checkpoint

    def forward(self, x, y):
        if self.checkpoint:
            # The reentrant checkpoint passes no gradient through when no input needs one.
            x = x.detach().requires_grad_(True)
        for b in self.blocks:
            if self.checkpoint is None:
                x = b(x)
            else:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=self.checkpoint)
        return torch.nn.functional.cross_entropy(self.head(x), y)


@pytest.fixture(scope="module")
def lib():
    # The simulated backend for device 0: the planner and step marks, no CUDA.
    os.environ.setdefault("VRAM_BACKEND", "sim")
    vt.configure(0, backend="sim") if vt._lib() else None
    return vt._lib()


def data(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randint(0, 8, (BATCH,), generator=g)


def train(model, opt, steps):
    losses = []
    for s in range(steps):
        x, y = data(s)
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def live_of(planned, model, opt):
    """The bytes the step holds, counted from the tensors (the CPU has no allocator to ask)."""
    def live():
        n = sum(p.numel() * 4 for p in model.parameters())
        n += sum(p.grad.numel() * 4 for p in model.parameters() if p.grad is not None)
        for st in opt.state.values():
            n += sum(v.numel() * v.element_size() for v in st.values()
                     if torch.is_tensor(v) and v.device.type == "cpu" and not v.is_pinned())
        n += sum(h.dev.untyped_storage().nbytes() for h in planned.handles.values()
                 if h.dev is not None)
        return n
    return live


def run_planned(lib, cap_fraction, steps=6, checkpoint=None, link=None, cpu_adamw=1e3,
                compile_backend=None, chunks=2):
    torch.manual_seed(0)
    model = Net(checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    p = _planned.Planned(lib, 0, cap=None, chunks=chunks, min_item=MIB, link=link,
                         cpu_adamw=cpu_adamw)
    p.live = live_of(p, model, opt)
    # The step's peak with nothing moved, then a cap below it.
    peak = (sum(q.numel() for q in model.parameters()) * 4 * 4 + 4 * BATCH * WIDTH * 4 * 2)
    p.cap = int(peak * cap_fraction)
    p.install()
    runner = torch.compile(model, backend=compile_backend) if compile_backend else model
    try:
        losses = train(runner, opt, steps)
    finally:
        p.remove()
    return model, opt, losses, p


def reference(steps=6, checkpoint=None):
    torch.manual_seed(0)
    model = Net(checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt, train(model, opt, steps)


def test_streamed_tensors_come_back_bit_for_bit(lib):
    """Saved activations and optimizer states go to host memory and back every step, by the
    plan vramkit made from the recorded step; after six steps every loss and weight equals,
    bit for bit, training without the tier."""
    ref_model, _, ref_losses = reference()
    model, opt, losses, p = run_planned(lib, 0.6, link={"d2h_bytes_per_s": 1e12,
                                                         "h2d_bytes_per_s": 1e12,
                                                         "latency_s": 0.0})
    d = p.answer["decision"]
    assert d is not None and d["strategy"] == "stream", p.answer
    assert p.stats["offloaded"] > 0 or p.stats["states_moved_bytes"] > 0, p.stats
    assert p.stats["steps_planned"] >= 3, p.stats
    assert losses == ref_losses
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)
    s = vt.memory_stats(0)
    assert s["tier.plan.strategy"] == 1 and s["tier.plan.moves"] > 0, s
    assert s["tier.plan.floor_ns"] > 0 and s["tier.plan.predicted_ns"] >= s["tier.plan.floor_ns"]


def test_host_update_matches_torch_adamw(lib):
    """Under a cap that leaves no room for a chunk's states next to the weights and gradients
    (so streaming cannot fit) and with a fast host, the plan updates optimizer chunks on the
    host (torch's AdamW on CPU copies of the weights, as ZeRO-Offload): the result matches
    torch.optim.AdamW's on the device within fp32 tolerance."""
    ref_model, _, ref_losses = reference()
    model, opt, losses, p = run_planned(
        lib, 0.45, link={"d2h_bytes_per_s": 1e9, "h2d_bytes_per_s": 1e9, "latency_s": 0.0},
        cpu_adamw=1e15)
    d = p.answer["decision"]
    assert d is not None and d["strategy"] == "host_update", p.answer
    assert p.stats["host_updates"] >= 3, p.stats
    for a, b in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5,
                               atol=1e-6)
    assert vt.memory_stats(0)["tier.plan.strategy"] == 2


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradient_checkpointing(lib, reentrant):
    """With torch.utils.checkpoint around each block (both implementations) the hooks see
    only what autograd keeps outside the checkpoints, a recomputed forward is not taken for a
    new step, and training is unchanged."""
    ref_model, _, ref_losses = reference(checkpoint=reentrant)
    model, _, losses, p = run_planned(lib, 0.6, checkpoint=reentrant,
                                      link={"d2h_bytes_per_s": 1e12, "h2d_bytes_per_s": 1e12,
                                            "latency_s": 0.0})
    assert losses == ref_losses
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)
    assert p.answer["decision"]["strategy"] == "stream", p.answer
    assert p.stats["steps_unplanned"] == 0 and p.stats["steps_planned"] >= 3, p.stats


def test_under_torch_compile(lib):
    """Under torch.compile (the aot_eager backend, which needs no compiler here) the hooks run,
    the plan is made and carried out, and training is unchanged; but Dynamo cannot trace the
    hooks (`_current_graph_task_id`, `UntypedStorage.nbytes`): it breaks the graph at each of
    them, so the compiled model runs in pieces (what `TORCH_LOGS=graph_breaks` shows)."""
    ref_model, _, ref_losses = reference()
    model, _, losses, p = run_planned(lib, 0.6, compile_backend="aot_eager",
                                      link={"d2h_bytes_per_s": 1e12, "h2d_bytes_per_s": 1e12,
                                            "latency_s": 0.0})
    for a, b in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert p.stats["steps_planned"] >= 3 and p.stats["offloaded"] > 0, p.stats


def test_recorded_phases_leave_out_the_allocators_driver_time(lib, monkeypatch):
    """Each recorded phase's time is its measured time less the allocator's driver calls in
    it (``vram_driver_ns``): the 2026-11-28 H200 run planned from a capped step whose phases
    held the reactive tier's maps, migrations and pinning (1.78 s for a 0.066 s step)."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    calls = []

    def stall():  # 0.25 s of driver calls in every phase
        calls.append(None)
        return len(calls) * 250_000_000

    p = _planned.Planned(lib, 0, cap=None, chunks=2, min_item=MIB, cpu_adamw=1e3, stall=stall)
    p.live = live_of(p, model, opt)
    p.cap = 1 << 40
    monkeypatch.setattr(p, "_seconds", lambda marks: [1.0] * (len(marks) - 1))
    p.install()
    try:
        train(model, opt, 3)
    finally:
        p.remove()
    import json

    req = json.loads(p.request_json)
    secs = [ph["seconds"] for ph in req["phases"]]
    opt_secs = [ph["seconds"] for ph in req["phases"] if ph["kind"] == "optimizer"]
    assert len(opt_secs) == 2 and all(abs(s - 0.375) < 1e-9 for s in opt_secs), secs
    assert all(abs(s - 0.75) < 1e-9 for s in secs[:-2]), secs


def test_the_host_rates_are_measured_where_not_given(lib):
    """Without ``cpu_adamw``, the request carries this machine's CPU AdamW rate (the planner's
    default is the project's 2-core VM's, 0.78e9 params/s; the 2026-11-28 H200 host's 16 cores
    ran fused AdamW at 3.87e9); the link is measured only on a GPU."""
    p = _planned.Planned(lib, 0, cap=None, chunks=2, min_item=MIB)
    rate = p._measured_cpu_adamw(n=1 << 16)
    assert rate is not None and 1e5 < rate < 1e12, rate
    assert p._measured_link() is None  # no CUDA here


def test_a_driver_time_the_allocator_cannot_give_makes_no_plan(lib):
    """``vram_driver_ns`` returns -1 where the device has no allocator vramkit can reach (none
    could start, or the ordinal is outside 0..64): the recorded step's phase times cannot be
    cleaned of the driver's, so no plan is made from it (it was clamped to 0 before, taking the
    whole time for compute). The library's reason is kept and said once; training is
    unchanged."""
    ref_model, _, ref_losses = reference()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    p = _planned.Planned(lib, 0, cap=None, chunks=2, min_item=MIB, cpu_adamw=1e3)
    p.live = live_of(p, model, opt)
    p.cap = 1 << 20  # a plan would move things
    p.stall = _planned._reading(lib, "vram_driver_ns", 64)  # the plug-in's -1, for real
    p.install()
    try:
        with pytest.warns(RuntimeWarning, match="out of range") as w:
            losses = train(model, opt, 6)
    finally:
        p.remove()
    said = [str(x.message) for x in w if "planned tier" in str(x.message)]
    assert len(said) == 1, said
    assert "vram_driver_ns(64) returned -1" in p.error, p.error
    assert p.stats["not_planned"] == p.error
    assert p.answer is None and p.plan is None and p.record is None
    assert p.stats["steps_planned"] == 0
    assert losses == ref_losses
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)


def test_the_link_is_fitted_from_two_copy_sizes():
    """The link the request carries is the planner's model of a copy, ``latency + bytes /
    rate``, fitted through a small and a large timed copy (what ``_measured_link`` times on
    the GPU's copy streams), not a fixed 10 µs: 4 KiB in 9.076 µs and 32 MiB in 629.4 µs are
    54 GB/s and 9.0 µs."""
    rate, latency = _planned._fit_link(4096, 9.076e-6, 32 << 20, 9.0e-6 + (32 << 20) / 54e9)
    assert abs(rate / 54e9 - 1) < 1e-3, rate
    assert abs(latency - 9.0e-6) < 0.05e-6, latency
    # Times that do not grow with the bytes are no measurement.
    assert _planned._fit_link(4096, 1e-3, 32 << 20, 1e-3) is None
    assert _planned._fit_link(4096, 0.0, 32 << 20, 1e-3) is None


def test_host_chunks_run_the_fused_kernel_the_rate_was_measured_with(lib):
    """The host optimizer takes the fused CPU kernel the rate is measured with, even though
    the device optimizer's groups say ``fused: None`` (which, carried over, overrode the
    constructor's ``fused=True`` and ran torch's for-loop kernel, 42x slower here)."""
    model, opt, _, p = run_planned(
        lib, 0.45, link={"d2h_bytes_per_s": 1e9, "h2d_bytes_per_s": 1e9, "latency_s": 0.0},
        cpu_adamw=1e15)
    assert p.plan is not None and p.host_cpu is not None, p.answer
    assert opt.param_groups[0]["fused"] is None  # the device optimizer's own
    # After the steps, too: the host groups follow the device's lr and the like, not its kernel.
    assert p.stats["host_updates"] >= 3, p.stats
    assert all(g["fused"] is True for g in p.host_cpu.param_groups), p.host_cpu.param_groups
