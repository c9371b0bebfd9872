#include "parallel/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::parallel {

namespace fs = std::filesystem;

std::string CheckpointName(int64_t step) { return absl::StrFormat("step_%08d", step); }

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step;
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        absl::SimpleAtoi(name.substr(5), &step) && e.is_directory()) {
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
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ec.message()));
  return tmp;
}

absl::Status CommitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step, int keep) {
  const std::string final_path = absl::StrCat(dir, "/", CheckpointName(step));
  std::error_code ec;
  if (fs::exists(final_path)) {
    // Move the old one aside first so that some complete checkpoint of this step always exists.
    const std::string old = final_path + ".old";
    fs::remove_all(old, ec);
    fs::rename(final_path, old, ec);
  }
  fs::rename(tmp, final_path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", final_path, ": ", ec.message()));
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) fsync(fd), close(fd);
  auto all = ListCheckpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].second, ec);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') != std::string::npos) fs::remove_all(e.path(), ec);
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
