// StartSpecs: the job specs that start orders brought, so that the later START orders of one attempt
// on this worker can be carried out. The coordinator sends the spec only with the first START order
// of a (job, attempt) that a worker gets in its session (Assignment.spec): a 100,000-rank job sends
// it once per worker, not once per rank. Orders are applied in sequence, so the first comes first.
#ifndef TESSERA_WORKER_START_SPECS_H_
#define TESSERA_WORKER_START_SPECS_H_

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "tessera/v1/worker_service.pb.h"

namespace tessera::worker {

class StartSpecs {
 public:
  // `order` (ACTION_START) with its spec: its own — kept for the attempt's later orders, in place of
  // the job's earlier attempts' — or the one kept for its job and attempt; nullopt when it has none.
  std::optional<v1::Assignment> Complete(const v1::Assignment& order);
  // Forgets every spec (a new registration: the coordinator sends them again).
  void Clear();

  static constexpr size_t kKeptJobs = 64;  // The oldest job's spec goes beyond this many.

 private:
  std::map<std::string, std::pair<int, v1::JobSpec>> by_job_;  // job_id → (attempt, spec).
  std::deque<std::string> arrival_;                              // Job ids, oldest first.
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_START_SPECS_H_
