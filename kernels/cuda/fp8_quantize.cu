// Tensorwise FP8 quantisation (launch.h: QuantizeFp8Tensorwise): one pass for the amax (16-byte loads,
// a block max, one atomic per block), one pass that scales, saturates and rounds to e4m3 / e5m2
// (16-byte loads, 8- or 4-byte stores). QuantizeFp8TensorwiseTransposed's cast pass also writes the
// transpose, through a 64 x 64 tile in shared memory (16-byte loads, 8-byte row stores, 16-byte column
// stores): the layouts cuBLASLt's FP8 GEMMs take, without a separate transposing copy. The scale is
// recomputed by every thread from the amax on the device (no host round trip), in double and rounded to
// float as torchao and the composite do.
#include <cuda_fp8.h>

#include <algorithm>
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


constexpr int kTile = 64;         // A tile is kTile x kTile elements, kThreads threads.
constexpr int kTilePitch = kTile + 4;  // Shared-memory row pitch in bytes: spreads a column's bytes over banks.

// One 64 x 64 tile of x [rows, cols] (2-byte T; rows and cols multiples of 16, x, out and out_t 16-byte
// aligned): out [rows, cols] and out_t [cols, rows] get its bytes. Grid: x over column tiles, y (strided)
// over row tiles.
template <typename T, bool kE5m2>
__global__ void CastTransposeKernel(const T* __restrict__ x, uint8_t* __restrict__ out, uint8_t* __restrict__ out_t,
                                    const float* amax, float* inv_scale, int64_t rows, int64_t cols) {
  static_assert(sizeof(T) == 2, "8 elements per 16-byte load");
  __shared__ uint8_t tile[kTile][kTilePitch];
  const float max = kE5m2 ? 57344.0f : 448.0f;
  const double a = *amax;
  const float scale = a != a ? NAN : static_cast<float>(static_cast<double>(max) / fmax(a, 1e-12));
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inv_scale = 1.0f / scale;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  for (int64_t ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {
    const int64_t r0 = ty * kTile;
    // Rows: 64 rows x 8 packs of 8 elements; two packs per thread.
    for (int p = threadIdx.x; p < kTile * 8; p += blockDim.x) {
      const int r = p / 8, c = (p % 8) * 8;
      if (r0 + r >= rows || c0 + c >= cols) continue;  // cols % 16 == 0: a pack is wholly in or out.
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(x + (r0 + r) * cols + c0 + c);
      uint8_t b[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) b[j] = ToFp8<kE5m2>(ToFloat(in.v[j]) * scale, max);
      uint2 packed;
      memcpy(&packed, b, 8);
      *reinterpret_cast<uint2*>(out + (r0 + r) * cols + c0 + c) = packed;
#pragma unroll
      for (int j = 0; j < 8; ++j) tile[r][c + j] = b[j];
    }
    __syncthreads();
    // Columns: 64 columns x 4 runs of 16 rows; one 16-byte store per thread.
    for (int p = threadIdx.x; p < kTile * 4; p += blockDim.x) {
      const int c = p / 4, r = (p % 4) * 16;
      if (c0 + c >= cols || r0 + r >= rows) continue;  // rows % 16 == 0: a run is wholly in or out.
      alignas(16) uint8_t b[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) b[j] = tile[r + j][c];
      *reinterpret_cast<uint4*>(out_t + (c0 + c) * rows + r0 + r) = *reinterpret_cast<const uint4*>(b);
    }
    __syncthreads();  // The tile is rewritten by the next row tile.
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

bool CanQuantizeFp8Transposed(DType t, const void* x, const void* out, const void* out_t, int64_t rows, int64_t cols) {
  return t != DType::kFloat && rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0 && Aligned16(x) &&
         Aligned16(out) && Aligned16(out_t);
}

cudaError_t QuantizeFp8TensorwiseTransposed(DType t, const void* x, void* out, void* out_t, float* amax,
                                            float* inv_scale, int64_t rows, int64_t cols, bool e5m2,
                                            cudaStream_t stream) {
  if (!CanQuantizeFp8Transposed(t, x, out, out_t, rows, cols)) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (e != cudaSuccess) return e;
  const int64_t n = rows * cols;
  const int amax_blocks = BlocksFor(n, kThreads, 132LL * 16);
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>((rows + kTile - 1) / kTile, 65535)));
  auto launch = [&](auto* tag) -> cudaError_t {
    using T = std::remove_pointer_t<decltype(tag)>;
    AmaxKernel<T><<<amax_blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), n, true, amax);
    const auto* in = static_cast<const T*>(x);
    auto* rows_out = static_cast<uint8_t*>(out);
    auto* cols_out = static_cast<uint8_t*>(out_t);
    if (e5m2) {
      CastTransposeKernel<T, true><<<grid, kThreads, 0, stream>>>(in, rows_out, cols_out, amax, inv_scale, rows, cols);
    } else {
      CastTransposeKernel<T, false><<<grid, kThreads, 0, stream>>>(in, rows_out, cols_out, amax, inv_scale, rows, cols);
    }
    return cudaGetLastError();
  };
  if (t == DType::kHalf) return launch(static_cast<__half*>(nullptr));
  return launch(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace tessera::kernels::cuda
