// RankEvent and RankProcess: what the worker knows of one rank, shared by the agent, the rank
// supervisor and the worker's metrics.
#ifndef TESSERA_WORKER_RANK_EVENT_H_
#define TESSERA_WORKER_RANK_EVENT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/worker_service.pb.h"

namespace tessera::worker {

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

// The start of an EXITED error for a rank the worker could not start (exit code 127).
inline constexpr char kCouldNotStart[] = "error: the worker could not start the rank: ";

// A live rank process.
struct RankProcess {
  std::string job_id;
  int rank = 0;
  pid_t pid = -1;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANK_EVENT_H_
