// HeartbeatCall: one long-lived WorkerService.Heartbeats call of a worker daemon. The agent's loop
// sends a heartbeat and waits (with a deadline) for its answer; the answers are read by gRPC's
// callback threads. Costs the coordinator far less per heartbeat than a unary call (measured in
// bench/RESULTS.md, "Coordinator under load").
#ifndef TESSERA_WORKER_HEARTBEAT_CALL_H_
#define TESSERA_WORKER_HEARTBEAT_CALL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <grpcpp/grpcpp.h>

#include "tessera/v1/worker_service.grpc.pb.h"

namespace tessera::worker {

class HeartbeatCall final : public grpc::ClientBidiReactor<v1::HeartbeatRequest, v1::HeartbeatResponse> {
 public:
  // Opens the call on `stub` (which must outlive it).
  explicit HeartbeatCall(v1::WorkerService::Stub* stub);
  // Cancels the call and waits until gRPC is done with it.
  ~HeartbeatCall() override;

  // Sends `req` and waits up to `timeout` for its answer. Not OK: the call ended with that status (the
  // coordinator's refusal, or the connection's end), or DEADLINE_EXCEEDED; the call is then of no
  // further use (ended()). One caller at a time.
  grpc::Status Beat(v1::HeartbeatRequest req, std::chrono::milliseconds timeout);
  // Whether the call is over (Beat would fail at once).
  bool ended();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::ClientContext ctx_;
  v1::HeartbeatRequest req_;    // Being written.
  v1::HeartbeatResponse resp_;  // Being read.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t beat_ = 0;            // The newest heartbeat sent (loop thread only).
  int64_t answered_ = 0;        // The newest heartbeat answered.
  bool writing_ = false;        // A write is in flight (req_ in use).
  bool timed_out_ = false;      // A heartbeat went unanswered: the call is of no further use.
  bool done_ = false;           // OnDone ran; `status_` says how the call ended.
  grpc::Status status_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_HEARTBEAT_CALL_H_
