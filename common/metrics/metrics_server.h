// MetricsServer: one Prometheus registry served at http://ADDRESS/metrics (prometheus-cpp's pull
// exposer), with tessera_build_info{component, version} = 1. For torch-free daemons only: the
// exposer's civetweb threads cannot start inside a process that links LibTorch.
#ifndef TESSERA_COMMON_METRICS_METRICS_SERVER_H_
#define TESSERA_COMMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include <prometheus/exposer.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"

namespace tessera::metrics {

inline constexpr char kVersion[] = "0.1.0";

class MetricsServer {
 public:
  // Listens on `address` ("127.0.0.1:0" picks a free port). Fails naming the address.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              const std::string& component);

  prometheus::Registry& registry() { return *registry_; }
  // "host:port" actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::string address_;
};

// Exponential histogram buckets from `start`, multiplied by `factor`, `count` of them.
prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count);

}  // namespace tessera::metrics

#endif  // TESSERA_COMMON_METRICS_METRICS_SERVER_H_
