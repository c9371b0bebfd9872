// CpuAdamW against PyTorch's AdamW arithmetic written with ATen ops (torch.optim.AdamW's
// single-tensor path), on random tensors whose sizes are not multiples of the vector widths.
#include "kernels/cpu_adam.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace tessera::kernels {
namespace {

// torch.optim.AdamW (foreach=False) for one tensor, step t.
void Reference(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWStep& s) {
  p.mul_(1 - s.lr * s.weight_decay);
  m.lerp_(g, 1 - s.beta1);
  v.mul_(s.beta2).addcmul_(g, g, 1 - s.beta2);
  const double bc1 = 1 - std::pow(s.beta1, s.step), bc2 = 1 - std::pow(s.beta2, s.step);
  at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(s.eps);
  p.addcdiv_(m, denom, -s.lr / bc1);
}

// Max over elements of |a − b| / max(|b|, 0.01). The reference is not correctly rounded itself (ATen
// takes √v from MKL's vector math, measured 1 ulp off on ~17% of elements), and an element that
// cancels to near zero turns one ulp of its update into any relative error; below |b| = 0.01 (1% of
// the unit-scale values here) the bar is therefore absolute: 1e-6 × 0.01.
double MaxRelError(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs() / b.abs().clamp_min(1e-2)).max().item<double>();
}

class CpuAdamTest : public ::testing::TestWithParam<Simd> {};

TEST_P(CpuAdamTest, MatchesPyTorchAdamWOverSeveralSteps) {
  if (static_cast<int>(GetParam()) > static_cast<int>(DetectSimd())) {
    GTEST_SKIP() << "this CPU has no " << SimdName(GetParam()) << " (it has " << SimdName(DetectSimd()) << ")";
  }
  at::manual_seed(3);
  for (Copy16 type : {Copy16::kBf16, Copy16::kFp16}) {
    const at::ScalarType dtype16 = type == Copy16::kBf16 ? at::kBFloat16 : at::kHalf;
    for (int64_t n : {1, 7, 8, 15, 17, 31, 1000, 65536 + 13, 300007}) {
      at::Tensor p = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
      at::Tensor rp = p.clone(), rm = m.clone(), rv = v.clone();
      at::Tensor copy16 = at::empty({n}, dtype16);
      for (int64_t t = 1; t <= 5; ++t) {
        at::Tensor g = at::randn({n}) * 0.1;
        AdamWStep s{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = t};
        CpuAdamW(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, s, GetParam(),
                 /*parallel=*/true, static_cast<uint16_t*>(copy16.data_ptr()), type);
        Reference(rp, g, rm, rv, s);
      }
      // fp32: the bar is 1e-6 relative.
      EXPECT_LE(MaxRelError(p, rp), 1e-6) << "n=" << n;
      EXPECT_LE(MaxRelError(m, rm), 1e-6) << "n=" << n;
      EXPECT_LE(MaxRelError(v, rv), 1e-6) << "n=" << n;
      // The 16-bit copy is ATen's conversion of the updated fp32 parameters, bit for bit; for bf16 that
      // is within bf16's rounding (2^-9 relative) of the reference, under the bar of 4e-3.
      EXPECT_TRUE(at::equal(copy16, p.to(dtype16))) << "n=" << n << " " << (type == Copy16::kBf16 ? "bf16" : "fp16");
      if (type == Copy16::kBf16) {
        EXPECT_LE(MaxRelError(copy16.to(at::kFloat), rp), 4e-3) << "n=" << n;
      }
    }
  }
}

// Gradients read as 16-bit or scaled give exactly the update of ATen's g.to(float) * scale fed as fp32
// (the factor is a double, as the trainer's clip coefficient and 1 / loss scale are).
TEST_P(CpuAdamTest, ReadsLowPrecisionAndScaledGradientsAsAtenConvertsThem) {
  if (static_cast<int>(GetParam()) > static_cast<int>(DetectSimd())) {
    GTEST_SKIP() << "this CPU has no " << SimdName(GetParam()) << " (it has " << SimdName(DetectSimd()) << ")";
  }
  at::manual_seed(4);
  const std::pair<GradType, at::ScalarType> types[] = {
      {GradType::kF32, at::kFloat}, {GradType::kBf16, at::kBFloat16}, {GradType::kFp16, at::kHalf}};
  for (const auto& [type, dtype] : types) {
    for (double scale : {1.0, 0.3713, 1.0 / 65536}) {
      for (int64_t n : {1, 9, 17, 33, 65536 + 5}) {
        // Gradients of fp16 loss scaling: large values, some beyond what survives the scale in fp32.
        at::Tensor g = (at::randn({n}) * (scale < 1e-3 ? 3000.0 : 0.1)).to(dtype);
        at::Tensor p = at::randn({n}), m = at::randn({n}) * 0.01, v = at::rand({n}) * 1e-4;
        at::Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
        AdamWStep s{.lr = 1e-2, .beta2 = 0.95, .weight_decay = 0.1, .step = 3};
        CpuAdamW(p.data_ptr<float>(), GradIn{g.data_ptr(), type, static_cast<float>(scale)}, m.data_ptr<float>(),
                 v.data_ptr<float>(), n, s, GetParam());
        at::Tensor g32 = (g.to(at::kFloat) * scale).contiguous();
        CpuAdamW(p2.data_ptr<float>(), g32.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), n, s,
                 GetParam());
        const std::string what = "n=" + std::to_string(n) + " scale=" + std::to_string(scale) + " dtype=" +
                                 std::string(c10::toString(dtype));
        EXPECT_TRUE(at::equal(m, m2)) << what;
        EXPECT_TRUE(at::equal(v, v2)) << what;
        EXPECT_TRUE(at::equal(p, p2)) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, CpuAdamTest, ::testing::Values(Simd::kScalar, Simd::kAvx2, Simd::kAvx512),
                         [](const auto& info) { return std::string(SimdName(info.param)); });

TEST(CpuAdamLevelsTest, VectorPathsAgreeWithScalarToTheLastBitButForDivisionRounding) {
  at::manual_seed(5);
  const int64_t n = 4099;
  at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::randn({n}).abs(), v = at::randn({n}).abs();
  at::Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
  AdamWStep s{.lr = 1e-3, .beta2 = 0.999, .weight_decay = 0.01, .step = 7};
  CpuAdamW(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, s, Simd::kScalar);
  CpuAdamW(p2.data_ptr<float>(), g.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), n, s, DetectSimd());
  EXPECT_TRUE(at::equal(m, m2));  // Same operations, same roundings.
  EXPECT_TRUE(at::equal(v, v2));
  EXPECT_TRUE(at::equal(p, p2));
}

}  // namespace
}  // namespace tessera::kernels
