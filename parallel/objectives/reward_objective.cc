#include "parallel/objectives/reward_objective.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "parallel/objectives/preference_loss.h"

namespace tessera::parallel {

at::Tensor CompletionScores(const TargetLosses& t, PairRows rows) {
  TORCH_CHECK(t.scores.defined() && t.rows.defined(), "reward: the model has no score head");
  // Each score to its completion (rows index [samples · positions]), over the whole samples; each
  // completion must have exactly one scored position in all its parts.
  const at::Tensor completion = PairCompletionOf(t.rows, t.positions, rows, PairStarts(t.sample_data, rows));
  const int64_t n = rows == PairRows::kSeparate ? t.samples : 2 * t.samples;
  const at::Tensor scores = t.WholeSamples(at::zeros({n}, t.scores.options()).index_add(0, completion, t.scores));
  at::Tensor counts;
  {
    at::NoGradGuard no_grad;
    counts = t.WholeSamples(at::zeros({n}, t.scores.options()).index_add(0, completion, at::ones_like(t.scores)));
  }
  TORCH_CHECK(counts.eq(1).all().item<bool>(), "reward: each completion needs exactly one scored position (its last token)");
  return scores;
}

at::Tensor RewardObjective::Loss(const TargetLosses& t) const {
  TORCH_CHECK(t.scores.defined() && t.rows.defined(), "reward: the model has no score head");
  // The micro-batch's margins when it has them (a file without margins: kSeparate has no sample data,
  // kSharedPrompt margins of 0 beside its rejected starts — the same loss as none).
  at::Tensor margin;
  if (rows_ == PairRows::kSharedPrompt || t.sample_data.defined()) {
    margin = PairValues(t.sample_data, t.samples, rows_, "reward").select(1, 0);
  } else {
    TORCH_CHECK(t.samples % 2 == 0, "reward: a micro-batch of ", t.samples, " samples is not pairs");
  }
  TORCH_CHECK(rows_ == PairRows::kSeparate || !t.sum_over_sample_split, "reward: a shared-prompt row split over sequence blocks");
  const at::Tensor scores = CompletionScores(t, rows_).view({-1, 2});
  if (margin.defined()) margin = margin.to(scores.device(), scores.scalar_type());
  const PreferenceTerms terms = RewardLosses(scores.select(1, 0), scores.select(1, 1), margin, center_coefficient_);
  {
    const at::Tensor c = terms.chosen_rewards.to(at::kDouble), r = terms.rejected_rewards.to(at::kDouble);
    metrics_.Add(at::stack({c.mean(), r.mean(), (c - r).mean(), (c > r).to(at::kDouble).mean()}));
  }
  return terms.losses.mean();
}

std::vector<std::string> RewardObjective::metric_names() const {
  return {"rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy"};
}

std::vector<double> RewardObjective::TakeMetrics() const { return metrics_.Take(); }

at::Tensor SequenceScores::Loss(const TargetLosses& t) const {
  TORCH_CHECK(t.sample_data.defined() && t.sample_data.numel() == t.samples,
              "sequence_scores: the micro-batch has no sample indices");
  RecordSampleValues(t.sample_data, CompletionScores(t, PairRows::kSeparate), table_);
  return at::zeros({}, t.scores.options());
}

void WriteRewardRow(const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion, int64_t* row) {
  size_t at = 0;
  for (const std::vector<int32_t>* part : {&prompt, &completion}) {
    for (int32_t id : *part) {
      row[at] = at == 0 ? id : -int64_t{id} - 1;
      ++at;
    }
  }
  row[at] = 0;
}

}  // namespace tessera::parallel
