// OUTPUT_DIR/rollouts.jsonl (train.objective grpo; docs/post-training.md "GRPO"): one JSON object per
// sampled completion, in the order rank 0 writes them —
//   {"step", "prompt_index" (the prompt's place in the step's batch, 0 … global_batch − 1, over every
//    rank), "sample" (0 … G − 1), "prompt_ids", "completion_ids", "logprobs" (the sampling policy's, one
//    per completion id, at the temperature), "rewards": {name: value or null}, "reward", "advantage",
//    "truncated"}
// "step" first, so that a resumed run trims the file (TrimJsonLinesToStep) without parsing every line
// whole. The file is in the user's output directory: any bytes are read without an exception, a crash
// or an unbounded allocation.
#ifndef TESSERA_COMMON_STEPLOG_ROLLOUT_LOG_H_
#define TESSERA_COMMON_STEPLOG_ROLLOUT_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::steplog {

struct RolloutRecord {
  int64_t step = 0;
  int64_t prompt_index = 0;
  int64_t sample = 0;
  std::vector<int64_t> prompt_ids, completion_ids;
  std::vector<double> logprobs;
  std::vector<std::pair<std::string, double>> rewards;  // In the job's order; NaN: the function gave none (null).
  double reward = 0;
  double advantage = 0;
  bool truncated = false;
};

// The line (without its newline). Non-finite numbers other than a reward's NaN are written as null.
std::string FormatRolloutLine(const RolloutRecord& record);

// The longest line read back.
inline constexpr size_t kMaxRolloutLineBytes = 16 << 20;

// One line; nullopt when it is not a rollout record (not JSON, a member missing or of the wrong kind,
// longer than kMaxRolloutLineBytes).
std::optional<RolloutRecord> ParseRolloutLine(std::string_view line);

// A resumed run's log: DIR/NAME rewritten keeping its lines whose "step" is at most `step`, in order
// (a line that is not a JSON object with an integer "step" is dropped; so is an unfinished last line),
// streamed with bounded memory into DIR/NAME.tmp and renamed into place (never truncated in place: a
// crash leaves the old file or the new one). Opened through common/userfs (no link followed, no FIFO
// waited on); no file is no error. Returns how many step lines were dropped.
absl::StatusOr<int64_t> TrimJsonLinesToStep(const std::string& dir, const std::string& name, int64_t step);

}  // namespace tessera::steplog

#endif  // TESSERA_COMMON_STEPLOG_ROLLOUT_LOG_H_
