#include "common/rpc/tls.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tls/certificates.h"

namespace tessera::rpc {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read (", std::strerror(errno), ")"));
  std::string data(1 << 20, '\0');  // PEM files of one certificate or key are a few KiB.
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

}  // namespace

absl::StatusOr<TlsMaterial> LoadTls(const TlsFiles& files) {
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--tls_ca", files.ca},
                                   {"--tls_cert", files.cert},
                                   {"--tls_key", files.key}}) {
    if (path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " is required with TLS (--tls_ca, --tls_cert and --tls_key go together)"));
    }
  }
  struct stat st {};
  if (stat(files.key.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_key ", files.key, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls_key %s: permissions %04o let others read the private key; chmod 600 it", files.key, st.st_mode & 07777));
  }
  TlsMaterial m;
  for (auto [flag, path, out] : {std::tuple<const char*, const std::string*, std::string*>{"--tls_ca", &files.ca, &m.ca_pem},
                                 {"--tls_cert", &files.cert, &m.cert_pem},
                                 {"--tls_key", &files.key, &m.key_pem}}) {
    auto data = ReadSmallFile(flag, *path);
    if (!data.ok()) return data.status();
    *out = std::move(*data);
  }
  auto id = tls::IdentityOfCertificate(m.cert_pem);
  if (!id.ok()) return absl::InvalidArgumentError(absl::StrCat("--tls_cert ", files.cert, ": ", id.status().message()));
  m.identity = *id;
  return m;
}

absl::StatusOr<std::optional<TlsMaterial>> DaemonTls(const TlsFiles& files, tls::Role role, const std::string& role_hint,
                                                     const std::string& address_flag, const std::string& address,
                                                     bool insecure) {
  if (files.empty()) {
    if (!IsLoopback(address) && !insecure) {
      return absl::InvalidArgumentError(absl::StrCat(
          address_flag, " ", address, " is not a loopback address: give --tls_ca, --tls_cert and --tls_key (tessera ",
          "certs init), or --insecure to do without authentication"));
    }
    return std::optional<TlsMaterial>();
  }
  auto loaded = LoadTls(files);
  if (!loaded.ok()) return loaded.status();
  if (loaded->identity.role != role) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert ", files.cert, " names ", tls::Describe(loaded->identity),
                                                   "; this daemon needs ", role_hint));
  }
  return std::optional<TlsMaterial>(std::move(*loaded));
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const std::optional<TlsMaterial>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls->ca_pem;
  o.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const std::optional<TlsMaterial>& tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls->ca_pem;
  o.pem_private_key = tls->key_pem;
  o.pem_cert_chain = tls->cert_pem;
  return grpc::SslCredentials(o);
}

absl::StatusOr<tls::Identity> PeerIdentity(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    return absl::UnauthenticatedError("the caller presented no certificate");
  }
  std::optional<tls::Identity> found;
  for (const grpc::string_ref& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    auto id = tls::ParseIdentityUri(std::string_view(uri.data(), uri.size()));
    if (!id.ok()) continue;
    if (found) return absl::UnauthenticatedError("the caller's certificate names more than one tessera identity");
    found = *id;
  }
  if (!found) {
    // gRPC versions that do not list URI names: read the verified leaf certificate itself.
    for (const grpc::string_ref& pem : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
      auto id = tls::IdentityOfCertificate(std::string(pem.data(), pem.size()));
      if (id.ok()) found = *id;
    }
  }
  if (!found) return absl::UnauthenticatedError(absl::StrCat("the caller's certificate has no ", tls::kUriPrefix, " identity"));
  return *found;
}

std::string PeerCertificatePem(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  for (const grpc::string_ref& pem : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
    return std::string(pem.data(), pem.size());
  }
  return "";
}

absl::StatusOr<std::string> PeerKeySha256(const grpc::ServerContextBase& context) {
  const std::string pem = PeerCertificatePem(context);
  if (pem.empty()) return absl::UnauthenticatedError("the caller presented no certificate");
  return tls::PublicKeySha256(pem);
}

bool IsLoopback(const std::string& host_port) {
  std::string host = host_port;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (host.find(':') != host.rfind(':')) {
    // A bare IPv6 address without a port.
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  if (absl::StartsWith(host, "ipv4:")) host = host.substr(5);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace tessera::rpc
