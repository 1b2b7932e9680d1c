"""How transformers 5.24 holds a compressed-tensors W4A16 MoE checkpoint (vram_model's `Holder`).

`python ct_w4a16_experts.py DIR` writes a one-layer Qwen3-MoE (4 experts, hidden 64) to DIR as
llm-compressor stores W4A16 (`pack-quantized`, int4 group 32, symmetric): every expert's
`gate_proj`/`up_proj`/`down_proj` and the attention's projections as `weight_packed` int32
`[out, in / 8]`, `weight_scale` bf16 `[out, in / 32]`, `weight_shape` int32 `[2]`; the router and
the head unquantized (`ignore`). It then loads it with `from_pretrained` on the CPU and prints
each parameter of the layer with its shape and dtype.

Needs compressed-tensors (>= 0.15, which transformers 5.24 asks for), not in the CI venv: run
with it on `PYTHONPATH`. With transformers 5.24.0 and compressed-tensors 0.20.0 (2026-11-28):

    model.layers.0.self_attn.q_proj.weight_packed (64, 8) torch.int32
    model.layers.0.self_attn.q_proj.weight_shape (2,) torch.int32
    model.layers.0.mlp.experts.gate_up_proj (4, 128, 64) torch.bfloat16
    model.layers.0.mlp.experts.down_proj (4, 64, 64) torch.bfloat16

The attention's `nn.Linear`s stay packed; the fused expert banks, which compressed-tensors'
`Linear` target does not reach, are loaded dequantized (`HfQuantizer.update_weight_conversions`
puts `CompressedTensorsDequantize` before the per-expert merge).
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, Qwen3MoeConfig


def packed(sd, prefix, out, inp):
    sd[prefix + ".weight_packed"] = torch.randint(-(2**31), 2**31 - 1, (out, inp // 8), dtype=torch.int32)
    sd[prefix + ".weight_scale"] = torch.rand(out, inp // 32, dtype=torch.bfloat16)
    sd[prefix + ".weight_shape"] = torch.tensor([out, inp], dtype=torch.int32)


def main(d):
    os.makedirs(d, exist_ok=True)
    cfg = Qwen3MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        num_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
    )
    cfg.dtype = "bfloat16"
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
               "symmetric": True, "dynamic": False, "actorder": None, "observer": "minmax",
               "observer_kwargs": {}, "block_structure": None}
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "kv_cache_scheme": None,
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                        "input_activations": None, "output_activations": None}},
          "ignore": ["lm_head", "re:.*mlp.gate$"]}
    dense = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    sd = {k: v.contiguous() for k, v in dense.state_dict().items()
          if ".mlp.experts." not in k and not (".self_attn." in k and k.endswith("proj.weight"))}
    for e in range(4):
        for proj, (out, inp) in {"gate_proj": (64, 64), "up_proj": (64, 64), "down_proj": (64, 64)}.items():
            packed(sd, f"model.layers.0.mlp.experts.{e}.{proj}", out, inp)
    for proj, (out, inp) in {"q_proj": (64, 64), "k_proj": (32, 64), "v_proj": (32, 64), "o_proj": (64, 64)}.items():
        packed(sd, f"model.layers.0.self_attn.{proj}", out, inp)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c = cfg.to_dict()
    c["quantization_config"] = qc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
    for name, p in model.named_parameters():
        if ".layers.0." in name and ("mlp" in name or "self_attn" in name):
            print(name, tuple(p.shape), p.dtype)


if __name__ == "__main__":
    main(sys.argv[1])
