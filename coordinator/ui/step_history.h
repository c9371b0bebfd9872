// A job's training curve as the dashboard draws it: rank 0's step log (OUTPUT_DIR/steps.jsonl) read
// whole, up to a size limit (then its newest part). A later attempt resumed from a checkpoint
// supersedes what earlier attempts logged past it, so there is one point per step: its newest line.
#ifndef TESSERA_COORDINATOR_UI_STEP_HISTORY_H_
#define TESSERA_COORDINATOR_UI_STEP_HISTORY_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/steplog/step_log.h"

namespace tessera::coordinator::ui {

struct StepHistory {
  std::map<int64_t, steplog::StepRecord> steps;  // Every line, by step.
  std::map<int64_t, double> val_loss;            // Of the lines of steps that evaluated.
  int64_t bytes_skipped = 0;                     // Of the file's head, not read (over the limit).
  int64_t bad_lines = 0;                         // Lines that are not step records.
};

inline constexpr int64_t kMaxStepHistoryBytes = 8 << 20;

// Reads `path` (never through a symbolic link). A file not there yet is an empty history; one that
// cannot be read is an error naming it.
absl::StatusOr<StepHistory> ReadStepHistory(const std::string& path, int64_t max_bytes = kMaxStepHistoryBytes);

}  // namespace tessera::coordinator::ui

#endif  // TESSERA_COORDINATOR_UI_STEP_HISTORY_H_
