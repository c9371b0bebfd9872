#include "parallel/mesh/process_mesh.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera::parallel {

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
    case Axis::kTp: return "tp";
    case Axis::kSp: return "sp";
  }
  return "?";
}

absl::StatusOr<ProcessMesh> ProcessMesh::Create(const MeshShape& shape) {
  std::array<int, 4> sizes = {shape.dp, shape.pp, shape.tp, shape.sp};
  for (int a = 0; a < 4; ++a) {
    if (sizes[a] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(AxisName(static_cast<Axis>(a)), " size ", sizes[a], " must be at least 1"));
    }
  }
  std::vector<std::string> names = absl::StrSplit(shape.order, '-');
  std::set<int> seen;
  std::array<int, 4> strides{};
  int stride = 1;
  for (const std::string& n : names) {
    int a = n == "dp" ? 0 : n == "pp" ? 1 : n == "tp" ? 2 : n == "sp" ? 3 : -1;
    if (a < 0 || !seen.insert(a).second) break;
    strides[a] = stride;
    stride *= sizes[a];
  }
  if (names.size() != 4 || seen.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("order '", shape.order, "' must name dp, pp, sp and tp once each"));
  }
  return ProcessMesh(sizes, strides, stride);
}

int ProcessMesh::Coord(int rank, Axis axis) const {
  const int a = static_cast<int>(axis);
  return (rank / strides_[a]) % sizes_[a];
}

std::vector<int> ProcessMesh::GroupRanks(int rank, Axis axis) const {
  const int a = static_cast<int>(axis);
  const int base = rank - Coord(rank, axis) * strides_[a];
  std::vector<int> ranks;
  for (int i = 0; i < sizes_[a]; ++i) ranks.push_back(base + i * strides_[a]);
  return ranks;
}

std::vector<int> ProcessMesh::GroupRanks(int rank, const std::vector<Axis>& axes) const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    bool same = true;
    for (int a = 0; a < 4 && same; ++a) {
      const Axis axis = static_cast<Axis>(a);
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) same = Coord(r, axis) == Coord(rank, axis);
    }
    if (same) ranks.push_back(r);
  }
  return ranks;
}

std::vector<std::vector<int>> ProcessMesh::AllGroups(Axis axis) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size_; ++r) {
    if (Coord(r, axis) == 0) groups.push_back(GroupRanks(r, axis));
  }
  return groups;
}

}  // namespace tessera::parallel
