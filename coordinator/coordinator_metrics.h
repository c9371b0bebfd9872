// The coordinator's Prometheus metrics, defined in this one place:
//   tessera_coordinator_jobs{state}                     gauge
//   tessera_coordinator_workers{state}                  gauge
//   tessera_coordinator_rpc_duration_seconds{method}    histogram
//   tessera_coordinator_scheduling_latency_seconds      histogram (queued → placed)
//   tessera_coordinator_heartbeats_total{path}          counter (path: fast — repeating the worker's
//                                                        previous one, no coordinator lock; locked)
//   tessera_coordinator_rpc_denied_total{method,reason} counter (authorizer.h; reason: no_identity,
//                                                        wrong_role, impersonation, not_owner, too_many_streams)
#ifndef TESSERA_COORDINATOR_COORDINATOR_METRICS_H_
#define TESSERA_COORDINATOR_COORDINATOR_METRICS_H_

#include <chrono>
#include <map>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  void ObserveRpc(const std::string& method, double seconds);
  void ObserveScheduling(double seconds);
  void CountDenied(const std::string& method, const std::string& reason);
  void SetCounts(const std::map<v1::JobState, int>& jobs, const std::map<v1::Worker::State, int>& workers);
  // The coordinator's running totals (Coordinator::HeartbeatsByPath); called from one thread.
  void SetHeartbeats(int64_t fast, int64_t locked);

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Histogram>& rpc_;
  prometheus::Histogram& scheduling_;
  prometheus::Family<prometheus::Counter>& denied_;
  // The Heartbeat series, looked up once: thousands of heartbeats a second would otherwise each take
  // the family's lock and build the bucket list.
  prometheus::Histogram& heartbeat_;
  prometheus::Family<prometheus::Counter>& heartbeat_paths_;
  prometheus::Counter& fast_heartbeats_;
  prometheus::Counter& locked_heartbeats_;
  int64_t fast_seen_ = 0, locked_seen_ = 0;  // What the counters hold.
};

// Times one RPC handler (no-op when metrics are null).
class RpcTimer {
 public:
  RpcTimer(CoordinatorMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  ~RpcTimer() {
    if (metrics_ != nullptr) {
      metrics_->ObserveRpc(method_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
  }

 private:
  CoordinatorMetrics* metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_COORDINATOR_METRICS_H_
