#!/usr/bin/env python3
"""Kimi-K2.5's vision tower and projector counted by the real transformers, on the meta device.

transformers 5.24 has `kimi_k25` in-tree (`models/kimi_k25/modeling_kimi_k25.py`):
`Kimi_K25Model` builds `vision_tower = Kimi_K25VisionModel._from_config(config.vision_config)`
and `mm_projector = Kimi_K25MultimodalProjection(config)` beside the `deepseek_v3` decoder.
This script reads `tests/zoo/nearmiss/kimi-k2.5.json` (the checkpoint's config.json) with
`Kimi_K25Config.from_dict`, as `from_pretrained` does, builds only those two modules on the
meta device (the 1T-parameter decoder is counted by `tests/zoo/expected.json`'s rules
elsewhere) and records in `tests/zoo/kimi_k25_expected.json`:

* `tower`, `projector`: `sum(p.numel())` of each module;
* `vision_config`: the sizes the library's config ended up with (the checkpoint's remote-code
  keys are `vt_hidden_size`, `vt_num_hidden_layers`, ...; the in-tree class reads
  `hidden_size`, `num_hidden_layers`, ..., whose defaults are Kimi-K2.5's sizes);
* `image_processor`: `Kimi_K25ImageProcessor`'s class defaults (merge, patch, patch limits).

    python tests/zoo/kimi_k25_reference.py           # rewrite tests/zoo/kimi_k25_expected.json
    python tests/zoo/kimi_k25_reference.py --check   # fail if the committed file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "nearmiss" / "kimi-k2.5.json"
EXPECTED = HERE / "kimi_k25_expected.json"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers.models.kimi_k25 import configuration_kimi_k25 as cfgmod
    from transformers.models.kimi_k25 import modeling_kimi_k25 as mod

    raw = json.loads(CONFIG.read_text())
    config = cfgmod.Kimi_K25Config.from_dict(raw)
    with torch.device("meta"):
        tower = mod.Kimi_K25VisionModel._from_config(config.vision_config, dtype=torch.bfloat16)
        projector = mod.Kimi_K25MultimodalProjection(config).to(torch.bfloat16)
    count = lambda m: sum(p.numel() for p in m.parameters())
    v = config.vision_config
    # The image processor is read from its class body (no torchvision in this venv to build it).
    src = Path(mod.__file__).with_name("image_processing_kimi_k25.py").read_text()
    import ast

    body = next(
        n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "Kimi_K25ImageProcessor"
    )
    defaults = {}
    for n in body.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name = n.targets[0].id
            if name in ("size", "max_patches", "patch_size", "merge_size"):
                defaults[name] = ast.literal_eval(n.value)
    out = {
        "generated_by": "tests/zoo/kimi_k25_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "config": "tests/zoo/nearmiss/kimi-k2.5.json",
        "tower": count(tower),
        "projector": count(projector),
        "vision_config": {
            "hidden_size": v.hidden_size,
            "intermediate_size": v.intermediate_size,
            "num_hidden_layers": v.num_hidden_layers,
            "num_attention_heads": v.num_attention_heads,
            "patch_size": v.patch_size,
            "pos_emb_height": v.pos_emb_height,
            "pos_emb_width": v.pos_emb_width,
            "merge_kernel_size": list(v.merge_kernel_size),
        },
        "text_hidden_size": config.text_config.hidden_size,
        "image_processor": defaults,
    }
    text = json.dumps(out, indent=2, sort_keys=True) + "\n"
    if args.check:
        if EXPECTED.read_text() != text:
            print("kimi_k25_expected.json differs from the library", file=sys.stderr)
            return 1
        return 0
    EXPECTED.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
