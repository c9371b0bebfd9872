#include "parallel/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/accumulate.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "parallel/comm/process_groups.h"

namespace tessera::parallel {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> ToNccl(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: return absl::InvalidArgumentError(absl::StrCat("NCCL cannot carry dtype ", c10::toString(t)));
  }
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

std::string IssuedKey(const std::string& group, int rank) { return absl::StrCat(group, "/issued/", rank); }
std::string JoinedKey(const std::string& group, int rank) { return absl::StrCat(group, "/joined/", rank); }

// Operations issued so far by group rank `r`, as it last published them; -1 if never.
int64_t ReadIssued(c10d::Store& store, const std::string& group, int r) {
  try {
    const std::string key = IssuedKey(group, r);
    if (!store.check({key})) return -1;
    std::vector<uint8_t> v = store.get(key);
    return std::stoll(std::string(v.begin(), v.end()));
  } catch (const std::exception&) {
    return -1;
  }
}

class ReadyWork final : public CommWork {
 public:
  explicit ReadyWork(absl::Status s) : status_(std::move(s)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

struct NcclCommunicator::Impl {
  struct Pending {
    int64_t seq;
    std::string op;
    cudaEvent_t event;
    Clock::time_point start;
  };

  ncclComm_t comm = nullptr;
  NcclCommunicatorOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  std::string name;
  std::vector<int> members;
  int rank = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  absl::Status error;            // Guarded by mu.
  std::deque<Pending> pending;   // Guarded by mu.
  int64_t issued = 0;            // Guarded by mu.
  bool stop = false;             // Guarded by mu.
  bool aborted = false;          // Guarded by mu.
  std::thread watchdog;

  absl::Status Health() const {
    std::lock_guard<std::mutex> lock(mu);
    return error;
  }

  absl::Status NcclError(ncclResult_t r, const std::string& op) const {
    const char* last = comm != nullptr ? ncclGetLastError(comm) : "";
    return absl::InternalError(absl::StrCat("nccl ", op, " on ", name, " failed: ", ncclGetErrorString(r),
                                            (last && *last) ? absl::StrCat(" (", last, ")") : ""));
  }

  // Turns an NCCL return code into a Status; a non-blocking communicator may answer ncclInProgress,
  // in which case this polls until the call completed or the timeout passed.
  absl::Status Complete(ncclResult_t r, const std::string& op) {
    const Clock::time_point deadline = Clock::now() + options.timeout;
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("nccl ", op, " on ", name, " still in progress after ",
                                                        options.timeout.count(), " ms"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) return NcclError(r, op);
    return absl::OkStatus();
  }

  // After a successful enqueue on `stream`: remember the operation for the watchdog.
  absl::Status Track(const std::string& op, cudaStream_t stream, cudaEvent_t* out_event = nullptr) {
    cudaEvent_t event;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, stream);
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat(op, " on ", name, ": CUDA event: ", cudaGetErrorString(e)));
    }
    std::lock_guard<std::mutex> lock(mu);
    ++issued;
    pending.push_back({issued, op, event, Clock::now()});
    if (out_event != nullptr) *out_event = event;
    return absl::OkStatus();
  }

  // The common frame of every operation: health, device and dtype checks, the enqueue on the
  // current stream, and the watchdog's record.
  template <typename Fn>
  absl::Status Issue(const std::string& op, const at::Tensor& t, Fn&& fn) {
    absl::Status health = Health();
    if (!health.ok()) return health;
    if (!t.is_cuda() || t.device().index() != options.device_index) {
      return absl::InvalidArgumentError(absl::StrCat(op, " on ", name, ": tensor on ", t.device().str(),
                                                     ", expected cuda:", options.device_index));
    }
    if (!t.is_contiguous()) return absl::InvalidArgumentError(absl::StrCat(op, " on ", name, ": not contiguous"));
    auto dtype = ToNccl(t.scalar_type());
    if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(op, " on ", name, ": ", dtype.status().message()));
    c10::cuda::CUDAGuard guard(t.device());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    absl::Status s = Complete(fn(*dtype, stream), op);
    if (!s.ok()) return s;
    return Track(op, stream);
  }

  void Fail(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(s);
    if (options.abort_on_timeout && !aborted && comm != nullptr) {
      ncclCommAbort(comm);
      aborted = true;
    }
  }

  std::string Laggards(int64_t seq) {
    std::vector<std::string> late;
    for (int r = 0; r < static_cast<int>(members.size()); ++r) {
      const int64_t n = ReadIssued(*store, name, r);
      if (n < seq) late.push_back(absl::StrCat(members[r], n < 0 ? " (none issued)" : absl::StrCat(" (at #", n, ")")));
    }
    return late.empty() ? "none: every member issued it, the device work before it is stuck"
                        : absl::StrJoin(late, ", ");
  }

  void WatchdogLoop() {
    cudaSetDevice(options.device_index);
    int64_t published = -1;
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, options.poll);
      if (stop) break;
      const int64_t now_issued = issued;
      lock.unlock();
      if (now_issued != published) {
        try {
          const std::string v = std::to_string(now_issued);
          store->set(IssuedKey(name, rank), std::vector<uint8_t>(v.begin(), v.end()));
          published = now_issued;
        } catch (const std::exception&) {
          // The store is best effort here: it only feeds error messages.
        }
      }
      ncclResult_t async = ncclSuccess;
      if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        Fail(NcclError(async, "asynchronous error"));
      }
      lock.lock();
      while (!pending.empty()) {
        Pending& p = pending.front();
        const cudaError_t q = cudaEventQuery(p.event);
        if (q == cudaSuccess) {
          cudaEventDestroy(p.event);
          pending.pop_front();
          continue;
        }
        if (q != cudaErrorNotReady) {
          error = absl::InternalError(absl::StrCat(p.op, " #", p.seq, " on ", name, ": ", cudaGetErrorString(q)));
          break;
        }
        if (error.ok() && Clock::now() - p.start > options.timeout) {
          const Pending stuck = p;
          lock.unlock();
          const std::string late = Laggards(stuck.seq);
          Fail(absl::DeadlineExceededError(absl::StrCat(
              stuck.op, " #", stuck.seq, " on ", name, " (nccl) did not finish within ", options.timeout.count(),
              " ms; members that had not issued it: ", late)));
          lock.lock();
        }
        break;
      }
    }
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, std::string name, std::vector<int> members, int rank)
    : impl_(std::move(impl)), name_(std::move(name)), members_(std::move(members)), rank_(rank) {}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->options.device_index));
  for (Impl::Pending& p : impl_->pending) cudaEventDestroy(p.event);
  if (impl_->comm != nullptr && !impl_->aborted) {
    if (impl_->error.ok()) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
  }
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const c10::intrusive_ptr<c10d::Store>& store, std::string name, std::vector<int> members, int global_rank,
    const NcclCommunicatorOptions& options) {
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == global_rank) rank = static_cast<int>(i);
  }
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat("rank ", global_rank, " is not in group ", name));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || options.device_index < 0 || options.device_index >= devices) {
    return absl::FailedPreconditionError(absl::StrCat("group ", name, ": cuda:", options.device_index,
                                                      " does not exist (", devices, " CUDA devices)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->store = store;
  impl->name = name;
  impl->members = members;
  impl->rank = rank;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(options.device_index));
  const Clock::time_point deadline = Clock::now() + options.timeout;
  const std::string id_key = absl::StrCat(name, "/nccl_unique_id");
  ncclUniqueId id;
  try {
    store->set(JoinedKey(name, rank), std::vector<uint8_t>{1});
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return impl->NcclError(r, "get_unique_id");
      std::vector<uint8_t> bytes(sizeof(id));
      std::memcpy(bytes.data(), &id, sizeof(id));
      store->set(id_key, bytes);
    } else {
      while (!store->check({id_key})) {
        if (Clock::now() > deadline) {
          return absl::DeadlineExceededError(absl::StrCat("rendezvous of group ", name, ": member ", members[0],
                                                          " (group rank 0) never published the NCCL id"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::vector<uint8_t> bytes = store->get(id_key);
      if (bytes.size() != sizeof(id)) return absl::DataLossError("NCCL unique id of the wrong size in the store");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rendezvous of group ", name, " failed: ", e.what()));
  }
  // Non-blocking initialisation, so that a member that never arrives ends in an error, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&impl->comm, static_cast<int>(members.size()), id, rank, &config);
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) {
      std::vector<int> missing;
      for (int m = 0; m < static_cast<int>(members.size()); ++m) {
        if (!store->check({JoinedKey(name, m)})) missing.push_back(members[m]);
      }
      ncclCommAbort(impl->comm);
      impl->comm = nullptr;
      return absl::DeadlineExceededError(absl::StrCat("rendezvous of group ", name, " timed out after ",
                                                      options.timeout.count(), " ms; never arrived: [",
                                                      absl::StrJoin(missing, ","), "]"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclCommGetAsyncError(impl->comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) return impl->NcclError(r, "init");
  Impl* raw = impl.get();
  impl->watchdog = std::thread([raw] { raw->WatchdogLoop(); });
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl), std::move(name), std::move(members), rank));
}

absl::Status NcclCommunicator::health() const { return impl_->Health(); }

absl::Status NcclCommunicator::AllReduce(at::Tensor& t, ReduceOp op) {
  CountAllReduce(t.numel() * t.element_size());
  return impl_->Issue("all_reduce", t, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, ToNccl(op), impl_->comm, s);
  });
}

std::unique_ptr<CommWork> NcclCommunicator::AllReduceAsync(at::Tensor& t, ReduceOp op) {
  // Stream-ordered: enqueued now, complete for every later use on the stream.
  return std::make_unique<ReadyWork>(AllReduce(t, op));
}

absl::Status NcclCommunicator::AllGather(const at::Tensor& in, at::Tensor& out) {
  if (out.numel() != in.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather on ", name_, ": output has ", out.numel(),
                                                   " elements, expected ", in.numel() * size()));
  }
  at::Tensor src = in.contiguous();
  if (src.scalar_type() != out.scalar_type()) return absl::InvalidArgumentError("all_gather: dtypes differ");
  CountShare(out.numel() * out.element_size());
  return impl_->Issue("all_gather", out, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclAllGather(src.data_ptr(), out.data_ptr(), src.numel(), dt, impl_->comm, s);
  });
}

absl::Status NcclCommunicator::ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) {
  if (in.numel() != out.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter on ", name_, ": input has ", in.numel(),
                                                   " elements, expected ", out.numel() * size()));
  }
  at::Tensor src = in.contiguous();
  if (src.scalar_type() != out.scalar_type()) return absl::InvalidArgumentError("reduce_scatter: dtypes differ");
  CountShare(src.numel() * src.element_size());
  return impl_->Issue("reduce_scatter", out, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclReduceScatter(src.data_ptr(), out.data_ptr(), out.numel(), dt, ToNccl(op), impl_->comm, s);
  });
}

absl::Status NcclCommunicator::Broadcast(at::Tensor& t, int root) {
  if (root < 0 || root >= size()) return absl::InvalidArgumentError("broadcast root out of range");
  CountWhole(t.numel() * t.element_size());
  return impl_->Issue("broadcast", t, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dt, root, impl_->comm, s);
  });
}

absl::Status NcclCommunicator::AllToAll(const at::Tensor& in, at::Tensor& out) {
  if (in.numel() != out.numel() || in.size(0) % size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all on ", name_,
                                                   ": dim 0 must split evenly and shapes match"));
  }
  at::Tensor src = in.contiguous();
  const int64_t chunk = src.numel() / size();
  const int64_t bytes = chunk * src.element_size();
  CountShare(src.numel() * src.element_size());
  return impl_->Issue("all_to_all", out, [&](ncclDataType_t dt, cudaStream_t s) {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    auto* send = static_cast<const char*>(src.data_ptr());
    auto* recv = static_cast<char*>(out.data_ptr());
    for (int peer = 0; peer < size() && r == ncclSuccess; ++peer) {
      r = ncclSend(send + peer * bytes, chunk, dt, peer, impl_->comm, s);
      if (r == ncclSuccess) r = ncclRecv(recv + peer * bytes, chunk, dt, peer, impl_->comm, s);
    }
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
}

absl::Status NcclCommunicator::AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                                          at::Tensor& out, const std::vector<int64_t>& recv_rows) {
  if (absl::Status s = CheckRowSplits(name_, size(), in, send_rows, out, recv_rows); !s.ok()) return s;
  at::Tensor src = in.contiguous();
  // Elements per row from the row shape (CheckRowSplits: in's and out's agree), which either side may
  // have without rows. Peers a member exchanges no rows with get no send or receive at all; a member
  // with nothing to exchange issues an empty group.
  const int64_t row = c10::multiply_integers(in.sizes().slice(1));
  CountShare(src.numel() * src.element_size());
  return impl_->Issue("all_to_all_rows", out, [&](ncclDataType_t dt, cudaStream_t s) {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    auto* send = static_cast<const char*>(src.data_ptr());
    auto* recv = static_cast<char*>(out.data_ptr());
    const int64_t bytes_per_row = row * src.element_size();
    int64_t sent = 0, received = 0;
    for (int peer = 0; peer < size() && r == ncclSuccess; ++peer) {
      if (send_rows[peer] > 0) r = ncclSend(send + sent * bytes_per_row, send_rows[peer] * row, dt, peer, impl_->comm, s);
      if (r == ncclSuccess && recv_rows[peer] > 0) {
        r = ncclRecv(recv + received * bytes_per_row, recv_rows[peer] * row, dt, peer, impl_->comm, s);
      }
      sent += send_rows[peer];
      received += recv_rows[peer];
    }
    ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
}

absl::Status NcclCommunicator::Send(const at::Tensor& t, int dst, int /*tag*/) {
  if (dst < 0 || dst >= size() || dst == rank_) return absl::InvalidArgumentError("send: bad destination rank");
  at::Tensor src = t.contiguous();
  CountWhole(src.numel() * src.element_size());
  return impl_->Issue("send", src, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclSend(src.data_ptr(), src.numel(), dt, dst, impl_->comm, s);
  });
}

absl::Status NcclCommunicator::Recv(at::Tensor& t, int src, int /*tag*/) {
  if (src < 0 || src >= size() || src == rank_) return absl::InvalidArgumentError("recv: bad source rank");
  return impl_->Issue("recv", t, [&](ncclDataType_t dt, cudaStream_t s) {
    return ncclRecv(t.data_ptr(), t.numel(), dt, src, impl_->comm, s);
  });
}

absl::Status NcclCommunicator::Barrier() {
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(
                                        at::kCUDA, static_cast<c10::DeviceIndex>(impl_->options.device_index)));
  c10::cuda::CUDAGuard guard(token.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(token.device().index()).stream();
  absl::Status s = impl_->Health();
  if (!s.ok()) return s;
  s = impl_->Complete(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, impl_->comm, stream),
                      "barrier");
  if (!s.ok()) return s;
  cudaEvent_t event;
  s = impl_->Track("barrier", stream, &event);
  if (!s.ok()) return s;
  // Block the host until the barrier's event completed, the watchdog failed us, or the timeout passed.
  const Clock::time_point deadline = Clock::now() + impl_->options.timeout + impl_->options.poll * 4;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (!impl_->error.ok()) return impl_->error;
      bool found = false;
      for (const Impl::Pending& p : impl_->pending) found = found || p.event == event;
      if (!found) return absl::OkStatus();  // The watchdog saw it complete.
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return absl::InternalError(absl::StrCat("barrier on ", name_, ": ", cudaGetErrorString(q)));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("barrier on ", name_, " did not finish"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace tessera::parallel

namespace tessera::parallel {
namespace {

absl::StatusOr<std::shared_ptr<Communicator>> MakeNccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::string& name, const std::vector<int>& members,
                                                       int global_rank, int device_index,
                                                       std::chrono::milliseconds timeout) {
  NcclCommunicatorOptions options;
  options.device_index = device_index;
  options.timeout = timeout;
  auto comm = NcclCommunicator::Create(store, name, members, global_rank, options);
  if (!comm.ok()) return comm.status();
  return std::shared_ptr<Communicator>(std::move(*comm));
}

const bool registered = [] {
  RegisterNcclFactory(&MakeNccl);
  return true;
}();

}  // namespace
}  // namespace tessera::parallel
