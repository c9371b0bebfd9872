#include "parallel/objectives/dpo_objective.h"

#include <ATen/ATen.h>

namespace tessera::parallel {

at::Tensor CompletionLogps(const TargetLosses& t, PairRows rows, bool per_token_mean) {
  at::Tensor logps = -t.nll;
  const at::Tensor trained = t.trained.defined() ? t.trained.to(logps.scalar_type()) : at::ones_like(logps);
  logps = logps * trained;
  // The completion of each entry: its index into [samples · positions] over positions — and in a
  // shared-prompt row, whether its input is before the rejected branch's start.
  const at::Tensor index = t.rows.defined()
                               ? t.rows
                               : at::arange(t.samples * t.positions, at::TensorOptions().dtype(at::kLong).device(logps.device()));
  const at::Tensor completion = PairCompletionOf(index, t.positions, rows, PairStarts(t.sample_data, rows));
  const int64_t n = rows == PairRows::kSeparate ? t.samples : 2 * t.samples;
  at::Tensor sums = t.WholeSamples(at::zeros({n}, logps.options()).index_add(0, completion, logps));
  if (per_token_mean) {
    const at::Tensor counts = t.WholeSamples(at::zeros({n}, logps.options()).index_add(0, completion, trained));
    sums = sums / counts.clamp_min(1);
  }
  return sums.view({n / 2, 2});
}

at::Tensor DpoObjective::Loss(const TargetLosses& t) const {
  const at::Tensor values = PairValues(t.sample_data, t.samples, rows_, "dpo");
  TORCH_CHECK(rows_ == PairRows::kSeparate || !t.sum_over_sample_split, "dpo: a shared-prompt row split over sequence blocks");
  const at::Tensor logps = CompletionLogps(t, rows_, options_.type == DpoLossType::kIpo);
  const at::Tensor ref = values.to(logps.device(), logps.scalar_type());
  const PreferenceTerms terms = DpoLosses(
      {logps.select(1, 0), logps.select(1, 1), ref.select(1, 0), ref.select(1, 1)}, options_);
  {
    const at::Tensor c = terms.chosen_rewards.to(at::kDouble), r = terms.rejected_rewards.to(at::kDouble);
    const at::Tensor lp = logps.detach().to(at::kDouble);
    metrics_.Add(at::stack({c.mean(), r.mean(), (c - r).mean(), (c > r).to(at::kDouble).mean(),
                            lp.select(1, 0).mean(), lp.select(1, 1).mean()}));
  }
  return terms.losses.mean();
}

std::vector<std::string> DpoObjective::metric_names() const {
  return {"rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy", "logps_chosen", "logps_rejected"};
}

std::vector<double> DpoObjective::TakeMetrics() const { return metrics_.Take(); }

at::Tensor SequenceLogps::Loss(const TargetLosses& t) const {
  const at::Tensor where = PairValues(t.sample_data, t.samples, rows_, "sequence_logps");
  RecordSampleValues(where, CompletionLogps(t, rows_, per_token_mean_), table_);
  return at::zeros({}, t.nll.options()).sum();
}

}  // namespace tessera::parallel
