#include "coordinator/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/rpc/status_conversion.h"
#include "coordinator/stream_wait.h"

namespace tessera::coordinator {

using rpc::ToGrpc;

namespace {
constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;

// Ids are "job-NNNNNN": anything long is not one (and is not echoed back in an error).
grpc::Status CheckJobId(const std::string& id) {
  if (id.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  if (id.size() > 64) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("job_id: ", id.size(), " bytes long, not a job id"));
  return grpc::Status::OK;
}
}  // namespace

grpc::Status CoordinatorServiceImpl::Authorize(grpc::ServerContext* ctx, const char* rpc, Caller* caller) {
  if (authorizer_ == nullptr) {
    *caller = Caller{"", true, ctx->peer()};
    return grpc::Status::OK;
  }
  return authorizer_->User(*ctx, rpc, caller);
}

grpc::Status CoordinatorServiceImpl::AuthorizeJob(const Caller& caller, const std::string& id, const char* rpc) {
  if (caller.admin) return grpc::Status::OK;  // Also: no authorizer, or no TLS.
  auto job = coordinator_->GetJob(id);
  if (!job.ok()) return ToGrpc(job.status());
  return authorizer_->Job(caller, *job, rpc);
}

grpc::Status CoordinatorServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                               v1::SubmitJobResponse* resp) {
  RpcTimer timer(metrics_, "SubmitJob");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "SubmitJob", &caller); !s.ok()) return s;
  if (!req->has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec: is required");
  auto job = coordinator_->Submit(req->spec(), req->max_restarts(), caller.user);
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                            v1::GetJobResponse* resp) {
  RpcTimer timer(metrics_, "GetJob");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "GetJob", &caller); !s.ok()) return s;
  if (grpc::Status s = CheckJobId(req->job_id()); !s.ok()) return s;
  if (grpc::Status s = AuthorizeJob(caller, req->job_id(), "GetJob"); !s.ok()) return s;
  auto job = coordinator_->GetJob(req->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                              v1::ListJobsResponse* resp) {
  RpcTimer timer(metrics_, "ListJobs");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "ListJobs", &caller); !s.ok()) return s;
  if (req->page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("page_size: ", req->page_size(), " must not be negative"));
  }
  if (req->page_token().size() > 128) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token: is not a token this coordinator returned");
  }
  const int page_size = req->page_size() == 0 ? kDefaultPageSize : std::min(req->page_size(), kMaxPageSize);
  std::string next;
  // A user sees their own jobs; an admin (and everyone without TLS) all of them.
  for (auto& job : coordinator_->ListJobsPage(page_size, req->page_token(), &next, caller.admin ? nullptr : &caller.user)) {
    *resp->add_jobs() = std::move(job);
  }
  resp->set_next_page_token(next);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                               v1::CancelJobResponse* resp) {
  RpcTimer timer(metrics_, "CancelJob");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "CancelJob", &caller); !s.ok()) return s;
  if (grpc::Status s = CheckJobId(req->job_id()); !s.ok()) return s;
  if (grpc::Status s = AuthorizeJob(caller, req->job_id(), "CancelJob"); !s.ok()) return s;
  auto job = coordinator_->Cancel(req->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *resp->mutable_job() = *job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                              grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  RpcTimer timer(metrics_, "WatchJob");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "WatchJob", &caller); !s.ok()) return s;
  if (grpc::Status s = CheckJobId(req->job_id()); !s.ok()) return s;
  if (grpc::Status s = AuthorizeJob(caller, req->job_id(), "WatchJob"); !s.ok()) return s;
  // Each open stream holds a server thread: a client gets a bounded number of them.
  std::string client = caller.user;
  if (client.empty()) {
    client = ctx->peer();
    client = client.substr(0, client.rfind(':'));  // The address without the port.
  }
  {
    absl::MutexLock lock(&streams_mu_);
    if (streams_[client] >= max_streams_) {
      if (metrics_ != nullptr) metrics_->CountDenied("WatchJob", "too_many_streams");
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("this client already has ", max_streams_, " WatchJob streams open"));
    }
    ++streams_[client];
  }
  struct Release {
    CoordinatorServiceImpl* self;
    std::string client;
    ~Release() {
      absl::MutexLock lock(&self->streams_mu_);
      if (--self->streams_[client] <= 0) self->streams_.erase(client);
    }
  } release{this, client};
  uint64_t seen = 0;
  bool first = true;
  while (!ctx->IsCancelled()) {
    const absl::Duration wait = StreamWait(*ctx, absl::Seconds(1));
    if (wait <= absl::ZeroDuration()) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed");
    auto change = coordinator_->WaitForJobChange(req->job_id(), seen, wait);
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

grpc::Status CoordinatorServiceImpl::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                                                 v1::ListWorkersResponse* resp) {
  RpcTimer timer(metrics_, "ListWorkers");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "ListWorkers", &caller); !s.ok()) return s;
  for (auto& w : coordinator_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ReleaseWorkerKey(grpc::ServerContext* ctx, const v1::ReleaseWorkerKeyRequest* req,
                                                      v1::ReleaseWorkerKeyResponse*) {
  RpcTimer timer(metrics_, "ReleaseWorkerKey");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "ReleaseWorkerKey", &caller); !s.ok()) return s;
  if (!caller.admin) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "ReleaseWorkerKey is for the coordinator's --admins: it lets another certificate take a worker's name");
  }
  if (req->name().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name: is required");
  return ToGrpc(coordinator_->worker_keys().Release(req->name()));
}

grpc::Status CoordinatorServiceImpl::PlanJob(grpc::ServerContext* ctx, const v1::PlanJobRequest* req,
                                             v1::PlanJobResponse* resp) {
  RpcTimer timer(metrics_, "PlanJob");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "PlanJob", &caller); !s.ok()) return s;
  if (!req->has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec: is required");
  auto plan = coordinator_->Plan(req->spec());
  if (!plan.ok()) return ToGrpc(plan.status());
  *resp = *plan;
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                                                v1::GetJobLogsResponse* resp) {
  RpcTimer timer(metrics_, "GetJobLogs");
  Caller caller;
  if (grpc::Status s = Authorize(ctx, "GetJobLogs", &caller); !s.ok()) return s;
  if (grpc::Status s = CheckJobId(req->job_id()); !s.ok()) return s;
  if (grpc::Status s = AuthorizeJob(caller, req->job_id(), "GetJobLogs"); !s.ok()) return s;
  auto logs = coordinator_->Logs(req->job_id(), req->rank(), req->offset(), req->max_bytes());
  if (!logs.ok()) return ToGrpc(logs.status());
  *resp = *logs;
  return grpc::Status::OK;
}

}  // namespace tessera::coordinator
