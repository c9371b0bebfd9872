#include "parallel/testing/multi_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"

namespace tessera::parallel::testing {

absl::Status RunRanks(int world, const std::function<absl::Status(int rank, int port)>& fn,
                      int timeout_s) {
  const int port = net::PickFreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      absl::Status s;
      try {
        s = fn(rank, port);
      } catch (const std::exception& e) {
        s = absl::InternalError(e.what());
      }
      if (!s.ok()) fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      fflush(stderr);
      _exit(s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  absl::Status result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t done = 0;
  std::vector<bool> finished(world, false);
  while (done < pids.size()) {
    for (int r = 0; r < world; ++r) {
      if (finished[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        finished[r] = true;
        ++done;
        if (result.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          result = absl::InternalError(absl::StrCat("rank ", r, " failed (status ", status, ")"));
        }
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (!finished[r]) kill(pids[r], SIGKILL), waitpid(pids[r], nullptr, 0);
      }
      return absl::DeadlineExceededError(absl::StrCat("ranks still running after ", timeout_s, " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

}  // namespace tessera::parallel::testing
