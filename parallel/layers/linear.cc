#include "parallel/layers/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LowPrecisionCpuLinear : public torch::autograd::Function<LowPrecisionCpuLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return at::linear(x.to(at::kFloat), w.to(at::kFloat)).to(x.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    at::Tensor g = grads[0].to(at::kFloat).reshape({-1, w.size(0)});
    at::Tensor gx = at::mm(g, w.to(at::kFloat)).view(x.sizes()).to(x.scalar_type());
    at::Tensor gw = at::mm(g.t(), x.reshape({-1, w.size(1)}).to(at::kFloat)).to(w.scalar_type());
    return {gx, gw};
  }
};

}  // namespace

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (x.device().is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf)) {
    at::Tensor y = LowPrecisionCpuLinear::apply(x, w);
    return b.defined() ? y + b : y;
  }
  return at::linear(x, w, b);
}

}  // namespace tessera::parallel
