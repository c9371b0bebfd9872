// The vocab-parallel cross-entropy, both implementations (ATen operations, and the fused-kernel
// path over the composite kernels — the CUDA kernels are checked against the composite in
// kernels/fused_kernels_test), against at::cross_entropy over the whole vocabulary in double: the
// losses and the gradient of this rank's logits, at tp = 1 in-process and at tp = 2 and 3 across
// forked rank processes (Gloo).
#include "parallel/layers/tp_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/fused_kernels.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/testing/multi_process.h"
#include "parallel/testing/rank_groups.h"

namespace tessera::parallel {
namespace {

using testing::RunRanks;

constexpr int64_t kRows = 11;

// Tolerances against the double reference: fp32 logits → fp32 rounding of sums over ≤ 60 terms;
// bf16 logits → the gradient is rounded to bf16 (relative step 2⁻⁸).
double Tolerance(at::ScalarType t) { return t == at::kFloat ? 1e-5 : 8e-3; }

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return (g - w).norm().item<double>() / std::max(w.norm().item<double>(), 1e-30);
}

struct Case {
  at::Tensor logits;   // [kRows, vocab], the whole vocabulary (double, values exactly representable in dt).
  at::Tensor targets;  // [kRows]
  at::Tensor dloss;    // [kRows]
};

Case MakeCase(int64_t vocab, at::ScalarType dt) {
  at::manual_seed(11);
  Case c;
  c.logits = (at::randn({kRows, vocab}) * 3).to(dt).to(at::kDouble);
  c.targets = at::randint(vocab, {kRows}, at::kLong);
  c.targets[0] = 0;
  c.targets[1] = vocab - 1;  // First and last columns: both ends of the first and last slices.
  c.dloss = at::randn({kRows}, at::kDouble);
  return c;
}

// Losses and this rank's slice of the logits' gradient, against the reference; empty when close.
std::string Compare(const Case& c, at::ScalarType dt, int rank, int tp, Communicator* comm,
                    const kernels::FusedKernels* k) {
  const int64_t vocab = c.logits.size(1), local = vocab / tp, start = rank * local;
  at::Tensor full = c.logits.clone().requires_grad_(true);
  at::Tensor ref = at::cross_entropy_loss(full, c.targets, {}, at::Reduction::None);
  torch::autograd::backward({ref}, {c.dloss});
  // The ATen path takes fp32 logits (as the GPT passes them); the kernel path the dtype itself.
  at::Tensor mine = c.logits.narrow(1, start, local).to(k == nullptr ? at::kFloat : dt).contiguous();
  mine.requires_grad_(true);
  at::Tensor losses;
  try {
    losses = VocabParallelCrossEntropy(mine, c.targets, start, comm, k);
    torch::autograd::backward({losses}, {c.dloss.to(losses.scalar_type())});
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  const std::string tag = absl::StrCat(k ? "kernels " : "aten ", at::toString(dt), " tp", tp, " rank ", rank);
  if (mine.grad().scalar_type() != mine.scalar_type()) return tag + ": gradient dtype differs from the logits'";
  const double loss_err = RelErr(losses, ref.detach());
  const double grad_err = RelErr(mine.grad(), full.grad().narrow(1, start, local));
  if (loss_err > Tolerance(dt)) return absl::StrCat(tag, ": losses rel err ", loss_err);
  if (grad_err > Tolerance(dt)) return absl::StrCat(tag, ": gradient rel err ", grad_err);
  return "";
}

absl::Status CheckRanks(int rank, int port, int tp) {
  auto groups = testing::RankGroups(rank, port, {.tp = tp});
  if (!groups.ok()) return groups.status();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const Case c = MakeCase(19 * tp, dt);
    for (const kernels::FusedKernels* k : {static_cast<const kernels::FusedKernels*>(nullptr),
                                           &kernels::CompositeKernels()}) {
      const std::string err = Compare(c, dt, rank, tp, groups->tp.get(), k);
      if (!err.empty()) return absl::InternalError(err);
    }
  }
  return absl::OkStatus();
}

TEST(VocabParallelCrossEntropyTest, TwoRanksMatchCrossEntropy) {
  const absl::Status s = RunRanks(2, [](int r, int p) { return CheckRanks(r, p, 2); });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(VocabParallelCrossEntropyTest, ThreeRanksMatchCrossEntropy) {
  const absl::Status s = RunRanks(3, [](int r, int p) { return CheckRanks(r, p, 3); });
  EXPECT_TRUE(s.ok()) << s;
}

// Last: the forking tests above must run before this process uses torch itself.
TEST(VocabParallelCrossEntropyTest, OneRankBothPathsMatchCrossEntropy) {
  SelfCommunicator solo(0, "solo");
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t vocab : {int64_t{1}, int64_t{37}, int64_t{64}}) {
      const Case c = MakeCase(vocab, dt);
      EXPECT_EQ(Compare(c, dt, 0, 1, &solo, nullptr), "") << vocab;
      EXPECT_EQ(Compare(c, dt, 0, 1, &solo, &kernels::CompositeKernels()), "") << vocab;
    }
  }
}

}  // namespace
}  // namespace tessera::parallel
