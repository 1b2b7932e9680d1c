"""vramkit.oom_guard with a simulated out-of-memory error (torch's own exception class)."""

import logging

import pytest

import vramkit
from vramkit import VramError


def oom_class(torch):
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def test_oom_guard_starts_from_the_estimate_and_halves_on_oom(caplog):
    torch = pytest.importorskip("torch", reason="torch is not installed (CI installs Debian's python3-torch)")
    setup = dict(model="gpt2", gpu="rtx-4090", seq=1024)
    start = vramkit.fit_batch_size("gpt2", gpu="rtx-4090", seq=1024)
    assert start >= 8
    calls = []

    @vramkit.oom_guard(**setup)
    def train(batch_size, steps):
        calls.append(batch_size)
        if batch_size > 5:  # the simulated GPU holds at most 5 sequences
            raise oom_class(torch)(f"CUDA out of memory. Tried to allocate {batch_size * 100} MiB")
        return batch_size * steps

    with caplog.at_level(logging.WARNING, logger="vramkit"):
        result = train(10)
    expected = [start]
    while expected[-1] > 5:
        expected.append(expected[-1] // 2)
    assert calls == expected
    assert result == expected[-1] * 10 and train.batch_size == expected[-1]
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == len(expected) - 1
    assert f"out of memory at batch size {start} (CUDA out of memory. Tried to allocate" in msgs[0]
    assert f"retrying with batch size {start // 2}" in msgs[0]
    assert "collected garbage" in msgs[0] or "emptied the CUDA cache" in msgs[0]


def test_oom_guard_other_errors_and_the_floor():
    torch = pytest.importorskip("torch", reason="torch is not installed (CI installs Debian's python3-torch)")
    calls = []

    @vramkit.oom_guard(starting_batch_size=8)
    def broken(batch_size):
        calls.append(batch_size)
        raise KeyError("not memory")

    with pytest.raises(KeyError):
        broken()
    assert calls == [8]  # not retried

    @vramkit.oom_guard(starting_batch_size=8, min_batch_size=2)
    def never_fits(batch_size):
        calls.append(batch_size)
        raise oom_class(torch)("CUDA out of memory")

    calls.clear()
    with pytest.raises(oom_class(torch)):
        never_fits()
    assert calls == [8, 4, 2]

    # The estimate caps a starting size that is too large.
    start = vramkit.fit_batch_size("gpt2", gpu="t4")

    @vramkit.oom_guard(model="gpt2", gpu="t4", starting_batch_size=10_000)
    def fine(batch_size):
        return batch_size

    assert fine() == start


def test_oom_guard_bad_input():
    with pytest.raises(VramError, match="needs model="):
        vramkit.oom_guard(lambda b: b)
    with pytest.raises(VramError, match="factor"):
        vramkit.oom_guard(starting_batch_size=4, factor=2)

    @vramkit.oom_guard(model="llama-3-70b", gpu="t4")
    def hopeless(batch_size):
        raise AssertionError("must not run")

    with pytest.raises(VramError, match="not even micro-batch 1"):
        hopeless()
    with pytest.raises(VramError):
        vramkit.oom_guard(model="no-such-model", gpu="t4")(lambda b: b)()
