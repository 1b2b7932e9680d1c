#!/usr/bin/env bash
# One device call for a session that is lent a GPU (15 device-minutes in all, starts included):
# the three prepared runs, in the order of what each result settles, under one budget.
#
#   1. gpu/first_kernel.py   (issue 35: the first kernel's driver memory, SGLang's TP-1 window)  ~10 s
#  1b. gpu/graph_cost.py     (issue 35: a graph's driver memory per node and per graph, a small cudaMalloc's) ~10 s
#   2. gpu/run.sh device env check plugin   (issue 34: the plug-in's cap on the CUDA backend)     ~60 s
#   3. gpu/measure3.py host-costs + Llama-3.1-8B decode profiles at batch 1 and 16 (issue 33)    ~70 s
#   4. gpu/run.sh device hostadam ab capped (issue 34: the 1 % A/B, the planned host tier)     ~370 s
#   5. gpu/measure3.py: the other speed cases, then the memory grid, until the budget ends
#   6. gpu/run.sh device record (issue 34: real traces for vram-tier-sim), if time is left
#
# Issue 34's stages run on the device's own transformers (as its 2026-11-27 run did); measure3
# runs on the versions of the H200 ground truth (transformers 5.24.0, PEFT 0.21.2, bitsandbytes
# 0.50.2 with its CUDA 13 library alone, TRL 1.16.0, datasets 5.2.0), carried as wheels in .whl/.
#
# Here, first:  gpu/run.sh build; fetch the wheels into .whl/ (gpu/README.md, "drawn.sh").
# Run tool:     run(command="bash gpu/drawn.sh", carry=["gpu/dist", ".whl"], kind="nvidia-h200",
#                   timeout_s=598)
# The run tool returns at most 8 files: everything is packed into $OUT/results.tar.gz after each
# stage (so a call cut short still returns what ran), snapshots into $OUT/snaps.tar.gz[.partN],
# and the whole log is $OUT/log.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
FINAL=${OUT:-$ROOT/gpu/results-drawn}
WORK=${DRAWN_WORK:-/tmp/drawn}
BUDGET=${DRAWN_BUDGET_S:-570}
PY=${PYTHON:-python3}
mkdir -p "$FINAL" "$WORK/r34" "$WORK/r33"
exec > >(tee -a "$FINAL/log.txt") 2>&1
T0=$(date +%s)
used() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(used) )); }
pack() {
    tar -C "$WORK" --exclude=snaps -czf "$FINAL/results.tar.gz.tmp" . \
        && mv "$FINAL/results.tar.gz.tmp" "$FINAL/results.tar.gz"
    echo "== packed at $(used) s"
}
export PYTHONUNBUFFERED=1

echo "== drawn.sh at $(date -u +%FT%TZ), budget ${BUDGET} s"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true

echo "== 1 first_kernel (at $(used) s)"
OUT=$WORK timeout 60 "$PY" gpu/first_kernel.py || echo "== first_kernel failed ($?)"
pack

echo "== 1b graph_cost (at $(used) s)"
OUT=$WORK timeout 60 "$PY" gpu/graph_cost.py || echo "== graph_cost failed ($?)"
pack

echo "== 2 run.sh env check plugin (at $(used) s)"
OUT=$WORK/r34 PREPARED_BUDGET_S=100 timeout 150 bash gpu/run.sh device "env check plugin" \
    || echo "== run.sh (2) failed ($?)"
pack

echo "== wheels (at $(used) s)"
SITE=/tmp/site
if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl; then
    M3PATH=$SITE
else
    echo "== wheels failed: measure3 runs on the device's own packages"
    M3PATH=
fi

m3() { # BUDGET_S SELECTION: measure3 on the carried versions, results appended to r33/
    local b=$1 sel=$2
    if [ "$b" -lt 20 ]; then echo "== measure3 $sel skipped: $b s left"; return; fi
    echo "== measure3 ${sel:0:80} (at $(used) s, budget $b s)"
    OUT=$WORK/r33 BUDGET_S=$b PYTHONPATH=$M3PATH timeout $(( b + 40 )) \
        "$PY" gpu/measure3.py gpu/measure3_cases.json "$sel" || echo "== measure3 failed ($?)"
    pack
}

echo "== 3 measure3 Llama profiles"
m3 90 host-costs,speed-llama31-8b-b1-profile,speed-llama31-8b-b16-profile

echo "== 4 run.sh hostadam ab capped (at $(used) s)"
# Leave 40 s for step 5.
b4=$(( $(left) - 40 ))
OUT=$WORK/r34 PREPARED_BUDGET_S=$b4 timeout $(( b4 + 30 )) bash gpu/run.sh device "hostadam ab capped" \
    || echo "== run.sh (4) failed ($?)"
pack

echo "== 5 measure3 the rest"
# host-costs again first: the 2026-11-28 run's MoE and gpt-oss decodes (this part) were 1.7-2.1x
# Llama's host time per kernel (part 3); this part's own per-operator costs tell the host's state
# from the operators' cost.
m3 $(( $(left) - 10 )) host-costs,speed-qwen3-30b-a3b-b1,speed-qwen3-30b-a3b-b16,speed-gpt-oss-20b-eager-b1,speed-gpt-oss-20b-eager-b16,qlora-llama32-1b-mb4-s2048,qlora-llama32-1b-mb4-s2048-prepare,gptoss-L4-infer-b4-p4080-eager,qwen3moe-L4-infer-b4-p4080,qwen3-8b-L4-infer-b8-p4080-fp32build,qwen35-L4-infer-b4-p4080-torch,nemotronh-L8-infer-b4-p4080-torch,qwen3moe-L4-bf16amp-mb2-s2048-rc,qwen35-L4-bf16-mb1-s2048-profile,gptoss-L4-bf16-mb1-s2048-eager-profile,dsv3-L2e64-bf16-mb1-s2048-profile,gptoss-L4-infer-b1-p4080-eager

if [ "$(left)" -gt 75 ]; then
    echo "== 6 run.sh record (at $(used) s)"
    OUT=$WORK/r34 PREPARED_BUDGET_S=$(( $(left) - 5 )) timeout $(( $(left) )) bash gpu/run.sh device record \
        || echo "== run.sh (6) failed ($?)"
    pack
fi

if [ -d "$WORK/r33/snaps" ]; then
    tar -C "$WORK/r33" -czf "$WORK/snaps.tar.gz" snaps
    if [ "$(stat -c %s "$WORK/snaps.tar.gz")" -gt 15000000 ]; then
        split -b 15000000 -d -a 1 "$WORK/snaps.tar.gz" "$FINAL/snaps.tar.gz.part"
    else
        mv "$WORK/snaps.tar.gz" "$FINAL/"
    fi
fi
echo "== drawn.sh done in $(used) s"
sleep 1
