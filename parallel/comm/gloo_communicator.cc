#include "parallel/comm/gloo_communicator.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {
namespace {

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// Runs `fn` (which issues one c10d operation and returns its Work), waits, and turns c10d's
// exceptions into a Status naming the operation and the group.
template <typename Fn>
absl::Status Run(const std::string& group, const std::string& peers, const char* op, Fn&& fn) {
  try {
    c10::intrusive_ptr<c10d::Work> work = fn();
    work->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(op, " on ", group, " failed: ", e.what(), "; ", peers));
  }
}

// "members: rank 0 on HOST, rank 1 on HOST" (global ranks; hosts as the ranks published them).
std::string DescribePeers(const std::vector<int>& members, const std::vector<std::string>& hosts) {
  std::string out = "members:";
  for (size_t i = 0; i < members.size(); ++i) {
    absl::StrAppend(&out, i ? ", rank " : " rank ", members[i], " on ",
                    i < hosts.size() && !hosts[i].empty() ? hosts[i] : "?");
  }
  return out;
}

// Gloo reduces in the tensor's dtype and lacks some low-precision types: bf16 and fp16 tensors travel
// as fp32 copies and the result is rounded back once (also the more accurate sum).
bool NeedsFp32(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

class GlooWork final : public CommWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> on_done = nullptr)
      : work_(std::move(work)), what_(std::move(what)), on_done_(std::move(on_done)) {}
  absl::Status Wait() override {
    if (!error_.ok()) return error_;
    try {
      work_->wait();
      if (on_done_) on_done_();
      on_done_ = nullptr;
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat(what_, " failed: ", e.what(), peers_ ? "; " : "", peers_ ? *peers_ : ""));
    }
  }
  // Failures name the group's members and their hosts too (which peer a timeout waited for).
  void set_peers(std::shared_ptr<const std::string> peers) { peers_ = std::move(peers); }
  static std::unique_ptr<CommWork> Failed(absl::Status s) {
    auto w = std::make_unique<GlooWork>(c10::intrusive_ptr<c10d::Work>(), "");
    w->error_ = std::move(s);
    return w;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::function<void()> on_done_;  // Runs once after a successful wait.
  std::shared_ptr<const std::string> peers_;
  absl::Status error_;
};

}  // namespace

struct GlooCommunicator::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::shared_ptr<const std::string> peers;  // DescribePeers of the group.

  std::unique_ptr<CommWork> WithPeers(std::unique_ptr<GlooWork> work) const {
    work->set_peers(peers);
    return work;
  }
};

GlooCommunicator::GlooCommunicator(std::unique_ptr<Impl> impl, std::string name,
                                   std::vector<int> members, int rank)
    : impl_(std::move(impl)), name_(std::move(name)), members_(std::move(members)), rank_(rank) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const c10::intrusive_ptr<c10d::Store>& store, std::string name, std::vector<int> members,
    int global_rank, std::chrono::milliseconds timeout, const std::string& local_host,
    const std::vector<std::string>& member_hosts) {
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == global_rank) rank = static_cast<int>(i);
  }
  if (rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", global_rank, " is not in group ", name));
  }
  auto impl = std::make_unique<Impl>();
  impl->peers = std::make_shared<const std::string>(DescribePeers(members, member_hosts));
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // Gloo's pairs bind to this address and publish it through the store: it must be one the
    // other members reach (a loopback address only works when every member is on this machine).
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local_host));
    options->threads = 2;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
    impl->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank,
                                                           static_cast<int>(members.size()), options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rendezvous of group ", name, " (this rank on ", local_host, ") failed: ", e.what(), "; ",
                     *impl->peers));
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(impl), std::move(name), std::move(members), rank));
}

absl::Status GlooCommunicator::AllReduce(at::Tensor& t, ReduceOp op) {
  return AllReduceAsync(t, op)->Wait();
}

std::unique_ptr<CommWork> GlooCommunicator::AllReduceAsync(at::Tensor& t, ReduceOp op) {
  if (!t.is_contiguous()) {
    return GlooWork::Failed(absl::InvalidArgumentError("all_reduce needs a contiguous tensor"));
  }
  CountAllReduce(t.numel() * t.element_size());
  try {
    std::function<void()> on_done;
    at::Tensor target = t;
    if (NeedsFp32(t)) {
      target = t.to(at::kFloat);
      on_done = [t, target]() mutable { t.copy_(target); };
    }
    std::vector<at::Tensor> tensors{target};
    c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10d(op);
    return impl_->WithPeers(std::make_unique<GlooWork>(impl_->pg->allreduce(tensors, opts),
                                      absl::StrCat("all_reduce on ", name_), std::move(on_done)));
  } catch (const std::exception& e) {
    return GlooWork::Failed(absl::InternalError(absl::StrCat("all_reduce on ", name_, ": ", e.what())));
  }
}

absl::Status GlooCommunicator::AllGather(const at::Tensor& in, at::Tensor& out) {
  return AllGatherAsync(in, out)->Wait();
}

std::unique_ptr<CommWork> GlooCommunicator::AllGatherAsync(const at::Tensor& in, at::Tensor& out) {
  if (out.numel() != in.numel() * size()) {
    return GlooWork::Failed(absl::InvalidArgumentError(absl::StrCat(
        "all_gather on ", name_, ": output has ", out.numel(), " elements, expected ", in.numel() * size())));
  }
  CountShare(out.numel() * out.element_size());
  try {
    at::Tensor src = in.contiguous();
    return impl_->WithPeers(
        std::make_unique<GlooWork>(impl_->pg->_allgather_base(out, src), absl::StrCat("all_gather on ", name_)));
  } catch (const std::exception& e) {
    return GlooWork::Failed(absl::InternalError(absl::StrCat("all_gather on ", name_, ": ", e.what())));
  }
}

absl::Status GlooCommunicator::ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  return ReduceScatterAsync(in, out, op)->Wait();
}

std::unique_ptr<CommWork> GlooCommunicator::ReduceScatterAsync(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  if (in.numel() != out.numel() * size()) {
    return GlooWork::Failed(absl::InvalidArgumentError(absl::StrCat(
        "reduce_scatter on ", name_, ": input has ", in.numel(), " elements, expected ", out.numel() * size())));
  }
  CountShare(in.numel() * in.element_size());
  try {
    at::Tensor src = in.contiguous();
    std::function<void()> on_done;
    at::Tensor target = out;
    if (NeedsFp32(src)) {
      src = src.to(at::kFloat);
      target = at::empty(out.sizes(), out.options().dtype(at::kFloat));
      on_done = [out, target]() mutable { out.copy_(target); };
    }
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = ToC10d(op);
    return impl_->WithPeers(std::make_unique<GlooWork>(impl_->pg->_reduce_scatter_base(target, src, opts),
                                      absl::StrCat("reduce_scatter on ", name_), std::move(on_done)));
  } catch (const std::exception& e) {
    return GlooWork::Failed(absl::InternalError(absl::StrCat("reduce_scatter on ", name_, ": ", e.what())));
  }
}

absl::Status GlooCommunicator::Broadcast(at::Tensor& t, int root) {
  if (root < 0 || root >= size()) return absl::InvalidArgumentError("broadcast root out of range");
  CountWhole(t.numel() * t.element_size());
  std::vector<at::Tensor> tensors{t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return Run(name_, *impl_->peers, "broadcast", [&] { return impl_->pg->broadcast(tensors, opts); });
}

absl::Status GlooCommunicator::Reduce(at::Tensor& t, int root, ReduceOp op) {
  if (root < 0 || root >= size()) return absl::InvalidArgumentError("reduce root out of range");
  if (!t.is_contiguous()) return absl::InvalidArgumentError(absl::StrCat("reduce on ", name_, " needs a contiguous tensor"));
  CountWhole(t.numel() * t.element_size());
  at::Tensor target = NeedsFp32(t) ? t.to(at::kFloat) : t;
  std::vector<at::Tensor> tensors{target};
  c10d::ReduceOptions opts;
  opts.rootRank = root;
  opts.reduceOp = ToC10d(op);
  absl::Status s = Run(name_, *impl_->peers, "reduce", [&] { return impl_->pg->reduce(tensors, opts); });
  if (s.ok() && !target.is_same(t)) t.copy_(target);
  return s;
}

absl::Status GlooCommunicator::AllToAll(const at::Tensor& in, at::Tensor& out) {
  if (in.numel() != out.numel() || in.size(0) % size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all on ", name_,
                                                   ": dim 0 must split evenly and shapes match"));
  }
  CountShare(in.numel() * in.element_size());
  at::Tensor src = in.contiguous();
  std::vector<int64_t> even;  // Empty split sizes: equal chunks.
  return Run(name_, *impl_->peers, "all_to_all", [&] { return impl_->pg->alltoall_base(out, src, even, even); });
}

absl::Status GlooCommunicator::AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                                          at::Tensor& out, const std::vector<int64_t>& recv_rows) {
  if (absl::Status s = CheckRowSplits(name_, size(), in, send_rows, out, recv_rows); !s.ok()) return s;
  CountShare(in.numel() * in.element_size());
  at::Tensor src = in.contiguous();
  // c10d's split sizes are rows along dim 0 (Gloo's alltoallv).
  std::vector<int64_t> send = send_rows, recv = recv_rows;
  return Run(name_, *impl_->peers, "all_to_all_rows", [&] { return impl_->pg->alltoall_base(out, src, recv, send); });
}

absl::Status GlooCommunicator::Send(const at::Tensor& t, int dst, int tag) { return SendAsync(t, dst, tag)->Wait(); }

absl::Status GlooCommunicator::Recv(at::Tensor& t, int src, int tag) { return RecvAsync(t, src, tag)->Wait(); }

std::unique_ptr<CommWork> GlooCommunicator::SendAsync(const at::Tensor& t, int dst, int tag) {
  if (dst < 0 || dst >= size() || dst == rank_) {
    return GlooWork::Failed(absl::InvalidArgumentError(absl::StrCat("send on ", name_, ": bad peer ", dst)));
  }
  CountWhole(t.numel() * t.element_size());
  try {
    // The work keeps its tensors alive until it completes.
    std::vector<at::Tensor> tensors{t.contiguous()};
    return impl_->WithPeers(std::make_unique<GlooWork>(impl_->pg->send(tensors, dst, tag),
                                      absl::StrCat("send to ", dst, " on ", name_)));
  } catch (const std::exception& e) {
    return GlooWork::Failed(absl::InternalError(absl::StrCat("send on ", name_, ": ", e.what())));
  }
}

std::unique_ptr<CommWork> GlooCommunicator::RecvAsync(at::Tensor& t, int src, int tag) {
  if (src < 0 || src >= size() || src == rank_) {
    return GlooWork::Failed(absl::InvalidArgumentError(absl::StrCat("recv on ", name_, ": bad peer ", src)));
  }
  if (!t.is_contiguous()) {
    return GlooWork::Failed(absl::InvalidArgumentError(absl::StrCat("recv on ", name_, " needs a contiguous tensor")));
  }
  try {
    std::vector<at::Tensor> tensors{t};
    return impl_->WithPeers(std::make_unique<GlooWork>(impl_->pg->recv(tensors, src, tag),
                                      absl::StrCat("recv from ", src, " on ", name_)));
  } catch (const std::exception& e) {
    return GlooWork::Failed(absl::InternalError(absl::StrCat("recv on ", name_, ": ", e.what())));
  }
}

absl::Status GlooCommunicator::Barrier() {
  return Run(name_, *impl_->peers, "barrier", [&] { return impl_->pg->barrier(); });
}

}  // namespace tessera::parallel
