// y = x·Wᵀ (+ b), the one linear every layer uses: at::linear, except for 16-bit tensors on the CPU,
// which go through fp32 GEMMs (ATen's CPU GEMMs for bf16/fp16 without native hardware support are up
// to ~70× slower than fp32; measured on the weight gradient's transposed product). Inputs are saved in
// their 16-bit dtype; outputs and gradients are rounded to it once, as a GEMM with fp32 accumulation
// would. While WeightGradStore::splitting() (a zero-bubble pipeline's step), a linear whose weight
// takes a gradient is built so that its backward can leave the weight-gradient GEMM to the current
// WeightGradStore (weight_grad_store.h); the products are the same.
#ifndef TESSERA_PARALLEL_LAYERS_LINEAR_H_
#define TESSERA_PARALLEL_LAYERS_LINEAR_H_

#include <ATen/core/Tensor.h>

namespace tessera::parallel {

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = at::Tensor());

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_LAYERS_LINEAR_H_
