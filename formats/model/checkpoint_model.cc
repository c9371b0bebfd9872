#include "formats/model/checkpoint_model.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "formats/model/trainer_state.h"

namespace tessera::formats::model {

using checkpoint::ListCheckpoints;
using checkpoint::VerifyCheckpoint;

namespace fs = std::filesystem;

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
  auto state = ReadTrainerState(out.path);
  if (!state.ok()) return state.status();
  out.config = state->model;
  out.lora_base = state->lora_base;
  out.router_bias = state->router_bias;
  return out;
}

}  // namespace tessera::formats::model
