"""One optimizer step of a tiny model through accelerate; run by `accelerate launch`.

Prints one line `STEP_OK <distributed_type> <num_processes> <mixed_precision> <loss>` per rank.
"""

import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    micro_batch = int(sys.argv[1])
    torch.manual_seed(0)
    acc = Accelerator()
    # A few layers, hidden 64 (the "tiny model").
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(8 * micro_batch, 64), torch.randn(8 * micro_batch, 1))
    loader = DataLoader(data, batch_size=micro_batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = next(iter(loader))
    with acc.accumulate(model):
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    changed = any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    print(
        f"STEP_OK {acc.distributed_type.value} {acc.num_processes} {acc.mixed_precision} {loss.item():.4f} changed={changed}",
        flush=True,
    )


if __name__ == "__main__":
    main()
