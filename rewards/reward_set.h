// A GRPO job's reward functions (grpo.rewards; docs/post-training.md "GRPO"): built-in verifiers
// (verifiers.h) and reward programs (reward_program.h), each scoring a step's completions. What a
// function cannot score is an error naming it and the completion, never a silent 0; the weighted sum
// and the advantages are ComputeAdvantages' (advantages.h), which takes Score's result as it is.
// Not thread-safe (programs are kept running between calls).
#ifndef TESSERA_REWARDS_REWARD_SET_H_
#define TESSERA_REWARDS_REWARD_SET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "rewards/reward_program.h"
#include "rewards/verifiers.h"

namespace tessera::rewards {

// kModel: a reward model's score of the prompt's and the completion's ids, computed by the caller's
// ModelScorer (the trainer holds the model: no torch here).
enum class RewardKind { kExactAnswer, kRegex, kLength, kProgram, kModel };

struct RewardFunctionOptions {
  std::string name;  // Unique in the set: errors and steps.jsonl's reward_NAME.
  double weight = 1;
  RewardKind kind = RewardKind::kExactAnswer;
  std::string field = "answer";            // kExactAnswer: the prompt row's field with the answer.
  std::string pattern;                     // kRegex.
  int64_t max_tokens = 0, soft_cache = 0;  // kLength.
  RewardProgramOptions program;            // kProgram (its name is set to `name`).
  std::string model_path;                  // kModel: a reward model (train.objective reward) or its directory.
};

// One completion to score.
struct ScoredCompletion {
  std::string prompt;      // The prompt's text (as the tokenizer decodes it).
  std::string completion;  // The completion's text, before the stop token, special tokens skipped.
  int64_t completion_tokens = 0;
  nlohmann::json fields = nlohmann::json::object();  // The prompt row's other fields.
  std::vector<int32_t> prompt_ids, completion_ids;    // What a reward model scores (the stop token included).
};

// A kModel function's scores of `batch`, one per completion (function: its index in the set).
using ModelScorer =
    std::function<absl::StatusOr<std::vector<double>>(size_t function, const std::vector<ScoredCompletion>& batch)>;

class RewardSet {
 public:
  // Compiles the patterns and starts the programs. InvalidArgument names the function ("reward
  // NAME: ...") for an empty set, a duplicate name, a pattern that does not compile or length's bounds.
  // `scorer` computes the kModel functions' scores (required when there is one).
  static absl::StatusOr<std::unique_ptr<RewardSet>> Create(std::vector<RewardFunctionOptions> functions,
                                                           ModelScorer scorer = nullptr);

  // per_function[f][c]: function f's reward of completion c. An error names the function and the
  // completion (its index in `batch`): a row without an exact_answer's field, a program's failure.
  absl::StatusOr<std::vector<std::vector<double>>> Score(const std::vector<ScoredCompletion>& batch);

  std::vector<std::string> names() const;
  std::vector<double> weights() const;

 private:
  struct Function {
    RewardFunctionOptions options;
    std::unique_ptr<RegexReward> regex;
    std::unique_ptr<RewardProgram> program;
  };
  RewardSet(std::vector<Function> functions, ModelScorer scorer)
      : functions_(std::move(functions)), scorer_(std::move(scorer)) {}
  std::vector<Function> functions_;
  ModelScorer scorer_;
};

}  // namespace tessera::rewards

#endif  // TESSERA_REWARDS_REWARD_SET_H_
