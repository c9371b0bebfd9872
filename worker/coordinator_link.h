// CoordinatorLink: the worker agent's calls to the coordinator (the WorkerService RPCs and the
// assignment stream). GrpcCoordinatorLink (grpc_coordinator_link.h) is the real one; the agent's unit
// tests use a fake beside it (agent_test.cc). Called from the agent's loop thread only.
#ifndef TESSERA_WORKER_COORDINATOR_LINK_H_
#define TESSERA_WORKER_COORDINATOR_LINK_H_

#include <cstdint>
#include <deque>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"

#include "tessera/v1/worker_service.pb.h"

namespace tessera::worker {

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  // Unary calls, each with its own short deadline, none longer than LongestCall().
  virtual grpc::Status Register(const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp) = 0;
  virtual grpc::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) = 0;
  virtual grpc::Status Report(const v1::ReportRankStatusRequest& req) = 0;
  // Drops the connection (and any assignment stream) for a fresh one: after a lost coordinator.
  virtual void Reconnect() = 0;
  // Opens the assignment stream of this registration, replacing (closing) any earlier one; the
  // coordinator sends again every order not acknowledged.
  virtual void OpenAssignments(const std::string& worker_id, int64_t session) = 0;
  // Orders received since the last call, in order (none when no stream is open).
  virtual std::deque<v1::Assignment> TakeAssignments() = 0;
  // Whether the open stream ended (the coordinator closed it or the connection broke).
  virtual bool AssignmentsBroken() const = 0;
  // The longest any one call above can hold its caller (its deadline).
  virtual absl::Duration LongestCall() const = 0;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_COORDINATOR_LINK_H_
