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
// Workers are taken in the order of `free` sorted by free devices, most first (stable).
absl::StatusOr<Placement> PlaceRanks(const layout::RankGenerator& ranks, const std::vector<FreeDevices>& free);

// The reason PlaceRanks gives when `free` devices on `workers` workers are fewer than `world`.
std::string NotEnoughDevices(int64_t world, int64_t free, size_t workers);

// PlaceRanks reads only a prefix of its worker order: tp groups go whole onto the first workers that
// hold them, and only when the whole list cannot hold every group whole are the rest spread over the
// leftovers, again from the first worker. Fed the workers in that order (an index by free devices),
// this says when the ones added so far place a job of `world` ranks in tp groups of `group` exactly
// as every worker of the cluster would — so that placement reads no more workers than it uses.
class PlacementPrefix {
 public:
  PlacementPrefix(int64_t world, int group) : world_(world), group_(group < 1 ? 1 : group) {}
  // Whether the workers added so far suffice, `next_free` being the free devices of the next worker in
  // order (-1: there is none).
  bool Enough(int next_free) const {
    if (whole_groups_ * group_ >= world_) return true;           // Every group whole on these.
    return free_ >= world_ && (next_free < group_);             // Spread: later workers hold no group whole.
  }
  void Add(int free) {
    whole_groups_ += free / group_;
    free_ += free;
  }

 private:
  int64_t world_;
  int group_;
  int64_t whole_groups_ = 0;
  int64_t free_ = 0;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_PLACEMENT_H_
