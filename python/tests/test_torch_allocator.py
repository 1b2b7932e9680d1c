"""vramkit.torch (the allocator) from the installed wheel, on the simulated device."""

import os
import subprocess
import sys
from pathlib import Path

import vramkit.torch as vt


def test_library_comes_from_inside_the_package(monkeypatch):
    monkeypatch.delenv("VRAMKIT_LIB", raising=False)
    path = Path(vt.library_path())
    assert path.name == "libvram_torch.so"
    assert path.parent == Path(vt.__file__).parent and path.is_file()
    monkeypatch.setenv("VRAMKIT_LIB", "/somewhere/else.so")
    assert vt.library_path() == "/somewhere/else.so"  # the override


def test_allocator_script_against_the_packaged_library(tmp_path):
    # The script cargo test runs against a fresh cdylib (crates/vram-torch/tests/it), here
    # with the library the wheel installed and through the old import path `vramkit_torch`.
    script = Path(__file__).with_name("test_vramkit_torch.py")
    env = {k: v for k, v in os.environ.items() if k != "VRAMKIT_LIB" and k != "PYTHONPATH"}
    # The script sets every setting it depends on itself (configure), so the environment's
    # VRAM_* cannot change its outcome: VRAM_MIGRATE=1 here is the default gpu/run.sh had.
    env.update(VRAM_BACKEND="sim", VRAM_MIGRATE="1", VRAM_DEVICE_LIMIT="8GiB")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: vramkit_torch" in out.stdout
    assert "ok: migration on the sim backend" in out.stdout


def test_old_import_path_is_the_same_module():
    import vramkit_torch

    assert vramkit_torch is vt
    assert callable(vramkit_torch.install) and callable(vramkit_torch.memory_summary)
