// Tensorwise FP8 quantisation (launch.h: QuantizeFp8Tensorwise): one pass for the amax (16-byte loads,
// a block max, one atomic per block), one pass that scales, saturates and rounds to e4m3 / e5m2
// (16-byte loads, 8- or 4-byte stores). The scale is recomputed by every thread from the amax on the
// device (no host round trip), in double and rounded to float as torchao and the composite do.
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Non-negative floats order as their bit patterns do, and a positive NaN's pattern is above +inf's:
// atomicMax on the int view keeps a NaN (as torch's max does).
__device__ __forceinline__ void AtomicMaxNonNegative(float* at, float v) { atomicMax(reinterpret_cast<int*>(at), __float_as_int(v)); }

// max(m, |v|), NaN kept (fmaxf would drop it).
__device__ __forceinline__ float MaxAbs(float m, float v) {
  const float a = fabsf(v);
  return (a > m || a != a) ? a : m;
}

template <typename T>
__global__ void AmaxKernel(const T* __restrict__ x, int64_t n, bool vectorised, float* amax) {
  __shared__ float scratch[32];
  float m = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vectorised) {
    constexpr int kN = Pack<T>::kN;
    const auto* packs = reinterpret_cast<const Pack<T>*>(x);
    const int64_t count = n / kN;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
      const Pack<T> p = packs[i];
#pragma unroll
      for (int j = 0; j < kN; ++j) m = MaxAbs(m, ToFloat(p.v[j]));
    }
    tail = count * kN;
  }
  for (int64_t i = tail + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    m = MaxAbs(m, ToFloat(x[i]));
  }
  // The block's max, NaN kept: BlockMax's fmaxf would drop a NaN lane, so a NaN anywhere is carried aside.
  const int has_nan = __syncthreads_or(m != m);
  m = BlockMax(has_nan ? 0.0f : m, scratch);
  if (threadIdx.x == 0) AtomicMaxNonNegative(amax, has_nan ? NAN : m);
}

// Saturated to ±max (SATFINITE: what the composite's clamp does) and rounded to nearest even; NaN stays
// NaN (a clamp with fminf/fmaxf would have turned it into -max).
template <bool kE5m2>
__device__ __forceinline__ uint8_t ToFp8(float v, float /*max*/) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kE5m2 ? __NV_E5M2 : __NV_E4M3));
}

template <typename T, bool kE5m2>
__global__ void CastKernel(const T* __restrict__ x, uint8_t* __restrict__ out, const float* amax, float* inv_scale,
                           int64_t n, bool vectorised) {
  const float max = kE5m2 ? 57344.0f : 448.0f;
  const double a = *amax;  // NaN (a NaN in x) gives a NaN scale, as the composite's clamp_min does.
  const float scale = a != a ? NAN : static_cast<float>(static_cast<double>(max) / fmax(a, 1e-12));
  if (blockIdx.x == 0 && threadIdx.x == 0) *inv_scale = 1.0f / scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vectorised) {
    constexpr int kN = Pack<T>::kN;
    struct alignas(kN) Bytes {
      uint8_t v[kN];
    };
    const auto* packs = reinterpret_cast<const Pack<T>*>(x);
    auto* outs = reinterpret_cast<Bytes*>(out);
    const int64_t count = n / kN;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
      const Pack<T> p = packs[i];
      Bytes b;
#pragma unroll
      for (int j = 0; j < kN; ++j) b.v[j] = ToFp8<kE5m2>(ToFloat(p.v[j]) * scale, max);
      outs[i] = b;
    }
    tail = count * kN;
  }
  for (int64_t i = tail + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = ToFp8<kE5m2>(ToFloat(x[i]) * scale, max);
  }
}

}  // namespace

cudaError_t QuantizeFp8Tensorwise(DType t, const void* x, void* out, float* amax, float* inv_scale, int64_t n,
                                  bool e5m2, cudaStream_t stream) {
  if (n <= 0) return cudaErrorInvalidValue;  // The caller quantises empty tensors itself.
  cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (e != cudaSuccess) return e;
  const bool vectorised = Aligned16(x) && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int blocks = BlocksFor(n, kThreads, 132LL * 16);  // A few waves of the SMs: the reduction is atomics per block.
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    AmaxKernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n, vectorised, amax);
    if (e5m2) {
      CastKernel<T, true><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<uint8_t*>(out), amax,
                                                           inv_scale, n, vectorised);
    } else {
      CastKernel<T, false><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<uint8_t*>(out), amax,
                                                            inv_scale, n, vectorised);
    }
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
