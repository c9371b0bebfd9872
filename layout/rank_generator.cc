#include "layout/rank_generator.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"

namespace tessera::layout {

absl::StatusOr<RankGenerator> RankGenerator::Create(const ParallelLayout& layout) {
  std::array<int, kNumAxes> sizes{};
  for (Axis a : kAxes) {
    sizes[static_cast<int>(a)] = layout.Size(a);
    if (layout.Size(a) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(AxisName(a), " size ", layout.Size(a), " must be at least 1"));
    }
  }
  if (layout.WorldSize() > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", layout.WorldSize(), " exceeds ", INT_MAX, " ranks"));
  }
  std::array<int, kNumAxes> strides{};
  int stride = 1;
  for (Axis a : layout.order) {
    strides[static_cast<int>(a)] = stride;
    stride *= sizes[static_cast<int>(a)];
  }
  const int dp = sizes[static_cast<int>(Axis::kDp)];
  if (layout.ep < 1 || dp % layout.ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ep ", layout.ep, " must be at least 1 and divide dp ", dp));
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
