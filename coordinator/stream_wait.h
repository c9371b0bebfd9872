// How long a streaming handler (WatchJob, StreamAssignments) waits for news before it looks at its
// call again: `poll`, or less when the call's deadline comes sooner, so that a call past its
// deadline releases its server thread at once rather than up to `poll` later.
#ifndef TESSERA_COORDINATOR_STREAM_WAIT_H_
#define TESSERA_COORDINATOR_STREAM_WAIT_H_

#include <algorithm>

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera::coordinator {

// Zero or less: the deadline has passed.
inline absl::Duration StreamWait(const grpc::ServerContext& ctx, absl::Duration poll) {
  // No deadline is time_point::max(), about 292 years away: representable.
  return std::min(poll, absl::FromChrono(ctx.deadline()) - absl::Now());
}

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_STREAM_WAIT_H_
