// GRPO's loss on one micro-batch of completions, as TRL 0.24's GRPOTrainer._compute_loss defines it
// (token-level importance sampling, no entropy mask, no two-sided delta, no vLLM correction):
//   ratio = exp(logπ − logπ_old) per completion token (π_old: the policy that sampled; the same
//           values, without gradient, at num_iterations 1);
//   per-token loss = −min(ratio·A, clip(ratio, 1 − ε, 1 + ε_high)·A) + β·(exp(logρ − logπ) − (logρ − logπ) − 1)
//           (A the completion's advantage, ρ the frozen reference; no KL term at β = 0);
//   grpo:    mean over the micro-batch's completions of each one's mean over its tokens;
//   bnpo:    the sum over the micro-batch's completion tokens / their number;
//   dr_grpo: that sum / (completions · max_completion_tokens);
//   dapo:    that sum / `normalizer` (TRL: the step's completion tokens over every process and
//            micro-batch / the processes; the caller scales it to its weighting of micro-batches).
// grpo, bnpo and dr_grpo are TRL's value before its division by the gradient-accumulation steps (the
// Trainer weighs micro-batches itself). Metrics as TRL logs them: the KL's and the clipped shares' means
// over the micro-batch's completion tokens. No torch state: a function of its tensors, tested against
// TRL's own code (tests/python/grpo_loss_test.py).
#ifndef TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_H_
#define TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "parallel/objectives/grpo_loss_options.h"

namespace tessera::parallel {

// One micro-batch of B completions, each padded to T positions.
struct GrpoInputs {
  at::Tensor logps;      // [B, T], differentiable: the policy's log-probability of each completion token.
  at::Tensor old_logps;  // [B, T], or undefined: logps without gradient (the sampling policy's).
  at::Tensor ref_logps;  // [B, T]: the reference's; needed when beta != 0.
  at::Tensor advantages; // [B].
  at::Tensor mask;       // [B, T]: 1 at completion tokens, 0 at padding (any dtype).
};

struct GrpoTerms {
  at::Tensor loss;            // Scalar, differentiable in logps.
  at::Tensor per_token_loss;  // [B, T], before the mask.
  // Per token, without gradient, before the mask: the KL term (undefined at beta 0) and whether the
  // ratio was clipped below (A < 0) or above (A > 0) — the metrics' numerators.
  at::Tensor per_token_kl;
  at::Tensor low_clipped, high_clipped;
  // Means over the completion tokens (0 with none), without gradient, float64 scalars.
  at::Tensor kl;              // Undefined at beta 0.
  at::Tensor low_clip;        // ratio < 1 − ε where A < 0.
  at::Tensor high_clip;       // ratio > 1 + ε_high where A > 0.
  at::Tensor clip_ratio;      // Either.
};

// TORCH_CHECKs the shapes, beta's reference and dapo's normalizer.
GrpoTerms GrpoLosses(const GrpoInputs& in, const GrpoLossOptions& options);

// The loss type's normalisation of B completions' masked per-token losses, given each one's sum
// `sums` [B] (differentiable) and token count `counts` [B]: grpo mean_i(sums_i / max(counts_i, 1)); bnpo
// Σ sums / max(Σ counts, 1); dr_grpo Σ sums / (B · max_completion_tokens); dapo Σ sums / normalizer.
// GrpoLosses' loss is this of its rows; a caller whose completions are split (sequence blocks) passes
// the whole completions' sums and counts.
at::Tensor GrpoNormalize(const at::Tensor& sums, const at::Tensor& counts, const GrpoLossOptions& options);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_GRPO_LOSS_H_
