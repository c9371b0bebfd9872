// GlooCommunicator: the CPU backend, over c10d's ProcessGroupGloo, bound to this node's address.
//
// Measured on LibTorch 2.11 (tests in gloo_communicator_test.cc): Gloo has all_reduce with
// SUM/AVG/MAX/MIN, _reduce_scatter_base, _allgather_base and alltoall_base, all with fp32, bf16 and
// fp16, so no emulation is needed. LibTorch 1.13 lacked several of them.
#ifndef TESSERA_PARALLEL_COMM_GLOO_COMMUNICATOR_H_
#define TESSERA_PARALLEL_COMM_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tessera::parallel {

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous of the group `members` (global ranks, in group order) through `store` under the key
  // prefix `name`; `global_rank` must be one of `members`. This rank's pairs listen on and connect
  // from `local_host` (this node's address, which the other members can reach; "127.0.0.1" when every
  // member is on this machine). Blocks until every member joined or `timeout` passed; every
  // operation fails after `timeout` too. `member_hosts` (in member order, optional) only feeds error
  // messages: a failure names the operation, the group and each member's host.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      const c10::intrusive_ptr<c10d::Store>& store, std::string name, std::vector<int> members,
      int global_rank, std::chrono::milliseconds timeout, const std::string& local_host = "127.0.0.1",
      const std::vector<std::string>& member_hosts = {});
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommWork> AllReduceAsync(at::Tensor& t, ReduceOp op) override;
  absl::Status AllGather(const at::Tensor& in, at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& in, at::Tensor& out) override;
  std::unique_ptr<CommWork> ReduceScatterAsync(const at::Tensor& in, at::Tensor& out, ReduceOp op) override;
  absl::Status Broadcast(at::Tensor& t, int root) override;
  absl::Status AllToAll(const at::Tensor& in, at::Tensor& out) override;
  absl::Status AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows, at::Tensor& out,
                            const std::vector<int64_t>& recv_rows) override;
  absl::Status Send(const at::Tensor& t, int dst, int tag) override;
  absl::Status Recv(at::Tensor& t, int src, int tag) override;
  absl::Status Reduce(at::Tensor& t, int root, ReduceOp op) override;
  std::unique_ptr<CommWork> SendAsync(const at::Tensor& t, int dst, int tag) override;
  std::unique_ptr<CommWork> RecvAsync(at::Tensor& t, int src, int tag) override;
  absl::Status Barrier() override;

 private:
  struct Impl;
  GlooCommunicator(std::unique_ptr<Impl> impl, std::string name, std::vector<int> members, int rank);

  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::vector<int> members_;
  int rank_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_GLOO_COMMUNICATOR_H_
