#!/usr/bin/env bash
# Builds tessera and runs the ZeRO memory / offload step-time benchmark (bench/zero_memory.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //client:tessera //worker/rank:tessera-rank
exec tools/python.sh bench/zero_memory.py "$@"
