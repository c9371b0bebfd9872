// WorkerKeys against a real SQLite JobStore and real certificates (common/tls): a name binds to the first
// key, durably (across reopening the database); another key is refused until an admin's release; a worker
// RPC's certificate must carry the bound key (a stranger's or an unreadable PEM does not), also after
// the name passed to another key.
#include "coordinator/worker_keys.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/time/fake_clock.h"
#include "common/tls/certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

// A fresh path under the test's temporary directory (SQLite's -wal and -shm files removed too).
std::string TempPath(const std::string& name) {
  const std::string p = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove_all(p + suffix);
  return p;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class WorkerKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = TempPath("worker_keys_test.db");
    Reopen();
  }
  // Closes the database and opens it again: what a coordinator restart reads.
  void Reopen() {
    store_.reset();
    auto store = JobStore::Open({db_});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  WorkerKeysOptions Options() {
    return {store_.get(), &clock_, [this](const std::string& line) { lines_.push_back(line); }};
  }
  std::string db_;
  std::unique_ptr<JobStore> store_;
  FakeClock clock_;
  std::vector<std::string> lines_;
};

// The worker service binds before the coordinator accepts a registration and takes a binding back
// when it refuses it: Bind says whether it bound, and Unbind forgets durably, with the reason.
TEST_F(WorkerKeysTest, ABindingOfARefusedRegistrationIsTakenBack) {
  const std::string k1(64, 'a'), k2(64, 'b');
  {
    WorkerKeys keys(Options());
    ASSERT_TRUE(keys.Load().ok());
    bool bound_now = false;
    ASSERT_TRUE(keys.Bind("node1", k1, &bound_now).ok());
    EXPECT_TRUE(bound_now);
    ASSERT_TRUE(keys.Bind("node1", k1, &bound_now).ok());
    EXPECT_FALSE(bound_now) << "bound before: not this call's";
    EXPECT_EQ(keys.Bind("node1", k2, &bound_now).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_FALSE(bound_now);
    ASSERT_TRUE(keys.Unbind("node1", "key taken back: its first registration was refused (x)").ok());
    EXPECT_TRUE(keys.Check("node1", k2).ok());
  }
  Reopen();
  WorkerKeys keys(Options());
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_TRUE(keys.Check("node1", k2).ok()) << "the take-back is durable";
  EXPECT_THAT(lines_, ::testing::ElementsAre("worker node1: bound to certificate key sha256 " + k1,
                                             "worker node1: key taken back: its first registration was refused (x)"));
}

TEST_F(WorkerKeysTest, ANameBindsToItsFirstKeyDurablyUntilReleased) {
  const std::string k1(64, 'a'), k2(64, 'b');
  {
    WorkerKeys keys(Options());
    ASSERT_TRUE(keys.Load().ok());
    EXPECT_TRUE(keys.Check("node1", k1).ok());  // Unbound: any key may register.
    ASSERT_TRUE(keys.Bind("node1", k1).ok());
    EXPECT_TRUE(keys.Bind("node1", k1).ok());  // Again with its key: nothing changes.
    EXPECT_TRUE(keys.Check("node1", k1).ok());
    absl::Status refused = keys.Check("node1", k2);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(refused.message(), HasSubstr("worker name node1 is bound to another certificate key (sha256 aaaa"));
    EXPECT_THAT(refused.message(), HasSubstr("tessera workers --release-key node1"));
    EXPECT_EQ(keys.Bind("node1", k2).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(keys.Check("node2", k2).ok());  // Names are bound one by one.
  }
  Reopen();
  {  // A restart (the database reopened, a new WorkerKeys) keeps the binding.
    WorkerKeys keys(Options());
    ASSERT_TRUE(keys.Load().ok());
    EXPECT_EQ(keys.Check("node1", k2).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(keys.Release("node2").code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(keys.Release("node1").ok());
    EXPECT_TRUE(keys.Check("node1", k2).ok());
  }
  Reopen();
  {  // The release is durable too: the next registration binds again.
    WorkerKeys keys(Options());
    ASSERT_TRUE(keys.Load().ok());
    ASSERT_TRUE(keys.Bind("node1", k2).ok());
    EXPECT_EQ(keys.Check("node1", k1).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_THAT(lines_, ::testing::ElementsAre("worker node1: bound to certificate key sha256 " + k1,
                                             "worker node1: key released by an admin",
                                             "worker node1: bound to certificate key sha256 " + k2));
}

TEST_F(WorkerKeysTest, AWorkerCallsCertificateMustCarryTheBoundKey) {
  const std::string ca = TempPath("ca");
  ASSERT_TRUE(tls::CreateAuthority(ca, 30).ok());
  ASSERT_TRUE(tls::IssueCertificate(ca, {{tls::Role::kWorker, "node1"}, {}, {}, 30}).ok());
  ASSERT_TRUE(tls::IssueCertificate(ca, {{tls::Role::kWorker, "node2"}, {}, {}, 30}).ok());
  const std::string mine = Slurp(ca + "/worker-node1.pem"), other = Slurp(ca + "/worker-node2.pem");
  auto my_key = tls::PublicKeySha256(mine);
  ASSERT_TRUE(my_key.ok()) << my_key.status();
  WorkerKeys keys(Options());
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_TRUE(keys.CheckCertificate("node1", other).ok());  // Never registered: the call finds no worker.
  ASSERT_TRUE(keys.Bind("node1", *my_key).ok());
  EXPECT_TRUE(keys.CheckCertificate("node1", mine).ok());
  EXPECT_TRUE(keys.CheckCertificate("node1", mine).ok());  // Again (now the cached certificate's path).
  EXPECT_EQ(keys.CheckCertificate("node1", other).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(keys.CheckCertificate("node1", "not a certificate").code(), absl::StatusCode::kUnauthenticated);
  // Released and bound to another key: the certificate seen before is no longer let through.
  ASSERT_TRUE(keys.Release("node1").ok());
  auto other_key = tls::PublicKeySha256(other);
  ASSERT_TRUE(other_key.ok());
  ASSERT_TRUE(keys.Bind("node1", *other_key).ok());
  EXPECT_EQ(keys.CheckCertificate("node1", mine).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(keys.CheckCertificate("node1", other).ok());
}

}  // namespace
}  // namespace tessera::coordinator
