#include "layout/rank_generator.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "layout/check_layout.h"

namespace tessera::layout {

absl::StatusOr<RankGenerator> RankGenerator::Create(const ParallelLayout& layout) {
  // The rules are CheckLayout's: every size ≥ 1, ep | dp.
  if (absl::Status s = ToStatus(AxisProblems(layout)); !s.ok()) return s;
  std::array<int, kNumAxes> sizes{};
  for (Axis a : kAxes) sizes[static_cast<int>(a)] = layout.Size(a);
  if (layout.WorldSize() > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", layout.WorldSize(), " exceeds ", INT_MAX, " ranks"));
  }
  std::array<int, kNumAxes> strides{};
  int stride = 1;
  for (Axis a : layout.order) {
    strides[static_cast<int>(a)] = stride;
    stride *= sizes[static_cast<int>(a)];
  }
  return RankGenerator(sizes, strides, layout.order, stride, layout.ep);
}

std::vector<int> RankGenerator::ExpertParallelGroup(int rank) const {
  const std::vector<int> dp = GroupRanks(rank, Axis::kDp);
  const int first = Coord(rank, Axis::kDp) / ep_ * ep_;
  return std::vector<int>(dp.begin() + first, dp.begin() + first + ep_);
}

std::vector<int> RankGenerator::ExpertDataGroup(int rank) const {
  const std::vector<int> dp = GroupRanks(rank, Axis::kDp);
  std::vector<int> ranks;
  for (int d = Coord(rank, Axis::kDp) % ep_; d < static_cast<int>(dp.size()); d += ep_) ranks.push_back(dp[d]);
  return ranks;
}

std::vector<int> RankGenerator::ExpertReplicaGroup(int rank) const {
  std::vector<int> ranks;
  const int d = Coord(rank, Axis::kDp);
  for (int r : GroupRanks(rank, std::vector<Axis>{Axis::kDp, Axis::kSp})) {
    if (Coord(r, Axis::kDp) % ep_ == d % ep_) ranks.push_back(r);
  }
  return ranks;
}

absl::StatusOr<std::vector<int>> RankGenerator::TpGridAxisGroup(int rank, const std::vector<int>& grid,
                                                                int axis) const {
  const std::vector<int> tp = GroupRanks(rank, Axis::kTp);
  int64_t product = 1;
  for (int n : grid) product *= n < 1 ? 0 : n;
  if (product != static_cast<int64_t>(tp.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the tp grid's sizes multiply to ", product, ", tp is ", tp.size()));
  }
  if (axis < 0 || axis >= static_cast<int>(grid.size())) {
    return absl::InvalidArgumentError(absl::StrCat("tp grid axis ", axis, " of ", grid.size()));
  }
  int stride = 1;  // Of `axis` along the tp index.
  for (int a = static_cast<int>(grid.size()) - 1; a > axis; --a) stride *= grid[a];
  const int t = Coord(rank, Axis::kTp);
  const int coord = (t / stride) % grid[axis];
  std::vector<int> members;
  for (int k = 0; k < grid[axis]; ++k) members.push_back(tp[t + (k - coord) * stride]);
  return members;
}

std::vector<std::vector<int>> RankGenerator::AllExpertParallelGroups() const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size_; ++r) {
    std::vector<int> g = ExpertParallelGroup(r);
    if (g.front() == r) groups.push_back(std::move(g));  // dp order is rank order: front is the lowest.
  }
  return groups;
}

int RankGenerator::Coord(int rank, Axis axis) const {
  const int a = static_cast<int>(axis);
  return (rank / strides_[a]) % sizes_[a];
}

int RankGenerator::RankAt(const std::array<int, kNumAxes>& coords) const {
  int rank = 0;
  for (int a = 0; a < kNumAxes; ++a) rank += coords[a] * strides_[a];
  return rank;
}

std::vector<int> RankGenerator::GroupRanks(int rank, Axis axis) const {
  const int a = static_cast<int>(axis);
  const int base = rank - Coord(rank, axis) * strides_[a];
  std::vector<int> ranks;
  for (int i = 0; i < sizes_[a]; ++i) ranks.push_back(base + i * strides_[a]);
  return ranks;
}

std::vector<int> RankGenerator::GroupRanks(int rank, const std::vector<Axis>& axes) const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    bool same = true;
    for (Axis axis : kAxes) {
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) same = same && Coord(r, axis) == Coord(rank, axis);
    }
    if (same) ranks.push_back(r);
  }
  return ranks;
}

std::vector<std::vector<int>> RankGenerator::AllGroups(Axis axis) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size_; ++r) {
    if (Coord(r, axis) == 0) groups.push_back(GroupRanks(r, axis));
  }
  return groups;
}

}  // namespace tessera::layout
