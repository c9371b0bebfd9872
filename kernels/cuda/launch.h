// Launchers of tessera's fused CUDA kernels. Plain pointers and streams, no LibTorch, so that nvcc
// never parses LibTorch's headers; the at::Tensor glue is kernels/cuda_kernels.cc.
//
// Contracts common to all: row-major contiguous arrays; `T` is float, __half or __nv_bfloat16
// (selected by DType); arithmetic in fp32; every launcher returns the launch's cudaError_t
// (cudaSuccess or the error of cudaGetLastError right after the launch) and never synchronises.
#ifndef TESSERA_KERNELS_CUDA_LAUNCH_H_
#define TESSERA_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::kernels::cuda {

enum class DType { kFloat, kHalf, kBFloat16 };

// y[r, :] = (x[r, :] − mean_r) · rstd_r · w + b over rows of length h; mean and rstd (fp32, one per
// row) are saved for the backward pass. rstd_r = 1 / sqrt(var_r + eps), var the biased variance.
cudaError_t LayerNormForward(DType t, const void* x, const void* w, const void* b, void* y, float* mean,
                             float* rstd, int64_t rows, int64_t h, float eps, cudaStream_t stream);

// dx (same type as x) and the per-block partial sums of dw and db: dw_partial, db_partial are fp32
// [LayerNormPartialRows(rows), h], to be summed over dim 0 by the caller.
cudaError_t LayerNormBackward(DType t, const void* dy, const void* x, const float* mean, const float* rstd,
                              const void* w, void* dx, float* dw_partial, float* db_partial, int64_t rows,
                              int64_t h, cudaStream_t stream);
int64_t LayerNormPartialRows(int64_t rows);

// y = gelu(x + bias[col]) with GELU's erf form; x [rows, cols] flattened, bias [cols].
cudaError_t BiasGeluForward(DType t, const void* x, const void* bias, void* y, int64_t n, int64_t cols,
                            cudaStream_t stream);
// du = dy · gelu'(x + bias[col]) (the gradient of x; the caller sums du over rows for the bias).
cudaError_t BiasGeluBackward(DType t, const void* dy, const void* x, const void* bias, void* du, int64_t n,
                             int64_t cols, cudaStream_t stream);

// Rows of length t_len taken from scores [batch, t_len, t_len]: row (b, i) gets
// y[j] = softmax_j(scale · s[j]) over j <= i and y[j] = 0 for j > i (causal mask).
cudaError_t CausalSoftmaxForward(DType t, const void* scores, void* y, int64_t batch, int64_t t_len, float scale,
                                 cudaStream_t stream);
// dx[j] = scale · y[j] · (dy[j] − Σ_k dy[k]·y[k]); zero where masked.
cudaError_t CausalSoftmaxBackward(DType t, const void* dy, const void* y, void* dx, int64_t batch, int64_t t_len,
                                  float scale, cudaStream_t stream);

// Per row r of logits [rows, v]: max[r] = max_j x[r, j] and sum_exp[r] = Σ_j exp(x[r, j] − max[r])
// (fp32; −inf and 0 for a row of −inf). One read of the logits.
cudaError_t CrossEntropyForward(DType t, const void* logits, float* max, float* sum_exp, int64_t rows, int64_t v,
                                cudaStream_t stream);
// dlogits[r, j] = dloss[r] · (exp(x[r, j] − lse[r]) − [j == target[r]]) in the logits' type; target[r]
// is a column of this row or −1 (none). lse and dloss fp32 [rows], target int64 [rows].
cudaError_t CrossEntropyBackward(DType t, const void* logits, const float* lse, const int64_t* target,
                                 const float* dloss, void* dlogits, int64_t rows, int64_t v, cudaStream_t stream);

// Tensorwise FP8 quantisation with the current amax (n > 0 elements of x): amax[0] = max |x| (fp32
// scratch, overwritten), scale = fp8_max / max(amax, 1e-12) computed in double and rounded to float,
// out[i] = x[i]·scale (fp32) saturated to ±fp8_max and rounded to nearest even in e4m3 (448) or, with
// e5m2, e5m2 (57344); inv_scale[0] = 1 / scale (fp32). out: n bytes.
cudaError_t QuantizeFp8Tensorwise(DType t, const void* x, void* out, float* amax, float* inv_scale, int64_t n,
                                  bool e5m2, cudaStream_t stream);
// The same quantisation of x [rows, cols] (row-major), writing out [rows, cols] and its transpose
// out_t [cols, rows], both row-major, with one scale. Only where CanQuantizeFp8Transposed: fp16 or bf16,
// rows and cols positive multiples of 16, x, out and out_t 16-byte aligned; else cudaErrorInvalidValue.
bool CanQuantizeFp8Transposed(DType t, const void* x, const void* out, const void* out_t, int64_t rows, int64_t cols);
cudaError_t QuantizeFp8TensorwiseTransposed(DType t, const void* x, void* out, void* out_t, float* amax,
                                            float* inv_scale, int64_t rows, int64_t cols, bool e5m2,
                                            cudaStream_t stream);

// One fp32 tensor of a multi-tensor AdamW launch.
struct AdamWTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
};

// Scalars of one AdamW step, computed in double on the host and rounded to float once (as ATen does).
struct AdamWScalars {
  float decay;                  // 1 − lr·weight_decay
  float one_minus_beta1;        // 1 − β1 (lerp weight)
  float beta2;
  float one_minus_beta2;
  float step_size;              // lr / (1 − β1ᵗ)
  float bias_correction2_sqrt;  // √(1 − β2ᵗ)
  float eps;
};

// Elements per chunk of the multi-tensor AdamW: each thread block updates one chunk.
constexpr int64_t kAdamWChunk = 65536;

// The chunk table a multi-tensor launch reads: for chunk c, chunk_tensor[c] indexes `tensors` and
// chunk_start[c] is its first element. Both tables and `tensors` must be in device memory.
cudaError_t MultiTensorAdamW(const AdamWTensor* tensors, const int32_t* chunk_tensor, const int64_t* chunk_start,
                             int64_t chunks, AdamWScalars s, cudaStream_t stream);

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_LAUNCH_H_
