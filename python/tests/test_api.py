"""vramkit's Python API against the installed wheel: estimate, plan, replay, errors, CLI.

Run by .ci/python-tests in a fresh virtual environment where the wheel is installed.
"""

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import vramkit
from vramkit import VramError

# GPT-2 small's parameters, by hand from its config.json (n_embd 768, n_layer 12, n_positions
# 1024, vocab 50257; tied LM head): wte 50257*768 = 38,597,376; wpe 1024*768 = 786,432; per
# block ln_1 1,536 + c_attn 768*2304+2304 = 1,771,776 + attn c_proj 768*768+768 = 590,592 +
# ln_2 1,536 + c_fc 768*3072+3072 = 2,362,368 + mlp c_proj 3072*768+768 = 2,360,064 =
# 7,087,872, times 12 = 85,054,464; ln_f 1,536. Sum 124,439,808 (the figure Hugging Face's
# model card gives as 124M and `sum(p.numel() for p in GPT2Model(...).parameters())` prints).
GPT2_PARAMS = 124_439_808

# The config.json of Hugging Face's `gpt2` (openai-community/gpt2), the fields a config has.
GPT2_CONFIG = {
    "_name_or_path": "openai-community/gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "activation_function": "gelu_new",
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "vocab_size": 50257,
}

VRAM = shutil.which("vram")


def vram(*args):
    """The `vram` console script the wheel installed (the cargo-built binary)."""
    assert VRAM is not None, "the wheel installs a `vram` script"
    return subprocess.run([VRAM, *args], capture_output=True, text=True, timeout=120)


def test_installed_wheel_is_what_is_tested():
    # The package comes from site-packages, not from the source tree's python/ folder.
    assert "site-packages" in vramkit.__file__, vramkit.__file__
    assert isinstance(vramkit.__version__, str) and vramkit.__version__.count(".") == 2


def test_import_needs_neither_torch_nor_transformers():
    code = (
        "import sys, vramkit, vramkit.data, vramkit.torch; e = vramkit.estimate('gpt2'); "
        "assert e.params > 0; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'transformers')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_estimate_reads_like_the_cli_json():
    e = vramkit.estimate("gpt2", gpu="h100-80g", micro_batch=4, seq=1024)
    assert e.params == GPT2_PARAMS
    # Same JSON as the binary prints: one implementation behind both.
    out = vram("estimate", "gpt2", "--gpu", "h100-80g", "--micro-batch", "4", "--seq", "1024", "--json")
    assert out.returncode == 0, out.stderr
    assert e.to_dict() == json.loads(out.stdout)
    # The typed report's version and kind (crates/vram-report).
    assert (e.schema_version, e.kind) == (vramkit.SCHEMA_VERSION, "estimate")
    # The contract's attributes, and the breakdown summing to the device total (README).
    assert sum(e.breakdown.values()) == e.total_bytes
    assert e.peak_bytes <= e.needed_bytes <= e.reserved_bytes and e.needed_bytes < e.total_bytes
    assert e.fits is True and e.max_micro_batch >= 4
    assert isinstance(e.peak_phase, str) and e.peak_phase
    assert e.setup["mode"]["train"]["micro_batch"] == 4  # the keyword reached the setup
    # Any JSON field is an attribute; the object is read-only; to_dict is a copy.
    assert e.headroom_bytes == e.gpu["memory_bytes"] - e.total_bytes
    with pytest.raises(AttributeError):
        e.peak_bytes = 0
    d = e.to_dict()
    d["params"] = 0
    assert e.params == GPT2_PARAMS
    r = repr(e)
    assert r.startswith("Estimate(model='gpt2', params=124,439,808, peak=") and "fits=True on h100-80g" in r


def test_capacity_reads_like_the_cli_json():
    c = vramkit.capacity("llama-3-8b", engine="vllm", gpu="h100-80g", max_model_len=8192)
    out = vram("capacity", "llama-3-8b", "--engine", "vllm", "--gpu", "h100-80g",
               "--max-model-len", "8192", "--json")
    assert out.returncode == 0, out.stderr
    assert c.to_dict() == json.loads(out.stdout)
    assert c.starts is True and c.kv_cache_tokens > 0 and c.max_concurrency > 1
    # One block of 16 tokens over 32 layers of 8 KV heads x 128 x 2 (K, V) x 2 bytes.
    assert c.kv_cache_bytes == c.kv_cache_blocks * 16 * 32 * 8 * 128 * 2 * 2
    assert repr(c).startswith("Capacity(model='llama-3-8b', engine=vllm")
    s = vramkit.capacity("llama-3-8b", engine="sglang", gpu="rtx-4090", mem_fraction_static=0.9)
    assert s.engine == "sglang" and s.memory_fraction == 0.9
    with pytest.raises(vramkit.VramError, match="outside"):
        vramkit.capacity("llama-3-8b", gpu_memory_utilization=1.5)


# (kwargs of vramkit.capacity, the same flags of `vram capacity`): a job that does not start,
# SGLang, tensor parallelism on a hybrid linear-attention model, and an MLA model.
CAPACITY_CASES = [
    (dict(gpu="a100-80g", tensor_parallel_size=2, gpu_memory_utilization=0.85),
     ["--gpu", "a100-80g", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85"],
     "llama-3-70b"),
    (dict(engine="sglang", gpu="rtx-4090", context_length=8192, kv_cache_dtype="fp8_e4m3"),
     ["--engine", "sglang", "--gpu", "rtx-4090", "--context-length", "8192",
      "--kv-cache-dtype", "fp8_e4m3"],
     "llama-3-8b"),
    (dict(gpu="h100-80g", tensor_parallel_size=4, max_model_len=32768, enforce_eager=True),
     ["--gpu", "h100-80g", "--tensor-parallel-size", "4", "--max-model-len", "32768",
      "--enforce-eager"],
     "qwen3-next-80b-a3b"),
    (dict(gpu="h200", tensor_parallel_size=8, max_model_len=32768),
     ["--gpu", "h200", "--tensor-parallel-size", "8", "--max-model-len", "32768"],
     "deepseek-v3"),
]


@pytest.mark.parametrize("kwargs,flags,model", CAPACITY_CASES)
def test_capacity_is_the_cli_json_on_every_kind_of_job(kwargs, flags, model):
    c = vramkit.capacity(model, **kwargs)
    out = vram("capacity", model, *flags, "--json")
    assert out.returncode == 0, out.stderr
    assert c.to_dict() == json.loads(out.stdout)
    for k in ("weights_bytes", "non_torch_bytes", "activation_peak_bytes", "cuda_graph_bytes",
              "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "starts",
              "max_model_len_that_fits", "description"):
        assert getattr(c, k) == json.loads(out.stdout)[k], k
    if not c.starts:
        assert c.cheapest_change["flags"] and c.max_model_len_that_fits < c.max_model_len


def test_capacity_bad_input_names_the_flag():
    for kwargs, says in [
        (dict(gpu_memory_utilization=0.0), "--gpu-memory-utilization 0 is outside (0, 1]"),
        (dict(tensor_parallel_size=3), "--tensor-parallel-size 3 does not divide"),
        (dict(max_model_len=100000), "--max-model-len 100000"),
        (dict(engine="sglang", kv_cache_dtype="fp8"), "--kv-cache-dtype fp8"),
    ]:
        with pytest.raises(VramError, match=None) as e:
            vramkit.capacity("llama-3-8b", **kwargs)
        assert says in str(e.value) and "\n" not in str(e.value).strip(), (kwargs, str(e.value))


def test_fit_batch_size_is_the_largest_that_fits():
    # rtx-4090: 24 GiB (datasheet); the largest micro-batch fits and one more does not.
    n = vramkit.fit_batch_size("gpt2-medium", gpu="rtx-4090", seq=1024, optimizer="adamw")
    assert n >= 1
    assert vramkit.estimate("gpt2-medium", gpu="rtx-4090", seq=1024, micro_batch=n).fits
    assert not vramkit.estimate("gpt2-medium", gpu="rtx-4090", seq=1024, micro_batch=n + 1).fits
    # Nothing fits: 0, not an error (Llama-3-8B with AdamW needs ~150 GiB, README).
    assert vramkit.fit_batch_size("llama-3-8b", gpu="h100-80g") == 0
    # Inference: the largest batch at the context.
    b = vramkit.fit_batch_size("mistral-7b", gpu="a100-80g", inference=True, context=8192)
    assert b >= 1
    assert vramkit.estimate("mistral-7b", gpu="a100-80g", inference=True, context=8192, batch=b).fits
    assert not vramkit.estimate("mistral-7b", gpu="a100-80g", inference=True, context=8192, batch=b + 1).fits


def test_model_as_config_dict_and_transformers_like_objects():
    by_id = vramkit.estimate("gpt2", micro_batch=2)
    by_dict = vramkit.estimate(GPT2_CONFIG, micro_batch=2)
    assert by_dict.params == GPT2_PARAMS
    assert by_dict.peak_bytes == by_id.peak_bytes
    assert by_dict.model == "gpt2"  # named after _name_or_path

    class Config:  # what vramkit uses of a transformers PretrainedConfig
        model_type = "gpt2"

        def to_dict(self):
            return dict(GPT2_CONFIG)

    class Model:  # ... and of a PreTrainedModel: its config, never its weights
        config = Config()

        def parameters(self):
            raise AssertionError("weights must not be touched")

    assert vramkit.estimate(Config(), micro_batch=2).peak_bytes == by_id.peak_bytes
    assert vramkit.estimate(Model(), micro_batch=2).peak_bytes == by_id.peak_bytes


def test_real_transformers_config():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.GPT2Config()  # its defaults are GPT-2 small
    assert vramkit.estimate(cfg).params == GPT2_PARAMS


def test_model_from_a_folder_path(tmp_path):
    (tmp_path / "my-gpt2").mkdir()
    (tmp_path / "my-gpt2" / "config.json").write_text(json.dumps(GPT2_CONFIG))
    e = vramkit.estimate(tmp_path / "my-gpt2")
    # Named by the config's `_name_or_path` ("openai-community/gpt2"), never by its folder.
    assert e.params == GPT2_PARAMS and e.model == "gpt2"


@pytest.mark.parametrize(
    "call, cli_args",
    [
        (lambda: vramkit.estimate("no-such-model"), ["estimate", "no-such-model"]),
        (lambda: vramkit.estimate("gpt2", zero=7), ["estimate", "gpt2", "--zero", "7"]),
        (lambda: vramkit.estimate("gpt2", micro_batch=0), ["estimate", "gpt2", "--micro-batch", "0"]),
        (lambda: vramkit.estimate("gpt2", gpu="h900"), ["estimate", "gpt2", "--gpu", "h900"]),
        (lambda: vramkit.estimate("gpt2", precision="fp4"), ["estimate", "gpt2", "--precision", "fp4"]),
        (lambda: vramkit.estimate("gpt2", colour="blue"), ["estimate", "gpt2", "--colour", "blue"]),
        (lambda: vramkit.estimate("./missing/config.json"), ["estimate", "./missing/config.json"]),
        (lambda: vramkit.plan("gpt2", gpu="h100", gpus=3, global_batch=8, seq=1024, tp=0),
         ["plan", "gpt2", "--gpu", "h100", "--gpus", "3", "--global-batch", "8", "--seq", "1024", "--tp", "0"]),
        (lambda: vramkit.replay("/nonexistent.pickle"), ["replay", "/nonexistent.pickle"]),
    ],
)
def test_bad_input_raises_vram_error_with_the_cli_message(call, cli_args):
    with pytest.raises(VramError) as info:
        call()
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "\n" not in msg and msg
    out = vram(*cli_args)
    assert out.returncode == 2
    assert out.stderr.strip() == f"vram: {msg}"


def test_bad_python_values_raise_vram_error(tmp_path):
    with pytest.raises(VramError, match="model must be a catalog id"):
        vramkit.estimate(42)
    with pytest.raises(VramError, match="not a setup keyword"):
        vramkit.estimate("gpt2", **{"Micro-Batch": 2})
    bad = dict(GPT2_CONFIG, n_layer="twelve")
    with pytest.raises(VramError, match="n_layer"):
        vramkit.estimate(bad)
    with pytest.raises(VramError, match="snapshot must be a path"):
        vramkit.replay(["not", "a", "snapshot"])
    (tmp_path / "evil.pickle").write_bytes(pickle.dumps(os.system))
    with pytest.raises(VramError):
        vramkit.replay(tmp_path / "evil.pickle")
    with pytest.raises(VramError, match="list of arguments"):
        vramkit.cli("estimate gpt2")


def test_a_panic_raises_and_the_interpreter_goes_on():
    from vramkit import _vramkit

    with pytest.raises(VramError, match="internal error .*boom"):
        _vramkit._panic_for_test("boom")
    # The interpreter and the extension still work.
    assert vramkit.estimate("gpt2").params == GPT2_PARAMS


def test_request_notes_are_in_the_result(caplog):
    # gpt2 has 1024 positions: the report notes it (as the CLI's text and --json do), and
    # nothing is left on stderr for the logger.
    with caplog.at_level(logging.WARNING, logger="vramkit"):
        e = vramkit.estimate("gpt2", seq=4096)
    assert "--seq 4096 exceeds the model's configured maximum of 1024 positions" in e.notes
    assert not caplog.records


def test_plan_best_first_and_emit():
    req = dict(gpu="h100-80g", gpus=8, global_batch=64, seq=2048, top=3)
    plans = vramkit.plan("llama-2-7b", **req)
    assert 1 <= len(plans) <= 3
    assert all(isinstance(p, vramkit.Plan) for p in plans)
    times = [p.step_time_s for p in plans]
    assert times == sorted(times), times
    for p in plans:
        # The global batch is met exactly (README): dp x micro-batch x accumulation.
        assert p.dp * p.micro_batch * p.grad_accum == 64
        assert p.tp * p.pp * p.dp == 8
        assert p.peak_bytes_per_gpu <= 81559 * 2**20  # H100 80GB: 81,559 MiB (nvidia-smi)
    # The best plan's emitted config is the CLI's --emit output.
    cli = vram("plan", "llama-2-7b", "--gpu", "h100-80g", "--gpus", "8", "--global-batch", "64",
               "--seq", "2048", "--emit", "deepspeed")
    assert cli.returncode == 0, cli.stderr
    ds = plans[0].emit("deepspeed")
    assert ds == cli.stdout
    cfg = json.loads(ds)
    assert cfg["train_batch_size"] == 64
    assert cfg["train_micro_batch_size_per_gpu"] == plans[0].micro_batch
    # A later plan emits its own configuration (pinned), not the best one.
    last = plans[-1]
    mega = last.emit("megatron")
    assert f"--tensor-model-parallel-size {last.tp}" in mega
    assert f"--pipeline-model-parallel-size {last.pp}" in mega
    assert f"--micro-batch-size {last.micro_batch}" in mega
    assert "Plan(tp=" in repr(last)
    with pytest.raises(VramError, match="engine"):
        plans[0].emit("horovod")


def test_plan_nothing_fits_is_an_empty_list():
    # Llama-3-70B on 8 x RTX 4090 (24 GiB): README's example, nothing fits.
    assert vramkit.plan("llama-3-70b", gpu="rtx-4090", gpus=8, global_batch=8, seq=4096) == []
    out = vramkit.plan_outcome("llama-3-70b", gpu="rtx-4090", gpus=8, global_batch=8, seq=4096)
    assert out["closest"] and out["suggestions"]


def test_replay_path_and_snapshot_dict(tmp_path):
    path = tmp_path / "gpt2.pickle"
    vramkit.cli(["trace", "gpt2", "--steps", "2", "--out", str(path)])
    by_path = vramkit.replay(path, capacity="4GiB")
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    assert isinstance(snapshot, dict) and "device_traces" in snapshot
    by_dict = vramkit.replay(snapshot, capacity="4GiB")
    a, b = by_path.to_dict(), by_dict.to_dict()
    a.pop("snapshot"), b.pop("snapshot")
    assert a == b
    names = [p["name"] for p in by_path.policies]
    assert names[:3] == ["pytorch", "pytorch-expandable", "vramkit"], names
    for p in by_path.policies:
        # Every policy serves the same requests: the same peak allocated, at least as much reserved.
        assert p["peak_allocated_bytes"] == by_path.policies[0]["peak_allocated_bytes"]
        assert p["peak_reserved_bytes"] >= p["peak_allocated_bytes"]


def test_catalogs_and_cli_text():
    ids = {m["id"]: m["params"] for m in vramkit.models()}
    assert ids["gpt2"] == GPT2_PARAMS
    gpus = {g["id"]: g for g in vramkit.gpus()}
    assert "h100-80g" in gpus
    text = vramkit.cli(["estimate", "gpt2"])
    assert text == vram("estimate", "gpt2").stdout
    assert text.startswith("gpt2 — 124,439,808 parameters")


def test_console_script_and_python_m():
    assert VRAM is not None
    help_text = vram("--help").stdout
    assert "estimate" in help_text and "plan" in help_text
    bad = vram("estimate", "no-such-model")
    assert bad.returncode == 2 and bad.stderr.startswith("vram: ") and bad.stderr.count("\n") == 1
    same = subprocess.run([sys.executable, "-m", "vramkit", "estimate", "gpt2", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert same.returncode == 0
    assert json.loads(same.stdout) == json.loads(vram("estimate", "gpt2", "--json").stdout)
