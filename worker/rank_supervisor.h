// RankSupervisor: the worker's tessera-rank processes — starts them for assignments, stops them
// (SIGTERM to the process group, SIGKILL after a grace period), reaps them, and reads rank 0's step
// log for progress. Never blocks: Poll() does the waiting work. Not thread-safe (one owner thread).
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
#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/worker_service.pb.h"
#include "common/steplog/step_log.h"

namespace tessera::worker {

using steplog::StepRecord;

struct RankSupervisorOptions {
  std::string rank_binary;                      // tessera-rank.
  std::string work_dir;                         // jobs/<job>/attempt_<n>/job.json goes here; rank logs go
                                                // to the job's OUTPUT_DIR/logs/rank_<r>.log.
  int threads_per_rank = 1;
  std::chrono::milliseconds stop_grace{10000};  // SIGTERM → SIGKILL.
  std::string host = "127.0.0.1";               // This node's address (the worker's --host): the ranks'
                                                // collectives bind to it (tessera-rank --host).
  int collective_timeout_s = 300;                // A rank's rendezvous and each collective fail after this
                                                // (tessera-rank --timeout_s), naming the group's hosts.
  std::string interface;                        // The interface that has `host` ("" unknown): NCCL's and
                                                // Gloo's socket interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME).
};

// Something that happened to a rank, to be reported to the coordinator.
struct RankEvent {
  v1::ReportRankStatusRequest::Event event;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int exit_code = 0;    // EXITED: 0, the exit code, or -signal.
  std::string error;    // EXITED with failure: the rank's last "error: " line.
  v1::JobProgress progress;
  // PROGRESS only (rank 0's step log): for metrics.
  int64_t tokens = 0;             // Tokens of the step (global).
  int64_t samples = 0;            // Samples of the step (global batch).
  int64_t bytes_all_reduced = 0;  // By rank 0 in the step.
  double flops_per_token = 0;     // Model FLOPs per trained token (ModelFlopsPerToken).
  int world_size = 1;
};

// Training FLOPs per token of a GPT: 6·N (N = every parameter, embeddings included, as the tied head
// is a matmul) plus attention 12·layers·hidden·seq_len (forward and backward).
double ModelFlopsPerToken(const v1::JobSpec& spec);

// A live rank process.
struct RankProcess {
  std::string job_id;
  int rank = 0;
  pid_t pid = -1;
};

class RankSupervisor {
 public:
  explicit RankSupervisor(RankSupervisorOptions options) : options_(std::move(options)) {}
  ~RankSupervisor();  // Kills every rank still running.

  // Writes the spec and starts the rank; STARTED is reported by the next Poll().
  absl::Status Start(const v1::Assignment& assignment);
  // Begins stopping every rank of `job_id` (any attempt).
  void StopJob(const std::string& job_id);
  // Reaps exits, escalates overdue stops to SIGKILL, reads progress. Returns the events since the last call.
  std::vector<RankEvent> Poll();
  // Ranks alive now (for re-registration after a coordinator restart).
  std::vector<v1::RunningRank> Running() const;
  // Process ids of live ranks.
  std::vector<pid_t> Pids() const;
  std::vector<RankProcess> Processes() const;

 private:
  struct Rank {
    int device = 0;  // Assignment.local_rank.
    pid_t pid = -1;
    std::string log_path;
    std::string steps_path;  // Rank 0 only.
    std::string checkpoint_dir;
    std::optional<StepRecord> last_step;  // Newest step log line read.
    int64_t val_step = 0;             // Newest evaluation read (0: none) and its loss.
    double val_loss = 0;
    int64_t reported_checkpoint = 0;  // Newest checkpoint step already reported.
    double flops_per_token = 0;
    int world_size = 1;
    int64_t samples_per_step = 0;
    std::streamoff steps_offset = 0;
    bool stopping = false;
    std::chrono::steady_clock::time_point kill_at;
  };
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  // Appends progress events from rank 0's step log and checkpoint directory.
  void ReadProgress(const Key& key, Rank& r, std::vector<RankEvent>* events);

  RankSupervisorOptions options_;
  std::map<Key, Rank> ranks_;
  std::vector<RankEvent> pending_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANK_SUPERVISOR_H_
