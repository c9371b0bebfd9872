#!/usr/bin/env bash
# Builds and runs the CPU AdamW benchmark (bench/cpu_adam.py). Argument: parameter count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //bench:cpu_adam_bench
exec tools/python.sh bench/cpu_adam.py "$@"
