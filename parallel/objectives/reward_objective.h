// A reward model's objective (objective.h; docs/post-training.md): each micro-batch holds pairs as two
// samples each, the chosen completion's then the rejected one's (prompt then completion), each scored
// once by the score head at its last token (the Trainer's reward rows: that position's target is the
// only trained one); the loss is the mean over the pairs of RewardLosses (preference_loss.h), TRL 0.24's
// RewardTrainer loss, with each pair's margin from TargetLosses::sample_data.
#ifndef TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_

#include <string>
#include <vector>

#include "parallel/objectives/objective.h"

namespace tessera::parallel {

class RewardObjective final : public Objective {
 public:
  explicit RewardObjective(double center_coefficient) : center_coefficient_(center_coefficient) {}
  const char* name() const override { return "reward"; }
  // t.scores: one per sample, in sample order (a micro-batch of pairs that is not is an error);
  // t.sample_data: undefined (no margins) or [samples] fp64, each pair's margin at its chosen sample.
  at::Tensor Loss(const TargetLosses& t) const override;
  // TRL's RewardTrainer metrics (means over the pairs): rewards_chosen (the chosen completion's
  // score), rewards_rejected, rewards_margin (their difference), rewards_accuracy (the share with
  // chosen's above rejected's).
  std::vector<std::string> metric_names() const override;
  std::vector<double> TakeMetrics() const override;

 private:
  double center_coefficient_;
  mutable std::vector<double> sums_ = std::vector<double>(4, 0.0);
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_
