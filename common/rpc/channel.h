// The one way tessera's daemons and CLI open a gRPC channel to a peer (the coordinator): the channel
// arguments every long-lived client needs, in one place.
#pragma once

#include <memory>
#include <string>

#include <optional>

#include "common/rpc/tls.h"
#include "grpcpp/grpcpp.h"

namespace tessera::rpc {

// How soon a channel tries again after a failed connection. gRPC's defaults (1 s, growing by 1.6x up
// to 120 s) leave a worker unable to reach a coordinator restarted after a few seconds for several
// more seconds (its RPCs fail fast while the channel waits out its backoff): the cap keeps every
// retry within this of the peer's return.
struct ChannelOptions {
  int initial_reconnect_backoff_ms = 200;
  int max_reconnect_backoff_ms = 1000;
  int connect_timeout_ms = 5000;  // For one connection attempt, handshakes included.
  // Mutual TLS (the server's certificate is checked for tls::kCoordinatorServerName); none: insecure.
  std::optional<TlsMaterial> tls;
};

// Message size limits, explicit rather than gRPC's defaults. A daemon receives at most
// kMaxRequestBytes per message (requests are small: a spec is at most 1 MiB encoded, a log page
// 1 MiB); a client at most kMaxResponseBytes (a ListJobs page stops after 4 MiB of jobs).
inline constexpr int kMaxRequestBytes = 4 << 20;
inline constexpr int kMaxResponseBytes = 16 << 20;

// A channel to `target` (host:port) with `options`.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target, const ChannelOptions& options = {});

}  // namespace tessera::rpc
