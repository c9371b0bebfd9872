// gRPC handlers of tessera.v1.CoordinatorService (the CLI's API) over a Coordinator.
#ifndef TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_
#define TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_

#include <map>

#include "absl/synchronization/mutex.h"
#include "coordinator/authorizer.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"

namespace tessera::coordinator {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  // `metrics` may be null; `authorizer` null: no checks (unit tests of the handlers).
  // A client (a user; without TLS, a peer address) holds at most `max_streams_per_client` WatchJob
  // streams at once.
  CoordinatorServiceImpl(Coordinator* coordinator, CoordinatorMetrics* metrics, const Authorizer* authorizer = nullptr,
                         int max_streams_per_client = 16)
      : coordinator_(coordinator), metrics_(metrics), authorizer_(authorizer), max_streams_(max_streams_per_client) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::GetJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::CancelJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*, v1::ListWorkersResponse*) override;
  grpc::Status ReleaseWorkerKey(grpc::ServerContext*, const v1::ReleaseWorkerKeyRequest*,
                                v1::ReleaseWorkerKeyResponse*) override;
  grpc::Status PlanJob(grpc::ServerContext*, const v1::PlanJobRequest*, v1::PlanJobResponse*) override;
  grpc::Status GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest*, v1::GetJobLogsResponse*) override;

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx, const char* rpc, Caller* caller);
  // The job `id` if `caller` may see it (NOT_FOUND, PERMISSION_DENIED otherwise).
  grpc::Status AuthorizeJob(const Caller& caller, const std::string& id, const char* rpc);

  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
  const Authorizer* authorizer_;
  const int max_streams_;
  absl::Mutex streams_mu_;
  std::map<std::string, int> streams_ ABSL_GUARDED_BY(streams_mu_);  // Open WatchJob streams per client.
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_COORDINATOR_SERVICE_H_
