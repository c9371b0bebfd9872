#include "client/model_commands.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/hf_export.h"
#include "formats/model/lora_merge.h"
#include "formats/model/peft_export.h"

namespace tessera::client {

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  size_t i = 0;
  uint64_t n = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (n > (kMax - d) / 10) return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is too large"));
    n = n * 10 + d;
  }
  const std::string unit = text.substr(i);
  uint64_t scale = 0;
  for (auto [name, s] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000},
           {"KiB", 1024}, {"MiB", 1024 * 1024}, {"GiB", uint64_t{1} << 30}}) {
    if (unit == name) scale = s;
  }
  if (i == 0 || scale == 0 || n == 0) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a positive size (e.g. 5GB, 500MB, 2GiB)"));
  }
  if (n > kMax / scale) return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is too large"));
  return n * scale;
}

int ExportCommand(const ExportOptions& o) {
  formats::model::HfExportOptions options;
  if (o.dtype == "bf16") {
    options.dtype = formats::model::ExportDtype::kBF16;
  } else if (o.dtype != "fp32") {
    std::cerr << "error: --dtype: \"" << o.dtype << "\" is not fp32 or bf16\n";
    return kExitBadInput;
  }
  auto shard = ParseByteSize(o.max_shard_size);
  if (!shard.ok()) {
    std::cerr << "error: --max-shard-size: " << shard.status().message() << "\n";
    return kExitBadInput;
  }
  options.max_shard_bytes = *shard;
  auto checkpoint = formats::model::ReadCheckpointModel(o.checkpoint);
  if (!checkpoint.ok()) {
    std::cerr << "error: " << checkpoint.status().message() << "\n";
    return kExitBadInput;
  }
  if (o.pad_token_id != -1 && !checkpoint->config.score_head) {
    std::cerr << "error: --pad-token-id: only for a reward model's checkpoint (train.objective reward)\n";
    return kExitBadInput;
  }
  if (o.pad_token_id < -1 || o.pad_token_id >= checkpoint->config.vocab) {
    std::cerr << "error: --pad-token-id: " << o.pad_token_id << " is not a token id below model.vocab "
              << checkpoint->config.vocab << "\n";
    return kExitBadInput;
  }
  options.pad_token_id = o.pad_token_id;
  const char* loader = checkpoint->config.score_head ? "transformers.AutoModelForSequenceClassification.from_pretrained"
                                                     : "transformers.AutoModelForCausalLM.from_pretrained";
  for (const std::vector<double>& row : checkpoint->router_bias) {
    // transformers' Mixtral and Qwen-MoE route by the plain top-k: the export would route otherwise.
    if (std::any_of(row.begin(), row.end(), [](double b) { return b != 0; })) {
      std::cerr << "error: " << checkpoint->path << "/trainer_state.json: router_bias: the model routes with "
                << "loss-free balancing's biases (model.router_bias_rate), which the transformers model has no "
                << "place for (it would route tokens otherwise); `tessera generate` runs it as trained\n";
      return kExitBadInput;
    }
  }
  if (!o.base.empty() && !o.merge) {
    std::cerr << "error: --base: only with --merge\n";
    return kExitBadInput;
  }
  if (o.merge && !checkpoint->config.lora.enabled()) {
    std::cerr << "error: --merge: " << checkpoint->path << " is not a LoRA checkpoint (its export is already the whole model)\n";
    return kExitBadInput;
  }
  if (o.merge) {
    const std::string base = o.base.empty() ? checkpoint->lora_base : o.base;
    if (base.empty()) {
      std::cerr << "error: --merge: " << checkpoint->path << " names no base model (the job had neither init_from "
                << "nor pretrained): give one with --base\n";
      return kExitBadInput;
    }
    auto done = formats::model::ExportMergedLora(*checkpoint, base, o.out_dir, options);
    if (!done.ok()) {
      std::cerr << "error: " << done.status().message() << "\n";
      return done.status().code() == absl::StatusCode::kFailedPrecondition ||
                     done.status().code() == absl::StatusCode::kNotFound ||
                     done.status().code() == absl::StatusCode::kInvalidArgument
                 ? kExitBadInput
                 : kExitJobFailed;
    }
    std::cout << "exported step " << checkpoint->step << " of " << checkpoint->path << " merged into " << base << " to "
              << o.out_dir << ": " << done->shards << (done->shards == 1 ? " file" : " shards") << ", " << done->bytes
              << " bytes (" << o.dtype << "); load with " << loader << "\n";
    return kExitOk;
  }
  if (checkpoint->config.lora.enabled()) {
    // Adapters only: PEFT's directory, loaded over the base the job trained them on.
    if (o.dtype != "fp32") {
      std::cerr << "error: --dtype: a LoRA checkpoint's adapters are written in fp32, as PEFT saves them\n";
      return kExitBadInput;
    }
    if (o.pad_token_id >= 0) {
      std::cerr << "error: --pad-token-id: a PEFT adapter directory has no model config to hold it; give it with "
                << "--merge (or set pad_token_id on the base's config)\n";
      return kExitBadInput;
    }
    auto bytes = formats::model::ExportPeftAdapter(*checkpoint, o.out_dir);
    if (!bytes.ok()) {
      std::cerr << "error: " << bytes.status().message() << "\n";
      return bytes.status().code() == absl::StatusCode::kFailedPrecondition ? kExitBadInput : kExitJobFailed;
    }
    std::cout << "exported the LoRA adapters of step " << checkpoint->step << " of " << checkpoint->path << " to "
              << o.out_dir << ": " << *bytes << " bytes; load with peft.PeftModel.from_pretrained(base, \""
              << o.out_dir << "\") over the base "
              << (checkpoint->config.score_head ? "(loaded with transformers.AutoModelForSequenceClassification, "
                                                  "num_labels=1) "
                                                : "")
              << (checkpoint->lora_base.empty() ? std::string("the job started from") : checkpoint->lora_base) << "\n";
    std::error_code ec;
    if (!checkpoint->lora_base.empty() &&
        !std::filesystem::exists(std::filesystem::path(checkpoint->lora_base) / "config.json", ec)) {
      std::cout << "(" << checkpoint->lora_base << " is no transformers directory: peft needs one — `tessera export` "
                << "the checkpoint it belongs to, and load that)\n";
    }
    return kExitOk;
  }
  auto done = formats::model::ExportToHf(*checkpoint, o.out_dir, options);
  if (!done.ok()) {
    std::cerr << "error: " << done.status().message() << "\n";
    return done.status().code() == absl::StatusCode::kFailedPrecondition ? kExitBadInput : kExitJobFailed;
  }
  std::cout << "exported step " << checkpoint->step << " of " << checkpoint->path << " to " << o.out_dir << ": "
            << done->shards << (done->shards == 1 ? " file" : " shards") << ", " << done->bytes << " bytes ("
            << o.dtype << "); load with " << loader << "\n";
  return kExitOk;
}

}  // namespace tessera::client
