#include "parallel/objectives/grpo_objective.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace tessera::parallel {

at::Tensor GrpoObjective::Loss(const TargetLosses& t) const {
  const int64_t B = t.samples, P = t.positions;
  TORCH_CHECK(t.sample_data.defined() && t.sample_data.dim() == 2 && t.sample_data.size(0) == B &&
                  t.sample_data.size(1) % 2 == 1,
              "grpo: the micro-batch has no [samples, 2·positions + 1] rollout data");
  // The forward may have left out the positions after the batch's last trained target (Decoder::Loss):
  // the data's positions are the whole part's, of which these are the first P.
  const int64_t whole = (t.sample_data.size(1) - 1) / 2;
  TORCH_CHECK(P <= whole, "grpo: ", P, " positions, rollout data for ", whole);
  // Dense [B, P] log-probabilities and completion mask from the head's (possibly row-selected) targets.
  const at::TensorOptions f32 = t.nll.options();
  const at::Tensor trained = t.trained.defined() ? t.trained.to(at::kFloat) : at::ones_like(t.nll);
  at::Tensor logps = -t.nll, mask = trained;
  if (t.rows.defined()) {
    logps = at::zeros({B * P}, f32).index_put({t.rows}, logps);
    mask = at::zeros({B * P}, f32).index_put({t.rows}, trained);
  }
  logps = logps.view({B, P});
  mask = mask.view({B, P});
  const at::Tensor data = t.sample_data.to(logps.device(), at::kFloat);
  GrpoInputs in;
  in.logps = logps;
  if (old_ == GrpoOldLogps::kGiven) in.old_logps = data.narrow(1, 0, P);
  if (options_.beta != 0) in.ref_logps = data.narrow(1, whole, P);
  in.advantages = data.select(1, 2 * whole);
  in.mask = mask;
  TORCH_CHECK(options_.type != GrpoLossType::kDapo || options_.normalizer > 0,
              "grpo: dapo's normalizer was not set for this step");
  const GrpoTerms terms = GrpoLosses(in, options_);
  // Whole completions: each one's sum and token count over its sequence blocks.
  const at::Tensor sums = t.WholeSamples((terms.per_token_loss * mask).sum(-1));
  const at::Tensor counts = t.WholeSamples(mask.sum(-1));
  const at::Tensor loss = GrpoNormalize(sums, counts, options_);
  {
    at::NoGradGuard no_grad;
    const at::Tensor m = mask.to(at::kDouble);
    auto whole_sum = [&](const at::Tensor& x) { return t.WholeSamples((x.to(at::kDouble) * m).sum(-1)).sum(); };
    const at::Tensor tokens = counts.to(at::kDouble).sum().clamp_min(1.0);
    const at::Tensor kl = terms.per_token_kl.defined() ? whole_sum(terms.per_token_kl) / tokens
                                                       : at::zeros({}, at::TensorOptions().dtype(at::kDouble));
    metrics_.Add(at::stack({kl.to(at::kCPU), (whole_sum(terms.low_clipped) / tokens).to(at::kCPU),
                            (whole_sum(terms.high_clipped) / tokens).to(at::kCPU),
                            (whole_sum(terms.low_clipped | terms.high_clipped) / tokens).to(at::kCPU)}));
  }
  return loss;
}

std::vector<std::string> GrpoObjective::metric_names() const {
  return {"kl", "clip_ratio_low", "clip_ratio_high", "clip_ratio"};
}

std::vector<double> GrpoObjective::TakeMetrics() const { return metrics_.Take(); }

}  // namespace tessera::parallel
