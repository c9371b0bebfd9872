#!/usr/bin/env bash
# Builds tessera and runs the planner check (bench/planner_check.py): the planner's first choice
# against every candidate it lists, run on this machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //client:tessera //worker/rank:tessera-rank
exec tools/python.sh bench/planner_check.py "$@"
