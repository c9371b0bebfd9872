#!/usr/bin/env bash
# GPU truth III (issue 60) in one device call, most valuable first, each run under its own timeout and
# skipped when the call's time budget (TRUTH3_BUDGET_S, default 400 s) would not hold it:
#   1. gpu_bench fp8: every FP8 GEMM against its emulation on the GPU; one linear's forward+backward,
#      bf16 vs FP8 tensorwise vs rowwise, at the GPT 1.3B and Llama 1B shapes.
#   2. the full training step (bf16 parameters, fp32 masters, clipping, AdamW) of a Llama ~1B and the GPT
#      1.3B, bf16 vs FP8, tessera (gpu_bench train) vs transformers/PyTorch eager and torch.compile, and
#      torchao's Float8 under compile (the recipe torchtitan uses); two interleaved rounds where time allows.
# Everything goes to $OUT/truth3.log. Binaries prebuilt on the dev machine (TESSERA_GPU_BIN, default
# .gpu_prebuilt) against the same torch 2.11 wheel; wheels for Python peers the device lacks in .whl/:
#   run(command="bash tools/gpu/truth3.sh [--short]", carry=[".gpu_bundle", ".gpu_prebuilt", ".whl"])
# --short: the FP8 checks and the tessera step times only (a second call after a change).
set -uo pipefail
cd "$(dirname "$0")/../.."
export TESSERA_GPU_BIN=${TESSERA_GPU_BIN:-$(pwd)/.gpu_prebuilt}
source tools/gpu/env.sh
budget=${TRUTH3_BUDGET_S:-400}
start=$(date +%s)
log=$out/truth3.log
if compgen -G ".whl/*.whl" >/dev/null; then
  $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >>"$log" 2>&1 &&
    export PYTHONPATH=/tmp/site
fi
# step MAX_SECONDS CMD...: runs CMD unless fewer than MAX_SECONDS are left of the budget.
step() {
  local limit=$1; shift
  local left=$(( budget - ($(date +%s) - start) ))
  if (( left < limit )); then echo "skipped (${left}s left, needs ${limit}s): $*" >>"$log"; return; fi
  echo "## $(( $(date +%s) - start ))s: $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1 || echo "exit $?: $*" >>"$log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$log" 2>&1
$python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >>"$log" 2>&1
step 60 "$bin/gpu_bench" fp8
if [[ "${1:-}" == "--short" ]]; then  # The step times only: bf16 vs FP8 in two interleaved rounds, eager GPT.
  for round in 1 2; do
    step 45 "$bin/gpu_bench" train --size llama1b --batch 4
    step 45 "$bin/gpu_bench" train --size llama1b --batch 4 --fp8 tensorwise
    step 45 "$bin/gpu_bench" train --size 1.3b --batch 4
    step 45 "$bin/gpu_bench" train --size 1.3b --batch 4 --fp8 tensorwise
    [[ $round == 1 ]] && step 45 $python bench/gpu/gpt_eager.py --size 1.3b --batch 4 --full
  done
  step 45 "$bin/gpu_bench" train --size llama1b --batch 4 --fp8 rowwise
  echo "## done after $(( $(date +%s) - start ))s" >>"$log"
  grep -E '^(fp8_|train |hf_llama|eager|exit|skipped|error)' "$log"
  exit 0
fi
for round in 1 2; do
  step 60 "$bin/gpu_bench" train --size llama1b --batch 4
  step 60 "$bin/gpu_bench" train --size llama1b --batch 4 --fp8 tensorwise
  step 60 "$bin/gpu_bench" train --size llama1b --batch 4 --fp8 rowwise
  step 60 $python bench/gpu/llama_eager.py
  step 60 "$bin/gpu_bench" train --size 1.3b --batch 4
  step 60 "$bin/gpu_bench" train --size 1.3b --batch 4 --fp8 tensorwise
  step 60 $python bench/gpu/gpt_eager.py --size 1.3b --batch 4 --full
  if [[ $round == 1 ]]; then
    step 150 $python bench/gpu/llama_eager.py --compile
    step 150 $python bench/gpu/llama_eager.py --compile --fp8 tensorwise
    step 150 $python bench/gpu/gpt_eager.py --size 1.3b --batch 4 --full --compile
  fi
done
echo "## done after $(( $(date +%s) - start ))s" >>"$log"
grep -E '^(fp8_|train |hf_llama|eager|exit|skipped|error)' "$log"
