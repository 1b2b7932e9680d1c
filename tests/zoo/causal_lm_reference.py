#!/usr/bin/env python3
"""Every causal-LM type of the pinned transformers, from its default config, on the meta device.

Issue 31 item 4: `vram` must count every `model_type` exactly or refuse it in one line. This
script takes every entry of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` (transformers 5.24.0: 196), makes
its default config (`AutoConfig.for_model(t, architectures=[cls])`: the class defaults, with the
class `AutoModelForCausalLM` builds named, as every checkpoint's config.json names it) and writes
it to `tests/zoo/causal_lm/<t>.json` (`to_json_string(use_diff=False)`, so every default is
spelled out). It then builds that config's model with `AutoModelForCausalLM.from_config` (a
composite config whose causal-LM class takes the text config gets the text config) on the meta
device, in bfloat16 (these configs carry no dtype), and records in `tests/zoo/causal_lm_expected.json`:

* `params`: `sum(p.numel() for p in model.parameters())` (tied weights counted once);
* `params_without_towers`, where the class carries vision or audio towers: the same sum over
  the parameters outside them (no name part in `TOWER_PARTS`), which is what a reader that
  reads such a wrapper as its text model, with a note that the towers are not counted, counts;
* `cache`: the `DynamicCache` bytes per cache kind after a prefill and after one decode step,
  measured as `reference.py` measures them (`reference.cache_run`), at a 16-token prompt and,
  where the model has sliding or chunked windows, at the largest window + 128. One prompt is
  enough without windows: after the prefill and after the step give the per-token and the fixed
  part apart;
* `build_error` / `cache_error`: why a type cannot be built or its cache filled on meta (its
  default config is incomplete, its forward reads tensor values, it keeps a cache of its own);
  such a type has no figure to be exact against and `vram` must refuse it.

`crates/vram-cli/tests/causal_lm.rs` runs `vram` on every config that builds and requires each to
be exact or refused in one line with exit 2; it prints the counts.

    python tests/zoo/causal_lm_reference.py            # rewrite the configs and the expected file
    python tests/zoo/causal_lm_reference.py --check    # what .ci/zoo-tests runs
    python tests/zoo/causal_lm_reference.py --only phi starcoder2   # print some, write nothing
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "causal_lm"
EXPECTED = HERE / "causal_lm_expected.json"
sys.path.insert(0, str(HERE))

import reference  # noqa: E402  (the zoo's measurement: one cache rule for both files)

# Module names of vision and audio towers and their projectors (reference.py's vision parts
# plus the audio encoders of the speech wrappers).
TOWER_PARTS = reference.VISION_PARTS | {"audio_tower", "audio_model", "audio_encoder", "audio_projector"}

SHORT_PROMPT = reference.SHORT_PROMPT
PAST_WINDOW = reference.PAST_WINDOW


def default_config(model_type: str):
    """The default config of `model_type`, naming the causal-LM class."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    return AutoConfig.for_model(model_type, architectures=[cls])


def one(model_type: str) -> tuple[str, str | None, dict]:
    """(type, config text or None, entry) for one causal-LM type."""
    reference._quiet()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    t0 = time.time()
    entry: dict = {"class": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}
    try:
        config = default_config(model_type)
        text = config.to_json_string(use_diff=False)
    except Exception as e:  # the class's own validation refuses its defaults
        entry["config_error"] = _why(e)
        return model_type, None, entry
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.eval()
    except Exception as e:
        entry["build_error"] = _why(e)
        return model_type, text, entry
    entry["built"] = type(model).__name__
    entry["params"] = sum(p.numel() for p in model.parameters())
    outside = sum(p.numel() for n, p in model.named_parameters() if not TOWER_PARTS & set(n.split(".")))
    if outside != entry["params"]:
        entry["params_without_towers"] = outside
    try:
        win = reference.windows(model)
        runs = [(1, SHORT_PROMPT)] + ([(1, max(win) + PAST_WINDOW)] if win else [])
        reference._zero_experts(model)
        entry["windows"] = win
        entry["cache"] = [reference.cache_run(model, b, p) for b, p in runs]
    except (Exception, SystemExit) as e:
        entry["cache_error"] = _why(e)
    print(f"{model_type:28} {entry['params']:>16,} params  {time.time() - t0:5.1f} s", file=sys.stderr, flush=True)
    return model_type, text, entry


def _why(e: BaseException) -> str:
    """One line naming the exception (no addresses, so the file is stable)."""
    line = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {line}"[:200]


def generate(jobs: int, types: list[str]) -> tuple[dict, dict]:
    import torch
    import transformers

    if jobs > 1:
        # Two workers for the whole run: a worker that builds half the types peaks under 1 GB
        # resident, and each new one pays torch's and transformers' import again (BENCHMARKS.md,
        # "CI time", session 11).
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(one, types, chunksize=1)
    else:
        results = [one(t) for t in types]
    configs = {t: text for t, text, _ in results if text is not None}
    doc = {
        "generated_by": "tests/zoo/causal_lm_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "device": "meta",
        "dtype": "bfloat16",
        "models": {t: e for t, _, e in sorted(results)},
    }
    return configs, doc


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", nargs="*", help="model types; printed, never written")
    args = ap.parse_args()
    reference._quiet()
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not transformers.__version__.startswith(reference.PINNED["transformers"]):
        print(f"needs transformers {reference.PINNED['transformers']}, found {transformers.__version__}", file=sys.stderr)
        return 2
    types = args.only or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    t0 = time.time()
    configs, doc = generate(args.jobs, types)
    built = sum(1 for e in doc["models"].values() if "params" in e)
    print(f"{len(types)} causal-LM types, {built} built on meta, in {time.time() - t0:.0f} s", file=sys.stderr)
    if args.only:
        print(dump(doc))
        return 0
    if args.check:
        bad = []
        on_disk = {p.stem: p.read_text() for p in CONFIGS.glob("*.json")}
        for t in sorted(set(on_disk) | set(configs)):
            if on_disk.get(t) != configs.get(t):
                bad.append(f"tests/zoo/causal_lm/{t}.json differs from AutoConfig.for_model({t!r})")
        committed = json.loads(EXPECTED.read_text())
        for t in sorted(set(committed.get("models", {})) | set(doc["models"])):
            a, b = committed.get("models", {}).get(t), doc["models"].get(t)
            if a != b:
                bad.append(f"{t}:\n  committed: {json.dumps(a)[:300]}\n  now:       {json.dumps(b)[:300]}")
        for key in ("transformers", "torch", "device", "dtype", "generated_by"):
            if committed.get(key) != doc.get(key):
                bad.append(f"{key}: committed {committed.get(key)!r}, now {doc.get(key)!r}")
        for line in bad:
            print(f"differs: {line}", file=sys.stderr)
        if bad:
            print("tests/zoo/causal_lm* is stale: rerun tests/zoo/causal_lm_reference.py and commit it", file=sys.stderr)
            return 1
        print("tests/zoo/causal_lm_expected.json matches transformers", transformers.__version__, file=sys.stderr)
        return 0
    CONFIGS.mkdir(exist_ok=True)
    for p in CONFIGS.glob("*.json"):
        p.unlink()
    for t, text in configs.items():
        (CONFIGS / f"{t}.json").write_text(text)
    EXPECTED.write_text(dump(doc))
    print(f"wrote {len(configs)} configs and {EXPECTED.relative_to(HERE.parent.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
