// GRPO's loss options as plain values (no torch): what grpo_loss.h computes with, and what
// TrainerOptions carries from the spec's grpo: section.
#ifndef TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_OPTIONS_H_
#define TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_OPTIONS_H_

#include <cstdint>

namespace tessera::parallel {

enum class GrpoLossType { kGrpo, kBnpo, kDrGrpo, kDapo };

struct GrpoLossOptions {
  GrpoLossType type = GrpoLossType::kGrpo;
  double beta = 0;           // The KL term's weight (0: none, no reference needed).
  double epsilon = 0.2;      // The ratio's lower clip: 1 − epsilon.
  double epsilon_high = 0.2; // Its upper clip: 1 + epsilon_high.
  int64_t max_completion_tokens = 0;  // dr_grpo's denominator (per completion).
  double normalizer = 0;     // dapo's denominator (> 0).
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_OPTIONS_H_
