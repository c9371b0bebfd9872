// A private certificate authority for one tessera cluster, in a directory (tessera certs): the CA
// and one certificate per coordinator, worker and user, each carrying its identity (identity.h).
// Keys are ECDSA P-256, certificates X.509 v3 signed with SHA-256. Private keys are written with
// mode 0600, certificates 0644, the directory 0700; nothing is ever overwritten.
//
// Layout: DIR/ca.pem, DIR/ca.key; DIR/coordinator.pem|key; DIR/worker-NAME.pem|key;
// DIR/user-NAME.pem|key.
#ifndef TESSERA_COMMON_TLS_CERTIFICATES_H_
#define TESSERA_COMMON_TLS_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tls/identity.h"

namespace tessera::tls {

struct CertificateRequest {
  Identity identity;
  // Extra subject alternative names (coordinator: the host names and addresses clients may also
  // check; kCoordinatorServerName, localhost and 127.0.0.1 are always included).
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  int days = 365;
};

// The file name stem of `id`'s certificate and key in a certificate directory.
std::string CertificateStem(const Identity& id);

// Creates `dir` (mode 0700; it may exist but must not hold a CA yet) and a CA valid for `days`.
absl::Status CreateAuthority(const std::string& dir, int days);

// Issues `request` with the CA in `dir`: DIR/STEM.pem and DIR/STEM.key. A coordinator certificate
// is for servers and clients, a worker's and a user's for clients.
absl::Status IssueCertificate(const std::string& dir, const CertificateRequest& request);

// The identity a PEM certificate carries (its spiffe://tessera/ URI); for checks and `tessera certs show`.
absl::StatusOr<Identity> IdentityOfCertificate(const std::string& pem);

// The SHA-256 of a PEM certificate's public key (its DER SubjectPublicKeyInfo), 64 lowercase hex digits:
// what the coordinator binds a worker name to (a certificate renewed with the same key keeps it).
absl::StatusOr<std::string> PublicKeySha256(const std::string& pem);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_CERTIFICATES_H_
