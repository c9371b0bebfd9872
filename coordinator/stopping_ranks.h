// The ranks a live worker still lists that belong to no current attempt — superseded, being stopped —
// with their devices: a device stays used until its rank is gone, so that a new attempt never shares
// a device with a rank of an old one, and the rank holds its job back (no new attempt while it may
// still write). A rank listed past a deadline (its SIGTERM and SIGKILL did not end it: a process
// stuck in the kernel, a device that hangs) is quarantined: it holds its job back no more, and its
// device stays out of placement until the worker stops listing it.
//
// Lock discipline: none of its own; one per worker, called under the coordinator's lock.
#ifndef TESSERA_COORDINATOR_STOPPING_RANKS_H_
#define TESSERA_COORDINATOR_STOPPING_RANKS_H_

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"

namespace tessera::coordinator {

class StoppingRanks {
 public:
  using Key = std::tuple<std::string, int, int>;  // Job id, attempt, rank.

  // The worker lists exactly `listed` (key → device) at `now`: each keeps the time it was first
  // listed; one no longer listed is forgotten, its quarantine with it. Whether the set changed.
  bool Set(std::map<Key, int> listed, absl::Time now);
  // Quarantines every rank listed for `deadline` or longer at `now`; the reasons of those newly
  // quarantined ("rank R of JOB attempt A could not be stopped for ...; device D quarantined ...").
  std::vector<std::string> QuarantineOverdue(absl::Time now, absl::Duration deadline);

  const std::map<Key, int>& ranks() const { return ranks_; }  // Key → device, quarantined ones too.
  bool empty() const { return ranks_.empty(); }
  // Whether a rank holds its job back: listed and not quarantined.
  bool HoldsJob(const Key& key) const { return ranks_.count(key) > 0 && !quarantined_.count(key); }
  // Whether `device` is one of theirs (it stays used).
  bool UsesDevice(int device) const;
  // Quarantined ranks with their device and reason, for `tessera workers`.
  struct Quarantined {
    Key key;
    int device = -1;
    std::string reason;
  };
  std::vector<Quarantined> quarantined() const;

 private:
  std::map<Key, int> ranks_;
  std::map<Key, absl::Time> since_;  // When each was first listed.
  std::map<Key, std::string> quarantined_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_STOPPING_RANKS_H_
