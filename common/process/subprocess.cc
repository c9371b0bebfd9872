#include "common/process/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/userfs/user_files.h"

namespace tessera::process {

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int log_fd = -1;
  if (options.log_fd >= 0) {
    log_fd = fcntl(options.log_fd, F_DUPFD_CLOEXEC, 0);
    if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot duplicate the log's descriptor: ", std::strerror(errno)));
  } else if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat(options.log_path, ": cannot open log: ", std::strerror(errno)));
    }
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // The parent died before the death signal was armed.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
    execv(argv[0], argv.data());
    dprintf(STDERR_FILENO, "error: cannot execute %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  setpgid(pid, pid);  // Also from the parent, so the group exists before we signal it.
  return pid;
}

void StopAll(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  std::vector<pid_t> alive = pids;
  for (pid_t p : alive) kill(-p, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!alive.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < alive.size();) {
      if (waitpid(alive[i], nullptr, WNOHANG) == alive[i]) {
        kill(-alive[i], SIGKILL);  // Anything the process left in its group.
        alive.erase(alive.begin() + i);
      } else {
        ++i;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : alive) {
    kill(-p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("status ", status);
}

std::string LastLineWithPrefix(const std::string& path, const std::string& prefix) {
  userfs::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return userfs::LastLineWithPrefix(fd.get(), prefix);
}

}  // namespace tessera::process
