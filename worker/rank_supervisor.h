// RankSupervisor: the worker's tessera-rank processes — starts them for assignments, stops them
// (SIGTERM to the process group, SIGKILL after a grace period), reaps them, and reads rank 0's step
// log for progress. Never blocks: Poll() does the waiting work. Not thread-safe (one owner thread).
// The files it opens in a job's OUTPUT_DIR (the rank logs, steps.jsonl) are the user's: they are opened
// through common/userfs (no symbolic link followed, no FIFO waited on, regular files only), and one
// that is not a regular file fails that job with the file's name, never the worker. They may also lie
// on a mount that stopped answering, so they are read on threads of their own (worker/rank_files.h on
// an OffThread), never on the caller's: Poll() applies what a read found once it is done, holds a rank's
// EXITED until the read after its exit is done, and stops a job whose files do not answer within
// user_files_timeout. Start() waits for the rank's log at most start_files_wait; a rank whose log has not
// opened by then is started by a later Poll() (or reported EXITED, code 127, when it cannot be).
#ifndef TESSERA_WORKER_RANK_SUPERVISOR_H_
#define TESSERA_WORKER_RANK_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "common/steplog/step_log.h"
#include "common/time/clock.h"
#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/worker_service.pb.h"
#include "worker/off_thread.h"
#include "worker/rank_event.h"
#include "worker/rank_files.h"
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
  // A read of a job's files that has not answered after this long (on options.clock) stops the job
  // naming OUTPUT_DIR; none of its files is read again.
  std::chrono::milliseconds user_files_timeout{60000};
  // How long Start() waits for the rank's log to open (real time: the caller waits) before leaving the
  // start to Poll(). No wait while another rank of the same attempt is still opening.
  std::chrono::milliseconds start_files_wait{100};
  // Tests only: runs first on each thread that opens or reads a job's files, with the job's OUTPUT_DIR
  // (a test blocks in it to stand for a mount that stopped answering). Copied to each such thread,
  // which may outlive the supervisor.
  std::function<void(const std::string& output_dir)> user_files_hook;
};

// Training FLOPs per token of a GPT: 6·N (N = every parameter, embeddings included, as the tied head
// is a matmul) plus attention 12·layers·hidden·seq_len (forward and backward).
double ModelFlopsPerToken(const v1::JobSpec& spec);

class RankSupervisor final : public Ranks {
 public:
  explicit RankSupervisor(RankSupervisorOptions options) : options_(std::move(options)) {}
  ~RankSupervisor();  // Kills every rank still running.

  // Writes the spec and starts the rank; STARTED is reported by the next Poll() that finds it started.
  // An error when the rank cannot start; when its log did not open within start_files_wait, OK, and a
  // later Poll() starts it or reports it EXITED (code 127, kCouldNotStart).
  absl::Status Start(const v1::Assignment& assignment) override;
  // Begins stopping every rank of `job_id` of `attempt` (0: any): SIGTERM to each rank's process
  // group now, SIGKILL from the first Poll() at least stop_grace later (on options.clock).
  void StopJob(const std::string& job_id, int attempt, const std::string& reason = "") override;
  // Reaps exits, escalates overdue stops to SIGKILL, reads progress. Returns the events since the last call.
  std::vector<RankEvent> Poll() override;
  // Ranks alive now, and those starting or exited whose event is not out yet (for heartbeats and
  // re-registration after a coordinator restart).
  std::vector<v1::RunningRank> Running() const override;
  // Process ids of live ranks (spawned, not reaped).
  std::vector<pid_t> Pids() const;
  std::vector<RankProcess> Processes() const override;

 private:
  struct Rank {
    int device = 0;  // Assignment.local_rank.
    process::SpawnOptions spawn;        // Its command line and environment (the log added at the spawn).
    OffThread<StartedFiles> opener;     // Its log opening, while not yet spawned (pid -1).
    absl::Time open_started;            // Of the opener, on options.clock.
    pid_t pid = -1;  // Its process group too. -1 until spawned; not signalled once reaped (exited).
    RankFiles files;              // Its files under OUTPUT_DIR and the step log's read position.
    OffThread<FilesRead> read;    // The read of its files in flight (at most one).
    absl::Time read_started;      // Of that read, on options.clock.
    // When the files were last read (real time): at most every kProgressEvery while the rank runs,
    // and once more after its exit.
    std::chrono::steady_clock::time_point progress_read_at{};
    bool files_hung = false;      // A read did not answer in user_files_timeout: no read again.
    bool exited = false;          // Reaped; its EXITED waits for the read after the exit.
    absl::Time exited_at;         // On options.clock: that read is given up user_files_timeout later.
    bool final_read = false;      // That read was started (or needed none).
    int exit_code = 0;
    std::string last_error;       // The rank log's last "error: " line, read after a failed exit.
    bool stopping = false;
    std::string stop_reason;   // The EXITED error when the rank's log names none.
    std::string file_error;    // A user file the worker refused (it stopped the job): the EXITED error.
    absl::Time kill_at = absl::InfiniteFuture();
  };
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  // Spawns r with its opened files; STARTED goes to `events`. The error when it cannot be.
  absl::Status Spawn(const Key& key, Rank& r, StartedFiles opened, std::vector<RankEvent>* events);
  // For a rank not yet spawned: spawns it once its log is open, or gives it up (stopped, log refused or
  // not open in user_files_timeout) with an EXITED event. True when it is to be erased.
  bool FinishStart(const Key& key, Rank& r, absl::Time now, std::vector<RankEvent>* events);
  // Starts a read of r's files on its own thread; false when the system refuses a thread (the next
  // Poll tries again). `last_error`: the rank log's last error line too.
  bool StartRead(Rank& r, bool last_error);
  // Applies a finished read: its position, progress events and last error line; a step log the user
  // replaced with something else stops the job.
  void ApplyRead(const Key& key, Rank& r, FilesRead read, std::vector<RankEvent>* events);
  // Stops the job's ranks of this attempt because of its files (`what`), unless it is stopping already.
  void StopForFiles(const Key& key, Rank& r, const std::string& what);
  // The EXITED event of a rank whose last read is done.
  static RankEvent Exited(const Key& key, const Rank& r);

  RankSupervisorOptions options_;
  std::map<Key, Rank> ranks_;
  std::vector<RankEvent> pending_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANK_SUPERVISOR_H_
