// Scoring sequences with a reward model (a Decoder with a score head): what `tessera score` and a GRPO
// job's `kind: model` rewards share.
#ifndef TESSERA_PARALLEL_MODELS_REWARD_SCORING_H_
#define TESSERA_PARALLEL_MODELS_REWARD_SCORING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

// One sequence to score: a prompt then a completion, and its place in the caller's table of scores.
struct ScoredSequence {
  const std::vector<int32_t>* prompt;
  const std::vector<int32_t>* completion;
  int64_t index;
};

// Scores `seqs` in one forward pass without autograd, each at its last token as `train.objective:
// reward` reads it (WriteRewardRow): the model's objective must be a SequenceScores over the caller's
// table, which receives seqs[i]'s score at seqs[i].index. Every sequence must fit the model.
// InternalError carries LibTorch's message.
absl::Status ScoreSequences(Decoder& model, const std::vector<ScoredSequence>& seqs);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_REWARD_SCORING_H_
