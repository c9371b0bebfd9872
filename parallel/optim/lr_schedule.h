// Learning rate per step: linear warmup lr·(step+1)/warmup_steps for step < warmup_steps, then
// constant lr, or cosine from lr down to min_lr reached at the last step (steps - 1). No torch.
#ifndef TESSERA_PARALLEL_OPTIM_LR_SCHEDULE_H_
#define TESSERA_PARALLEL_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

namespace tessera::parallel {

struct LrScheduleOptions {
  double lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t steps = 1;
  bool cosine = true;
};

// `step` counts from 0.
double LearningRate(const LrScheduleOptions& o, int64_t step);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OPTIM_LR_SCHEDULE_H_
