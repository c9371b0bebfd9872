// SelfCommunicator: the group of one rank. Every collective is the identity (or a copy).
#ifndef TESSERA_PARALLEL_COMM_SELF_COMMUNICATOR_H_
#define TESSERA_PARALLEL_COMM_SELF_COMMUNICATOR_H_

#include "parallel/comm/communicator.h"

namespace tessera::parallel {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator(int global_rank, std::string name);

  int rank() const override { return 0; }
  int size() const override { return 1; }
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
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  std::vector<int> members_;
  std::string name_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_COMM_SELF_COMMUNICATOR_H_
