#include "coordinator/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc/status_conversion.h"

namespace tessera::coordinator {

using rpc::ToGrpc;

namespace {
constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
}  // namespace

grpc::Status CoordinatorServiceImpl::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                                               v1::SubmitJobResponse* resp) {
  RpcTimer timer(metrics_, "SubmitJob");
  if (!req->has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec: is required");
  auto job = coordinator_->Submit(req->spec(), req->max_restarts());
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                                            v1::GetJobResponse* resp) {
  RpcTimer timer(metrics_, "GetJob");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  auto job = coordinator_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                              v1::ListJobsResponse* resp) {
  RpcTimer timer(metrics_, "ListJobs");
  if (req->page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("page_size: ", req->page_size(), " must not be negative"));
  }
  if (req->page_token().size() > 128) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token: is not a token this coordinator returned");
  }
  const int page_size = req->page_size() == 0 ? kDefaultPageSize : std::min(req->page_size(), kMaxPageSize);
  std::string next;
  for (auto& job : coordinator_->ListJobsPage(page_size, req->page_token(), &next)) *resp->add_jobs() = std::move(job);
  resp->set_next_page_token(next);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                                               v1::CancelJobResponse* resp) {
  RpcTimer timer(metrics_, "CancelJob");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  auto job = coordinator_->Cancel(req->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                              grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  RpcTimer timer(metrics_, "WatchJob");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  uint64_t seen = 0;
  bool first = true;
  while (!ctx->IsCancelled()) {
    auto change = coordinator_->WaitForJobChange(req->job_id(), seen, absl::Seconds(1));
    if (!change.ok()) return ToGrpc(change.status());
    if (change->second == seen && !first) continue;
    first = false;
    seen = change->second;
    v1::WatchJobResponse resp;
    *resp.mutable_job() = change->first;
    if (!writer->Write(resp)) return grpc::Status::OK;  // The client went away.
    if (IsTerminal(change->first.state())) return grpc::Status::OK;
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                                 v1::ListWorkersResponse* resp) {
  RpcTimer timer(metrics_, "ListWorkers");
  for (auto& w : coordinator_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::PlanJob(grpc::ServerContext*, const v1::PlanJobRequest* req,
                                             v1::PlanJobResponse* resp) {
  RpcTimer timer(metrics_, "PlanJob");
  if (!req->has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec: is required");
  auto plan = coordinator_->Plan(req->spec());
  if (!plan.ok()) return ToGrpc(plan.status());
  *resp = *plan;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest* req,
                                                v1::GetJobLogsResponse* resp) {
  RpcTimer timer(metrics_, "GetJobLogs");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  auto logs = coordinator_->Logs(req->job_id(), req->rank(), req->offset(), req->max_bytes());
  if (!logs.ok()) return ToGrpc(logs.status());
  *resp = *logs;
  return grpc::Status::OK;
}

}  // namespace tessera::coordinator
