#include "parallel/comm/communicator.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

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

absl::Status CheckRowSplits(const std::string& group, int members, const at::Tensor& in,
                            const std::vector<int64_t>& send_rows, const at::Tensor& out,
                            const std::vector<int64_t>& recv_rows) {
  auto sum = [](const std::vector<int64_t>& v) {
    int64_t n = 0;
    for (int64_t x : v) n += x < 0 ? -(int64_t{1} << 62) : x;
    return n;
  };
  if (static_cast<int>(send_rows.size()) != members || static_cast<int>(recv_rows.size()) != members) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all_rows on ", group, ": ", send_rows.size(), " and ",
                                                   recv_rows.size(), " row counts for ", members, " members"));
  }
  if (in.dim() < 1 || out.dim() < 1 || sum(send_rows) != in.size(0) || sum(recv_rows) != out.size(0) ||
      in.numel() / std::max<int64_t>(1, in.size(0)) != out.numel() / std::max<int64_t>(1, out.size(0)) ||
      in.scalar_type() != out.scalar_type() || !out.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all_rows on ", group,
                                                   ": row counts must sum to the rows of in and out, rows of one "
                                                   "size and dtype, out contiguous"));
  }
  return absl::OkStatus();
}

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
