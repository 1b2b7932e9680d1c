"""Interleaved A/B runs of one loop under two (or more) allocators: the 1 % comparison.

Each pair runs every arm once, one process each (an allocator is chosen before CUDA starts),
in alternating order (A B, then B A, ...), so that drift of the GPU's clocks and temperature over
the run falls on both arms alike. For each pair the ratio of each arm's median step to the first
arm's; over the pairs, the mean ratio with a 95 % confidence interval (Student's t on the
pairs' ratios: with few pairs it is wide, and says so). Also the per-step allocator timers of
vramkit's runs (gpu/train.py's `timers_per_step`).

  python3 gpu/ab.py --model llama --arms native,vramkit --pairs 3 --out RES/ab_llama.json

An arm is an allocator of gpu/train.py, optionally with settings: `vramkit:VRAM_TIMERS=0`,
`vramkit:VRAM_POLICY=pytorch-expandable`. --budget-s stops launching pairs when the next one
would end past the budget (each pair's duration is the last one's); what ran is reported.
Claims nothing: it measures.
"""
import argparse, json, math, os, statistics, subprocess, sys, tempfile, time

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--arms", default="native,vramkit")
p.add_argument("--pairs", type=int, default=3)
p.add_argument("--steps", type=int, default=15)
p.add_argument("--warmup", type=int, default=4)
p.add_argument("--budget-s", type=float, default=1e9)
p.add_argument("--out", required=True)
a = p.parse_args()

# Two-sided 95 % quantiles of Student's t for 1..10 degrees of freedom.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def parse_arm(spec):
    name, _, sets = spec.partition(":")
    env = dict(kv.split("=", 1) for kv in sets.split(",") if kv)
    return {"spec": spec, "allocator": name, "env": env}


arms = [parse_arm(s) for s in a.arms.split(";" if ";" in a.arms else ",")]
here = os.path.dirname(os.path.abspath(__file__))
start = time.time()
pairs, skipped = [], 0
last_pair_s = 0.0
for i in range(a.pairs):
    if time.time() - start + last_pair_s > a.budget_s:
        skipped = a.pairs - i
        break
    t0 = time.time()
    order = arms if i % 2 == 0 else arms[::-1]
    runs = {}
    for arm in order:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        env = dict(os.environ, VRAM_DEVICE_LIMIT="", VRAM_HOST_LIMIT="0", **arm["env"])
        cmd = [sys.executable, os.path.join(here, "train.py"), "--model", a.model, "--allocator",
               arm["allocator"], "--steps", str(a.steps), "--warmup", str(a.warmup), "--out", out]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=float(os.environ.get("TRAIN_TIMEOUT", "240")))
        try:
            res = json.load(open(out))
        except (OSError, ValueError):
            res = {"error": (r.stderr or r.stdout)[-2000:]}
        os.unlink(out)
        runs[arm["spec"]] = {k: res.get(k) for k in (
            "median_step_s", "mean_step_s", "step_s", "issue_s", "gpu_s", "peak_reserved_bytes",
            "timers_per_step", "driver_calls_per_step", "error")}
        print(f"pair {i} {arm['spec']}: median {res.get('median_step_s')}", flush=True)
    last_pair_s = time.time() - t0
    pairs.append({"order": [x["spec"] for x in order], "runs": runs})

base = arms[0]["spec"]
report = {"model": a.model, "arms": [x["spec"] for x in arms], "pairs": pairs,
          "pairs_skipped_for_budget": skipped, "steps": a.steps, "warmup": a.warmup,
          "comparisons": {}}
for arm in arms[1:]:
    s = arm["spec"]
    for stat in ("median_step_s", "mean_step_s"):
        ratios = [pr["runs"][s][stat] / pr["runs"][base][stat] for pr in pairs
                  if pr["runs"][s].get(stat) and pr["runs"][base].get(stat)]
        c = {"ratios": ratios}
        if ratios:
            m = statistics.mean(ratios)
            c["mean"] = m
            if len(ratios) > 1:
                half = T95[min(len(ratios) - 2, 9)] * statistics.stdev(ratios) / math.sqrt(len(ratios))
                c["ci95"] = [m - half, m + half]
                c["within_1_percent"] = m + half <= 1.01  # the whole interval at or below 1.01
        report["comparisons"][f"{s} / {base} ({stat})"] = c
json.dump(report, open(a.out, "w"), indent=1)
print(json.dumps(report["comparisons"], indent=1))
for s, r in (pairs[-1]["runs"].items() if pairs else ()):
    t = r.get("timers_per_step")
    if not t:
        continue
    busy = sum(v for k, v in t.items() if k.endswith(".ns")
               and k.startswith(("timer.ffi.", "timer.step.")))
    step = r.get("median_step_s") or 0
    print(f"{s}: the allocator's timers per measured step (last pair); the plug-in's calls took "
          f"{busy / 1e6:.3f} ms, {100 * busy / 1e9 / step if step else 0:.2f} % of the median step")
    for k in sorted(t):
        print(f"  {k:40s} {t[k]:14.1f}")
    print(f"  driver calls in each step: {r.get('driver_calls_per_step')}")
