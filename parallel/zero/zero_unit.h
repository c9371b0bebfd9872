// ZeroOptimizer's unit: the parameters of one model block flattened into one vector, sharded over dp.
// Internal to parallel/zero (its .cc files share it); not part of ZeroOptimizer's interface.
#ifndef TESSERA_PARALLEL_ZERO_ZERO_UNIT_H_
#define TESSERA_PARALLEL_ZERO_ZERO_UNIT_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/comm/communicator.h"
#include "parallel/zero/zero_optimizer.h"

namespace tessera::parallel {

struct ZeroOptimizer::Unit {
  std::vector<size_t> params;     // Model parameter indices.
  std::vector<int64_t> offsets;   // Flat offset of each member; offsets.back() = numel.
  int64_t numel = 0;              // N.
  int64_t shard = 0;              // S (= N when not partitioned).
  int64_t begin = 0;              // This rank's owned range [begin, begin + S) of the padded flat.
  // The replicas it is sharded and reduced over: dp × sp, or for a Mixture of Experts' experts under
  // expert parallelism their own replicas (expert_dp); `shards` ranks of it when partitioned, else 1.
  Communicator* group = nullptr;
  int shards = 1;
  int shard_rank = 0;
  bool expert = false;
  at::Tensor flat;                // [S·shards] in the parameter dtype; the parameters are views of it.
  at::Tensor flat_alias;          // Alias(flat).
  at::Tensor param_shard;         // Stage 3: [S] owned parameters in the parameter dtype.
  at::Tensor master;              // [S] fp32 (an alias of the parameters' memory when they are fp32 there).
  bool master_is_param = false;
  at::Tensor exp_avg, exp_avg_sq;  // [S] fp32.
  at::Tensor grad_shard;          // Without buckets_: [S] in the parameter dtype: the reductions finished.
  at::Tensor grad_flat;           // Without buckets_: [S·shards] being reduce-scattered...
  at::Tensor incoming;            // ... into [S], added to grad_shard when it arrives.
  std::unique_ptr<CommWork> reduce;
  std::unique_ptr<CommWork> gather;  // Stage 3: gathering into flat.
  bool gathered = true;
  size_t ready = 0;               // Members whose gradient this backward pass produced.
  int model_unit = 0;             // The model's unit (UnitHooks) this belongs to.
  int pending = 0;                // Model unit 0: forwards whose backward has not completed the unit.

  // The owned elements [first, second) of the unit's flat that belong to member j (empty if none).
  std::pair<int64_t, int64_t> Owned(size_t j) const {
    return {std::max(begin, offsets[j]), std::min(begin + shard, offsets[j + 1])};
  }
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_ZERO_ZERO_UNIT_H_
