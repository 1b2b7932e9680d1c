"""vramkit_torch against the built cdylib on the simulated backend (no GPU, no torch).

Run by `cargo test -p vram-torch` with VRAMKIT_LIB, VRAM_BACKEND=sim,
VRAM_DEVICE_LIMIT=64MiB, VRAM_HOST_LIMIT=1GiB and PYTHONPATH=python.
"""

import os
import pickle
import sys
import tempfile

import vramkit_torch as vt

assert "torch" not in sys.modules, "vramkit_torch must import torch lazily"
lib = vt._lib()

MIB = 1 << 20
# Device 0 comes from the environment; 30 + 30 MiB fit under 64 MiB, the third spills.
ptrs = [lib.vram_malloc(30 * MIB, 0, None) for _ in range(3)]
assert all(ptrs), vt.last_error()

assert [vt.tier_of(p) for p in ptrs] == ["device", "device", "host"], [vt.tier_of(p) for p in ptrs]
# Nothing was moved (VRAM_MIGRATE=0 here; the spill path is what this test checks).
assert vt.step() == 0
assert vt.memory_stats()["num_migrations_to_host"] == 0
assert vt.tier_of(12345) in ("device", None)
s = vt.memory_stats()
assert s["allocated_bytes.all.current"] == 60 * MIB, s["allocated_bytes.all.current"]
assert s["host.bytes.current"] == 30 * MIB, s["host.bytes.current"]
assert s["num_spills"] == 1
assert s["device_limit"] == 64 * MIB
for key in ("reserved_bytes.all.peak", "active_bytes.large_pool.current", "num_ooms", "requested_bytes.all.current"):
    assert key in s, key

summary = vt.memory_summary()
assert "vramkit tiers" in summary and "host" in summary, summary

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "snap.pickle")
    vt.dump_snapshot(path)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert "segments" in snap and isinstance(snap["segments"], list), list(snap)
    assert sum(seg["total_size"] for seg in snap["segments"]) == s["reserved_bytes.all.current"]
    try:
        vt.dump_snapshot(os.path.join(d, "missing", "x.pickle"))
        raise AssertionError("expected VramkitError")
    except vt.VramkitError as e:
        assert "missing" in str(e), e

for p in ptrs:
    lib.vram_free(p, 30 * MIB, 0, None)
s = vt.memory_stats()
assert s["allocated_bytes.all.current"] == 0 and s["host.bytes.current"] == 0
vt.reset_peak_stats()
vt.empty_cache()
assert vt.memory_stats()["reserved_bytes.all.current"] == 0

# Out of memory is a null pointer, not a crash: the host tier is 1 GiB.
assert not lib.vram_malloc(2 << 30, 0, None)
assert "out of memory" in vt.last_error(), vt.last_error()

# configure(): a second device with its own settings; bad ones raise.
vt.configure(1, backend="sim", device_limit="16MiB", host_limit=0)
assert not lib.vram_malloc(32 * MIB, 1, None)
try:
    vt.configure(2, device_limit="lots")
    raise AssertionError("expected VramkitError")
except vt.VramkitError as e:
    assert "VRAM_DEVICE_LIMIT" in str(e), e
try:
    vt.configure(2, colour="blue")
    raise AssertionError("expected TypeError")
except TypeError:
    pass

assert "torch" not in sys.modules
print(f"ok: vramkit_torch stats, summary, snapshot, OOM and configure on the {os.environ.get('VRAM_BACKEND', 'cuda')} backend")
