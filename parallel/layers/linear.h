// y = x·Wᵀ (+ b), the one linear every layer uses: at::linear, except for 16-bit tensors on the CPU,
// which go through fp32 GEMMs (ATen's CPU GEMMs for bf16/fp16 without native hardware support are up
// to ~70× slower than fp32; measured on the weight gradient's transposed product). Inputs are saved in
// their 16-bit dtype; outputs and gradients are rounded to it once, as a GEMM with fp32 accumulation
// would. While WeightGradStore::splitting() (a zero-bubble pipeline's step), a linear whose weight
// takes a gradient is built so that its backward can leave the weight-gradient GEMM to the current
// WeightGradStore (weight_grad_store.h); the products are the same. Inside an Fp8Scope, a linear that
// Fp8Applies to runs as Fp8Linear (fp8_linear.h).
#ifndef TESSERA_PARALLEL_LAYERS_LINEAR_H_
#define TESSERA_PARALLEL_LAYERS_LINEAR_H_

#include <ATen/core/Tensor.h>

namespace tessera::parallel {

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = at::Tensor());

// y + scale·x·wᵀ (a LoRA adapter's B product added to its linear's output y; y's last dimension is w's rows).
// Where the GEMM runs in the tensors' own dtype (anything but 16-bit on the CPU) and no zero-bubble step is
// splitting, one addmm with the scale folded into w: no passes over y's size for the scale and the sum.
// Otherwise y + Linear(x, w)·scale (16-bit CPU GEMMs in fp32; w's weight gradient left to the store).
at::Tensor AddLinear(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w, double scale);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_LINEAR_H_
