// A cluster on 127.0.0.1 for end-to-end tests: a real tessera-coordinator (SQLite file in the test's
// directory, mutual TLS with certificates made for the test), tessera-worker daemons with CPU devices,
// and the real CLI as the test's user. Every daemon is a child process; Stop() (or the destructor)
// stops them all.
#ifndef TESSERA_TESTS_TESTING_LOCAL_CLUSTER_H_
#define TESSERA_TESTS_TESTING_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/cluster_certs.h"

namespace tessera::testing {

class LocalCluster {
 public:
  // `dir`: the test's fresh directory (certificates, logs, the database and worker dirs go there).
  explicit LocalCluster(std::string dir);
  ~LocalCluster() { Stop(); }

  // Starts the coordinator (heartbeat timeout 5 s) and waits until the CLI reaches it. False on failure.
  bool StartCoordinator();
  // Starts worker `name` with `devices` CPU devices (stop grace 3 s, one thread per rank); its pid goes
  // to workers()[name]; `flags` are added to its command line (e.g. --pool). False when it cannot be spawned.
  bool StartWorker(const std::string& name, int devices = 1, const std::vector<std::string>& flags = {});
  // Waits until every named worker is ALIVE.
  bool WaitAlive(const std::vector<std::string>& names, int seconds = 20);
  // Stops every daemon still running (SIGTERM, then SIGKILL after 10 s).
  void Stop();

  // The CLI against this cluster, as the test's user.
  CliResult Cli(std::vector<std::string> args);
  // `tessera job ID --output=json` parsed; an empty object when that fails.
  nlohmann::json Job(const std::string& id);
  // Whether a job (as Job returns it) has ended.
  static bool Ended(const nlohmann::json& job);

  const std::string& address() const { return addr_; }
  pid_t& coordinator() { return coordinator_; }       // -1 when not running.
  std::map<std::string, pid_t>& workers() { return workers_; }

 private:
  std::string dir_, addr_;
  int port_ = 0;
  std::unique_ptr<ClusterCerts> certs_;
  pid_t coordinator_ = -1;
  std::map<std::string, pid_t> workers_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_LOCAL_CLUSTER_H_
