#!/usr/bin/env bash
# Everything GPU-side in one call on the device machine (CMake + nvcc + its PyTorch 2.11; no Bazel):
# build the engine's GPU targets, run the GPU tests, check GPU-vs-CPU losses, time the fused kernels
# and the GPT (tessera vs PyTorch eager, bf16), and print a short table last. Logs go to $OUT (or
# /tmp/tessera_gpu). Needs .gpu_bundle carried along (tools/gpu/bundle.sh, run on the dev machine):
#   run(command="bash tools/gpu/check.sh", carry=[".gpu_bundle"])
# Then, as separate calls: tools/gpu/offload_capacity.sh 0 and 1 (the largest GPT with and without
# optimizer offload). Also runs on a machine without a GPU (the tests skip, the checks report no
# device): the build part is what CI's machine can verify.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/env.sh
summary=()
step() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }

t0=$(date +%s)
if build_gpu_targets "$out/cmake.log"; then
  step build "ok ($(( $(date +%s) - t0 )) s)"
else
  step build "FAILED (tail of cmake.log below)"; tail -40 "$out/cmake.log"
  printf '%s\n' "${summary[@]}"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 || echo "no nvidia-smi" >"$out/gpu.txt"
step device "$(head -1 "$out/gpu.txt")"

# cpu_adam_test too: the device CPU may have AVX-512, which the dev machine lacks.
for t in fused_kernels_test nccl_communicator_test cpu_adam_test; do
  "$bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  step "$t" "$( [[ $rc == 0 ]] && echo ok || echo FAILED ) ($(grep -c '^\[       OK' "$out/$t.log") ok, $(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$out/$t.log" | grep -oE '[0-9]+' || echo 0) skipped)"
done
"$bin/gpu_bench" check --dir "$build/check" >"$out/check.log" 2>&1
step "gpu vs cpu losses (5 steps)" "$(grep -E '^check_(result|error)' "$out/check.log" | head -1)"
step "zero/offload/bf16 on cuda" "$(grep -E '^check_memory_result' "$out/check.log" | head -1)"
while read -r line; do summary+=("  $line"); done < <(grep -E '^check_memory ' "$out/check.log")
"$bin/gpu_bench" generate >"$out/generate.log" 2>&1
step "generate on cuda vs cpu" "$(grep -E '^generate_result' "$out/generate.log" | head -1)"
while read -r line; do summary+=("  $line"); done < <(grep -E '^generate ' "$out/generate.log")
"$bin/gpu_bench" kernels >"$out/kernels.log" 2>&1
while read -r line; do summary+=("  $line"); done < <(grep -E '^(kernel|copy_bandwidth|kernels_error)' "$out/kernels.log" |
  awk '{ if ($1=="kernel") printf "%s %s fused %sus vs %sus x%s %.0f%% bw\n", $2,$3,$5,$7,$9,$13*100; else print }')
for size in 125m 1.3b; do
  batch=8; [[ $size == 1.3b ]] && batch=4
  for fused in 1 0; do
    "$bin/gpu_bench" gpt --size $size --batch $batch --fused $fused >>"$out/gpt.log" 2>&1
  done
  $python bench/gpu/gpt_eager.py --size $size --batch $batch >>"$out/gpt.log" 2>&1
  # The whole training step (bf16, fp32 masters, clipping, AdamW), tessera vs PyTorch eager.
  "$bin/gpu_bench" train --size $size --batch $batch >>"$out/gpt.log" 2>&1
  $python bench/gpu/gpt_eager.py --size $size --batch $batch --full >>"$out/gpt.log" 2>&1
done
while read -r line; do summary+=("  $line"); done < <(grep -E '^(gpt|eager|train|eager_train|error)' "$out/gpt.log" |
  awk '{ delete v; for (i=1;i<=NF;i++) v[$i]=$(i+1); printf "%s %s fused=%s %s ms %s tok/s mfu %s\n", $1, v["size"], (("fused" in v)?v["fused"]:"-"), v["step_ms"], v["tokens_per_s"], v["mfu"] }')
echo "==== tessera GPU check ($(date -u +%F)) ===="
printf '%s\n' "${summary[@]}"
