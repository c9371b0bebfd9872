// Hostile clients against a real tessera-coordinator serving mutual TLS (docs/security.md): real
// gRPC calls, not the CLI. Each attack is refused with the right status code and a clear message,
// counted in the coordinator's metrics, and the daemon keeps serving; nothing of another user's job
// is touched.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "common/rpc/tls.h"
#include "spec/job_spec.h"
#include "common/tls/certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessera/v1/coordinator_service.grpc.pb.h"
#include "tessera/v1/worker_service.grpc.pb.h"
#include "tests/testing/cli.h"
#include "tests/testing/cluster_certs.h"

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
    so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=" + *addr_, "--metrics_listen=" + *metrics_,
               "--db=" + *dir_ + "/c.db", "--tls_ca=" + *certs_ + "/ca.pem", "--tls_cert=" + *certs_ + "/coordinator.pem",
               "--tls_key=" + *certs_ + "/coordinator.key", "--admins=root-admin", "--max_streams_per_client=2",
               "--heartbeat_interval_ms=1000",  // A name hold of 3 s (AWorkerNameIsBound... waits it out).
               "--data_roots=" + *dir_ + "/data", "--output_root=" + *dir_ + "/outputs"};
    std::filesystem::create_directories(*dir_ + "/data");
    std::filesystem::create_directories(*dir_ + "/outputs");
    std::ofstream(*dir_ + "/data/d.bin") << "0123456789";
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
  // A job of `user` inside the roots: data in DIR/data, outputs in DIR/outputs/USER/NAME.
  static v1::SubmitJobRequest Job(const std::string& user, const std::string& name) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec::ParseJobSpec(
        absl::StrCat("name: ", name, "\ndata: {path: ", *dir_, "/data/d.bin}\noutput_dir: ", *dir_, "/outputs/", user, "/", name,
                     "\n"),
        {});
    return req;
  }
  static std::string Submit(const std::string& user, const std::string& name) {
    v1::SubmitJobResponse resp;
    grpc::Status s = v1::CoordinatorService::NewStub(As("user-" + user))->SubmitJob(Ctx().get(), Job(user, name), &resp);
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
  s = v1::CoordinatorService::NewStub(As("worker-node-a"))->SubmitJob(Ctx().get(), Job("node-a", "w"), &submitted);
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

// Worker identity: a worker's name is bound to the key of the certificate that first registered it.
// Another certificate for the same name from this cluster's CA (re-issued: a copied CA key, an old
// node image, an operator's slip) cannot take the name over — not from another instance, not once the
// node has gone silent — until an admin releases it. Before, any certificate naming node-b was node-b.
TEST_F(SecurityTest, AWorkerNameIsBoundToTheKeyThatFirstRegisteredIt) {
  const std::string again = *dir_ + "/reissued";
  std::filesystem::create_directories(again);
  for (const char* f : {"ca.pem", "ca.key"}) std::filesystem::copy_file(*certs_ + "/" + f, again + "/" + f);
  ASSERT_TRUE(tls::IssueCertificate(again, {{tls::Role::kWorker, "node-b"}, {}, {}, 30}).ok());
  ASSERT_NE(*tls::PublicKeySha256(Read(again + "/worker-node-b.pem")),
            *tls::PublicKeySha256(Read(*certs_ + "/worker-node-b.pem")));
  v1::RegisterWorkerRequest reg;
  reg.set_name("node-b");
  reg.set_device_kind(v1::DEVICE_KIND_CPU);
  reg.set_device_count(1);
  reg.set_host("127.0.0.1");
  reg.set_store_port_min(30000);
  reg.set_store_port_max(30001);
  reg.set_instance("the-real-node-b");
  v1::RegisterWorkerResponse resp;
  grpc::Status s = v1::WorkerService::NewStub(As("worker-node-b"))->RegisterWorker(Ctx().get(), reg, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // node-b falls silent (it never heartbeats here: past the 3 s name hold); another instance presents
  // the re-issued certificate.
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  reg.set_instance("an-impostor");
  auto impostor = v1::WorkerService::NewStub(As("worker-node-b", again));
  s = impostor->RegisterWorker(Ctx().get(), reg, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("worker name node-b is bound to another certificate key"));
  // Nor may it act as node-b in any other call: heartbeats (with node-b's session, or "unchecked" 0),
  // its assignment stream, rank reports.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("node-b");
  hb.set_session(resp.session());
  v1::HeartbeatResponse hb_resp;
  s = impostor->Heartbeat(Ctx().get(), hb, &hb_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  hb.set_session(0);
  s = v1::WorkerService::NewStub(As("worker-node-b"))->Heartbeat(Ctx().get(), hb, &hb_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "session 0 is for in-process callers";
  v1::StreamAssignmentsRequest stream_req;
  stream_req.set_worker_id("node-b");
  stream_req.set_session(resp.session());
  {
    auto ctx = Ctx();
    auto reader = impostor->StreamAssignments(ctx.get(), stream_req);
    v1::Assignment assignment;
    EXPECT_FALSE(reader->Read(&assignment));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  v1::ReportRankStatusRequest report;
  report.set_worker_id("node-b");
  report.set_job_id("job-000001");
  v1::ReportRankStatusResponse report_resp;
  EXPECT_EQ(impostor->ReportRankStatus(Ctx().get(), report, &report_resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The first certificate is still node-b's.
  reg.set_instance("the-real-node-b-restarted");
  s = v1::WorkerService::NewStub(As("worker-node-b"))->RegisterWorker(Ctx().get(), reg, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Only an admin may release the name; then the new key binds it (and the old one no longer does).
  v1::ReleaseWorkerKeyRequest release;
  release.set_name("node-b");
  v1::ReleaseWorkerKeyResponse released;
  s = v1::CoordinatorService::NewStub(As("user-mallory"))->ReleaseWorkerKey(Ctx().get(), release, &released);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("ReleaseWorkerKey is for the coordinator's --admins"));
  s = v1::CoordinatorService::NewStub(As("user-root-admin"))->ReleaseWorkerKey(Ctx().get(), release, &released);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));  // The name hold of the last registration.
  reg.set_instance("node-b-with-its-new-certificate");
  s = impostor->RegisterWorker(Ctx().get(), reg, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  reg.set_instance("the-old-certificate");
  s = v1::WorkerService::NewStub(As("worker-node-b"))->RegisterWorker(Ctx().get(), reg, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(Read(*dir_ + "/coordinator.log"), HasSubstr("worker node-b: key released by an admin"));
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
  v1::SubmitJobRequest req = Job("alice", "overflow");
  req.mutable_spec()->mutable_train()->set_micro_batch(65536);
  req.mutable_spec()->mutable_parallel()->set_dp(65536);
  req.mutable_spec()->mutable_train()->set_global_batch(65536);
  v1::SubmitJobResponse resp;
  s = alice->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // micro_batch·dp = 2^32, formed in 64 bits (it wrapped to 0 in 32 and divided by it).
  EXPECT_THAT(s.error_message(), HasSubstr("train.global_batch: 65536 is not a multiple of micro_batch×dp = 4294967296"));
  ExpectServing();
}

// Paths: every attempt to read or write outside the roots, or into another user's or another live
// job's directory, is INVALID_ARGUMENT naming the field; nothing is created outside the roots; logs
// are served by job id and rank only.
TEST_F(SecurityTest, PathsStayInsideTheRootsAndTheUsersOwnDirectory) {
  auto alice = v1::CoordinatorService::NewStub(As("user-alice"));
  const std::string mine = *dir_ + "/outputs/alice";
  std::filesystem::create_directories(mine);
  std::filesystem::create_symlink("/etc", mine + "/escape");  // A symbolic link out of the root.
  std::filesystem::create_directories(*dir_ + "/outside");
  std::filesystem::create_symlink(*dir_ + "/outside", *dir_ + "/data/link");
  struct Case {
    std::string field;
    std::string value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"output_dir", "/etc/x", "output_dir: '/etc/x' must be a directory inside " + mine},
      {"output_dir", mine + "/../bob/run", "must not contain '..'"},
      {"output_dir", "relative/run", "must be an absolute path"},
      {"output_dir", mine + "//run", "must be normalised (an empty component"},
      {"output_dir", mine + "/./run", "must be normalised (a '.' component)"},
      {"output_dir", mine + "/run" + std::string(1, '\0') + "/etc", "contains a NUL byte"},
      {"output_dir", *dir_ + "/outputs/bob/run", "must be a directory inside " + mine + " (the output root's directory of user alice)"},
      {"output_dir", mine, "must be a directory inside"},
      {"output_dir", mine + "/escape/x", "leads outside its root through a symbolic link (to '/etc/x')"},
      {"checkpoint.dir", "/tmp/ckpt", "checkpoint.dir: '/tmp/ckpt' must be a directory inside"},
      {"data.path", "/etc/passwd", "data.path: '/etc/passwd' is outside the data roots"},
      {"data.path", *dir_ + "/data/link/secret.bin", "data.path: '" + *dir_ + "/data/link/secret.bin' leads outside its root"},
      {"data.valid_path", *dir_ + "/data/../c.db", "must not contain '..'"},
      {"model.init_from", "/root/.ssh/id_rsa", "model.init_from: '/root/.ssh/id_rsa' is outside the data roots"},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest req = Job("alice", "paths");
    v1::JobSpec* spec = req.mutable_spec();
    if (c.field == "output_dir") {
      spec->set_output_dir(c.value);
      spec->mutable_checkpoint()->set_dir(mine + "/paths/checkpoints");
    } else if (c.field == "checkpoint.dir") {
      spec->mutable_checkpoint()->set_dir(c.value);
    } else if (c.field == "data.path") {
      spec->mutable_data()->set_path(c.value);
    } else if (c.field == "data.valid_path") {
      spec->mutable_data()->set_valid_path(c.value);
    } else {
      spec->mutable_model()->set_init_from(c.value);
    }
    v1::SubmitJobResponse resp;
    grpc::Status s = alice->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field << " = " << c.value << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.expected)) << c.field << " = " << c.value;
  }
  EXPECT_FALSE(std::filesystem::exists("/etc/x"));
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/outputs/bob")) << "nothing written into another user's directory";
  // Two live jobs never share an output directory, nor nest one in the other.
  const std::string first = Submit("alice", "shared");
  ASSERT_FALSE(first.empty());
  for (const std::string& dir : {mine + "/shared", mine + "/shared/inner"}) {
    v1::SubmitJobRequest req = Job("alice", "shared");
    req.mutable_spec()->set_output_dir(dir);
    req.mutable_spec()->mutable_checkpoint()->set_dir(dir + "/checkpoints");
    v1::SubmitJobResponse resp;
    grpc::Status s = alice->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << dir;
    EXPECT_THAT(s.error_message(), HasSubstr("overlaps the output_dir of live job " + first));
  }
  // Logs are asked for by job id and rank; a crafted id is just an unknown job.
  for (const std::string& crafted : {std::string("../../etc/passwd"), std::string("job-000001/../../c.db"),
                                     std::string("job\0x", 5)}) {
    v1::GetJobLogsRequest logs;
    logs.set_job_id(crafted);
    v1::GetJobLogsResponse resp;
    grpc::Status s = alice->GetJobLogs(Ctx().get(), logs, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << crafted;
    EXPECT_TRUE(resp.data().empty());
  }
  v1::GetJobLogsRequest logs;
  logs.set_job_id(first);
  logs.set_rank(1);
  v1::GetJobLogsResponse resp;
  EXPECT_EQ(alice->GetJobLogs(Ctx().get(), logs, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "rank 1 of a 1-rank job";
  ExpectServing();
}

// The worker checks a job's paths again with its own roots, where the ranks open the files: a job
// the coordinator accepted but that writes outside this worker's --output_root never starts a rank.
TEST(WorkerPathsTest, AWorkerRefusesToStartRanksOutsideItsOwnRoots) {
  const std::string dir = testing::FreshDir("worker_paths");
  testing::ClusterCerts certs(dir + "/certs");
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/data/d.bin") << "0123456789";
  const std::string addr = absl::StrCat("127.0.0.1:", net::PickFreePort());
  process::SpawnOptions c;
  c.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=" + addr, "--metrics_listen=127.0.0.1:0",
            "--db=" + dir + "/c.db", "--data_roots=" + dir + "/data", "--output_root=" + dir + "/outputs"};
  for (const std::string& f : certs.CoordinatorFlags()) c.argv.push_back(f);
  c.log_path = dir + "/coordinator.log";
  process::SpawnOptions w;
  w.argv = {testing::Runfile("worker/tessera-worker"), "--coordinator=" + addr, "--devices=cpu:1", "--name=narrow",
            "--work_dir=" + dir + "/work", "--metrics_listen=127.0.0.1:0", "--data_roots=" + dir + "/data",
            "--output_root=" + dir + "/outputs/alice/only-here"};
  for (const std::string& f : certs.WorkerFlags("narrow")) w.argv.push_back(f);
  w.log_path = dir + "/worker.log";
  const pid_t coordinator = *process::Spawn(c), worker = *process::Spawn(w);
  std::vector<std::string> cli = {"--coordinator=" + addr};
  for (const std::string& f : certs.CliFlags("alice")) cli.push_back(f);
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> all = cli;
    all.insert(all.end(), args.begin(), args.end());
    return testing::RunTessera(all);
  };
  EXPECT_TRUE(testing::WaitFor([&] { return run({"workers"}).output.find("ALIVE") != std::string::npos; }, 20))
      << Read(w.log_path);
  std::ofstream(dir + "/spec.yaml") << "name: elsewhere\ndata: {path: " << dir << "/data/d.bin}\noutput_dir: " << dir
                                    << "/outputs/alice/elsewhere\n";
  auto submitted = run({"submit", dir + "/spec.yaml", "--follow"});
  EXPECT_NE(submitted.exit_code, 0) << submitted.output;
  auto job = run({"job", "job-000001"});
  EXPECT_THAT(job.output, HasSubstr("FAILED"));
  EXPECT_THAT(job.output, HasSubstr("the worker could not start the rank: output_dir: '" + dir + "/outputs/alice/elsewhere' "
                                    "must be a directory inside " + dir + "/outputs/alice/only-here/alice"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/outputs/alice/elsewhere")) << "no rank ran, nothing was written";
  process::StopAll({worker, coordinator}, std::chrono::seconds(5));
}

// The daemons refuse to serve or connect on the network without TLS unless told --insecure, which
// warns on every start.
TEST(InsecureStartTest, NonLoopbackWithoutTlsNeedsInsecure) {
  auto refused = testing::RunCommand({testing::Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=0.0.0.0:0",
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
  so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--ui_listen=127.0.0.1:0", "--listen=0.0.0.0:0", "--metrics_listen=127.0.0.1:0",
             "--db=" + dir + "/c.db", "--insecure"};
  so.log_path = dir + "/coordinator.log";
  pid_t pid = *process::Spawn(so);
  EXPECT_TRUE(testing::WaitFor([&] { return Read(so.log_path).find("listening on") != std::string::npos; }, 20));
  EXPECT_THAT(Read(so.log_path), HasSubstr("WARNING: --insecure: serving 0.0.0.0:0 without TLS"));
  process::StopAll({pid}, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tessera
