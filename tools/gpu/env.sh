# Sourced by the device-machine scripts in tools/gpu (from the repository root): where logs and the
# CMake build go, which Python/PyTorch and NCCL to build against, the library path to run with, and
# configure_gpu_build to (re)configure the CMake build.
out=${OUT:-/tmp/tessera_gpu}
mkdir -p "$out"
build=${TESSERA_GPU_BUILD:-/tmp/tessera_gpu_build}
python=${PYTHON:-python3}
torch_dir=$($python -c 'import torch,os;print(os.path.dirname(torch.__file__))')
# NCCL: prefer the pip wheel's (what PyTorch itself loads), else the CUDA toolkit's.
nccl_dir=$($python -c 'import nvidia.nccl,os;print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
cmake_extra=()
if [[ -n "$nccl_dir" && -e "$nccl_dir/lib/libnccl.so.2" ]]; then
  cmake_extra+=("-DNCCL_LIB=$nccl_dir/lib/libnccl.so.2")
  [[ -d "$nccl_dir/include" ]] && cmake_extra+=("-DNCCL_INCLUDE=$nccl_dir/include")
  export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
fi
export LD_LIBRARY_PATH="$torch_dir/lib:$(pwd)/.gpu_bundle/lib:${LD_LIBRARY_PATH:-}"

# TESSERA_GPU_BIN=DIR: use the binaries already in DIR (built on another machine against the same
# PyTorch, e.g. the dev machine's wheel, and carried along) instead of building here.
bin=${TESSERA_GPU_BIN:-$build}
# Prebuilt Bazel test binaries link the project's libraries dynamically: their .so files go in DIR/lib.
[[ -n "${TESSERA_GPU_BIN:-}" && -d "$TESSERA_GPU_BIN/lib" ]] && export LD_LIBRARY_PATH="$TESSERA_GPU_BIN/lib:$LD_LIBRARY_PATH"

configure_gpu_build() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S tools/gpu -B "$build" "${gen[@]}" -DTORCH_DIR="$torch_dir" "${cmake_extra[@]}"
}

# Builds the GPU targets unless TESSERA_GPU_BIN names prebuilt ones; the log goes to $1.
build_gpu_targets() {
  if [[ -n "${TESSERA_GPU_BIN:-}" ]]; then echo "prebuilt binaries from $TESSERA_GPU_BIN" >"$1"; return 0; fi
  configure_gpu_build >"$1" 2>&1 && cmake --build "$build" -j "$(nproc)" >>"$1" 2>&1
}
