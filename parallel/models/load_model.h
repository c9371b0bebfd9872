// A whole model on one rank for inference (tessera generate): from a tessera checkpoint or a
// transformers model directory.
#ifndef TESSERA_PARALLEL_MODELS_LOAD_MODEL_H_
#define TESSERA_PARALLEL_MODELS_LOAD_MODEL_H_

#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

struct LoadedModel {
  std::unique_ptr<Decoder> model;
  std::string source;  // What was read: the checkpoint step directory, or the transformers directory.
};

// `path`: a directory with config.json (transformers: hf_config.h, hf_weights.h; GPT-2 with its
// n_positions positions, Llama with max_position_embeddings, else 4096) or a tessera checkpoint
// (checkpoint_model.h) — a LoRA checkpoint's adapters over the base its trainer_state.json names (a
// transformers directory or a safetensors file of documented names). `lora`: a PEFT adapter directory
// applied over `path`'s model (which must not be LoRA itself); empty: none. The parameters are fp32
// on `device`. A checkpoint trained with loss-free balancing routes with its saved biases, as the
// Trainer resuming it does (router_bias.h).
absl::StatusOr<LoadedModel> LoadModelForInference(const std::string& path, c10::Device device,
                                                  const std::string& lora = "");

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_LOAD_MODEL_H_
