#include "common/process/find_binary.h"

#include <cstdlib>
#include <filesystem>

namespace tessera::process {

namespace fs = std::filesystem;

std::string FindTesseraBinary(const std::string& name, const std::string& package, const char* env_var) {
  if (const char* env = getenv(env_var); env != nullptr && *env) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  // bazel-bin/<pkg of self>/<self>: climb to bazel-bin, then down into `package`.
  fs::path bin = self.parent_path();
  const fs::path candidates[] = {
      self.parent_path() / name,
      fs::path(self.string() + ".runfiles") / "tessera" / package / name,
      bin.parent_path() / package / name,
      bin.parent_path().parent_path() / package / name,
  };
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec) && !fs::is_directory(c, ec)) return c.string();
  }
  return "";
}

}  // namespace tessera::process
