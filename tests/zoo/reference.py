#!/usr/bin/env python3
"""Reference figures for `vram` from the real transformers, on the meta device.

For every `tests/zoo/configs/<name>.json` this builds the model class its checkpoint names
(`architectures[0]`) with the pinned transformers on the meta device (no weights, no GPU) and
records in `tests/zoo/expected.json`:

* `params`: `sum(p.numel() for p in model.parameters())` (tied weights counted once);
* `params_by_component`: the same parameters split by name with the rules of `component()`
  below (the keys of TEAM.md / issue 21; `other` must stay 0, the run fails otherwise);
* `cache`: for each run (batch, prompt), the bytes transformers' own `DynamicCache` holds after
  the prefill of `prompt` tokens and after one decode step, per cache-layer class kind, with
  the layer count of each kind.

Cache bytes are *storage* bytes: a cached tensor that is a view of a bigger tensor counts the
whole storage it keeps alive (a sliding layer keeps `full[:, :, -(window-1):]`, a view of the
whole prompt's K/V, after the prefill: cache_utils.py `DynamicSlidingWindowLayer.update`).
Storages are deduplicated by their StorageImpl (`untyped_storage()._cdata`): meta tensors all
report `data_ptr() == 0`, so the data pointer cannot tell storages apart on meta; `_cdata` can
(a view shares its base's `_cdata`, two allocations never do while both are alive).

The cache is the one `generate` builds (generation/utils.py `_prepare_cache_for_generation`:
`DynamicCache(config=model.config.get_text_config(decoder=True))`), filled by the model's own
forward with `use_cache=True` and `logits_to_keep=1`, then one step of one token. The forward
runs whole except the routed-expert banks: every `*Experts` module's forward is replaced by
zeros of its input's shape for the cache run (`_zero_experts`), since the cache does not depend
on the feed-forward and the banks' grouped/looped matmuls dominate the meta-device run time;
routers, shared experts and dense MLPs still run. Linear-attention and Mamba layers run their pure-torch fallbacks (no `fla`,
`mamba_ssm` or `causal_conv1d` in the venv): their state dtype is the fallback's.

Special cases (each also written into the entry's `notes`):
* kimi_k2: no class is registered for it in transformers 5.24 (its `auto_map` names remote
  DeepSeek-V3 code); it is built as the in-tree deepseek_v3 from the same keys.
* mimo: remote code (`MiMoForCausalLM`, XiaomiMiMo/MiMo `modeling_mimo.py`, commit
  051d98d073eee95ada84581d5a9ca55249bf45e2): a Qwen2ForCausalLM whose model carries
  `num_nextn_predict_layers` MTP blocks that `from_pretrained` instantiates but the forward
  does not call. Built here as transformers' Qwen2ForCausalLM plus `MiMoMtpBlock`s with that
  file's parameter set (five RMSNorms, input_proj 2H->H, a Qwen2Attention, a Qwen2MLP).
* llama4: `Llama4ForConditionalGeneration.forward` in 5.24 fails without images
  (`MoeCausalLMOutputWithPast` has no `image_outputs`), so the cache run calls its
  `language_model` (the same Llama4ForCausalLM module the wrapper runs for text).

Run it with the engines' venv (transformers 5.24.0, torch 2.15):
    python tests/zoo/reference.py            # rewrite tests/zoo/expected.json
    python tests/zoo/reference.py --check    # fail if the committed file differs
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
EXPECTED = HERE / "expected.json"

PINNED = {"transformers": "5.24.0", "torch": "2.15"}

COMPONENTS = [
    "embedding",
    "mixer",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "head",
    "vision",
    "mtp",
    "other",
]

# The short prompt, and how far the long prompt goes past the largest sliding/chunked window.
SHORT_PROMPT = 16
PAST_WINDOW = 128
# The long prompt of models without any window.
LONG_PROMPT_NO_WINDOW = 512
# Extra runs at batch 2 (config name -> prompt kind).
BATCH2 = {"gpt-oss-20b": "long", "qwen3.5-35b-a3b": "short"}

# Cache-layer classes of cache_utils.py (5.24) and the kind TEAM.md names them by.
# DummyLayer (MoE/MLP-only layers, KV-shared consumers) holds nothing and has no kind.
CACHE_KIND = {
    "DynamicLayer": "full",
    "DynamicSlidingWindowLayer": "sliding",
    "LinearAttentionLayer": "linear",
    "DynamicIndexedLayer": "indexed",
}
NO_CACHE = {"DummyLayer"}
# Layers that hold attention keys/values and linear-attention states together (Falcon-H1, Zamba:
# attention and Mamba in one layer): the keys and values count under the attention kind, the
# conv and recurrent states under `linear`, and the layer under both.
HYBRID_KIND = {
    "LinearAttentionAndFullAttentionLayer": "full",
    "LinearAttentionAndSlidingWindowAttentionLayer": "sliding",
}

# ---- parameter components --------------------------------------------------------------
# The rules, in order, on a parameter's dotted name (`model.layers.3.mlp.experts.gate_up_proj`):
# 1. a name part in VISION_PARTS                        -> vision (tower, projector, merger)
# 2. a name part starting with "mtp"                    -> mtp
# 3. the owning module is `lm_head`                     -> head (absent when tied: counted once)
# 4. a name part in EMBED_PARTS                         -> embedding
# 5. inside a decoder layer (`layers.<i>.<child>...`, GPT-style `h.<i>.<child>...`):
#    a. child in PER_LAYER_INPUT (Gemma per-layer inputs) -> embedding
#    b. child in MIXER_CHILDREN, or child `mixer` that is neither an MoE block nor a class
#       named *MLP (Nemotron-H names every block `mixer`)   -> mixer
#    c. child is an MoE block (holds an `experts` bank): `experts.*` -> routed_experts,
#       `shared*` (shared expert(s), their gate)  -> shared_experts,
#       `gate.*` / `router.*` (weights, biases, e_score_correction_bias, moe_statics) -> router
#    d. child `experts` / `router` directly on the layer (Gemma 4) -> routed_experts / router
#    e. child `shared_mlp` / `shared_expert*` on the layer: shared_experts when the layer has
#       routed experts (Granite 4.0-H), else dense_mlp
#    f. child in FFN_CHILDREN (a dense feed-forward)     -> dense_mlp
#    g. child name containing "norm" or starting "ln_"    -> norms
# 6. outside the layers, owning module name containing "norm", or `ln_f` (final norm) -> norms
# 7. anything else                                       -> other (the run fails if nonzero)
VISION_PARTS = {
    "visual",
    "vision_tower",
    "vision_model",
    "multi_modal_projector",
    "embed_vision",
    "vision_embed_tokens",
}
EMBED_PARTS = {
    "embed_tokens",
    "embed_positions",
    "word_embeddings",
    "word_embeddings_layernorm",
    "embed_tokens_per_layer",
    "embeddings",
    "wte",
    "wpe",
    "per_layer_model_projection",
    "per_layer_projection_norm",
}
PER_LAYER_INPUT = {"per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm"}
# Llama 3.2 Vision's cross-attention layers: `cross_attn` and its two scalar gates
# (`cross_attn_attn_gate`, `cross_attn_mlp_gate`) count with the mixer.
MIXER_CHILDREN = {
    "self_attn",
    "linear_attn",
    "mamba",
    "attention",
    "self_attention",
    "attn",
    "cross_attn",
    "cross_attn_attn_gate",
    "cross_attn_mlp_gate",
}
FFN_CHILDREN = {"mlp", "feed_forward", "block_sparse_moe", "moe", "mixer"}


def _layer_split(parts: list[str]) -> int | None:
    """Index of `layers` in `...layers.<i>.<child>...`, or None outside the decoder layers."""
    for i in range(len(parts) - 2):
        if parts[i] in ("layers", "h") and parts[i + 1].isdigit():
            return i
    return None


def _is_moe_block(module) -> bool:
    """Whether `module` holds a routed-expert bank (a submodule named `experts`)."""
    return any(n.rsplit(".", 1)[-1] == "experts" for n, _ in module.named_modules())


def component(model, name: str) -> str:
    """The component of parameter `name` of `model` (rules above)."""
    parts = name.split(".")
    if VISION_PARTS & set(parts):
        return "vision"
    if any(p.startswith("mtp") for p in parts):
        return "mtp"
    if len(parts) >= 2 and parts[-2] == "lm_head":
        return "head"
    if EMBED_PARTS & set(parts):
        return "embedding"
    i = _layer_split(parts)
    if i is not None:
        layer = model.get_submodule(".".join(parts[: i + 2]))
        child, rest = parts[i + 2], parts[i + 3 :]
        if child in MIXER_CHILDREN:
            return "mixer"  # a parameter directly on the layer (Mllama's gates) has no module
        module = layer.get_submodule(child)
        layer_has_experts = _is_moe_block(layer)
        if child in PER_LAYER_INPUT:
            return "embedding"
        if child in MIXER_CHILDREN:
            return "mixer"
        if child == "mixer" and not _is_moe_block(module) and not type(module).__name__.endswith("MLP"):
            return "mixer"
        if child in FFN_CHILDREN and _is_moe_block(module):
            head = rest[0] if rest else ""
            if head == "experts":
                return "routed_experts"
            if head.startswith("shared"):
                return "shared_experts"
            if head in ("gate", "router"):
                return "router"
            if head in ("fc1_latent_proj", "fc2_latent_proj"):
                # Nemotron-H's latent MoE (modeling_nemotron_h.py `NemotronHMoE`): the routed
                # experts run on hidden_states projected to `moe_latent_size` and back.
                return "routed_experts"
            return "other"
        if child == "experts":
            return "routed_experts"
        if child == "router":
            return "router"
        if child.startswith("shared"):
            return "shared_experts" if layer_has_experts else "dense_mlp"
        if child in FFN_CHILDREN:
            return "dense_mlp"
        if "norm" in child or child.startswith("ln_"):
            return "norms"
        return "other"
    if len(parts) >= 2 and ("norm" in parts[-2] or parts[-2] == "ln_f"):
        return "norms"
    return "other"


# ---- building -----------------------------------------------------------------------------


def _quiet():
    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    logging.set_verbosity_error()


def _mimo_mtp_block(config):
    """One MTP block of MiMo (modeling_mimo.py `MiMoMTPLayers`): the parameter set only."""
    from torch import nn
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2MLP, Qwen2RMSNorm

    block = nn.Module()
    h, eps = config.hidden_size, config.rms_norm_eps
    for norm in (
        "input_layernorm",
        "post_attention_layernorm",
        "token_layernorm",
        "hidden_layernorm",
        "final_layernorm",
    ):
        setattr(block, norm, Qwen2RMSNorm(h, eps=eps))
    block.input_proj = nn.Linear(2 * h, h, bias=False)
    block.self_attn = Qwen2Attention(config, layer_idx=0)
    block.mlp = Qwen2MLP(config)
    return block


def build(path: Path):
    """(model, notes) for the config at `path`, built on the meta device in the config's dtype."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw = json.loads(path.read_text())
    model_type = raw["model_type"]
    arch = raw["architectures"][0]
    notes = []
    if model_type == "kimi_k2":
        config = CONFIG_MAPPING["deepseek_v3"].from_dict(raw)
        cls = transformers.DeepseekV3ForCausalLM
        notes.append("kimi_k2 is not registered in transformers 5.24: built as deepseek_v3")
    elif model_type == "mimo":
        config = CONFIG_MAPPING["qwen2"].from_dict(raw)
        cls = transformers.Qwen2ForCausalLM
        notes.append(
            "mimo is remote code: Qwen2ForCausalLM plus num_nextn_predict_layers MTP blocks "
            "(modeling_mimo.py MiMoMTPLayers), instantiated but not run by the forward"
        )
    else:
        config = CONFIG_MAPPING[model_type].from_dict(raw)
        cls = getattr(transformers, arch)
    # from_pretrained's dtype="auto" (modeling_utils.py `_get_dtype`): the config's dtype, else
    # the dtype of the checkpoint's first floating weight. Without the checkpoint: the text
    # sub-config's dtype where the top level has none (Qwen3-VL, Qwen3.5), else bfloat16, the
    # dtype every checkpoint here stores its unquantized weights in (gpt-oss, MiniMax-M2.5).
    dtype = getattr(config, "dtype", None)
    if dtype is None:
        dtype = getattr(config.get_text_config(decoder=True), "dtype", None)
        if dtype is not None:
            notes.append(f"dtype {str(dtype).removeprefix('torch.')} from text_config (none at the top level)")
    if dtype is None:
        dtype = torch.bfloat16
        notes.append("config has no dtype: bfloat16, as from_pretrained reads it off the checkpoint's weights")
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = cls._from_config(config, dtype=dtype)
        if model_type == "mimo":
            model.model.mtp_layers = torch.nn.ModuleList(
                [_mimo_mtp_block(config) for _ in range(raw.get("num_nextn_predict_layers", 0))]
            ).to(dtype)
    model.eval()
    return model, cls.__name__, dtype, notes


# ---- cache ------------------------------------------------------------------------------------


def _layer_tensors(layer, parts=("kv", "states")):
    if "kv" in parts:
        for attr in ("keys", "values", "indexer_keys"):
            t = getattr(layer, attr, None)
            if t is not None:
                yield t
    if "states" not in parts:
        return
    for attr in ("conv_states", "recurrent_states"):
        states = getattr(layer, attr, None)
        if states is None:
            continue
        values = states.values() if isinstance(states, dict) else states
        for t in values:
            if t is not None:
                yield t


def _storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


def measure(cache) -> dict:
    """Storage bytes the cache holds, per kind and in total (deduplicated per storage)."""
    kinds: dict[str, dict] = {}
    every = []
    for layer in cache.layers:
        cls = type(layer).__name__
        if cls in NO_CACHE:
            continue
        if cls in HYBRID_KIND:
            parts = [(HYBRID_KIND[cls], ("kv",)), ("linear", ("states",))]
        elif cls in CACHE_KIND:
            parts = [(CACHE_KIND[cls], ("kv", "states"))]
        else:
            raise SystemExit(f"unknown cache layer class {cls}: give it a kind in CACHE_KIND")
        for kind, which in parts:
            tensors = list(_layer_tensors(layer, which))
            every += tensors
            entry = kinds.setdefault(kind, {"layers": 0, "tensors": []})
            entry["layers"] += 1
            entry["tensors"] += tensors
    out = {k: {"layers": v["layers"], "bytes": _storage_bytes(v["tensors"])} for k, v in kinds.items()}
    total = _storage_bytes(every)
    assert total == sum(v["bytes"] for v in out.values()), "a storage is shared across kinds"
    return {"kinds": out, "total": total}


def _zero_experts(model) -> int:
    """Replace the forward of every routed-expert bank by zeros of its input's shape."""
    import torch

    def zeros(hidden_states, *args, **kwargs):
        return torch.zeros_like(hidden_states)

    n = 0
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "experts" and type(module).__name__.endswith("Experts"):
            module.forward = zeros
            n += 1
    return n


def windows(model) -> list[int]:
    """The sliding/chunked windows of the cache `generate` would build for `model`."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    return sorted({l.sliding_window for l in cache.layers if hasattr(l, "sliding_window")})


def cache_run(model, batch: int, prompt: int) -> dict:
    import torch
    from transformers import DynamicCache

    runner = model.language_model if type(model).__name__ == "Llama4ForConditionalGeneration" else model
    if not model._supports_default_dynamic_cache():
        raise SystemExit("generate builds no DynamicCache for it (`_supports_default_dynamic_cache`)")
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    ids = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
    with torch.no_grad():
        runner(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = measure(cache)
        runner(input_ids=ids[:, :1], cache=cache, use_cache=True, logits_to_keep=1)
        decode = measure(cache)
    by_kind = {}
    for kind in sorted(set(prefill["kinds"]) | set(decode["kinds"])):
        p = prefill["kinds"].get(kind, {"layers": 0, "bytes": 0})
        d = decode["kinds"].get(kind, {"layers": 0, "bytes": 0})
        by_kind[kind] = {
            "layers": max(p["layers"], d["layers"]),
            "after_prefill_bytes": p["bytes"],
            "after_decode_bytes": d["bytes"],
        }
    return {
        "batch": batch,
        "prompt": prompt,
        "new_tokens": 1,
        "cache_after_prefill_bytes": prefill["total"],
        "cache_after_decode_bytes": decode["total"],
        "cache_bytes_per_token": decode["total"] - prefill["total"],
        "cache_by_kind": by_kind,
    }


# ---- one config -----------------------------------------------------------------------------


def reference(path: Path) -> tuple[str, dict]:
    _quiet()
    import torch

    t0 = time.time()
    name = path.stem
    model, cls_name, dtype, notes = build(path)
    params = sum(p.numel() for p in model.parameters())
    by = dict.fromkeys(COMPONENTS, 0)
    for pname, p in model.named_parameters():
        by[component(model, pname)] += p.numel()
    assert sum(by.values()) == params
    if by["other"]:
        stray = [n for n, _ in model.named_parameters() if component(model, n) == "other"]
        raise SystemExit(f"{name}: parameters in `other`: {stray[:8]}")

    win = windows(model)
    long_prompt = max(win) + PAST_WINDOW if win else LONG_PROMPT_NO_WINDOW
    runs = [(1, SHORT_PROMPT), (1, long_prompt)]
    if name in BATCH2:
        runs.append((2, SHORT_PROMPT if BATCH2[name] == "short" else long_prompt))
    _zero_experts(model)
    cache = [cache_run(model, b, p) for b, p in runs]
    raw = json.loads(path.read_text())
    entry = {
        "config": f"tests/zoo/configs/{path.name}",
        "model_type": raw["model_type"],
        "class": cls_name,
        "dtype": str(dtype).removeprefix("torch."),
        "params": params,
        "params_by_component": by,
        "windows": win,
        "cache": cache,
        "notes": notes,
    }
    print(f"{name:38} {params:>16,} params  {time.time() - t0:5.1f} s", file=sys.stderr, flush=True)
    del torch
    return name, entry


def generate(jobs: int, only: list[str] | None) -> dict:
    import torch
    import transformers

    paths = sorted(CONFIGS.glob("*.json"))
    if only:
        paths = [p for p in paths if p.stem in only]
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(reference, paths, chunksize=1)
    else:
        results = [reference(p) for p in paths]
    return {
        "generated_by": "tests/zoo/reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "device": "meta",
        "models": dict(sorted(results)),
    }


def check_sources() -> list[str]:
    """Every config is listed in SOURCES.md with the first 16 hex digits of its sha256."""
    import hashlib
    import re

    text = (HERE / "SOURCES.md").read_text()
    bad = []
    for path in sorted(CONFIGS.glob("*.json")):
        sha = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        row = re.search(r"^\| `" + re.escape(path.name) + r"` \|.*`([0-9a-f]{16})` \|$", text, re.M)
        if row is None:
            bad.append(f"{path.name} is not listed in SOURCES.md")
        elif row.group(1) != sha:
            bad.append(f"{path.name}: sha256 {sha}..., SOURCES.md says {row.group(1)}...")
    return bad


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed expected.json")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", nargs="*", help="config names (file stems); for a quick look, never written")
    args = ap.parse_args()
    _quiet()
    import transformers

    if not transformers.__version__.startswith(PINNED["transformers"]):
        print(f"reference.py needs transformers {PINNED['transformers']}, found {transformers.__version__}", file=sys.stderr)
        return 2
    stale = check_sources()
    for line in stale:
        print(f"SOURCES.md: {line}", file=sys.stderr)
    if stale:
        return 1
    t0 = time.time()
    doc = generate(args.jobs, args.only)
    print(f"{len(doc['models'])} configs in {time.time() - t0:.0f} s", file=sys.stderr)
    if args.only:
        print(dump(doc))
        return 0
    if args.check:
        committed = json.loads(EXPECTED.read_text())
        if committed == doc:
            print("tests/zoo/expected.json matches transformers", transformers.__version__, file=sys.stderr)
            return 0
        for name in sorted(set(committed.get("models", {})) | set(doc["models"])):
            a, b = committed.get("models", {}).get(name), doc["models"].get(name)
            if a != b:
                print(f"differs: {name}\n  committed: {json.dumps(a)[:400]}\n  now:       {json.dumps(b)[:400]}", file=sys.stderr)
        for key in ("transformers", "torch", "device", "generated_by"):
            if committed.get(key) != doc.get(key):
                print(f"differs: {key}: committed {committed.get(key)!r}, now {doc.get(key)!r}", file=sys.stderr)
        print("tests/zoo/expected.json is stale: rerun tests/zoo/reference.py and commit it", file=sys.stderr)
        return 1
    EXPECTED.write_text(dump(doc))
    print(f"wrote {EXPECTED.relative_to(HERE.parent.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
