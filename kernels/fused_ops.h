// Fused operations with autograd, as the GPT uses them. Each call takes `fused`, the job's switch
// (train.fused_kernels): when it is on, the tensor is on a CUDA device and this binary carries the
// CUDA kernels (//kernels:cuda_kernels), the fused kernels run; otherwise the plain ATen operations
// run with ATen's own autograd, exactly as without this file (so CPU results do not change).
#ifndef TESSERA_KERNELS_FUSED_OPS_H_
#define TESSERA_KERNELS_FUSED_OPS_H_

#include <ATen/core/Tensor.h>

#include "kernels/fused_kernels.h"

namespace tessera::kernels {

// The kernels a call with these arguments runs: the CUDA ones, or null for plain ATen.
const FusedKernels* SelectKernels(const at::Tensor& like, bool fused);

// at::layer_norm over the last dimension.
at::Tensor LayerNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps, bool fused);
// at::gelu(x + bias) (erf form).
at::Tensor BiasGelu(const at::Tensor& x, const at::Tensor& bias, bool fused);
// softmax(scale · scores) over the last dimension with a causal mask; scores [..., T, T].
at::Tensor CausalSoftmax(const at::Tensor& scores, double scale, bool fused);

// The same operations as autograd functions over the given kernels (whatever the device): used
// above with the CUDA kernels, and by tests with CompositeKernels() to check the autograd wiring.
at::Tensor LayerNormWith(const FusedKernels& k, const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias, double eps);
at::Tensor BiasGeluWith(const FusedKernels& k, const at::Tensor& x, const at::Tensor& bias);
at::Tensor CausalSoftmaxWith(const FusedKernels& k, const at::Tensor& scores, double scale);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_FUSED_OPS_H_
