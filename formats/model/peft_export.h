// A LoRA checkpoint (trainer_state.json's model.lora; model.safetensors holds the adapters) → a PEFT
// adapter directory (formats/model/peft_adapter.h): adapter_config.json and adapter_model.safetensors,
// what `peft.PeftModel.from_pretrained(base_model, DIR)` loads. No torch.
#ifndef TESSERA_FORMATS_MODEL_PEFT_EXPORT_H_
#define TESSERA_FORMATS_MODEL_PEFT_EXPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/family.h"

namespace tessera::formats::model {

// The adapters of `checkpoint` (config.lora enabled; and a reward model's score head) in `file`, its
// model.safetensors, in LoraParamSpecs' order: each spec with its entry, checked to be F32 of the spec's shape. DATA_LOSS
// naming the file and tensor otherwise.
absl::StatusOr<std::vector<std::pair<ParamSpec, const checkpoint::TensorEntry*>>> LoraAdapterEntries(
    const CheckpointModel& checkpoint, const checkpoint::MappedSafetensors& file);

// Writes the adapters of `checkpoint` (config.lora enabled) into `out_dir` in fp32, as PEFT saves
// them; `out_dir` must not exist or be empty; every file durably. Returns the bytes of tensors
// written. Fails naming the tensor or file.
absl::StatusOr<uint64_t> ExportPeftAdapter(const CheckpointModel& checkpoint, const std::string& out_dir);

}  // namespace tessera::formats::model

#endif  // TESSERA_FORMATS_MODEL_PEFT_EXPORT_H_
