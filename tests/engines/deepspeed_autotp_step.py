"""One training step of DeepSpeed's AutoTP around the transformers model, from the config `vram
plan --emit deepspeed` wrote for a tensor-parallel plan.

Run by test_deepspeed.py under `torch.distributed.run` (one process per rank, gloo, DeepSpeed's
CPU accelerator): argv[1] the emitted JSON's path, argv[2] the model's config.json, argv[3] the
sequence length. The changes for a machine without a GPU are deepspeed_count.py's (bf16 off,
no optimizer offload, no shared-memory all-reduce); the optimizer is the script's own
(`torch.optim.AdamW`, as a training script passes it). Every rank of the tensor-parallel group
is fed the same micro-batch, as AutoTP requires (it checks the first batch). Prints, per rank,
`AUTOTP rank=R tp=T dp=D q_out=N/M batch=B micro=U accum=A`: T and D DeepSpeed's own
tensor- and data-parallel sizes, N/M the first layer's q_proj rows on the rank and in the model,
B/U/A the batch DeepSpeed settled on.
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
    seq = int(sys.argv[3])
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.from_pretrained(sys.argv[2])
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    rows = model.model.layers[0].self_attn.q_proj.weight.shape[0]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    from deepspeed.utils import groups

    rank = int(os.environ.get("RANK", "0"))
    mb = engine.train_micro_batch_size_per_gpu()
    ids = torch.randint(0, cfg.vocab_size, (mb, seq), generator=torch.Generator().manual_seed(1))
    for _ in range(engine.gradient_accumulation_steps()):
        out = engine(input_ids=ids, labels=ids)
        engine.backward(out.loss)
        engine.step()
    q = engine.module.model.layers[0].self_attn.q_proj.weight.shape[0]
    print(
        f"AUTOTP rank={rank} tp={engine.autotp_size()} dp={groups._get_data_parallel_world_size()} "
        f"q_out={q}/{rows} batch={engine.train_batch_size()} micro={mb} "
        f"accum={engine.gradient_accumulation_steps()} loss={out.loss.item():.4f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
