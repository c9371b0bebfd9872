#include "parallel/testing/rank_groups.h"

#include <chrono>

namespace tessera::parallel::testing {

absl::StatusOr<ProcessGroups> RankGroups(int rank, int store_port, const layout::ParallelLayout& shape) {
  auto mesh = layout::RankGenerator::Create(shape);
  if (!mesh.ok()) return mesh.status();
  BootstrapOptions o;
  o.rank = rank;
  o.store_port = store_port;
  o.timeout = std::chrono::seconds(60);
  return CreateProcessGroups(o, *mesh);
}

}  // namespace tessera::parallel::testing
