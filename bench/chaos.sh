#!/usr/bin/env bash
# The chaos soak (bench/chaos.cc): a coordinator and 3 workers on test hosts (network namespaces),
# concurrent jobs, random faults for --minutes (default 10), then the report and the invariants.
# Needs root and iproute2. Flags go to the binary, e.g. bench/chaos.sh --minutes=20 --seed=7.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bazel build --disk_cache="$cache" //bench:chaos
bin="$(bazel info bazel-bin 2>/dev/null)/bench/chaos"
export TEST_SRCDIR="$bin.runfiles" TEST_WORKSPACE=tessera
exec "$bin" "$@"
