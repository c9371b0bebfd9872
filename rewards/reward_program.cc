#include "rewards/reward_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process/subprocess.h"

namespace tessera::rewards {
namespace {

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

std::string Quote(const std::string& s) {
  std::string out = s.size() > 80 ? s.substr(0, 80) + "…" : s;
  return "\"" + out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RewardProgram>> RewardProgram::Start(RewardProgramOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("reward ", options.name, ": command: is empty"));
  }
  // stdin is a socket, so that writing to a program that went away fails with EPIPE instead of
  // raising SIGPIPE in this process (send with MSG_NOSIGNAL).
  int in[2], out[2], err[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    return absl::InternalError(absl::StrCat("reward ", options.name, ": socketpair: ", std::strerror(errno)));
  }
  auto close_all = [&](std::initializer_list<int*> pairs) {
    for (int* p : pairs) close(p[0]), close(p[1]);
  };
  if (pipe2(out, O_CLOEXEC) != 0) {
    close_all({in});
    return absl::InternalError(absl::StrCat("reward ", options.name, ": pipe: ", std::strerror(errno)));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close_all({in, out});
    return absl::InternalError(absl::StrCat("reward ", options.name, ": pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  std::vector<char*> argv;
  for (std::string& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close_all({in, out, err});
    return absl::InternalError(absl::StrCat("reward ", options.name, ": fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Killed with the thread that started it (Start is called from a thread that lives as long as
    // the job: the rank's main thread); and if that is already gone, at once.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(in[1], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) {
      dprintf(STDERR_FILENO, "cannot enter %s: %s\n", options.working_dir.c_str(), std::strerror(errno));
      _exit(127);
    }
    execvp(argv[0], argv.data());
    dprintf(STDERR_FILENO, "cannot execute %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(in[1]);
  close(out[1]);
  close(err[1]);
  std::unique_ptr<RewardProgram> p(new RewardProgram(std::move(options)));
  p->pid_ = pid;
  p->in_ = in[0];
  p->out_ = out[0];
  p->err_ = err[0];
  for (int fd : {p->in_, p->out_, p->err_}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return p;
}

RewardProgram::~RewardProgram() {
  if (pid_ > 0) {
    CloseFd(&in_);  // End of input: a well-behaved program exits.
    std::string how;
    for (int k = 0; k < 50 && !LeaderExited(&how); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
}

void RewardProgram::Kill() {
  if (pid_ > 0) {
    // Its whole group (children it left too). The leader is not reaped before this, so its group id
    // is still its own.
    kill(-pid_, SIGKILL);
    if (waitpid(pid_, &wait_status_, 0) == pid_) exited_ = true;
    pid_ = -1;
  }
  CloseFd(&in_);
  CloseFd(&out_);
  CloseFd(&err_);
}

bool RewardProgram::LeaderExited(std::string* how) {
  if (pid_ <= 0) return false;
  siginfo_t info;
  info.si_pid = 0;
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid_) {
    return false;
  }
  *how = info.si_code == CLD_EXITED ? absl::StrCat("exit code ", info.si_status)
                                    : absl::StrCat("killed by signal ", info.si_status, " (", strsignal(info.si_status), ")");
  return true;
}

absl::Status RewardProgram::Fail(const std::string& why, bool grace) {
  if (grace && err_ >= 0) {
    CloseFd(&in_);
    const absl::Time until = absl::Now() + kGrace;
    char buf[4096];
    while (absl::Now() < until) {
      pollfd fd = {err_, POLLIN, 0};
      const int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(until - absl::Now())));
      if (poll(&fd, 1, ms) <= 0) break;
      const ssize_t n = read(err_, buf, sizeof(buf));
      if (n <= 0) break;  // Closed: it exited.
      err_tail_.append(buf, static_cast<size_t>(n));
      if (err_tail_.size() > 4 * options_.stderr_tail_bytes) err_tail_.erase(0, err_tail_.size() - options_.stderr_tail_bytes);
    }
  }
  // What it wrote to stderr before it went, then stop it.
  if (err_ >= 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(err_, buf, sizeof(buf))) > 0) err_tail_.append(buf, static_cast<size_t>(n));
  }
  Kill();
  if (err_tail_.size() > options_.stderr_tail_bytes) err_tail_.erase(0, err_tail_.size() - options_.stderr_tail_bytes);
  std::string tail = err_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  broken_ = absl::FailedPreconditionError(absl::StrCat(
      "reward ", options_.name, " (", options_.argv[0], "): ", why,
      tail.empty() ? "; it wrote nothing to stderr" : absl::StrCat("; its stderr ends:\n", tail)));
  return broken_;
}

absl::Status RewardProgram::Pump(absl::Time until, bool* timed_out) {
  *timed_out = false;
  pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};  // A closed stderr (-1) is not polled.
  const int ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(until - absl::Now())));
  const int ready = poll(fds, 2, ms);
  if (ready < 0) {
    if (errno == EINTR) return absl::OkStatus();
    return Fail(absl::StrCat("poll: ", std::strerror(errno)));
  }
  if (ready == 0) {
    *timed_out = absl::Now() >= until;
    return absl::OkStatus();
  }
  char buf[65536];
  if (fds[1].revents != 0) {
    const ssize_t n = read(err_, buf, sizeof(buf));
    if (n == 0) CloseFd(&err_);  // It closed its stderr: not polled again (poll would report it at once, forever).
    if (n > 0) {
      err_tail_.append(buf, static_cast<size_t>(n));
      if (err_tail_.size() > 4 * options_.stderr_tail_bytes) err_tail_.erase(0, err_tail_.size() - options_.stderr_tail_bytes);
    }
  }
  if (fds[0].revents != 0) {
    const ssize_t n = read(out_, buf, sizeof(buf));
    if (n == 0) {
      // Its stdout closed: it exited (or closed it). How, without reaping it (Kill needs its group).
      std::string how = "closed its stdout";
      for (int k = 0; k < 100 && !LeaderExited(&how); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return Fail(absl::StrCat("stopped (", how, ")"));
    }
    if (n > 0) {
      out_buffer_.append(buf, static_cast<size_t>(n));
      size_t start = 0, nl;
      while ((nl = out_buffer_.find('\n', start)) != std::string::npos) {
        lines_.push_back(out_buffer_.substr(start, nl - start));
        start = nl + 1;
      }
      out_buffer_.erase(0, start);
      if (out_buffer_.size() > options_.max_line_bytes) {
        return Fail(absl::StrCat("printed a line longer than ", options_.max_line_bytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RewardProgram::Score(const std::vector<RewardQuery>& queries) {
  if (!broken_.ok()) return broken_;
  // Anything it printed since the last batch is more than it was asked for.
  bool timed_out = false;
  if (absl::Status s = Pump(absl::Now(), &timed_out); !s.ok()) return s;
  if (!lines_.empty() || !out_buffer_.empty()) {
    return Fail(absl::StrCat("printed more lines than it was given queries (", Quote(lines_.empty() ? out_buffer_ : lines_[0]),
                             " came after the last answer)"),
                /*grace=*/true);
  }
  std::string payload;
  for (const RewardQuery& q : queries) {
    nlohmann::json line = nlohmann::json::object();
    line["prompt"] = q.prompt;
    line["completion"] = q.completion;
    line["fields"] = q.fields;
    // Invalid UTF-8 (a completion cut inside a character) becomes U+FFFD rather than an exception.
    payload += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    payload += '\n';
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  size_t written = 0;
  std::vector<double> scores;
  scores.reserve(queries.size());
  while (scores.size() < queries.size()) {
    if (written < payload.size()) {
      const ssize_t n = send(in_, payload.data() + written, payload.size() - written, MSG_NOSIGNAL);
      if (n > 0) {
        written += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        // It closed its stdin: its exit (or what it printed) tells why; fall through to read it.
        if (errno != EPIPE) return Fail(absl::StrCat("writing to its stdin: ", std::strerror(errno)));
        written = payload.size();
      }
    }
    if (!lines_.empty()) {
      if (scores.size() % 1024 == 1023 && absl::Now() >= deadline) {
        return Fail(absl::StrCat("gave ", scores.size(), " of ", queries.size(), " scores within its timeout of ",
                                 absl::FormatDuration(options_.timeout), "; killed"));
      }
      const std::string line = std::move(lines_.front());
      lines_.pop_front();
      const nlohmann::json v = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded() || !v.is_number() || !std::isfinite(v.get<double>())) {
        return Fail(absl::StrCat("answer ", scores.size() + 1, " of ", queries.size(), " is ", Quote(line),
                                 ", not a finite JSON number (one number per line, one line per query)"),
                    /*grace=*/true);
      }
      scores.push_back(v.get<double>());
      continue;
    }
    // Wait for output (or for room in its stdin, polled again next round).
    const absl::Time until = written < payload.size() ? std::min(deadline, absl::Now() + absl::Milliseconds(5)) : deadline;
    if (absl::Status s = Pump(until, &timed_out); !s.ok()) return s;
    if (absl::Now() >= deadline && lines_.empty()) {
      // A program that exited while a process it started holds its stdout open looks hung: say so.
      std::string how;
      if (LeaderExited(&how)) {
        return Fail(absl::StrCat("stopped (", how, ") after ", scores.size(), " of ", queries.size(),
                                 " scores, while a process it started kept its stdout open"));
      }
      return Fail(absl::StrCat("gave ", scores.size(), " of ", queries.size(), " scores within its timeout of ",
                               absl::FormatDuration(options_.timeout), "; killed"));
    }
  }
  // Lines beyond the answers that arrive with them or just after are caught now (see kSettle).
  const absl::Time settle = absl::Now() + kSettle;
  while (lines_.empty() && out_buffer_.empty() && absl::Now() < settle) {
    if (absl::Status s = Pump(settle, &timed_out); !s.ok()) return s;
  }
  if (!lines_.empty() || !out_buffer_.empty()) {
    return Fail(absl::StrCat("printed more lines than it was given queries (", Quote(lines_.empty() ? out_buffer_ : lines_[0]),
                             " came after the last answer)"),
                /*grace=*/true);
  }
  return scores;
}

}  // namespace tessera::rewards
