#include "common/tls/identity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::tls {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kWorker:
      return "worker";
    case Role::kUser:
      return "user";
  }
  return "unknown";
}

bool ValidIdentityName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

std::string IdentityUri(const Identity& id) { return absl::StrCat(kUriPrefix, RoleName(id.role), "/", id.name); }

absl::StatusOr<Identity> ParseIdentityUri(std::string_view uri) {
  if (uri.substr(0, sizeof(kUriPrefix) - 1) != kUriPrefix) {
    return absl::InvalidArgumentError(absl::StrCat("not a tessera identity (", kUriPrefix, "ROLE/NAME)"));
  }
  std::string_view rest = uri.substr(sizeof(kUriPrefix) - 1);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return absl::InvalidArgumentError("tessera identity without a name");
  const std::string_view role = rest.substr(0, slash), name = rest.substr(slash + 1);
  Identity id;
  if (role == "coordinator") {
    id.role = Role::kCoordinator;
  } else if (role == "worker") {
    id.role = Role::kWorker;
  } else if (role == "user") {
    id.role = Role::kUser;
  } else {
    return absl::InvalidArgumentError("unknown role '" + std::string(role) + "'");
  }
  if (!ValidIdentityName(name)) return absl::InvalidArgumentError("identity name is not 1..128 of [A-Za-z0-9._-]");
  id.name = std::string(name);
  return id;
}

std::string Describe(const Identity& id) { return absl::StrCat(RoleName(id.role), " ", id.name); }

}  // namespace tessera::tls
