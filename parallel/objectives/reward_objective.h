// A reward model's objective (objective.h; docs/post-training.md): each micro-batch holds pairs as two
// samples each, the chosen completion's then the rejected one's (prompt then completion), or as one
// shared-prompt row each (pair_rows.h), each completion scored once by the score head at its last
// token (the Trainer's reward rows: that position's target is the only trained one); the loss is the mean over the pairs of RewardLosses (preference_loss.h), TRL 0.24's
// RewardTrainer loss, with each pair's margin from TargetLosses::sample_data.
#ifndef TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/objectives/objective.h"
#include "parallel/objectives/pair_rows.h"

namespace tessera::parallel {

// Each completion's score, [completions] fp32 differentiable in t.scores: the score head's output at
// its one scored position, of the whole samples (TargetLosses::WholeSamples); an error unless every
// completion has exactly one. A completion is a sample in `rows` kSeparate (what a scoring pass of
// single sequences is), half a shared-prompt row in kSharedPrompt (PairCompletionOf).
at::Tensor CompletionScores(const TargetLosses& t, PairRows rows);

class RewardObjective final : public Objective {
 public:
  RewardObjective(double center_coefficient, PairRows rows) : center_coefficient_(center_coefficient), rows_(rows) {}
  const char* name() const override { return "reward"; }
  // t.scores: one per completion (CompletionScores; a micro-batch of pairs that is not is an error);
  // t.sample_data (pair_rows.h PairValues), fp64: kSeparate [samples], each pair's margin (TRL's
  // "margin" column) at both samples, or undefined: no margins; kSharedPrompt [pairs, 3], the margin
  // twice (0 without: the same loss) and the rejected start.
  at::Tensor Loss(const TargetLosses& t) const override;
  // TRL's RewardTrainer metrics (means over the pairs): rewards_chosen (the chosen completion's
  // score), rewards_rejected, rewards_margin (their difference), rewards_accuracy (the share with
  // chosen's above rejected's).
  std::vector<std::string> metric_names() const override;
  std::vector<double> TakeMetrics() const override;

 private:
  double center_coefficient_;
  PairRows rows_;
  mutable MetricSums metrics_{4};
};

// A forward pass that records each sample's score into `table` at the index t.sample_data gives it
// ([samples] fp64 holding integers; one outside the table: a padding sample, not recorded) and
// returns 0 (no gradient): `tessera score`.
class SequenceScores final : public Objective {
 public:
  explicit SequenceScores(std::vector<double>* table) : table_(table) {}
  const char* name() const override { return "sequence_scores"; }
  at::Tensor Loss(const TargetLosses& t) const override;

 private:
  std::vector<double>* table_;
};

// One prompt + completion as a reward model's row of masked targets (SFT data's encoding,
// formats/data/token_dataset.h): every token untrained (the first as itself, the others −id − 1) and
// one trained target, token 0, right after the last, so that the only trained position is the last
// token's — where the score head reads (Decoder::Head). Writes prompt + completion + 1 entries of `row`.
void WriteRewardRow(const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion, int64_t* row);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_REWARD_OBJECTIVE_H_
