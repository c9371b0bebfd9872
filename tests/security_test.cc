// Hostile clients against a real tessera-coordinator serving mutual TLS (docs/security.md): real
// gRPC calls, not the CLI. Each attack is refused with the right status code and a clear message,
// counted in the coordinator's metrics, and the daemon keeps serving; nothing of another user's job
// is touched.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "common/rpc/tls.h"
#include "common/spec/job_spec.h"
#include "common/tls/certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"
#include "tessera/v1/worker_service.grpc.pb.h"
#include "tests/testing/cli.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::FreshDir("security"));
    certs_ = new std::string(*dir_ + "/certs");
    ASSERT_TRUE(tls::CreateAuthority(*certs_, 30).ok());
    ASSERT_TRUE(tls::IssueCertificate(*certs_, {{tls::Role::kCoordinator, "coordinator"}, {}, {}, 30}).ok());
    for (const char* w : {"node-a", "node-b"}) ASSERT_TRUE(tls::IssueCertificate(*certs_, {{tls::Role::kWorker, w}, {}, {}, 30}).ok());
    for (const char* u : {"alice", "mallory", "root-admin"}) {
      ASSERT_TRUE(tls::IssueCertificate(*certs_, {{tls::Role::kUser, u}, {}, {}, 30}).ok());
    }
    // Another CA entirely, with a "user alice" of its own.
    const std::string other = *dir_ + "/other";
    ASSERT_TRUE(tls::CreateAuthority(other, 30).ok());
    ASSERT_TRUE(tls::IssueCertificate(other, {{tls::Role::kUser, "alice"}, {}, {}, 30}).ok());
    addr_ = new std::string(absl::StrCat("127.0.0.1:", net::PickFreePort()));
    metrics_ = new std::string(absl::StrCat("127.0.0.1:", net::PickFreePort()));
    process::SpawnOptions so;
    so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--listen=" + *addr_, "--metrics_listen=" + *metrics_,
               "--db=" + *dir_ + "/c.db", "--tls_ca=" + *certs_ + "/ca.pem", "--tls_cert=" + *certs_ + "/coordinator.pem",
               "--tls_key=" + *certs_ + "/coordinator.key", "--admins=root-admin", "--max_streams_per_client=2"};
    so.log_path = *dir_ + "/coordinator.log";
    pid_ = *process::Spawn(so);
    ASSERT_TRUE(testing::WaitFor([] { return Read(*dir_ + "/coordinator.log").find("metrics on") != std::string::npos; }, 20));
  }
  static void TearDownTestSuite() { process::StopAll({pid_}, std::chrono::seconds(5)); }

  // A channel presenting DIR/STEM.pem (from `ca_dir`'s CA), trusting this cluster's CA.
  static std::shared_ptr<grpc::Channel> As(const std::string& stem, const std::string& ca_dir = "") {
    const std::string d = ca_dir.empty() ? *certs_ : ca_dir;
    rpc::TlsMaterial m;
    m.ca_pem = Read(*certs_ + "/ca.pem");
    m.cert_pem = Read(d + "/" + stem + ".pem");
    m.key_pem = Read(d + "/" + stem + ".key");
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(tls::kCoordinatorServerName);
    return grpc::CreateCustomChannel(*addr_, rpc::ChannelCredentialsFor(m), args);
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }
  static v1::SubmitJobRequest Job(const std::string& name) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec::ParseJobSpec(absl::StrCat("name: ", name, "\ndata: {path: /d.bin}\n"), {});
    return req;
  }
  static std::string Submit(const std::string& user, const std::string& name) {
    v1::SubmitJobResponse resp;
    grpc::Status s = v1::CoordinatorService::NewStub(As("user-" + user))->SubmitJob(Ctx().get(), Job(name), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job().id();
  }
  static void ExpectServing() {
    v1::ListWorkersResponse resp;
    grpc::Status s = v1::CoordinatorService::NewStub(As("user-alice"))->ListWorkers(Ctx().get(), {}, &resp);
    EXPECT_TRUE(s.ok()) << "the coordinator keeps serving: " << s.error_message();
  }
  static std::string Metrics() {
    return testing::RunCommand({"curl", "-s", "--max-time", "5", "http://" + *metrics_ + "/metrics"}).output;
  }

  static std::string* dir_;
  static std::string* certs_;
  static std::string* addr_;
  static std::string* metrics_;
  static pid_t pid_;
};
std::string* SecurityTest::dir_;
std::string* SecurityTest::certs_;
std::string* SecurityTest::addr_;
std::string* SecurityTest::metrics_;
pid_t SecurityTest::pid_ = -1;

TEST_F(SecurityTest, WithoutAValidClientCertificateNoCallGetsThrough) {
  v1::ListJobsResponse resp;
  // No TLS at all.
  auto plain = v1::CoordinatorService::NewStub(grpc::CreateChannel(*addr_, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(plain->ListJobs(Ctx().get(), {}, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  // TLS that trusts the server but presents no certificate.
  grpc::SslCredentialsOptions server_only;
  server_only.pem_root_certs = Read(*certs_ + "/ca.pem");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(tls::kCoordinatorServerName);
  auto anonymous = v1::CoordinatorService::NewStub(grpc::CreateCustomChannel(*addr_, grpc::SslCredentials(server_only), args));
  EXPECT_EQ(anonymous->ListJobs(Ctx().get(), {}, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A certificate for "user alice" from another CA.
  auto forged = v1::CoordinatorService::NewStub(As("user-alice", *dir_ + "/other"));
  EXPECT_EQ(forged->ListJobs(Ctx().get(), {}, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto forged_worker = v1::WorkerService::NewStub(As("user-alice", *dir_ + "/other"));
  v1::RegisterWorkerRequest reg;
  reg.set_name("alice");
  v1::RegisterWorkerResponse reg_resp;
  EXPECT_EQ(forged_worker->RegisterWorker(Ctx().get(), reg, &reg_resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  ExpectServing();
}

TEST_F(SecurityTest, UsersAndWorkersStayInTheirLane) {
  // A user on the worker service: not even as a name it chooses.
  auto user_as_worker = v1::WorkerService::NewStub(As("user-mallory"));
  v1::RegisterWorkerRequest reg;
  reg.set_name("mallory");
  reg.set_device_kind(v1::DEVICE_KIND_CPU);
  reg.set_device_count(1024);
  reg.set_host("127.0.0.1");
  reg.set_store_port_min(30000);
  reg.set_store_port_max(30001);
  v1::RegisterWorkerResponse reg_resp;
  grpc::Status s = user_as_worker->RegisterWorker(Ctx().get(), reg, &reg_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("RegisterWorker is for workers; the caller's certificate names user mallory"));
  // A worker on the client service.
  v1::SubmitJobResponse submitted;
  s = v1::CoordinatorService::NewStub(As("worker-node-a"))->SubmitJob(Ctx().get(), Job("w"), &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("SubmitJob is for users"));
  // A worker impersonating another, in every worker RPC.
  auto a = v1::WorkerService::NewStub(As("worker-node-a"));
  reg.set_name("node-b");
  s = a->RegisterWorker(Ctx().get(), reg, &reg_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("worker node-a may act only as itself, not as 'node-b'"));
  v1::HeartbeatRequest hb;
  hb.set_worker_id("node-b");
  v1::HeartbeatResponse hb_resp;
  EXPECT_EQ(a->Heartbeat(Ctx().get(), hb, &hb_resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::ReportRankStatusRequest report;
  report.set_worker_id("node-b");
  report.set_job_id("job-000001");
  v1::ReportRankStatusResponse report_resp;
  EXPECT_EQ(a->ReportRankStatus(Ctx().get(), report, &report_resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::StreamAssignmentsRequest stream_req;
  stream_req.set_worker_id("node-b");
  auto ctx = Ctx();
  auto reader = a->StreamAssignments(ctx.get(), stream_req);
  v1::Assignment assignment;
  EXPECT_FALSE(reader->Read(&assignment));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // As itself, the worker is welcome.
  reg.set_name("node-a");
  reg.set_device_count(1);
  s = a->RegisterWorker(Ctx().get(), reg, &reg_resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("tessera_coordinator_rpc_denied_total{method=\"RegisterWorker\",reason=\"wrong_role\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("tessera_coordinator_rpc_denied_total{method=\"RegisterWorker\",reason=\"impersonation\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("tessera_coordinator_rpc_denied_total{method=\"SubmitJob\",reason=\"wrong_role\"} 1"));
  EXPECT_THAT(Read(*dir_ + "/coordinator.log"), HasSubstr("DENIED Heartbeat by worker node-a (ipv4:127.0.0.1:"));
  ExpectServing();
}

TEST_F(SecurityTest, AUserSeesAndChangesOnlyTheirOwnJobs) {
  const std::string job = Submit("alice", "alices-job");
  const std::string other = Submit("mallory", "mallorys-job");
  auto mallory = v1::CoordinatorService::NewStub(As("user-mallory"));
  v1::GetJobRequest get;
  get.set_job_id(job);
  v1::GetJobResponse got;
  grpc::Status s = mallory->GetJob(Ctx().get(), get, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("job ", job, " belongs to another user")));
  EXPECT_FALSE(got.has_job()) << "nothing of the job is returned";
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job);
  v1::CancelJobResponse cancelled;
  EXPECT_EQ(mallory->CancelJob(Ctx().get(), cancel, &cancelled).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::GetJobLogsRequest logs;
  logs.set_job_id(job);
  v1::GetJobLogsResponse log_resp;
  EXPECT_EQ(mallory->GetJobLogs(Ctx().get(), logs, &log_resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::WatchJobRequest watch;
  watch.set_job_id(job);
  auto ctx = Ctx();
  auto reader = mallory->WatchJob(ctx.get(), watch);
  v1::WatchJobResponse update;
  EXPECT_FALSE(reader->Read(&update));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Lists: mallory sees only mallory's job; the admin sees both.
  v1::ListJobsResponse listed;
  ASSERT_TRUE(mallory->ListJobs(Ctx().get(), {}, &listed).ok());
  for (const auto& j : listed.jobs()) EXPECT_EQ(j.owner(), "mallory") << j.id();
  EXPECT_TRUE(std::any_of(listed.jobs().begin(), listed.jobs().end(), [&](const v1::Job& j) { return j.id() == other; }));
  auto admin = v1::CoordinatorService::NewStub(As("user-root-admin"));
  ASSERT_TRUE(admin->ListJobs(Ctx().get(), {}, &listed).ok());
  std::set<std::string> seen;
  for (const auto& j : listed.jobs()) seen.insert(j.id());
  EXPECT_TRUE(seen.count(job) && seen.count(other));
  // Alice's job is untouched; alice may read it, the admin may cancel it.
  auto alice = v1::CoordinatorService::NewStub(As("user-alice"));
  ASSERT_TRUE(alice->GetJob(Ctx().get(), get, &got).ok());
  EXPECT_EQ(got.job().owner(), "alice");
  EXPECT_NE(got.job().state(), v1::JOB_STATE_CANCELLED) << "mallory's cancel did nothing";
  ASSERT_TRUE(admin->CancelJob(Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(Metrics(), HasSubstr("tessera_coordinator_rpc_denied_total{method=\"CancelJob\",reason=\"not_owner\"} 1"));
  ExpectServing();
}

TEST_F(SecurityTest, StreamsPerClientAreCappedAndOverflowsRefused) {
  const std::string job = Submit("alice", "watched");
  auto alice = v1::CoordinatorService::NewStub(As("user-alice"));
  v1::WatchJobRequest watch;
  watch.set_job_id(job);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchJobResponse>>> readers;
  for (int i = 0; i < 2; ++i) {  // --max_streams_per_client=2
    contexts.push_back(Ctx());
    readers.push_back(alice->WatchJob(contexts.back().get(), watch));
    v1::WatchJobResponse first;
    ASSERT_TRUE(readers.back()->Read(&first)) << "stream " << i << " is served";
  }
  auto ctx = Ctx();
  auto third = alice->WatchJob(ctx.get(), watch);
  v1::WatchJobResponse update;
  EXPECT_FALSE(third->Read(&update));
  grpc::Status s = third->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("already has 2 WatchJob streams open"));
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) r->Finish();
  // Closed streams are given back.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto c = Ctx();
        auto r = alice->WatchJob(c.get(), watch);
        v1::WatchJobResponse u;
        const bool ok = r->Read(&u);
        c->TryCancel();
        r->Finish();
        return ok;
      },
      10));
  // The issue's overflow, through TLS as a user.
  v1::SubmitJobRequest req = Job("overflow");
  req.mutable_spec()->mutable_train()->set_micro_batch(65536);
  req.mutable_spec()->mutable_parallel()->set_dp(65536);
  req.mutable_spec()->mutable_train()->set_global_batch(65536);
  v1::SubmitJobResponse resp;
  s = alice->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("parallel.dp: 65536 exceeds the limit 4096"));
  ExpectServing();
}

// The daemons refuse to serve or connect on the network without TLS unless told --insecure, which
// warns on every start.
TEST(InsecureStartTest, NonLoopbackWithoutTlsNeedsInsecure) {
  auto refused = testing::RunCommand({testing::Runfile("coordinator/tessera-coordinator"), "--listen=0.0.0.0:0",
                                      "--metrics_listen=127.0.0.1:0", "--db=" + testing::FreshDir("insecure") + "/c.db"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.output, HasSubstr("--listen 0.0.0.0:0 is not a loopback address: give --tls_ca, --tls_cert and --tls_key"));
  auto worker = testing::RunCommand({testing::Runfile("worker/tessera-worker"), "--coordinator=198.18.0.1:7070", "--name=w",
                                     "--host=127.0.0.1", "--metrics_listen=127.0.0.1:0"});
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_THAT(worker.output, HasSubstr("--coordinator 198.18.0.1:7070 is not a loopback address"));
  auto cli = testing::RunTessera({"--coordinator=198.18.0.1:7070", "jobs"});
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_THAT(cli.output, HasSubstr("is not a loopback address: give --tls-ca"));
  // --insecure: starts, with the warning.
  const std::string dir = testing::FreshDir("insecure_ok");
  process::SpawnOptions so;
  so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--listen=0.0.0.0:0", "--metrics_listen=127.0.0.1:0",
             "--db=" + dir + "/c.db", "--insecure"};
  so.log_path = dir + "/coordinator.log";
  pid_t pid = *process::Spawn(so);
  EXPECT_TRUE(testing::WaitFor([&] { return Read(so.log_path).find("listening on") != std::string::npos; }, 20));
  EXPECT_THAT(Read(so.log_path), HasSubstr("WARNING: --insecure: serving 0.0.0.0:0 without TLS"));
  process::StopAll({pid}, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tessera
