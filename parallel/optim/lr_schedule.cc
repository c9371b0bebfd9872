#include "parallel/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace tessera::parallel {

double LearningRate(const LrScheduleOptions& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  if (!o.cosine) return o.lr;
  const int64_t span = std::max<int64_t>(1, o.steps - 1 - o.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tessera::parallel
