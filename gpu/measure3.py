"""Issue 33's prepared GPU run: the kinds the H200 run of 2026-11-27 left open, in one process.

Derived from `measure2.py` of vramkit's shared ground truth (`h200-2026/measure2.py`, the loop that
took the H200 figures of 2026-11-27): the same build (`from_config` on the GPU, random weights),
the same steps (one warm-up, peak reset, measured steps) and the same record per case, extended
with:
  - `host`: the machine's host costs the `generate` time model needs (vram-plan's
    `generate::PY_CALL_S` and `EagerCalibration::launch_s`): a Python loop of tiny CUDA ops, of
    view ops, of empty Python calls and of `nn.Module` calls;
  - `speed` with `profile`: decode and prefill speed (as measure2), then `torch.profiler` over
    four decode steps (kernels per step, the top kernels by GPU time, the SDPA backend taken, host
    syncs), so that Llama's batch-16 decode (36.6 ms measured against 24.3 at batch 1) can be
    attributed; full-size MoE (Qwen3-30B-A3B) and gpt-oss-20b (eager, sinks) at batch 1 and 16;
  - `lora` with `prepare_kbit` (QLoRA through `prepare_model_for_kbit_training`), and snapshots;
  - `infer` with `build: fp32` (weights built in fp32, then cast), Gated DeltaNet and Mamba2
    `generate` with and without their kernel packages (`requires`), snapshots of eager sinks,
    MoE and Gated DeltaNet `generate`;
  - `train` with `requires` (Gated DeltaNet with flash-linear-attention) and `profile`.
Every case names the optional packages it needs; a missing one skips the case and says so (the
machine may have no network: bring wheels, see gpu/README.md). `DRY=1` rehearses every call on
the CPU at shrunken widths (it checks the calls, not the figures).

usage: python3 gpu/measure3.py gpu/measure3_cases.json [ids-or-kinds]
       (env: OUT, RESULTS, BUDGET_S (default 540), DEVICE, STEPS, DRY)
"""
import gc, importlib, json, os, sys, time, traceback

import torch

OUT = os.environ.get("OUT", "out")
RESULTS = os.path.join(OUT, os.environ.get("RESULTS", "results3.jsonl"))
DEV = os.environ.get("DEVICE", "cuda")
CUDA = DEV == "cuda"
T0 = time.time()
T_END = T0 + float(os.environ.get("BUDGET_S", "540"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = int(os.environ.get("STEPS", "2"))
DRY = os.environ.get("DRY") == "1"
os.makedirs(OUT, exist_ok=True)

# Optional packages: import name -> pip name. Checked once; a case lists what it `requires`.
OPTIONAL = {"peft": "peft==0.21.2", "bitsandbytes": "bitsandbytes==0.50.2", "trl": "trl==1.16.0",
            "datasets": "datasets", "fla": "flash-linear-attention",
            "causal_conv1d": "causal-conv1d", "mamba_ssm": "mamba-ssm"}
HAVE = {}
for mod in OPTIONAL:
    try:
        m = importlib.import_module(mod)
        HAVE[mod] = getattr(m, "__version__", "present")
    except Exception as e:  # ImportError, or a wheel built for another CUDA
        HAVE[mod] = None


def sync():
    if CUDA:
        torch.cuda.synchronize()


def reset():
    if CUDA:
        torch.cuda.reset_peak_memory_stats()


def peaks():
    if not CUDA:
        return 0, 0
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


SHRINK = dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, vocab_size=512, num_experts=8, n_routed_experts=8,
              num_local_experts=8, num_experts_per_tok=2, experts_per_token=2, n_group=2, topk_group=1,
              kv_lora_rank=32, q_lora_rank=64, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
              linear_value_head_dim=16, shared_expert_intermediate_size=64, query_pre_attn_scalar=32,
              mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1)


def config(case):
    """The case's config.json (a path relative to the repository), layers cut to `layers` (with
    `layer_types` and `hybrid_override_pattern` cut alike), `quantization_config` dropped (random
    weights in bf16), as measure2's configs were made."""
    import transformers
    raw = json.load(open(os.path.join(ROOT, case["config"])))
    raw.pop("quantization_config", None)
    L = case.get("layers")
    if L:
        raw["num_hidden_layers"] = L
        if isinstance(raw.get("layer_types"), list):
            raw["layer_types"] = raw["layer_types"][:L]
        if isinstance(raw.get("hybrid_override_pattern"), str):
            raw["hybrid_override_pattern"] = raw["hybrid_override_pattern"][:L]
        if isinstance(raw.get("text_config"), dict):
            raw["text_config"]["num_hidden_layers"] = L
    if "text_config" in raw and raw.get("model_type") in ("qwen3_5", "qwen3_5_moe"):
        raw = {**raw["text_config"], "model_type": raw["model_type"] + "_text"}
    c = transformers.AutoConfig.for_model(**raw)
    if DRY:
        for k, v in SHRINK.items():
            if hasattr(c, k) and getattr(c, k) is not None and not (k == "head_dim" and hasattr(c, "kv_lora_rank")):
                setattr(c, k, v)
        if getattr(c, "pad_token_id", None) is not None:
            c.pad_token_id = 0
        if hasattr(c, "kv_lora_rank"):
            c.head_dim = c.qk_rope_head_dim
            c.num_key_value_heads = c.num_attention_heads
    return c


def build(case, dtype):
    import transformers
    with torch.device(DEV):
        return transformers.AutoModelForCausalLM.from_config(
            config(case), attn_implementation=case.get("attention", "sdpa"), dtype=dtype)


def ids(vocab, b, s):
    g = torch.Generator(device=DEV).manual_seed(0)
    # From 1: token 0 is the pad token generate is given, and a pad in the prompt changes the
    # attention mask generate builds (measure2 drew from 0).
    return torch.randint(1, vocab, (b, s), device=DEV, generator=g)


def host_case(case):
    """Per-call host costs on this machine, each the median of five timed loops."""
    import statistics
    n = 2000 if not DRY else 200
    a = torch.ones(16, device=DEV)
    lin = torch.nn.Linear(16, 16, device=DEV)
    x = torch.ones(1, 16, device=DEV)

    def f():
        return None

    def loop(fn):
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t) / n

    # The operators a MoE decode step adds (transformers 5.24's `batched_mm_experts_forward` and
    # router): an expert bank indexed by routed ids, a batched GEMV, top-k, an out-of-place op
    # (allocates through the caching allocator, unlike `add_`). The 2026-11-28 run found the MoE
    # and gpt-oss decodes 1.7-2.1x Llama's host time per kernel, which the counts do not give.
    bank = torch.ones(8, 16, 16, device=DEV)
    ids_ = torch.tensor([1, 3], device=DEV)
    v = torch.ones(2, 1, 16, device=DEV)
    out = {}
    for name, fn in (("tiny_kernel_s", lambda: a.add_(1)), ("view_s", lambda: a.view(4, 4)),
                     ("python_call_s", f), ("module_call_s", lambda: lin(x)),
                     ("functional_linear_s", lambda: torch.nn.functional.linear(x, lin.weight, lin.bias)),
                     ("out_of_place_s", lambda: a * a), ("index_bank_s", lambda: bank[ids_]),
                     ("bmm_s", lambda: torch.bmm(v, bank[:2])), ("topk_s", lambda: torch.topk(a, 2))):
        with torch.no_grad():
            out[name] = statistics.median(loop(fn) for _ in range(5))
    return None, None, [], out


def profile_decode(model, x, steps=4):
    """torch.profiler over `generate` of `steps` new tokens minus one: kernels, the top kernels
    by GPU time, the attention kernel, syncs."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    kw = dict(do_sample=False, pad_token_id=0)
    res = {}
    for n in (1, 1 + steps):
        with torch.no_grad(), profile(activities=acts) as prof:
            model.generate(x, max_new_tokens=n, min_new_tokens=n, **kw)
            sync()
        ev = prof.key_averages()
        res[n] = {e.key: (e.count, getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)),
                          e.cpu_time_total) for e in ev}
        # Rows that are device activities (kernels, memsets, copies). PyTorch 2.11's profiler
        # also credits device time to CUDA runtime rows and CUPTI's OVERHEAD records
        # ("Command Buffer Full") that alias an operator's correlation id (fixed after 2.11:
        # pytorch/pytorch#193924, #196282); the 2026-11-28 run counted those as kernels.
        res[n]["_device_keys"] = {e.key for e in ev
                                  if str(getattr(e, "device_type", "")).endswith(("CUDA", "PrivateUse1"))}
    a, b = res[1], res[1 + steps]
    device_keys = b.pop("_device_keys") | a.pop("_device_keys")
    diff = {k: (b[k][0] - a.get(k, (0, 0, 0))[0], b[k][1] - a.get(k, (0, 0, 0))[1],
                b[k][2] - a.get(k, (0, 0, 0))[2]) for k in b}
    kernels = {k: v for k, v in diff.items() if v[1] > 0 and k in device_keys}
    credited = {k: v for k, v in diff.items()
                if v[1] > 0 and k not in device_keys and not k.startswith("aten::")}
    top = sorted(diff.items(), key=lambda kv: -kv[1][1])[:30]
    attn = sorted(k for k in diff if any(w in k.lower() for w in ("flash", "cudnn", "fmha", "efficient", "sdpa", "attention")))
    return {"steps": steps,
            "kernel_launches_per_step": sum(v[0] for v in kernels.values()) / steps,
            "gpu_us_per_step": sum(v[1] for v in kernels.values()) / steps,
            "syncs_per_step": diff.get("aten::_local_scalar_dense", (0, 0, 0))[0] / steps,
            "host_rows_with_device_time": {k: [v[0] / steps, v[1] / steps] for k, v in credited.items()},
            "attention_ops": attn,
            "top_by_gpu_time": [[k, v[0] / steps, v[1] / steps, v[2] / steps] for k, v in top]}


def train_case(case):
    prec = case["precision"]
    model = build(case, torch.float32 if prec in ("bf16-amp", "fp32") else torch.bfloat16)
    model.train()
    if case.get("recompute") == "full":
        model.gradient_checkpointing_enable()
    amp = torch.bfloat16 if prec == "bf16-amp" else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = ids(model.config.vocab_size, case["mb"], case["seq"])

    def step():
        with torch.autocast(DEV, dtype=amp or torch.bfloat16, enabled=amp is not None):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    sync()
    reset()
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    extra = {"experts_implementation": getattr(model.config, "_experts_implementation", None)}
    if case.get("profile"):
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        with profile(activities=acts) as prof:
            step()
            sync()
        ev = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0))[:30]
        extra["profile_top"] = [[e.key, e.count, getattr(e, "device_time_total", 0), e.cpu_time_total] for e in ev]
    return model, opt, times, extra


def infer_case(case):
    if case.get("build") == "fp32":
        model = build(case, torch.float32).to(torch.bfloat16)
    else:
        model = build(case, torch.bfloat16)
    model.eval()
    new, prompt = case["new"], case["prompt"]
    x = ids(model.config.vocab_size, case["batch"], prompt)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.generate(x[:, : min(prompt, 32)], **kw)  # warm-up
        sync()
        reset()
        t = time.perf_counter()
        model.generate(x, **kw)
        sync()
    return model, None, [time.perf_counter() - t], {}


_speed_model = None


def speed_case(case):
    global _speed_model
    if _speed_model is None or _speed_model[0] != (case["config"], case.get("attention")):
        _speed_model = None
        gc.collect()
        torch.cuda.empty_cache() if CUDA else None
        _speed_model = ((case["config"], case.get("attention")), build(case, torch.bfloat16).eval())
    model = _speed_model[1]
    x = ids(model.config.vocab_size, case["batch"], case["prompt"])

    def gen(n):
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync()
        return time.perf_counter() - t

    new = 8 if DRY else 64
    gen(4)
    t1 = min(gen(1) for _ in range(2))
    reset()
    t64 = min(gen(new) for _ in range(2))
    extra = {"prefill_s": round(t1, 5), "generate64_s": round(t64, 5),
             "decode_ms_per_token": round((t64 - t1) / (new - 1) * 1000, 3),
             "experts_implementation": getattr(model.config, "_experts_implementation", None)}
    if case.get("profile"):
        extra["decode_profile"] = profile_decode(model, x)
    # measure2 drew its prompts from 0 with the same generator: a pad token (id 0) there gives
    # generate an attention mask with a zero, so every decode step builds a [b, 1, 1, T] mask
    # after a host sync and SDPA runs with it. Record whether the 2026-11-27 prompt had one, and
    # time that prompt's decode too, so Llama's batch-16 miss can be told apart from it.
    # (Recomputed on the CPU, tests/engines/measure2_prompt.py: it held none; this confirms it.)
    g0 = torch.Generator(device=DEV).manual_seed(0)
    x0 = torch.randint(0, model.config.vocab_size, (case["batch"], case["prompt"]), device=DEV, generator=g0)
    extra["measure2_prompt_pad_rows"] = int((x0 == 0).any(dim=-1).sum())
    if extra["measure2_prompt_pad_rows"] and not DRY:
        x = x0
        gen(4)
        p1 = min(gen(1) for _ in range(2))
        extra["measure2_prompt_decode_ms_per_token"] = round((min(gen(new) for _ in range(2)) - p1) / (new - 1) * 1000, 3)
    return model, None, [t64], extra


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<pad>": 1, "<eos>": 2, "a": 3}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")


def lora_case(case):
    """As measure2: TRL's SFTTrainer with its defaults, LoraConfig(r=16, all-linear); QLoRA's base
    loaded 4-bit through BitsAndBytesConfig; with `prepare_kbit`, PEFT's
    prepare_model_for_kbit_training first (its fp32 casts of the non-quantized parameters)."""
    import transformers
    from datasets import Dataset
    from peft import LoraConfig, prepare_model_for_kbit_training
    from trl import SFTConfig, SFTTrainer
    if case["method"] == "qlora":
        ck = f"/tmp/ckpt-{os.path.basename(case['config'])}-{'dry' if DRY else 'full'}"
        if not os.path.exists(os.path.join(ck, "config.json")):
            m = build(case, torch.bfloat16)
            m.save_pretrained(ck)
            del m
            gc.collect()
            if CUDA:
                torch.cuda.empty_cache()
        bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                              bnb_4bit_use_double_quant=case.get("double_quant", True),
                                              bnb_4bit_compute_dtype=torch.bfloat16)
        reset()
        model = transformers.AutoModelForCausalLM.from_pretrained(
            ck, quantization_config=bnb, dtype=torch.bfloat16, device_map={"": 0 if CUDA else "cpu"},
            attn_implementation=case.get("attention", "sdpa"))
        if case.get("prepare_kbit"):
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model = build(case, torch.bfloat16)
    seq, mb = case["seq"], case["mb"]
    data = ids(model.config.vocab_size, mb * 4, seq).cpu().tolist()
    ds = Dataset.from_dict({"input_ids": data})
    args = SFTConfig(output_dir="/tmp/sft-out", per_device_train_batch_size=mb, max_steps=1 + STEPS,
                     max_length=seq, bf16=True, learning_rate=1e-4, logging_strategy="no",
                     save_strategy="no", report_to=[], disable_tqdm=True, seed=0,
                     dataloader_num_workers=0, use_cpu=not CUDA)
    times = []

    class Peak(transformers.TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            sync()
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync()
            if state.global_step == 1:
                reset()
            else:
                times.append(time.perf_counter() - self.t)

    tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tiny_tokenizer(),
                    peft_config=LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM"),
                    callbacks=[Peak()])
    tr.train()
    sync()
    pm = tr.model
    extra = {"trainable": sum(p.numel() for p in pm.parameters() if p.requires_grad),
             "adapter_dtypes": sorted({str(p.dtype) for p in pm.parameters() if p.requires_grad}),
             "frozen_dtypes": sorted({str(p.dtype) for p in pm.parameters() if not p.requires_grad}),
             "optim": str(args.optim), "gradient_checkpointing": args.gradient_checkpointing}
    return tr, None, times, extra


def run(case):
    global _speed_model
    if case["kind"] != "speed" and _speed_model is not None:
        # The speed cases keep their model for the next case of the same model; anything else
        # must start from an empty device. (The 2026-11-28 run lacked this: every case after the
        # gpt-oss speed cases ran beside gpt-oss-20b's 41.9 GB of weights; see
        # gpu/results3/README.md.)
        _speed_model = None
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()
    reset()
    snap = case.get("snap") and CUDA
    if snap:
        torch.cuda.memory._record_memory_history(max_entries=300000, context=None, stacks="python")
    rec = {"id": case["id"], "vram_args": case.get("vram_args"),
           "base_allocated_bytes": torch.cuda.memory_allocated() if CUDA else 0,
           "base_reserved_bytes": torch.cuda.memory_reserved() if CUDA else 0}
    t0 = time.time()
    try:
        fn = {"host": host_case, "train": train_case, "infer": infer_case, "speed": speed_case,
              "lora": lora_case}[case["kind"]]
        model, opt, times, extra = fn(case)
        alloc, res = peaks()
        if case["kind"] != "host":
            rec.update(measured_max_allocated_bytes=alloc, measured_max_reserved_bytes=res)
        rec.update(step_s=round(sum(times) / max(1, len(times)), 4) if times else None, **extra)
        if model is not None and case["kind"] != "lora":
            rec["params"] = sum(p.numel() for p in model.parameters())
        if CUDA:
            free, total = torch.cuda.mem_get_info()
            rec["device_used_bytes"] = total - free
            rec["reserved_now_bytes"] = torch.cuda.memory_reserved()
        if snap:
            os.makedirs(os.path.join(OUT, "snaps"), exist_ok=True)
            torch.cuda.memory._dump_snapshot(os.path.join(OUT, "snaps", f"{case['id']}.pickle"))
        del model, opt
    except torch.OutOfMemoryError as e:
        rec["oom"] = str(e).splitlines()[0][:300]
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:600]
        traceback.print_exc()
    finally:
        if snap:
            torch.cuda.memory._record_memory_history(enabled=None)
    rec["wall_s"] = round(time.time() - t0, 1)
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()
    return rec


def main():
    cases = json.load(open(sys.argv[1]))
    if DRY:
        for c in cases:
            for k, v in (("seq", 64), ("prompt", 48), ("mb", 1), ("batch", 2)):
                if k in c:
                    c[k] = v
            if "config" in c:
                c["layers"] = 4 if "nemotron" not in c["config"] else 8
    if len(sys.argv) > 2:
        keep = set(sys.argv[2].split(","))
        cases = [c for c in cases if c["id"] in keep or c["kind"] in keep]
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"),
           "optional": HAVE}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except Exception as e:
        env["import_error"] = repr(e)[:300]
    if CUDA:
        env.update(gpu=torch.cuda.get_device_name(0))
        a = torch.randn(256, 256, device="cuda")
        (a @ a).sum().item()
        del a
        free, total = torch.cuda.mem_get_info()
        env["context_used_bytes"] = total - free
        env["reserved_bytes_at_context"] = torch.cuda.memory_reserved()
        env["total_bytes"] = total
    missing = sorted({r for c in cases for r in c.get("requires", []) if not HAVE.get(r)})
    if missing:
        env["missing"] = missing
        env["bring_wheels"] = ("on a machine with network: pip download --no-deps -d wheels "
                               + " ".join(OPTIONAL[m] for m in missing)
                               + "; carry wheels/ and run: pip install --no-index --find-links wheels "
                               + " ".join(OPTIONAL[m] for m in missing))
    print(json.dumps({"env": env}), flush=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps({"id": "_env", **env}) + "\n")
    for c in cases:
        need = [r for r in c.get("requires", []) if not HAVE.get(r)]
        if need:
            rec = {"id": c["id"], "skipped": "missing " + ", ".join(need)}
        elif time.time() + c.get("cost_s", 10) > T_END:
            rec = {"id": c["id"], "skipped": "budget"}
        else:
            rec = run(c)
        rec["t_since_start_s"] = round(time.time() - T0, 1)
        print(json.dumps(rec), flush=True)
        with open(RESULTS, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
