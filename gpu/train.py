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
  --allocator vramkit            vramkit.torch.install() before CUDA starts (VRAM_* settings from
                                 the environment; --limit-bytes sets VRAM_DEVICE_LIMIT, which turns
                                 on the planned host tier: its hooks record the second step and
                                 plan; VRAM_PLAN=0 leaves it off), and vramkit.torch.step() after
                                 each optimizer step (a no-op when the planned tier marked it)

Per step it records the wall time, the time the host took to issue the step (before the final
synchronize: close to the step time when the loop is CPU-bound), and for vramkit the allocator's
counters and timers at each step's end (`vramkit_steps`: driver calls, maps, and the timers'
totals), so a GPU run shows in which steps the device calls happen and what the allocator's
paths cost. --record-trace DIR (native only) records the allocator's history of two steps
(torch.cuda.memory._record_memory_history) with the phases' start times and each tensor's kind
(weights, gradients, optimizer states, saved activations) for vram-tier-sim.
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
p.add_argument("--record-trace", default="", help="native only: a folder for the recorded trace")
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
    import vramkit.torch as vt
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


TIMER_KEYS = ("timer.", "num_device_alloc", "num_device_free", "last_step.", "num_steps",
              "num_alloc_retries", "num_sync_all_streams", "num_migrations", "num_spills",
              "tier.plan.")


def counters():
    s = vt.memory_stats()
    return {k: v for k, v in s.items() if k.startswith(TIMER_KEYS)}


rec = None
if a.record_trace:
    import recording  # gpu/recording.py
    rec = recording.Recorder(a.record_trace)

try:
    model, loss_fn = build()
    res["params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    res["issue_s"], res["gpu_s"], res["vramkit_steps"] = [], [], []
    if rec is not None:
        rec.attach(model, opt)
    for i in range(a.steps):
        if rec is not None:
            rec.step_begins(i)
        torch.cuda.synchronize()
        t = time.perf_counter()
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        ev0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if vt is not None:
            vt.step()
        ev1.record()
        res["issue_s"].append(time.perf_counter() - t)
        torch.cuda.synchronize()
        res["step_s"].append(time.perf_counter() - t)
        res["gpu_s"].append(ev0.elapsed_time(ev1) / 1e3)
        if vt is not None:
            res["vramkit_steps"].append(counters())
        if rec is not None:
            rec.step_ends(i)
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
    res["vramkit"] = {k: s[k] for k in s if k.startswith(("host.", "managed.", "num_", "device_",
                                                         "timer.", "last_step.", "tier."))}
    res["summary"] = vt.memory_summary()
    pl = vt.planned()
    if pl is not None:
        res["planned"] = {"stats": pl.stats, "answer": pl.answer,
                          "plan_names": pl.plan["names"] if pl.plan else None}
        if pl.request_json:
            # The recorded step, for `vram-tier-sim --request` (replan it here, no GPU).
            with open(os.path.splitext(a.out)[0] + "_request.json", "w") as f:
                f.write(pl.request_json)
    # The allocator's time per measured step, from the timers' totals (see gpu/README.md).
    steps = res["vramkit_steps"]
    if len(steps) > a.warmup + 1:
        first, last = steps[a.warmup], steps[-1]
        n = len(steps) - 1 - a.warmup
        per = {}
        for k in last:
            if k.startswith("timer.") and (k.endswith(".count") or k.endswith(".ns")):
                d = (last[k] - first.get(k, 0)) / n
                if d:
                    per[k] = d
        res["timers_per_step"] = per
        res["driver_calls_per_step"] = [st.get("last_step.driver_calls") for st in steps]
if rec is not None:
    rec.finish(res)
json.dump(res, open(a.out, "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k not in ("step_s", "summary", "traceback",
                                                            "vramkit_steps", "issue_s", "gpu_s",
                                                            "planned")}, indent=1))
sys.exit(0 if res["finished"] or res["oom"] else 1)
