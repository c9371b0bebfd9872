#include "parallel/objectives/dpo_objective.h"

#include <ATen/ATen.h>

namespace tessera::parallel {

at::Tensor SampleLogps(const TargetLosses& t, bool per_token_mean) {
  at::Tensor logps = -t.nll;
  const at::Tensor trained = t.trained.defined() ? t.trained.to(logps.scalar_type()) : at::ones_like(logps);
  logps = logps * trained;
  // The sample of each entry: its index into [samples · positions] over positions.
  const at::Tensor index = t.rows.defined()
                               ? t.rows
                               : at::arange(t.samples * t.positions, at::TensorOptions().dtype(at::kLong).device(logps.device()));
  const at::Tensor sample = at::div(index, t.positions, "floor");
  at::Tensor sums = t.WholeSamples(at::zeros({t.samples}, logps.options()).index_add(0, sample, logps));
  if (!per_token_mean) return sums;
  const at::Tensor counts = t.WholeSamples(at::zeros({t.samples}, logps.options()).index_add(0, sample, trained));
  return sums / counts.clamp_min(1);
}

at::Tensor DpoObjective::Loss(const TargetLosses& t) const {
  TORCH_CHECK(t.samples % 2 == 0, "dpo: a micro-batch of ", t.samples, " samples is not pairs");
  TORCH_CHECK(t.sample_data.defined() && t.sample_data.numel() == t.samples,
              "dpo: the micro-batch has no reference log-probabilities");
  const int64_t pairs = t.samples / 2;
  const at::Tensor logps = SampleLogps(t, options_.type == DpoLossType::kIpo).view({pairs, 2});
  const at::Tensor ref = t.sample_data.to(logps.device(), logps.scalar_type()).view({pairs, 2});
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
  TORCH_CHECK(t.sample_data.defined() && t.sample_data.numel() == t.samples,
              "sequence_logps: the micro-batch has no sample indices");
  RecordSampleValues(t, SampleLogps(t, per_token_mean_), table_);
  return at::zeros({}, t.nll.options()).sum();
}

}  // namespace tessera::parallel
