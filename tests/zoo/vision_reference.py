#!/usr/bin/env python3
"""Image token counts for `vram estimate --images` from the real transformers (issue 21 item 4).

For every vision-language config of `tests/zoo/configs` (Qwen3-VL, Qwen3.5, Llama 4, Gemma 3,
Gemma 4) and each image size of SIZES this records in `tests/zoo/vision_expected.json`, per
image:

* `patches`: the positions the vision tower's layers run over (Qwen: the resized grid's
  patches; Llama 4: every tile's patches plus its class token; Gemma 3: the fixed grid; Gemma 4:
  the patch budget the processor pads to);
* `tokens`: the image-feature placeholders the processor writes into the text;
* `sequence`: the image's whole span in the token sequence (its start/end/separator tokens);
* `tiles` and `resized` (width, height) where the processor decides them;
* `tower` (Qwen3-VL, Qwen3.5): the shapes the real vision tower class returns for the
  1024x768 image (`tower_features`): image features `[tokens, text hidden]` and the deepstack
  features.

How: this venv has neither torchvision nor PIL (the processors' two image backends), so the
processors cannot be called on pixels. The functions that decide the counts are executed from
the installed library's own source instead (`library_functions`: the function bodies of
`smart_resize`, `Qwen2VLImageProcessor.get_number_of_image_patches`, Llama 4's
`find_supported_resolutions`/`get_best_fit`, Gemma 4's `get_aspect_ratio_preserving_size`,
and the processors' prompt-expansion methods, exec'd from their files), with the class defaults
read from the class bodies. What a processor's `_preprocess` adds around them is short and is
written here with the line it mirrors. The text each processor writes for an image is built by
its own method and its tokens counted.

Processor settings: each family's image-processor class defaults, with the patch, merge and
tile sizes of the model's `vision_config` (the tower's positions are built for them); Gemma 4's
`max_soft_tokens` is the config's `vision_soft_tokens_per_image`, Gemma 3's tokens its
`mm_tokens_per_image`.

    python tests/zoo/vision_reference.py           # rewrite tests/zoo/vision_expected.json
    python tests/zoo/vision_reference.py --check   # fail if the committed file differs
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import json
import math
import re
import sys
import types
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
EXPECTED = HERE / "vision_expected.json"

# (width, height) before the processor: square, landscape, portrait, tiny, huge, long strips
# (the last one beyond smart_resize's aspect-ratio limit of 200).
SIZES = [
    (224, 224),
    (336, 336),
    (640, 480),
    (1024, 768),
    (768, 1024),
    (1280, 720),
    (1920, 1080),
    (4032, 3024),
    (32, 32),
    (3000, 200),
    (100, 672),
    (20000, 64),
]

VL_CONFIGS = [
    "qwen3-vl-8b-instruct",
    "qwen3-vl-30b-a3b-instruct",
    "qwen3.5-27b",
    "qwen3.5-35b-a3b",
    "llama-4-scout-17b-16e-instruct",
    "gemma-3-4b-it",
    "gemma-4-26b-a4b",
]


@dataclasses.dataclass(frozen=True)
class _Size:
    height: int
    width: int


def models_dir() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def library_functions(path: Path, names: list[str], cls: str | None = None) -> dict:
    """The named top-level functions (or methods of `cls`) of a library file, compiled from its
    own source, plus the class's literal attributes under `cls_defaults`."""
    import torch

    tree = ast.parse(path.read_text())
    scope = tree.body
    defaults = {}
    if cls is not None:
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        scope = node.body
        for n in node.body:
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                # Literals and arithmetic on them (`56 * 56`); names (OPENAI_CLIP_MEAN) skipped.
                try:
                    expr = compile(ast.Expression(n.value), str(path), "eval")
                    defaults[n.targets[0].id] = eval(expr, {"__builtins__": {}})  # noqa: S307
                except Exception:  # noqa: BLE001
                    pass
    ns = {
        "math": math,
        "torch": torch,
        "defaultdict": defaultdict,
        "lru_cache": lru_cache,
        "SizeDict": types.SimpleNamespace,
    }
    out = {}
    for n in scope:
        if isinstance(n, ast.FunctionDef) and n.name in names:
            n.decorator_list = [d for d in n.decorator_list if ast.unparse(d) == "lru_cache(maxsize=1)"]
            n.returns = None
            for a in n.args.args + n.args.kwonlyargs:
                a.annotation = None
            mod = ast.Module(body=[n], type_ignores=[])
            exec(compile(ast.fix_missing_locations(mod), str(path), "exec"), ns)
            out[n.name] = ns[n.name]
    missing = set(names) - set(out)
    if missing:
        raise SystemExit(f"{path}: no {sorted(missing)}")
    out["cls_defaults"] = defaults
    return out


def count_tokens(text: str) -> int:
    """Special tokens (`<|...|>`, `<...>`) and Gemma's "\\n\\n" (one token in its vocabulary)."""
    return len(re.findall(r"<\|[a-z_]+\|>|<[a-z_]+>|\n\n", text))


def qwen(cfg, w: int, h: int) -> dict:
    m = models_dir()
    ip = library_functions(
        m / "qwen2_vl/image_processing_qwen2_vl.py",
        ["get_number_of_image_patches"],
        cls="Qwen2VLImageProcessor",
    )
    top = library_functions(m / "qwen2_vl/image_processing_qwen2_vl.py", ["smart_resize"])
    ip["get_number_of_image_patches"].__globals__["smart_resize"] = top["smart_resize"]
    vc = cfg.vision_config
    d = ip["cls_defaults"]
    this = types.SimpleNamespace(
        patch_size=vc.patch_size,
        merge_size=vc.spatial_merge_size,
        size=dict(d["size"]),
    )
    patches = ip["get_number_of_image_patches"](this, h, w, {})
    rh, rw = top["smart_resize"](
        h,
        w,
        factor=vc.patch_size * vc.spatial_merge_size,
        min_pixels=d["size"]["shortest_edge"],
        max_pixels=d["size"]["longest_edge"],
    )
    # processing_qwen3_vl.py replace_image_token: grid_thw.prod() // merge**2 placeholders; one
    # image is one temporal patch (grid_t = 1).
    proc = library_functions(m / "qwen3_vl/processing_qwen3_vl.py", ["replace_image_token"], cls="Qwen3VLProcessor")
    grid = __import__("torch").tensor([[1, rh // vc.patch_size, rw // vc.patch_size]])
    pself = types.SimpleNamespace(
        image_processor=types.SimpleNamespace(merge_size=vc.spatial_merge_size), image_token="<|image_pad|>"
    )
    text = proc["replace_image_token"](pself, {"image_grid_thw": grid}, 0)
    tokens = text.count("<|image_pad|>")
    # The chat template writes <|vision_start|><|image_pad|><|vision_end|>.
    return {
        "resized": [rw, rh],
        "tiles": 1,
        "patches": patches,
        "tokens": tokens,
        "sequence": count_tokens("<|vision_start|>" + text + "<|vision_end|>"),
        "grid_thw": [1, rh // vc.patch_size, rw // vc.patch_size],
    }


def llama4(cfg, w: int, h: int) -> dict:
    import torch

    m = models_dir()
    f = library_functions(
        m / "llama4/image_processing_llama4.py",
        ["get_factors", "find_supported_resolutions", "get_best_fit"],
    )
    vc = cfg.vision_config
    d = library_functions(m / "llama4/image_processing_llama4.py", [], cls="Llama4ImageProcessor")["cls_defaults"]
    tile = vc.image_size
    size = _Size(height=tile, width=tile)  # hashable, as SizeDict is (the function is lru_cached)
    # Llama4ImageProcessor._preprocess: canvases for `max_patches` tiles, the best fit for the
    # image's (height, width), tiles = canvas // size, a global tile when there are several.
    possible = torch.tensor(f["find_supported_resolutions"](d["max_patches"], size))
    target = f["get_best_fit"]((h, w), possible, resize_to_max_canvas=d["resize_to_max_canvas"])
    rh, rw = int(target[0]) // tile, int(target[1]) // tile
    tiles = rh * rw + (1 if rh * rw > 1 else 0)
    # processing_llama4.py: num_patches_per_chunk and _prompt_split_image.
    downsample = int(round(1.0 / (vc.pixel_shuffle_ratio**2)))
    per_chunk = (tile // vc.patch_size) * (tile // vc.patch_size) // downsample
    proc = library_functions(m / "llama4/processing_llama4.py", ["_prompt_split_image"], cls="Llama4Processor")
    text = proc["_prompt_split_image"](None, [rh, rw], per_chunk)
    return {
        "resized": [rw * tile, rh * tile],
        "tiles": tiles,
        # Llama4VisionModel: a class token per tile, positions for (image_size/patch)² + 1.
        "patches": tiles * ((tile // vc.patch_size) ** 2 + 1),
        "tokens": text.count("<|patch|>"),
        "sequence": count_tokens(text),
    }


def gemma3(cfg, w: int, h: int) -> dict:
    vc = cfg.vision_config
    # Gemma3ImageProcessor resizes every image to `size` (the tower's image_size; pan and scan
    # off by default); processing_gemma3.py writes `full_image_sequence` for each image.
    n = cfg.mm_tokens_per_image
    text = f"\n\n<start_of_image>{'<image_soft_token>' * n}<end_of_image>\n\n"
    return {
        "resized": [vc.image_size, vc.image_size],
        "tiles": 1,
        "patches": (vc.image_size // vc.patch_size) ** 2,
        "tokens": text.count("<image_soft_token>"),
        "sequence": count_tokens(text),
    }


def gemma4(cfg, w: int, h: int) -> dict:
    m = models_dir()
    f = library_functions(m / "gemma4/image_processing_gemma4.py", ["get_aspect_ratio_preserving_size"])
    d = library_functions(m / "gemma4/image_processing_gemma4.py", [], cls="Gemma4ImageProcessor")["cls_defaults"]
    vc = cfg.vision_config
    soft = getattr(cfg, "vision_soft_tokens_per_image", None) or d["max_soft_tokens"]
    pool = vc.pooling_kernel_size
    max_patches = soft * pool**2  # Gemma4ImageProcessor._preprocess
    th, tw = f["get_aspect_ratio_preserving_size"](
        height=h, width=w, patch_size=vc.patch_size, max_patches=max_patches, pooling_kernel_size=pool
    )
    real = (th // vc.patch_size) * (tw // vc.patch_size)
    proc = library_functions(m / "gemma4/processing_gemma4.py", ["replace_image_token"], cls="Gemma4Processor")
    pself = types.SimpleNamespace(boi_token="<boi>", eoi_token="<eoi>", image_token="<image>")
    text = proc["replace_image_token"](pself, {"num_soft_tokens_per_image": [real // pool**2]}, 0)
    return {
        "resized": [tw, th],
        "tiles": 1,
        # padded to max_patches (pad_along_first_dim); the encoder runs over them, masked.
        "patches": max_patches,
        "tokens": text.count("<image>"),
        "sequence": count_tokens(text),
    }


FAMILY = {"qwen3_vl": qwen, "qwen3_vl_moe": qwen, "qwen3_5": qwen, "qwen3_5_moe": qwen, "llama4": llama4, "gemma3": gemma3, "gemma4": gemma4}


def tower_features(cfg, first: dict) -> dict | None:
    """Qwen3-VL / Qwen3.5: run the real vision tower class (`Qwen3VLVisionModel` /
    `Qwen3_5VisionModel`) on the CPU for the first size's patches and return the shapes of the
    image features and the deepstack features. The tower is built with one layer (and, for
    Qwen3-VL, one deepstack merger after it): the shapes do not depend on the depth, and a
    meta-device run is impossible (the rotary and window indices mix the CPU `grid_thw` with
    the tower's tensors)."""
    import torch

    if cfg.model_type not in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        return None
    from transformers import AutoModel

    vc = copy.deepcopy(cfg.vision_config)
    deep = len(getattr(vc, "deepstack_visual_indexes", []) or [])
    vc.depth = 1
    if deep:
        vc.deepstack_visual_indexes = [0]
    torch.manual_seed(0)
    tower = AutoModel.from_config(vc).float().eval()
    grid = torch.tensor([first["grid_thw"]])
    n = int(grid.prod())
    elems = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    with torch.no_grad():
        out = tower(torch.zeros(n, elems), grid_thw=grid)
    feats = out.pooler_output
    stack = getattr(out, "deepstack_features", None) or []
    return {
        "patches_in": n,
        "features": list(feats.shape),
        "deepstack_features": [list(t.shape) for t in stack],
        "deepstack_mergers": deep,
    }


def build() -> dict:
    import torch
    import transformers
    from transformers import AutoConfig

    doc = {
        "generated_by": "tests/zoo/vision_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "sizes": [list(s) for s in SIZES],
        "models": {},
    }
    for name in VL_CONFIGS:
        raw = json.loads((CONFIGS / f"{name}.json").read_text())
        cfg = AutoConfig.for_model(**raw)
        fn = FAMILY[cfg.model_type]
        per = {}
        for w, h in SIZES:
            try:
                per[f"{w}x{h}"] = fn(cfg, w, h)
            except ValueError as e:  # the processor refuses it (e.g. aspect ratio above 200)
                per[f"{w}x{h}"] = {"refused": str(e).splitlines()[0]}
        entry = {"model_type": cfg.model_type, "images": per}
        first = per[f"{SIZES[3][0]}x{SIZES[3][1]}"]
        feats = tower_features(cfg, first)
        if feats is not None:
            entry["tower_at"] = f"{SIZES[3][0]}x{SIZES[3][1]}"
            entry["tower"] = feats
        doc["models"][name] = entry
        print(f"{name}: {first}", file=sys.stderr)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    doc = build()
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if a.check:
        old = EXPECTED.read_text() if EXPECTED.exists() else ""
        if old != text:
            print("vision_reference: tests/zoo/vision_expected.json differs from the pinned library's counts", file=sys.stderr)
            return 1
        print("vision_reference: vision_expected.json matches", file=sys.stderr)
        return 0
    EXPECTED.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
