// FusedKernels: the forward and backward contracts of tessera's fused operations, with two
// implementations: the LibTorch composite (any device, the reference and the fallback) and the CUDA
// kernels of kernels/cuda (present only in binaries that link //kernels:cuda_kernels, which registers
// them at start-up). kernels/fused_ops.h builds autograd operations on top and picks one.
#ifndef TESSERA_KERNELS_FUSED_KERNELS_H_
#define TESSERA_KERNELS_FUSED_KERNELS_H_

#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kernels/cpu_adam.h"

namespace tessera::kernels {

struct LayerNormResult {
  at::Tensor y;     // Like x.
  at::Tensor mean;  // fp32 [rows]
  at::Tensor rstd;  // fp32 [rows]: 1 / sqrt(biased variance + eps)
};

struct LayerNormGrads {
  at::Tensor dx;       // Like x.
  at::Tensor dweight;  // fp32 [h]
  at::Tensor dbias;    // fp32 [h]
};

struct SoftmaxStats {
  at::Tensor max;      // fp32 [rows]: the row's largest logit
  at::Tensor sum_exp;  // fp32 [rows]: Σ_j exp(x_j − max)
};

// A tensor quantised to FP8 in both layouts, with its one scale (QuantizeFp8TensorwiseTransposed).
struct Fp8Transposed {
  at::Tensor data, data_t, inv_scale;
};

class FusedKernels {
 public:
  virtual ~FusedKernels() = default;
  virtual const char* name() const = 0;

  // Layer norm over the last dimension of x (contiguous, [..., h]) with weight and bias [h].
  virtual LayerNormResult LayerNormForward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                           double eps) const = 0;
  virtual LayerNormGrads LayerNormBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                           const at::Tensor& rstd, const at::Tensor& weight) const = 0;

  // gelu(x + bias) with GELU's erf form; x [..., f], bias [f]. Backward returns the gradient of x
  // (the bias gradient is its sum over all leading dimensions).
  virtual at::Tensor BiasGeluForward(const at::Tensor& x, const at::Tensor& bias) const = 0;
  virtual at::Tensor BiasGeluBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& bias) const = 0;

  // softmax(scale · scores) over the last dimension with a causal mask (key j > query i gets
  // probability 0); scores [..., T, T].
  virtual at::Tensor CausalSoftmaxForward(const at::Tensor& scores, double scale) const = 0;
  virtual at::Tensor CausalSoftmaxBackward(const at::Tensor& dy, const at::Tensor& y, double scale) const = 0;

  // Cross-entropy over rows of logits [rows, v] (contiguous, float/half/bfloat16; v may be one
  // rank's slice of the vocabulary): the forward pass returns each row's softmax statistics, from
  // which the caller forms lse = max + log(sum_exp) (after reducing over vocabulary slices). The
  // backward pass returns dlogits = dloss_r · (exp(x − lse_r) − [j == target_r]) in the logits'
  // dtype; target int64 [rows] holds a local column or −1 (the target is in another slice); lse and
  // dloss fp32 [rows]. Nothing of size rows × v is kept between the two.
  virtual SoftmaxStats CrossEntropyForward(const at::Tensor& logits) const = 0;
  virtual at::Tensor CrossEntropyBackward(const at::Tensor& logits, const at::Tensor& lse, const at::Tensor& target,
                                          const at::Tensor& dloss) const = 0;

  // Tensorwise FP8 quantisation with the current amax (torchao's dynamic scaling): scale = fp8_max /
  // max(max |x|, 1e-12) computed in double and kept as fp32; data = x·scale (fp32) saturated to
  // ±fp8_max and rounded to nearest even in `fp8` (Float8_e4m3fn or Float8_e5m2), shaped as x.
  // Returns {data, inv_scale} with inv_scale the fp32 scalar tensor 1/scale. x: fp32/fp16/bf16.
  virtual std::pair<at::Tensor, at::Tensor> QuantizeFp8Tensorwise(const at::Tensor& x, at::ScalarType fp8) const = 0;
  // The same quantisation of a 2-D x [r, c], returning the data twice: `data` [r, c] and `data_t` [c, r],
  // both contiguous (data_t equals data.t(), byte for byte), and one inv_scale: the two layouts FP8 GEMMs
  // take (cuBLASLt's need the contraction dimension contiguous in both operands).
  virtual Fp8Transposed QuantizeFp8TensorwiseTransposed(const at::Tensor& x, at::ScalarType fp8) const = 0;
  // AdamW (PyTorch's arithmetic, kernels/cpu_adam.h) over every tensor of one parameter group, in
  // place. All tensors fp32 and contiguous; grads[i], exp_avgs[i], exp_avg_sqs[i] shaped as params[i].
  virtual void AdamW(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                     const AdamWStep& step) const = 0;
};

// LibTorch ops only; works on every device and dtype.
const FusedKernels& CompositeKernels();

// The CUDA kernels, or null when this binary was built without them.
const FusedKernels* CudaKernels();

// Called once by //kernels:cuda_kernels at static initialisation.
void RegisterCudaKernels(const FusedKernels* kernels);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_FUSED_KERNELS_H_
