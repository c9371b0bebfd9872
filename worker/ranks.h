// Ranks: what the worker's agent asks of its rank processes. RankSupervisor (rank_supervisor.h) is the
// real one; the agent's unit tests use a fake beside it (agent_test.cc). Not thread-safe: one owner.
#ifndef TESSERA_WORKER_RANKS_H_
#define TESSERA_WORKER_RANKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/worker_service.pb.h"
#include "worker/rank_event.h"

namespace tessera::worker {

class Ranks {
 public:
  virtual ~Ranks() = default;
  // Starts the rank of an ACTION_START order; STARTED is among the next Poll()'s events. An error
  // means the rank never started (nothing to stop, no STARTED).
  virtual absl::Status Start(const v1::Assignment& assignment) = 0;
  // Begins stopping every rank of `job_id` of `attempt` (0: of every attempt); their EXITED events
  // follow from Poll(), with `reason` as their error when the rank's log names none ("" : none).
  virtual void StopJob(const std::string& job_id, int attempt, const std::string& reason = "") = 0;
  // Never blocks: the events (started, progress, exited) since the last call, in order.
  virtual std::vector<RankEvent> Poll() = 0;
  // Ranks alive now (listed in registrations and heartbeats).
  virtual std::vector<v1::RunningRank> Running() const = 0;
  // Live rank processes (for the worker's metrics).
  virtual std::vector<RankProcess> Processes() const = 0;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_RANKS_H_
