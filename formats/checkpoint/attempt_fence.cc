#include "formats/checkpoint/attempt_fence.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

// The marker's token; nullopt when the file is missing, unreadable or not a marker.
std::optional<FenceToken> ReadMarker(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("attempt") ||
      !j["attempt"].is_number_integer()) {
    return std::nullopt;
  }
  return FenceToken{j["job"].get<std::string>(), j["attempt"].get<int64_t>()};
}

}  // namespace

AttemptFence::AttemptFence(std::string output_dir, FenceToken token)
    : output_dir_(std::move(output_dir)), token_(std::move(token)) {}

absl::Status AttemptFence::Claim() const {
  if (!enabled()) return absl::OkStatus();
  const std::string marker = path();
  if (std::optional<FenceToken> held = ReadMarker(marker);
      held.has_value() && held->job == token_.job && held->attempt > token_.attempt) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", token_.attempt, " of job ", token_.job,
                                                      " is older than attempt ", held->attempt, " named by ", marker,
                                                      ": superseded, not starting"));
  }
  std::error_code ec;
  fs::create_directories(output_dir_, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(output_dir_, ": cannot create: ", ec.message()));
  const std::string tmp = absl::StrCat(marker, ".tmp.", token_.attempt);
  nlohmann::json j = {{"job", token_.job}, {"attempt", token_.attempt}};
  if (auto written = WriteFileDurably(tmp, j.dump() + "\n"); !written.ok()) return written.status();
  fs::rename(tmp, marker, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(marker, ": cannot rename ", tmp, " into place: ", ec.message()));
  return FsyncDirectory(output_dir_);
}

absl::Status AttemptFence::Check() const {
  if (!enabled()) return absl::OkStatus();
  std::optional<FenceToken> held = ReadMarker(path());
  if (held.has_value() && held->job == token_.job && held->attempt == token_.attempt) return absl::OkStatus();
  std::string by = "a missing or unreadable marker";
  if (held.has_value()) {
    by = held->job == token_.job ? absl::StrCat("attempt ", held->attempt)
                                 : absl::StrCat("job ", held->job, " attempt ", held->attempt);
  }
  return absl::FailedPreconditionError(absl::StrCat("attempt ", token_.attempt, " of job ", token_.job,
                                                    " was superseded by ", by, " (", path(),
                                                    "); not writing — another attempt owns this output directory"));
}

}  // namespace tessera::parallel
