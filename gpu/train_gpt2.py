"""A GPT-2-small training loop (transformers, random weights and tokens, bf16 autocast,
AdamW) under PyTorch's native allocator or vramkit. Writes step times and peak memory as
JSON; an out-of-memory error is a result (``"oom": true``), not a crash.

  --allocator native   PyTorch's CUDACachingAllocator; --limit-bytes caps it with
                       torch.cuda.set_per_process_memory_fraction
  --allocator vramkit  vramkit_torch.install() before CUDA starts; VRAM_DEVICE_LIMIT and
                       VRAM_HOST_LIMIT come from the environment
"""
import argparse, json, statistics, sys, time, traceback

p = argparse.ArgumentParser()
p.add_argument("--allocator", choices=["native", "vramkit"], required=True)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--limit-bytes", type=int, default=0)
p.add_argument("--out", required=True)
a = p.parse_args()

res = {"allocator": a.allocator, "batch": a.batch, "seq": a.seq, "steps": a.steps, "warmup": a.warmup,
       "limit_bytes": a.limit_bytes, "oom": False, "finished": False, "step_s": []}

if a.allocator == "vramkit":
    import vramkit_torch
    vramkit_torch.install()
import torch
from transformers import GPT2Config, GPT2LMHeadModel

if a.limit_bytes and a.allocator == "native":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.limit_bytes / total))

try:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()  # GPT-2 small: 12 layers, 768 wide, 124 M parameters
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device="cuda")
    for i in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        res["step_s"].append(time.perf_counter() - t)
        res["last_loss"] = float(loss)
        print(f"step {i} {res['step_s'][-1]*1e3:.1f} ms loss {res['last_loss']:.3f}", flush=True)
    res["finished"] = True
except torch.cuda.OutOfMemoryError as e:
    res["oom"] = True
    res["error"] = str(e).splitlines()[0]
    res["oom_at_step"] = len(res["step_s"])
except Exception as e:
    res["error"] = repr(e)
    res["traceback"] = traceback.format_exc()

meas = res["step_s"][a.warmup:]
if meas:
    res["median_step_s"] = statistics.median(meas)
    res["mean_step_s"] = statistics.mean(meas)
if a.allocator == "native":
    res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
else:
    s = vramkit_torch.memory_stats()
    res["peak_reserved_bytes"] = s["reserved_bytes.all.peak"]
    res["peak_allocated_bytes"] = s["allocated_bytes.all.peak"]
    res["vramkit"] = {k: s[k] for k in s if k.startswith(("host.", "managed.", "num_", "device_"))}
    res["summary"] = vramkit_torch.memory_summary()
json.dump(res, open(a.out, "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k not in ("step_s", "summary", "traceback")}, indent=1))
sys.exit(0 if res["finished"] or res["oom"] else 1)
