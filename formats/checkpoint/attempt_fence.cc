#include "formats/checkpoint/attempt_fence.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

constexpr int kKeptClaims = 8;        // The newest claims kept; older ones are deleted by their owner.
constexpr int kMaxClaimTries = 1000;  // Claims racing for one sequence number (each try is one create).

std::optional<FenceToken> ParseToken(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("attempt") ||
      !j["attempt"].is_number_integer()) {
    return std::nullopt;
  }
  return FenceToken{j["job"].get<std::string>(), j["attempt"].get<int64_t>()};
}

std::string TokenJson(const FenceToken& t) {
  return nlohmann::json({{"job", t.job}, {"attempt", t.attempt}}).dump() + "\n";
}

// The newest claim: its sequence number (0: none) and its token (nullopt: unreadable or damaged).
struct Newest {
  int64_t seq = 0;
  std::optional<FenceToken> token;
  bool listed = true;  // False when the claims directory could not be read.
};

Newest ReadNewest(const std::string& claims) {
  Newest n;
  std::error_code ec;
  fs::directory_iterator it(claims, ec);
  if (ec) {
    n.listed = false;
    return n;
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    int64_t seq = 0;
    if (absl::SimpleAtoi(it->path().filename().string(), &seq) && seq > n.seq) n.seq = seq;
  }
  if (ec) n.listed = false;
  if (n.seq == 0) return n;
  std::ifstream in(absl::StrFormat("%s/%020d", claims, n.seq));
  std::stringstream text;
  text << in.rdbuf();
  n.token = ParseToken(text.str());
  return n;
}

std::string Describe(const std::optional<FenceToken>& held, const FenceToken& mine) {
  if (!held.has_value()) return "a missing or unreadable marker";
  return held->job == mine.job ? absl::StrCat("attempt ", held->attempt)
                               : absl::StrCat("job ", held->job, " attempt ", held->attempt);
}

}  // namespace

AttemptFence::AttemptFence(std::string output_dir, FenceToken token)
    : output_dir_(std::move(output_dir)), token_(std::move(token)) {}

absl::Status AttemptFence::Claim() const {
  if (!enabled()) return absl::OkStatus();
  const std::string claims = claims_dir();
  std::error_code ec;
  fs::create_directories(claims, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(claims, ": cannot create: ", ec.message()));
  for (int tries = 0; tries < kMaxClaimTries; ++tries) {
    const Newest newest = ReadNewest(claims);
    if (!newest.listed) return absl::UnavailableError(absl::StrCat(claims, ": cannot list the claims"));
    const std::optional<FenceToken>& held = newest.token;
    if (held.has_value() && held->job == token_.job && held->attempt > token_.attempt) {
      return absl::FailedPreconditionError(absl::StrCat("attempt ", token_.attempt, " of job ", token_.job,
                                                        " is older than attempt ", held->attempt, " named by ",
                                                        claims, ": superseded, not starting"));
    }
    if (held.has_value() && held->job == token_.job && held->attempt == token_.attempt) break;  // Claimed.
    // The next sequence number, created exclusively: of two claims racing for it one wins, the other
    // reads the winner's token and decides again (an older attempt then refuses).
    const std::string mine = absl::StrFormat("%s/%020d", claims, newest.seq + 1);
    const int fd = open(mine.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return absl::UnavailableError(absl::StrCat(mine, ": cannot create: ", std::strerror(errno)));
    const std::string json = TokenJson(token_);
    const bool written = write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()) && fsync(fd) == 0;
    close(fd);
    if (!written) return absl::UnavailableError(absl::StrCat(mine, ": cannot write the claim"));
    if (absl::Status synced = FsyncDirectory(claims); !synced.ok()) return synced;
    // Older claims go (never the newest: ownership is decided by the highest number alone).
    for (int64_t old = newest.seq + 1 - kKeptClaims; old > 0 && old > newest.seq - 2 * kKeptClaims; --old) {
      fs::remove(absl::StrFormat("%s/%020d", claims, old), ec);
    }
    break;
  }
  if (absl::Status owned = Check(); !owned.ok()) return owned;
  // attempt.json: the same token where people and tools look for it (informational: Check reads the
  // claims). Written through a temporary name and renamed.
  const std::string marker = path();
  const std::string tmp = absl::StrCat(marker, ".tmp.", token_.attempt);
  if (auto written = WriteFileDurably(tmp, TokenJson(token_)); !written.ok()) return written.status();
  fs::rename(tmp, marker, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(marker, ": cannot rename ", tmp, " into place: ", ec.message()));
  return FsyncDirectory(output_dir_);
}

absl::Status AttemptFence::Check() const {
  if (!enabled()) return absl::OkStatus();
  const Newest newest = ReadNewest(claims_dir());
  const std::optional<FenceToken>& held = newest.token;
  if (held.has_value() && held->job == token_.job && held->attempt == token_.attempt) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("attempt ", token_.attempt, " of job ", token_.job,
                                                    " was superseded by ", Describe(held, token_), " (",
                                                    claims_dir(), "); not writing — another attempt owns this output "
                                                    "directory"));
}

}  // namespace tessera::parallel
