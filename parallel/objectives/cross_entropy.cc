#include <ATen/ATen.h>

#include "parallel/objectives/objective.h"

namespace tessera::parallel {

at::Tensor CrossEntropy::Loss(const TargetLosses& t) const {
  at::Tensor losses = t.nll;
  if (t.trained.defined()) losses = losses * (t.trained.to(losses.scalar_type()) * t.target_weight);
  // The mean over every target of the part, those left out by `rows` adding 0.
  return t.rows.defined() ? losses.sum() / static_cast<double>(t.targets) : losses.mean();
}

std::shared_ptr<const Objective> DefaultObjective() {
  static const std::shared_ptr<const Objective> kCrossEntropy = std::make_shared<CrossEntropy>();
  return kCrossEntropy;
}

}  // namespace tessera::parallel
