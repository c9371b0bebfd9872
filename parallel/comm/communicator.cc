#include "parallel/comm/communicator.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

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
  auto error = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all_rows on ", group, ": ", what...));
  };
  if (static_cast<int>(send_rows.size()) != members || static_cast<int>(recv_rows.size()) != members) {
    return error(send_rows.size(), " and ", recv_rows.size(), " row counts for ", members, " members");
  }
  if (in.dim() < 1 || out.dim() < 1) return error("in and out need a row dimension");
  auto sum = [](const std::vector<int64_t>& counts) -> int64_t {
    int64_t n = 0;
    for (int64_t c : counts) {
      if (c < 0) return -1;
      n += c;
    }
    return n;
  };
  const int64_t sent = sum(send_rows), received = sum(recv_rows);
  if (sent < 0 || received < 0) return error("a negative row count");
  if (sent != in.size(0)) return error("send counts sum to ", sent, ", in has ", in.size(0), " rows");
  if (received != out.size(0)) return error("receive counts sum to ", received, ", out has ", out.size(0), " rows");
  // The rows' shapes, not elements per row: a side with no rows (a member that routed nothing to, or
  // received nothing from, the others) has no elements to divide.
  if (!in.sizes().slice(1).equals(out.sizes().slice(1))) {
    return error("rows of in ", c10::str(in.sizes().slice(1)), " and of out ", c10::str(out.sizes().slice(1)),
                 " differ");
  }
  if (in.scalar_type() != out.scalar_type()) return error("in and out dtypes differ");
  if (!out.is_contiguous()) return error("out must be contiguous");
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
