#include "parallel/models/checkpoint_model.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/checkpoint_dir.h"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<ModelConfig> ModelOfState(const std::string& dir) {
  const std::string path = dir + "/trainer_state.json";
  std::ifstream in(path);
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.is_object() || !state.contains("model") || !state["model"].is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": missing or not a JSON object with \"model\""));
  }
  const nlohmann::json& m = state["model"];
  ModelConfig c;
  const std::string family = m.value("family", std::string("gpt"));
  if (family != "gpt" && family != "llama") {
    return absl::DataLossError(absl::StrCat(path, ": model.family \"", family, "\" is not gpt or llama"));
  }
  c.family = family == "llama" ? ModelFamily::kLlama : ModelFamily::kGpt2;
  for (auto [key, field] : std::initializer_list<std::pair<const char*, int*>>{
           {"layers", &c.layers}, {"hidden", &c.hidden}, {"heads", &c.heads}, {"vocab", &c.vocab},
           {"seq_len", &c.seq_len}, {"kv_heads", &c.kv_heads}, {"ffn_hidden", &c.ffn_hidden}}) {
    const bool optional = std::string(key) == "kv_heads" || std::string(key) == "ffn_hidden";
    if (!m.contains(key) && optional) continue;  // Written before families existed: GPT-2's defaults.
    if (!m.contains(key) || !m[key].is_number_integer() || m[key].get<int64_t>() < 1 ||
        m[key].get<int64_t>() > (int64_t{1} << 30)) {
      return absl::DataLossError(absl::StrCat(path, ": model.", key, " is missing or not a positive integer"));
    }
    *field = m[key].get<int>();
  }
  if (c.hidden % c.heads != 0) {
    return absl::DataLossError(absl::StrCat(path, ": model.heads ", c.heads, " does not divide hidden ", c.hidden));
  }
  c.norm_eps = m.value("norm_eps", 1e-5);
  c.rope_theta = m.value("rope_theta", 1e4);
  c.tie_embeddings = c.family == ModelFamily::kGpt2 || m.value("tie_embeddings", false);
  c.gelu_tanh = m.value("activation", std::string("gelu")) == "gelu_tanh";
  c.qkv_bias = m.value("qkv_bias", false);
  if (m.contains("rope_scaling") && m["rope_scaling"].is_object()) {
    const nlohmann::json& r = m["rope_scaling"];
    c.rope_scaling.factor = r.value("factor", 0.0);
    c.rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0);
    c.rope_scaling.original_max_positions = r.value("original_max_positions", 8192);
  }
  return c;
}

}  // namespace

absl::StatusOr<CheckpointModel> ReadCheckpointModel(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": not a directory"));
  CheckpointModel out;
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) {
    out.path = path;
    absl::Status ok = VerifyCheckpoint(path);
    if (!ok.ok()) return ok;
    const std::string name = fs::path(path).lexically_normal().filename().string();
    if (name.rfind("step_", 0) == 0) out.step = std::strtoll(name.c_str() + 5, nullptr, 10);
  } else {
    auto all = ListCheckpoints(path);
    std::string skipped;
    for (auto it = all.rbegin(); it != all.rend() && out.path.empty(); ++it) {
      absl::Status ok = VerifyCheckpoint(it->second);
      if (ok.ok()) {
        out.path = it->second;
        out.step = it->first;
      } else {
        absl::StrAppend(&skipped, "; skipped: ", ok.message());
      }
    }
    if (out.path.empty()) {
      return absl::NotFoundError(absl::StrCat(path, ": no checkpoint (step_NNNNNNNN with trainer_state.json)",
                                              all.empty() ? "" : " that verifies", skipped));
    }
  }
  auto config = ModelOfState(out.path);
  if (!config.ok()) return config.status();
  out.config = *config;
  return out;
}

}  // namespace tessera::parallel
