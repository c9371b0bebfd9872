#include "worker/report_queue.h"

#include <algorithm>

namespace tessera::worker {

bool IsTransient(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
}

void ReportQueue::Push(v1::ReportRankStatusRequest report) {
  queue_.push_back(std::move(report));
  auto is_progress = [](const v1::ReportRankStatusRequest& r) {
    return r.event() == v1::ReportRankStatusRequest::EVENT_PROGRESS;
  };
  size_t progress = static_cast<size_t>(std::count_if(queue_.begin(), queue_.end(), is_progress));
  // Over the bound: the oldest progress reports go (a newer one of the same rank says more).
  for (auto it = queue_.begin(); progress > max_progress_ && it != queue_.end();) {
    if (is_progress(*it)) {
      it = queue_.erase(it);
      --progress;
    } else {
      ++it;
    }
  }
}

void ReportQueue::Deliver(const std::function<grpc::Status(v1::ReportRankStatusRequest&)>& send) {
  while (!queue_.empty()) {
    const grpc::Status s = send(queue_.front());
    if (!s.ok() && IsTransient(s)) return;  // Kept, in order, for the next round.
    queue_.pop_front();                     // Delivered, or refused for good.
  }
}

std::vector<v1::ReportRankStatusRequest> ReportQueue::Exits() const {
  std::vector<v1::ReportRankStatusRequest> out;
  for (const auto& r : queue_) {
    if (r.event() == v1::ReportRankStatusRequest::EVENT_EXITED) out.push_back(r);
  }
  return out;
}

}  // namespace tessera::worker
