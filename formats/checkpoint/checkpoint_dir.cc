#include "formats/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::checkpoint {

namespace fs = std::filesystem;

// The largest index.json read (an index lists a few files per rank).
constexpr size_t kMaxIndexBytes = 64 << 20;

std::string CheckpointName(int64_t step) { return absl::StrFormat("step_%08d", step); }

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir, absl::Status* error) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec && error != nullptr && ec != std::errc::no_such_file_or_directory) {
    *error = absl::UnavailableError(absl::StrCat("cannot list the checkpoints in ", dir, ": ", ec.message(),
                                                 " (not damage: nothing is set aside)"));
  }
  // The directory is the user's: nothing here may throw (a link loop named step_1, an entry that
  // vanishes or cannot be read), and a step_N that is a symbolic link is not a checkpoint (it could
  // point into another job's directory): only real directories count.
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    int64_t step;
    std::error_code type_ec;
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        absl::SimpleAtoi(name.substr(5), &step) && fs::is_directory(e.symlink_status(type_ec)) && !type_ec) {
      out.emplace_back(step, e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string TmpCheckpointPath(const std::string& dir, int64_t step, int64_t token) {
  return absl::StrCat(dir, "/", CheckpointName(step), ".tmp.", token);
}

absl::StatusOr<std::string> BeginCheckpoint(const std::string& dir, int64_t step, int64_t token) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  std::string tmp = TmpCheckpointPath(dir, step, token == 0 ? getpid() : token);
  // Temporary directories of other writers are of checkpoints that will never be committed (a writer
  // killed mid-checkpoint: its peer died and its launcher stopped it; one attempt writes at a time):
  // their space is freed before this one is written, not only after its commit — on a nearly full
  // disk they would make every later first checkpoint fail.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find(".tmp.") != std::string::npos && e.path() != fs::path(tmp)) {
      std::error_code ignored;
      fs::remove_all(e.path(), ignored);
    }
  }
  ec.clear();
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ec.message()));
  return tmp;
}

absl::Status CommitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step, int keep,
                              const std::function<absl::Status()>& still_owner) {
  absl::Status synced = FsyncDirectory(tmp);
  if (!synced.ok()) return synced;
  if (still_owner != nullptr) {
    if (absl::Status owned = still_owner(); !owned.ok()) return owned;
  }
  const std::string final_path = absl::StrCat(dir, "/", CheckpointName(step));
  std::error_code ec;
  if (fs::exists(final_path)) {
    // A checkpoint of this step exists (written again after a resume): the new one replaces it in one
    // step where the file system can (the two swapped atomically, the old one then at `tmp` and
    // deleted by the clean-up below), else the old one is set aside and put back if the new one
    // cannot take its place — some complete checkpoint of the step exists at every moment.
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) != 0) {
      const std::string old = final_path + ".old";
      fs::remove_all(old, ec);
      fs::rename(final_path, old, ec);
      if (ec) return absl::UnavailableError(absl::StrCat("cannot set ", final_path, " aside: ", ec.message()));
      fs::rename(tmp, final_path, ec);
      if (ec) {
        std::error_code back;
        fs::rename(old, final_path, back);
        return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", final_path, ": ", ec.message(),
                                                   back ? " (and the old one stays at " + old + ")" : ""));
      }
    }
  } else {
    fs::rename(tmp, final_path, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", final_path, ": ", ec.message()));
  }
  synced = FsyncDirectory(dir);
  if (!synced.ok()) return synced;
  if (still_owner != nullptr) {
    if (absl::Status owned = still_owner(); !owned.ok()) return owned;  // Committed; nothing pruned.
  }
  auto all = ListCheckpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].second, ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') != std::string::npos) fs::remove_all(e.path(), ec);
  }
  return absl::OkStatus();
}

void AbortCheckpoint(const std::string& tmp) {
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

absl::Status VerifyCheckpoint(const std::string& path) {
  auto damaged = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is damaged: ", why));
  };
  // Only what the files say is damage (missing, short, another checksum): an error reading them
  // (EIO, ESTALE, EMFILE, EACCES: storage or this process, maybe for a moment) is returned as
  // Unavailable, and the checkpoint is kept.
  auto unreadable = [&](const std::string& name, absl::string_view why) {
    return absl::UnavailableError(absl::StrCat("checkpoint ", path, ": cannot read ", name, ": ", why,
                                               " (not damage: the checkpoint is kept)"));
  };
  std::string text;
  {
    const int fd = open((path + "/index.json").c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) return damaged("index.json is missing");
    if (fd < 0) return unreadable("index.json", std::strerror(errno));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        close(fd);
        return e == EISDIR ? damaged("index.json is not a file") : unreadable("index.json", std::strerror(e));
      }
      if (n == 0) break;
      if (text.size() + static_cast<size_t>(n) > kMaxIndexBytes) {
        close(fd);
        return damaged(absl::StrCat("index.json is larger than ", kMaxIndexBytes, " bytes"));
      }
      text.append(buf, static_cast<size_t>(n));
    }
    close(fd);
  }
  const nlohmann::json index = nlohmann::json::parse(text, nullptr, false);
  if (index.is_discarded() || !index.is_object()) return damaged("index.json is not valid JSON");
  if (!index.contains("files")) return absl::OkStatus();  // Written before checksums were recorded.
  const nlohmann::json& files = index["files"];
  if (!files.is_object() || files.empty()) return damaged("index.json's files is not a non-empty object");
  for (auto it = files.begin(); it != files.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& want = it.value();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || !want.is_object() ||
        !want.contains("bytes") || !want.contains("crc32c") || !want["bytes"].is_number_unsigned() ||
        !want["crc32c"].is_number_unsigned()) {
      return damaged(absl::StrCat("index.json's entry for \"", name, "\" is malformed"));
    }
    auto got = DigestFile(path + "/" + name);
    if (absl::IsNotFound(got.status())) return damaged(absl::StrCat(name, ": ", got.status().message()));
    if (!got.ok()) return unreadable(name, got.status().message());
    const uint64_t bytes = want["bytes"].get<uint64_t>();
    const uint64_t crc = want["crc32c"].get<uint64_t>();
    if (static_cast<uint64_t>(got->bytes) != bytes) {
      return damaged(absl::StrCat(name, " has ", got->bytes, " bytes, the index recorded ", bytes));
    }
    if (got->crc32c != crc) {
      return damaged(absl::StrFormat("%s has CRC-32C %08x, the index recorded %08x", name, got->crc32c, crc));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::pair<int64_t, std::string>>> NewestGoodCheckpoint(
    const std::string& dir, std::vector<absl::Status>* damaged) {
  absl::Status listed;
  auto all = ListCheckpoints(dir, &listed);
  if (!listed.ok()) return listed;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    absl::Status s = VerifyCheckpoint(it->second);
    if (s.ok()) return std::optional<std::pair<int64_t, std::string>>(*it);
    if (!absl::IsDataLoss(s)) return s;  // Unreadable now: nothing is set aside.
    std::error_code ec;
    fs::remove_all(it->second + ".damaged", ec);
    fs::rename(it->second, it->second + ".damaged", ec);
    if (damaged != nullptr) damaged->push_back(std::move(s));
  }
  return std::optional<std::pair<int64_t, std::string>>();
}

}  // namespace tessera::formats::checkpoint
