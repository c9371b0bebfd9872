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

configure_gpu_build() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S tools/gpu -B "$build" "${gen[@]}" -DTORCH_DIR="$torch_dir" "${cmake_extra[@]}"
}
