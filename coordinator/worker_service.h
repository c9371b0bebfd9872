// gRPC handlers of tessera.v1.WorkerService (the worker daemons' API) over a Coordinator.
#ifndef TESSERA_COORDINATOR_WORKER_SERVICE_H_
#define TESSERA_COORDINATOR_WORKER_SERVICE_H_

#include "absl/synchronization/mutex.h"
#include "coordinator/authorizer.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/worker_service.grpc.pb.h"

namespace tessera::coordinator {

// Heartbeat and StreamAssignments are callback methods: they run on gRPC's own threads. No server
// thread is held per open assignment stream (the coordinator pushes orders into its reactor), so
// the number of workers is not bounded by --max_threads, and a heartbeat has no hand-off to a
// server thread.
class WorkerServiceImpl final
    : public v1::WorkerService::WithCallbackMethod_Heartbeat<
          v1::WorkerService::WithCallbackMethod_StreamAssignments<v1::WorkerService::Service>> {
 public:
  // `metrics` may be null; `authorizer` null: no checks (unit tests of the handlers).
  WorkerServiceImpl(Coordinator* coordinator, CoordinatorMetrics* metrics, const Authorizer* authorizer = nullptr)
      : coordinator_(coordinator), metrics_(metrics), authorizer_(authorizer) {}
  // Waits until every assignment stream it opened is done (they end with their calls: the server's
  // shutdown, the worker's going away, their deadline).
  ~WorkerServiceImpl() override;

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse*) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext*, const v1::HeartbeatRequest*,
                                      v1::HeartbeatResponse*) override;
  // What Heartbeat answers (also for a caller that is not a gRPC callback: the RPC fuzzer's forwarder).
  grpc::Status HeartbeatStatus(grpc::ServerContextBase* ctx, const v1::HeartbeatRequest& req);
  grpc::ServerWriteReactor<v1::Assignment>* StreamAssignments(grpc::CallbackServerContext*,
                                                              const v1::StreamAssignmentsRequest*) override;
  grpc::Status ReportRankStatus(grpc::ServerContext*, const v1::ReportRankStatusRequest*,
                                v1::ReportRankStatusResponse*) override;

 private:
  // OK when the caller may act as worker `name`.
  grpc::Status Authorize(grpc::ServerContextBase* ctx, const char* rpc, const std::string& name) const {
    return authorizer_ == nullptr ? grpc::Status::OK : authorizer_->Worker(*ctx, rpc, name);
  }
  // Authorize, and with TLS: the caller's certificate carries the key the name is bound to
  // (WorkerKeys::CheckCertificate), and `session` is a registration's (0, "not checked", is
  // for in-process callers only). For every worker RPC but RegisterWorker.
  grpc::Status AuthorizeRegistered(grpc::ServerContextBase* ctx, const char* rpc, const std::string& name,
                                   const int64_t* session) const;

  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
  const Authorizer* authorizer_;
  // Held by a TLS registration from the bind of its key to the coordinator's answer: a binding that a
  // refused registration made is taken back before another registration of the name (say, with the
  // same certificate) could be accepted on it. Taken before the coordinator's lock, never inside it.
  absl::Mutex registration_mu_;
  absl::Mutex streams_mu_;
  int open_streams_ ABSL_GUARDED_BY(streams_mu_) = 0;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_SERVICE_H_
