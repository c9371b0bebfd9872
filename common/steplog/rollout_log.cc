#include "common/steplog/rollout_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/userfs/user_files.h"
#include "nlohmann/json.hpp"

namespace tessera::steplog {
namespace {

using Json = nlohmann::ordered_json;

Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// The "step" of a line: read from the writer's own prefix ({"step": N,) when it has it, else from the
// parsed object; nullopt when it has none.
std::optional<int64_t> StepOf(std::string_view line) {
  constexpr std::string_view kPrefix = "{\"step\":";
  if (line.substr(0, kPrefix.size()) == kPrefix) {
    const size_t end = line.find_first_of(",}", kPrefix.size());
    int64_t step = 0;  // SimpleAtoi allows the spaces around the number.
    if (end != std::string_view::npos &&
        absl::SimpleAtoi(absl::string_view(line.data() + kPrefix.size(), end - kPrefix.size()), &step)) {
      return step;
    }
  }
  const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  return j["step"].get<int64_t>();
}

}  // namespace

std::string FormatRolloutLine(const RolloutRecord& r) {
  Json j = Json::object();
  j["step"] = r.step;
  j["prompt_index"] = r.prompt_index;
  j["sample"] = r.sample;
  j["prompt_ids"] = r.prompt_ids;
  j["completion_ids"] = r.completion_ids;
  Json logprobs = Json::array();
  for (double v : r.logprobs) logprobs.push_back(Number(v));
  j["logprobs"] = std::move(logprobs);
  Json rewards = Json::object();
  for (const auto& [name, value] : r.rewards) rewards[name] = Number(value);
  j["rewards"] = std::move(rewards);
  j["reward"] = Number(r.reward);
  j["advantage"] = Number(r.advantage);
  j["truncated"] = r.truncated;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<RolloutRecord> ParseRolloutLine(std::string_view line) {
  if (line.size() > kMaxRolloutLineBytes) return std::nullopt;
  const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  RolloutRecord r;
  auto integer = [&](const char* key, int64_t* out) {
    if (!j.contains(key) || !j[key].is_number_integer()) return false;
    *out = j[key].get<int64_t>();
    return true;
  };
  auto number = [](const Json& v, double* out) {
    if (v.is_null()) {
      *out = std::nan("");
      return true;
    }
    if (!v.is_number()) return false;
    *out = v.get<double>();
    return true;
  };
  auto ids = [&](const char* key, std::vector<int64_t>* out) {
    if (!j.contains(key) || !j[key].is_array()) return false;
    for (const Json& v : j[key]) {
      if (!v.is_number_integer()) return false;
      out->push_back(v.get<int64_t>());
    }
    return true;
  };
  if (!integer("step", &r.step) || !integer("prompt_index", &r.prompt_index) || !integer("sample", &r.sample) ||
      !ids("prompt_ids", &r.prompt_ids) || !ids("completion_ids", &r.completion_ids)) {
    return std::nullopt;
  }
  if (!j.contains("logprobs") || !j["logprobs"].is_array()) return std::nullopt;
  for (const Json& v : j["logprobs"]) {
    double x = 0;
    if (!number(v, &x)) return std::nullopt;
    r.logprobs.push_back(x);
  }
  if (!j.contains("rewards") || !j["rewards"].is_object()) return std::nullopt;
  for (const auto& [name, v] : j["rewards"].items()) {
    double x = 0;
    if (!number(v, &x)) return std::nullopt;
    r.rewards.emplace_back(name, x);
  }
  if (!j.contains("reward") || !number(j["reward"], &r.reward) || !j.contains("advantage") ||
      !number(j["advantage"], &r.advantage) || !j.contains("truncated") || !j["truncated"].is_boolean()) {
    return std::nullopt;
  }
  r.truncated = j["truncated"].get<bool>();
  return r;
}

absl::StatusOr<int64_t> TrimJsonLinesToStep(const std::string& dir, const std::string& name, int64_t step) {
  const std::string path = dir + "/" + name;
  auto in = userfs::OpenUnder(dir, name, {});
  if (!in.ok()) {
    if (absl::IsNotFound(in.status())) return 0;
    return in.status();
  }
  auto size = userfs::FileSize(in->get());
  if (!size.ok()) return size.status();
  const std::string tmp_name = name + ".tmp";
  auto out = userfs::OpenUnder(dir, tmp_name, {userfs::Access::kWrite, true});
  if (!out.ok()) return out.status();
  int64_t dropped = 0;
  std::string line, kept;
  bool overlong = false;  // The current line passed kMaxRolloutLineBytes: skipped to its newline.
  auto flush = [&]() -> absl::Status {
    if (kept.empty()) return absl::OkStatus();
    absl::Status s = userfs::WriteAll(out->get(), kept);
    kept.clear();
    return s.ok() ? s : absl::UnavailableError(absl::StrCat(path, ".tmp: ", s.message()));
  };
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t offset = 0; offset < *size; offset += kChunk) {
    auto bytes = userfs::ReadAt(in->get(), offset, std::min<int64_t>(kChunk, *size - offset));
    if (!bytes.ok()) return absl::UnavailableError(absl::StrCat(path, ": ", bytes.status().message()));
    if (bytes->empty()) break;  // Shorter than it was: what was read is all.
    size_t start = 0;
    while (start < bytes->size()) {
      const size_t newline = bytes->find('\n', start);
      const size_t end = newline == std::string::npos ? bytes->size() : newline;
      if (!overlong) {
        line.append(*bytes, start, end - start);
        if (line.size() > kMaxRolloutLineBytes) {
          overlong = true;
          line.clear();
        }
      }
      if (newline == std::string::npos) break;
      if (!overlong) {
        const std::optional<int64_t> s = StepOf(line);
        if (s.has_value() && *s <= step) {
          kept += line;
          kept += '\n';
        } else if (s.has_value()) {
          ++dropped;
        }
      }
      line.clear();
      overlong = false;
      start = newline + 1;
      if (kept.size() >= static_cast<size_t>(kChunk)) {
        if (absl::Status s = flush(); !s.ok()) return s;
      }
    }
  }
  if (absl::Status s = flush(); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::rename(dir + "/" + tmp_name, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(path, ": cannot rename ", tmp_name, " into place: ", ec.message()));
  return dropped;
}

}  // namespace tessera::steplog
