#!/usr/bin/env bash
# Builds the tessera binaries and installs them under PREFIX (default /usr/local): PREFIX/bin for
# tessera, tessera-coordinator, tessera-worker, tessera-rank, tessera-generate and tessera-score, PREFIX/lib/tessera
# for the shared libraries the LibTorch-linked ones need beyond the system's (LibTorch and its OpenMP),
# found through an $ORIGIN rpath. Run tools/setup.sh first.
#   bash tools/install.sh [--cuda] [PREFIX]
# --cuda: also tessera-rank-cuda and tessera-generate-cuda (device: cuda), with LibTorch's CUDA
# libraries and the CUDA toolkit's they load: those they link, and those loaded by name at run time
# (cuDNN's sub-libraries, NVRTC). Never the driver's libcuda.so.1: it comes from the GPU host (the
# NVIDIA driver, or the NVIDIA Container Toolkit in a container), matching its kernel module.
set -euo pipefail
cuda=0
if [ "${1:-}" = "--cuda" ]; then cuda=1; shift; fi
prefix="${1:-/usr/local}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
bins=(client/tessera coordinator/tessera-coordinator worker/tessera-worker worker/rank/tessera-rank generate/tessera-generate generate/tessera-score)
[ $cuda = 0 ] || bins+=(worker/rank/tessera-rank-cuda generate/tessera-generate-cuda)
targets=()
for b in "${bins[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
bazel build --disk_cache="$cache" "${targets[@]}"
mkdir -p "$prefix/bin" "$prefix/lib/tessera"
for b in "${bins[@]}"; do install -m 0755 "bazel-bin/$b" "$prefix/bin/"; done
torch_bins=(tessera-rank tessera-generate tessera-score)
[ $cuda = 0 ] || torch_bins+=(tessera-rank-cuda tessera-generate-cuda)
# Libraries outside the system directories that the LibTorch-linked binaries resolve now.
libs="$(cd "$prefix/bin" && ldd "${torch_bins[@]}" | awk '/=> \// {print $3}' | grep -v -E '^/(usr/)?lib(64)?/' | sort -u)"
if [ $cuda = 1 ]; then
  # Loaded by name, never linked: cuDNN's engines and NVRTC (LibTorch's runtime-compiled kernels).
  for lib in $libs; do
    case "$(basename "$lib")" in
      libcudnn.so.*) libs+=$'\n'"$(ls "$(dirname "$lib")"/libcudnn_*.so.[0-9] 2>/dev/null || true)" ;;
      libcudart.so.*) libs+=$'\n'"$(ls "$(dirname "$lib")"/libnvrtc.so.[0-9]* "$(dirname "$lib")"/libnvrtc-builtins.so.[0-9]* 2>/dev/null || true)" ;;
    esac
  done
fi
echo "$libs" | grep -v -e '^$' -e '/libcuda\.so' | sort -u | while read -r lib; do
  install -m 0644 "$lib" "$prefix/lib/tessera/"
done
command -v patchelf >/dev/null || { echo "install: patchelf is needed (apt-get install patchelf)" >&2; exit 1; }
for b in "${torch_bins[@]}"; do patchelf --set-rpath '$ORIGIN/../lib/tessera' "$prefix/bin/$b"; done
for lib in "$prefix"/lib/tessera/*.so*; do patchelf --set-rpath '$ORIGIN' "$lib" 2>/dev/null || true; done
echo "installed tessera$([ $cuda = 0 ] || echo ' (with CUDA)') into $prefix"
