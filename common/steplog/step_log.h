// Rank 0's step log (OUTPUT_DIR/steps.jsonl, one JSON object per line): its schema, in one place. The
// trainer writes it (FormatStepLine, FormatWarningLine; TensorBoard's scalars are Scalars of the same
// record); the worker (progress reports), `tessera run` (its progress line) and the coordinator's
// dashboard (charts) read it (ParseStepLine, ReadAppended). The file lies in the job's output directory,
// which others may write too: any bytes are read without an exception, a crash or an unbounded allocation.
#ifndef TESSERA_COMMON_STEPLOG_STEP_LOG_H_
#define TESSERA_COMMON_STEPLOG_STEP_LOG_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::steplog {

// One line. The members the trainer always writes are plain; the optional ones are written only when
// set (and read as set only when present). Units: bytes, seconds; "rank 0" is the rank that writes.
struct StepRecord {
  int64_t step = 0;               // Steps completed, counting from 1.
  int64_t resumed_from = 0;       // The checkpoint step this run resumed from (0: none).
  int64_t discarded_steps = 0;    // Lines of an earlier run past that checkpoint, dropped at the resume.
  int64_t tokens = 0;             // Of the step (global).
  int64_t bytes_all_reduced = 0;  // By rank 0 in the step.
  int64_t bytes_communicated = 0;     // By rank 0 in the step, every group.
  int64_t optimizer_state_bytes = 0;  // AdamW state (and fp32 masters) rank 0 holds.
  int64_t model_state_bytes = 0;      // Peak this step: parameters, gradients, masters and moments.
  int64_t rss_peak_bytes = 0;         // Rank 0's peak resident memory since training began.
  int64_t rss_base_bytes = 0;         // Its resident memory before the first step.
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;           // Global L2 norm before clipping.
  double tokens_per_s = 0;
  double step_seconds = 0;
  bool skipped = false;                     // fp16: gradients overflowed, no update.
  std::optional<double> loss_scale;         // fp16: the scale this step's backward used.
  std::optional<int64_t> trained_tokens;    // SFT data: the trained targets of the step (global).
  std::optional<int64_t> live_peak_bytes;   // Peak bytes of host tensors alive in the step.
  std::optional<int64_t> frozen_param_bytes;  // LoRA: the frozen base weights rank 0 holds.
  std::optional<double> mfu;                // Model FLOPs utilisation against the device's stated peak.
  std::optional<double> val_loss;  // An evaluation line.
  std::optional<double> eval_seconds;       // With val_loss.
  // DPO: on a run's first step, the seconds its scoring of the reference took before it (Init).
  std::optional<double> reference_seconds;
  // A Mixture of Experts: the cross-entropy, the balancing loss, and the busiest expert's tokens over
  // the mean (the largest over sparse blocks; each block's in expert_imbalance_layers).
  std::optional<double> lm_loss, aux_loss, expert_imbalance;
  std::vector<double> expert_imbalance_layers;
  // Pipelines: the time rank 0 waited for activations or gradients, and the bubble over the stages.
  std::optional<double> pipeline_wait_s, pipeline_bubble;
  // checkpoint.async: how long a checkpoint step was held (and the snapshot's host bytes), and how
  // long a background write took (and of which step).
  std::optional<double> checkpoint_blocked_s, checkpoint_write_s;
  int64_t checkpoint_snapshot_bytes = 0;  // With checkpoint_blocked_s.
  int64_t checkpoint_write_step = 0;      // With checkpoint_write_s.
  // The objective's metrics (train.objective dpo: docs/post-training.md), means over the step's pairs:
  // DPO's implicit rewards β·(logπ − logρ) of the chosen and the rejected completions, their difference,
  // the share of pairs whose chosen reward is the larger, and the policy's log-probabilities.
  std::optional<double> rewards_chosen, rewards_rejected, rewards_margin, rewards_accuracy, logps_chosen,
      logps_rejected;
  // The same over the validation pairs, on an evaluation's line (with val_loss; TRL's eval_rewards/…).
  std::optional<double> val_rewards_chosen, val_rewards_rejected, val_rewards_margin, val_rewards_accuracy,
      val_logps_chosen, val_logps_rejected;
  // train.objective grpo (docs/post-training.md "GRPO"): its metrics by JSON name, in the order
  // written — reward, reward_std, frac_reward_zero_std, reward_NAME per reward function, the
  // objective's kl, clip_ratio, clip_ratio_low, clip_ratio_high, then completion_length,
  // completion_length_max, truncated_fraction, generation_seconds, generated_tokens_per_s (IsGrpoMetric).
  std::vector<std::pair<std::string, double>> grpo_metrics;
  // A warning line ({"step": N, "warning": "..."}), not a step: something the user should see (a
  // damaged checkpoint set aside, TensorBoard events that stopped), cut to kMaxWarningBytes. Readers
  // that chart or report steps skip these records; the worker forwards them to the coordinator.
  std::optional<std::string> warning;
};

// The objective's metric of `record` named `name` (one of the members above, by its JSON name: a
// training metric, or "val_" and one); null for any other name.
std::optional<double>* ObjectiveMetric(StepRecord& record, std::string_view name);

// Whether a step line's member `name` is one of grpo_metrics (a reward function's reward_NAME too).
bool IsGrpoMetric(std::string_view name);

// The longest warning kept (longer ones are cut at a UTF-8 character boundary, "..." appended).
inline constexpr size_t kMaxWarningBytes = 1024;

// The warning line the trainer appends (without the newline): {"step": step, "warning": message}.
std::string FormatWarningLine(int64_t step, std::string_view message);

// `message` cut to at most kMaxWarningBytes at a UTF-8 character boundary.
std::string CutWarning(std::string_view message);

// The line the trainer appends for a step (without the newline): every plain member, the optional ones
// that are set; a warning record is written by FormatWarningLine instead.
std::string FormatStepLine(const StepRecord& record);

// TensorBoard's scalars of a step: (tag, value) for every number FormatStepLine writes but the step —
// "val/<member>" for the evaluation's (val_loss, eval_seconds and the val_ metrics), "train/<member>"
// for the others.
std::vector<std::pair<std::string, double>> Scalars(const StepRecord& record);

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

// Where a reader of a growing step log is: the file (its inode) and the bytes of it consumed.
struct TailPosition {
  ino_t inode = 0;
  int64_t offset = 0;
};

// Reads what was appended to the open step log `fd` since `position` — at most `max_bytes`, complete
// lines only — calling `on_line` with each, and moves `position` on. Rank 0 replaces the log at its
// start (trimmed to the checkpoint it resumes from, renamed into place): another file than the one
// `position` is of, or this one cut shorter, is read from its beginning and `replaced` says so. A line
// longer than a whole read is skipped. Not ok (position unchanged) when the file cannot be read.
struct Appended {
  bool ok = false;
  bool replaced = false;
  bool at_end = false;  // Everything the file held at the read was consumed (no more than max_bytes).
};
Appended ReadAppended(int fd, TailPosition* position, int64_t max_bytes,
                      const std::function<void(std::string_view)>& on_line);

}  // namespace tessera::steplog

#endif  // TESSERA_COMMON_STEPLOG_STEP_LOG_H_
