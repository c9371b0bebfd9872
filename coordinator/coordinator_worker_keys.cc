// Worker identity with TLS: each worker name bound to the key of the certificate that first registered
// it (durably, JobStore's worker_keys), checked at every worker RPC, released only by an admin.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tls/certificates.h"
#include "coordinator/coordinator.h"

namespace tessera::coordinator {
namespace {

// Why a registration or call of `name` with key `presented` is refused: the name is bound to `bound`.
absl::Status KeyConflict(const std::string& name, const std::string& bound, const std::string& presented) {
  return absl::PermissionDeniedError(absl::StrCat(
      "worker name ", name.substr(0, 128), " is bound to another certificate key (sha256 ", bound.substr(0, 16),
      "...; this one ", presented.substr(0, 16), "...): a name passes to a new key only when an admin releases it "
      "(tessera workers --release-key ", name.substr(0, 128), ")"));
}

}  // namespace

absl::Status Coordinator::BindWorkerKey(const std::string& name, const std::string& key_sha256) {
  absl::MutexLock lock(&keys_mu_);
  auto it = worker_keys_.find(name);
  if (it != worker_keys_.end()) return it->second == key_sha256 ? absl::OkStatus() : KeyConflict(name, it->second, key_sha256);
  if (absl::Status s = store_->PutWorkerKey(name, key_sha256, absl::ToUnixMillis(WallNow())); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot bind worker ", name, " to its key: ", s.message()));
  }
  worker_keys_.emplace(name, key_sha256);
  if (options_.on_transition) {
    options_.on_transition(absl::StrCat("worker ", name, ": bound to certificate key sha256 ", key_sha256));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckWorkerKey(const std::string& name, const std::string& key_sha256) {
  absl::ReaderMutexLock lock(&keys_mu_);
  auto it = worker_keys_.find(name);
  if (it == worker_keys_.end() || it->second == key_sha256) return absl::OkStatus();
  return KeyConflict(name, it->second, key_sha256);
}

absl::Status Coordinator::CheckWorkerCertificate(const std::string& name, const std::string& pem) {
  {
    absl::ReaderMutexLock lock(&keys_mu_);
    auto seen = worker_pems_.find(name);
    if (seen != worker_pems_.end() && seen->second == pem) return absl::OkStatus();
    if (!worker_keys_.count(name)) return absl::OkStatus();  // Never registered: the call finds no worker.
  }
  auto key = tls::PublicKeySha256(pem);
  if (!key.ok()) return absl::UnauthenticatedError(key.status().message());
  if (absl::Status s = CheckWorkerKey(name, *key); !s.ok()) return s;
  absl::MutexLock lock(&keys_mu_);
  worker_pems_[name] = pem;  // The same key in another certificate (a renewal): fast from now on.
  return absl::OkStatus();
}

absl::Status Coordinator::ReleaseWorkerKey(const std::string& name) {
  absl::MutexLock lock(&keys_mu_);
  if (!worker_keys_.count(name)) return absl::NotFoundError(absl::StrCat("worker ", name.substr(0, 128), " has no bound key"));
  if (absl::Status s = store_->ForgetWorkerKey(name); !s.ok()) return s;
  worker_keys_.erase(name);
  worker_pems_.erase(name);
  if (options_.on_transition) options_.on_transition(absl::StrCat("worker ", name, ": key released by an admin"));
  return absl::OkStatus();
}

}  // namespace tessera::coordinator
