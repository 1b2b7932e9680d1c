"""DeepSpeed reads every key `vram plan --emit deepspeed` writes, for the plan's world size.

DeepSpeed 0.19.8 (tests/engines/requirements.txt). Its `DeepSpeedConfig(config, mpu)` is the object
`deepspeed.initialize` builds; it asserts train_batch_size = micro x accumulation x data-parallel
size, and validates `zero_optimization`, `bf16` and `fp16` with pydantic models that forbid unknown
keys. Other sections (`activation_checkpointing`, `pipeline`) are read with `.get`, so a misspelt key
there would be silently ignored: the test records every key DeepSpeed reads and fails on any it
did not.
"""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TINY, Emitted, emit, run_vram

deepspeed = pytest.importorskip("deepspeed")  # installed by .ci/engine-tests; never skipped there
from deepspeed.runtime import config as ds_config  # noqa: E402
from deepspeed.runtime.config_utils import DeepSpeedConfigModel  # noqa: E402


class Recorder(dict):
    """A dict that notes each key read through it (nested dicts too)."""

    def __init__(self, d, path=(), seen=None):
        seen = set() if seen is None else seen
        super().__init__({k: Recorder(v, path + (k,), seen) if isinstance(v, dict) else v for k, v in d.items()})
        self.path, self.seen = path, seen

    def _note(self, k):
        self.seen.add(self.path + (k,))

    def __getitem__(self, k):
        self._note(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self._note(k)
        return super().get(k, default)

    def __contains__(self, k):
        self._note(k)
        return super().__contains__(k)


class Mpu:
    """The model-parallel unit DeepSpeed asks for the data-parallel world size."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def keys(d, path=()):
    for k, v in d.items():
        yield path + (k,)
        if isinstance(v, dict):
            yield from keys(v, path + (k,))


# Sections DeepSpeed validates with pydantic models that forbid unknown keys.
VALIDATED = {"zero_optimization": "DeepSpeedZeroConfig", "bf16": "DeepSpeedBF16Config", "fp16": "DeepSpeedFP16Config"}


def load(text: str, dp: int, monkeypatch, world: int | None = None):
    """DeepSpeedConfig of the emitted JSON; returns (config, unread keys, warnings).

    `dp`: the model-parallel unit's data-parallel size, as a Megatron-style launcher passes it.
    `world`: instead, no unit and this many ranks, as `deepspeed.initialize` builds the config
    of an AutoTP job (no `mpu`: DeepSpeedConfig counts every rank, runtime/config.py)."""
    raw = json.loads(text)
    rec = Recorder(raw)
    # No process group here: DeepSpeedConfig asks dist for the rank first, then the mpu for the
    # data-parallel size (runtime/config.py); without a rank it would fall back to world size 1.
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    if world is not None:
        monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    records = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    deepspeed.utils.logger.addHandler(handler)
    try:
        cfg = ds_config.DeepSpeedConfig(rec, mpu=None if world is not None else Mpu(dp))
    finally:
        deepspeed.utils.logger.removeHandler(handler)
    pipeline_keys = set(ds_config.get_pipeline_config({}))  # DeepSpeed's own pipeline keys
    unread = []
    for k in keys(raw):
        if k in rec.seen or (k[0] in VALIDATED and len(k) > 1):
            continue
        if k[0] == "pipeline" and len(k) == 2 and k[1] in pipeline_keys:
            continue
        if k == ("tensor_parallel", "autotp_size") and cfg.tensor_parallel_config.autotp_size == raw[k[0]][k[1]]:
            continue  # read by the pydantic TPTrainingConfig
        unread.append(".".join(k))
    return cfg, unread, [r.getMessage() for r in records]


def test_validated_sections_forbid_unknown_keys():
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    for cls in (DeepSpeedZeroConfig, DeepSpeedBF16Config, DeepSpeedFP16Config):
        assert issubclass(cls, DeepSpeedConfigModel)
        assert cls.model_config["extra"] == "forbid"
        with pytest.raises(Exception):
            cls(**{"no_such_key": 1})


# (model, gpus, global batch, seq, pins): ZeRO 0-3, offload of optimizer and parameters, bf16 and
# fp16, accumulation and micro-batch, data-parallel sizes from 2 to 64, recomputation.
PLANS = [
    (TINY, 2, 8, 64, ["--zero", "0"]),
    (TINY, 2, 8, 64, ["--zero", "1", "--precision", "fp16-amp"]),
    (TINY, 2, 16, 64, ["--zero", "2", "--micro-batch", "2"]),  # accumulation 4
    (TINY, 4, 8, 64, ["--zero", "3", "--micro-batch", "1"]),
    (TINY, 2, 8, 64, ["--zero", "2", "--offload", "optimizer"]),
    (TINY, 2, 8, 64, ["--zero", "3", "--offload", "params", "--precision", "fp16-amp"]),
    (TINY, 2, 8, 64, ["--zero", "0", "--precision", "fp32"]),
    ("llama-2-13b", 16, 256, 4096, ["--tp", "1", "--pp", "1", "--zero", "3", "--offload", "optimizer"]),
    ("llama-2-13b", 64, 512, 4096, ["--tp", "1", "--pp", "1", "--zero", "3", "--recompute", "full"]),
    ("llama-2-7b", 8, 64, 4096, ["--tp", "1", "--zero", "2"]),
]


@pytest.mark.parametrize(
    "pins,rule",
    [
        # A Hugging Face model recomputes every layer or none (gradient_checkpointing_enable), and
        # DeepSpeed 0.19.8's number_checkpoints only sizes contiguous buffers: the transformers
        # stack does not plan selective or some-layer recomputation ...
        (["--zero", "1", "--recompute", "selective"], "needs --stack megatron"),
        (["--tp", "1", "--zero", "2", "--recompute", "optimal"], "needs --stack megatron"),
        # ... and a plan made for Megatron-LM's stack is not written for DeepSpeed.
        (["--stack", "megatron", "--tp", "1", "--zero", "2", "--recompute", "optimal"], "every layer or none"),
    ],
)
def test_recompute_a_hugging_face_model_cannot_run_is_refused(pins, rule):
    r = run_vram(
        "plan", "llama-2-7b", "--gpu", "h100-80g", "--gpus", "8", "--global-batch", "64", "--seq", "4096",
        "--emit", "deepspeed", *pins,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert rule in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("model,gpus,gb,seq,pins", PLANS, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_deepspeed_builds_its_config_from_the_emitted_json(model, gpus, gb, seq, pins, monkeypatch):
    e = emit("deepspeed", model, gpus, gb, seq, *pins)
    autotp = e.tp > 1
    cfg, unread, warnings = load(e.text, e.dp, monkeypatch, world=gpus if autotp else None)
    assert unread == [], f"keys DeepSpeed does not read: {unread}"
    assert warnings == []
    # The values DeepSpeed settled on are the plan's. Under AutoTP it counts its batch over every
    # rank of a tensor-parallel group, which all see the same sequences.
    assert gb == e.micro_batch * e.grad_accum * e.dp
    assert cfg.train_batch_size == gb * (e.tp if autotp else 1)
    assert cfg.tensor_parallel_config.autotp_size == (e.tp if autotp else 0)
    assert cfg.train_micro_batch_size_per_gpu == e.micro_batch
    assert cfg.gradient_accumulation_steps == e.grad_accum
    assert cfg.zero_optimization_stage == e.zero
    assert cfg.zero_enabled == (e.zero > 0)
    raw = json.loads(e.text)
    assert cfg.bfloat16_config.enabled == raw["bf16"]["enabled"]
    assert cfg.float16_config.enabled == raw["fp16"]["enabled"]
    assert not (cfg.bfloat16_config.enabled and cfg.float16_config.enabled)
    if "--precision" in pins:
        want = pins[pins.index("--precision") + 1]
        assert cfg.float16_config.enabled == (want == "fp16-amp")
        assert cfg.bfloat16_config.enabled is False if want != "bf16-amp" else True
    off = " offload-" in f" {e.label}"
    assert (cfg.zero_config.offload_optimizer is not None) == off
    if "offload-params" in e.label:
        assert cfg.zero_config.offload_param.device == "cpu"
    assert e.pp == 1


@pytest.mark.parametrize(
    "pins,rule",
    [
        # A Hugging Face model runs whole on every rank: the transformers stack plans no
        # pipeline and refuses one pinned ...
        (["--pp", "4", "--zero", "1"], "--pp 4 needs --stack megatron"),
        (["--schedule", "interleaved:2"], "needs --stack megatron"),
        # ... and a pipeline planned for Megatron-LM is not written for DeepSpeed.
        (["--stack", "megatron", "--pp", "4", "--zero", "1", "--no-sequence-parallel", "--recompute", "full"],
         "pipelines only a PipelineModule"),
        # (Parameter offload below ZeRO-3 and offload at ZeRO-0 are refused too, see
        # crates/vram-plan/tests/it/emit.rs; the planner does not search them.)
    ],
)
def test_plans_deepspeed_refuses_are_not_emitted(pins, rule):
    r = run_vram(
        "plan", "llama-2-7b", "--gpu", "h100-80g", "--gpus", "16", "--global-batch", "256", "--seq", "2048",
        "--emit", "deepspeed", *pins,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert rule in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_deepspeed_pipelines_only_a_pipeline_module_itself():
    # The rule vram applies is DeepSpeed's own code, as installed: initialize builds a
    # PipelineEngine only for a PipelineModule (a Hugging Face model is a plain nn.Module, whose
    # DeepSpeedEngine never reads the `pipeline` section), and PipelineEngine asserts it.
    import inspect

    import deepspeed
    from deepspeed.runtime.pipe.engine import PipelineEngine

    assert "if not isinstance(model, PipelineModule):" in inspect.getsource(deepspeed.initialize)
    assert "model must base PipelineModule" in inspect.getsource(PipelineEngine.__init__)


def test_deepspeed_zero3_engine_holds_the_transformers_model(tmp_path):
    # The emitted ZeRO-3 config, given to deepspeed.initialize around the transformers model of
    # the same config: the engine holds every parameter vram counts for it.
    e = emit("deepspeed", TINY, 1, 4, 64, "--zero", "3")
    assert e.zero == 3, e.label
    cfg = tmp_path / "ds.json"
    cfg.write_text(e.text)
    env = dict(
        os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(__import__("test_torchrun").free_port()), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1",
    )
    r = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("deepspeed_count.py")), str(cfg), TINY],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    m = re.search(r"PARAMS engine=(\d+) model=(\d+) stage=(\d)", r.stdout)
    assert r.returncode == 0 and m, r.stdout[-3000:] + r.stderr[-3000:]
    params = json.loads(run_vram("estimate", TINY, "--json").stdout)["params"]
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (params, params, 3)


def test_autotp_rules_are_deepspeeds_own():
    # The rules vram applies to a tensor-parallel plan, in the installed DeepSpeed: AutoTP reads
    # `tensor_parallel.autotp_size` (runtime/tensor_parallel/config.py), initialize refuses a
    # model-parallel unit with a pipeline, and AutoTP warns for ranks beyond the KV heads.
    import inspect

    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig

    assert "autotp_size" in TPTrainingConfig.model_fields
    assert "mpu must be None with pipeline parallelism" in inspect.getsource(deepspeed.initialize)
    assert "exceeds the model's key-value head count" in inspect.getsource(DeepSpeedEngine._apply_autotp_partitioning)
    assert "AutoTP + ZeRO stage 3 is supported" in inspect.getsource(DeepSpeedEngine._configure_tensor_parallel_states)


def run_autotp(e: Emitted, tmp_path, seq: int) -> list[dict]:
    """The emitted config through deepspeed.initialize and one optimizer step, on as many CPU
    processes as the plan has GPUs (gloo); each rank's report."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(e.text)
    world = e.tp * e.pp * e.dp
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--nnodes", "1",
            "--master-port", str(__import__("test_torchrun").free_port()),
            str(Path(__file__).with_name("deepspeed_autotp_step.py")), str(cfg), TINY, str(seq),
        ],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    found = re.findall(r"AUTOTP rank=(\d+) tp=(\d+) dp=(\d+) q_out=(\d+)/(\d+) batch=(\d+) micro=(\d+) accum=(\d+)", r.stdout)
    assert r.returncode == 0 and len(found) == world, r.stdout[-3000:] + r.stderr[-3000:]
    keys = ["rank", "tp", "dp", "q_rows", "rows", "batch", "micro", "accum"]
    return [dict(zip(keys, map(int, f))) for f in found]


@pytest.mark.parametrize("zero", ["1", "3"])
def test_a_tensor_parallel_plan_trains_a_step_under_autotp(zero, tmp_path):
    # Two CPU ranks, TP pinned at 2: the emitted config carries autotp_size, DeepSpeed shards
    # the transformers model's linears over the two ranks and trains one step, and its batch is
    # the plan's (counted over both ranks of the one tensor-parallel group).
    e = emit("deepspeed", TINY, 2, 4, 64, "--tp", "2", "--zero", zero)
    assert (e.tp, e.dp, e.zero) == (2, 1, int(zero)), e.label
    raw = json.loads(e.text)
    assert raw["tensor_parallel"] == {"autotp_size": 2} and "train_batch_size" not in raw
    assert "AutoTP" in e.stderr
    for rank in run_autotp(e, tmp_path, 64):
        assert (rank["tp"], rank["dp"]) == (2, 1)
        assert rank["q_rows"] * 2 == rank["rows"], "q_proj is sharded over the two ranks"
        assert (rank["micro"], rank["accum"]) == (e.micro_batch, e.grad_accum)
        assert rank["batch"] == 4 * 2


def test_the_issue_example_emits_a_plan_deepspeed_accepts(monkeypatch):
    # Issue 31: llama-3.1-70b on 64 H100s ranked a tp4 plan with sequence parallelism first, which
    # AutoTP cannot run. The transformers stack no longer plans Megatron's sequence parallelism
    # (a Hugging Face model has none): the fastest plan is one DeepSpeed runs, whose batch
    # DeepSpeed accepts for the 64 ranks of the job.
    config = str(ROOT / "crates/vram-model/data/catalog/llama-3.1-70b.json")
    e = emit("deepspeed", config, 64, 512, 8192, gpu="h100")
    assert " sp" not in f" {e.label} "
    cfg, unread, warnings = load(e.text, e.dp, monkeypatch, world=64)
    assert (unread, warnings) == ([], [])
    assert e.micro_batch * e.grad_accum * e.dp == 512
    assert cfg.train_batch_size == 512 * e.tp
    assert cfg.tensor_parallel_config.autotp_size == (e.tp if e.tp > 1 else 0)


@pytest.mark.parametrize(
    "pins,rule",
    [
        (["--tp", "2", "--pp", "2", "--zero", "1"], "PipelineModule"),
        (["--tp", "2", "--sequence-parallel"], "sequence parallelism"),
    ],
)
def test_tensor_parallel_plans_autotp_cannot_run_are_refused(pins, rule):
    r = run_vram(
        "plan", TINY, "--gpu", "h100-80g", "--gpus", "4", "--global-batch", "8", "--seq", "64",
        "--emit", "deepspeed", *pins,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert rule in r.stderr and r.stderr.count("\n") == 1, r.stderr
