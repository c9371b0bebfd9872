// Mutual TLS for tessera's gRPC connections (docs/security.md): the files a daemon or the CLI is
// started with, the server and channel credentials made from them, and the identity of an RPC's
// caller. Every connection verifies both sides against the cluster's CA (tessera certs init);
// clients check the server's certificate for tls::kCoordinatorServerName.
#ifndef TESSERA_COMMON_RPC_TLS_H_
#define TESSERA_COMMON_RPC_TLS_H_

#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/tls/identity.h"

namespace tessera::rpc {

// Paths given on the command line (--tls_ca, --tls_cert, --tls_key). All empty: no TLS.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
  bool empty() const { return ca.empty() && cert.empty() && key.empty(); }
};

// The loaded files and the identity the certificate carries.
struct TlsMaterial {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  tls::Identity identity;
};

// Reads `files` (all three are required once one is given). Refuses a key file that its group or
// others may read, naming it and the fix, and a certificate without a tessera identity.
absl::StatusOr<TlsMaterial> LoadTls(const TlsFiles& files);

// A daemon's TLS from its --tls_* flags: `files` loaded and the certificate's role checked against
// `role` (`role_hint` says where the right one comes from). Without files, the daemon's address
// (`address_flag` `address`: the one it serves or connects to) must be loopback unless `insecure`
// (the caller warns). nullopt: no TLS.
absl::StatusOr<std::optional<TlsMaterial>> DaemonTls(const TlsFiles& files, tls::Role role, const std::string& role_hint,
                                                     const std::string& address_flag, const std::string& address,
                                                     bool insecure);

// TLS that requires and verifies a client certificate from the CA; insecure when `tls` is empty.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const std::optional<TlsMaterial>& tls);
// The client side: presents the certificate and verifies the server's as tls::kCoordinatorServerName.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const std::optional<TlsMaterial>& tls);

// The caller of an RPC on a TLS server: the tessera identity in its verified certificate.
// Unauthenticated when the connection carries none (a server without TLS: the caller is unknown).
absl::StatusOr<tls::Identity> PeerIdentity(const grpc::ServerContextBase& context);
// The SHA-256 of the public key of the caller's verified certificate (tls::PublicKeySha256).
absl::StatusOr<std::string> PeerKeySha256(const grpc::ServerContextBase& context);
// The caller's verified certificate as PEM ("" without one).
std::string PeerCertificatePem(const grpc::ServerContextBase& context);

// Whether `host_port`'s host is a loopback address (127.0.0.0/8, ::1, localhost): a daemon may serve
// or connect there without TLS.
bool IsLoopback(const std::string& host_port);

}  // namespace tessera::rpc

#endif  // TESSERA_COMMON_RPC_TLS_H_
