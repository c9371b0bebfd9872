#include "parallel/models/load_model.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/hf_config.h"
#include "formats/model/peft_adapter.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/hf_weights.h"
#include "parallel/models/peft_weights.h"
#include "parallel/models/model_state.h"

namespace tessera::parallel {

using formats::model::ReadCheckpointModel;
using formats::model::ReadHfConfig;
using formats::model::ReadPeftLoraConfig;

namespace {

bool IsHfDirectory(const std::string& path) {
  return std::filesystem::exists(std::filesystem::path(path) / "config.json");
}

// The model of a transformers directory: its config (positions as the header says) and mapped weights.
absl::StatusOr<std::pair<ModelConfig, HfWeights>> OpenHfModel(const std::string& path) {
  auto hf = ReadHfConfig(path);
  if (!hf.ok()) return hf.status();
  ModelConfig c = hf->config;
  c.seq_len = hf->max_positions > 0 ? static_cast<int>(std::min<int64_t>(hf->max_positions, 1 << 30)) : 4096;
  auto weights = OpenHfWeights(path, c);
  if (!weights.ok()) return weights.status();
  return std::make_pair(c, std::move(*weights));
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModelForInference(const std::string& path, c10::Device device,
                                                  const std::string& lora) {
  auto tp = std::make_shared<SelfCommunicator>(0, "tp");
  LoadedModel out;
  ModelConfig c;
  std::map<std::string, at::Tensor> base;
  std::unique_ptr<HfWeights> mapped;  // Keeps a transformers directory's mapping alive.
  std::string step_dir;  // A checkpoint's: its state goes on the model (ApplyCheckpointState).
  std::vector<std::vector<double>> router_bias;
  bool lora_checkpoint = false;  // Its model.safetensors holds the adapters only.
  if (IsHfDirectory(path)) {
    auto hf = OpenHfModel(path);
    if (!hf.ok()) return hf.status();
    c = hf->first;
    mapped = std::make_unique<HfWeights>(std::move(hf->second));
    base = mapped->tensors;
    out.source = path;
  } else {
    auto checkpoint = ReadCheckpointModel(path);
    if (!checkpoint.ok()) return checkpoint.status();
    c = checkpoint->config;
    router_bias = checkpoint->router_bias;
    out.source = step_dir = checkpoint->path;
    lora_checkpoint = c.lora.enabled();
    if (lora_checkpoint) {
      // The adapters of a LoRA checkpoint, over the base the job trained them on.
      if (checkpoint->lora_base.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(checkpoint->path, ": a LoRA checkpoint that names no base "
                                                          "model (the job had neither init_from nor pretrained)"));
      }
      auto b = OpenBaseWeights(checkpoint->lora_base, c);
      if (!b.ok()) return absl::Status(b.status().code(), absl::StrCat("the LoRA checkpoint's base ", checkpoint->lora_base,
                                                                       ": ", b.status().message()));
      base = std::move(b->tensors);
      mapped = std::move(b->mapped);
    }
  }
  if (!lora.empty()) {
    if (c.lora.enabled()) return absl::InvalidArgumentError(absl::StrCat(path, " already holds LoRA adapters"));
    auto config = ReadPeftLoraConfig(lora);
    if (!config.ok()) return config.status();
    c.lora.rank = config->rank;
    c.lora.alpha = config->alpha;
    c.lora.targets = config->targets;
    if (config->score_head != c.score_head) {
      return absl::InvalidArgumentError(absl::StrCat(
          lora, ": the adapters ", config->score_head ? "of a reward model (task_type SEQ_CLS)" : "of a causal LM",
          " over ", path, ", a model with ", c.score_head ? "a score head" : "an LM head"));
    }
  }
  out.model = std::make_unique<Decoder>(c, tp, /*seed=*/0, device);
  at::Tensor bias;  // Loss-free balancing: the checkpoint's biases choose the experts, as in training.
  if (c.IsMoe() && c.router_bias_rate > 0) {
    bias = at::zeros({c.layers, c.experts}, at::TensorOptions().dtype(at::kFloat).device(device));
    out.model->set_router_bias(bias);
  }
  if (step_dir.empty() || lora_checkpoint) {
    // A transformers directory, or a LoRA checkpoint's base: every tensor of the model must be there.
    if (absl::Status s = out.model->LoadFull(base); !s.ok()) return absl::DataLossError(absl::StrCat(out.source, ": ", s.message()));
  }
  if (!step_dir.empty()) {
    // As the Trainer resumes it (model_state.h): the parameters (a LoRA checkpoint's adapters over the
    // base above) and the router biases.
    const auto what = lora_checkpoint ? Decoder::LoadWhat::kTrainable : Decoder::LoadWhat::kModel;
    if (absl::Status s = ApplyCheckpointState(step_dir, what, router_bias, *out.model, bias); !s.ok()) return s;
  }
  if (!lora.empty()) {
    if (absl::Status s = LoadPeftAdapterTensors(*out.model, lora); !s.ok()) return s;
    out.source = absl::StrCat(out.source, " + ", lora);
  }
  return out;
}

}  // namespace tessera::parallel
