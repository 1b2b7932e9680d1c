"""One optimizer step of a tiny model sharded with the FSDP2 setup `vram plan --emit torchrun` prints.

Started by the emitted `torchrun` command (tests/engines/test_torchrun.py). The emitted snippet is
read from $VRAMKIT_FSDP2_SNIPPET and executed as written, with one change for a machine without
GPUs: its device mesh is made on "cpu" instead of "cuda" (gloo instead of NCCL), and
CPUOffloadPolicy does not pin host memory (pinning needs a CUDA driver).
The model is transformers' LlamaForCausalLM built from $VRAMKIT_CONFIG (tests/engines/data/
tiny-llama.json, the config `vram plan` was given). Prints
`STEP_OK rank=R world=W loss=L sharded=True changed=True params=N` per rank, N the parameters of
the sharded model (each DTensor's global size).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch-size", type=int, required=True)
    ap.add_argument("--grad-accum", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(os.environ["VRAMKIT_CONFIG"])
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    snippet = open(os.environ["VRAMKIT_FSDP2_SNIPPET"]).read().replace('"cuda"', '"cpu"')
    snippet = snippet.replace("CPUOffloadPolicy()", "CPUOffloadPolicy(pin_memory=False)")
    ns = {"model": model}
    exec(compile(snippet, "emitted-fsdp2-setup", "exec"), ns)
    model = ns["model"]
    sharded = all(isinstance(p, DTensor) for p in model.parameters())
    before = [p.detach().full_tensor().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(dist.get_rank())
    total = 0.0
    for _ in range(a.grad_accum):
        ids = torch.randint(0, 256, (a.micro_batch_size, a.seq_len), generator=g)
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten()) / a.grad_accum
        loss.backward()
        total += loss.item()
    opt.step()
    changed = any(not torch.equal(b, p.detach().full_tensor()) for b, p in zip(before, model.parameters()))
    print(f"STEP_OK rank={dist.get_rank()} world={dist.get_world_size()} loss={total:.4f} sharded={sharded} changed={changed} params={sum(p.numel() for p in model.parameters())}", flush=True)
    # Both ranks past every collective before either tears down; then leave without the
    # interpreter's teardown, where a gloo thread still joining aborted one rank after its
    # STEP_OK line on the 2-core CI machine ("terminate called without an active exception",
    # exit -6, once in five runs of .ci/run on 2026-11-27).
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
