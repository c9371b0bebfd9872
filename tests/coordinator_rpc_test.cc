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
#include "spec/job_spec.h"
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
    so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=" + addr_,
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

// The overflow reproductions sent as raw RPCs (no CLI in between): each is INVALID_ARGUMENT
// naming the field, within the deadline, and the coordinator keeps serving.
TEST_F(CoordinatorRpcTest, OverflowingSpecsAreRefusedAndTheCoordinatorSurvives) {
  auto base = spec::ParseJobSpec("name: x\ndata: {path: /d.bin}\n", {});
  ASSERT_TRUE(base.ok()) << base.status();
  struct Case {
    std::vector<std::string> set;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"train.micro_batch=65536", "parallel.dp=65536", "train.global_batch=65536"},
       "train.global_batch: 65536 is not a multiple of micro_batch×dp = 4294967296"},
      {{"parallel.dp=65536", "parallel.tp=65536", "parallel.pp=65536", "parallel.sp=65536"}, "exceeds the limit 4096"},
      {{"parallel.tp=2147483647", "parallel.tp_mode=3d"}, "parallel.tp: 2147483647 exceeds the limit 4096"},
      {{"parallel.tp=2147483646", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"}, "parallel.tp: 2147483646 exceeds"},
      {{"model.layers=2147483647", "model.hidden=2147483647", "model.seq_len=2147483647"}, "model.layers: 2147483647 exceeds"},
      {{"train.steps=9223372036854775807"}, "train.steps: 9223372036854775807 exceeds the limit"},
  };
  for (const Case& c : cases) {
    auto spec = spec::ParseJobSpec("name: x\ndata: {path: /d.bin}\n", c.set);
    ASSERT_TRUE(spec.ok()) << spec.status();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.expected << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.expected));
    v1::PlanJobRequest plan;
    *plan.mutable_spec() = *spec;
    v1::PlanJobResponse planned;
    EXPECT_EQ(jobs_->PlanJob(Ctx().get(), plan, &planned).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A path with a NUL byte (proto strings may hold one) and a 4 MiB string.
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *base;
  req.mutable_spec()->set_output_dir(std::string("/tmp/a\0/etc", 11));
  v1::SubmitJobResponse resp;
  grpc::Status s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("output_dir: contains a NUL byte at offset 6"));
  req.mutable_spec()->set_output_dir(std::string(4 << 20, 'a'));
  s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << "over the coordinator's explicit 4 MiB message limit";
  req.mutable_spec()->set_output_dir(std::string(3 << 20, 'a'));
  s = jobs_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("output_dir: is 3145728 bytes long, more than the limit 4096"));
  ExpectServing();
}

TEST_F(CoordinatorRpcTest, ListJobsIsPaginated) {
  auto spec = spec::ParseJobSpec("name: x\ndata: {path: /d.bin}\n", {});
  ASSERT_TRUE(spec.ok());
  for (int i = 0; i < 5; ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.mutable_spec()->set_output_dir(absl::StrCat("/tmp/list-", i));  // Live jobs need directories of their own.
    req.mutable_spec()->mutable_checkpoint()->set_dir(absl::StrCat("/tmp/list-", i, "/checkpoints"));
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(jobs_->SubmitJob(Ctx().get(), req, &resp).ok());
  }
  v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> ids;
  int pages = 0;
  do {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(Ctx().get(), req, &resp).ok());
    EXPECT_LE(resp.jobs_size(), 2);
    for (const auto& j : resp.jobs()) ids.push_back(j.id());
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(ids, (std::vector<std::string>{"job-000005", "job-000004", "job-000003", "job-000002", "job-000001"}));
  req.set_page_size(-1);
  v1::ListJobsResponse resp;
  EXPECT_EQ(jobs_->ListJobs(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace tessera
