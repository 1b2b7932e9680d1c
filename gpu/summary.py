"""Reads the stage results in DIR and writes DIR/summary.json: the issue's criteria, each
with the figures it was decided on. Missing inputs are reported as missing."""
import json, os, sys

d = sys.argv[1]


def load(name):
    path = os.path.join(d, name)
    return json.load(open(path)) if os.path.exists(path) else None


env, check = load("env.json"), load("check.json")
nat, vk = load("train_native.json"), load("train_vramkit.json")
natl, vkl = load("train_native_limited.json"), load("train_vramkit_limited.json")
s = {"gpu": env and env.get("gpu"), "driver": env and env.get("nvidia_smi"), "torch": env and env.get("torch")}
if check:
    s["device_checks_passed"] = all(c["ok"] for c in check["checks"])
    s["device_checks"] = {c["name"]: c["ok"] for c in check["checks"]}
if nat and vk and nat.get("median_step_s") and vk.get("median_step_s"):
    ratio = vk["median_step_s"] / nat["median_step_s"]
    s["step_time"] = {"native_s": nat["median_step_s"], "vramkit_s": vk["median_step_s"], "ratio": ratio,
                      "within_3_percent": ratio <= 1.03}
    s["peak_reserved"] = {"native": nat["peak_reserved_bytes"], "vramkit": vk["peak_reserved_bytes"],
                          "vramkit_not_higher": vk["peak_reserved_bytes"] <= nat["peak_reserved_bytes"]}
pte = load("train_vramkit_pte.json")
if nat and pte and nat.get("median_step_s") and pte.get("median_step_s"):
    s["pytorch_expandable_policy"] = {"step_ratio": pte["median_step_s"] / nat["median_step_s"],
                                      "peak_reserved": pte["peak_reserved_bytes"]}
if natl and vkl:
    s["limited"] = {"cap_bytes": vkl.get("limit_bytes") or natl.get("limit_bytes"),
                    "native_oom": natl.get("oom"), "vramkit_finished": vkl.get("finished"),
                    "vramkit_host_peak_bytes": vkl.get("vramkit", {}).get("host.bytes.peak"),
                    "vramkit_spills": vkl.get("vramkit", {}).get("num_spills")}
    if vkl.get("median_step_s") and vk and vk.get("median_step_s"):
        s["limited"]["slowdown_vs_vramkit_unlimited"] = vkl["median_step_s"] / vk["median_step_s"]
json.dump(s, open(os.path.join(d, "summary.json"), "w"), indent=1)
print(json.dumps(s, indent=1))
