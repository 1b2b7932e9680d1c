"""One optimizer step of the tiny transformers model through accelerate; run by `accelerate launch`.

The model is transformers' LlamaForCausalLM built from the config in argv[2]
(tests/engines/data/tiny-llama.json, the config `vram plan` was given). Prints one line
`STEP_OK <distributed_type> <num_processes> <mixed_precision> <loss> changed=B params=N` per rank,
N the parameters of the model accelerate prepared.
"""

import sys

import torch
import transformers
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    micro_batch, config = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    acc = Accelerator()
    cfg = transformers.AutoConfig.from_pretrained(config)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randint(0, cfg.vocab_size, (8 * micro_batch, 64)))
    loader = DataLoader(data, batch_size=micro_batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    before = [p.detach().clone() for p in model.parameters()]
    (ids,) = next(iter(loader))
    with acc.accumulate(model):
        loss = model(input_ids=ids, labels=ids).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    changed = any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    params = sum(p.numel() for p in acc.unwrap_model(model).parameters())
    print(
        f"STEP_OK {acc.distributed_type.value} {acc.num_processes} {acc.mixed_precision} {loss.item():.4f} "
        f"changed={changed} params={params}",
        flush=True,
    )


if __name__ == "__main__":
    main()
