// gRPC handlers of tessera.v1.WorkerService (the worker daemons' API) over a Coordinator.
#ifndef TESSERA_COORDINATOR_WORKER_SERVICE_H_
#define TESSERA_COORDINATOR_WORKER_SERVICE_H_

#include "coordinator/authorizer.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/worker_service.grpc.pb.h"

namespace tessera::coordinator {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `metrics` may be null; `authorizer` null: no checks (unit tests of the handlers).
  WorkerServiceImpl(Coordinator* coordinator, CoordinatorMetrics* metrics, const Authorizer* authorizer = nullptr)
      : coordinator_(coordinator), metrics_(metrics), authorizer_(authorizer) {}

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status StreamAssignments(grpc::ServerContext*, const v1::StreamAssignmentsRequest*,
                                 grpc::ServerWriter<v1::Assignment>*) override;
  grpc::Status ReportRankStatus(grpc::ServerContext*, const v1::ReportRankStatusRequest*,
                                v1::ReportRankStatusResponse*) override;

 private:
  // OK when the caller may act as worker `name`.
  grpc::Status Authorize(grpc::ServerContext* ctx, const char* rpc, const std::string& name) const {
    return authorizer_ == nullptr ? grpc::Status::OK : authorizer_->Worker(*ctx, rpc, name);
  }

  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
  const Authorizer* authorizer_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_SERVICE_H_
