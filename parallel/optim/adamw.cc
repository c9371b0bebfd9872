#include "parallel/optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "kernels/cpu_adam.h"

namespace tessera::parallel {

void AdamW::Update(at::Tensor& param, const at::Tensor& grad, AdamWState& state, double lr, int64_t step,
                   bool decay) const {
  at::NoGradGuard no_grad;
  if (!state.exp_avg.defined()) {
    state.exp_avg = at::zeros_like(param);
    state.exp_avg_sq = at::zeros_like(param);
  }
  const bool fused = param.device().is_cpu() && param.scalar_type() == at::kFloat && param.is_contiguous() &&
                     grad.scalar_type() == at::kFloat && grad.is_contiguous() && state.exp_avg.is_contiguous() &&
                     state.exp_avg_sq.is_contiguous();
  if (fused) {
    // One vectorised pass instead of eight ATen kernels (kernels/cpu_adam.h, same arithmetic).
    kernels::AdamWStep s{lr, options_.beta1, options_.beta2, options_.eps, decay ? options_.weight_decay : 0.0, step};
    kernels::CpuAdamW(param.data_ptr<float>(), grad.data_ptr<float>(), state.exp_avg.data_ptr<float>(),
                      state.exp_avg_sq.data_ptr<float>(), param.numel(), s, simd_);
    return;
  }
  if (decay && options_.weight_decay != 0) param.mul_(1 - lr * options_.weight_decay);
  state.exp_avg.lerp_(grad, 1 - options_.beta1);
  state.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(step));
  const double step_size = lr / bias_correction1;
  at::Tensor denom = (state.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
  param.addcdiv_(state.exp_avg, denom, -step_size);
}

}  // namespace tessera::parallel
