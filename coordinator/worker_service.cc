#include "common/rpc/tls.h"
#include "coordinator/worker_service.h"

#include "common/rpc/status_conversion.h"
#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tessera::coordinator {

using rpc::ToGrpc;

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                               v1::RegisterWorkerResponse* resp) {
  RpcTimer timer(metrics_, "RegisterWorker");
  if (grpc::Status s = Authorize(ctx, "RegisterWorker", req->name()); !s.ok()) return s;
  // With TLS the name is bound to the key of the certificate that first registered it — before the
  // registration is accepted, so that from its acceptance on no other certificate may act as the
  // name (heartbeat, stream, report); a binding whose registration is refused is taken back. A
  // binding the store refuses fails the registration (the name is never accepted unbound).
  std::string key;
  bool bound_now = false;
  std::optional<absl::MutexLock> registering;  // One TLS registration at a time, from bind to accept.
  if (authorizer_ != nullptr && authorizer_->tls()) {
    registering.emplace(&registration_mu_);
    auto peer_key = rpc::PeerKeySha256(*ctx);
    if (!peer_key.ok()) return ToGrpc(peer_key.status());
    key = *peer_key;
    if (absl::Status s = coordinator_->worker_keys().Bind(req->name(), key, &bound_now); !s.ok()) return ToGrpc(s);
  }
  auto r = coordinator_->RegisterWorker(*req);
  if (!r.ok()) {
    if (bound_now) {
      coordinator_->worker_keys()
          .Unbind(req->name(), absl::StrCat("key taken back: its first registration was refused (",
                                            r.status().message().substr(0, 200), ")"))
          .IgnoreError();
    }
    return ToGrpc(r.status());
  }
  if (!key.empty()) {
    (void)coordinator_->worker_keys().CheckCertificate(req->name(), rpc::PeerCertificatePem(*ctx));  // Caches it.
  }
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::AuthorizeRegistered(grpc::ServerContextBase* ctx, const char* rpc, const std::string& name,
                                                    const int64_t* session) const {
  if (grpc::Status s = Authorize(ctx, rpc, name); !s.ok()) return s;
  if (authorizer_ == nullptr || !authorizer_->tls()) return grpc::Status::OK;
  if (session != nullptr && *session == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(rpc, ": session: is required (the session of the worker's accepted registration)"));
  }
  return ToGrpc(coordinator_->worker_keys().CheckCertificate(name, rpc::PeerCertificatePem(*ctx)));
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Heartbeat(grpc::CallbackServerContext* ctx,
                                                       const v1::HeartbeatRequest* req, v1::HeartbeatResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(HeartbeatStatus(ctx, *req));
  return reactor;
}

grpc::Status WorkerServiceImpl::HeartbeatStatus(grpc::ServerContextBase* ctx, const v1::HeartbeatRequest& req) {
  RpcTimer timer(metrics_, "Heartbeat");
  const int64_t session = req.session();
  if (grpc::Status s = AuthorizeRegistered(ctx, "Heartbeat", req.worker_id(), &session); !s.ok()) return s;
  if (req.worker_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  // Coordinator::Heartbeat waits for nothing but short critical sections: fine on a callback thread.
  return ToGrpc(coordinator_->Heartbeat(req));
}

namespace {

// One open StreamAssignments call: orders pushed by the coordinator (AssignmentSink, under its lock)
// are written one at a time in order; the call ends when the coordinator ends the stream, the worker
// goes away, or the deadline passes. Deletes itself when gRPC is done with it.
class AssignmentStream final : public grpc::ServerWriteReactor<v1::Assignment>, public AssignmentSink {
 public:
  // `done` is called last, when gRPC is done with the stream.
  AssignmentStream(Coordinator* coordinator, CoordinatorMetrics* metrics, std::string worker_id,
                   std::function<void()> done)
      : coordinator_(coordinator), metrics_(metrics), worker_id_(std::move(worker_id)), done_(std::move(done)),
        start_(std::chrono::steady_clock::now()) {}

  // Attaches to the coordinator, or finishes at once with why it may not.
  void Open(int64_t session) {
    absl::StatusOr<int64_t> stream = coordinator_->AttachAssignmentSink(worker_id_, session, this);
    if (!stream.ok()) {
      End(stream.status());
      return;
    }
    absl::MutexLock lock(&mu_);
    stream_ = *stream;
  }
  void Refuse(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void Deliver(std::shared_ptr<const v1::Assignment> a) override {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;  // Stays unacknowledged: the worker's next stream gets it again.
    pending_.push_back(std::move(a));
    WriteNextLocked();
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    end_ = ToGrpc(status);
    if (!writing_) FinishLocked(*end_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // Not delivered (nor is an order written just before the connection broke, necessarily): orders
      // stay with the coordinator until acknowledged, and the worker's next stream gets them again.
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker went away"));
      return;
    }
    if (end_) {
      FinishLocked(*end_);
      return;
    }
    WriteNextLocked();
  }
  void OnCancel() override {
    // The worker went away or the deadline passed.
    absl::MutexLock lock(&mu_);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the call ended"));
    else if (!end_) end_ = grpc::Status(grpc::StatusCode::CANCELLED, "the call ended");
  }
  void OnDone() override {
    int64_t stream = 0;
    {
      absl::MutexLock lock(&mu_);
      stream = stream_;
    }
    // After this the coordinator calls nothing on this sink (Detach takes its lock).
    if (stream != 0) coordinator_->DetachAssignmentSink(worker_id_, stream);
    if (metrics_ != nullptr) {
      metrics_->ObserveRpc("StreamAssignments",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    std::function<void()> done = std::move(done_);
    delete this;
    done();
  }

 private:
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(current_.get());
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    pending_.clear();
    Finish(status);
  }

  Coordinator* const coordinator_;
  CoordinatorMetrics* const metrics_;
  const std::string worker_id_;
  std::function<void()> done_;
  const std::chrono::steady_clock::time_point start_;
  absl::Mutex mu_;  // Taken inside the coordinator's lock (Deliver, End), never around it.
  int64_t stream_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<const v1::Assignment>> pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::Assignment> current_ ABSL_GUARDED_BY(mu_);  // Being written.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);  // Finish with it once the write in flight is done.
};

}  // namespace

WorkerServiceImpl::~WorkerServiceImpl() {
  absl::MutexLock lock(&streams_mu_);
  streams_mu_.Await(absl::Condition(
      +[](int* open) { return *open == 0; }, &open_streams_));
}

grpc::ServerWriteReactor<v1::Assignment>* WorkerServiceImpl::StreamAssignments(grpc::CallbackServerContext* ctx,
                                                                              const v1::StreamAssignmentsRequest* req) {
  {
    absl::MutexLock lock(&streams_mu_);
    ++open_streams_;
  }
  auto* stream = new AssignmentStream(coordinator_, metrics_, req->worker_id(), [this] {
    absl::MutexLock lock(&streams_mu_);
    --open_streams_;
  });
  const int64_t session = req->session();
  grpc::Status status = AuthorizeRegistered(ctx, "StreamAssignments", req->worker_id(), &session);
  if (status.ok() && req->worker_id().empty()) {
    status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  }
  if (!status.ok()) {
    stream->Refuse(status);
  } else {
    stream->Open(req->session());
  }
  return stream;
}

grpc::Status WorkerServiceImpl::ReportRankStatus(grpc::ServerContext* ctx, const v1::ReportRankStatusRequest* req,
                                                 v1::ReportRankStatusResponse*) {
  RpcTimer timer(metrics_, "ReportRankStatus");
  if (grpc::Status s = AuthorizeRegistered(ctx, "ReportRankStatus", req->worker_id(), nullptr); !s.ok()) return s;
  if (req->worker_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: is required");
  if (req->job_id().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: is required");
  return ToGrpc(coordinator_->ReportRankStatus(*req));
}

}  // namespace tessera::coordinator
