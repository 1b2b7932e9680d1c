"""The 2026-11-28 H200 run's cases as vram's H200 test reads them
(`crates/vram-cli/tests/data/h200/measured3.json`), with gpt-oss-20b's leftover weights taken out.

Every case after `speed-gpt-oss-20b-eager-b16` ran beside that case's model (README.md). What the
leftover held, read from the cases' own snapshots (`snaps.tar.gz`: the segments no
`segment_alloc` event of the recording made, so alive before it began):
- allocated: gpt-oss-20b built in bf16, 20,914,757,184 parameters x 2 B plus 3,063,680 B of its
  buffers = 41,832,578,048 B. The rest of a case's `base_allocated_bytes` (32 or 64 MiB) is the
  cuBLAS workspaces, which a fresh process makes too and vram counts (`gpu::workspace_bytes`), so
  they stay in the case's figure;
- reserved: the first QLoRA case's 116 pre-existing segments, 42,031,120,384 B, less its 32 MiB
  workspace segment: 41,997,565,952 B. Later cases also find a 128 MiB segment that holds the
  second workspace and their own blocks; it is counted as theirs. The training cases without a
  snapshot had the same base (41,899,687,936 B allocated), so the same leftover is taken out.
A case's own figure is the measured one less these. The leftover's segments also had
165 MB free in 1.5 MiB tails that a case could reuse; a fresh start might reserve that much more.

Speed cases keep their figures (their memory is not compared: `generate`'s warm-ups ran before
the peak reset). gpt-oss's speed cases ran its bf16 `from_config` build (41.8 GB of weights, not
MXFP4): vram's `--dequantized` is added to their arguments.

Run from the repository root: python3 gpu/results3/own_figures.py
"""
import json

SRC = "gpu/results3/2026-11-28/results3.jsonl"
OUT = "crates/vram-cli/tests/data/h200/measured3.json"
LEFT_ALLOC = 20_914_757_184 * 2 + 3_063_680
LEFT_RESERVED = 42_031_120_384 - 32 * 2**20
PREFIX = "crates/vram-cli/tests/data/h200/"


def main():
    env, cases, leftover = None, [], False
    for line in open(SRC):
        r = json.loads(line)
        if r["id"] == "_env":
            env = env or {k: v for k, v in r.items() if k != "id"}
            continue
        if r["id"] == "host-costs" or not r.get("vram_args"):
            continue
        args = [a[len(PREFIX):] if a.startswith(PREFIX) else a for a in r["vram_args"]]
        c = {"id": r["id"], "vram_args": args, "source": SRC}
        if r["id"].startswith("speed-"):
            if "gpt-oss" in r["id"]:
                c["vram_args"] = args + ["--dequantized"]
            c.update(prefill_s=r["prefill_s"], decode_ms_per_token=r["decode_ms_per_token"],
                     setup={"kind": "speed"})
            leftover = leftover or r["id"] == "speed-gpt-oss-20b-eager-b16"
        else:
            assert leftover and r["base_allocated_bytes"] >= LEFT_ALLOC
            if r["id"].endswith("-prepare"):
                c["vram_args"] = args + ["--prepare-kbit"]
            kind = "infer" if "--inference" in args else "train"
            setup = {"kind": kind}
            if kind == "infer":
                setup["prompt"] = int(args[args.index("--prompt") + 1])
            c.update(measured_max_allocated_bytes=r["measured_max_allocated_bytes"] - LEFT_ALLOC,
                     measured_max_reserved_bytes=r["measured_max_reserved_bytes"] - LEFT_RESERVED,
                     raw_max_allocated_bytes=r["measured_max_allocated_bytes"],
                     raw_max_reserved_bytes=r["measured_max_reserved_bytes"],
                     step_s=r["step_s"], setup=setup)
        cases.append(c)
    json.dump({"env": env, "leftover_allocated_bytes": LEFT_ALLOC,
               "leftover_reserved_bytes": LEFT_RESERVED, "cases": cases},
              open(OUT, "w"), indent=1)
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
