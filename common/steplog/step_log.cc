#include "common/steplog/step_log.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#include "nlohmann/json.hpp"

namespace tessera::steplog {
namespace {

int64_t IntOf(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? 0 : it->get<int64_t>();
}

double NumberOf(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || !it->is_number() ? 0.0 : it->get<double>();
}

template <typename T>
void ReadOptional(const nlohmann::json& j, const char* key, std::optional<T>* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return;
  if constexpr (std::is_integral_v<T>) {
    if (it->is_number_integer()) *out = IntOf(j, key);
  } else {
    *out = it->get<double>();
  }
}

template <typename T>
void WriteOptional(nlohmann::json& j, const char* key, const std::optional<T>& value) {
  if (value.has_value()) j[key] = *value;
}

constexpr const char* kObjectiveMetrics[] = {
    "rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy", "logps_chosen", "logps_rejected",
    "val_rewards_chosen", "val_rewards_rejected", "val_rewards_margin", "val_rewards_accuracy", "val_logps_chosen",
    "val_logps_rejected"};

// ObjectiveMetric, for a const record too.
template <typename Record>
auto MetricOf(Record& r, std::string_view name) -> decltype(&r.rewards_chosen) {
  if (name == "rewards_chosen") return &r.rewards_chosen;
  if (name == "rewards_rejected") return &r.rewards_rejected;
  if (name == "rewards_margin") return &r.rewards_margin;
  if (name == "rewards_accuracy") return &r.rewards_accuracy;
  if (name == "logps_chosen") return &r.logps_chosen;
  if (name == "logps_rejected") return &r.logps_rejected;
  if (name == "val_rewards_chosen") return &r.val_rewards_chosen;
  if (name == "val_rewards_rejected") return &r.val_rewards_rejected;
  if (name == "val_rewards_margin") return &r.val_rewards_margin;
  if (name == "val_rewards_accuracy") return &r.val_rewards_accuracy;
  if (name == "val_logps_chosen") return &r.val_logps_chosen;
  if (name == "val_logps_rejected") return &r.val_logps_rejected;
  return nullptr;
}

nlohmann::json StepJson(const StepRecord& r) {
  nlohmann::json j = {{"step", r.step},
                      {"loss", r.loss},
                      {"lr", r.lr},
                      {"grad_norm", r.grad_norm},
                      {"tokens_per_s", r.tokens_per_s},
                      {"step_seconds", r.step_seconds},
                      {"tokens", r.tokens},
                      {"bytes_all_reduced", r.bytes_all_reduced},
                      {"bytes_communicated", r.bytes_communicated},
                      {"optimizer_state_bytes", r.optimizer_state_bytes},
                      {"model_state_bytes", r.model_state_bytes},
                      {"rss_peak_bytes", r.rss_peak_bytes},
                      {"rss_base_bytes", r.rss_base_bytes},
                      {"resumed_from", r.resumed_from},
                      {"discarded_steps", r.discarded_steps}};
  if (r.skipped) j["skipped"] = true;
  WriteOptional(j, "loss_scale", r.loss_scale);
  WriteOptional(j, "trained_tokens", r.trained_tokens);
  WriteOptional(j, "live_peak_bytes", r.live_peak_bytes);
  WriteOptional(j, "frozen_param_bytes", r.frozen_param_bytes);
  WriteOptional(j, "mfu", r.mfu);
  WriteOptional(j, "val_loss", r.val_loss);
  WriteOptional(j, "eval_seconds", r.eval_seconds);
  WriteOptional(j, "reference_seconds", r.reference_seconds);
  WriteOptional(j, "lm_loss", r.lm_loss);
  WriteOptional(j, "aux_loss", r.aux_loss);
  WriteOptional(j, "expert_imbalance", r.expert_imbalance);
  if (!r.expert_imbalance_layers.empty()) j["expert_imbalance_layers"] = r.expert_imbalance_layers;
  WriteOptional(j, "pipeline_wait_s", r.pipeline_wait_s);
  WriteOptional(j, "pipeline_bubble", r.pipeline_bubble);
  for (const char* name : kObjectiveMetrics) WriteOptional(j, name, *MetricOf(r, name));
  for (const auto& [name, value] : r.grpo_metrics) {
    if (IsGrpoMetric(name)) WriteOptional(j, name.c_str(), std::optional<double>(value));
  }
  if (r.checkpoint_blocked_s.has_value()) {
    j["checkpoint_blocked_s"] = *r.checkpoint_blocked_s;
    j["checkpoint_snapshot_bytes"] = r.checkpoint_snapshot_bytes;
  }
  if (r.checkpoint_write_s.has_value()) {
    j["checkpoint_write_s"] = *r.checkpoint_write_s;
    j["checkpoint_write_step"] = r.checkpoint_write_step;
  }
  return j;
}

}  // namespace

std::optional<double>* ObjectiveMetric(StepRecord& r, std::string_view name) { return MetricOf(r, name); }

bool IsGrpoMetric(std::string_view name) {
  for (const char* fixed : {"reward", "reward_std", "frac_reward_zero_std", "kl", "clip_ratio", "clip_ratio_low",
                            "clip_ratio_high", "completion_length", "completion_length_max", "truncated_fraction",
                            "generation_seconds", "generated_tokens_per_s"}) {
    if (name == fixed) return true;
  }
  // A reward function's mean: reward_NAME, NAME of 1-64 letters, digits or '_' (spec/validate).
  if (name.size() <= 7 || name.size() > 7 + 64 || name.substr(0, 7) != "reward_") return false;
  for (char c : name.substr(7)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string FormatStepLine(const StepRecord& record) { return StepJson(record).dump(); }

std::vector<std::pair<std::string, double>> Scalars(const StepRecord& record) {
  std::vector<std::pair<std::string, double>> out;
  const nlohmann::json j = StepJson(record);  // Alive while items() refers to it.
  for (const auto& [field, value] : j.items()) {
    if (field == "step" || !value.is_number()) continue;
    const bool val = field == "eval_seconds" || field.rfind("val_", 0) == 0;
    out.emplace_back((val ? "val/" : "train/") + field, value.get<double>());
  }
  return out;
}

std::optional<StepRecord> ParseStepLine(std::string_view line) {
  if (line.size() > kMaxStepLineBytes) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  StepRecord r;
  r.step = IntOf(j, "step");
  r.resumed_from = IntOf(j, "resumed_from");
  r.discarded_steps = IntOf(j, "discarded_steps");
  r.tokens = IntOf(j, "tokens");
  r.bytes_all_reduced = IntOf(j, "bytes_all_reduced");
  r.loss = NumberOf(j, "loss");
  r.lr = NumberOf(j, "lr");
  r.grad_norm = NumberOf(j, "grad_norm");
  r.tokens_per_s = NumberOf(j, "tokens_per_s");
  r.step_seconds = NumberOf(j, "step_seconds");
  r.bytes_communicated = IntOf(j, "bytes_communicated");
  r.optimizer_state_bytes = IntOf(j, "optimizer_state_bytes");
  r.model_state_bytes = IntOf(j, "model_state_bytes");
  r.rss_peak_bytes = IntOf(j, "rss_peak_bytes");
  r.rss_base_bytes = IntOf(j, "rss_base_bytes");
  if (auto it = j.find("skipped"); it != j.end() && it->is_boolean()) r.skipped = it->get<bool>();
  ReadOptional(j, "loss_scale", &r.loss_scale);
  ReadOptional(j, "trained_tokens", &r.trained_tokens);
  ReadOptional(j, "live_peak_bytes", &r.live_peak_bytes);
  ReadOptional(j, "frozen_param_bytes", &r.frozen_param_bytes);
  ReadOptional(j, "mfu", &r.mfu);
  ReadOptional(j, "val_loss", &r.val_loss);
  ReadOptional(j, "eval_seconds", &r.eval_seconds);
  ReadOptional(j, "reference_seconds", &r.reference_seconds);
  ReadOptional(j, "lm_loss", &r.lm_loss);
  ReadOptional(j, "aux_loss", &r.aux_loss);
  ReadOptional(j, "expert_imbalance", &r.expert_imbalance);
  if (auto it = j.find("expert_imbalance_layers"); it != j.end() && it->is_array() && it->size() <= 4096) {
    for (const auto& v : *it) r.expert_imbalance_layers.push_back(v.is_number() ? v.get<double>() : 0.0);
  }
  ReadOptional(j, "pipeline_wait_s", &r.pipeline_wait_s);
  ReadOptional(j, "pipeline_bubble", &r.pipeline_bubble);
  for (const char* name : kObjectiveMetrics) ReadOptional(j, name, ObjectiveMetric(r, name));
  for (const auto& [field, value] : j.items()) {
    if (value.is_number() && IsGrpoMetric(field)) r.grpo_metrics.emplace_back(field, value.get<double>());
  }
  ReadOptional(j, "checkpoint_blocked_s", &r.checkpoint_blocked_s);
  r.checkpoint_snapshot_bytes = IntOf(j, "checkpoint_snapshot_bytes");
  ReadOptional(j, "checkpoint_write_s", &r.checkpoint_write_s);
  r.checkpoint_write_step = IntOf(j, "checkpoint_write_step");
  if (auto it = j.find("warning"); it != j.end() && it->is_string()) r.warning = CutWarning(it->get<std::string>());
  return r;
}

std::string CutWarning(std::string_view message) {
  std::string out;
  if (message.size() <= kMaxWarningBytes) {
    out = std::string(message);
  } else {
    size_t end = kMaxWarningBytes - 3;
    // Back to the first byte of a character (not a continuation byte 10xxxxxx).
    while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
    out = std::string(message.substr(0, end)) + "...";
  }
  // Printed on terminals (tessera run, job, follow): control characters (escape sequences) replaced.
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

std::string FormatWarningLine(int64_t step, std::string_view message) {
  nlohmann::json j = {{"step", step}, {"warning", CutWarning(message)}};
  // Invalid UTF-8 (a path's bytes) is replaced, never thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int64_t ReadCompleteLines(std::istream& in, const std::function<void(std::string_view)>& on_line) {
  std::string line;
  int64_t consumed = 0, pending = 0;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      ++pending;
      if (buffer[i] != '\n') {
        if (line.size() <= kMaxStepLineBytes) line.push_back(buffer[i]);
        continue;
      }
      on_line(line);
      line.clear();
      consumed += pending;
      pending = 0;
    }
  }
  return consumed;
}

Appended ReadAppended(int fd, TailPosition* position, int64_t max_bytes,
                      const std::function<void(std::string_view)>& on_line) {
  Appended out;
  struct stat st {};
  if (fstat(fd, &st) != 0 || max_bytes <= 0) return out;
  TailPosition at = *position;
  if (st.st_ino != at.inode || st.st_size < at.offset) {
    out.replaced = at.inode != 0;
    at = TailPosition{st.st_ino, 0};
  }
  const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(st.st_size) - at.offset, 0, max_bytes);
  bool all_there = static_cast<int64_t>(st.st_size) - at.offset <= max_bytes;  // The read is not cut short.
  std::string chunk(static_cast<size_t>(want), '\0');
  int64_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd, chunk.data() + got, static_cast<size_t>(want - got), at.offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return out;
    if (n == 0) break;  // Shorter than fstat said (cut meanwhile): what was read is all there is.
    got += n;
  }
  chunk.resize(static_cast<size_t>(got));
  std::istringstream text(chunk);
  at.offset += ReadCompleteLines(text, on_line);
  // A line longer than a whole read is never complete within one: skip what was read of it.
  if (got == max_bytes && chunk.find('\n') == std::string::npos) at.offset += got;
  *position = at;
  out.ok = true;
  out.at_end = all_there;
  return out;
}

}  // namespace tessera::steplog
