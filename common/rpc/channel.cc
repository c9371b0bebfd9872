#include "common/rpc/channel.h"

namespace tessera::rpc {

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target, const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, options.initial_reconnect_backoff_ms);
  // gRPC also takes this as the deadline of each connection attempt (the TCP connect and the TLS
  // handshake together): a short one cut every handshake with a restarted TLS coordinator short.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, options.connect_timeout_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, options.max_reconnect_backoff_ms);
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  args.SetMaxSendMessageSize(kMaxRequestBytes);
  if (options.tls) args.SetSslTargetNameOverride(tls::kCoordinatorServerName);
  return grpc::CreateCustomChannel(target, ChannelCredentialsFor(options.tls), args);
}

}  // namespace tessera::rpc
