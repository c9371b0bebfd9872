// RankGenerator: the one map between global ranks and coordinates on the parallel axes, for any
// order. Every group of every axis comes from here — the engine's process groups and the
// coordinator's placement alike — so nothing else does rank arithmetic. No torch.
//
// The order lists the axes from fastest- to slowest-varying: with tp-sp-pp-dp, ranks 0..tp-1 form
// the first tensor-parallel group.
#ifndef TESSERA_LAYOUT_RANK_GENERATOR_H_
#define TESSERA_LAYOUT_RANK_GENERATOR_H_

#include <array>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/parallel_layout.h"

namespace tessera::layout {

class RankGenerator {
 public:
  // Fails when a size is < 1 or the world exceeds 2^31 − 1 ranks.
  static absl::StatusOr<RankGenerator> Create(const ParallelLayout& layout);

  int world_size() const { return world_size_; }
  int size(Axis axis) const { return sizes_[static_cast<int>(axis)]; }
  const AxisOrder& order() const { return order_; }

  // Index of `rank` along `axis` (0 <= result < size(axis)).
  int Coord(int rank, Axis axis) const;
  // The rank at these coordinates (indexed by Axis).
  int RankAt(const std::array<int, kNumAxes>& coords) const;

  // The ranks that share every coordinate of `rank` except `axis`, ordered by their `axis` index.
  std::vector<int> GroupRanks(int rank, Axis axis) const;

  // The ranks that share every coordinate of `rank` except those of `axes`, in increasing rank order.
  std::vector<int> GroupRanks(int rank, const std::vector<Axis>& axes) const;

  // Every group along `axis`, each ordered by its `axis` index; groups ordered by their lowest rank.
  std::vector<std::vector<int>> AllGroups(Axis axis) const;

  // Expert parallelism (ParallelLayout::ep, carved out of dp). The ep ranks over which `rank`'s experts
  // are split (its dp group's indices ⌊d/ep⌋·ep .. ⌊d/ep⌋·ep + ep − 1, in dp order), and the dp/ep
  // replicas of `rank`'s experts (the dp indices ≡ d mod ep, in dp order). With ep = 1 these are {rank}
  // and the dp group.
  std::vector<int> ExpertParallelGroup(int rank) const;
  std::vector<int> ExpertDataGroup(int rank) const;
  // The ranks holding the same experts as `rank`, whose experts' gradients are summed: the dp × sp
  // ranks whose dp index is ≡ `rank`'s mod ep (sequence blocks hold the same experts), in rank order.
  // With ep = 1: the dp × sp group.
  std::vector<int> ExpertReplicaGroup(int rank) const;
  // Every expert-parallel group, ordered by their lowest rank (what placement keeps on one worker).
  std::vector<std::vector<int>> AllExpertParallelGroups() const;
  int ep() const { return ep_; }

  // 2D / 2.5D / 3D tensor parallelism: `rank`'s tp group read as a grid of `grid` sizes (TpGrid::Axes,
  // the last axis fastest-varying along the tp index); the members of the group that differ from
  // `rank` only in grid coordinate `axis`, ranked by it. InvalidArgument when the sizes do not
  // multiply to tp or `axis` is not one of them.
  absl::StatusOr<std::vector<int>> TpGridAxisGroup(int rank, const std::vector<int>& grid, int axis) const;

 private:
  RankGenerator(std::array<int, kNumAxes> sizes, std::array<int, kNumAxes> strides, AxisOrder order, int world_size,
                int ep)
      : sizes_(sizes), strides_(strides), order_(order), world_size_(world_size), ep_(ep) {}

  std::array<int, kNumAxes> sizes_;    // Indexed by Axis.
  std::array<int, kNumAxes> strides_;  // Rank distance between neighbours along each axis.
  AxisOrder order_;
  int world_size_;
  int ep_ = 1;
};

}  // namespace tessera::layout

#endif  // TESSERA_LAYOUT_RANK_GENERATOR_H_
