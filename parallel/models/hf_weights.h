// The weights of a transformers model directory (model.safetensors, or the shards named by
// model.safetensors.index.json) as tessera's parameters: names without the model prefix, GPT-2's
// Conv1D weights transposed, learned positions cut to seq_len, buffers skipped. Tensors are views
// of the mapped files in their stored dtype (F32, BF16, F16, F64): a rank that copies its tp part of
// its pipeline stage's parameters (Decoder::LoadFull) reads only those pages.
#ifndef TESSERA_PARALLEL_MODELS_HF_WEIGHTS_H_
#define TESSERA_PARALLEL_MODELS_HF_WEIGHTS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "parallel/models/model_config.h"

namespace tessera::parallel {

struct HfWeights {
  // Every parameter of the whole model, by tessera name: views into `files` (keep this alive while
  // they are used), of the full documented shape.
  std::map<std::string, at::Tensor> tensors;  // Every parameter (a reward model read from a causal LM: but its score head).
  std::vector<std::unique_ptr<formats::checkpoint::MappedSafetensors>> files;
};

// Maps the weights of `dir` for a model of `config` (from its config.json: parallel/models/hf_config).
// Fails naming the file and tensor: a parameter missing or of another shape, a tensor that is no
// parameter of this model (never dropped silently), an index naming a file outside `dir`, a dtype
// other than floating point. pytorch_model.bin is not read.
absl::StatusOr<HfWeights> OpenHfWeights(const std::string& dir, const ModelConfig& config);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_MODELS_HF_WEIGHTS_H_
