// GradBuckets across two forked ranks: sums are right, accumulation without sync stays local,
// and with small buckets every bucket's all-reduce starts from inside backward; at dp 1, no buckets.
#include "parallel/dp/grad_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/testing/multi_process.h"
#include "parallel/testing/rank_groups.h"

namespace tessera::parallel {
namespace {

absl::Status Check(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

// A chain of linear layers; rank r scales its loss by (r + 1), so the dp sum of every gradient is 3×
// the gradient of the unscaled loss (ranks 1 and 2 → sum 3).
absl::Status Body(int rank, int port) {
  auto groups = testing::RankGroups(rank, port, {.dp = 2});
  if (!groups.ok()) return groups.status();
  at::manual_seed(0);  // Same weights and input on both ranks.
  std::vector<at::Tensor> weights;
  for (int i = 0; i < 6; ++i) weights.push_back(at::randn({32, 32}).set_requires_grad(true));
  at::Tensor x = at::randn({4, 32});
  auto loss_of = [&] {
    at::Tensor h = x;
    for (auto& w : weights) h = at::tanh(at::linear(h, w));
    return h.pow(2).sum();
  };
  // Reference gradients of the unscaled loss, computed before the buckets take over .grad.
  std::vector<at::Tensor> expected;
  {
    auto grads = torch::autograd::grad({loss_of()}, weights);
    for (auto& g : grads) expected.push_back(g.clone());
  }
  GradBuckets buckets(weights, groups->dp, {.bucket_bytes = 2 * 32 * 32 * 4});  // Two tensors each.
  if (buckets.num_buckets() != 3) return absl::InternalError(absl::StrCat("buckets: ", buckets.num_buckets()));
  buckets.ZeroGrad();
  // Two micro-batches: the first accumulates locally, the second synchronises.
  buckets.SetSyncThisPass(false);
  (loss_of() * (rank + 1) * 0.5).backward();
  buckets.SetSyncThisPass(true);
  (loss_of() * (rank + 1) * 0.5).backward();
  if (auto s = buckets.Finish(); !s.ok()) return s;
  if (auto s = Check(buckets.started_during_backward() == 3, absl::StrCat("all buckets started inside backward: ", buckets.started_during_backward())); !s.ok()) return s;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!at::allclose(weights[i].grad(), expected[i] * 3, 1e-5, 1e-6)) {
      return absl::InternalError(absl::StrCat("gradient ", i, " is not the dp sum"));
    }
  }
  return absl::OkStatus();
}

TEST(GradBucketsTest, SumsOverDataParallelRanksFromInsideBackward) {
  EXPECT_TRUE(testing::RunRanks(2, Body).ok());
}

// At dp 1 nothing is summed and nothing is bucketed: .grad is autograd's own tensor (not a view of a
// shared buffer), ZeroGrad unsets it, accumulation over passes still sums, and a parameter no pass
// used keeps no .grad.
TEST(GradBucketsTest, AtDpOneGradientsAreAutogradsOwn) {
  at::manual_seed(0);
  std::vector<at::Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back(at::randn({8, 8}).set_requires_grad(true));
  at::Tensor x = at::randn({2, 8});
  auto loss_of = [&] { return at::linear(at::linear(x, weights[0]), weights[1]).pow(2).sum(); };  // 2 unused.
  auto expected = torch::autograd::grad({loss_of()}, {weights[0], weights[1]});
  GradBuckets buckets(weights, std::make_shared<SelfCommunicator>(0, "dp"), {.bucket_bytes = 8 * 8 * 4});
  EXPECT_EQ(buckets.num_buckets(), 0);
  buckets.ZeroGrad();
  for (const at::Tensor& w : weights) EXPECT_FALSE(w.grad().defined());
  buckets.SetSyncThisPass(false);
  loss_of().backward();
  buckets.SetSyncThisPass(true);
  loss_of().backward();
  ASSERT_TRUE(buckets.Finish().ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(weights[i].grad().defined());
    EXPECT_TRUE(at::allclose(weights[i].grad(), expected[i] * 2, 1e-5, 1e-6)) << i;
    EXPECT_EQ(weights[i].grad().storage().nbytes(), weights[i].numel() * 4) << "a view of a bucket: " << i;
  }
  EXPECT_FALSE(weights[2].grad().defined());
  buckets.ZeroGrad();
  for (const at::Tensor& w : weights) EXPECT_FALSE(w.grad().defined());
}

}  // namespace
}  // namespace tessera::parallel
