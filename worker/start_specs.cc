#include "worker/start_specs.h"

namespace tessera::worker {

std::optional<v1::Assignment> StartSpecs::Complete(const v1::Assignment& order) {
  if (order.has_spec()) {
    auto [it, inserted] = by_job_.insert_or_assign(order.job_id(), std::make_pair(order.attempt(), order.spec()));
    if (inserted) {
      arrival_.push_back(order.job_id());
      while (by_job_.size() > kKeptJobs) {
        by_job_.erase(arrival_.front());
        arrival_.pop_front();
      }
    }
    return order;
  }
  auto it = by_job_.find(order.job_id());
  if (it == by_job_.end() || it->second.first != order.attempt()) return std::nullopt;
  v1::Assignment complete = order;
  *complete.mutable_spec() = it->second.second;
  return complete;
}

void StartSpecs::Clear() {
  by_job_.clear();
  arrival_.clear();
}

}  // namespace tessera::worker
