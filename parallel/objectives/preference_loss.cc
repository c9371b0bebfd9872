#include "parallel/objectives/preference_loss.h"

#include <ATen/ATen.h>

namespace tessera::parallel {

PreferenceTerms DpoLosses(const PairLogps& p, const DpoLossOptions& o) {
  const at::Tensor h = (p.chosen - p.rejected) - (p.ref_chosen - p.ref_rejected);
  PreferenceTerms out;
  switch (o.type) {
    case DpoLossType::kSigmoid:
      out.losses = -at::log_sigmoid(o.beta * h) * (1 - o.label_smoothing) - at::log_sigmoid(-o.beta * h) * o.label_smoothing;
      break;
    case DpoLossType::kIpo:
      out.losses = (h - 1 / (2 * o.beta)).pow(2);
      break;
  }
  out.chosen_rewards = (o.beta * (p.chosen - p.ref_chosen)).detach();
  out.rejected_rewards = (o.beta * (p.rejected - p.ref_rejected)).detach();
  return out;
}

PreferenceTerms RewardLosses(const at::Tensor& chosen, const at::Tensor& rejected, const at::Tensor& margin,
                             double center_coefficient) {
  at::Tensor d = chosen - rejected;
  if (margin.defined()) d = d - margin;
  PreferenceTerms out;
  out.losses = -at::log_sigmoid(d);
  if (center_coefficient != 0) out.losses = out.losses + center_coefficient * (chosen + rejected).pow(2);
  out.chosen_rewards = chosen.detach();
  out.rejected_rewards = rejected.detach();
  return out;
}

}  // namespace tessera::parallel
