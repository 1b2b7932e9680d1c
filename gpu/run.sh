#!/usr/bin/env bash
# vramkit on a real GPU. Two halves:
#
#   gpu/run.sh build            # HERE (Rust toolchain): cargo build --release, copy the binary
#                               # and the .so into gpu/dist/ (ignored by git; carried to the device)
#   gpu/run.sh device [STAGE]   # ON THE DEVICE (CUDA, PyTorch, transformers; no Rust, no network)
#   gpu/run.sh sim              # HERE: the loops simulated (planned host tier, link model) into
#                               # gpu/results-sim/ in the same schema
#
# Stages (`device` alone runs `prepared`): env check plugin hostadam ab capped record summary
# latency loops resnet. `prepared` is the one-call run of issue 34 (about 7 minutes on an H200,
# see gpu/README.md): env check plugin hostadam ab capped record summary, each stage skipped
# when the call's budget (PREPARED_BUDGET_S, 560 s) would run out before it ends.
# Results are JSON files in $OUT (the run tool's output folder) or gpu/results/.
# See gpu/README.md for the exact run-tool call. This script claims no figure: it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIST=$ROOT/gpu/dist
RES=${OUT:-$ROOT/gpu/results}
PY=${PYTHON:-python3}

build() {
    cargo build --release -p vram-torch -p vram-cuda
    mkdir -p "$DIST"
    cp target/release/libvram_torch.so target/release/vram-cuda-check "$DIST"/
    # The release profile keeps line tables (debug = 1); drop them to keep the carry small.
    if command -v strip >/dev/null; then strip --strip-debug "$DIST"/libvram_torch.so "$DIST"/vram-cuda-check; fi
    ls -l "$DIST"
}

stage_env() {
    { nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader || true; } \
        > "$RES/nvidia-smi.txt"
    { ldd --version 2>&1 | head -1; } > "$RES/ldd.txt" || true
    "$PY" - "$RES/env.json" <<'PYEOF'
import json, platform, subprocess, sys
info = {"python": platform.python_version(), "platform": platform.platform()}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda,
                gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                total_memory=torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None)
except Exception as e:  # report, do not fail the run
    info["torch_error"] = repr(e)
try:
    import transformers
    info["transformers"] = transformers.__version__
except Exception as e:
    info["transformers_error"] = repr(e)
try:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.strip()
    info["nvidia_smi"] = out
except Exception as e:
    info["nvidia_smi_error"] = repr(e)
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(json.dumps(info, indent=1))
PYEOF
}

stage_check() {
    # The allocator's device tests (vram_cuda::conformance) on the real GPU.
    "$DIST"/vram-cuda-check --json --bench 20000 > "$RES/check.json"
    cat "$RES/check.json"
}

stage_plugin() {
    # The plug-in's own test (cargo test runs it on the simulated device and a fake driver
    # with the same environment) on the real GPU: stats, summary, snapshot, spill to pinned
    # host memory under a 64 MiB cap, migration, OOM -> null. The script sets its own caps.
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python VRAM_BACKEND=cuda \
        timeout 120 "$PY" python/tests/test_vramkit_torch.py | tee "$RES/plugin.txt"
}

stage_hostadam() {
    # The device host's AdamW rate (torch.optim.AdamW(fused=True) on CPU tensors), which the
    # planner weighs against the link (HostCpu in vram_tier::plan; 0.78e9 params/s measured
    # on the project's VM).
    timeout 120 "$PY" - "$RES/hostadam.json" <<'PYEOF'
import json, os, sys, time, torch
n = 50_000_000
out = {"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "params": n}
for fused in (True, False):
    p = torch.nn.Parameter(torch.randn(n)); p.grad = torch.randn(n)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=fused, foreach=None if fused else True)
    opt.step()
    t = time.perf_counter()
    for _ in range(3):
        opt.step()
    out[f"fused_{fused}_params_per_s"] = 3 * n / (time.perf_counter() - t)
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out))
PYEOF
}

stage_ab() {
    # The 1 % comparison: Llama (the 8 % of 2026-11-27) under native and vramkit, interleaved
    # pairs in alternating order, with a confidence interval; vramkit's timers per step.
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python \
        "$PY" gpu/ab.py --model llama --arms "${AB_ARMS:-native,vramkit}" --pairs "${AB_PAIRS:-3}" \
        --steps 15 --warmup 4 --budget-s "${AB_BUDGET_S:-240}" --out "$RES/ab_llama.json"
}

stage_record() {
    # Real traces of both loops for vram-tier-sim (native allocator, two steps after a warm-up).
    for m in gpt2 llama; do
        train "record_${m}" "$m" native --steps 3 --warmup 1 --record-trace "$RES"
    done
}

stage_latency() {
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python \
        timeout 300 "$PY" gpu/latency.py --out "$RES/latency.json"
}

steps_for() { # the steps and warm-up steps of each loop
    case $1 in
        gpt2) echo "--steps 25 --warmup 5" ;;
        llama) echo "--steps 12 --warmup 3" ;;
        resnet50) echo "--steps 20 --warmup 5" ;;
    esac
}

train() { # FILE MODEL ALLOCATOR [extra args...]; env passes VRAM_* settings
    local file=$1 model=$2 alloc=$3; shift 3
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python \
        timeout "${TRAIN_TIMEOUT:-240}" "$PY" gpu/train.py --model "$model" --allocator "$alloc" "$@" \
        --out "$RES/$file.json" \
        || echo "{\"file\": \"$file\", \"crashed\": true}" > "$RES/$file.json.crash"
}

prior() { # FILE KEY: a figure from this call's results, else from gpu/results/ (a first call's)
    "$PY" - "$RES/$1.json" "$ROOT/gpu/results/$1.json" "$2" <<'PYEOF'
import json, os, sys
for path in sys.argv[1:3]:
    if os.path.exists(path):
        v = json.load(open(path)).get(sys.argv[3])
        if v is not None:
            print(v)
            break
PYEOF
}

stage_loops() {
    # Three loops (GPT-2 small; a 1.1 B Llama-style model at 2 x 2048; ResNet-50 at batch 128),
    # each under PyTorch's allocator, PyTorch's expandable segments, and vramkit (its default
    # policy, no cap, no host tier). One process per run.
    for m in gpt2 llama resnet50; do
        for al in native native_expandable vramkit; do
            # shellcheck disable=SC2046
            VRAM_DEVICE_LIMIT= VRAM_HOST_LIMIT=0 train "train_${m}_${al}" "$m" "$al" $(steps_for "$m")
        done
    done
}

capped_one() { # MODEL: native uncapped peak (reused from the loops stage when present), the cap,
    # then native capped (expected to run out of memory) and vramkit capped with a host tier.
    local m=$1 peak states cap
    peak=$(prior "train_${m}_native" peak_reserved_bytes)
    states=$(prior "train_${m}_native" optimizer_state_bytes)
    if [ -z "$peak" ] || [ -z "$states" ]; then
        train "capped_${m}_native_uncapped" "$m" native --steps 8 --warmup 2
        peak=$(prior "capped_${m}_native_uncapped" peak_reserved_bytes)
        states=$(prior "capped_${m}_native_uncapped" optimizer_state_bytes)
    fi
    if [ -z "$peak" ]; then echo "no native peak for $m: skipping its capped runs"; return; fi
    if [ "$m" = gpt2 ]; then
        cap=$(( peak * 7 / 10 ))       # 70 % of the native peak reserved
    else
        # Weights, gradients and activations fit; the AdamW states (2 x fp32 parameters) do not:
        # the cap leaves out LLAMA_STATES_OUT (default 1.0) of the states' bytes.
        cap=$("$PY" -c "print(int($peak - ${LLAMA_STATES_OUT:-1.0} * $states))")
    fi
    echo "$m: native peak reserved $peak B, optimizer states $states B, cap $cap B"
    # The native capped run ran out of memory on 2026-11-27 (gpu/results/); run it again only
    # when that result is absent (CAPPED_NATIVE=1 forces it).
    if [ "${CAPPED_NATIVE:-0}" = 1 ] || [ -z "$(prior "capped_${m}_native" oom)" ]; then
        train "capped_${m}_native" "$m" native --limit-bytes "$cap" --steps 6 --warmup 2
    fi
    # The planned host tier is on (a cap is set): it records the second step and plans.
    VRAM_HOST_LIMIT=${VRAM_HOST_LIMIT_FOR_SPILL:-64GiB} \
        train "capped_${m}_vramkit" "$m" vramkit --limit-bytes "$cap" $(steps_for "$m")
}

stage_capped() {
    capped_one gpt2
    capped_one llama
}

stage_summary() {
    "$PY" gpu/summary.py "$RES" "$ROOT/gpu/results"
}

sim() {
    # HERE, no GPU: the two loops of `loops`/`capped` simulated (vram_tier::plan: the planned
    # host tier against a timing model of the link), written in the device run's schema to
    # gpu/results-sim/. The traces are vramkit's own model of each step (vram trace --events),
    # the phase times scaled to the H200's measured native steps (gpu/sim/calibration.json).
    local out=gpu/results-sim cal=gpu/sim/calibration.json
    cargo build -q -p vram-cli -p vram-tier --bins
    mkdir -p "$out"
    local bin=target/debug
    local gpu link cpu
    gpu=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['gpu'])" "$cal")
    link=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['link']['gb_s'])" "$cal")
    cpu=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['host_adamw_params_per_s']['value'])" "$cal")
    native() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['loops'][sys.argv[2]]['native_median_s'])" "$cal" "$1"; }
    "$bin/vram" trace gpt2 --micro-batch 8 --seq 1024 --steps 3 --gpu "$gpu" \
        --events "$out/trace_gpt2.json"
    "$bin/vram" trace gpu/sim/llama-1.1b.json --micro-batch 2 --seq 2048 --steps 3 --gpu "$gpu" \
        --events "$out/trace_llama.json"
    # The caps gpu/run.sh sets, on the simulated peaks: GPT-2 at 70 % of its native peak
    # reserved; the Llama model at its native peak less its AdamW states.
    "$bin/vram-tier-sim" --trace "$out/trace_gpt2.json" --model gpt2 --native-s "$(native gpt2)" \
        --cap-fraction 0.7 --link-gbps "$link" --cpu-adamw "$cpu" --out-dir "$out"
    "$bin/vram-tier-sim" --trace "$out/trace_llama.json" --model llama --native-s "$(native llama)" \
        --cap-states-out "${LLAMA_STATES_OUT:-1.0}" --link-gbps "$link" --cpu-adamw "$cpu" --out-dir "$out"
    "$PY" gpu/summary.py "$out"
    # The same two loops from the real traces the 2026-11-28 H200 run recorded (PyTorch's own
    # allocation history, phases timed there), into gpu/results-sim/real/.
    local real="$out/real" m t
    mkdir -p "$real"
    for m in gpt2 llama; do
        t=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['real_traces'][sys.argv[2]])" "$cal" "$m")
        [ -f "$t" ] || { echo "no real trace $t" >&2; continue; }
        if [ "$m" = gpt2 ]; then set -- --cap-fraction 0.7; else set -- --cap-states-out "${LLAMA_STATES_OUT:-1.0}"; fi
        "$bin/vram-tier-sim" --trace "$t" --model "$m" --native-s "$(native "$m")" "$@" \
            --link-gbps "$link" --cpu-adamw "$cpu" --out-dir "$real"
    done
    "$PY" gpu/summary.py "$real"
}

# Expected seconds of each stage on an H200 (from the 2026-11-27 run: 20-40 s a training
# process), for the budget of `prepared`.
expect() {
    case $1 in
        env) echo 10 ;; check) echo 40 ;; plugin) echo 10 ;; hostadam) echo 20 ;;
        ab) echo 240 ;; capped) echo 110 ;; record) echo 70 ;; summary) echo 5 ;;
        *) echo 120 ;;
    esac
}

case "${1:-}" in
    build) build ;;
    sim) sim ;;
    device)
        mkdir -p "$RES"
        test -x "$DIST/vram-cuda-check" || { echo "gpu/dist missing: run 'gpu/run.sh build' here and carry gpu/dist" >&2; exit 2; }
        stages=${2:-prepared}
        budget=${PREPARED_BUDGET_S:-560}
        [ "$stages" = prepared ] && stages="env check plugin hostadam ab capped record summary"
        [ "$stages" = all ] && stages="env check plugin hostadam latency loops ab capped record summary" && budget=1000000
        t0=$(date +%s)
        for s in $stages; do
            used=$(( $(date +%s) - t0 ))
            if [ "$s" != summary ] && [ $(( used + $(expect "$s") )) -gt "$budget" ]; then
                echo "== $s skipped: ${used} s used of ${budget}, it needs about $(expect "$s") s"
                continue
            fi
            echo "== $s (at ${used} s)"
            "stage_$s" || echo "== $s failed (exit $?)"
        done
        echo "== done in $(( $(date +%s) - t0 )) s"
        ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
esac
