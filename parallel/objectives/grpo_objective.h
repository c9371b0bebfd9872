// GRPO as an Objective (objective.h; TRL 0.24's GRPOTrainer loss: grpo_loss.h): each micro-batch's
// samples are completions — the prompt then the sampled completion, only the completion's targets
// trained (DPO's rows) — and the Trainer gives each sample, through TargetLosses::sample_data,
// [samples, 2·P + 1] fp64 for the P target positions of the forward pass (this rank's sequence block
// under sp, from its first position): the sampling policy's log-probability of each position's
// target (read with GrpoOldLogps::kGiven), the reference's (read only when beta != 0), and the
// completion's advantage (grpo_rows.h writes them). The policy's
// log-probabilities are the head's at the job's sampling temperature (Decoder::set_logit_temperature).
// The loss is GrpoNormalize over the whole micro-batch: its completions made whole over sequence blocks
// (TargetLosses::WholeSamples), so that every layout computes the one-process value.
#ifndef TESSERA_PARALLEL_OBJECTIVES_GRPO_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_GRPO_OBJECTIVE_H_

#include <string>
#include <vector>

#include "parallel/objectives/grpo_loss.h"
#include "parallel/objectives/objective.h"

namespace tessera::parallel {

// Where π_old's log-probabilities come from.
enum class GrpoOldLogps {
  kPolicy,  // The policy's own, without gradient (ratio 1): TRL at num_iterations 1.
  kGiven,   // sample_data's first block (the policy that sampled, scored before the first iteration).
};

class GrpoObjective final : public Objective {
 public:
  explicit GrpoObjective(const GrpoLossOptions& options, GrpoOldLogps old = GrpoOldLogps::kGiven)
      : options_(options), old_(old) {}
  const char* name() const override { return "grpo"; }
  at::Tensor Loss(const TargetLosses& t) const override;
  // TRL's metrics, means over each micro-batch's completion tokens: kl (0 at beta 0), clip_ratio_low
  // (ratio < 1 − ε where A < 0), clip_ratio_high (ratio > 1 + ε_high where A > 0), clip_ratio (either).
  std::vector<std::string> metric_names() const override;
  std::vector<double> TakeMetrics() const override;
  // dapo's normalizer for the coming step's micro-batches (grpo_loss.h; the Trainer's count of the
  // step's completion tokens, scaled to its weighting of micro-batches). Not thread-safe.
  void set_normalizer(double normalizer) { options_.normalizer = normalizer; }

 private:
  GrpoLossOptions options_;
  GrpoOldLogps old_;
  mutable MetricSums metrics_{4};
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_GRPO_OBJECTIVE_H_
