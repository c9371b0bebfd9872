#include "worker/start_order.h"

#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"

namespace tessera::worker {
namespace {

// 1..max of [A-Za-z0-9._-], and not "." or "..".
bool PlainName(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status Bad(const char* field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("assignment.", field, ": ", problem));
}

}  // namespace

absl::Status CheckStartOrder(const v1::Assignment& a, int device_count, const spec::PathRoots& roots) {
  if (!PlainName(a.job_id(), 64)) return Bad("job_id", "not a job id ([A-Za-z0-9._-], at most 64)");
  if (!a.owner().empty() && !PlainName(a.owner(), 128)) {
    return Bad("owner", "not a user name ([A-Za-z0-9._-], at most 128)");  // As tls::ValidIdentityName.
  }
  if (a.attempt() < 0) return Bad("attempt", absl::StrCat(a.attempt(), " is negative"));
  if (a.world_size() < 1) return Bad("world_size", absl::StrCat(a.world_size(), " is not positive"));
  if (a.rank() < 0 || a.rank() >= a.world_size()) {
    return Bad("rank", absl::StrCat(a.rank(), " is not in [0, world_size ", a.world_size(), ")"));
  }
  if (a.local_rank() < 0 || a.local_rank() >= device_count) {
    return Bad("local_rank", absl::StrCat(a.local_rank(), " is not a device of this worker (it has ", device_count, ")"));
  }
  if (a.store_port() < 1 || a.store_port() > 65535) return Bad("store_port", absl::StrCat(a.store_port(), " is not a port"));
  if (a.store_host().empty() || a.store_host().size() > 255 ||
      a.store_host().find_first_of(std::string(" \t\n\r\0", 5)) != std::string::npos) {
    return Bad("store_host", "not a host name or address");
  }
  if (!a.has_spec()) return Bad("spec", "is missing");
  if (absl::Status s = spec::ToStatus(spec::ValidateJobSpec(a.spec())); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("assignment.spec: ", s.message()));
  }
  if (spec::WorldSize(a.spec()) != a.world_size()) {
    return Bad("world_size", absl::StrCat(a.world_size(), " is not the spec's ", spec::WorldSize(a.spec())));
  }
  return spec::ToStatus(spec::ConfineJobPaths(a.spec(), roots, a.owner()));
}

}  // namespace tessera::worker
