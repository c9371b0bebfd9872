#include "common/steplog/step_log.h"

#include <cstdint>
#include <string>

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

}  // namespace

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
  if (auto it = j.find("val_loss"); it != j.end() && it->is_number()) r.val_loss = it->get<double>();
  if (auto it = j.find("lm_loss"); it != j.end() && it->is_number()) r.lm_loss = it->get<double>();
  if (auto it = j.find("aux_loss"); it != j.end() && it->is_number()) r.aux_loss = it->get<double>();
  if (auto it = j.find("expert_imbalance"); it != j.end() && it->is_number()) r.expert_imbalance = it->get<double>();
  if (auto it = j.find("checkpoint_blocked_s"); it != j.end() && it->is_number()) {
    r.checkpoint_blocked_s = it->get<double>();
  }
  if (auto it = j.find("checkpoint_write_s"); it != j.end() && it->is_number()) r.checkpoint_write_s = it->get<double>();
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

}  // namespace tessera::steplog
