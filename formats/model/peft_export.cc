#include "formats/model/peft_export.h"

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/durable_file.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "formats/checkpoint/safetensors.h"
#include "formats/model/family.h"
#include "formats/model/hf_export.h"
#include "formats/model/peft_adapter.h"

namespace tessera::formats::model {

using checkpoint::FsyncDirectory;
using checkpoint::MappedSafetensors;
using checkpoint::RawTensor;
using checkpoint::TensorEntry;
using checkpoint::TensorMap;
using checkpoint::WriteFileDurably;
using checkpoint::WriteSafetensors;

absl::StatusOr<std::vector<std::pair<ParamSpec, const TensorEntry*>>> LoraAdapterEntries(
    const CheckpointModel& cp, const MappedSafetensors& file) {
  const ModelConfig& c = cp.config;
  std::vector<std::pair<ParamSpec, const TensorEntry*>> out;
  for (ParamSpec& p : LoraParamSpecs(c, ParamSpecs1D(c, ModelPart::Whole(c.layers), 1))) {
    const auto& entries = file.header().entries;
    auto e = entries.find(p.name);
    const std::string where = absl::StrCat(file.path(), ": ", p.name);
    if (e == entries.end()) return absl::DataLossError(absl::StrCat(where, " is missing"));
    if (e->second.dtype != "F32" || e->second.shape != p.shape) {
      return absl::DataLossError(absl::StrCat(where, " is not F32 of the shape trainer_state.json's model.lora gives"));
    }
    out.emplace_back(std::move(p), &e->second);
  }
  return out;
}

absl::StatusOr<uint64_t> ExportPeftAdapter(const CheckpointModel& cp, const std::string& out_dir) {
  const ModelConfig& c = cp.config;
  if (!c.lora.enabled()) return absl::FailedPreconditionError(absl::StrCat(cp.path, ": not a LoRA checkpoint"));
  if (absl::Status s = PrepareExportDirectory(out_dir); !s.ok()) return s;
  auto file = MappedSafetensors::Open(cp.path + "/model.safetensors");
  if (!file.ok()) return file.status();
  auto adapters = LoraAdapterEntries(cp, **file);
  if (!adapters.ok()) return adapters.status();
  TensorMap tensors;
  uint64_t bytes = 0;
  for (const auto& [p, e] : *adapters) {
    const uint64_t n = e->end - e->begin;
    tensors[PeftKeyOfTesseraName(p.name)] = RawTensor{"F32", p.shape, std::string((*file)->data(*e), n)};
    bytes += n;
  }
  if (absl::Status s = WriteSafetensors(out_dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}}); !s.ok()) {
    return s;
  }
  PeftLoraConfig config{c.lora.rank, c.lora.alpha, c.lora.dropout, c.lora.targets, cp.lora_base};
  config.score_head = c.score_head;  // Trained whole beside the adapters (LoraParamSpecs), saved with them.
  auto s = WriteFileDurably(out_dir + "/adapter_config.json", PeftLoraConfigJson(config));
  if (!s.ok()) return s.status();
  if (absl::Status d = FsyncDirectory(out_dir); !d.ok()) return d;
  return bytes;
}

}  // namespace tessera::formats::model
