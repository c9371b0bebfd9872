// GrpoObjective against GrpoLosses (grpo_loss.h, itself checked against TRL's code): the same loss,
// gradient and metrics from the head's view of a micro-batch — every target, or only the trained rows
// the head selects — and, split into two sequence blocks, each block's loss is the whole micro-batch's.
#include "parallel/objectives/grpo_objective.h"

#include <ATen/ATen.h>

#include <vector>

#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kB = 4, kT = 6;

struct Rollouts {
  at::Tensor logits_logps;  // [B, T] the policy's, requires grad.
  at::Tensor old_logps, ref_logps, advantages, mask;
  at::Tensor Data(int64_t start, int64_t length) const {  // [B, 2·length + 1] of positions start...
    return at::cat({old_logps.narrow(1, start, length), ref_logps.narrow(1, start, length), advantages.unsqueeze(1)}, 1)
        .to(at::kDouble);
  }
};

Rollouts Draw() {
  at::manual_seed(3);
  Rollouts r;
  r.logits_logps = (-at::rand({kB, kT}) * 3).requires_grad_(true);
  r.old_logps = r.logits_logps.detach() + at::randn({kB, kT}) * 0.3;  // Far enough for clipping.
  r.ref_logps = r.logits_logps.detach() + at::randn({kB, kT}) * 0.2;
  r.advantages = at::randn({kB});
  // Completions start after a prompt of 1-2 positions and end at various lengths; one has none.
  r.mask = at::zeros({kB, kT});
  r.mask[0].narrow(0, 1, 5).fill_(1);
  r.mask[1].narrow(0, 2, 2).fill_(1);
  r.mask[2].narrow(0, 1, 3).fill_(1);
  return r;
}

GrpoLossOptions Options(GrpoLossType type) {
  GrpoLossOptions o;
  o.type = type;
  o.beta = 0.04;
  o.epsilon = 0.2;
  o.epsilon_high = 0.28;
  o.max_completion_tokens = kT;
  o.normalizer = 7.5;
  return o;
}

TEST(GrpoObjectiveTest, EqualsGrpoLossesOnEveryTargetOrTheSelectedRows) {
  for (GrpoLossType type : {GrpoLossType::kGrpo, GrpoLossType::kBnpo, GrpoLossType::kDrGrpo, GrpoLossType::kDapo}) {
    const Rollouts r = Draw();
    const GrpoTerms want = GrpoLosses({r.logits_logps, r.old_logps, r.ref_logps, r.advantages, r.mask}, Options(type));
    want.loss.backward();
    const at::Tensor want_grad = r.logits_logps.grad().clone();
    for (bool selected : {false, true}) {
      r.logits_logps.mutable_grad() = at::Tensor();
      GrpoObjective objective(Options(type));
      TargetLosses t;
      const at::Tensor nll = -r.logits_logps.reshape({-1});
      const at::Tensor trained = r.mask.reshape({-1}) > 0;
      if (selected) {
        t.rows = trained.nonzero().squeeze(1);
        t.nll = nll.index_select(0, t.rows);
        t.trained = trained.index_select(0, t.rows);
      } else {
        t.nll = nll;
        t.trained = trained;
      }
      t.sample_data = r.Data(0, kT);
      t.samples = kB;
      t.positions = kT;
      t.targets = kB * kT;
      const at::Tensor loss = objective.Loss(t);
      EXPECT_NEAR(loss.item<double>(), want.loss.item<double>(), 1e-6) << static_cast<int>(type) << selected;
      loss.backward();
      EXPECT_TRUE(at::allclose(r.logits_logps.grad(), want_grad, 1e-5, 1e-7)) << static_cast<int>(type) << selected;
      const std::vector<double> m = objective.TakeMetrics();
      ASSERT_EQ(m.size(), 4u);
      EXPECT_NEAR(m[0], want.kl.item<double>(), 1e-6);
      EXPECT_NEAR(m[1], want.low_clip.item<double>(), 1e-9);
      EXPECT_NEAR(m[2], want.high_clip.item<double>(), 1e-9);
      EXPECT_NEAR(m[3], want.clip_ratio.item<double>(), 1e-9);
    }
  }
}

// Two sequence blocks [0, 2) and [2, 6): block A's WholeSamples adds block B's per-sample values (the
// collective's sum, simulated in order: B's calls are recorded first).
TEST(GrpoObjectiveTest, ASequenceBlockComputesTheWholeMicroBatch) {
  for (GrpoLossType type : {GrpoLossType::kGrpo, GrpoLossType::kBnpo, GrpoLossType::kDrGrpo, GrpoLossType::kDapo}) {
    const Rollouts r = Draw();
    const GrpoTerms want = GrpoLosses({r.logits_logps, r.old_logps, r.ref_logps, r.advantages, r.mask}, Options(type));
    auto part = [&](int64_t start, int64_t length, std::function<at::Tensor(const at::Tensor&)> sum) {
      TargetLosses t;
      t.nll = -r.logits_logps.detach().narrow(1, start, length).reshape({-1});
      t.trained = r.mask.narrow(1, start, length).reshape({-1}) > 0;
      t.sample_data = r.Data(start, length);
      t.samples = kB;
      t.positions = length;
      t.targets = kB * length;
      t.sum_over_sample_split = std::move(sum);
      GrpoObjective objective(Options(type));
      const double loss = objective.Loss(t).item<double>();
      return std::pair{loss, objective.TakeMetrics()};
    };
    std::vector<at::Tensor> other;
    part(2, kT - 2, [&](const at::Tensor& x) { other.push_back(x.detach().clone()); return x; });
    size_t call = 0;
    auto [loss, metrics] = part(0, 2, [&](const at::Tensor& x) { return x + other.at(call++).to(x.scalar_type()); });
    EXPECT_EQ(call, other.size());
    EXPECT_NEAR(loss, want.loss.item<double>(), 1e-6) << static_cast<int>(type);
    EXPECT_NEAR(metrics[0], want.kl.item<double>(), 1e-6);
    EXPECT_NEAR(metrics[3], want.clip_ratio.item<double>(), 1e-9);
    // The test can fail: block A alone is another number.
    const double alone = part(0, 2, nullptr).first;
    EXPECT_GT(std::abs(alone - want.loss.item<double>()), 1e-4) << static_cast<int>(type);
  }
}

TEST(GrpoObjectiveTest, RefusesMissingRolloutData) {
  GrpoObjective objective(Options(GrpoLossType::kGrpo));
  TargetLosses t;
  t.nll = at::zeros({kB * kT});
  t.samples = kB;
  t.positions = kT;
  EXPECT_THROW(objective.Loss(t), c10::Error);
  GrpoLossOptions dapo = Options(GrpoLossType::kDapo);
  dapo.normalizer = 0;
  t.sample_data = at::zeros({kB, 2 * kT + 1}, at::kDouble);
  EXPECT_THROW(GrpoObjective(dapo).Loss(t), c10::Error);
}

}  // namespace
}  // namespace tessera::parallel
