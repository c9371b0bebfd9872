#include "parallel/models/model_state.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/models/router_bias.h"

namespace tessera::parallel {

absl::StatusOr<BaseWeights> OpenBaseWeights(const std::string& path, const ModelConfig& config) {
  BaseWeights out;
  if (std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    auto weights = OpenHfWeights(path, config);
    if (!weights.ok()) return weights.status();
    out.mapped = std::make_unique<HfWeights>(std::move(*weights));
    out.tensors = out.mapped->tensors;
    return out;
  }
  auto tensors = LoadTensors(path);
  if (!tensors.ok()) return tensors.status();
  out.tensors = std::move(*tensors);
  return out;
}

absl::Status ApplyCheckpointState(const std::string& step_dir, Decoder::LoadWhat what,
                                  const std::vector<std::vector<double>>& saved_router_bias, Decoder& model,
                                  at::Tensor router_bias) {
  const std::string state_file = step_dir + "/trainer_state.json";
  if (router_bias.defined()) {
    if (absl::Status s = LoadRouterBias(saved_router_bias, router_bias); !s.ok()) {
      return absl::DataLossError(absl::StrCat(state_file, ": ", s.message()));
    }
  } else {
    for (const std::vector<double>& row : saved_router_bias) {
      for (double b : row) {
        if (b != 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              state_file, ": router_bias: the checkpoint routes tokens with loss-free balancing's biases, and the "
                          "model it is loaded into routes without them (model.router_bias_rate 0); a spec that "
                          "resumes it needs model.router_bias_rate > 0"));
        }
      }
    }
  }
  const std::string weights = step_dir + "/model.safetensors";
  auto params = LoadTensors(weights);
  if (!params.ok()) return params.status();
  if (absl::Status s = model.LoadFull(*params, what); !s.ok()) {
    return absl::DataLossError(absl::StrCat(weights, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
