#!/usr/bin/env bash
# The largest GPT that completes 3 steps on one GPU, with the optimizer state on the GPU (offload 0)
# or in host memory (offload 1): bf16 parameters, fp32 master weights and Adam moments, activation
# checkpointing, hidden 4096 / 32 heads / seq 1024 / batch 1, more layers until one does not fit.
# For the device machine, after tools/gpu/check.sh built the GPU targets there (same build folder):
#   run(command="bash tools/gpu/offload_capacity.sh 0", carry=[".gpu_bundle"])   # then with 1
# Layer counts to try may follow (ascending), e.g. `offload_capacity.sh 1 24 32 40`; it stops at the
# first that does not fit.
# Prints one line per try (gpu_bench capacity) and the largest that fit with its tokens/s.
set -uo pipefail
cd "$(dirname "$0")/../.."
offload=${1:-0}
shift || true
source tools/gpu/env.sh
if ! build_gpu_targets "$out/capacity_build.log"; then
  echo "build FAILED"; tail -30 "$out/capacity_build.log"; exit 1
fi

# Ψ ≈ 201M per layer + 206M of embeddings. Without offload 16 bytes per parameter stay on the GPU
# (~4.5B parameters in 80 GB); with it 4 (bf16 parameters and gradients), and host memory holds 12.
if [[ $# -gt 0 ]]; then ladder=("$@"); elif [[ $offload == 1 ]]; then ladder=(16 24 32 40 48); else ladder=(12 16 20 24 28); fi
best=""
for layers in "${ladder[@]}"; do
  line=$("$bin/gpu_bench" capacity --layers "$layers" --hidden 4096 --heads 32 --seq 1024 --batch 1 \
         --offload "$offload" 2>>"$out/capacity_stderr.log")
  rc=$?
  [[ $rc != 0 && $rc != 3 ]] && line="$line result crashed rc $rc (out of host memory?)"
  echo "$line" | tee -a "$out/capacity.log"
  if [[ $rc == 0 ]]; then best=$line; else break; fi
done
echo "==== largest that fits, offload $offload: ${best:-none} ===="
