#include "parallel/objectives/grpo_loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace tessera::parallel {

GrpoTerms GrpoLosses(const GrpoInputs& in, const GrpoLossOptions& o) {
  TORCH_CHECK(in.logps.dim() == 2, "grpo: logps must be [completions, positions]");
  const int64_t B = in.logps.size(0);
  TORCH_CHECK(in.mask.sizes() == in.logps.sizes(), "grpo: the mask is not shaped as logps");
  TORCH_CHECK(in.advantages.dim() == 1 && in.advantages.size(0) == B, "grpo: one advantage per completion");
  TORCH_CHECK(!in.old_logps.defined() || in.old_logps.sizes() == in.logps.sizes(), "grpo: old_logps not shaped as logps");
  TORCH_CHECK(o.beta == 0 || (in.ref_logps.defined() && in.ref_logps.sizes() == in.logps.sizes()),
              "grpo: beta ", o.beta, " needs the reference's log-probabilities, shaped as logps");
  TORCH_CHECK(o.type != GrpoLossType::kDrGrpo || o.max_completion_tokens > 0, "grpo: dr_grpo needs max_completion_tokens");
  TORCH_CHECK(o.type != GrpoLossType::kDapo || o.normalizer > 0, "grpo: dapo needs a positive normalizer");
  const at::Tensor mask = in.mask.to(in.logps.scalar_type());
  const at::Tensor old = in.old_logps.defined() ? in.old_logps.to(in.logps.scalar_type()) : in.logps.detach();
  const at::Tensor adv = in.advantages.to(in.logps.scalar_type()).unsqueeze(1);
  const at::Tensor ratio = at::exp(in.logps - old);
  const at::Tensor clipped = at::clamp(ratio, 1 - o.epsilon, 1 + o.epsilon_high);
  GrpoTerms out;
  out.per_token_loss = -at::minimum(ratio * adv, clipped * adv);
  at::Tensor per_token_kl;
  if (o.beta != 0) {
    const at::Tensor d = in.ref_logps.to(in.logps.scalar_type()) - in.logps;
    per_token_kl = at::exp(d) - d - 1;
    out.per_token_loss = out.per_token_loss + o.beta * per_token_kl;
  }
  out.loss = GrpoNormalize((out.per_token_loss * mask).sum(-1), mask.sum(-1), o);
  // The metrics: means over the completion tokens, as TRL's masked_batch_mean.
  at::NoGradGuard no_grad;
  const at::Tensor tokens = mask.sum().clamp_min(1.0).to(at::kDouble);
  auto mean = [&](const at::Tensor& x) { return (x.to(at::kDouble) * mask.to(at::kDouble)).sum() / tokens; };
  const at::Tensor r = ratio.detach();
  const at::Tensor low = (r < 1 - o.epsilon) & (adv < 0);
  const at::Tensor high = (r > 1 + o.epsilon_high) & (adv > 0);
  out.low_clipped = low;
  out.high_clipped = high;
  out.low_clip = mean(low);
  out.high_clip = mean(high);
  out.clip_ratio = mean(low | high);
  if (per_token_kl.defined()) {
    out.per_token_kl = per_token_kl.detach();
    out.kl = mean(out.per_token_kl);
  }
  return out;
}

at::Tensor GrpoNormalize(const at::Tensor& sums, const at::Tensor& counts, const GrpoLossOptions& o) {
  TORCH_CHECK(sums.dim() == 1 && counts.sizes() == sums.sizes(), "grpo: one sum and one count per completion");
  const int64_t B = sums.size(0);
  const at::Tensor n = counts.to(sums.scalar_type());
  switch (o.type) {
    case GrpoLossType::kGrpo:
      return (sums / n.clamp_min(1.0)).mean();
    case GrpoLossType::kBnpo:
      return sums.sum() / n.sum().clamp_min(1.0);
    case GrpoLossType::kDrGrpo:
      TORCH_CHECK(o.max_completion_tokens > 0, "grpo: dr_grpo needs max_completion_tokens");
      return sums.sum() / static_cast<double>(B * o.max_completion_tokens);
    case GrpoLossType::kDapo:
      TORCH_CHECK(o.normalizer > 0, "grpo: dapo needs a positive normalizer");
      return sums.sum() / o.normalizer;
  }
  TORCH_CHECK(false, "grpo: unknown loss type");
}

}  // namespace tessera::parallel
