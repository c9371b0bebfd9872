// GRPO's micro-batch rows from sampled completions (the Trainer's side of grpo_objective.h): each
// completion becomes one row of seq_len + 1 ids in SFT data's encoding (formats/data/token_dataset.h) —
// the prompt's tokens untrained (the first as itself, the others −id − 1), the completion's trained,
// right-padded with −1 — and one row of the objective's sample data [2·seq_len + 1] fp64: at input
// position t (which predicts id t + 1) the sampling policy's log-probability of that id and the
// reference's (0 where no completion token is predicted), then the completion's advantage. Completion
// token k sits at index P + k (P the prompt's length) and is predicted from position P + k − 1.
#ifndef TESSERA_PARALLEL_OBJECTIVES_GRPO_ROWS_H_
#define TESSERA_PARALLEL_OBJECTIVES_GRPO_ROWS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::parallel {

// One sampled completion of a prompt, as a step trains it.
struct Rollout {
  std::vector<int32_t> prompt;       // Its ids (at least one).
  std::vector<int32_t> completion;   // The sampled ids (at least one; the stop token last when drawn).
  std::vector<double> logprobs;      // The sampler's, one per completion id (at the temperature).
  std::vector<double> ref_logprobs;  // The reference's, one per completion id; empty: none (beta 0).
  double advantage = 0;
};

struct GrpoRows {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> tokens;  // [rows, seq_len + 1].
  std::vector<double> data;     // [rows, 2·seq_len + 1].
};

// The rows of `rollouts` in order. InvalidArgument names the rollout when its prompt or completion is
// empty, prompt + completion holds more than seq_len + 1 ids, or its log-probabilities are not one per
// completion id (or not finite).
absl::StatusOr<GrpoRows> MakeGrpoRows(const std::vector<Rollout>& rollouts, int64_t seq_len);

// Sequence parallelism: the data of positions [block · seq_len / blocks, (block + 1) · seq_len / blocks)
// of every row — the layout grpo_objective.h reads on that rank — [rows, 2·seq_len/blocks + 1].
std::vector<double> GrpoDataBlock(const GrpoRows& rows, int block, int blocks);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_GRPO_ROWS_H_
