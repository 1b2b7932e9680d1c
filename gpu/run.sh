#!/usr/bin/env bash
# vramkit on a real GPU. Two halves:
#
#   gpu/run.sh build            # HERE (Rust toolchain): cargo build --release, copy the binary
#                               # and the .so into gpu/dist/ (ignored by git; carried to the device)
#   gpu/run.sh device [STAGE]   # ON THE DEVICE (CUDA, PyTorch, transformers; no Rust, no network)
#
# Stages (default: all, in this order): env check plugin latency train limited summary.
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
    # The plug-in's own test (cargo test runs it on the simulated device and a fake driver)
    # on the real GPU: stats, summary, snapshot, spill to pinned host memory, OOM -> null.
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python VRAM_BACKEND=cuda \
        VRAM_DEVICE_LIMIT=64MiB VRAM_HOST_LIMIT=1GiB timeout 120 "$PY" python/tests/test_vramkit_torch.py \
        | tee "$RES/plugin.txt"
}

stage_latency() {
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python \
        timeout 300 "$PY" gpu/latency.py --out "$RES/latency.json"
}

train() { # NAME ALLOCATOR [extra args...]; env passes VRAM_* settings
    local name=$1; shift
    VRAMKIT_LIB=$DIST/libvram_torch.so PYTHONPATH=$ROOT/python \
        timeout 400 "$PY" gpu/train_gpt2.py --allocator "$@" --out "$RES/train_$name.json" \
        || echo "{\"name\": \"$name\", \"crashed\": true}" > "$RES/train_$name.json.crash"
}

stage_train() {
    train native native
    VRAM_DEVICE_LIMIT= VRAM_HOST_LIMIT=0 train vramkit vramkit
    # The same with PyTorch's expandable-segments placement (fewer unmaps, each of which
    # synchronizes): the comparison to look at if the vramkit policy misses the 3 %.
    VRAM_DEVICE_LIMIT= VRAM_HOST_LIMIT=0 VRAM_POLICY=pytorch-expandable train vramkit_pte vramkit
}

stage_limited() {
    # A device cap below what the loop needs: 70 % of the native run's peak reserved.
    local need limit
    need=$("$PY" -c "import json;print(json.load(open('$RES/train_native.json'))['peak_reserved_bytes'])")
    limit=$(( need * 7 / 10 ))
    echo "native peak reserved $need B; cap $limit B"
    train native_limited native --limit-bytes "$limit" --steps 6 --warmup 2
    VRAM_DEVICE_LIMIT=$limit VRAM_HOST_LIMIT=${VRAM_HOST_LIMIT_FOR_SPILL:-64GiB} \
        train vramkit_limited vramkit --limit-bytes "$limit" --steps 6 --warmup 2
}

stage_summary() {
    "$PY" gpu/summary.py "$RES"
}

case "${1:-}" in
    build) build ;;
    device)
        mkdir -p "$RES"
        test -x "$DIST/vram-cuda-check" || { echo "gpu/dist missing: run 'gpu/run.sh build' here and carry gpu/dist" >&2; exit 2; }
        stages=${2:-all}
        [ "$stages" = all ] && stages="env check plugin latency train limited summary"
        for s in $stages; do echo "== $s"; "stage_$s"; done
        ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
esac
