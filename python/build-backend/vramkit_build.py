"""PEP 517 backend for vramkit: maturin, after building the two native pieces it cannot.

maturin builds one crate per wheel (the extension, crates/vram-py). Before it runs, this
builds the allocator library (vram-torch, libvram_torch.so) and the `vram` binary (vram-cli)
with cargo in the release profile, copies the library into python/vramkit/ and the binary into
target/vramkit-wheel/data/scripts/ (pyproject.toml's `data`), where maturin picks them up. Set
VRAMKIT_SKIP_NATIVE=1 to reuse what an earlier run put there.
"""

import json
import os
import shutil
import subprocess
import sys

import maturin
from maturin import (  # noqa: F401 - re-exported hooks
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "target", "vramkit-wheel", "data", "scripts")


def _target_dir(cargo):
    out = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE,
    ).stdout
    return json.loads(out)["target_directory"]


def _build_native():
    if os.environ.get("VRAMKIT_SKIP_NATIVE") == "1":
        return
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "-p", "vram-cli", "-p", "vram-torch"]
    print("vramkit: " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
    release = os.path.join(_target_dir(cargo), "release")
    lib = os.path.join(ROOT, "python", "vramkit", "libvram_torch.so")
    shutil.copy2(os.path.join(release, "libvram_torch.so"), lib)
    os.makedirs(SCRIPTS, exist_ok=True)
    exe = os.path.join(SCRIPTS, "vram")
    shutil.copy2(os.path.join(release, "vram"), exe)
    # The release profile keeps line tables (debug = 1) for profiling; the wheel needs none.
    strip = shutil.which("strip")
    if strip:
        subprocess.run([strip, "--strip-debug", lib, exe], check=False)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    os.makedirs(SCRIPTS, exist_ok=True)  # maturin checks that pyproject.toml's `data` exists
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    os.makedirs(SCRIPTS, exist_ok=True)
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _build_native()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _build_native()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
