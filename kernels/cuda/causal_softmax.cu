// Scaled, causally masked softmax over attention scores [batch, T, T]: one thread block per row; the
// masked part of each row is written as zeros and never read.
#include "kernels/cuda/common.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void CausalSoftmaxForwardKernel(const T* __restrict__ s, T* __restrict__ y, int64_t t_len, float scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;          // (b, i) flattened.
  const int64_t valid = row % t_len + 1;   // Keys 0..i.
  const T* sr = s + row * t_len;
  T* yr = y + row * t_len;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, scale * ToFloat(sr[j]));
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(scale * ToFloat(sr[j]) - m);
  const float inv = 1.0f / BlockSum(sum, scratch);
  for (int64_t j = threadIdx.x; j < t_len; j += blockDim.x) {
    yr[j] = FromFloat<T>(j < valid ? expf(scale * ToFloat(sr[j]) - m) * inv : 0.0f);
  }
}

template <typename T>
__global__ void CausalSoftmaxBackwardKernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                                            int64_t t_len, float scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t valid = row % t_len + 1;
  const T* dyr = dy + row * t_len;
  const T* yr = y + row * t_len;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) dot += ToFloat(dyr[j]) * ToFloat(yr[j]);
  dot = BlockSum(dot, scratch);
  T* dxr = dx + row * t_len;
  for (int64_t j = threadIdx.x; j < t_len; j += blockDim.x) {
    dxr[j] = FromFloat<T>(j < valid ? scale * ToFloat(yr[j]) * (ToFloat(dyr[j]) - dot) : 0.0f);
  }
}

}  // namespace

cudaError_t CausalSoftmaxForward(DType t, const void* scores, void* y, int64_t batch, int64_t t_len, float scale,
                                 cudaStream_t stream) {
  const int64_t rows = batch * t_len;
  if (rows == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CausalSoftmaxForwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(scores), static_cast<T*>(y), t_len, scale);
    return cudaGetLastError();
  });
}

cudaError_t CausalSoftmaxBackward(DType t, const void* dy, const void* y, void* dx, int64_t batch, int64_t t_len,
                                  float scale, cudaStream_t stream) {
  const int64_t rows = batch * t_len;
  if (rows == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CausalSoftmaxBackwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), t_len, scale);
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
