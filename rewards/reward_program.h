// A reward program: the user's own verifier for reinforcement learning (issue 57; `grpo.rewards`
// entries with `command: [argv...]`), started once and kept running. For each completion it reads one
// JSON object per line on its stdin — {"prompt": text, "completion": text, "fields": {...}} — and
// writes one JSON number per line on its stdout, in order, flushing each (Python: print(x, flush=True)).
// Anything else is an error that names the program and ends it, with the tail of its stderr: it exits
// or crashes, it takes longer than the timeout for a batch (it is killed), it prints a line that is
// not a finite JSON number, a line longer than the limit, or more lines than it was asked for. No
// score is made up (no silent 0). The protocol has no ids: an extra line is caught when it arrives
// with the batch's answers or within kSettle after the last of them; one printed later still would
// be taken for the next batch's first answer.
//
// The program runs in a process group of its own, killed with this process; its stderr is drained
// while it runs (it never blocks on a full pipe) and its last bytes kept. Not thread-safe: one caller.
// No torch.
#ifndef TESSERA_REWARDS_REWARD_PROGRAM_H_
#define TESSERA_REWARDS_REWARD_PROGRAM_H_

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace tessera::rewards {

struct RewardProgramOptions {
  std::string name;                 // The reward's name, for errors ("reward NAME: ...").
  std::vector<std::string> argv;    // argv[0]: a path (or a name looked up in PATH).
  std::string working_dir;          // "" : this process's.
  absl::Duration timeout = absl::Seconds(60);  // For all the scores of one Score() call.
  size_t max_line_bytes = 1 << 20;  // Of one stdout line.
  size_t stderr_tail_bytes = 4096;  // Of its stderr kept for errors.
};

struct RewardQuery {
  std::string prompt;
  std::string completion;
  nlohmann::json fields = nlohmann::json::object();  // The prompt row's other fields.
};

class RewardProgram {
 public:
  // Starts the program. InvalidArgument for an empty argv; NotFound when it cannot be executed (the
  // error then shows as its exit when the first batch is scored).
  static absl::StatusOr<std::unique_ptr<RewardProgram>> Start(RewardProgramOptions options);
  // Closes its stdin, gives it a moment to exit, then kills its group.
  ~RewardProgram();

  // One score per query, in order. On an error (see above) the program is stopped and every later
  // call fails with the same error.
  absl::StatusOr<std::vector<double>> Score(const std::vector<RewardQuery>& queries);

  pid_t pid() const { return pid_; }

 private:
  explicit RewardProgram(RewardProgramOptions options) : options_(std::move(options)) {}
  // Stops the program and remembers `why` (with its stderr's tail) as the error of every later call.
  // With `grace`, its stdin is closed first and its stderr read for a moment (until it closes, at most
  // kGrace), so that what a program that noticed its own mistake writes there is kept.
  absl::Status Fail(const std::string& why, bool grace = false);
  static constexpr absl::Duration kGrace = absl::Milliseconds(500);
  // How long stdout is watched after a batch's last answer for lines that should not be there.
  static constexpr absl::Duration kSettle = absl::Milliseconds(20);
  // Reads what is available on stdout and stderr (waiting up to `until`); false at the deadline.
  absl::Status Pump(absl::Time until, bool* timed_out);
  // Kills its process group (while the leader is not yet reaped, so the group id cannot have been
  // reused), reaps it and closes the pipes. Idempotent.
  void Kill();
  // Whether the leader has exited (not reaped: waitid WNOWAIT); *status describes how.
  bool LeaderExited(std::string* how);

  RewardProgramOptions options_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;  // Its stdin (ours to write), stdout and stderr (ours to read).
  std::string out_buffer_;             // Stdout not yet split into lines.
  std::deque<std::string> lines_;      // Complete stdout lines not yet taken.
  std::string err_tail_;
  bool exited_ = false;
  int wait_status_ = 0;
  absl::Status broken_;  // Set once it failed.
};

}  // namespace tessera::rewards

#endif  // TESSERA_REWARDS_REWARD_PROGRAM_H_
