#!/usr/bin/env bash
# Run HERE (the dev machine): gathers what the device machine lacks to build the engine's GPU targets
# with CMake — Abseil, GoogleTest/GoogleMock, nlohmann-json, Gloo headers, NCCL's header — from this
# machine's Debian packages into .gpu_bundle/ (git-ignored). Then carry it:
#   run(command="bash tools/gpu/check.sh", carry=[".gpu_bundle"])
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu_bundle
rm -rf "$out"
mkdir -p "$out/include" "$out/lib"
for d in absl gtest gmock nlohmann gloo; do cp -rL "/usr/include/$d" "$out/include/"; done
cp -L /usr/local/cuda/include/nccl.h "$out/include/" 2>/dev/null || true
multiarch=/usr/lib/x86_64-linux-gnu
cp -L "$multiarch"/libabsl_*.so "$out/lib/"
for so in "$multiarch"/libabsl_*.so.*; do cp -L "$so" "$out/lib/"; done
cp -L "$multiarch"/libgtest.a "$multiarch"/libgtest_main.a "$multiarch"/libgmock.a "$out/lib/"
# .gpu_bundle/ is listed in .gitignore.
du -sh "$out"
