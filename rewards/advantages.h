// GRPO's advantages (issue 57): the rewards of a batch's completions — several reward functions,
// weighted — turned into each completion's advantage against the other completions of its prompt, as
// TRL 0.24's GRPOTrainer._generate_and_score_completions defines them:
//   reward_c   = Σ_f w_f · r_f,c over the functions that scored c (a function may give none: NaN;
//                none at all sums to 0, torch's nansum);
//   mean_g     = the mean reward of c's group (the num_generations completions of one prompt);
//   std        = the unbiased standard deviation of c's group (scale group, and none for the metric) or
//                of the whole batch (scale batch);
//   advantage  = (reward_c − mean_g) / (std + 1e-4), or reward_c − mean_g with scale none.
// Completions are in group order (group g holds completions g·G … g·G+G−1). No torch; double
// arithmetic (TRL's is float32: equal to ~1e-7 relative).
#ifndef TESSERA_REWARDS_ADVANTAGES_H_
#define TESSERA_REWARDS_ADVANTAGES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::rewards {

// grpo.scale_rewards.
enum class RewardScale { kGroup, kBatch, kNone };

struct AdvantageOptions {
  int group_size = 2;          // grpo.num_generations: completions per prompt, at least 2.
  RewardScale scale = RewardScale::kGroup;
  std::vector<double> weights;  // One per reward function (finite); empty: every weight 1.
};

struct Advantages {
  std::vector<double> rewards;     // Per completion: the weighted sum above.
  std::vector<double> advantages;  // Per completion.
  // The step log's (TRL's metrics of the same names): the mean of the groups' mean rewards; the mean of
  // the standard deviation each completion was scaled by (its group's, or the batch's); the share of
  // completions whose standard deviation is 0 (within 1e-8: torch.isclose) — groups that teach nothing.
  double reward = 0;
  double reward_std = 0;
  double frac_reward_zero_std = 0;
  // Per function, over the completions it scored: the mean and the unbiased standard deviation (NaN
  // when it scored none, the deviation also when it scored one) — TRL's rewards/NAME/mean and /std.
  std::vector<double> function_mean, function_std;
};

// `per_function[f][c]`: function f's reward of completion c, NaN when f gave none. InvalidArgument,
// naming the problem, when there is no function, the functions' lengths differ, the completions are
// not whole groups, group_size is below 2, a weight is not finite or their number is not the
// functions', or a reward is infinite.
absl::StatusOr<Advantages> ComputeAdvantages(const std::vector<std::vector<double>>& per_function,
                                             const AdvantageOptions& options);

}  // namespace tessera::rewards

#endif  // TESSERA_REWARDS_ADVANTAGES_H_
