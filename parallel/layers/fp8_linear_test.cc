// FP8 linear layers against an emulation written here from the recipe's definition (fp8_linear.h):
// quantise with the scale fp8_max / amax (power-of-two for rowwise), dequantise, multiply in fp32. Every
// GEMM — the forward and both backward products, tensorwise and rowwise — equals it to 1e-6 relative
// (fp32 products: the dequantised operands' rounding in fp32 is the only difference, ~1e-7); with bf16
// outputs, to one bf16 rounding (2^-8 relative).
#include "parallel/layers/fp8_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <utility>

#include "gtest/gtest.h"
#include "parallel/layers/linear.h"

namespace tessera::parallel {
namespace {

// The test's own quantise-dequantise: returns the dequantised fp32 tensor.
at::Tensor Dequantised(const at::Tensor& t, at::ScalarType fp8, int64_t reduce_dim, bool pow2) {
  const double max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  at::Tensor f = t.to(at::kDouble);
  at::Tensor amax = reduce_dim < 0 ? f.abs().max() : std::get<0>(f.abs().max(reduce_dim, true));
  at::Tensor scale = (max / amax.clamp_min(1e-12)).to(at::kFloat);
  if (pow2) scale = at::exp2(at::floor(at::log2(scale)));
  at::Tensor q = (t.to(at::kFloat) * scale).clamp(-max, max).to(fp8);
  return q.to(at::kFloat) / scale;
}

double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).abs().max() / want.to(at::kDouble).abs().max()).item<double>();
}

TEST(Fp8QuantizeTest, ScalesFromTheCurrentAmaxAndSaturates) {
  at::Tensor t = at::tensor({1.0f, -2.0f, 0.5f, 4.0f}).view({2, 2});
  Fp8Tensor q = QuantizeFp8(t, at::kFloat8_e4m3fn, -1, false);
  EXPECT_EQ(q.data.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_FLOAT_EQ(q.inv_scale.item<float>(), 4.0f / 448.0f);  // amax 4 maps to e4m3's largest value.
  EXPECT_FLOAT_EQ(q.data[1][1].to(at::kFloat).item<float>(), 448.0f);
  Fp8Tensor rows = QuantizeFp8(t, at::kFloat8_e4m3fn, 1, true);
  ASSERT_EQ(rows.inv_scale.sizes(), (std::vector<int64_t>{2, 1}));
  // Row 0: amax 2 -> scale 224 rounded down to 128; row 1: amax 4 -> 112 -> 64.
  EXPECT_FLOAT_EQ(rows.inv_scale[0][0].item<float>(), 1.0f / 128);
  EXPECT_FLOAT_EQ(rows.inv_scale[1][0].item<float>(), 1.0f / 64);
  // An all-zero tensor: the amax floor, no division by zero, zeros out.
  Fp8Tensor z = QuantizeFp8(at::zeros({2, 2}), at::kFloat8_e5m2, -1, false);
  EXPECT_TRUE(std::isfinite(z.inv_scale.item<float>()));
  EXPECT_EQ(z.data.to(at::kFloat).abs().sum().item<float>(), 0.0f);
  EXPECT_THROW(QuantizeFp8(t, at::kBFloat16, -1, false), c10::Error);
}

TEST(Fp8MatmulTest, EveryOperandPairEqualsTheEmulation) {
  at::manual_seed(3);
  at::Tensor a = at::randn({48, 64}), b = at::randn({64, 32}) * 3;
  struct Case {
    at::ScalarType fa, fb;
    int64_t da, db;  // reduce dims: -1 tensorwise; a per row (1), b per column (0).
    bool pow2;
  };
  for (const Case& c : {Case{at::kFloat8_e4m3fn, at::kFloat8_e4m3fn, -1, -1, false},
                        Case{at::kFloat8_e5m2, at::kFloat8_e4m3fn, -1, -1, false},
                        Case{at::kFloat8_e4m3fn, at::kFloat8_e4m3fn, 1, 0, true}}) {
    Fp8Tensor qa = QuantizeFp8(a, c.fa, c.da, c.pow2), qb = QuantizeFp8(b, c.fb, c.db, c.pow2);
    at::Tensor want = at::mm(Dequantised(a, c.fa, c.da, c.pow2), Dequantised(b, c.fb, c.db, c.pow2));
    EXPECT_LT(RelativeError(ScaledMatmul(qa, qb, at::kFloat), want), 1e-6);
    EXPECT_LT(RelativeError(EmulatedScaledMatmul(qa, qb, at::kFloat), want), 1e-6);
    EXPECT_LT(RelativeError(ScaledMatmul(qa, qb, at::kBFloat16), want), 1.0 / 256);
  }
}

struct Grads {
  at::Tensor y, dx, dw;
};

Grads RunLinear(Fp8Recipe recipe, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& probe) {
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  Fp8Options o;
  o.recipe = recipe;
  o.min_dim = 16;
  at::Tensor y;
  {
    Fp8Scope scope(&o);
    y = Linear(x, w);  // Through the one Linear every layer uses.
  }
  auto g = torch::autograd::grad({(y.to(at::kFloat) * probe).sum()}, {x, w});
  return {y.detach(), g[0], g[1]};
}

TEST(Fp8LinearTest, ForwardAndBothGradientsEqualTheEmulationInEachRecipe) {
  at::manual_seed(5);
  const int64_t B = 4, T = 8, K = 64, N = 48;  // 32 rows.
  at::Tensor x = at::randn({B, T, K}).to(at::kBFloat16), w = (at::randn({N, K}) * 0.1).to(at::kBFloat16);
  at::Tensor probe = at::randn({B, T, N});
  for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    SCOPED_TRACE(recipe == Fp8Recipe::kTensorwise ? "tensorwise" : "rowwise");
    const bool rw = recipe == Fp8Recipe::kRowwise;
    const at::ScalarType grad8 = rw ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    Grads got = RunLinear(recipe, x, w, probe);
    at::Tensor x2 = x.reshape({-1, K});
    // The output's gradient as autograd hands it to the linear: bf16, (y.float() · probe) backward.
    at::Tensor g = probe.reshape({-1, N}).to(at::kBFloat16);
    at::Tensor y = at::mm(Dequantised(x2, at::kFloat8_e4m3fn, rw ? 1 : -1, rw),
                          Dequantised(w, at::kFloat8_e4m3fn, rw ? 1 : -1, rw).t());
    at::Tensor dx = at::mm(Dequantised(g, grad8, rw ? 1 : -1, rw), Dequantised(w, at::kFloat8_e4m3fn, rw ? 0 : -1, rw));
    at::Tensor dw = at::mm(Dequantised(g.t().contiguous(), grad8, rw ? 1 : -1, rw),
                           Dequantised(x2, at::kFloat8_e4m3fn, rw ? 0 : -1, rw));
    // Each product rounded once to bf16 (the only rounding the emulation leaves out).
    EXPECT_LT(RelativeError(got.y.reshape({-1, N}), y), 1.0 / 256);
    EXPECT_LT(RelativeError(got.dx.reshape({-1, K}), dx), 1.0 / 256);
    EXPECT_LT(RelativeError(got.dw, dw), 1.0 / 256);
    EXPECT_EQ(got.y.scalar_type(), at::kBFloat16);
    EXPECT_EQ(got.dw.scalar_type(), at::kBFloat16);
    // And it is not the bf16 product: the quantisation shows (an emulation bug that skipped it would not).
    at::Tensor plain = at::mm(x2.to(at::kFloat), w.to(at::kFloat).t());
    EXPECT_GT(RelativeError(got.y.reshape({-1, N}), plain), 1e-3);
  }
}

// The forward prepares only the layouts a wanted gradient reads (a frozen weight — LoRA's base — needs
// no xᵀ, an input without a gradient no Wᵀ): each gradient that is wanted equals the one of a run that
// wants both, bit for bit; the forward of a run under no_grad too.
TEST(Fp8LinearTest, EachGradientAloneEqualsItselfWithTheOther) {
  at::manual_seed(6);
  const int64_t K = 64, N = 48;
  at::Tensor x0 = at::randn({32, K}).to(at::kBFloat16), w0 = (at::randn({N, K}) * 0.1).to(at::kBFloat16);
  at::Tensor probe = at::randn({32, N});
  Fp8Options o;
  o.min_dim = 16;
  auto run = [&](bool x_grad, bool w_grad) {
    at::Tensor x = x0.clone().requires_grad_(x_grad), w = w0.clone().requires_grad_(w_grad);
    at::Tensor y;
    {
      Fp8Scope scope(&o);
      y = Linear(x, w);
    }
    (y.to(at::kFloat) * probe).sum().backward();
    return std::pair<at::Tensor, at::Tensor>{x.grad(), w.grad()};
  };
  auto [dx, dw] = run(true, true);
  auto [dx_only, no_dw] = run(true, false);  // The frozen weight.
  auto [no_dx, dw_only] = run(false, true);
  EXPECT_TRUE(at::equal(dx_only, dx));
  EXPECT_FALSE(no_dw.defined());
  EXPECT_TRUE(at::equal(dw_only, dw));
  EXPECT_FALSE(no_dx.defined());
  at::Tensor y_grad, y_no_grad;
  {
    Fp8Scope scope(&o);
    y_grad = Linear(x0, w0.clone().requires_grad_(true)).detach();
    at::NoGradGuard no_grad;
    y_no_grad = Linear(x0, w0.clone().requires_grad_(true));
  }
  EXPECT_TRUE(at::equal(y_grad, y_no_grad));
}

TEST(Fp8LinearTest, AppliesOnlyToLargeAlignedSixteenBitLayers) {
  Fp8Options o;  // min_dim 256.
  at::Tensor x = at::zeros({2, 16, 512}, at::kBFloat16);
  EXPECT_TRUE(Fp8Applies(x, at::zeros({256, 512}, at::kBFloat16), o));
  EXPECT_FALSE(Fp8Applies(x, at::zeros({128, 512}, at::kBFloat16), o));     // N < min_dim (a LoRA rank, a router).
  EXPECT_FALSE(Fp8Applies(x.to(at::kFloat), at::zeros({256, 512}), o));     // fp32 stays fp32.
  EXPECT_FALSE(Fp8Applies(at::zeros({3, 5, 512}, at::kBFloat16), at::zeros({256, 512}, at::kBFloat16), o));  // 15 rows.
  EXPECT_FALSE(Fp8Applies(at::zeros({2, 16, 520}, at::kBFloat16), at::zeros({264, 520}, at::kBFloat16), o));  // Not /16.
  // Outside a scope Linear is the plain product.
  at::Tensor xs = at::randn({16, 256}).to(at::kBFloat16), ws = at::randn({256, 256}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(Linear(xs, ws), Linear(xs, ws)));
  at::Tensor fp8;
  {
    Fp8Scope scope(&o);
    fp8 = Linear(xs, ws);
    {
      Fp8Scope off(nullptr);
      EXPECT_FALSE(at::equal(Linear(xs, ws), fp8));
    }
  }
  EXPECT_FALSE(at::equal(Linear(xs, ws), fp8));
}

}  // namespace
}  // namespace tessera::parallel
