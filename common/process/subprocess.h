// Starting and stopping child processes that must never outlive their supervisor.
#ifndef TESSERA_COMMON_PROCESS_SUBPROCESS_H_
#define TESSERA_COMMON_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::process {

struct SpawnOptions {
  std::vector<std::string> argv;          // argv[0] is the executable's path.
  std::string log_path;                   // stdout and stderr go here (appended); "" keeps ours.
  int log_fd = -1;                        // Or here: an open descriptor (not closed; overrides log_path).
  std::map<std::string, std::string> env; // Added to (or replacing in) our environment.
};

// Starts argv in a new process group of its own (so signals to it reach its whole tree), set to be
// killed if this process dies. Returns its pid. A failure to exec shows in its log and exit code 127.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// Sends SIGTERM to each process group, waits up to `grace` for them to exit, then SIGKILLs the rest
// and reaps them all. Pids already reaped by the caller must not be passed.
void StopAll(const std::vector<pid_t>& pids, std::chrono::milliseconds grace);

// A human description of a waitpid status: "exit code 3", "killed by signal 9 (Killed)".
std::string DescribeExit(int wait_status);

// The last line of the file at `path` that starts with `prefix` ("" when none), within its last 64 KiB.
// Opened without following a final symbolic link and without waiting on a FIFO: anything but a regular
// file reads as "".
std::string LastLineWithPrefix(const std::string& path, const std::string& prefix);

}  // namespace tessera::process

#endif  // TESSERA_COMMON_PROCESS_SUBPROCESS_H_
