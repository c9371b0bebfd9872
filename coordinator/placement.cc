#include "coordinator/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

absl::StatusOr<std::vector<Slot>> PlaceRanks(int world_size, int tp, const std::vector<FreeDevices>& free) {
  int total = 0;
  for (const auto& f : free) total += static_cast<int>(f.free_local_ranks.size());
  if (total < world_size) {
    return absl::ResourceExhaustedError(absl::StrCat("needs ", world_size, " devices; ", total, " free on ",
                                                     free.size(), " worker", free.size() == 1 ? "" : "s"));
  }
  std::vector<FreeDevices> order = free;
  std::stable_sort(order.begin(), order.end(), [](const FreeDevices& a, const FreeDevices& b) {
    return a.free_local_ranks.size() > b.free_local_ranks.size();
  });
  std::vector<size_t> used(order.size(), 0);
  std::vector<Slot> slots;
  const int group = std::max(1, tp);
  // First pass: whole tp groups onto workers that can hold them.
  for (size_t w = 0; w < order.size() && static_cast<int>(slots.size()) < world_size; ++w) {
    while (static_cast<int>(slots.size()) + group <= world_size &&
           used[w] + group <= order[w].free_local_ranks.size()) {
      for (int i = 0; i < group; ++i) slots.push_back({order[w].worker_id, order[w].free_local_ranks[used[w]++]});
    }
  }
  // Then whatever is left, in worker order (tp groups may span workers only here).
  for (size_t w = 0; w < order.size() && static_cast<int>(slots.size()) < world_size; ++w) {
    while (static_cast<int>(slots.size()) < world_size && used[w] < order[w].free_local_ranks.size()) {
      slots.push_back({order[w].worker_id, order[w].free_local_ranks[used[w]++]});
    }
  }
  return slots;
}

}  // namespace tessera::coordinator
