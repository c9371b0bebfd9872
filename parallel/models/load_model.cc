#include "parallel/models/load_model.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/hf_config.h"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/hf_weights.h"

namespace tessera::parallel {

absl::StatusOr<LoadedModel> LoadModelForInference(const std::string& path, c10::Device device) {
  auto tp = std::make_shared<SelfCommunicator>(0, "tp");
  LoadedModel out;
  if (std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    auto hf = ReadHfConfig(path);
    if (!hf.ok()) return hf.status();
    ModelConfig c = hf->config;
    c.seq_len = hf->max_positions > 0 ? static_cast<int>(std::min<int64_t>(hf->max_positions, 1 << 30)) : 4096;
    auto weights = OpenHfWeights(path, c);
    if (!weights.ok()) return weights.status();
    out.model = std::make_unique<Decoder>(c, tp, /*seed=*/0, device);
    if (absl::Status s = out.model->LoadFull(weights->tensors); !s.ok()) return s;
    out.source = path;
    return out;
  }
  auto checkpoint = ReadCheckpointModel(path);
  if (!checkpoint.ok()) return checkpoint.status();
  auto tensors = LoadTensors(checkpoint->path + "/model.safetensors");
  if (!tensors.ok()) return tensors.status();
  out.model = std::make_unique<Decoder>(checkpoint->config, tp, /*seed=*/0, device);
  if (absl::Status s = out.model->LoadFull(*tensors); !s.ok()) {
    return absl::DataLossError(absl::StrCat(checkpoint->path, "/model.safetensors: ", s.message()));
  }
  out.source = checkpoint->path;
  return out;
}

}  // namespace tessera::parallel
