#include "parallel/layers/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/weight_grad_store.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool LowPrecisionCpu(const at::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
}

// The same products as at::linear's backward — for 16-bit CPU tensors, fp32 GEMMs rounded once — with
// the weight's left to the current WeightGradStore when there is one. SplitLinear takes x and w,
// SplitLinearWithBias also b (an autograd function takes no undefined tensor).
at::Tensor SplitLinearForward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  ctx->save_for_backward({x, w});
  if (!LowPrecisionCpu(x)) return at::linear(x, w, b);
  at::Tensor y = at::linear(x.to(at::kFloat), w.to(at::kFloat)).to(x.scalar_type());
  return b.defined() ? y + b : y;
}

variable_list SplitLinearBackward(AutogradContext* ctx, const at::Tensor& grad, bool bias) {
  auto saved = ctx->get_saved_variables();
  at::Tensor x = saved[0], w = saved[1];
  const bool low = LowPrecisionCpu(x);
  const int64_t out = w.size(0), in = w.size(1);
  at::Tensor g = grad.reshape({-1, out});
  at::Tensor gx, gw, gb;
  if (ctx->needs_input_grad(0)) {
    gx = low ? at::mm(g.to(at::kFloat), w.to(at::kFloat)).view(x.sizes()).to(x.scalar_type())
             : at::mm(g, w).view(x.sizes());
  }
  if (bias && ctx->needs_input_grad(2)) gb = g.sum(0);
  if (ctx->needs_input_grad(1)) {
    auto compute = [g, x, w, low, in]() {
      if (low) return at::mm(g.to(at::kFloat).t(), x.reshape({-1, in}).to(at::kFloat)).to(w.scalar_type());
      // As at::linear's backward for a row-major weight: gᵀ·x in the weight's layout (a transposed
      // product would make every accumulation into .grad a strided add).
      return at::mm(g.t(), x.reshape({-1, in}));
    };
    if (WeightGradStore* store = WeightGradStore::current()) {
      store->Defer(w, std::move(compute), {g, x});
    } else {
      gw = compute();
    }
  }
  if (bias) return {gx, gw, gb};
  return {gx, gw};
}

struct SplitLinear : public torch::autograd::Function<SplitLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    return SplitLinearForward(ctx, x, w, at::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return SplitLinearBackward(ctx, grads[0], false);
  }
};

struct SplitLinearWithBias : public torch::autograd::Function<SplitLinearWithBias> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return SplitLinearForward(ctx, x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return SplitLinearBackward(ctx, grads[0], true);
  }
};

}  // namespace

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (const Fp8Options* fp8 = Fp8Scope::current(); fp8 != nullptr && Fp8Applies(x, w, *fp8)) {
    return Fp8Linear(x, w, b, *fp8);
  }
  if (WeightGradStore::splitting() && w.requires_grad() && at::GradMode::is_enabled()) {
    return b.defined() ? SplitLinearWithBias::apply(x, w, b) : SplitLinear::apply(x, w);
  }
  if (LowPrecisionCpu(x)) {
    at::Tensor y = SplitLinear::apply(x, w);  // No store is current: the weight's gradient at once.
    return b.defined() ? y + b : y;
  }
  return at::linear(x, w, b);
}

at::Tensor AddLinear(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w, double scale) {
  if (LowPrecisionCpu(x) || (WeightGradStore::splitting() && w.requires_grad()) || y.scalar_type() != x.scalar_type()) {
    return y + Linear(x, w) * scale;
  }
  const int64_t out = w.size(0);
  return at::addmm(y.reshape({-1, out}), x.reshape({-1, x.size(-1)}), (w * scale).t()).view(y.sizes());
}

}  // namespace tessera::parallel
