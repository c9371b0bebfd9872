// ReportQueue: the worker's rank reports (started, progress, exited) not yet delivered to the
// coordinator. Delivery keeps order; a report is dropped only when the coordinator refused it for
// good, never for a transient failure; when the queue is full, progress goes first (only its newest
// value matters) and a start or an exit is never dropped. Not thread-safe (the agent's loop owns it).
#ifndef TESSERA_WORKER_REPORT_QUEUE_H_
#define TESSERA_WORKER_REPORT_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>

#include <grpcpp/grpcpp.h>

#include "tessera/v1/worker_service.pb.h"

namespace tessera::worker {

// Whether a failed ReportRankStatus may succeed later: the coordinator was unreachable, slow or
// restarting (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, CANCELLED, INTERNAL, UNKNOWN).
// Refusals for good (INVALID_ARGUMENT, NOT_FOUND: the job is gone, FAILED_PRECONDITION, ...) are not.
bool IsTransient(const grpc::Status& status);

class ReportQueue {
 public:
  explicit ReportQueue(size_t max_progress = 1000) : max_progress_(max_progress) {}

  void Push(v1::ReportRankStatusRequest report);

  // Sends reports in order through `send` until one fails transiently (it stays first) or none is left.
  void Deliver(const std::function<grpc::Status(v1::ReportRankStatusRequest&)>& send);

  // The exits not yet delivered (they travel with a registration), and forgetting everything (after a
  // registration took them; starts and progress are stale then).
  std::vector<v1::ReportRankStatusRequest> Exits() const;
  void Clear() { queue_.clear(); }

  size_t size() const { return queue_.size(); }

 private:
  size_t max_progress_;
  std::deque<v1::ReportRankStatusRequest> queue_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_REPORT_QUEUE_H_
