// ProcessMesh: global ranks laid out on the named axes dp, pp, tp and sp.
//
// The order string lists the axes from fastest- to slowest-varying: with "tp-sp-pp-dp", ranks 0..tp-1
// form the first tensor-parallel group, so tensor parallelism stays inside a node. No torch here.
#ifndef TESSERA_PARALLEL_MESH_PROCESS_MESH_H_
#define TESSERA_PARALLEL_MESH_PROCESS_MESH_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::parallel {

enum class Axis { kDp = 0, kPp = 1, kTp = 2, kSp = 3 };

// "dp", "pp", "tp" or "sp".
const char* AxisName(Axis axis);

struct MeshShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int sp = 1;
  std::string order = "tp-sp-pp-dp";  // Fastest-varying axis first.
};

class ProcessMesh {
 public:
  // Fails when a size is < 1 or `order` is not a permutation of the four axis names.
  static absl::StatusOr<ProcessMesh> Create(const MeshShape& shape);

  int world_size() const { return world_size_; }
  int size(Axis axis) const { return sizes_[static_cast<int>(axis)]; }

  // Index of `rank` along `axis` (0 <= result < size(axis)).
  int Coord(int rank, Axis axis) const;

  // The ranks that share every coordinate of `rank` except `axis`, ordered by their `axis` index.
  std::vector<int> GroupRanks(int rank, Axis axis) const;

  // The ranks that share every coordinate of `rank` except those of `axes`, in increasing rank order.
  std::vector<int> GroupRanks(int rank, const std::vector<Axis>& axes) const;

  // Every group along `axis`, each ordered by its `axis` index; groups ordered by their lowest rank.
  std::vector<std::vector<int>> AllGroups(Axis axis) const;

 private:
  ProcessMesh(std::array<int, 4> sizes, std::array<int, 4> strides, int world_size)
      : sizes_(sizes), strides_(strides), world_size_(world_size) {}

  std::array<int, 4> sizes_;    // Indexed by Axis.
  std::array<int, 4> strides_;  // Rank distance between neighbours along each axis.
  int world_size_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MESH_PROCESS_MESH_H_
