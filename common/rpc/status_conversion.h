// The one place where absl::Status and grpc::Status meet.
#ifndef TESSERA_COMMON_RPC_STATUS_CONVERSION_H_
#define TESSERA_COMMON_RPC_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tessera::rpc {

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace tessera::rpc

#endif  // TESSERA_COMMON_RPC_STATUS_CONVERSION_H_
