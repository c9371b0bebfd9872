// Which checkpoint a path names and what model it holds (no torch): used by the commands that read a
// checkpoint outside training (tessera export, tessera generate).
#ifndef TESSERA_FORMATS_MODEL_CHECKPOINT_MODEL_H_
#define TESSERA_FORMATS_MODEL_CHECKPOINT_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/model/model_config.h"

namespace tessera::formats::model {

struct CheckpointModel {
  std::string path;  // The step directory: path/model.safetensors holds the full fp32 parameters.
  int64_t step = 0;
  ModelConfig config;
  std::string lora_base;  // LoRA checkpoints: the base model the adapters belong to ("" if unknown).
  // Loss-free balancing's biases (trainer_state.json router_bias: a row per block, empty when none).
  std::vector<std::vector<double>> router_bias;
};

// `path` is one checkpoint (step_NNNNNNNN) or a checkpoint directory (its newest checkpoint that
// verifies; damaged newer ones are skipped, never renamed: this is a reader). The checkpoint is
// verified against its index (sizes and CRC-32C) and its model read from trainer_state.json. Errors
// name the path and the problem.
absl::StatusOr<CheckpointModel> ReadCheckpointModel(const std::string& path);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_CHECKPOINT_MODEL_H_
