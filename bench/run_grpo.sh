#!/usr/bin/env bash
# Builds tessera and runs the GRPO throughput benchmark against TRL's GRPOTrainer and transformers'
# generate (not part of the test suite). Arguments go to the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bazel build --disk_cache="$cache" //client:tessera //worker/rank:tessera-rank
exec tools/python.sh bench/grpo_throughput.py "$@"
