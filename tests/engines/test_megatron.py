"""The Megatron-LM arguments `vram plan --emit megatron` writes map onto megatron-core's configs.

megatron-core 0.16.1 (the newest for Python 3.11; tests/engines/requirements.txt). Its wheel has
no `megatron/training`, so the argument parser itself is not installed: flag names are checked
against data/megatron-lm-flags.txt (extracted from Megatron-LM's arguments.py, commit named there),
and the values are passed to megatron-core's `TransformerConfig` (a `ModelParallelConfig`) and
`OptimizerConfig` the way Megatron-LM's `core_transformer_config_from_args` does, so their
`__post_init__` checks run on them.
"""

import re

import pytest

from conftest import DATA, TINY, emit, run_vram

torch = pytest.importorskip("torch")
core = pytest.importorskip("megatron.core")
from megatron.core.optimizer import OptimizerConfig  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402

FLAGS = {l.strip() for l in (DATA / "megatron-lm-flags.txt").read_text().splitlines() if l.startswith("--")}


def parse(text: str) -> dict:
    """`--flag value \\` lines into {flag: value or True}."""
    args = {}
    lines = [l.rstrip(" \\") for l in text.splitlines() if l.startswith("--")]
    assert lines, text
    for l in lines:
        flag, _, value = l.partition(" ")
        assert flag not in args, f"{flag} twice"
        args[flag] = value if value else True
    return args


@pytest.fixture(autouse=True)
def _transformer_engine(monkeypatch):
    # megatron-core's precision-aware optimizer (which --optimizer-cpu-offload needs) asks for
    # Transformer Engine >= 2.1 (optimizer_config.py); TE is CUDA-only and not installed here, so
    # the test answers as a GPU install with TE 2.1+ would.
    import megatron.core.optimizer.optimizer_config as occ

    monkeypatch.setattr(occ, "is_te_min_version", lambda *a, **k: True)


def configs(a: dict):
    """megatron-core configs from the arguments, as Megatron-LM builds them."""
    num = lambda k: int(a[k]) if k in a else None  # noqa: E731
    layers, pp = num("--num-layers"), num("--pipeline-model-parallel-size")
    vpp = None
    if "--num-layers-per-virtual-pipeline-stage" in a:
        # Megatron-LM validate_args: per-stage layers / layers per virtual stage; 1 means none.
        assert layers % pp == 0 and (layers // pp) % num("--num-layers-per-virtual-pipeline-stage") == 0
        vpp = (layers // pp) // num("--num-layers-per-virtual-pipeline-stage")
        vpp = None if vpp == 1 else vpp
    dtype = torch.bfloat16 if "--bf16" in a else torch.float16 if "--fp16" in a else torch.float32
    swiglu = "--swiglu" in a
    tc = TransformerConfig(
        tensor_model_parallel_size=num("--tensor-model-parallel-size"),
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        sequence_parallel="--sequence-parallel" in a,
        num_layers=layers,
        hidden_size=num("--hidden-size"),
        num_attention_heads=num("--num-attention-heads"),
        ffn_hidden_size=num("--ffn-hidden-size"),
        num_query_groups=num("--num-query-groups") if "--group-query-attention" in a else None,
        kv_channels=num("--kv-channels"),
        recompute_granularity=a.get("--recompute-granularity"),
        recompute_method=a.get("--recompute-method"),
        recompute_num_layers=num("--recompute-num-layers"),
        bf16="--bf16" in a,
        fp16="--fp16" in a,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        gated_linear_unit=swiglu,
        activation_func=torch.nn.functional.silu if swiglu else torch.nn.functional.gelu,
        bias_activation_fusion=False,
        normalization=a.get("--normalization", "LayerNorm"),
        layernorm_epsilon=float(a.get("--norm-epsilon", 1e-5)),
        window_size=tuple(int(x) for x in a["--window-size"].split(",")) if "--window-size" in a else None,
        gradient_accumulation_fusion="--no-gradient-accumulation-fusion" not in a,
    )
    oc = OptimizerConfig(
        optimizer="adam",
        use_distributed_optimizer="--use-distributed-optimizer" in a,
        optimizer_cpu_offload="--optimizer-cpu-offload" in a,
        use_precision_aware_optimizer="--use-precision-aware-optimizer" in a,
        bf16="--bf16" in a,
        fp16="--fp16" in a,
        params_dtype=dtype,
    )
    return tc, oc


# tensor, pipeline and virtual-pipeline sizes, sequence parallelism, recompute granularity, method
# and layers, ZeRO 0-3 (distributed optimizer, FSDP2), optimizer offload, bf16 and fp16, GQA.
PLANS = [
    ("llama-2-13b", 32, 256, 4096, ["--tp", "4", "--pp", "2", "--zero", "1", "--sequence-parallel", "--schedule", "interleaved:2", "--recompute", "selective"]),
    ("llama-2-13b", 32, 256, 4096, ["--tp", "8", "--pp", "4", "--zero", "0", "--schedule", "1f1b", "--recompute", "full"]),
    ("llama-2-13b", 32, 256, 4096, ["--tp", "2", "--pp", "4", "--recompute", "optimal"]),
    ("llama-2-13b", 16, 256, 4096, ["--tp", "2", "--pp", "1", "--zero", "3"]),
    ("llama-2-13b", 16, 256, 4096, ["--tp", "2", "--pp", "1", "--zero", "2", "--offload", "optimizer"]),
    ("llama-2-70b", 64, 512, 4096, ["--tp", "8", "--pp", "4", "--schedule", "interleaved:4"]),
    ("llama-2-13b", 32, 256, 4096, ["--tp", "4", "--pp", "2", "--precision", "fp16-amp"]),
    (TINY, 2, 8, 64, ["--pp", "2", "--schedule", "1f1b", "--precision", "fp32"]),
]


@pytest.mark.parametrize("model,gpus,gb,seq,pins", PLANS, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_megatron_core_builds_its_configs_from_the_emitted_arguments(model, gpus, gb, seq, pins):
    e = emit("megatron", model, gpus, gb, seq, *pins)
    a = parse(e.text)
    unknown = sorted(set(a) - FLAGS)
    assert unknown == [], f"flags Megatron-LM does not define: {unknown}"
    tc, oc = configs(a)
    assert (tc.tensor_model_parallel_size, tc.pipeline_model_parallel_size) == (e.tp, e.pp)
    assert tc.sequence_parallel == (" sp" in e.label and e.tp > 1)
    # Megatron-LM derives the accumulation as global / (micro x dp).
    assert int(a["--global-batch-size"]) == gb == int(a["--micro-batch-size"]) * e.dp * e.grad_accum
    m = re.search(r"interleaved-(\d+)", e.label)
    if m and e.pp > 1 and int(m.group(1)) > 1:
        assert tc.virtual_pipeline_model_parallel_size == int(m.group(1))
    else:
        assert tc.virtual_pipeline_model_parallel_size is None
    rc = re.search(r"rc-(full|sel)(?::(\d+))?", e.label)
    if rc is None:
        assert tc.recompute_granularity is None
    elif rc.group(1) == "sel":
        assert (tc.recompute_granularity, tc.recompute_method) == ("selective", None)
    else:
        assert tc.recompute_granularity == "full"
        if rc.group(2):
            assert (tc.recompute_method, tc.recompute_num_layers) == ("block", int(rc.group(2)))
        else:
            assert (tc.recompute_method, tc.recompute_num_layers) == ("uniform", 1)
    assert oc.use_distributed_optimizer == (e.zero in (1, 2))
    assert ("--use-torch-fsdp2" in a) == (e.zero == 3)
    assert oc.optimizer_cpu_offload == ("offload-opt" in e.label)


def test_megatron_core_refuses_what_vram_never_emits():
    # The combinations vram refuses are megatron-core's own errors.
    base = parse(emit("megatron", "llama-2-13b", 16, 256, 4096, "--tp", "2", "--pp", "1", "--zero", "1").text)
    for change, msg in [
        ({"--tensor-model-parallel-size": "3"}, "num_attention_heads"),  # 40 heads
        ({"--tensor-model-parallel-size": "1", "--sequence-parallel": True}, "sequence parallelism"),
        ({"--fp16": True}, "fp16"),  # with --bf16 already there
    ]:
        with pytest.raises(ValueError, match=msg):
            configs({**base, **change})
    with pytest.raises(AssertionError, match="distributed optimizer"):
        configs({k: v for k, v in {**base, "--optimizer-cpu-offload": True, "--use-precision-aware-optimizer": True}.items() if k != "--use-distributed-optimizer"})


@pytest.mark.parametrize(
    "model,pins,rule",
    [
        ("gpt2-xl", ["--tp", "1", "--pp", "1", "--zero", "3"], "--untie-embeddings-and-output-weights"),
        ("llama-2-13b", ["--tp", "1", "--pp", "1", "--zero", "3", "--offload", "params"], "no parameter offload"),
    ],
)
def test_plans_megatron_refuses_are_not_emitted(model, pins, rule):
    r = run_vram(
        "plan", model, "--gpu", "h100-80g", "--gpus", "16", "--global-batch", "256", "--seq", "1024",
        "--emit", "megatron", *pins,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert rule in r.stderr and r.stderr.count("\n") == 1, r.stderr
