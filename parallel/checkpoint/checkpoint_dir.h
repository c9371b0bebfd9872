// Checkpoint directories: CHECKPOINT_DIR/step_00000010/{model.safetensors, optimizer.safetensors,
// trainer_state.json, index.json}. A checkpoint is written under a temporary name and renamed into
// place, so a directory named step_* is always complete. See docs/checkpoint-format.md. No torch.
#ifndef TESSERA_PARALLEL_CHECKPOINT_CHECKPOINT_DIR_H_
#define TESSERA_PARALLEL_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::parallel {

// "step_00000010".
std::string CheckpointName(int64_t step);

// Complete checkpoints under `dir`, oldest first (empty when `dir` does not exist).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir);

// The temporary directory of the checkpoint of `step` written by the writer `token` (rank 0's pid:
// every rank of the job derives the same path from it and can add its own files).
std::string TmpCheckpointPath(const std::string& dir, int64_t step, int64_t token);

// A fresh temporary directory TmpCheckpointPath(dir, step, token) (token 0: this process's pid),
// created with parents.
absl::StatusOr<std::string> BeginCheckpoint(const std::string& dir, int64_t step, int64_t token = 0);

// Renames `tmp` to dir/step_XXXXXXXX (replacing an older one of the same step), then deletes all
// but the newest `keep` checkpoints and stale temporary directories.
absl::Status CommitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step, int keep);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_CHECKPOINT_CHECKPOINT_DIR_H_
