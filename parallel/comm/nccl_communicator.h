// NcclCommunicator: the GPU backend, over NCCL on the rank's CUDA device.
//
// Stream semantics: every operation is enqueued on the current CUDA stream of the communicator's
// device and returns once enqueued; its result is visible to later work on that stream (as for any
// CUDA kernel). Wait() of asynchronous work and every operation first report an error the watchdog
// has seen. Barrier() is the one call that blocks the host until the device caught up.
//
// Watchdog: a thread per communicator records a CUDA event after each operation and watches them.
// An operation not finished `timeout` after it was enqueued fails the communicator with
// DeadlineExceeded naming the operation, its sequence number and the ranks that had not reached it
// (each rank publishes the number of operations it issued to the job's store about once a second),
// then aborts the NCCL communicator unless `abort_on_timeout` is false. NCCL's asynchronous errors are
// picked up the same way. After a failure every call returns the failure.
//
// Point to point: NCCL has no tags; Send/Recv ignore `tag` and match in issue order per peer.
// Send to and Recv from oneself deadlock (NCCL needs both in one group); the engine never does it.
#ifndef TESSERA_PARALLEL_COMM_NCCL_COMMUNICATOR_H_
#define TESSERA_PARALLEL_COMM_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tessera::parallel {

struct NcclCommunicatorOptions {
  int device_index = 0;                                      // cuda:device_index
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // Rendezvous, and each operation.
  std::chrono::milliseconds poll{std::chrono::milliseconds(50)};
  bool abort_on_timeout = true;
};

class NcclCommunicator final : public Communicator {
 public:
  // Rendezvous of `members` (global ranks in group order) through `store` under the key prefix `name`:
  // group rank 0 makes NCCL's unique id and publishes it; every member then joins. Fails with
  // DeadlineExceeded naming the members that never arrived when `options.timeout` passes first.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                                  std::string name, std::vector<int> members,
                                                                  int global_rank,
                                                                  const NcclCommunicatorOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> AllReduceAsync(at::Tensor& t, ReduceOp op) override;
  absl::Status AllGather(const at::Tensor& in, at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) override;
  absl::Status Broadcast(at::Tensor& t, int root) override;
  absl::Status AllToAll(const at::Tensor& in, at::Tensor& out) override;
  absl::Status AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows, at::Tensor& out,
                            const std::vector<int64_t>& recv_rows) override;
  absl::Status Send(const at::Tensor& t, int dst, int tag) override;
  absl::Status Recv(at::Tensor& t, int src, int tag) override;
  absl::Status Barrier() override;

  // The failure the watchdog recorded (OK while healthy).
  absl::Status health() const;

 private:
  struct Impl;
  NcclCommunicator(std::unique_ptr<Impl> impl, std::string name, std::vector<int> members, int rank);

  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::vector<int> members_;
  int rank_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_NCCL_COMMUNICATOR_H_
