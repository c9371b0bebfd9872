#include "client/certs_command.h"

#include <arpa/inet.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "client/exit_codes.h"
#include "common/tls/certificates.h"

namespace tessera::client {
namespace {

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// Issues every certificate `o` names; prints each file written.
int IssueAll(const CertsOptions& o, bool coordinator) {
  std::vector<tls::CertificateRequest> requests;
  if (coordinator) {
    tls::CertificateRequest r{{tls::Role::kCoordinator, "coordinator"}, {}, {}, o.days};
    for (const std::string& san : o.sans) (IsIpAddress(san) ? r.ip_addresses : r.dns_names).push_back(san);
    requests.push_back(r);
  } else if (!o.sans.empty()) {
    std::cerr << "error: --san applies to the coordinator's certificate only\n";
    return kExitBadInput;
  }
  for (const std::string& w : o.workers) requests.push_back({{tls::Role::kWorker, w}, {}, {}, o.days});
  for (const std::string& u : o.users) requests.push_back({{tls::Role::kUser, u}, {}, {}, o.days});
  if (requests.empty()) {
    std::cerr << "error: name what to issue: --coordinator, --worker NAME or --user NAME\n";
    return kExitBadInput;
  }
  for (const tls::CertificateRequest& r : requests) {
    if (absl::Status s = tls::IssueCertificate(o.dir, r); !s.ok()) {
      std::cerr << "error: " << tls::Describe(r.identity) << ": " << s.message() << "\n";
      return kExitBadInput;
    }
    const std::string stem = o.dir + "/" + tls::CertificateStem(r.identity);
    std::cout << tls::Describe(r.identity) << ": " << stem << ".pem, " << stem << ".key\n";
  }
  return kExitOk;
}

}  // namespace

int CertsInitCommand(const CertsOptions& o) {
  if (absl::Status s = tls::CreateAuthority(o.dir, std::min(36500, o.days * 10)); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return kExitBadInput;
  }
  std::cout << "CA: " << o.dir << "/ca.pem, " << o.dir << "/ca.key (keep ca.key offline: it can mint any identity)\n";
  return IssueAll(o, /*coordinator=*/true);
}

int CertsIssueCommand(const CertsOptions& o) { return IssueAll(o, o.coordinator); }

int CertsShowCommand(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "error: " << path << ": cannot read\n";
    return kExitBadInput;
  }
  std::stringstream pem;
  pem << in.rdbuf();
  auto id = tls::IdentityOfCertificate(pem.str());
  if (!id.ok()) {
    std::cerr << "error: " << path << ": " << id.status().message() << "\n";
    return kExitBadInput;
  }
  std::cout << tls::Describe(*id) << " (" << tls::IdentityUri(*id) << ")\n";
  return kExitOk;
}

}  // namespace tessera::client
