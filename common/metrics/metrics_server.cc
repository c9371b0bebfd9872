#include "common/metrics/metrics_server.h"

#include <prometheus/gauge.h>

#include "absl/strings/str_cat.h"

namespace tessera::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    const std::string& component) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address ", address, ": cannot listen: ", e.what()));
  }
  auto ports = s->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::InvalidArgumentError(absl::StrCat("metrics address ", address, ": no port bound"));
  s->address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", ports[0]);
  s->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("tessera_build_info")
      .Help("Build of this tessera daemon (value 1).")
      .Register(*s->registry_)
      .Add({{"component", component}, {"version", kVersion}})
      .Set(1);
  s->exposer_->RegisterCollectable(s->registry_);
  return s;
}

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

}  // namespace tessera::metrics
