// AdamW with PyTorch's arithmetic (torch.optim.AdamW, single-tensor path): decoupled weight decay
// p ← p·(1 − lr·wd), m ← lerp(m, g, 1−β1), v ← β2·v + (1−β2)·g², p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε).
#ifndef TESSERA_PARALLEL_OPTIM_ADAMW_H_
#define TESSERA_PARALLEL_OPTIM_ADAMW_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kernels/cpu_adam.h"

namespace tessera::parallel {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// State of one parameter.
struct AdamWState {
  at::Tensor exp_avg;     // m
  at::Tensor exp_avg_sq;  // v
};

class AdamW {
 public:
  explicit AdamW(AdamWOptions options) : options_(options), simd_(kernels::DetectSimd()) {}

  // Updates `param` in place from `grad`; `step` counts from 1. `decay` selects weight decay.
  // Contiguous fp32 CPU tensors take the fused SIMD kernel (kernels/cpu_adam.h); others ATen ops.
  void Update(at::Tensor& param, const at::Tensor& grad, AdamWState& state, double lr, int64_t step,
              bool decay) const;

  // Updates every parameter. With `fused` on and fp32 CUDA tensors, one multi-tensor CUDA launch per
  // weight-decay group (kernels/fused_kernels.h); otherwise Update() per tensor.
  void UpdateAll(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 std::vector<AdamWState>& states, const std::vector<bool>& decay, double lr, int64_t step,
                 bool fused) const;

 private:
  AdamWOptions options_;
  kernels::Simd simd_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OPTIM_ADAMW_H_
