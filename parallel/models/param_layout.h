// How a model parameter of the documented full shape is split over the tp ranks.
#ifndef TESSERA_PARALLEL_MODELS_PARAM_LAYOUT_H_
#define TESSERA_PARALLEL_MODELS_PARAM_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/model/tp_split.h"
#include "parallel/comm/communicator.h"

namespace tessera::parallel {

// FNV-1a of `name` mixed with `seed`: a per-tensor seed independent of creation order (parameter
// initialisation, LoRA dropout's masks).
uint64_t TensorSeed(uint64_t seed, const std::string& name);

// Coordinates of tp rank `t` on `grid` (major first).
std::vector<int> GridCoords(const std::vector<int>& grid, int t);

struct Param;
// How many tp ranks hold identical copies of each element of `param` (1 when partitioned).
int ReplicasInTp(const Param& param, int tp_size);

struct Param {
  std::string name;                 // Documented full name, e.g. "h.0.attn.c_attn.weight".
  std::vector<int64_t> full_shape;  // Shape of the full (unsplit) tensor.
  formats::model::TpSplit split = formats::model::TpSplit::kReplicated;
  formats::model::GridSplit grid;                   // With split kGrid.
  bool weight_decay = false;        // AdamW decay applies (tensors with >= 2 dims).
  bool expert = false;              // A sparse block's expert: split over ep, reduced over expert_dp.
  at::Tensor value;                 // This rank's part; a leaf that requires grad.
};

// This rank's part of `full` (shape `param.full_shape`) under `param.split`.
at::Tensor ShardOf(const Param& param, const at::Tensor& full, int tp_rank, int tp_size);

// The shape of one rank's part of `param` when split over `tp_size` ranks.
std::vector<int64_t> PartShape(const Param& param, int tp_size);

// The full tensor from every tp rank's part, `parts[r]` from rank r (the inverse of ShardOf).
at::Tensor JoinShards(const Param& param, const std::vector<at::Tensor>& parts);

// The squared global L2 norm of the parameters' .grad (this rank's tp parts; a collective over `tp`):
// one fp32 norm per tensor, squared and summed in double; tp-split tensors' sums are added over tp,
// replicated ones counted once; not finite when a gradient overflowed. Leaves out the parameters
// named in `skip` (a pipeline's last stage skips the tied embedding its first stage counts); summing
// it over pipeline stages gives the model's. A parameter without .grad (no pass used it at dp 1) adds nothing.
absl::StatusOr<double> GradSquaredSumOverTp(std::vector<Param>& params, Communicator* tp,
                                            const std::vector<std::string>& skip = {});

// Reassembles the full tensor from every tp rank's `part` (collective over `tp`).
absl::Status GatherFullTensor(const Param& param, const at::Tensor& part, Communicator* tp, at::Tensor* full);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_PARAM_LAYOUT_H_
