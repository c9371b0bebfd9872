#include "formats/checkpoint/attempt_fence.h"

#include <fcntl.h>
#include <sys/stat.h>
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

namespace tessera::formats::checkpoint {
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
  // A user's directory: no link followed, no FIFO waited on, at most 4 KiB read.
  const int fd = open(absl::StrFormat("%s/%020d", claims, n.seq).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return n;
  struct stat st {};
  char buffer[4096];
  ssize_t got = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) got = read(fd, buffer, sizeof(buffer));
  close(fd);
  if (got > 0) n.token = ParseToken(std::string(buffer, static_cast<size_t>(got)));
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
  // OUTPUT_DIR is the user's: a claims directory that is a link (into another job's directory, whose
  // fence this attempt would then take) is refused.
  if (const fs::file_status st = fs::symlink_status(claims, ec); ec || !fs::is_directory(st)) {
    return absl::FailedPreconditionError(
        absl::StrCat(claims, ": is not a directory of its own (a symbolic link?); move it away"));
  }
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
    // The claim is written whole under a name of its own, then linked to its number: a numbered claim
    // is never seen empty (a racer reading one half-written would have taken it for none and claimed
    // over a newer attempt), and link() fails with EEXIST if the number was taken meanwhile.
    const std::string mine = absl::StrFormat("%s/%020d", claims, newest.seq + 1);
    const std::string draft = absl::StrCat(claims, "/draft.", getpid(), ".", token_.attempt);
    const int fd = open(draft.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return absl::UnavailableError(absl::StrCat(draft, ": cannot create: ", std::strerror(errno)));
    const std::string json = TokenJson(token_);
    const bool written = write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()) && fsync(fd) == 0;
    close(fd);
    if (!written) {
      unlink(draft.c_str());
      return absl::UnavailableError(absl::StrCat(draft, ": cannot write the claim"));
    }
    const int linked = link(draft.c_str(), mine.c_str());
    const int link_errno = errno;
    unlink(draft.c_str());
    if (linked != 0 && link_errno == EEXIST) continue;
    if (linked != 0) return absl::UnavailableError(absl::StrCat(mine, ": cannot create: ", std::strerror(link_errno)));
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

}  // namespace tessera::formats::checkpoint
