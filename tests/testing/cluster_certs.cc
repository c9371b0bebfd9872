#include "tests/testing/cluster_certs.h"

#include <filesystem>

#include "common/tls/certificates.h"
#include <cstdio>
#include <cstdlib>

namespace tessera::testing {
namespace {

// Certificates are the ground the test stands on: without them nothing can run.
void Check(const absl::Status& s) {
  if (s.ok()) return;
  fprintf(stderr, "ClusterCerts: %s\n", s.ToString().c_str());
  std::abort();
}

}  // namespace

ClusterCerts::ClusterCerts(const std::string& dir) : dir_(dir) {
  std::filesystem::remove_all(dir_);
  Check(tls::CreateAuthority(dir_, 30));
  Check(tls::IssueCertificate(dir_, {{tls::Role::kCoordinator, "coordinator"}, {}, {}, 30}));
}

std::vector<std::string> ClusterCerts::Flags(const std::string& stem, const char* dash) const {
  return {std::string("--tls") + dash + "ca=" + dir_ + "/ca.pem", std::string("--tls") + dash + "cert=" + dir_ + "/" + stem + ".pem",
          std::string("--tls") + dash + "key=" + dir_ + "/" + stem + ".key"};
}

std::vector<std::string> ClusterCerts::RootFlags(const std::string& dir) {
  const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
  return {"--data_roots=" + d.string(), "--output_root=" + d.parent_path().string()};
}

std::string ClusterCerts::UserOf(const std::string& dir) {
  return std::filesystem::path(dir).lexically_normal().filename().string();
}

std::vector<std::string> ClusterCerts::CoordinatorFlags() const { return Flags("coordinator", "_"); }

std::vector<std::string> ClusterCerts::WorkerFlags(const std::string& name) {
  const tls::Identity id{tls::Role::kWorker, name};
  if (!std::filesystem::exists(dir_ + "/" + tls::CertificateStem(id) + ".pem")) {
    Check(tls::IssueCertificate(dir_, {id, {}, {}, 30}));
  }
  return Flags(tls::CertificateStem(id), "_");
}

std::vector<std::string> ClusterCerts::CliFlags(const std::string& user) {
  const tls::Identity id{tls::Role::kUser, user};
  if (!std::filesystem::exists(dir_ + "/" + tls::CertificateStem(id) + ".pem")) {
    Check(tls::IssueCertificate(dir_, {id, {}, {}, 30}));
  }
  return Flags(tls::CertificateStem(id), "-");
}

}  // namespace tessera::testing
