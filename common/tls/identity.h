// Who a certificate names: a role and a name, carried as the certificate's one URI subject
// alternative name "spiffe://tessera/ROLE/NAME" (the SPIFFE ID form gRPC understands). The
// coordinator authorizes by it (docs/security.md); `tessera certs` writes it.
#ifndef TESSERA_COMMON_TLS_IDENTITY_H_
#define TESSERA_COMMON_TLS_IDENTITY_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::tls {

enum class Role {
  kCoordinator,  // The coordinator daemon (serves both services).
  kWorker,       // A worker daemon: may call the worker service as its own name only.
  kUser,         // A person or program using the CLI: owns the jobs it submits.
};

struct Identity {
  Role role = Role::kUser;
  std::string name;  // 1..128 of [A-Za-z0-9._-]; "coordinator" for the coordinator.
};

inline constexpr char kUriPrefix[] = "spiffe://tessera/";
// The DNS name every coordinator certificate carries and every client checks (clients reach the
// coordinator by any address; the name they verify is this one).
inline constexpr char kCoordinatorServerName[] = "tessera-coordinator";

const char* RoleName(Role role);  // "coordinator", "worker", "user".
// Whether `name` may name a worker or user: 1..128 of letters, digits, '-', '_' and '.'.
bool ValidIdentityName(std::string_view name);
// "spiffe://tessera/worker/node-1".
std::string IdentityUri(const Identity& id);
// The inverse of IdentityUri; InvalidArgument for anything else.
absl::StatusOr<Identity> ParseIdentityUri(std::string_view uri);
// "worker node-1" — how logs and errors name a peer.
std::string Describe(const Identity& id);

}  // namespace tessera::tls

#endif  // TESSERA_COMMON_TLS_IDENTITY_H_
