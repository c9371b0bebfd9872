// Rank placement: which worker runs each rank of a job. Pure logic, no state.
//
// Ranks are numbered with tensor parallelism fastest ("tp-sp-pp-dp"), so every tp group is a run of
// consecutive ranks. Placement fills workers in order of most free devices first, giving each whole
// tp groups while they fit, so a tp group never spans workers unless no worker can hold one.
// Gang scheduling: all ranks are placed or none.
#ifndef TESSERA_COORDINATOR_PLACEMENT_H_
#define TESSERA_COORDINATOR_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::coordinator {

struct FreeDevices {
  std::string worker_id;
  std::vector<int> free_local_ranks;  // Device indices not in use on that worker.
};

struct Slot {
  std::string worker_id;
  int local_rank = 0;
};

// Slots for ranks 0..world_size-1. ResourceExhausted (with a human reason) when they do not fit.
absl::StatusOr<std::vector<Slot>> PlaceRanks(int world_size, int tp, const std::vector<FreeDevices>& free);

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_PLACEMENT_H_
