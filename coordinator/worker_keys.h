// Worker identity with TLS: each worker name bound to the key of the certificate that first registered
// it, durably (JobStore's worker_keys), checked at every worker RPC, released only by an admin. One
// part of the coordinator with its own state and lock: nothing here reads jobs or workers.
#ifndef TESSERA_COORDINATOR_WORKER_KEYS_H_
#define TESSERA_COORDINATOR_WORKER_KEYS_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/time/clock.h"
#include "coordinator/job_store.h"

namespace tessera::coordinator {

struct WorkerKeysOptions {
  JobStore* store = nullptr;  // Where bindings live (not owned; outlives the WorkerKeys).
  Clock* clock = RealClock();  // The time a binding is stored with (WallNow). Not owned.
  // Every binding and release, one line each (the coordinator's journal). Called under this part's
  // lock. May be empty.
  std::function<void(const std::string& line)> on_transition;
};

class WorkerKeys {
 public:
  explicit WorkerKeys(WorkerKeysOptions options) : options_(std::move(options)) {}

  // Replaces the bindings held with the store's (the coordinator's start).
  absl::Status Load();
  // Binds worker `name` to `key_sha256` (tls::PublicKeySha256 of the certificate it registers with)
  // the first time, durably (Unavailable when the store refuses); afterwards a call with another key
  // is PermissionDenied — a name's hold cannot pass to another certificate, also after the node is
  // lost or the coordinator restarts — until Release.
  // `bound_now` (may be null): set to whether this call made the binding.
  absl::Status Bind(const std::string& name, const std::string& key_sha256, bool* bound_now = nullptr);
  // Whether a registration of `name` with `key_sha256` may go ahead: OK when the name is unbound or
  // bound to that key (RegisterWorker's first check; Bind binds once it was accepted).
  absl::Status Check(const std::string& name, const std::string& key_sha256);
  // Every other worker RPC: the caller's certificate (`pem`) must carry the key `name` is bound to (a
  // certificate refused at registration may not heartbeat, stream or report as the name); OK for a
  // name never bound (the call then finds no worker). Cheap when `pem` is the certificate last seen
  // with the bound key (a string compare); a PEM without a readable key is Unauthenticated.
  absl::Status CheckCertificate(const std::string& name, const std::string& pem);
  // An admin's release of `name`'s key (NotFound when none is bound): the next registration binds again.
  absl::Status Release(const std::string& name) { return Forget(name, "key released by an admin"); }
  // Takes back a binding a registration made before the coordinator refused it (the journal says `why`).
  absl::Status Unbind(const std::string& name, const std::string& why) { return Forget(name, why); }

 private:
  absl::Status Forget(const std::string& name, const std::string& why);

  const WorkerKeysOptions options_;
  // Registrations are rare: a binding's durable write happens under this lock (serialising first
  // registrations), never under the coordinator's.
  absl::Mutex mu_;
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);  // Name → bound key.
  // Name → the certificate (PEM) last seen with its bound key: CheckCertificate's fast path.
  std::map<std::string, std::string> pems_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_KEYS_H_
