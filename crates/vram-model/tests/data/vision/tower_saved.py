"""Bytes autograd saves in the vision towers of transformers 5.24.0 (torch 2.15, CPU, bf16
weights and inputs, SDPA, training mode): each tower is built with 1 and with 2 layers; the
difference is one layer's saved tensors, the rest (depth 1 less one layer) what the tower saves
outside its layers (patch embedding, positions, rotary tables, merger). Distinct storages,
parameters excluded. Prints one JSON object (copied into mech/vision.rs's unit tests).

    ~/.cache/vramkit-ci/venv-*/bin/python crates/vram-model/tests/data/vision/tower_saved.py
"""
import copy
import json
import sys

import torch
from transformers import AutoConfig, AutoModel

CONF = "tests/zoo/configs"


def saved(model, run):
    pp = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in pp:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


def build(vc, depth_key, depth):
    from transformers import Llama4VisionModel

    vc = copy.deepcopy(vc)
    setattr(vc, depth_key, depth)
    if getattr(vc, "deepstack_visual_indexes", None):
        vc.deepstack_visual_indexes = []
    vc._attn_implementation = "sdpa"
    torch.manual_seed(0)
    # AutoModel has no mapping for Llama4VisionConfig: its class directly.
    cls = Llama4VisionModel if vc.model_type == "llama4_vision_model" else None
    m = cls(vc) if cls else AutoModel.from_config(vc)
    return m.to(torch.bfloat16).train()


def measure(vc, depth_key, make_input):
    r = {}
    for d in (1, 2):
        m = build(vc, depth_key, d)
        args, kwargs = make_input()
        r[d] = saved(m, lambda: m(*args, **kwargs))
    return {"layer_saved": r[2] - r[1], "outside_layers": 2 * r[1] - r[2]}


def cfg(name):
    return AutoConfig.for_model(**json.load(open(f"{CONF}/{name}.json")))


out = {}
ONLY = set(sys.argv[1:])  # family names to measure (all when empty)


def want(name):
    return not ONLY or name in ONLY


# Qwen3-VL: a 512x384 image, grid 1 x 24 x 32 = 768 patches.
vc = cfg("qwen3-vl-8b-instruct").vision_config
grid = torch.tensor([[1, 24, 32]])
elems = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
if want("qwen3_vl"):
    out["qwen3_vl"] = {"patches": 768, **measure(
        vc, "depth", lambda: ((torch.randn(768, elems, dtype=torch.bfloat16),), {"grid_thw": grid}))}
print(out, file=sys.stderr)

# Gemma 3 (SigLIP): one 896x896 image, 4096 patches.
vc = cfg("gemma-3-4b-it").vision_config
if want("gemma3"):
    out["gemma3"] = {"patches": 4096, **measure(
        vc, "num_hidden_layers",
        lambda: ((torch.randn(1, 3, vc.image_size, vc.image_size, dtype=torch.bfloat16),), {}))}
print(out, file=sys.stderr)

# Llama 4: one 336-pixel tile, 576 patches + the class token. The zoo's Scout config has no
# vision_config and Llama4VisionConfig's defaults do not run (hidden 768 shuffled to 3072 wide
# against an adapter of 5632), so the tower is Scout's published one (LLAMA4_SCOUT_VISION).
LLAMA4_SCOUT_VISION = {
    "hidden_size": 1408, "image_size": 336, "intermediate_size": 5632, "num_attention_heads": 16,
    "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5,
    "projector_input_dim": 4096, "projector_output_dim": 4096, "vision_output_dim": 4096,
}
from transformers import Llama4VisionConfig  # noqa: E402

vc = Llama4VisionConfig(**LLAMA4_SCOUT_VISION)
if want("llama4"):
    out["llama4"] = {"patches": (vc.image_size // vc.patch_size) ** 2 + 1, **measure(
        vc, "num_hidden_layers",
        lambda: ((torch.randn(1, 3, vc.image_size, vc.image_size, dtype=torch.bfloat16),), {}))}
print(out, file=sys.stderr)

# Gemma 4: a 24 x 24 patch image padded to a 630-patch budget (70 soft tokens, pool 3).
vc = cfg("gemma-4-26b-a4b").vision_config


def gemma4_input():
    budget, side = 630, 24
    px = torch.randn(1, budget, 3 * vc.patch_size**2, dtype=torch.bfloat16)
    xs, ys = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy")
    pos = torch.full((1, budget, 2), -1, dtype=torch.long)
    pos[0, : side * side] = torch.stack([xs, ys], dim=-1).reshape(-1, 2)
    return (px,), {"pixel_position_ids": pos}


if want("gemma4"):
    out["gemma4"] = {"patches": 630, **measure(vc, "num_hidden_layers", gemma4_input)}
print(json.dumps(out, sort_keys=True))
