// GrpcCoordinatorLink: CoordinatorLink over gRPC (mutual TLS when configured). The assignment stream
// is read on a thread of its own into a queue that TakeAssignments() drains.
#ifndef TESSERA_WORKER_GRPC_COORDINATOR_LINK_H_
#define TESSERA_WORKER_GRPC_COORDINATOR_LINK_H_

#include <memory>
#include <optional>
#include <string>

#include "common/rpc/tls.h"
#include "tessera/v1/worker_service.grpc.pb.h"
#include "worker/coordinator_link.h"

namespace tessera::worker {

class AssignmentReader;

class GrpcCoordinatorLink final : public CoordinatorLink {
 public:
  GrpcCoordinatorLink(std::string coordinator, std::optional<rpc::TlsMaterial> tls);
  ~GrpcCoordinatorLink() override;

  grpc::Status Register(const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) override;
  grpc::Status Report(const v1::ReportRankStatusRequest& req) override;
  void Reconnect() override;
  void OpenAssignments(const std::string& worker_id, int64_t session) override;
  std::deque<v1::Assignment> TakeAssignments() override;
  bool AssignmentsBroken() const override;
  absl::Duration LongestCall() const override;  // Register's 3 s.

 private:
  std::string coordinator_;
  std::optional<rpc::TlsMaterial> tls_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::unique_ptr<AssignmentReader> reader_;  // Declared after stub_: destroyed first.
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_GRPC_COORDINATOR_LINK_H_
