#include "worker/grpc_coordinator_link.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include "common/rpc/channel.h"

namespace tessera::worker {
namespace {

// The longest of the unary calls' deadlines (Heartbeat and Report: 2 s).
constexpr std::chrono::milliseconds kRegisterDeadline{3000};

std::unique_ptr<grpc::ClientContext> WithDeadline(std::chrono::milliseconds d) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + d);
  return ctx;
}

}  // namespace

// Reads the assignment stream on its own thread into a queue the agent's loop drains.
class AssignmentReader {
 public:
  AssignmentReader(v1::WorkerService::Stub* stub, const std::string& worker_id, int64_t session) {
    // The stream lives as long as the registration; a day-long deadline bounds a forgotten stream.
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(24));
    v1::StreamAssignmentsRequest req;
    req.set_worker_id(worker_id);
    req.set_session(session);
    thread_ = std::thread([this, stub, req] {
      auto reader = stub->StreamAssignments(&ctx_, req);
      v1::Assignment a;
      while (reader->Read(&a)) {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(a);
      }
      reader->Finish();
      broken_ = true;
    });
  }
  ~AssignmentReader() {
    ctx_.TryCancel();
    thread_.join();
  }
  bool broken() const { return broken_; }
  std::deque<v1::Assignment> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<v1::Assignment> out;
    out.swap(queue_);
    return out;
  }

 private:
  grpc::ClientContext ctx_;
  std::thread thread_;
  std::mutex mu_;
  std::deque<v1::Assignment> queue_;
  std::atomic<bool> broken_{false};
};

GrpcCoordinatorLink::GrpcCoordinatorLink(std::string coordinator, std::optional<rpc::TlsMaterial> tls)
    : coordinator_(std::move(coordinator)), tls_(std::move(tls)) {
  Reconnect();
}

GrpcCoordinatorLink::~GrpcCoordinatorLink() = default;

void GrpcCoordinatorLink::Reconnect() {
  reader_.reset();
  // A new channel after every lost connection: gRPC 1.51's TLS channel that lost its coordinator
  // failed every handshake with the restarted one (measured: a fresh channel connects at once).
  rpc::ChannelOptions options;
  options.tls = tls_;
  stub_ = v1::WorkerService::NewStub(rpc::OpenChannel(coordinator_, options));
}

grpc::Status GrpcCoordinatorLink::Register(const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp) {
  return stub_->RegisterWorker(WithDeadline(kRegisterDeadline).get(), req, resp);
}

grpc::Status GrpcCoordinatorLink::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) {
  return stub_->Heartbeat(WithDeadline(std::chrono::seconds(2)).get(), req, resp);
}

grpc::Status GrpcCoordinatorLink::Report(const v1::ReportRankStatusRequest& req) {
  v1::ReportRankStatusResponse resp;
  return stub_->ReportRankStatus(WithDeadline(std::chrono::seconds(2)).get(), req, &resp);
}

void GrpcCoordinatorLink::OpenAssignments(const std::string& worker_id, int64_t session) {
  reader_.reset();  // The old stream ends before the new one asks for the unacknowledged orders.
  reader_ = std::make_unique<AssignmentReader>(stub_.get(), worker_id, session);
}

std::deque<v1::Assignment> GrpcCoordinatorLink::TakeAssignments() {
  return reader_ ? reader_->Take() : std::deque<v1::Assignment>();
}

absl::Duration GrpcCoordinatorLink::LongestCall() const { return absl::FromChrono(kRegisterDeadline); }

bool GrpcCoordinatorLink::AssignmentsBroken() const {
  return reader_ && reader_->broken();
}

}  // namespace tessera::worker
