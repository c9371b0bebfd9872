// Loss-free balancing's router biases (model.router_bias_rate > 0) as a checkpoint holds them and as
// Decoder::set_router_bias takes them — one reading for every path that rebuilds a model from a
// checkpoint (the Trainer resuming, tessera generate), so that they route tokens alike.
#ifndef TESSERA_PARALLEL_MODELS_ROUTER_BIAS_H_
#define TESSERA_PARALLEL_MODELS_ROUTER_BIAS_H_

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/status.h"

namespace tessera::parallel {

// Sets `bias` ([layers, E], any device and floating dtype) to trainer_state.json's `router_bias`
// rows (formats/model/trainer_state.h: one per block, E numbers, or empty for a dense block); blocks
// without a row get zeros. A row of another length, or more rows than blocks, is an error naming it.
absl::Status LoadRouterBias(const std::vector<std::vector<double>>& rows, at::Tensor& bias);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_ROUTER_BIAS_H_
