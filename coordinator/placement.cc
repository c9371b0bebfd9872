#include "coordinator/placement.h"

#include <algorithm>
#include <array>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::coordinator {
namespace {

using layout::Axis;

// The tp groups in placement order: by expert-parallel group (ep consecutive dp indices; every dp
// index alone without ep), then pp, then sp coordinate, then the dp index inside the ep group (fastest),
// so that consecutive groups are the members of an ep group (they exchange tokens in every sparse
// block), then sequence-parallel, then pipeline neighbours.
std::vector<std::vector<int>> GroupsInPlacementOrder(const layout::RankGenerator& ranks) {
  std::vector<std::vector<int>> groups = ranks.AllGroups(Axis::kTp);
  const int ep = std::max(1, ranks.ep());
  auto key = [&](const std::vector<int>& g) {
    const int r = g.front(), d = ranks.Coord(r, Axis::kDp);
    return std::array<int, 4>{d / ep, ranks.Coord(r, Axis::kPp), ranks.Coord(r, Axis::kSp), d % ep};
  };
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const std::vector<int>& a, const std::vector<int>& b) { return key(a) < key(b); });
  return groups;
}

std::string Explain(const layout::RankGenerator& ranks, const std::vector<std::vector<int>>& groups,
                    const std::vector<Slot>& slots) {
  int spanning = 0;
  std::vector<std::string> shown;
  for (const auto& g : groups) {
    std::set<std::string> workers;
    for (int r : g) workers.insert(slots[r].worker_id);
    if (workers.size() > 1) ++spanning;
    if (shown.size() < 8) shown.push_back(absl::StrCat("{", absl::StrJoin(g, ","), "}→", absl::StrJoin(workers, "+")));
  }
  const int tp = ranks.size(Axis::kTp);
  std::string s = absl::StrCat("ranks numbered ", layout::OrderName(ranks.order()), " (first axis fastest); ");
  if (tp == 1) {
    absl::StrAppend(&s, "no tensor parallelism");
  } else {
    absl::StrAppend(&s, "tp groups ", absl::StrJoin(shown, " "), groups.size() > shown.size() ? " …" : "", ": ",
                    spanning == 0 ? absl::StrCat("each on one worker")
                                  : absl::StrCat(spanning, " of ", groups.size(),
                                                 " span workers (no free worker held ", tp, " devices)"));
  }
  if (ranks.ep() > 1) {
    const std::vector<std::vector<int>> ep_groups = ranks.AllExpertParallelGroups();
    int apart = 0;
    for (const auto& g : ep_groups) {
      std::set<std::string> workers;
      for (int r : g) workers.insert(slots[r].worker_id);
      if (workers.size() > 1) ++apart;
    }
    absl::StrAppend(&s, "; ep groups (tokens to their experts) ",
                    apart == 0 ? std::string("each on one worker")
                               : absl::StrCat(apart, " of ", ep_groups.size(), " span workers"));
  }
  absl::StrAppend(&s, "; sp, then pp neighbours placed together; workers with the most free devices first");
  return s;
}

}  // namespace

std::string NotEnoughDevices(int64_t world, int64_t free, size_t workers) {
  return absl::StrCat("needs ", world, " devices; ", free, " free on ", workers, " worker", workers == 1 ? "" : "s");
}

absl::StatusOr<Placement> PlaceRanks(const layout::RankGenerator& ranks, const std::vector<FreeDevices>& free) {
  const int world = ranks.world_size();
  int64_t total = 0;
  for (const auto& f : free) total += static_cast<int64_t>(f.free_local_ranks.size());
  if (total < world) return absl::ResourceExhaustedError(NotEnoughDevices(world, total, free.size()));
  std::vector<FreeDevices> order = free;
  std::stable_sort(order.begin(), order.end(), [](const FreeDevices& a, const FreeDevices& b) {
    return a.free_local_ranks.size() > b.free_local_ranks.size();
  });
  const std::vector<std::vector<int>> groups = GroupsInPlacementOrder(ranks);
  Placement p;
  p.slots.assign(world, Slot{});
  std::vector<size_t> used(order.size(), 0);
  std::vector<bool> placed(groups.size(), false);
  // First pass: whole tp groups, in placement order, onto workers that can hold them.
  size_t next = 0;
  for (size_t w = 0; w < order.size() && next < groups.size(); ++w) {
    while (next < groups.size() && used[w] + groups[next].size() <= order[w].free_local_ranks.size()) {
      for (int r : groups[next]) p.slots[r] = {order[w].worker_id, order[w].free_local_ranks[used[w]++]};
      placed[next++] = true;
    }
  }
  // Then the ranks of the groups left, in worker order (a tp group spans workers only here).
  size_t w = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (placed[g]) continue;
    for (int r : groups[g]) {
      while (used[w] == order[w].free_local_ranks.size()) ++w;  // Enough devices in total: checked above.
      p.slots[r] = {order[w].worker_id, order[w].free_local_ranks[used[w]++]};
    }
  }
  p.explanation = Explain(ranks, groups, p.slots);
  return p;
}

}  // namespace tessera::coordinator
