// The coordinator's scheduling policy (issue 58; --policy FILE): which users form which teams, how
// many devices of each kind and pool a team is guaranteed and may use at most (borrowing idle devices
// up to its limit, as a Kueue cohort), the highest priority its jobs may ask for, the admins, and the
// half-life of fair share's usage. A YAML file:
//
//   admins: [root]                        # may reload the policy and change any user's jobs
//   fair_share: {half_life: 7d}           # s, m, h or d; default 7d
//   teams:
//     - name: vision                      # 1-128 letters, digits, '-', '_', '.'
//       members: [alice, carol]           # certificate user names; a user is in one team at most
//       max_priority: high                # low | normal | high | an integer; default normal
//       quotas:
//         - {device: cuda, pool: a100, guaranteed: 16, limit: 32}   # pool omitted: any pool
//
// Priorities as a spec's scheduling.priority (spec/priority.h): low = 100, normal = 200, high = 300, or
// any integer in [0, 1000]. A file is checked
// whole: every problem is reported, each naming its line, and a bad file leaves the old policy in force.
// Without a file every user is in one implicit team with no limits and every priority allowed.
#ifndef TESSERA_COORDINATOR_SCHEDULING_POLICY_H_
#define TESSERA_COORDINATOR_SCHEDULING_POLICY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spec/priority.h"

namespace tessera::coordinator {

using spec::kPriorityHigh;
using spec::kPriorityLow;
using spec::kPriorityMax;
using spec::kPriorityNormal;
using spec::ParsePriority;
using spec::PriorityName;

struct Quota {
  std::string device;  // "cpu" or "cuda".
  std::string pool;    // "": any pool.
  int64_t guaranteed = 0;
  int64_t limit = 0;   // >= guaranteed; the devices the team may hold, borrowing the rest.
};

struct Team {
  std::string name;
  std::vector<std::string> members;
  std::vector<Quota> quotas;  // A device kind and pool without one: no devices guaranteed, no limit.
  int max_priority = kPriorityNormal;
  int line = 0;  // Where the file defines it (1-based), for messages.
};

struct SchedulingPolicy {
  std::vector<Team> teams;
  std::set<std::string> admins;
  double half_life_s = 7 * 86400.0;
  // Whether a file gave it (false: the implicit policy: one team, no limits, every priority).
  bool from_file = false;

  std::map<std::string, size_t> team_of_member;  // Member -> index into teams.

  // The team of `user`; null when the user is in none. The implicit policy's one team ("default",
  // every priority, no quotas) for every user, and for callers without TLS (user "").
  const Team* TeamOf(const std::string& user) const;
  // OK when `user` may submit a job of `priority`; else PermissionDenied naming the team's cap, or
  // that the user is in no team of the policy.
  absl::Status CheckPriority(const std::string& user, int priority) const;
};

// The policy in `yaml` (`source` names it in messages, e.g. the file's path); InvalidArgument listing
// every problem, one a line, as "SOURCE:LINE: message".
absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(absl::string_view yaml, absl::string_view source);
// The policy of the file at `path` (at most 1 MiB, a regular file).
absl::StatusOr<SchedulingPolicy> LoadSchedulingPolicy(const std::string& path);

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_SCHEDULING_POLICY_H_
