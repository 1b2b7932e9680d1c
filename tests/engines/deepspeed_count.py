"""DeepSpeed's ZeRO-3 engine around the transformers model, from the config `vram plan` emitted.

Run by test_deepspeed.py in its own process (one rank, gloo, DeepSpeed's CPU accelerator):
argv[1] the emitted JSON's path, argv[2] the model's config.json. Two changes for a machine
without a GPU: bf16 off (the CPU path runs fp32) and no optimizer offload (its CPU Adam is a
compiled op); and DeepSpeed's shared-memory all-reduce, an optimisation its CPU backend compiles
with ninja on first use, is left out (gloo does the collectives). Prints
`PARAMS engine=N model=M stage=S`: N counts each parameter's full size (`ds_numel`, ZeRO-3's
partitioned parameters report their local shard as numel), M the model's before wrapping.
"""

import importlib
import json
import os
import sys

import torch
import transformers

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402

importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def main() -> None:
    ds = json.loads(open(sys.argv[1]).read())
    ds["bf16"]["enabled"] = False
    ds["zero_optimization"].pop("offload_optimizer", None)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(sys.argv[2]))
    before = sum(p.numel() for p in model.parameters())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
    n = sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters())
    print(f"PARAMS engine={n} model={before} stage={engine.zero_optimization_stage()}", flush=True)


if __name__ == "__main__":
    main()
