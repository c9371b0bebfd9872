// DPO as an Objective (objective.h; docs/post-training.md): each micro-batch holds pairs in one of two
// forms (pair_rows.h; only the completions' targets trained: the Trainer's preference rows); the loss is
// the mean over the pairs of DpoLosses (preference_loss.h) with the reference's log-probabilities from
// TargetLosses::sample_data. SequenceLogps is the pass that computes those: it writes each completion's
// log-probability into a table.
#ifndef TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_

#include <string>
#include <vector>

#include "parallel/objectives/objective.h"
#include "parallel/objectives/pair_rows.h"
#include "parallel/objectives/preference_loss.h"

namespace tessera::parallel {

// Each pair's log-probabilities of its chosen and rejected completions' trained targets, [pairs, 2]
// fp32 differentiable in t.nll: the sum of −nll over them, or (per_token_mean: IPO's) that sum over
// their number (0 without any), of the whole samples (TargetLosses::WholeSamples: summed over sequence
// blocks).
at::Tensor CompletionLogps(const TargetLosses& t, PairRows rows, bool per_token_mean);

class DpoObjective final : public Objective {
 public:
  DpoObjective(const DpoLossOptions& options, PairRows rows) : options_(options), rows_(rows) {}
  const char* name() const override { return "dpo"; }
  // t.sample_data, fp64: the reference's log-probability of each completion (as CompletionLogps,
  // per-token means for ipo) — kSeparate: [samples], samples = 2 · pairs, chosen then rejected;
  // kSharedPrompt: [pairs, 3], chosen's, rejected's and the row's rejected branch start.
  at::Tensor Loss(const TargetLosses& t) const override;
  // TRL's DPOTrainer metrics (means over the pairs): rewards_chosen = β·(π_c − ρ_c), rewards_rejected,
  // rewards_margin (their difference), rewards_accuracy (the share with chosen's above rejected's),
  // logps_chosen = π_c, logps_rejected.
  std::vector<std::string> metric_names() const override;
  std::vector<double> TakeMetrics() const override;

 private:
  DpoLossOptions options_;
  PairRows rows_;
  mutable MetricSums metrics_{6};
};

// A forward pass that records each completion's log-probability (CompletionLogps) into `table` at the
// index t.sample_data gives it — kSeparate: [samples], one per sample; kSharedPrompt: [pairs, 3],
// chosen's and rejected's indices and the rejected branch's start (fp64 holding integers) — and returns
// 0 (no gradient). DPO's reference scoring: the Trainer runs it over the pairs with the reference's
// weights.
class SequenceLogps final : public Objective {
 public:
  SequenceLogps(std::vector<double>* table, PairRows rows, bool per_token_mean)
      : table_(table), rows_(rows), per_token_mean_(per_token_mean) {}
  const char* name() const override { return "sequence_logps"; }
  at::Tensor Loss(const TargetLosses& t) const override;

 private:
  std::vector<double>* table_;
  PairRows rows_;
  bool per_token_mean_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_DPO_OBJECTIVE_H_
