"""accelerate loads the YAML `vram plan --emit accelerate` writes, and launches it.

accelerate 1.15.0 (tests/engines/requirements.txt). For each plan: its own config loader
(`load_config_from_file`, which rejects unknown top-level keys), its launch validation
(`_validate_launch_command`, which copies deepspeed_config/megatron_lm_config keys onto launch
arguments: each must be one, or it would be silently dropped), and for DEEPSPEED the DeepSpeed
config accelerate builds from the launch environment, fed to DeepSpeed. MULTI_GPU plans are
launched: `accelerate launch --config_file` runs one step of a tiny model on 2 CPU processes.
DEEPSPEED is not launched on CPU: DeepSpeed's CPU accelerator JIT-compiles its shm_comm C++ op
(minutes on 2 cores) and accelerate's DeepSpeed path then needs transformers.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY, emit, run_vram

accelerate = pytest.importorskip("accelerate")
from accelerate.commands.config.config_args import load_config_from_file  # noqa: E402
from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402

HERE = Path(__file__).resolve().parent
PARSER = launch_command_parser()
DESTS = {a.dest for a in PARSER._actions}


def load(e, tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text(e.text)
    cfg = load_config_from_file(str(f))
    args, defaults, mp_from_config = _validate_launch_command(PARSER.parse_args(["--config_file", str(f), "train.py"]))
    return f, cfg, args, defaults, mp_from_config


PLANS = [
    (TINY, 2, 8, 64, ["--zero", "0"]),
    (TINY, 1, 8, 64, ["--zero", "0"]),
    (TINY, 2, 8, 64, ["--zero", "1", "--precision", "fp16-amp"]),
    (TINY, 2, 16, 64, ["--zero", "2", "--micro-batch", "2"]),
    (TINY, 4, 8, 64, ["--zero", "3", "--offload", "params"]),
    (TINY, 2, 8, 64, ["--zero", "2", "--offload", "optimizer", "--precision", "fp32"]),
    # accelerate runs tp/pp > 1 through Megatron-LM (MEGATRON_LM): sequence parallelism and
    # some-layer recomputation are that stack's (a Hugging Face model has neither).
    ("llama-2-13b", 32, 256, 4096, ["--tp", "4", "--pp", "2", "--zero", "1", "--recompute", "full", "--schedule", "1f1b", "--sequence-parallel", "--stack", "megatron"]),
    ("llama-2-13b", 16, 256, 4096, ["--tp", "2", "--pp", "1", "--zero", "2", "--offload", "optimizer", "--recompute", "optimal", "--stack", "megatron"]),
]


@pytest.mark.parametrize("model,gpus,gb,seq,pins", PLANS, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_accelerate_loads_and_validates_the_emitted_yaml(model, gpus, gb, seq, pins, tmp_path, monkeypatch):
    e = emit("accelerate", model, gpus, gb, seq, *pins)
    f, cfg, args, defaults, mp_from_config = load(e, tmp_path)
    world = e.tp * e.pp * e.dp
    assert cfg.num_processes == args.num_processes == world
    assert cfg.num_machines == -(-world // 8)
    want_mp = {"fp16-amp": "fp16", "fp32": "no"}.get(pins[pins.index("--precision") + 1], "bf16") if "--precision" in pins else "bf16"
    assert cfg.mixed_precision == args.mixed_precision == want_mp
    for section in ("deepspeed_config", "megatron_lm_config"):
        unknown = sorted(set(getattr(cfg, section) or {}) - DESTS)
        assert unknown == [], f"{section} keys accelerate launch does not take: {unknown}"
    dt = cfg.distributed_type.value
    if e.tp > 1 or e.pp > 1:
        assert dt == "MEGATRON_LM" and args.use_megatron_lm
        assert (args.megatron_lm_tp_degree, args.megatron_lm_pp_degree) == (e.tp, e.pp)
        assert args.megatron_lm_num_micro_batches == e.grad_accum
        assert args.megatron_lm_use_distributed_optimizer == (e.zero in (1, 2))
        assert args.megatron_lm_sequence_parallelism == (" sp" in e.label and e.tp > 1)
        assert args.megatron_lm_recompute_granularity == "full"
        k = re.search(r"rc-full:(\d+)", e.label)
        assert (args.megatron_lm_recompute_method, args.megatron_lm_recompute_num_layers) == (
            ("block", int(k.group(1))) if k else ("uniform", 1)
        )
        assert bool(args.megatron_lm_optimizer_cpu_offload) == ("offload-opt" in e.label)
    elif e.zero >= 1:
        assert dt == "DEEPSPEED" and args.use_deepspeed
        assert int(args.zero_stage) == e.zero
        assert int(args.gradient_accumulation_steps) == e.grad_accum
        assert args.offload_optimizer_device == ("cpu" if "offload-" in e.label else "none")
        assert args.offload_param_device == ("cpu" if "offload-params" in e.label else "none")
        check_deepspeed_plugin(e, args, defaults, mp_from_config, monkeypatch)
    else:
        assert dt == ("MULTI_GPU" if world > 1 else "NO")


def check_deepspeed_plugin(e, args, defaults, mp_from_config, monkeypatch):
    """The DeepSpeed config accelerate builds from the launch environment, read by DeepSpeed."""
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    import test_deepspeed

    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    _, env = prepare_deepspeed_cmd_env(args)
    for k, v in env.items():
        if k.startswith("ACCELERATE_"):
            monkeypatch.setenv(k, v)
    ds = DeepSpeedPlugin().deepspeed_config
    assert ds["zero_optimization"]["stage"] == e.zero
    # What Accelerator.prepare fills in for "auto" (the batch from the dataloader, precision).
    ds["train_micro_batch_size_per_gpu"] = e.micro_batch
    ds["train_batch_size"] = e.micro_batch * e.grad_accum * e.dp
    ds["gradient_clipping"] = 1.0
    if args.mixed_precision in ("bf16", "fp16"):
        ds[args.mixed_precision] = {"enabled": True}
    cfg, unread, warnings = test_deepspeed.load(json.dumps(ds), e.dp, monkeypatch)
    assert warnings == []
    assert cfg.gradient_accumulation_steps == e.grad_accum
    assert (cfg.zero_config.offload_param is not None and cfg.zero_config.offload_param.device == "cpu") == (
        "offload-params" in e.label
    )


@pytest.mark.parametrize("pins", [["--zero", "0"]], ids=" ".join)
def test_accelerate_launch_runs_one_step_on_two_cpu_processes(pins, tmp_path):
    e = emit("accelerate", TINY, 2, 8, 64, *pins)
    f = tmp_path / "plan.yaml"
    f.write_text(e.text)
    assert "distributed_type: MULTI_GPU" in e.text
    # The YAML as emitted; ACCELERATE_USE_CPU is how accelerate is told the machine has no GPU.
    env = dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")
    port = str(__import__("test_torchrun").free_port())
    r = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(f), "--main_process_port", port,
         str(HERE / "accelerate_step.py"), str(e.micro_batch), TINY],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    # True|False, not \w+: two processes can write their lines without a newline between them.
    ok = re.findall(r"STEP_OK (\S+) (\d+) (\S+) ([-\d.]+) changed=(True|False) params=(\d+)", r.stdout)
    assert r.returncode == 0 and len(ok) == 2, r.stdout[-3000:] + r.stderr[-3000:]
    # accelerate wraps the transformers model the plan was made for: vram's count for that config.
    params = str(__import__("json").loads(run_vram("estimate", TINY, "--json").stdout)["params"])
    for dist_type, n, mp, loss, changed, count in ok:
        assert (dist_type, n, mp, changed, count) == ("MULTI_CPU", "2", "bf16", "True", params)


@pytest.mark.parametrize(
    "pins,rule",
    [
        (["--tp", "2", "--pp", "1", "--zero", "1", "--recompute", "selective", "--stack", "megatron"], "only full recomputation"),
        (["--tp", "2", "--pp", "1", "--zero", "3", "--stack", "megatron"], "no ZeRO-3 setting"),
        # A Hugging Face model's tensor parallelism is loaded by the script, not by accelerate's config.
        (["--tp", "2", "--pp", "1", "--zero", "3"], "for tp 2 use --emit torchrun (transformers' DistributedConfig) or --emit deepspeed (AutoTP)"),
        (["--tp", "2", "--pp", "4", "--zero", "1", "--recompute", "full", "--schedule", "interleaved:2", "--stack", "megatron"], "virtual pipeline"),
    ],
)
def test_plans_accelerate_refuses_are_not_emitted(pins, rule):
    r = run_vram(
        "plan", "llama-2-13b", "--gpu", "h100-80g", "--gpus", "32", "--global-batch", "256", "--seq", "4096",
        "--emit", "accelerate", *pins,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert rule in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_accelerate_tensor_parallelism_needs_a_model_loaded_sharded():
    """Why `--emit accelerate` writes no tp > 1 for a Hugging Face model: accelerate 1.15's prepare
    takes the tp size from the model (`get_model_tp_size`: config.distributed_config.tp_size,
    set only when transformers loads it sharded) and raises without one; a config file cannot
    load the model."""
    transformers = pytest.importorskip("transformers")
    from accelerate.utils.other import get_model_tp_size

    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(TINY))
    assert get_model_tp_size(model) is None
