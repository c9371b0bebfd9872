#include "parallel/comm/self_communicator.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace tessera::parallel {
namespace {

absl::Status CopyInto(const at::Tensor& in, at::Tensor& out) {
  if (!out.sizes().equals(in.sizes())) {
    return absl::InvalidArgumentError("output shape differs from input shape in a group of one");
  }
  if (!out.is_same(in)) out.copy_(in);
  return absl::OkStatus();
}

}  // namespace

SelfCommunicator::SelfCommunicator(int global_rank, std::string name)
    : members_{global_rank}, name_(std::move(name)) {}

absl::Status SelfCommunicator::AllReduce(at::Tensor& t, ReduceOp) {
  bytes_all_reduced_ += t.numel() * t.element_size();
  return absl::OkStatus();
}

std::unique_ptr<CommWork> SelfCommunicator::AllReduceAsync(at::Tensor& t, ReduceOp op) {
  AllReduce(t, op).IgnoreError();
  return DoneWork(absl::OkStatus());
}

absl::Status SelfCommunicator::AllGather(const at::Tensor& in, at::Tensor& out) {
  return CopyInto(in, out);
}

absl::Status SelfCommunicator::ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp) {
  return CopyInto(in, out);
}

absl::Status SelfCommunicator::Broadcast(at::Tensor&, int root) {
  return root == 0 ? absl::OkStatus() : absl::InvalidArgumentError("broadcast root out of range");
}

absl::Status SelfCommunicator::AllToAll(const at::Tensor& in, at::Tensor& out) {
  return CopyInto(in, out);
}

absl::Status SelfCommunicator::AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                                          at::Tensor& out, const std::vector<int64_t>& recv_rows) {
  absl::Status s = CheckRowSplits(name(), 1, in, send_rows, out, recv_rows);
  return s.ok() ? CopyInto(in, out) : s;
}

absl::Status SelfCommunicator::Send(const at::Tensor&, int, int) {
  return absl::FailedPreconditionError("send in a group of one has no peer");
}

absl::Status SelfCommunicator::Recv(at::Tensor&, int, int) {
  return absl::FailedPreconditionError("recv in a group of one has no peer");
}

}  // namespace tessera::parallel
