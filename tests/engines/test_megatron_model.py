"""The model megatron-core builds from the emitted arguments is the Hugging Face model.

For every config in data/configs, `vram plan CONFIG --emit megatron` writes Megatron-LM arguments;
this test turns them into megatron-core 0.16.1's `TransformerConfig` the way Megatron-LM's
`core_transformer_config_from_args` does, builds `GPTModel` (`get_gpt_layer_local_spec`, the
Megatron-Core-only layers) on the meta device, and compares every parameter count with
transformers 5.24's `AutoModelForCausalLM.from_config` of the same config on the meta device. The
only difference allowed is the vocabulary padding Megatron-LM documents
(`--make-vocab-size-divisible-by` x tensor-parallel size, build_tokenizer.py
`vocab_size_with_padding`): extra rows in the embedding and, when untied, the output layer.
The model is built with tensor and pipeline size 1 (one rank holds every parameter); the padding
is the one of the emitted tensor-parallel size. The rotary frequencies are compared too:
megatron-core's `RotaryEmbedding` with the emitted base and scaling against transformers'.
"""

import functools
import json
import math
import os
import re
from pathlib import Path

import pytest

from conftest import DATA, TINY, emit, free_port, run_vram
from test_megatron import parse

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
transformers = pytest.importorskip("transformers")

CONFIGS = sorted((DATA / "configs").glob("*.json"))
# What vram refuses to emit for Megatron, and the reason it names.
REFUSED = {
    "falcon-7b": "in parallel",  # falcon-7b: parallel attention + MLP, one norm
    "gemma-7b": "gelu_pytorch_tanh",
    "gemma-2-9b": "norms",
    "pythia-1.4b": "in parallel",
}
# Each model at a size where some plan fits and Megatron can run it.
PLAN = {"llama-3.1-405b": ["--gpu", "mi300x"]}


@pytest.fixture(scope="module")
def _model_parallel():
    """megatron-core's layers read the (size-1) model-parallel groups."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        # A free port, not a fixed one: another run of these tests may hold any fixed port.
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
    ps.initialize_model_parallel(1, 1)
    yield
    ps.destroy_model_parallel()


def megatron_model(a: dict, padded_vocab: int):
    """megatron-core's GPTModel for the arguments, tp = pp = 1, on the meta device."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    num = lambda k: int(a[k]) if k in a else None  # noqa: E731
    swiglu = "--swiglu" in a
    experts = num("--num-experts")
    add_bias = "--disable-bias-linear" not in a
    tc = TransformerConfig(
        num_layers=num("--num-layers"),
        hidden_size=num("--hidden-size"),
        num_attention_heads=num("--num-attention-heads"),
        ffn_hidden_size=num("--ffn-hidden-size"),
        num_query_groups=num("--num-query-groups") if "--group-query-attention" in a else None,
        kv_channels=num("--kv-channels"),
        # validate_args: add_bias_linear implies add_qkv_bias.
        add_bias_linear=add_bias,
        add_qkv_bias=add_bias or "--add-qkv-bias" in a,
        gated_linear_unit=swiglu,
        activation_func=torch.nn.functional.silu if swiglu else torch.nn.functional.gelu,
        bias_activation_fusion=False,
        normalization=a.get("--normalization", "LayerNorm"),
        layernorm_epsilon=float(a.get("--norm-epsilon", 1e-5)),
        # arguments.py tuple_type: "left,right".
        window_size=tuple(int(x) for x in a["--window-size"].split(",")) if "--window-size" in a else None,
        num_moe_experts=experts,
        moe_router_topk=num("--moe-router-topk") or 2,
        use_cpu_initialization=True,
        perform_initialization=False,
    )
    spec = get_gpt_layer_local_spec(num_experts=experts, normalization=tc.normalization)
    with torch.device("meta"):
        return GPTModel(
            tc,
            spec,
            vocab_size=padded_vocab,
            max_sequence_length=num("--max-position-embeddings"),
            share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in a,
            position_embedding_type=a.get("--position-embedding-type", "learned_absolute"),
            rotary_base=num("--rotary-base") or 10000,
            rotary_percent=float(a.get("--rotary-percent", 1.0)),
            rope_scaling="--use-rope-scaling" in a,
            rope_scaling_factor=float(a.get("--rope-scaling-factor", 8.0)),
        )


@functools.lru_cache(maxsize=None)
def hf_model(path: Path):
    """transformers' model of the config on the meta device, and its config; built once per
    config in a session (both tests read it, neither changes it)."""
    cfg = transformers.AutoConfig.for_model(**json.loads(path.read_text()))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg), cfg


def count(m) -> int:
    return sum(p.numel() for p in m.parameters())


def emit_for(path: Path):
    extra = PLAN.get(path.stem, [])
    gpu = extra[1] if extra else "h100-80g"
    return emit("megatron", str(path), 256, 256, 1024, "--zero", "1", gpu=gpu)


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.stem not in REFUSED] + [Path(TINY)], ids=lambda p: p.stem)
def test_megatron_builds_the_hugging_face_model(path, _model_parallel):
    e = emit_for(path)
    a = parse(e.text)
    vocab = json.loads(path.read_text())["vocab_size"]
    m = re.search(r"# vocabulary: (\d+) tokens .* padded by Megatron-LM to (\d+)", e.text)
    assert m, e.text
    assert int(m.group(1)) == vocab
    padded = int(m.group(2))
    multiple = int(a["--make-vocab-size-divisible-by"]) * e.tp
    assert padded == math.ceil(vocab / multiple) * multiple  # vocab_size_with_padding
    mg = megatron_model(a, padded)
    hf, cfg = hf_model(path)
    tied = "--untie-embeddings-and-output-weights" not in a
    assert tied == bool(cfg.tie_word_embeddings)
    pad_rows = (padded - vocab) * int(a["--hidden-size"]) * (1 if tied else 2)
    assert count(mg) - pad_rows == count(hf), (
        f"megatron-core builds {count(mg):,} parameters ({pad_rows:,} of vocabulary padding), "
        f"transformers {count(hf):,}"
    )
    # The norms' epsilon, and the sliding window: transformers attends to the last w keys
    # (masking_utils.sliding_window_overlay), megatron-core's (left, right) window to left + 1
    # (transformer/utils.get_sliding_window_causal_mask).
    eps = next(getattr(cfg, k) for k in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon") if hasattr(cfg, k))
    assert mg.config.layernorm_epsilon == eps
    w = getattr(cfg, "sliding_window", None)
    assert mg.config.window_size == ((w - 1, 0) if w else None)


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.stem not in REFUSED], ids=lambda p: p.stem)
def test_megatron_rotary_frequencies_are_the_hugging_face_ones(path):
    _, cfg = hf_model(path)
    if "--position-embedding-type" not in (e := emit_for(path)).text:
        assert getattr(cfg, "rope_parameters", None) is None or cfg.model_type == "gpt2"
        return
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    a = parse(e.text)
    head_dim = int(a.get("--kv-channels", int(a["--hidden-size"]) // int(a["--num-attention-heads"])))
    mg = RotaryEmbedding(
        kv_channels=head_dim,
        rotary_percent=float(a.get("--rotary-percent", 1.0)),
        rotary_base=int(a["--rotary-base"]),
        rope_scaling="--use-rope-scaling" in a,
        rope_scaling_factor=float(a.get("--rope-scaling-factor", 8.0)),
        use_cpu_initialization=True,
    ).inv_freq
    rope_type = cfg.rope_parameters.get("rope_type", "default")
    if rope_type == "default":
        base = cfg.rope_parameters["rope_theta"]
        dim = int(head_dim * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
        hf = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    else:
        hf, _ = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
    assert mg.shape == hf.shape
    torch.testing.assert_close(mg.float(), hf.float(), rtol=1e-5, atol=0)


@pytest.mark.parametrize("stem", sorted(REFUSED))
def test_models_megatron_builds_differently_are_refused(stem):
    r = run_vram(
        "plan", str(DATA / "configs" / f"{stem}.json"), "--gpu", "h100-80g", "--gpus", "16",
        "--global-batch", "256", "--seq", "1024", "--emit", "megatron",
    )
    assert r.returncode == 2, r.stderr
    assert REFUSED[stem] in r.stderr or "no configuration" in r.stderr, r.stderr
