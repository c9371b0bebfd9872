// One job as the coordinator keeps it: its v1::Job (state, reason, restarts, attempt history), the
// current attempt's ranks with their counts, and the timers and fences around the attempt — and the
// job state machine itself:
//
//   (new) ─► PENDING ─► SCHEDULED ─► RUNNING ─► SUCCEEDED
//               ▲           │           │
//               │           ▼           ▼
//               └──── RESTARTING ◄──────┘       (a failed attempt with restarts left; once every rank
//                           │                    of it is gone the job is queued again)
//                           ▼
//   FAILED (no restart left, or a stored spec no longer valid) · CANCELLED (from any state but an end)
//
// A state may also be set again with a new reason (a waiting job's reason, an adopted attempt's);
// the ends are final. Transition() makes every change and counts those the machine does not allow
// (VerifyIndexes reports them; every test of coordinator/coordinator_test_fixture.h calls it).
//
// Lock discipline: none of its own; the coordinator calls it under its lock. The side effects of a
// transition — orders to workers, the store, the queue — are the coordinator's.
#ifndef TESSERA_COORDINATOR_JOB_ENTRY_H_
#define TESSERA_COORDINATOR_JOB_ENTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator {

bool IsTerminal(v1::JobState state);
// "PENDING", "RUNNING", ...; "NEW" for a job not yet submitted (UNSPECIFIED).
std::string JobStateName(v1::JobState state);

// A rank of the current attempt.
struct RankEntry {
  std::string worker_id;
  int local_rank = 0;
  bool started = false;
  bool exited = false;
  bool finished = false;  // Exited with code 0 (during a coordinator outage: not "lost").
  // The Assignment.seq of its start order in the worker's session (0: adopted at a registration).
  int64_t start_seq = 0;
};

struct JobEntry {
  v1::Job job;

  // --- The state machine.
  // Whether `from` may become `to` (the same state again included: a new reason).
  static bool Allowed(v1::JobState from, v1::JobState to);
  // Sets the state and reason (a disallowed change is made too, and counted below).
  void Transition(v1::JobState state, const std::string& reason);
  int64_t bad_transitions = 0;   // Changes Allowed refused.
  std::string last_bad_transition;  // "FROM -> TO", the newest of them.
  // A failed attempt (`reason`): RESTARTING with a restart spent (none when `counts` is false: ranks
  // lost to a coordinator restart, not to the job) while restarts are left, else FAILED; the state
  // and its reason, for Transition. Changes restarts_used.
  std::pair<v1::JobState, std::string> AfterFailure(const std::string& reason, bool counts);
  // Closes the current attempt's entry in the history (once): its end, outcome, reason and, when
  // `failed_worker` is one, the worker and its host at placement. Whether it closed one.
  bool EndAttempt(v1::JobState outcome, const std::string& reason, const std::string& failed_worker,
                  absl::Time wall_now);
  // The last attempt failed and is blamed on `worker_id`, one of its workers (found lost, never back):
  // its history names that worker and adds `why`, if it ended at or after `not_before`
  // (InfinitePast: however long ago). Whether it changed.
  bool Blame(const std::string& worker_id, const std::string& why, absl::Time not_before);

  // --- A coordinator's start (coordinator_recovery.cc).
  enum class AtStart {
    kEnded,    // Ended before: kept as it is.
    kInvalid,  // Its stored spec is not one this coordinator accepts (an older version's, or edited by
               // hand): it fails with the reason instead of reaching the scheduler.
    kAdopt,    // SCHEDULED or RUNNING: its placed attempt may still be training; adopted until its
               // workers report its ranks (or adopt_deadline passes).
    kRequeue,  // RESTARTING: its attempt failed; queued again as the failure's reason says.
    kQueue,    // PENDING: queued again.
  };
  // What a starting coordinator does with the stored job; *reason says why for kInvalid.
  static AtStart Recover(const v1::Job& job, std::string* reason);
  // Where an adopted attempt stands at `now`.
  enum class Adoption {
    kNone,        // Not being adopted.
    kRestarting,  // It failed before all its workers were back: at the deadline, its ranks on
                  // workers still away are gone (the coordinator knows which are away).
    kEnded,       // It finished or failed meanwhile: adoption ends.
    kCarriesOn,   // Every rank reported (none lost): RUNNING.
    kWaits,       // Ranks not reported yet, and the deadline has not passed.
    kFails,       // A rank was lost, or the deadline passed: the ranks not reported are gone and the
                  // attempt fails without spending a restart.
  };
  Adoption AdoptionAt(absl::Time now) const;

  // --- The current attempt's ranks. Their flags change only through the Mark* functions, which keep
  // the counts: a rank's report or a worker's registration reads them instead of every rank (a
  // 100,000-rank job's starts, exits and re-registrations were quadratic).
  std::vector<RankEntry> ranks;
  struct RankCounts {
    int64_t started = 0;  // started.
    int64_t exited = 0;   // exited.
    int64_t settled = 0;  // started or exited.
    int64_t lost = 0;     // exited without having started or finished (adoption: the attempt failed).
    bool operator==(const RankCounts& o) const {
      return started == o.started && exited == o.exited && settled == o.settled && lost == o.lost;
    }
  };
  RankCounts counts;
  void ResetRanks(size_t world) {
    ranks.assign(world, RankEntry{});
    counts = {};
  }
  void MarkStarted(int r) { Mark(r, [](RankEntry& x) { x.started = true; }); }
  void MarkExited(int r) { Mark(r, [](RankEntry& x) { x.exited = true; }); }
  void MarkFinished(int r) { Mark(r, [](RankEntry& x) { x.finished = true; }); }
  bool AllStarted() const { return counts.started == static_cast<int64_t>(ranks.size()); }
  bool AllExited() const { return counts.exited == static_cast<int64_t>(ranks.size()); }
  bool AllSettled() const { return counts.settled == static_cast<int64_t>(ranks.size()); }
  static RankCounts CountOf(const RankEntry& x) {
    return {x.started, x.exited, x.started || x.exited, x.exited && !x.started && !x.finished};
  }
  // Ranks the attempt still waits for: "0,3,7" and the worker of the first ("" and "" when none).
  struct Missing {
    std::string ranks;
    std::string first_worker;
  };
  // Not started and not exited (a start that did not come).
  Missing NotStarted() const;
  // Neither started nor finished (not reported running after a coordinator restart).
  Missing NotReported() const;

  // --- Timers and fences of the current attempt.
  uint64_t version = 0;
  uint64_t ticket = 0;  // Of its newest row given to the StoreWriter (0: none).
  absl::Time last_persist = absl::InfinitePast();
  absl::Time scheduled_at = absl::InfinitePast();   // When the current attempt was placed.
  absl::Time progressed_at = absl::InfinitePast();  // When it started running or last logged a new step.
  std::string requeue_cause;  // Why the job is back in the queue (kept in its reason while it waits).
  // After a coordinator restart: the placed attempt is adopted if its workers report its ranks
  // running before this deadline; ranks not reported by then are treated as gone.
  std::optional<absl::Time> adopt_deadline;
  // Lost workers that may still run ranks of this job (cut off from the coordinator, not dead), with
  // the time their lease and stop grace surely ended: no new attempt is placed before.
  std::map<std::string, absl::Time> fences;

 private:
  template <typename F>
  void Mark(int r, F set) {
    const RankCounts before = CountOf(ranks[r]);
    set(ranks[r]);
    const RankCounts after = CountOf(ranks[r]);
    counts.started += after.started - before.started;
    counts.exited += after.exited - before.exited;
    counts.settled += after.settled - before.settled;
    counts.lost += after.lost - before.lost;
  }
  template <typename Pred>
  Missing MissingWhere(Pred pred) const;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_JOB_ENTRY_H_
