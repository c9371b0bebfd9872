// The per-pair losses of preference learning, as TRL 0.24 defines them (issue 56; docs/post-training.md):
// DPO's (DPOTrainer.dpo_loss, loss types sigmoid and ipo, label smoothing) from the policy's and the
// frozen reference's log-probabilities of each pair's completions, and a reward model's
// (RewardTrainer.compute_loss: a margin, the centring term) from its scores. The objectives that feed
// them (the log-probabilities summed over a completion's tokens across the ranks that split it) call
// these; the step's loss is the mean over its pairs. fp32 or fp64 tensors of shape [pairs].
#ifndef TESSERA_PARALLEL_OBJECTIVES_PREFERENCE_LOSS_H_
#define TESSERA_PARALLEL_OBJECTIVES_PREFERENCE_LOSS_H_

#include <ATen/core/Tensor.h>

#include "layout/modes.h"

namespace tessera::parallel {

using layout::DpoLossType;  // sigmoid or ipo (the per-token means of ipo are the caller's).

struct DpoLossOptions {
  double beta = 0.1;
  DpoLossType type = DpoLossType::kSigmoid;
  double label_smoothing = 0;  // In [0, 0.5); sigmoid only.
};

// Each pair's log-probabilities of its chosen and rejected completions under the policy (differentiable)
// and the reference (constants).
struct PairLogps {
  at::Tensor chosen;
  at::Tensor rejected;
  at::Tensor ref_chosen;
  at::Tensor ref_rejected;
};

struct PreferenceTerms {
  at::Tensor losses;            // [pairs], differentiable.
  at::Tensor chosen_rewards;    // [pairs], detached: DPO β·(π_c − ρ_c); a reward model's score of chosen.
  at::Tensor rejected_rewards;  // [pairs], detached.
};

PreferenceTerms DpoLosses(const PairLogps& logps, const DpoLossOptions& options);

// A reward model's: −logσ(r_c − r_r − margin) + center_coefficient·(r_c + r_r)² per pair (`margin`
// undefined: none) — whose mean over the pairs is RewardTrainer's loss.
PreferenceTerms RewardLosses(const at::Tensor& chosen, const at::Tensor& rejected, const at::Tensor& margin,
                             double center_coefficient);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_PREFERENCE_LOSS_H_
