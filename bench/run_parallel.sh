#!/usr/bin/env bash
# Builds tessera and runs the parallel-modes benchmark (bench/parallel_modes.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //client:tessera //worker/rank:tessera-rank
exec tools/python.sh bench/parallel_modes.py "$@"
