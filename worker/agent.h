// Agent: the worker daemon's connection to the coordinator — registers (again after any loss, with
// backoff), heartbeats, reads the assignment stream, and reports what its ranks do. Owns the
// RankSupervisor; ranks keep running while the coordinator is away and are reported on return.
#ifndef TESSERA_WORKER_AGENT_H_
#define TESSERA_WORKER_AGENT_H_

#include <atomic>
#include <string>

#include <optional>

#include "common/rpc/tls.h"
#include "common/spec/paths.h"
#include "tessera/v1/cluster.pb.h"
#include "worker/rank_supervisor.h"
#include "worker/worker_metrics.h"

namespace tessera::worker {

struct AgentOptions {
  std::string coordinator = "127.0.0.1:7070";
  std::string name;                       // Unique per node.
  v1::DeviceKind device_kind = v1::DEVICE_KIND_CPU;
  int device_count = 1;
  int64_t device_memory_bytes = 0;
  std::string host = "127.0.0.1";         // Where this node's ranks are reached.
  int store_port_min = 29500;             // Ports the coordinator may hand to rank 0's store here.
  int store_port_max = 29599;
  std::string metrics_address;
  double peak_flops_per_device = 0;       // Registered: the coordinator's dashboard computes MFU with it.
  std::optional<rpc::TlsMaterial> tls;    // Mutual TLS towards the coordinator; none: insecure.
  // Where a job's ranks may read and write (common/spec/paths.h), checked again here before a rank
  // starts (the coordinator checked on submission, on its own machine). Empty: not confined.
  spec::PathRoots roots;
  RankSupervisorOptions supervisor;
};

class Agent {
 public:
  // `metrics` may be null.
  Agent(AgentOptions options, WorkerMetrics* metrics) : options_(std::move(options)), metrics_(metrics) {}

  // Works until `stop` becomes true, then stops every rank (SIGTERM, SIGKILL after the grace period).
  void Run(const std::atomic<bool>& stop);

 private:
  AgentOptions options_;
  WorkerMetrics* metrics_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_AGENT_H_
