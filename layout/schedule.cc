#include "layout/schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "layout/check_layout.h"

namespace tessera::layout {
namespace {

// Interleaved order (as Megatron): the k-th forward of a rank is micro-batch (k / (pp·v))·pp + k % pp
// of chunk (k / pp) % v; the k-th backward the same micro-batch of chunk v-1 - (k / pp) % v.
PipeAction InterleavedAction(PipeOp op, int k, int pp, int chunks) {
  const int group = pp * chunks;
  PipeAction a;
  a.op = op;
  a.micro_batch = (k / group) * pp + k % pp;
  const int c = (k % group) / pp;
  a.chunk = op == PipeOp::kForward ? c : chunks - 1 - c;
  return a;
}

}  // namespace

absl::StatusOr<std::vector<PipeAction>> MakeSchedule(PipeSchedule schedule, int pp, int chunks, int rank,
                                                     int m) {
  if (pp < 1 || rank < 0 || rank >= pp || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline rank ", rank, " of ", pp, " with ", m,
                                                   " micro-batches is not a valid schedule"));
  }
  std::vector<PipeAction> out;
  if (absl::Status s = ToStatus(ScheduleProblems(schedule, pp, chunks, m)); !s.ok()) return s;  // CheckLayout's.
  if (IsZeroBubble(schedule)) {
    // Every rank makes the whole pipeline's schedule from the same costs: the same one everywhere.
    auto all = MakeZeroBubbleSchedule(schedule, pp, m, PipeCosts{});
    if (!all.ok()) return all.status();
    return std::move((*all)[rank]);
  }
  if (schedule == PipeSchedule::kOneFOneB) {
    const int warmup = std::min(pp - rank - 1, m);
    for (int i = 0; i < warmup; ++i) out.push_back({PipeOp::kForward, i, 0});
    for (int i = 0; i < m - warmup; ++i) {
      out.push_back({PipeOp::kForward, warmup + i, 0});
      out.push_back({PipeOp::kBackward, i, 0});
    }
    for (int i = m - warmup; i < m; ++i) out.push_back({PipeOp::kBackward, i, 0});
    return out;
  }
  const int total = m * chunks;
  int warmup = total;
  if (m != pp) warmup = std::min(total, (pp - rank - 1) * 2 + (chunks - 1) * pp);
  for (int k = 0; k < warmup; ++k) out.push_back(InterleavedAction(PipeOp::kForward, k, pp, chunks));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(InterleavedAction(PipeOp::kForward, warmup + i, pp, chunks));
    out.push_back(InterleavedAction(PipeOp::kBackward, i, pp, chunks));
  }
  for (int i = std::max(0, total - warmup); i < total; ++i) {
    out.push_back(InterleavedAction(PipeOp::kBackward, i, pp, chunks));
  }
  return out;
}

namespace {

// The zero-bubble generator of ZB-H1 (kLoop, one chunk per rank) and ZB-V (kV, two). It runs the
// pipeline in time with `costs` and, whenever a rank is free, gives it, in this order: a B whose
// inputs are there (the oldest micro-batch first: what the other stages wait for); a forward within
// the memory bound (ZB-V: chunk 1's first, which brings a micro-batch to its loss); the oldest
// deferred W; else the rank waits.
//   Memory bound, ZB-H1: at most pp − rank micro-batches forwarded and not yet B'd (1F1B's), and
//     fewer than pp B'd and not yet W'd when a forward starts (each keeps what its W needs: its
//     linears' inputs and output gradients) — else the oldest W runs first. The cap costs no time
//     with F = B = W (schedule_test.cc) and keeps the deferred W's from growing with m.
//   ZB-V: a chunk-1 forward while fewer than 2·pp chunk activations are alive on the rank (each chunk
//     is half a stage: 1F1B's first rank's pp micro-batches' worth); a chunk-0 forward while fewer
//     than 2·pp − rank − 1 chunk-0 activations are (ZB-V's warm-up: the first rank forwards 2·pp − 1
//     micro-batches before the first comes back through chunk 1, the last rank one). A chunk-0 forward
//     thus always leaves room for the chunk-1 forward that lets the rank's oldest micro-batch go on
//     to its loss and back (no deadlock; schedule_test runs pp 2..8, m 1..16 and several costs).
//     Fewer than 2·pp chunk W's pending when a forward starts.
// The W's of the last micro-batch run only after every B of the rank, as the rank's last actions:
// the runner accumulates them together, in one pass, with the step's gradient reduction armed.
absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubble(int pp, int m, const PipeCosts& costs,
                                                                    StagePlacement placement) {
  const char* name = placement == StagePlacement::kV ? "ZB-V" : "ZB-H1";
  if (pp < 1 || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a zero-bubble schedule (", name, ") of ", pp, " stages and ", m,
                                                   " micro-batches is not a valid schedule"));
  }
  if (!(costs.forward > 0 && costs.backward > 0 && costs.weight > 0)) {
    return absl::InvalidArgumentError("a zero-bubble schedule needs positive forward, backward and weight costs");
  }
  const bool v_shape = placement == StagePlacement::kV;
  const int chunks = v_shape ? 2 : 1;
  const int stages = pp * chunks;
  const size_t per_rank = static_cast<size_t>(3) * chunks * m;
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  // Finish times of F and B of (virtual stage, micro-batch), unknown until scheduled.
  std::vector<std::vector<double>> f_done(stages, std::vector<double>(m, kUnknown)), b_done = f_done;
  std::vector<std::vector<PipeAction>> out(pp);
  std::vector<double> clock(pp, 0);
  std::vector<std::vector<int>> next_f(pp, std::vector<int>(chunks, 0)), next_b = next_f;
  std::vector<std::vector<PipeAction>> pending(pp);  // B'd, not yet W'd, in B order.
  std::vector<int> in_flight(pp, 0), b_count(pp, 0);
  std::vector<std::vector<int>> chunk_in_flight(pp, std::vector<int>(chunks, 0));
  auto remaining = [&](int r) { return out[r].size() < per_rank; };
  auto stage = [&](int r, int c) { return VirtualStageOf(placement, pp, r, c); };
  auto b_ready = [&](int q, int c) {
    const int mb = next_b[q][c], s = stage(q, c);
    if (mb >= next_f[q][c]) return kUnknown;
    return std::max(f_done[s][mb], s + 1 < stages ? b_done[s + 1][mb] : 0.0);
  };
  auto f_ready = [&](int q, int c) {
    const int mb = next_f[q][c], s = stage(q, c);
    if (mb >= m) return kUnknown;
    const int w_pending = static_cast<int>(pending[q].size());
    const bool allowed = v_shape ? w_pending < 2 * pp &&
                                       (c == 1 ? in_flight[q] < 2 * pp : chunk_in_flight[q][0] < 2 * pp - q - 1)
                                 : in_flight[q] < pp - q && w_pending < pp;
    if (!allowed) return kUnknown;
    return s > 0 ? f_done[s - 1][mb] : 0.0;
  };
  // The index in pending[q] of the W to run now, or -1: the oldest not of the last micro-batch; those
  // of the last once every B of the rank has run.
  auto next_w = [&](int q) {
    for (size_t k = 0; k < pending[q].size(); ++k) {
      if (pending[q][k].micro_batch != m - 1) return static_cast<int>(k);
    }
    return pending[q].empty() || b_count[q] < chunks * m ? -1 : 0;
  };
  // A rank with nothing to run at its clock waits (`waiting`) until another rank has scheduled
  // something; when every rank with work waits, each moves on to its earliest known input.
  std::vector<bool> waiting(pp, false);
  // Every iteration schedules one action, on the rank whose clock is earliest among those with work:
  // whatever starts before that time is already scheduled, so its inputs' finish times are known.
  for (int64_t guard = 0; guard < int64_t{16} * pp * m * chunks * (pp + 2) + 16; ++guard) {
    int r = -1;
    bool any_work = false;
    for (int q = 0; q < pp; ++q) {
      any_work |= remaining(q);
      if (remaining(q) && !waiting[q] && (r < 0 || clock[q] < clock[r])) r = q;
    }
    if (!any_work) return out;
    if (r < 0) {  // Every rank with work waits: the one whose known input comes first moves to it.
      int first = -1;
      double first_at = kUnknown;
      for (int q = 0; q < pp; ++q) {
        if (!remaining(q)) continue;
        double known = kUnknown;
        for (int c = 0; c < chunks; ++c) known = std::min({known, b_ready(q, c), f_ready(q, c)});
        const double at = std::max(clock[q], known);
        if (at < first_at) first = q, first_at = at;
      }
      if (first < 0) {
        return absl::InternalError(absl::StrCat("the zero-bubble schedule (", name, ") of ", pp, " stages and ", m,
                                                " micro-batches is stuck"));
      }
      clock[first] = first_at;
      std::fill(waiting.begin(), waiting.end(), false);
      continue;
    }
    const double t = clock[r];
    int b_chunk = -1, f_chunk = -1;
    for (int c = 0; c < chunks; ++c) {
      if (b_ready(r, c) <= t && (b_chunk < 0 || next_b[r][c] < next_b[r][b_chunk])) b_chunk = c;
    }
    for (int c = chunks; c-- > 0;) {
      if (f_chunk < 0 && f_ready(r, c) <= t) f_chunk = c;
    }
    const int w = next_w(r);
    if (b_chunk >= 0) {
      const int mb = next_b[r][b_chunk]++;
      out[r].push_back({PipeOp::kBackward, mb, b_chunk});
      pending[r].push_back({PipeOp::kWeight, mb, b_chunk});
      clock[r] = t + costs.backward;
      b_done[stage(r, b_chunk)][mb] = clock[r];
      --in_flight[r];
      --chunk_in_flight[r][b_chunk];
      ++b_count[r];
    } else if (f_chunk >= 0) {
      const int mb = next_f[r][f_chunk]++;
      out[r].push_back({PipeOp::kForward, mb, f_chunk});
      clock[r] = t + costs.forward;
      f_done[stage(r, f_chunk)][mb] = clock[r];
      ++in_flight[r];
      ++chunk_in_flight[r][f_chunk];
    } else if (w >= 0) {
      out[r].push_back(pending[r][w]);
      pending[r].erase(pending[r].begin() + w);
      clock[r] = t + costs.weight;
    } else {
      waiting[r] = true;
      continue;
    }
    std::fill(waiting.begin(), waiting.end(), false);
  }
  return absl::InternalError(absl::StrCat("the zero-bubble schedule (", name, ") did not finish"));
}

}  // namespace

absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleH1(int pp, int m, const PipeCosts& costs) {
  return MakeZeroBubble(pp, m, costs, StagePlacement::kLoop);
}

absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleV(int pp, int m, const PipeCosts& costs) {
  return MakeZeroBubble(pp, m, costs, StagePlacement::kV);
}

absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleSchedule(PipeSchedule schedule, int pp, int m,
                                                                            const PipeCosts& costs) {
  if (schedule == PipeSchedule::kZeroBubbleV) return MakeZeroBubbleV(pp, m, costs);
  if (schedule == PipeSchedule::kZeroBubbleH1) return MakeZeroBubbleH1(pp, m, costs);
  return absl::InvalidArgumentError(absl::StrCat("pp_schedule ", Name(schedule), " is not a zero-bubble schedule"));
}

StagePlacement PlacementOf(PipeSchedule schedule) {
  return schedule == PipeSchedule::kZeroBubbleV ? StagePlacement::kV : StagePlacement::kLoop;
}

SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks,
                               double forward_cost, double backward_cost) {
  return SimulateSchedule(per_rank, chunks, PipeCosts{forward_cost, backward_cost, 0});
}

SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks, const PipeCosts& costs,
                               StagePlacement placement) {
  const int pp = static_cast<int>(per_rank.size());
  // Backwards split into B and W: those with a W in their rank's actions.
  std::set<std::tuple<int, int, int>> split;  // (rank, micro-batch, chunk)
  for (int r = 0; r < pp; ++r) {
    for (const PipeAction& a : per_rank[r]) {
      if (a.op == PipeOp::kWeight) split.insert({r, a.micro_batch, a.chunk});
    }
  }
  const int v = pp * chunks;
  SimulatedStep out;
  out.peak_in_flight.assign(pp, 0);
  out.peak_weight_pending.assign(pp, 0);
  // Finish time of (op, micro-batch, virtual stage).
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  std::vector<int> in_flight(pp, 0), pending(pp, 0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < per_rank[r].size()) {
        const PipeAction& a = per_rank[r][next[r]];
        const int s = VirtualStageOf(placement, pp, r, a.chunk);
        double ready = clock[r];
        auto need = [&](int op, int stage) {
          auto it = done.find({op, a.micro_batch, stage});
          if (it == done.end()) return false;
          ready = std::max(ready, it->second);
          return true;
        };
        bool ok;
        double cost;
        if (a.op == PipeOp::kForward) {
          ok = s == 0 || need(0, s - 1);
          cost = costs.forward;
        } else if (a.op == PipeOp::kBackward) {
          ok = need(0, s) && (s == v - 1 || need(1, s + 1));
          cost = costs.backward + (split.count({r, a.micro_batch, a.chunk}) ? 0 : costs.weight);
        } else {
          ok = need(1, s);
          cost = costs.weight;
        }
        if (!ok) break;
        clock[r] = ready + cost;
        busy += cost;
        done[{static_cast<int>(a.op), a.micro_batch, s}] = clock[r];
        if (a.op != PipeOp::kWeight) in_flight[r] += a.op == PipeOp::kForward ? 1 : -1;
        if (a.op == PipeOp::kBackward && split.count({r, a.micro_batch, a.chunk})) ++pending[r];
        if (a.op == PipeOp::kWeight) --pending[r];
        out.peak_weight_pending[r] = std::max(out.peak_weight_pending[r], pending[r]);
        out.peak_in_flight[r] = std::max(out.peak_in_flight[r], in_flight[r]);
        ++next[r];
        progress = true;
      }
    }
  }
  out.completes = true;
  for (int r = 0; r < pp; ++r) out.completes &= next[r] == per_rank[r].size();
  for (double c : clock) out.makespan = std::max(out.makespan, c);
  out.bubble = out.makespan > 0 ? 1.0 - busy / (pp * out.makespan) : 0;
  return out;
}

}  // namespace tessera::layout
