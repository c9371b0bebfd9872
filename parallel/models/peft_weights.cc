#include "parallel/models/peft_weights.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "formats/model/peft_adapter.h"
#include "parallel/checkpoint/tensor_convert.h"

namespace tessera::parallel {

using formats::model::PeftKeyOfTesseraName;
using formats::model::TesseraNameOfPeftKey;

absl::Status LoadPeftAdapterTensors(Decoder& model, const std::string& dir) {
  const std::string file = dir + "/adapter_model.safetensors";
  auto tensors = LoadTensors(file);
  if (!tensors.ok()) return tensors.status();
  std::map<std::string, at::Tensor> adapters;
  for (auto& [key, t] : *tensors) {
    const std::string name = TesseraNameOfPeftKey(key);
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": tensor ", key, " is not a LoRA adapter of a Llama-shaped model's layers"));
    }
    if (name == formats::model::kScoreWeight && !model.config().score_head) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": tensor ", key, " is a reward model's score head; this model has an LM head"));
    }
    adapters[name] = t.to(at::kFloat);
  }
  for (const Param& p : model.params()) {
    if (adapters.count(p.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(file, " lacks ", PeftKeyOfTesseraName(p.name)));
    }
  }
  absl::Status s = model.LoadFull(adapters, Decoder::LoadWhat::kTrainable);
  return s.ok() ? s : absl::InvalidArgumentError(absl::StrCat(file, ": ", s.message()));
}

}  // namespace tessera::parallel
