#include "common/tls/certificates.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::tls {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

// The newest OpenSSL error as text (the queue is cleared).
std::string OpenSslError(const std::string& what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = {0};
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  return absl::StrCat(what, e != 0 ? absl::StrCat(": ", buf) : "");
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read (", std::strerror(errno), ")"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `data` to a new file `path` with `mode`; fails if it exists.
absl::Status WriteNewFile(const std::string& path, const std::string& data, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) {
    return errno == EEXIST ? absl::AlreadyExistsError(absl::StrCat(path, ": exists; nothing was overwritten"))
                           : absl::InternalError(absl::StrCat(path, ": cannot create (", std::strerror(errno), ")"));
  }
  fchmod(fd, mode);  // Whatever the umask.
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      close(fd);
      unlink(path.c_str());
      return absl::InternalError(absl::StrCat(path, ": write failed (", err, ")"));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) return absl::InternalError(absl::StrCat(path, ": cannot sync"));
  return absl::OkStatus();
}

std::string ToPem(X509* cert) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string ToPem(EVP_PKEY* key) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || !X509_add_ext(cert, ext.get(), -1)) {
    return absl::InternalError(OpenSslError(absl::StrCat("certificate extension ", OBJ_nid2sn(nid), "=", value)));
  }
  return absl::OkStatus();
}

// A new certificate for `key` named `common_name`, valid from an hour ago for `days`, with a
// random 127-bit serial; issuer and signature are set by the caller.
absl::StatusOr<Owned<X509>> NewCertificate(EVP_PKEY* key, const std::string& common_name, int days) {
  Owned<X509> cert(X509_new());
  Owned<BIGNUM> serial(BN_new());
  if (!cert || !serial || !X509_set_version(cert.get(), 2) || !BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) ||
      !X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400) ||
      !X509_set_pubkey(cert.get(), key)) {
    return absl::InternalError(OpenSslError("creating a certificate"));
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("tessera"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  return cert;
}

absl::StatusOr<Owned<EVP_PKEY>> NewKey() {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return absl::InternalError(OpenSslError("generating an ECDSA P-256 key"));
  return key;
}

}  // namespace

std::string CertificateStem(const Identity& id) {
  return id.role == Role::kCoordinator ? "coordinator" : absl::StrCat(RoleName(id.role), "-", id.name);
}

absl::Status CreateAuthority(const std::string& dir, int days) {
  if (days < 1 || days > 36500) return absl::InvalidArgumentError(absl::StrCat("--days: ", days, " must be in 1..36500"));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat(dir, ": cannot create (", std::strerror(errno), ")"));
  }
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCertificate(key->get(), "tessera cluster CA", days);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  X509_set_issuer_name(c, X509_get_subject_name(c));
  for (const auto& [nid, value] : std::vector<std::pair<int, std::string>>{
           {NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
           {NID_key_usage, "critical,keyCertSign,cRLSign"},
           {NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExtension(c, c, nid, value); !s.ok()) return s;
  }
  if (!X509_sign(c, key->get(), EVP_sha256())) return absl::InternalError(OpenSslError("signing the CA"));
  // The key first: a CA certificate without its key would block a retry.
  if (absl::Status s = WriteNewFile(dir + "/ca.key", ToPem(key->get()), 0600); !s.ok()) return s;
  return WriteNewFile(dir + "/ca.pem", ToPem(c), 0644);
}

absl::Status IssueCertificate(const std::string& dir, const CertificateRequest& request) {
  const Identity& id = request.identity;
  if (id.role != Role::kCoordinator && !ValidIdentityName(id.name)) {
    return absl::InvalidArgumentError(absl::StrCat("name '", id.name, "' must be 1..128 of letters, digits, '-', '_' and '.'"));
  }
  if (request.days < 1 || request.days > 36500) {
    return absl::InvalidArgumentError(absl::StrCat("--days: ", request.days, " must be in 1..36500"));
  }
  auto ca_pem = ReadFile(dir + "/ca.pem");
  if (!ca_pem.ok()) return absl::NotFoundError(absl::StrCat(ca_pem.status().message(), "; run tessera certs init first"));
  auto ca_key_pem = ReadFile(dir + "/ca.key");
  if (!ca_key_pem.ok()) return ca_key_pem.status();
  Owned<BIO> cb(BIO_new_mem_buf(ca_pem->data(), static_cast<int>(ca_pem->size())));
  Owned<X509> ca(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  Owned<BIO> kb(BIO_new_mem_buf(ca_key_pem->data(), static_cast<int>(ca_key_pem->size())));
  Owned<EVP_PKEY> ca_key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!ca || !ca_key) return absl::InvalidArgumentError(OpenSslError(absl::StrCat(dir, "/ca.pem or ca.key: not a PEM CA")));
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/ca.key does not belong to ", dir, "/ca.pem"));
  }
  Identity named = id;
  if (named.role == Role::kCoordinator) named.name = "coordinator";
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCertificate(key->get(), Describe(named), request.days);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  X509_set_issuer_name(c, X509_get_subject_name(ca.get()));
  std::vector<std::string> san = {absl::StrCat("URI:", IdentityUri(named))};
  if (named.role == Role::kCoordinator) {
    san.push_back(absl::StrCat("DNS:", kCoordinatorServerName));
    san.push_back("DNS:localhost");
    san.push_back("IP:127.0.0.1");
  }
  for (const std::string& d : request.dns_names) san.push_back("DNS:" + d);
  for (const std::string& a : request.ip_addresses) san.push_back("IP:" + a);
  const std::string usage = named.role == Role::kCoordinator ? "serverAuth,clientAuth" : "clientAuth";
  for (const auto& [nid, value] : std::vector<std::pair<int, std::string>>{
           {NID_basic_constraints, "critical,CA:FALSE"},
           {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
           {NID_ext_key_usage, usage},
           {NID_subject_key_identifier, "hash"},
           {NID_authority_key_identifier, "keyid:always"},
           {NID_subject_alt_name, absl::StrJoin(san, ",")}}) {
    if (absl::Status s = AddExtension(c, ca.get(), nid, value); !s.ok()) return s;
  }
  if (!X509_sign(c, ca_key.get(), EVP_sha256())) return absl::InternalError(OpenSslError("signing the certificate"));
  const std::string stem = absl::StrCat(dir, "/", CertificateStem(named));
  if (absl::Status s = WriteNewFile(stem + ".key", ToPem(key->get()), 0600); !s.ok()) return s;
  return WriteNewFile(stem + ".pem", ToPem(c), 0644);
}

absl::StatusOr<Identity> IdentityOfCertificate(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Owned<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError(OpenSslError("not a PEM certificate"));
  GENERAL_NAMES* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  absl::StatusOr<Identity> found = absl::NotFoundError(absl::StrCat("the certificate has no ", kUriPrefix, " identity"));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const ASN1_STRING* uri = n->d.uniformResourceIdentifier;
    auto id = ParseIdentityUri(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                           static_cast<size_t>(ASN1_STRING_length(uri))));
    if (id.ok()) found = *id;
  }
  GENERAL_NAMES_free(names);
  return found;
}

absl::StatusOr<std::string> PublicKeySha256(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Owned<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError(OpenSslError("not a PEM certificate"));
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(X509_get0_pubkey(cert.get()), &der);
  if (n <= 0) return absl::InvalidArgumentError(OpenSslError("the certificate's public key"));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const bool ok = EVP_Digest(der, static_cast<size_t>(n), digest, &length, EVP_sha256(), nullptr) == 1;
  OPENSSL_free(der);
  if (!ok) return absl::InternalError(OpenSslError("SHA-256"));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += {kHex[digest[i] >> 4], kHex[digest[i] & 15]};
  return hex;
}

}  // namespace tessera::tls
