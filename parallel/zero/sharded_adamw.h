// ShardedAdamW: AdamW with its state sharded over the data-parallel group (ZeRO stage 1).
//
// The parameters are viewed as one flat vector (in order); dp rank r keeps m and v only for the
// elements [r·S, (r+1)·S), S = ⌈N/dp⌉, updates only those elements from the (already averaged)
// gradients, and all-gathers the updated parameters. The update is elementwise, so the result is
// bit-identical to every rank updating everything. CPU fp32 parameters only.
#ifndef TESSERA_PARALLEL_ZERO_SHARDED_ADAMW_H_
#define TESSERA_PARALLEL_ZERO_SHARDED_ADAMW_H_

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "kernels/cpu_adam.h"
#include "parallel/comm/communicator.h"
#include "parallel/optim/adamw.h"

namespace tessera::parallel {

class ShardedAdamW {
 public:
  // `params` (contiguous CPU fp32 leaves) and `decay` (weight decay per parameter) in order.
  ShardedAdamW(std::vector<at::Tensor> params, std::vector<bool> decay, std::shared_ptr<Communicator> dp,
               AdamWOptions options);

  // Updates this rank's shard from the parameters' .grad, then all-gathers the parameters.
  absl::Status Step(double lr, int64_t step);

  // The full m and v of every parameter (a collective over dp).
  absl::Status GatherState(std::vector<at::Tensor>* exp_avg, std::vector<at::Tensor>* exp_avg_sq);
  // Keeps this rank's shard of full per-parameter m and v.
  void LoadState(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq);

  // Bytes of optimizer state held by this rank.
  int64_t state_bytes() const { return 2 * shard_ * 4; }

 private:
  // Copies [begin, end) of the flat parameter vector between the parameters and `flat` (offset by
  // `flat_offset` elements); `to_flat` picks the direction.
  void Copy(int64_t begin, int64_t end, float* flat, int64_t flat_offset, bool to_flat);

  std::vector<at::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<int64_t> offsets_;  // Flat offset of each parameter; offsets_.back() = N.
  std::shared_ptr<Communicator> dp_;
  AdamWOptions options_;
  kernels::Simd simd_;
  int64_t shard_ = 0;   // S.
  int64_t begin_ = 0;   // This rank's flat range [begin_, end_).
  int64_t end_ = 0;
  at::Tensor exp_avg_;  // [S]
  at::Tensor exp_avg_sq_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_ZERO_SHARDED_ADAMW_H_
