// A LoRA checkpoint merged into its base model and written as a transformers model directory
// (`tessera export --merge`): every adapted linear becomes W + (alpha / r) · B · A, as PEFT's
// merge_and_unload computes it; every other parameter is the base's. No torch.
#ifndef TESSERA_FORMATS_MODEL_LORA_MERGE_H_
#define TESSERA_FORMATS_MODEL_LORA_MERGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/hf_export.h"

namespace tessera::formats::model {

// `checkpoint`: config.lora enabled, model.safetensors holding the adapters (fp32). `base`: the
// model the adapters were trained over — a transformers directory (config.json + safetensors, any
// floating-point dtype) or a safetensors file of tessera's parameter names; its shapes must be the
// checkpoint's model's. The merge is computed in fp32 and written in options.dtype. Fails before
// writing anything on a missing or mismatched tensor, naming the file and tensor;
// FAILED_PRECONDITION for a checkpoint that is not LoRA or a model transformers cannot hold.
absl::StatusOr<HfExportResult> ExportMergedLora(const CheckpointModel& checkpoint, const std::string& base,
                                                const std::string& out_dir, const HfExportOptions& options);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_LORA_MERGE_H_
