#include "coordinator/stopping_ranks.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

bool StoppingRanks::Set(std::map<Key, int> listed, absl::Time now) {
  const bool changed = listed != ranks_;
  ranks_ = std::move(listed);
  std::map<Key, absl::Time> since;
  for (const auto& [key, device] : ranks_) {
    auto old = since_.find(key);
    since[key] = old != since_.end() ? old->second : now;
  }
  since_ = std::move(since);
  for (auto it = quarantined_.begin(); it != quarantined_.end();) {
    it = ranks_.count(it->first) ? std::next(it) : quarantined_.erase(it);
  }
  return changed;
}

std::vector<std::string> StoppingRanks::QuarantineOverdue(absl::Time now, absl::Duration deadline) {
  std::vector<std::string> reasons;
  for (const auto& [key, since] : since_) {
    if (quarantined_.count(key) || now - since < deadline) continue;
    const auto& [job, attempt, rank] = key;
    std::string reason = absl::StrCat("rank ", rank, " of ", job, " attempt ", attempt, " could not be stopped for ",
                                      absl::FormatDuration(now - since), " (listed by the worker after SIGKILL); device ",
                                      ranks_.at(key), " quarantined until the worker no longer lists it");
    reasons.push_back(reason);
    quarantined_.emplace(key, std::move(reason));
  }
  return reasons;
}

bool StoppingRanks::UsesDevice(int device) const {
  for (const auto& [key, d] : ranks_) {
    if (d == device) return true;
  }
  return false;
}

std::vector<StoppingRanks::Quarantined> StoppingRanks::quarantined() const {
  std::vector<Quarantined> out;
  for (const auto& [key, reason] : quarantined_) {
    auto it = ranks_.find(key);
    out.push_back({key, it == ranks_.end() ? -1 : it->second, reason});
  }
  return out;
}

}  // namespace tessera::coordinator
