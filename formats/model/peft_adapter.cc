#include "formats/model/peft_adapter.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formats/model/family.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {
namespace {

constexpr char kPeftPrefix[] = "base_model.model.model.";
// A SEQ_CLS task's score head (a module of the *ForSequenceClassification model itself, beside its
// decoder `model`).
constexpr char kPeftScoreKey[] = "base_model.model.score.weight";

}  // namespace

absl::StatusOr<PeftLoraConfig> ReadPeftLoraConfig(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (a PEFT adapter directory holds it)"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto bad = [&](const std::string& key, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": ", why));
  };
  if (j.value("peft_type", "") != "LORA") return bad("peft_type", "must be \"LORA\"");
  PeftLoraConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1 || j["r"].get<int64_t>() > 4096) {
    return bad("r", "must be an integer in [1, 4096]");
  }
  c.rank = j["r"].get<int>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() || !(j["lora_alpha"].get<double>() > 0)) {
    return bad("lora_alpha", "must be a positive number");
  }
  c.alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number()) c.dropout = j["lora_dropout"].get<double>();
  if (!j.contains("target_modules") || !j["target_modules"].is_array()) {
    return bad("target_modules", "must be a list of module names (a regular expression is not supported)");
  }
  for (const auto& t : j["target_modules"]) {
    if (!t.is_string()) return bad("target_modules", "must hold strings");
    c.targets.push_back(t.get<std::string>());
  }
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) {
    c.base_model = j["base_model_name_or_path"].get<std::string>();
  }
  for (const char* flag : {"use_rslora", "use_dora", "fan_in_fan_out"}) {
    if (j.contains(flag) && j[flag].is_boolean() && j[flag].get<bool>()) return bad(flag, "true is not supported");
  }
  if (j.contains("bias") && j["bias"] != "none") return bad("bias", "only \"none\" is supported");
  const std::string task = j.contains("task_type") && j["task_type"].is_string() ? j["task_type"].get<std::string>() : "";
  if (j.contains("modules_to_save") && !j["modules_to_save"].is_null()) {
    const nlohmann::json& saved = j["modules_to_save"];
    bool score = false, others = !saved.is_array();
    if (saved.is_array()) {
      for (const auto& m : saved) {
        if (m == "score") {
          score = true;
        } else if (m != "classifier") {
          others = true;
        }
      }
    }
    if (others || (score && task != "SEQ_CLS")) {
      return bad("modules_to_save", "is not supported (but a SEQ_CLS task's score head: a reward model's)");
    }
    c.score_head = score;
  }
  if (task == "SEQ_CLS" && !c.score_head) return bad("modules_to_save", "a SEQ_CLS task must save its score head");
  if (j.contains("layers_to_transform") && !j["layers_to_transform"].is_null() &&
      !(j["layers_to_transform"].is_array() && j["layers_to_transform"].empty())) {
    return bad("layers_to_transform", "is not supported");
  }
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    if (j.contains(pattern) && !j[pattern].is_null() && !(j[pattern].is_object() && j[pattern].empty())) {
      return bad(pattern, "is not supported (one rank and alpha for every target)");
    }
  }
  return c;
}

std::string PeftLoraConfigJson(const PeftLoraConfig& c) {
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", c.score_head ? "SEQ_CLS" : "CAUSAL_LM"},
                      {"r", c.rank},
                      {"lora_alpha", c.alpha},
                      {"lora_dropout", c.dropout},
                      {"target_modules", c.targets},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"use_rslora", false},
                      {"use_dora", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"modules_to_save", c.score_head ? nlohmann::json{"classifier", "score"} : nlohmann::json(nullptr)},
                      {"base_model_name_or_path", c.base_model}};
  return j.dump(2) + "\n";
}

std::string TesseraNameOfPeftKey(const std::string& key) {
  if (key == kPeftScoreKey) return kScoreWeight;
  if (!absl::StartsWith(key, kPeftPrefix)) return "";
  const std::string name = key.substr(sizeof(kPeftPrefix) - 1);
  if (!absl::StartsWith(name, "layers.")) return "";
  if (!absl::EndsWith(name, ".lora_A.weight") && !absl::EndsWith(name, ".lora_B.weight")) return "";
  return name;
}

std::string PeftKeyOfTesseraName(const std::string& name) {
  return name == kScoreWeight ? kPeftScoreKey : absl::StrCat(kPeftPrefix, name);
}

}  // namespace tessera::formats::model
