#include "parallel/optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace tessera::parallel {

void AdamW::Update(at::Tensor& param, const at::Tensor& grad, AdamWState& state, double lr, int64_t step,
                   bool decay) const {
  at::NoGradGuard no_grad;
  if (!state.exp_avg.defined()) {
    state.exp_avg = at::zeros_like(param);
    state.exp_avg_sq = at::zeros_like(param);
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
