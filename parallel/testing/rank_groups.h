// Test helper: the process groups of one forked rank (parallel/testing/multi_process.h) over Gloo on
// 127.0.0.1, for a mesh of the given shape, with a 60 s bootstrap timeout.
#ifndef TESSERA_PARALLEL_TESTING_RANK_GROUPS_H_
#define TESSERA_PARALLEL_TESTING_RANK_GROUPS_H_

#include "absl/status/statusor.h"
#include "parallel/comm/process_groups.h"
#include "layout/rank_generator.h"

namespace tessera::parallel::testing {

absl::StatusOr<ProcessGroups> RankGroups(int rank, int store_port, const layout::ParallelLayout& shape);

}  // namespace tessera::parallel::testing

#endif  // TESSERA_PARALLEL_TESTING_RANK_GROUPS_H_
