// AttemptFence: the fencing token of one attempt of a cluster job ({"job": "<job id>@<created ms>",
// "attempt": N}), kept in the job's output directory as numbered claims: attempt.claims/NNNN…, each
// created exclusively (O_EXCL) with the next number, the highest number owning the directory. Claiming
// is thereby atomic: of two attempts racing for a number one creates it, the other reads the winner's
// token and decides again, so an older attempt can never replace a newer one's claim. attempt.json
// repeats the owner's token for people and tools (informational). The newest attempt's rank 0
// claims the directory before it reads or writes anything there; every write that could damage a
// newer attempt's state — committing or pruning a checkpoint, appending to steps.jsonl — checks first
// that the marker still names this attempt. A superseded attempt (its worker cut off from the
// coordinator while a new attempt was placed elsewhere) is thereby refused instead of mixing its steps
// and checkpoints with the new one's. See docs/fault-model.md ("Leases and fencing").
//
// The check and the write that follows are two file-system operations, not one: the token narrows the
// window to that gap; the worker's lease (the superseded ranks are stopped before the coordinator
// places a new attempt) closes it. No torch.
#ifndef TESSERA_FORMATS_CHECKPOINT_ATTEMPT_FENCE_H_
#define TESSERA_FORMATS_CHECKPOINT_ATTEMPT_FENCE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tessera::formats::checkpoint {

struct FenceToken {
  std::string job;      // The job's identity: its id and creation time (ids repeat after a new database).
  int64_t attempt = 0;  // The coordinator's attempt number (1, 2, ...); 0: not fenced (`tessera run`).
};

class AttemptFence {
 public:
  // `output_dir`: the job's output directory (shared by every attempt).
  AttemptFence(std::string output_dir, FenceToken token);

  bool enabled() const { return token_.attempt > 0; }

  // At the start of the attempt (rank 0 only): FailedPrecondition when the newest claim names a newer
  // attempt of the same job; otherwise adds this attempt's claim durably (after an older attempt's or
  // another job's) and writes attempt.json. A no-op when not enabled.
  absl::Status Claim() const;

  // Before each write that a newer attempt must not see: FailedPrecondition "attempt N of job J was
  // superseded by attempt M ..." unless the newest claim still names this attempt (one that is
  // missing or unreadable counts as superseded: the directory was taken over or damaged). A no-op when
  // not enabled.
  absl::Status Check() const;

  std::string path() const { return output_dir_ + "/attempt.json"; }  // Informational.
  std::string claims_dir() const { return output_dir_ + "/attempt.claims"; }

 private:
  std::string output_dir_;
  FenceToken token_;
};

}  // namespace tessera::formats::checkpoint

#endif  // TESSERA_FORMATS_CHECKPOINT_ATTEMPT_FENCE_H_
