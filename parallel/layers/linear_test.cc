// AddLinear: y + scale·x·wᵀ as one addmm (fp32) equals the separate product, scale and sum, in value and
// in the gradients of y, x and w; with a 3-D y, with an empty one (an expert that got no tokens), and in
// bf16 on the CPU (the fp32-GEMM path).
#include "parallel/layers/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

struct Result {
  at::Tensor out, dy, dx, dw;
};

// out = f(y, x, w) and the gradients of sum(out · probe), the leaves drawn from a fixed seed.
template <typename F>
Result Run(F f, std::vector<int64_t> rows, int64_t out_dim, int64_t rank, at::ScalarType dtype) {
  at::manual_seed(11);
  std::vector<int64_t> y_shape = rows, x_shape = rows;
  y_shape.push_back(out_dim);
  x_shape.push_back(rank);
  at::Tensor y = at::randn(y_shape).to(dtype).requires_grad_(true);
  at::Tensor x = at::randn(x_shape).to(dtype).requires_grad_(true);
  at::Tensor w = at::randn({out_dim, rank}).to(dtype).requires_grad_(true);
  at::Tensor probe = at::randn(y_shape).to(dtype);
  at::Tensor out = f(y, x, w);
  auto grads = torch::autograd::grad({(out * probe).sum()}, {y, x, w});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

void ExpectClose(const Result& got, const Result& want, double rtol, double atol) {
  EXPECT_EQ(got.out.sizes(), want.out.sizes());
  EXPECT_TRUE(at::allclose(got.out, want.out, rtol, atol)) << (got.out - want.out).abs().max();
  EXPECT_TRUE(at::allclose(got.dy, want.dy, rtol, atol));
  EXPECT_TRUE(at::allclose(got.dx, want.dx, rtol, atol)) << (got.dx - want.dx).abs().max();
  EXPECT_TRUE(at::allclose(got.dw, want.dw, rtol, atol)) << (got.dw - want.dw).abs().max();
}

constexpr double kScale = 1.7;  // Not a power of two: folding it into w rounds differently.

Result Fused(std::vector<int64_t> rows, at::ScalarType dtype) {
  return Run([](auto y, auto x, auto w) { return AddLinear(y, x, w, kScale); }, rows, 12, 4, dtype);
}
Result Separate(std::vector<int64_t> rows, at::ScalarType dtype) {
  return Run([](auto y, auto x, auto w) { return y + Linear(x, w) * kScale; }, rows, 12, 4, dtype);
}

TEST(AddLinearTest, EqualsTheSeparateProductScaleAndSum) {
  // fp32: one rounding of the scale apart (a few ulps of values of order 10).
  ExpectClose(Fused({3, 5}, at::kFloat), Separate({3, 5}, at::kFloat), 1e-5, 1e-5);
  ExpectClose(Fused({7}, at::kFloat), Separate({7}, at::kFloat), 1e-5, 1e-5);
  ExpectClose(Fused({0}, at::kFloat), Separate({0}, at::kFloat), 0, 0);
  // fp64: the same up to double rounding.
  ExpectClose(Fused({3, 5}, at::kDouble), Separate({3, 5}, at::kDouble), 1e-12, 1e-12);
}

TEST(AddLinearTest, SixteenBitOnTheCpuIsTheSeparateComputation) {
  const Result got = Fused({3, 5}, at::kBFloat16), want = Separate({3, 5}, at::kBFloat16);
  EXPECT_TRUE(at::equal(got.out, want.out));
  EXPECT_TRUE(at::equal(got.dx, want.dx));
  EXPECT_TRUE(at::equal(got.dw, want.dw));
}

}  // namespace
}  // namespace tessera::parallel
