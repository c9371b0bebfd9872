#include "common/tls/certificates.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/rpc/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::tls {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(CertificatesTest, AuthorityAndCertificatesCarryTheirIdentityWithSafePermissions) {
  const std::string dir = FreshDir("certs");
  ASSERT_TRUE(CreateAuthority(dir, 3650).ok());
  EXPECT_EQ(Mode(dir), 0700);
  EXPECT_EQ(Mode(dir + "/ca.key"), 0600);
  EXPECT_EQ(Mode(dir + "/ca.pem"), 0644);
  for (const Identity& id : {Identity{Role::kCoordinator, ""}, Identity{Role::kWorker, "node-1"}, Identity{Role::kUser, "alice"}}) {
    ASSERT_TRUE(IssueCertificate(dir, {id, {}, {}, 30}).ok()) << Describe(id);
    const std::string stem = dir + "/" + CertificateStem(id);
    EXPECT_EQ(Mode(stem + ".key"), 0600);
    auto back = IdentityOfCertificate(Read(stem + ".pem"));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->role, id.role);
    EXPECT_EQ(back->name, id.role == Role::kCoordinator ? "coordinator" : id.name);
    auto loaded = rpc::LoadTls({dir + "/ca.pem", stem + ".pem", stem + ".key"});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->identity.role, id.role);
  }
  EXPECT_EQ(CertificateStem({Role::kWorker, "node-1"}), "worker-node-1");
  // Nothing is overwritten: a second CA or the same certificate again is refused.
  EXPECT_THAT(CreateAuthority(dir, 10).message(), HasSubstr("exists; nothing was overwritten"));
  EXPECT_THAT(IssueCertificate(dir, {{Role::kUser, "alice"}, {}, {}, 30}).message(), HasSubstr("exists"));
  EXPECT_THAT(IssueCertificate(dir, {{Role::kUser, "../alice"}, {}, {}, 30}).message(), HasSubstr("must be 1..128 of letters"));
  EXPECT_THAT(IssueCertificate(FreshDir("no_ca"), {{Role::kUser, "bob"}, {}, {}, 30}).message(),
              HasSubstr("run tessera certs init first"));
}

TEST(CertificatesTest, LoadTlsRefusesAReadableKeyAndPartialFlags) {
  const std::string dir = FreshDir("certs_perm");
  ASSERT_TRUE(CreateAuthority(dir, 30).ok());
  ASSERT_TRUE(IssueCertificate(dir, {{Role::kUser, "bob"}, {}, {}, 30}).ok());
  chmod((dir + "/user-bob.key").c_str(), 0644);
  auto loaded = rpc::LoadTls({dir + "/ca.pem", dir + "/user-bob.pem", dir + "/user-bob.key"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr("permissions 0644 let others read the private key; chmod 600 it"));
  EXPECT_THAT(rpc::LoadTls({dir + "/ca.pem", "", ""}).status().message(), HasSubstr("--tls_cert is required with TLS"));
  // The CA's own certificate names no tessera identity: not usable as a peer certificate.
  chmod((dir + "/user-bob.key").c_str(), 0600);
  EXPECT_THAT(rpc::LoadTls({dir + "/ca.pem", dir + "/ca.pem", dir + "/user-bob.key"}).status().message(),
              HasSubstr("has no spiffe://tessera/ identity"));
}

TEST(IdentityTest, UrisRoundTripAndStrangersAreRefused) {
  for (const Identity& id : {Identity{Role::kWorker, "a.b-c_1"}, Identity{Role::kUser, "alice"}}) {
    auto back = ParseIdentityUri(IdentityUri(id));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->role, id.role);
    EXPECT_EQ(back->name, id.name);
  }
  for (const char* bad : {"spiffe://other/user/alice", "spiffe://tessera/admin/alice", "spiffe://tessera/user/",
                          "spiffe://tessera/user/a/b", "spiffe://tessera/user", "https://tessera/user/alice"}) {
    EXPECT_FALSE(ParseIdentityUri(bad).ok()) << bad;
  }
  EXPECT_TRUE(rpc::IsLoopback("127.0.0.1:7070"));
  EXPECT_TRUE(rpc::IsLoopback("localhost:1"));
  EXPECT_TRUE(rpc::IsLoopback("[::1]:7070"));
  EXPECT_FALSE(rpc::IsLoopback("0.0.0.0:7070"));
  EXPECT_FALSE(rpc::IsLoopback("198.18.0.1:7070"));
  EXPECT_FALSE(rpc::IsLoopback("[::]:7070"));
}

}  // namespace
}  // namespace tessera::tls
