// Who may call what on the coordinator (docs/security.md). With TLS every caller is the identity in
// its verified certificate: users call the CoordinatorService and see only their own jobs (the
// --admins see all), workers call the WorkerService as their own name only, nobody else calls
// anything. Without TLS (a loopback-only or --insecure coordinator) callers are unknown and nothing
// is checked. Every denial is counted (tessera_coordinator_rpc_denied_total) and logged with the
// peer's identity and address.
#ifndef TESSERA_COORDINATOR_AUTHORIZER_H_
#define TESSERA_COORDINATOR_AUTHORIZER_H_

#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/tls/identity.h"
#include "coordinator/coordinator_metrics.h"
#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator {

struct AuthorizerOptions {
  bool tls = false;
  std::set<std::string> admins;  // User names that may see and cancel every job.
};

// The user behind a CoordinatorService call.
struct Caller {
  std::string user;    // Empty without TLS.
  bool admin = false;  // Always true without TLS.
  std::string peer;    // "user alice (ipv4:127.0.0.1:5000)", for logs.
};

class Authorizer {
 public:
  // `metrics` may be null.
  Authorizer(AuthorizerOptions options, CoordinatorMetrics* metrics) : options_(std::move(options)), metrics_(metrics) {}

  // A CoordinatorService call: the caller must be a user. Fills *caller.
  grpc::Status User(const grpc::ServerContext& context, const char* rpc, Caller* caller) const;
  // The same for a caller reached another way (the dashboard's HTTPS): `identity` is what its
  // verified certificate names (or why it names none), `address` where it called from. `what`
  // names the request in logs and tessera_coordinator_rpc_denied_total ("ui").
  grpc::Status User(const absl::StatusOr<tls::Identity>& identity, const std::string& address, const char* what,
                    Caller* caller) const;
  // A WorkerService call that acts for worker `worker_name`: the caller must be that worker.
  grpc::Status Worker(const grpc::ServerContextBase& context, const char* rpc, const std::string& worker_name) const;
  // Whether callers are identified by certificates (mutual TLS).
  bool tls() const { return options_.tls; }
  // Whether `caller` may see or change `job`: its owner or an admin (NOT_FOUND-free: the job exists).
  grpc::Status Job(const Caller& caller, const v1::Job& job, const char* rpc) const;

 private:
  // The caller's identity (*id) and a description for logs (*peer); a denial unless it has `role`.
  grpc::Status Identify(const absl::StatusOr<tls::Identity>& found, const std::string& address, const char* rpc,
                        tls::Role role, tls::Identity* id, std::string* peer) const;
  grpc::Status Deny(grpc::StatusCode code, const char* rpc, const char* reason, const std::string& peer,
                    const std::string& message) const;

  AuthorizerOptions options_;
  CoordinatorMetrics* metrics_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_AUTHORIZER_H_
