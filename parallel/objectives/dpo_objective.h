// DPO as an Objective (objective.h; docs/post-training.md): each micro-batch holds pairs as two samples
// each, the chosen completion's sample then the rejected one's (prompt then completion, only the
// completion's targets trained: the Trainer's preference rows); the loss is the mean over the pairs of
// DpoLosses (preference_loss.h) with the reference's log-probabilities from TargetLosses::sample_data.
// SequenceLogps is the pass that computes those: it writes each sample's log-probability into a table.
#ifndef TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_

#include <string>
#include <vector>

#include "parallel/objectives/objective.h"
#include "parallel/objectives/preference_loss.h"

namespace tessera::parallel {

// Each sample's log-probability of its trained targets, [samples] fp32 differentiable in t.nll: the
// sum of −nll over them, or (per_token_mean: IPO's) that sum over their number (0 without any), of
// the whole samples (TargetLosses::WholeSamples: summed over sequence blocks).
at::Tensor SampleLogps(const TargetLosses& t, bool per_token_mean);

class DpoObjective final : public Objective {
 public:
  explicit DpoObjective(const DpoLossOptions& options) : options_(options) {}
  const char* name() const override { return "dpo"; }
  // t.sample_data: [samples] fp64, the reference's log-probability of each sample (as SampleLogps,
  // per-token means for ipo); samples = 2 · pairs, chosen then rejected.
  at::Tensor Loss(const TargetLosses& t) const override;
  // TRL's DPOTrainer metrics (means over the pairs): rewards_chosen = β·(π_c − ρ_c), rewards_rejected,
  // rewards_margin (their difference), rewards_accuracy (the share with chosen's above rejected's),
  // logps_chosen = π_c, logps_rejected.
  std::vector<std::string> metric_names() const override;
  std::vector<double> TakeMetrics() const override;

 private:
  DpoLossOptions options_;
  mutable MetricSums metrics_{6};
};

// A forward pass that records each sample's log-probability (SampleLogps) into `table` at the index
// t.sample_data gives it ([samples] fp64 holding integers), and returns 0 (no gradient). DPO's
// reference scoring: the Trainer runs it over the pairs with the reference's weights.
class SequenceLogps final : public Objective {
 public:
  SequenceLogps(std::vector<double>* table, bool per_token_mean) : table_(table), per_token_mean_(per_token_mean) {}
  const char* name() const override { return "sequence_logps"; }
  at::Tensor Loss(const TargetLosses& t) const override;

 private:
  std::vector<double>* table_;
  bool per_token_mean_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_
