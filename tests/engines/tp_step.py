"""One optimizer step of a tiny model loaded sharded with the tensor-parallel setup that
`vram plan --emit torchrun` prints for tp > 1 (transformers 5.24's DistributedConfig).

Started by the emitted `torchrun` command (tests/engines/test_torchrun.py). The emitted setup is
read from $VRAMKIT_TP_SNIPPET and executed as written, with `model_id` the checkpoint the test
saved at $VRAMKIT_CHECKPOINT (transformers' LlamaForCausalLM of tests/engines/data/tiny-llama.json).
transformers builds the (pp, dp_replicate, fsdp, tp) mesh itself, on "cpu" (gloo) here. The
ranks of one tensor-parallel group take the same micro-batches, as the setup says. Prints
`STEP_OK rank=R world=W tp=T loss=L sharded=True changed=True params=N` per rank, N the
parameters of the sharded model (each DTensor's global size), T the model's tp mesh size.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def full(p):
    return p.full_tensor() if isinstance(p, DTensor) else p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch-size", type=int, required=True)
    ap.add_argument("--grad-accum", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    snippet = open(os.environ["VRAMKIT_TP_SNIPPET"]).read()
    ns = {"model_id": os.environ["VRAMKIT_CHECKPOINT"]}
    exec(compile(snippet, "emitted-tp-setup", "exec"), ns)
    model = ns["model"]
    dc = ns["dc"]
    sharded = any(isinstance(p, DTensor) for p in model.parameters())
    before = [full(p.detach()).clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # One stream of micro-batches per data-parallel group: the ranks of a tensor-parallel group
    # (consecutive ranks, tp the mesh's last dimension) draw the same ones.
    g = torch.Generator().manual_seed(dist.get_rank() // dc.tp_size)
    total = 0.0
    for _ in range(a.grad_accum):
        ids = torch.randint(0, 256, (a.micro_batch_size, a.seq_len), generator=g)
        logits = model(input_ids=ids).logits
        logits = full(logits)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten()) / a.grad_accum
        loss.backward()
        total += loss.item()
    opt.step()
    changed = any(not torch.equal(b, full(p.detach())) for b, p in zip(before, model.parameters()))
    n = sum(p.numel() for p in model.parameters())
    print(
        f"STEP_OK rank={dist.get_rank()} world={dist.get_world_size()} tp={model.config.distributed_config.tp_size} "
        f"loss={total:.4f} sharded={sharded} changed={changed} params={n}",
        flush=True,
    )
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
