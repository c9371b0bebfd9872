#!/usr/bin/env bash
# Builds tessera and runs the pipeline-schedule benchmark (bench/pipeline_schedules.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //client:tessera //worker/rank:tessera-rank
exec tools/python.sh bench/pipeline_schedules.py "$@"
