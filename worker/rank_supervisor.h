// RankSupervisor: the worker's tessera-rank processes — starts them for assignments, stops them
// (SIGTERM to the process group, SIGKILL after a grace period), reaps them, and reads rank 0's step
// log for progress. Never blocks: Poll() does the waiting work. Not thread-safe (one owner thread).
// The files it opens in a job's OUTPUT_DIR (the rank logs, steps.jsonl) are the user's: they are opened
// through common/userfs (no symbolic link followed, no FIFO waited on, regular files only), and one
// that is not a regular file fails that job with the file's name, never the worker.
#ifndef TESSERA_WORKER_RANK_SUPERVISOR_H_
#define TESSERA_WORKER_RANK_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/steplog/step_log.h"
#include "common/time/clock.h"
#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/worker_service.pb.h"
#include "worker/rank_event.h"
#include "worker/ranks.h"

namespace tessera::worker {

using steplog::StepRecord;

struct RankSupervisorOptions {
  std::string rank_binary;                      // tessera-rank.
  std::string work_dir;                         // jobs/<job>/attempt_<n>/job.json goes here; rank logs go
                                                // to the job's OUTPUT_DIR/logs/rank_<r>.log.
  int threads_per_rank = 1;
  double peak_flops_per_device = 0;  // Passed to ranks (MFU in steps.jsonl); 0: not reported.
  std::chrono::milliseconds stop_grace{10000};  // SIGTERM → SIGKILL.
  std::string host = "127.0.0.1";               // This node's address (the worker's --host): the ranks'
                                                // collectives bind to it (tessera-rank --host).
  int collective_timeout_s = 300;                // A rank's rendezvous and each collective fail after this
                                                // (tessera-rank --timeout_s), naming the group's hosts.
  std::string interface;                        // The interface that has `host` ("" unknown): NCCL's and
                                                // Gloo's socket interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME).
  Clock* clock = RealClock();                   // Of stop_grace. Not owned.
  std::string output_root;                      // The worker's --output_root ("": none). A job's OUTPUT_DIR
                                                // below it is opened from it, one component at a time,
                                                // never through a link (a user may swap OUTPUT_DIR or a
                                                // directory above it for a link after it was checked).
};

// Training FLOPs per token of a GPT: 6·N (N = every parameter, embeddings included, as the tied head
// is a matmul) plus attention 12·layers·hidden·seq_len (forward and backward).
double ModelFlopsPerToken(const v1::JobSpec& spec);

class RankSupervisor final : public Ranks {
 public:
  explicit RankSupervisor(RankSupervisorOptions options) : options_(std::move(options)) {}
  ~RankSupervisor();  // Kills every rank still running.

  // Writes the spec and starts the rank; STARTED is reported by the next Poll().
  absl::Status Start(const v1::Assignment& assignment) override;
  // Begins stopping every rank of `job_id` of `attempt` (0: any): SIGTERM to each rank's process
  // group now, SIGKILL from the first Poll() at least stop_grace later (on options.clock).
  void StopJob(const std::string& job_id, int attempt, const std::string& reason = "") override;
  // Reaps exits, escalates overdue stops to SIGKILL, reads progress. Returns the events since the last call.
  std::vector<RankEvent> Poll() override;
  // Ranks alive now (for re-registration after a coordinator restart).
  std::vector<v1::RunningRank> Running() const override;
  // Process ids of live ranks.
  std::vector<pid_t> Pids() const;
  std::vector<RankProcess> Processes() const override;

 private:
  struct Rank {
    int device = 0;  // Assignment.local_rank.
    pid_t pid = -1;
    std::string output_dir;  // The job's OUTPUT_DIR: user files, opened only through common/userfs.
    std::string log_name;    // logs/rank_<r>.log under it.
    // Where OUTPUT_DIR's files are opened from: open_base (the output root, or OUTPUT_DIR itself without
    // one) and the path below it; UserFile(name) is OUTPUT_DIR/name relative to open_base.
    std::string open_base, open_prefix;
    std::string UserFile(const std::string& name) const { return open_prefix.empty() ? name : open_prefix + "/" + name; }
    bool reads_steps = false;  // Rank 0: its OUTPUT_DIR/steps.jsonl is read for progress.
    std::string checkpoint_dir;
    std::optional<StepRecord> last_step;  // Newest step log line read.
    // When its step log and checkpoints were last read (Poll runs after every RPC of the agent's loop:
    // the user's files are read at most every kProgressEvery, and once more at the rank's exit).
    std::chrono::steady_clock::time_point progress_read_at{};
    int64_t val_step = 0;             // Newest evaluation read (0: none) and its loss.
    double val_loss = 0;
    int64_t reported_checkpoint = 0;  // Newest checkpoint step already reported.
    double flops_per_token = 0;
    int world_size = 1;
    int64_t samples_per_step = 0;
    int64_t steps_offset = 0;
    ino_t steps_inode = 0;  // Of the file steps_offset is in (0: none yet).
    bool stopping = false;
    std::string stop_reason;   // The EXITED error when the rank's log names none.
    std::string file_error;    // A user file the worker refused (it stopped the job): the EXITED error.
    absl::Time kill_at = absl::InfiniteFuture();
  };
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  // Appends progress events from rank 0's step log and checkpoint directory. Reads at most
  // kMaxStepBytesPerPoll of the log per call. When the log is there but cannot be read as a regular
  // file, stops the job's ranks of this attempt naming the file.
  void ReadProgress(const Key& key, Rank& r, std::vector<RankEvent>* events);
  // The last "error: " line of the rank's log ("" when none or unreadable).
  static std::string LastError(const Rank& r);

  RankSupervisorOptions options_;
  std::map<Key, Rank> ranks_;
  std::vector<RankEvent> pending_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANK_SUPERVISOR_H_
