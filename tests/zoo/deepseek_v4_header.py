"""DeepSeek-V4-Flash's safetensors layout, tensor by tensor, from transformers 5.24's own model.

The published checkpoint (deepseek-ai/DeepSeek-V4-Flash) is in DeepSeek's own naming and
layout, which transformers 5.24 reads through `conversion_mapping.py`'s `"deepseek_v4"` renames
and expert merges. This script builds `DeepseekV4ForCausalLM` from `causal_lm/deepseek_v4.json`
(the V4-Flash shape: 43 layers, 256 experts of width 2048) on the meta device, and writes every
parameter and persistent buffer back under the checkpoint's name and in its stored dtype:

- routed experts: each `gate_up_proj` / `down_proj` bank split into `experts.{e}.w1/w3/w2.weight`,
  stored as FP4 (e2m1) packed two to an `I8` byte, `[out, in/2]`, with an `F8_E8M0` `.scale` of
  one exponent per 32 inputs, `[out, in/32]`;
- the attention, shared-expert and indexer query linears: `F8_E4M3` with an `F8_E8M0` `.scale`
  per 128 × 128 block (the config's `quantization_config`, `weight_block_size` [128, 128]);
- the compressor and indexer-compressor projections, the indexer's `weights_proj`, the gate, the
  embedding and head: BF16 (`DeepseekV4PreTrainedModel._keep_in_fp32_modules`: "ship in BF16
  with no companion scale_inv"); norms BF16; `attn_sink`, `ape`, the `hc_*` mixing tensors and
  the gate's score-correction `bias`: F32; the hash layers' `tid2eid` table: I64.

The dtypes and the FP4/FP8 shapes are the checkpoint's as public readers of it spell them
(e.g. TensorRT-LLM's auto_deploy DeepSeek-V4 checkpoint-layout test: `experts.0.w1.weight` I8
[2048, 2048] with `w1.scale` F8_E8M0 [2048, 128], `attn.wq_a.weight` F8_E4M3 [1024, 4096] with
`wq_a.scale` F8_E8M0 [8, 32]). The MTP block (`mtp.0.*`), which transformers does not load
(`_keys_to_ignore_on_load_unexpected`), is not written.

Output (`crates/vram-model/tests/data/deepseek-v4-flash-header.json`): the parameter count
transformers gives (`sum(p.numel() for p in model.parameters())`) and the tensors, one entry per
name with `{e}` standing for the expert index where a layer repeats a tensor over its experts
(`experts`: how many). `crates/vram-model/tests/it/checkpoints.rs` expands it into a header and
holds vram's count of it to transformers'. `--check` fails if the file differs.
"""

import argparse
import json
import math
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "crates/vram-model/tests/data/deepseek-v4-flash-header.json"

# transformers name -> checkpoint name: conversion_mapping.py's "deepseek_v4" renames read
# backwards, most specific first.
RENAMES = [
    (r"^model\.", ""),
    (r"^embed_tokens\.weight$", "embed.weight"),
    (r"^lm_head\.weight$", "head.weight"),
    (r"^hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
    (r"\.self_attn\.", ".attn."),
    (r"\.mlp\.", ".ffn."),
    (r"\.input_layernorm\.", ".attn_norm."),
    (r"\.post_attention_layernorm\.", ".ffn_norm."),
    (r"\.attn_hc\.(fn|base|scale)$", r".hc_attn_\1"),
    (r"\.ffn_hc\.(fn|base|scale)$", r".hc_ffn_\1"),
    (r"\.sinks$", ".attn_sink"),
    (r"\.compressor\.indexer\.scorer\.weights_proj\.", ".indexer.weights_proj."),
    (r"\.compressor\.indexer\.q_b_proj\.", ".indexer.wq_b."),
    (r"\.compressor\.indexer\.", ".indexer.compressor."),
    (r"\.kv_norm\.", ".norm."),
    (r"\.position_bias$", ".ape"),
    (r"\.q_a_proj\.", ".wq_a."),
    (r"\.attn\.q_b_proj\.", ".attn.wq_b."),
    (r"\.kv_proj\.", ".wkv."),
    (r"\.gate_proj\.", ".wgate."),
    (r"\.o_a_proj\.", ".wo_a."),
    (r"\.o_b_proj\.", ".wo_b."),
    (r"\.q_a_norm\.", ".q_norm."),
    (r"\.gate\.e_score_correction_bias$", ".gate.bias"),
    (r"\.shared_experts\.wgate\.", ".shared_experts.w1."),
    (r"\.shared_experts\.down_proj\.", ".shared_experts.w2."),
    (r"\.shared_experts\.up_proj\.", ".shared_experts.w3."),
]

# Linears that ship in BF16 (no scale), by their checkpoint names.
BF16_LINEARS = re.compile(
    r"(\.compressor\.(wkv|wgate)|\.indexer\.compressor\.(wkv|wgate)|\.indexer\.weights_proj|\.ffn\.gate)\.weight$"
    r"|^(embed|head)\.weight$"
)


def checkpoint_name(name: str) -> str:
    for pat, rep in RENAMES:
        name = re.sub(pat, rep, name)
    return name


def fp8(name, shape):
    out, inp = shape
    return [
        (name, "F8_E4M3", [out, inp]),
        (name.removesuffix(".weight") + ".scale", "F8_E8M0", [math.ceil(out / 128), math.ceil(inp / 128)]),
    ]


def fp4(name, out, inp):
    return [
        (name, "I8", [out, inp // 2]),
        (name.removesuffix(".weight") + ".scale", "F8_E8M0", [out, inp // 32]),
    ]


def build():
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads((HERE / "causal_lm/deepseek_v4.json").read_text())
    cfg = AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "_name_or_path"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    entries = []
    named = list(model.named_parameters()) + [
        (n, b) for n, b in model.named_buffers() if n.endswith(("e_score_correction_bias", "tid2eid"))
    ]
    for name, t in named:
        shape = list(t.shape)
        m = re.match(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$", name)
        if m:
            prefix = checkpoint_name(m.group(1) + ".x")[: -len(".x")]
            experts, out, inp = shape
            if m.group(2) == "gate_up_proj":
                for w in ("w1", "w3"):
                    entries += [(n, d, s, experts) for n, d, s in fp4(f"{prefix}.{{e}}.{w}.weight", out // 2, inp)]
            else:
                entries += [(n, d, s, experts) for n, d, s in fp4(f"{prefix}.{{e}}.w2.weight", out, inp)]
            continue
        c = checkpoint_name(name)
        if c.endswith("tid2eid"):
            entries.append((c, "I64", shape, 0))
        elif len(shape) == 2 and c.endswith(".weight") and not BF16_LINEARS.search(c):
            entries += [(n, d, s, 0) for n, d, s in fp8(c, shape)]
        elif t.dtype == torch.float32 and name.split(".")[-1] in ("sinks", "position_bias", "e_score_correction_bias", "fn", "base", "scale", "hc_fn", "hc_base", "hc_scale"):
            entries.append((c, "F32", shape, 0))
        else:
            entries.append((c, "BF16", shape, 0))
    names = [n for n, _, _, _ in entries]
    assert len(names) == len(set(names)), "two tensors under one checkpoint name"
    return {
        "generated_by": "tests/zoo/deepseek_v4_header.py",
        "transformers": __import__("transformers").__version__,
        "config": "tests/zoo/causal_lm/deepseek_v4.json",
        "transformers_params": params,
        "tensors": [{"name": n, "dtype": d, "shape": s, **({"experts": e} if e else {})} for n, d, s, e in entries],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="fail if the committed file differs")
    args = ap.parse_args()
    text = json.dumps(build(), indent=0) + "\n"
    if args.check:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} differs from what transformers builds: rerun tests/zoo/deepseek_v4_header.py")
        print("deepseek_v4_header: matches")
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
