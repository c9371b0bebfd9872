#include "coordinator/authorizer.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/rpc/tls.h"

namespace tessera::coordinator {

grpc::Status Authorizer::Deny(grpc::StatusCode code, const char* rpc, const char* reason, const std::string& peer,
                              const std::string& message) const {
  if (metrics_ != nullptr) metrics_->CountDenied(rpc, reason);
  fprintf(stderr, "tessera-coordinator: DENIED %s by %s: %s\n", rpc, peer.c_str(), message.c_str());
  return grpc::Status(code, message);
}

grpc::Status Authorizer::Identify(const absl::StatusOr<tls::Identity>& found, const std::string& address,
                                  const char* rpc, tls::Role role, tls::Identity* id, std::string* peer) const {
  if (!found.ok()) {
    return Deny(grpc::StatusCode::UNAUTHENTICATED, rpc, "no_identity", address, std::string(found.status().message()));
  }
  *id = *found;
  *peer = absl::StrCat(tls::Describe(*id), " (", address, ")");
  if (id->role != role) {
    return Deny(grpc::StatusCode::PERMISSION_DENIED, rpc, "wrong_role", *peer,
                absl::StrCat(rpc, " is for ", tls::RoleName(role), "s; the caller's certificate names ", tls::Describe(*id)));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::User(const grpc::ServerContext& context, const char* rpc, Caller* caller) const {
  if (!options_.tls) {
    *caller = Caller{"", true, context.peer()};
    return grpc::Status::OK;
  }
  return User(rpc::PeerIdentity(context), context.peer(), rpc, caller);
}

grpc::Status Authorizer::User(const absl::StatusOr<tls::Identity>& identity, const std::string& address,
                              const char* what, Caller* caller) const {
  if (!options_.tls) {
    *caller = Caller{"", true, address};
    return grpc::Status::OK;
  }
  tls::Identity id;
  std::string peer;
  if (grpc::Status s = Identify(identity, address, what, tls::Role::kUser, &id, &peer); !s.ok()) return s;
  *caller = Caller{id.name, options_.admins.count(id.name) > 0, peer};
  return grpc::Status::OK;
}

grpc::Status Authorizer::Worker(const grpc::ServerContextBase& context, const char* rpc, const std::string& worker_name) const {
  if (!options_.tls) return grpc::Status::OK;
  tls::Identity found;
  std::string peer;
  if (grpc::Status s = Identify(rpc::PeerIdentity(context), context.peer(), rpc, tls::Role::kWorker, &found, &peer);
      !s.ok()) {
    return s;
  }
  if (found.name != worker_name) {
    return Deny(grpc::StatusCode::PERMISSION_DENIED, rpc, "impersonation", peer,
                absl::StrCat("worker ", found.name, " may act only as itself, not as '", worker_name.substr(0, 128), "'"));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::Job(const Caller& caller, const v1::Job& job, const char* rpc) const {
  if (caller.admin || job.owner() == caller.user) return grpc::Status::OK;
  return Deny(grpc::StatusCode::PERMISSION_DENIED, rpc, "not_owner", caller.peer,
              absl::StrCat("job ", job.id(), " belongs to another user (only its owner and the coordinator's --admins may ",
                           "see or change it)"));
}

}  // namespace tessera::coordinator
