// Where each parameter of a model lies in a transformers model directory (model.safetensors, or the
// shards named by model.safetensors.index.json), without torch: the stored tensor of every tessera
// parameter (the model prefix stripped, buffers skipped, a tied head taken from the embedding), checked
// against the model's shapes. parallel/models/hf_weights.h makes torch views of them; a LoRA merge
// (lora_merge.h) reads them as fp32 values.
#ifndef TESSERA_FORMATS_MODEL_HF_FILES_H_
#define TESSERA_FORMATS_MODEL_HF_FILES_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "formats/model/family.h"
#include "formats/model/model_config.h"

namespace tessera::formats::model {

// One parameter's stored tensor.
struct HfStoredTensor {
  const checkpoint::MappedSafetensors* file = nullptr;
  const checkpoint::TensorEntry* entry = nullptr;
  std::string stored_name;
  bool transposed = false;  // Stored [in, out] (GPT-2's Conv1D): the parameter is its transpose.
  bool positions = false;   // A learned position table: its first shape[0] rows are the parameter.
};

struct HfFiles {
  // Every parameter of the whole model, by tessera name — but a reward model's score head
  // (ModelConfig::score_head) when the directory is a causal LM's (its LM head is then ignored).
  std::map<std::string, HfStoredTensor> params;
  std::vector<std::unique_ptr<checkpoint::MappedSafetensors>> files;  // Keep alive while `params` is used.
};

// Maps the weights of `dir` for a model of `config` (from its config.json: hf_config.h). Fails naming
// the file and tensor: a parameter missing or of another shape, a tensor that is no parameter of this
// model (never dropped silently), an index naming a file outside `dir`, a dtype other than floating
// point (F32, BF16, F16, F64). pytorch_model.bin is not read.
absl::StatusOr<HfFiles> OpenHfFiles(const std::string& dir, const ModelConfig& config);

// The values of `spec`'s parameter in `t` as fp32, in the parameter's layout (transposed back,
// positions cut to spec.shape[0] rows). `t` was checked by OpenHfFiles.
std::vector<float> ReadAsFloat(const HfStoredTensor& t, const ParamSpec& spec);

// The values of a stored floating-point tensor (F32, BF16, F16, F64) as fp32, in stored order.
// INVALID_ARGUMENT naming `where` for any other dtype.
absl::StatusOr<std::vector<float>> StoredAsFloat(const checkpoint::MappedSafetensors& file, const checkpoint::TensorEntry& entry,
                                                 const std::string& where);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_HF_FILES_H_
