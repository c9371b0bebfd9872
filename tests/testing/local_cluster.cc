#include "tests/testing/local_cluster.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"

namespace tessera::testing {

LocalCluster::LocalCluster(std::string dir)
    : dir_(std::move(dir)),
      port_(net::PickFreePort()),
      certs_(std::make_unique<ClusterCerts>(dir_ + "/certs")) {
  addr_ = absl::StrCat("127.0.0.1:", port_);
}

bool LocalCluster::StartCoordinator() {
  process::SpawnOptions so;
  so.argv = {Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=" + addr_,
             "--db=" + dir_ + "/coord.db", "--heartbeat_timeout_s=5", "--metrics_listen=127.0.0.1:0"};
  for (const std::string& f : certs_->CoordinatorFlags()) so.argv.push_back(f);
  for (const std::string& f : ClusterCerts::RootFlags(dir_)) so.argv.push_back(f);
  so.log_path = dir_ + "/coordinator.log";
  auto pid = process::Spawn(so);
  if (!pid.ok()) return false;
  coordinator_ = *pid;
  return WaitFor([&] { return Cli({"jobs"}).exit_code == 0; }, 20);
}

bool LocalCluster::StartWorker(const std::string& name, int devices, const std::vector<std::string>& flags) {
  // Store ports: a range starting at a port that was just free (not the coordinator's).
  int base = net::PickFreePort();
  while (base == port_ || base > 65000) base = net::PickFreePort();
  process::SpawnOptions so;
  so.argv = {Runfile("worker/tessera-worker"), "--coordinator=" + addr_, absl::StrCat("--devices=cpu:", devices),
             "--work_dir=" + dir_ + "/worker_" + name, "--name=" + name,
             absl::StrCat("--store_ports=", base, "-", base + 20), "--stop_grace_s=3", "--threads_per_rank=1",
             "--metrics_listen=127.0.0.1:0"};
  for (const std::string& f : certs_->WorkerFlags(name)) so.argv.push_back(f);
  for (const std::string& f : ClusterCerts::RootFlags(dir_)) so.argv.push_back(f);
  so.argv.insert(so.argv.end(), flags.begin(), flags.end());
  so.log_path = dir_ + "/worker_" + name + ".log";
  so.env = {{"TESSERA_RANK_BINARY", Runfile("worker/rank/tessera-rank")}};
  auto pid = process::Spawn(so);
  if (!pid.ok()) return false;
  workers_[name] = *pid;
  return true;
}

bool LocalCluster::WaitAlive(const std::vector<std::string>& names, int seconds) {
  return WaitFor([&] {
    const nlohmann::json w = nlohmann::json::parse(Cli({"--output=json", "workers"}).output, nullptr, false);
    if (w.is_discarded() || !w.contains("workers")) return false;
    size_t alive = 0;
    for (const std::string& n : names) {
      for (const auto& x : w["workers"]) {
        if (x.value("name", "") == n && x.value("state", "") == "STATE_ALIVE") ++alive;
      }
    }
    return alive == names.size();
  }, seconds);
}

void LocalCluster::Stop() {
  std::vector<pid_t> all;
  for (auto& [name, pid] : workers_) all.push_back(pid);
  if (coordinator_ > 0) all.push_back(coordinator_);
  process::StopAll(all, std::chrono::seconds(10));
  workers_.clear();
  coordinator_ = -1;
}

CliResult LocalCluster::Cli(std::vector<std::string> args) {
  std::vector<std::string> tls = certs_->CliFlags(ClusterCerts::UserOf(dir_));
  args.insert(args.begin(), tls.begin(), tls.end());
  args.insert(args.begin(), "--coordinator=" + addr_);
  return RunTessera(args);
}

nlohmann::json LocalCluster::Job(const std::string& id) {
  auto r = Cli({"--output=json", "job", id});
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

bool LocalCluster::Ended(const nlohmann::json& job) {
  const std::string s = job.value("state", "");
  return s == "JOB_STATE_SUCCEEDED" || s == "JOB_STATE_FAILED" || s == "JOB_STATE_CANCELLED";
}

}  // namespace tessera::testing
