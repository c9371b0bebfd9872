// Fused bias + GELU (erf form): one elementwise pass instead of an add and a GELU kernel, and a
// backward pass that recomputes x + bias instead of storing it.
#include <initializer_list>

#include "kernels/cuda/common.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

template <typename T>
__global__ void BiasGeluForwardKernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                                      int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = ToFloat(x[i]) + ToFloat(bias[i % cols]);
    y[i] = FromFloat<T>(0.5f * u * (1.0f + erff(u * kInvSqrt2)));
  }
}

// gelu'(u) = Φ(u) + u·φ(u) with Φ the normal CDF and φ its density.
template <typename T>
__global__ void BiasGeluBackwardKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ bias,
                                       T* __restrict__ du, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = ToFloat(x[i]) + ToFloat(bias[i % cols]);
    const float cdf = 0.5f * (1.0f + erff(u * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * u * u);
    du[i] = FromFloat<T>(ToFloat(dy[i]) * (cdf + u * pdf));
  }
}

// The same two kernels on packs of 16 bytes (cols a multiple of the pack width, all pointers
// 16-byte aligned): a pack never straddles two rows, so its bias is one aligned pack too.
template <typename T>
__global__ void BiasGeluForwardPackKernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ bias,
                                          Pack<T>* __restrict__ y, int64_t packs, int64_t col_packs) {
  constexpr int N = Pack<T>::kN;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Pack<T> xv = x[p], bv = bias[p % col_packs];
    Pack<T> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float u = ToFloat(xv.v[i]) + ToFloat(bv.v[i]);
      out.v[i] = FromFloat<T>(0.5f * u * (1.0f + erff(u * kInvSqrt2)));
    }
    y[p] = out;
  }
}

template <typename T>
__global__ void BiasGeluBackwardPackKernel(const Pack<T>* __restrict__ dy, const Pack<T>* __restrict__ x,
                                           const Pack<T>* __restrict__ bias, Pack<T>* __restrict__ du, int64_t packs,
                                           int64_t col_packs) {
  constexpr int N = Pack<T>::kN;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Pack<T> dv = dy[p], xv = x[p], bv = bias[p % col_packs];
    Pack<T> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float u = ToFloat(xv.v[i]) + ToFloat(bv.v[i]);
      const float cdf = 0.5f * (1.0f + erff(u * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * expf(-0.5f * u * u);
      out.v[i] = FromFloat<T>(ToFloat(dv.v[i]) * (cdf + u * pdf));
    }
    du[p] = out;
  }
}

template <typename T>
bool Packable(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % Pack<T>::kN != 0) return false;
  for (const void* p : pointers) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

}  // namespace

cudaError_t BiasGeluForward(DType t, const void* x, const void* bias, void* y, int64_t n, int64_t cols,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (Packable<T>(cols, {x, bias, y})) {
      const int64_t packs = n / Pack<T>::kN;
      BiasGeluForwardPackKernel<T><<<BlocksFor(packs, kThreads), kThreads, 0, stream>>>(
          static_cast<const Pack<T>*>(x), static_cast<const Pack<T>*>(bias), static_cast<Pack<T>*>(y), packs,
          cols / Pack<T>::kN);
      return cudaGetLastError();
    }
    BiasGeluForwardKernel<T><<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), n, cols);
    return cudaGetLastError();
  });
}

cudaError_t BiasGeluBackward(DType t, const void* dy, const void* x, const void* bias, void* du, int64_t n,
                             int64_t cols, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (Packable<T>(cols, {dy, x, bias, du})) {
      const int64_t packs = n / Pack<T>::kN;
      BiasGeluBackwardPackKernel<T><<<BlocksFor(packs, kThreads), kThreads, 0, stream>>>(
          static_cast<const Pack<T>*>(dy), static_cast<const Pack<T>*>(x), static_cast<const Pack<T>*>(bias),
          static_cast<Pack<T>*>(du), packs, cols / Pack<T>::kN);
      return cudaGetLastError();
    }
    BiasGeluBackwardKernel<T><<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(du), n,
        cols);
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
