"""vramkit_torch against the built cdylib (no torch needed).

Run by `cargo test -p vram-torch` (simulated device, and a fake libcuda) and by
`gpu/run.sh device plugin` (a real GPU) with VRAMKIT_LIB, VRAM_BACKEND and PYTHONPATH=python
only: every other setting this test depends on is set here with `configure()`, which
overrides the environment. (The first GPU run, 2026-11-27, failed because the test took
VRAM_MIGRATE from the environment: `cargo test` set 0, `gpu/run.sh` left the default 1, so
the third request moved a block to host memory instead of spilling.)

With `--migrate` it checks the other path, migration, in a process of its own (a device's
settings are fixed at its first allocation).
"""

import os
import pickle
import subprocess
import sys
import tempfile

import vramkit_torch as vt

assert "torch" not in sys.modules, "vramkit_torch must import torch lazily"
lib = vt._lib()

MIB = 1 << 20
backend = os.environ.get("VRAM_BACKEND", "cuda")

if sys.argv[1:] == ["--migrate"]:
    # A block alive across a step mark moves to host memory at the same address (it reports
    # 'migrated'); the new request stays on the device; a light step brings it back.
    vt.configure(0, device_limit="64MiB", host_limit="1GiB", migrate=1)
    a, b = (lib.vram_malloc(30 * MIB, 0, None) for _ in range(2))
    assert vt.step() == 0
    c = lib.vram_malloc(30 * MIB, 0, None)
    assert a and b and c, vt.last_error()
    tiers = [vt.tier_of(p) for p in (a, b, c)]
    assert tiers == ["device", "migrated", "device"], tiers
    s = vt.memory_stats()
    assert s["num_migrations_to_host"] == 1 and s["num_spills"] == 0, s
    assert s["host.migrated_bytes.current"] == 30 * MIB, s["host.migrated_bytes.current"]
    lib.vram_free(c, 30 * MIB, 0, None)
    assert vt.step() == 0  # the step rose 30 MiB: 60 + 30 > 64, it stays on the host
    assert vt.step() == 30 * MIB  # a step that rose nothing: it comes back
    assert vt.tier_of(b) == "device"
    for p in (a, b):
        lib.vram_free(p, 30 * MIB, 0, None)
    print(f"ok: migration on the {backend} backend")
    sys.exit(0)

# The spill path: migration off, whatever the environment says.
vt.configure(0, device_limit="64MiB", host_limit="1GiB", migrate=0)
# 30 + 30 MiB fit under 64 MiB, the third spills.
ptrs = [lib.vram_malloc(30 * MIB, 0, None) for _ in range(3)]
assert all(ptrs), vt.last_error()

assert [vt.tier_of(p) for p in ptrs] == ["device", "device", "host"], [vt.tier_of(p) for p in ptrs]
# Nothing was moved (migration is off here; the spill path is what this part checks).
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

# Migration, in a fresh process (device 0's settings are fixed now).
out = subprocess.run([sys.executable, __file__, "--migrate"], capture_output=True, text=True)
assert out.returncode == 0, out.stdout + out.stderr
print(out.stdout.strip())
print(f"ok: vramkit_torch stats, summary, snapshot, OOM and configure on the {backend} backend")
