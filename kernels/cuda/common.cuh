// Device helpers shared by the fused kernels: fp32 conversion of the element types and a block-wide
// sum. Included only by .cu files.
#ifndef TESSERA_KERNELS_CUDA_COMMON_CUH_
#define TESSERA_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace tessera::kernels::cuda {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) of `v` over the block, returned to every thread. blockDim.x must be a multiple of 32
// and at most 1024; `scratch` is 32 floats of shared memory, reusable after the call returns.
template <bool kMax>
__device__ __forceinline__ float BlockReduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call.
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  r = kMax ? WarpMax(r) : WarpSum(r);
  return r;
}

__device__ __forceinline__ float BlockSum(float v, float* scratch) { return BlockReduce<false>(v, scratch); }
__device__ __forceinline__ float BlockMax(float v, float* scratch) { return BlockReduce<true>(v, scratch); }

// N elements of T in one 16-byte load or store (N = 16 / sizeof(T)): the vector width of the
// vectorised kernels. Only for addresses that are multiples of 16 (see Aligned16).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls `fn` with a null pointer of the element type named by `t`.
template <typename Fn>
cudaError_t Dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat: return fn(static_cast<float*>(nullptr));
    case DType::kHalf: return fn(static_cast<__half*>(nullptr));
    case DType::kBFloat16: return fn(static_cast<__nv_bfloat16*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

inline int BlocksFor(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;
  return static_cast<int>(b < 1 ? 1 : b);
}

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_COMMON_CUH_
