// Agent: the worker daemon's connection to the coordinator — registers (again after any loss, with
// backoff), heartbeats, reads the assignment stream, and reports what its ranks do. Ranks keep running
// while the coordinator is away for less than the worker's lease (RegisterWorkerResponse.lease_ms,
// counted from the sending of the last registration or heartbeat that succeeded) and are reported on
// return; once the lease has run out the agent stops every rank (SIGTERM, SIGKILL after the stop
// grace), since the coordinator may place their attempt elsewhere, and reports their exits when it is
// back. See docs/fault-model.md ("Leases and fencing").
//
// One round (Tick) does what is due at the clock's time: register, heartbeat, apply orders, sample
// metrics, collect rank events, deliver reports. Run() calls it every 100 ms; tests call it directly
// with a FakeClock, a fake CoordinatorLink and fake Ranks. Not thread-safe (one loop thread).
#ifndef TESSERA_WORKER_AGENT_H_
#define TESSERA_WORKER_AGENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/rpc/tls.h"
#include "spec/paths.h"
#include "common/time/clock.h"
#include "tessera/v1/cluster.pb.h"
#include "worker/coordinator_link.h"
#include "worker/rank_supervisor.h"
#include "worker/ranks.h"
#include "worker/report_queue.h"
#include "worker/start_specs.h"
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
  std::string pool;                       // Registered (empty: the default pool): jobs of this pool run here.
  std::map<std::string, std::string> labels;  // Registered, shown by `tessera workers`.
  std::optional<rpc::TlsMaterial> tls;    // Mutual TLS towards the coordinator; none: insecure.
  // Where a job's ranks may read and write (spec/paths.h), checked again here before a rank
  // starts (the coordinator checked on submission, on its own machine). Empty: not confined.
  spec::PathRoots roots;
  RankSupervisorOptions supervisor;
  Clock* clock = RealClock();             // Of heartbeats, backoff and metric samples. Not owned.
};

class Agent {
 public:
  // The daemon's: gRPC to options.coordinator, ranks by a RankSupervisor. `metrics` may be null.
  Agent(AgentOptions options, WorkerMetrics* metrics);
  // With the given link and ranks (tests).
  Agent(AgentOptions options, WorkerMetrics* metrics, std::unique_ptr<CoordinatorLink> link,
        std::unique_ptr<Ranks> ranks);

  // Calls Tick() every 100 ms until `stop` becomes true, then stops every rank (SIGTERM, SIGKILL after
  // the grace period) by destroying the Ranks.
  void Run(const std::atomic<bool>& stop);

  // One round of the loop; never sleeps (RPCs have their own short deadlines).
  void Tick();

  // The coordinator's id for this worker ("" while not registered) and the last applied order.
  const std::string& worker_id() const { return worker_id_; }
  int64_t applied_seq() const { return applied_seq_; }

 private:
  void Register(absl::Time now);
  void Heartbeat(absl::Time now);
  void ApplyAssignments();
  // An ACTION_START order; a rank that cannot start is reported EXITED (127) with the reason.
  void StartRank(const v1::Assignment& a);
  void CollectEvents(absl::Time now);
  // Stops every rank once the lease has run out (once per expiry).
  void CheckLease(absl::Time now);
  // Run after every call that may block (an RPC): the lease check and the ranks' SIGKILL escalation
  // (their Poll), so that either comes at most one blocking call late (RegisterWorkerRequest.stop_delay_ms).
  void Guard();
  v1::RegisterWorkerRequest Registration();

  AgentOptions options_;
  WorkerMetrics* metrics_;
  std::unique_ptr<CoordinatorLink> link_;
  std::unique_ptr<Ranks> ranks_;
  // This process, for the coordinator to tell a second worker under the same name from this one.
  const std::string instance_;
  std::string worker_id_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  absl::Duration lease_ = absl::ZeroDuration();       // From the registration; zero: none.
  absl::Time lease_from_ = absl::InfinitePast();       // When the last successful call was sent.
  bool lease_ran_out_ = false;                         // Ranks were stopped for this expiry.
  absl::Duration backoff_ = absl::Milliseconds(200);
  absl::Time next_attempt_ = absl::InfinitePast(), next_heartbeat_ = absl::InfinitePast(),
             next_sample_ = absl::InfinitePast();
  ReportQueue unsent_;       // Reports not yet delivered.
  std::vector<RankEvent> polled_;  // Events Guard() took from the ranks, for the next CollectEvents.
  StartSpecs specs_;         // The specs of this session's start orders.
  bool said_unreachable_ = false;
  std::string last_refusal_;  // The last ALREADY_EXISTS message printed.
  int64_t registrations_ = 0;  // Registration requests sent (RegisterWorkerRequest.attempt).
  int64_t session_ = 0;        // Of the current registration.
  int64_t applied_seq_ = 0;    // Every order of the session up to this one is applied (the acknowledgement).
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_AGENT_H_
