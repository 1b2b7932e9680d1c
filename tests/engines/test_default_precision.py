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
  the bf16 base `from_pretrained` loads.
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
    if name == "float32":
        # TRL's loader by name agrees on a float32 checkpoint (on a bfloat16 one it loads
        # float32 too, where vram keeps from_pretrained's bf16 base: a model passed in).
        assert param_bytes(create_model_from_path(str(checkpoints[name]))) == param_bytes(base)
