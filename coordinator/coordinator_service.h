// gRPC handlers of tessera.v1.CoordinatorService (the CLI's API) over a Coordinator.
#ifndef TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_
#define TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_

#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"

namespace tessera::coordinator {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  // `metrics` may be null.
  CoordinatorServiceImpl(Coordinator* coordinator, CoordinatorMetrics* metrics) : coordinator_(coordinator), metrics_(metrics) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::GetJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::CancelJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*, v1::ListWorkersResponse*) override;
  grpc::Status PlanJob(grpc::ServerContext*, const v1::PlanJobRequest*, v1::PlanJobResponse*) override;
  grpc::Status GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest*, v1::GetJobLogsResponse*) override;

 private:
  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_
