#include "coordinator/coordinator_metrics.h"

#include "absl/strings/ascii.h"
#include "common/metrics/metrics_server.h"

namespace tessera::coordinator {

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : jobs_(prometheus::BuildGauge()
                .Name("tessera_coordinator_jobs")
                .Help("Jobs known to the coordinator, by state.")
                .Register(registry)),
      workers_(prometheus::BuildGauge()
                   .Name("tessera_coordinator_workers")
                   .Help("Workers known to the coordinator, by state.")
                   .Register(registry)),
      rpc_(prometheus::BuildHistogram()
               .Name("tessera_coordinator_rpc_duration_seconds")
               .Help("Time to handle one RPC (streams: until the stream ends), by method.")
               .Register(registry)),
      scheduling_(prometheus::BuildHistogram()
                      .Name("tessera_coordinator_scheduling_latency_seconds")
                      .Help("Time from a job entering the queue to its ranks being placed.")
                      .Register(registry)
                      .Add({}, metrics::ExponentialBuckets(0.001, 4, 10))),
      denied_(prometheus::BuildCounter()
                  .Name("tessera_coordinator_rpc_denied_total")
                  .Help("RPCs refused by authorization, by method and reason.")
                  .Register(registry)),
      heartbeat_(rpc_.Add({{"method", "Heartbeat"}}, metrics::ExponentialBuckets(0.0001, 2, 16))),
      heartbeat_paths_(prometheus::BuildCounter()
                           .Name("tessera_coordinator_heartbeats_total")
                           .Help("Heartbeats applied, by path: fast (a repeat of the worker's previous one, "
                                 "without the coordinator's lock) or locked.")
                           .Register(registry)),
      fast_heartbeats_(heartbeat_paths_.Add({{"path", "fast"}})),
      locked_heartbeats_(heartbeat_paths_.Add({{"path", "locked"}})) {}

void CoordinatorMetrics::SetHeartbeats(int64_t fast, int64_t locked) {
  if (fast > fast_seen_) fast_heartbeats_.Increment(static_cast<double>(fast - fast_seen_)), fast_seen_ = fast;
  if (locked > locked_seen_) locked_heartbeats_.Increment(static_cast<double>(locked - locked_seen_)), locked_seen_ = locked;
}

void CoordinatorMetrics::CountDenied(const std::string& method, const std::string& reason) {
  denied_.Add({{"method", method}, {"reason", reason}}).Increment();
}

void CoordinatorMetrics::ObserveRpc(const std::string& method, double seconds) {
  if (method == "Heartbeat") return heartbeat_.Observe(seconds);
  rpc_.Add({{"method", method}}, metrics::ExponentialBuckets(0.0001, 2, 16)).Observe(seconds);
}

void CoordinatorMetrics::ObserveScheduling(double seconds) { scheduling_.Observe(seconds); }

void CoordinatorMetrics::SetCounts(const std::map<v1::JobState, int>& jobs,
                                   const std::map<v1::Worker::State, int>& workers) {
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_CANCELLED; ++s) {
    const auto state = static_cast<v1::JobState>(s);
    const std::string name = absl::AsciiStrToLower(v1::JobState_Name(state).substr(std::string("JOB_STATE_").size()));
    auto it = jobs.find(state);
    jobs_.Add({{"state", name}}).Set(it == jobs.end() ? 0 : it->second);
  }
  for (auto state : {v1::Worker::STATE_ALIVE, v1::Worker::STATE_LOST}) {
    const std::string name = absl::AsciiStrToLower(v1::Worker::State_Name(state).substr(std::string("STATE_").size()));
    auto it = workers.find(state);
    workers_.Add({{"state", name}}).Set(it == workers.end() ? 0 : it->second);
  }
}

}  // namespace tessera::coordinator
