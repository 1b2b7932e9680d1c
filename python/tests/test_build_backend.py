"""`pip install .` leaves no build output in the source tree (python/build-backend/vramkit_build.py).

pip builds in the source tree; cargo would put its target directory (660 MB in release) there.
The backend runs here on a copy of itself in a scratch tree, with a stand-in for cargo (which
writes the files a release build makes under whatever target directory it is given) and for
maturin (which records where it was asked to build): after a wheel build the tree holds what it
held before, and the build directory was elsewhere and is gone.
"""

import importlib.util
import json
import os
import shutil
import stat
import sys
import types
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[1] / "build-backend" / "vramkit_build.py"

FAKE_CARGO = """#!{python}
import json, os, sys
root = os.getcwd()
target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
if sys.argv[1] == "metadata":
    print(json.dumps({{"target_directory": target}}))
elif sys.argv[1] == "build":
    release = os.path.join(target, "release")
    os.makedirs(release, exist_ok=True)
    for name in ("libvram_torch.so", "vram"):
        with open(os.path.join(release, name), "wb") as f:
            f.write(b"built")
"""


def load_backend(root: Path, monkeypatch, seen: dict):
    maturin = types.ModuleType("maturin")

    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        seen["target"] = os.environ.get("CARGO_TARGET_DIR")
        seen["scripts"] = sorted(os.listdir(root / "target" / "vramkit-wheel" / "data" / "scripts"))
        seen["lib"] = (root / "python" / "vramkit" / "libvram_torch.so").exists()
        Path(wheel_directory, "vramkit-0-py3-none-any.whl").write_bytes(b"wheel")
        return "vramkit-0-py3-none-any.whl"

    maturin.build_wheel = build_wheel
    maturin.prepare_metadata_for_build_wheel = lambda d, c=None: "vramkit.dist-info"
    for name in ("build_sdist", "get_requires_for_build_editable", "get_requires_for_build_sdist",
                 "get_requires_for_build_wheel", "build_editable", "prepare_metadata_for_build_editable"):
        setattr(maturin, name, lambda *a, **k: None)
    monkeypatch.setitem(sys.modules, "maturin", maturin)
    spec = importlib.util.spec_from_file_location("vramkit_build_copy", root / "python" / "build-backend" / "vramkit_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_wheel_build_leaves_nothing_in_the_source_tree(tmp_path, monkeypatch):
    root = tmp_path / "src"
    (root / "python" / "build-backend").mkdir(parents=True)
    (root / "python" / "vramkit").mkdir()
    shutil.copy(BACKEND, root / "python" / "build-backend" / "vramkit_build.py")
    cargo = tmp_path / "cargo"
    cargo.write_text(FAKE_CARGO.format(python=sys.executable))
    cargo.chmod(cargo.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CARGO", str(cargo))
    monkeypatch.delenv("CARGO_TARGET_DIR", raising=False)
    monkeypatch.delenv("VRAMKIT_SKIP_NATIVE", raising=False)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    seen = {}
    backend = load_backend(root, monkeypatch, seen)
    (tmp_path / "meta").mkdir()
    (tmp_path / "wheels").mkdir()
    backend.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    assert backend.build_wheel(str(tmp_path / "wheels")) == "vramkit-0-py3-none-any.whl"
    # maturin saw the binary and the library in place, and built outside the tree.
    assert seen["scripts"] == ["vram"] and seen["lib"], seen
    assert seen["target"] and not Path(seen["target"]).resolve().is_relative_to(root.resolve()), seen
    assert not Path(seen["target"]).exists(), "the temporary target directory is removed"
    after = sorted(p.relative_to(root) for p in root.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, f"left in the source tree: {sorted(set(after) - set(before))}"
    assert "CARGO_TARGET_DIR" not in os.environ


def test_a_given_target_directory_is_used_and_kept(tmp_path, monkeypatch):
    # .ci/python-tests passes the checkout's target/ to reuse its build.
    root = tmp_path / "src"
    (root / "python" / "build-backend").mkdir(parents=True)
    (root / "python" / "vramkit").mkdir()
    shutil.copy(BACKEND, root / "python" / "build-backend" / "vramkit_build.py")
    cargo = tmp_path / "cargo"
    cargo.write_text(FAKE_CARGO.format(python=sys.executable))
    cargo.chmod(cargo.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CARGO", str(cargo))
    given = tmp_path / "given-target"
    monkeypatch.setenv("CARGO_TARGET_DIR", str(given))
    monkeypatch.delenv("VRAMKIT_SKIP_NATIVE", raising=False)
    seen = {}
    backend = load_backend(root, monkeypatch, seen)
    (tmp_path / "wheels").mkdir()
    backend.build_wheel(str(tmp_path / "wheels"))
    assert seen["target"] == str(given)
    assert (given / "release" / "vram").exists()
    assert json.loads(json.dumps(seen))  # plain data
