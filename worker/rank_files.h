// What the worker reads and writes of one rank's files under its job's OUTPUT_DIR (the user's files):
// the rank's log (logs/rank_<r>.log: a header line at each start, the last "error: " line after a
// failed exit) and, for rank 0, the step log (steps.jsonl) and the checkpoint directory, turned into
// progress events. Every function here may block as long as the storage does (a hung network or FUSE
// mount): RankSupervisor runs them on an OffThread, never on the worker's loop thread. They own their
// inputs (copies), share nothing and are safe on any thread. Files are opened through common/userfs
// (no link followed, no FIFO waited on, regular files only).
#ifndef TESSERA_WORKER_RANK_FILES_H_
#define TESSERA_WORKER_RANK_FILES_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/steplog/step_log.h"
#include "common/userfs/user_files.h"
#include "worker/rank_event.h"

namespace tessera::worker {

// One rank's files, and how far its step log has been read. Copied to the reading thread and back.
struct RankFiles {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  // OUTPUT_DIR's files are opened from open_base (the output root, or OUTPUT_DIR itself without one),
  // at `prefix` below it ("": OUTPUT_DIR is open_base) — common/userfs, one component at a time.
  std::string open_base;
  std::string prefix;
  bool below_root = false;      // open_base is the worker's output root: OpenRankFiles resolves the
                                // per-user directory below it (an administrator's link is followed).
  std::string shown_dir;        // OUTPUT_DIR as errors name it.
  std::string log_name;         // logs/rank_<r>.log, below OUTPUT_DIR.
  bool reads_steps = false;     // Rank 0: its step log and checkpoints are read for progress.
  std::string checkpoint_dir;
  double flops_per_token = 0;   // Copied into each progress event.
  int world_size = 1;
  int64_t samples_per_step = 0;

  // The read position: the step log's (only what this attempt writes is reported), the newest step
  // and evaluation read, the newest checkpoint reported.
  steplog::TailPosition steps_position;
  std::optional<steplog::StepRecord> last_step;
  int64_t val_step = 0;
  double val_loss = 0;
  int64_t reported_checkpoint = 0;

  // `name` below OUTPUT_DIR, as a path below open_base.
  std::string Under(const std::string& name) const { return prefix.empty() ? name : prefix + "/" + name; }
};

// At a rank's start: below an output root, a per-user directory that is an administrator's link (owned
// by root or this process's user) is followed and nothing below it is; the log is opened for appending
// (missing directories made) with the attempt's header line written; for rank 0 the step log's current
// end is taken as the read position (only what this attempt writes is reported). FailedPrecondition
// names a file that is not a regular file, or a link in the way.
struct StartedFiles {
  absl::Status status;
  RankFiles files;       // Resolved, with the read position.
  userfs::UniqueFd log;  // The rank's stdout and stderr.
};
StartedFiles OpenRankFiles(RankFiles files);

// One read of rank 0's progress: step 1 (the baseline loss) and the newest step of what was appended
// since `files`' position (at most a few MiB a read: a huge log is caught up with over several), the
// warnings logged, and a newer checkpoint. `last_error`: also the rank log's last "error: " line.
struct FilesRead {
  RankFiles files;                 // The position after the read.
  std::vector<RankEvent> events;   // EVENT_PROGRESS, in order.
  absl::Status step_log;           // Not OK stops the job: FailedPrecondition / InvalidArgument when the
                                   // user left something else than a regular file there; Internal when
                                   // the read threw (memory, say; the position is unchanged).
  std::string last_error;          // "" when not asked, none, or the log is unreadable.
};
FilesRead ReadRankFiles(RankFiles files, bool last_error);

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANK_FILES_H_
