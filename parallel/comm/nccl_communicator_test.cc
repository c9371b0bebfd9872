// NCCL backend. Without a GPU only the clear refusal is checked (the rest skips with a message); on
// the device machine: every collective at world size 1 in fp32 and bf16 (the uneven all-to-all with
// zero rows too), device checks, and the watchdog firing on a planted hang (a kernel that holds the
// stream) with the operation named.
#include "parallel/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/comm/testing/spin_kernel.h"

namespace tessera::parallel {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: NCCL case skipped"

absl::StatusOr<std::unique_ptr<NcclCommunicator>> MakeSolo(std::chrono::milliseconds timeout,
                                                          bool abort_on_timeout = true) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  NcclCommunicatorOptions o;
  o.timeout = timeout;
  o.abort_on_timeout = abort_on_timeout;
  return NcclCommunicator::Create(store, "solo[0]", {0}, 0, o);
}

TEST(NcclCommunicatorTest, RefusesWithoutTheDevice) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present: the refusal case applies to machines without one";
  auto comm = MakeSolo(std::chrono::seconds(1));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("cuda:0 does not exist"), std::string::npos) << comm.status();
}

class NcclSoloTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(NcclSoloTest, CollectivesAtWorldSizeOne) {
  SKIP_WITHOUT_GPU();
  auto comm = MakeSolo(std::chrono::seconds(30));
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto opts = at::TensorOptions().dtype(GetParam()).device(at::kCUDA, 0);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    at::Tensor x = at::randn({1031}, opts), want = x.clone();
    ASSERT_TRUE((*comm)->AllReduce(x, op).ok());
    EXPECT_TRUE(at::equal(x, want));  // One member: every reduction is the identity.
  }
  at::Tensor in = at::randn({17, 3}, opts), out = at::full({17, 3}, NAN, opts);
  ASSERT_TRUE((*comm)->AllGather(in, out).ok());
  EXPECT_TRUE(at::equal(out, in));
  out.fill_(NAN);
  ASSERT_TRUE((*comm)->ReduceScatter(in, out, ReduceOp::kSum).ok());
  EXPECT_TRUE(at::equal(out, in));
  out.fill_(NAN);
  ASSERT_TRUE((*comm)->AllToAll(in, out).ok());
  EXPECT_TRUE(at::equal(out, in));
  // Uneven all-to-all: every row to itself, and nothing at all (no rows in or out, an empty group).
  out.fill_(NAN);
  ASSERT_TRUE((*comm)->AllToAllRows(in, {17}, out, {17}).ok());
  EXPECT_TRUE(at::equal(out, in));
  at::Tensor none = at::empty({0, 3}, opts), none_out = at::empty({0, 3}, opts);
  ASSERT_TRUE((*comm)->AllToAllRows(none, {0}, none_out, {0}).ok());
  at::Tensor b = in.clone();
  ASSERT_TRUE((*comm)->Broadcast(b, 0).ok());
  EXPECT_TRUE(at::equal(b, in));
  ASSERT_TRUE((*comm)->Barrier().ok());
  EXPECT_TRUE((*comm)->health().ok());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclSoloTest, ::testing::Values(at::kFloat, at::kBFloat16));

TEST(NcclCommunicatorTest, RejectsTensorsOffTheDevice) {
  SKIP_WITHOUT_GPU();
  auto comm = MakeSolo(std::chrono::seconds(30));
  ASSERT_TRUE(comm.ok()) << comm.status();
  at::Tensor cpu = at::ones({4});
  absl::Status s = (*comm)->AllReduce(cpu, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected cuda:0"), std::string::npos) << s;
}

TEST(NcclCommunicatorTest, WatchdogFiresOnAPlantedHang) {
  SKIP_WITHOUT_GPU();
  auto comm = MakeSolo(std::chrono::milliseconds(1500), /*abort_on_timeout=*/false);
  ASSERT_TRUE(comm.ok()) << comm.status();
  int* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *flag = 0;
  int* device_flag = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), flag, 0), cudaSuccess);
  // A hang in the middle of training: the communicator has run a collective (NCCL connects lazily, and
  // its set-up copies wait for the whole device), and the work runs on a stream of its own — a
  // spinner on the legacy default stream would also hold every synchronous copy of the process.
  at::Tensor x = at::ones({8}, at::TensorOptions().device(at::kCUDA, 0));
  ASSERT_TRUE((*comm)->AllReduce(x, ReduceOp::kSum).ok());
  ASSERT_TRUE((*comm)->Barrier().ok());
  c10::cuda::CUDAStreamGuard on_side_stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(0).stream();
  ASSERT_EQ(testing::LaunchSpinUntilFlag(device_flag, 30.0, stream), cudaSuccess);
  // The planted hang really holds the stream: work recorded behind it is not done.
  cudaEvent_t probe;
  ASSERT_EQ(cudaEventCreateWithFlags(&probe, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(probe, stream), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaEventQuery(probe), cudaErrorNotReady) << "the spinner does not hold stream " << stream;
  ASSERT_TRUE((*comm)->AllReduce(x, ReduceOp::kSum).ok());  // Enqueued behind the spinning kernel.
  EXPECT_EQ(cudaEventQuery(probe), cudaErrorNotReady) << "the stream was released while enqueueing";
  EXPECT_EQ(c10::cuda::getCurrentCUDAStream(0).stream(), stream) << "the current stream changed";
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*comm)->Barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *reinterpret_cast<volatile int*>(flag) = 1;  // Release the stream.
  cudaStreamSynchronize(stream);
  cudaFreeHost(flag);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("all_reduce #3 on solo[0] (nccl) did not finish"), std::string::npos) << s;
  EXPECT_LT(waited, 10.0);  // Fired near the 1.5 s timeout, not at the spinner's 30 s.
  EXPECT_GT(waited, 1.0) << "returned before the 1.5 s timeout";
  cudaEventDestroy(probe);
  EXPECT_FALSE((*comm)->health().ok());
  EXPECT_FALSE((*comm)->AllReduce(x, ReduceOp::kSum).ok());  // Failed communicators stay failed.
}

}  // namespace
}  // namespace tessera::parallel
