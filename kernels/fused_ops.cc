#include "kernels/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/autograd_pointer.h"

namespace tessera::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const FusedKernels* KernelsOf(AutogradContext* ctx) { return LoadPointer<const FusedKernels>(ctx, "kernels"); }

struct LayerNormFn : public torch::autograd::Function<LayerNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, const FusedKernels* k) {
    at::Tensor xc = x.contiguous();
    LayerNormResult r = k->LayerNormForward(xc, weight.contiguous(), bias.contiguous(), eps);
    SavePointer(ctx, "kernels", k);
    ctx->save_for_backward({xc, weight, r.mean, r.rstd});
    return r.y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& weight = saved[1];
    LayerNormGrads g = KernelsOf(ctx)->LayerNormBackward(grads[0].contiguous(), saved[0], saved[2], saved[3],
                                                         weight.contiguous());
    return {g.dx, g.dweight.to(weight.scalar_type()), g.dbias.to(weight.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

struct BiasGeluFn : public torch::autograd::Function<BiasGeluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            const FusedKernels* k) {
    at::Tensor xc = x.contiguous();
    SavePointer(ctx, "kernels", k);
    ctx->save_for_backward({xc, bias});
    return k->BiasGeluForward(xc, bias.contiguous());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& bias = saved[1];
    at::Tensor dx = KernelsOf(ctx)->BiasGeluBackward(grads[0].contiguous(), saved[0], bias.contiguous());
    at::Tensor dbias = dx.reshape({-1, bias.numel()}).sum(0, /*keepdim=*/false, at::kFloat).to(bias.scalar_type());
    return {dx, dbias, at::Tensor()};
  }
};

struct CausalSoftmaxFn : public torch::autograd::Function<CausalSoftmaxFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& scores, double scale, const FusedKernels* k) {
    at::Tensor y = k->CausalSoftmaxForward(scores.contiguous(), scale);
    SavePointer(ctx, "kernels", k);
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor y = ctx->get_saved_variables()[0];
    at::Tensor dx = KernelsOf(ctx)->CausalSoftmaxBackward(grads[0].contiguous(), y,
                                                          ctx->saved_data["scale"].toDouble());
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

const FusedKernels* SelectKernels(const at::Tensor& like, bool fused) {
  if (!fused || !like.is_cuda()) return nullptr;
  return CudaKernels();
}

at::Tensor LayerNormWith(const FusedKernels& k, const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias, double eps) {
  return LayerNormFn::apply(x, weight, bias, eps, &k);
}

at::Tensor BiasGeluWith(const FusedKernels& k, const at::Tensor& x, const at::Tensor& bias) {
  return BiasGeluFn::apply(x, bias, &k);
}

at::Tensor CausalSoftmaxWith(const FusedKernels& k, const at::Tensor& scores, double scale) {
  return CausalSoftmaxFn::apply(scores, scale, &k);
}

at::Tensor LayerNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps, bool fused) {
  if (const FusedKernels* k = SelectKernels(x, fused)) return LayerNormWith(*k, x, weight, bias, eps);
  return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

at::Tensor BiasGelu(const at::Tensor& x, const at::Tensor& bias, bool fused) {
  if (const FusedKernels* k = SelectKernels(x, fused)) return BiasGeluWith(*k, x, bias);
  return at::gelu(x + bias);
}

at::Tensor CausalSoftmax(const at::Tensor& scores, double scale, bool fused) {
  if (const FusedKernels* k = SelectKernels(scores, fused)) return CausalSoftmaxWith(*k, scores, scale);
  const int64_t t = scores.size(-1);
  at::Tensor mask = at::ones({t, t}, scores.options().dtype(at::kBool)).triu(1);
  return at::softmax((scores * scale).masked_fill(mask, -INFINITY), -1);
}

}  // namespace tessera::kernels
