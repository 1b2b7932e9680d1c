"""PEP 517 backend for vramkit: maturin, after building the two native pieces it cannot.

maturin builds one crate per wheel (the extension, crates/vram-py). Before it runs, this
builds the allocator library (vram-torch, libvram_torch.so) and the `vram` binary (vram-cli)
with cargo in the release profile, copies the library into python/vramkit/ and the binary into
target/vramkit-wheel/data/scripts/ (pyproject.toml's `data`), where maturin picks them up. Set
VRAMKIT_SKIP_NATIVE=1 to reuse what an earlier run put there.

Out of tree: `pip install .` builds in the source tree, and cargo's target directory (some
660 MB in release) would be left there. Unless CARGO_TARGET_DIR is set (.ci/python-tests sets it
to the checkout's target/ to reuse its build), cargo and maturin build into a temporary
directory that is removed afterwards, and a wheel build removes what it put in the tree
(target/vramkit-wheel, python/vramkit/libvram_torch.so).
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

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


@contextlib.contextmanager
def _out_of_tree():
    """CARGO_TARGET_DIR for the build: the caller's, or a temporary directory removed after."""
    if os.environ.get("CARGO_TARGET_DIR"):
        yield
        return
    tmp = tempfile.mkdtemp(prefix="vramkit-build-")
    os.environ["CARGO_TARGET_DIR"] = tmp
    try:
        yield
    finally:
        del os.environ["CARGO_TARGET_DIR"]
        shutil.rmtree(tmp, ignore_errors=True)


def _clean_tree(had_target, had_lib):
    """Removes what a wheel build put in the source tree (not what was there before)."""
    shutil.rmtree(os.path.dirname(os.path.dirname(SCRIPTS)), ignore_errors=True)
    target = os.path.join(ROOT, "target")
    if not had_target and os.path.isdir(target) and not os.listdir(target):
        os.rmdir(target)
    lib = os.path.join(ROOT, "python", "vramkit", "libvram_torch.so")
    if not had_lib and os.path.exists(lib):
        os.remove(lib)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    os.makedirs(SCRIPTS, exist_ok=True)  # maturin checks that pyproject.toml's `data` exists
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    os.makedirs(SCRIPTS, exist_ok=True)
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # prepare_metadata (an earlier call) may have made target/vramkit-wheel: it is ours too.
    had_target = os.path.isdir(os.path.join(ROOT, "target")) and os.listdir(os.path.join(ROOT, "target")) != ["vramkit-wheel"]
    had_lib = os.path.exists(os.path.join(ROOT, "python", "vramkit", "libvram_torch.so"))
    skip = os.environ.get("VRAMKIT_SKIP_NATIVE") == "1"
    try:
        with _out_of_tree():
            _build_native()
            os.makedirs(SCRIPTS, exist_ok=True)
            return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    finally:
        if not skip:
            _clean_tree(had_target, had_lib)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # An editable install keeps the library in python/vramkit/, where it imports from.
    with _out_of_tree():
        _build_native()
        return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
