// TestHosts: several "hosts" on this machine, each a Linux network namespace of its own, for tests
// that claim several nodes. Host i has the interface eth0 with address 198.18.0.(i+1)/24, lo up and
// no default route: its packets reach the other test hosts and nothing else. The hosts' eth0 are veth
// pairs whose other ends sit on a bridge in one more namespace (the "switch"). Processes run in a
// host under `ip netns exec`; the filesystem is shared (as a cluster's shared storage would be).
//
// Needs root and iproute2 (`ip`, and `tc` for Slow()); Create() says why when it cannot make them, so
// a test can skip with that message. The destructor stops every process the fixture started and
// deletes every namespace it made — also when the test failed. Namespaces left by a fixture whose
// process died (SIGKILL) are deleted by the next Create().
#ifndef TESSERA_TESTS_TESTING_TEST_HOSTS_H_
#define TESSERA_TESTS_TESTING_TEST_HOSTS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/testing/cli.h"

namespace tessera::testing {

class TestHosts {
 public:
  // Makes `n` hosts (1 ≤ n ≤ 200). FailedPrecondition with the reason when this machine cannot.
  static absl::StatusOr<std::unique_ptr<TestHosts>> Create(int n);
  ~TestHosts();

  int size() const { return static_cast<int>(netns_.size()); }
  const std::string& address(int host) const { return addresses_.at(host); }  // "198.18.0.(host+1)"
  const std::string& netns(int host) const { return netns_.at(host); }

  // Starts argv in `host` (a process group of its own, killed with this process; output appended to
  // log_path, "" keeps ours; env added). The fixture stops it at the end unless Kill()ed before.
  absl::StatusOr<pid_t> Spawn(int host, const std::vector<std::string>& argv, const std::string& log_path,
                              const std::map<std::string, std::string>& env = {});
  // Runs argv in `host` to completion.
  CliResult Run(int host, const std::vector<std::string>& argv);
  // SIGKILLs a process started by Spawn and reaps it.
  void Kill(pid_t pid);

  // Cuts `host` off the others (its link down), or brings it back.
  absl::Status CutOff(int host);
  absl::Status Heal(int host);
  // Drops every packet `host` sends to `to` (a blackhole route in its namespace: local senders get an
  // error, nothing leaves), or stops dropping them. Only that path is cut: `host` keeps reaching
  // every other host, and the file system stays shared.
  absl::Status Blackhole(int host, int to, bool on);
  // Delays every packet `host` sends by `ms` and drops `loss_percent` of them at random (tc netem);
  // both 0 removes the impairment.
  absl::Status Slow(int host, int ms, int loss_percent = 0);

 private:
  TestHosts() = default;
  absl::Status Ip(const std::vector<std::string>& args);

  std::string prefix_;                // Unique per fixture: "ts<pid>x<k>".
  std::string bridge_;                // The switch's namespace.
  std::vector<std::string> netns_, addresses_;
  std::vector<pid_t> pids_;           // Spawned and not yet killed.
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_TEST_HOSTS_H_
