#include "tests/testing/process_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace tessera::testing {

std::string Cmdline(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;  // The end, or ESRCH: the process is gone (what was read stands).
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

std::vector<pid_t> ProcessesMatching(const std::vector<std::string>& needles) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string cmd = Cmdline(static_cast<pid_t>(pid));
    bool all = !cmd.empty();
    for (const std::string& n : needles) all = all && cmd.find(n) != std::string::npos;
    if (all) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return out;
}

}  // namespace tessera::testing
