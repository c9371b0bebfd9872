// WeightGradStore and the split Linear, in one process: a split backward (B, then W) gives the same
// gradients as a plain backward; B gives the input's gradient and leaves every parameter's .grad
// untouched; W accumulates each parameter once (its gradient accumulator's hooks fire once).
#include "parallel/layers/weight_grad_store.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>

#include "gtest/gtest.h"
#include "parallel/layers/linear.h"

namespace tessera::parallel {
namespace {

struct Model {
  at::Tensor w1, b1, w2, norm;
  std::vector<at::Tensor> params() const { return {w1, b1, w2, norm}; }
  // Two linears (the second weight used twice), a bias, an element-wise weight.
  at::Tensor Forward(const at::Tensor& x) const {
    at::Tensor h = at::gelu(Linear(x, w1, b1)) * norm;
    return Linear(Linear(h, w2), w2);
  }
};

Model MakeModel(at::ScalarType dtype) {
  at::manual_seed(7);
  auto leaf = [&](std::vector<int64_t> shape) { return at::randn(shape).to(dtype).requires_grad_(true); };
  return Model{leaf({6, 5}), leaf({6}), leaf({6, 6}), leaf({6})};
}

class WeightGradStoreTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(WeightGradStoreTest, SplitBackwardEqualsPlainBackward) {
  const at::ScalarType dtype = GetParam();
  const Model plain = MakeModel(dtype), split = MakeModel(dtype);
  at::Tensor x = at::randn({3, 4, 5}).to(dtype);
  at::Tensor g = at::randn({3, 4, 6}).to(dtype);

  at::Tensor x_plain = x.clone().requires_grad_(true);
  torch::autograd::backward({plain.Forward(x_plain)}, {g});

  std::map<const void*, int> fired;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (const at::Tensor& p : split.params()) {
    auto acc = torch::autograd::impl::grad_accumulator(p);
    const void* key = p.unsafeGetTensorImpl();
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [&fired, key](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
          ++fired[key];
          return out;
        }));
    accumulators.push_back(acc);
  }
  at::Tensor x_split = x.clone().requires_grad_(true);
  WeightGradStore::set_splitting(true);
  at::Tensor y = split.Forward(x_split);
  WeightGradStore::set_splitting(false);
  WeightGradStore store;
  store.set_params(split.params());
  at::Tensor gx = SplitBackward({y}, {g}, x_split, &store);

  // B: the input's gradient, nothing accumulated yet.
  ASSERT_TRUE(gx.defined());
  EXPECT_TRUE(at::equal(gx, x_plain.grad()));
  EXPECT_FALSE(x_split.grad().defined()) << "B returns the input's gradient, it does not accumulate it";
  for (const at::Tensor& p : split.params()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(fired.empty());
  EXPECT_FALSE(store.empty());
  // What W needs is kept: at least the first linear's input (x itself) and the last one's output
  // gradient (g itself), each counted once though the graph reads them more than once.
  const int64_t held = store.held_bytes();
  EXPECT_GE(held, x_split.nbytes() + g.nbytes());
  EXPECT_LE(held, 64 * (x_split.nbytes() + g.nbytes())) << "a handful of small tensors, not more";

  // W: every parameter once, the plain backward's values. fp32: the same products (rtol 1e-6 allows
  // another reduction order of the bias sum); 16-bit: one rounding of the result (2⁻⁸).
  store.Run();
  EXPECT_TRUE(store.empty());
  EXPECT_EQ(store.held_bytes(), 0);
  const double rtol = dtype == at::kFloat ? 1e-6 : 8e-3;
  const auto want = plain.params(), got = split.params();
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_TRUE(got[k].grad().defined()) << k;
    EXPECT_TRUE(at::allclose(got[k].grad().to(at::kFloat), want[k].grad().to(at::kFloat), rtol, 1e-7)) << k;
    EXPECT_EQ(fired[got[k].unsafeGetTensorImpl()], 1) << "parameter " << k << " accumulated once";
  }
}

// Two chunks of one rank (zbv) sharing a weight, as rank 0's embedding and tied head: each chunk's B
// into its own store, then both W's as one (Absorb): the shared weight accumulates once, the sum.
TEST_P(WeightGradStoreTest, AbsorbedStoresAccumulateASharedWeightOnce) {
  const at::ScalarType dtype = GetParam();
  const Model plain = MakeModel(dtype), split = MakeModel(dtype);
  at::Tensor x = at::randn({3, 4, 5}).to(dtype);
  at::Tensor g = at::randn({3, 4, 6}).to(dtype);
  // Chunk 0: Linear(x, w1, b1) then w2; chunk 1 (on its output, detached as between stages): w2 again.
  auto chunk0 = [](const Model& m, const at::Tensor& in) { return Linear(at::gelu(Linear(in, m.w1, m.b1)) * m.norm, m.w2); };
  auto chunk1 = [](const Model& m, const at::Tensor& in) { return Linear(in, m.w2); };
  at::Tensor x_plain = x.clone().requires_grad_(true);
  torch::autograd::backward({chunk1(plain, chunk0(plain, x_plain))}, {g});

  int fired_w2 = 0;
  auto acc = torch::autograd::impl::grad_accumulator(split.w2);
  acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [&fired_w2](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
        ++fired_w2;
        return out;
      }));
  WeightGradStore::set_splitting(true);
  at::Tensor x_split = x.clone().requires_grad_(true);
  at::Tensor h = chunk0(split, x_split);
  at::Tensor h_in = h.detach().clone().requires_grad_(true);
  at::Tensor y = chunk1(split, h_in);
  WeightGradStore::set_splitting(false);
  WeightGradStore first, second;
  first.set_params(split.params());
  second.set_params(split.params());
  at::Tensor gh = SplitBackward({y}, {g}, h_in, &second);
  SplitBackward({h}, {gh}, x_split, &first);
  const int64_t held = first.held_bytes() + second.held_bytes();
  first.Absorb(second);
  EXPECT_TRUE(second.empty());
  EXPECT_EQ(second.held_bytes(), 0);
  EXPECT_EQ(first.held_bytes(), held) << "the two chunks keep different tensors";
  first.Run();
  EXPECT_EQ(fired_w2, 1) << "the shared weight accumulates once";
  const double rtol = dtype == at::kFloat ? 1e-6 : 8e-3;
  const auto want = plain.params(), got = split.params();
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_TRUE(got[k].grad().defined()) << k;
    EXPECT_TRUE(at::allclose(got[k].grad().to(at::kFloat), want[k].grad().to(at::kFloat), rtol, 1e-6)) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WeightGradStoreTest, ::testing::Values(at::kFloat, at::kBFloat16));

}  // namespace
}  // namespace tessera::parallel
