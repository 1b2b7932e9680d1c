"""Shared helpers: run the built `vram` binary and read what it emitted.

The binary comes from $VRAM_BIN (.ci/engine-tests sets it to the release build, the binary the
wheel ships), else target/debug/vram.

`vram` is deterministic (same arguments, same files, same output), so each distinct command
runs once per session and its result is shared (`run_vram`): the Megatron model test, for one,
asks for the same plan of each config in two tests.
"""

import functools
import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
TINY = str(DATA / "tiny-llama.json")  # 4 layers, hidden 64, 4 heads, vocab 256
VRAM = os.environ.get("VRAM_BIN") or str(ROOT / "target" / "debug" / "vram")


@dataclass
class Emitted:
    text: str
    label: str  # the plan's label, e.g. "tp1 pp1 dp2 mb4x1 zero3"
    stderr: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    grad_accum: int
    zero: int


def parse_label(label: str) -> dict:
    m = re.match(r"tp(\d+) pp(\d+) dp(\d+) mb(\d+)x(\d+)", label)
    assert m, label
    z = re.search(r"\bzero(\d)\b", label)
    tp, pp, dp, mb, ga = map(int, m.groups())
    return dict(tp=tp, pp=pp, dp=dp, micro_batch=mb, grad_accum=ga, zero=int(z.group(1)) if z else 0)


def free_port() -> int:
    """A local TCP port nothing listens on now (for process groups' rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_vram(*args: str) -> subprocess.CompletedProcess:
    """`vram ARGS`, run once per distinct ARGS in a session (the result is read-only)."""
    return _run_vram(tuple(args))


@functools.lru_cache(maxsize=None)
def _run_vram(args: tuple) -> subprocess.CompletedProcess:
    return subprocess.run([VRAM, *args], capture_output=True, text=True, timeout=300)


def emit(engine: str, model: str, gpus: int, global_batch: int, seq: int, *pins: str, gpu="h100-80g") -> Emitted:
    """`vram plan MODEL --emit ENGINE ...`; fails the test unless it exits 0."""
    r = run_vram(
        "plan", model, "--gpu", gpu, "--gpus", str(gpus), "--global-batch", str(global_batch),
        "--seq", str(seq), "--emit", engine, *pins,
    )
    assert r.returncode == 0, f"vram exited {r.returncode}: {r.stderr}"
    m = re.search(r"vram: emitted (.+?) at ", r.stderr)
    assert m, r.stderr
    return Emitted(text=r.stdout, label=m.group(1), stderr=r.stderr, **parse_label(m.group(1)))


@pytest.fixture(scope="session", autouse=True)
def _binary_exists():
    assert Path(VRAM).is_file(), f"build the CLI first (cargo build -p vram-cli): {VRAM} missing"
