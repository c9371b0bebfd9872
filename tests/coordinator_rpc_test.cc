// Malformed RPCs against a real tessera-coordinator process: empty, invalid, oversized and
// unparsable requests are rejected with a clear status, and the coordinator keeps serving.
#include <chrono>
#include <fstream>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"
#include "tessera/v1/worker_service.grpc.pb.h"
#include "tests/testing/cli.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class CoordinatorRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::FreshDir("coordinator_rpc");
    addr_ = absl::StrCat("127.0.0.1:", net::PickFreePort());
    process::SpawnOptions so;
    so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--listen=" + addr_,
               "--metrics_listen=127.0.0.1:0", "--db=" + dir + "/c.db"};
    so.log_path = dir + "/coordinator.log";
    pid_ = *process::Spawn(so);
    channel_ = grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials());
    ASSERT_TRUE(channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20)));
    jobs_ = v1::CoordinatorService::NewStub(channel_);
    workers_ = v1::WorkerService::NewStub(channel_);
  }
  void TearDown() override { process::StopAll({pid_}, std::chrono::seconds(5)); }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }
  void ExpectServing() {
    v1::ListJobsResponse resp;
    EXPECT_TRUE(jobs_->ListJobs(Ctx().get(), v1::ListJobsRequest(), &resp).ok()) << "the coordinator keeps serving";
  }

  std::string addr_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CoordinatorService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

TEST_F(CoordinatorRpcTest, EmptyAndInvalidRequestsNameTheField) {
  v1::SubmitJobResponse resp;
  grpc::Status s = jobs_->SubmitJob(Ctx().get(), v1::SubmitJobRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "spec: is required");
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("x");  // Everything else zero: each problem named.
  req.set_max_restarts(-3);
  s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("model.layers: 0 must be at least 1"));
  EXPECT_THAT(s.error_message(), HasSubstr("parallel.dp: 0 must be at least 1"));
  EXPECT_THAT(s.error_message(), HasSubstr("max_restarts: -3 must be between 0 and 100"));
  v1::GetJobResponse get;
  EXPECT_EQ(jobs_->GetJob(Ctx().get(), v1::GetJobRequest(), &get).error_message(), "job_id: is required");
  v1::RegisterWorkerResponse reg;
  v1::RegisterWorkerRequest wreq;
  wreq.set_name("w");
  wreq.set_device_count(-1);
  s = workers_->RegisterWorker(Ctx().get(), wreq, &reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("device_kind: must be cpu or cuda"));
  EXPECT_THAT(s.error_message(), HasSubstr("device_count: -1 must be between 1 and 1024"));
  v1::HeartbeatResponse hb;
  v1::HeartbeatRequest hreq;
  hreq.set_worker_id("nobody");
  EXPECT_EQ(workers_->Heartbeat(Ctx().get(), hreq, &hb).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectServing();
}

TEST_F(CoordinatorRpcTest, HugeAndUnparsableRequestsAreRejected) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name(std::string(8 << 20, 'x'));  // Over gRPC's 4 MiB receive limit.
  v1::SubmitJobResponse resp;
  grpc::Status s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  req.mutable_spec()->set_name(std::string(1 << 20, 'x'));  // Under the limit: a spec error.
  s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("name: "));
  EXPECT_LT(s.error_message().size(), 4096u) << "errors do not echo megabytes back";
  // Bytes that are not a SubmitJobRequest at all (a wire-type mismatch on field 1).
  grpc::GenericStub generic(channel_);
  const char garbage[] = "\x0a\xff\xff\xff\xff\x0f\x01\x02";
  grpc::Slice slice(garbage, sizeof(garbage) - 1);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status generic_status;
  generic.UnaryCall(&ctx, "/tessera.v1.CoordinatorService/SubmitJob", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status st) {
                      std::lock_guard<std::mutex> lock(mu);
                      generic_status = st;
                      done = true;
                      cv.notify_one();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  EXPECT_FALSE(generic_status.ok());
  EXPECT_NE(generic_status.error_code(), grpc::StatusCode::UNAVAILABLE) << "the coordinator did not crash";
  ExpectServing();
}

}  // namespace
}  // namespace tessera
