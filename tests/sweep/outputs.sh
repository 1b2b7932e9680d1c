#!/usr/bin/env bash
# A broad sweep of `vram`'s answers, for a change that must move no figure (a refactor): every
# zoo config, every default causal-LM config, the serving configs and every catalog id through
# estimate (training, recompute, TP/PP, ZeRO, inference, generate, LoRA, QLoRA; text and
# --json), capacity (vLLM and SGLang), plan (default and Megatron stacks, LoRA) and checkpoint.
# Each answer (exit code, stdout, stderr) goes to one file under the output folder; run it
# before and after the change and `diff -r` the two folders: a refactor leaves them equal.
# Never touches the network (HF_HUB_OFFLINE=1, a dead endpoint). Takes a few minutes on a
# debug build.
#
# Usage: cargo build -p vram-cli && bash tests/sweep/outputs.sh target/sweep/before
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VRAM=${VRAM:-$ROOT/target/debug/vram}
OUT=${1:?usage: outputs.sh OUTPUT_FOLDER}
rm -rf "$OUT"; mkdir -p "$OUT"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export HF_HUB_OFFLINE=1 HF_HOME=$T/hf HF_HUB_CACHE=$T/hf/hub VRAM_CACHE=$T/vc HF_ENDPOINT=http://127.0.0.1:9
unset RUST_BACKTRACE

# One answer: `run NAME ARGS...` writes NAME's exit code, stdout and stderr.
run() {
    local name=$1; shift
    "$VRAM" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
    echo "$?" > "$OUT/$name.rc"
}

# Every mixer's and feed-forward's linears by name (PEFT refuses all-linear and out_proj on Mamba mixers).
NAMED=in_proj,x_proj,dt_proj,q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,gate_proj,up_proj,down_proj

models=()
for f in "$ROOT"/tests/zoo/configs/*.json "$ROOT"/crates/vram-cli/tests/data/serving/configs/*.json; do
    models+=("$f")
done
while read -r id _; do models+=("$id"); done < <("$VRAM" models)

for m in "${models[@]}"; do
    n=$(basename "$m" .json)
    case $m in */serving/*) n=serving-$n ;; */zoo/*) n=zoo-$n ;; *) n=id-$n ;; esac
    run "$n.est" estimate "$m"
    run "$n.est-json" estimate "$m" --json
    run "$n.est-recompute" estimate "$m" --json --recompute full --micro-batch 4 --seq 4096
    run "$n.est-tp" estimate "$m" --json --tp 4 --pp 2 --sequence-parallel --zero 1 --dp 2
    run "$n.est-zero3" estimate "$m" --json --zero 3 --dp 8 --precision bf16
    run "$n.inf" estimate "$m" --json --inference --batch 4 --context 4096
    run "$n.gen" estimate "$m" --json --inference --prompt 1024 --new-tokens 256
    run "$n.lora" estimate "$m" --json --finetune lora
    run "$n.qlora" estimate "$m" --json --finetune qlora --seq 1024
    run "$n.lora-named" estimate "$m" --json --finetune lora --lora-targets "$NAMED"
    run "$n.cap-vllm" capacity "$m" --json
    run "$n.cap-vllm-tp" capacity "$m" --json --tensor-parallel-size 8 --gpu h200
    run "$n.cap-sglang" capacity "$m" --json --engine sglang
    run "$n.plan" plan "$m" --json --gpus 8 --global-batch 64 --seq 4096 --gpu h100-80g
    run "$n.plan-megatron" plan "$m" --json --gpus 16 --global-batch 128 --seq 4096 --gpu h100-80g --stack megatron
    run "$n.plan-lora" plan "$m" --json --gpus 1 --global-batch 8 --seq 2048 --gpu a100-40g --finetune lora
    run "$n.ckpt" checkpoint "$m" --json --gpu a100-40g --micro-batch 2 --seq 4096
done

for f in "$ROOT"/tests/zoo/causal_lm/*.json; do
    n=causal-$(basename "$f" .json)
    run "$n.est-json" estimate "$f" --json
    run "$n.gen" estimate "$f" --json --inference --prompt 512 --new-tokens 64
    run "$n.lora" estimate "$f" --json --finetune lora
    run "$n.lora-named" estimate "$f" --json --finetune lora --lora-targets "$NAMED"
    run "$n.cap-vllm" capacity "$f" --json
done
echo "$(ls "$OUT" | wc -l) files in $OUT"
