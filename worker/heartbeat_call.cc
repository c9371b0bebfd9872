#include "worker/heartbeat_call.h"

namespace tessera::worker {

HeartbeatCall::HeartbeatCall(v1::WorkerService::Stub* stub) {
  // The call lives as long as the registration; a day-long deadline bounds a forgotten one.
  ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(24));
  stub->async()->Heartbeats(&ctx_, this);
  StartRead(&resp_);
  StartCall();
}

HeartbeatCall::~HeartbeatCall() {
  ctx_.TryCancel();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
}

grpc::Status HeartbeatCall::Beat(v1::HeartbeatRequest req, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  if (timed_out_) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "an earlier heartbeat of this call went unanswered");
  }
  // The previous write's completion may trail its answer by a moment.
  if (cv_.wait_until(lock, deadline, [this] { return done_ || !writing_; })) {
    if (done_) return status_;
    req.set_beat(++beat_);
    req_ = std::move(req);
    writing_ = true;
    StartWrite(&req_);
    const int64_t beat = beat_;
    if (cv_.wait_until(lock, deadline, [&] { return done_ || answered_ >= beat; })) {
      return answered_ >= beat ? grpc::Status::OK : status_;
    }
  }
  timed_out_ = true;
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the coordinator did not answer the heartbeat in time");
}

bool HeartbeatCall::ended() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ || timed_out_;
}

void HeartbeatCall::OnWriteDone(bool /*ok*/) {
  // Not ok: the call is broken, and OnDone says how.
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  cv_.notify_all();
}

void HeartbeatCall::OnReadDone(bool ok) {
  if (!ok) return;  // The call ends: OnDone follows.
  {
    std::lock_guard<std::mutex> lock(mu_);
    answered_ = resp_.beat();
    cv_.notify_all();
  }
  StartRead(&resp_);
}

void HeartbeatCall::OnDone(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  // The coordinator ends a call with OK only when the worker closed it; any end is an error to Beat.
  status_ = status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator ended the heartbeat call")
                        : status;
  done_ = true;
  cv_.notify_all();  // Under the lock: the destructor cannot return before this call has left it.
}

}  // namespace tessera::worker
