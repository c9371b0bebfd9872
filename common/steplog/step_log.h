// Rank 0's step log (OUTPUT_DIR/steps.jsonl, one JSON object per line, written by parallel/train)
// as the worker (progress reports) and the coordinator's dashboard (charts) read it. The file lies in the job's output directory, which
// others may write too: any bytes are read without an exception, a crash or an unbounded allocation.
#ifndef TESSERA_COMMON_STEPLOG_STEP_LOG_H_
#define TESSERA_COMMON_STEPLOG_STEP_LOG_H_

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::steplog {

struct StepRecord {
  int64_t step = 0;
  int64_t resumed_from = 0;
  int64_t discarded_steps = 0;
  int64_t tokens = 0;             // Of the step (global).
  int64_t bytes_all_reduced = 0;  // By rank 0 in the step.
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double step_seconds = 0;
  std::optional<double> val_loss;  // An evaluation line.
  // A Mixture of Experts: the cross-entropy, the balancing loss, and the busiest expert's tokens over
  // the mean (the largest over sparse blocks).
  std::optional<double> lm_loss, aux_loss, expert_imbalance;
  // checkpoint.async: how long a checkpoint step was held, and how long a background write took.
  std::optional<double> checkpoint_blocked_s, checkpoint_write_s;
  // A warning line ({"step": N, "warning": "..."}), not a step: something the user should see (a
  // damaged checkpoint set aside, TensorBoard events that stopped), cut to kMaxWarningBytes. Readers
  // that chart or report steps skip these records; the worker forwards them to the coordinator.
  std::optional<std::string> warning;
};

// The longest warning kept (longer ones are cut at a UTF-8 character boundary, "..." appended).
inline constexpr size_t kMaxWarningBytes = 1024;

// The warning line the trainer appends (without the newline): {"step": step, "warning": message}.
std::string FormatWarningLine(int64_t step, std::string_view message);

// `message` cut to at most kMaxWarningBytes at a UTF-8 character boundary.
std::string CutWarning(std::string_view message);

// The longest line read; longer ones are skipped as not a step.
inline constexpr size_t kMaxStepLineBytes = 64 * 1024;

// One line (without its newline). nullopt when it is not a JSON object (or too long); members that
// are absent, or not numbers of the right kind, read as 0 (progress is informational).
std::optional<StepRecord> ParseStepLine(std::string_view line);

// Reads the complete lines (ending in '\n') of `in` from its position, calling `on_line` with each,
// without the newline; a line longer than kMaxStepLineBytes is passed on cut to one byte more (so
// ParseStepLine refuses it) and memory stays bounded. Returns the bytes consumed: an unfinished last
// line (being written) is not, and is read whole next time.
int64_t ReadCompleteLines(std::istream& in, const std::function<void(std::string_view)>& on_line);

}  // namespace tessera::steplog

#endif  // TESSERA_COMMON_STEPLOG_STEP_LOG_H_
