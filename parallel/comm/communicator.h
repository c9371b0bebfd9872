// Communicator: collectives over one group of ranks, on tensors. Backends: Gloo (CPU, via c10d),
// Self (a group of one); NCCL comes with the GPU backend.
//
// Ranks are numbered inside the group (0..size()-1). Every member must call the same collectives in
// the same order. Thread safety: one caller thread at a time, except that asynchronous work may be
// outstanding while the caller issues further operations (they queue in issue order).
#ifndef TESSERA_PARALLEL_COMM_COMMUNICATOR_H_
#define TESSERA_PARALLEL_COMM_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include <ATen/core/Tensor.h>

namespace tessera::parallel {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// A pending asynchronous operation.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until the operation finished; its result is then in the tensor it was given.
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global ranks of the members, in group-rank order.
  virtual const std::vector<int>& members() const = 0;
  // A short name for errors and logs, e.g. "tp[0,1]".
  virtual const std::string& name() const = 0;

  // In place: `t` becomes op over every member's `t`. `t` must be contiguous.
  virtual absl::Status AllReduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  // As AllReduce, without waiting. `t` must stay alive and untouched until Wait() returns.
  virtual std::unique_ptr<CommWork> AllReduceAsync(at::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  // out[size·n, ...] = every member's in[n, ...] concatenated along dim 0, in rank order.
  virtual absl::Status AllGather(const at::Tensor& in, at::Tensor& out) = 0;
  // in[size·n, ...] on every member; out[n, ...] = chunk `rank()` of op over every member's `in`.
  virtual absl::Status ReduceScatter(const at::Tensor& in, at::Tensor& out,
                                     ReduceOp op = ReduceOp::kSum) = 0;
  // As AllGather / ReduceScatter, without waiting; the tensors must stay alive and untouched until
  // Wait() returns. The defaults run synchronously and return finished work.
  virtual std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& in, at::Tensor& out);
  virtual std::unique_ptr<CommWork> ReduceScatterAsync(const at::Tensor& in, at::Tensor& out,
                                                       ReduceOp op = ReduceOp::kSum);
  // In place on `root`: `t` becomes op over every member's `t`; other members' `t` is unspecified
  // afterwards. The default all-reduces.
  virtual absl::Status Reduce(at::Tensor& t, int root, ReduceOp op = ReduceOp::kSum);
  // `t` on every member becomes root's `t`.
  virtual absl::Status Broadcast(at::Tensor& t, int root) = 0;
  // in, out [size·n, ...]: chunk j of `in` goes to member j, where it lands as chunk rank().
  virtual absl::Status AllToAll(const at::Tensor& in, at::Tensor& out) = 0;
  // Uneven all-to-all along dim 0 (expert dispatch): the first send_rows[0] rows of `in` go to member
  // 0, the next send_rows[1] to member 1, ...; `out` receives recv_rows[j] rows from member j, in
  // member order. A row has the shape in.sizes()[1:], which `out` shares. Any count may be 0, so `in`
  // or `out` (or both) may have no rows: a member that routes nothing to, or receives nothing from,
  // the others still takes part. Member i's send_rows[j] must equal member j's recv_rows[i] (a
  // mismatch is an error or a hang, as with any collective's shapes).
  virtual absl::Status AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows, at::Tensor& out,
                                    const std::vector<int64_t>& recv_rows) = 0;
  // Point to point; `t` in Recv must already have the sender's shape and dtype.
  virtual absl::Status Send(const at::Tensor& t, int dst, int tag = 0) = 0;
  virtual absl::Status Recv(at::Tensor& t, int src, int tag = 0) = 0;
  // As Send / Recv, without waiting; the tensor must stay alive (and, for Send, unchanged) until Wait()
  // returns. Messages between two members with the same tag arrive in the order sent. The defaults
  // run synchronously (a default SendAsync blocks until the receiver takes the message).
  virtual std::unique_ptr<CommWork> SendAsync(const at::Tensor& t, int dst, int tag = 0);
  virtual std::unique_ptr<CommWork> RecvAsync(at::Tensor& t, int src, int tag = 0);
  virtual absl::Status Barrier() = 0;

  // Bytes of tensors passed to AllReduce / AllReduceAsync so far (for metrics).
  int64_t bytes_all_reduced() const { return bytes_all_reduced_.load(); }
  // Bytes this member has sent so far, counted as the bandwidth-optimal (ring) volume of each
  // operation on the tensors it was given (S bytes; n members): all-reduce 2(n−1)/n·S, all-gather
  // (n−1)/n·S of the output, reduce-scatter (n−1)/n·S of the input, all-to-all (n−1)/n·S, broadcast
  // and reduce S, send S. The algorithm a backend runs may move other amounts; this is the volume the
  // cost model predicts from.
  int64_t bytes_communicated() const { return bytes_communicated_.load(); }

 protected:
  // For backends: count one operation of `bytes` (S above).
  void CountAllReduce(int64_t bytes);
  void CountShare(int64_t bytes);   // All-gather, reduce-scatter, all-to-all: (n−1)/n·S.
  void CountWhole(int64_t bytes);   // Broadcast, reduce, send: S.

  std::atomic<int64_t> bytes_all_reduced_{0};
  std::atomic<int64_t> bytes_communicated_{0};
};

// Work that already finished with `status`.
std::unique_ptr<CommWork> DoneWork(absl::Status status);

// AllToAllRows' argument check: one count per member, each ≥ 0, summing to the rows of `in` / `out`;
// rows of one shape (in.sizes()[1:] = out.sizes()[1:], whether or not either side has rows) and dtype;
// `out` contiguous. `group` names the group in the error.
absl::Status CheckRowSplits(const std::string& group, int members, const at::Tensor& in,
                            const std::vector<int64_t>& send_rows, const at::Tensor& out,
                            const std::vector<int64_t>& recv_rows);

// Throws c10::Error with the status text unless `status` is ok: for code inside autograd functions,
// which cannot return a Status. The rank process turns it back into an error at its boundary.
void ThrowIfError(const absl::Status& status);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_COMMUNICATOR_H_
