// One way to rebuild a model's forward pass from files: every path that starts or resumes a model
// from a base model or a checkpoint — the Trainer, tessera generate, and every later sampler or chat
// path — goes through these, so that what a checkpoint holds that changes the forward pass is applied
// alike everywhere, or refused by name (issue 62: generation once routed unlike training).
//
// What a checkpoint holds that changes the forward pass, and where it is handled:
//   model.safetensors    the trained parameters (LoRA: the adapters only)     ApplyCheckpointState
//   router_bias          loss-free balancing's biases (trainer_state.json)    ApplyCheckpointState
//   the LoRA base        trainer_state.json lora_base (generate: OpenBaseWeights, which opens a
//                        file or a transformers directory as the Trainer opens the job's
//                        model.init_from / model.pretrained: LoadTensors / OpenHfWeights)
//   model sizes, family  trainer_state.json model: the Decoder is built from it (generate) or checked
//                        against the spec (the Trainer)
// Not state: router jitter and LoRA dropout (training noise, off in every forward without a
// micro-batch seed: evaluation and generation); the precision (the checkpoint holds fp32 masters; a
// bf16/fp16/fp8 run's own forward rounds them, generation computes in fp32 from them).
#ifndef TESSERA_PARALLEL_MODELS_MODEL_STATE_H_
#define TESSERA_PARALLEL_MODELS_MODEL_STATE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "parallel/models/decoder.h"
#include "parallel/models/hf_weights.h"

namespace tessera::parallel {

// The full tensors of a base model, for Decoder::LoadFull: a transformers model directory (one with
// config.json; its files mapped, each rank reading only its own parts) or a safetensors file of
// tessera's documented names.
struct BaseWeights {
  std::map<std::string, at::Tensor> tensors;
  std::unique_ptr<HfWeights> mapped;  // Keeps a directory's mapping alive while `tensors` are used.
};
absl::StatusOr<BaseWeights> OpenBaseWeights(const std::string& path, const ModelConfig& config);

// A checkpoint's state that changes the forward pass, onto `model` (built for the checkpoint's model;
// with LoRA its base weights already loaded): the parameters of step_dir/model.safetensors (`what`:
// kTrainable, exactly the trained ones — a LoRA checkpoint's adapters —, or kModel, every tensor of
// the model with adapters optional) and loss-free balancing's biases
// `saved_router_bias` (trainer_state.json's rows) into `router_bias` — the [layers, E] tensor set on
// the model, or undefined when the model routes without biases: then a checkpoint whose biases are
// not all zero is refused by name, as it would route tokens otherwise. Errors name the file.
absl::Status ApplyCheckpointState(const std::string& step_dir, Decoder::LoadWhat what,
                                  const std::vector<std::vector<double>>& saved_router_bias, Decoder& model,
                                  at::Tensor router_bias);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_MODEL_STATE_H_
