// The LibTorch composite of every fused contract: the fallback when no CUDA kernel applies, and the
// reference the CUDA kernels are tested against.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <atomic>
#include <cmath>

#include "kernels/fused_kernels.h"

namespace tessera::kernels {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

at::Tensor CausalMask(int64_t t, const at::Device& device) {
  return at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(device)).triu(1);
}

class Composite final : public FusedKernels {
 public:
  const char* name() const override { return "composite"; }

  LayerNormResult LayerNormForward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                   double eps) const override {
    at::NoGradGuard no_grad;
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor mean = xf.mean(-1, /*keepdim=*/true);
    at::Tensor var = (xf - mean).square().mean(-1, /*keepdim=*/true);
    at::Tensor rstd = (var + eps).rsqrt();
    at::Tensor y = (xf - mean) * rstd * weight.to(at::kFloat) + bias.to(at::kFloat);
    return {y.to(x.scalar_type()), mean.reshape({-1}), rstd.reshape({-1})};
  }

  LayerNormGrads LayerNormBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                   const at::Tensor& rstd, const at::Tensor& weight) const override {
    at::NoGradGuard no_grad;
    const int64_t h = x.size(-1);
    at::Tensor xf = x.to(at::kFloat).reshape({-1, h});
    at::Tensor dyf = dy.to(at::kFloat).reshape({-1, h});
    at::Tensor m = mean.reshape({-1, 1});
    at::Tensor rs = rstd.reshape({-1, 1});
    at::Tensor xhat = (xf - m) * rs;
    at::Tensor g = dyf * weight.to(at::kFloat);
    at::Tensor dx = rs * (g - g.mean(-1, true) - xhat * (g * xhat).mean(-1, true));
    return {dx.reshape(x.sizes()).to(x.scalar_type()), (dyf * xhat).sum(0), dyf.sum(0)};
  }

  at::Tensor BiasGeluForward(const at::Tensor& x, const at::Tensor& bias) const override {
    at::NoGradGuard no_grad;
    return at::gelu(x + bias);
  }

  at::Tensor BiasGeluBackward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& bias) const override {
    at::NoGradGuard no_grad;
    at::Tensor u = (x + bias).to(at::kFloat);
    at::Tensor cdf = 0.5 * (1.0 + at::erf(u * kInvSqrt2));
    at::Tensor pdf = kInvSqrt2Pi * at::exp(-0.5 * u * u);
    return (dy.to(at::kFloat) * (cdf + u * pdf)).to(x.scalar_type());
  }

  at::Tensor CausalSoftmaxForward(const at::Tensor& scores, double scale) const override {
    at::NoGradGuard no_grad;
    const int64_t t = scores.size(-1);
    at::Tensor s = (scores.to(at::kFloat) * scale).masked_fill(CausalMask(t, scores.device()), -INFINITY);
    return at::softmax(s, -1).to(scores.scalar_type());
  }

  at::Tensor CausalSoftmaxBackward(const at::Tensor& dy, const at::Tensor& y, double scale) const override {
    at::NoGradGuard no_grad;
    at::Tensor yf = y.to(at::kFloat);
    at::Tensor dyf = dy.to(at::kFloat);
    at::Tensor dot = (dyf * yf).sum(-1, /*keepdim=*/true);
    return (scale * yf * (dyf - dot)).to(y.scalar_type());
  }

  SoftmaxStats CrossEntropyForward(const at::Tensor& logits) const override {
    at::NoGradGuard no_grad;
    at::Tensor xf = logits.to(at::kFloat);
    at::Tensor max = std::get<0>(xf.max(1));
    // A row of −inf: max −inf, sum 0 (as the kernel), not NaN from −inf − (−inf).
    at::Tensor shift = at::where(at::isinf(max).logical_and(max < 0), at::zeros_like(max), max);
    return {max, (xf - shift.unsqueeze(1)).exp().sum(1)};
  }

  at::Tensor CrossEntropyBackward(const at::Tensor& logits, const at::Tensor& lse, const at::Tensor& target,
                                  const at::Tensor& dloss) const override {
    at::NoGradGuard no_grad;
    at::Tensor p = (logits.to(at::kFloat) - lse.unsqueeze(1)).exp();
    at::Tensor hit = (target >= 0).to(at::kFloat).unsqueeze(1);
    p.scatter_add_(1, target.clamp_min(0).unsqueeze(1), -hit);
    return (p * dloss.unsqueeze(1)).to(logits.scalar_type());
  }

  std::pair<at::Tensor, at::Tensor> QuantizeFp8Tensorwise(const at::Tensor& x, at::ScalarType fp8) const override {
    TORCH_CHECK(fp8 == at::kFloat8_e4m3fn || fp8 == at::kFloat8_e5m2, "quantize_fp8: ", fp8, " is not an FP8 type");
    const double max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
    at::NoGradGuard no_grad;
    at::Tensor amax = x.numel() == 0 ? at::zeros({}, x.options()) : x.abs().max();
    at::Tensor scale = (max / amax.to(at::kDouble).clamp_min(1e-12)).to(at::kFloat);  // In double, as torchao.
    return {(x.to(at::kFloat) * scale).clamp(-max, max).to(fp8), scale.reciprocal()};
  }

  Fp8Transposed QuantizeFp8TensorwiseTransposed(const at::Tensor& x, at::ScalarType fp8) const override {
    TORCH_CHECK(x.dim() == 2, "quantize_fp8_transposed: a 2-D tensor, got ", x.dim(), " dimensions");
    auto [data, inv_scale] = QuantizeFp8Tensorwise(x, fp8);
    return {data, data.t().contiguous(), inv_scale};
  }

  void AdamW(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
             const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
             const AdamWStep& s) const override {
    at::NoGradGuard no_grad;
    const double bias_correction1 = 1 - std::pow(s.beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1 - std::pow(s.beta2, static_cast<double>(s.step));
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor p = params[i], m = exp_avgs[i], v = exp_avg_sqs[i];
      if (s.weight_decay != 0) p.mul_(1 - s.lr * s.weight_decay);
      m.lerp_(grads[i], 1 - s.beta1);
      v.mul_(s.beta2).addcmul_(grads[i], grads[i], 1 - s.beta2);
      at::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(s.eps);
      p.addcdiv_(m, denom, -s.lr / bias_correction1);
    }
  }
};

std::atomic<const FusedKernels*> cuda_kernels{nullptr};

}  // namespace

const FusedKernels& CompositeKernels() {
  static const Composite* composite = new Composite();
  return *composite;
}

const FusedKernels* CudaKernels() { return cuda_kernels.load(); }

void RegisterCudaKernels(const FusedKernels* kernels) { cuda_kernels.store(kernels); }

}  // namespace tessera::kernels
