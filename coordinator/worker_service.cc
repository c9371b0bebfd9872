#include "coordinator/worker_service.h"

#include "common/rpc/status_conversion.h"
#include "coordinator/stream_wait.h"

namespace tessera::coordinator {

using rpc::ToGrpc;

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                               v1::RegisterWorkerResponse* resp) {
  RpcTimer timer(metrics_, "RegisterWorker");
  if (grpc::Status s = Authorize(ctx, "RegisterWorker", req->name()); !s.ok()) return s;
  auto r = coordinator_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse*) {
  RpcTimer timer(metrics_, "Heartbeat");
  if (grpc::Status s = Authorize(ctx, "Heartbeat", req->worker_id()); !s.ok()) return s;
  if (req->worker_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  return ToGrpc(coordinator_->Heartbeat(*req));
}

grpc::Status WorkerServiceImpl::StreamAssignments(grpc::ServerContext* ctx, const v1::StreamAssignmentsRequest* req,
                                                  grpc::ServerWriter<v1::Assignment>* writer) {
  RpcTimer timer(metrics_, "StreamAssignments");
  if (grpc::Status s = Authorize(ctx, "StreamAssignments", req->worker_id()); !s.ok()) return s;
  if (req->worker_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  const int64_t stream = coordinator_->StreamOpened(req->worker_id(), req->session());
  while (!ctx->IsCancelled()) {
    const absl::Duration wait = StreamWait(*ctx, absl::Milliseconds(500));
    if (wait <= absl::ZeroDuration()) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed");
    auto next = coordinator_->NextAssignment(req->worker_id(), wait, req->session(), stream);
    if (!next.ok()) return ToGrpc(next.status());
    if (next->has_value() && !writer->Write(**next)) {
      // Not delivered (nor is an order written just before the connection broke, necessarily): orders
      // stay with the coordinator until acknowledged, and the worker's next stream gets them again.
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker went away");
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ReportRankStatus(grpc::ServerContext* ctx, const v1::ReportRankStatusRequest* req,
                                                 v1::ReportRankStatusResponse*) {
  RpcTimer timer(metrics_, "ReportRankStatus");
  if (grpc::Status s = Authorize(ctx, "ReportRankStatus", req->worker_id()); !s.ok()) return s;
  if (req->worker_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  return ToGrpc(coordinator_->ReportRankStatus(*req));
}

}  // namespace tessera::coordinator
