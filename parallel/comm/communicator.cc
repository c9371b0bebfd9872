#include "parallel/comm/communicator.h"

#include <c10/util/Exception.h>

namespace tessera::parallel {
namespace {

class FinishedWork final : public CommWork {
 public:
  explicit FinishedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

std::unique_ptr<CommWork> DoneWork(absl::Status status) { return std::make_unique<FinishedWork>(std::move(status)); }

std::unique_ptr<CommWork> Communicator::AllGatherAsync(const at::Tensor& in, at::Tensor& out) {
  return DoneWork(AllGather(in, out));
}

std::unique_ptr<CommWork> Communicator::ReduceScatterAsync(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  return DoneWork(ReduceScatter(in, out, op));
}

absl::Status Communicator::Reduce(at::Tensor& t, int /*root*/, ReduceOp op) { return AllReduce(t, op); }

std::unique_ptr<CommWork> Communicator::SendAsync(const at::Tensor& t, int dst, int tag) {
  return DoneWork(Send(t, dst, tag));
}

std::unique_ptr<CommWork> Communicator::RecvAsync(at::Tensor& t, int src, int tag) {
  return DoneWork(Recv(t, src, tag));
}

void Communicator::CountAllReduce(int64_t bytes) {
  const int n = size();
  bytes_all_reduced_ += bytes;
  if (n > 1) bytes_communicated_ += 2 * (n - 1) * bytes / n;
}

void Communicator::CountShare(int64_t bytes) {
  const int n = size();
  if (n > 1) bytes_communicated_ += (n - 1) * bytes / n;
}

void Communicator::CountWhole(int64_t bytes) {
  if (size() > 1) bytes_communicated_ += bytes;
}

void ThrowIfError(const absl::Status& status) { TORCH_CHECK(status.ok(), status.ToString()); }

}  // namespace tessera::parallel
