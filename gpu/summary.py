"""Reads the stage results and writes DIR/summary.json in the issue's schema:

  loops:   [{model, native_median_s, native_mean_s, vramkit_median_s, vramkit_mean_s,
             native_expandable_reserved_bytes, vramkit_reserved_bytes}]
  limited: [{model, cap_bytes, native_oom, vramkit_finished, slowdown, floor_slowdown,
             floor_method}]

`slowdown` is the capped vramkit run's median step over the uncapped native run's median step
(the same loop). `floor_slowdown` is the least slowdown the bytes that must cross the host link
allow (vram_tier::plan::floor; `floor_method` says how it was computed), from the capped run's
file when it has one (the simulation writes it; a device run gets it from `gpu/run.sh sim`'s
results, the same loop's model). Results are looked up in DIR, then in each further directory
given (a first device call's results copied into gpu/results/). A missing figure is null.
Everything else the runs measured (criteria, spills, migrations, the plan, timers, versions)
goes to DIR/details.json.

  python3 gpu/summary.py DIR [MORE_DIRS...]
"""
import json, os, sys

dirs = sys.argv[1:]
out = dirs[0]


def load(name):
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.exists(path):
            return json.load(open(path))
    return None


def get(r, k):
    return r.get(k) if r else None


MODELS = ["gpt2", "llama", "resnet50"]
loops, limited, details = [], [], {"env": load("env.json"), "loops": {}, "limited": {}}
def from_ab(m):
    """The interleaved A/B runs (gpu/ab.py) of a loop, as native and vramkit loop results:
    the mean of each arm's medians and means over the pairs."""
    ab = load(f"ab_{m}.json")
    if not ab or not ab.get("pairs"):
        return None, None, None
    out = []
    for arm in ("native", "vramkit"):
        runs = [pr["runs"].get(arm) for pr in ab["pairs"] if pr["runs"].get(arm)]
        runs = [r for r in runs if r.get("median_step_s")]
        if not runs:
            out.append(None)
            continue
        out.append({"median_step_s": sum(r["median_step_s"] for r in runs) / len(runs),
                    "mean_step_s": sum(r["mean_step_s"] for r in runs) / len(runs),
                    "peak_reserved_bytes": runs[-1].get("peak_reserved_bytes"),
                    "pairs": len(runs)})
    return out[0], out[1], ab


for m in MODELS:
    nat, exp, vk = (load(f"train_{m}_{al}.json") for al in ("native", "native_expandable", "vramkit"))
    ab_nat, ab_vk, ab = from_ab(m)
    if ab_nat and ab_vk:
        nat, vk = dict(nat or {}, **ab_nat), dict(vk or {}, **ab_vk)
    loops.append({
        "model": m,
        "native_median_s": get(nat, "median_step_s"),
        "native_mean_s": get(nat, "mean_step_s"),
        "vramkit_median_s": get(vk, "median_step_s"),
        "vramkit_mean_s": get(vk, "mean_step_s"),
        "native_expandable_reserved_bytes": get(exp, "peak_reserved_bytes"),
        "vramkit_reserved_bytes": get(vk, "peak_reserved_bytes"),
    })
    row = loops[-1]
    crit = {}
    if row["native_median_s"] and row["vramkit_median_s"]:
        crit["median_ratio"] = row["vramkit_median_s"] / row["native_median_s"]
        crit["mean_ratio"] = row["vramkit_mean_s"] / row["native_mean_s"]
        crit["within_1_percent"] = crit["median_ratio"] <= 1.01 and crit["mean_ratio"] <= 1.01
    if row["native_expandable_reserved_bytes"] and row["vramkit_reserved_bytes"]:
        crit["reserved_not_above_expandable"] = (
            row["vramkit_reserved_bytes"] <= row["native_expandable_reserved_bytes"])
    if ab:
        crit["ab"] = ab.get("comparisons")
        crit["ab_pairs"] = len(ab.get("pairs", []))
    details["loops"][m] = {"criteria": crit, "native_expandable_median_s": get(exp, "median_step_s"),
                           "native_reserved_bytes": get(nat, "peak_reserved_bytes"),
                           "vramkit_counters": get(vk, "vramkit"),
                           "errors": {al: get(r, "error") for al, r in
                                      (("native", nat), ("native_expandable", exp), ("vramkit", vk))
                                      if get(r, "error")}}

# Issue 34's targets: on a GPU GPT-2 at 70 % of its peak at most 3x, the states-out Llama at
# most 2x; in simulation 2x for both; each capped run within 1.25x of its floor.
simulated = bool(get(load("capped_gpt2_vramkit.json"), "source")) and "simulated" in str(
    get(load("capped_gpt2_vramkit.json"), "source"))
TARGET = {"gpt2": 2.0 if simulated else 3.0, "llama": 2.0}
PLAN_KEYS = ("strategy", "moves", "moved_bytes", "moved_bytes_by_kind", "host_chunks",
             "d2h_bytes_per_step", "h2d_bytes_per_step", "host_cpu_s", "stream_step_s",
             "host_update_step_s", "optimizer_chunks", "planned_cap_bytes", "peak_allocated_bytes",
             "peak_phase", "floor_step_s", "floor_phase", "floor_out_s", "floor_in_s",
             "floor_host_chunks")
for m in ("gpt2", "llama"):
    nat_cap, vk_cap, nat = (load(f"capped_{m}_{al}.json") for al in ("native", "vramkit", "native_uncapped"))
    nat = nat or load(f"train_{m}_native.json")
    slow = None
    if get(vk_cap, "median_step_s") and get(nat, "median_step_s"):
        slow = vk_cap["median_step_s"] / nat["median_step_s"]
    floor = get(vk_cap, "floor_slowdown")
    method = get(vk_cap, "floor_method")
    planned = get(vk_cap, "planned") or {}
    answer = planned.get("answer") or {}
    if floor is None and answer.get("floor"):
        # A device run: the floor of the step the planned tier recorded there. The floor is
        # the recorded step's compute plus the least delay the link forces; that delay goes on
        # the measured native step (the same loop uncapped), since the recorded compute is a
        # capped step's (the 2026-11-28 run divided the floor by the recorded step's own time,
        # 1.78 s for GPT-2's 0.066 s, and read 0.99).
        f = answer["floor"]
        delay = max(0.0, f["step_s"] - f["native_s"]) if f.get("native_s") else None
        native_s = get(nat, "median_step_s")
        if delay is not None and native_s:
            floor = (native_s + delay) / native_s
            method = (f"{f.get('method')}; the delay over the recorded step's compute "
                      f"({f['native_s']:.4f} s) added to the measured native step ({native_s:.4f} s)")
    limited.append({
        "model": m,
        "cap_bytes": get(vk_cap, "limit_bytes") or get(nat_cap, "limit_bytes"),
        "native_oom": get(nat_cap, "oom"),
        "vramkit_finished": get(vk_cap, "finished"),
        "slowdown": slow,
        "floor_slowdown": floor,
        "floor_method": method,
    })
    details["limited"][m] = {"target_slowdown": TARGET[m],
                             "met": None if slow is None else (slow <= TARGET[m] and bool(get(vk_cap, "finished"))),
                             "within_1_25_of_floor": None if slow is None or not floor else slow <= 1.25 * floor,
                             "slowdown_over_floor": None if slow is None or not floor else slow / floor,
                             "plan": {k: get(vk_cap, k) for k in PLAN_KEYS if get(vk_cap, k) is not None},
                             "planned_tier": planned or None,
                             "vramkit_counters": get(vk_cap, "vramkit"),
                             "vramkit_error": get(vk_cap, "error"),
                             "optimizer_state_bytes": get(nat, "optimizer_state_bytes")}
details["source"] = get(load("capped_gpt2_vramkit.json"), "source") or get(load("env.json"), "gpu")

s = {"loops": loops, "limited": limited}
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
json.dump(details, open(os.path.join(out, "details.json"), "w"), indent=1)
print(json.dumps(s, indent=1))
