// gRPC handlers of tessera.v1.WorkerService (the worker daemons' API) over a Coordinator.
#ifndef TESSERA_COORDINATOR_WORKER_SERVICE_H_
#define TESSERA_COORDINATOR_WORKER_SERVICE_H_

#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/worker_service.grpc.pb.h"

namespace tessera::coordinator {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `metrics` may be null.
  WorkerServiceImpl(Coordinator* coordinator, CoordinatorMetrics* metrics) : coordinator_(coordinator), metrics_(metrics) {}

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status StreamAssignments(grpc::ServerContext*, const v1::StreamAssignmentsRequest*,
                                 grpc::ServerWriter<v1::Assignment>*) override;
  grpc::Status ReportRankStatus(grpc::ServerContext*, const v1::ReportRankStatusRequest*,
                                v1::ReportRankStatusResponse*) override;

 private:
  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_SERVICE_H_
