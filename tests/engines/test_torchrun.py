"""The `torchrun` command and FSDP2 setup `vram plan --emit torchrun` prints run one step.

PyTorch 2.15.0 (tests/engines/requirements.txt), 2 CPU processes over gloo, the tiny model of
fsdp2_step.py (4 blocks, hidden 64). The command is run as emitted but for its rendezvous endpoint
(a free local port instead of $MASTER_ADDR:29500) and the script path; the setup is executed as
printed, with its mesh on "cpu" (and CPUOffloadPolicy unpinned).
"""

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY, emit, free_port, run_vram

pytest.importorskip("torch")
HERE = Path(__file__).resolve().parent


def split(text: str):
    """(command argv, Python setup) from the emitted text."""
    lines = text.splitlines()
    cmd = []
    i = 0
    while True:
        line = lines[i]
        cmd.append(line.rstrip("\\").strip())
        i += 1
        if not line.endswith("\\"):
            break
    py = [l[2:] for l in lines[i:]]
    assert all(l.startswith("# ") for l in lines[i:]), text
    return shlex.split(" ".join(cmd)), "\n".join(py) + "\n"


@pytest.mark.parametrize(
    "pins",
    [
        ["--zero", "3"],  # reshard after forward, bf16 compute
        ["--zero", "2", "--micro-batch", "2", "--precision", "fp16-amp"],  # accumulation 2
        ["--zero", "3", "--offload", "params", "--precision", "fp32"],  # CPUOffloadPolicy, no casts
    ],
    ids=" ".join,
)
def test_fsdp2_setup_runs_one_step_on_two_cpu_processes(pins, tmp_path):
    e = emit("torchrun", TINY, 2, 8, 64, *pins)
    argv, setup = split(e.text)
    compile(setup, "emitted-fsdp2-setup", "exec")  # the setup is Python as printed
    assert argv[0] == "torchrun" and "train.py" in argv
    assert argv[argv.index("--nproc-per-node") + 1] == "2" and argv[argv.index("--nnodes") + 1] == "1"
    endpoint = argv.index("--rdzv-endpoint") + 1
    assert argv[endpoint] == "$MASTER_ADDR:29500"
    argv[endpoint] = f"127.0.0.1:{free_port()}"
    argv[argv.index("train.py")] = str(HERE / "fsdp2_step.py")
    argv[0:1] = [sys.executable, "-m", "torch.distributed.run"]
    snippet = tmp_path / "setup.py"
    snippet.write_text(setup)
    env = dict(os.environ, VRAMKIT_FSDP2_SNIPPET=str(snippet), VRAMKIT_CONFIG=TINY, OMP_NUM_THREADS="1")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    # True|False, not \w+: two ranks can write their lines without a newline between them.
    ok = re.findall(
        r"STEP_OK rank=(\d) world=(\d) loss=([-\d.]+) sharded=(True|False) changed=(True|False) params=(\d+)", r.stdout
    )
    assert r.returncode == 0 and len(ok) == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(o[0] for o in ok) == ["0", "1"]
    # FSDP2 shards the transformers model the plan was made for: the same parameters as vram
    # counts for that config (and as transformers builds from it).
    params = json.loads(run_vram("estimate", TINY, "--json").stdout)["params"]
    for _, world, loss, sharded, changed, n in ok:
        assert world == "2" and sharded == "True" and changed == "True"
        assert int(n) == params, (n, params)
        # Untrained logits over 256 tokens: cross-entropy near ln 256 = 5.55.
        assert abs(float(loss) - math.log(256)) < 1.0, loss


def test_tp_plan_model_types_are_transformers_own():
    """crates/vram-plan/data/tp-plan-model-types.txt lists exactly the model types whose transformers
    config class has a base_model_tp_plan (what DistributedConfig(tp_size=N) shards)."""
    cfg = pytest.importorskip("transformers.models.auto.configuration_auto")
    listed = {
        l.strip()
        for l in (HERE.parents[1] / "crates/vram-plan/data/tp-plan-model-types.txt").read_text().splitlines()
        if l.strip() and not l.startswith("#")
    }
    own = set()
    for k in cfg.CONFIG_MAPPING_NAMES:
        try:
            c = cfg.CONFIG_MAPPING[k]
        except Exception:  # a config class whose optional dependency is missing
            continue
        if getattr(c, "base_model_tp_plan", None):
            own.add(k)
    assert listed == own, (sorted(listed - own), sorted(own - listed))


TP_PLANS = [
    ("llama-3.1-8b", 16, ["--tp", "2", "--zero", "3"]),
    ("llama-3.1-8b", 16, ["--tp", "2", "--zero", "0"]),
    ("llama-3.1-8b", 16, ["--tp", "4", "--zero", "3", "--offload", "optimizer"]),
    ("llama-3.1-8b", 8, ["--tp", "8", "--zero", "0"]),
]


@pytest.mark.parametrize("model,gpus,pins", TP_PLANS, ids=lambda x: " ".join(x) if isinstance(x, list) else str(x))
def test_tensor_parallel_setup_is_transformers_distributed_config(model, gpus, pins, monkeypatch):
    """The DistributedConfig a tensor-parallel plan writes is accepted by transformers 5.24 and lays
    its mesh (pp, dp_replicate, fsdp, tp) over exactly the ranks torchrun starts, with the plan's
    tp; ZeRO-3 is its fsdp_size, ZeRO-0 its dp_replicate_size."""
    transformers = pytest.importorskip("transformers")
    e = emit("torchrun", model, gpus, 256, 4096, *pins)
    argv, py = split(e.text)
    world = int(argv[argv.index("--nnodes") + 1]) * int(argv[argv.index("--nproc-per-node") + 1])
    assert world == e.tp * e.dp
    line = next(l for l in py.splitlines() if l.startswith("dc = DistributedConfig("))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    ns = {"DistributedConfig": transformers.DistributedConfig}
    exec(line, ns)
    dc = ns["dc"]
    assert dc.tp_size == e.tp
    assert dc.pp_size * dc.dp_replicate_size * dc.fsdp_size * dc.tp_size == world
    assert (dc.fsdp_size, dc.dp_replicate_size) == ((e.dp, 1) if e.zero == 3 else (1, e.dp))
    assert dc.fsdp_cpu_offload == ("offload" in e.label)
    assert "from_pretrained(model_id, distributed_config=dc" in py
    # The model type has a tensor-parallel plan of its own.
    cfg = json.loads((HERE / "data" / "configs" / f"{model}.json").read_text())
    assert transformers.AutoConfig.for_model(cfg["model_type"]).base_model_tp_plan


@pytest.mark.parametrize(
    "gpus,pins",
    [
        (2, ["--tp", "2"]),  # tensor parallelism alone
        (4, ["--tp", "2", "--zero", "3"]),  # fsdp_size 2 x tp 2
        (4, ["--tp", "2", "--zero", "0"]),  # dp_replicate_size 2 x tp 2
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else str(x),
)
def test_tensor_parallel_setup_runs_one_step(gpus, pins, tmp_path):
    """The emitted tensor-parallel setup loads a saved checkpoint sharded and trains one step on
    CPU processes over gloo (transformers builds its mesh on the CPU here), every rank seeing the
    model's whole parameter count through its DTensors."""
    transformers = pytest.importorskip("transformers")
    e = emit("torchrun", TINY, gpus, 8, 64, *pins)
    assert e.tp == 2
    argv, setup = split(e.text)
    ckpt = tmp_path / "ckpt"
    transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(TINY)).save_pretrained(ckpt)
    endpoint = argv.index("--rdzv-endpoint") + 1
    argv[endpoint] = f"127.0.0.1:{free_port()}"
    argv[argv.index("train.py")] = str(HERE / "tp_step.py")
    argv[0:1] = [sys.executable, "-m", "torch.distributed.run"]
    snippet = tmp_path / "setup.py"
    snippet.write_text(setup)
    env = dict(os.environ, VRAMKIT_TP_SNIPPET=str(snippet), VRAMKIT_CHECKPOINT=str(ckpt), OMP_NUM_THREADS="1")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    ok = re.findall(
        r"STEP_OK rank=(\d) world=(\d) tp=(\d) loss=([-\d.]+) sharded=(True|False) changed=(True|False) params=(\d+)",
        r.stdout,
    )
    assert r.returncode == 0 and len(ok) == gpus, r.stdout[-3000:] + r.stderr[-3000:]
    params = json.loads(run_vram("estimate", TINY, "--json").stdout)["params"]
    losses = {}
    for rank, world, tp, loss, sharded, changed, n in ok:
        assert (int(world), int(tp)) == (gpus, 2) and sharded == "True" and changed == "True"
        assert int(n) == params, (n, params)
        assert abs(float(loss) - math.log(256)) < 1.0, loss
        losses.setdefault(int(rank) // 2, set()).add(loss)
    # The two ranks of a tensor-parallel group computed one loss on the same micro-batches.
    assert all(len(v) == 1 for v in losses.values()), losses
