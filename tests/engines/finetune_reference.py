"""Reference figures for fine-tuning (issue 22), measured with the pinned libraries on the CPU.

`python finetune_reference.py --write` regenerates
crates/vram-model/tests/data/finetune/{bnb_storage,lora_counts}.json, which the Rust tests
(crates/vram-model/tests/it/finetune.rs) hold `vram`'s figures to. `test_finetune_reference.py`
recomputes them in CI and asserts that the committed files are still what the libraries give.

- bnb_storage: each tiny config is built with random bf16 weights, saved, and loaded back with
  transformers' `BitsAndBytesConfig` (bitsandbytes' CPU backend quantizes 4-bit and 8-bit). Every
  byte the quantized model holds is counted once per storage: parameters, buffers, and what
  `get_memory_footprint()` leaves out: the 4-bit `QuantState` (absmax, its nested quantization:
  uint8 absmax, fp32 state2.absmax, the 256-entry code, the offset; the NF4/FP4 code) and the
  int8 row scales (`SCB`).
- lora_counts: real configs built on the meta device with `AutoModelForCausalLM.from_config`
  (vision-language checkpoints from tests/zoo/configs as their `architectures[0]` class),
  `get_peft_model(model, LoraConfig(...))`, then `get_nb_trainable_parameters()`.
"""

import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "vram-model" / "tests" / "data" / "finetune"
CONFIGS = DATA / "configs"

STORAGE_CASES = [
    # (config, weights, double_quant, llm_int8_skip_modules)
    ("tiny-llama-odd", "int8", False, None),
    ("tiny-llama-odd", "nf4", False, None),
    ("tiny-llama-odd", "nf4", True, None),
    ("tiny-llama-odd", "fp4", True, None),
    ("tiny-llama-odd", "int8", False, ["o_proj", "lm_head"]),
    ("tiny-qwen2", "int8", False, None),
    ("tiny-qwen2", "nf4", True, None),
    ("tiny-mixtral", "int8", False, None),
    ("tiny-mixtral", "nf4", True, None),
    ("tiny-mixtral", "fp4", False, None),
    ("tiny-gpt2", "nf4", True, None),
    ("tiny-gpt2", "int8", False, None),
]

LORA_CASES = [
    # (config, r, target_modules, dropout)
    ("llama-3.1-8b", 16, ["q_proj", "v_proj"], 0.05),
    ("llama-3.1-8b", 8, "all-linear", 0.0),
    ("llama-3.1-8b", 64, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 0.1),
    ("llama-3.1-8b", 32, ["mlp.down_proj"], 0.0),
    ("phi-4", 16, "all-linear", 0.0),
    ("phi-4", 8, ["qkv_proj"], 0.0),
    ("mixtral-8x7b", 16, "all-linear", 0.0),
    ("mixtral-8x7b", 8, ["q_proj", "v_proj"], 0.0),
    ("mixtral-8x7b", 4, ["q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"], 0.0),
    ("mixtral-8x7b", 8, ["w2"], 0.0),
    ("tiny-qwen2", 4, "all-linear", 0.0),
    ("tiny-gpt2", 8, "all-linear", 0.0),
    ("tiny-gpt2", 8, ["c_attn"], 0.1),
    ("tiny-mixtral", 2, "all-linear", 0.0),
    # Held back: current families that vram's config reader learns in issue 21; the Rust test
    # checks them as soon as the reader knows their model type.
    ("qwen3-0.6b", 16, "all-linear", 0.0),
    ("qwen3-30b-a3b", 8, "all-linear", 0.0),
    ("qwen3-30b-a3b", 16, ["q_proj", "k_proj", "v_proj", "o_proj"], 0.05),
    ("deepseek-v3", 8, "all-linear", 0.0),
    ("gpt-oss-20b", 16, "all-linear", 0.0),
    # Vision-language models as their checkpoints name them (`architectures[0]`, a
    # `*ForConditionalGeneration`, read from tests/zoo/configs/): `all-linear` takes every
    # `nn.Linear` of the vision tower and projector too, and a list target matches the tower's
    # modules of that name as well (PEFT's suffix match). One or two configs per family.
    ("zoo/llama-3.2-11b-vision", 16, "all-linear", 0.0),
    ("zoo/llama-3.2-11b-vision", 16, ["q_proj", "v_proj"], 0.0),
    ("zoo/gemma-3-4b-it", 16, "all-linear", 0.0),
    ("zoo/gemma-3-4b-it", 8, ["q_proj", "v_proj", "fc1"], 0.0),
    ("zoo/gemma-4-26b-a4b", 16, "all-linear", 0.0),
    ("zoo/llama-4-scout-17b-16e-instruct", 16, "all-linear", 0.0),
    ("zoo/ministral-3-3b-instruct-2512", 16, "all-linear", 0.0),
    ("zoo/mistral-small-3.1-24b-instruct-2503", 8, "all-linear", 0.0),
    ("zoo/qwen3-vl-2b-instruct", 16, "all-linear", 0.0),
    ("zoo/qwen3-vl-30b-a3b-instruct", 8, "all-linear", 0.0),
    ("zoo/qwen3.5-27b", 16, "all-linear", 0.0),
    ("zoo/qwen3.5-35b-a3b", 16, "all-linear", 0.0),
    # Qwen2-VL (LayerNorm tower, fc1/fc2 MLP) and Qwen2.5-VL (RMSNorm tower, SwiGLU MLP),
    # from crates/vram-model/tests/data/vision/ (its README names the sources).
    ("vision/qwen2-vl-2b-instruct", 16, "all-linear", 0.0),
    ("vision/qwen2.5-vl-7b-instruct", 16, "all-linear", 0.0),
    ("vision/qwen2.5-vl-7b-instruct", 8, ["q_proj", "v_proj", "up_proj"], 0.0),
    # Gemma 4 E-size: per-layer-input linears (`per_layer_input_gate`, `per_layer_projection`,
    # `per_layer_model_projection`), KV-shared layers without k/v projections, and the audio
    # tower (its ClippableLinears' inner `linear`, `relative_k_proj`, `output_proj`,
    # `embed_audio`). A list naming q_proj, o_proj or an MLP projection would fail in PEFT on the
    # towers' ClippableLinear wrappers, so the list names only plain linears.
    ("gemma-4-e2b-shape", 16, "all-linear", 0.0),
    ("gemma-4-e2b-shape", 8, ["per_layer_input_gate", "per_layer_projection", "per_layer_model_projection",
                              "relative_k_proj", "output_proj"], 0.0),
    # A real Gemma 4 E4B config.json (transformers' own serialization; see the data README):
    # 18 KV-shared layers of 42, two KV heads, a single-width MLP.
    ("gemma-4-e4b-it", 16, "all-linear", 0.0),
]

ZOO = ROOT / "tests" / "zoo" / "configs"
VISION = DATA.parent / "vision"


def load_config(name):
    from transformers import AutoConfig

    d = json.loads((CONFIGS / f"{name}.json").read_text())
    return AutoConfig.for_model(**d)


def build_on_meta(name):
    """`AutoModelForCausalLM.from_config` on the meta device; a `zoo/` config is built as the
    class its `architectures[0]` names (the vision-language wrappers), as tests/zoo/reference.py
    builds it (a `vision/` config likewise, from crates/vram-model/tests/data/vision/)."""
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if name.startswith(("zoo/", "vision/")):
        folder, stem = name.split("/", 1)
        raw = json.loads(((ZOO if folder == "zoo" else VISION) / f"{stem}.json").read_text())
        cfg = CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
        cls = getattr(transformers, raw["architectures"][0])
        with torch.device("meta"):
            return cls._from_config(cfg, dtype=torch.bfloat16)
    cfg = load_config(name)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def storage_bytes(model):
    """Every storage the model holds, once: (params, buffers, quant_states) in bytes."""
    import bitsandbytes as bnb

    seen = set()

    def add(t):
        if t is None or not torch.is_tensor(t):
            return 0
        s = t.untyped_storage()
        key = (s.data_ptr(), s.nbytes())
        if key in seen:
            return 0
        seen.add(key)
        return s.nbytes()

    params = sum(add(p) for p in model.parameters())
    buffers = {n: add(b) for n, b in model.named_buffers()}
    quant = 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        qs = getattr(w, "quant_state", None)
        if qs is not None:
            quant += add(qs.absmax) + add(qs.code) + add(qs.offset)
            if qs.state2 is not None:
                quant += add(qs.state2.absmax) + add(qs.state2.code)
        if isinstance(w, bnb.nn.Int8Params):
            quant += add(w.SCB) + add(w.CB)
        st = getattr(m, "state", None)
        if st is not None and hasattr(st, "SCB"):
            quant += add(st.SCB) + add(st.CB)
    return params, buffers, quant


def bnb_storage():
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    out = []
    for name, weights, dq, skip in STORAGE_CASES:
        cfg = load_config(name)
        torch.manual_seed(0)
        base = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        with tempfile.TemporaryDirectory() as d:
            base.save_pretrained(d)
            if weights == "int8":
                q = BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip)
            else:
                q = BitsAndBytesConfig(
                    load_in_4bit=True,
                    bnb_4bit_quant_type=weights,
                    bnb_4bit_use_double_quant=dq,
                    bnb_4bit_compute_dtype=torch.bfloat16,
                    llm_int8_skip_modules=skip,
                )
            m = AutoModelForCausalLM.from_pretrained(d, quantization_config=q, dtype=torch.bfloat16, device_map="cpu")
        params, buffers, quant = storage_bytes(m)
        assert all("rotary" in n for n in buffers if buffers[n]), buffers
        out.append(
            dict(
                config=name,
                weights=weights,
                double_quant=dq,
                skip_modules=skip,
                params_bytes=params,
                quant_state_bytes=quant,
                weights_bytes=params + quant,
                buffers_bytes=sum(buffers.values()),
                get_memory_footprint=m.get_memory_footprint(),
            )
        )
    return out


def lora_counts():
    from peft import LoraConfig, get_peft_model

    out = []
    for name, r, targets, dropout in LORA_CASES:
        m = build_on_meta(name)
        lc = LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets, lora_dropout=dropout, task_type="CAUSAL_LM")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm = get_peft_model(m, lc)
        trainable, total = pm.get_nb_trainable_parameters()
        dtypes = sorted({str(p.dtype) for p in pm.parameters() if p.requires_grad})
        out.append(
            dict(
                config=name,
                r=r,
                target_modules=targets,
                lora_dropout=dropout,
                trainable_params=trainable,
                all_params=total,
                adapter_dtypes=dtypes,
                target_parameters=sorted(pm.peft_config["default"].target_parameters or []),
            )
        )
    return out


def compute():
    return {"bnb_storage": bnb_storage(), "lora_counts": lora_counts()}


if __name__ == "__main__":
    res = compute()
    if "--write" in sys.argv:
        import importlib.metadata as md

        versions = {p: md.version(p) for p in ("torch", "transformers", "peft", "bitsandbytes")}
        for key, rows in res.items():
            (DATA / f"{key}.json").write_text(json.dumps({"versions": versions, "cases": rows}, indent=1) + "\n")
    print(json.dumps(res, indent=1))
