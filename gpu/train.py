"""One training loop under one allocator; writes step times and memory as JSON. Out of
memory is a result (``"oom": true``), not a crash.

  --model gpt2      GPT-2 small (transformers GPT2Config(), 124 M parameters), batch 8 x 1024
  --model llama     a Llama-style model built from a config with random weights: TinyLlama-1.1B's
                    shape (22 layers, hidden 2048, MLP 5632, 32 heads, 4 KV heads, vocab 32000;
                    1.10 B parameters), batch 2 x 2048, SDPA attention
  --model resnet50  torchvision ResNet-50, batch 128, 224 x 224, 1000 classes
All: bf16 autocast, fp32 weights, torch.optim.AdamW (foreach), zero_grad(set_to_none=True).

  --allocator native             PyTorch's CUDACachingAllocator (--limit-bytes: capped with
                                 torch.cuda.set_per_process_memory_fraction)
  --allocator native_expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  --allocator vramkit            vramkit_torch.install() before CUDA starts (VRAM_* settings from
                                 the environment; --limit-bytes sets VRAM_DEVICE_LIMIT), and
                                 vramkit_torch.step() after each optimizer step
"""
import argparse, json, os, statistics, sys, time, traceback

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["gpt2", "llama", "resnet50"], required=True)
p.add_argument("--allocator", choices=["native", "native_expandable", "vramkit"], required=True)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--batch", type=int, default=0, help="0: the model's default")
p.add_argument("--seq", type=int, default=0, help="0: the model's default")
p.add_argument("--limit-bytes", type=int, default=0)
p.add_argument("--out", required=True)
a = p.parse_args()

DEFAULTS = {"gpt2": (8, 1024), "llama": (2, 2048), "resnet50": (128, 224)}
batch = a.batch or DEFAULTS[a.model][0]
seq = a.seq or DEFAULTS[a.model][1]
res = {"model": a.model, "allocator": a.allocator, "batch": batch, "seq": seq, "steps": a.steps,
       "warmup": a.warmup, "limit_bytes": a.limit_bytes, "oom": False, "finished": False, "step_s": []}

if a.allocator == "native_expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
vt = None
if a.allocator == "vramkit":
    if a.limit_bytes:
        os.environ["VRAM_DEVICE_LIMIT"] = str(a.limit_bytes)
    import vramkit_torch as vt
    vt.install()
import torch

if a.limit_bytes and a.allocator != "vramkit":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.limit_bytes / total))


def build():
    torch.manual_seed(0)
    if a.model == "resnet50":
        import torchvision
        m = torchvision.models.resnet50(num_classes=1000).cuda()
        x = torch.randn(batch, 3, seq, seq, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        return m, lambda: torch.nn.functional.cross_entropy(m(x), y)
    if a.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config()).cuda()
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                          num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                          max_position_embeddings=max(2048, seq), tie_word_embeddings=False)
        m = LlamaForCausalLM(cfg).cuda()
    ids = torch.randint(0, m.config.vocab_size, (batch, seq), device="cuda")
    return m, lambda: m(ids, labels=ids).loss


try:
    model, loss_fn = build()
    res["params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if vt is not None:
            vt.step()
        torch.cuda.synchronize()
        res["step_s"].append(time.perf_counter() - t)
        res["last_loss"] = float(loss)
        if i == 0:
            res["optimizer_state_bytes"] = sum(v.numel() * v.element_size() for s in opt.state.values()
                                               for v in s.values() if torch.is_tensor(v) and v.is_cuda)
        print(f"{a.model} {a.allocator} step {i} {res['step_s'][-1]*1e3:.1f} ms loss {res['last_loss']:.3f}",
              flush=True)
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
if vt is None:
    res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
else:
    s = vt.memory_stats()
    res["peak_reserved_bytes"] = s["reserved_bytes.all.peak"]
    res["peak_allocated_bytes"] = s["allocated_bytes.all.peak"]
    res["vramkit"] = {k: s[k] for k in s if k.startswith(("host.", "managed.", "num_", "device_"))}
    res["summary"] = vt.memory_summary()
json.dump(res, open(a.out, "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k not in ("step_s", "summary", "traceback")}, indent=1))
sys.exit(0 if res["finished"] or res["oom"] else 1)
