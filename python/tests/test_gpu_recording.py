"""gpu/recording.py's conversion of a recorded allocator history into vram-tier-sim's trace
format (the GPU part, the hooks and `_record_memory_history`, runs on the device)."""

import importlib.util
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("recording", ROOT / "gpu" / "recording.py")
if not (ROOT / "gpu" / "recording.py").exists():
    pytest.skip("gpu/ is not in this tree", allow_module_level=True)
recording = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recording)

M = 99  # the marker stream


def test_history_becomes_a_trace_with_phases_and_kinds():
    a = lambda addr, size, s=0: {"action": "alloc", "addr": addr, "size": size, "stream": s}
    f = lambda addr: {"action": "free_requested", "addr": addr, "size": 0, "stream": 0}
    mark = lambda: a(1, 512, M)
    # Phases: start, forward 0, loss, backward 0, optimizer; two steps.
    step = [mark(), mark(), a(0x100, 4 << 20), a(0x200, 1 << 20), f(0x200), mark(),
            mark(), a(0x300, 8 << 20), f(0x100), mark(), f(0x300)]
    entries = [a(0x999, 64)] + step + step  # something before the first marker is dropped
    marks = [0, 1, 2, 3, 4] * 2
    packs = {1: [0x100], 6: [0x100]}  # saved in forward 0 of each step
    grads = {4: [0x300], 9: [0x300]}  # seen when the optimizer began
    t = recording.to_trace(entries, M, marks, packs, grads,
                           [(0x10, 8 << 20, "parameters")],
                           ["start", "forward 0", "loss", "backward 0", "optimizer"],
                           [0.0, 1.0, 0.5, 2.0, 0.25], "test")
    ev = t["events"]
    assert ev[0] == {"phase": 0}
    assert ev[1] == {"alloc": 1, "bytes": 8 << 20, "category": "parameters"}
    cats = [e["category"] for e in ev if "alloc" in e]
    assert cats == ["parameters", "activations", "temporaries", "gradients",
                    "activations", "temporaries", "gradients"]
    assert [e["phase"] for e in ev if "phase" in e] == marks
    assert [p["kind"] for p in t["phases"]] == ["other", "forward", "loss", "backward",
                                                "optimizer"]


def test_the_simulator_reads_it(tmp_path):
    """The trace plans: vram-tier-sim accepts it as it accepts vram trace's."""
    sim = ROOT / "target" / "debug" / "vram-tier-sim"
    if not sim.exists():
        pytest.skip("vram-tier-sim not built (cargo build -p vram-tier --bins)")
    a = lambda addr, size, s=0: {"action": "alloc", "addr": addr, "size": size, "stream": s}
    f = lambda addr: {"action": "free_requested", "addr": addr, "size": 0, "stream": 0}
    mark = lambda: a(1, 512, M)
    step = [mark(), mark(), a(0x100, 64 << 20), mark(), mark(), a(0x300, 8 << 20), f(0x100),
            mark(), f(0x300)]
    t = recording.to_trace(step * 3, M, [0, 1, 2, 3, 4] * 3, {1: [0x100], 6: [0x100],
                                                                  11: [0x100]},
                           {}, [(0x10, 64 << 20, "parameters"),
                                (0x20, 128 << 20, "optimizer_states")],
                           ["start", "forward 0", "loss", "backward 0", "optimizer"],
                           [0.0, 0.01, 0.005, 0.02, 0.0025], "test")
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(t))
    out = subprocess.run([str(sim), "--trace", str(path), "--model", "toy", "--native-s", "0.04",
                          "--cap-fraction", "0.8", "--out-dir", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    capped = json.loads((tmp_path / "capped_toy_vramkit.json").read_text())
    assert capped["finished"], capped
    assert capped["median_step_s"] >= capped["floor_step_s"] * (1 - 1e-9), capped
