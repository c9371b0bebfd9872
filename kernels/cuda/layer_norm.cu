// Fused layer norm: one thread block per row for the forward pass and for dx (rows up to 4096 bf16 /
// 2048 fp32 elements held in registers and moved in 16-byte packs, longer or unaligned rows read
// element by element); the weight and bias
// gradients are column sums reduced in two stages (per-block partials here, summed by the caller).
#include <initializer_list>

#include "kernels/cuda/common.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kPartialRowsPerBlock = 128;  // Rows summed by one block of the dw/db kernel.

template <typename T>
__global__ void LayerNormForwardKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                       T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                       int64_t h, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * h;
  T* yr = y + row * h;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) sum += ToFloat(xr[j]);
  const float mu = BlockSum(sum, scratch) / static_cast<float>(h);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float d = ToFloat(xr[j]) - mu;
    sq += d * d;
  }
  const float var = BlockSum(sq, scratch) / static_cast<float>(h);
  const float rs = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    yr[j] = FromFloat<T>((ToFloat(xr[j]) - mu) * rs * ToFloat(w[j]) + ToFloat(b[j]));
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with g = dy · w and x̂ = (x − mean) · rstd.
template <typename T>
__global__ void LayerNormBackwardDxKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          const T* __restrict__ w, T* __restrict__ dx, int64_t h) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * h;
  const T* dyr = dy + row * h;
  const float mu = mean[row];
  const float rs = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = ToFloat(dyr[j]) * ToFloat(w[j]);
    const float xh = (ToFloat(xr[j]) - mu) * rs;
    sum_g += g;
    sum_gx += g * xh;
  }
  const float mean_g = BlockSum(sum_g, scratch) / static_cast<float>(h);
  const float mean_gx = BlockSum(sum_gx, scratch) / static_cast<float>(h);
  T* dxr = dx + row * h;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = ToFloat(dyr[j]) * ToFloat(w[j]);
    const float xh = (ToFloat(xr[j]) - mu) * rs;
    dxr[j] = FromFloat<T>(rs * (g - mean_g - xh * mean_gx));
  }
}

// Block (32, 8) sums columns [32·bx, 32·bx + 32) over rows [128·by, 128·by + 128):
// dw_partial[by, col] = Σ dy · x̂, db_partial[by, col] = Σ dy. Each warp reads 32 adjacent columns.
template <typename T>
__global__ void LayerNormBackwardParamsKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              float* __restrict__ dw_partial, float* __restrict__ db_partial,
                                              int64_t rows, int64_t h) {
  __shared__ float sw[8][33];
  __shared__ float sb[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kPartialRowsPerBlock;
  float acc_w = 0.0f, acc_b = 0.0f;
  if (col < h) {
    for (int64_t r = row0 + threadIdx.y; r < rows && r < row0 + kPartialRowsPerBlock; r += blockDim.y) {
      const float g = ToFloat(dy[r * h + col]);
      acc_w += g * (ToFloat(x[r * h + col]) - mean[r]) * rstd[r];
      acc_b += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && col < h) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    dw_partial[static_cast<int64_t>(blockIdx.y) * h + col] = tw;
    db_partial[static_cast<int64_t>(blockIdx.y) * h + col] = tb;
  }
}

// Rows that fit in registers (h a multiple of the pack width, at most kPackThreads · kMaxPacks packs,
// pointers 16-byte aligned): one block of kPackThreads per row, each thread holding up to kMaxPacks
// packs of 16 bytes, so x (and dy) are read from global memory once, with 16-byte loads.
constexpr int kPackThreads = 128;
constexpr int kMaxPacks = 4;

template <typename T>
__global__ void LayerNormForwardPackKernel(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w,
                                           const Pack<T>* __restrict__ b, Pack<T>* __restrict__ y,
                                           float* __restrict__ mean, float* __restrict__ rstd, int64_t h_packs,
                                           float eps) {
  constexpr int N = Pack<T>::kN;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const Pack<T>* xr = x + row * h_packs;
  const float h = static_cast<float>(h_packs * N);
  float v[kMaxPacks][N];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = threadIdx.x + k * kPackThreads;
    if (p < h_packs) {
      const Pack<T> pk = xr[p];
#pragma unroll
      for (int i = 0; i < N; ++i) sum += (v[k][i] = ToFloat(pk.v[i]));
    }
  }
  const float mu = BlockSum(sum, scratch) / h;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    if (threadIdx.x + k * kPackThreads < h_packs) {
#pragma unroll
      for (int i = 0; i < N; ++i) sq += (v[k][i] - mu) * (v[k][i] - mu);
    }
  }
  const float rs = 1.0f / sqrtf(BlockSum(sq, scratch) / h + eps);
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = threadIdx.x + k * kPackThreads;
    if (p < h_packs) {
      const Pack<T> wp = w[p], bp = b[p];
      Pack<T> out;
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = FromFloat<T>((v[k][i] - mu) * rs * ToFloat(wp.v[i]) + ToFloat(bp.v[i]));
      y[row * h_packs + p] = out;
    }
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void LayerNormBackwardDxPackKernel(const Pack<T>* __restrict__ dy, const Pack<T>* __restrict__ x,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const Pack<T>* __restrict__ w, Pack<T>* __restrict__ dx,
                                              int64_t h_packs) {
  constexpr int N = Pack<T>::kN;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float mu = mean[row];
  const float rs = rstd[row];
  const float h = static_cast<float>(h_packs * N);
  float g[kMaxPacks][N], xh[kMaxPacks][N];
  float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = threadIdx.x + k * kPackThreads;
    if (p < h_packs) {
      const Pack<T> dp = dy[row * h_packs + p], xp = x[row * h_packs + p], wp = w[p];
#pragma unroll
      for (int i = 0; i < N; ++i) {
        g[k][i] = ToFloat(dp.v[i]) * ToFloat(wp.v[i]);
        xh[k][i] = (ToFloat(xp.v[i]) - mu) * rs;
        sum_g += g[k][i];
        sum_gx += g[k][i] * xh[k][i];
      }
    }
  }
  const float mean_g = BlockSum(sum_g, scratch) / h;
  const float mean_gx = BlockSum(sum_gx, scratch) / h;
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = threadIdx.x + k * kPackThreads;
    if (p < h_packs) {
      Pack<T> out;
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = FromFloat<T>(rs * (g[k][i] - mean_g - xh[k][i] * mean_gx));
      dx[row * h_packs + p] = out;
    }
  }
}

template <typename T>
bool RowsInRegisters(int64_t h, std::initializer_list<const void*> pointers) {
  if (h % Pack<T>::kN != 0 || h / Pack<T>::kN > static_cast<int64_t>(kPackThreads) * kMaxPacks) return false;
  for (const void* p : pointers) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

}  // namespace

int64_t LayerNormPartialRows(int64_t rows) { return (rows + kPartialRowsPerBlock - 1) / kPartialRowsPerBlock; }

cudaError_t LayerNormForward(DType t, const void* x, const void* w, const void* b, void* y, float* mean,
                             float* rstd, int64_t rows, int64_t h, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (RowsInRegisters<T>(h, {x, w, b, y})) {
      LayerNormForwardPackKernel<T><<<static_cast<unsigned>(rows), kPackThreads, 0, stream>>>(
          static_cast<const Pack<T>*>(x), static_cast<const Pack<T>*>(w), static_cast<const Pack<T>*>(b),
          static_cast<Pack<T>*>(y), mean, rstd, h / Pack<T>::kN, eps);
      return cudaGetLastError();
    }
    LayerNormForwardKernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), mean,
        rstd, h, eps);
    return cudaGetLastError();
  });
}

cudaError_t LayerNormBackward(DType t, const void* dy, const void* x, const float* mean, const float* rstd,
                              const void* w, void* dx, float* dw_partial, float* db_partial, int64_t rows,
                              int64_t h, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return Dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (RowsInRegisters<T>(h, {dy, x, w, dx})) {
      LayerNormBackwardDxPackKernel<T><<<static_cast<unsigned>(rows), kPackThreads, 0, stream>>>(
          static_cast<const Pack<T>*>(dy), static_cast<const Pack<T>*>(x), mean, rstd,
          static_cast<const Pack<T>*>(w), static_cast<Pack<T>*>(dx), h / Pack<T>::kN);
    } else {
      LayerNormBackwardDxKernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, static_cast<const T*>(w),
          static_cast<T*>(dx), h);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>((h + 31) / 32), static_cast<unsigned>(LayerNormPartialRows(rows)));
    LayerNormBackwardParamsKernel<T><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, dw_partial, db_partial, rows, h);
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
