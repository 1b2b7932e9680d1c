"""What autograd saves per adapted linear (issue 22), measured with the real PEFT 0.21.2 (and
bitsandbytes 0.50.2 for QLoRA) on the CPU under bf16 autocast, against `vram estimate
--finetune ... --json`'s `adapter_saved_bytes`.

`torch.autograd.graph.saved_tensors_hooks` sees every tensor the forward of one adapted linear
saves; storages that existed before the call (the weights, the input) are left out, except that
an input an adapter saves is counted where vram counts it (once per input tensor when the
adapters read x itself, as bf16 adapters do). Dropout is left at 0: its mask is a float tensor
on the CPU and a bool one on CUDA (`native_dropout`), which is what vram models.
"""

import json

import pytest
import torch

from conftest import TINY, run_vram

SEQ = 32


def vram_saved(method):
    r = run_vram("estimate", TINY, "--finetune", method, "--seq", str(SEQ), "--lora-rank", "8", "--json")
    assert r.returncode == 0, r.stderr
    return {s["path"]: s["bytes"] for s in json.loads(r.stdout)["adapter_saved_bytes"]}


def measure(model, path, x):
    """New bytes saved by the module at `path` of layer 0, and whether it saved `x` itself."""
    mod = model.get_submodule(f"base_model.model.model.layers.0.{path}")
    before = {p.untyped_storage().data_ptr() for p in model.parameters()}
    before.add(x.untyped_storage().data_ptr())
    seen, saved_x = {}, False

    def pack(t):
        nonlocal saved_x
        s = t.untyped_storage()
        if s.data_ptr() == x.untyped_storage().data_ptr():
            saved_x = True
        elif s.data_ptr() not in before:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mod(x)
    return sum(seen.values()), saved_x


def build(quantized):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig
    import tempfile

    cfg = AutoConfig.for_model(**json.load(open(TINY)))
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if quantized:
        with tempfile.TemporaryDirectory() as d:
            base.save_pretrained(d)
            q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
            base = AutoModelForCausalLM.from_pretrained(d, quantization_config=q, dtype=torch.bfloat16, device_map="cpu")
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
    if quantized:
        # What TRL's SFTTrainer does to the trainable parameters of a quantized model.
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    return model


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_saved_tensors_per_adapted_linear(method):
    expected = vram_saved(method)
    model = build(method == "qlora")
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    assert dtypes == ({torch.float32} if method == "lora" else {torch.bfloat16})
    cfg = model.config
    inputs_seen = set()
    for path, want in expected.items():
        fan_in = {"o_proj": cfg.num_attention_heads * cfg.head_dim, "down_proj": cfg.intermediate_size}.get(
            path.rsplit(".", 1)[-1], cfg.hidden_size
        )
        x = torch.randn(1, SEQ, fan_in, dtype=torch.bfloat16, requires_grad=True)
        new, saved_x = measure(model, path, x)
        group = path.split(".")[0] + ("-in" if path.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj") else path)
        if saved_x and group not in inputs_seen:
            inputs_seen.add(group)
            new += x.numel() * x.element_size()
        assert new > 0
        assert new == want, f"{method} {path}: measured {new} B, vram {want} B"
