#include "coordinator/worker_orders.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

int64_t WorkerOrders::Send(v1::Assignment a, uint64_t after, uint64_t durable) {
  a.set_seq(++last_seq_);
  queue_.push_back({std::make_shared<const v1::Assignment>(std::move(a)), after});
  held_until_ = std::max(held_until_, after);
  Flush(durable);
  return last_seq_;
}

std::shared_ptr<const v1::Assignment> WorkerOrders::PopFront() {
  std::shared_ptr<const v1::Assignment> a = std::move(queue_.front().order);
  queue_.pop_front();
  if (a->seq() > 0) sent_.push_back(a);  // Until acknowledged.
  return a;
}

void WorkerOrders::Flush(uint64_t durable) {
  while (sink_ != nullptr && FrontReady(durable)) sink_->Deliver(PopFront());
}

std::shared_ptr<const v1::Assignment> WorkerOrders::Take(uint64_t durable) {
  return FrontReady(durable) ? PopFront() : nullptr;
}

void WorkerOrders::Open(int64_t stream, const absl::Status& end_previous) {
  EndSink(end_previous);
  // Given orders were durable when they left: they wait for nothing now.
  for (auto it = sent_.rbegin(); it != sent_.rend(); ++it) queue_.push_front({std::move(*it), 0});
  sent_.clear();
  stream_ = stream;
}

void WorkerOrders::Attach(AssignmentSink* sink, uint64_t durable) {
  sink_ = sink;
  Flush(durable);
}

void WorkerOrders::Detach(int64_t stream) {
  if (stream == stream_) sink_ = nullptr;
}

void WorkerOrders::EndSink(const absl::Status& status) {
  if (sink_ == nullptr) return;
  AssignmentSink* sink = sink_;
  sink_ = nullptr;
  sink->End(status);
}

absl::Status WorkerOrders::Acknowledge(int64_t applied_seq) {
  if (applied_seq < 0 || applied_seq > last_seq_) {
    return absl::InvalidArgumentError(absl::StrCat("applied_seq: ", applied_seq,
                                                   " is not an order of this session (the newest is ", last_seq_, ")"));
  }
  applied_seq_ = std::max(applied_seq_, applied_seq);
  while (!sent_.empty() && sent_.front()->seq() <= applied_seq_) sent_.pop_front();
  return absl::OkStatus();
}

void WorkerOrders::Drop(const absl::Status& status) {
  queue_.clear();
  sent_.clear();
  EndSink(status);
}

void WorkerOrders::NewSession(const absl::Status& status) {
  Drop(status);
  last_seq_ = 0;
  applied_seq_ = 0;
}

}  // namespace tessera::coordinator
