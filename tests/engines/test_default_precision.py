"""The precision `vram estimate` assumes without `--precision` (or, for LoRA, without
`--weights`), against what transformers 5.24 and TRL 1.16.0 do by their own defaults with the
same checkpoint: a tiny Llama saved by `save_pretrained` in float32 and in bfloat16, loaded back
on the CPU.

- `generate`: `AutoModelForCausalLM.from_pretrained(path)` with no dtype (transformers 5's
  default `dtype="auto"`) holds the config's dtype; vram's parameters are those tensors' bytes
  exactly, and its KV cache is in the dtype of the cache the model's own forward fills.
- Training: `SFTConfig()` sets `bf16=True`, and `SFTTrainer` given the model by name loads it
  in float32 (`trl.trainer.utils.create_model_from_path`) whatever the config says: vram's
  full step is bf16-amp (fp32 weights under bf16 autocast) on both checkpoints.
- LoRA: the frozen base is what both loaders give a float32 checkpoint, float32, and vram
  holds it in fp32 (its bytes equal the loaded model's); on a bfloat16 checkpoint vram keeps
  the bf16 base `from_pretrained` loads, while TRL given the model by name loads float32 there
  too (TRL 1.16.0, the newest on PyPI on 2026-11-28), which `--weights fp32` prices.
"""

import json

import pytest
import torch

from conftest import TINY, run_vram


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The tiny Llama saved in float32 and in bfloat16: {dtype name: folder}."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        cfg = AutoConfig.for_model(**json.load(open(TINY)))
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        d = tmp_path_factory.mktemp(str(dtype).removeprefix("torch."))
        model.save_pretrained(d)
        saved = json.loads((d / "config.json").read_text())
        assert saved["dtype"] == str(dtype).removeprefix("torch."), saved.get("dtype")
        out[str(dtype).removeprefix("torch.")] = d
    return out


def estimate(path, *flags):
    r = run_vram("estimate", str(path), *flags, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_generate_runs_in_the_dtype_from_pretrained_loads(checkpoints, name):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoints[name])  # no dtype: "auto"
    dtypes = {p.dtype for p in model.parameters()}
    assert dtypes == {getattr(torch, name)}, dtypes
    ids = torch.arange(8)[None]
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    kv_bytes = cache.layers[0].keys.element_size()

    e = estimate(checkpoints[name], "--inference")
    assert e["setup"]["precision"] == ("fp32" if name == "float32" else "bf16-amp")
    assert e["setup"]["mode"]["infer"]["kv_bytes"] == kv_bytes
    assert e["breakdown"]["parameters"] == param_bytes(model)
    said = any(n.startswith("precision fp32 (no --precision)") for n in e["notes"])
    assert said == (name == "float32"), e["notes"]


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_training_follows_sftconfig_and_sfttrainer_loading(checkpoints, name):
    from trl import SFTConfig
    from trl.trainer.utils import create_model_from_path

    # `use_cpu`: bf16=True refuses to construct on a machine without a GPU otherwise; it does
    # not change the default read here.
    assert SFTConfig(output_dir="out", use_cpu=True).bf16 is True
    model = create_model_from_path(str(checkpoints[name]))
    assert {p.dtype for p in model.parameters()} == {torch.float32}

    e = estimate(checkpoints[name])
    assert e["setup"]["precision"] == "bf16-amp"
    # fp32 master weights under autocast: the weights' bytes are the fp32 model's.
    assert e["breakdown"]["parameters"] == param_bytes(model)
    said = any(n.startswith("precision bf16-amp (no --precision)") for n in e["notes"])
    assert said == (name == "float32"), e["notes"]


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_lora_base_is_what_both_loaders_give(checkpoints, name):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import create_model_from_path

    base = AutoModelForCausalLM.from_pretrained(checkpoints[name])
    e = estimate(checkpoints[name], "--finetune", "lora")
    assert e["weights_bytes"] == param_bytes(base)
    said = any(n.startswith("base fp32 (no --weights)") for n in e["notes"])
    assert said == (name == "float32"), e["notes"]
    # TRL's loader by name (`SFTTrainer(model="id")` calls `create_model_from_path` with
    # `SFTConfig.model_init_kwargs`, None by default) loads float32 whatever the checkpoint:
    # on a float32 one it agrees with vram's default; on a bfloat16 one vram keeps
    # from_pretrained's bf16 base (a model passed in) and prices the by-name load with
    # `--weights fp32`, the same bytes.
    by_name = create_model_from_path(str(checkpoints[name]))
    assert {p.dtype for p in by_name.parameters()} == {torch.float32}
    if name == "float32":
        assert param_bytes(by_name) == param_bytes(base)
    e32 = estimate(checkpoints[name], "--finetune", "lora", "--weights", "fp32")
    assert e32["weights_bytes"] == param_bytes(by_name)


def test_qlora_on_a_float32_checkpoint_keeps_the_unpacked_rest_in_float32(checkpoints):
    """`from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True))` with no
    dtype: what bitsandbytes does not pack (embedding, norms, head) keeps the config's dtype
    (transformers 5.24's 4-bit quantizer leaves `update_dtype` as `HfQuantizer`'s, which
    returns the dtype it is given), and a `Linear4bit` returns its input's dtype, so the
    residual stream under bf16 autocast is float32. PEFT's `prepare_model_for_kbit_training`
    then has no half parameter to cast."""
    import bitsandbytes as bnb
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    for name in ("float32", "bfloat16"):
        q = AutoModelForCausalLM.from_pretrained(
            checkpoints[name],
            quantization_config=BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=torch.bfloat16,
            ),
            device_map="cpu",
        )
        rest = [p for p in q.parameters() if not isinstance(p, bnb.nn.Params4bit)]
        assert {p.dtype for p in rest} == {getattr(torch, name)}
        rest_bytes = sum(p.numel() * p.element_size() for p in rest)
        seen = {}
        down = q.model.layers[0].mlp.down_proj
        hook = down.register_forward_hook(lambda m, i, o: seen.update(x=i[0].dtype, y=o.dtype))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q(torch.arange(8)[None])
        hook.remove()
        assert seen == {"x": getattr(torch, name), "y": getattr(torch, name)}, seen

        e = estimate(checkpoints[name], "--finetune", "qlora", "--weights", "nf4")
        assert e["weights"]["unquantized_bytes"] == rest_bytes
        said = any(n.startswith("the float32 checkpoint loads") for n in e["notes"])
        assert said == (name == "float32"), e["notes"]
        if name == "float32":
            prep = estimate(
                checkpoints[name], "--finetune", "qlora", "--weights", "nf4", "--prepare-kbit"
            )
            before = sum(p.numel() * p.element_size() for p in q.parameters())
            prepare_model_for_kbit_training(q, use_gradient_checkpointing=False)
            assert sum(p.numel() * p.element_size() for p in q.parameters()) == before
            assert prep["breakdown"]["parameters"] == e["breakdown"]["parameters"]


def copies_saved(model, runs):
    """The bf16 copies of frozen base weights that autograd saves in `runs` forwards of
    `model` inside one bf16 autocast region (outputs kept): {data_ptr: bytes}, and the dtypes
    of the first q_proj's base output and of the first decoder layer's output."""
    frozen = {
        tuple(p.shape[::-1])
        for n, p in model.named_parameters()
        if not p.requires_grad and p.dim() == 2 and "embed" not in n and "lm_head" not in n
    }
    copies, seen, outs = {}, {}, []

    def pack(t):
        if t.dtype == torch.bfloat16 and tuple(t.shape) in frozen:
            copies[t.data_ptr()] = t.numel() * t.element_size()
        return t

    layer = model.base_model.model.model.layers[0]
    h1 = layer.self_attn.q_proj.base_layer.register_forward_hook(
        lambda m, i, o: seen.update(q=o.dtype)
    )
    h2 = layer.register_forward_hook(
        lambda m, i, o: seen.update(layer=(o[0] if isinstance(o, tuple) else o).dtype)
    )
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(runs):
                outs.append(model(torch.arange(8)[None]).logits)
    h1.remove()
    h2.remove()
    return copies, seen


def test_fp32_lora_base_under_bf16_autocast(checkpoints):
    """SFTConfig's bf16 autocast over an fp32 LoRA base: each frozen weight is cast to a bf16
    copy at every use (autocast caches a cast only for a leaf that requires grad) and the
    matmul saves it for its input's gradient; the linears' outputs are bf16, the layers'
    (residual) fp32. vram keeps one layer's copies while that layer runs with saving on (the
    recomputed layer, with TRL's checkpointing), every layer's without checkpointing."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(checkpoints["float32"])
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    model.enable_input_require_grads()  # what TRL does for gradient checkpointing
    once, seen = copies_saved(model, 1)
    assert seen == {"q": torch.bfloat16, "layer": torch.float32}, seen
    twice, _ = copies_saved(model, 2)
    assert len(twice) == 2 * len(once)  # a new copy per use: nothing cached
    layers = base.config.num_hidden_layers
    per_layer = sum(once.values()) // layers
    assert per_layer * layers == sum(once.values())

    e = estimate(checkpoints["float32"], "--finetune", "lora")
    assert e["setup"]["precision"] == "bf16-amp"
    assert e["breakdown"]["weight_copies"] == per_layer
    nogc = estimate(checkpoints["float32"], "--finetune", "lora", "--no-gradient-checkpointing")
    assert nogc["breakdown"]["weight_copies"] == sum(once.values())
    # Without autocast (--precision fp32) nothing is copied.
    fp32 = estimate(checkpoints["float32"], "--finetune", "lora", "--precision", "fp32")
    assert fp32["breakdown"].get("weight_copies", 0) == 0
