#!/usr/bin/env bash
# A hostile user's sweep of the `vram` CLI: malformed and edge inputs for every subcommand
# (missing, empty, invalid and absurd configs; absurd flags; folders and unwritable paths;
# a Hub id offline with no cache; top/record/serve with no GPU). Each case's exit code and
# first stderr line go to target/sweep/results.tsv, flagged where it panicked, exited other
# than 0 or 2, gave a multi-line error, or printed what looks like NaN/inf or negative bytes
# (the flags are hints to read, not verdicts). Exit 0 is expected only where the answer is a
# valid one ("does NOT fit" is an answer). The bugs it found are tests in
# crates/vram-cli/tests (cli.rs, truthful.rs, monitor/); this script is for the next sweep.
# Never touches the network (HF_HUB_OFFLINE=1, an empty cache, a dead endpoint).
#
# Usage: cargo build -p vram-cli && bash tests/sweep/hostile.sh [name-filter]
# (as root, the unreadable-file cases read the file: run as another user to test them)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VRAM=${VRAM:-$ROOT/target/debug/vram}
HERE=$ROOT/target/sweep
mkdir -p "$HERE"
T=$HERE/tmp
rm -rf "$T"; mkdir -p "$T"
export HF_HUB_OFFLINE=1 HF_HOME=$T/hf HF_HUB_CACHE=$T/hf/hub VRAM_CACHE=$T/vc HF_ENDPOINT=http://127.0.0.1:9 MODELSCOPE_CACHE=$T/ms
unset RUST_BACKTRACE
OUT=$HERE/results.tsv
: > "$OUT"
FILTER=${1:-}

# fixtures
LLAMA='"model_type":"llama","vocab_size":32000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":8'
cfg() { mkdir -p "$T/$1"; printf '%s' "$2" > "$T/$1/config.json"; echo "$T/$1"; }
printf '' > "$T/empty.json"
printf '{"model_type":' > "$T/trunc.json"
mkdir -p "$T/adir"
printf '{%s}' "$LLAMA" > "$T/unreadable.json"; chmod 000 "$T/unreadable.json"
C_OK=$(cfg ok "{$LLAMA}")
C_H0=$(cfg h0 '{"model_type":"llama","vocab_size":32000,"hidden_size":0,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8}')
C_L1e9=$(cfg l1e9 '{"model_type":"llama","vocab_size":32000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":1000000000,"num_attention_heads":8}')
C_V0=$(cfg v0 '{"model_type":"llama","vocab_size":0,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8}')
C_HD=$(cfg hd '{"model_type":"llama","vocab_size":32000,"hidden_size":250,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8}')
C_I0=$(cfg i0 '{"model_type":"llama","vocab_size":32000,"hidden_size":256,"intermediate_size":0,"num_hidden_layers":2,"num_attention_heads":8}')
C_BIG=$(cfg big '{"model_type":"llama","vocab_size":1000000000,"hidden_size":65536,"intermediate_size":262144,"num_hidden_layers":4096,"num_attention_heads":512}')
C_HUGEV=$(cfg hugev '{"model_type":"llama","vocab_size":18446744073709551615,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8}')
C_MPE0=$(cfg mpe0 "{$LLAMA,\"max_position_embeddings\":0}")
C_HEAD0=$(cfg headdim0 "{$LLAMA,\"head_dim\":0}")
C_ROPE=$(cfg rope "{$LLAMA,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":-4}}")
C_QWEN_MOE=$(cfg qmoe '{"model_type":"qwen3_moe","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"moe_intermediate_size":0,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"num_experts":0,"num_experts_per_tok":2}')
C_DTYPE=$(cfg dtype "{$LLAMA,\"torch_dtype\":\"float128\"}")
C_NESTED=$(cfg nested '{"model_type":"llava","text_config":{"model_type":"llama","hidden_size":0}}')
C_SW=$(cfg sw '{"model_type":"mistral","vocab_size":32000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8,"sliding_window":0}')
C_GEMMA=$(cfg gemma3 '{"model_type":"gemma3_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,"sliding_window":-5}')
printf '%s' "$(python3 -c 'print("A"*5000)')" > "$T/longname.txt"
LONG=$(cat "$T/longname.txt")
printf '1 2 3\n' > "$T/len_ok.txt"; printf '' > "$T/len_empty.txt"; printf '0\n0\n' > "$T/len_zero.txt"
printf 'x\n-4\n' > "$T/len_bad.txt"; printf '1e12\n' > "$T/len_huge.txt"; printf '99999999999999\n' > "$T/len_huge2.txt"
printf '\x80\x02}q\x00.' > "$T/snap_empty.pickle"; printf 'garbage' > "$T/snap_garbage.pickle"
printf '{"gpus":[]}\n' > "$T/rec.jsonl"; printf 'not json\n' > "$T/rec_bad.jsonl"; printf '{}' > "$T/obj.json"
printf '{"peak_bytes":NaN}' > "$T/nan.json"

run() { # name, then args...
  local name=$1; shift
  [[ -n "$FILTER" && "$name" != *$FILTER* ]] && return
  local so=$T/out.$$ se=$T/err.$$
  timeout 120 "$VRAM" "$@" >"$so" 2>"$se" </dev/null; local rc=$?
  local lines; lines=$(wc -l <"$se"); local flags=""
  grep -q "panicked" "$se" && flags+="PANIC "
  [[ $rc -ne 0 && $rc -ne 2 ]] && flags+="RC$rc "
  [[ $rc -eq 2 && $lines -ne 1 ]] && flags+="MULTILINE "
  grep -Eq '(^|[^a-zA-Z])(NaN|nan|inf|-inf)([^a-zA-Z]|$)' "$so" && flags+="NAN? "
  grep -Eq '(^| )-[0-9.]+ ?(B|KiB|MiB|GiB|TiB)\b' "$so" && flags+="NEGBYTES? "
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$flags" "$(head -c 300 "$se" | tr '\n' '|')" "$(head -c 200 "$so" | tr '\n\t' '| ')" >> "$OUT"
}
E=estimate
# ---- estimate: inputs
run e_missing $E "$T/nope/config.json"
run e_empty $E "$T/empty.json"
run e_trunc $E "$T/trunc.json"
run e_dir_noconfig $E "$T/adir"
run e_unreadable $E "$T/unreadable.json"
run e_hidden0 $E "$C_H0"
run e_layers1e9 $E "$C_L1e9"
run e_vocab0 $E "$C_V0"
run e_heads_notdiv $E "$C_HD"
run e_inter0 $E "$C_I0"
run e_big $E "$C_BIG"
run e_big_inf $E "$C_BIG" --inference
run e_hugevocab $E "$C_HUGEV"
run e_mpe0 $E "$C_MPE0"
run e_headdim0 $E "$C_HEAD0"
run e_rope_neg $E "$C_ROPE"
run e_moe0 $E "$C_QWEN_MOE"
run e_dtype $E "$C_DTYPE"
run e_nested $E "$C_NESTED"
run e_sw0 $E "$C_SW" --inference
run e_gemma_swneg $E "$C_GEMMA" --inference
run e_hub_offline $E Qwen/Qwen3-8B
run e_hub_offline_rev $E Qwen/Qwen3-8B --revision v9
run e_modelscope_offline $E modelscope:Qwen/Qwen3-8B
run e_hub_bad_id $E "Qwen//Qwen3"
run e_unicode_model $E "模型/ü🚀"
run e_long_model $E "$LONG"
run e_empty_model $E ""
# ---- estimate: flags
run e_batch0 $E gpt2 --inference --batch 0
run e_seq0 $E gpt2 --seq 0
run e_seq_huge $E gpt2 --seq 1000000000000
run e_mb_huge $E gpt2 --micro-batch 1000000000000
run e_ga0 $E gpt2 --grad-accum 0
run e_ga_huge $E gpt2 --grad-accum 1000000000000
run e_gpu_unknown $E gpt2 --gpu z100
run e_gpu_unicode $E gpt2 --gpu "h100‐80g"
run e_gpu_empty $E gpt2 --gpu ""
run e_tp3 $E llama-3-8b --tp 3
run e_tp0 $E llama-3-8b --tp 0
run e_dp0 $E llama-3-8b --dp 0
run e_pp0 $E llama-3-8b --pp 0
run e_tp_huge $E llama-3-8b --tp 4096
run e_dp_huge $E llama-3-8b --zero 3 --dp 1000000000000
run e_ctx0 $E gpt2 --inference --context 0
run e_prompt0 $E gpt2 --inference --prompt 0 --new-tokens 5
run e_newtok0 $E gpt2 --inference --prompt 5 --new-tokens 0
run e_ctx_over $E gpt2 --inference --context 100000
run e_ctx_huge $E llama-3-8b --inference --context 1000000000000
run e_batch_huge $E llama-3-8b --inference --batch 1000000000000
run e_prompt_ctx $E gpt2 --inference --prompt 100 --context 50
run e_cudactx_neg $E gpt2 --cuda-context -5MiB
run e_cudactx_huge $E gpt2 --cuda-context 1000000TiB
run e_cudactx_nan $E gpt2 --cuda-context NaNMiB
run e_ws_inf $E gpt2 --workspace infGiB
run e_frag_nan $E gpt2 --fragmentation NaN
run e_frag_neg $E gpt2 --fragmentation -0.1
run e_frag_pct $E gpt2 --fragmentation 5%
run e_sched0 $E llama-3-8b --pp 2 --schedule interleaved:0
run e_sched_huge $E llama-3-8b --pp 2 --schedule interleaved:65
run e_rl_huge $E llama-3-8b --recompute full --recompute-layers 1000
run e_images_text $E gpt2 --images 2
run e_images_huge $E qwen3-vl-8b --inference --images 100000
run e_imgsize_bad $E qwen3-vl-8b --inference --images 1 --image-size 0x0
run e_imgsize_huge $E qwen3-vl-8b --inference --images 1 --image-size 100000x100000
run e_imgsize_garbage $E qwen3-vl-8b --inference --images 1 --image-size 12xx
run e_lora_rank0 $E llama-3-8b --finetune lora --lora-rank 0
run e_lora_huge $E llama-3-8b --finetune lora --lora-rank 1000000
run e_lora_targets_bad $E llama-3-8b --finetune lora --lora-targets foo_proj
run e_lora_targets_empty $E llama-3-8b --finetune lora --lora-targets ""
run e_lora_drop $E llama-3-8b --finetune lora --lora-dropout 2
run e_lora_nolora $E llama-3-8b --lora-rank 8
run e_weights_bad $E llama-3-8b --weights int3
run e_revision_catalog $E llama-3-8b --revision main
run e_json_timeline_ok $E gpt2 --json --timeline
# ---- plan
run p_gpus0 plan llama-3-8b --gpu h100-80g --gpus 0 --global-batch 8 --seq 2048
run p_gb0 plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 0 --seq 2048
run p_seq0 plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 0
run p_gpus_huge plan llama-3-8b --gpu h100-80g --gpus 1000000000 --global-batch 8 --seq 2048
run p_gb_notdiv plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 3 --seq 2048
run p_tp3 plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048 --tp 3
run p_mb_huge plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048 --micro-batch 1000000000000
run p_gpu_unknown plan llama-3-8b --gpu z100 --gpus 8 --global-batch 8 --seq 2048
run p_cluster_bad plan llama-3-8b --cluster "foo" --gpus 8 --global-batch 8 --seq 2048
run p_cluster_missing plan llama-3-8b --cluster "$T/nope.toml" --gpus 8 --global-batch 8 --seq 2048
run p_top0 plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048 --top 0
run p_emit_peft_nolora plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048 --emit peft
run p_nofit plan llama-3-70b --gpu rtx-4090 --gpus 1 --global-batch 8 --seq 8192
run p_hidden0 plan "$C_H0" --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048
run p_empty plan "$T/empty.json" --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048
run p_offline plan Qwen/Qwen3-8B --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048
# ---- batch
run b_missing_lengths batch gpt2 --lengths "$T/nope.txt"
run b_empty_lengths batch gpt2 --lengths "$T/len_empty.txt"
run b_zero_lengths batch gpt2 --lengths "$T/len_zero.txt"
run b_bad_lengths batch gpt2 --lengths "$T/len_bad.txt"
run b_huge_lengths batch gpt2 --lengths "$T/len_huge.txt"
run b_huge2_lengths batch gpt2 --lengths "$T/len_huge2.txt"
run b_dir_lengths batch gpt2 --lengths "$T/adir"
run b_maxbatch0 batch gpt2 --lengths "$T/len_ok.txt" --max-batch 0
run b_gpu_unknown batch gpt2 --lengths "$T/len_ok.txt" --gpu z100
run b_inline batch gpt2 --lengths 1,2,3
run b_inference batch gpt2 --lengths "$T/len_ok.txt" --inference
run b_nofit batch llama-3-70b --lengths "$T/len_ok.txt" --gpu rtx-4090
run b_unreadable batch gpt2 --lengths "$T/unreadable.json"
# ---- capacity
run c_gmu0 capacity llama-3-8b --gpu a100-80g --gpu-memory-utilization 0
run c_gmu2 capacity llama-3-8b --gpu a100-80g --gpu-memory-utilization 2
run c_gmu_nan capacity llama-3-8b --gpu a100-80g --gpu-memory-utilization NaN
run c_gmu_neg capacity llama-3-8b --gpu a100-80g --gpu-memory-utilization -0.5
run c_mml0 capacity llama-3-8b --gpu a100-80g --max-model-len 0
run c_mml_huge capacity llama-3-8b --gpu a100-80g --max-model-len 1000000000000
run c_mns0 capacity llama-3-8b --gpu a100-80g --max-num-seqs 0
run c_tp3 capacity llama-3-8b --gpu a100-80g --tensor-parallel-size 3
run c_tp0 capacity llama-3-8b --gpu a100-80g --tensor-parallel-size 0
run c_pp_huge capacity llama-3-8b --gpu a100-80g --pipeline-parallel-size 1000
run c_bs0 capacity llama-3-8b --gpu a100-80g --block-size 0
run c_bs7 capacity llama-3-8b --gpu a100-80g --block-size 7
run c_ver_bad capacity llama-3-8b --gpu a100-80g --engine-version banana
run c_ver_future capacity llama-3-8b --gpu a100-80g --engine-version 99.0
run c_sglang_mfs capacity llama-3-8b --engine sglang --gpu a100-80g --mem-fraction-static 1.5
run c_sglang_mfs_vllm capacity llama-3-8b --engine vllm --gpu a100-80g --mem-fraction-static 0.5
run c_mtt0 capacity llama-3-8b --engine sglang --gpu a100-80g --max-total-tokens 0
run c_70b_4090 capacity llama-3-70b --gpu rtx-4090
run c_gpu_unknown capacity llama-3-8b --gpu z100
run c_hidden0 capacity "$C_H0"
run c_offline capacity Qwen/Qwen3-8B
run c_vllm_v1_bad capacity llama-3-8b --vllm-use-v1 2
run c_mnbt0 capacity llama-3-8b --max-num-batched-tokens 0
run c_cgmb0 capacity llama-3-8b --engine sglang --cuda-graph-max-bs 0
run c_ep_huge capacity llama-3-8b --ep-size 1000
# ---- checkpoint
run k_budget0 checkpoint llama-3-8b --budget 0
run k_budget_neg checkpoint llama-3-8b --budget -5GiB
run k_budget_garbage checkpoint llama-3-8b --budget lots
run k_slots0 checkpoint llama-3-8b --slots 0
run k_slots_huge checkpoint llama-3-8b --slots 1000000000
run k_inference checkpoint llama-3-8b --inference
run k_hidden0 checkpoint "$C_H0"
run k_gpu_unknown checkpoint llama-3-8b --gpu z100
# ---- doctor
run d_empty doctor ""
run d_garbage doctor "hello world"
run d_missing_file doctor "$T/nope.txt"
run d_dir doctor "$T/adir"
run d_unreadable doctor "$T/unreadable.json"
run d_nan doctor "CUDA out of memory. Tried to allocate NaN GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
run d_neg doctor "CUDA out of memory. Tried to allocate -20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
run d_huge doctor "CUDA out of memory. Tried to allocate 99999999999999999999.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
run d_freeover doctor "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 10.00 GiB of which 50.00 GiB is free. Of the allocated memory 60.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
run d_model_hidden0 doctor --model "$C_H0" "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
run d_model_offline doctor --model Qwen/Qwen3-8B "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
run d_gpu_unknown doctor --gpu z100 "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 2.00 MiB is free."
# ---- replay
run r_missing replay "$T/nope.pickle"
run r_empty replay "$T/empty.json"
run r_garbage replay "$T/snap_garbage.pickle"
run r_emptydict replay "$T/snap_empty.pickle"
run r_dir replay "$T/adir"
run r_unreadable replay "$T/unreadable.json"
run r_policy_bad replay "$T/snap_empty.pickle" --policy foo
run r_capacity_bad replay "$T/snap_empty.pickle" --capacity lots
run r_capacity_zero replay "$T/snap_empty.pickle" --capacity 0
run r_trim_neg replay "$T/snap_empty.pickle" --trim-slack -1
run r_trim_nan replay "$T/snap_empty.pickle" --trim-slack NaN
run r_allocconf_bad replay "$T/snap_empty.pickle" --alloc-conf "max_split_size_mb:abc"
# ---- trace (writes files)
run t_hidden0 trace "$C_H0" --out "$T/t_hidden0.pickle"
run t_steps0 trace gpt2 --steps 0 --out "$T/t_steps0.pickle"
run t_steps_huge trace gpt2 --steps 1000000000 --out "$T/t_steps_huge.pickle"
run t_out_dir trace gpt2 --out "$T/adir"
run t_out_nodir trace gpt2 --out "$T/no/such/dir/x.pickle"
run t_policy_bad trace gpt2 --policy foo --out "$T/t_pol.pickle"
run t_offline trace Qwen/Qwen3-8B --out "$T/t_off.pickle"
run t_inference trace gpt2 --inference --out "$T/t_inf.pickle"
# ---- report
run rp_missing report "$T/nope.jsonl" -o "$T/rp1.html"
run rp_empty report "$T/empty.json" -o "$T/rp2.html"
run rp_bad report "$T/rec_bad.jsonl" -o "$T/rp3.html"
run rp_obj report "$T/obj.json" -o "$T/rp4.html"
run rp_nan report "$T/nan.json" -o "$T/rp5.html"
run rp_dir report "$T/adir" -o "$T/rp6.html"
run rp_out_dir report --demo -o "$T/adir"
run rp_out_nodir report --demo -o "$T/no/such/x.html"
run rp_noinput report
run rp_rec report "$T/rec.jsonl" -o "$T/rp7.html"
# ---- top/record/serve/monitor without a GPU
run top_nogpu top --once
run top_json_nogpu top --once --json
run top_interval0 top --demo --once --interval 0s
run top_interval_bad top --demo --once --interval fast
run top_count0 top --demo --json --count 0
run top_sort_bad top --demo --once --sort foo
run rec_nogpu record --out "$T/rec_nogpu.jsonl" --count 1
run rec_out_dir record --demo --out "$T/adir" --count 1
run rec_count0 record --demo --out "$T/rec0.jsonl" --count 0
run rec_dur_bad record --demo --out "$T/recd.jsonl" --duration forever
run rec_leak_span0 record --demo --out "$T/recl.jsonl" --count 1 --leak-min-span 0s
run serve_nogpu serve --port 0 --max-seconds 1
run serve_port_bad serve --demo --port 70000 --max-seconds 1
run serve_bind_bad serve --demo --bind not-an-ip --max-seconds 1
run serve_hist0 serve --demo --port 0 --history 0 --max-seconds 1
run serve_interval0 serve --demo --port 0 --interval 0s --max-seconds 1
run serve_maxsec0 serve --demo --port 0 --max-seconds 0
run watch watch
run monitor monitor
run models_arg models foo
run gpus_json gpus --json
# ---- later finds: GPU sizes, a real snapshot's options, engine flag combinations
S=$ROOT/crates/vram-alloc/tests/data/torch_like_snapshot.pickle
run g_size0 $E gpt2 --gpu 0GiB
run g_size_huge $E gpt2 --gpu 1e30GiB
run r_real_capacity0 replay "$S" --capacity 0B
run r_real_policy_twice replay "$S" --policy pytorch --policy pytorch
run r_real_trim_nan replay "$S" --trim-slack NaN
run e_recompute_layers_stage $E llama-3-8b --pp 4 --recompute full --recompute-layers 9
run c_mnbt_below_seqs capacity llama-3.1-8b --max-num-batched-tokens 1
run c_seqs_above_mnbt capacity llama-3.1-8b --max-num-seqs 100000000
# ---- the 2026-11-28 audit: u64 overflow, unbounded reads, flags the run would ignore
run a_lora_rank_max $E llama-3-8b --finetune lora --lora-rank 18446744073709551615
run a_plan_gb_max plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 18446744073709551615 --seq 2048
run a_plan_seq_max plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 18446744073709551615
run a_dev_zero $E /dev/zero
run a_doctor_dev_zero doctor /dev/zero --no-nvml
run a_batch_binary batch gpt2 --lengths "$S"
run a_train_batch $E gpt2 --batch 8
run a_infer_mb $E gpt2 --inference --micro-batch 4
run a_doctor_step_no_model doctor "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 10.00 GiB of which 5.00 MiB is free. Of the allocated memory 9.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated." --tp 2 --no-nvml
run a_batch_mb batch gpt2 --lengths "$T/len_ok.txt" --micro-batch 4
run a_trace_gpu_no_events trace gpt2 --out "$T/a.pickle" --gpu a100-80g
run a_top_once_count top --demo --once --count 3
run a_record_span_no_check record --demo --out "$T/a.jsonl" --leak-min-span 5s
run a_dequantized_bf16 $E llama-3-8b --dequantized
run a_schedule_no_pp $E gpt2 --schedule gpipe
run a_plan_offload_zero plan llama-3-8b --gpu h100-80g --gpus 8 --global-batch 8 --seq 2048 --offload params --zero 2
# ---- the second audit (session 10): encodings, durations, output paths, hostile names
# (No case writes to /dev: before the fix, `-o /dev/null` as root replaced the device node.)
ROOT="$ROOT" python3 - "$T" <<'PY'
import json, os, struct, sys
T = sys.argv[1]
oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
       "capacity of 79.19 GiB of which 6.75 MiB is free. Including non-PyTorch memory, this process "
       "has 79.17 GiB memory in use. Of the allocated memory 77.65 GiB is allocated by PyTorch, and "
       "1.02 GiB is reserved by PyTorch but unallocated.")
def w(name, b): open(os.path.join(T, name), "wb").write(b)
w("oom_utf16.txt", oom.encode("utf-16"))
w("oom_bom8.txt", b"\xef\xbb\xbf" + oom.encode())
w("oom_latin1.txt", ("Fehler \xe9: " + oom).encode("latin-1"))
w("oom_ansi.txt", oom.replace("20.00 MiB", "\x1b[1m20.00 MiB\x1b[0m").encode())
w("len_utf16.txt", "10\r\n20\r\n".encode("utf-16"))
w("len_bom.txt", b"\xef\xbb\xbf10\n20\n")
w("stats_over.json", b'{"allocated_bytes.all.current": 18446744073709551615, "reserved_bytes.all.current": 1}')
h = json.dumps({"w": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [0, 2]}}).encode()
w("e8m0.safetensors", struct.pack("<Q", len(h)) + h + b"\0\0")
os.makedirs(os.path.join(T, "bomcfg"), exist_ok=True)
w("bomcfg/config.json", b"\xef\xbb\xbf{}")
llama = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8}
os.makedirs(os.path.join(T, "evilname"), exist_ok=True)
w("evilname/config.json", json.dumps(dict(llama, _name_or_path="org/a\nb\x1b[31mc")).encode())
os.makedirs(os.path.join(T, "evilmt"), exist_ok=True)
w("evilmt/config.json", json.dumps({"model_type": "x\x1b]0;t\x07\u202e"}).encode())
src = os.path.join(os.environ.get("ROOT", "."), "tests/zoo/configs/qwen3-vl-2b-instruct.json")
if os.path.exists(src):
    c = json.load(open(src)); c["vision_config"]["depth"] = 100000
    os.makedirs(os.path.join(T, "vdepth"), exist_ok=True)
    json.dump(c, open(os.path.join(T, "vdepth/config.json"), "w"))
PY
ln -sf "$T/real.html" "$T/link.html"
run b2_rec_duration_huge record --demo --out "$T/b2.jsonl" --duration 1e16h
run b2_rec_span_huge record --demo --out "$T/b2.jsonl" --count 1 --leak-check --leak-min-span 1e300h
run b2_doctor_utf16 doctor "$T/oom_utf16.txt" --no-nvml
run b2_doctor_bom8 doctor "$T/oom_bom8.txt" --no-nvml
run b2_doctor_latin1 doctor "$T/oom_latin1.txt" --no-nvml
run b2_doctor_ansi doctor "$T/oom_ansi.txt" --no-nvml
run b2_doctor_stats_over doctor "$T/oom_bom8.txt" --no-nvml --stats "$T/stats_over.json"
run b2_batch_utf16 batch gpt2 --lengths "$T/len_utf16.txt"
run b2_batch_bom batch gpt2 --lengths "$T/len_bom.txt"
run b2_st_e8m0 $E "$T/e8m0.safetensors"
run b2_cfg_bom $E "$T/bomcfg"
run b2_cfg_evil_name $E "$T/evilname"
run b2_cfg_evil_model_type $E "$T/evilmt"
run b2_report_symlink report --demo -o "$T/link.html"
run b2_alloc_conf_list replay "$S" --alloc-conf "roundup_power2_divisions:[256:1,>:0]"
# Known and left: a vision tower of 100,000 blocks takes tens of seconds to estimate for training.
run b2_vision_depth $E "$T/vdepth"
echo "done: $(wc -l < "$OUT") cases"
chmod 600 "$T/unreadable.json"
