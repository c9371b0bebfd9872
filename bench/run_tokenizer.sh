#!/usr/bin/env bash
# Builds tessera and runs the tokenizer throughput benchmark against the `tokenizers` library (not part
# of the test suite). Arguments go to the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bazel build --disk_cache="$cache" //client:tessera
exec tools/python.sh bench/tokenizer_throughput.py "$@"
