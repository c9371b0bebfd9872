#include "parallel/optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "kernels/cpu_adam.h"
#include "kernels/fused_kernels.h"
#include "kernels/fused_ops.h"

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

void AdamW::UpdateAll(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      std::vector<AdamWState>& states, const std::vector<bool>& decay, double lr, int64_t step,
                      bool fused) const {
  const kernels::FusedKernels* k = params.empty() ? nullptr : kernels::SelectKernels(params[0], fused);
  bool all_fp32 = k != nullptr;
  for (size_t i = 0; all_fp32 && i < params.size(); ++i) {
    all_fp32 = params[i].scalar_type() == at::kFloat && params[i].is_contiguous() && grads[i].is_contiguous() &&
               params[i].device() == params[0].device();
  }
  if (!all_fp32) {
    for (size_t i = 0; i < params.size(); ++i) Update(params[i], grads[i], states[i], lr, step, decay[i]);
    return;
  }
  at::NoGradGuard no_grad;
  for (bool with_decay : {true, false}) {
    std::vector<at::Tensor> p, g, m, v;
    for (size_t i = 0; i < params.size(); ++i) {
      if (decay[i] != with_decay) continue;
      if (!states[i].exp_avg.defined()) {
        states[i].exp_avg = at::zeros_like(params[i]);
        states[i].exp_avg_sq = at::zeros_like(params[i]);
      }
      p.push_back(params[i]), g.push_back(grads[i]), m.push_back(states[i].exp_avg), v.push_back(states[i].exp_avg_sq);
    }
    kernels::AdamWStep s{lr, options_.beta1, options_.beta2, options_.eps,
                         with_decay ? options_.weight_decay : 0.0, step};
    k->AdamW(p, g, m, v, s);
  }
}

}  // namespace tessera::parallel
