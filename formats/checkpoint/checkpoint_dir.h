// Checkpoint directories: CHECKPOINT_DIR/step_00000010/{model.safetensors, optimizer.safetensors,
// trainer_state.json, index.json}. A checkpoint is written under a temporary name, every file and the
// directory fsynced, and renamed into place, so a directory named step_* is complete unless storage
// damaged it afterwards; its index.json records every file's size and CRC-32C so that such damage is
// found before a resume. See docs/checkpoint-format.md. No torch.
#ifndef TESSERA_FORMATS_CHECKPOINT_CHECKPOINT_DIR_H_
#define TESSERA_FORMATS_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::formats::checkpoint {

// "step_00000010".
std::string CheckpointName(int64_t step);

// Complete checkpoints under `dir`, oldest first (empty when `dir` does not exist). When `error` is
// given, a `dir` that exists but cannot be read (EMFILE, EIO, EACCES, ...) sets it to Unavailable
// (else it stays OK): an empty list then means "unknown", never "no checkpoint".
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir, absl::Status* error = nullptr);

// The temporary directory of the checkpoint of `step` written by the writer `token` (rank 0's pid:
// every rank of the job derives the same path from it and can add its own files).
std::string TmpCheckpointPath(const std::string& dir, int64_t step, int64_t token);

// A fresh temporary directory TmpCheckpointPath(dir, step, token) (token 0: this process's pid),
// created with parents. Other writers' temporary directories under `dir` (never to be committed) are
// deleted first, freeing their space.
absl::StatusOr<std::string> BeginCheckpoint(const std::string& dir, int64_t step, int64_t token = 0);

// fsyncs `tmp` (the caller fsynced its files), renames it to dir/step_XXXXXXXX (replacing an older one
// of the same step) and fsyncs `dir`; only then deletes all but the newest `keep` checkpoints and
// stale temporary or set-aside directories. Nothing is deleted when the commit fails. `still_owner`
// (may be empty) is asked right before the rename and again right before the pruning (the fencing
// token: formats/checkpoint/attempt_fence.h); its error stops the commit there.
absl::Status CommitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step, int keep,
                              const std::function<absl::Status()>& still_owner = nullptr);

// Deletes the temporary directory of a checkpoint that will not be committed (frees its space).
void AbortCheckpoint(const std::string& tmp);

// OK when the checkpoint at `path` has its index.json and every file the index lists, with the size
// and CRC-32C recorded there (reads every file once). DataLoss naming the file and what differs
// when the files say so (missing, malformed, another size or checksum); Unavailable when a file cannot
// be read (EIO, ESTALE, EMFILE, EACCES: not damage). Indexes written before checksums were recorded
// (no "files") pass when they parse.
absl::Status VerifyCheckpoint(const std::string& path);

// The newest checkpoint under `dir` that VerifyCheckpoint accepts, or nullopt. Newer ones that it
// finds damaged (DataLoss) are renamed to step_XXXXXXXX.damaged (out of ListCheckpoints, deleted by
// the next commit) and their errors appended to `damaged`. A checkpoint it cannot read (Unavailable)
// ends the search with that error, nothing set aside: the caller fails and a later attempt retries.
absl::StatusOr<std::optional<std::pair<int64_t, std::string>>> NewestGoodCheckpoint(
    const std::string& dir, std::vector<absl::Status>* damaged);

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_CHECKPOINT_DIR_H_
