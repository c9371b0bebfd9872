#!/usr/bin/env bash
# The main job: builds tessera, turns a text file this machine already has into byte-level tokens,
# and trains the demo GPT on CPU with `tessera run` (2 data-parallel rank processes).
# Extra arguments go to `tessera run` (e.g. --set train.steps=50 --set parallel.tp=2 --set parallel.dp=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
mkdir -p "$cache" out/data
bazel build --disk_cache="$cache" //client:tessera
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
bazel-bin/client/tessera data prepare "$text" out/data/demo.bin
exec bazel-bin/client/tessera run examples/gpt-demo.yaml "$@"
