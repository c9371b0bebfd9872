// `tessera certs`: the cluster's private CA and its certificates (common/tls/certificates.h).
//   certs init DIR [--worker NAME]... [--user NAME]... [--san HOST|IP]... [--days N]
//       a new CA, the coordinator's certificate and one per named worker and user
//   certs issue DIR (--coordinator | --worker NAME | --user NAME) [--san HOST|IP]... [--days N]
//   certs show FILE      the identity a certificate carries
#ifndef TESSERA_CLIENT_CERTS_COMMAND_H_
#define TESSERA_CLIENT_CERTS_COMMAND_H_

#include <string>
#include <vector>

namespace tessera::client {

struct CertsOptions {
  std::string dir;
  std::vector<std::string> workers;
  std::vector<std::string> users;
  bool coordinator = false;           // issue: the coordinator's certificate.
  std::vector<std::string> sans;      // Extra coordinator names: host names or IP addresses.
  int days = 365;                     // Leaf certificates; the CA gets ten times as long.
};

int CertsInitCommand(const CertsOptions& o);
int CertsIssueCommand(const CertsOptions& o);
int CertsShowCommand(const std::string& path);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CERTS_COMMAND_H_
