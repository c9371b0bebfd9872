#include "coordinator/worker_keys.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/tls/certificates.h"

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

absl::Status WorkerKeys::Load() {
  auto keys = options_.store->LoadWorkerKeys();
  if (!keys.ok()) return keys.status();
  absl::MutexLock lock(&mu_);
  keys_ = *std::move(keys);
  pems_.clear();
  return absl::OkStatus();
}

absl::Status WorkerKeys::Bind(const std::string& name, const std::string& key_sha256, bool* bound_now) {
  absl::MutexLock lock(&mu_);
  if (bound_now != nullptr) *bound_now = false;
  auto it = keys_.find(name);
  if (it != keys_.end()) return it->second == key_sha256 ? absl::OkStatus() : KeyConflict(name, it->second, key_sha256);
  const int64_t now_ms = absl::ToUnixMillis(options_.clock->WallNow());
  if (absl::Status s = options_.store->PutWorkerKey(name, key_sha256, now_ms); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot bind worker ", name, " to its key: ", s.message()));
  }
  keys_.emplace(name, key_sha256);
  if (bound_now != nullptr) *bound_now = true;
  if (options_.on_transition) {
    options_.on_transition(absl::StrCat("worker ", name, ": bound to certificate key sha256 ", key_sha256));
  }
  return absl::OkStatus();
}

absl::Status WorkerKeys::Check(const std::string& name, const std::string& key_sha256) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = keys_.find(name);
  if (it == keys_.end() || it->second == key_sha256) return absl::OkStatus();
  return KeyConflict(name, it->second, key_sha256);
}

absl::Status WorkerKeys::CheckCertificate(const std::string& name, const std::string& pem) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto seen = pems_.find(name);
    if (seen != pems_.end() && seen->second == pem) return absl::OkStatus();
    if (!keys_.count(name)) return absl::OkStatus();  // Never registered: the call finds no worker.
  }
  auto key = tls::PublicKeySha256(pem);
  if (!key.ok()) return absl::UnauthenticatedError(key.status().message());
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(name);
  if (it == keys_.end()) return absl::OkStatus();  // Released meanwhile.
  if (it->second != *key) return KeyConflict(name, it->second, *key);
  pems_[name] = pem;  // The same key in another certificate (a renewal): fast from now on.
  return absl::OkStatus();
}

absl::Status WorkerKeys::Forget(const std::string& name, const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (!keys_.count(name)) return absl::NotFoundError(absl::StrCat("worker ", name.substr(0, 128), " has no bound key"));
  if (absl::Status s = options_.store->ForgetWorkerKey(name); !s.ok()) return s;
  keys_.erase(name);
  pems_.erase(name);
  if (options_.on_transition) options_.on_transition(absl::StrCat("worker ", name, ": ", why));
  return absl::OkStatus();
}

}  // namespace tessera::coordinator
