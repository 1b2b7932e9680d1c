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
    # The tiny config says float32; the base measured here is built in bf16 (`build`), which
    # vram takes without --weights (LoRA) or --load-dtype (QLoRA) only from a half config: name it.
    base = ["--weights", "bf16"] if method == "lora" else ["--load-dtype", "bf16"]
    r = run_vram("estimate", TINY, "--finetune", method, "--seq", str(SEQ), "--lora-rank", "8", *base, "--json")
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
        # o_proj's input is the fused attention kernel's own output (flash/cuDNN lay it out
        # [b, s, h, d], so the transpose before o_proj copies nothing), which the kernel saves
        # already: an adapter that reads it adds nothing there (vram counts it with the
        # attention, qlora_peak.py checks the whole step).
        if saved_x and group not in inputs_seen and not path.endswith("o_proj"):
            inputs_seen.add(group)
            new += x.numel() * x.element_size()
        assert new > 0
        assert new == want, f"{method} {path}: measured {new} B, vram {want} B"


def test_saved_tensors_of_lora_on_fused_experts():
    """Mixtral's `all-linear` becomes `target_parameters` (router `gate.weight`, expert banks
    `gate_up_proj`, `down_proj`): the MoE block saves W+ΔW of every targeted bank, the LoRA
    factors, and the inputs the now-trainable weights need (routed rows, the hidden states)."""
    import contextlib
    from pathlib import Path

    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(TINY).parents[3] / "crates/vram-model/tests/data/finetune/configs/tiny-mixtral.json"
    r = run_vram("estimate", str(path), "--finetune", "lora", "--lora-rank", "2", "--seq", str(SEQ), "--json")
    assert r.returncode == 0, r.stderr
    sites = {s["path"]: s["bytes"] for s in json.loads(r.stdout)["adapter_saved_bytes"]}
    want = sum(b for p, b in sites.items() if p.startswith("mlp."))
    assert set(p for p in sites if p.startswith("mlp.")) == {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"}

    cfg = AutoConfig.for_model(**json.loads(path.read_text()))
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16),
        LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"),
    )
    assert sorted(model.peft_config["default"].target_parameters) == ["down_proj", "gate.weight", "gate_up_proj"]
    mlp = model.get_submodule("base_model.model.model.layers.0.mlp")
    x = torch.randn(1, SEQ, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    xp = x.untyped_storage().data_ptr()

    def run(adapters):
        before = {p.untyped_storage().data_ptr() for p in model.parameters()} | {xp}
        seen, saved_x = {}, False

        def pack(t):
            nonlocal saved_x
            s = t.untyped_storage()
            saved_x |= s.data_ptr() == xp
            if s.data_ptr() not in before:
                seen[s.data_ptr()] = s.nbytes()
            return t

        ctx = contextlib.nullcontext() if adapters else model.disable_adapter()
        with ctx, torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            mlp(x)
        return sum(seen.values()), saved_x

    (with_, x_with), (without, x_without) = run(True), run(False)
    extra = with_ - without + (x.numel() * x.element_size() if x_with and not x_without else 0)
    assert extra == want, f"measured {extra} B more with adapters, vram {want} B"
    # The expert banks' W+ΔW dominate: each is the whole bank.
    bank = cfg.num_local_experts * 3 * cfg.intermediate_size * cfg.hidden_size * 2
    assert extra > bank


def test_a_frozen_layer_saves_less_than_a_trained_one():
    """A frozen Llama layer (the base under LoRA) does not save its matmuls' inputs (no weight
    gradient) nor RMSNorm's `weight * x` product: vram's `frozen_layer_discount_bytes` is the
    difference between what the same layer saves with trainable and with frozen weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    r = run_vram("estimate", TINY, "--finetune", "lora", "--weights", "bf16", "--seq", str(SEQ), "--json")
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)["frozen_layer_discount_bytes"]
    cfg = AutoConfig.for_model(**json.load(open(TINY)))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    ids = torch.arange(SEQ)[None]

    def saved(trainable):
        for p in model.parameters():
            p.requires_grad_(trainable)
        x = torch.randn(1, SEQ, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
        before = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
        seen = {}

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in before:
                seen[s.data_ptr()] = s.nbytes()
            return t

        pe = model.model.rotary_emb(x, ids)
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.model.layers[0](x, attention_mask=None, position_ids=ids, position_embeddings=pe)
        return sum(seen.values())

    assert want > 0
    assert saved(True) - saved(False) == want
