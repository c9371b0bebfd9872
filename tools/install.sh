#!/usr/bin/env bash
# Builds the tessera binaries and installs them under PREFIX (default /usr/local): PREFIX/bin for
# tessera, tessera-coordinator, tessera-worker, tessera-rank and tessera-generate, PREFIX/lib/tessera
# for the shared libraries the LibTorch-linked two need beyond the system's (LibTorch, its OpenMP and
# CUDA runtime), found through an $ORIGIN rpath. Run tools/setup.sh first.
set -euo pipefail
prefix="${1:-/usr/local}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bazel build --disk_cache="$cache" //client:tessera //coordinator:tessera-coordinator //worker:tessera-worker \
  //worker/rank:tessera-rank //client:tessera-generate
mkdir -p "$prefix/bin" "$prefix/lib/tessera"
for b in client/tessera coordinator/tessera-coordinator worker/tessera-worker worker/rank/tessera-rank \
  client/tessera-generate; do
  install -m 0755 "bazel-bin/$b" "$prefix/bin/"
done
# Libraries outside the system directories that tessera-rank and tessera-generate resolve now.
ldd "$prefix/bin/tessera-rank" "$prefix/bin/tessera-generate" | awk '/=> \// {print $3}' | grep -v -E '^/(usr/)?lib(64)?/' | while read -r lib; do
  install -m 0644 "$lib" "$prefix/lib/tessera/"
done
command -v patchelf >/dev/null || { echo "install: patchelf is needed (apt-get install patchelf)" >&2; exit 1; }
for b in tessera-rank tessera-generate; do patchelf --set-rpath '$ORIGIN/../lib/tessera' "$prefix/bin/$b"; done
for lib in "$prefix"/lib/tessera/*.so*; do patchelf --set-rpath '$ORIGIN' "$lib" 2>/dev/null || true; done
echo "installed tessera into $prefix"
