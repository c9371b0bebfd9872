// Rank placement: which worker runs each rank of a job. Pure logic, no state.
//
// Every group comes from the job's rank generator (layout/rank_generator.h), whatever order
// `parallel.order` numbers the ranks in. Placement hands out whole tensor-parallel groups, ordered
// so that groups which differ only in their sp, then pp, then dp coordinate come one after another:
// the workers with the most free devices are filled first with consecutive groups, so a tp group
// never spans workers when one worker can hold it, and sequence-parallel and pipeline neighbours
// share a worker where they fit. Gang scheduling: all ranks are placed or none.
#ifndef TESSERA_COORDINATOR_PLACEMENT_H_
#define TESSERA_COORDINATOR_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/rank_generator.h"

namespace tessera::coordinator {

struct FreeDevices {
  std::string worker_id;
  std::vector<int> free_local_ranks;  // Device indices not in use on that worker.
};

struct Slot {
  std::string worker_id;
  int local_rank = 0;
};

struct Placement {
  std::vector<Slot> slots;  // Indexed by global rank.
  // How it was chosen and what it achieved, for `tessera job` and `tessera plan`: the rank order,
  // the tp groups and whether each stayed on one worker.
  std::string explanation;
};

// Slots for every rank of `ranks`. ResourceExhausted (with a human reason) when they do not fit.
absl::StatusOr<Placement> PlaceRanks(const layout::RankGenerator& ranks, const std::vector<FreeDevices>& free);

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_PLACEMENT_H_
