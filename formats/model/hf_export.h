// tessera checkpoint → transformers model directory: config.json (hf_config.h) and the weights under
// transformers' names and layouts (the model prefix, GPT-2's Conv1D [in, out]), in one
// model.safetensors or, above `max_shard_bytes`, shards model-0000K-of-0000N.safetensors with
// model.safetensors.index.json — what save_pretrained writes, so from_pretrained loads it. No torch.
#ifndef TESSERA_FORMATS_MODEL_HF_EXPORT_H_
#define TESSERA_FORMATS_MODEL_HF_EXPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/family.h"

namespace tessera::formats::model {

enum class ExportDtype { kF32, kBF16 };  // bf16: rounded to nearest even, as torch converts.

struct HfExportOptions {
  ExportDtype dtype = ExportDtype::kF32;
  uint64_t max_shard_bytes = 5000000000;  // transformers' default, 5GB. A larger tensor is a shard of its own.
  // A reward model's config.json pad_token_id (HfConfigJson); -1: null.
  int64_t pad_token_id = -1;
};

struct HfExportResult {
  int shards = 0;
  uint64_t bytes = 0;  // Of all tensors written.
};

// Creates `out_dir` for an export unless it exists: then it must be an empty directory (nothing is
// overwritten). Fails FAILED_PRECONDITION naming it otherwise.
absl::Status PrepareExportDirectory(const std::string& out_dir);

// One parameter's values in fp32, in tessera's layout ([out, in] for a linear).
using HfParamValues = std::function<std::vector<float>(const ParamSpec&)>;

// Writes a model of `config` (its base parameters, ParamSpecs1D of the whole model on one rank, each
// value from `values`, which the caller has checked for every one of them) into `out_dir`, which
// must not exist or be empty. Every file is written durably. Fails naming the file.
absl::StatusOr<HfExportResult> WriteHfModel(const ModelConfig& config, const HfParamValues& values,
                                            const std::string& out_dir, const HfExportOptions& options);

// Writes the model of `checkpoint` into `out_dir`, which must not exist or be empty (nothing is
// overwritten). Every file is written durably (fsynced). Fails naming the tensor or file.
absl::StatusOr<HfExportResult> ExportToHf(const CheckpointModel& checkpoint, const std::string& out_dir,
                                          const HfExportOptions& options);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_HF_EXPORT_H_
