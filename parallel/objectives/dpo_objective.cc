#include "parallel/objectives/dpo_objective.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace tessera::parallel {
namespace {

// The sample data each form gives per pair: kSeparate one value per sample, kSharedPrompt three a pair.
void CheckSampleData(const TargetLosses& t, PairRows rows, const char* who) {
  if (rows == PairRows::kSeparate) {
    TORCH_CHECK(t.samples % 2 == 0, who, ": a micro-batch of ", t.samples, " samples is not pairs");
    TORCH_CHECK(t.sample_data.defined() && t.sample_data.numel() == t.samples, who,
                ": the micro-batch has no value per completion");
  } else {
    TORCH_CHECK(t.sample_data.defined() && t.sample_data.dim() == 2 && t.sample_data.size(0) == t.samples &&
                    t.sample_data.size(1) == 3,
                who, ": the shared-prompt micro-batch has no values per pair");
    TORCH_CHECK(!t.sum_over_sample_split, who, ": shared-prompt rows are never split over sequence blocks");
  }
}

// Each pair's two values of the sample data, [pairs, 2].
at::Tensor PairValues(const TargetLosses& t, PairRows rows) {
  return rows == PairRows::kSeparate ? t.sample_data.reshape({-1, 2}) : t.sample_data.narrow(1, 0, 2);
}

}  // namespace

at::Tensor CompletionLogps(const TargetLosses& t, PairRows rows, bool per_token_mean) {
  at::Tensor logps = -t.nll;
  const at::Tensor trained = t.trained.defined() ? t.trained.to(logps.scalar_type()) : at::ones_like(logps);
  logps = logps * trained;
  // The completion of each entry: its index into [samples · positions] over positions — and in a
  // shared-prompt row, whether its input is before the rejected branch's start.
  const at::Tensor index = t.rows.defined()
                               ? t.rows
                               : at::arange(t.samples * t.positions, at::TensorOptions().dtype(at::kLong).device(logps.device()));
  at::Tensor completion = at::div(index, t.positions, "floor");
  if (rows == PairRows::kSharedPrompt) {
    const at::Tensor start = t.sample_data.select(1, 2).to(logps.device(), at::kLong);  // [pairs]
    const at::Tensor column = index - completion * t.positions;
    completion = completion * 2 + column.ge(start.index_select(0, completion)).to(at::kLong);
  }
  const int64_t n = rows == PairRows::kSeparate ? t.samples : 2 * t.samples;
  at::Tensor sums = t.WholeSamples(at::zeros({n}, logps.options()).index_add(0, completion, logps));
  if (per_token_mean) {
    const at::Tensor counts = t.WholeSamples(at::zeros({n}, logps.options()).index_add(0, completion, trained));
    sums = sums / counts.clamp_min(1);
  }
  return sums.view({n / 2, 2});
}

at::Tensor DpoObjective::Loss(const TargetLosses& t) const {
  CheckSampleData(t, rows_, "dpo");
  const at::Tensor logps = CompletionLogps(t, rows_, options_.type == DpoLossType::kIpo);
  const at::Tensor ref = PairValues(t, rows_).to(logps.device(), logps.scalar_type());
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
  CheckSampleData(t, rows_, "sequence_logps");
  RecordSampleValues(PairValues(t, rows_), CompletionLogps(t, rows_, per_token_mean_), table_);
  return at::zeros({}, t.nll.options()).sum();
}

void WriteSharedPromptRow(const std::vector<int32_t>& prompt, const std::vector<int32_t>& chosen,
                          const std::vector<int32_t>& rejected, int64_t T, int64_t* row, int64_t* positions) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  int64_t at = 0;
  auto put = [&](int64_t id, bool trained, int64_t position) {
    row[at] = trained || at == 0 ? id : -id - 1;  // The first entry is never a target.
    if (positions != nullptr && at <= 2 * T) positions[at] = std::min(position, T - 1);
    ++at;
  };
  for (int64_t t = 0; t + 1 < P; ++t) put(prompt[t], false, t);
  for (const std::vector<int32_t>* completion : {&chosen, &rejected}) {
    const size_t first = P > 0 ? 0 : 1;  // The completion's first trained token.
    put(P > 0 ? prompt[P - 1] : (*completion)[0], false, std::max<int64_t>(P - 1, 0));
    for (size_t t = first; t < completion->size(); ++t) put((*completion)[t], true, P + static_cast<int64_t>(t));
  }
}

}  // namespace tessera::parallel
