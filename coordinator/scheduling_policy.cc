#include "coordinator/scheduling_policy.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/spec_error.h"
#include "yaml-cpp/yaml.h"

namespace tessera::coordinator {
namespace {

constexpr int64_t kMaxDevices = int64_t{1} << 40;  // Any real cluster is far below; no sum can wrap.
constexpr size_t kMaxFileBytes = 1 << 20;

const Team& ImplicitTeam() {
  static const Team* team = [] {
    auto* t = new Team;
    t->name = "default";
    t->max_priority = kPriorityMax;
    return t;
  }();
  return *team;
}

// Collects problems as "SOURCE:LINE: message".
class Problems {
 public:
  explicit Problems(absl::string_view source) : source_(source) {}
  void Add(const YAML::Node& at, const std::string& message) { Add(at.Mark().line + 1, message); }
  void Add(int line, const std::string& message) { lines_.push_back(absl::StrCat(source_, ":", line, ": ", message)); }
  bool empty() const { return lines_.empty(); }
  absl::Status ToStatus() const { return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n")); }

 private:
  std::string source_;
  std::vector<std::string> lines_;
};

// A mapping's keys must be among `known`; each other is a problem naming them.
void CheckKeys(const YAML::Node& map, const std::vector<std::string>& known, const std::string& what, Problems* p) {
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "(not a name)";
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      p->Add(kv.first, absl::StrCat("unknown key ", spec::Quote(key), " in ", what, " (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
}

bool Scalar(const YAML::Node& node, const std::string& what, Problems* p, std::string* out) {
  if (!node.IsScalar()) {
    p->Add(node, absl::StrCat(what, " must be a single value"));
    return false;
  }
  *out = node.Scalar();
  return true;
}

// A device count: an integer in [0, 2^40].
bool Count(const YAML::Node& node, const std::string& what, Problems* p, int64_t* out) {
  std::string text;
  if (!Scalar(node, what, p, &text)) return false;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > kMaxDevices) {
    p->Add(node, absl::StrCat(what, " ", spec::Quote(text), " is not a device count (an integer from 0 to ", kMaxDevices, ")"));
    return false;
  }
  *out = v;
  return true;
}

// "90s", "30m", "12h", "7d" -> seconds (> 0).
bool Duration(const YAML::Node& node, const std::string& what, Problems* p, double* out) {
  std::string text;
  if (!Scalar(node, what, p, &text)) return false;
  int64_t n = 0;
  const char* unit = text.data() + text.size();
  if (!text.empty()) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc()) unit = end;
  }
  const std::string suffix(unit, static_cast<const char*>(text.data() + text.size()));
  const double scale = suffix == "s" ? 1 : suffix == "m" ? 60 : suffix == "h" ? 3600 : suffix == "d" ? 86400 : 0;
  if (unit == text.data() || scale == 0 || n <= 0 || n > (int64_t{1} << 32)) {
    p->Add(node, absl::StrCat(what, " ", spec::Quote(text), " is not a duration such as 90s, 30m, 12h or 7d"));
    return false;
  }
  *out = static_cast<double>(n) * scale;
  return true;
}

std::vector<std::string> Names(const YAML::Node& node, const std::string& what, Problems* p) {
  std::vector<std::string> out;
  if (!node.IsSequence()) {
    p->Add(node, absl::StrCat(what, " must be a list of names"));
    return out;
  }
  for (const YAML::Node& item : node) {
    std::string name;
    if (!Scalar(item, absl::StrCat("each of ", what), p, &name)) continue;
    if (name.empty() || name.size() > 256) {
      p->Add(item, absl::StrCat(what, ": ", spec::Quote(name), " is not a user name (1 to 256 characters)"));
      continue;
    }
    out.push_back(name);
  }
  return out;
}

void ParseQuota(const YAML::Node& node, const std::string& team, Problems* p, Team* out) {
  const std::string what = absl::StrCat("a quota of team ", spec::Quote(team));
  if (!node.IsMap()) {
    p->Add(node, absl::StrCat(what, " must be a mapping {device, pool, guaranteed, limit}"));
    return;
  }
  CheckKeys(node, {"device", "pool", "guaranteed", "limit"}, what, p);
  Quota q;
  bool ok = true;
  if (!node["device"]) {
    p->Add(node, absl::StrCat(what, " names no device (cpu or cuda)"));
    ok = false;
  } else if (Scalar(node["device"], "device", p, &q.device) && q.device != "cpu" && q.device != "cuda") {
    p->Add(node["device"], absl::StrCat("device ", spec::Quote(q.device), " is not cpu or cuda"));
    ok = false;
  }
  if (node["pool"] && Scalar(node["pool"], "pool", p, &q.pool)) {
    if (const std::string why = spec::NameProblem(q.pool); !why.empty()) {
      p->Add(node["pool"], absl::StrCat("pool ", spec::Quote(q.pool), ": ", why));
      ok = false;
    }
  }
  bool has_limit = false;
  if (node["guaranteed"]) ok = Count(node["guaranteed"], "guaranteed", p, &q.guaranteed) && ok;
  if (node["limit"]) {
    has_limit = Count(node["limit"], "limit", p, &q.limit);
    ok = has_limit && ok;
  }
  if (!has_limit) q.limit = q.guaranteed;  // No borrowing unless a limit says so.
  if (ok && q.limit < q.guaranteed) {
    p->Add(node, absl::StrCat(what, ": limit ", q.limit, " is below guaranteed ", q.guaranteed));
    ok = false;
  }
  for (const Quota& other : out->quotas) {
    if (other.device == q.device && other.pool == q.pool) {
      p->Add(node, absl::StrCat(what, ": a second quota for device ", q.device,
                                q.pool.empty() ? std::string(" (any pool)") : absl::StrCat(" pool ", q.pool)));
      ok = false;
    }
  }
  if (ok) out->quotas.push_back(q);
}

}  // namespace

const Team* SchedulingPolicy::TeamOf(const std::string& user) const {
  if (!from_file) return &ImplicitTeam();
  auto it = team_of_member.find(user);
  return it == team_of_member.end() ? nullptr : &teams[it->second];
}

absl::Status SchedulingPolicy::CheckPriority(const std::string& user, int priority) const {
  const Team* team = TeamOf(user);
  if (team == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("user ", spec::Quote(user), " is in no team of the scheduling policy"));
  }
  if (priority > team->max_priority) {
    return absl::PermissionDeniedError(absl::StrCat("scheduling.priority ", PriorityName(priority), " is above team ",
                                                    spec::Quote(team->name), "'s max_priority ",
                                                    PriorityName(team->max_priority)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(absl::string_view yaml, absl::string_view source) {
  Problems p(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    p.Add(e.mark.line + 1, absl::StrCat("not YAML: ", e.msg));
    return p.ToStatus();
  }
  SchedulingPolicy policy;
  policy.from_file = true;
  if (!root.IsMap()) {
    p.Add(root, "a scheduling policy is a mapping with teams (and admins, fair_share)");
    return p.ToStatus();
  }
  CheckKeys(root, {"teams", "admins", "fair_share"}, "the policy", &p);
  if (root["admins"]) {
    for (const std::string& a : Names(root["admins"], "admins", &p)) policy.admins.insert(a);
  }
  if (const YAML::Node fs = root["fair_share"]) {
    if (!fs.IsMap()) {
      p.Add(fs, "fair_share must be a mapping {half_life}");
    } else {
      CheckKeys(fs, {"half_life"}, "fair_share", &p);
      if (fs["half_life"]) Duration(fs["half_life"], "fair_share.half_life", &p, &policy.half_life_s);
    }
  }
  const YAML::Node teams = root["teams"];
  if (!teams || !teams.IsSequence()) {
    p.Add(teams ? teams : root, "teams must be a list of teams");
    return p.ToStatus();
  }
  std::map<std::string, int> team_lines;
  for (const YAML::Node& node : teams) {
    if (!node.IsMap()) {
      p.Add(node, "each team must be a mapping {name, members, max_priority, quotas}");
      continue;
    }
    CheckKeys(node, {"name", "members", "max_priority", "quotas"}, "a team", &p);
    Team team;
    team.line = node.Mark().line + 1;
    if (!node["name"]) {
      p.Add(node, "a team has no name");
      continue;
    }
    if (!Scalar(node["name"], "a team's name", &p, &team.name)) continue;
    if (const std::string why = spec::NameProblem(team.name); !why.empty()) {
      p.Add(node["name"], absl::StrCat("team ", spec::Quote(team.name), ": ", why));
      continue;
    }
    if (auto [it, fresh] = team_lines.emplace(team.name, team.line); !fresh) {
      p.Add(node["name"], absl::StrCat("team ", spec::Quote(team.name), " is defined twice (first at line ", it->second, ")"));
      continue;
    }
    if (node["members"]) team.members = Names(node["members"], absl::StrCat("team ", spec::Quote(team.name), "'s members"), &p);
    if (node["max_priority"]) {
      std::string text;
      if (Scalar(node["max_priority"], "max_priority", &p, &text)) {
        auto priority = text.empty() ? absl::InvalidArgumentError("'' is empty") : ParsePriority(text);
        if (priority.ok()) {
          team.max_priority = *priority;
        } else {
          p.Add(node["max_priority"], absl::StrCat("team ", spec::Quote(team.name), "'s max_priority ", priority.status().message()));
        }
      }
    }
    if (const YAML::Node quotas = node["quotas"]) {
      if (!quotas.IsSequence()) {
        p.Add(quotas, absl::StrCat("team ", spec::Quote(team.name), "'s quotas must be a list"));
      } else {
        for (const YAML::Node& q : quotas) ParseQuota(q, team.name, &p, &team);
      }
    }
    const size_t index = policy.teams.size();
    for (const std::string& member : team.members) {
      auto [it, fresh] = policy.team_of_member.emplace(member, index);
      if (fresh) continue;
      if (it->second == index) {
        p.Add(node["members"], absl::StrCat("user ", spec::Quote(member), " is listed twice in team ", spec::Quote(team.name)));
      } else {
        const Team& other = policy.teams[it->second];
        p.Add(node["members"], absl::StrCat("user ", spec::Quote(member), " is in team ", spec::Quote(other.name), " (line ",
                                            other.line, ") and in team ", spec::Quote(team.name),
                                            ": a user is in one team at most"));
      }
    }
    policy.teams.push_back(std::move(team));
  }
  if (!p.empty()) return p.ToStatus();
  return policy;
}

absl::StatusOr<SchedulingPolicy> LoadSchedulingPolicy(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("scheduling policy ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("scheduling policy ", path, " is not a regular file"));
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("scheduling policy ", path, " is ", st.st_size, " bytes, more than ", kMaxFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return absl::UnavailableError(absl::StrCat("scheduling policy ", path, ": cannot be read"));
  return ParseSchedulingPolicy(text.str(), path);
}

}  // namespace tessera::coordinator
