// Multi-tensor AdamW: one launch updates every fp32 tensor of a parameter group. Each thread block
// takes one chunk of kAdamWChunk elements of one tensor from the chunk table and applies PyTorch's
// AdamW arithmetic (see kernels/cpu_adam.h) to it in a single pass over p, g, m, v.
#include "kernels/cuda/common.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void MultiTensorAdamWKernel(const AdamWTensor* __restrict__ tensors, const int32_t* __restrict__ chunk_tensor,
                                       const int64_t* __restrict__ chunk_start, AdamWScalars s) {
  const AdamWTensor t = tensors[chunk_tensor[blockIdx.x]];
  const int64_t start = chunk_start[blockIdx.x];
  int64_t end = start + kAdamWChunk;
  if (end > t.n) end = t.n;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float g = t.grad[i];
    float p = t.param[i] * s.decay;
    const float m = fmaf(s.one_minus_beta1, g - t.exp_avg[i], t.exp_avg[i]);  // lerp(m, g, 1 − β1)
    const float v = fmaf(s.one_minus_beta2 * g, g, t.exp_avg_sq[i] * s.beta2);
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
    p -= s.step_size * m / denom;
    t.param[i] = p;
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
  }
}

}  // namespace

cudaError_t MultiTensorAdamW(const AdamWTensor* tensors, const int32_t* chunk_tensor, const int64_t* chunk_start,
                             int64_t chunks, AdamWScalars s, cudaStream_t stream) {
  if (chunks == 0) return cudaSuccess;
  if (chunks > 0x7fffffffLL) return cudaErrorInvalidValue;
  MultiTensorAdamWKernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(tensors, chunk_tensor, chunk_start,
                                                                                  s);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
