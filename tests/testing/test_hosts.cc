#include "tests/testing/test_hosts.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kNamePrefix[] = "ts";  // Every namespace a fixture makes: ts<pid>x<k>[_<host>|_sw].

// Deletes namespaces named by a fixture whose process no longer exists.
void RemoveStaleNamespaces() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    const std::string digits = name.substr(2, name.find('x') == std::string::npos ? 0 : name.find('x') - 2);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(std::stoi(digits), 0) == 0 || errno == EPERM) continue;  // Its fixture still runs.
    RunCommand({"ip", "netns", "del", name});
  }
}

}  // namespace

absl::Status TestHosts::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  CliResult r = RunCommand(argv);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed: ", r.output));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TestHosts>> TestHosts::Create(int n) {
  if (n < 1 || n > 200) return absl::InvalidArgumentError(absl::StrCat(n, " test hosts: want 1 to 200"));
  if (geteuid() != 0) return absl::FailedPreconditionError("test hosts need root (network namespaces)");
  if (RunCommand({"ip", "-V"}).exit_code != 0) {
    return absl::FailedPreconditionError("test hosts need iproute2's `ip` on PATH");
  }
  RemoveStaleNamespaces();
  static std::atomic<int> fixtures{0};
  std::unique_ptr<TestHosts> h(new TestHosts());
  h->prefix_ = absl::StrCat(kNamePrefix, getpid(), "x", fixtures++);
  h->bridge_ = h->prefix_ + "_sw";
  // From here on the destructor removes whatever was made, also when a step fails.
  absl::Status s = h->Ip({"netns", "add", h->bridge_});
  if (!s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot make a network namespace here: ", s.message()));
  }
  for (absl::Status step : {h->Ip({"-n", h->bridge_, "link", "add", "br0", "type", "bridge"}),
                            h->Ip({"-n", h->bridge_, "link", "set", "br0", "up"})}) {
    if (!step.ok()) return step;
  }
  for (int i = 0; i < n; ++i) {
    const std::string ns = absl::StrCat(h->prefix_, "_", i);
    const std::string addr = absl::StrCat("198.18.0.", i + 1);
    if (absl::Status a = h->Ip({"netns", "add", ns}); !a.ok()) return a;
    h->netns_.push_back(ns);
    h->addresses_.push_back(addr);
    const std::string port = absl::StrCat("p", i);
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", h->bridge_},
             {"-n", h->bridge_, "link", "set", port, "master", "br0"},
             {"-n", h->bridge_, "link", "set", port, "up"},
             {"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
             {"-n", ns, "link", "set", "eth0", "up"},
             {"-n", ns, "link", "set", "lo", "up"}}) {
      if (absl::Status a = h->Ip(args); !a.ok()) return a;
    }
  }
  return h;
}

TestHosts::~TestHosts() {
  process::StopAll(pids_, std::chrono::seconds(5));
  for (const std::string& ns : netns_) RunCommand({"ip", "netns", "del", ns});
  if (!bridge_.empty()) RunCommand({"ip", "netns", "del", bridge_});
}

absl::StatusOr<pid_t> TestHosts::Spawn(int host, const std::vector<std::string>& argv, const std::string& log_path,
                                       const std::map<std::string, std::string>& env) {
  process::SpawnOptions so;
  so.argv = {"/usr/sbin/ip", "netns", "exec", netns_.at(host)};
  if (!fs::exists(so.argv[0])) so.argv[0] = "/sbin/ip";
  so.argv.insert(so.argv.end(), argv.begin(), argv.end());
  so.log_path = log_path;
  so.env = env;
  auto pid = process::Spawn(so);  // `ip netns exec` execs argv: the pid is the daemon's own.
  if (pid.ok()) pids_.push_back(*pid);
  return pid;
}

CliResult TestHosts::Run(int host, const std::vector<std::string>& argv) {
  std::vector<std::string> full = {"ip", "netns", "exec", netns_.at(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  return RunCommand(full);
}

void TestHosts::Kill(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
}

absl::Status TestHosts::CutOff(int host) { return Ip({"-n", netns_.at(host), "link", "set", "eth0", "down"}); }

absl::Status TestHosts::Heal(int host) { return Ip({"-n", netns_.at(host), "link", "set", "eth0", "up"}); }

absl::Status TestHosts::Blackhole(int host, int to, bool on) {
  return Ip({"-n", netns_.at(host), "route", on ? "add" : "del", "blackhole", addresses_.at(to) + "/32"});
}

absl::Status TestHosts::Slow(int host, int ms, int loss_percent) {
  std::vector<std::string> argv = {"ip", "netns", "exec", netns_.at(host), "tc", "qdisc"};
  if (ms > 0 || loss_percent > 0) {
    for (const char* a : {"replace", "dev", "eth0", "root", "netem", "delay"}) argv.push_back(a);
    argv.push_back(absl::StrCat(ms, "ms"));
    if (loss_percent > 0) argv.push_back("loss"), argv.push_back(absl::StrCat(loss_percent, "%"));
  } else {
    for (const char* a : {"del", "dev", "eth0", "root"}) argv.push_back(a);
  }
  CliResult r = RunCommand(argv);
  if (r.exit_code != 0) return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed: ", r.output));
  return absl::OkStatus();
}

}  // namespace tessera::testing
